//! The operators the cluster runs that ship a workstation CLI.
//!
//! An operator runs as a Deployment, DaemonSet or StatefulSet; the one
//! that ships a CLI carries the label `cli.liken.sh/plugin=<domain>`
//! ([`liken_api::annotations::PLUGIN_LABEL`]). The three kinds keep the
//! pod template at the same path, so one reading serves all of them: the
//! label's value and the first container's image, whose tag is the
//! version the CLI must match.
//!
//! Only workloads in [`PLUGIN_NAMESPACE`] (liken-system) are read: a
//! plugin is a program the person runs on their workstation with their
//! credentials, so naming one must take the power to write liken-system,
//! not merely to create a Deployment in some tenant's namespace. The
//! Cluster has no field listing other namespaces to trust, so there are
//! none. LISTs are namespaced with the label selector, so the server
//! sends only labelled workloads of that namespace, and a workload read
//! from anywhere else is dropped again ([`operator_of`]).
//!
//! Two workloads may carry the same domain (an operator and a helper it
//! runs); [`decide_operators`] keeps the one whose image names
//! `<domain>-operator`, else the first in the order read.

use liken_api::annotations::PLUGIN_LABEL;
use liken_kube::{Api, Client, DynamicObject, ListParams, Resource};

const fn apps(plural: &'static str, kind: &'static str) -> Resource {
    Resource {
        group: "apps",
        version: "v1",
        plural,
        kind,
        namespaced: true,
    }
}

/// The kinds an operator runs as, in the order they are read.
pub const KINDS: [Resource; 3] = [
    apps("deployments", "Deployment"),
    apps("daemonsets", "DaemonSet"),
    apps("statefulsets", "StatefulSet"),
];

/// One operator that ships a CLI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operator {
    /// The label's value: the CLI is `kubectl-liken-<domain>`.
    pub domain: String,
    /// The operator's image reference, as the pod spec names it.
    pub image: String,
    /// `namespace/name` of the workload, for messages.
    pub workload: String,
}

/// The one namespace whose workloads may name a plugin.
pub const PLUGIN_NAMESPACE: &str = "liken-system";

/// Reads one workload; `None` when it names no domain or no image, or
/// is outside [`PLUGIN_NAMESPACE`].
pub fn operator_of(kind: &str, w: &DynamicObject) -> Option<Operator> {
    let v = &w.0;
    if v.pointer("/metadata/namespace").and_then(|n| n.as_str()) != Some(PLUGIN_NAMESPACE) {
        return None;
    }
    let domain = v
        .pointer("/metadata/labels")
        .and_then(|l| l.get(PLUGIN_LABEL))
        .and_then(|d| d.as_str())?;
    let image = v
        .pointer("/spec/template/spec/containers/0/image")
        .and_then(|i| i.as_str())?;
    let meta = |f: &str| {
        v.pointer(&format!("/metadata/{f}"))
            .and_then(|x| x.as_str())
            .unwrap_or("")
            .to_owned()
    };
    (!domain.is_empty() && !image.is_empty()).then(|| Operator {
        domain: domain.to_owned(),
        image: image.to_owned(),
        workload: format!("{kind} {}/{}", meta("namespace"), meta("name")),
    })
}

/// One operator per domain, sorted by domain.
pub fn decide_operators(read: Vec<Operator>) -> Vec<Operator> {
    let mut kept: Vec<Operator> = Vec::new();
    for op in read {
        let names = |o: &Operator| o.image.contains(&format!("{}-operator", o.domain));
        match kept.iter_mut().find(|k| k.domain == op.domain) {
            Some(k) => {
                if names(&op) && !names(k) {
                    *k = op;
                }
            }
            None => kept.push(op),
        }
    }
    kept.sort_by(|a, b| a.domain.cmp(&b.domain));
    kept
}

/// Lists the labelled workloads of every kind in [`PLUGIN_NAMESPACE`]
/// and decides the operators.
pub fn list(client: &Client) -> Result<Vec<Operator>, liken_kube::Error> {
    let mut read = Vec::new();
    for kind in KINDS {
        let items = client
            .list_all::<DynamicObject>(
                &Api::namespaced(kind, PLUGIN_NAMESPACE),
                &ListParams::labels(PLUGIN_LABEL),
            )?
            .items;
        read.extend(items.iter().filter_map(|w| operator_of(kind.kind, w)));
    }
    Ok(decide_operators(read))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(domain: Option<&str>, image: &str) -> DynamicObject {
        let mut labels = serde_json::Map::new();
        if let Some(d) = domain {
            labels.insert(PLUGIN_LABEL.into(), d.into());
        }
        DynamicObject(serde_json::json!({
            "metadata": {"name": "w", "namespace": "liken-system", "labels": labels},
            "spec": {"template": {"spec": {"containers": [{"name": "op", "image": image}]}}}
        }))
    }

    #[test]
    fn a_workload_names_its_domain_and_first_image() {
        let op = operator_of(
            "Deployment",
            &workload(Some("audio"), "r.example/audio-operator:1"),
        )
        .unwrap();
        assert_eq!(op.domain, "audio");
        assert_eq!(op.image, "r.example/audio-operator:1");
        assert_eq!(op.workload, "Deployment liken-system/w");
        assert_eq!(operator_of("Deployment", &workload(None, "x:1")), None);
        assert_eq!(operator_of("Deployment", &workload(Some(""), "x:1")), None);
        assert_eq!(
            operator_of(
                "Deployment",
                &DynamicObject(serde_json::json!({"metadata": {}}))
            ),
            None
        );
        let mut tenant = workload(Some("audio"), "evil/audio-operator:1");
        tenant.0["metadata"]["namespace"] = "tenant".into();
        assert_eq!(operator_of("Deployment", &tenant), None);
    }

    #[test]
    fn one_operator_per_domain_preferring_the_operator_image() {
        let op = |d: &str, i: &str| Operator {
            domain: d.into(),
            image: i.into(),
            workload: String::new(),
        };
        let kept = decide_operators(vec![
            op("media", "r/media-helper:1"),
            op("audio", "r/audio-operator:2"),
            op("media", "r/media-operator:1"),
            op("audio", "r/audio-sidecar:2"),
        ]);
        assert_eq!(
            kept,
            [
                op("audio", "r/audio-operator:2"),
                op("media", "r/media-operator:1")
            ]
        );
    }
}
