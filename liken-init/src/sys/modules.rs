//! finit_module(2): loading one kernel module from its file.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What loading a module did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loaded {
    /// The kernel took the module now.
    Now,
    /// It was loaded already (EEXIST), which is not an error.
    Already,
}

/// Loading kernel modules.
pub trait ModuleLoader {
    /// Loads the module at `path` with no parameters.
    fn load(&self, path: &Path) -> io::Result<Loaded>;
}

/// The kernel's finit_module(2).
pub struct RealLoader;

impl ModuleLoader for RealLoader {
    fn load(&self, path: &Path) -> io::Result<Loaded> {
        let file = std::fs::File::open(path)?;
        match nix::kmod::finit_module(&file, c"", nix::kmod::ModuleInitFlags::empty()) {
            Ok(()) => Ok(Loaded::Now),
            Err(nix::errno::Errno::EEXIST) => Ok(Loaded::Already),
            Err(e) => Err(io::Error::from(e)),
        }
    }
}

/// Records each path; fails the ones it is told to.
#[derive(Clone, Default)]
pub struct FakeLoader {
    /// Every path loaded, in order.
    pub loaded: Arc<Mutex<Vec<PathBuf>>>,
    /// File names (`ext4.ko`) whose load fails with ENOENT, as an
    /// unknown symbol does.
    pub fail: Vec<String>,
}

impl FakeLoader {
    /// The paths so far.
    pub fn loaded(&self) -> Vec<PathBuf> {
        self.loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl ModuleLoader for FakeLoader {
    fn load(&self, path: &Path) -> io::Result<Loaded> {
        self.loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(path.to_owned());
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if self.fail.contains(&name) {
            return Err(io::Error::from_raw_os_error(nix::libc::ENOENT));
        }
        Ok(Loaded::Now)
    }
}
