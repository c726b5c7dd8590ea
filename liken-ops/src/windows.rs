//! Maintenance windows as the operators judge them: the zones read from
//! the tz database the operator's image carries, and each machine's
//! verdict.
//!
//! The windows themselves and the decision whether one is open are
//! liken-api's ([`liken_api::maintenance`]); what this module adds is the
//! I/O (reading `/usr/share/zoneinfo/<zone>`, once per zone per process:
//! the database is part of the image, so it cannot change under a
//! running operator) and the verdict for one machine, with the Machine's
//! own windows replacing the Cluster's. A zone that cannot be read closes
//! the windows that name it: a fleet that declared windows never reboots
//! outside them because a zone name was misspelt, and the message says
//! which field to fix.
//!
//! Both operators use it: the cluster operator to gate grants
//! ([`crate::cluster::windows`]), the machine operator to say in its
//! AwaitingTurn message when its window opens.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;

use liken_api::maintenance::{
    self, MaintenanceSpec, MaintenanceWindow, WindowVerdict, decide_window,
};
use liken_api::tzif::{self, Zone};
use liken_api::{Cluster, Machine, Time};

/// Where the operators' images carry the tz database (Debian's tzdata,
/// added by images/oci-image.sh).
pub const ZONEINFO: &str = "/usr/share/zoneinfo";

/// The largest zone file read; the largest in tzdata is under 4 KiB.
const MAX_ZONE_BYTES: u64 = 256 * 1024;

/// How many distinct zone names are kept; names come from specs, so a
/// flood of made-up ones starts the cache afresh rather than grow it.
const MAX_CACHED: usize = 512;

/// The zones read so far, by name, or why each could not be.
pub type ZoneMap = BTreeMap<String, Result<Zone, String>>;

/// The tz database and what has been read from it.
pub struct Zones {
    dir: PathBuf,
    read: ZoneMap,
}

impl Zones {
    /// Zones read from `dir` (normally [`ZONEINFO`]).
    pub fn new(dir: impl Into<PathBuf>) -> Zones {
        Zones {
            dir: dir.into(),
            read: ZoneMap::new(),
        }
    }

    /// Reads every zone `windows` name that is not read yet, and returns
    /// all read so far.
    pub fn load<'a>(
        &mut self,
        windows: impl IntoIterator<Item = &'a MaintenanceWindow>,
    ) -> &ZoneMap {
        for w in windows {
            if !self.read.contains_key(&w.time_zone) {
                if self.read.len() >= MAX_CACHED {
                    self.read.clear();
                }
                let zone = self.read_zone(&w.time_zone);
                self.read.insert(w.time_zone.clone(), zone);
            }
        }
        &self.read
    }

    /// All read so far.
    pub fn map(&self) -> &ZoneMap {
        &self.read
    }

    fn read_zone(&self, name: &str) -> Result<Zone, String> {
        // The name's syntax keeps it inside the database (no `..`, no
        // leading `/`); the strict decoder refuses such names anyway, but
        // the API server's copy may come from an older CRD.
        if !maintenance::valid_zone_name(name) {
            return Err(format!("{name:?} is not an IANA time zone name"));
        }
        let path = self.dir.join(name);
        let mut bytes = Vec::new();
        let read = std::fs::File::open(&path)
            .and_then(|f| f.take(MAX_ZONE_BYTES + 1).read_to_end(&mut bytes));
        match read {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
                "unknown time zone {name:?}: the operator's tz database ({}) has no such zone; \
                 use a name from the IANA list such as Europe/Berlin or UTC",
                self.dir.display()
            )),
            Err(e) => Err(format!(
                "time zone {name:?}: reading {}: {e}",
                path.display()
            )),
            Ok(_) if bytes.len() as u64 > MAX_ZONE_BYTES => Err(format!(
                "time zone {name:?}: {} is larger than {MAX_ZONE_BYTES} bytes, so not a zone",
                path.display()
            )),
            Ok(_) => tzif::parse(&bytes)
                .map_err(|e| format!("time zone {name:?}: {}: {e}", path.display())),
        }
    }
}

/// A machine's verdict: whether a turn may be granted now, and, when not,
/// why in a person's words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MachineWindow {
    /// No window applies, or one is open.
    Allows(WindowVerdict),
    /// Outside every window; the text names the next opening in the
    /// window's own zone.
    Closed(String),
}

impl MachineWindow {
    /// Whether a turn may be granted.
    pub fn allows(&self) -> bool {
        matches!(self, MachineWindow::Allows(_))
    }
}

/// Where a machine's windows come from, for the message's field path.
fn source(machine: Option<&MaintenanceSpec>) -> &'static str {
    if machine.and_then(|m| m.windows.as_ref()).is_some() {
        "the Machine's spec.maintenance.windows"
    } else {
        "the Cluster's spec.maintenance.windows"
    }
}

/// Decides one machine's window verdict from the Cluster's and the
/// Machine's maintenance specs and the zones read.
pub fn decide_machine_window(
    cluster: Option<&MaintenanceSpec>,
    machine: Option<&MaintenanceSpec>,
    zones: &ZoneMap,
    now: Time,
) -> MachineWindow {
    let windows = maintenance::effective(cluster, machine);
    let mut with_zones = Vec::with_capacity(windows.len());
    for (i, w) in windows.iter().enumerate() {
        match zones.get(&w.time_zone) {
            Some(Ok(z)) => with_zones.push((w, z)),
            Some(Err(why)) => {
                return MachineWindow::Closed(format!(
                    "no reboot turn is granted while {} cannot be judged: windows[{i}].timeZone: {why}",
                    source(machine)
                ));
            }
            None => {
                return MachineWindow::Closed(format!(
                    "no reboot turn is granted until time zone {:?} (windows[{i}] of {}) is read",
                    w.time_zone,
                    source(machine)
                ));
            }
        }
    }
    match decide_window(&with_zones, now) {
        WindowVerdict::Closed { next: Some(o) } => MachineWindow::Closed(format!(
            "outside the maintenance windows; the next opens {}",
            o.local
        )),
        WindowVerdict::Closed { next: None } => MachineWindow::Closed(format!(
            "outside the maintenance windows, and none of {} opens within a week",
            source(machine)
        )),
        open => MachineWindow::Allows(open),
    }
}

/// The machine operator's question: when this machine is outside its
/// windows, the clause its AwaitingTurn message carries (the next
/// opening, in the window's own zone); None when a turn may be granted
/// now or no window applies.
pub fn machine_note(
    zones: &mut Zones,
    cluster: Option<&Cluster>,
    machine: &Machine,
    now: Time,
) -> Option<String> {
    let fleet = cluster.and_then(|c| c.spec.maintenance.as_ref());
    let own = machine.spec.maintenance.as_ref();
    let windows = maintenance::effective(fleet, own);
    if windows.is_empty() {
        return None;
    }
    let map = zones.load(windows);
    match decide_machine_window(fleet, own, map, now) {
        MachineWindow::Closed(why) => Some(why),
        MachineWindow::Allows(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::maintenance::Weekday;

    fn spec(days: &[Weekday], start: &str, zone: &str) -> MaintenanceSpec {
        MaintenanceSpec {
            windows: Some(vec![MaintenanceWindow {
                days: days.to_vec(),
                start: start.into(),
                duration: "2h".into(),
                time_zone: zone.into(),
            }]),
        }
    }

    #[test]
    fn reads_zones_from_the_database_and_names_the_next_opening_there() {
        let fleet = spec(&[Weekday::Sun], "02:00", "Europe/Berlin");
        let own = spec(&[Weekday::Sat], "09:00", "America/New_York");
        let mut zones = Zones::new(ZONEINFO);
        zones.load(
            fleet
                .windows
                .iter()
                .flatten()
                .chain(own.windows.iter().flatten()),
        );
        // Friday 2026-12-04 12:00Z: Berlin's Sunday window is next.
        let now: Time = "2026-12-04T12:00:00Z".parse().unwrap();
        assert_eq!(
            decide_machine_window(Some(&fleet), None, zones.map(), now),
            MachineWindow::Closed(
                "outside the maintenance windows; the next opens Sun 2026-12-06 02:00 CET \
                 (Europe/Berlin)"
                    .into()
            )
        );
        // The Machine's own window replaces it, in its own zone.
        assert_eq!(
            decide_machine_window(Some(&fleet), Some(&own), zones.map(), now),
            MachineWindow::Closed(
                "outside the maintenance windows; the next opens Sat 2026-12-05 09:00 EST \
                 (America/New_York)"
                    .into()
            )
        );
        let inside: Time = "2026-12-06T01:30:00Z".parse().unwrap();
        assert!(decide_machine_window(Some(&fleet), None, zones.map(), inside).allows());
        assert!(decide_machine_window(None, None, zones.map(), now).allows());
    }

    #[test]
    fn an_unknown_zone_closes_its_windows_and_says_which_field() {
        let fleet = spec(&[Weekday::Sun], "02:00", "Europe/Berln");
        let mut zones = Zones::new(ZONEINFO);
        zones.load(fleet.windows.iter().flatten());
        let now: Time = "2026-12-06T01:30:00Z".parse().unwrap();
        let MachineWindow::Closed(why) =
            decide_machine_window(Some(&fleet), None, zones.map(), now)
        else {
            panic!("an unknown zone must close the window");
        };
        assert!(
            why.contains("the Cluster's spec.maintenance.windows")
                && why.contains("windows[0].timeZone")
                && why.contains("unknown time zone \"Europe/Berln\""),
            "{why}"
        );
        // A name that would leave the database is refused before any read.
        let escape = spec(&[Weekday::Sun], "02:00", "../../etc/passwd");
        zones.load(escape.windows.iter().flatten());
        let Some(Err(e)) = zones.map().get("../../etc/passwd") else {
            panic!("read outside the database");
        };
        assert!(e.contains("not an IANA time zone name"), "{e}");
    }
}
