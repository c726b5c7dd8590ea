//! The deploy key: the credential the sync engine reads the fleet's git
//! repository with.
//!
//! The repository is expected to be private, so Flux needs a key. liken
//! mints it inside the cluster rather than asking a person to generate
//! one and carry it in: the person copies the public half from the
//! Cluster's `status.flux.publicKey` and registers it at the forge as a
//! deploy key; the private half never leaves the cluster and never sits
//! on an install stick.
//!
//! One key per cluster, not per machine: the private half lives in a
//! Secret, every Secret lives in the datastore, and every leader carries
//! the datastore, so the datastore is the unit of exposure and one key
//! per datastore says so. Rotation is a person's decision: deleting the
//! Secret makes the next sweep mint a fresh pair and publish its public
//! half.
//!
//! Where the key lives follows Flux's conventions, so the engine finds it
//! without configuration: the Secret `flux-system/flux-system` with
//! `identity` (the private key in OpenSSH's own format,
//! `openssh-key-v1`, unencrypted, which is what Flux's git client
//! parses), `identity.pub` (one authorized_keys line, commented
//! `liken:<cluster>` so a forge's key list stays legible) and
//! `known_hosts` (the forge's host keys, from the feature's declared
//! `knownHosts`, refreshed whenever the declaration changes so a forge
//! that rotates its host key does not strand the sync on a stale pin).
//!
//! The permission to touch that Secret arrives with the feature: the
//! flux feature's manifests (`images/features/flux/manifests/`) carry a
//! Role in flux-system, so a fleet that never declared GitOps grants this
//! operator no Secret access at all. The first sweeps after the feature
//! is declared may be refused while k3s applies that Role; the sweep runs
//! again, and the status keeps what it published until a read succeeds.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ed25519_compact::{KeyPair, Noise};
use liken_api::Cluster;
use liken_kube::events::{EventType, ObjectReference, Recorder};
use liken_kube::request::SECRETS;
use liken_kube::{Api, Client, DynamicObject};
use serde_json::json;

use super::names::{FLUX_NAMESPACE, FLUX_SECRET};
use crate::runtime::log;

/// The Secret's key holding the private half.
pub const IDENTITY: &str = "identity";
/// The Secret's key holding the public half.
pub const IDENTITY_PUB: &str = "identity.pub";
/// The Secret's key holding the forge's host keys.
pub const KNOWN_HOSTS: &str = "known_hosts";

/// The Event reason of a mint: the person must register the new public
/// half at the forge before the first sync.
pub const FLUX_DEPLOY_KEY_MINTED: &str = "FluxDeployKeyMinted";
/// The Event action of a mint.
pub const ACTION_MINT: &str = "MintDeployKey";

/// OpenSSH's name for the key type, in the public line and both blobs.
const KEY_TYPE: &str = "ssh-ed25519";
/// The magic that opens an `openssh-key-v1` private key (NUL included).
const MAGIC: &[u8] = b"openssh-key-v1\0";
/// The block size the private section is padded to: 8, the size OpenSSH
/// uses for the `none` cipher.
const BLOCK: usize = 8;
/// OpenSSH wraps the base64 of a private key at 70 columns.
const WRAP: usize = 70;

/// A freshly minted pair, in the forms the Secret holds.
#[derive(Clone, PartialEq, Eq)]
pub struct DeployKey {
    /// One authorized_keys line: `ssh-ed25519 <base64> liken:<cluster>`.
    pub public_line: String,
    /// The private key in OpenSSH's format, PEM-armoured.
    pub private_pem: String,
}

impl fmt::Debug for DeployKey {
    // The private half never reaches a log, even through a `{:?}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeployKey")
            .field("public_line", &self.public_line)
            .field("private_pem", &"<redacted>")
            .finish()
    }
}

/// The comment both halves carry, naming the cluster.
pub fn comment(cluster: &str) -> String {
    format!("liken:{cluster}")
}

/// Mints a new ed25519 pair for `cluster` from the operating system's
/// random source.
pub fn mint(cluster: &str) -> DeployKey {
    let pair = KeyPair::generate();
    // The check integer only lets a decrypting reader see that it used
    // the right passphrase; for an unencrypted key any value works, and
    // ssh-keygen writes a random one, so this does too.
    let noise = Noise::generate();
    let check = u32::from_be_bytes([noise[0], noise[1], noise[2], noise[3]]);
    encode(&pair.sk, &comment(cluster), check)
}

/// Encodes an ed25519 secret key (the 64 bytes seed and public key, which
/// is also OpenSSH's layout) as both halves. Deterministic, for tests
/// that compare with ssh-keygen's own bytes.
pub fn encode(secret: &[u8; 64], comment: &str, check: u32) -> DeployKey {
    let public = &secret[32..];
    let mut public_blob = Vec::with_capacity(51);
    put_string(&mut public_blob, KEY_TYPE.as_bytes());
    put_string(&mut public_blob, public);

    // The private section (PROTOCOL.key in OpenSSH's source): the check
    // integer twice, then the key type, the public key, the secret key
    // (seed and public key again) and the comment, padded with 1, 2, 3...
    // to a whole number of cipher blocks.
    let mut private = Vec::with_capacity(160);
    private.extend_from_slice(&check.to_be_bytes());
    private.extend_from_slice(&check.to_be_bytes());
    put_string(&mut private, KEY_TYPE.as_bytes());
    put_string(&mut private, public);
    put_string(&mut private, secret);
    put_string(&mut private, comment.as_bytes());
    let mut pad = 1u8;
    while private.len() % BLOCK != 0 {
        private.push(pad);
        pad += 1;
    }

    let mut blob = Vec::with_capacity(256);
    blob.extend_from_slice(MAGIC);
    put_string(&mut blob, b"none"); // cipher
    put_string(&mut blob, b"none"); // key derivation
    put_string(&mut blob, b""); // key derivation options
    blob.extend_from_slice(&1u32.to_be_bytes()); // one key
    put_string(&mut blob, &public_blob);
    put_string(&mut blob, &private);

    let encoded = BASE64.encode(&blob);
    let mut pem = String::from("-----BEGIN OPENSSH PRIVATE KEY-----\n");
    for line in encoded.as_bytes().chunks(WRAP) {
        // Base64 is ASCII, so every chunk is valid UTF-8.
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END OPENSSH PRIVATE KEY-----\n");

    DeployKey {
        public_line: format!("{KEY_TYPE} {} {comment}", BASE64.encode(&public_blob)),
        private_pem: pem,
    }
}

/// SSH's `string`: a big-endian u32 length, then the bytes.
fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    // Every string here is at most a few hundred bytes.
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// What a read of the deploy key Secret found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretView {
    /// The read failed (a Role not applied yet, the apiserver away).
    Unreadable,
    /// There is no Secret.
    Absent,
    /// The Secret, by the fields the sweep judges.
    Present {
        /// `identity.pub`, if the Secret has one.
        public_line: Option<String>,
        /// `known_hosts`, empty when absent.
        known_hosts: String,
    },
}

/// What the sweep does about the deploy key this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyAction {
    /// Publish nothing new: the status keeps what it holds.
    Keep,
    /// Mint a pair and create the Secret with these host keys.
    Mint {
        /// The declared known_hosts (empty when undeclared or unreadable).
        known_hosts: String,
    },
    /// The Secret exists: publish its public half, and rewrite its
    /// known_hosts when the declaration moved on.
    Publish {
        /// The public line to publish; `None` keeps the published one.
        public_line: Option<String>,
        /// The host keys to write, when they differ from the Secret's.
        refresh_known_hosts: Option<String>,
    },
}

/// Decides the deploy key's pass for a Cluster that declares flux.
/// `declared_known_hosts` is `None` when the feature's configuration does
/// not parse: a malformed declaration does not stop the mint (the key does
/// not depend on it, and the configuration problem is reported where the
/// Cluster is validated), but it never overwrites the Secret's host keys
/// either.
pub fn decide_deploy_key(declared_known_hosts: Option<&str>, secret: &SecretView) -> KeyAction {
    match secret {
        SecretView::Unreadable => KeyAction::Keep,
        SecretView::Absent => KeyAction::Mint {
            known_hosts: declared_known_hosts.unwrap_or_default().to_owned(),
        },
        SecretView::Present {
            public_line,
            known_hosts,
        } => KeyAction::Publish {
            public_line: public_line.clone(),
            refresh_known_hosts: declared_known_hosts
                .filter(|declared| declared != known_hosts)
                .map(str::to_owned),
        },
    }
}

/// Reads the Secret's fields the sweep judges.
pub fn view_secret(secret: &DynamicObject) -> SecretView {
    let field = |key: &str| {
        secret
            .pointer(&format!(
                "/data/{}",
                key.replace('~', "~0").replace('/', "~1")
            ))
            .and_then(|v| v.as_str())
            .and_then(|b| BASE64.decode(b).ok())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
    };
    SecretView::Present {
        public_line: field(IDENTITY_PUB)
            .map(|line| line.trim().to_owned())
            .filter(|line| !line.is_empty()),
        known_hosts: field(KNOWN_HOSTS).unwrap_or_default(),
    }
}

/// The Secret a mint creates.
pub fn secret_body(key: &DeployKey, known_hosts: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": FLUX_SECRET,
            "namespace": FLUX_NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": "liken"},
        },
        "type": "Opaque",
        "data": {
            IDENTITY: BASE64.encode(&key.private_pem),
            IDENTITY_PUB: BASE64.encode(&key.public_line),
            KNOWN_HOSTS: BASE64.encode(known_hosts),
        },
    })
}

/// Makes sure the deploy key exists for a Cluster that declares flux, and
/// answers the public half for the status; `None` keeps the published one
/// (a refused read, a lost race to create). A mint posts
/// [`FLUX_DEPLOY_KEY_MINTED`] on the Cluster.
pub fn ensure_deploy_key(
    client: &Client,
    recorder: &Recorder,
    cluster: &Cluster,
) -> Option<String> {
    let declared = cluster
        .flux_config()
        .ok()
        .map(|c| c.unwrap_or_default().known_hosts);
    let api = Api::namespaced(SECRETS, FLUX_NAMESPACE);
    let view = match client.get_opt::<DynamicObject>(&api, FLUX_SECRET) {
        Ok(Some(secret)) => view_secret(&secret),
        Ok(None) => SecretView::Absent,
        Err(e) => {
            log::warn(
                "reading the flux deploy key; the status keeps the published key",
                &[("secret", &secret_name()), ("error", &e)],
            );
            SecretView::Unreadable
        }
    };
    match decide_deploy_key(declared.as_deref(), &view) {
        KeyAction::Keep => None,
        KeyAction::Publish {
            public_line,
            refresh_known_hosts,
        } => {
            if let Some(hosts) = refresh_known_hosts {
                let patch = json!({"data": {KNOWN_HOSTS: BASE64.encode(&hosts)}});
                match client.merge_patch::<DynamicObject>(&api, FLUX_SECRET, &patch) {
                    Ok(_) => log::info(
                        "the declared flux knownHosts changed; refreshed the deploy key Secret's known_hosts",
                        &[("secret", &secret_name())],
                    ),
                    Err(e) => log::warn(
                        "refreshing the flux known_hosts",
                        &[("secret", &secret_name()), ("error", &e)],
                    ),
                }
            }
            public_line
        }
        KeyAction::Mint { known_hosts } => {
            let key = mint(&cluster.metadata.name);
            match client.create::<DynamicObject, _>(&api, &secret_body(&key, &known_hosts)) {
                Ok(_) => {
                    log::info(
                        "minted the flux deploy key; register status.flux.publicKey at the forge as a deploy key",
                        &[("secret", &secret_name())],
                    );
                    recorder.event(
                        ObjectReference::cluster(cluster),
                        EventType::Normal,
                        FLUX_DEPLOY_KEY_MINTED,
                        ACTION_MINT,
                        "minted the flux deploy key; register the public half from status.flux.publicKey at the forge as a read-only deploy key",
                    );
                    Some(key.public_line)
                }
                // Another copy minted first: its key is the fleet's, and
                // the next pass reads it.
                Err(liken_kube::Error::AlreadyExists { .. }) => None,
                Err(e) => {
                    log::warn(
                        "creating the flux deploy key Secret",
                        &[("secret", &secret_name()), ("error", &e)],
                    );
                    None
                }
            }
        }
    }
}

fn secret_name() -> String {
    format!("{FLUX_NAMESPACE}/{FLUX_SECRET}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(seed: u8) -> [u8; 64] {
        let pair = KeyPair::from_seed(ed25519_compact::Seed::new([seed; 32]));
        *pair.sk
    }

    #[test]
    fn the_public_line_is_the_wire_blob_and_the_comment() {
        let key = encode(&secret(7), "liken:home", 0x0102_0304);
        let fields: Vec<&str> = key.public_line.split(' ').collect();
        assert_eq!(fields.len(), 3);
        assert_eq!(fields[0], "ssh-ed25519");
        assert_eq!(fields[2], "liken:home");
        let blob = BASE64.decode(fields[1]).unwrap();
        assert_eq!(&blob[..4], &[0, 0, 0, 11]);
        assert_eq!(&blob[4..15], b"ssh-ed25519");
        assert_eq!(&blob[15..19], &[0, 0, 0, 32]);
        assert_eq!(&blob[19..], &secret(7)[32..]);
        // Every ed25519 public line starts the same way.
        assert!(fields[1].starts_with("AAAAC3NzaC1lZDI1NTE5AAAAI"));
    }

    #[test]
    fn the_private_key_is_armoured_wrapped_and_padded() {
        let key = encode(&secret(9), "liken:a-much-longer-cluster-name", 42);
        let lines: Vec<&str> = key.private_pem.lines().collect();
        assert_eq!(lines[0], "-----BEGIN OPENSSH PRIVATE KEY-----");
        assert_eq!(*lines.last().unwrap(), "-----END OPENSSH PRIVATE KEY-----");
        let body = &lines[1..lines.len() - 1];
        assert!(body[..body.len() - 1].iter().all(|l| l.len() == 70));
        let blob = BASE64.decode(body.concat()).unwrap();
        assert!(blob.starts_with(MAGIC));
        // The private section is the last string: its length is a
        // multiple of the block size and it ends 1, 2, 3...
        let start = private_start(&blob);
        let len = u32::from_be_bytes(blob[start..start + 4].try_into().unwrap()) as usize;
        assert_eq!(start + 4 + len, blob.len());
        assert_eq!(len % BLOCK, 0);
        let private = &blob[start + 4..];
        assert_eq!(&private[..4], &42u32.to_be_bytes());
        assert_eq!(&private[4..8], &42u32.to_be_bytes());
        // Deterministic: the same inputs give the same bytes.
        assert_eq!(
            key,
            encode(&secret(9), "liken:a-much-longer-cluster-name", 42)
        );
        // Debug never shows the private half.
        assert!(!format!("{key:?}").contains("PRIVATE"));
    }

    /// Where the private section's length sits: after the magic, three
    /// strings (cipher, kdf, options), the key count and the public blob.
    fn private_start(blob: &[u8]) -> usize {
        let mut at = MAGIC.len();
        for _ in 0..3 {
            let n = u32::from_be_bytes(blob[at..at + 4].try_into().unwrap()) as usize;
            at += 4 + n;
        }
        at += 4;
        let n = u32::from_be_bytes(blob[at..at + 4].try_into().unwrap()) as usize;
        at + 4 + n
    }

    #[test]
    fn two_mints_differ() {
        let a = mint("home");
        let b = mint("home");
        assert_ne!(a.public_line, b.public_line);
        assert!(a.public_line.ends_with(" liken:home"));
    }

    #[test]
    fn decide_deploy_key_table() {
        let present = |pub_line: Option<&str>, hosts: &str| SecretView::Present {
            public_line: pub_line.map(str::to_owned),
            known_hosts: hosts.to_owned(),
        };
        let publish = |pub_line: Option<&str>, refresh: Option<&str>| KeyAction::Publish {
            public_line: pub_line.map(str::to_owned),
            refresh_known_hosts: refresh.map(str::to_owned),
        };
        let hosts = "forge ssh-ed25519 AAAA";
        let cases: &[(&str, Option<&str>, SecretView, KeyAction)] = &[
            (
                "unreadable: keep what is published",
                Some(hosts),
                SecretView::Unreadable,
                KeyAction::Keep,
            ),
            (
                "absent: mint with the declared host keys",
                Some(hosts),
                SecretView::Absent,
                KeyAction::Mint {
                    known_hosts: hosts.into(),
                },
            ),
            (
                "absent, malformed declaration: mint anyway, no host keys",
                None,
                SecretView::Absent,
                KeyAction::Mint {
                    known_hosts: String::new(),
                },
            ),
            (
                "present and current: publish, write nothing",
                Some(hosts),
                present(Some("ssh-ed25519 K liken:home"), hosts),
                publish(Some("ssh-ed25519 K liken:home"), None),
            ),
            (
                "the forge rotated its host key: refresh",
                Some("forge ssh-ed25519 BBBB"),
                present(Some("ssh-ed25519 K liken:home"), hosts),
                publish(
                    Some("ssh-ed25519 K liken:home"),
                    Some("forge ssh-ed25519 BBBB"),
                ),
            ),
            (
                "the declaration dropped knownHosts: the Secret follows",
                Some(""),
                present(Some("ssh-ed25519 K liken:home"), hosts),
                publish(Some("ssh-ed25519 K liken:home"), Some("")),
            ),
            (
                "malformed declaration: the Secret's host keys stay",
                None,
                present(Some("ssh-ed25519 K liken:home"), hosts),
                publish(Some("ssh-ed25519 K liken:home"), None),
            ),
            (
                "a Secret without identity.pub publishes nothing new",
                Some(hosts),
                present(None, hosts),
                publish(None, None),
            ),
        ];
        for (name, declared, view, want) in cases {
            assert_eq!(&decide_deploy_key(*declared, view), want, "{name}");
        }
    }

    #[test]
    fn view_secret_reads_base64_data() {
        let key = encode(&secret(3), "liken:home", 1);
        let body = secret_body(&key, "forge ssh-ed25519 AAAA\n");
        assert_eq!(
            view_secret(&DynamicObject(body)),
            SecretView::Present {
                public_line: Some(key.public_line.clone()),
                known_hosts: "forge ssh-ed25519 AAAA\n".into(),
            }
        );
        assert_eq!(
            view_secret(&DynamicObject(json!({"data": {"identity.pub": "!!"}}))),
            SecretView::Present {
                public_line: None,
                known_hosts: String::new(),
            }
        );
    }
}
