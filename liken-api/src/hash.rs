//! The canonical document hash.
//!
//! A staged change is named by the SHA-256 of its document, and a Manual
//! approval names that hash. For the name to mean anything, the same
//! document must always hash the same, whatever map order, whitespace or
//! serializer feature flags produced it. So the hash is taken over a
//! canonical JSON form defined here rather than over whatever
//! `serde_json::to_vec` happens to write: object keys sorted by their
//! UTF-8 bytes, no insignificant whitespace, strings escaped as
//! serde_json escapes them, integers in decimal. Sorting is done here
//! explicitly so a dependency enabling serde_json's `preserve_order`
//! elsewhere in the workspace cannot change a single hash.
//!
//! The documents themselves decide what goes into the hash (see
//! `Machine::canonical` and `Cluster::canonical`): metadata is rebuilt
//! from the name alone and status is dropped, so annotations and
//! observations never re-stage a change.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::digest::Sha256Hex;

/// Writes `value` in the canonical form into `out`.
pub fn canonical_json(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            sort_by_key_bytes(&mut entries);
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(&Value::String(k.clone()), out);
                out.push(b':');
                canonical_json(v, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical_json(v, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

/// Sorts an object's entries by their keys' UTF-8 bytes. An insertion
/// sort: serde_json's default map hands the keys over in this order
/// already, which makes it one pass, and a map is a few dozen keys at
/// most; std's sort would be one more copy of about 5 kB in liken-init,
/// which has a size budget (images/build-boot.sh).
fn sort_by_key_bytes(entries: &mut [(&String, &Value)]) {
    for i in 1..entries.len() {
        let mut j = i;
        while j > 0 && entries[j - 1].0.as_bytes() > entries[j].0.as_bytes() {
            entries.swap(j - 1, j);
            j -= 1;
        }
    }
}

fn write_scalar(v: &Value, out: &mut Vec<u8>) {
    // Scalars have exactly one serde_json spelling; serializing into a
    // Vec cannot fail.
    if serde_json::to_writer(&mut *out, v).is_err() {
        out.extend_from_slice(b"null");
    }
}

/// The canonical bytes of any serializable value.
pub fn canonical_bytes<T: Serialize>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let v = serde_json::to_value(value)?;
    let mut out = Vec::new();
    canonical_json(&v, &mut out);
    Ok(out)
}

/// SHA-256 over the canonical bytes of `value`.
pub fn document_hash<T: Serialize>(value: &T) -> Result<Sha256Hex, serde_json::Error> {
    Ok(sha256(&canonical_bytes(value)?))
}

/// SHA-256 of a byte string.
pub fn sha256(bytes: &[u8]) -> Sha256Hex {
    Sha256Hex::from_bytes(Sha256::digest(bytes).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "é\n"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"é\n","y":[1,2]},"b":1}"#).unwrap();
        let mut out = Vec::new();
        canonical_json(&a, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a":{"x":"é\n","y":[1,2]},"b":1}"#
        );
        assert_eq!(document_hash(&a).unwrap(), document_hash(&b).unwrap());
    }

    #[test]
    fn entries_sort_by_their_keys_bytes_from_any_order() {
        let a = Value::Null;
        let (k1, k2, k3, k4) = (
            "b".to_owned(),
            "a".to_owned(),
            "é".to_owned(),
            "Z".to_owned(),
        );
        let mut entries = vec![(&k1, &a), (&k3, &a), (&k2, &a), (&k4, &a)];
        sort_by_key_bytes(&mut entries);
        let keys: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(keys, ["Z", "a", "b", "é"]);
    }

    #[test]
    fn array_order_and_values_do_matter() {
        let h = |v: Value| document_hash(&v).unwrap();
        assert_ne!(h(json!([1, 2])), h(json!([2, 1])));
        assert_ne!(h(json!({"a": "1"})), h(json!({"a": 1})));
    }

    #[test]
    fn known_answer() {
        // sha256 of the two bytes `{}`, as `printf '{}' | sha256sum` prints.
        assert_eq!(
            document_hash(&json!({})).unwrap().as_str(),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
