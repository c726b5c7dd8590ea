//! The early signature check: a release is refused before its artifacts
//! are downloaded when its release.yaml is not signed by a key the
//! deployment trusts.
//!
//! init is the last word (it checks every write against the trust root
//! it keeps on the machine), but by then the machine has downloaded
//! hundreds of megabytes, and the refusal reaches the Machine only as a
//! failed write. So the download worker reads release.yaml and its
//! detached signature first and checks them against the deployment's
//! trust root, the `trust.yaml` key of the ConfigMap
//! liken-system/liken-cluster that a leader's init seeds from its layer.
//! A refusal is Blocked with the key id and the reason, and no artifact
//! is fetched.
//!
//! A ConfigMap without `trust.yaml` is a deployment packed
//! `liken layer -unsigned`, and one that does not exist (a cluster no
//! liken leader seeded) leaves the check to init: in both cases nothing
//! is checked early. A trust root that cannot be read is Blocked, since
//! trying again meets the same document.

use liken_api::coordination::{DEPLOYMENT_CONFIG_MAP, HEARTBEAT_NAMESPACE};
use liken_api::decode;
use liken_api::signing::{FileError, KeyId, TRUST_FILE, TrustRoot, VerifyError};
use liken_kube::request::CONFIG_MAPS;
use liken_kube::{Api, Client, DynamicObject};

/// Where the deployment's trust root stands, as read from the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deployed {
    /// The ConfigMap carries a trust root.
    Signed(TrustRoot),
    /// The ConfigMap carries none: the layer was packed `-unsigned`.
    Unsigned,
    /// There is no ConfigMap: nothing to check early against.
    Absent,
}

/// Why the deployment's trust root could not be had.
#[derive(Debug)]
pub enum TrustError {
    /// The API did not answer (tried again after a backoff).
    Read(liken_kube::Error),
    /// `trust.yaml` is in the ConfigMap but is not a trust root.
    Unreadable(String),
}

impl std::fmt::Display for TrustError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TrustError::Read(e) => write!(
                f,
                "reading the deployment's trust root (ConfigMap \
                 {HEARTBEAT_NAMESPACE}/{DEPLOYMENT_CONFIG_MAP}): {e}"
            ),
            TrustError::Unreadable(why) => write!(
                f,
                "the deployment's trust root (ConfigMap \
                 {HEARTBEAT_NAMESPACE}/{DEPLOYMENT_CONFIG_MAP}, key {TRUST_FILE}) cannot be read: \
                 {why}; a leader's init seeds it from its layer's trust.yaml, so repack the layer \
                 with `liken layer`"
            ),
        }
    }
}

/// Reads the deployment's trust root from its ConfigMap.
pub fn read_deployed(client: &Client) -> Result<Deployed, TrustError> {
    let api = Api::namespaced(CONFIG_MAPS, HEARTBEAT_NAMESPACE);
    let cm = match client.get::<DynamicObject>(&api, DEPLOYMENT_CONFIG_MAP) {
        Ok(cm) => cm,
        Err(e) if e.is_not_found() => return Ok(Deployed::Absent),
        Err(e) => return Err(TrustError::Read(e)),
    };
    decide_deployed(cm.0.pointer(&format!("/data/{TRUST_FILE}")))
}

/// What the ConfigMap's `trust.yaml` value says.
pub fn decide_deployed(value: Option<&serde_json::Value>) -> Result<Deployed, TrustError> {
    let Some(value) = value else {
        return Ok(Deployed::Unsigned);
    };
    let text = value
        .as_str()
        .ok_or_else(|| TrustError::Unreadable("the value is not a string".into()))?;
    decode::strict::<TrustRoot>(text, TRUST_FILE)
        .map(Deployed::Signed)
        .map_err(|e| TrustError::Unreadable(e.to_string()))
}

/// Why a release was refused before its download.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// release.yaml.sig is not a signature document.
    SignatureUnreadable(String),
    /// The signature does not hold against the trust root.
    Verify(VerifyError),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::SignatureUnreadable(why) => write!(
                f,
                "refused before download (bad-signature): release.yaml.sig cannot be read \
                 ({why}); sign the release again with `liken sign`"
            ),
            Refused::Verify(e) => write!(f, "refused before download ({}): {e}", e.reason()),
        }
    }
}

/// Whether release.yaml (`bytes`, with `signature`, the bytes of
/// release.yaml.sig when the channel has one) may be downloaded under
/// `deployed`: the signing key's id, or `None` when nothing is checked
/// early.
pub fn decide_release(
    deployed: &Deployed,
    bytes: &[u8],
    signature: Option<&[u8]>,
) -> Result<Option<KeyId>, Refused> {
    let Deployed::Signed(root) = deployed else {
        return Ok(None);
    };
    root.verify_file(bytes, signature, "release.yaml.sig")
        .map(Some)
        .map_err(|e| match e {
            FileError::Unreadable(e) => Refused::SignatureUnreadable(e.to_string()),
            FileError::Verify(e) => Refused::Verify(e),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::signing::key_pair;
    use serde_json::json;

    #[test]
    fn the_config_map_says_signed_unsigned_or_broken() {
        let (a, _) = key_pair([1; 32]);
        let root = TrustRoot::new([a.public()]);
        let text = serde_yaml::to_string(&root).unwrap();
        assert_eq!(
            decide_deployed(Some(&json!(text))).unwrap(),
            Deployed::Signed(root)
        );
        assert_eq!(decide_deployed(None).unwrap(), Deployed::Unsigned);
        let broken = decide_deployed(Some(&json!("keys: [1]"))).unwrap_err();
        assert!(broken.to_string().contains("repack the layer"), "{broken}");
        assert!(decide_deployed(Some(&json!(7))).is_err());
    }

    #[test]
    fn a_release_is_checked_only_against_a_deployed_root() {
        let (a, _) = key_pair([1; 32]);
        let (b, _) = key_pair([2; 32]);
        let root = Deployed::Signed(TrustRoot::new([a.public()]));
        let bytes = b"apiVersion: liken.sh/v1alpha1\nkind: Release\n";
        let sig = |k: &liken_api::signing::SigningKey, bytes: &[u8]| {
            serde_yaml::to_string(&k.sign(bytes)).unwrap().into_bytes()
        };
        assert_eq!(
            decide_release(&root, bytes, Some(&sig(&a, bytes))).unwrap(),
            Some(a.public().id)
        );
        let reason = |r: Result<Option<KeyId>, Refused>| r.unwrap_err().to_string();
        assert!(
            reason(decide_release(&root, bytes, None))
                .starts_with("refused before download (unsigned)")
        );
        let foreign = reason(decide_release(&root, bytes, Some(&sig(&b, bytes))));
        assert!(foreign.contains("(unknown-key)"), "{foreign}");
        assert!(foreign.contains(b.public().id.as_str()), "{foreign}");
        let changed = reason(decide_release(&root, b"other bytes", Some(&sig(&a, bytes))));
        assert!(changed.contains("(changed)"), "{changed}");
        assert!(reason(decide_release(&root, bytes, Some(b"garbage"))).contains("bad-signature"));
        // Nothing deployed to check against: init decides.
        assert_eq!(
            decide_release(&Deployed::Unsigned, bytes, None).unwrap(),
            None
        );
        assert_eq!(
            decide_release(&Deployed::Absent, bytes, None).unwrap(),
            None
        );
    }
}
