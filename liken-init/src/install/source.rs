//! Where install mode finds the release it writes, and the check of
//! every artifact against release.yaml before a byte goes to the disk.
//!
//! Two kinds of install media carry a release:
//! - `liken media`, a netboot initramfs: the release lies in init's own
//!   root under `/liken/release/`, the deployment layer's cpio beside it
//!   as `/liken/layer.cpio`;
//! - `liken stick`: a FAT partition with GPT name `LIKEN-STICK`, which
//!   init mounts read-only and finds `liken/release/` and
//!   `liken/layer.cpio` on.
//!
//! The initramfs is looked at first: a netboot machine may have a stick
//! in it by accident, and what it booted is what it should install.
//! [`decide_source`] makes that choice from what was found.
//!
//! [`verify`] checks the release with [`release_check`] (the check the
//! write-release request runs too) under install mode's [`RULES`]:
//! every artifact listed is streamed through SHA-256 and its size
//! checked, so one with a wrong size or digest refuses the install
//! before anything is written. The small artifacts that go onto the ESP
//! and into the boot sectors are kept in memory as they are hashed, so
//! what is written is byte for byte what was checked. The system image
//! is too large for that: it is hashed again while it is written and
//! read back from the disk afterwards (see `write`).
//!
//! A stick made with `liken stick -secureboot` also carries the fleet's
//! Secure Boot keys ([`read_enrol_keys`]), which the disk gets too.

use std::fmt;
use std::path::{Path, PathBuf};

use liken_api::release::{
    ARTIFACT_BOOT, ARTIFACT_GRUB_BOOT, ARTIFACT_GRUB_CORE, ARTIFACT_KERNEL, ARTIFACT_MICROCODE,
    ARTIFACT_SYSTEM, ARTIFACT_SYSTEMD_BOOT, ARTIFACT_UKI_A, Release,
};
use liken_api::verity::VerityArg;

use liken_api::bootloader;

use crate::release_check::{self, CheckError, Checked, Rules};

/// The release directory, relative to the media's root (the initramfs
/// or the stick's FAT partition).
pub const RELEASE_DIR: &str = "liken/release";
/// The deployment layer's cpio, relative to the media's root.
pub const LAYER_FILE: &str = "liken/layer.cpio";
/// The GPT name of an install stick's FAT partition.
pub const STICK_LABEL: &str = "LIKEN-STICK";

/// An install stick's partition, as found in sysfs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stick {
    /// The partition's device node (`/dev/sda1`).
    pub device: PathBuf,
    /// The kernel name of the whole disk it is on (`sda`), which install
    /// mode never erases and waits to see removed.
    pub disk: Option<String>,
}

/// Where the release comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Init's own initramfs (`liken media`).
    Media,
    /// A stick's FAT partition (`liken stick`), to be mounted.
    Stick(Stick),
}

/// Why nothing can be installed from the media found, or the release on
/// it was refused. Each message says what to do.
#[derive(Debug)]
pub enum SourceError {
    /// No release in the initramfs and no stick.
    NoSource {
        /// How long init waited for a stick to appear.
        waited_secs: u64,
    },
    /// More than one partition is named LIKEN-STICK.
    SeveralSticks(Vec<PathBuf>),
    /// The initramfs holds a release but not the layer to install with.
    MediaWithoutLayer,
    /// The stick holds no layer.
    StickWithoutLayer(PathBuf),
    /// Which disk the stick's partition is on could not be told.
    StickDisk(PathBuf),
    /// The stick's partition could not be mounted.
    Mount {
        /// The partition.
        device: PathBuf,
        /// Why.
        error: String,
    },
    /// The release on the media was refused ([`release_check`]).
    Check(CheckError),
    /// The media's Secure Boot keys directory is incomplete or holds a
    /// file too large to be one of them.
    Keys {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceError::NoSource { waited_secs } => write!(
                f,
                "no release to install: the initramfs has no /{RELEASE_DIR} and no partition \
                 named {STICK_LABEL} appeared within {waited_secs} s; boot a stick made by \
                 `liken stick` (try another USB port) or the initramfs of `liken media`"
            ),
            SourceError::SeveralSticks(devices) => {
                let list: Vec<String> = devices.iter().map(|d| d.display().to_string()).collect();
                write!(
                    f,
                    "several partitions are named {STICK_LABEL} ({}); leave only the install \
                     stick to use in the machine and boot it again",
                    list.join(", ")
                )
            }
            SourceError::MediaWithoutLayer => write!(
                f,
                "this initramfs holds a release under /{RELEASE_DIR} but no /{LAYER_FILE}, the \
                 deployment layer the installed disk boots with; rebuild the media with a \
                 `liken media` that carries the layer, or install from a `liken stick` stick"
            ),
            SourceError::StickWithoutLayer(path) => write!(
                f,
                "the install stick has no {}, the deployment layer the installed disk boots \
                 with; rebuild the stick with `liken stick`",
                path.display()
            ),
            SourceError::StickDisk(device) => write!(
                f,
                "cannot tell from /sys/class/block which disk the install stick's partition {} \
                 is on, so it could not be kept from being erased; nothing was written: boot \
                 the stick on its own in a USB port, or install with `liken media`",
                device.display()
            ),
            SourceError::Mount { device, error } => write!(
                f,
                "cannot mount the install stick {} read-only as vfat ({error}); check it with \
                 `fsck.vfat -n` on a workstation, or write it again with `liken stick`",
                device.display()
            ),
            SourceError::Keys { path, why } => write!(
                f,
                "the install media's Secure Boot key {} {why}; nothing was written: write \
                 the stick again with `liken stick -secureboot <keys-dir>` (or without \
                 -secureboot)",
                path.display()
            ),
            SourceError::Check(e) => {
                let what_to_do = match e {
                    CheckError::ReleaseFile { .. } => {
                        "the install media is incomplete: build it again"
                    }
                    // Install media carry no digest to compare with.
                    CheckError::ReleaseDigest { .. } | CheckError::Document(_) => {
                        "the release on the install media is not valid: build the media \
                         again from a release made by `liken bundle`"
                    }
                    CheckError::MissingArtifact(_) => {
                        "install mode writes it: bundle the release again with `liken bundle`"
                    }
                    CheckError::Artifact { .. } => {
                        "nothing was written to any disk: the install media is damaged or \
                         was changed, so build it again"
                    }
                };
                write!(f, "{e}; {what_to_do}")
            }
        }
    }
}

impl std::error::Error for SourceError {}

/// Picks the release's origin from what was found: the initramfs's
/// release (with its layer) first, else the one stick.
pub fn decide_source(
    media_release: bool,
    media_layer: bool,
    sticks: &[Stick],
    waited_secs: u64,
) -> Result<Origin, SourceError> {
    if media_release {
        return if media_layer {
            Ok(Origin::Media)
        } else {
            Err(SourceError::MediaWithoutLayer)
        };
    }
    match sticks {
        [] => Err(SourceError::NoSource { waited_secs }),
        [one] => Ok(Origin::Stick(one.clone())),
        many => Err(SourceError::SeveralSticks(
            many.iter().map(|s| s.device.clone()).collect(),
        )),
    }
}

/// What install mode checks: every artifact listed, and that those it
/// writes are there; the ones that go onto the ESP and into the boot
/// sectors are kept in memory.
pub const RULES: Rules<'static> = Rules {
    required: &[
        ARTIFACT_KERNEL,
        ARTIFACT_BOOT,
        ARTIFACT_SYSTEMD_BOOT,
        ARTIFACT_GRUB_BOOT,
        ARTIFACT_GRUB_CORE,
        ARTIFACT_SYSTEM,
    ],
    optional: &[ARTIFACT_MICROCODE, ARTIFACT_UKI_A],
    others: true,
    keep: &[
        ARTIFACT_UKI_A,
        ARTIFACT_KERNEL,
        ARTIFACT_BOOT,
        ARTIFACT_MICROCODE,
        ARTIFACT_SYSTEMD_BOOT,
        ARTIFACT_GRUB_BOOT,
        ARTIFACT_GRUB_CORE,
    ],
};

/// The largest Secure Boot key file read from the media: one
/// certificate and its signature are a few KiB.
pub const MAX_KEY_FILE: u64 = 64 << 10;

/// The fleet's Secure Boot keys found on the media
/// ([`bootloader::SECURE_BOOT_KEYS_DIR`], put there by `liken stick
/// -secureboot`): the `.auth` files, names and bytes, in
/// [`bootloader::SECURE_BOOT_KEY_FILES`]'s order. Install mode copies
/// them to the disk's ESP for systemd-boot to enrol; it does not read
/// them, and nothing of liken trusts them: the firmware checks their
/// signatures, and only a firmware in setup mode takes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnrolKeys {
    /// `(file name, bytes)`.
    pub files: Vec<(&'static str, Vec<u8>)>,
}

/// Reads the keys under `root` (the stick's mount, or the initramfs):
/// `None` when the media carry none, an error when the directory lacks
/// one of the three files.
pub fn read_enrol_keys(root: &Path) -> Result<Option<EnrolKeys>, SourceError> {
    use std::io::Read;
    let dir = root.join(bootloader::SECURE_BOOT_KEYS_DIR);
    if !dir.is_dir() {
        return Ok(None);
    }
    let mut files = Vec::new();
    for name in bootloader::SECURE_BOOT_KEY_FILES {
        let path = dir.join(name);
        let err = |why: String| SourceError::Keys {
            path: path.clone(),
            why,
        };
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .and_then(|f| f.take(MAX_KEY_FILE + 1).read_to_end(&mut bytes))
            .map_err(|e| err(format!("cannot be read ({e})")))?;
        if bytes.len() as u64 > MAX_KEY_FILE || bytes.is_empty() {
            return Err(err(format!(
                "is {} bytes, not an authenticated variable of up to {MAX_KEY_FILE}",
                bytes.len()
            )));
        }
        files.push((name, bytes));
    }
    Ok(Some(EnrolKeys { files }))
}

/// A release whose every artifact has the size and digest release.yaml
/// gives.
#[derive(Clone, Debug)]
pub struct Verified {
    /// The release document.
    pub release: Release,
    /// The kernel's bytes.
    pub kernel: Vec<u8>,
    /// boot.cpio's bytes.
    pub boot: Vec<u8>,
    /// microcode.cpio's bytes, when the release has it.
    pub microcode: Option<Vec<u8>>,
    /// systemd-boot's EFI binary.
    pub systemd_boot: Vec<u8>,
    /// GRUB's boot.img.
    pub grub_boot: Vec<u8>,
    /// GRUB's core.img.
    pub grub_core: Vec<u8>,
    /// The system image, streamed when it is written.
    pub system: Checked,
    /// The system image's root hash for slot A's entry, when the
    /// release carries a dm-verity record.
    pub verity: Option<VerityArg>,
    /// Slot A's signed unified kernel image, when the release carries
    /// one: then it is slot A's entry.
    pub uki_a: Option<Vec<u8>>,
}

/// Reads `dir`/release.yaml and checks every artifact it lists
/// ([`RULES`]). `progress` hears of each artifact as it is checked.
pub fn verify(dir: &Path, progress: &mut dyn FnMut(&str)) -> Result<Verified, SourceError> {
    let check = SourceError::Check;
    let mut v = release_check::verify(dir, None, &RULES, progress).map_err(check)?;
    let verity = release_check::verity_arg(&v.release).map_err(check)?;
    let mut bytes = |name| v.take_required(name).map(|c| c.bytes).map_err(check);
    Ok(Verified {
        verity,
        kernel: bytes(ARTIFACT_KERNEL)?,
        boot: bytes(ARTIFACT_BOOT)?,
        systemd_boot: bytes(ARTIFACT_SYSTEMD_BOOT)?,
        grub_boot: bytes(ARTIFACT_GRUB_BOOT)?,
        grub_core: bytes(ARTIFACT_GRUB_CORE)?,
        microcode: v.take(ARTIFACT_MICROCODE).map(|c| c.bytes),
        uki_a: v.take(ARTIFACT_UKI_A).map(|c| c.bytes),
        system: v.take_required(ARTIFACT_SYSTEM).map_err(check)?,
        release: v.release,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::testutil::{fake_release, scratch};
    use liken_api::release::RELEASE_FILE;

    #[test]
    fn the_initramfs_comes_first() {
        let stick = Stick {
            device: "/dev/sda1".into(),
            disk: Some("sda".into()),
        };
        assert_eq!(
            decide_source(true, true, std::slice::from_ref(&stick), 0).unwrap(),
            Origin::Media
        );
        assert!(matches!(
            decide_source(true, false, std::slice::from_ref(&stick), 0),
            Err(SourceError::MediaWithoutLayer)
        ));
        assert_eq!(
            decide_source(false, false, std::slice::from_ref(&stick), 0).unwrap(),
            Origin::Stick(stick.clone())
        );
        let e = decide_source(false, false, &[], 30).unwrap_err();
        assert!(e.to_string().contains("within 30 s"), "{e}");
        let other = Stick {
            device: "/dev/sdb1".into(),
            disk: Some("sdb".into()),
        };
        let e = decide_source(false, true, &[stick, other], 0).unwrap_err();
        assert!(e.to_string().contains("/dev/sda1, /dev/sdb1"), "{e}");
    }

    #[test]
    fn verifies_and_keeps_the_small_artifacts() {
        let dir = scratch("source-ok");
        let rel = fake_release(&dir, true);
        let mut lines = Vec::new();
        let v = verify(&rel, &mut |l| lines.push(l.to_owned())).unwrap();
        assert_eq!(v.kernel, std::fs::read(rel.join("vmlinuz")).unwrap());
        assert_eq!(
            v.grub_core,
            std::fs::read(rel.join("grub-core.img")).unwrap()
        );
        assert!(v.microcode.is_some());
        assert_eq!(v.system.path, rel.join("liken.sqfs"));
        assert_eq!(lines.len(), v.release.artifacts.len());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn refuses_a_tampered_or_missing_artifact() {
        let dir = scratch("source-bad");
        let rel = fake_release(&dir, false);
        let v = verify(&rel, &mut |_| {}).unwrap();
        assert!(v.microcode.is_none());

        // Same size, other bytes: the digest catches it.
        let lic = rel.join("licenses.md");
        let mut bytes = std::fs::read(&lic).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&lic, &bytes).unwrap();
        let e = verify(&rel, &mut |_| {}).unwrap_err();
        assert!(
            matches!(&e, SourceError::Check(CheckError::Artifact { name, .. }) if name == "licenses"),
            "{e}"
        );
        assert!(
            e.to_string().contains("nothing was written to any disk"),
            "{e}"
        );
        assert!(e.to_string().contains("sha256"), "{e}");
        bytes[0] ^= 1;
        std::fs::write(&lic, &bytes).unwrap();

        // Longer: the size catches it.
        let sys = rel.join("liken.sqfs");
        let mut s = std::fs::read(&sys).unwrap();
        s.push(0);
        std::fs::write(&sys, &s).unwrap();
        let e = verify(&rel, &mut |_| {}).unwrap_err();
        assert!(
            e.to_string().contains("bytes, but release.yaml says"),
            "{e}"
        );
        s.pop();
        std::fs::write(&sys, &s).unwrap();

        // A link instead of the file is refused.
        let k = rel.join("vmlinuz");
        let moved = dir.join("vmlinuz.real");
        std::fs::rename(&k, &moved).unwrap();
        std::os::unix::fs::symlink(&moved, &k).unwrap();
        let e = verify(&rel, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("cannot be opened"), "{e}");
        std::fs::remove_file(&k).unwrap();
        std::fs::rename(&moved, &k).unwrap();

        let yaml = rel.join(RELEASE_FILE);
        let text = std::fs::read_to_string(&yaml).unwrap();
        // Without GRUB's core.img the install is refused.
        let no_core: String = text.replace("grub-core", "grub-kore");
        std::fs::write(&yaml, no_core).unwrap();
        let e = verify(&rel, &mut |_| {}).unwrap_err();
        assert!(
            matches!(
                e,
                SourceError::Check(CheckError::MissingArtifact("grub-core"))
            ),
            "{e}"
        );
        assert!(e.to_string().contains("liken bundle"), "{e}");

        std::fs::write(&yaml, "kind: Release\nversion: x\n").unwrap();
        assert!(matches!(
            verify(&rel, &mut |_| {}),
            Err(SourceError::Check(CheckError::Document(_)))
        ));
        std::fs::remove_file(&yaml).unwrap();
        let e = verify(&rel, &mut |_| {}).unwrap_err();
        assert!(
            matches!(e, SourceError::Check(CheckError::ReleaseFile { .. })),
            "{e}"
        );
        assert!(e.to_string().contains("build it again"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
