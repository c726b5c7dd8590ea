//! The drain: emptying the node of the pods that must move before a
//! reboot or a k3s restart.
//!
//! Pods leave through the Eviction API, never by deletion, so each
//! workload's PodDisruptionBudget holds: a refused eviction (429) is
//! asked again with backoff, and the pod stays until its budget allows
//! it to go. DaemonSet pods stay (their controller ignores the cordon
//! and would recreate them; this operator is one), so do mirror pods (the
//! kubelet recreates them from disk) and pods that have finished.
//!
//! The drain is incremental: each pass asks once for each pod whose
//! backoff is over and reports what is left, so a long drain never stops
//! the loop (or the heartbeat). Past the drain timeout the machine keeps
//! its turn and keeps asking, and the condition turns DrainBlocked,
//! naming the pod and the budget that hold it; the cluster operator's
//! stall detection sees a turn that does not finish.

use std::collections::BTreeMap;

use liken_api::Time;

use crate::kinds::Pod;

/// The first wait after a refused eviction, in seconds; it doubles up to
/// [`BACKOFF_MAX_SECS`].
pub const BACKOFF_FIRST_SECS: i64 = 1;
/// The longest wait between two evictions of one pod.
pub const BACKOFF_MAX_SECS: i64 = 30;

/// Why one pod's last eviction was refused, and when to ask again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Refusals so far.
    pub attempts: u32,
    /// Not before this.
    pub next_at: Time,
    /// The server's message.
    pub message: String,
    /// The PodDisruptionBudget that refused, when the message names one.
    pub budget: Option<String>,
}

impl Refusal {
    /// The record after one more refusal at `now`.
    pub fn after(previous: Option<&Refusal>, now: Time, message: String) -> Refusal {
        let attempts = previous.map_or(1, |r| r.attempts.saturating_add(1));
        let wait = BACKOFF_FIRST_SECS
            .saturating_mul(1i64 << attempts.saturating_sub(1).min(16))
            .min(BACKOFF_MAX_SECS);
        Refusal {
            attempts,
            next_at: Time::from_unix(now.unix().saturating_add(wait)),
            budget: budget_named(&message),
            message,
        }
    }
}

/// The PodDisruptionBudget a refusal names: the API server's message
/// reads "... The disruption budget <name> needs N healthy pods ...".
pub fn budget_named(message: &str) -> Option<String> {
    let (_, rest) = message.split_once("disruption budget ")?;
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
        .collect();
    (!name.is_empty()).then_some(name)
}

/// Whether the drain must move a pod.
pub fn must_move(pod: &Pod) -> bool {
    !pod.daemon_set() && !pod.mirror() && !pod.finished()
}

/// One pass of the drain.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainStep {
    /// Pods to ask to leave now (`namespace/name`).
    pub evict: Vec<String>,
    /// Pods still on the node that must move (terminating ones included).
    pub left: Vec<String>,
    /// Past the timeout: what holds the drain, for the status and an
    /// Event.
    pub blocked: Option<String>,
}

/// Decides one pass of the drain: which pods to ask again, what is left,
/// and whether the drain ran past `timeout_secs` since `since`.
pub fn decide_drain(
    pods: &[Pod],
    refusals: &BTreeMap<String, Refusal>,
    since: Time,
    now: Time,
    timeout_secs: i64,
) -> DrainStep {
    let mut step = DrainStep::default();
    for pod in pods.iter().filter(|p| must_move(p)) {
        let key = pod.key();
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let waiting = refusals.get(&key).is_some_and(|r| r.next_at > now);
        if !terminating && !waiting {
            step.evict.push(key.clone());
        }
        step.left.push(key);
    }
    let overdue = now.unix().saturating_sub(since.unix()) > timeout_secs;
    if overdue && !step.left.is_empty() {
        let holders: Vec<String> = step
            .left
            .iter()
            .map(|key| match refusals.get(key) {
                Some(Refusal {
                    budget: Some(b),
                    message,
                    ..
                }) => format!("{key} is held by PodDisruptionBudget {b} ({message})"),
                Some(r) => format!("{key}: {}", r.message),
                None => format!("{key} has not left yet"),
            })
            .collect();
        step.blocked = Some(format!(
            "the drain has run past its {timeout_secs} s timeout with {} pod(s) left: {}; \
             the turn is kept and evictions go on",
            step.left.len(),
            holders.join("; ")
        ));
    }
    step
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{Meta, OwnerReference, PodStatus};

    const REFUSED: &str = "Cannot evict pod as it would violate the pod's disruption budget. \
                           The disruption budget web-pdb needs 2 healthy pods and has 2 currently";

    fn pod(name: &str) -> Pod {
        Pod {
            metadata: Meta {
                name: name.into(),
                namespace: "apps".into(),
                ..Meta::default()
            },
            status: PodStatus {
                phase: "Running".into(),
            },
            ..Pod::default()
        }
    }

    #[test]
    fn what_a_drain_moves() {
        let mut ds = pod("ds");
        ds.metadata.owner_references.push(OwnerReference {
            kind: "DaemonSet".into(),
            name: "x".into(),
            controller: Some(true),
        });
        let mut mirror = pod("mirror");
        mirror
            .metadata
            .annotations
            .insert(crate::kinds::MIRROR_POD_ANNOTATION.into(), "h".into());
        let mut done = pod("done");
        done.status.phase = "Succeeded".into();
        let mut going = pod("going");
        going.metadata.deletion_timestamp = Some("2026-12-02T10:00:00Z".into());
        let mut rs = pod("web");
        rs.metadata.owner_references.push(OwnerReference {
            kind: "ReplicaSet".into(),
            name: "web-1".into(),
            controller: Some(true),
        });
        let pods = [ds, mirror, done, going, rs, pod("bare")];
        let step = decide_drain(
            &pods,
            &BTreeMap::new(),
            Time::from_unix(0),
            Time::from_unix(5),
            300,
        );
        assert_eq!(step.evict, ["apps/web", "apps/bare"]);
        assert_eq!(step.left, ["apps/going", "apps/web", "apps/bare"]);
        assert_eq!(step.blocked, None);
    }

    #[test]
    fn refusals_back_off_and_name_the_budget_past_the_timeout() {
        let now = Time::from_unix(1000);
        let first = Refusal::after(None, now, REFUSED.into());
        assert_eq!(first.budget.as_deref(), Some("web-pdb"));
        assert_eq!(first.next_at, Time::from_unix(1001));
        let mut r = first.clone();
        let mut waits = Vec::new();
        for _ in 0..7 {
            let next = Refusal::after(Some(&r), now, REFUSED.into());
            waits.push(next.next_at.unix() - now.unix());
            r = next;
        }
        assert_eq!(waits, [2, 4, 8, 16, 30, 30, 30]);

        let refusals: BTreeMap<String, Refusal> = [("apps/web".to_owned(), first)].into();
        let pods = [pod("web")];
        // Waiting out the backoff: not asked, still left.
        let step = decide_drain(&pods, &refusals, Time::from_unix(990), now, 300);
        assert!(step.evict.is_empty());
        assert_eq!(step.left, ["apps/web"]);
        assert_eq!(step.blocked, None);
        // Past the timeout: named, and asked again once the backoff ends.
        let later = Time::from_unix(1400);
        let step = decide_drain(&pods, &refusals, Time::from_unix(990), later, 300);
        assert_eq!(step.evict, ["apps/web"]);
        let blocked = step.blocked.unwrap();
        assert!(
            blocked.contains("apps/web is held by PodDisruptionBudget web-pdb"),
            "{blocked}"
        );
        assert!(blocked.contains("needs 2 healthy pods"), "{blocked}");
        // An empty node is never blocked.
        assert_eq!(
            decide_drain(&[], &refusals, Time::from_unix(0), later, 300),
            DrainStep::default()
        );
    }

    #[test]
    fn a_message_without_a_budget_names_none() {
        assert_eq!(budget_named("pods \"x\" not found"), None);
        assert_eq!(
            budget_named("The disruption budget a.b-c needs 1").as_deref(),
            Some("a.b-c")
        );
    }
}
