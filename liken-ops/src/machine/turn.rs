//! The turn: from a granted reboot turn to init's reboot (or k3s's
//! restart), and back to a schedulable node afterwards.
//!
//! A machine that wants a disruption asks the cluster for a turn (reason
//! AwaitingTurn) and waits. Once the cluster operator grants it
//! (`RebootApproved`), the machine cordons its Node, drains it
//! ([`crate::machine::drain`]), and asks init to reboot or to restart
//! k3s. After the boot nothing is wanted any more: the machine uncordons
//! and its conditions stop asking, so the cluster operator reclaims the
//! turn.
//!
//! What a restarted operator must know is kept where it survives the
//! restart: the cordon and the drain's start on the Node (annotations),
//! and what was already asked of init this boot in a small record under
//! the state directory on /run (a tmpfs, so a reboot forgets it, which is
//! exactly when it stops being true). A cordon the operator did not set
//! (a person's) is left in place afterwards.

use liken_api::control::{ServiceState, ServiceStatus};
use liken_api::machine::DisruptionKind;
use liken_api::{Sha256Hex, Time};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::kinds::Node;

/// Marks a cordon as the operator's own, so only that one is lifted.
pub const CORDONED_ANNOTATION: &str = "liken.sh/cordoned";
/// When the drain started, so its timeout survives an operator restart.
pub const DRAINING_SINCE_ANNOTATION: &str = "liken.sh/draining-since";
/// How long after asking init to reboot, with the machine still up, the
/// operator asks again.
pub const ASK_AGAIN_SECS: i64 = 300;
/// The first wait after init refused a disruption; it doubles with each
/// refusal in a row, up to [`ASK_AGAIN_SECS`].
pub const REFUSED_FIRST_SECS: i64 = 10;

/// init's refusals of a disruption, in a row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refused {
    /// How many times in a row.
    pub times: u32,
    /// What init said the last time.
    pub message: String,
    /// Whether init itself answered the last ask with a refusal, rather
    /// than the exchange failing (no socket, no answer, a malformed
    /// one). Only then is it known that no reboot is under way: an ask
    /// whose answer was lost may have been carried out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_init: bool,
}

/// What was asked of init this boot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Asked {
    /// The boot it was asked in.
    pub boot: Sha256Hex,
    /// Reboot or Restart.
    pub kind: DisruptionKind,
    /// The staged Machine document a restart applied, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<Sha256Hex>,
    /// When.
    pub at: Time,
    /// Whether a reboot answers a `liken.sh/request-reboot`. The
    /// annotation is spent just before init is asked, so this record is
    /// what keeps the request outstanding until the machine goes down.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requested: bool,
    /// k3s's pid when a restart was asked, so the restart is known to be
    /// done once init reports k3s running under another pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k3s_pid: Option<u32>,
    /// init refused it (or did not answer). The record is kept all the
    /// same: it carries the approval and the reboot request whose
    /// annotations were spent, so a refusal loses neither, and the ask is
    /// repeated after a backoff ([`Asked::again_after`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refused>,
}

impl Asked {
    /// This record, when it was made in `boot`: what is under way now.
    pub fn in_boot<'a>(asked: Option<&'a Asked>, boot: &Sha256Hex) -> Option<&'a Asked> {
        asked.filter(|a| &a.boot == boot)
    }

    /// Whether this record asked for a restart that applies `hash` in
    /// `boot`.
    pub fn restart_for(&self, boot: &Sha256Hex, hash: &Sha256Hex) -> bool {
        self.kind == DisruptionKind::Restart
            && &self.boot == boot
            && self.hash.as_ref() == Some(hash)
    }

    /// Seconds after [`Asked::at`] to ask init again: [`ASK_AGAIN_SECS`]
    /// once init accepted (the machine should be down by then), else
    /// [`REFUSED_FIRST_SECS`] doubling with each refusal in a row.
    pub fn again_after(&self) -> i64 {
        match &self.refused {
            None => ASK_AGAIN_SECS,
            Some(r) => {
                let doublings = r.times.saturating_sub(1).min(8);
                (REFUSED_FIRST_SECS << doublings).min(ASK_AGAIN_SECS)
            }
        }
    }

    /// Whether the restart this record asked for is over: init reports
    /// k3s running under a pid other than the one it had when asked.
    pub fn restart_done(&self, k3s: &ServiceStatus) -> bool {
        k3s.state == ServiceState::Running && k3s.pid.is_some() && k3s.pid != self.k3s_pid
    }
}

/// One pass's step of the turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TurnStep {
    /// Nothing wanted, nothing to undo.
    Idle,
    /// Lift the operator's cordon and the drain's bookkeeping.
    Uncordon,
    /// Wanted, not granted: ask (the conditions say AwaitingTurn).
    Await,
    /// Granted: cordon and note the drain's start.
    Cordon,
    /// Granted and cordoned: drain, since this time.
    Drain {
        /// When the drain started.
        since: Time,
    },
    /// init was already asked for this this boot; wait for it, or ask
    /// again once [`Asked::again_after`] has passed.
    Asked {
        /// What was asked.
        kind: DisruptionKind,
        /// Whether to ask again now.
        again: bool,
        /// What init said when it last refused, if it did.
        refused: Option<String>,
    },
}

/// Whether the Node carries the operator's cordon or drain bookkeeping.
fn drain_marks(node: &Node) -> (bool, Option<Time>) {
    let a = &node.metadata.annotations;
    let ours = a.get(CORDONED_ANNOTATION).is_some_and(|v| v == "true");
    let since = a
        .get(DRAINING_SINCE_ANNOTATION)
        .and_then(|t| t.parse().ok());
    (ours, since)
}

/// Whether `asked` is the request for this very disruption: a reboot in
/// this boot, or a restart in this boot that applies `change` (the
/// desired Machine's hash). A second k3s restart in one boot, for another
/// change, is not the first one again: it gets its own drain.
pub fn decide_same_ask(
    asked: &Asked,
    kind: DisruptionKind,
    boot: &Sha256Hex,
    change: &Sha256Hex,
) -> bool {
    &asked.boot == boot
        && asked.kind == kind
        && (kind == DisruptionKind::Reboot || asked.hash.as_ref() == Some(change))
}

/// Decides this pass's step from what is wanted, the grant, the Node and
/// what init was asked this boot; `change` is the desired Machine's hash
/// (what a restart applies).
pub fn decide_turn(
    wanted: Option<DisruptionKind>,
    grant: bool,
    node: Option<&Node>,
    asked: Option<&Asked>,
    (boot, change): (&Sha256Hex, &Sha256Hex),
    now: Time,
) -> TurnStep {
    let (ours, since) = node.map_or((false, None), drain_marks);
    let marked = ours || since.is_some();
    let Some(kind) = wanted else {
        return if marked {
            TurnStep::Uncordon
        } else {
            TurnStep::Idle
        };
    };
    if !grant {
        return if marked {
            TurnStep::Uncordon
        } else {
            TurnStep::Await
        };
    }
    if let Some(a) = asked.filter(|a| decide_same_ask(a, kind, boot, change)) {
        return TurnStep::Asked {
            kind,
            again: now.seconds_since(a.at) >= a.again_after(),
            refused: a.refused.as_ref().map(|r| r.message.clone()),
        };
    }
    match (node, since) {
        (Some(_), None) => TurnStep::Cordon,
        (Some(_), Some(since)) => TurnStep::Drain { since },
        // No Node to cordon (deleted, or k3s never registered it): the
        // pods bound to its name are still drained.
        (None, _) => TurnStep::Drain { since: now },
    }
}

/// The merge patch that cordons the Node: unschedulable, the drain's
/// start, and the mark that the cordon is the operator's (only when the
/// Node was schedulable; a person's cordon stays theirs). It is
/// conditioned on the resourceVersion judged, so a cordon a person set
/// since is never marked as the operator's (a 409 instead, and the next
/// pass judges the new copy).
pub fn cordon_patch(node: &Node, now: Time) -> Value {
    let mut annotations = serde_json::Map::new();
    annotations.insert(
        DRAINING_SINCE_ANNOTATION.into(),
        Value::String(now.to_string()),
    );
    if !node.spec.unschedulable {
        annotations.insert(CORDONED_ANNOTATION.into(), Value::String("true".into()));
    }
    json!({
        "metadata": {
            "annotations": annotations,
            "resourceVersion": node.metadata.resource_version,
        },
        "spec": {"unschedulable": true},
    })
}

/// The merge patch that lifts the operator's cordon (only its own) and
/// removes the drain's bookkeeping, conditioned on the resourceVersion
/// judged: a person who cordoned the Node since (their cordon on top of
/// the operator's) keeps it, because the patch meets a 409 and the next
/// pass judges their copy.
pub fn uncordon_patch(node: &Node) -> Value {
    let (ours, _) = drain_marks(node);
    let mut patch = json!({"metadata": {
        "annotations": {
            CORDONED_ANNOTATION: null,
            DRAINING_SINCE_ANNOTATION: null,
        },
        "resourceVersion": node.metadata.resource_version,
    }});
    if ours {
        patch["spec"] = json!({"unschedulable": false});
    }
    patch
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::hash::sha256;

    fn node(unschedulable: bool, annotations: &[(&str, &str)]) -> Node {
        let mut n = Node::default();
        n.spec.unschedulable = unschedulable;
        for (k, v) in annotations {
            n.metadata.annotations.insert((*k).into(), (*v).into());
        }
        n
    }

    #[test]
    fn the_turn_walks_from_asking_to_init() {
        use DisruptionKind::{Reboot, Restart};
        let boot = sha256(b"boot");
        let change = sha256(b"doc");
        let now = Time::from_unix(10_000);
        let since = "2026-12-02T10:00:00Z";
        let plain = node(false, &[]);
        let cordoned = node(
            true,
            &[
                (CORDONED_ANNOTATION, "true"),
                (DRAINING_SINCE_ANNOTATION, since),
            ],
        );
        let persons = node(true, &[]);
        let asked = Asked {
            boot: boot.clone(),
            kind: Reboot,
            hash: None,
            at: Time::from_unix(9_900),
            requested: false,
            k3s_pid: None,
            refused: None,
        };
        let old_boot = Asked {
            boot: sha256(b"earlier"),
            ..asked.clone()
        };
        let since_t: Time = since.parse().unwrap();
        type Case<'a> = (
            Option<DisruptionKind>,
            bool,
            Option<&'a Node>,
            Option<&'a Asked>,
            TurnStep,
        );
        let cases: Vec<Case> = vec![
            (None, false, Some(&plain), None, TurnStep::Idle),
            (None, true, Some(&cordoned), None, TurnStep::Uncordon),
            (None, false, Some(&persons), None, TurnStep::Idle),
            (Some(Reboot), false, Some(&plain), None, TurnStep::Await),
            (
                Some(Reboot),
                false,
                Some(&cordoned),
                None,
                TurnStep::Uncordon,
            ),
            (Some(Reboot), true, Some(&plain), None, TurnStep::Cordon),
            (Some(Reboot), true, Some(&persons), None, TurnStep::Cordon),
            (
                Some(Restart),
                true,
                Some(&cordoned),
                None,
                TurnStep::Drain { since: since_t },
            ),
            (
                Some(Reboot),
                true,
                None,
                None,
                TurnStep::Drain { since: now },
            ),
            (
                Some(Reboot),
                true,
                Some(&cordoned),
                Some(&asked),
                TurnStep::Asked {
                    kind: Reboot,
                    again: false,
                    refused: None,
                },
            ),
            // A record from an earlier boot, or for another kind, asks
            // for nothing.
            (
                Some(Reboot),
                true,
                Some(&cordoned),
                Some(&old_boot),
                TurnStep::Drain { since: since_t },
            ),
            (
                Some(Restart),
                true,
                Some(&cordoned),
                Some(&asked),
                TurnStep::Drain { since: since_t },
            ),
        ];
        for (wanted, grant, node, asked, want) in cases {
            assert_eq!(
                decide_turn(wanted, grant, node, asked, (&boot, &change), now),
                want,
                "{wanted:?} grant={grant} {node:?} {asked:?}"
            );
        }
        // A second k3s restart in one boot, for another change, drains
        // again; the restart asked for this change waits for init.
        let restarted = Asked {
            kind: Restart,
            hash: Some(sha256(b"first doc")),
            ..asked.clone()
        };
        assert_eq!(
            decide_turn(
                Some(Restart),
                true,
                Some(&cordoned),
                Some(&restarted),
                (&boot, &change),
                now
            ),
            TurnStep::Drain { since: since_t }
        );
        let this_one = Asked {
            hash: Some(change.clone()),
            ..restarted.clone()
        };
        assert!(matches!(
            decide_turn(
                Some(Restart),
                true,
                Some(&cordoned),
                Some(&this_one),
                (&boot, &change),
                now
            ),
            TurnStep::Asked { again: false, .. }
        ));
        let late = Time::from_unix(9_900 + ASK_AGAIN_SECS);
        assert_eq!(
            decide_turn(
                Some(Reboot),
                true,
                Some(&cordoned),
                Some(&asked),
                (&boot, &change),
                late
            ),
            TurnStep::Asked {
                kind: Reboot,
                again: true,
                refused: None,
            }
        );
    }

    #[test]
    fn a_refused_disruption_is_asked_again_after_a_backoff() {
        let boot = sha256(b"boot");
        let change = sha256(b"doc");
        let node = node(true, &[(CORDONED_ANNOTATION, "true")]);
        let refused = |times| Asked {
            boot: boot.clone(),
            kind: DisruptionKind::Reboot,
            hash: None,
            at: Time::from_unix(1_000),
            requested: true,
            k3s_pid: None,
            refused: Some(Refused {
                times,
                message: "k3s is still stopping".into(),
                by_init: true,
            }),
        };
        let at = |times: u32, after: i64| {
            decide_turn(
                Some(DisruptionKind::Reboot),
                true,
                Some(&node),
                Some(&refused(times)),
                (&boot, &change),
                Time::from_unix(1_000 + after),
            )
        };
        // 10 s after the first refusal, doubling, never past 300 s; the
        // record (and the request it carries) stays meanwhile.
        for (times, wait) in [(1, 10), (2, 20), (3, 40), (5, 160), (6, 300), (40, 300)] {
            assert!(
                matches!(at(times, wait - 1), TurnStep::Asked { again: false, .. }),
                "{times}"
            );
            let TurnStep::Asked { again, refused, .. } = at(times, wait) else {
                panic!("{times}")
            };
            assert!(again, "{times}");
            assert_eq!(refused.as_deref(), Some("k3s is still stopping"));
        }
    }

    #[test]
    fn cordon_and_uncordon_touch_only_the_operators_own() {
        let now = Time::from_unix(1_780_000_000);
        let p = cordon_patch(&node(false, &[]), now);
        assert_eq!(p["spec"]["unschedulable"], true);
        assert_eq!(p["metadata"]["annotations"][CORDONED_ANNOTATION], "true");
        assert_eq!(
            p["metadata"]["annotations"][DRAINING_SINCE_ANNOTATION],
            "2026-05-28T20:26:40Z"
        );
        let p = cordon_patch(&node(true, &[]), now);
        assert!(
            p["metadata"]["annotations"]
                .get(CORDONED_ANNOTATION)
                .is_none()
        );

        let ours = node(
            true,
            &[
                (CORDONED_ANNOTATION, "true"),
                (DRAINING_SINCE_ANNOTATION, "x"),
            ],
        );
        let p = uncordon_patch(&ours);
        assert_eq!(p["spec"]["unschedulable"], false);
        // Both patches are conditioned on the copy judged.
        let mut judged = ours.clone();
        judged.metadata.resource_version = "41".into();
        assert_eq!(uncordon_patch(&judged)["metadata"]["resourceVersion"], "41");
        assert_eq!(
            cordon_patch(&judged, now)["metadata"]["resourceVersion"],
            "41"
        );
        assert!(p["metadata"]["annotations"][CORDONED_ANNOTATION].is_null());
        let persons = node(true, &[(DRAINING_SINCE_ANNOTATION, "x")]);
        assert!(uncordon_patch(&persons).get("spec").is_none());
    }

    #[test]
    fn a_restart_record_names_the_document_and_the_k3s_it_restarted() {
        let boot = sha256(b"b");
        let a = Asked {
            boot: boot.clone(),
            kind: DisruptionKind::Restart,
            hash: Some(sha256(b"doc")),
            at: Time::EPOCH,
            requested: false,
            k3s_pid: Some(42),
            refused: None,
        };
        assert!(a.restart_for(&boot, &sha256(b"doc")));
        assert!(!a.restart_for(&boot, &sha256(b"doc2")));
        assert!(!a.restart_for(&sha256(b"other"), &sha256(b"doc")));
        assert_eq!(Asked::in_boot(Some(&a), &boot), Some(&a));
        assert_eq!(Asked::in_boot(Some(&a), &sha256(b"other")), None);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<Asked>(&json).unwrap(), a);
        // A record written before these fields existed still reads.
        let old = r#"{"boot":"#.to_owned()
            + &serde_json::to_string(&boot).unwrap()
            + r#","kind":"Reboot","at":"2026-12-02T10:00:00Z"}"#;
        let back: Asked = serde_json::from_str(&old).unwrap();
        assert!(!back.requested && back.k3s_pid.is_none());

        use ServiceState::{Backoff, Running, Stopped};
        let k3s = |state, pid| ServiceStatus {
            state,
            pid,
            restarts: 0,
        };
        let cases = [
            (k3s(Running, Some(42)), false, "not restarted yet"),
            (k3s(Stopped, None), false, "stopped on the way"),
            (k3s(Backoff, None), false, "failing to come back"),
            (
                k3s(Running, None),
                false,
                "running without a pid is unreadable",
            ),
            (k3s(Running, Some(77)), true, "running again"),
        ];
        for (status, done, why) in cases {
            assert_eq!(a.restart_done(&status), done, "{why}");
        }
    }
}
