//! Content digests and the file names they protect.
//!
//! Two spellings exist on purpose. The Cluster's catalog pins a release
//! document as `sha256:<hex>` (the OCI form, so the algorithm travels with
//! the value); release.yaml lists each artifact's bare hex under a field
//! already named `sha256`. Both are validated newtypes: once parsed, a
//! digest is 64 lower-case hex digits and nothing else.
//!
//! [`FileName`] is the other half of "no path from a URL may escape its
//! directory": an artifact's file is a single plain path component, so
//! joining it onto a release directory cannot climb out of it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A SHA-256 digest as 64 lower-case hex digits.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Sha256Hex(String);

/// A digest with its algorithm: `sha256:<64 hex>`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(Sha256Hex);

/// A plain file name: one path component, no separators, not `.` or `..`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct FileName(String);

/// Why a digest or file name was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DigestError {
    /// Not 64 lower-case hex digits.
    Hex(String),
    /// Missing the `sha256:` prefix.
    Prefix(String),
    /// A file name that is not a single plain component.
    FileName(String),
}

impl fmt::Display for DigestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DigestError::Hex(s) => write!(
                f,
                "digest {s:?} is not 64 lower-case hex digits (a SHA-256, as sha256sum prints it)"
            ),
            DigestError::Prefix(s) => write!(
                f,
                "digest {s:?} must be written sha256:<64 hex digits>, for example sha256:{}",
                "0".repeat(64)
            ),
            DigestError::FileName(s) => write!(
                f,
                "file name {s:?} must be a plain name in the release directory \
                 (no '/', no '\\', not '.' or '..', not empty)"
            ),
        }
    }
}

impl std::error::Error for DigestError {}

/// Lower-case hex of a byte string.
pub fn to_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

impl Sha256Hex {
    /// Checks that `text` is 64 lower-case hex digits.
    pub fn parse(text: &str) -> Result<Sha256Hex, DigestError> {
        let ok = text.len() == 64
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if ok {
            Ok(Sha256Hex(text.to_owned()))
        } else {
            Err(DigestError::Hex(text.to_owned()))
        }
    }

    /// The digest of 32 raw bytes, as a hasher returns them.
    pub fn from_bytes(bytes: [u8; 32]) -> Sha256Hex {
        Sha256Hex(to_hex(&bytes))
    }

    /// The hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first twelve hex digits, the form annotations name.
    pub fn short(&self) -> &str {
        self.0.get(..12).unwrap_or(&self.0)
    }
}

impl Digest {
    /// Parses `sha256:<hex>`.
    pub fn parse(text: &str) -> Result<Digest, DigestError> {
        let hex = text
            .strip_prefix("sha256:")
            .ok_or_else(|| DigestError::Prefix(text.to_owned()))?;
        Sha256Hex::parse(hex).map(Digest)
    }

    /// The hex part.
    pub fn hex(&self) -> &Sha256Hex {
        &self.0
    }
}

impl From<Sha256Hex> for Digest {
    fn from(hex: Sha256Hex) -> Digest {
        Digest(hex)
    }
}

impl FileName {
    /// Checks that `text` is one plain path component.
    pub fn parse(text: &str) -> Result<FileName, DigestError> {
        let ok = !text.is_empty()
            && text != "."
            && text != ".."
            && text.len() <= 255
            && !text
                .bytes()
                .any(|b| b == b'/' || b == b'\\' || b == 0 || b.is_ascii_control());
        if ok {
            Ok(FileName(text.to_owned()))
        } else {
            Err(DigestError::FileName(text.to_owned()))
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

macro_rules! string_newtype {
    ($t:ty) => {
        impl TryFrom<String> for $t {
            type Error = DigestError;
            fn try_from(s: String) -> Result<$t, DigestError> {
                <$t>::parse(&s)
            }
        }
        impl std::str::FromStr for $t {
            type Err = DigestError;
            fn from_str(s: &str) -> Result<$t, DigestError> {
                <$t>::parse(s)
            }
        }
    };
}
string_newtype!(Sha256Hex);
string_newtype!(Digest);
string_newtype!(FileName);

impl From<Sha256Hex> for String {
    fn from(d: Sha256Hex) -> String {
        d.0
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> String {
        d.to_string()
    }
}

impl From<FileName> for String {
    fn from(f: FileName) -> String {
        f.0
    }
}

impl fmt::Display for Sha256Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

impl fmt::Display for FileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The OpenAPI pattern of a [`Digest`].
pub const DIGEST_PATTERN: &str = "^sha256:[0-9a-f]{64}$";

/// The OpenAPI pattern of a [`Sha256Hex`].
pub const SHA256_PATTERN: &str = "^[0-9a-f]{64}$";

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn digests() {
        let d = Digest::parse(&format!("sha256:{HEX}")).unwrap();
        assert_eq!(d.hex().as_str(), HEX);
        assert_eq!(d.to_string(), format!("sha256:{HEX}"));
        assert_eq!(d.hex().short(), "e3b0c44298fc");
        assert!(matches!(Digest::parse(HEX), Err(DigestError::Prefix(_))));
        assert!(matches!(
            Digest::parse(&format!("sha256:{}", HEX.to_uppercase())),
            Err(DigestError::Hex(_))
        ));
        assert!(Sha256Hex::parse(&HEX[1..]).is_err());
        assert_eq!(to_hex(&[0x00, 0xab, 0xff]), "00abff");
    }

    #[test]
    fn file_names_cannot_escape() {
        for ok in [
            "vmlinuz",
            "system.squashfs",
            "boot.cpio",
            "..hidden",
            "a..b",
        ] {
            FileName::parse(ok).unwrap();
        }
        for bad in [
            "",
            ".",
            "..",
            "../etc/passwd",
            "a/b",
            "/abs",
            "a\\b",
            "a\0b",
            "a\nb",
        ] {
            let err = FileName::parse(bad).unwrap_err();
            assert!(err.to_string().contains("plain name"), "{bad:?}");
        }
    }
}
