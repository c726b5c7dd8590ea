//! The maintenance-window gate on reboot turns.
//!
//! Before a sweep decides its rollout, it asks which of the machines that
//! want a turn are outside their maintenance windows
//! ([`crate::windows::decide_machine_window`]); the rollout then grants
//! none of those a turn, and lists them with the next opening in
//! Progressing. The gate is consulted only for a new grant: a turn
//! already granted (a confirm of a ledger entry, a machine mid-drain)
//! runs to its end after the window closes.
//!
//! The verdict is the same for every machine that shares the same windows
//! (all those that follow the Cluster's, typically), so it is computed
//! once per distinct list of windows: a rollout over ten thousand
//! machines costs one decision, not ten thousand.

use std::collections::{BTreeMap, HashMap};

use liken_api::maintenance::MaintenanceWindow;
use liken_api::{Cluster, Time, coordination};

use super::fleet::{Judged, name_list};
use crate::windows::{MachineWindow, ZoneMap, Zones, decide_machine_window};

/// Which machines may not be granted a turn now, and why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gate {
    /// Machine name to the reason it waits (the next opening).
    closed: BTreeMap<String, String>,
}

impl Gate {
    /// A gate that closes nothing: no windows declared anywhere.
    pub fn open() -> Gate {
        Gate::default()
    }

    /// Whether `machine` may be granted a turn now.
    pub fn allows(&self, machine: &str) -> bool {
        !self.closed.contains_key(machine)
    }

    /// Why `machine` waits, when it does.
    pub fn why(&self, machine: &str) -> Option<&str> {
        self.closed.get(machine).map(String::as_str)
    }

    /// Progressing's words for the machines the gate held back this
    /// sweep, grouped by reason: `a, b: outside the maintenance windows;
    /// the next opens ...`.
    pub fn waiting_text(&self, held: &[&str]) -> String {
        let mut by_why: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for name in held {
            if let Some(why) = self.why(name) {
                by_why.entry(why).or_default().push(name);
            }
        }
        by_why
            .into_iter()
            .map(|(why, mut names)| {
                names.sort_unstable();
                format!("{}: {why}", name_list(&names))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Reads the zones the sweep's windows name (the Cluster's, and those of
/// Machines asking for a turn with windows of their own).
pub fn load_zones<'z>(
    zones: &'z mut Zones,
    cluster: &Cluster,
    machines: &[Judged<'_>],
) -> &'z ZoneMap {
    let fleet = cluster.spec.maintenance.iter();
    let own = machines
        .iter()
        .filter(|j| coordination::wants_turn(&j.machine.status.conditions))
        .filter_map(|j| j.machine.spec.maintenance.as_ref());
    let windows = fleet
        .chain(own)
        .filter_map(|m| m.windows.as_ref())
        .flatten();
    zones.load(windows)
}

/// Decides the gate: every machine that asks for a turn and is outside
/// its windows, with the reason.
pub fn decide_gate(cluster: &Cluster, machines: &[Judged<'_>], zones: &ZoneMap, now: Time) -> Gate {
    let fleet = cluster.spec.maintenance.as_ref();
    let mut memo: HashMap<Option<&[MaintenanceWindow]>, MachineWindow> = HashMap::new();
    let mut closed = BTreeMap::new();
    for j in machines {
        if !coordination::wants_turn(&j.machine.status.conditions) {
            continue;
        }
        let own = j.machine.spec.maintenance.as_ref();
        let key = own.and_then(|m| m.windows.as_deref());
        let verdict = memo
            .entry(key)
            .or_insert_with(|| decide_machine_window(fleet, own, zones, now));
        if let MachineWindow::Closed(why) = verdict {
            closed.insert(j.name().to_owned(), why.clone());
        }
    }
    Gate { closed }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::heartbeat::Heartbeat;
    use crate::windows::ZONEINFO;
    use liken_api::coordination::{RELEASE_CURRENT, reason};
    use liken_api::maintenance::{MaintenanceSpec, Weekday};
    use liken_api::{ClusterSpec, Condition, ConditionStatus, Machine, MachineSpec};

    fn asking(name: &str, own: Option<MaintenanceSpec>) -> Machine {
        let mut m = Machine::new(
            name,
            MachineSpec {
                maintenance: own,
                ..MachineSpec::default()
            },
        );
        m.status.conditions = vec![Condition::new(
            RELEASE_CURRENT,
            ConditionStatus::False,
            reason::AWAITING_TURN,
            "",
        )];
        m
    }

    fn windows(day: Weekday, start: &str) -> MaintenanceSpec {
        MaintenanceSpec {
            windows: Some(vec![MaintenanceWindow {
                days: vec![day],
                start: start.into(),
                duration: "2h".into(),
                time_zone: "Europe/Berlin".into(),
            }]),
        }
    }

    #[test]
    fn closes_machines_outside_their_windows_and_only_those_asking() {
        let mut cluster = Cluster::new("home", ClusterSpec::default());
        cluster.spec.maintenance = Some(windows(Weekday::Sun, "02:00"));
        let fleet = asking("a", None);
        let own = asking("b", Some(windows(Weekday::Fri, "12:00")));
        let mut idle = asking("c", None);
        idle.status.conditions.clear();
        let machines = [&fleet, &own, &idle];
        let judged: Vec<Judged<'_>> = machines
            .iter()
            .map(|m| {
                Judged::new(
                    m,
                    Heartbeat {
                        fresh: true,
                        last_renewal: None,
                    },
                )
            })
            .collect();
        let mut zones = Zones::new(ZONEINFO);
        let map = load_zones(&mut zones, &cluster, &judged);
        // Friday 2026-12-04 11:30Z is 12:30 in Berlin: b's own window is
        // open, the fleet's is not.
        let now: Time = "2026-12-04T11:30:00Z".parse().unwrap();
        let gate = decide_gate(&cluster, &judged, map, now);
        assert!(!gate.allows("a"));
        assert!(gate.why("a").unwrap().contains("Sun 2026-12-06 02:00 CET"));
        assert!(gate.allows("b"));
        assert!(gate.allows("c"));
        assert_eq!(
            gate.waiting_text(&["a"]),
            "a: outside the maintenance windows; the next opens Sun 2026-12-06 02:00 CET \
             (Europe/Berlin)"
        );
        assert_eq!(Gate::open(), Gate::default());
    }
}
