//! /proc/sys: writing one kernel parameter.
//!
//! The path is decided (and checked to stay under /proc/sys) by
//! [`crate::sysctls::decide_sysctls`]; this seam only writes, so the
//! step is tested with [`FakeSysctl`] and no root.

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Writing kernel parameters.
pub trait SysctlWriter {
    /// Writes `value` to the parameter file at `path`.
    fn write(&self, path: &Path, value: &str) -> io::Result<()>;
}

/// The running kernel's /proc/sys.
pub struct RealSysctl;

impl SysctlWriter for RealSysctl {
    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        // No create: a parameter the kernel lacks must fail (ENOENT),
        // not become a file. One write, as the kernel parses each write
        // on its own.
        let mut file = std::fs::OpenOptions::new().write(true).open(path)?;
        let mut text = String::with_capacity(value.len().saturating_add(1));
        text.push_str(value);
        text.push('\n');
        file.write_all(text.as_bytes())
    }
}

/// Records each write; fails the paths it is told to.
#[derive(Clone, Default)]
pub struct FakeSysctl {
    /// Every (path, value) written, in order, failed ones included.
    pub written: Arc<Mutex<Vec<(PathBuf, String)>>>,
    /// Paths whose write fails, with the errno it fails with.
    pub fail: Vec<(PathBuf, i32)>,
}

impl FakeSysctl {
    /// The writes so far.
    pub fn written(&self) -> Vec<(PathBuf, String)> {
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl SysctlWriter for FakeSysctl {
    fn write(&self, path: &Path, value: &str) -> io::Result<()> {
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((path.to_owned(), value.to_owned()));
        match self.fail.iter().find(|(p, _)| p == path) {
            Some((_, errno)) => Err(io::Error::from_raw_os_error(*errno)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_writes_value_with_newline_and_never_creates() {
        let dir = std::env::temp_dir().join(format!("liken-sysctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ip_forward");
        std::fs::write(&file, "0\n").unwrap();
        RealSysctl.write(&file, "1").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "1\n");
        let missing = dir.join("no_such");
        let err = RealSysctl.write(&missing, "1").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(!missing.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
