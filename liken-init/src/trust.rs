//! Signed releases: init's last word on what may be written into a slot.
//!
//! The machine operator checks a release against the Cluster's catalog,
//! but whoever can write the catalog could choose what every machine
//! boots. So before the write-release request touches anything, init
//! checks release.yaml's detached signature against its own trust root
//! and refuses, with the reason, a release that is unsigned, signed by a
//! key the root does not list, signed over other bytes, or carrying a
//! signature that is not the key's; and a release older than the
//! machine's floor, unless a signed rollback permit names this machine
//! and that version and has not expired.
//!
//! The trust root: the deployment layer's `trust.yaml` is adopted on the
//! first write and kept on the data partition
//! (`/var/lib/liken/trust/trust.yaml`). From then on a layer whose
//! trust.yaml differs is adopted only when its `trust.yaml.sig` is a
//! signature by a key the kept root trusts (a rotation: add the new key,
//! sign with the old one, later retire the old one); otherwise the kept
//! root stays and the console says why. A layer packed
//! `liken layer -unsigned` carries the `unsigned` marker instead, and
//! only then, with no kept root, are unsigned releases written.
//!
//! The floor: the newest release this machine ever blessed. A write
//! starts only from a blessed boot (release_writer refuses one on
//! trial), so the booted release raises it; the raised floor is kept
//! once the write is done (a write refused because the booted entry is
//! still counted keeps nothing), on the data partition and on the ESP
//! (`liken/floor`), so a wiped data partition does not reset it. Only a
//! permit lowers it, once the write it allowed is done.
//!
//! The decisions (`decide_*`) are pure; [`write_checked`] carries them
//! out before handing the request to the release writer.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use liken_api::control::{ReleaseWritten, SignedDocument, WriteRelease};
use liken_api::decode;
use liken_api::signing::{
    DetachedSignature, KeyId, MAX_SMALL_DOCUMENT, PermitError, RollbackPermit, TRUST_FILE,
    TrustRoot, UNSIGNED_FILE, VerifyError, signature_name,
};
use liken_api::{Time, Version};

use crate::console;
use crate::esp::EspError;
use crate::fsutil;
use crate::release_writer::{self, Machine, WriteError};

/// The directory below /var/lib/liken that holds the kept trust root
/// and the floor.
pub const TRUST_DIR: &str = "trust";
/// The floor's file name, in [`TRUST_DIR`] and (as `liken/floor`) on
/// the ESP.
pub const FLOOR_FILE: &str = "floor";
/// The floor on the ESP.
pub const ESP_FLOOR: &str = "liken/floor";

/// What a write is checked against, gathered by the serve loop.
#[derive(Clone, Debug)]
pub struct Context {
    /// The deployment layer (/run/liken/layer).
    pub layer: PathBuf,
    /// The kept trust root and floor (/var/lib/liken/trust).
    pub state: PathBuf,
    /// The release this boot runs, blessed (writes start only then).
    pub booted: Option<Version>,
    /// This machine's Cluster.
    pub cluster: Option<String>,
    /// This machine's name.
    pub machine: Option<String>,
    /// Now, for permits' expiry.
    pub now: Time,
}

/// Why a release was refused before anything was written.
#[derive(Debug)]
pub enum TrustError {
    /// The machine has no trust root and its layer was not packed
    /// `-unsigned`.
    NoTrustRoot,
    /// The signature was refused.
    Signature(VerifyError),
    /// A signature, permit or trust root could not be read.
    Document {
        /// What it is.
        what: String,
        /// Why.
        why: String,
    },
    /// The release is older than the floor and no permit allows it.
    BelowFloor {
        /// The release asked for.
        version: Version,
        /// The floor.
        floor: Version,
        /// Why a permit given did not apply.
        permit: Option<String>,
    },
    /// The kept state could not be read or written.
    State {
        /// What init was doing.
        doing: String,
        /// Why.
        error: io::Error,
    },
    /// The ESP's floor could not be read or written.
    Esp(EspError),
    /// The release writer refused or failed.
    Write(WriteError),
}

impl fmt::Display for TrustError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrustError::NoTrustRoot => f.write_str(
                "refused: this machine has no trust root (its layer holds no trust.yaml) and its \
                 layer was not packed -unsigned; nothing was written. Add trust.yaml to the \
                 deployment (`liken keygen`, `liken trust`), pack the layer again and reinstall, \
                 or pack it -unsigned to write unsigned releases",
            ),
            TrustError::Signature(e) => write!(
                f,
                "refused ({}): release.yaml: {e}; nothing was written",
                e.reason()
            ),
            TrustError::Document { what, why } => {
                write!(f, "refused: {what}: {why}; nothing was written")
            }
            TrustError::BelowFloor {
                version,
                floor,
                permit,
            } => {
                write!(
                    f,
                    "refused (below-floor): release {version} is older than {floor}, the newest \
                     release this machine has blessed; nothing was written. Going back needs a \
                     rollback permit (`liken sign -allow-rollback {version}`)"
                )?;
                if let Some(p) = permit {
                    write!(f, "; the permit given does not apply: {p}")?;
                }
                Ok(())
            }
            TrustError::State { doing, error } => write!(
                f,
                "refused: {doing}: {error}; nothing was written, check the data partition"
            ),
            TrustError::Esp(e) => write!(f, "refused: the floor on the ESP: {e}"),
            TrustError::Write(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for TrustError {}

// ---------------------------------------------------------------------
// Decisions.

/// The trust root in force, and whether the layer's must be kept.
#[derive(Debug, PartialEq, Eq)]
pub struct RootChoice {
    /// The root to check against; `None` when there is none.
    pub root: Option<TrustRoot>,
    /// Keep the layer's trust.yaml (and signature) on the data
    /// partition: a first root, or a signed rotation.
    pub adopt: bool,
    /// Why the layer's root was not taken, for the console.
    pub note: Option<String>,
}

/// The layer's trust root as found: the document, its exact bytes and
/// its signature.
#[derive(Debug)]
pub struct LayerRoot {
    /// trust.yaml.
    pub root: TrustRoot,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// trust.yaml.sig, if any, and its exact bytes (kept as they are, so
    /// the kept signature is the file the publisher wrote).
    pub signature: Option<(DetachedSignature, Vec<u8>)>,
}

/// Which trust root holds: the kept one, unless the layer's is new and
/// signed by a key the kept one trusts; the layer's when none is kept.
pub fn decide_root(kept: Option<(TrustRoot, Vec<u8>)>, layer: Option<LayerRoot>) -> RootChoice {
    match (kept, layer) {
        (None, None) => RootChoice {
            root: None,
            adopt: false,
            note: None,
        },
        (None, Some(l)) => RootChoice {
            root: Some(l.root),
            adopt: true,
            note: None,
        },
        (Some((k, _)), None) => RootChoice {
            root: Some(k),
            adopt: false,
            note: None,
        },
        (Some((k, kept_bytes)), Some(l)) => {
            if kept_bytes == l.bytes {
                return RootChoice {
                    root: Some(k),
                    adopt: false,
                    note: None,
                };
            }
            match k.verify(&l.bytes, l.signature.as_ref().map(|(sig, _)| sig)) {
                Ok(_) => RootChoice {
                    root: Some(l.root),
                    adopt: true,
                    note: None,
                },
                Err(e) => RootChoice {
                    root: Some(k),
                    adopt: false,
                    note: Some(format!(
                        "the layer's trust.yaml differs from the one kept and is not taken: \
                         {e}; a new trust root must be signed by a key the kept one trusts"
                    )),
                },
            }
        }
    }
}

/// Whether release.yaml (its bytes and signature) may be written: the
/// signing key's id, or `None` for an unsigned release on a machine with
/// no root whose layer was packed `-unsigned`.
pub fn decide_signature(
    root: Option<&TrustRoot>,
    unsigned_layer: bool,
    bytes: &[u8],
    signature: Option<&DetachedSignature>,
) -> Result<Option<KeyId>, TrustError> {
    match root {
        Some(r) => r
            .verify(bytes, signature)
            .map(Some)
            .map_err(TrustError::Signature),
        None if unsigned_layer => Ok(None),
        None => Err(TrustError::NoTrustRoot),
    }
}

/// The floor: the newest of the kept floors and the booted (blessed)
/// release.
pub fn decide_floor<'a>(
    kept: impl IntoIterator<Item = Option<&'a Version>>,
    booted: Option<&'a Version>,
) -> Option<Version> {
    kept.into_iter().chain([booted]).flatten().max().cloned()
}

/// Whether `version` may be written under `floor`: yes at or above it,
/// or below it with a permit that applies (whose check is `permit`).
/// `Ok(true)` when the permit was what allowed it.
pub fn decide_version(
    version: &Version,
    floor: Option<&Version>,
    permit: Option<Result<(), String>>,
) -> Result<bool, TrustError> {
    let Some(floor) = floor else {
        return Ok(false);
    };
    if version >= floor {
        return Ok(false);
    }
    match permit {
        Some(Ok(())) => Ok(true),
        Some(Err(why)) => Err(TrustError::BelowFloor {
            version: version.clone(),
            floor: floor.clone(),
            permit: Some(why),
        }),
        None => Err(TrustError::BelowFloor {
            version: version.clone(),
            floor: floor.clone(),
            permit: None,
        }),
    }
}

/// Checks a permit: signed by a trusted key, and naming this machine,
/// its Cluster and `version`, unexpired.
pub fn check_permit(
    root: Option<&TrustRoot>,
    permit: &SignedDocument,
    cluster: Option<&str>,
    machine: Option<&str>,
    version: &Version,
    now: Time,
) -> Result<(), String> {
    let root = root.ok_or("this machine has no trust root to check it against")?;
    let sig: DetachedSignature =
        decode::strict(&permit.signature, "the permit's signature").map_err(|e| e.to_string())?;
    root.verify(permit.document.as_bytes(), Some(&sig))
        .map_err(|e| format!("the permit was refused ({}): {e}", e.reason()))?;
    let doc: RollbackPermit =
        decode::strict(&permit.document, "the permit").map_err(|e| e.to_string())?;
    doc.allows(
        cluster.unwrap_or_default(),
        machine.unwrap_or_default(),
        version,
        now,
    )
    .map_err(|e: PermitError| e.to_string())
}

// ---------------------------------------------------------------------
// Files.

fn read_optional(path: &Path, cap: u64) -> Result<Option<Vec<u8>>, TrustError> {
    match fsutil::read_capped(path, cap) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(TrustError::State {
            doing: format!("reading {}", path.display()),
            error,
        }),
    }
}

fn parse_doc<T>(bytes: &[u8], origin: &Path) -> Result<T, TrustError>
where
    T: serde::de::DeserializeOwned + liken_api::Kind + liken_api::validate::Validate,
{
    let origin = origin.display().to_string();
    let text = std::str::from_utf8(bytes).map_err(|_| TrustError::Document {
        what: origin.clone(),
        why: "it is not UTF-8 text".into(),
    })?;
    decode::strict(text, &origin).map_err(|e| TrustError::Document {
        what: origin,
        why: e.to_string(),
    })
}

/// The kept root, its bytes.
fn read_kept(state: &Path) -> Result<Option<(TrustRoot, Vec<u8>)>, TrustError> {
    let path = state.join(TRUST_FILE);
    let Some(bytes) = read_optional(&path, MAX_SMALL_DOCUMENT)? else {
        return Ok(None);
    };
    Ok(Some((parse_doc(&bytes, &path)?, bytes)))
}

/// The layer's root.
fn read_layer(layer: &Path) -> Result<Option<LayerRoot>, TrustError> {
    let path = layer.join(TRUST_FILE);
    let Some(bytes) = read_optional(&path, MAX_SMALL_DOCUMENT)? else {
        return Ok(None);
    };
    let root = parse_doc(&bytes, &path)?;
    let sig_path = layer.join(signature_name(TRUST_FILE));
    let signature = match read_optional(&sig_path, MAX_SMALL_DOCUMENT)? {
        Some(b) => Some((parse_doc(&b, &sig_path)?, b)),
        None => None,
    };
    Ok(Some(LayerRoot {
        root,
        bytes,
        signature,
    }))
}

fn write_state(path: &Path, bytes: &[u8]) -> Result<(), TrustError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|error| TrustError::State {
            doing: format!("creating {}", dir.display()),
            error,
        })?;
    }
    fsutil::write_atomic(path, bytes, 0o644).map_err(|error| TrustError::State {
        doing: format!("writing {}", path.display()),
        error,
    })
}

/// A floor file's version; an unreadable one counts as none (the other
/// copy and the booted release still hold the floor up).
fn parse_floor(bytes: Option<Vec<u8>>) -> Option<Version> {
    let bytes = bytes?;
    Version::parse(std::str::from_utf8(&bytes).ok()?.trim()).ok()
}

/// The trust root in force for this write, adopting the layer's when
/// [`decide_root`] says so.
pub fn load_root(ctx: &Context) -> Result<(Option<TrustRoot>, bool), TrustError> {
    let kept = read_kept(&ctx.state)?;
    let layer = read_layer(&ctx.layer)?;
    let layer_sig = layer.as_ref().map(|l| l.signature.clone());
    let layer_bytes = layer.as_ref().map(|l| l.bytes.clone());
    let choice = decide_root(kept, layer);
    if let Some(note) = &choice.note {
        console::line(&format!("{}: {note}", release_writer::MILESTONE));
    }
    if choice.adopt
        && let Some(bytes) = layer_bytes
    {
        write_state(&ctx.state.join(TRUST_FILE), &bytes)?;
        let sig_path = ctx.state.join(signature_name(TRUST_FILE));
        match layer_sig.flatten() {
            Some((_, bytes)) => write_state(&sig_path, &bytes)?,
            None => {
                let _ = std::fs::remove_file(&sig_path);
            }
        }
        if let Some(root) = &choice.root {
            console::line(&format!(
                "{}: trust root kept on the data partition: keys {}",
                release_writer::MILESTONE,
                root.ids().join(", ")
            ));
        }
    }
    let unsigned = std::fs::symlink_metadata(ctx.layer.join(UNSIGNED_FILE)).is_ok();
    Ok((choice.root, unsigned))
}

/// Checks the request's signature, version and permit against the trust
/// root and floor, then writes the release; refuses before anything is
/// written. A permit, once its write is done, lowers the floor to its
/// version.
pub fn write_checked(
    m: &Machine<'_>,
    ctx: &Context,
    request: &WriteRelease,
) -> Result<ReleaseWritten, TrustError> {
    let name =
        release_writer::decide_release_dir(m.releases, &request.directory).map_err(|why| {
            TrustError::Write(WriteError::Directory {
                requested: request.directory.clone(),
                why,
            })
        })?;
    // The bytes the operator checked against the catalog (their digest
    // is checked here too), so the signature is over the very release
    // the writer writes.
    let (release, text) = crate::release_check::read_release_text(
        &m.releases.join(&name),
        Some(&request.release_sha256),
    )
    .map_err(|e| TrustError::Write(WriteError::Check(e)))?;
    let bytes = text.as_bytes();

    let (root, unsigned_layer) = load_root(ctx)?;
    let signature = match &request.signature {
        Some(text) => Some(
            decode::strict::<DetachedSignature>(text, "release.yaml.sig").map_err(|e| {
                TrustError::Document {
                    what: "the request's release.yaml.sig".into(),
                    why: e.to_string(),
                }
            })?,
        ),
        None => None,
    };
    let key = decide_signature(root.as_ref(), unsigned_layer, bytes, signature.as_ref())?;

    // The floor, raised to the booted release. It is kept (in both
    // places) only once the write is done: the release writer makes the
    // last check that the booted entry is blessed, and a release that
    // booted on trial must not become the floor.
    let floor_path = ctx.state.join(FLOOR_FILE);
    let kept_data = parse_floor(read_optional(&floor_path, 256)?);
    let esp = (m.esp)().map_err(TrustError::Esp)?;
    let kept_esp = if esp.exists(ESP_FLOOR).map_err(TrustError::Esp)? {
        parse_floor(Some(esp.read(ESP_FLOOR).map_err(TrustError::Esp)?))
    } else {
        None
    };
    esp.unmount().map_err(TrustError::Esp)?;
    let floor = decide_floor([kept_data.as_ref(), kept_esp.as_ref()], ctx.booted.as_ref());

    let permit = request.rollback_permit.as_ref().map(|p| {
        check_permit(
            root.as_ref(),
            p,
            ctx.cluster.as_deref(),
            ctx.machine.as_deref(),
            &release.version,
            ctx.now,
        )
    });
    let by_permit = decide_version(&release.version, floor.as_ref(), permit)?;
    (m.progress)(&match &key {
        Some(k) => format!("release {} signed by trusted key {k}", release.version),
        None => format!(
            "release {} is unsigned; written because the layer was packed -unsigned",
            release.version
        ),
    });

    let done = release_writer::write_release(m, request).map_err(TrustError::Write)?;
    // A permit lowers the floor to the release it allowed.
    let keep = if by_permit {
        Some(done.version.clone())
    } else {
        floor
    };
    if let Some(f) = &keep {
        let text = format!("{f}\n");
        if kept_esp.as_ref() != Some(f) {
            let esp = (m.esp)().map_err(TrustError::Esp)?;
            esp.create_dir_all("liken").map_err(TrustError::Esp)?;
            esp.write(ESP_FLOOR, text.as_bytes())
                .map_err(TrustError::Esp)?;
            esp.unmount().map_err(TrustError::Esp)?;
        }
        if kept_data.as_ref() != Some(f) {
            write_state(&floor_path, text.as_bytes())?;
        }
        if by_permit {
            (m.progress)(&format!("floor lowered to {f} by a rollback permit"));
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::esp::Esp;
    use crate::release_check::write_test_artifact;
    use crate::release_writer::SlotTarget;
    use crate::sys::mount::FakeMounter;
    use liken_api::Slot;
    use liken_api::release::{
        ARTIFACT_BOOT, ARTIFACT_KERNEL, ARTIFACT_SYSTEM, RELEASE_FILE, Release,
    };
    use liken_api::signing::{SigningKey, key_pair};
    use std::fs::File;

    const BOOTED: &str = "2026.12.02-001";
    const DISK_SIZE: u64 = 1024 * 1024;

    struct World {
        root: PathBuf,
        releases: PathBuf,
        esp: PathBuf,
        disk: PathBuf,
        ctx: Context,
    }

    fn key(n: u8) -> SigningKey {
        key_pair([n; 32]).0
    }

    fn yaml<T: serde::Serialize>(doc: &T) -> String {
        decode::to_yaml(doc).unwrap()
    }

    /// A machine booted on BOOTED in slot A whose layer trusts `layer`'s
    /// keys (or is unsigned when empty).
    fn world(test: &str, layer_keys: &[&SigningKey]) -> World {
        let root =
            std::env::temp_dir().join(format!("liken-init-trust-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let layer = root.join("layer");
        std::fs::create_dir_all(&layer).unwrap();
        if layer_keys.is_empty() {
            std::fs::write(layer.join(UNSIGNED_FILE), "unsigned\n").unwrap();
        } else {
            let trust = TrustRoot::new(layer_keys.iter().map(|k| k.public()));
            std::fs::write(layer.join(TRUST_FILE), yaml(&trust)).unwrap();
        }
        let esp = root.join("esp");
        std::fs::create_dir_all(esp.join("loader/entries")).unwrap();
        std::fs::write(
            esp.join("loader/entries/liken-a.conf"),
            "title liken\noptions liken.slot=a panic=10 console=ttyS0\n",
        )
        .unwrap();
        let disk = root.join("disk");
        File::create(&disk).unwrap().set_len(DISK_SIZE).unwrap();
        World {
            releases: root.join("releases"),
            ctx: Context {
                layer,
                state: root.join("var/trust"),
                booted: Some(Version::parse(BOOTED).unwrap()),
                cluster: Some("home".into()),
                machine: Some("node-1".into()),
                now: Time::from_unix(1_800_000_000),
            },
            root,
            esp,
            disk,
        }
    }

    impl World {
        /// Publishes `version` into the releases directory, signed by
        /// `by`; returns the request.
        fn release(&self, version: &str, by: Option<&SigningKey>) -> WriteRelease {
            let dir = self.releases.join(version);
            std::fs::create_dir_all(&dir).unwrap();
            let artifacts = vec![
                write_test_artifact(&dir, ARTIFACT_KERNEL, "vmlinuz", b"kernel"),
                write_test_artifact(&dir, ARTIFACT_SYSTEM, "liken.sqfs", &[7u8; 4096]),
                write_test_artifact(&dir, ARTIFACT_BOOT, "boot.cpio", b"boot"),
            ];
            let release = Release::new(Version::parse(version).unwrap(), artifacts, vec![]);
            let text = yaml(&release);
            std::fs::write(dir.join(RELEASE_FILE), &text).unwrap();
            WriteRelease {
                directory: dir.display().to_string(),
                release_sha256: liken_api::hash::sha256(text.as_bytes()),
                signature: by.map(|k| yaml(&k.sign(text.as_bytes()))),
                rollback_permit: None,
            }
        }

        fn run(&self, request: &WriteRelease) -> Result<ReleaseWritten, TrustError> {
            let fake = FakeMounter::default();
            let open_slot = |slot: Slot| {
                assert_eq!(slot, Slot::B);
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&self.disk)
                    .unwrap();
                Ok(SlotTarget {
                    device: self.disk.clone(),
                    disk: Box::new(f),
                })
            };
            let esp = || Ok(Esp::at_directory(&fake, &self.esp));
            let m = Machine {
                releases: &self.releases,
                booted: Some(Slot::A),
                open_slot: &open_slot,
                mounts: "",
                cmdline: "liken.slot=a",
                esp: &esp,
                progress: &|_| {},
            };
            write_checked(&m, &self.ctx, request)
        }

        /// Nothing of the release reached the slot or the ESP.
        fn untouched(&self) {
            assert!(
                std::fs::read(&self.disk).unwrap().iter().all(|b| *b == 0),
                "the slot was written"
            );
            assert!(!self.esp.join("liken/b/vmlinuz").exists());
            let entries: Vec<_> = std::fs::read_dir(self.esp.join("loader/entries"))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(entries, ["liken-a.conf"]);
        }

        fn written(&self) {
            assert_eq!(&std::fs::read(&self.disk).unwrap()[..4096], &[7u8; 4096]);
            assert!(self.esp.join("loader/entries/liken-b+3.conf").exists());
        }

        fn floor(&self) -> (String, String) {
            (
                std::fs::read_to_string(self.ctx.state.join(FLOOR_FILE)).unwrap(),
                std::fs::read_to_string(self.esp.join(ESP_FLOOR)).unwrap(),
            )
        }
    }

    impl Drop for World {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    const NEXT: &str = "2026.12.03-001";
    const OLDER: &str = "2026.12.01-001";

    #[test]
    fn a_release_signed_by_a_trusted_key_is_written_and_the_floor_kept_twice() {
        let a = key(1);
        let w = world("signed", &[&a]);
        let done = w.run(&w.release(NEXT, Some(&a))).unwrap();
        assert_eq!(done.version.to_string(), NEXT);
        w.written();
        // The booted (blessed) release is the floor, on the data
        // partition and on the ESP.
        assert_eq!(w.floor(), (format!("{BOOTED}\n"), format!("{BOOTED}\n")));
        // The layer's root was adopted.
        assert!(w.ctx.state.join(TRUST_FILE).exists());
    }

    #[test]
    fn every_refusal_says_why_and_writes_nothing() {
        let a = key(1);
        let b = key(2);
        let w = world("refusals", &[&a]);

        let e = w.run(&w.release(NEXT, None)).unwrap_err();
        assert!(e.to_string().starts_with("refused (unsigned)"), "{e}");
        w.untouched();

        let e = w.run(&w.release(NEXT, Some(&b))).unwrap_err();
        assert!(e.to_string().starts_with("refused (unknown-key)"), "{e}");
        assert!(e.to_string().contains(b.id.as_str()), "{e}");
        w.untouched();

        // One byte of release.yaml changed after signing (the request
        // names the changed bytes' digest, as an operator fooled by the
        // catalog would).
        let mut r = w.release(NEXT, Some(&a));
        let path = w.releases.join(NEXT).join(RELEASE_FILE);
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("kernel", "kernal");
        std::fs::write(&path, &text).unwrap();
        r.release_sha256 = liken_api::hash::sha256(text.as_bytes());
        let e = w.run(&r).unwrap_err();
        assert!(e.to_string().starts_with("refused (changed)"), "{e}");
        w.untouched();

        // A signature by b that claims to be a's.
        let mut r = w.release(NEXT, Some(&b));
        let mut sig: DetachedSignature =
            decode::strict(r.signature.as_deref().unwrap(), "sig").unwrap();
        sig.key_id = a.id.clone();
        r.signature = Some(yaml(&sig));
        let e = w.run(&r).unwrap_err();
        assert!(e.to_string().starts_with("refused (bad-signature)"), "{e}");
        w.untouched();

        // Below the floor (the booted release), though signed.
        let e = w.run(&w.release(OLDER, Some(&a))).unwrap_err();
        assert!(e.to_string().starts_with("refused (below-floor)"), "{e}");
        assert!(e.to_string().contains(BOOTED), "{e}");
        w.untouched();

        // A signature that is not a signature document.
        let mut r = w.release(NEXT, Some(&a));
        r.signature = Some("hello".into());
        let e = w.run(&r).unwrap_err();
        assert!(matches!(e, TrustError::Document { .. }), "{e}");
        w.untouched();
    }

    #[test]
    fn without_a_trust_root_only_an_unsigned_layer_writes_unsigned_releases() {
        let w = world("unsigned", &[]);
        w.run(&w.release(NEXT, None)).unwrap();
        w.written();

        let w = world("no-root", &[]);
        std::fs::remove_file(w.ctx.layer.join(UNSIGNED_FILE)).unwrap();
        let e = w.run(&w.release(NEXT, None)).unwrap_err();
        assert!(matches!(e, TrustError::NoTrustRoot), "{e}");
        assert!(e.to_string().contains("-unsigned"), "{e}");
        w.untouched();
    }

    #[test]
    fn a_kept_root_outlives_a_layer_swapped_to_unsigned() {
        let a = key(1);
        let w = world("downgrade", &[&a]);
        load_root(&w.ctx).unwrap();
        std::fs::remove_file(w.ctx.layer.join(TRUST_FILE)).unwrap();
        std::fs::write(w.ctx.layer.join(UNSIGNED_FILE), "x").unwrap();
        let e = w.run(&w.release(NEXT, None)).unwrap_err();
        assert!(e.to_string().starts_with("refused (unsigned)"), "{e}");
        w.untouched();
    }

    #[test]
    fn a_rollback_permit_signed_by_a_trusted_key_lets_an_older_release_through() {
        let a = key(1);
        let b = key(2);
        let w = world("permit", &[&a]);
        let permit = |by: &SigningKey, machines: &[&str], version: &str, expires: i64| {
            let doc = yaml(&RollbackPermit::new(
                "home".into(),
                machines.iter().map(|m| (*m).to_owned()).collect(),
                Version::parse(version).unwrap(),
                Time::from_unix(expires),
            ));
            SignedDocument {
                signature: yaml(&by.sign(doc.as_bytes())),
                document: doc,
            }
        };
        let later = 1_900_000_000;
        for (p, why) in [
            (permit(&b, &["node-1"], OLDER, later), "unknown-key"),
            (
                permit(&a, &["node-2"], OLDER, later),
                "names machines node-2",
            ),
            (
                permit(&a, &["node-1"], "2026.11.01-001", later),
                "allows release",
            ),
            (permit(&a, &["node-1"], OLDER, 1_700_000_000), "expired"),
        ] {
            let mut r = w.release(OLDER, Some(&a));
            r.rollback_permit = Some(p);
            let e = w.run(&r).unwrap_err();
            assert!(e.to_string().starts_with("refused (below-floor)"), "{e}");
            assert!(e.to_string().contains(why), "{why}: {e}");
            w.untouched();
        }
        let mut r = w.release(OLDER, Some(&a));
        r.rollback_permit = Some(permit(&a, &["node-1"], OLDER, later));
        w.run(&r).unwrap();
        w.written();
        // The permit lowered the floor to the release it allowed.
        assert_eq!(w.floor(), (format!("{OLDER}\n"), format!("{OLDER}\n")));
    }

    #[test]
    fn a_new_trust_root_is_taken_only_when_a_kept_key_signed_it() {
        let a = key(1);
        let c = key(3);
        let w = world("rotate", &[&a]);
        load_root(&w.ctx).unwrap();
        // Rotation to c, signed only by c: refused, a still rules.
        let to_c = yaml(&TrustRoot::new([c.public()]));
        std::fs::write(w.ctx.layer.join(TRUST_FILE), &to_c).unwrap();
        std::fs::write(
            w.ctx.layer.join("trust.yaml.sig"),
            yaml(&c.sign(to_c.as_bytes())),
        )
        .unwrap();
        let (root, _) = load_root(&w.ctx).unwrap();
        assert_eq!(root.unwrap().ids(), [a.id.to_string()]);
        let e = w.run(&w.release(NEXT, Some(&c))).unwrap_err();
        assert!(e.to_string().starts_with("refused (unknown-key)"), "{e}");
        w.untouched();
        // The same root signed by a: taken and kept, so c now signs. (The
        // comment shows the signature file is kept as written, not
        // written again from what was read.)
        std::fs::write(
            w.ctx.layer.join("trust.yaml.sig"),
            format!("# rotation to c\n{}", yaml(&a.sign(to_c.as_bytes()))),
        )
        .unwrap();
        w.run(&w.release(NEXT, Some(&c))).unwrap();
        w.written();
        let kept = std::fs::read_to_string(w.ctx.state.join(TRUST_FILE)).unwrap();
        assert_eq!(kept, to_c);
        // Its signature is kept byte for byte as the layer carries it.
        assert_eq!(
            std::fs::read(w.ctx.state.join("trust.yaml.sig")).unwrap(),
            std::fs::read(w.ctx.layer.join("trust.yaml.sig")).unwrap()
        );
        let e = w.run(&w.release("2026.12.04-001", Some(&a)));
        assert!(
            e.unwrap_err()
                .to_string()
                .starts_with("refused (unknown-key)")
        );
    }

    /// The booted entry still counted on the ESP (a trial boot whose
    /// record was not assessed): the release writer refuses, and the
    /// booted release, not blessed, must not become the floor.
    #[test]
    fn a_write_refused_on_trial_leaves_the_floor_where_it_was() {
        let a = key(1);
        let w = world("trial", &[&a]);
        std::fs::rename(
            w.esp.join("loader/entries/liken-a.conf"),
            w.esp.join("loader/entries/liken-a+2-1.conf"),
        )
        .unwrap();
        let e = w.run(&w.release(NEXT, Some(&a))).unwrap_err();
        assert!(
            matches!(e, TrustError::Write(WriteError::OnTrial { .. })),
            "{e}"
        );
        assert!(!w.ctx.state.join(FLOOR_FILE).exists());
        assert!(!w.esp.join(ESP_FLOOR).exists());
        // Below the booted release is still refused meanwhile.
        let e = w.run(&w.release(OLDER, Some(&a))).unwrap_err();
        assert!(e.to_string().starts_with("refused (below-floor)"), "{e}");
    }

    #[test]
    fn the_floor_is_the_newest_of_what_was_kept_and_the_booted_release() {
        let v = |s: &str| Version::parse(s).unwrap();
        let (x, y, z) = (v(OLDER), v(BOOTED), v(NEXT));
        assert_eq!(decide_floor([Some(&x), None], Some(&y)), Some(y.clone()));
        assert_eq!(
            decide_floor([Some(&z), Some(&x)], Some(&y)),
            Some(z.clone())
        );
        assert_eq!(decide_floor([None, None], None), None);
        assert!(decide_version(&x, Some(&y), None).is_err());
        assert!(!decide_version(&y, Some(&y), None).unwrap());
        assert!(decide_version(&x, Some(&y), Some(Ok(()))).unwrap());
        assert!(!decide_version(&x, None, None).unwrap());
    }
}
