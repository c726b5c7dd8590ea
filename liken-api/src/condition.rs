//! Conditions: typed, timestamped observations in a status.
//!
//! The shape is `metav1.Condition`, so `kubectl describe` and every tool
//! that reads conditions reads liken's. The rules are the ones that make
//! the shape useful:
//!
//! - [`set`] moves `lastTransitionTime` only when the status flips, so the
//!   time answers "since when has this been true", not "when did a
//!   controller last say so".
//! - [`transitions`] is what deserves an Event: a condition that is new,
//!   or whose status or reason changed. A new message alone is not news.
//!   Callers compare the list they wrote with the list they read, after
//!   the write lands, so a refused write posts nothing and the next pass
//!   finds the same transition again.
//! - Grants (a reboot turn, say) are [`remove`]d when revoked rather than
//!   set False: their absence is the meaning, and a False grant would read
//!   as trouble to every other tool.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::time::Time;

/// A condition's verdict. Three-valued, because a controller must be able
/// to say it cannot tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// The controller cannot tell.
    Unknown,
}

impl ConditionStatus {
    /// All statuses, in the order the CRD enum lists them.
    pub const ALL: [ConditionStatus; 3] = [
        ConditionStatus::True,
        ConditionStatus::False,
        ConditionStatus::Unknown,
    ];

    /// The status as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One observation, shaped as `metav1.Condition`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// What is observed, in CamelCase ("Ready", "SysctlsApplied").
    #[serde(rename = "type")]
    pub type_: String,
    /// The verdict.
    pub status: ConditionStatus,
    /// The metadata.generation this verdict judged.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
    /// When the status last flipped.
    pub last_transition_time: Time,
    /// Why, in one CamelCase word; never empty (the CRD requires it).
    pub reason: String,
    /// Why, for a person.
    #[serde(default)]
    pub message: String,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl Condition {
    /// A condition with no generation and no transition time yet; [`set`]
    /// stamps the time.
    pub fn new(
        type_: impl Into<String>,
        status: ConditionStatus,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Condition {
        Condition {
            type_: type_.into(),
            status,
            observed_generation: 0,
            last_transition_time: Time::EPOCH,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// The same condition stamped with the generation it judged.
    pub fn with_generation(mut self, generation: i64) -> Condition {
        self.observed_generation = generation;
        self
    }

    /// Whether the status is True.
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// Adds `c` to `list` or updates the entry of its type, at time `now`.
///
/// A new entry, or one whose status flips, takes `now` as its
/// lastTransitionTime; otherwise the stored time is kept while reason,
/// message and observedGeneration follow `c`. Answers whether anything in
/// the list changed.
pub fn set(list: &mut Vec<Condition>, mut c: Condition, now: Time) -> bool {
    match list.iter_mut().find(|held| held.type_ == c.type_) {
        None => {
            c.last_transition_time = now;
            list.push(c);
            true
        }
        Some(held) => {
            c.last_transition_time = if held.status == c.status {
                held.last_transition_time
            } else {
                now
            };
            let changed = *held != c;
            *held = c;
            changed
        }
    }
}

/// The condition of the named type, if the list holds one.
pub fn find<'a>(list: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    list.iter().find(|c| c.type_ == type_)
}

/// Drops the condition of the named type; answers whether one was there.
pub fn remove(list: &mut Vec<Condition>, type_: &str) -> bool {
    let before = list.len();
    list.retain(|c| c.type_ != type_);
    list.len() != before
}

/// The conditions of `after` that transitioned from `before`: new, or
/// with a different status or reason.
pub fn transitions<'a>(before: &[Condition], after: &'a [Condition]) -> Vec<&'a Condition> {
    after
        .iter()
        .filter(|c| {
            find(before, &c.type_)
                .is_none_or(|held| held.status != c.status || held.reason != c.reason)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::ConditionStatus::{False, True, Unknown};
    use super::*;
    use proptest::prelude::*;

    fn t(s: i64) -> Time {
        Time::from_unix(s)
    }

    #[test]
    fn transition_time_moves_only_on_a_status_flip() {
        let mut list = Vec::new();
        assert!(set(
            &mut list,
            Condition::new("Ready", False, "Booting", "a"),
            t(10)
        ));
        assert_eq!(list[0].last_transition_time, t(10));

        // Same status, new reason and message: recorded, time kept.
        assert!(set(
            &mut list,
            Condition::new("Ready", False, "Waiting", "b"),
            t(20)
        ));
        assert_eq!(list[0].last_transition_time, t(10));
        assert_eq!(list[0].reason, "Waiting");
        assert_eq!(list[0].message, "b");

        // The same write again changes nothing.
        assert!(!set(
            &mut list,
            Condition::new("Ready", False, "Waiting", "b"),
            t(30)
        ));
        assert_eq!(list[0].last_transition_time, t(10));

        // A flip moves the time.
        assert!(set(
            &mut list,
            Condition::new("Ready", True, "Converged", ""),
            t(40)
        ));
        assert_eq!(list[0].last_transition_time, t(40));
        assert_eq!(list.len(), 1);
    }

    #[test]
    fn transitions_are_new_conditions_and_changed_status_or_reason() {
        let before = vec![
            Condition::new("A", True, "Fine", "m"),
            Condition::new("B", False, "Broken", "m"),
            Condition::new("C", True, "Fine", "m"),
        ];
        let after = vec![
            Condition::new("A", True, "Fine", "a different message"),
            Condition::new("B", False, "StillBroken", "m"),
            Condition::new("C", Unknown, "Fine", "m"),
            Condition::new("D", True, "New", "m"),
        ];
        let types: Vec<&str> = transitions(&before, &after)
            .into_iter()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(types, ["B", "C", "D"]);
    }

    #[test]
    fn find_and_remove() {
        let mut list = vec![
            Condition::new("Granted", True, "TurnGranted", ""),
            Condition::new("Ready", True, "Converged", ""),
        ];
        assert_eq!(find(&list, "Ready").unwrap().reason, "Converged");
        assert!(remove(&mut list, "Granted"));
        assert!(!remove(&mut list, "Granted"));
        assert!(find(&list, "Granted").is_none());
        assert_eq!(list.len(), 1);
    }

    #[test]
    fn wire_shape_matches_metav1() {
        let c = Condition::new("Ready", True, "Converged", "").with_generation(3);
        let mut list = Vec::new();
        set(&mut list, c, t(1_780_000_000));
        let json = serde_json::to_value(&list[0]).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "type": "Ready",
                "status": "True",
                "observedGeneration": 3,
                "lastTransitionTime": "2026-05-28T20:26:40Z",
                "reason": "Converged",
                "message": "",
            })
        );
    }

    fn status() -> impl Strategy<Value = ConditionStatus> {
        prop_oneof![Just(True), Just(False), Just(Unknown)]
    }

    proptest! {
        // Model check: after any sequence of sets on a few types, each
        // condition's time is the time of its type's latest status flip
        // (or first appearance), and transitions() between consecutive
        // lists reports exactly the flips and reason changes.
        #[test]
        fn set_and_transitions_agree_with_a_model(
            steps in proptest::collection::vec((0usize..3, status(), 0usize..3), 1..60)
        ) {
            let types = ["A", "B", "C"];
            let reasons = ["R0", "R1", "R2"];
            let mut list: Vec<Condition> = Vec::new();
            let mut flipped_at: [Option<(ConditionStatus, &str, Time)>; 3] = [None; 3];
            for (i, (ty, st, re)) in steps.into_iter().enumerate() {
                let now = t(i as i64 * 7);
                let before = list.clone();
                set(&mut list, Condition::new(types[ty], st, reasons[re], ""), now);

                let expected_transition = match flipped_at[ty] {
                    None => true,
                    Some((held, held_reason, _)) => held != st || held_reason != reasons[re],
                };
                let reported: Vec<&str> = transitions(&before, &list)
                    .into_iter().map(|c| c.type_.as_str()).collect();
                prop_assert_eq!(reported == [types[ty]], expected_transition);
                prop_assert!(reported.len() <= 1);

                flipped_at[ty] = Some(match flipped_at[ty] {
                    Some((held, _, since)) if held == st => (st, reasons[re], since),
                    _ => (st, reasons[re], now),
                });
                for (k, model) in flipped_at.iter().enumerate() {
                    let held = find(&list, types[k]);
                    match model {
                        None => prop_assert!(held.is_none()),
                        Some((s, r, since)) => {
                            let held = held.unwrap();
                            prop_assert_eq!(held.status, *s);
                            prop_assert_eq!(held.reason.as_str(), *r);
                            prop_assert_eq!(held.last_transition_time, *since);
                        }
                    }
                }
            }
        }
    }
}
