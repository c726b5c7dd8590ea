//! What the client needs to know about an object it reads: how to decode
//! it and where its name and resourceVersion are.
//!
//! liken's own kinds decode through `liken_api::decode::wire`, which
//! checks apiVersion and kind and tolerates what the server adds. Other
//! kinds the operators touch (Leases, Events) have small local structs;
//! anything else can be read as a [`DynamicObject`].

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use liken_api::{Cluster, Machine};

/// An object the client can decode and a store can key.
pub trait Object: Sized + Send + Sync + 'static {
    /// Decodes one object from the server's JSON; `origin` names the
    /// request for messages.
    fn decode(bytes: &[u8], origin: &str) -> Result<Self, String>;
    /// metadata.name.
    fn name(&self) -> &str;
    /// metadata.namespace; empty for cluster-scoped objects.
    fn namespace(&self) -> &str {
        ""
    }
    /// metadata.resourceVersion.
    fn resource_version(&self) -> &str;

    /// The key a store files this object under: `namespace/name`, or the
    /// name alone for cluster-scoped objects.
    fn key(&self) -> String {
        if self.namespace().is_empty() {
            self.name().to_owned()
        } else {
            format!("{}/{}", self.namespace(), self.name())
        }
    }
}

impl Object for Machine {
    fn decode(bytes: &[u8], origin: &str) -> Result<Self, String> {
        liken_api::decode::wire(bytes, origin).map_err(|e| e.to_string())
    }
    fn name(&self) -> &str {
        &self.metadata.name
    }
    fn resource_version(&self) -> &str {
        &self.metadata.resource_version
    }
}

impl Object for Cluster {
    fn decode(bytes: &[u8], origin: &str) -> Result<Self, String> {
        liken_api::decode::wire(bytes, origin).map_err(|e| e.to_string())
    }
    fn name(&self) -> &str {
        &self.metadata.name
    }
    fn resource_version(&self) -> &str {
        &self.metadata.resource_version
    }
}

/// Any object, kept as JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DynamicObject(pub serde_json::Value);

impl DynamicObject {
    fn meta(&self, field: &str) -> &str {
        self.0
            .get("metadata")
            .and_then(|m| m.get(field))
            .and_then(|v| v.as_str())
            .unwrap_or("")
    }
}

impl Object for DynamicObject {
    fn decode(bytes: &[u8], origin: &str) -> Result<Self, String> {
        let v: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| format!("{origin}: {e}"))?;
        if !v.is_object() {
            return Err(format!("{origin}: not a JSON object"));
        }
        Ok(DynamicObject(v))
    }
    fn name(&self) -> &str {
        self.meta("name")
    }
    fn namespace(&self) -> &str {
        self.meta("namespace")
    }
    fn resource_version(&self) -> &str {
        self.meta("resourceVersion")
    }
}

/// The metadata every Kubernetes object has, for local structs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// The name.
    #[serde(default)]
    pub name: String,
    /// The namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The uid.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The resourceVersion.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
}

/// Decodes with serde alone, for local structs that carry a [`Meta`].
pub(crate) fn decode_plain<T: DeserializeOwned>(bytes: &[u8], origin: &str) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("{origin}: {e}"))
}

/// One page (or all pages) of a LIST.
#[derive(Debug)]
pub struct ObjectList<T> {
    /// The objects.
    pub items: Vec<T>,
    /// The collection's resourceVersion: where a watch starts.
    pub resource_version: String,
    /// The token for the next page, if there is one.
    pub continue_token: Option<String>,
}

#[derive(Deserialize)]
struct RawList<'a> {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(borrow, default)]
    items: Vec<&'a serde_json::value::RawValue>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    #[serde(default)]
    resource_version: String,
    #[serde(default, rename = "continue")]
    continue_token: String,
}

/// Decodes a LIST body, each item by its kind's own decoder.
pub(crate) fn decode_list<T: Object>(bytes: &[u8], origin: &str) -> Result<ObjectList<T>, String> {
    let raw: RawList<'_> = serde_json::from_slice(bytes).map_err(|e| format!("{origin}: {e}"))?;
    let mut items = Vec::with_capacity(raw.items.len());
    for item in raw.items {
        items.push(T::decode(item.get().as_bytes(), origin)?);
    }
    Ok(ObjectList {
        items,
        resource_version: raw.metadata.resource_version,
        continue_token: Some(raw.metadata.continue_token).filter(|c| !c.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_decode_each_item_with_the_kind_decoder() {
        let body = br#"{"kind":"MachineList","apiVersion":"liken.sh/v1alpha1",
            "metadata":{"resourceVersion":"99","continue":"tok"},
            "items":[
              {"apiVersion":"liken.sh/v1alpha1","kind":"Machine",
               "metadata":{"name":"a","resourceVersion":"5","creationTimestamp":"2026-01-01T00:00:00Z",
                           "managedFields":[{"manager":"x"}]},
               "spec":{"hostname":"a"}}
            ]}"#;
        let list: ObjectList<Machine> = decode_list(body, "GET /machines").unwrap();
        assert_eq!(list.resource_version, "99");
        assert_eq!(list.continue_token.as_deref(), Some("tok"));
        assert_eq!(list.items.len(), 1);
        assert_eq!(list.items[0].name(), "a");
        assert_eq!(list.items[0].resource_version(), "5");
        assert_eq!(list.items[0].key(), "a");
    }

    #[test]
    fn a_cluster_in_a_machine_list_is_refused() {
        let body = br#"{"metadata":{},"items":[{"apiVersion":"liken.sh/v1alpha1","kind":"Cluster",
            "metadata":{"name":"c"},"spec":{"endpoint":"https://x","leaders":["a"]}}]}"#;
        let e = decode_list::<Machine>(body, "GET /machines").unwrap_err();
        assert!(e.contains("Cluster"), "{e}");
    }

    #[test]
    fn dynamic_objects_key_by_namespace() {
        let o = DynamicObject::decode(
            br#"{"metadata":{"name":"n","namespace":"ns","resourceVersion":"3"}}"#,
            "x",
        )
        .unwrap();
        assert_eq!((o.key().as_str(), o.resource_version()), ("ns/n", "3"));
        assert!(DynamicObject::decode(b"[]", "x").is_err());
    }
}
