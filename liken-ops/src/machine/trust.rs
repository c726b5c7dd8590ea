//! The deployment's trust root, for the early signature check: a release
//! is refused before its artifacts are downloaded when its release.yaml
//! is not signed by a key the deployment trusts.
//!
//! init is the last word (it checks every write against the trust root
//! it keeps on the machine), but by then the machine has downloaded
//! hundreds of megabytes, and the refusal reaches the Machine only as a
//! failed write. So the download worker reads the deployment's trust
//! root, the `trust.yaml` key of the ConfigMap liken-system/liken-cluster
//! that a leader's init seeds from its layer, and hands it to the fetch
//! ([`Deployed::signatures`]), which checks release.yaml's detached
//! signature before it asks for any artifact, as `liken fetch -trust`
//! does. A refusal is Blocked with the key id and the reason.
//!
//! A ConfigMap without `trust.yaml` is a deployment packed
//! `liken layer -unsigned`, and one that does not exist (a cluster no
//! liken leader seeded) leaves the check to init: in both cases nothing
//! is checked early. A trust root that cannot be read is Blocked, since
//! trying again meets the same document.

use liken_api::coordination::{DEPLOYMENT_CONFIG_MAP, HEARTBEAT_NAMESPACE};
use liken_api::decode;
use liken_api::signing::{TRUST_FILE, TrustRoot};
use liken_kube::request::CONFIG_MAPS;
use liken_kube::{Api, Client, DynamicObject};
use liken_releases::fetch::Signatures;

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

impl Deployed {
    /// What the fetch checks release.yaml's signature against: the root,
    /// or (unsigned or absent) nothing, leaving it to init.
    pub fn signatures(self) -> Signatures {
        match self {
            Deployed::Signed(root) => Signatures::Verify(root),
            Deployed::Unsigned | Deployed::Absent => Signatures::Unchecked,
        }
    }
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
}
