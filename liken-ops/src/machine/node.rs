//! The machine's k3s node labels and taints, judged against its Node.
//!
//! k3s takes `node-label` and `node-taint` from its configuration, but
//! only partly: on each start it merges the configured labels into the
//! Node and never removes one (k3s-io/k3s pkg/agent/run.go,
//! `updateMutableLabels` merges with `labels.Merge`), and taints reach
//! the kubelet's `--register-with-taints`, which applies them only when
//! the Node is first registered. So the Node is the truth this condition
//! judges by, and the operator patches the labels and taints onto it
//! directly once k3s has restarted.
//!
//! Which labels and taints are liken's to remove is recorded on the Node
//! itself ([`MANAGED_ANNOTATION`]), because the Node also carries labels
//! and taints from k3s, the kubelet and people, which are not liken's to
//! touch. Before the first patch the running document's own labels and
//! taints stand in for that record.

use std::collections::{BTreeMap, BTreeSet};

use liken_api::machine::K3sSpec;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::kinds::{Node, Taint};

/// The Node annotation recording the labels and taints liken set.
pub const MANAGED_ANNOTATION: &str = "liken.sh/k3s-managed";

/// The labels and taints liken answers for on a Node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Managed {
    /// Label keys.
    #[serde(default)]
    pub labels: BTreeSet<String>,
    /// Taints as `key[=value]:Effect`.
    #[serde(default)]
    pub taints: BTreeSet<String>,
}

impl Managed {
    /// What a k3s spec sets.
    pub fn of(spec: Option<&K3sSpec>) -> Managed {
        let Some(spec) = spec else {
            return Managed::default();
        };
        Managed {
            labels: spec.node_labels.keys().cloned().collect(),
            taints: spec.node_taints.iter().cloned().collect(),
        }
    }

    /// The record on a Node, or `fallback` when the Node carries none (or
    /// one that does not parse).
    pub fn recorded(node: &Node, fallback: Managed) -> Managed {
        node.metadata
            .annotations
            .get(MANAGED_ANNOTATION)
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or(fallback)
    }
}

/// What the Node needs to carry the spec's labels and taints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeDrift {
    /// Labels to set, with their values.
    pub set_labels: BTreeMap<String, String>,
    /// Labels liken set earlier that the spec no longer names.
    pub remove_labels: Vec<String>,
    /// Taints to add.
    pub add_taints: Vec<Taint>,
    /// Taints liken set earlier that the spec no longer names.
    pub remove_taints: Vec<Taint>,
}

impl NodeDrift {
    /// Whether the Node already agrees.
    pub fn is_empty(&self) -> bool {
        *self == NodeDrift::default()
    }

    /// `k3s: label role db → web, +taint gpu=true:NoSchedule`.
    pub fn items(&self, node: &Node) -> Vec<String> {
        let mut out: Vec<String> = self
            .set_labels
            .iter()
            .map(|(k, v)| match node.metadata.labels.get(k) {
                Some(old) => format!("label {k} {old} → {v}"),
                None => format!("+label {k}={v}"),
            })
            .collect();
        out.extend(self.remove_labels.iter().map(|k| format!("-label {k}")));
        out.extend(self.add_taints.iter().map(|t| format!("+taint {t}")));
        out.extend(self.remove_taints.iter().map(|t| format!("-taint {t}")));
        out
    }
}

/// Compares the spec's labels and taints with the Node; `managed` is
/// what liken answers for (see [`Managed::recorded`]).
pub fn decide_node_drift(spec: Option<&K3sSpec>, node: &Node, managed: &Managed) -> NodeDrift {
    let empty = K3sSpec::default();
    let spec = spec.unwrap_or(&empty);
    let mut drift = NodeDrift::default();
    for (k, v) in &spec.node_labels {
        if node.metadata.labels.get(k) != Some(v) {
            drift.set_labels.insert(k.clone(), v.clone());
        }
    }
    for k in &managed.labels {
        if !spec.node_labels.contains_key(k) && node.metadata.labels.contains_key(k) {
            drift.remove_labels.push(k.clone());
        }
    }
    let wanted: Vec<Taint> = spec
        .node_taints
        .iter()
        .filter_map(|t| Taint::parse(t))
        .collect();
    for t in &wanted {
        if !node.spec.taints.iter().any(|n| n.same(t)) {
            drift.add_taints.push(t.clone());
        }
    }
    for text in &managed.taints {
        let Some(t) = Taint::parse(text) else {
            continue;
        };
        if !wanted.iter().any(|w| w.same(&t)) && node.spec.taints.iter().any(|n| n.same(&t)) {
            drift.remove_taints.push(t);
        }
    }
    drift
}

/// The JSON merge patch that carries the drift onto the Node, with the
/// Node's resourceVersion as a precondition (the taint list is replaced
/// whole, so a concurrent writer must make this patch fail, not lose its
/// taint) and the new record of what liken manages.
pub fn node_patch(node: &Node, drift: &NodeDrift, spec: Option<&K3sSpec>) -> Value {
    let mut labels = serde_json::Map::new();
    for (k, v) in &drift.set_labels {
        labels.insert(k.clone(), Value::String(v.clone()));
    }
    for k in &drift.remove_labels {
        labels.insert(k.clone(), Value::Null);
    }
    let record = serde_json::to_string(&Managed::of(spec)).unwrap_or_default();
    let mut patch = json!({
        "metadata": {
            "resourceVersion": node.metadata.resource_version,
            "labels": labels,
            "annotations": { MANAGED_ANNOTATION: record },
        }
    });
    if !drift.add_taints.is_empty() || !drift.remove_taints.is_empty() {
        let mut taints: Vec<Taint> = node
            .spec
            .taints
            .iter()
            .filter(|t| !drift.remove_taints.iter().any(|r| r.same(t)))
            .cloned()
            .collect();
        taints.extend(drift.add_taints.iter().cloned());
        patch["spec"] = json!({ "taints": taints });
    }
    patch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{Meta, NodeSpec};

    fn node(labels: &[(&str, &str)], taints: &[&str], annotation: Option<&str>) -> Node {
        let mut n = Node {
            metadata: Meta {
                name: "n1".into(),
                resource_version: "42".into(),
                labels: labels
                    .iter()
                    .map(|(k, v)| ((*k).into(), (*v).into()))
                    .collect(),
                ..Meta::default()
            },
            spec: NodeSpec {
                unschedulable: false,
                taints: taints.iter().filter_map(|t| Taint::parse(t)).collect(),
            },
            ..Node::default()
        };
        if let Some(a) = annotation {
            n.metadata
                .annotations
                .insert(MANAGED_ANNOTATION.into(), a.into());
        }
        n
    }

    fn spec(labels: &[(&str, &str)], taints: &[&str]) -> K3sSpec {
        K3sSpec {
            node_labels: labels
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            node_taints: taints.iter().map(|t| (*t).into()).collect(),
        }
    }

    #[test]
    fn drift_touches_only_what_liken_manages() {
        // The Node carries k3s's own label and a person's taint: neither
        // is liken's, so neither is removed.
        let n = node(
            &[
                ("kubernetes.io/hostname", "n1"),
                ("role", "db"),
                ("old", "x"),
            ],
            &["gpu=true:NoSchedule", "person:NoSchedule"],
            None,
        );
        let running = spec(&[("role", "db"), ("old", "x")], &["gpu=true:NoSchedule"]);
        let desired = spec(&[("role", "web")], &["dedicated:NoExecute"]);
        let managed = Managed::recorded(&n, Managed::of(Some(&running)));
        let drift = decide_node_drift(Some(&desired), &n, &managed);
        assert_eq!(
            drift.items(&n),
            [
                "label role db → web",
                "-label old",
                "+taint dedicated:NoExecute",
                "-taint gpu=true:NoSchedule",
            ]
        );
        let patch = node_patch(&n, &drift, Some(&desired));
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(patch["metadata"]["labels"]["role"], "web");
        assert!(patch["metadata"]["labels"]["old"].is_null());
        assert!(
            patch["metadata"]["labels"]
                .get("kubernetes.io/hostname")
                .is_none()
        );
        let taints: Vec<String> = patch["spec"]["taints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                serde_json::from_value::<Taint>(t.clone())
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(taints, ["person:NoSchedule", "dedicated:NoExecute"]);
        let record: Managed = serde_json::from_str(
            patch["metadata"]["annotations"][MANAGED_ANNOTATION]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(record, Managed::of(Some(&desired)));

        // Patched: no drift, and the record now answers for the new set.
        let after = node(
            &[("kubernetes.io/hostname", "n1"), ("role", "web")],
            &["person:NoSchedule", "dedicated:NoExecute"],
            Some(&serde_json::to_string(&record).unwrap()),
        );
        let managed = Managed::recorded(&after, Managed::of(Some(&running)));
        assert!(decide_node_drift(Some(&desired), &after, &managed).is_empty());
    }

    #[test]
    fn a_label_change_alone_leaves_the_taints_alone() {
        let n = node(&[], &["x:NoSchedule"], None);
        let desired = spec(&[("a", "1")], &[]);
        let drift = decide_node_drift(Some(&desired), &n, &Managed::default());
        assert_eq!(drift.items(&n), ["+label a=1"]);
        assert!(node_patch(&n, &drift, Some(&desired)).get("spec").is_none());
        assert!(decide_node_drift(None, &n, &Managed::default()).is_empty());
    }
}
