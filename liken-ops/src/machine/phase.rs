//! The machine's phase: its conditions in one word, through one table.
//!
//! The phase is never remembered. Every pass derives it from the
//! convergence conditions it just wrote, so it cannot disagree with
//! them. Each condition argues for a phase by its reason ([`TABLE`]); the
//! machine reports the most severe phase argued for (`Phase`'s order is
//! severity), and Ready when every condition holds.
//!
//! Two phases are absent from the table. Lost is the cluster operator's
//! verdict about a machine that stopped writing; a machine that runs this
//! code is not lost. Ready is what is left when nothing argues otherwise.
//!
//! Only the convergence conditions argue: the Ready roll-up summarizes
//! them and would count twice, and the cluster operator's grant
//! (RebootApproved) says nothing about the machine's health.

use liken_api::coordination::{CONVERGENCE, READY, reason};
use liken_api::{Condition, ConditionStatus, Phase};

/// One row: a reason and the phase a condition with it argues for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// The condition's reason.
    pub reason: &'static str,
    /// The phase it argues for.
    pub phase: Phase,
    /// Why, for the reader of the table.
    pub why: &'static str,
}

/// The table, most severe phase first. A condition that is not True and
/// whose reason is not listed argues for Degraded: something is wrong
/// that none of these names.
pub const TABLE: &[Row] = &[
    Row {
        reason: reason::FACTS_UNREADABLE,
        phase: Phase::Unknown,
        why: "init does not answer or its facts do not parse: nothing can be judged",
    },
    Row {
        reason: reason::BOOTING,
        phase: Phase::Booting,
        why: "init has not published this boot's record yet",
    },
    Row {
        reason: reason::BLOCKED,
        phase: Phase::Blocked,
        why: "the change cannot be staged or applied; it needs a different edit, not time",
    },
    Row {
        reason: reason::DRAINING,
        phase: Phase::Updating,
        why: "the turn is granted and the node is being drained",
    },
    Row {
        reason: reason::DRAIN_BLOCKED,
        phase: Phase::Updating,
        why: "the turn is granted but a PodDisruptionBudget holds the drain; the turn stays in use",
    },
    Row {
        reason: reason::REBOOTING,
        phase: Phase::Updating,
        why: "init was asked to reboot",
    },
    Row {
        reason: reason::RESTARTING,
        phase: Phase::Updating,
        why: "init was asked to restart k3s",
    },
    Row {
        reason: reason::ON_TRIAL,
        phase: Phase::Updating,
        why: "the machine booted the target release and init has not blessed the boot yet; \
              a failed trial reboots into the other slot, so the turn is still in use",
    },
    Row {
        reason: reason::REBOOT_PENDING,
        phase: Phase::UpdatePending,
        why: "a reboot-class change is staged and waits for a person's approval",
    },
    Row {
        reason: reason::RESTART_PENDING,
        phase: Phase::UpdatePending,
        why: "a restart-class change is staged and waits for a person's approval",
    },
    Row {
        reason: reason::AWAITING_TURN,
        phase: Phase::UpdatePending,
        why: "a change is staged and waits for the cluster to grant a turn",
    },
    Row {
        reason: reason::ROLLOUT_HALTED,
        phase: Phase::UpdatePending,
        why: "the target release failed elsewhere and its rollout is halted; nothing is written",
    },
    Row {
        reason: reason::DOWNLOADING,
        phase: Phase::Downloading,
        why: "the target release downloads (or waits to be written) while workloads run",
    },
];

/// The phase one condition argues for; `None` when it argues for nothing
/// (it holds, or it is not a convergence condition).
pub fn condition_phase(c: &Condition) -> Option<Phase> {
    if !CONVERGENCE.contains(&c.type_.as_str()) || c.status == ConditionStatus::True {
        return None;
    }
    if c.status == ConditionStatus::Unknown {
        return Some(Phase::Unknown);
    }
    Some(
        TABLE
            .iter()
            .find(|row| row.reason == c.reason)
            .map_or(Phase::Degraded, |row| row.phase),
    )
}

/// The machine's phase: the most severe any convergence condition argues
/// for, Ready when none argues, Unknown when there are no convergence
/// conditions to judge by.
pub fn decide_phase(conditions: &[Condition]) -> Phase {
    if !conditions
        .iter()
        .any(|c| CONVERGENCE.contains(&c.type_.as_str()))
    {
        return Phase::Unknown;
    }
    conditions
        .iter()
        .filter_map(condition_phase)
        .min()
        .unwrap_or(Phase::Ready)
}

/// The Ready roll-up for a phase: True when Ready; otherwise False (or
/// Unknown, when the facts are unreadable) with the phase as its reason
/// and every condition that does not hold in its message.
pub fn decide_ready(conditions: &[Condition], phase: Phase) -> Condition {
    if phase == Phase::Ready {
        return Condition::new(
            READY,
            ConditionStatus::True,
            reason::CONVERGED,
            "every convergence condition holds",
        );
    }
    let failing: Vec<String> = conditions
        .iter()
        .filter(|c| condition_phase(c).is_some())
        .map(|c| format!("{} {}: {}", c.type_, c.reason, c.message))
        .collect();
    let status = if phase == Phase::Unknown {
        ConditionStatus::Unknown
    } else {
        ConditionStatus::False
    };
    Condition::new(READY, status, phase.as_str(), failing.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::coordination::{
        GRANT_REASON, NETWORK_CONFIGURED, REBOOT_APPROVED, RELEASE_CURRENT, SYSCTLS_APPLIED,
    };

    fn c(type_: &str, status: ConditionStatus, reason: &str) -> Condition {
        Condition::new(type_, status, reason, format!("{type_} is {reason}"))
    }

    fn converged() -> Vec<Condition> {
        CONVERGENCE
            .iter()
            .map(|t| c(t, ConditionStatus::True, reason::CONVERGED))
            .collect()
    }

    #[test]
    fn every_row_argues_for_its_phase() {
        for row in TABLE {
            let mut conditions = converged();
            conditions[3] = c(NETWORK_CONFIGURED, ConditionStatus::False, row.reason);
            assert_eq!(decide_phase(&conditions), row.phase, "{row:?}");
            let ready = decide_ready(&conditions, row.phase);
            assert_eq!(ready.reason, row.phase.as_str(), "{row:?}");
            assert!(ready.message.contains(row.reason), "{row:?}: {ready:?}");
        }
    }

    #[test]
    fn the_table_lists_phases_most_severe_first_and_each_reason_once() {
        for pair in TABLE.windows(2) {
            assert!(pair[0].phase <= pair[1].phase, "{pair:?}");
        }
        for (i, row) in TABLE.iter().enumerate() {
            assert!(
                !TABLE[..i].iter().any(|r| r.reason == row.reason),
                "{row:?}"
            );
            assert_ne!(row.phase, Phase::Lost, "Lost is the cluster operator's");
            assert_ne!(row.phase, Phase::Ready);
        }
    }

    #[test]
    fn the_most_severe_argument_wins_for_every_pair_of_rows() {
        for a in TABLE {
            for b in TABLE {
                let mut conditions = converged();
                conditions[0] = c(SYSCTLS_APPLIED, ConditionStatus::False, a.reason);
                conditions[5] = c(RELEASE_CURRENT, ConditionStatus::False, b.reason);
                assert_eq!(
                    decide_phase(&conditions),
                    a.phase.worst(b.phase),
                    "{a:?} {b:?}"
                );
            }
        }
    }

    #[test]
    fn the_rest_of_the_rules() {
        let all = converged();
        assert_eq!(decide_phase(&all), Phase::Ready);
        let ready = decide_ready(&all, Phase::Ready);
        assert!(ready.is_true());

        // An unlisted reason is Degraded; Unknown status is Unknown.
        let mut odd = converged();
        odd[0] = c(SYSCTLS_APPLIED, ConditionStatus::False, reason::NOT_APPLIED);
        assert_eq!(decide_phase(&odd), Phase::Degraded);
        odd[1] = c(
            liken_api::coordination::MODULES_LOADED,
            ConditionStatus::Unknown,
            "Whatever",
        );
        assert_eq!(decide_phase(&odd), Phase::Unknown);
        assert_eq!(
            decide_ready(&odd, Phase::Unknown).status,
            ConditionStatus::Unknown
        );

        // The grant, a stale roll-up and foreign types argue for nothing.
        let mut with_grant = converged();
        with_grant.push(c(REBOOT_APPROVED, ConditionStatus::True, GRANT_REASON));
        with_grant.push(c(READY, ConditionStatus::False, "Blocked"));
        with_grant.push(c("SomethingNewer", ConditionStatus::False, "Broken"));
        assert_eq!(decide_phase(&with_grant), Phase::Ready);

        // Nothing to judge by is no verdict.
        assert_eq!(decide_phase(&[]), Phase::Unknown);
    }
}
