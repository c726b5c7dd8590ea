//! Step 4: the active slot's system image becomes the root.
//!
//! The boot entry names its slot (`liken.slot=a|b`). init mounts that
//! slot's partition (GPT name LIKEN-A or LIKEN-B, the squashfs written
//! raw) read-only at [`NEW_ROOT`], the data partition LIKEN-DATA (ext4)
//! at its /var, a tmpfs at its /tmp, copies the deployment layer from
//! the initramfs's /etc/liken to /run/liken/layer, moves /proc, /sys,
//! /dev and /run into the new root and switches to it the way
//! switch_root(8) does. Afterwards it frees the initramfs's files (RAM
//! the machine would otherwise never get back) and starts the worker
//! that loads what the full module tree has for the devices present
//! ([`crate::image_modules`]), beside the rest of the boot.
//!
//! LIKEN-DATA is blank after an install; the first boot formats it with
//! the system image's own mke2fs, run chrooted into the mounted image
//! (its libraries are there, not in the initramfs). init formats only a
//! partition with no ext4 superblock and nothing else it recognises, so
//! a data partition that holds another filesystem is never wiped.
//!
//! When the entry gives the slot's dm-verity root hash
//! (`liken.verity=`), the partition is first mapped through the kernel's
//! verity target ([`crate::verity_root`]) and the mapped device is what
//! is mounted, so every block of the root is checked as it is read; the
//! milestone says `through dm-verity (root hash …)`. Without the
//! argument the partition is mounted as it is, and the milestone says
//! `(unverified)`. A root hash that cannot be read is a failure, never
//! an unverified root.
//!
//! Every failure undoes what was done (moves reversed, mounts
//! unmounted, the slot unmapped) and leaves init on the initramfs, with a
//! message naming what failed and what to do; the boot goes on there, so
//! the control socket still answers and the machine can be rebooted. On
//! a boot on trial that is at once, by boot assessment ([`crate::bless`]):
//! a slot whose root cannot be mounted never becomes healthy, so the
//! bootloader spends its tries and falls back.
//!
//! The decisions ([`decide_root`], [`decide_data`]) are pure; the
//! carrying out goes through the mount and command seams of
//! [`crate::sys`], so the sequence and its undoing are unit-tested with
//! the recording fakes.

use std::fmt;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use liken_api::{Role, Slot};

use crate::console::Outcome;
use crate::context::Boot;
use crate::image_modules;
use crate::modload;
use crate::sys::block;
use crate::sys::command::{CommandSpec, Runner};
use crate::sys::mount::{MountRequest, Mounter, MsFlags};

/// Where the system image is mounted before it becomes `/`.
pub const NEW_ROOT: &str = "/sysroot";

/// The data partition's GPT name (and the ext4 label init gives it).
pub const DATA_LABEL: &str = "LIKEN-DATA";

/// The system image's mke2fs, as seen inside the image.
pub const MKE2FS: &str = "/usr/sbin/mke2fs";

/// How long formatting may take (a large disk under TCG is slow).
pub const FORMAT_TIMEOUT: Duration = Duration::from_secs(600);

/// Where the layer is copied, under /run/liken.
pub const LAYER_DIR: &str = "layer";

/// The mount points a system image must hold (it is read-only, so init
/// cannot make them).
pub const MOUNT_POINTS: &[&str] = &["proc", "sys", "dev", "run", "var", "tmp"];

/// The pseudo filesystems moved into the new root, in order.
pub const MOVED: &[&str] = &["/proc", "/sys", "/dev", "/run"];

/// A partition lookup's result, as [`crate::sys::block::find_by_label`]
/// gives it: none, one, or the devices of several.
pub type Lookup = Result<Option<PathBuf>, Vec<PathBuf>>;

/// What the root step does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootPlan {
    /// Stay on the initramfs; not a failure (the detail says why).
    Initramfs(String),
    /// Mount this slot's partition and switch to it.
    Slot {
        /// The slot.
        slot: Slot,
        /// Its partition.
        device: PathBuf,
    },
    /// Stay on the initramfs because something is wrong; the message
    /// says what and what to do.
    Refuse(String),
}

fn list(devs: &[PathBuf]) -> String {
    devs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Decides from the command line (install mode, the slot its entry
/// names) and the slots' partitions what to mount.
pub fn decide_root(install: bool, slot: Option<Slot>, a: &Lookup, b: &Lookup) -> RootPlan {
    if install {
        return RootPlan::Initramfs("install mode runs from the initramfs".into());
    }
    let Some(slot) = slot else {
        let any = matches!(a, Ok(Some(_))) || matches!(b, Ok(Some(_)));
        return RootPlan::Initramfs(if any {
            "the boot entry names no slot (liken.slot=); running from the initramfs".into()
        } else {
            "no LIKEN-A or LIKEN-B partition; running from the initramfs".into()
        });
    };
    let found = match slot {
        Slot::A => a,
        Slot::B => b,
    };
    match found {
        Ok(Some(device)) => RootPlan::Slot {
            slot,
            device: device.clone(),
        },
        Ok(None) => RootPlan::Refuse(format!(
            "the boot entry boots slot {slot}, but no partition is named {}; \
             the disk was not installed by liken or its table is damaged: reinstall it",
            slot.partition_label()
        )),
        Err(devs) => RootPlan::Refuse(format!(
            "partition name {} is on several disks ({}); remove the install stick or the \
             stale disk and reboot",
            slot.partition_label(),
            list(devs)
        )),
    }
}

/// How much of the data partition [`decide_data`] reads.
pub const PROBE_BYTES: usize = 68 * 1024;

/// What to do with the data partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataPlan {
    /// It holds ext4: mount it.
    Mount,
    /// It holds no filesystem: format it, then mount it.
    Format,
    /// It holds something else; the message names it and what to do.
    Refuse(String),
}

/// Signatures of filesystems and containers that must never be
/// formatted over: (name, byte offset, magic).
const OTHERS: &[(&str, usize, &[u8])] = &[
    ("squashfs", 0, b"hsqs"),
    ("XFS", 0, b"XFSB"),
    ("LUKS", 0, b"LUKS\xba\xbe"),
    ("a GPT partition table", 512, b"EFI PART"),
    ("FAT", 54, b"FAT1"),
    ("FAT32", 82, b"FAT32"),
    ("NTFS", 3, b"NTFS    "),
    ("ISO 9660", 32769, b"CD001"),
    ("swap", 4086, b"SWAPSPACE2"),
    ("btrfs", 65600, b"_BHRfS_M"),
];

fn at(bytes: &[u8], offset: usize, magic: &[u8]) -> bool {
    offset
        .checked_add(magic.len())
        .and_then(|end| bytes.get(offset..end))
        .is_some_and(|b| b == magic)
}

/// Decides from the partition's first [`PROBE_BYTES`] bytes: ext4
/// (magic 0xEF53 at byte 1080) is mounted; a recognised other
/// filesystem is refused; anything else (zeros after an install) is
/// formatted.
pub fn decide_data(probe: &[u8]) -> DataPlan {
    if probe.len() < 2048 {
        return DataPlan::Refuse(format!(
            "{DATA_LABEL} is only {} bytes; reinstall the machine",
            probe.len()
        ));
    }
    if at(probe, 1080, &[0x53, 0xEF]) {
        return DataPlan::Mount;
    }
    for (name, offset, magic) in OTHERS {
        if at(probe, *offset, magic) {
            return DataPlan::Refuse(format!(
                "{DATA_LABEL} holds {name}, not ext4, and init formats only a blank partition; \
                 if its data is not needed, wipe its start (`wipefs -a <device>` from another \
                 system) and reboot, and init formats it"
            ));
        }
    }
    DataPlan::Format
}

/// Reads the start of a device for [`decide_data`].
pub fn probe(device: &Path) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(PROBE_BYTES);
    std::fs::File::open(device)?
        .take(PROBE_BYTES as u64)
        .read_to_end(&mut buf)?;
    Ok(buf)
}

/// What the switch needs: the seams and the places.
pub struct Switch<'a> {
    /// mount(2) and friends.
    pub mounter: &'a dyn Mounter,
    /// For mke2fs.
    pub runner: &'a dyn Runner,
    /// Where the image is mounted first ([`NEW_ROOT`]).
    pub new_root: PathBuf,
    /// The slot's partition, or the device mapped over it through
    /// dm-verity.
    pub slot_device: PathBuf,
    /// Whether `slot_device` is the slot through dm-verity, where an
    /// I/O error means a block that failed its check.
    pub verified: bool,
    /// LIKEN-DATA.
    pub data_device: PathBuf,
    /// The layer on the initramfs (/etc/liken).
    pub layer_from: PathBuf,
    /// Where it is copied (/run/liken/layer).
    pub layer_to: PathBuf,
    /// This machine's role, when its documents say: a follower's copy
    /// leaves out the keys and the server token ([`crate::role_layer`]).
    pub role: Option<Role>,
    /// The mounts moved into the new root ([`MOVED`]).
    pub moves: Vec<PathBuf>,
    /// Whether to delete the initramfs's files after the switch (only
    /// on the machine: a test's `/` is its host's).
    pub free_initramfs: bool,
}

/// Why the slot's image did not mount, and what to do. Through
/// dm-verity an I/O error is a block that does not match the root hash
/// (the kernel's `device-mapper: verity:` line names it): the slot was
/// changed or damaged after its release was written.
pub fn decide_image_error(device: &Path, root: &Path, verified: bool, e: &io::Error) -> String {
    let what = format!(
        "cannot mount {} (squashfs) on {}: {e}",
        device.display(),
        root.display()
    );
    if verified && e.raw_os_error() == Some(nix::libc::EIO) {
        format!(
            "{what}: a block of the slot does not match its dm-verity root hash (the kernel log's \
             `device-mapper: verity:` line names it), so the slot was changed or damaged after \
             its release was written; write the release again"
        )
    } else {
        format!("{what}; the slot holds no system image: write the release again")
    }
}

/// What the switch did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Switched {
    /// Whether the data partition was formatted this boot.
    pub formatted: bool,
    /// The filesystems mounted, as paths in the new root, in mount order.
    pub mounted: Vec<PathBuf>,
    /// How many of the initramfs's files and directories were freed.
    pub freed: usize,
    /// Why / could not be made recursively shared after the switch.
    pub unshared: Option<String>,
}

/// Why the switch did not happen (everything was undone).
#[derive(Debug)]
pub struct SwitchError(pub String);

impl fmt::Display for SwitchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What to undo, in reverse.
#[derive(Default)]
struct Undo {
    mounts: Vec<PathBuf>,
    moves: Vec<(PathBuf, PathBuf)>,
}

impl Undo {
    fn run(self, m: &dyn Mounter) -> Vec<String> {
        let mut trouble = Vec::new();
        for (from, to) in self.moves.iter().rev() {
            if let Err(e) = m.move_mount(to, from) {
                trouble.push(format!("cannot move {} back ({e})", from.display()));
            }
        }
        for target in self.mounts.iter().rev() {
            if m.unmount(target, false).is_err()
                && let Err(e) = m.unmount(target, true)
            {
                trouble.push(format!("cannot unmount {} ({e})", target.display()));
            }
        }
        trouble
    }
}

fn mount(
    m: &dyn Mounter,
    undo: &mut Undo,
    source: &Path,
    target: PathBuf,
    fstype: &str,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), String> {
    let request = MountRequest {
        source: source.display().to_string(),
        target: target.clone(),
        fstype: fstype.to_owned(),
        flags,
        data: data.map(str::to_owned),
    };
    m.mount(&request).map_err(|e| {
        format!(
            "cannot mount {} ({fstype}) on {}: {e}",
            source.display(),
            target.display()
        )
    })?;
    undo.mounts.push(target);
    Ok(())
}

/// Mounts the image, the data partition and /tmp, copies the layer,
/// moves the pseudo filesystems and switches root. On failure everything
/// done is undone and init is still on the initramfs.
pub fn switch(s: &Switch<'_>) -> Result<Switched, SwitchError> {
    let mut undo = Undo::default();
    match try_switch(s, &mut undo) {
        Ok(done) => Ok(done),
        Err(message) => {
            let trouble = undo.run(s.mounter);
            if trouble.is_empty() {
                Err(SwitchError(message))
            } else {
                Err(SwitchError(format!(
                    "{message} (and undoing it: {})",
                    trouble.join("; ")
                )))
            }
        }
    }
}

fn try_switch(s: &Switch<'_>, undo: &mut Undo) -> Result<Switched, String> {
    let m = s.mounter;
    let root = &s.new_root;
    std::fs::create_dir_all(root).map_err(|e| format!("cannot create {}: {e}", root.display()))?;
    let image = MountRequest {
        source: s.slot_device.display().to_string(),
        target: root.clone(),
        fstype: "squashfs".to_owned(),
        flags: MsFlags::MS_RDONLY,
        data: None,
    };
    m.mount(&image)
        .map_err(|e| decide_image_error(&s.slot_device, root, s.verified, &e))?;
    undo.mounts.push(root.clone());
    let missing: Vec<&str> = MOUNT_POINTS
        .iter()
        .copied()
        .filter(|p| !root.join(p).is_dir())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the system image on {} has no /{} to mount on; it is not a liken system image: \
             write a release built by images/",
            s.slot_device.display(),
            missing.join(", /")
        ));
    }

    let probe_bytes = probe(&s.data_device)
        .map_err(|e| format!("cannot read {}: {e}", s.data_device.display()))?;
    let formatted = match decide_data(&probe_bytes) {
        DataPlan::Mount => false,
        DataPlan::Refuse(why) => return Err(why),
        DataPlan::Format => {
            format_data(s, undo)?;
            true
        }
    };
    mount(
        m,
        undo,
        &s.data_device,
        root.join("var"),
        "ext4",
        MsFlags::empty(),
        None,
    )
    .map_err(|e| format!("{e}; check the disk (e2fsck from another system)"))?;
    mount(
        m,
        undo,
        Path::new("tmpfs"),
        root.join("tmp"),
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=1777"),
    )?;

    copy_layer(&s.layer_from, &s.layer_to, s.role)?;

    for from in &s.moves {
        let rel = from.strip_prefix("/").unwrap_or(from);
        let to = root.join(rel);
        m.move_mount(from, &to)
            .map_err(|e| format!("cannot move {} into the new root: {e}", from.display()))?;
        undo.moves.push((from.clone(), to));
    }

    // A handle on the initramfs's root, to free its files once it is no
    // longer reachable by path.
    let old_root = if s.free_initramfs {
        std::fs::File::open("/").ok()
    } else {
        None
    };
    m.switch_root(root)
        .map_err(|e| format!("cannot switch root to {}: {e}", root.display()))?;
    let freed = old_root.as_ref().map_or(0, free_initramfs);
    // As systemd does at boot: the kubelet's and containerd's mounts
    // must propagate (crate::k3s_host). Past the switch nothing can be
    // undone, so a refusal is reported, not fatal.
    let unshared = crate::k3s_host::share_root(m).err().map(|e| {
        format!("cannot make / recursively shared ({e}); k3s's volume mounts will not propagate")
    });
    Ok(Switched {
        freed,
        formatted,
        mounted: vec![PathBuf::from("/var"), PathBuf::from("/tmp")],
        unshared,
    })
}

/// Formats LIKEN-DATA with the image's mke2fs, chrooted into the image.
/// The image's /dev and /proc are empty mount points until the switch,
/// so a devtmpfs (for the device node) and a proc (mke2fs checks
/// /proc/mounts) are mounted there for the run and unmounted after.
fn format_data(s: &Switch<'_>, undo: &mut Undo) -> Result<(), String> {
    let root = &s.new_root;
    let mut scratch = Undo::default();
    let result = (|| {
        mount(
            s.mounter,
            &mut scratch,
            Path::new("devtmpfs"),
            root.join("dev"),
            "devtmpfs",
            MsFlags::MS_NOSUID,
            None,
        )?;
        mount(
            s.mounter,
            &mut scratch,
            Path::new("proc"),
            root.join("proc"),
            "proc",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None,
        )?;
        let device = s.data_device.display().to_string();
        let spec = CommandSpec {
            program: MKE2FS.into(),
            args: ["-t", "ext4", "-L", DATA_LABEL, "-F", device.as_str()]
                .iter()
                .map(|a| (*a).to_owned())
                .collect(),
            root: Some(root.clone()),
            timeout: FORMAT_TIMEOUT,
        };
        let out = s.runner.run(&spec).map_err(|e| {
            format!(
                "cannot run the system image's {MKE2FS} to format {DATA_LABEL}: {e}; \
                 the image lacks e2fsprogs: rebuild it (images/)"
            )
        })?;
        if out.success() {
            Ok(())
        } else {
            let how = match &out.status {
                Some(status) => status.to_string(),
                None => format!("ran past {} s and was killed", FORMAT_TIMEOUT.as_secs()),
            };
            Err(format!(
                "formatting {} ({DATA_LABEL}) failed: {} {how}: {}; check the disk",
                s.data_device.display(),
                spec.display(),
                out.last_line()
            ))
        }
    })();
    let trouble = scratch.run(s.mounter);
    result?;
    if !trouble.is_empty() {
        // Mounts left on /dev or /proc of the new root would hide the
        // real ones moved there.
        undo.mounts.extend([root.join("dev"), root.join("proc")]);
        return Err(format!(
            "formatted {DATA_LABEL}, but {}",
            trouble.join("; ")
        ));
    }
    Ok(())
}

/// The largest file a deployment layer holds (documents, certificates,
/// keys and tokens are kilobytes).
pub const MAX_LAYER_FILE: u64 = 1 << 20;

/// Copies the layer tree keeping each file's mode (the identity stays
/// 0600: files are created with their mode, never wider first).
/// Symbolic links and special files are refused; a layer holds neither.
/// With a `role`, only what it needs is copied
/// ([`crate::role_layer::keep`]).
pub fn copy_layer(from: &Path, to: &Path, role: Option<Role>) -> Result<(), String> {
    if to.exists() {
        std::fs::remove_dir_all(to).map_err(|e| format!("cannot clear {}: {e}", to.display()))?;
    }
    if !from.exists() {
        // No layer (the machine step said so); the root is still the
        // slot's, with an empty layer.
        return std::fs::create_dir_all(to)
            .map_err(|e| format!("cannot create {}: {e}", to.display()));
    }
    let keep = |rel: &str| role.is_none_or(|r| crate::role_layer::keep(r, rel));
    copy_dir(from, to, "", &keep).map_err(|e| {
        format!(
            "cannot copy the layer from {} to {}: {e}",
            from.display(),
            to.display()
        )
    })
}

fn copy_dir(from: &Path, to: &Path, rel: &str, keep: &dyn Fn(&str) -> bool) -> io::Result<()> {
    if rel.split('/').count() > 16 {
        return Err(io::Error::other(
            "the layer nests deeper than 16 directories",
        ));
    }
    let meta = std::fs::symlink_metadata(from)?;
    std::fs::create_dir(to)?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(meta.mode() & 0o7777))?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let kind = e.file_type()?;
        let src = e.path();
        let dst = to.join(e.file_name());
        let name = e.file_name().to_string_lossy().into_owned();
        let sub = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        if !keep(&sub) {
            continue;
        }
        if kind.is_dir() {
            copy_dir(&src, &dst, &sub, keep)?;
        } else if kind.is_file() {
            let mode = e.metadata()?.mode() & 0o7777;
            // No link, no FIFO, and no file larger than a layer holds.
            let bytes = crate::fsutil::read_capped(&src, MAX_LAYER_FILE)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", src.display())))?;
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&dst)?;
            io::Write::write_all(&mut out, &bytes)?;
            // The umask narrows the mode at creation; set it exactly.
            out.set_permissions(std::fs::Permissions::from_mode(mode))?;
        } else {
            return Err(io::Error::other(format!(
                "{} is neither a file nor a directory",
                src.display()
            )));
        }
    }
    Ok(())
}

/// Deletes the initramfs's files through a handle on its root, as
/// switch_root(8) does, so their RAM comes back. Only on a ramfs or
/// tmpfs root, never into another filesystem (the walk stays on the
/// root's device), and never following a link. Best effort: what cannot
/// be deleted stays.
pub fn free_initramfs(old_root: &std::fs::File) -> usize {
    use nix::sys::statfs::FsType;
    let Ok(st) = nix::sys::statfs::fstatfs(old_root) else {
        return 0;
    };
    // ramfs's magic (the kernel's RAMFS_MAGIC; libc does not name it).
    const RAMFS: FsType = FsType(0x8584_58f6);
    let kind = st.filesystem_type();
    if kind != RAMFS && kind != nix::sys::statfs::TMPFS_MAGIC {
        return 0;
    }
    let Ok(meta) = old_root.metadata() else {
        return 0;
    };
    // The handle's directory, by way of /proc (now in the new root).
    use std::os::fd::AsRawFd;
    let path = PathBuf::from(format!("/proc/self/fd/{}", old_root.as_raw_fd()));
    clear_dir(&path, meta.dev(), 0)
}

/// Removes everything inside `dir` that lives on device `dev`; returns
/// how many entries went.
pub fn clear_dir(dir: &Path, dev: u64, depth: u32) -> usize {
    let mut removed = 0usize;
    if depth > 64 {
        return removed;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return removed;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let path = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.dev() != dev {
            continue;
        }
        let gone = if meta.is_dir() {
            removed = removed.saturating_add(clear_dir(&path, dev, depth.saturating_add(1)));
            std::fs::remove_dir(&path).is_ok()
        } else {
            std::fs::remove_file(&path).is_ok()
        };
        if gone {
            removed = removed.saturating_add(1);
        }
    }
    removed
}

/// Whether `slot` may be mounted without dm-verity, given the
/// firmware's Secure Boot state (`None`: unknown, as on BIOS or when
/// efivarfs cannot be read). Never while Secure Boot is enabled: a
/// release's signed image always carries `liken.verity=`, so a boot
/// without it came from a type #1 entry on the ESP (one written there
/// by whoever could write the disk, booting a kernel the db key signed
/// on its own) or from a release bundled before verity, and the slot
/// would run unchecked. Unknown or disabled: mounted unverified, as
/// the milestone says.
pub fn decide_unverified(
    slot: Slot,
    secure_boot: Option<crate::sys::efivars::SecureBootState>,
) -> Result<(), String> {
    match secure_boot {
        Some(crate::sys::efivars::SecureBootState::Enabled) => Err(format!(
            "Secure Boot is enabled, but this boot's command line gives slot {slot} no \
             liken.verity= root hash, which every signed boot image carries: the entry was \
             written by hand or by someone who could write the ESP, or its release predates \
             dm-verity; slot {slot} is not mounted unverified (write a release bundled with \
             -secureboot-key); running from the initramfs"
        )),
        _ => Ok(()),
    }
}

/// The boot step: decide, open the slot (through dm-verity when its
/// entry gives a root hash), switch, then load what the full module
/// tree has for this computer. Every failure leaves init on the
/// initramfs, and is kept in the [`Boot`] so a boot on trial reboots at
/// once ([`crate::bless`]).
pub fn step(boot: &mut Boot) -> Outcome {
    match try_step(boot) {
        Ok(outcome) => outcome,
        Err(why) => {
            boot.root_failure = Some(why.clone());
            Outcome::Failed(why)
        }
    }
}

/// The step; `Err` when the entry's slot did not become the root.
fn try_step(boot: &mut Boot) -> Result<Outcome, String> {
    let sys = boot.paths.sys.clone();
    let a = block::find_by_label(&sys, None, Slot::A.partition_label());
    let b = block::find_by_label(&sys, None, Slot::B.partition_label());
    let (slot, device) = match decide_root(boot.cmdline.install, boot.cmdline.slot, &a, &b) {
        RootPlan::Initramfs(why) => return Ok(Outcome::ok_with(why)),
        RootPlan::Refuse(why) => {
            return Err(format!("{why}; running from the initramfs"));
        }
        RootPlan::Slot { slot, device } => (slot, device),
    };
    // The data partition (and later the ESP) only on the disk that holds
    // the slot: another disk's LIKEN-DATA is another machine's.
    let disk = block::disk_of(&sys, &device);
    // Known even if the switch fails: boot assessment finds the ESP on
    // this disk.
    boot.paths.boot_disk.clone_from(&disk);
    let data = match block::find_by_label(&sys, disk.as_deref(), DATA_LABEL) {
        Ok(Some(d)) => d,
        Ok(None) => {
            return Err(format!(
                "slot {slot} is on {}, but no partition on its disk ({}) is named {DATA_LABEL} \
                 for /var; the disk was not installed by liken: reinstall it; running from the \
                 initramfs",
                device.display(),
                disk.as_deref().unwrap_or("unknown")
            ));
        }
        Err(devs) => {
            return Err(format!(
                "partition name {DATA_LABEL} is on several disks ({}); remove the stale disk \
                 and reboot; running from the initramfs",
                list(&devs)
            ));
        }
    };
    // A root hash the entry gives but that cannot be read is never
    // taken for none: the slot is not mounted unchecked.
    let verity = match &boot.cmdline.verity {
        None => None,
        Some(Ok(arg)) => Some(arg.clone()),
        Some(Err(e)) => {
            return Err(format!(
                "slot {slot} is not mounted: {e}; running from the initramfs"
            ));
        }
    };
    if verity.is_none() {
        // Under Secure Boot a signed image always gives the root hash;
        // an entry without one is a type #1 entry someone wrote, whose
        // command line nothing vouches for.
        if let Err(e) = crate::efivarfs::ensure_mounted(boot) {
            crate::console::line(&format!("root: {e}"));
        }
        let state = crate::sys::efivars::secure_boot_state(&boot.paths.sys).ok();
        decide_unverified(slot, state)?;
    }
    // The filesystems a slot and the data partition need, loaded now
    // that there is something to mount; and the device mapper's modules
    // when the slot is to be opened through dm-verity.
    let fs_trouble = match boot.load_modules(modload::FILESYSTEMS) {
        Some(report) => modload::describe(&report, 0.0).err(),
        None => Some("there is no module tree to load filesystems from".to_owned()),
    };
    let mapped = match &verity {
        None => None,
        Some(arg) => match open_verified(boot, slot, arg, &device) {
            Ok(m) => Some(m),
            Err(e) => {
                return Err(format!(
                    "slot {slot} ({}) cannot be opened through dm-verity: {e}; running from the \
                     initramfs",
                    device.display()
                ));
            }
        },
    };
    let plan = Switch {
        mounter: &*boot.sys.mount,
        runner: &*boot.sys.run,
        new_root: PathBuf::from(NEW_ROOT),
        slot_device: mapped
            .as_ref()
            .map_or_else(|| device.clone(), |m| m.node.clone()),
        verified: mapped.is_some(),
        data_device: data.clone(),
        layer_from: boot.paths.etc_liken.clone(),
        layer_to: boot.paths.run_liken.join(LAYER_DIR),
        role: boot
            .cluster
            .as_ref()
            .zip(boot.machine.as_ref())
            .map(|(c, m)| {
                if c.is_leader(&m.metadata.name) {
                    Role::Leader
                } else {
                    Role::Follower
                }
            }),
        moves: MOVED.iter().map(PathBuf::from).collect(),
        free_initramfs: true,
    };
    let done = match switch(&plan) {
        Ok(done) => done,
        Err(e) => {
            let modules =
                fs_trouble.map_or(String::new(), |t| format!(" (filesystem modules: {t})"));
            let unmapped = match mapped
                .as_ref()
                .map(|m| crate::verity_root::close(&*boot.sys.dm, m))
            {
                Some(Err(why)) => format!(" (and unmapping the slot: {why})"),
                _ => String::new(),
            };
            return Err(format!(
                "{e}{modules}{unmapped}; init stays on the initramfs without k3s: fix that and \
                 reboot"
            ));
        }
    };
    boot.mounted.extend(done.mounted);
    boot.paths.etc_liken = boot.paths.run_liken.join(LAYER_DIR);
    boot.paths.resolv_conf = PathBuf::from(RESOLV_CONF);
    let formatted = if done.formatted {
        " (formatted this boot)"
    } else {
        ""
    };
    let checked = match &verity {
        Some(arg) => {
            boot.root_verity = Some(arg.root_hash().clone());
            crate::verity_root::describe(arg)
        }
        None => "(unverified)".to_owned(),
    };
    let modules = start_image_modules(boot);
    let text = format!(
        "slot {slot} from {} {checked} is the root, /var on {}{formatted}; {} initramfs entries \
         freed; {modules}",
        device.display(),
        data.display(),
        done.freed
    );
    // The root is switched: a failure past it is no root failure.
    Ok(match done.unshared {
        Some(why) => Outcome::Failed(format!("{why} ({text})")),
        None => Outcome::ok_with(text),
    })
}

/// Loads the device mapper's modules and maps the slot's partition
/// through dm-verity; returns the mapped device, or why not.
fn open_verified(
    boot: &mut Boot,
    slot: Slot,
    arg: &liken_api::verity::VerityArg,
    device: &Path,
) -> Result<crate::sys::dm::Mapped, String> {
    let modules = match boot.load_modules(crate::verity_root::MODULES) {
        Some(report) => modload::describe(&report, 0.0).err(),
        None => Some("there is no module tree to load them from".to_owned()),
    };
    let with_modules = |e: String| match &modules {
        Some(t) => format!("{e} (device-mapper modules: {t})"),
        None => e,
    };
    let partition = crate::verity_root::partition_dev(device).map_err(with_modules)?;
    crate::verity_root::open(
        &*boot.sys.dm,
        slot,
        arg,
        partition,
        Path::new("/dev"),
        crate::verity_root::NODE_DEADLINE,
    )
    .map_err(with_modules)
}

/// Where the resolver configuration goes once the system image is the
/// root: its /etc/resolv.conf is a link to it (the image is read-only).
pub const RESOLV_CONF: &str = "/run/resolv.conf";

/// Starts the worker that loads, from the system image's full module
/// tree, what this computer's devices need beyond the initramfs's
/// drivers ([`crate::image_modules`]); says how, for the root line.
fn start_image_modules(boot: &mut Boot) -> String {
    let job = image_modules::Job {
        modules: boot.paths.modules.clone(),
        proc: boot.paths.proc.clone(),
        sys: boot.paths.sys.clone(),
        loader: std::sync::Arc::clone(&boot.sys.modules),
        done: boot.modules_done.clone(),
        later: modload::FILESYSTEMS_LATER
            .iter()
            .map(|m| (*m).to_owned())
            .collect(),
        events: boot.events.clone(),
    };
    match image_modules::ImageModules::spawn(job) {
        image_modules::Started::Worker(worker) => {
            boot.image_modules = Some(worker);
            format!(
                "the image's modules load beside the boot ({} line)",
                image_modules::MILESTONE
            )
        }
        image_modules::Started::Inline { why, kept } => {
            if let Some(settled) = kept {
                boot.modules = Some(settled.tree);
                boot.modules_done = settled.done;
            }
            why
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_unverified_root_under_secure_boot() {
        use crate::sys::efivars::SecureBootState;
        let e = decide_unverified(Slot::B, Some(SecureBootState::Enabled)).unwrap_err();
        assert!(
            e.contains("slot B is not mounted unverified") && e.contains("liken.verity="),
            "{e}"
        );
        for state in [
            None,
            Some(SecureBootState::Disabled),
            Some(SecureBootState::SetupMode),
        ] {
            assert_eq!(decide_unverified(Slot::A, state), Ok(()), "{state:?}");
        }
    }
    use crate::sys::command::FakeRunner;
    use crate::sys::mount::{FakeMounter, MountCall};

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("liken-init-root-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_root_follows_the_entrys_slot() {
        let a: Lookup = Ok(Some("/dev/vda3".into()));
        let b: Lookup = Ok(Some("/dev/vda4".into()));
        let none: Lookup = Ok(None);
        assert_eq!(
            decide_root(false, Some(Slot::B), &a, &b),
            RootPlan::Slot {
                slot: Slot::B,
                device: "/dev/vda4".into()
            }
        );
        assert!(matches!(
            decide_root(true, Some(Slot::A), &a, &b),
            RootPlan::Initramfs(_)
        ));
        assert_eq!(
            decide_root(false, None, &none, &none),
            RootPlan::Initramfs(
                "no LIKEN-A or LIKEN-B partition; running from the initramfs".into()
            )
        );
        assert!(
            matches!(decide_root(false, None, &a, &b), RootPlan::Initramfs(w) if w.contains("names no slot"))
        );
        assert!(
            matches!(decide_root(false, Some(Slot::B), &a, &none), RootPlan::Refuse(w) if w.contains("no partition is named LIKEN-B"))
        );
        let two: Lookup = Err(vec!["/dev/vda3".into(), "/dev/sda3".into()]);
        assert!(
            matches!(decide_root(false, Some(Slot::A), &two, &b), RootPlan::Refuse(w) if w.contains("/dev/vda3, /dev/sda3"))
        );
    }

    #[test]
    fn only_a_blank_partition_is_formatted() {
        let blank = vec![0u8; PROBE_BYTES];
        assert_eq!(decide_data(&blank), DataPlan::Format);
        let mut ext4 = blank.clone();
        ext4[1080] = 0x53;
        ext4[1081] = 0xEF;
        assert_eq!(decide_data(&ext4), DataPlan::Mount);
        let mut sq = blank.clone();
        sq[..4].copy_from_slice(b"hsqs");
        assert!(
            matches!(decide_data(&sq), DataPlan::Refuse(w) if w.contains("squashfs") && w.contains("wipefs"))
        );
        let mut fat = blank.clone();
        fat[82..87].copy_from_slice(b"FAT32");
        assert!(matches!(decide_data(&fat), DataPlan::Refuse(w) if w.contains("FAT32")));
        let mut btrfs = blank.clone();
        btrfs[65600..65608].copy_from_slice(b"_BHRfS_M");
        assert!(matches!(decide_data(&btrfs), DataPlan::Refuse(_)));
        // Noise that is no filesystem is formatted; a tiny read refused.
        let noise: Vec<u8> = (0..PROBE_BYTES).map(|i| (i % 251) as u8).collect();
        assert_eq!(decide_data(&noise), DataPlan::Format);
        assert!(matches!(decide_data(&[0; 100]), DataPlan::Refuse(_)));
        // A short probe never panics on offsets past its end.
        assert_eq!(decide_data(&blank[..4096]), DataPlan::Format);
    }

    struct Tree {
        dir: PathBuf,
        root: PathBuf,
        data: PathBuf,
        layer: PathBuf,
    }

    fn tree(name: &str, data: &[u8]) -> Tree {
        let dir = tmp(name);
        let root = dir.join("sysroot");
        for p in MOUNT_POINTS {
            std::fs::create_dir_all(root.join(p)).unwrap();
        }
        let data_dev = dir.join("vda5");
        std::fs::write(&data_dev, data).unwrap();
        let layer = dir.join("etc-liken");
        std::fs::create_dir_all(layer.join("identity")).unwrap();
        std::fs::write(layer.join("cluster.yaml"), "c").unwrap();
        std::fs::write(layer.join("identity/ca.key"), "k").unwrap();
        std::fs::set_permissions(
            layer.join("identity/ca.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        Tree {
            root,
            data: data_dev,
            layer,
            dir,
        }
    }

    fn switch_of<'a>(t: &Tree, m: &'a FakeMounter, r: &'a FakeRunner) -> Switch<'a> {
        Switch {
            mounter: m,
            runner: r,
            new_root: t.root.clone(),
            slot_device: "/dev/vda3".into(),
            verified: false,
            data_device: t.data.clone(),
            layer_from: t.layer.clone(),
            layer_to: t.dir.join("run-liken-layer"),
            role: None,
            moves: MOVED.iter().map(PathBuf::from).collect(),
            free_initramfs: false,
        }
    }

    #[test]
    fn a_blank_data_partition_is_formatted_then_root_switches() {
        let t = tree("format", &vec![0u8; PROBE_BYTES]);
        let m = FakeMounter::default();
        let r = FakeRunner::default();
        r.answer("mke2fs", "", 0, "done\n");
        let done = switch(&switch_of(&t, &m, &r)).unwrap();
        assert!(done.formatted);
        assert_eq!(done.mounted, [PathBuf::from("/var"), PathBuf::from("/tmp")]);
        let calls = r.calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].root.as_deref(), Some(t.root.as_path()));
        assert_eq!(
            calls[0].display(),
            format!(
                "/usr/sbin/mke2fs -t ext4 -L LIKEN-DATA -F {}",
                t.data.display()
            )
        );
        let root = &t.root;
        assert_eq!(
            m.calls(),
            vec![
                MountCall::Mount("squashfs".into(), root.clone()),
                MountCall::Mount("devtmpfs".into(), root.join("dev")),
                MountCall::Mount("proc".into(), root.join("proc")),
                MountCall::Unmount(root.join("proc"), false),
                MountCall::Unmount(root.join("dev"), false),
                MountCall::Mount("ext4".into(), root.join("var")),
                MountCall::Mount("tmpfs".into(), root.join("tmp")),
                MountCall::Move("/proc".into(), root.join("proc")),
                MountCall::Move("/sys".into(), root.join("sys")),
                MountCall::Move("/dev".into(), root.join("dev")),
                MountCall::Move("/run".into(), root.join("run")),
                MountCall::SwitchRoot(root.clone()),
                // `/` made recursively shared (crate::k3s_host).
                MountCall::Mount("none".into(), "/".into()),
            ]
        );
        let copied = t.dir.join("run-liken-layer");
        assert_eq!(std::fs::read(copied.join("cluster.yaml")).unwrap(), b"c");
        let mode = std::fs::metadata(copied.join("identity/ca.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&t.dir);
    }

    #[test]
    fn a_followers_copy_of_the_layer_has_no_keys_and_no_server_token() {
        let dir = std::env::temp_dir().join(format!("liken-init-rolecopy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let from = dir.join("etc-liken");
        for (rel, text) in [
            ("cluster.yaml", "c"),
            ("machines/node-2.yaml", "m"),
            ("identity/server/token", "K10x::server:s"),
            ("identity/server/agent-token", "K10x::node:a"),
            ("identity/server/tls/server-ca.crt", "CERT"),
            ("identity/server/tls/server-ca.key", "KEY"),
            ("identity/server/tls/etcd/peer-ca.key", "KEY"),
        ] {
            let p = from.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, text).unwrap();
        }
        let to = dir.join("run-layer");
        copy_layer(&from, &to, Some(Role::Follower)).unwrap();
        let mut kept = Vec::new();
        let mut dirs = vec![to.clone()];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else {
                    kept.push(p.strip_prefix(&to).unwrap().display().to_string());
                }
            }
        }
        kept.sort();
        assert_eq!(
            kept,
            [
                "cluster.yaml",
                "identity/server/agent-token",
                "identity/server/tls/server-ca.crt",
                "machines/node-2.yaml"
            ]
        );
        copy_layer(&from, &to, Some(Role::Leader)).unwrap();
        assert!(to.join("identity/server/tls/etcd/peer-ca.key").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn failures_undo_everything() {
        let mut ext4 = vec![0u8; PROBE_BYTES];
        ext4[1080] = 0x53;
        ext4[1081] = 0xEF;
        let t = tree("undo", &ext4);
        let r = FakeRunner::default();
        // The third move fails: the first two are moved back, the
        // mounts unmounted, and nothing is formatted (it is ext4).
        let m = FakeMounter {
            fail_move: vec![t.root.join("dev")],
            ..Default::default()
        };
        let e = switch(&switch_of(&t, &m, &r)).unwrap_err();
        assert!(e.0.contains("cannot move /dev into the new root"), "{e}");
        assert!(r.calls().is_empty());
        let root = &t.root;
        let tail: Vec<MountCall> = m.calls().into_iter().skip(6).collect();
        assert_eq!(
            tail,
            vec![
                MountCall::Move(root.join("sys"), "/sys".into()),
                MountCall::Move(root.join("proc"), "/proc".into()),
                MountCall::Unmount(root.join("tmp"), false),
                MountCall::Unmount(root.join("var"), false),
                MountCall::Unmount(root.clone(), false),
            ]
        );

        // mke2fs failing leaves nothing mounted.
        let blank = tree("undo-format", &vec![0u8; PROBE_BYTES]);
        let m = FakeMounter::default();
        let r = FakeRunner::default();
        r.answer("mke2fs", "", 1, "mke2fs: No space left\n");
        let e = switch(&switch_of(&blank, &m, &r)).unwrap_err();
        assert!(
            e.0.contains("exited with status 1: mke2fs: No space left"),
            "{e}"
        );
        assert_eq!(
            m.calls().last(),
            Some(&MountCall::Unmount(blank.root.clone(), false))
        );

        // Another filesystem is refused before anything is written.
        let mut fat = vec![0u8; PROBE_BYTES];
        fat[82..87].copy_from_slice(b"FAT32");
        let other = tree("undo-fat", &fat);
        let m = FakeMounter::default();
        let e = switch(&switch_of(&other, &m, &r)).unwrap_err();
        assert!(e.0.contains("holds FAT32"), "{e}");

        // An image without the mount points is no liken image.
        let bare = tree("undo-bare", &ext4);
        std::fs::remove_dir(bare.root.join("var")).unwrap();
        let m = FakeMounter::default();
        let e = switch(&switch_of(&bare, &m, &r)).unwrap_err();
        assert!(e.0.contains("has no /var"), "{e}");
        assert_eq!(
            m.calls(),
            vec![
                MountCall::Mount("squashfs".into(), bare.root.clone()),
                MountCall::Unmount(bare.root.clone(), false)
            ]
        );
        for d in [t.dir, blank.dir, other.dir, bare.dir] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    #[test]
    fn an_io_error_through_dm_verity_is_a_block_that_failed_its_check() {
        let eio = io::Error::from_raw_os_error(nix::libc::EIO);
        let e = decide_image_error(Path::new("/dev/dm-0"), Path::new("/sysroot"), true, &eio);
        assert!(
            e.starts_with("cannot mount /dev/dm-0 (squashfs) on /sysroot: Input/output error")
                && e.contains("does not match its dm-verity root hash")
                && e.ends_with("write the release again"),
            "{e}"
        );
        // Unverified, or another error: the slot holds no image.
        let e = decide_image_error(Path::new("/dev/vda3"), Path::new("/sysroot"), false, &eio);
        assert!(
            e.ends_with("the slot holds no system image: write the release again"),
            "{e}"
        );
        let inval = io::Error::from_raw_os_error(nix::libc::EINVAL);
        let e = decide_image_error(Path::new("/dev/dm-0"), Path::new("/sysroot"), true, &inval);
        assert!(!e.contains("dm-verity"), "{e}");
    }

    #[test]
    fn clearing_stays_on_one_device() {
        let dir = tmp("clear");
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("a/b/f"), "x").unwrap();
        std::fs::write(dir.join("g"), "y").unwrap();
        std::os::unix::fs::symlink("/etc", dir.join("link")).unwrap();
        let dev = std::fs::metadata(&dir).unwrap().dev();
        // Another device's files are left alone.
        assert_eq!(clear_dir(&dir, dev.wrapping_add(1), 0), 0);
        assert!(dir.join("g").exists());
        assert_eq!(clear_dir(&dir, dev, 0), 5);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        assert!(Path::new("/etc").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
