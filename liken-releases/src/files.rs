//! Writing files so that a failure loses nothing: the two ways the
//! workstation commands create what they produce.
//!
//! - [`write_new`] creates a file that must not exist yet (`new`, `mint`,
//!   `adopt`): `O_EXCL` makes "refuse to overwrite" hold even against a
//!   file that appears between the check and the write, and the data is
//!   fsynced before the command reports success.
//! - [`replace`] writes a file that may already exist (`kubeconfig`,
//!   `layer`'s output): a temporary file beside it, fsync, rename over the
//!   final name, fsync the directory. A reader sees the old file or the
//!   new one, never half of either.
//!
//! - [`rename_noreplace`] publishes a directory that must not be replaced
//!   (`bundle`: versions are immutable), and [`DirLock`] serializes
//!   writers of one directory (`channel.yaml`).
//!
//! Temporary names start with a dot, so `serve` never shares one.
//!
//! Both set the mode at creation (0600 for keys and credentials), so no
//! secret is ever briefly readable by others.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Mode for private keys, tokens and kubeconfigs.
pub const PRIVATE: u32 = 0o600;
/// Mode for certificates and manifests.
pub const PUBLIC: u32 = 0o644;
/// Mode for directories that hold private keys.
pub const PRIVATE_DIR: u32 = 0o700;

/// Creates `path` with `bytes`; fails with `AlreadyExists` when it exists.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Replaces `path` atomically with `bytes`.
pub fn replace(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = parent(path);
    let tmp = temp_name(path);
    // A temporary left by a crashed run under a reused pid would make
    // create_new fail forever; it is ours to discard.
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// fsyncs a directory so the names created or renamed in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Renames `from` to `to` unless `to` exists; an existing `to` is an
/// `AlreadyExists` error and both are left as they were.
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::EXIST) => Err(io::Error::from(io::ErrorKind::AlreadyExists)),
        // Filesystems without RENAME_NOREPLACE (some network mounts):
        // check, then rename. The check and the rename are not one step
        // there, which is the best such a filesystem allows.
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
            if std::fs::symlink_metadata(to).is_ok() {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            std::fs::rename(from, to)
        }
        Err(e) => Err(e.into()),
    }
}

/// An exclusive advisory lock on a directory, held until dropped, so two
/// bundles into one channel update channel.yaml one after the other.
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Blocks until the lock on `dir` is held.
    pub fn acquire(dir: &Path) -> io::Result<DirLock> {
        let file = File::open(dir)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
        Ok(DirLock { _file: file })
    }
}

/// Creates `dir` and its missing parents with `mode` (the umask still
/// applies to new directories, never widening them).
pub fn create_dirs(dir: &Path, mode: u32) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
}

/// The directory a file lives in (`.` for a bare name).
pub fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn temp_name(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    parent(path).join(format!(".{name}.tmp-{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn write_new_refuses_an_existing_file_and_sets_the_mode() {
        let dir = liken_testenv::scratch::TempDir::new("files-new");
        let p = dir.path().join("key");
        write_new(&p, b"secret", PRIVATE).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let e = write_new(&p, b"other", PRIVATE).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&p).unwrap(), b"secret");
    }

    #[test]
    fn replace_swaps_the_whole_file_and_leaves_no_temporary() {
        let dir = liken_testenv::scratch::TempDir::new("files-replace");
        let p = dir.path().join("kubeconfig");
        replace(&p, b"one", PRIVATE).unwrap();
        replace(&p, b"two", PRIVATE).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn rename_noreplace_refuses_an_existing_target() {
        let dir = liken_testenv::scratch::TempDir::new("noreplace");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let err = rename_noreplace(&a, &b).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(a.exists());
        let c = dir.path().join("c");
        rename_noreplace(&a, &c).unwrap();
        assert!(c.exists() && !a.exists());
        let _lock = DirLock::acquire(dir.path()).unwrap();
    }
}
