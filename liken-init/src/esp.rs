//! The EFI system partition: mounted on demand, written with the care
//! FAT needs, unmounted again.
//!
//! The ESP (GPT name `LIKEN-ESP`, vfat) holds the bootloader, both
//! slots' kernels and initrds and their loader entries. init is its only
//! writer: blessing a boot renames an entry, writing a release replaces
//! a slot's files. Neither happens often, so the ESP is mounted at
//! [`MOUNT_POINT`] only for the duration of one job, through an [`Esp`]
//! guard that unmounts it when dropped; a power cut then rarely finds
//! it mounted, and FAT has no journal to recover a half-written
//! directory with.
//!
//! FAT's discipline, which every write here follows:
//! - a new or replaced file is written under a temporary name, fsynced,
//!   renamed into place, and then its directory is fsynced
//!   ([`fsutil::replace_from`]), so the directory entry never names a
//!   file whose clusters are not on disk;
//! - a rename (blessing an entry) is followed by an fsync of the
//!   directory, so the new name survives a power cut;
//! - a file whose size must not change (grubenv) is overwritten in
//!   place with one whole write and an fsync, which is how GRUB itself
//!   writes it.
//!
//! Only one job holds the ESP at a time: [`Esp::mount`] takes a lock
//! that the guard keeps, so a blessing and a release write (or two
//! writes) never mount it twice or unmount it under each other.
//!
//! Paths handed to the guard are relative to the ESP's root and may
//! not climb out of it (`..`, absolute paths are refused).

use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::fsutil::{self, sync_dir};
use crate::sys::block;
use crate::sys::mount::{MountRequest, Mounter, MsFlags};

/// The ESP's GPT partition name on an installed disk.
pub const ESP_LABEL: &str = "LIKEN-ESP";

/// Where the ESP is mounted while a job holds it.
pub const MOUNT_POINT: &str = "/run/liken/esp";

/// One holder at a time (see the module doc).
static HELD: Mutex<()> = Mutex::new(());

/// What went wrong with the ESP.
#[derive(Debug)]
pub enum EspError {
    /// No partition is named LIKEN-ESP.
    NotFound,
    /// Several disks have a LIKEN-ESP partition.
    Several(Vec<PathBuf>),
    /// mount(2) refused.
    Mount {
        /// The partition.
        device: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// A path that is not a plain relative path inside the ESP.
    Path(String),
    /// Reading or writing a file on the ESP failed.
    Io {
        /// The path, relative to the ESP's root.
        path: String,
        /// Why.
        error: io::Error,
    },
    /// Unmounting failed (even detached).
    Unmount(io::Error),
    /// Another job holds the ESP ([`Esp::try_mount`] only).
    Busy,
}

impl fmt::Display for EspError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EspError::NotFound => write!(
                f,
                "no partition is named {ESP_LABEL}; this disk was not installed by liken \
                 (reinstall it from a `liken stick`)"
            ),
            EspError::Several(devs) => {
                let list: Vec<String> = devs.iter().map(|d| d.display().to_string()).collect();
                write!(
                    f,
                    "{ESP_LABEL} is on several disks ({}); remove the stale disk and reboot",
                    list.join(", ")
                )
            }
            EspError::Mount { device, error } => write!(
                f,
                "cannot mount the ESP {} as vfat ({error}); check it with `fsck.vfat -n` \
                 from another system, or reinstall",
                device.display()
            ),
            EspError::Path(p) => write!(
                f,
                "{p:?} is not a path inside the ESP (a bug in init: report it)"
            ),
            EspError::Io { path, error } => write!(
                f,
                "ESP file {path}: {error}; the ESP may be full or damaged \
                 (check it with `fsck.vfat -n` from another system)"
            ),
            EspError::Busy => f.write_str(
                "another job (a release write) is using the ESP; init tries again later",
            ),
            EspError::Unmount(error) => write!(
                f,
                "cannot unmount the ESP from {MOUNT_POINT} ({error}); its data was synced, \
                 and a reboot unmounts it"
            ),
        }
    }
}

impl std::error::Error for EspError {}

/// The checked form of a path inside the ESP: relative, no `..`.
pub fn esp_relative(rel: &str) -> Result<PathBuf, EspError> {
    let p = Path::new(rel);
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return Err(EspError::Path(rel.to_owned())),
        }
    }
    if out.as_os_str().is_empty() {
        return Err(EspError::Path(rel.to_owned()));
    }
    Ok(out)
}

/// LIKEN-ESP under `sys` (/sys), on `disk` (the booted slot's) when known.
fn find(sys: &Path, disk: Option<&str>) -> Result<PathBuf, EspError> {
    match block::find_by_label(sys, disk, ESP_LABEL) {
        Ok(Some(d)) => Ok(d),
        Ok(None) => Err(EspError::NotFound),
        Err(devs) => Err(EspError::Several(devs)),
    }
}

/// The ESP kept from every job until dropped (the orderly shutdown
/// holds it until the power goes).
pub struct Hold(#[allow(dead_code)] MutexGuard<'static, ()>);

/// Waits up to `within` for the job holding the ESP (a release write
/// in one of its ESP phases) to let it go, and then keeps it, so no
/// job mounts it again while the machine shuts down; `None` when the
/// job still held it at the deadline. A release write between its ESP
/// phases finds the ESP taken and ends there, before its entry, which
/// leaves the machine booting the running release.
pub fn hold(within: std::time::Duration) -> Option<Hold> {
    let started = std::time::Instant::now();
    loop {
        match HELD.try_lock() {
            Ok(g) => return Some(Hold(g)),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(Hold(p.into_inner())),
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
        if started.elapsed() >= within {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The mounted ESP. Dropping it unmounts (detaching if busy); call
/// [`Esp::unmount`] to learn whether that worked.
pub struct Esp<'a> {
    mounter: &'a dyn Mounter,
    root: PathBuf,
    /// Whether this guard mounted the ESP (and so must unmount it).
    mounted: bool,
    /// The lock, unless a [`Hold`] the guard borrows from keeps it.
    _held: Option<MutexGuard<'static, ()>>,
}

impl<'a> Esp<'a> {
    /// Finds LIKEN-ESP under `sys` (/sys), on `disk` (the booted slot's)
    /// when known, and mounts it at `at` ([`MOUNT_POINT`] on a machine),
    /// waiting for any other holder to finish first.
    pub fn mount(
        mounter: &'a dyn Mounter,
        sys: &Path,
        disk: Option<&str>,
        at: &Path,
    ) -> Result<Esp<'a>, EspError> {
        Esp::mount_device(mounter, &find(sys, disk)?, at)
    }

    /// As [`Esp::mount`], but returns [`EspError::Busy`] at once instead
    /// of waiting when another job holds the ESP (for the supervisor
    /// loop, which must not stall behind a release write).
    pub fn try_mount(
        mounter: &'a dyn Mounter,
        sys: &Path,
        disk: Option<&str>,
        at: &Path,
    ) -> Result<Esp<'a>, EspError> {
        let held = match HELD.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Err(EspError::Busy),
        };
        Esp::mount_held(mounter, &find(sys, disk)?, at, Some(held))
    }

    /// As [`Esp::mount`], for the shutdown that keeps every other job
    /// out with `hold`: the guard borrows the hold's lock.
    pub fn mount_holding(
        _hold: &'a Hold,
        mounter: &'a dyn Mounter,
        sys: &Path,
        disk: Option<&str>,
        at: &Path,
    ) -> Result<Esp<'a>, EspError> {
        Esp::mount_held(mounter, &find(sys, disk)?, at, None)
    }

    /// Mounts `device` at `at` as the ESP.
    pub fn mount_device(
        mounter: &'a dyn Mounter,
        device: &Path,
        at: &Path,
    ) -> Result<Esp<'a>, EspError> {
        let held = HELD
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Esp::mount_held(mounter, device, at, Some(held))
    }

    fn mount_held(
        mounter: &'a dyn Mounter,
        device: &Path,
        at: &Path,
        held: Option<MutexGuard<'static, ()>>,
    ) -> Result<Esp<'a>, EspError> {
        std::fs::create_dir_all(at).map_err(|error| EspError::Mount {
            device: device.to_owned(),
            error,
        })?;
        let request = MountRequest {
            source: device.display().to_string(),
            target: at.to_owned(),
            fstype: "vfat".to_owned(),
            flags: MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            // Nothing on the ESP is for anyone but root; mixed short
            // names keep the case of names like `liken-a.conf`.
            data: Some("umask=0077,shortname=mixed".to_owned()),
        };
        mounter.mount(&request).map_err(|error| EspError::Mount {
            device: device.to_owned(),
            error,
        })?;
        Ok(Esp {
            mounter,
            root: at.to_owned(),
            mounted: true,
            _held: held,
        })
    }

    /// A guard over a directory that is already the ESP's root (a test's
    /// temporary tree): nothing is mounted or unmounted.
    pub fn at_directory(mounter: &'a dyn Mounter, root: &Path) -> Esp<'a> {
        let held = HELD
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Esp {
            mounter,
            root: root.to_owned(),
            mounted: false,
            _held: Some(held),
        }
    }

    /// The mount point.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The absolute path of `rel` (checked with [`esp_relative`]).
    pub fn path(&self, rel: &str) -> Result<PathBuf, EspError> {
        Ok(self.root.join(esp_relative(rel)?))
    }

    fn io(rel: &str) -> impl FnOnce(io::Error) -> EspError + '_ {
        move |error| EspError::Io {
            path: rel.to_owned(),
            error,
        }
    }

    /// The file names in directory `rel`, sorted; an absent directory
    /// has none.
    pub fn list(&self, rel: &str) -> Result<Vec<String>, EspError> {
        let dir = self.path(rel)?;
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Esp::io(rel)(e)),
        };
        let mut names = Vec::new();
        for e in entries {
            let e = e.map_err(Esp::io(rel))?;
            if let Some(name) = e.file_name().to_str() {
                names.push(name.to_owned());
            }
        }
        crate::order::by_key(&mut names, |n| crate::order::text_key(n));
        Ok(names)
    }

    /// The file names of the boot entries of both kinds: loader/entries'
    /// (type #1) and EFI/Linux's `.efi` files (type #2, unified kernel
    /// images). Each name's suffix says its directory
    /// ([`liken_api::bootloader::entry_path`]); a `.efi` in
    /// loader/entries or anything else in EFI/Linux is left out, so a
    /// name is never looked for in the wrong one.
    pub fn list_entries(&self) -> Result<Vec<String>, EspError> {
        use liken_api::bootloader::{ENTRIES_DIR, EntryKind, UKI_DIR};
        let uki = EntryKind::Uki.suffix();
        let mut names: Vec<String> = self
            .list(ENTRIES_DIR)?
            .into_iter()
            .filter(|n| !n.ends_with(uki))
            .collect();
        names.extend(self.list(UKI_DIR)?.into_iter().filter(|n| n.ends_with(uki)));
        Ok(names)
    }

    /// Whether `rel` exists.
    pub fn exists(&self, rel: &str) -> Result<bool, EspError> {
        Ok(self.path(rel)?.exists())
    }

    /// Reads a whole (small) file.
    pub fn read(&self, rel: &str) -> Result<Vec<u8>, EspError> {
        std::fs::read(self.path(rel)?).map_err(Esp::io(rel))
    }

    /// Creates directory `rel` and its parents, fsyncing each parent
    /// that gained an entry.
    pub fn create_dir_all(&self, rel: &str) -> Result<(), EspError> {
        let rel_path = esp_relative(rel)?;
        let mut at = self.root.clone();
        for c in rel_path.components() {
            let parent = at.clone();
            at.push(c);
            if !at.is_dir() {
                std::fs::create_dir(&at).map_err(Esp::io(rel))?;
                sync_dir(&parent).map_err(Esp::io(rel))?;
            }
        }
        Ok(())
    }

    /// Writes `rel` whole from `bytes` (see [`Esp::write_from`]).
    pub fn write(&self, rel: &str, bytes: &[u8]) -> Result<u64, EspError> {
        let mut reader = bytes;
        self.write_from(rel, &mut reader)
    }

    /// Replaces `rel` with what `source` yields: written under a
    /// temporary name in the same directory, fsynced, renamed over
    /// `rel`, fsynced again (vfat, [`fsutil::sync_renamed`]), and the
    /// directory fsynced. The parent directory must
    /// exist. Returns the bytes written.
    pub fn write_from(&self, rel: &str, source: &mut dyn Read) -> Result<u64, EspError> {
        // The mode is for a test's directory: vfat takes the mount's
        // umask.
        fsutil::replace_from(&self.path(rel)?, source, 0o600).map_err(Esp::io(rel))
    }

    /// Overwrites `rel` in place with `bytes`, which must be exactly the
    /// file's current size (grubenv: GRUB writes it in place and finds it
    /// by its blocks), in one write, then fsyncs it.
    pub fn overwrite_in_place(&self, rel: &str, bytes: &[u8]) -> Result<(), EspError> {
        let path = self.path(rel)?;
        let result = (|| {
            let mut f = OpenOptions::new().write(true).open(&path)?;
            let len = f.metadata()?.len();
            if usize::try_from(len).ok() != Some(bytes.len()) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "is {len} bytes, not the {} an in-place rewrite needs",
                        bytes.len()
                    ),
                ));
            }
            f.write_all(bytes)?;
            f.sync_all()
        })();
        result.map_err(Esp::io(rel))
    }

    /// Renames `from` to `to` (both relative to the ESP's root, in the
    /// same directory for an atomic rename), then fsyncs the renamed file
    /// and the directory ([`fsutil::sync_renamed`]: vfat keeps a renamed
    /// file's size and first cluster with its inode, not its directory).
    pub fn rename(&self, from: &str, to: &str) -> Result<(), EspError> {
        let a = self.path(from)?;
        let b = self.path(to)?;
        let (dir, _) = split(&b, to)?;
        std::fs::rename(&a, &b)
            .and_then(|()| fsutil::sync_renamed(&b, dir))
            .map_err(Esp::io(from))
    }

    /// Removes file `rel` (absent is fine), then fsyncs its directory.
    pub fn remove(&self, rel: &str) -> Result<(), EspError> {
        let path = self.path(rel)?;
        let (dir, _) = split(&path, rel)?;
        match std::fs::remove_file(&path) {
            Ok(()) => sync_dir(dir).map_err(Esp::io(rel)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Esp::io(rel)(e)),
        }
    }

    /// Unmounts now, reporting failure. A busy ESP (a file still open)
    /// is detached: the kernel finishes once the last user lets go.
    pub fn unmount(mut self) -> Result<(), EspError> {
        self.release()
    }

    fn release(&mut self) -> Result<(), EspError> {
        if !self.mounted {
            return Ok(());
        }
        self.mounted = false;
        if self.mounter.unmount(&self.root, false).is_ok() {
            return Ok(());
        }
        self.mounter
            .unmount(&self.root, true)
            .map_err(EspError::Unmount)
    }
}

impl Drop for Esp<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            crate::console::line(&format!("esp: {e}"));
        }
    }
}

fn split<'p>(path: &'p Path, rel: &str) -> Result<(&'p Path, &'p std::ffi::OsStr), EspError> {
    match (path.parent(), path.file_name()) {
        (Some(d), Some(n)) => Ok((d, n)),
        _ => Err(EspError::Path(rel.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::mount::{FakeMounter, MountCall};

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("liken-init-esp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn paths_stay_inside() {
        assert_eq!(
            esp_relative("loader/entries/liken-a.conf").unwrap(),
            PathBuf::from("loader/entries/liken-a.conf")
        );
        assert_eq!(esp_relative("./a").unwrap(), PathBuf::from("a"));
        for bad in ["/etc/passwd", "../x", "a/../../b", "", "."] {
            assert!(esp_relative(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mounts_finds_and_unmounts() {
        let dir = tmp("mount");
        let sys = dir.join("sys");
        std::fs::create_dir_all(sys.join("class/block/vda1")).unwrap();
        std::fs::write(
            sys.join("class/block/vda1/uevent"),
            "DEVNAME=vda1\nDEVTYPE=partition\nPARTNAME=LIKEN-ESP\n",
        )
        .unwrap();
        let fake = FakeMounter::default();
        let at = dir.join("esp");
        let esp = Esp::mount(&fake, &sys, None, &at).unwrap();
        assert_eq!(esp.root(), at.as_path());
        drop(esp);
        assert_eq!(
            fake.calls(),
            vec![
                MountCall::Mount("vfat".into(), at.clone()),
                MountCall::Unmount(at.clone(), false)
            ]
        );
        let busy = FakeMounter {
            busy: vec![at.clone()],
            ..Default::default()
        };
        Esp::mount(&busy, &sys, None, &at)
            .unwrap()
            .unmount()
            .unwrap();
        assert_eq!(
            busy.calls().last(),
            Some(&MountCall::Unmount(at.clone(), true))
        );
        assert!(matches!(
            Esp::mount(&fake, &dir.join("none"), None, &at),
            Err(EspError::NotFound)
        ));
        let failing = FakeMounter {
            fail_mount: vec![at.clone()],
            ..Default::default()
        };
        let e = Esp::mount(&failing, &sys, None, &at).err().unwrap();
        assert!(e.to_string().contains("cannot mount the ESP"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn writes_renames_and_rewrites() {
        let dir = tmp("write");
        let fake = FakeMounter::default();
        let esp = Esp::at_directory(&fake, &dir);
        esp.create_dir_all("loader/entries").unwrap();
        assert_eq!(esp.write("loader/entries/liken-a+3.conf", b"x").unwrap(), 1);
        assert_eq!(esp.list("loader/entries").unwrap(), ["liken-a+3.conf"]);
        esp.rename(
            "loader/entries/liken-a+3.conf",
            "loader/entries/liken-a.conf",
        )
        .unwrap();
        assert_eq!(esp.list("loader/entries").unwrap(), ["liken-a.conf"]);
        assert_eq!(esp.read("loader/entries/liken-a.conf").unwrap(), b"x");
        assert!(esp.list("nothing").unwrap().is_empty());
        esp.write("grubenv", &[b'#'; 16]).unwrap();
        esp.overwrite_in_place("grubenv", &[b'a'; 16]).unwrap();
        assert_eq!(esp.read("grubenv").unwrap(), [b'a'; 16]);
        let e = esp.overwrite_in_place("grubenv", &[b'a'; 15]).unwrap_err();
        assert!(e.to_string().contains("not the 15"), "{e}");
        esp.remove("grubenv").unwrap();
        esp.remove("grubenv").unwrap();
        assert!(!esp.exists("grubenv").unwrap());
        assert!(esp.write("no/dir/file", b"").is_err());
        assert!(esp.write("../escape", b"").is_err());
        drop(esp);
        assert!(fake.calls().is_empty(), "a directory guard mounts nothing");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_shutdown_waits_for_the_holder_then_keeps_the_esp() {
        use std::time::{Duration, Instant};
        let dir = std::env::temp_dir().join(format!("liken-esp-hold-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (taken, held) = crossbeam_channel::bounded(1);
        let job = {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let fake = FakeMounter::default();
                let esp = Esp::at_directory(&fake, &dir);
                taken.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(400));
                drop(esp);
            })
        };
        held.recv().unwrap();
        // Not within 50 ms: the job still has it.
        assert!(hold(Duration::from_millis(50)).is_none());
        let started = Instant::now();
        let h = hold(Duration::from_secs(10)).expect("the job never let the ESP go");
        assert!(started.elapsed() >= Duration::from_millis(200));
        job.join().unwrap();
        // Held: another job cannot have it.
        let fake = FakeMounter::default();
        assert!(matches!(
            Esp::try_mount(&fake, &dir, None, &dir),
            Err(EspError::Busy)
        ));
        drop(h);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
