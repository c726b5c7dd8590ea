//! Release versions: `yyyy.mm.dd-nnn`.
//!
//! A version says which day a release was cut and its serial within that
//! day, nothing more. The release document's components record what is
//! inside it (kernel, k3s), so there is no semver promise to encode.
//! Versions are immutable: a bad release is superseded by the next serial,
//! never rebuilt under the same name.
//!
//! Every field is zero-padded to a fixed width, so byte order is release
//! order and no numeric parse is needed to sort; the property test below
//! holds the two to agreement. The shape is shared with the CRDs' pattern
//! ([`VERSION_PATTERN`]); the calendar check is what the pattern cannot
//! express (2026.02.30 never happened), so it runs where versions are
//! authored and decoded.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::time::is_real_date;

/// The version grammar as an OpenAPI/ECMA regular expression, written
/// into the CRDs so the API server refuses a malformed version itself.
pub const VERSION_PATTERN: &str = r"^[0-9]{4}\.[0-9]{2}\.[0-9]{2}-[0-9]{3}$";

/// A version known to match the grammar and to name a real date.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Version(String);

/// Why a string is not a version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionError {
    /// The text does not have the `yyyy.mm.dd-nnn` shape.
    Shape(String),
    /// The shape is right but the date is not on the calendar.
    Date(String),
}

impl fmt::Display for VersionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VersionError::Shape(v) => write!(
                f,
                "version {v:?} is not yyyy.mm.dd-nnn (for example 2026.07.11-001)"
            ),
            VersionError::Date(v) => write!(f, "version {v:?} does not name a real date"),
        }
    }
}

impl std::error::Error for VersionError {}

fn has_shape(b: &[u8]) -> bool {
    const SHAPE: &[u8; 14] = b"dddd.dd.dd-ddd";
    b.len() == SHAPE.len()
        && b.iter().zip(SHAPE).all(|(&c, &want)| match want {
            b'd' => c.is_ascii_digit(),
            other => c == other,
        })
}

fn number(b: &[u8]) -> u32 {
    b.iter()
        .fold(0, |n, &d| n * 10 + u32::from(d.wrapping_sub(b'0')))
}

impl Version {
    /// Checks `text` against the grammar and the calendar.
    pub fn parse(text: &str) -> Result<Version, VersionError> {
        let b = text.as_bytes();
        if !has_shape(b) {
            return Err(VersionError::Shape(text.to_owned()));
        }
        let (year, month, day) = (number(&b[0..4]), number(&b[5..7]), number(&b[8..10]));
        if !is_real_date(i64::from(year), month, day) {
            return Err(VersionError::Date(text.to_owned()));
        }
        Ok(Version(text.to_owned()))
    }

    /// The version as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The release date as (year, month, day).
    pub fn date(&self) -> (u32, u32, u32) {
        let b = self.0.as_bytes();
        (number(&b[0..4]), number(&b[5..7]), number(&b[8..10]))
    }

    /// The serial within the day.
    pub fn serial(&self) -> u32 {
        number(&self.0.as_bytes()[11..14])
    }
}

impl FromStr for Version {
    type Err = VersionError;

    fn from_str(s: &str) -> Result<Version, VersionError> {
        Version::parse(s)
    }
}

impl TryFrom<String> for Version {
    type Error = VersionError;

    fn try_from(s: String) -> Result<Version, VersionError> {
        Version::parse(&s)
    }
}

impl From<Version> for String {
    fn from(v: Version) -> String {
        v.0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Version {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The newest of a set of versions, if any.
pub fn newest<'a>(versions: impl IntoIterator<Item = &'a Version>) -> Option<&'a Version> {
    versions.into_iter().max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_real_versions() {
        for v in ["2026.07.11-001", "2024.02.29-999", "2000.02.29-000"] {
            let parsed = Version::parse(v).unwrap();
            assert_eq!(parsed.as_str(), v);
        }
        let v = Version::parse("2026.07.11-042").unwrap();
        assert_eq!(v.date(), (2026, 7, 11));
        assert_eq!(v.serial(), 42);
    }

    #[test]
    fn refuses_the_wrong_shape_with_an_example() {
        for v in [
            "",
            "2026.7.11-001",
            "2026.07.11-1",
            "2026.07.11",
            "2026-07-11-001",
            "v2026.07.11-001",
            "2026.07.11-001 ",
            "2026.07.11-0001",
            "２026.07.11-001",
        ] {
            let err = Version::parse(v).unwrap_err();
            assert_eq!(err, VersionError::Shape(v.to_owned()));
            assert!(err.to_string().contains("for example 2026.07.11-001"));
        }
    }

    #[test]
    fn refuses_dates_that_never_happened() {
        for v in [
            "2026.02.29-001",
            "2026.02.30-001",
            "2026.13.01-001",
            "2026.00.10-001",
            "2026.04.31-001",
        ] {
            let err = Version::parse(v).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("version {v:?} does not name a real date")
            );
        }
    }

    #[test]
    fn decodes_through_serde_with_the_same_checks() {
        let v: Version = serde_json::from_str("\"2026.07.11-001\"").unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), "\"2026.07.11-001\"");
        let err = serde_json::from_str::<Version>("\"2026.02.30-001\"").unwrap_err();
        assert!(
            err.to_string().contains("does not name a real date"),
            "{err}"
        );
    }

    #[test]
    fn newest_picks_the_latest() {
        let vs: Vec<Version> = ["2026.07.11-002", "2026.10.01-001", "2026.07.11-010"]
            .iter()
            .map(|s| Version::parse(s).unwrap())
            .collect();
        assert_eq!(newest(&vs).unwrap().as_str(), "2026.10.01-001");
        assert_eq!(newest(&[]), None);
    }

    fn real_date() -> impl Strategy<Value = (u32, u32, u32, u32)> {
        (0u32..10_000, 1u32..=12, 1u32..=31, 0u32..1000)
            .prop_filter("a real date", |&(y, m, d, _)| {
                is_real_date(i64::from(y), m, d)
            })
    }

    proptest! {
        #[test]
        fn string_order_is_numeric_order(a in real_date(), b in real_date()) {
            let fmt = |(y, m, d, n): (u32, u32, u32, u32)| {
                Version::parse(&format!("{y:04}.{m:02}.{d:02}-{n:03}")).unwrap()
            };
            let (va, vb) = (fmt(a), fmt(b));
            prop_assert_eq!(va.cmp(&vb), a.cmp(&b));
            prop_assert_eq!((va.date(), va.serial()), ((a.0, a.1, a.2), a.3));
        }

        #[test]
        fn never_panics_on_arbitrary_text(s in "\\PC{0,20}") {
            let _ = Version::parse(&s);
        }
    }
}
