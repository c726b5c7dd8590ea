//! sync(2), reboot(2), kexec_file_load(2) and the Ctrl-Alt-Del switch.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::{Arc, Mutex};

/// How the machine goes down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerAction {
    /// Restart.
    Reboot,
    /// Switch off.
    Poweroff,
}

impl PowerAction {
    /// The action's name, as milestones print it.
    pub fn name(self) -> &'static str {
        match self {
            PowerAction::Reboot => "reboot",
            PowerAction::Poweroff => "poweroff",
        }
    }
}

/// The power interfaces.
pub trait Power {
    /// Flushes every filesystem's dirty data.
    fn sync(&self);
    /// Reboots or powers off; returns only when the kernel refused.
    fn reboot(&self, action: PowerAction) -> io::Error;
    /// Turns Ctrl-Alt-Del into SIGINT for init instead of an instant
    /// reboot, so the keystroke (and QEMU's `sendkey ctrl-alt-delete`)
    /// gets an orderly shutdown.
    fn cad_to_signal(&self) -> io::Result<()>;
    /// Loads the next kernel for a kexec reboot ([`super::kexec::load`]).
    fn kexec_load(
        &self,
        kernel: BorrowedFd<'_>,
        initrd: BorrowedFd<'_>,
        cmdline: &str,
    ) -> io::Result<()>;
    /// Drops a loaded kernel again ([`super::kexec::unload`]).
    fn kexec_unload(&self) -> io::Result<()>;
    /// Jumps into the loaded kernel; returns only when the kernel
    /// refused.
    fn kexec_reboot(&self) -> io::Error;
}

/// The kernel's.
pub struct RealPower;

impl Power for RealPower {
    fn sync(&self) {
        nix::unistd::sync();
    }

    fn reboot(&self, action: PowerAction) -> io::Error {
        reboot_in(match action {
            PowerAction::Reboot => nix::sys::reboot::RebootMode::RB_AUTOBOOT,
            PowerAction::Poweroff => nix::sys::reboot::RebootMode::RB_POWER_OFF,
        })
    }

    fn cad_to_signal(&self) -> io::Result<()> {
        nix::sys::reboot::set_cad_enabled(false).map_err(io::Error::from)
    }

    fn kexec_load(
        &self,
        kernel: BorrowedFd<'_>,
        initrd: BorrowedFd<'_>,
        cmdline: &str,
    ) -> io::Result<()> {
        super::kexec::load(kernel, initrd, cmdline)
    }

    fn kexec_unload(&self) -> io::Result<()> {
        super::kexec::unload()
    }

    fn kexec_reboot(&self) -> io::Error {
        reboot_in(nix::sys::reboot::RebootMode::RB_KEXEC)
    }
}

/// reboot(2) in `mode`; returns only the kernel's refusal.
fn reboot_in(mode: nix::sys::reboot::RebootMode) -> io::Error {
    match nix::sys::reboot::reboot(mode) {
        Err(e) => io::Error::from(e),
        Ok(never) => match never {},
    }
}

/// Starts a thread that reboots (or powers off) through the kernel after
/// `deadline`, without syncing: the orderly shutdown's backstop, for a
/// sync or an unmount that hangs on a dead disk. Whatever the shutdown
/// did not flush by then is lost either way; a machine that never goes
/// down is worse.
pub fn force_after(action: PowerAction, deadline: std::time::Duration) -> io::Result<()> {
    std::thread::Builder::new()
        .name("shutdown-deadline".into())
        .spawn(move || {
            std::thread::sleep(deadline);
            crate::console::line(&format!(
                "shutdown: not done after {} s; {} now without syncing",
                deadline.as_secs(),
                action.name()
            ));
            let e = RealPower.reboot(action);
            crate::console::line(&format!("shutdown: the kernel refused ({e})"));
        })
        .map(drop)
}

/// What a fake kexec load was handed: the kernel's bytes, the
/// initrd's, the command line.
pub type Loaded = (Vec<u8>, Vec<u8>, String);

/// Records calls; reboot "fails" so a test sees it return.
#[derive(Clone, Default)]
pub struct FakePower {
    /// "sync", "reboot", "poweroff", "cad", "kexec-load",
    /// "kexec-unload", "kexec", in order.
    pub calls: Arc<Mutex<Vec<&'static str>>>,
    /// What the last kexec load was handed.
    pub loaded: Arc<Mutex<Option<Loaded>>>,
    /// When set, kexec_load fails with this errno.
    pub refuse_load: Option<i32>,
}

impl FakePower {
    /// The calls so far.
    pub fn calls(&self) -> Vec<&'static str> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn record(&self, c: &'static str) {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(c);
    }
}

impl Power for FakePower {
    fn sync(&self) {
        self.record("sync");
    }

    fn reboot(&self, action: PowerAction) -> io::Error {
        self.record(action.name());
        io::Error::other("fake reboot")
    }

    fn cad_to_signal(&self) -> io::Result<()> {
        self.record("cad");
        Ok(())
    }

    fn kexec_load(
        &self,
        kernel: BorrowedFd<'_>,
        initrd: BorrowedFd<'_>,
        cmdline: &str,
    ) -> io::Result<()> {
        self.record("kexec-load");
        if let Some(errno) = self.refuse_load {
            return Err(io::Error::from_raw_os_error(errno));
        }
        let read = |fd: BorrowedFd<'_>| -> io::Result<Vec<u8>> {
            use std::io::{Read, Seek};
            let mut f = std::fs::File::from(fd.try_clone_to_owned()?);
            f.rewind()?;
            let mut v = Vec::new();
            f.read_to_end(&mut v)?;
            Ok(v)
        };
        *self
            .loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((read(kernel)?, read(initrd)?, cmdline.to_owned()));
        Ok(())
    }

    fn kexec_unload(&self) -> io::Result<()> {
        self.record("kexec-unload");
        Ok(())
    }

    fn kexec_reboot(&self) -> io::Error {
        self.record("kexec");
        io::Error::other("fake kexec")
    }
}
