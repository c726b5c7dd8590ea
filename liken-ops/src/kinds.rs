//! The core Kubernetes kinds the operators read, as small local structs:
//! a Node and a Pod, with only the fields a decision looks at.
//!
//! liken has no generated API types (see liken-kube). These structs
//! decode what the server sends with serde, tolerating every field they
//! do not name, and are never written back whole: writes are patches
//! built from the decisions, so a field this build does not know is
//! never erased.

use std::collections::BTreeMap;

use liken_kube::Object;
use serde::{Deserialize, Serialize};

/// The metadata the decisions read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// The name.
    #[serde(default)]
    pub name: String,
    /// The namespace; empty for cluster-scoped kinds.
    #[serde(default)]
    pub namespace: String,
    /// The uid.
    #[serde(default)]
    pub uid: String,
    /// The resourceVersion.
    #[serde(default)]
    pub resource_version: String,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Owners.
    #[serde(default)]
    pub owner_references: Vec<OwnerReference>,
    /// Set once the object is being deleted.
    #[serde(default)]
    pub deletion_timestamp: Option<String>,
}

/// One owner of an object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    /// The owner's kind (`DaemonSet`, `ReplicaSet`).
    #[serde(default)]
    pub kind: String,
    /// The owner's name.
    #[serde(default)]
    pub name: String,
    /// Whether the owner is the managing controller.
    #[serde(default)]
    pub controller: Option<bool>,
}

/// A Node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Node {
    /// Name, labels, annotations.
    #[serde(default)]
    pub metadata: Meta,
    /// Cordon and taints.
    #[serde(default)]
    pub spec: NodeSpec,
    /// Conditions.
    #[serde(default)]
    pub status: NodeStatus,
}

/// The Node's spec fields the operators read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct NodeSpec {
    /// Cordoned.
    #[serde(default)]
    pub unschedulable: bool,
    /// Taints, as the server holds them.
    #[serde(default)]
    pub taints: Vec<Taint>,
}

/// A Node taint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// The key.
    pub key: String,
    /// The value, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// NoSchedule, PreferNoSchedule or NoExecute.
    pub effect: String,
    /// When the node controller added it (its own taints carry this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<String>,
}

impl Taint {
    /// Parses k3s's `key[=value]:Effect`.
    pub fn parse(text: &str) -> Option<Taint> {
        let (key_value, effect) = text.rsplit_once(':')?;
        let (key, value) = match key_value.split_once('=') {
            Some((k, v)) => (k, Some(v.to_owned())),
            None => (key_value, None),
        };
        (!key.is_empty() && !effect.is_empty()).then(|| Taint {
            key: key.to_owned(),
            value,
            effect: effect.to_owned(),
            time_added: None,
        })
    }

    /// Whether two taints are the same taint to the scheduler: same key,
    /// value and effect.
    pub fn same(&self, other: &Taint) -> bool {
        self.key == other.key && self.value == other.value && self.effect == other.effect
    }
}

impl std::fmt::Display for Taint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{}={v}:{}", self.key, self.effect),
            None => write!(f, "{}:{}", self.key, self.effect),
        }
    }
}

/// The Node's status fields the operators read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct NodeStatus {
    /// Ready and the pressure conditions.
    #[serde(default)]
    pub conditions: Vec<NodeCondition>,
}

/// One Node condition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct NodeCondition {
    /// `Ready`, `MemoryPressure`, ...
    #[serde(rename = "type", default)]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[serde(default)]
    pub status: String,
}

impl Node {
    /// Whether the kubelet reports the Node Ready.
    pub fn ready(&self) -> bool {
        self.status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    }
}

/// A Pod.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Pod {
    /// Name, namespace, owners, annotations.
    #[serde(default)]
    pub metadata: Meta,
    /// Where it runs.
    #[serde(default)]
    pub spec: PodSpec,
    /// Its phase.
    #[serde(default)]
    pub status: PodStatus,
}

/// The Pod's spec fields the operators read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    /// The node it is bound to.
    #[serde(default)]
    pub node_name: String,
}

/// The Pod's status fields the operators read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct PodStatus {
    /// Pending, Running, Succeeded, Failed, Unknown.
    #[serde(default)]
    pub phase: String,
}

/// The annotation the kubelet puts on the API's copy of a static pod.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

impl Pod {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.metadata.namespace, self.metadata.name)
    }

    /// Whether a DaemonSet controls it.
    pub fn daemon_set(&self) -> bool {
        self.metadata
            .owner_references
            .iter()
            .any(|o| o.kind == "DaemonSet" && o.controller == Some(true))
    }

    /// Whether it is the kubelet's mirror of a static pod.
    pub fn mirror(&self) -> bool {
        self.metadata
            .annotations
            .contains_key(MIRROR_POD_ANNOTATION)
    }

    /// Whether it has run to completion.
    pub fn finished(&self) -> bool {
        self.status.phase == "Succeeded" || self.status.phase == "Failed"
    }
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], origin: &str) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("{origin}: {e}"))
}

impl Object for Node {
    fn decode(bytes: &[u8], origin: &str) -> Result<Self, String> {
        decode(bytes, origin)
    }
    fn name(&self) -> &str {
        &self.metadata.name
    }
    fn resource_version(&self) -> &str {
        &self.metadata.resource_version
    }
}

impl Object for Pod {
    fn decode(bytes: &[u8], origin: &str) -> Result<Self, String> {
        decode(bytes, origin)
    }
    fn name(&self) -> &str {
        &self.metadata.name
    }
    fn namespace(&self) -> &str {
        &self.metadata.namespace
    }
    fn resource_version(&self) -> &str {
        &self.metadata.resource_version
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taints_parse_as_k3s_writes_them() {
        let t = Taint::parse("gpu=true:NoSchedule").unwrap();
        assert_eq!(t.key, "gpu");
        assert_eq!(t.value.as_deref(), Some("true"));
        assert_eq!(t.effect, "NoSchedule");
        assert_eq!(t.to_string(), "gpu=true:NoSchedule");
        let t = Taint::parse("example.com/dedicated:NoExecute").unwrap();
        assert_eq!(t.value, None);
        assert_eq!(t.to_string(), "example.com/dedicated:NoExecute");
        assert!(Taint::parse("novalue").is_none());
        assert!(Taint::parse(":NoSchedule").is_none());
    }

    #[test]
    fn a_node_and_a_pod_decode_from_what_the_server_sends() {
        let node: Node = decode(
            br#"{"kind":"Node","metadata":{"name":"n1","resourceVersion":"7","labels":{"a":"b"},
                 "creationTimestamp":"2026-01-01T00:00:00Z"},
                 "spec":{"unschedulable":true,"taints":[{"key":"node.kubernetes.io/unschedulable",
                 "effect":"NoSchedule","timeAdded":"2026-01-01T00:00:00Z"}],"podCIDR":"10.42.0.0/24"},
                 "status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}}"#,
            "test",
        )
        .unwrap();
        assert!(node.ready());
        assert!(node.spec.unschedulable);
        assert_eq!(
            node.spec.taints[0].time_added.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        let pod: Pod = decode(
            br#"{"metadata":{"name":"p","namespace":"ns","ownerReferences":[
                 {"apiVersion":"apps/v1","kind":"DaemonSet","name":"ds","uid":"u","controller":true}]},
                 "spec":{"nodeName":"n1","containers":[]},"status":{"phase":"Running"}}"#,
            "test",
        )
        .unwrap();
        assert!(pod.daemon_set());
        assert!(!pod.mirror());
        assert!(!pod.finished());
        assert_eq!(pod.key(), "ns/p");
    }
}
