//! `liken layer`: the deployment layer, the small archive that makes the
//! generic release into this fleet's operating system.
//!
//! The layer is a newc cpio ([`cpio`]) that the boot loader hands to the
//! kernel beside the release's own initramfs; the kernel unpacks both into
//! one root, so everything here lands under `/etc/liken/`:
//!
//! ```text
//! etc/liken/cluster.yaml
//! etc/liken/machines/<name>.yaml
//! etc/liken/trust.yaml                     the release keys (+ trust.yaml.sig)
//! etc/liken/unsigned                       instead, with -unsigned
//! etc/liken/identity/server/tls/...   (the identity, see crate::identity)
//! etc/liken/identity/server/token          the server token (leaders)
//! etc/liken/identity/server/agent-token    the agent token (followers)
//! ```
//!
//! This one archive holds every secret of the cluster: it is what the
//! install media carry so that they can install any machine. What each
//! machine keeps of it after installing depends on its role (leaders: the
//! identity and both tokens; followers: the agent token and the server
//! CA certificate only), which the installer decides. A follower's
//! medium needs no more than a follower keeps, so [`build_for`] packs
//! that per-role layer for `liken media -role follower` by the same rule
//! ([`follower_keeps`], the rule of liken-init's `role_layer::keep`,
//! which a test holds them to).
//!
//! Nothing is packed until everything is checked: every manifest strictly,
//! the Cluster against the Machines (see [`crate::deployment`]), and the
//! identity (every file present, each key belonging to its certificate,
//! the token naming the server CA). Manifests are packed as written,
//! comments included, because init reads them with the same strict
//! decoder. The admin kubeconfig is never packed: machines do not need
//! it, and it would put an admin credential on every disk.
//!
//! The same inputs give the same bytes: entries sorted, zero mtimes, owner
//! 0:0, directories 0755, files 0644, private keys and the token 0600.
//! The archive holds CA keys, so the output file itself is written 0600,
//! atomically.

/// The newc writer, shared with liken-init's install mode.
pub use liken_disk::cpio;

use std::fmt;
use std::path::{Path, PathBuf};

use crate::deployment::{self, DeploymentError, Manifests};
use crate::identity::{self, IdentityError};
use crate::{Io, args::Parsed};
use cpio::{Archive, Body, CpioError, Entry};
use liken_api::layer_seal;
use liken_api::signing::{SigningKey, TRUST_FILE, TrustRoot, UNSIGNED_FILE};

/// Where the layer puts everything.
pub const ROOT: &str = "etc/liken";

/// Why no layer was written.
#[derive(Debug)]
pub enum LayerError {
    /// The manifests are missing or wrong.
    Deployment(DeploymentError),
    /// The identity directory lacks files.
    MissingIdentity {
        /// The identity directory.
        dir: PathBuf,
        /// Each missing file, relative to it.
        missing: Vec<String>,
    },
    /// The identity's files are not usable.
    Identity(IdentityError),
    /// The deployment has no trust.yaml and -unsigned was not given.
    NoTrustRoot {
        /// The deployment directory.
        dir: PathBuf,
    },
    /// trust.yaml or its signature is not valid.
    Trust(liken_api::DecodeError),
    /// An entry could not be archived.
    Archive(CpioError),
    /// The seal could not be written.
    Seal(String),
    /// Reading an input or writing the output failed.
    Io {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
}

impl fmt::Display for LayerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayerError::Deployment(e) => write!(f, "{e}"),
            LayerError::MissingIdentity { dir, missing } => {
                write!(f, "the identity in {} is incomplete:", dir.display())?;
                for m in missing {
                    write!(f, "\n  {m} is missing")?;
                }
                write!(
                    f,
                    "\nmint one (`liken mint <dir>`) or adopt one (`liken adopt <harvest> <dir>`) \
                     into an empty directory and pack that"
                )?;
                if missing.iter().any(|m| m == identity::AGENT_TOKEN) {
                    write!(
                        f,
                        "; an identity made before agent tokens lacks {}: `liken adopt {} \
                         <new-dir>` copies it and mints one",
                        identity::AGENT_TOKEN,
                        dir.display()
                    )?;
                }
                Ok(())
            }
            LayerError::Identity(e) => write!(f, "{e}"),
            LayerError::NoTrustRoot { dir } => write!(
                f,
                "{} has no {TRUST_FILE}, so machines would have no way to tell a release you \
                 published from one anybody put in the catalog; make one (`liken keygen <keys-dir>`, \
                 then `liken trust {} <keys-dir>/release.pub`), or pack with -unsigned to give \
                 that up",
                dir.display(),
                dir.join(TRUST_FILE).display()
            ),
            LayerError::Trust(e) => write!(f, "{e}"),
            LayerError::Archive(e) => write!(f, "{e}"),
            LayerError::Seal(e) => write!(f, "writing the layer's seal: {e}"),
            LayerError::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for LayerError {}

/// Runs `liken layer <manifests-dir> <identity-dir> <output.cpio>`.
pub fn command(parsed: Parsed, io: &mut Io) -> Result<(), crate::Error> {
    let [manifests, identity_dir, output] = parsed.paths()?;
    let unsigned = parsed.switch("unsigned");
    let seal = seal_key(&parsed)?;
    let (bytes, m) = build_for(&manifests, &identity_dir, unsigned, None, seal.as_ref())?;
    crate::files::replace(&output, &bytes, crate::files::PRIVATE).map_err(|source| {
        LayerError::Io {
            path: output.clone(),
            source,
        }
    })?;
    let names: Vec<&str> = m
        .machines
        .iter()
        .map(|m| m.doc.metadata.name.as_str())
        .collect();
    writeln!(
        io.out,
        "wrote {} ({} bytes): cluster {}, machines {}, and the identity",
        output.display(),
        bytes.len(),
        m.cluster.doc.metadata.name,
        names.join(", ")
    )?;
    writeln!(
        io.out,
        "the layer holds the cluster's private keys: keep it as private as the identity"
    )?;
    if let Some(key) = &seal {
        writeln!(
            io.out,
            "sealed by key {}: a signed image bundled with `-layer-key` of that key's release.pub \
             accepts this layer and no changed copy of it",
            key.id
        )?;
    }
    match read_trust(&manifests)? {
        Some((trust, _)) => writeln!(
            io.out,
            "machines write only releases signed by {}",
            trust.ids().join(", ")
        )?,
        None => writeln!(io.out, "{UNSIGNED_WARNING}")?,
    }
    Ok(())
}

/// The key `-seal-key` names, read; `None` without the option.
pub fn seal_key(parsed: &Parsed) -> Result<Option<SigningKey>, crate::Error> {
    parsed
        .value("seal-key")
        .map(|p| crate::signing::read_signing_key(Path::new(p)))
        .transpose()
        .map_err(crate::Error::from)
}

/// The identity files a follower keeps (paths in the identity).
pub const FOLLOWER_IDENTITY: [&str; 2] = [identity::AGENT_TOKEN, identity::SERVER_CA_CERT];

/// Whether a follower keeps `rel`, a path in the identity (a file, or a
/// directory on the way to one it keeps).
pub fn follower_keeps(rel: &str) -> bool {
    FOLLOWER_IDENTITY
        .iter()
        .any(|f| *f == rel || f.strip_prefix(rel).is_some_and(|r| r.starts_with('/')))
}

/// What packing without a trust root gives up, said whenever it is done.
pub const UNSIGNED_WARNING: &str = "WARNING: packed without a trust root (-unsigned): \
machines write any release the Cluster's catalog names, signed or not, so whoever can edit \
the catalog decides what the fleet boots, and nothing stops a rollback to an old release";

/// The text of the `unsigned` marker packed in place of a trust root.
const UNSIGNED_TEXT: &str = "This layer was packed with `liken layer -unsigned`: it has no \
trust root, and its machines write releases without checking any signature.\n";

/// The deployment's trust.yaml and its signature's text, if it has one.
pub fn read_trust(dir: &Path) -> Result<Option<(TrustRoot, Option<String>)>, LayerError> {
    let path = dir.join(TRUST_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(LayerError::Io { path, source }),
    };
    let origin = path.display().to_string();
    let trust: TrustRoot = liken_api::decode::strict(&text, &origin).map_err(LayerError::Trust)?;
    let sig_path = dir.join(liken_api::signing::signature_name(TRUST_FILE));
    let sig = match std::fs::read_to_string(&sig_path) {
        Ok(t) => {
            liken_api::decode::strict::<liken_api::signing::DetachedSignature>(
                &t,
                &sig_path.display().to_string(),
            )
            .map_err(LayerError::Trust)?;
            Some(t)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(LayerError::Io {
                path: sig_path,
                source,
            });
        }
    };
    Ok(Some((trust, sig)))
}

/// Checks everything and returns the archive's bytes and the manifests
/// it holds. Without a trust.yaml in `manifests_dir` it refuses unless
/// `unsigned`, and then packs the `unsigned` marker instead.
pub fn build(
    manifests_dir: &Path,
    identity_dir: &Path,
    unsigned: bool,
) -> Result<(Vec<u8>, Manifests), LayerError> {
    build_for(manifests_dir, identity_dir, unsigned, None, None)
}

/// [`build`] for one role: a follower's layer holds the manifests and
/// only the identity files a follower keeps; a leader's (or `None`, every
/// machine's) holds the whole identity. The whole identity is checked
/// either way.
///
/// With `seal`, the layer carries seal.yaml and its signature by that
/// key ([`liken_api::layer_seal`]): the seal lists every file of the
/// whole layer, so a follower's part of it matches the same seal, which
/// a signed boot image naming the key checks before init trusts a file.
pub fn build_for(
    manifests_dir: &Path,
    identity_dir: &Path,
    unsigned: bool,
    role: Option<liken_api::Role>,
    seal: Option<&SigningKey>,
) -> Result<(Vec<u8>, Manifests), LayerError> {
    let keep = |rel: &str| role != Some(liken_api::Role::Follower) || follower_keeps(rel);
    let manifests = deployment::read_manifests(manifests_dir).map_err(LayerError::Deployment)?;
    let trust = read_trust(manifests_dir)?;
    if trust.is_none() && !unsigned {
        return Err(LayerError::NoTrustRoot {
            dir: manifests_dir.to_owned(),
        });
    }
    let identity_files = read_identity(identity_dir)?;

    // Every entry of the whole layer, kept or not, so the seal lists the
    // whole layer; only the kept ones are archived.
    let mut entries: Vec<(Entry, bool)> = Vec::new();
    let mut add = |path: String, perm: u32, body: Body| -> Result<(), LayerError> {
        entries.push((Entry { path, perm, body }, true));
        Ok(())
    };
    let dirs = ["", "/machines", "/identity"]
        .into_iter()
        .map(|d| format!("{ROOT}{d}"))
        .chain(
            identity::DIRS
                .iter()
                .filter(|d| keep(d))
                .map(|d| format!("{ROOT}/identity/{d}")),
        );
    add("etc".into(), 0o755, Body::Dir)?;
    for d in dirs {
        add(d, 0o755, Body::Dir)?;
    }
    add(
        format!("{ROOT}/{}", deployment::CLUSTER_FILE),
        0o644,
        Body::File(manifests.cluster.text.clone().into_bytes()),
    )?;
    for m in &manifests.machines {
        add(
            format!("{ROOT}/machines/{}.yaml", m.doc.metadata.name),
            0o644,
            Body::File(m.text.clone().into_bytes()),
        )?;
    }
    match trust {
        Some((_, sig)) => {
            // Packed as written: init verifies trust.yaml.sig over these
            // exact bytes.
            let text =
                std::fs::read(manifests_dir.join(TRUST_FILE)).map_err(|source| LayerError::Io {
                    path: manifests_dir.join(TRUST_FILE),
                    source,
                })?;
            add(format!("{ROOT}/{TRUST_FILE}"), 0o644, Body::File(text))?;
            if let Some(sig) = sig {
                add(
                    format!("{ROOT}/{}", liken_api::signing::signature_name(TRUST_FILE)),
                    0o644,
                    Body::File(sig.into_bytes()),
                )?;
            }
        }
        None => add(
            format!("{ROOT}/{UNSIGNED_FILE}"),
            0o644,
            Body::File(UNSIGNED_TEXT.as_bytes().to_vec()),
        )?,
    }
    for (file, bytes) in identity_files {
        let perm = if file.private { 0o600 } else { 0o644 };
        entries.push((
            Entry {
                path: format!("{ROOT}/identity/{}", file.rel),
                perm,
                body: Body::File(bytes),
            },
            keep(&file.rel),
        ));
    }
    if let Some(key) = seal {
        let (seal, signature) = seal_of(&entries, key)?;
        for (name, text) in [
            (layer_seal::SEAL_FILE.to_owned(), seal),
            (
                liken_api::signing::signature_name(layer_seal::SEAL_FILE),
                signature,
            ),
        ] {
            entries.push((
                Entry {
                    path: format!("{ROOT}/{name}"),
                    perm: 0o644,
                    body: Body::File(text.into_bytes()),
                },
                true,
            ));
        }
    }
    let mut archive = Archive::new();
    for (entry, kept) in entries {
        if kept {
            archive.add(entry).map_err(LayerError::Archive)?;
        }
    }
    Ok((archive.finish(), manifests))
}

/// The text of seal.yaml for `entries` (every file of the whole layer)
/// and of its signature by `key`.
fn seal_of(entries: &[(Entry, bool)], key: &SigningKey) -> Result<(String, String), LayerError> {
    let found = entries.iter().filter_map(|(e, _)| match &e.body {
        Body::File(bytes) => Some(layer_seal::Found {
            path: e.path.strip_prefix(&format!("{ROOT}/"))?.to_owned(),
            perm: e.perm,
            sha256: liken_api::hash::sha256(bytes),
        }),
        Body::Dir => None,
    });
    let text = layer_seal::LayerSeal::of(found)
        .render()
        .map_err(|e| LayerError::Seal(e.to_string()))?;
    let signature = key.sign(text.as_bytes());
    let sig_text =
        liken_api::decode::to_yaml(&signature).map_err(|e| LayerError::Seal(e.to_string()))?;
    Ok((text, sig_text))
}

/// Reads and checks every identity file.
fn read_identity(dir: &Path) -> Result<Vec<(identity::IdentityFile, Vec<u8>)>, LayerError> {
    let mut missing = Vec::new();
    let mut read = Vec::new();
    for file in identity::files() {
        let path = dir.join(&file.rel);
        match std::fs::read(&path) {
            Ok(bytes) => read.push((file, path, bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push(file.rel),
            Err(source) => return Err(LayerError::Io { path, source }),
        }
    }
    if !missing.is_empty() {
        return Err(LayerError::MissingIdentity {
            dir: dir.to_owned(),
            missing,
        });
    }
    identity::adopt::check(&read).map_err(LayerError::Identity)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    fn deployment(d: &Path) {
        std::fs::create_dir_all(d.join("machines")).unwrap();
        std::fs::write(
            d.join("cluster.yaml"),
            "apiVersion: liken.sh/v1alpha1\nkind: Cluster\nmetadata:\n  name: home\n\
             spec:\n  endpoint: https://10.0.0.10:6443\n  leaders: [node-1]\n",
        )
        .unwrap();
        for n in ["node-1", "node-2"] {
            std::fs::write(
                d.join(format!("machines/{n}.yaml")),
                format!(
                    "# {n}\napiVersion: liken.sh/v1alpha1\nkind: Machine\nmetadata:\n  name: {n}\nspec: {{}}\n"
                ),
            )
            .unwrap();
        }
        identity::mint::mint(&d.join("identity")).unwrap();
    }

    #[test]
    fn the_same_inputs_give_the_same_bytes() {
        let tmp = TestDir::new("layer");
        let d = tmp.path();
        deployment(d);
        let (a, _) = build(d, &d.join("identity"), true).unwrap();
        // Touch every input: new mtimes must not reach the archive.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        for p in [
            "cluster.yaml",
            "machines/node-1.yaml",
            "identity/server/token",
        ] {
            let bytes = std::fs::read(d.join(p)).unwrap();
            std::fs::write(d.join(p), bytes).unwrap();
        }
        let (b, _) = build(d, &d.join("identity"), true).unwrap();
        assert_eq!(a, b);
        assert!(
            a.windows(b"etc/liken/machines/node-2.yaml".len())
                .any(|w| w == b"etc/liken/machines/node-2.yaml")
        );
    }

    #[test]
    fn a_trust_root_is_packed_and_its_absence_refused_unless_unsigned() {
        let tmp = TestDir::new("layer-trust");
        let d = tmp.path();
        deployment(d);
        let e = build(d, &d.join("identity"), false).unwrap_err();
        assert!(matches!(e, LayerError::NoTrustRoot { .. }), "{e}");
        assert!(e.to_string().contains("-unsigned to give that up"), "{e}");
        let has =
            |bytes: &[u8], path: &str| bytes.windows(path.len()).any(|w| w == path.as_bytes());
        let (unsigned, _) = build(d, &d.join("identity"), true).unwrap();
        assert!(has(&unsigned, "etc/liken/unsigned"));

        let (key, public) = liken_api::signing::key_pair([7; 32]);
        let trust = TrustRoot::new([public]);
        let text = liken_api::decode::to_yaml(&trust).unwrap();
        std::fs::write(d.join(TRUST_FILE), &text).unwrap();
        let sig = liken_api::decode::to_yaml(&key.sign(text.as_bytes())).unwrap();
        std::fs::write(d.join("trust.yaml.sig"), sig).unwrap();
        let (signed, _) = build(d, &d.join("identity"), false).unwrap();
        assert!(has(&signed, "etc/liken/trust.yaml"));
        assert!(has(&signed, "etc/liken/trust.yaml.sig"));
        assert!(!has(&signed, "etc/liken/unsigned"));
        assert!(has(&signed, &text));

        // A hand-edited trust root is refused, naming the field.
        std::fs::write(d.join(TRUST_FILE), text.replace("keys:", "key:")).unwrap();
        let e = build(d, &d.join("identity"), false).unwrap_err();
        assert!(e.to_string().contains("key"), "{e}");
    }

    #[test]
    fn a_leader_without_a_machine_is_refused_and_nothing_written() {
        let tmp = TestDir::new("layer-leader");
        let d = tmp.path();
        deployment(d);
        std::fs::remove_file(d.join("machines/node-1.yaml")).unwrap();
        let msg = build(d, &d.join("identity"), true).unwrap_err().to_string();
        assert!(msg.contains("spec.leaders[0] names \"node-1\""), "{msg}");
    }

    #[test]
    fn an_incomplete_identity_names_each_missing_file() {
        let tmp = TestDir::new("layer-identity");
        let d = tmp.path();
        deployment(d);
        std::fs::remove_file(d.join("identity/server/token")).unwrap();
        std::fs::remove_file(d.join("identity/server/tls/etcd/peer-ca.crt")).unwrap();
        let msg = build(d, &d.join("identity"), true).unwrap_err().to_string();
        assert!(msg.contains("server/token is missing"), "{msg}");
        assert!(!msg.contains("agent-token"), "{msg}");
        std::fs::remove_file(d.join("identity/server/agent-token")).unwrap();
        let msg = build(d, &d.join("identity"), true).unwrap_err().to_string();
        assert!(msg.contains("server/agent-token is missing"), "{msg}");
        assert!(msg.contains("copies it and mints one"), "{msg}");
        assert!(
            msg.contains("server/tls/etcd/peer-ca.crt is missing"),
            "{msg}"
        );
    }

    /// The follower's layer holds what liken-init keeps on a follower
    /// (`role_layer::keep`, the installer's rule), and no more.
    #[test]
    fn a_followers_layer_is_what_init_keeps_on_a_follower() {
        let rels = identity::DIRS
            .iter()
            .map(|d| (*d).to_owned())
            .chain(identity::files().into_iter().map(|f| f.rel));
        for rel in rels {
            assert_eq!(
                follower_keeps(&rel),
                liken_init::role_layer::keep(
                    liken_api::Role::Follower,
                    &format!("{}/{rel}", liken_init::role_layer::IDENTITY_DIR)
                ),
                "{rel}"
            );
        }
        let tmp = TestDir::new("layer-follower");
        let d = tmp.path();
        deployment(d);
        let (all, _) = build(d, &d.join("identity"), true).unwrap();
        let (leader, _) = build_for(
            d,
            &d.join("identity"),
            true,
            Some(liken_api::Role::Leader),
            None,
        )
        .unwrap();
        assert_eq!(all, leader);
        let (follower, _) = build_for(
            d,
            &d.join("identity"),
            true,
            Some(liken_api::Role::Follower),
            None,
        )
        .unwrap();
        let has = |a: &[u8], s: &str| a.windows(s.len()).any(|w| w == s.as_bytes());
        for absent in [
            "PRIVATE KEY",
            "::server:",
            "etc/liken/identity/server/tls/etcd",
        ] {
            assert!(has(&all, absent), "{absent}");
            assert!(!has(&follower, absent), "{absent}");
        }
        for present in ["::node:", "server-ca.crt", "etc/liken/machines/node-1.yaml"] {
            assert!(has(&follower, present), "{present}");
        }
    }

    #[test]
    fn a_sealed_layer_and_every_part_of_it_init_keeps_pass_inits_check_and_a_changed_one_does_not()
    {
        let tmp = TestDir::new("layer-sealed");
        let d = tmp.path();
        deployment(d);
        let (key, public) = liken_api::signing::key_pair([7; 32]);
        let (_, other) = liken_api::signing::key_pair([8; 32]);
        let check = |bytes: &[u8], k: &liken_api::signing::ReleaseKey| {
            liken_init::layer_credential::check_archive(bytes, &k.public_key)
        };
        let (all, _) = build_for(d, &d.join("identity"), true, None, Some(&key)).unwrap();
        assert_eq!(check(&all, &public), Ok(public.id.clone()));
        let e = check(&all, &other).unwrap_err();
        assert!(e.contains("not by the key this boot image names"), "{e}");
        // The unsealed layer of the same inputs is refused by a key.
        let (plain, _) = build(d, &d.join("identity"), true).unwrap();
        let e = check(&plain, &public).unwrap_err();
        assert!(e.contains("has no seal.yaml"), "{e}");

        // A follower's medium, and the per-role layer init's install mode
        // packs from the whole layer unpacked, keep the seal and pass.
        let (follower, _) = build_for(
            d,
            &d.join("identity"),
            true,
            Some(liken_api::Role::Follower),
            Some(&key),
        )
        .unwrap();
        assert_eq!(check(&follower, &public), Ok(public.id.clone()));
        let root = tmp.path().join("unpacked/etc/liken");
        liken_init::layer_credential::unpack(&all, &root).unwrap();
        for role in [liken_api::Role::Leader, liken_api::Role::Follower] {
            let packed = liken_init::role_layer::pack(&root, role).unwrap();
            assert_eq!(check(&packed, &public), Ok(public.id.clone()), "{role:?}");
        }

        // One byte of a Machine changed after sealing.
        let mut changed = all.clone();
        let at = changed
            .windows(6)
            .position(|w| w == b"# node")
            .expect("the machine's comment");
        changed[at + 2] = b'N';
        let e = check(&changed, &public).unwrap_err();
        assert!(e.contains("is not the file the layer's seal lists"), "{e}");
    }
}
