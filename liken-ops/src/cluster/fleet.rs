//! The fleet verdict: which machines are silent, the headcount, and the
//! MachinesReady condition.
//!
//! Each machine's operator reports on itself, which leaves one gap: a dead
//! machine cannot say it is dead, and its last status reads Ready forever.
//! The sweep closes it with the heartbeat ([`super::heartbeat`]): a
//! machine whose Lease went stale is Lost, whatever its status says, and
//! the sweep writes Lost onto it. That is the one write onto another
//! program's status that is safe to make, because a stale heartbeat means
//! the machine's own operator has stopped writing; the moment it returns,
//! its next pass overwrites the verdict with fresh observations, so no
//! cleanup step exists.
//!
//! The same pass totals the fleet: ready out of all, the machines that
//! are unwell (Lost, Blocked, Degraded, Unknown) and those in the middle
//! of a change (Updating, UpdatePending, Downloading, Booting). Unwell
//! outranks mid-transition, and the condition names the machines so
//! nobody has to search for them. The verdict also carries the counts the
//! metrics publish, because this is the one place that judges every
//! machine at once.

use liken_api::cluster::MachineTally;
use liken_api::coordination;
use liken_api::{Condition, ConditionStatus, Machine, Phase, Time};
use std::collections::BTreeMap;

use super::heartbeat::Heartbeat;

/// The MachinesReady condition type.
pub const MACHINES_READY: &str = "MachinesReady";
/// MachinesReady True: every machine is Ready.
pub const ALL_MACHINES_READY: &str = "AllMachinesReady";
/// MachinesReady False: some machine is unwell.
pub const MACHINES_DEGRADED: &str = "MachinesDegraded";
/// MachinesReady False: machines are changing, none unwell.
pub const MACHINES_UPDATING: &str = "MachinesUpdating";

/// How many names a condition message lists before it only counts: a
/// message is capped at 32 KiB by the CRD, and a fleet of thousands must
/// still be able to write its status.
pub const LISTED_NAMES: usize = 20;

/// `a, b, c` or, past [`LISTED_NAMES`], `a, b, ... t and 80 more`;
/// `names` must be sorted.
pub fn name_list(names: &[&str]) -> String {
    if names.len() <= LISTED_NAMES {
        return names.join(", ");
    }
    format!(
        "{} and {} more",
        names[..LISTED_NAMES].join(", "),
        names.len() - LISTED_NAMES
    )
}

/// One machine as the sweep judges it.
#[derive(Clone, Copy, Debug)]
pub struct Judged<'a> {
    /// The Machine as the store holds it.
    pub machine: &'a Machine,
    /// Its heartbeat.
    pub heartbeat: Heartbeat,
    /// Its effective phase: Lost when the heartbeat is stale, else what
    /// its status says (Unknown when it says nothing).
    pub phase: Phase,
}

impl<'a> Judged<'a> {
    /// Judges a machine by its status and heartbeat.
    pub fn new(machine: &'a Machine, heartbeat: Heartbeat) -> Judged<'a> {
        let phase = if heartbeat.fresh {
            machine.status.phase.unwrap_or(Phase::Unknown)
        } else {
            Phase::Lost
        };
        Judged {
            machine,
            heartbeat,
            phase,
        }
    }

    /// The machine's name.
    pub fn name(&self) -> &'a str {
        &self.machine.metadata.name
    }
}

/// One pass's verdict over the fleet.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetSweep {
    /// Machines to mark Lost: silent, and not already marked.
    pub lost: Vec<String>,
    /// Ready out of all.
    pub tally: MachineTally,
    /// MachinesReady (no generation or time yet).
    pub condition: Condition,
    /// The fleet's one-word summary.
    pub phase: Phase,
    /// Machines by effective phase, for the metrics.
    pub phases: BTreeMap<Phase, u32>,
    /// Machines whose staged change waits for a person.
    pub awaiting_approval: u32,
}

/// Judges the fleet. Machines come in any order; names in messages are
/// sorted, so the same fleet always gives the same condition.
pub fn decide_fleet_sweep(machines: &[Judged<'_>]) -> FleetSweep {
    let mut lost = Vec::new();
    let mut phases = BTreeMap::new();
    let mut awaiting_approval = 0;
    let mut ready = 0u32;
    let mut unwell = Vec::new();
    let mut transitioning = Vec::new();
    for j in machines {
        if j.phase == Phase::Lost && j.machine.status.phase != Some(Phase::Lost) {
            lost.push(j.name().to_owned());
        }
        *phases.entry(j.phase).or_insert(0) += 1;
        if coordination::awaits_approval(&j.machine.status.conditions) {
            awaiting_approval += 1;
        }
        match j.phase {
            Phase::Ready => ready += 1,
            Phase::Updating | Phase::UpdatePending | Phase::Downloading | Phase::Booting => {
                transitioning.push(j.name())
            }
            Phase::Lost | Phase::Blocked | Phase::Degraded | Phase::Unknown => {
                unwell.push(j.name())
            }
        }
    }
    lost.sort();
    unwell.sort_unstable();
    transitioning.sort_unstable();
    let total = u32::try_from(machines.len()).unwrap_or(u32::MAX);
    let tally = MachineTally::new(ready, total);
    let (phase, condition) = if !unwell.is_empty() {
        (
            Phase::Degraded,
            Condition::new(
                MACHINES_READY,
                ConditionStatus::False,
                MACHINES_DEGRADED,
                format!(
                    "{} machines ready; unwell: {}",
                    tally.summary,
                    name_list(&unwell)
                ),
            ),
        )
    } else if !transitioning.is_empty() {
        (
            Phase::Updating,
            Condition::new(
                MACHINES_READY,
                ConditionStatus::False,
                MACHINES_UPDATING,
                format!(
                    "{} machines ready; mid-transition: {}",
                    tally.summary,
                    name_list(&transitioning)
                ),
            ),
        )
    } else {
        (
            Phase::Ready,
            Condition::new(
                MACHINES_READY,
                ConditionStatus::True,
                ALL_MACHINES_READY,
                format!("all {total} machines are ready"),
            ),
        )
    };
    FleetSweep {
        lost,
        tally,
        condition,
        phase,
        phases,
        awaiting_approval,
    }
}

/// The Lost verdict written onto a machine: phase Lost, Ready Unknown
/// with the reason [`coordination::HEARTBEAT_STALE`], every other field
/// of the status as the machine last wrote it (they are its last known
/// facts; only the phase and Ready are claims about the present, and the
/// machine has stopped making those). Answers the new conditions list.
pub fn lost_conditions(machine: &Machine, now: Time) -> Vec<Condition> {
    let mut conditions = machine.status.conditions.clone();
    liken_api::condition::set(
        &mut conditions,
        Condition::new(
            coordination::READY,
            ConditionStatus::Unknown,
            coordination::HEARTBEAT_STALE,
            "the machine's operator has stopped renewing its heartbeat lease; \
             the machine is presumed down",
        )
        .with_generation(machine.metadata.generation),
        now,
    );
    conditions
}

/// The message of a MachineLost Event: when this program last saw the
/// heartbeat renewed, or that it never did.
pub fn lost_message(heartbeat: &Heartbeat) -> String {
    match heartbeat.last_renewal {
        None => "the machine has never renewed its heartbeat lease while this operator watched; \
                 marked Lost"
            .to_owned(),
        Some(t) => format!(
            "the heartbeat lease was last renewed at {}; marked Lost",
            Time::from_system(t)
        ),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use liken_api::{MachineSpec, condition};
    use std::time::SystemTime;

    pub fn machine(name: &str, phase: Option<Phase>) -> Machine {
        let mut m = Machine::new(name, MachineSpec::default());
        m.status.phase = phase;
        m.metadata.resource_version = "1".into();
        m
    }

    pub const FRESH: Heartbeat = Heartbeat {
        fresh: true,
        last_renewal: None,
    };
    pub const STALE: Heartbeat = Heartbeat {
        fresh: false,
        last_renewal: None,
    };

    fn sweep(fleet: &[(Machine, Heartbeat)]) -> FleetSweep {
        let judged: Vec<Judged<'_>> = fleet.iter().map(|(m, h)| Judged::new(m, *h)).collect();
        decide_fleet_sweep(&judged)
    }

    #[test]
    fn verdicts_table() {
        use Phase::*;
        struct Row {
            fleet: Vec<(Option<Phase>, Heartbeat)>,
            lost: &'static [&'static str],
            phase: Phase,
            reason: &'static str,
            message: &'static str,
        }
        let rows = [
            Row {
                fleet: vec![(Some(Ready), FRESH), (Some(Ready), FRESH)],
                lost: &[],
                phase: Ready,
                reason: ALL_MACHINES_READY,
                message: "all 2 machines are ready",
            },
            Row {
                fleet: vec![],
                lost: &[],
                phase: Ready,
                reason: ALL_MACHINES_READY,
                message: "all 0 machines are ready",
            },
            // A stale Ready machine is Lost, and Lost is unwell.
            Row {
                fleet: vec![(Some(Ready), STALE), (Some(Ready), FRESH)],
                lost: &["m0"],
                phase: Degraded,
                reason: MACHINES_DEGRADED,
                message: "1/2 machines ready; unwell: m0",
            },
            // Already marked Lost: not written again.
            Row {
                fleet: vec![(Some(Lost), STALE)],
                lost: &[],
                phase: Degraded,
                reason: MACHINES_DEGRADED,
                message: "0/1 machines ready; unwell: m0",
            },
            // Written Lost, heartbeat back: still Lost until its operator
            // rewrites the status, and nothing to write.
            Row {
                fleet: vec![(Some(Lost), FRESH)],
                lost: &[],
                phase: Degraded,
                reason: MACHINES_DEGRADED,
                message: "0/1 machines ready; unwell: m0",
            },
            Row {
                fleet: vec![
                    (Some(Updating), FRESH),
                    (Some(Downloading), FRESH),
                    (Some(Ready), FRESH),
                    (Some(Booting), FRESH),
                    (Some(UpdatePending), FRESH),
                ],
                lost: &[],
                phase: Updating,
                reason: MACHINES_UPDATING,
                message: "1/5 machines ready; mid-transition: m0, m1, m3, m4",
            },
            // Unwell outranks mid-transition; no status reads Unknown.
            Row {
                fleet: vec![
                    (Some(Updating), FRESH),
                    (None, FRESH),
                    (Some(Blocked), FRESH),
                    (Some(Degraded), FRESH),
                ],
                lost: &[],
                phase: Degraded,
                reason: MACHINES_DEGRADED,
                message: "0/4 machines ready; unwell: m1, m2, m3",
            },
        ];
        for (i, row) in rows.iter().enumerate() {
            let fleet: Vec<(Machine, Heartbeat)> = row
                .fleet
                .iter()
                .enumerate()
                .map(|(k, (p, h))| (machine(&format!("m{k}"), *p), *h))
                .collect();
            let s = sweep(&fleet);
            assert_eq!(s.lost, row.lost, "row {i}");
            assert_eq!(s.phase, row.phase, "row {i}");
            assert_eq!(s.condition.reason, row.reason, "row {i}");
            assert_eq!(s.condition.message, row.message, "row {i}");
            assert_eq!(
                s.condition.status == ConditionStatus::True,
                row.phase == Ready,
                "row {i}"
            );
            let counted: u32 = s.phases.values().sum();
            assert_eq!(counted as usize, row.fleet.len(), "row {i}");
        }
    }

    #[test]
    fn long_name_lists_are_counted() {
        let names: Vec<String> = (0..25).map(|i| format!("m{i:02}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(name_list(&refs[..2]), "m00, m01");
        let long = name_list(&refs);
        assert!(long.starts_with("m00, m01, "), "{long}");
        assert!(long.ends_with("m19 and 5 more"), "{long}");
    }

    #[test]
    fn counts_phases_and_approvals() {
        let mut waiting = machine("b", Some(Phase::UpdatePending));
        waiting.status.conditions = vec![Condition::new(
            coordination::SYSCTLS_APPLIED,
            ConditionStatus::False,
            coordination::reason::REBOOT_PENDING,
            "",
        )];
        let s = sweep(&[
            (machine("a", Some(Phase::Ready)), STALE),
            (waiting, FRESH),
            (machine("c", Some(Phase::Ready)), FRESH),
        ]);
        assert_eq!(
            s.phases,
            BTreeMap::from([
                (Phase::Lost, 1),
                (Phase::UpdatePending, 1),
                (Phase::Ready, 1)
            ])
        );
        assert_eq!(s.awaiting_approval, 1);
        assert_eq!(s.tally, MachineTally::new(1, 3));
    }

    #[test]
    fn the_lost_verdict_keeps_every_other_condition() {
        let mut m = machine("a", Some(Phase::Ready));
        m.metadata.generation = 4;
        m.status.conditions = vec![
            Condition::new(coordination::READY, ConditionStatus::True, "Converged", ""),
            Condition::new(
                coordination::REBOOT_APPROVED,
                ConditionStatus::True,
                coordination::GRANT_REASON,
                "",
            ),
        ];
        let now = Time::from_unix(1_800_000_000);
        let c = lost_conditions(&m, now);
        let ready = condition::find(&c, coordination::READY).unwrap();
        assert_eq!(ready.status, ConditionStatus::Unknown);
        assert_eq!(ready.reason, coordination::HEARTBEAT_STALE);
        assert_eq!(ready.last_transition_time, now);
        assert_eq!(ready.observed_generation, 4);
        assert!(coordination::holds_grant(&c));
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn the_lost_message_names_the_last_renewal() {
        let h = Heartbeat {
            fresh: false,
            last_renewal: Some(
                SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000),
            ),
        };
        assert_eq!(
            lost_message(&h),
            "the heartbeat lease was last renewed at 2027-01-15T08:00:00Z; marked Lost"
        );
        assert!(lost_message(&STALE).contains("never renewed"));
    }
}
