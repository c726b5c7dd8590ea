//! The steward: the OS's own DaemonSet pods, refreshed after an upgrade.
//!
//! The machine operator runs as a DaemonSet whose template names the
//! release it comes from (the `liken.sh/version` label, and the image
//! `liken.sh/liken-machine-operator:<release>`, which each machine
//! imports from its own system image, with no registry). When a leader
//! boots a new release, k3s applies the new manifest and the template
//! moves on, but most machines still run the old release: their system
//! images hold only the old operator image, and their old init speaks
//! the old control protocol. A DaemonSet that rolled its pods by itself
//! would replace the operator on those machines with one that cannot
//! start there, and a machine without its operator can never take the
//! turn that upgrades it. So the DaemonSet updates `OnDelete`, and the
//! steward decides when each pod may be replaced: once its machine
//! already runs the release the template carries. It evicts the old pod
//! (the Eviction API, so a PodDisruptionBudget a person added is
//! honoured), and the DaemonSet recreates it from the new template.
//!
//! Each sweep judges every pod of the DaemonSet:
//!
//! - terminating already: wait, and say so once per pod;
//! - not the DaemonSet's own, not yet on a node, or already from the
//!   template's release: keep;
//! - on a machine that does not run the template's release (or no
//!   Machine names its node): keep, because that machine still needs its
//!   old operator;
//! - otherwise: refresh.
//!
//! A template without a readable release (a development build) is not
//! judged at all.
//!
//! What outlives a sweep is only the set of terminating pods already
//! reported, so a pod that takes a while to stop is named once, not on
//! every sweep.

use std::collections::{BTreeMap, BTreeSet};

use liken_api::coordination::VERSION_LABEL;
use liken_api::{Machine, Version};
use liken_kube::request::PODS;
use liken_kube::{Api, Client, DeleteParams, DynamicObject, ListParams, Object};

use super::rollout::Template;
use crate::runtime::log;

/// A pod of the DaemonSet, by what the steward judges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// The resourceVersion judged.
    pub resource_version: String,
    /// The node it is bound to.
    pub node: Option<String>,
    /// The release its template label names.
    pub release: Option<String>,
    /// Whether it is being deleted.
    pub terminating: bool,
    /// Whether the DaemonSet judged is its controller.
    pub owned: bool,
}

impl PodView {
    /// Reads a pod, judged against the DaemonSet with `owner_uid`.
    pub fn of(pod: &DynamicObject, owner_uid: &str) -> PodView {
        let label = format!(
            "/metadata/labels/{}",
            VERSION_LABEL.replace('~', "~0").replace('/', "~1")
        );
        let text = |p: &str| pod.pointer(p).and_then(|v| v.as_str()).map(str::to_owned);
        let owned = pod
            .pointer("/metadata/ownerReferences")
            .and_then(|v| v.as_array())
            .is_some_and(|refs| {
                refs.iter()
                    .any(|r| r["controller"] == true && r["uid"].as_str() == Some(owner_uid))
            });
        PodView {
            name: pod.name().to_owned(),
            uid: text("/metadata/uid").unwrap_or_default(),
            resource_version: pod.resource_version().to_owned(),
            node: text("/spec/nodeName").filter(|n| !n.is_empty()),
            release: text(&label),
            terminating: pod.pointer("/metadata/deletionTimestamp").is_some(),
            owned,
        }
    }
}

/// What to do with one pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Leave it.
    Keep,
    /// Evict it: its machine runs the template's release.
    Refresh,
    /// It is on its way out; report it once.
    Terminating,
}

/// Judges each pod (in the order given) against the template's release
/// and the release each node's machine runs (`running`, by node name).
pub fn decide_steward(
    template: &Template,
    running: &BTreeMap<String, Version>,
    pods: &[PodView],
) -> Vec<Verdict> {
    let Template::Release(release) = template else {
        return vec![Verdict::Keep; pods.len()];
    };
    pods.iter()
        .map(|p| {
            if p.terminating {
                return Verdict::Terminating;
            }
            if !p.owned || p.release.as_deref() == Some(release.as_str()) {
                return Verdict::Keep;
            }
            let machine_runs = p.node.as_ref().and_then(|n| running.get(n));
            if machine_runs == Some(release) {
                Verdict::Refresh
            } else {
                Verdict::Keep
            }
        })
        .collect()
}

/// The release each machine runs, by the node name k3s registers it under
/// (its hostname: `spec.hostname`, else its name).
pub fn running_by_node<'a>(
    machines: impl IntoIterator<Item = &'a Machine>,
) -> BTreeMap<String, Version> {
    machines
        .into_iter()
        .filter_map(|m| {
            let running = m.status.release.as_ref()?.running.clone()?;
            Some((m.hostname().to_owned(), running))
        })
        .collect()
}

/// The label selector of a DaemonSet's `spec.selector.matchLabels`.
pub fn selector(daemon_set: &DynamicObject) -> Option<String> {
    let labels = daemon_set
        .pointer("/spec/selector/matchLabels")?
        .as_object()?;
    let parts: Vec<String> = labels
        .iter()
        .filter_map(|(k, v)| Some(format!("{k}={}", v.as_str()?)))
        .collect();
    (!parts.is_empty()).then(|| parts.join(","))
}

/// The steward, with the terminating pods it has reported (by uid).
#[derive(Debug, Default)]
pub struct Steward {
    reported: BTreeSet<String>,
}

impl Steward {
    /// A steward that has reported nothing.
    pub fn new() -> Steward {
        Steward::default()
    }

    /// The indices of the terminating pods not reported before; forgets
    /// the pods that are no longer terminating (gone, mostly).
    pub fn newly_terminating(&mut self, pods: &[PodView], verdicts: &[Verdict]) -> Vec<usize> {
        let terminating: BTreeSet<&str> = pods
            .iter()
            .zip(verdicts)
            .filter(|(_, v)| **v == Verdict::Terminating)
            .map(|(p, _)| p.uid.as_str())
            .collect();
        self.reported
            .retain(|uid| terminating.contains(uid.as_str()));
        pods.iter()
            .zip(verdicts)
            .enumerate()
            .filter(|(_, (p, v))| {
                **v == Verdict::Terminating && self.reported.insert(p.uid.clone())
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// One pass over the pods of `daemon_set` (the machine operator's, as
    /// the sweep's watch holds it), whose template carries `template`.
    pub fn sweep<'a>(
        &mut self,
        client: &Client,
        daemon_set: &DynamicObject,
        template: &Template,
        machines: impl IntoIterator<Item = &'a Machine>,
    ) {
        if !matches!(template, Template::Release(_)) {
            return;
        }
        let namespace = daemon_set.namespace().to_owned();
        let Some(selector) = selector(daemon_set) else {
            log::warn(
                "the DaemonSet has no matchLabels selector; the steward cannot find its pods",
                &[("daemonset", &daemon_set.name())],
            );
            return;
        };
        let owner = daemon_set
            .pointer("/metadata/uid")
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        let api = Api::namespaced(PODS, namespace.clone());
        let pods: Vec<PodView> =
            match client.list::<DynamicObject>(&api, &ListParams::labels(selector)) {
                Ok(list) => list.items.iter().map(|p| PodView::of(p, owner)).collect(),
                Err(e) => {
                    log::warn(
                        "listing the DaemonSet's pods for the steward",
                        &[("daemonset", &daemon_set.name()), ("error", &e)],
                    );
                    return;
                }
            };
        let verdicts = decide_steward(template, &running_by_node(machines), &pods);
        let report = self.newly_terminating(&pods, &verdicts);
        for (i, (pod, verdict)) in pods.iter().zip(verdicts).enumerate() {
            let node = pod.node.as_deref().unwrap_or_default();
            match verdict {
                Verdict::Keep => {}
                Verdict::Terminating => {
                    if report.contains(&i) {
                        log::info(
                            "an OS pod is terminating; its DaemonSet recreates it from the current template",
                            &[("pod", &pod.name), ("node", &node)],
                        );
                    }
                }
                Verdict::Refresh => {
                    let params = DeleteParams {
                        precondition_resource_version: Some(pod.resource_version.clone()),
                        ..DeleteParams::default()
                    };
                    match client.evict(&api, &pod.name, &params) {
                        Ok(()) => log::info(
                            "the machine runs the template's release; evicted its OS pod from the release before, so the DaemonSet recreates it",
                            &[
                                ("pod", &pod.name),
                                ("node", &node),
                                ("from", &pod.release.as_deref().unwrap_or("unlabelled")),
                            ],
                        ),
                        // Gone, or changed since it was judged: the next
                        // sweep judges it again.
                        Err(e) if e.is_not_found() || e.is_conflict() => {}
                        Err(e) if e.is_disruption_budget() => log::info(
                            "a PodDisruptionBudget holds the OS pod's refresh; the next sweep asks again",
                            &[("pod", &pod.name), ("error", &e)],
                        ),
                        Err(e) => log::warn(
                            "evicting an OS pod to refresh it",
                            &[("pod", &pod.name), ("error", &e)],
                        ),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::machine::{MachineSpec, ReleaseStatus};
    use serde_json::json;

    const OLD: &str = "2026.07.01-001";
    const NEW: &str = "2026.08.01-001";

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn pod(node: Option<&str>, release: Option<&str>, terminating: bool, owned: bool) -> PodView {
        PodView {
            name: format!("op-{}", node.unwrap_or("pending")),
            uid: "u".into(),
            resource_version: "1".into(),
            node: node.map(str::to_owned),
            release: release.map(str::to_owned),
            terminating,
            owned,
        }
    }

    #[test]
    fn decide_steward_table() {
        let running = BTreeMap::from([
            ("node-new".to_owned(), v(NEW)),
            ("node-old".to_owned(), v(OLD)),
        ]);
        let new = Template::Release(v(NEW));
        let cases = [
            (
                "an old pod on an upgraded machine",
                &new,
                pod(Some("node-new"), Some(OLD), false, true),
                Verdict::Refresh,
            ),
            (
                "an old pod on a machine not upgraded yet",
                &new,
                pod(Some("node-old"), Some(OLD), false, true),
                Verdict::Keep,
            ),
            (
                "already the template's release",
                &new,
                pod(Some("node-new"), Some(NEW), false, true),
                Verdict::Keep,
            ),
            (
                "an unlabelled pod on an upgraded machine",
                &new,
                pod(Some("node-new"), None, false, true),
                Verdict::Refresh,
            ),
            (
                "terminating",
                &new,
                pod(Some("node-new"), Some(OLD), true, true),
                Verdict::Terminating,
            ),
            (
                "not the DaemonSet's",
                &new,
                pod(Some("node-new"), Some(OLD), false, false),
                Verdict::Keep,
            ),
            (
                "not on a node yet",
                &new,
                pod(None, Some(OLD), false, true),
                Verdict::Keep,
            ),
            (
                "a node no Machine names",
                &new,
                pod(Some("stranger"), Some(OLD), false, true),
                Verdict::Keep,
            ),
            (
                "an unlabelled template",
                &Template::Unlabelled,
                pod(Some("node-new"), Some(OLD), false, true),
                Verdict::Keep,
            ),
            (
                "an unreadable template",
                &Template::Unreadable("gone".into()),
                pod(Some("node-new"), Some(OLD), true, true),
                Verdict::Keep,
            ),
        ];
        for (name, template, p, want) in cases {
            assert_eq!(decide_steward(template, &running, &[p]), [want], "{name}");
        }
    }

    #[test]
    fn a_terminating_pod_is_reported_once() {
        let mut steward = Steward::new();
        let mut a = pod(Some("node-new"), Some(OLD), true, true);
        a.uid = "a".into();
        let mut b = pod(Some("node-old"), Some(OLD), false, true);
        b.uid = "b".into();
        let (t, k) = (Verdict::Terminating, Verdict::Keep);
        let both = [a.clone(), b.clone()];
        let none: Vec<usize> = Vec::new();
        assert_eq!(steward.newly_terminating(&both, &[t, k]), [0]);
        assert_eq!(steward.newly_terminating(&both, &[t, k]), none);
        // b starts terminating too: only b is new.
        assert_eq!(steward.newly_terminating(&both, &[t, t]), [1]);
        // a is gone; a pod with a's uid terminating again would be new.
        assert_eq!(steward.newly_terminating(&[b], &[t]), none);
        assert_eq!(steward.newly_terminating(&both, &[t, t]), [0]);
    }

    #[test]
    fn machines_are_found_by_their_node_name() {
        let mut a = Machine::new("a", MachineSpec::default());
        a.status.release = Some(ReleaseStatus {
            running: Some(v(NEW)),
            ..ReleaseStatus::default()
        });
        let mut b = Machine::new(
            "b",
            MachineSpec {
                hostname: Some("b.lan".into()),
                ..MachineSpec::default()
            },
        );
        b.status.release = Some(ReleaseStatus {
            running: Some(v(OLD)),
            ..ReleaseStatus::default()
        });
        let booting = Machine::new("c", MachineSpec::default());
        let map = running_by_node(&[a, b, booting]);
        assert_eq!(
            map,
            BTreeMap::from([("a".to_owned(), v(NEW)), ("b.lan".to_owned(), v(OLD))])
        );
    }

    #[test]
    fn pods_and_selectors_read_from_json() {
        let p = DynamicObject(json!({"metadata": {
            "name": "op-x", "uid": "p1", "resourceVersion": "9",
            "labels": {"liken.sh/version": OLD},
            "ownerReferences": [{"uid": "ds1", "controller": true}],
            "deletionTimestamp": "2026-12-03T00:00:00Z"},
            "spec": {"nodeName": "node-1"}}));
        assert_eq!(
            PodView::of(&p, "ds1"),
            PodView {
                name: "op-x".into(),
                uid: "p1".into(),
                resource_version: "9".into(),
                node: Some("node-1".into()),
                release: Some(OLD.into()),
                terminating: true,
                owned: true,
            }
        );
        assert!(!PodView::of(&p, "another").owned);
        let ds = DynamicObject(json!({"spec": {"selector": {"matchLabels": {
            "app.kubernetes.io/name": "liken-machine-operator"}}}}));
        assert_eq!(
            selector(&ds).as_deref(),
            Some("app.kubernetes.io/name=liken-machine-operator")
        );
        assert_eq!(selector(&DynamicObject(json!({"spec": {}}))), None);
    }
}
