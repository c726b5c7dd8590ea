//! Heartbeat sightings: when this program saw each machine's Lease
//! renewed, on this program's clock.
//!
//! A machine's operator writes its Lease's `spec.renewTime` from the
//! machine's own clock. Subtracting that from this program's clock would
//! add the difference between the two clocks to every heartbeat's age: a
//! machine whose clock runs a minute behind would read Lost while it
//! renews every ten seconds, and one whose clock runs ahead would read
//! alive long after it stopped. Clocks differ most at boot, before the
//! first time synchronization, which is exactly when machines come and
//! go. So a renewTime is only ever compared with the previous renewTime
//! of the same Lease: a *different* value (later or earlier, a clock can
//! step back) is a renewal, and the moment this program saw it is the
//! time of the renewal. Kubernetes' node lifecycle controller judges a
//! kubelet's Lease the same way.
//!
//! The record starts empty in every process, and a new leader is a new
//! record: every Lease that exists is "seen" at the first read, so a
//! machine that died a minute before this copy took the lead still reads
//! alive for [`HEARTBEAT_STALE_SECS`] after that. The record therefore
//! keeps when it began, and the rollout grants no turn until it has
//! watched for the stale limit ([`Sightings::watched_for`]); otherwise a
//! new leader could count a dead machine as up and grant a second turn.
//!
//! A machine with no Lease at all is silent from the first time this
//! program saw its Machine (never earlier than the record began), so a
//! Machine created a second before its operator's first renewal is not
//! declared Lost at once.
//!
//! [`HEARTBEAT_STALE_SECS`]: liken_api::coordination::HEARTBEAT_STALE_SECS

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

/// What the sweep knows about one machine's heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// Whether it was renewed (or the machine first seen) within the
    /// stale limit.
    pub fresh: bool,
    /// When this program last saw the Lease renewed, on its wall clock;
    /// `None` when it never saw one.
    pub last_renewal: Option<SystemTime>,
}

/// One Lease's last renewTime and when this program first saw it.
#[derive(Clone, Debug)]
struct Sighting {
    /// The renewTime as the machine wrote it; compared for equality only.
    renewed: String,
    /// When this program first saw that value, on its monotonic clock.
    at: Instant,
    /// The same moment on the wall clock, for the MachineLost Event.
    wall: SystemTime,
}

/// What is known of one name: its Lease's last sighting, and when the
/// sweep first saw a Machine of that name. One map for both, so judging a
/// machine is one lookup.
#[derive(Clone, Debug, Default)]
struct Record {
    lease: Option<Sighting>,
    first_seen: Option<Instant>,
}

/// The record of renewals. The Lease watch writes it as events arrive and
/// the sweep reads it, so the caller keeps it behind a mutex.
#[derive(Debug, Default)]
pub struct Sightings {
    records: HashMap<String, Record>,
    /// When the record began: the first sweep that read the Leases.
    began: Option<Instant>,
}

impl Sightings {
    /// An empty record.
    pub fn new() -> Sightings {
        Sightings::default()
    }

    /// Records that the Lease `name` holds `renewed` at `now`. A value
    /// different from the recorded one is a renewal.
    pub fn observe(&mut self, name: &str, renewed: &str, now: Instant, wall: SystemTime) {
        let seen = Sighting {
            renewed: renewed.to_owned(),
            at: now,
            wall,
        };
        match self.records.get_mut(name) {
            Some(r) if r.lease.as_ref().is_some_and(|l| l.renewed == renewed) => {}
            Some(r) => r.lease = Some(seen),
            None => {
                self.records.insert(
                    name.to_owned(),
                    Record {
                        lease: Some(seen),
                        first_seen: None,
                    },
                );
            }
        }
    }

    /// Whether a Lease of this name has been seen.
    pub fn knows(&self, name: &str) -> bool {
        self.records.get(name).is_some_and(|r| r.lease.is_some())
    }

    /// Forgets a deleted Lease: one created again later counts as a
    /// renewal when it arrives.
    pub fn forget(&mut self, name: &str) {
        if let Some(r) = self.records.get_mut(name) {
            r.lease = None;
            if r.first_seen.is_none() {
                self.records.remove(name);
            }
        }
    }

    /// Marks the start of the record (the first sweep's read of the
    /// Leases); later calls change nothing.
    pub fn begin(&mut self, now: Instant) {
        self.began.get_or_insert(now);
    }

    /// How long the record has been kept: zero before [`Sightings::begin`].
    pub fn watched_for(&self, now: Instant) -> Duration {
        self.began
            .map_or(Duration::ZERO, |b| now.saturating_duration_since(b))
    }

    /// Judges one machine's heartbeat at `now`: fresh when its Lease was
    /// seen renewed, or (with no Lease) the Machine first seen, less than
    /// `stale` ago. Records the Machine as seen.
    pub fn judge(&mut self, machine: &str, now: Instant, stale: Duration) -> Heartbeat {
        let began = *self.began.get_or_insert(now);
        // Looked up before inserting: a sweep judges every machine, and
        // only a new one needs its name copied.
        let record = match self.records.get_mut(machine) {
            Some(r) => r,
            None => self.records.entry(machine.to_owned()).or_default(),
        };
        let first_seen = *record.first_seen.get_or_insert(now.max(began));
        let (since, last_renewal) = match &record.lease {
            Some(s) => (s.at, Some(s.wall)),
            None => (first_seen, None),
        };
        Heartbeat {
            fresh: now.saturating_duration_since(since) < stale,
            last_renewal,
        }
    }

    /// Drops every Machine not in `present`, so one deleted and created
    /// again starts a new grace period.
    pub fn retain_machines(&mut self, present: &dyn Fn(&str) -> bool) {
        self.records.retain(|name, r| {
            if !present(name) {
                r.first_seen = None;
            }
            r.lease.is_some() || r.first_seen.is_some()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STALE: Duration = Duration::from_secs(40);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_renewal_is_a_change_of_value_judged_on_our_clock() {
        let t0 = Instant::now();
        let wall = SystemTime::UNIX_EPOCH + secs(1_000_000);
        let mut s = Sightings::new();
        s.begin(t0);
        // The machine's clock says 1999; only the change matters.
        s.observe("a", "1999-01-01T00:00:00.000000Z", t0, wall);
        assert!(s.judge("a", t0 + secs(39), STALE).fresh);
        // The same value again is no renewal.
        s.observe(
            "a",
            "1999-01-01T00:00:00.000000Z",
            t0 + secs(30),
            wall + secs(30),
        );
        let h = s.judge("a", t0 + secs(40), STALE);
        assert!(!h.fresh);
        assert_eq!(h.last_renewal, Some(wall));
        // An earlier value (the clock stepped back) is a renewal.
        s.observe(
            "a",
            "1998-12-31T23:59:00.000000Z",
            t0 + secs(41),
            wall + secs(41),
        );
        let h = s.judge("a", t0 + secs(80), STALE);
        assert!(h.fresh);
        assert_eq!(h.last_renewal, Some(wall + secs(41)));
    }

    #[test]
    fn a_machine_without_a_lease_is_silent_from_when_it_was_first_seen() {
        let t0 = Instant::now();
        let mut s = Sightings::new();
        s.begin(t0);
        assert!(s.judge("old", t0 + secs(10), STALE).fresh);
        // A Machine first seen at 30 s gets its own 40 s.
        assert!(s.judge("new", t0 + secs(30), STALE).fresh);
        assert!(!s.judge("old", t0 + secs(50), STALE).fresh);
        assert!(s.judge("new", t0 + secs(69), STALE).fresh);
        let h = s.judge("new", t0 + secs(70), STALE);
        assert_eq!(
            h,
            Heartbeat {
                fresh: false,
                last_renewal: None
            }
        );
        // Deleted and created again: a new grace period.
        s.retain_machines(&|n| n != "new");
        assert!(s.judge("new", t0 + secs(71), STALE).fresh);
    }

    #[test]
    fn a_deleted_lease_is_forgotten_and_the_record_keeps_its_start() {
        let t0 = Instant::now();
        let mut s = Sightings::new();
        assert_eq!(s.watched_for(t0 + secs(5)), Duration::ZERO);
        s.begin(t0);
        s.begin(t0 + secs(20));
        assert_eq!(s.watched_for(t0 + secs(25)), secs(25));
        s.observe("a", "x", t0, SystemTime::UNIX_EPOCH);
        s.forget("a");
        let h = s.judge("a", t0 + secs(1), STALE);
        assert_eq!(h.last_renewal, None);
        s.observe("a", "x", t0 + secs(2), SystemTime::UNIX_EPOCH);
        assert!(s.judge("a", t0 + secs(41), STALE).fresh);
    }
}
