//! Writing a downloaded release into the inactive slot: the control
//! socket's `writeRelease` request.
//!
//! The machine operator downloads a release into
//! `/var/lib/liken/releases/<version>/` and checks its release.yaml
//! against the Cluster's catalog; init trusts none of that. It checks
//! again, itself, before writing a byte: the directory is a real
//! directory directly below the releases directory (no symlink, no
//! `..`), release.yaml has the digest the operator named, and every
//! artifact init writes (kernel, system image, boot initramfs, microcode
//! when listed) has the size and SHA-256 release.yaml gives, streamed
//! from an open file ([`release_check`], under this request's
//! [`RULES`]). Only then does anything change, in an order chosen
//! so that a power cut at any point leaves a machine that boots the
//! running release:
//!
//! 1. On the ESP: remove the target slot's loader entries and its kernel
//!    (GRUB falls back only to a slot that has a kernel), and point
//!    grubenv's preferred slot away from it.
//! 2. Write the system image raw into the slot's partition, fsync, drop
//!    the cached pages and read it back, comparing the SHA-256
//!    ([`slot_image`]): a disk that silently loses writes must not
//!    become a boot target.
//! 3. On the ESP: the initrds, then the kernel (each a temporary file,
//!    fsynced, renamed, directory fsynced, its bytes hashed on the way so
//!    a file changed since the check is caught before the rename), then
//!    the new entry `liken-<slot>+3.conf`, then grubenv's `+3` tries and
//!    preferred slot. The entry and grubenv are what make the slot a boot
//!    target, so they come last.
//!
//! The new entry's kernel arguments are the booted entry's, minus the
//! ones [`render_entry`](liken_api::bootloader::render_entry) writes
//! itself, so a machine keeps its console settings across releases.
//!
//! A release that carries signed unified kernel images (`uki-a`,
//! `uki-b`) gets the target slot's image as its entry instead: checked
//! against release.yaml like the kernel, copied to
//! `EFI/Linux/liken-<slot>+3.efi` with its bytes hashed on the way, and
//! no type #1 entry (its command line would not be the signed one). The
//! kernel and initrds are still written under /liken/<slot> for GRUB.
//! The image's command line is the release's: nothing of the booted
//! entry is carried on. The deployment layer reaches such a boot as
//! systemd-boot's credential `loader/credentials/liken-layer.cred`,
//! copied from `liken/layer.cpio` when the ESP lacks it (a machine
//! installed before its first UKI release).
//!
//! The decisions (`decide_*`) are pure and tested on their own; the rest
//! carries them out against a [`Machine`] whose parts (the slot device,
//! the ESP, the texts of /proc/mounts and /proc/cmdline) tests replace
//! with temporary files. The serve loop runs a write on a worker thread
//! ([`spawn`]) and refuses a second one while it runs ([`WriteGate`]).
//!
//! Not verified here: the release's other artifacts (the CLI,
//! systemd-boot, GRUB images, licenses), which init does not write.

use std::fmt;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::Sender;
use liken_api::bootloader::{
    self, BootloaderError, CREDENTIALS_DIR, ENTRIES_DIR, EntryKind, EntryName, EntryParams,
    GRUB_PREFERRED_VAR, LAYER_CREDENTIAL, LAYER_PATH, UKI_DIR,
};
use liken_api::control::{ReleaseWritten, Response, WriteRelease};
use liken_api::digest::FileName;
use liken_api::release::{
    ARTIFACT_BOOT, ARTIFACT_KERNEL, ARTIFACT_MICROCODE, ARTIFACT_SYSTEM, ARTIFACT_UKI_A,
    ARTIFACT_UKI_B, Artifact, Release,
};
use liken_api::verity::VerityArg;
use liken_api::{Sha256Hex, Slot};
use sha2::{Digest as _, Sha256};

use crate::cmdline;
use crate::console::{self, Outcome};
use crate::esp::{Esp, EspError};
use crate::release_check::{self, CheckError, Checked, Rules};
pub use crate::slot_image::SlotDevice;
use crate::slot_image::{self, ImageError};

/// grubenv on the ESP (the BIOS path's prefix directory is `/grub`).
pub const GRUBENV_PATH: &str = "grub/grubenv";

/// The milestone name of a release write on the console.
pub const MILESTONE: &str = "write-release";
/// The milestone of a disarm.
pub const DISARM_MILESTONE: &str = "disarm-release";

/// Why a release was not written. Each message says what to do.
#[derive(Debug)]
pub enum WriteError {
    /// Another write is running.
    Busy,
    /// This boot has no slot (install media, netboot): there is no
    /// inactive slot to write.
    NoSlot,
    /// The booted entry is on trial and not blessed yet: the other slot
    /// holds the only release known to boot, and writing would remove
    /// its entry.
    OnTrial {
        /// The slot that booted on trial.
        booted: Slot,
    },
    /// The request's directory is not one directly below the releases
    /// directory.
    Directory {
        /// What was asked.
        requested: String,
        /// Why it was refused.
        why: String,
    },
    /// The release was refused ([`release_check`]): release.yaml is not
    /// the one the request names, or an artifact does not match it.
    Check(CheckError),
    /// The directory's name is not the release's version.
    VersionMismatch {
        /// The directory's name.
        directory: String,
        /// The version release.yaml gives.
        version: String,
    },
    /// An artifact changed (or went) after it was checked, while the
    /// slot was being written.
    Changed {
        /// The artifact's name.
        name: String,
        /// Its path.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The slot's partition was not found.
    Partition {
        /// Its GPT name.
        label: &'static str,
        /// Why.
        why: String,
    },
    /// The slot's partition is mounted.
    Mounted {
        /// The partition.
        device: PathBuf,
        /// Where.
        at: String,
    },
    /// The system image is larger than the slot.
    TooLarge {
        /// The slot's partition.
        device: PathBuf,
        /// The image's size.
        size: u64,
        /// The partition's size.
        capacity: u64,
    },
    /// Writing, syncing or reading the slot failed.
    SlotIo {
        /// The partition.
        device: PathBuf,
        /// What init was doing.
        doing: &'static str,
        /// Why.
        error: io::Error,
    },
    /// The slot read back differently from what was written.
    ReadBack {
        /// The partition.
        device: PathBuf,
        /// The digest written.
        want: Sha256Hex,
        /// The digest read back.
        got: Sha256Hex,
    },
    /// The ESP could not be mounted or written.
    Esp(EspError),
    /// grubenv is not a GRUB environment block, or the new one does not
    /// fit.
    Grubenv(BootloaderError),
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::Busy => f.write_str(liken_api::control::WRITE_BUSY),
            WriteError::OnTrial { booted } => write!(
                f,
                "slot {booted} booted on trial and is not blessed yet: writing slot {} now would \
                 remove the entry of the release this machine last ran well, the only one known \
                 to boot; ask again once this boot is blessed",
                booted.other()
            ),
            WriteError::NoSlot => f.write_str(
                "this boot has no slot (no liken.slot= on the command line: install media or \
                 netboot), so there is no inactive slot to write; install the machine first",
            ),
            WriteError::Directory { requested, why } => write!(
                f,
                "release directory {requested:?} {why}; name a release directory directly \
                 below {}, as the machine operator downloads it",
                liken_api::control::RELEASES_DIR
            ),
            WriteError::Check(e) => {
                let what_to_do = match e {
                    CheckError::ReleaseDigest { .. } => {
                        "the request names the digest the machine operator checked against \
                         the catalog, so release.yaml changed since: download the release again"
                    }
                    CheckError::Document(_) => "the release is broken: download it again",
                    CheckError::MissingArtifact(_) => {
                        "a slot needs it, so this is not a bootable release"
                    }
                    CheckError::ReleaseFile { .. } | CheckError::Artifact { .. } => {
                        "nothing was written: download the release again"
                    }
                };
                write!(f, "{e}; {what_to_do}")
            }
            WriteError::VersionMismatch { directory, version } => write!(
                f,
                "release directory {directory:?} holds release {version}; a release directory \
                 is named after its version, so download it again into {version}/"
            ),
            WriteError::Changed { name, path, why } => write!(
                f,
                "artifact {name} ({}) {why}; the slot was not made a boot target, so the \
                 machine keeps booting the running release: download the release again",
                path.display()
            ),
            WriteError::Partition { label, why } => write!(f, "slot partition {label}: {why}"),
            WriteError::Mounted { device, at } => write!(
                f,
                "slot partition {} is mounted at {at}; it must not be written while in use \
                 (a bug in init: report it)",
                device.display()
            ),
            WriteError::TooLarge {
                device,
                size,
                capacity,
            } => write!(
                f,
                "the system image is {size} bytes but slot partition {} holds only {capacity}; \
                 this release needs a larger slot, so reinstall the machine with its layout",
                device.display()
            ),
            WriteError::SlotIo {
                device,
                doing,
                error,
            } => write!(
                f,
                "{doing} slot partition {}: {error}; the slot has no entry and is not a boot \
                 target, so the machine keeps booting the running release; check the disk \
                 (dmesg) before trying again",
                device.display()
            ),
            WriteError::ReadBack { device, want, got } => write!(
                f,
                "slot partition {} read back with sha256 {got} after writing {want}: the disk \
                 loses writes; the slot was not made a boot target, replace the disk",
                device.display()
            ),
            WriteError::Esp(e) => write!(
                f,
                "{e}; the new slot has no entry, so the machine keeps booting the running release"
            ),
            WriteError::Grubenv(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for WriteError {}

impl From<EspError> for WriteError {
    fn from(e: EspError) -> WriteError {
        WriteError::Esp(e)
    }
}

// ---------------------------------------------------------------------
// Decisions.

/// The slot a release is written into: the one that did not boot. The
/// booted slot is never a target; [`decide_unmounted`] guards its
/// partition besides, as it is mounted as the root.
pub fn decide_target_slot(booted: Option<Slot>) -> Result<Slot, WriteError> {
    booted.map(Slot::other).ok_or(WriteError::NoSlot)
}

/// The release's directory name, when `requested` is a plain path of
/// exactly one component below `root` (no `..`, no `.`, absolute).
/// Symlinks are checked against the filesystem separately.
pub fn decide_release_dir(root: &Path, requested: &str) -> Result<String, String> {
    let path = Path::new(requested);
    if !path.is_absolute() {
        return Err("is not an absolute path".into());
    }
    // Checked on the text: Path::components drops inner "." itself.
    if requested.split('/').any(|part| part == "." || part == "..") {
        return Err("holds '.' or '..'".into());
    }
    let rest = path
        .strip_prefix(root)
        .map_err(|_| format!("is not below {}", root.display()))?;
    let mut parts = rest.components();
    let (Some(Component::Normal(name)), None) = (parts.next(), parts.next()) else {
        return Err(format!("is not directly below {}", root.display()));
    };
    let name = name
        .to_str()
        .ok_or_else(|| "has a name that is not UTF-8".to_owned())?;
    FileName::parse(name).map_err(|e| e.to_string())?;
    Ok(name.to_owned())
}

/// Refuses an image larger than the partition.
pub fn decide_fits(device: &Path, size: u64, capacity: u64) -> Result<(), WriteError> {
    if size > capacity {
        return Err(WriteError::TooLarge {
            device: device.to_owned(),
            size,
            capacity,
        });
    }
    Ok(())
}

/// Refuses a device that /proc/mounts (its text) lists as mounted.
pub fn decide_unmounted(device: &Path, mounts: &str) -> Result<(), WriteError> {
    let Some(dev) = device.to_str() else {
        return Ok(());
    };
    for line in mounts.lines() {
        let mut fields = line.split_whitespace();
        if let (Some(source), Some(at)) = (fields.next(), fields.next())
            && source == dev
        {
            return Err(WriteError::Mounted {
                device: device.to_owned(),
                at: at.to_owned(),
            });
        }
    }
    Ok(())
}

/// The `console=` arguments and the other arguments a new entry carries
/// on from the booted one's options (or the kernel command line). Left
/// out: what [`bootloader::render_entry`] writes itself (`liken.slot=`,
/// `panic=`, and `liken.verity=`: the booted slot's root hash is not the
/// new release's, whose own comes from its release.yaml), install mode (an installed machine must not reinstall
/// itself), what bootloaders add (`initrd=`, `BOOT_IMAGE=`), and
/// `liken.bless-after=`: it blesses a boot by uptime alone, a test's
/// knob that must not outlive the entry a test wrote it into, or a new
/// release would be blessed without ever being healthy.
pub fn decide_carried_args(options: &str) -> (Vec<String>, Vec<String>) {
    let mut console = Vec::new();
    let mut extra = Vec::new();
    for arg in cmdline::split(options) {
        let key = arg.split_once('=').map_or(arg.as_str(), |(k, _)| k);
        match key {
            "liken.slot" | "liken.verity" | "panic" | "liken.install" | "liken.bless-after"
            | "initrd" | "BOOT_IMAGE" => {}
            "console" => console.push(arg),
            _ => extra.push(arg),
        }
    }
    (console, extra)
}

/// The kernel options of a Boot Loader Specification entry: its
/// `options` lines joined, as systemd-boot joins them.
pub fn entry_options(text: &str) -> String {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l.strip_prefix("options")?;
            rest.starts_with([' ', '\t']).then(|| rest.trim())
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The booted slot's entry among the names in loader/entries, if any.
pub fn decide_booted_entry(booted: Slot, entries: &[String]) -> Option<&String> {
    entries
        .iter()
        .find(|n| EntryName::parse(n).is_ok_and(|e| e.slot == booted))
}

/// Whether a write may start, from this boot's assessment: never while
/// the booted entry is counted and not yet blessed, since the write
/// replaces the other slot, which then holds the only release known to
/// boot. A boot with no assessment (booted without a bootloader that
/// counts tries, or whose ESP could not be read at boot) has no trial to
/// protect.
pub fn decide_may_write(
    booted: Slot,
    assessment: Option<&liken_api::BootAssessment>,
) -> Result<(), WriteError> {
    match assessment {
        Some(a) if a.counted && !a.blessed => Err(WriteError::OnTrial { booted }),
        _ => Ok(()),
    }
}

/// Whether the booted slot is still counted on the ESP now, re-read as
/// the write is about to take the other slot out of reach (the boot's
/// assessment may be missing, or older than the ESP): refused while it
/// is. Each loader's counter is read where it keeps it: the booted
/// slot's entry file name (`liken-a+2-1.conf` is counted, `liken-a.conf`
/// is blessed) and grubenv's `liken_a_tries`. Both are written with
/// every release, but a blessing clears only the counter of the loader
/// that booted, so the slot counts as blessed when either is cleared;
/// a loader whose file is absent counts for nothing.
pub fn decide_still_counted(
    booted: Slot,
    entries: &[String],
    grubenv: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<(), WriteError> {
    let entry = entries
        .iter()
        .filter_map(|n| EntryName::parse(n).ok())
        .find(|e| e.slot == booted)
        .map(|e| e.tries_left.is_some());
    let grub = grubenv.map(|env| env.contains_key(&bootloader::grub_tries_var(booted)));
    let counted = match (entry, grub) {
        (None, None) => false,
        (Some(e), None) => e,
        (None, Some(g)) => g,
        (Some(e), Some(g)) => e && g,
    };
    if counted {
        Err(WriteError::OnTrial { booted })
    } else {
        Ok(())
    }
}

/// grubenv before the slot is overwritten: the preferred slot moved to
/// the booted one, so GRUB never prefers a half-written slot. `None`
/// when nothing changes.
pub fn decide_grub_before_write(
    env: &std::collections::BTreeMap<String, String>,
    target: Slot,
    booted: Slot,
) -> Option<std::collections::BTreeMap<String, String>> {
    let preferred = env.get(GRUB_PREFERRED_VAR).map(String::as_str);
    // Unset means slot a (grub.cfg's rule).
    let prefers_target = preferred.unwrap_or("a") == target.esp_dir();
    if !prefers_target {
        return None;
    }
    let mut next = env.clone();
    next.insert(GRUB_PREFERRED_VAR.to_owned(), booted.esp_dir().to_owned());
    Some(next)
}

// ---------------------------------------------------------------------
// The gate: one write at a time.

/// Whether a write is running; shared by the serve loop and the worker.
#[derive(Clone, Debug, Default)]
pub struct WriteGate(Arc<AtomicBool>);

/// Held by the running write; dropping it opens the gate.
#[derive(Debug)]
pub struct WriteTicket(Arc<AtomicBool>);

impl WriteGate {
    /// A ticket if no write is running.
    pub fn try_begin(&self) -> Option<WriteTicket> {
        self.0
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| WriteTicket(Arc::clone(&self.0)))
    }

    /// Whether a write is running.
    pub fn busy(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl Drop for WriteTicket {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

// ---------------------------------------------------------------------
// Verifying the release.

/// What a slot needs of a release: its kernel, system image and boot
/// initramfs, and the microcode initramfs when it has one. The other
/// artifacts (the CLI, bootloader images, licenses) are not written, so
/// not checked.
pub const RULES: Rules<'static> = Rules {
    required: &[ARTIFACT_KERNEL, ARTIFACT_SYSTEM, ARTIFACT_BOOT],
    optional: &[ARTIFACT_MICROCODE, ARTIFACT_UKI_A, ARTIFACT_UKI_B],
    others: false,
    keep: &[],
};

/// A release whose release.yaml and written artifacts were checked.
#[derive(Debug)]
pub struct Verified {
    /// The document.
    pub release: Release,
    /// The kernel.
    pub kernel: Checked,
    /// The system image.
    pub system: Checked,
    /// boot.cpio.
    pub boot: Checked,
    /// microcode.cpio, when the release has it.
    pub microcode: Option<Checked>,
    /// The system image's root hash for the new entry, when the release
    /// carries a dm-verity record.
    pub verity: Option<VerityArg>,
    /// Slot A's and slot B's signed unified kernel images, when the
    /// release carries them.
    pub ukis: [Option<Checked>; 2],
}

impl Verified {
    /// `slot`'s signed unified kernel image, if the release has one.
    pub fn uki(&self, slot: Slot) -> Option<&Checked> {
        match slot {
            Slot::A => self.ukis[0].as_ref(),
            Slot::B => self.ukis[1].as_ref(),
        }
    }
}

/// Checks the request's directory, release.yaml and every artifact init
/// writes; reads but writes nothing.
pub fn verify(releases: &Path, request: &WriteRelease) -> Result<Verified, WriteError> {
    let refuse = |why: String| WriteError::Directory {
        requested: request.directory.clone(),
        why,
    };
    let name = decide_release_dir(releases, &request.directory).map_err(refuse)?;
    let dir = releases.join(&name);
    let meta =
        std::fs::symlink_metadata(&dir).map_err(|e| refuse(format!("cannot be read: {e}")))?;
    if !meta.file_type().is_dir() {
        return Err(refuse("is not a directory (a symlink is refused)".into()));
    }
    // The directory's real path must be the releases directory's own
    // child, whatever links lead to the releases directory itself.
    let real = std::fs::canonicalize(&dir).map_err(|e| refuse(format!("cannot be read: {e}")))?;
    let real_root =
        std::fs::canonicalize(releases).map_err(|e| refuse(format!("cannot be read: {e}")))?;
    if real != real_root.join(&name) {
        return Err(refuse(format!("resolves to {}", real.display())));
    }

    let check = WriteError::Check;
    let release =
        release_check::read_release(&dir, Some(&request.release_sha256)).map_err(check)?;
    if release.version.to_string() != name {
        return Err(WriteError::VersionMismatch {
            directory: name,
            version: release.version.to_string(),
        });
    }
    let verity = release_check::verity_arg(&release).map_err(check)?;
    let mut v =
        release_check::check_artifacts(&dir, release, &RULES, &mut |_| {}).map_err(check)?;
    Ok(Verified {
        verity,
        kernel: v.take_required(ARTIFACT_KERNEL).map_err(check)?,
        system: v.take_required(ARTIFACT_SYSTEM).map_err(check)?,
        boot: v.take_required(ARTIFACT_BOOT).map_err(check)?,
        microcode: v.take(ARTIFACT_MICROCODE),
        ukis: [v.take(ARTIFACT_UKI_A), v.take(ARTIFACT_UKI_B)],
        release: v.release,
    })
}

// ---------------------------------------------------------------------
// The slot.

/// An opened slot partition.
pub struct SlotTarget {
    /// Its device node, for messages and the mount check.
    pub device: PathBuf,
    /// The open device.
    pub disk: Box<dyn SlotDevice>,
}

/// Writes the system image into the slot, syncs it and reads it back.
fn write_slot(
    target: &mut SlotTarget,
    system: &Checked,
    progress: &dyn Fn(&str),
) -> Result<(), WriteError> {
    let device = &target.device;
    let changed = |why: String| WriteError::Changed {
        name: system.artifact.name.clone(),
        path: system.path.clone(),
        why,
    };
    let slot_io = |doing: &'static str, error: io::Error| WriteError::SlotIo {
        device: device.clone(),
        doing,
        error,
    };
    slot_image::write_image(system, &mut *target.disk, 0, &mut |l| progress(l)).map_err(|e| match e
    {
        ImageError::Open(e) => changed(format!("cannot be opened: {e}")),
        ImageError::Changed(got) => changed(format!("changed while it was written (sha256 {got})")),
        ImageError::Read(e) => slot_io("reading the system image for", e),
        ImageError::Device { doing, error } => slot_io(doing, error),
        ImageError::ReadBack(got) => WriteError::ReadBack {
            device: device.clone(),
            want: system.artifact.sha256.clone(),
            got,
        },
    })
}

// ---------------------------------------------------------------------
// The ESP.

/// A reader that checks, at its end, that it yielded exactly the
/// artifact's bytes; its last read fails otherwise, so the ESP's
/// temporary file is never renamed into place.
struct Verifying<R> {
    inner: R,
    hasher: Sha256,
    seen: u64,
    want: Artifact,
}

impl<R: Read> Read for Verifying<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 {
            let digest = Sha256Hex::from_bytes(self.hasher.clone().finalize().into());
            if self.seen != self.want.size || digest != self.want.sha256 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "artifact {} changed after it was checked ({} bytes, sha256 {digest})",
                        self.want.name, self.seen
                    ),
                ));
            }
            return Ok(0);
        }
        let chunk = buf.get(..n).unwrap_or_default();
        self.hasher.update(chunk);
        self.seen = self
            .seen
            .saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
        Ok(n)
    }
}

fn copy_to_esp(esp: &Esp<'_>, rel: &str, file: &Checked) -> Result<u64, WriteError> {
    let src = release_check::open_regular(&file.path).map_err(|e| WriteError::Changed {
        name: file.artifact.name.clone(),
        path: file.path.clone(),
        why: format!("cannot be opened: {e}"),
    })?;
    let mut reader = Verifying {
        inner: src,
        hasher: Sha256::new(),
        seen: 0,
        want: file.artifact.clone(),
    };
    Ok(esp.write_from(rel, &mut reader)?)
}

fn entry_path(name: &str) -> String {
    bootloader::entry_path(name)
}

/// What the first ESP phase learnt: the carried kernel arguments.
struct Before {
    console: Vec<String>,
    extra: Vec<String>,
}

/// Phase 1: takes the target slot out of both bootloaders' reach.
fn esp_before(
    esp: &Esp<'_>,
    target: Slot,
    booted: Slot,
    cmdline_text: &str,
) -> Result<Before, WriteError> {
    let entries = esp.list_entries()?;
    let env = if esp.exists(GRUBENV_PATH)? {
        Some(bootloader::parse_grubenv(&esp.read(GRUBENV_PATH)?).map_err(WriteError::Grubenv)?)
    } else {
        None
    };
    decide_still_counted(booted, &entries, env.as_ref())?;
    let options = match decide_booted_entry(booted, &entries) {
        // A unified kernel image's options are inside the signed file:
        // the running kernel's command line is the same text.
        Some(name) if name.ends_with(EntryKind::Uki.suffix()) => cmdline_text.to_owned(),
        Some(name) => {
            let text = esp.read(&entry_path(name))?;
            entry_options(&String::from_utf8_lossy(&text))
        }
        // The BIOS path boots through grub.cfg, with no entry file.
        None => cmdline_text.to_owned(),
    };
    let (console, extra) = decide_carried_args(&options);
    for name in entries
        .iter()
        .filter(|n| EntryName::parse(n).is_ok_and(|e| e.slot == target))
    {
        esp.remove(&entry_path(name))?;
    }
    let dir = target.esp_dir();
    esp.remove(&format!("liken/{dir}/vmlinuz"))?;
    if let Some(next) = env
        .as_ref()
        .and_then(|env| decide_grub_before_write(env, target, booted))
    {
        let block = bootloader::render_grubenv(&next).map_err(WriteError::Grubenv)?;
        esp.overwrite_in_place(GRUBENV_PATH, &block)?;
    }
    Ok(Before { console, extra })
}

/// Phase 3: the kernel and initrds, then the entry, then grubenv.
/// Returns the bytes written and the entry's file name.
fn esp_after(
    esp: &Esp<'_>,
    target: Slot,
    release: &Verified,
    before: Before,
) -> Result<(u64, String), WriteError> {
    let dir = target.esp_dir();
    esp.create_dir_all(&format!("liken/{dir}"))?;
    let mut bytes: u64 = 0;
    match &release.microcode {
        Some(m) => {
            bytes =
                bytes.saturating_add(copy_to_esp(esp, &format!("liken/{dir}/microcode.cpio"), m)?);
        }
        // grub.cfg loads a microcode.cpio whenever one is there; an older
        // release's must not ride along.
        None => esp.remove(&format!("liken/{dir}/microcode.cpio"))?,
    }
    bytes = bytes.saturating_add(copy_to_esp(
        esp,
        &format!("liken/{dir}/boot.cpio"),
        &release.boot,
    )?);
    // The kernel last of the slot's files: GRUB takes a slot with a
    // kernel as bootable.
    bytes = bytes.saturating_add(copy_to_esp(
        esp,
        &format!("liken/{dir}/vmlinuz"),
        &release.kernel,
    )?);
    let params = EntryParams {
        slot: target,
        version: release.release.version.clone(),
        microcode: release.microcode.is_some(),
        console_args: before.console,
        extra_args: before.extra,
        verity: release.verity.clone(),
    };
    let entries = esp.list_entries()?;
    let plan = bootloader::decide_new_release_entries(&params, &entries);
    // Phase 1 removed them; anything here now was put there since.
    for name in &plan.remove_first {
        esp.remove(&entry_path(name))?;
    }
    let written = match release.uki(target) {
        Some(uki) => {
            if !esp.exists(&credential_path())? && esp.exists(LAYER_PATH)? {
                let layer = esp.read(LAYER_PATH)?;
                esp.create_dir_all(CREDENTIALS_DIR)?;
                esp.write(&credential_path(), &layer)?;
            }
            let name = EntryName::fresh_of(EntryKind::Uki, target);
            esp.create_dir_all(UKI_DIR)?;
            bytes = bytes.saturating_add(copy_to_esp(esp, &name.path(), uki)?);
            name.file_name()
        }
        None => {
            esp.create_dir_all(ENTRIES_DIR)?;
            esp.write(&entry_path(&plan.write_last), plan.text.as_bytes())?;
            plan.write_last
        }
    };
    if esp.exists(GRUBENV_PATH)? {
        let env =
            bootloader::parse_grubenv(&esp.read(GRUBENV_PATH)?).map_err(WriteError::Grubenv)?;
        let next = bootloader::decide_grub_new_release(&env, target);
        let block = bootloader::render_grubenv(&next).map_err(WriteError::Grubenv)?;
        esp.overwrite_in_place(GRUBENV_PATH, &block)?;
    }
    Ok((bytes, written))
}

/// The deployment layer's credential on the ESP.
fn credential_path() -> String {
    format!("{CREDENTIALS_DIR}/{LAYER_CREDENTIAL}")
}

// ---------------------------------------------------------------------
// The whole write.

/// The machine a write acts on. A real one is built by [`spawn`]; tests
/// hand in temporary files.
pub struct Machine<'a> {
    /// The releases directory (`/var/lib/liken/releases`).
    pub releases: &'a Path,
    /// The slot that booted.
    pub booted: Option<Slot>,
    /// Opens a slot's partition.
    pub open_slot: &'a dyn Fn(Slot) -> Result<SlotTarget, WriteError>,
    /// The text of /proc/mounts.
    pub mounts: &'a str,
    /// The text of /proc/cmdline (the kernel arguments when no entry
    /// file booted).
    pub cmdline: &'a str,
    /// Mounts the ESP (or hands a test's directory).
    pub esp: &'a dyn Fn() -> Result<Esp<'a>, EspError>,
    /// Receives progress lines.
    pub progress: &'a dyn Fn(&str),
}

/// Verifies and writes the release the request names.
pub fn write_release(
    m: &Machine<'_>,
    request: &WriteRelease,
) -> Result<ReleaseWritten, WriteError> {
    let target_slot = decide_target_slot(m.booted)?;
    let booted = m.booted.ok_or(WriteError::NoSlot)?;
    let release = verify(m.releases, request)?;
    let mut target = (m.open_slot)(target_slot)?;
    decide_unmounted(&target.device, m.mounts)?;
    let capacity = target.disk.capacity().map_err(|error| WriteError::SlotIo {
        device: target.device.clone(),
        doing: "measuring",
        error,
    })?;
    decide_fits(&target.device, release.system.artifact.size, capacity)?;
    (m.progress)(&format!(
        "release {} verified; writing slot {target_slot} ({})",
        release.release.version,
        target.device.display()
    ));

    let before = {
        let esp = (m.esp)()?;
        let before = esp_before(&esp, target_slot, booted, m.cmdline)?;
        esp.unmount()?;
        before
    };
    write_slot(&mut target, &release.system, m.progress)?;
    drop(target);
    (m.progress)(&format!(
        "slot {target_slot} written and read back; writing the ESP"
    ));
    let (esp_bytes, entry) = {
        let esp = (m.esp)()?;
        let done = esp_after(&esp, target_slot, &release, before)?;
        esp.unmount()?;
        done
    };
    Ok(ReleaseWritten {
        slot: target_slot,
        version: release.release.version.clone(),
        bytes: release.system.artifact.size.saturating_add(esp_bytes),
        entry,
    })
}

/// Takes the inactive slot out of both bootloaders' reach again: the
/// control socket's `disarmRelease`. Phase 1 of a write alone (its loader
/// entries and kernel removed, grubenv pointed away from it), so the
/// next boot, even one after a power cut, is the booted slot's release.
/// The slot's bytes stay; a later write replaces them. Answers the slot
/// disarmed.
pub fn disarm(m: &Machine<'_>) -> Result<Slot, WriteError> {
    let target = decide_target_slot(m.booted)?;
    let booted = m.booted.ok_or(WriteError::NoSlot)?;
    let esp = (m.esp)()?;
    esp_before(&esp, target, booted, m.cmdline)?;
    esp.unmount()?;
    Ok(target)
}

// ---------------------------------------------------------------------
// The real machine, on a worker thread.

/// Where the worker finds the machine's parts.
#[derive(Clone, Debug)]
pub struct WorkerPaths {
    /// /sys, for the partitions.
    pub sys: PathBuf,
    /// The disk of the booted slot: the partitions written are its own.
    pub boot_disk: Option<String>,
    /// /proc, for mounts and the command line.
    pub proc: PathBuf,
    /// Where the ESP is mounted (`/run/liken/esp`).
    pub esp_mount: PathBuf,
    /// The releases directory.
    pub releases: PathBuf,
}

/// How the worker writes a release: the caller's checks, then
/// [`write_release`]. The serve loop passes the trust module's check
/// (signature, trust root, floor), which sits above this module, so
/// this module does not import it.
pub type WriteFn =
    Box<dyn FnOnce(&Machine<'_>, &WriteRelease) -> Result<ReleaseWritten, String> + Send>;

fn open_partition(sys: &Path, disk: Option<&str>, slot: Slot) -> Result<SlotTarget, WriteError> {
    let label = slot.partition_label();
    let device = match crate::sys::block::find_by_label(sys, disk, label) {
        Ok(Some(d)) => d,
        Ok(None) => {
            return Err(WriteError::Partition {
                label,
                why: "no partition has this GPT name; this disk was not installed by liken, \
                      so reinstall it from a `liken stick`"
                    .into(),
            });
        }
        Err(devs) => {
            let list: Vec<String> = devs.iter().map(|d| d.display().to_string()).collect();
            return Err(WriteError::Partition {
                label,
                why: format!(
                    "several disks have it ({}); remove the stale disk and reboot",
                    list.join(", ")
                ),
            });
        }
    };
    let disk = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&device)
        .map_err(|error| WriteError::SlotIo {
            device: device.clone(),
            doing: "opening",
            error,
        })?;
    Ok(SlotTarget {
        device,
        disk: Box::new(disk),
    })
}

/// What a worker thread carries out.
pub enum Job {
    /// Verify and write a release.
    Write(WriteRelease),
    /// Disarm the inactive slot.
    Disarm,
}

/// Starts the write (by `write`) or the disarm on its own thread; the
/// answer goes to `reply` when it is done, and `ticket` is released then.
/// The milestone line says how it went.
pub fn spawn(
    job: Job,
    booted: Option<Slot>,
    paths: WorkerPaths,
    write: WriteFn,
    ticket: WriteTicket,
    reply: Sender<Response>,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("write-release".into())
        .spawn(move || {
            let _ticket = ticket;
            let mounts = std::fs::read_to_string(paths.proc.join("mounts")).unwrap_or_default();
            let cmdline = std::fs::read_to_string(paths.proc.join("cmdline")).unwrap_or_default();
            let mounter = crate::sys::mount::RealMounter;
            let sys = paths.sys.clone();
            let disk = paths.boot_disk.clone();
            let open_slot = move |slot: Slot| open_partition(&sys, disk.as_deref(), slot);
            let esp = || {
                Esp::mount(
                    &mounter,
                    &paths.sys,
                    paths.boot_disk.as_deref(),
                    &paths.esp_mount,
                )
            };
            let progress = |text: &str| console::line(&format!("{MILESTONE}: {text}"));
            let machine = Machine {
                releases: &paths.releases,
                booted,
                open_slot: &open_slot,
                mounts: &mounts,
                cmdline: &cmdline,
                esp: &esp,
                progress: &progress,
            };
            let request = match job {
                Job::Write(request) => request,
                Job::Disarm => {
                    let response = match disarm(&machine) {
                        Ok(slot) => {
                            console::milestone(
                                DISARM_MILESTONE,
                                &Outcome::ok_with(format!(
                                    "slot {slot} is no boot target; the next boot is slot {}",
                                    slot.other()
                                )),
                            );
                            Response::Accepted
                        }
                        Err(e) => {
                            let message = e.to_string();
                            console::milestone(
                                DISARM_MILESTONE,
                                &Outcome::Failed(message.clone()),
                            );
                            Response::Refused { message }
                        }
                    };
                    let _ = reply.send(response);
                    return;
                }
            };
            let response = match write(&machine, &request) {
                Ok(done) => {
                    console::milestone(
                        MILESTONE,
                        &Outcome::ok_with(format!(
                            "release {} in slot {}, entry {}, {} bytes",
                            done.version, done.slot, done.entry, done.bytes
                        )),
                    );
                    Response::ReleaseWritten(done)
                }
                Err(message) => {
                    console::milestone(MILESTONE, &Outcome::Failed(message.clone()));
                    Response::Refused { message }
                }
            };
            if reply.send(response).is_err() {
                console::line(&format!(
                    "{MILESTONE}: its client stopped waiting before the answer; the outcome is above"
                ));
            }
        })
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release_check::write_test_artifact;
    use crate::slot_image::MemoryDisk;
    use crate::sys::mount::FakeMounter;
    use liken_api::Version;
    use liken_api::decode;
    use liken_api::release::RELEASE_FILE;
    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::fs::File;

    #[test]
    fn a_boot_on_trial_never_overwrites_the_other_slot() {
        use liken_api::BootAssessment;
        let at = |counted, blessed| BootAssessment {
            counted,
            blessed,
            other_slot_bad: false,
        };
        let e = decide_may_write(Slot::B, Some(&at(true, false))).unwrap_err();
        assert!(matches!(e, WriteError::OnTrial { booted: Slot::B }));
        assert!(
            e.to_string().starts_with(
                "slot B booted on trial and is not blessed yet: writing slot A now would remove"
            ),
            "{e}"
        );
        // Blessed this boot, blessed before, or nothing counted.
        assert!(decide_may_write(Slot::B, Some(&at(true, true))).is_ok());
        assert!(decide_may_write(Slot::A, Some(&at(false, true))).is_ok());
        assert!(decide_may_write(Slot::A, None).is_ok());
    }

    /// (the booted slot's entry, whether grubenv has its tries, refused)
    #[test]
    fn a_still_counted_boot_is_refused_at_the_write() {
        type Row = (Option<&'static str>, Option<bool>, bool);
        let rows: &[Row] = &[
            (None, None, false),
            (Some("liken-a.conf"), None, false),
            (Some("liken-a+2-1.conf"), None, true),
            (Some("liken-a+0-3.conf"), None, true),
            (None, Some(true), true),
            (None, Some(false), false),
            // Both written; the loader that booted cleared its own.
            (Some("liken-a+3.conf"), Some(true), true),
            (Some("liken-a.conf"), Some(true), false),
            (Some("liken-a+3.conf"), Some(false), false),
        ];
        for (entry, tries, refused) in rows {
            let mut entries = vec!["liken-b+0-3.conf".to_owned()];
            entries.extend(entry.map(str::to_owned));
            let env = tries.map(|t| {
                let mut env = BTreeMap::new();
                env.insert("liken_b_tries".to_owned(), "2".to_owned());
                if t {
                    env.insert("liken_a_tries".to_owned(), "2".to_owned());
                }
                env
            });
            let got = decide_still_counted(Slot::A, &entries, env.as_ref());
            assert_eq!(
                matches!(got, Err(WriteError::OnTrial { booted: Slot::A })),
                *refused,
                "{entry:?} {tries:?}"
            );
        }
    }

    #[test]
    fn the_target_is_the_other_slot() {
        assert_eq!(decide_target_slot(Some(Slot::A)).unwrap(), Slot::B);
        assert_eq!(decide_target_slot(Some(Slot::B)).unwrap(), Slot::A);
        let e = decide_target_slot(None).unwrap_err();
        assert!(e.to_string().contains("no inactive slot"), "{e}");
    }

    #[test]
    fn only_a_plain_child_of_the_releases_directory() {
        let root = Path::new("/var/lib/liken/releases");
        assert_eq!(
            decide_release_dir(root, "/var/lib/liken/releases/2026.12.02-001").unwrap(),
            "2026.12.02-001"
        );
        assert_eq!(
            decide_release_dir(root, "/var/lib/liken/releases/2026.12.02-001/").unwrap(),
            "2026.12.02-001"
        );
        for bad in [
            "var/lib/liken/releases/x",
            "/var/lib/liken/releases",
            "/var/lib/liken/releases/",
            "/var/lib/liken/releases/../../../etc",
            "/var/lib/liken/releases/x/../y",
            "/var/lib/liken/releases/./x",
            "/var/lib/liken/releases/x/y",
            "/var/lib/liken/other/x",
            "/etc",
        ] {
            assert!(decide_release_dir(root, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fits_and_mounts() {
        let dev = Path::new("/dev/vda4");
        assert!(decide_fits(dev, 10, 10).is_ok());
        let e = decide_fits(dev, 11, 10).unwrap_err();
        assert!(e.to_string().contains("holds only 10"), "{e}");
        let mounts = "/dev/vda3 / squashfs ro 0 0\n/dev/vda5 /var ext4 rw 0 0\n";
        assert!(decide_unmounted(dev, mounts).is_ok());
        let e = decide_unmounted(Path::new("/dev/vda3"), mounts).unwrap_err();
        assert!(e.to_string().contains("mounted at /"), "{e}");
    }

    #[test]
    fn carried_arguments() {
        let (console, extra) = decide_carried_args(
            "liken.slot=a panic=10 console=tty0 console=ttyS0,115200 liken.bless-after=20 \
             initrd=\\liken\\a\\boot.cpio BOOT_IMAGE=/liken/a/vmlinuz liken.install=1 quiet",
        );
        assert_eq!(console, ["console=tty0", "console=ttyS0,115200"]);
        // A test's uptime blessing stays with the entry it was written into.
        assert_eq!(extra, ["quiet"]);
        // So does the booted slot's root hash: the new slot has its own.
        let (_, extra) = decide_carried_args("liken.slot=a liken.verity=ab:cd:1 quiet");
        assert_eq!(extra, ["quiet"]);
        let text =
            "title liken\noptions liken.slot=b panic=10\n  options\tconsole=ttyS0\noptionsx y\n";
        assert_eq!(entry_options(text), "liken.slot=b panic=10 console=ttyS0");
        assert_eq!(entry_options("title x\n"), "");
    }

    #[test]
    fn the_booted_entry_is_found_whatever_its_counter() {
        let entries = vec![
            "liken-a+2-1.conf".to_string(),
            "liken-b.conf".to_string(),
            "other.conf".to_string(),
        ];
        assert_eq!(
            decide_booted_entry(Slot::A, &entries).map(String::as_str),
            Some("liken-a+2-1.conf")
        );
        assert_eq!(
            decide_booted_entry(Slot::B, &entries).map(String::as_str),
            Some("liken-b.conf")
        );
        assert_eq!(decide_booted_entry(Slot::B, &entries[..1]), None);
    }

    #[test]
    fn grub_never_prefers_the_slot_being_written() {
        let mut env = BTreeMap::new();
        // Unset prefers a.
        let next = decide_grub_before_write(&env, Slot::A, Slot::B).unwrap();
        assert_eq!(next[GRUB_PREFERRED_VAR], "b");
        env.insert(GRUB_PREFERRED_VAR.to_string(), "a".to_string());
        assert_eq!(decide_grub_before_write(&env, Slot::B, Slot::A), None);
        env.insert(GRUB_PREFERRED_VAR.to_string(), "b".to_string());
        env.insert("liken_b_tries".to_string(), "0".to_string());
        let next = decide_grub_before_write(&env, Slot::B, Slot::A).unwrap();
        assert_eq!(next[GRUB_PREFERRED_VAR], "a");
        assert_eq!(next["liken_b_tries"], "0");
    }

    #[test]
    fn one_write_at_a_time() {
        let gate = WriteGate::default();
        let t = gate.try_begin().unwrap();
        assert!(gate.busy());
        assert!(gate.clone().try_begin().is_none());
        drop(t);
        assert!(!gate.busy());
        assert!(gate.try_begin().is_some());
    }

    // -----------------------------------------------------------------
    // Whole writes into a temporary disk file and ESP directory.

    struct World {
        root: PathBuf,
        releases: PathBuf,
        esp: PathBuf,
        disk: PathBuf,
        release_sha: Sha256Hex,
        system: Vec<u8>,
    }

    const VERSION: &str = "2026.12.02-002";
    const DISK_SIZE: u64 = 3 * 1024 * 1024 + 512;

    fn world(test: &str, microcode: bool) -> World {
        let root =
            std::env::temp_dir().join(format!("liken-init-rw-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let releases = root.join("releases");
        let dir = releases.join(VERSION);
        std::fs::create_dir_all(&dir).unwrap();
        // Not a multiple of the chunk, so the last read is short.
        let system: Vec<u8> = (0..(2 * 1024 * 1024 + 4097u32))
            .map(|i| (i % 251) as u8)
            .collect();
        let mut artifacts = vec![
            write_test_artifact(&dir, ARTIFACT_KERNEL, "vmlinuz", b"kernel image"),
            write_test_artifact(&dir, ARTIFACT_SYSTEM, "liken.sqfs", &system),
            write_test_artifact(&dir, ARTIFACT_BOOT, "boot.cpio", b"boot cpio"),
            write_test_artifact(&dir, "licenses", "licenses.md", b"# licenses"),
        ];
        if microcode {
            artifacts.push(write_test_artifact(
                &dir,
                ARTIFACT_MICROCODE,
                "microcode.cpio",
                b"ucode",
            ));
        }
        let release = Release::new(Version::parse(VERSION).unwrap(), artifacts, vec![]);
        let yaml = decode::to_yaml(&release).unwrap();
        std::fs::write(dir.join(RELEASE_FILE), &yaml).unwrap();
        let esp = root.join("esp");
        std::fs::create_dir_all(esp.join("loader/entries")).unwrap();
        std::fs::create_dir_all(esp.join("liken/a")).unwrap();
        std::fs::create_dir_all(esp.join("liken/b")).unwrap();
        std::fs::write(
            esp.join("loader/entries/liken-a.conf"),
            "title liken 2026.12.01-001 (slot A)\nversion 2026.12.01-001\n\
             options liken.slot=a panic=10 console=ttyS0,115200 liken.bless-after=5\n",
        )
        .unwrap();
        std::fs::write(esp.join("loader/entries/liken-b+0-3.conf"), "old b\n").unwrap();
        std::fs::write(esp.join("liken/b/vmlinuz"), "old kernel").unwrap();
        std::fs::write(esp.join("liken/b/microcode.cpio"), "old ucode").unwrap();
        std::fs::write(esp.join("liken/a/vmlinuz"), "a kernel").unwrap();
        let disk = root.join("disk");
        let f = File::create(&disk).unwrap();
        f.set_len(DISK_SIZE).unwrap();
        World {
            release_sha: liken_api::hash::sha256(yaml.as_bytes()),
            root,
            releases,
            esp,
            disk,
            system,
        }
    }

    impl World {
        fn request(&self) -> WriteRelease {
            WriteRelease {
                directory: self.releases.join(VERSION).display().to_string(),
                release_sha256: self.release_sha.clone(),
                signature: None,
                rollback_permit: None,
            }
        }

        fn run(&self, request: &WriteRelease) -> (Result<ReleaseWritten, WriteError>, Vec<String>) {
            self.run_with(request, &|| {
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&self.disk)
                    .unwrap();
                Box::new(f)
            })
        }

        fn run_with(
            &self,
            request: &WriteRelease,
            disk: &dyn Fn() -> Box<dyn SlotDevice>,
        ) -> (Result<ReleaseWritten, WriteError>, Vec<String>) {
            let lines = RefCell::new(Vec::new());
            let fake = FakeMounter::default();
            let open_slot = |slot: Slot| {
                assert_eq!(slot, Slot::B, "only the inactive slot is opened");
                Ok(SlotTarget {
                    device: self.disk.clone(),
                    disk: disk(),
                })
            };
            let esp = || Ok(Esp::at_directory(&fake, &self.esp));
            let progress = |t: &str| lines.borrow_mut().push(t.to_owned());
            let m = Machine {
                releases: &self.releases,
                booted: Some(Slot::A),
                open_slot: &open_slot,
                mounts: "/dev/vda3 / squashfs ro 0 0\n",
                cmdline: "liken.slot=a console=tty0",
                esp: &esp,
                progress: &progress,
            };
            let r = write_release(&m, request);
            (r, lines.into_inner())
        }

        fn disarm(&self) -> Result<Slot, WriteError> {
            let fake = FakeMounter::default();
            let open_slot =
                |_: Slot| -> Result<SlotTarget, WriteError> { panic!("a disarm opens no slot") };
            let esp = || Ok(Esp::at_directory(&fake, &self.esp));
            let m = Machine {
                releases: &self.releases,
                booted: Some(Slot::A),
                open_slot: &open_slot,
                mounts: "",
                cmdline: "liken.slot=a console=tty0",
                esp: &esp,
                progress: &|_| {},
            };
            disarm(&m)
        }

        fn entries(&self) -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(self.esp.join("loader/entries"))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        }

        fn disk_bytes(&self) -> Vec<u8> {
            std::fs::read(&self.disk).unwrap()
        }

        fn untouched(&self) {
            assert!(
                self.disk_bytes().iter().all(|b| *b == 0),
                "the disk was written"
            );
            assert_eq!(self.entries(), ["liken-a.conf", "liken-b+0-3.conf"]);
            assert_eq!(
                std::fs::read(self.esp.join("liken/b/vmlinuz")).unwrap(),
                b"old kernel"
            );
        }
    }

    impl Drop for World {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    #[test]
    fn writes_the_slot_the_files_and_the_entry() {
        let w = world("full", true);
        let (r, lines) = w.run(&w.request());
        let done = r.unwrap();
        assert_eq!(done.slot, Slot::B);
        assert_eq!(done.version.to_string(), VERSION);
        assert_eq!(done.entry, "liken-b+3.conf");
        let esp_bytes = (b"kernel image".len() + b"boot cpio".len() + b"ucode".len()) as u64;
        assert_eq!(done.bytes, w.system.len() as u64 + esp_bytes);

        let disk = w.disk_bytes();
        assert_eq!(disk.len() as u64, DISK_SIZE);
        assert_eq!(&disk[..w.system.len()], w.system.as_slice());
        assert!(disk[w.system.len()..].iter().all(|b| *b == 0));

        let b = w.esp.join("liken/b");
        assert_eq!(std::fs::read(b.join("vmlinuz")).unwrap(), b"kernel image");
        assert_eq!(std::fs::read(b.join("boot.cpio")).unwrap(), b"boot cpio");
        assert_eq!(std::fs::read(b.join("microcode.cpio")).unwrap(), b"ucode");
        assert_eq!(w.entries(), ["liken-a.conf", "liken-b+3.conf"]);
        let text = std::fs::read_to_string(w.esp.join("loader/entries/liken-b+3.conf")).unwrap();
        assert_eq!(
            text,
            bootloader::render_entry(&EntryParams {
                slot: Slot::B,
                version: Version::parse(VERSION).unwrap(),
                microcode: true,
                console_args: vec!["console=ttyS0,115200".into()],
                extra_args: vec![],
                verity: None,
            })
        );
        // The booted entry's liken.bless-after=5 is not carried on.
        assert!(
            text.ends_with("options liken.slot=b panic=10 console=ttyS0,115200\n"),
            "{text}"
        );
        // No temporary file is left behind.
        for dir in [b, w.esp.join("loader/entries")] {
            for e in std::fs::read_dir(dir).unwrap() {
                let name = e.unwrap().file_name().into_string().unwrap();
                assert!(!name.ends_with(".tmp"), "{name}");
            }
        }
        // One line per tenth crossed; a 1 MiB chunk crosses several of
        // this small image's tenths at once.
        let percents: Vec<&String> = lines.iter().filter(|l| l.contains("% (")).collect();
        assert_eq!(
            percents,
            ["40% (1 of 2 MiB)", "90% (2 of 2 MiB)", "100% (2 of 2 MiB)"],
            "{lines:?}"
        );
        assert!(lines[0].contains("verified"), "{lines:?}");
    }

    #[test]
    fn the_new_entry_carries_its_own_root_hash_never_the_booted_ones() {
        let mut w = world("verity", false);
        let yaml_path = w.releases.join(VERSION).join(RELEASE_FILE);
        let text = std::fs::read_to_string(&yaml_path).unwrap();
        let mut release: Release = decode::strict(&text, "release.yaml").unwrap();
        // The 2 MiB + 4097-byte image: 512 blocks of data, a tree after.
        release.verity = Some(liken_api::release::Verity {
            root_hash: liken_api::hash::sha256(b"slot b's tree"),
            salt: "0f".repeat(32),
            hash_offset: 512 * 4096,
            data_block_size: 4096,
            hash_block_size: 4096,
            algorithm: "sha256".into(),
            data_blocks: 512,
        });
        let yaml = decode::to_yaml(&release).unwrap();
        std::fs::write(&yaml_path, &yaml).unwrap();
        w.release_sha = liken_api::hash::sha256(yaml.as_bytes());
        // The booted entry carries slot A's own root hash.
        let a_root = liken_api::hash::sha256(b"slot a's tree");
        std::fs::write(
            w.esp.join("loader/entries/liken-a.conf"),
            format!(
                "title liken 2026.12.01-001 (slot A)\nversion 2026.12.01-001\n\
                 options liken.slot=a liken.verity={a_root}:ab:9 panic=10 console=ttyS0,115200\n"
            ),
        )
        .unwrap();
        w.run(&w.request()).0.unwrap();
        let text = std::fs::read_to_string(w.esp.join("loader/entries/liken-b+3.conf")).unwrap();
        let b = VerityArg::from_record(release.verity.as_ref().unwrap()).unwrap();
        assert!(
            text.ends_with(&format!(
                "options liken.slot=b liken.verity={}:{}:512 panic=10 console=ttyS0,115200\n",
                liken_api::hash::sha256(b"slot b's tree"),
                "0f".repeat(32)
            )),
            "{text}"
        );
        assert_eq!(
            text,
            bootloader::render_entry(&EntryParams {
                slot: Slot::B,
                version: Version::parse(VERSION).unwrap(),
                microcode: false,
                console_args: vec!["console=ttyS0,115200".into()],
                extra_args: vec![],
                verity: Some(b),
            })
        );
        assert!(!text.contains(a_root.as_str()), "{text}");
    }

    #[test]
    fn a_release_with_unified_kernel_images_gets_slot_bs_image_as_its_entry() {
        let mut w = world("uki", false);
        let dir = w.releases.join(VERSION);
        let yaml_path = dir.join(RELEASE_FILE);
        let text = std::fs::read_to_string(&yaml_path).unwrap();
        let mut release: Release = decode::strict(&text, "release.yaml").unwrap();
        release.verity = Some(liken_api::release::Verity {
            root_hash: liken_api::hash::sha256(b"slot b's tree"),
            salt: "0f".repeat(32),
            hash_offset: 512 * 4096,
            data_block_size: 4096,
            hash_block_size: 4096,
            algorithm: "sha256".into(),
            data_blocks: 512,
        });
        release.artifacts.push(write_test_artifact(
            &dir,
            ARTIFACT_UKI_A,
            "liken-a.efi",
            b"MZ image of slot a",
        ));
        release.artifacts.push(write_test_artifact(
            &dir,
            ARTIFACT_UKI_B,
            "liken-b.efi",
            b"MZ image of slot b",
        ));
        release.uki = Some(liken_api::release::Uki {
            command_line: "panic=10 console=ttyS0,115200".into(),
        });
        let yaml = decode::to_yaml(&release).unwrap();
        std::fs::write(&yaml_path, &yaml).unwrap();
        w.release_sha = liken_api::hash::sha256(yaml.as_bytes());
        std::fs::write(w.esp.join("liken/layer.cpio"), b"the layer").unwrap();
        // An older image of slot B goes, as its type #1 entry does.
        std::fs::create_dir_all(w.esp.join("EFI/Linux")).unwrap();
        std::fs::write(w.esp.join("EFI/Linux/liken-b+0-3.efi"), b"old image").unwrap();

        let done = w.run(&w.request()).0.unwrap();
        assert_eq!(done.entry, "liken-b+3.efi");
        assert_eq!(w.entries(), ["liken-a.conf"]);
        let images: Vec<String> = std::fs::read_dir(w.esp.join("EFI/Linux"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(images, ["liken-b+3.efi"]);
        assert_eq!(
            std::fs::read(w.esp.join("EFI/Linux/liken-b+3.efi")).unwrap(),
            b"MZ image of slot b"
        );
        // GRUB's files are still written; the layer becomes systemd-boot's
        // credential for the image's boot.
        assert_eq!(
            std::fs::read(w.esp.join("liken/b/vmlinuz")).unwrap(),
            b"kernel image"
        );
        assert_eq!(
            std::fs::read(w.esp.join("loader/credentials/liken-layer.cred")).unwrap(),
            b"the layer"
        );

        // A tampered image is refused before anything is written.
        let w = world("uki-tampered", false);
        let dir = w.releases.join(VERSION);
        let mut release = release.clone();
        release
            .artifacts
            .retain(|a| a.file.as_str() != "liken.sqfs");
        release.artifacts.push(write_test_artifact(
            &dir,
            ARTIFACT_SYSTEM,
            "liken.sqfs",
            &w.system,
        ));
        for (name, file, body) in [
            (ARTIFACT_UKI_A, "liken-a.efi", &b"MZ image of slot a"[..]),
            (ARTIFACT_UKI_B, "liken-b.efi", b"MZ image of slot b"),
        ] {
            write_test_artifact(&dir, name, file, body);
        }
        std::fs::write(dir.join("liken-b.efi"), b"MZ image of slot X").unwrap();
        let yaml = decode::to_yaml(&release).unwrap();
        std::fs::write(dir.join(RELEASE_FILE), &yaml).unwrap();
        let mut request = w.request();
        request.release_sha256 = liken_api::hash::sha256(yaml.as_bytes());
        let e = w.run(&request).0.unwrap_err().to_string();
        assert!(e.contains("liken-b.efi"), "{e}");
        w.untouched();
    }

    #[test]
    fn a_disarmed_slot_is_no_boot_target() {
        let w = world("disarm", false);
        std::fs::create_dir_all(w.esp.join("grub")).unwrap();
        let mut env = BTreeMap::new();
        env.insert("liken_slot".to_string(), "a".to_string());
        std::fs::write(
            w.esp.join(GRUBENV_PATH),
            bootloader::render_grubenv(&env).unwrap(),
        )
        .unwrap();
        w.run(&w.request()).0.unwrap();
        assert_eq!(w.entries(), ["liken-a.conf", "liken-b+3.conf"]);
        let armed =
            bootloader::parse_grubenv(&std::fs::read(w.esp.join(GRUBENV_PATH)).unwrap()).unwrap();
        assert_eq!(armed.get(GRUB_PREFERRED_VAR).map(String::as_str), Some("b"));

        assert_eq!(w.disarm().unwrap(), Slot::B);
        // systemd-boot has no entry for slot B, GRUB no kernel and no
        // preference for it: the next boot is slot A, whatever causes it.
        assert_eq!(w.entries(), ["liken-a.conf"]);
        assert!(!w.esp.join("liken/b/vmlinuz").exists());
        let env =
            bootloader::parse_grubenv(&std::fs::read(w.esp.join(GRUBENV_PATH)).unwrap()).unwrap();
        assert_eq!(env.get(GRUB_PREFERRED_VAR).map(String::as_str), Some("a"));
        // Disarming again is harmless.
        assert_eq!(w.disarm().unwrap(), Slot::B);
        assert_eq!(w.entries(), ["liken-a.conf"]);
    }

    #[test]
    fn without_microcode_an_old_one_is_removed_and_grubenv_is_set() {
        let w = world("grub", false);
        std::fs::create_dir_all(w.esp.join("grub")).unwrap();
        let mut env = BTreeMap::new();
        env.insert("liken_slot".to_string(), "b".to_string());
        env.insert("liken_b_tries".to_string(), "0".to_string());
        std::fs::write(
            w.esp.join(GRUBENV_PATH),
            bootloader::render_grubenv(&env).unwrap(),
        )
        .unwrap();
        // No entry for the booted slot: its arguments come from the
        // command line (the BIOS path).
        std::fs::remove_file(w.esp.join("loader/entries/liken-a.conf")).unwrap();
        let done = w.run(&w.request()).0.unwrap();
        assert_eq!(done.entry, "liken-b+3.conf");
        assert!(!w.esp.join("liken/b/microcode.cpio").exists());
        let text = std::fs::read_to_string(w.esp.join("loader/entries/liken-b+3.conf")).unwrap();
        assert!(!text.contains("microcode"), "{text}");
        assert!(
            text.ends_with("options liken.slot=b panic=10 console=tty0\n"),
            "{text}"
        );
        let block = std::fs::read(w.esp.join(GRUBENV_PATH)).unwrap();
        assert_eq!(block.len(), bootloader::GRUBENV_SIZE);
        let env = bootloader::parse_grubenv(&block).unwrap();
        assert_eq!(env["liken_slot"], "b");
        assert_eq!(env["liken_b_tries"], "3");
    }

    #[test]
    fn a_tampered_artifact_is_refused_with_nothing_written() {
        let w = world("tampered", true);
        let sqfs = w.releases.join(VERSION).join("liken.sqfs");
        let mut bytes = std::fs::read(&sqfs).unwrap();
        bytes[1000] ^= 1;
        std::fs::write(&sqfs, &bytes).unwrap();
        let e = w.run(&w.request()).0.unwrap_err();
        assert!(
            matches!(&e, WriteError::Check(CheckError::Artifact { name, .. }) if name == "system"),
            "{e}"
        );
        assert!(e.to_string().contains("has sha256"), "{e}");
        assert!(e.to_string().contains("nothing was written"), "{e}");
        w.untouched();

        let w = world("short", true);
        std::fs::write(w.releases.join(VERSION).join("boot.cpio"), b"boot cpi").unwrap();
        let e = w.run(&w.request()).0.unwrap_err();
        assert!(e.to_string().contains("is 8 bytes"), "{e}");
        w.untouched();
    }

    #[test]
    fn a_release_file_other_than_the_trusted_one_is_refused() {
        let w = world("digest", true);
        let mut r = w.request();
        r.release_sha256 = liken_api::hash::sha256(b"something else");
        let e = w.run(&r).0.unwrap_err();
        assert!(
            matches!(e, WriteError::Check(CheckError::ReleaseDigest { .. })),
            "{e}"
        );
        w.untouched();

        let mut r = w.request();
        r.directory = format!("{}/../{VERSION}", w.releases.join("x").display());
        let e = w.run(&r).0.unwrap_err();
        assert!(matches!(e, WriteError::Directory { .. }), "{e}");

        // A symlink in the releases directory is not a release directory.
        let link = w.releases.join("2026.12.02-003");
        std::os::unix::fs::symlink(w.releases.join(VERSION), &link).unwrap();
        let mut r = w.request();
        r.directory = link.display().to_string();
        let e = w.run(&r).0.unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");

        // A directory named after another version.
        let other = w.releases.join("2026.12.02-009");
        std::fs::create_dir(&other).unwrap();
        let yaml = std::fs::read(w.releases.join(VERSION).join(RELEASE_FILE)).unwrap();
        std::fs::write(other.join(RELEASE_FILE), &yaml).unwrap();
        let mut r = w.request();
        r.directory = other.display().to_string();
        let e = w.run(&r).0.unwrap_err();
        assert!(matches!(e, WriteError::VersionMismatch { .. }), "{e}");
        w.untouched();
    }

    #[test]
    fn an_image_larger_than_the_slot_is_refused() {
        let w = world("small", true);
        File::options()
            .write(true)
            .open(&w.disk)
            .unwrap()
            .set_len(1024 * 1024)
            .unwrap();
        let e = w.run(&w.request()).0.unwrap_err();
        assert!(matches!(e, WriteError::TooLarge { .. }), "{e}");
        assert_eq!(w.entries(), ["liken-a.conf", "liken-b+0-3.conf"]);
    }

    #[test]
    fn a_failure_before_the_entry_leaves_no_new_entry() {
        let w = world("inject", true);
        // The kernel's temporary file cannot be created: a directory is
        // in its way.
        std::fs::create_dir_all(w.esp.join("liken/b/.vmlinuz.tmp/x")).unwrap();
        let e = w.run(&w.request()).0.unwrap_err();
        assert!(matches!(e, WriteError::Esp(_)), "{e}");
        // The slot was written, the old entry is gone, no new entry.
        assert_eq!(&w.disk_bytes()[..w.system.len()], w.system.as_slice());
        assert_eq!(w.entries(), ["liken-a.conf"]);
        assert!(!w.esp.join("liken/b/vmlinuz").exists());
    }

    #[test]
    fn a_disk_that_drops_writes_never_becomes_a_boot_target() {
        let w = world("forgetful", true);
        let (r, _) = w.run_with(&w.request(), &|| {
            Box::new(MemoryDisk::new(DISK_SIZE as usize, true))
        });
        let e = r.unwrap_err();
        assert!(matches!(e, WriteError::ReadBack { .. }), "{e}");
        assert!(e.to_string().contains("loses writes"), "{e}");
        assert_eq!(w.entries(), ["liken-a.conf"]);
        assert!(!w.esp.join("liken/b/vmlinuz").exists());
    }

    /// The boot's assessment said nothing (blessing could not assess
    /// it), but the ESP shows the booted entry still counted: nothing
    /// is touched.
    #[test]
    fn a_counted_entry_on_the_esp_stops_the_write() {
        let w = world("counted", false);
        std::fs::rename(
            w.esp.join("loader/entries/liken-a.conf"),
            w.esp.join("loader/entries/liken-a+2-1.conf"),
        )
        .unwrap();
        let (r, _) = w.run(&w.request());
        assert!(
            matches!(r, Err(WriteError::OnTrial { booted: Slot::A })),
            "{r:?}"
        );
        assert_eq!(w.entries(), ["liken-a+2-1.conf", "liken-b+0-3.conf"]);
        assert!(
            w.disk_bytes().iter().all(|b| *b == 0),
            "the disk was written"
        );
        assert_eq!(
            std::fs::read(w.esp.join("liken/b/vmlinuz")).unwrap(),
            b"old kernel"
        );
    }

    #[test]
    fn no_slot_no_write() {
        let w = world("noslot", true);
        let fake = FakeMounter::default();
        let open_slot = |_: Slot| -> Result<SlotTarget, WriteError> { panic!("opened a slot") };
        let esp = || Ok(Esp::at_directory(&fake, &w.esp));
        let m = Machine {
            releases: &w.releases,
            booted: None,
            open_slot: &open_slot,
            mounts: "",
            cmdline: "",
            esp: &esp,
            progress: &|_| {},
        };
        assert!(matches!(
            write_release(&m, &w.request()),
            Err(WriteError::NoSlot)
        ));
        w.untouched();
    }
}
