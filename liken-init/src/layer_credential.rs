//! The deployment layer on a boot from a signed unified kernel image.
//!
//! A type #1 entry hands the kernel the layer as one more initrd
//! (`liken/layer.cpio` on the ESP), which the kernel unpacks into
//! /etc/liken. A unified kernel image carries its own initrds, signed,
//! and is the same for every fleet, so it cannot carry a fleet's layer.
//! systemd-boot 252's stub instead packs each `loader/credentials/*.cred`
//! file of the ESP into an extra initrd as
//! `/.extra/global_credentials/<name>`: the layer arrives as one file,
//! the `liken layer` archive itself
//! ([`liken_api::bootloader::LAYER_CREDENTIAL_IN_INITRD`]), and this step
//! unpacks it into /etc/liken when the initramfs has no layer of its own.
//!
//! When the command line names the key that seals the fleet's layers
//! (`liken.layer-key=`, from the signed image), the layer is checked
//! against its seal before anything of it is written or read
//! ([`crate::layer_seal`]); a refused layer is removed, whatever its
//! source, and the boot goes on without one. Without the argument (a
//! type #1 entry, an image bundled before seals) the layer is taken as
//! the ESP holds it and the milestone says it is not verified. The
//! archive is read strictly
//! ([`liken_disk::cpio::read`]: directories and regular files only,
//! plain relative paths) and only its `etc/liken/` part is written, with
//! its own permission bits, never following a link.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use liken_api::bootloader::LAYER_CREDENTIAL_IN_INITRD;
use liken_disk::cpio::{self, Body};

use liken_api::signing::{KeyId, PublicKey};

use crate::console::Outcome;
use crate::context::Boot;
use crate::layer_seal::{self, LayerFile};

/// The milestone name.
pub const MILESTONE: &str = "layer";

/// The largest credential read: a layer is documents and a few keys.
pub const MAX_LAYER: u64 = 16 << 20;

/// The archive's root for the layer's files.
const ROOT: &str = "etc/liken";

/// Where this boot's layer comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The initramfs has /etc/liken/cluster.yaml: a type #1 entry, the
    /// install media or a kexec loaded the layer as an initrd.
    Initramfs,
    /// Only systemd-boot's credential has it.
    Credential,
    /// Neither.
    None,
}

/// Decides the source from what is there.
pub fn decide_source(initramfs_has_layer: bool, credential_exists: bool) -> Source {
    match (initramfs_has_layer, credential_exists) {
        (true, _) => Source::Initramfs,
        (false, true) => Source::Credential,
        (false, false) => Source::None,
    }
}

/// Where an archive path goes below `etc_liken`: `None` for the
/// directories above it (`etc`, `etc/liken`), an error for anything
/// outside it.
pub fn decide_target(etc_liken: &Path, path: &str) -> Result<Option<PathBuf>, String> {
    if path == "etc" || path == ROOT {
        return Ok(None);
    }
    match path.strip_prefix(ROOT).and_then(|r| r.strip_prefix('/')) {
        Some(rest) => Ok(Some(etc_liken.join(rest))),
        None => Err(format!(
            "{path:?} lies outside {ROOT}/: a layer holds nothing else"
        )),
    }
}

/// Unpacks a layer archive's bytes into `etc_liken`; returns the number
/// of files written.
pub fn unpack(bytes: &[u8], etc_liken: &Path) -> Result<usize, String> {
    unpack_entries(cpio::read(bytes).map_err(|e| e.to_string())?, etc_liken)
}

/// [`unpack`] of an archive already read.
fn unpack_entries(entries: Vec<cpio::Entry>, etc_liken: &Path) -> Result<usize, String> {
    // Every target is decided before anything is written.
    let mut plan = Vec::with_capacity(entries.len());
    for e in entries {
        if let Some(target) = decide_target(etc_liken, &e.path)? {
            plan.push((target, e));
        }
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(etc_liken)
        .map_err(|e| format!("creating {}: {e}", etc_liken.display()))?;
    let mut files = 0usize;
    for (target, e) in plan {
        let fail = |what: &str, err: std::io::Error| format!("{what} {}: {err}", target.display());
        match &e.body {
            Body::Dir => match std::fs::DirBuilder::new().mode(e.perm).create(&target) {
                Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => {
                    return Err(fail("creating", err));
                }
                _ => {}
            },
            Body::File(data) => {
                if let Some(dir) = target.parent() {
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o755)
                        .create(dir)
                        .map_err(|err| fail("creating the directory of", err))?;
                }
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(e.perm)
                    .custom_flags(nix::libc::O_NOFOLLOW)
                    .open(&target)
                    .map_err(|err| fail("creating", err))?;
                f.write_all(data).map_err(|err| fail("writing", err))?;
                files = files.saturating_add(1);
            }
        }
    }
    Ok(files)
}

/// The boot step.
pub fn step(boot: &mut Boot) -> Outcome {
    let etc = boot.paths.etc_liken.clone();
    let credential = Path::new(LAYER_CREDENTIAL_IN_INITRD);
    let source = decide_source(
        crate::layer::cluster_path(&etc).exists(),
        credential.exists(),
    );
    let key = match &boot.cmdline.layer_key {
        None => None,
        Some(Ok(key)) => Some(*key),
        Some(Err(e)) => {
            discard(&etc);
            return Outcome::Failed(format!("{e}; no layer is trusted on this boot"));
        }
    };
    match source {
        Source::Initramfs => match key {
            None => Outcome::ok_with("from the initramfs"),
            Some(key) => match check_unpacked(&etc, &key) {
                Ok(id) => Outcome::ok_with(format!("from the initramfs, sealed by key {id}")),
                Err(e) => {
                    discard(&etc);
                    Outcome::Failed(refused(&e))
                }
            },
        },
        Source::None => Outcome::ok_with(format!(
            "none in the initramfs nor at {LAYER_CREDENTIAL_IN_INITRD}"
        )),
        Source::Credential => {
            let bytes = match crate::fsutil::read_capped(credential, MAX_LAYER) {
                Ok(b) => b,
                Err(e) => {
                    return Outcome::Failed(format!(
                        "cannot read {LAYER_CREDENTIAL_IN_INITRD} ({e}); write the layer again \
                         (liken/layer.cpio and loader/credentials/liken-layer.cred on the ESP)"
                    ));
                }
            };
            let unpackable = |e: &str| {
                Outcome::Failed(format!(
                    "the layer in {LAYER_CREDENTIAL_IN_INITRD} cannot be unpacked: {e}; make it \
                     again with `liken layer` and reinstall, or rewrite the ESP's \
                     loader/credentials/liken-layer.cred"
                ))
            };
            // Read once: checked, then written.
            let entries = match (cpio::read(&bytes), key) {
                (Ok(entries), _) => entries,
                (Err(e), Some(_)) => return Outcome::Failed(refused(&unreadable(&e))),
                (Err(e), None) => return unpackable(&e.to_string()),
            };
            // Checked before a byte of it is written.
            let sealed = match key {
                None => None,
                Some(key) => match check_entries(&entries, &key) {
                    Ok(id) => Some(id),
                    Err(e) => return Outcome::Failed(refused(&e)),
                },
            };
            match unpack_entries(entries, &etc) {
                Ok(n) => Outcome::ok_with(match sealed {
                    Some(id) => format!(
                        "{n} files from systemd-boot's credential {LAYER_CREDENTIAL_IN_INITRD}, \
                         sealed by key {id}"
                    ),
                    None => format!(
                        "{n} files from systemd-boot's credential {LAYER_CREDENTIAL_IN_INITRD} \
                         (a file on the ESP, not verified: this boot's command line names no \
                         {})",
                        liken_api::layer_seal::ARG
                    ),
                }),
                Err(e) => unpackable(&e),
            }
        }
    }
}

/// The message of a refused layer.
fn refused(why: &str) -> String {
    format!(
        "the layer is refused: {why}; this boot goes on without one (no Machine, no k3s). Write \
         the layer the fleet's owner sealed to the ESP (loader/credentials/liken-layer.cred)"
    )
}

/// Checks an archive's files against the seal `key` signed; the reason
/// as text on refusal.
pub fn check_archive(bytes: &[u8], key: &PublicKey) -> Result<KeyId, String> {
    check_entries(&cpio::read(bytes).map_err(|e| unreadable(&e))?, key)
}

/// Why an archive that cannot be read is refused.
fn unreadable(e: &cpio::ReadError) -> String {
    format!("it cannot be read: {e}")
}

/// [`check_archive`] of an archive already read.
fn check_entries(entries: &[cpio::Entry], key: &PublicKey) -> Result<KeyId, String> {
    let prefix = format!("{ROOT}/");
    let files: Vec<LayerFile<'_>> = entries
        .iter()
        .filter_map(|e| match &e.body {
            Body::File(data) => Some(LayerFile {
                // A file outside etc/liken is refused by the unpacking;
                // it keeps its full path here, which no seal lists.
                path: e.path.strip_prefix(&prefix).unwrap_or(&e.path),
                perm: e.perm,
                bytes: data,
            }),
            Body::Dir => None,
        })
        .collect();
    layer_seal::decide(key, &files).map_err(|e| e.to_string())
}

/// Checks the layer the initramfs unpacked into `etc` against the seal
/// `key` signed.
fn check_unpacked(etc: &Path, key: &PublicKey) -> Result<KeyId, String> {
    // The leader's rule keeps every file: the whole tree is read back as
    // an archive (regular files and directories only, no link followed).
    let archive = crate::role_layer::pack(etc, liken_api::Role::Leader)?;
    check_archive(&archive, key)
}

/// Removes a layer that is not trusted, so no later step reads it. What
/// cannot be removed is said on the console; the later steps then find
/// a partial layer at worst, never a trusted one, since nothing reads a
/// layer's trust from anywhere but its files.
fn discard(etc: &Path) {
    match std::fs::remove_dir_all(etc) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => crate::console::line(&format!(
            "layer: cannot remove the refused layer at {}: {e}",
            etc.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_disk::cpio::{Archive, Entry};

    #[test]
    fn the_initramfs_wins_then_the_credential() {
        assert_eq!(decide_source(true, true), Source::Initramfs);
        assert_eq!(decide_source(false, true), Source::Credential);
        assert_eq!(decide_source(false, false), Source::None);
    }

    #[test]
    fn a_layer_archive_is_unpacked_below_etc_liken_with_its_modes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("liken-init-cred-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let etc = dir.join("etc/liken");
        let mut a = Archive::new();
        for (path, perm, body) in [
            ("etc", 0o755, Body::Dir),
            ("etc/liken", 0o755, Body::Dir),
            ("etc/liken/machines", 0o755, Body::Dir),
            (
                "etc/liken/cluster.yaml",
                0o644,
                Body::File(b"kind: Cluster\n".to_vec()),
            ),
            (
                "etc/liken/machines/node-1.yaml",
                0o644,
                Body::File(b"kind: Machine\n".to_vec()),
            ),
            (
                "etc/liken/identity/server/token",
                0o600,
                Body::File(b"K10".to_vec()),
            ),
        ] {
            a.add(Entry {
                path: path.into(),
                perm,
                body,
            })
            .unwrap();
        }
        assert_eq!(unpack(&a.finish(), &etc).unwrap(), 3);
        assert_eq!(
            std::fs::read(etc.join("machines/node-1.yaml")).unwrap(),
            b"kind: Machine\n"
        );
        let mode = |p: &str| std::fs::metadata(etc.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("identity/server/token"), 0o600);
        assert!(crate::layer::cluster_path(&etc).exists());

        // Anything outside etc/liken refuses the whole archive.
        let mut b = Archive::new();
        b.add(Entry {
            path: "etc/passwd".into(),
            perm: 0o644,
            body: Body::File(b"root::0:0::/:/bin/sh\n".to_vec()),
        })
        .unwrap();
        let e = unpack(&b.finish(), &dir.join("other")).unwrap_err();
        assert!(e.contains("outside etc/liken/"), "{e}");
        assert!(!dir.join("other").exists());
        // A link planted where a file goes is not followed.
        let mut c = Archive::new();
        c.add(Entry {
            path: "etc/liken/cluster.yaml".into(),
            perm: 0o644,
            body: Body::File(b"x".to_vec()),
        })
        .unwrap();
        let linked = dir.join("linked");
        std::fs::create_dir_all(&linked).unwrap();
        std::os::unix::fs::symlink(dir.join("target"), linked.join("cluster.yaml")).unwrap();
        assert!(unpack(&c.finish(), &linked).is_err());
        assert!(!dir.join("target").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
