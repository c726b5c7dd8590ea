//! The steward with a real DaemonSet: kube-controller-manager's
//! DaemonSet controller, kube-scheduler, and kwok nodes that run the pods.

use std::time::Duration;

use liken_api::machine::{MachineSpec, ReleaseStatus};
use liken_api::{Machine, Version};
use liken_kube::request::DAEMON_SETS;
use liken_kube::{Api, DynamicObject};
use liken_ops::cluster::rollout::Template;
use liken_ops::cluster::steward::Steward;
use serde_json::json;

use crate::support;

const OLD: &str = "2026.07.01-001";
const NEW: &str = "2026.08.01-001";

fn machine(name: &str, running: &str) -> Machine {
    let mut m = Machine::new(name, MachineSpec::default());
    m.status.release = Some(ReleaseStatus {
        running: Some(Version::parse(running).unwrap()),
        ..ReleaseStatus::default()
    });
    m
}

/// (node, release label, uid) of each operator pod.
fn operator_pods() -> Vec<(String, String, String)> {
    let mut pods: Vec<(String, String, String)> = support::pods(
        "liken-system",
        "app.kubernetes.io/name=liken-machine-operator",
    )
    .iter()
    .filter(|p| p.pointer("/metadata/deletionTimestamp").is_none())
    .map(|p| {
        let s = |ptr: &str| {
            p.pointer(ptr)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        (
            s("/spec/nodeName"),
            s("/metadata/labels/liken.sh~1version"),
            s("/metadata/uid"),
        )
    })
    .collect();
    pods.sort();
    pods
}

fn on(pods: &[(String, String, String)], node: &str) -> Option<(String, String)> {
    pods.iter()
        .find(|p| p.0 == node)
        .map(|p| (p.1.clone(), p.2.clone()))
}

/// After the template moves to a new release, only the pod on the machine
/// that already runs it is refreshed, through an eviction; the DaemonSet
/// recreates it from the new template; then nothing more is written.
pub fn scenario() {
    let cp = support::cp();
    let admin = support::admin();
    let operator = support::operator();
    for node in ["node-new", "node-old"] {
        cp.create_node(node, &[("kubernetes.io/os", "linux")])
            .unwrap();
    }
    let api = Api::namespaced(DAEMON_SETS, "liken-system");
    let template = |release: &str| {
        json!({
            "metadata": {"labels": {"app.kubernetes.io/name": "liken-machine-operator",
                                    "liken.sh/version": release}},
            "spec": {"containers": [{"name": "op",
                "image": format!("liken.sh/liken-machine-operator:{release}")}]},
        })
    };
    admin
        .create::<DynamicObject, _>(
            &api,
            &json!({
                "apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "liken-machine-operator", "namespace": "liken-system"},
                "spec": {
                    "selector": {"matchLabels": {"app.kubernetes.io/name": "liken-machine-operator"}},
                    "updateStrategy": {"type": "OnDelete"},
                    "template": template(OLD),
                },
            }),
        )
        .unwrap();
    support::wait(
        Duration::from_secs(60),
        "an operator pod on both nodes",
        || {
            let pods = operator_pods();
            on(&pods, "node-new").is_some() && on(&pods, "node-old").is_some()
        },
    );
    let before = operator_pods();
    let old_on_old = on(&before, "node-old").unwrap();
    assert_eq!(old_on_old.0, OLD);

    // A leader booted the new release: the template moves on. With
    // OnDelete the DaemonSet replaces nothing by itself.
    admin
        .merge_patch::<DynamicObject>(
            &api,
            "liken-machine-operator",
            &json!({"spec": {"template": template(NEW)}}),
        )
        .unwrap();
    let machines = [machine("node-new", NEW), machine("node-old", OLD)];
    let new = Template::Release(Version::parse(NEW).unwrap());
    let mut steward = Steward::new();

    let mark = cp.audit_mark().unwrap();
    let ds: DynamicObject = admin.get(&api, "liken-machine-operator").unwrap();
    steward.sweep(&operator, &ds, &new, &machines);
    let writes: Vec<String> = support::operator_writes(mark)
        .iter()
        .map(|e| {
            format!(
                "{} {}/{} {} -> {}",
                e.verb, e.resource, e.subresource, e.name, e.code
            )
        })
        .collect();
    let evicted = on(&before, "node-new").unwrap();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert!(
        writes[0].starts_with("create pods/eviction liken-machine-operator-"),
        "{writes:?}"
    );
    assert!(writes[0].ends_with("-> 201"), "{writes:?}");

    support::wait(
        Duration::from_secs(60),
        "the refreshed pod on node-new",
        || {
            on(&operator_pods(), "node-new")
                .is_some_and(|(release, uid)| release == NEW && uid != evicted.1)
        },
    );
    assert_eq!(on(&operator_pods(), "node-old"), Some(old_on_old.clone()));

    // Settled: the machine not upgraded keeps its pod, nothing is written.
    let mark = cp.audit_mark().unwrap();
    let ds: DynamicObject = admin.get(&api, "liken-machine-operator").unwrap();
    steward.sweep(&operator, &ds, &new, &machines);
    assert!(support::operator_writes(mark).is_empty());

    // Its turn comes: that machine now runs the release, and its pod is
    // refreshed too.
    let machines = [machine("node-new", NEW), machine("node-old", NEW)];
    steward.sweep(&operator, &ds, &new, &machines);
    support::wait(
        Duration::from_secs(60),
        "the refreshed pod on node-old",
        || on(&operator_pods(), "node-old").is_some_and(|(release, _)| release == NEW),
    );
}
