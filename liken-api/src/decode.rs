//! The two decoders: strict for what people write, wire for what the API
//! server returns.
//!
//! Both produce the same types. They differ in what they forgive:
//!
//! - [`strict`] reads a hand-written YAML manifest. Every field must be one
//!   liken knows; an unknown one (a typo, `labels`, `ownerReferences`)
//!   is an error naming the field's full path and the file, because a
//!   field silently dropped is a setting the person thinks they made. The
//!   `apiVersion` and `kind` must be right, and the document must pass its
//!   semantic checks ([`Validate`]).
//! - [`wire`] reads JSON from the API server, which adds metadata liken
//!   does not model (creationTimestamp, managedFields, labels set by other
//!   tools) and may carry fields from a newer CRD. Those are tolerated and
//!   dropped; the kind is still checked so a wrong URL cannot pass one
//!   object off as another.
//!
//! Unknown fields are found with `serde_ignored`, which reports the path
//! of every key a `Deserialize` impl skipped. That keeps one set of types
//! rather than a strict copy and a lenient copy that could drift apart.

use std::fmt;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::meta::{API_VERSION, Kind};
use crate::validate::{Problem, Validate};

/// Why a document was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The text is not valid YAML or JSON, or a field has the wrong type.
    Syntax {
        /// The file or source the text came from.
        origin: String,
        /// The parser's message, with its line and column.
        message: String,
    },
    /// Fields liken does not know.
    UnknownFields {
        /// The file or source.
        origin: String,
        /// The document kind being read.
        kind: &'static str,
        /// The full path of each unknown field.
        fields: Vec<String>,
    },
    /// apiVersion is missing or not liken's.
    ApiVersion {
        /// The file or source.
        origin: String,
        /// What the document declared (empty when absent).
        found: String,
    },
    /// kind is missing or not the one expected here.
    Kind {
        /// The file or source.
        origin: String,
        /// The kind this reader expects.
        expected: &'static str,
        /// What the document declared (empty when absent).
        found: String,
    },
    /// The document parsed but does not make sense.
    Invalid {
        /// The file or source.
        origin: String,
        /// The document kind.
        kind: &'static str,
        /// Each problem, with its field.
        problems: Vec<Problem>,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Syntax { origin, message } => write!(f, "{origin}: {message}"),
            DecodeError::UnknownFields {
                origin,
                kind,
                fields,
            } => {
                let list: Vec<String> = fields.iter().map(|p| format!("`{p}`")).collect();
                let (noun, it) = if fields.len() == 1 {
                    ("field", "it")
                } else {
                    ("fields", "them")
                };
                write!(
                    f,
                    "{origin}: unknown {noun} {}: a {kind} has no such {noun}; \
                     remove {it} or correct the spelling",
                    list.join(", ")
                )
            }
            DecodeError::ApiVersion { origin, found } if found.is_empty() => write!(
                f,
                "{origin}: no apiVersion; liken documents begin with apiVersion: {API_VERSION}"
            ),
            DecodeError::ApiVersion { origin, found } => write!(
                f,
                "{origin}: apiVersion is {found:?}, but liken documents declare apiVersion: {API_VERSION}"
            ),
            DecodeError::Kind {
                origin,
                expected,
                found,
            } if found.is_empty() => write!(
                f,
                "{origin}: no kind; this file should hold a {expected}, so add kind: {expected}"
            ),
            DecodeError::Kind {
                origin,
                expected,
                found,
            } => write!(
                f,
                "{origin}: kind is {found:?}, but a {expected} belongs here"
            ),
            DecodeError::Invalid {
                origin,
                kind,
                problems,
            } => {
                write!(f, "{origin}: this {kind} is not valid:")?;
                for p in problems {
                    write!(f, "\n  {p}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// Just enough of any document to check what it claims to be.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeHeader {
    #[serde(default)]
    api_version: Option<HeaderText>,
    #[serde(default)]
    kind: Option<HeaderText>,
}

/// What a header field holds, as text for a message: a scalar as
/// written, a list or mapping by what it is. Its own small visitor
/// rather than `serde_yaml::Value`, whose decoder and YAML writer (to
/// show a non-string) would otherwise be in every binary that reads
/// YAML, PID 1 included.
struct HeaderText(String);

impl<'de> Deserialize<'de> for HeaderText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<HeaderText, D::Error> {
        use serde::de::{EnumAccess, IgnoredAny, MapAccess, SeqAccess, VariantAccess, Visitor};
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = HeaderText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E>(self, v: &str) -> Result<HeaderText, E> {
                Ok(HeaderText(v.to_owned()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<HeaderText, E> {
                Ok(HeaderText(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<HeaderText, E> {
                Ok(HeaderText(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<HeaderText, E> {
                Ok(HeaderText(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<HeaderText, E> {
                Ok(HeaderText(v.to_string()))
            }
            fn visit_unit<E>(self) -> Result<HeaderText, E> {
                Ok(HeaderText(String::new()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<HeaderText, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(HeaderText("a list".to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HeaderText, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(HeaderText("a mapping".to_owned()))
            }
            // YAML's tagged values (`!tag value`).
            fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<HeaderText, A::Error> {
                let (tag, value) = data.variant::<String>()?;
                value.newtype_variant::<IgnoredAny>()?;
                Ok(HeaderText(format!("a value tagged !{tag}")))
            }
        }
        d.deserialize_any(Text)
    }
}

fn scalar_text(v: Option<HeaderText>) -> String {
    v.map(|t| t.0).unwrap_or_default()
}

fn check_header(
    origin: &str,
    expected: &'static str,
    api_version: String,
    kind: String,
) -> Result<(), DecodeError> {
    if api_version != API_VERSION {
        return Err(DecodeError::ApiVersion {
            origin: origin.to_owned(),
            found: api_version,
        });
    }
    if kind != expected {
        return Err(DecodeError::Kind {
            origin: origin.to_owned(),
            expected,
            found: kind,
        });
    }
    Ok(())
}

/// Formats a serde_ignored path the way validation problems name fields:
/// `spec.network.interfaces[0].gateway`.
fn field_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", field_path(parent)),
        Path::Map { parent, key } => {
            let head = field_path(parent);
            if head.is_empty() {
                key.clone()
            } else {
                format!("{head}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => field_path(parent),
    }
}

/// Reads one hand-written YAML document of kind `T` from `text`, which
/// came from `origin` (a file path, for messages).
// Never inlined: each document type gets one copy of this body instead
// of one per call site, about 0.3 kB of liken-init's budget.
#[inline(never)]
pub fn strict<T>(text: &str, origin: &str) -> Result<T, DecodeError>
where
    T: DeserializeOwned + Kind + Validate,
{
    yaml_header(text, origin, T::KIND)?;
    let de = serde_yaml::Deserializer::from_str(text);
    finish(de, origin, |e| yaml_syntax(origin, e))
}

/// The checks before a YAML document is decoded, which do not depend on
/// its type: not empty, and the header names the kind expected. The
/// header first, so a Cluster handed in as a Machine is reported as the
/// wrong kind rather than as a dozen unknown fields. Out of line so it
/// exists once rather than in every kind's decoder.
#[inline(never)]
fn yaml_header(text: &str, origin: &str, kind: &'static str) -> Result<(), DecodeError> {
    if text.trim().is_empty() {
        return Err(DecodeError::Syntax {
            origin: origin.to_owned(),
            message: format!("the file is empty; it should hold a {kind}"),
        });
    }
    let header: TypeHeader = serde_yaml::from_str(text).map_err(|e| yaml_syntax(origin, e))?;
    check_header(
        origin,
        kind,
        scalar_text(header.api_version),
        scalar_text(header.kind),
    )
}

fn yaml_syntax(origin: &str, e: serde_yaml::Error) -> DecodeError {
    DecodeError::Syntax {
        origin: origin.to_owned(),
        message: e.to_string(),
    }
}

/// The strict decoder's second half, whatever the syntax: decode while
/// collecting every skipped field, refuse if there was one, then run the
/// document's own checks.
fn finish<'de, T, D>(
    de: D,
    origin: &str,
    syntax: impl Fn(D::Error) -> DecodeError,
) -> Result<T, DecodeError>
where
    T: DeserializeOwned + Kind + Validate,
    D: serde::Deserializer<'de>,
{
    let mut unknown = Vec::new();
    // One callback type for every document kind, so the decoders of the
    // types they share (metadata, conditions, strings, lists) are built
    // once per syntax rather than once per kind.
    let mut record = |path: serde_ignored::Path<'_>| unknown.push(field_path(&path));
    let callback: &mut dyn FnMut(serde_ignored::Path<'_>) = &mut record;
    let doc: T = serde_ignored::deserialize(de, callback).map_err(syntax)?;
    if !unknown.is_empty() {
        return Err(DecodeError::UnknownFields {
            origin: origin.to_owned(),
            kind: T::KIND,
            fields: unknown,
        });
    }
    let problems = doc.validate();
    if !problems.is_empty() {
        return Err(DecodeError::Invalid {
            origin: origin.to_owned(),
            kind: T::KIND,
            problems,
        });
    }
    Ok(doc)
}

/// Reads one object of kind `T` as the API server returns it (JSON),
/// tolerating fields liken does not model. `origin` names the request.
///
/// The kind is checked when present; an object nested in a LIST may omit
/// it, so an absent kind is accepted.
pub fn wire<T>(bytes: &[u8], origin: &str) -> Result<T, DecodeError>
where
    T: DeserializeOwned + Kind,
{
    let doc: T = serde_json::from_slice(bytes).map_err(|e| DecodeError::Syntax {
        origin: origin.to_owned(),
        message: e.to_string(),
    })?;
    check_wire_kind(&doc, origin)?;
    Ok(doc)
}

/// As [`wire`], from an already parsed JSON value (a watch event's
/// object, an item of a LIST).
pub fn wire_value<T>(value: serde_json::Value, origin: &str) -> Result<T, DecodeError>
where
    T: DeserializeOwned + Kind,
{
    let doc: T = serde_json::from_value(value).map_err(|e| DecodeError::Syntax {
        origin: origin.to_owned(),
        message: e.to_string(),
    })?;
    check_wire_kind(&doc, origin)?;
    Ok(doc)
}

fn check_wire_kind<T: Kind>(doc: &T, origin: &str) -> Result<(), DecodeError> {
    let (api_version, kind) = (doc.api_version(), doc.kind());
    if kind.is_empty() && api_version.is_empty() {
        return Ok(());
    }
    check_header(origin, T::KIND, api_version.to_owned(), kind.to_owned())
}

/// Serializes a document as YAML, as the CLI writes manifests and the
/// tests round-trip them.
pub fn to_yaml<T: serde::Serialize>(doc: &T) -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(doc)
}
