//! Whether the heartbeat watch is alive, judged by this copy's own Lease.
//!
//! Every Lost verdict and every turn rests on the heartbeat watch: a
//! machine is alive while the watch keeps delivering renewals of its
//! Lease. A watch can go silent without an error (a stream a middlebox
//! stopped forwarding, an apiserver that stopped sending), and then every
//! machine ages toward Lost together, while a sweep before that moment
//! still counts a machine that died since as up. Nothing in the machines'
//! Leases can tell a silent watch from a quiet fleet.
//!
//! This copy's own election Lease can: the elector renews it every retry
//! period, each renewal writes a new renewTime, and the Lease carries
//! [`ELECTION_LABEL_VALUE`] under the heartbeat label so the same watch
//! delivers it. A watch that has not delivered a renewal
//! [`behind_after`] after it started is behind; the sweep
//! then reads the heartbeat Leases directly, records what that read finds
//! as the watch would have, and refuses to sweep at all when the direct
//! read fails too (the seed's leader.go and heartbeat.go make the same
//! check). The judgement is on the monotonic clock of this one process,
//! so no clock between machines enters it.

use std::time::{Duration, Instant};

/// The heartbeat label's value on the cluster operator's election Lease
/// (the machines' Leases carry `true`).
pub const ELECTION_LABEL_VALUE: &str = "election";

/// How long the watch may owe one of this copy's renewals: half the
/// heartbeat stale limit. The watch can fall silent just after delivering
/// a renewal, and the next one is owed only a retry period later, so a
/// silent watch is caught up to a retry period plus this limit after it
/// fell silent, which may be past the stale limit. That is why the sweep
/// never marks a machine Lost from the watch's copy alone: it confirms
/// every new Lost verdict with a direct read (sweep.rs).
pub fn behind_after(stale_after: Duration) -> Duration {
    stale_after / 2
}

/// What the Lease watch delivered of the election Lease.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Probe {
    /// When the watch last delivered the election Lease (its initial list
    /// or a change), on this process's clock.
    pub delivered: Option<Instant>,
}

/// The Lease watch's state, as the sweep acts on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseWatch {
    /// The watch delivered this copy's renewals in time (or nothing can
    /// be judged: no renewal to compare with).
    Current,
    /// A renewal of this copy's Lease that started `silent_for` ago has
    /// still not been delivered: read the Leases directly.
    Behind {
        /// How long the oldest undelivered renewal has waited.
        silent_for: Duration,
    },
}

/// The oldest renewal the watch owes, as the sweeps have sampled it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Owed(Option<Instant>);

/// Judges the watch at `now` from what it delivered (`probe`), when this
/// copy's last successful renewal started (`renewed_at`; `None` while it
/// does not lead), and the oldest owed renewal the earlier sweeps saw.
///
/// A renewal that started after the last delivery is owed. A live watch
/// delivers it within moments, so the watch is behind only when an owed
/// renewal has waited longer than `limit`; the age is counted from the
/// oldest owed renewal a sweep saw, never from the last delivery, so a
/// retry period longer than the limit is no false alarm. Sampling at
/// sweeps can only make the age look younger, never older. A stalled
/// elector renews nothing, so owes nothing: its own guard stops writes.
pub fn decide_lease_watch(
    probe: Probe,
    renewed_at: Option<Instant>,
    owed: Owed,
    now: Instant,
    limit: Duration,
) -> (LeaseWatch, Owed) {
    let after_delivery = |t: Instant| probe.delivered.is_none_or(|d| t > d);
    let oldest = match renewed_at {
        Some(r) if after_delivery(r) => Some(owed.0.filter(|o| after_delivery(*o)).unwrap_or(r)),
        _ => None,
    };
    let state = match oldest {
        Some(o) if now.saturating_duration_since(o) > limit => LeaseWatch::Behind {
            silent_for: now.saturating_duration_since(o),
        },
        _ => LeaseWatch::Current,
    };
    (state, Owed(oldest))
}

/// The log line for a change of state, if the state changed.
pub fn decide_report(was: LeaseWatch, now: LeaseWatch) -> Option<String> {
    match (was, now) {
        (LeaseWatch::Current, LeaseWatch::Behind { silent_for }) => Some(format!(
            "the heartbeat Lease watch has not delivered this copy's own Lease renewal of {}s ago; \
             reading the heartbeat Leases directly on every sweep until it does",
            silent_for.as_secs()
        )),
        (LeaseWatch::Behind { .. }, LeaseWatch::Current) => Some(
            "the heartbeat Lease watch delivers this copy's renewals again; back to the watch"
                .to_owned(),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn the_lease_watch_table() {
        let t0 = Instant::now();
        let at = |n: u64| t0 + secs(n);
        let limit = behind_after(secs(40));
        assert_eq!(limit, secs(20));
        let seen = |n: u64| Probe {
            delivered: Some(at(n)),
        };
        let never = Probe::default();
        let owed = |n: u64| Owed(Some(at(n)));
        let none = Owed::default();
        let behind = |n: u64| LeaseWatch::Behind {
            silent_for: secs(n),
        };
        use LeaseWatch::Current;
        // (delivered, last renewal, owed before, now) → (state, owed after)
        let cases = [
            // Not leading: nothing is owed.
            ((seen(0), None, none, at(100)), (Current, none)),
            ((seen(0), None, owed(5), at(100)), (Current, none)),
            // Each renewal delivered as it happens.
            ((seen(98), Some(at(98)), none, at(100)), (Current, none)),
            ((seen(98), Some(at(96)), owed(96), at(100)), (Current, none)),
            // A renewal just started is owed, and young.
            ((seen(90), Some(at(99)), none, at(100)), (Current, owed(99))),
            // A retry period longer than the limit is no alarm: the last
            // delivery is old, the owed renewal is not.
            ((seen(60), Some(at(90)), none, at(100)), (Current, owed(90))),
            // The oldest owed renewal is kept while newer ones pile up...
            (
                (seen(60), Some(at(98)), owed(79), at(100)),
                (behind(21), owed(79)),
            ),
            (
                (seen(60), Some(at(98)), owed(85), at(100)),
                (Current, owed(85)),
            ),
            // ...and dropped once the watch delivers past it.
            (
                (seen(86), Some(at(98)), owed(79), at(100)),
                (Current, owed(98)),
            ),
            // A stalled elector owes nothing, however old the delivery.
            ((seen(10), Some(at(10)), none, at(100)), (Current, none)),
            ((seen(10), Some(at(5)), owed(5), at(100)), (Current, none)),
            // Never delivered: every renewal is owed.
            ((never, Some(at(5)), none, at(15)), (Current, owed(5))),
            (
                (never, Some(at(24)), owed(3), at(25)),
                (behind(22), owed(3)),
            ),
        ];
        for ((probe, renewed, before, now), want) in cases {
            assert_eq!(
                decide_lease_watch(probe, renewed, before, now, limit),
                want,
                "{probe:?} renewed {renewed:?} owed {before:?} now {now:?}"
            );
        }
    }

    #[test]
    fn only_a_change_of_state_is_reported() {
        let behind = LeaseWatch::Behind {
            silent_for: secs(21),
        };
        let current = LeaseWatch::Current;
        assert_eq!(decide_report(current, current), None);
        assert_eq!(decide_report(behind, behind), None);
        let went = decide_report(current, behind).unwrap();
        assert!(
            went.contains("of 21s ago") && went.contains("directly"),
            "{went}"
        );
        assert!(decide_report(behind, current).unwrap().contains("again"));
    }
}
