//! Release signing: the key, signature, trust-root and rollback-permit
//! documents, and the one ed25519 check every reader runs.
//!
//! A release is trusted because a key the fleet trusts signed the exact
//! bytes of its release.yaml, not because its digest sits in a catalog
//! (whoever can write the catalog could otherwise choose what every
//! machine boots). The pieces:
//!
//! - [`SigningKey`] (private, 0600, on the publisher's workstation) and
//!   [`ReleaseKey`] (its public half), both written by `liken keygen`.
//!   A key is named by its [`KeyId`]: the first 12 hex digits of the
//!   SHA-256 of the 32-byte public key.
//! - [`DetachedSignature`]: `<file>.sig` beside a signed file
//!   (release.yaml, channel.yaml, trust.yaml, a rollback permit): the
//!   key id, the SHA-256 of the signed bytes and the ed25519 signature
//!   over those exact bytes. The digest is not what is signed; it lets a
//!   reader tell "the file changed after it was signed" from "this is
//!   not the key's signature".
//! - [`TrustRoot`]: `trust.yaml` in the deployment layer, the keys this
//!   fleet accepts (several, for rotation).
//! - [`RollbackPermit`]: the only thing that lets a machine take a
//!   release older than its floor (the newest release it ever blessed).
//!
//! Every document is YAML read with the strict decoder, so a typo is an
//! error naming the field. This module does no I/O: init links it.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

use crate::digest::{Sha256Hex, to_hex};
use crate::meta::{API_VERSION, Kind, is_dns_label};
use crate::time::Time;
use crate::validate::{Problem, Problems, Validate};
use crate::version::Version;

/// The suffix of a detached signature: `release.yaml.sig`.
pub const SIGNATURE_SUFFIX: &str = ".sig";
/// The trust root's file name, in the deployment directory and in the
/// layer (`/etc/liken/trust.yaml`).
pub const TRUST_FILE: &str = "trust.yaml";
/// The marker `liken layer -unsigned` packs instead of a trust root: its
/// presence is the only thing that lets init write unsigned releases.
pub const UNSIGNED_FILE: &str = "unsigned";
/// `liken keygen`'s private key file.
pub const SIGNING_KEY_FILE: &str = "release.key";
/// `liken keygen`'s public key file.
pub const RELEASE_KEY_FILE: &str = "release.pub";
/// The largest signed document read (release.yaml is a few kB).
pub const MAX_SIGNED: u64 = 1 << 20;
/// The largest signature, trust root or permit read.
pub const MAX_SMALL_DOCUMENT: u64 = 64 * 1024;
/// How many hex digits of the public key's SHA-256 name a key.
pub const KEY_ID_LEN: usize = 12;

/// The name of `file`'s detached signature.
pub fn signature_name(file: &str) -> String {
    format!("{file}{SIGNATURE_SUFFIX}")
}

// ---------------------------------------------------------------------
// Scalars.

/// Why a key id or hex field could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HexError {
    what: &'static str,
    len: usize,
    text: String,
}

impl fmt::Display for HexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: String = self.text.chars().take(24).collect();
        write!(
            f,
            "{shown:?} is not a {what} ({len} lower-case hex digits); copy it from the file \
             `liken keygen` or `liken sign` wrote",
            what = self.what,
            len = self.len
        )
    }
}

impl std::error::Error for HexError {}

fn parse_hex<const N: usize>(text: &str, what: &'static str) -> Result<[u8; N], HexError> {
    let err = || HexError {
        what,
        len: N.saturating_mul(2),
        text: text.to_owned(),
    };
    let bytes = text.as_bytes();
    if bytes.len() != N.saturating_mul(2) {
        return Err(err());
    }
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b.wrapping_sub(b'0')),
        b'a'..=b'f' => Some(b.wrapping_sub(b'a').wrapping_add(10)),
        _ => None,
    };
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        let (Some(&hi), Some(&lo)) = (pair.first(), pair.get(1)) else {
            return Err(err());
        };
        let (Some(hi), Some(lo)) = (digit(hi), digit(lo)) else {
            return Err(err());
        };
        *o = (hi << 4) | lo;
    }
    Ok(out)
}

/// A key's name: the first 12 hex digits of the SHA-256 of its public
/// key. Short enough to say aloud, long enough that two keys of one
/// fleet never share one by accident (a forged key with a chosen id
/// gains nothing: the signature is checked against the trusted key).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(String);

impl KeyId {
    /// Checks that `text` is 12 lower-case hex digits.
    pub fn parse(text: &str) -> Result<KeyId, HexError> {
        parse_hex::<6>(text, "key id")?;
        Ok(KeyId(text.to_owned()))
    }

    /// The id of a public key.
    pub fn of(public_key: &PublicKey) -> KeyId {
        let digest = to_hex(&Sha256::digest(public_key.0));
        KeyId(digest.chars().take(KEY_ID_LEN).collect())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An ed25519 public key (32 bytes, written as hex).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PublicKey(pub [u8; 32]);

/// An ed25519 signature (64 bytes, written as hex).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignatureBytes(pub [u8; 64]);

/// The 32-byte seed an ed25519 key pair is made from (written as hex).
/// Its Debug form hides it, so a key never reaches a log.
#[derive(Clone, PartialEq, Eq)]
pub struct Seed(pub [u8; 32]);

impl fmt::Debug for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Seed(..)")
    }
}

macro_rules! hex_serde {
    ($t:ident, $n:expr, $what:expr) => {
        impl $t {
            /// Parses the hex form.
            pub fn parse(text: &str) -> Result<$t, HexError> {
                parse_hex::<$n>(text, $what).map($t)
            }
            /// The hex form.
            pub fn to_hex(&self) -> String {
                to_hex(&self.0)
            }
        }
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_hex())
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                let text = String::deserialize(d)?;
                $t::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}
hex_serde!(PublicKey, 32, "public key");
hex_serde!(SignatureBytes, 64, "signature");
hex_serde!(Seed, 32, "private key seed");

impl Serialize for KeyId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for KeyId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<KeyId, D::Error> {
        let text = String::deserialize(d)?;
        KeyId::parse(&text).map_err(serde::de::Error::custom)
    }
}

// ---------------------------------------------------------------------
// Documents.

/// `release.key`: a private signing key. Written 0600 by `liken keygen`;
/// it never leaves the publisher's workstation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SigningKey {
    /// Always [`API_VERSION`].
    #[serde(default)]
    pub api_version: String,
    /// Always `SigningKey`.
    #[serde(default)]
    pub kind: String,
    /// The key's id, for people (checked against the seed).
    pub id: KeyId,
    /// The ed25519 seed.
    pub seed: Seed,
}

/// `release.pub`: a public release key, as trust.yaml lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseKey {
    /// Always [`API_VERSION`].
    #[serde(default)]
    pub api_version: String,
    /// Always `ReleaseKey`.
    #[serde(default)]
    pub kind: String,
    /// The key's id (checked against the key).
    pub id: KeyId,
    /// The ed25519 public key.
    pub public_key: PublicKey,
}

/// `<file>.sig`: a detached signature over the exact bytes of `<file>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DetachedSignature {
    /// Always [`API_VERSION`].
    #[serde(default)]
    pub api_version: String,
    /// Always `Signature`.
    #[serde(default)]
    pub kind: String,
    /// The key that signed.
    pub key_id: KeyId,
    /// The SHA-256 of the bytes signed, so a changed file is told apart
    /// from a forged signature.
    pub sha256: Sha256Hex,
    /// ed25519 over the file's bytes.
    pub signature: SignatureBytes,
}

/// `trust.yaml`: the release keys a fleet accepts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrustRoot {
    /// Always [`API_VERSION`].
    #[serde(default)]
    pub api_version: String,
    /// Always `TrustRoot`.
    #[serde(default)]
    pub kind: String,
    /// The trusted keys; any one of them may sign a release.
    pub keys: Vec<TrustedKey>,
}

/// One key of a trust root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrustedKey {
    /// Its id (checked against the key).
    pub id: KeyId,
    /// The ed25519 public key.
    pub public_key: PublicKey,
}

/// A rollback permit: lets the named machines of one cluster take
/// `version` although it is below their floor, until `expires`. Signed
/// like a release (`liken sign -allow-rollback`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollbackPermit {
    /// Always [`API_VERSION`].
    #[serde(default)]
    pub api_version: String,
    /// Always `RollbackPermit`.
    #[serde(default)]
    pub kind: String,
    /// The Cluster whose machines it names.
    pub cluster: String,
    /// The machines it applies to.
    pub machines: Vec<String>,
    /// The release they may go back to.
    pub version: Version,
    /// After this, the permit is void.
    pub expires: Time,
}

macro_rules! kind {
    ($t:ty, $k:expr) => {
        impl Kind for $t {
            const KIND: &'static str = $k;
            fn api_version(&self) -> &str {
                &self.api_version
            }
            fn kind(&self) -> &str {
                &self.kind
            }
        }
    };
}
kind!(SigningKey, "SigningKey");
kind!(ReleaseKey, "ReleaseKey");
kind!(DetachedSignature, "Signature");
kind!(TrustRoot, "TrustRoot");
kind!(RollbackPermit, "RollbackPermit");

fn public_of(seed: &Seed) -> PublicKey {
    let pair = ed25519_compact::KeyPair::from_seed(ed25519_compact::Seed::new(seed.0));
    PublicKey(*pair.pk)
}

fn check_id(p: &mut Problems, field: &str, id: &KeyId, key: &PublicKey) {
    let real = KeyId::of(key);
    if &real != id {
        p.add(
            field,
            format!("{id} is not the id of this key ({real}); the file was edited by hand"),
        );
    }
}

impl Validate for SigningKey {
    fn validate(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        check_id(&mut p, "id", &self.id, &public_of(&self.seed));
        p.0
    }
}

impl Validate for ReleaseKey {
    fn validate(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        check_id(&mut p, "id", &self.id, &self.public_key);
        p.0
    }
}

impl Validate for DetachedSignature {
    fn validate(&self) -> Vec<Problem> {
        Vec::new()
    }
}

impl Validate for TrustRoot {
    fn validate(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        if self.keys.is_empty() {
            p.add(
                "keys",
                "a trust root lists at least one key (`liken trust` writes one from release.pub)",
            );
        }
        for (i, k) in self.keys.iter().enumerate() {
            check_id(&mut p, &format!("keys[{i}].id"), &k.id, &k.public_key);
            if self.keys.iter().take(i).any(|o| o.id == k.id) {
                p.add(
                    format!("keys[{i}].id"),
                    format!("key {} is listed twice", k.id),
                );
            }
        }
        p.0
    }
}

impl Validate for RollbackPermit {
    fn validate(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        if !is_dns_label(&self.cluster) && !crate::meta::is_dns_subdomain(&self.cluster) {
            p.add(
                "cluster",
                format!("{:?} is not a Cluster name", self.cluster),
            );
        }
        if self.machines.is_empty() {
            p.add("machines", "a permit names at least one machine");
        }
        for (i, m) in self.machines.iter().enumerate() {
            if !crate::meta::is_dns_subdomain(m) {
                p.add(
                    format!("machines[{i}]"),
                    format!("{m:?} is not a Machine name"),
                );
            }
        }
        p.0
    }
}

// ---------------------------------------------------------------------
// Making keys and signatures.

/// A new key pair from 32 random bytes (the caller's CSPRNG: this crate
/// does no I/O).
pub fn key_pair(seed: [u8; 32]) -> (SigningKey, ReleaseKey) {
    let seed = Seed(seed);
    let public_key = public_of(&seed);
    let id = KeyId::of(&public_key);
    (
        SigningKey {
            api_version: API_VERSION.to_owned(),
            kind: <SigningKey as Kind>::KIND.to_owned(),
            id: id.clone(),
            seed,
        },
        ReleaseKey {
            api_version: API_VERSION.to_owned(),
            kind: <ReleaseKey as Kind>::KIND.to_owned(),
            id,
            public_key,
        },
    )
}

impl SigningKey {
    /// Its public half.
    pub fn public(&self) -> ReleaseKey {
        key_pair(self.seed.0).1
    }

    /// Signs `bytes` exactly as they are.
    pub fn sign(&self, bytes: &[u8]) -> DetachedSignature {
        let pair = ed25519_compact::KeyPair::from_seed(ed25519_compact::Seed::new(self.seed.0));
        // Deterministic (no noise): the same key and bytes give the same
        // signature, so re-signing an unchanged release changes nothing.
        let sig = pair.sk.sign(bytes, None);
        DetachedSignature {
            api_version: API_VERSION.to_owned(),
            kind: <DetachedSignature as Kind>::KIND.to_owned(),
            key_id: self.id.clone(),
            sha256: crate::hash::sha256(bytes),
            signature: SignatureBytes(*sig),
        }
    }
}

impl TrustRoot {
    /// A trust root of the given keys.
    pub fn new(keys: impl IntoIterator<Item = ReleaseKey>) -> TrustRoot {
        TrustRoot {
            api_version: API_VERSION.to_owned(),
            kind: <TrustRoot as Kind>::KIND.to_owned(),
            keys: keys
                .into_iter()
                .map(|k| TrustedKey {
                    id: k.id,
                    public_key: k.public_key,
                })
                .collect(),
        }
    }

    /// The trusted key ids.
    pub fn ids(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.id.to_string()).collect()
    }

    /// [`TrustRoot::verify`] from a `.sig` file as read: `signature` is
    /// its bytes (`None`: the file does not exist), decoded strictly and
    /// named `origin` in a decoding error. What every reader of a
    /// published signature runs (the channel poller, the download worker,
    /// `liken fetch`).
    pub fn verify_file(
        &self,
        bytes: &[u8],
        signature: Option<&[u8]>,
        origin: &str,
    ) -> Result<KeyId, FileError> {
        let sig = match signature {
            None => None,
            Some(raw) => Some(
                crate::decode::strict::<DetachedSignature>(&String::from_utf8_lossy(raw), origin)
                    .map_err(FileError::Unreadable)?,
            ),
        };
        self.verify(bytes, sig.as_ref()).map_err(FileError::Verify)
    }

    /// Checks that `signature` is a trusted key's signature over exactly
    /// `bytes`; returns the key's id.
    pub fn verify(
        &self,
        bytes: &[u8],
        signature: Option<&DetachedSignature>,
    ) -> Result<KeyId, VerifyError> {
        let sig = signature.ok_or(VerifyError::Unsigned)?;
        let key = self
            .keys
            .iter()
            .find(|k| k.id == sig.key_id)
            .ok_or_else(|| VerifyError::UnknownKey {
                key_id: sig.key_id.clone(),
                trusted: self.ids(),
            })?;
        let got = crate::hash::sha256(bytes);
        if got != sig.sha256 {
            return Err(VerifyError::Changed {
                key_id: sig.key_id.clone(),
                signed: sig.sha256.clone(),
                got,
            });
        }
        let public = ed25519_compact::PublicKey::new(key.public_key.0);
        let ed = ed25519_compact::Signature::new(sig.signature.0);
        public
            .verify(bytes, &ed)
            .map_err(|_| VerifyError::BadSignature {
                key_id: sig.key_id.clone(),
            })?;
        Ok(key.id.clone())
    }
}

impl RollbackPermit {
    /// A permit for `machines` of `cluster` to take `version` until
    /// `expires`.
    pub fn new(cluster: String, machines: Vec<String>, version: Version, expires: Time) -> Self {
        RollbackPermit {
            api_version: API_VERSION.to_owned(),
            kind: <RollbackPermit as Kind>::KIND.to_owned(),
            cluster,
            machines,
            version,
            expires,
        }
    }

    /// Whether the permit lets `machine` of `cluster` take `version` at
    /// `now`.
    pub fn allows(
        &self,
        cluster: &str,
        machine: &str,
        version: &Version,
        now: Time,
    ) -> Result<(), PermitError> {
        if now >= self.expires {
            return Err(PermitError::Expired {
                expires: self.expires,
            });
        }
        if self.cluster != cluster {
            return Err(PermitError::OtherCluster {
                named: self.cluster.clone(),
            });
        }
        if !self.machines.iter().any(|m| m == machine) {
            return Err(PermitError::OtherMachines {
                named: self.machines.clone(),
            });
        }
        if &self.version != version {
            return Err(PermitError::OtherVersion {
                named: self.version.clone(),
            });
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------
// Errors.

/// Why a signature was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VerifyError {
    /// There is no signature.
    Unsigned,
    /// The signing key is not in the trust root.
    UnknownKey {
        /// The key that signed.
        key_id: KeyId,
        /// The keys the trust root holds.
        trusted: Vec<String>,
    },
    /// The bytes are not the ones signed.
    Changed {
        /// The key that signed.
        key_id: KeyId,
        /// The digest the signature names.
        signed: Sha256Hex,
        /// The digest of the bytes at hand.
        got: Sha256Hex,
    },
    /// The signature is not the key's over these bytes.
    BadSignature {
        /// The key the signature claims.
        key_id: KeyId,
    },
}

impl VerifyError {
    /// A short reason, for conditions and tables: `unsigned`,
    /// `unknown-key`, `changed`, `bad-signature`.
    pub fn reason(&self) -> &'static str {
        match self {
            VerifyError::Unsigned => "unsigned",
            VerifyError::UnknownKey { .. } => "unknown-key",
            VerifyError::Changed { .. } => "changed",
            VerifyError::BadSignature { .. } => "bad-signature",
        }
    }
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyError::Unsigned => f.write_str(
                "it has no signature; sign it with a trusted key (`liken sign -key release.key \
                 <file>`, or `liken bundle -sign release.key`)",
            ),
            VerifyError::UnknownKey { key_id, trusted } => write!(
                f,
                "it is signed by key {key_id}, which the trust root does not list (it trusts {}); \
                 sign it with a trusted key, or rotate the trust root to add this one",
                trusted.join(", ")
            ),
            VerifyError::Changed {
                key_id,
                signed,
                got,
            } => write!(
                f,
                "its bytes changed after key {key_id} signed them (signed sha256 {signed}, now \
                 {got}); fetch it again from the channel"
            ),
            VerifyError::BadSignature { key_id } => write!(
                f,
                "its signature is not key {key_id}'s over these bytes (forged or corrupted); \
                 fetch it again, and if it persists the channel serves a forgery"
            ),
        }
    }
}

impl std::error::Error for VerifyError {}

/// Why a `.sig` file was not accepted ([`TrustRoot::verify_file`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileError {
    /// The file is not a signature document.
    Unreadable(crate::decode::DecodeError),
    /// The signature does not hold.
    Verify(VerifyError),
}

/// Why a rollback permit does not apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PermitError {
    /// It has expired.
    Expired {
        /// When.
        expires: Time,
    },
    /// It names another cluster.
    OtherCluster {
        /// The cluster it names.
        named: String,
    },
    /// It does not name this machine.
    OtherMachines {
        /// The machines it names.
        named: Vec<String>,
    },
    /// It names another version.
    OtherVersion {
        /// The version it names.
        named: Version,
    },
}

impl fmt::Display for PermitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PermitError::Expired { expires } => {
                write!(
                    f,
                    "the rollback permit expired at {expires}; sign a new one"
                )
            }
            PermitError::OtherCluster { named } => {
                write!(
                    f,
                    "the rollback permit is for cluster {named}, not this one"
                )
            }
            PermitError::OtherMachines { named } => write!(
                f,
                "the rollback permit names machines {}, not this one",
                named.join(", ")
            ),
            PermitError::OtherVersion { named } => {
                write!(
                    f,
                    "the rollback permit allows release {named}, not this one"
                )
            }
        }
    }
}

impl std::error::Error for PermitError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode;

    fn keys(n: u8) -> (SigningKey, ReleaseKey) {
        key_pair([n; 32])
    }

    #[test]
    fn a_signature_verifies_only_over_its_bytes_and_key() {
        let (a, a_pub) = keys(1);
        let (b, b_pub) = keys(2);
        let trust = TrustRoot::new([a_pub.clone()]);
        let bytes = b"apiVersion: liken.sh/v1alpha1\nkind: Release\n";
        let sig = a.sign(bytes);
        assert_eq!(trust.verify(bytes, Some(&sig)).unwrap(), a.id);
        assert_eq!(trust.verify(bytes, None), Err(VerifyError::Unsigned));
        let by_b = b.sign(bytes);
        assert!(matches!(
            trust.verify(bytes, Some(&by_b)),
            Err(VerifyError::UnknownKey { .. })
        ));
        let mut changed = bytes.to_vec();
        changed[3] ^= 1;
        let e = trust.verify(&changed, Some(&sig)).unwrap_err();
        assert_eq!(e.reason(), "changed");
        assert!(e.to_string().contains("changed after key"), "{e}");
        // The digest matches but the signature is not a's: a forgery
        // claiming a's id.
        let mut forged = by_b.clone();
        forged.key_id = a.id.clone();
        assert_eq!(
            trust.verify(bytes, Some(&forged)),
            Err(VerifyError::BadSignature {
                key_id: a.id.clone()
            })
        );
        let both = TrustRoot::new([a_pub, b_pub]);
        assert_eq!(both.verify(bytes, Some(&by_b)).unwrap(), b.id);
    }

    #[test]
    fn a_signature_file_is_decoded_strictly_then_verified() {
        let (a, a_pub) = keys(1);
        let trust = TrustRoot::new([a_pub]);
        let bytes = b"apiVersion: liken.sh/v1alpha1\nkind: Channel\n";
        let file = decode::to_yaml(&a.sign(bytes)).unwrap();
        let check = |sig: Option<&[u8]>| trust.verify_file(bytes, sig, "channel.yaml.sig");
        assert_eq!(check(Some(file.as_bytes())).unwrap(), a.id);
        assert_eq!(check(None), Err(FileError::Verify(VerifyError::Unsigned)));
        match check(Some(b"keyId: 0123\n")) {
            Err(FileError::Unreadable(e)) => {
                assert!(e.to_string().contains("channel.yaml.sig"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn documents_round_trip_through_the_strict_decoder() {
        let (a, a_pub) = keys(3);
        let sig = a.sign(b"x");
        let text = decode::to_yaml(&sig).unwrap();
        let back: DetachedSignature = decode::strict(&text, "x.sig").unwrap();
        assert_eq!(back, sig);
        let trust = TrustRoot::new([a_pub.clone()]);
        let text = decode::to_yaml(&trust).unwrap();
        assert_eq!(decode::strict::<TrustRoot>(&text, "t").unwrap(), trust);
        let text = decode::to_yaml(&a).unwrap();
        assert_eq!(decode::strict::<SigningKey>(&text, "k").unwrap(), a);
        assert_eq!(a.public(), a_pub);
        assert_eq!(a.id.as_str().len(), KEY_ID_LEN);
        assert!(!format!("{a:?}").contains(&to_hex(&a.seed.0)));
    }

    #[test]
    fn strict_parsers_name_what_is_wrong() {
        let (a, a_pub) = keys(4);
        let sig = decode::to_yaml(&a.sign(b"x")).unwrap();
        let e = decode::strict::<DetachedSignature>(&sig.replace("keyId", "keyID"), "r.sig")
            .unwrap_err();
        assert!(e.to_string().contains("keyId"), "{e}");
        let e =
            decode::strict::<DetachedSignature>(&sig.replace(&a.id.to_string(), "ABC"), "r.sig")
                .unwrap_err();
        assert!(e.to_string().contains("not a key id"), "{e}");
        // An id that is not the key's.
        let mut trust = TrustRoot::new([a_pub]);
        trust.keys[0].id = KeyId::parse("000000000000").unwrap();
        let text = decode::to_yaml(&trust).unwrap();
        let e = decode::strict::<TrustRoot>(&text, "trust.yaml").unwrap_err();
        assert!(e.to_string().contains("edited by hand"), "{e}");
        let empty = "apiVersion: liken.sh/v1alpha1\nkind: TrustRoot\nkeys: []\n";
        let e = decode::strict::<TrustRoot>(empty, "trust.yaml").unwrap_err();
        assert!(e.to_string().contains("at least one key"), "{e}");
        let e = decode::strict::<TrustRoot>(&sig, "trust.yaml").unwrap_err();
        assert!(matches!(e, decode::DecodeError::Kind { .. }), "{e}");
    }

    #[test]
    fn a_permit_applies_to_its_cluster_machines_version_and_time() {
        let v = Version::parse("2026.12.01-001").unwrap();
        let p = RollbackPermit::new(
            "home".into(),
            vec!["node-1".into()],
            v.clone(),
            Time::from_unix(1000),
        );
        assert!(p.validate().is_empty());
        assert!(p.allows("home", "node-1", &v, Time::from_unix(999)).is_ok());
        let other = Version::parse("2026.12.01-002").unwrap();
        for (c, m, ver, now) in [
            ("home", "node-1", &v, 1000),
            ("work", "node-1", &v, 1),
            ("home", "node-2", &v, 1),
            ("home", "node-1", &other, 1),
        ] {
            assert!(p.allows(c, m, ver, Time::from_unix(now)).is_err());
        }
    }
}
