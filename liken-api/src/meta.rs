//! Object metadata: the four fields of `metav1.ObjectMeta` liken uses.
//!
//! liken redeclares the slice it needs rather than the whole of
//! `ObjectMeta`. The narrow copy is what makes strict parsing mean
//! something: a hand-written manifest that carries `labels` or
//! `ownerReferences` is refused instead of silently losing them. Objects
//! read back from the API server carry much more (creationTimestamp,
//! managedFields); the wire decoder lets those pass and they are not kept.
//!
//! Operators that render a canonical document build its metadata from the
//! name alone ([`ObjectMeta::named`]), so annotations, which carry one-shot
//! requests, never change a staged document's hash.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The group and version every liken document declares, and the URL
/// segment of its API: `/apis/liken.sh/v1alpha1/machines`.
pub const API_VERSION: &str = "liken.sh/v1alpha1";

/// The API group alone.
pub const GROUP: &str = "liken.sh";

/// The version within [`GROUP`].
pub const GROUP_VERSION: &str = "v1alpha1";

/// The metadata liken reads and writes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// The object's name, unique among objects of its kind.
    pub name: String,
    /// The identity of this instance; an object deleted and made again
    /// under the same name has a new uid, so an owner reference to it is
    /// not inherited by the newcomer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The server's optimistic-concurrency token: sent back on a write to
    /// refuse it if someone else wrote first, and on a watch to resume.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// Counts spec changes; the server raises it on spec writes only.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub generation: i64,
    /// One-shot requests and other signals that are not desired state.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl ObjectMeta {
    /// Metadata holding only a name, as canonical documents use.
    pub fn named(name: impl Into<String>) -> ObjectMeta {
        ObjectMeta {
            name: name.into(),
            ..ObjectMeta::default()
        }
    }

    /// The value of one annotation, if set.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }
}

/// A kind of liken document: the `kind` it declares and how to read the
/// `apiVersion`/`kind` pair it carries. The decoders use this to refuse a
/// Cluster handed in where a Machine belongs.
pub trait Kind {
    /// The `kind` field's value.
    const KIND: &'static str;
    /// The `apiVersion` this document carries.
    fn api_version(&self) -> &str;
    /// The `kind` this document carries.
    fn kind(&self) -> &str;
}

/// Name-based validity for a DNS-1123 subdomain, the rule Kubernetes
/// applies to most object names: lower-case alphanumerics, '-' and '.',
/// starting and ending alphanumeric, at most 253 characters.
pub fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty() && name.len() <= 253 && name.split('.').all(is_dns_label_part)
}

/// A DNS-1123 label: as a subdomain but without dots, at most 63.
pub fn is_dns_label(name: &str) -> bool {
    name.len() <= 63 && is_dns_label_part(name)
}

fn is_dns_label_part(part: &str) -> bool {
    let b = part.as_bytes();
    let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    matches!((b.first(), b.last()), (Some(f), Some(l)) if edge(f) && edge(l))
        && b.iter().all(|c| edge(c) || *c == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_dns_label("node-1"));
        assert!(!is_dns_label("Node-1"));
        assert!(!is_dns_label("-node"));
        assert!(!is_dns_label("node."));
        assert!(!is_dns_label(""));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain("rack1.node-1"));
        assert!(!is_dns_subdomain("rack1..node"));
    }

    #[test]
    fn empty_fields_are_left_out_on_the_wire() {
        let json = serde_json::to_string(&ObjectMeta::named("a")).unwrap();
        assert_eq!(json, r#"{"name":"a"}"#);
    }
}
