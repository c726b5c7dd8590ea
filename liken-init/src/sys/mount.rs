//! mount(2) and umount2(2), and the moves and chroot(2) of switching
//! root.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub use nix::mount::MsFlags;

/// One mount to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountRequest {
    /// The device or pseudo-filesystem name.
    pub source: String,
    /// Where it goes.
    pub target: PathBuf,
    /// The filesystem type.
    pub fstype: String,
    /// MS_* flags.
    pub flags: MsFlags,
    /// Filesystem options (`mode=0755`), if any.
    pub data: Option<String>,
}

/// Mounting and unmounting.
pub trait Mounter {
    /// Mounts one filesystem.
    fn mount(&self, request: &MountRequest) -> io::Result<()>;
    /// Unmounts `target`; `detach` asks for a lazy unmount (MNT_DETACH)
    /// when a normal one is refused as busy.
    fn unmount(&self, target: &Path, detach: bool) -> io::Result<()>;
    /// Moves the mount at `from` (with the mounts below it) to `to`
    /// (MS_MOVE).
    fn move_mount(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the mounted `new_root` the root of the calling process, as
    /// switch_root(8) does: chdir into it, move it over `/`, chroot to
    /// `.` and chdir to the new `/`. Only the calling process (init)
    /// changes root; it has no other processes yet that would need to.
    fn switch_root(&self, new_root: &Path) -> io::Result<()>;
}

/// The kernel's mount(2).
pub struct RealMounter;

impl Mounter for RealMounter {
    fn mount(&self, r: &MountRequest) -> io::Result<()> {
        nix::mount::mount(
            Some(r.source.as_str()),
            &r.target,
            Some(r.fstype.as_str()),
            r.flags,
            r.data.as_deref(),
        )
        .map_err(io::Error::from)
    }

    fn unmount(&self, target: &Path, detach: bool) -> io::Result<()> {
        let flags = if detach {
            nix::mount::MntFlags::MNT_DETACH
        } else {
            nix::mount::MntFlags::empty()
        };
        nix::mount::umount2(target, flags).map_err(io::Error::from)
    }

    fn move_mount(&self, from: &Path, to: &Path) -> io::Result<()> {
        nix::mount::mount(Some(from), to, None::<&str>, MsFlags::MS_MOVE, None::<&str>)
            .map_err(io::Error::from)
    }

    fn switch_root(&self, new_root: &Path) -> io::Result<()> {
        nix::unistd::chdir(new_root)?;
        nix::mount::mount(Some("."), "/", None::<&str>, MsFlags::MS_MOVE, None::<&str>)?;
        nix::unistd::chroot(".")?;
        nix::unistd::chdir("/")?;
        Ok(())
    }
}

/// What the fake was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MountCall {
    /// A mount of (fstype, target).
    Mount(String, PathBuf),
    /// An unmount of target, detached or not.
    Unmount(PathBuf, bool),
    /// A move of a mount (from, to).
    Move(PathBuf, PathBuf),
    /// A switch of the root to the path.
    SwitchRoot(PathBuf),
}

/// Records calls; fails the targets it is told to.
#[derive(Clone, Default)]
pub struct FakeMounter {
    /// Every call, in order.
    pub calls: Arc<Mutex<Vec<MountCall>>>,
    /// Targets whose mount fails (with EINVAL).
    pub fail_mount: Vec<PathBuf>,
    /// Targets whose plain unmount fails as busy.
    pub busy: Vec<PathBuf>,
    /// Destinations whose move fails (with EINVAL).
    pub fail_move: Vec<PathBuf>,
    /// Whether switching root fails (with EINVAL).
    pub fail_switch: bool,
}

impl FakeMounter {
    /// The calls so far.
    pub fn calls(&self) -> Vec<MountCall> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn record(&self, c: MountCall) {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(c);
    }
}

impl Mounter for FakeMounter {
    fn mount(&self, r: &MountRequest) -> io::Result<()> {
        self.record(MountCall::Mount(r.fstype.clone(), r.target.clone()));
        if self.fail_mount.contains(&r.target) {
            return Err(io::Error::from_raw_os_error(nix::libc::EINVAL));
        }
        Ok(())
    }

    fn unmount(&self, target: &Path, detach: bool) -> io::Result<()> {
        self.record(MountCall::Unmount(target.to_owned(), detach));
        if !detach && self.busy.iter().any(|b| b == target) {
            return Err(io::Error::from_raw_os_error(nix::libc::EBUSY));
        }
        Ok(())
    }

    fn move_mount(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.record(MountCall::Move(from.to_owned(), to.to_owned()));
        if self.fail_move.iter().any(|f| f == to) {
            return Err(io::Error::from_raw_os_error(nix::libc::EINVAL));
        }
        Ok(())
    }

    fn switch_root(&self, new_root: &Path) -> io::Result<()> {
        self.record(MountCall::SwitchRoot(new_root.to_owned()));
        if self.fail_switch {
            return Err(io::Error::from_raw_os_error(nix::libc::EINVAL));
        }
        Ok(())
    }
}
