//! What the client needs to know about an object it reads: how to decode
//! it and where its name and resourceVersion are.
//!
//! liken's own kinds decode through `liken_api::decode::wire`, which
//! checks apiVersion and kind and tolerates what the server adds. Other
//! kinds the operators touch (Leases, Events) have small local structs;
//! anything else can be read as a [`DynamicObject`].
//!
//! A LIST is decoded item by item: an item this build cannot read (a
//! phase a newer release added, a value a loosened schema let through) is
//! left out and listed in [`ObjectList::skipped`] with its name and the
//! field that failed, read from the raw metadata, so one bad object never
//! hides the others.

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

/// Names the field a failed decode stopped at: the decoder's message
/// prefixed with the path (`status.phase: ...`) when serde can tell it.
pub fn with_field_path<T: DeserializeOwned>(bytes: &[u8], message: String) -> String {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    match serde_path_to_error::deserialize::<_, T>(de) {
        Err(e) if !e.path().to_string().is_empty() && e.path().to_string() != "." => {
            format!("{}: {message}", e.path())
        }
        _ => message,
    }
}

impl Object for Machine {
    fn decode(bytes: &[u8], origin: &str) -> Result<Self, String> {
        liken_api::decode::wire(bytes, origin)
            .map_err(|e| with_field_path::<Machine>(bytes, e.to_string()))
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
        liken_api::decode::wire(bytes, origin)
            .map_err(|e| with_field_path::<Cluster>(bytes, e.to_string()))
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

    /// metadata.finalizers (empty when absent).
    pub fn finalizers(&self) -> Vec<String> {
        self.0
            .get("metadata")
            .and_then(|m| m.get("finalizers"))
            .and_then(|f| f.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The value at a JSON pointer (`/spec/unschedulable`), if any.
    pub fn pointer(&self, pointer: &str) -> Option<&serde_json::Value> {
        self.0.pointer(pointer)
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
    /// Everything else the server sent (labels, annotations,
    /// ownerReferences, ...), kept so a read-modify-write sends it back
    /// instead of erasing it.
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// Decodes with serde alone, for local structs that carry a [`Meta`].
pub(crate) fn decode_plain<T: DeserializeOwned>(bytes: &[u8], origin: &str) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| format!("{origin}: {e}"))
}

/// An object the server sent that this build could not decode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    /// Its store key (`namespace/name`, or the name), from the raw
    /// metadata.
    pub key: String,
    /// Its resourceVersion, from the raw metadata.
    pub resource_version: String,
    /// What failed, with the field (`status.phase: unknown variant ...`).
    pub message: String,
}

/// The metadata every object has, read without the kind's decoder.
#[derive(Default, Deserialize)]
struct RawObject {
    #[serde(default)]
    metadata: RawMeta,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    resource_version: String,
}

impl Unreadable {
    /// Names the object in `bytes` that failed with `message`.
    pub fn of(bytes: &[u8], message: String) -> Unreadable {
        let raw: RawObject = serde_json::from_slice(bytes).unwrap_or_default();
        let m = raw.metadata;
        Unreadable {
            key: if m.namespace.is_empty() {
                m.name
            } else {
                format!("{}/{}", m.namespace, m.name)
            },
            resource_version: m.resource_version,
            message,
        }
    }
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
    /// Items left out because they could not be decoded.
    pub skipped: Vec<Unreadable>,
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

/// Decodes a LIST body, each item by its kind's own decoder; items that
/// fail are named in `skipped`. Only a body that is not a list at all is
/// an error.
pub(crate) fn decode_list<T: Object>(bytes: &[u8], origin: &str) -> Result<ObjectList<T>, String> {
    let raw: RawList<'_> = serde_json::from_slice(bytes).map_err(|e| format!("{origin}: {e}"))?;
    let mut items = Vec::with_capacity(raw.items.len());
    let mut skipped = Vec::new();
    for item in raw.items {
        let item = item.get().as_bytes();
        match T::decode(item, origin) {
            Ok(o) => items.push(o),
            Err(message) => skipped.push(Unreadable::of(item, message)),
        }
    }
    Ok(ObjectList {
        items,
        resource_version: raw.metadata.resource_version,
        continue_token: Some(raw.metadata.continue_token).filter(|c| !c.is_empty()),
        skipped,
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
    fn a_cluster_in_a_machine_list_is_skipped() {
        let body = br#"{"metadata":{},"items":[{"apiVersion":"liken.sh/v1alpha1","kind":"Cluster",
            "metadata":{"name":"c"},"spec":{"endpoint":"https://x","leaders":["a"]}}]}"#;
        let list = decode_list::<Machine>(body, "GET /machines").unwrap();
        assert!(list.items.is_empty());
        assert_eq!(list.skipped.len(), 1);
        assert!(list.skipped[0].message.contains("Cluster"), "{list:?}");
        assert!(decode_list::<Machine>(b"not json", "GET /machines").is_err());
    }

    #[test]
    fn one_bad_item_is_named_with_its_field_and_the_rest_decode() {
        let body = br#"{"metadata":{"resourceVersion":"40"},"items":[
            {"apiVersion":"liken.sh/v1alpha1","kind":"Machine","metadata":{"name":"a","resourceVersion":"31"},"spec":{}},
            {"apiVersion":"liken.sh/v1alpha1","kind":"Machine","metadata":{"name":"b","resourceVersion":"32"},
             "spec":{},"status":{"phase":"Hibernating"}},
            {"apiVersion":"liken.sh/v1alpha1","kind":"Machine","metadata":{"name":"c","resourceVersion":"33"},
             "spec":{},"status":{"release":{"running":"2026.7.1"}}},
            {"apiVersion":"liken.sh/v1alpha1","kind":"Machine","metadata":{"name":"d","resourceVersion":"34"},"spec":{}}
        ]}"#;
        let list = decode_list::<Machine>(body, "GET /machines").unwrap();
        let names: Vec<&str> = list.items.iter().map(|m| m.name()).collect();
        assert_eq!(names, ["a", "d"]);
        assert_eq!(list.resource_version, "40");
        assert_eq!(list.skipped.len(), 2);
        let b = &list.skipped[0];
        assert_eq!((b.key.as_str(), b.resource_version.as_str()), ("b", "32"));
        assert!(b.message.starts_with("status.phase: "), "{}", b.message);
        assert!(b.message.contains("Hibernating"), "{}", b.message);
        let c = &list.skipped[1];
        assert!(
            c.message.starts_with("status.release.running: "),
            "{}",
            c.message
        );
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
