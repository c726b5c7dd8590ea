//! Writes that are all or nothing.
//!
//! Every file the release commands leave under its final name got there
//! by rename from a temporary name in the same directory, after an fsync
//! of the file; the directory is fsynced after the rename so the name
//! survives a power cut too. A reader therefore sees the old file, or the
//! new one, never half of one.
//!
//! Versions are immutable, so a release directory moves into place with
//! `renameat2(RENAME_NOREPLACE)`: two bundles racing for one version
//! cannot both win, and neither replaces what was published.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// fsyncs a directory so the names created or renamed in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The directory holding `path` (`.` for a bare name).
pub fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Writes `bytes` to `path` through a temporary file in the same
/// directory: write, fsync, rename, fsync the directory. The temporary
/// name starts with a dot so `serve` never shares it.
pub fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = parent_of(path);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".tmp-{}", std::process::id()));
    let temp = dir.join(temp_name);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&temp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
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
            if fs::symlink_metadata(to).is_ok() {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            fs::rename(from, to)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replace_whole_files_and_leave_no_temporaries() {
        let dir = crate::releases::testdir::TestDir::new("atomic");
        let p = dir.path().join("channel.yaml");
        write_file(&p, b"one").unwrap();
        write_file(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["channel.yaml"]);
    }

    #[test]
    fn rename_noreplace_refuses_an_existing_target() {
        let dir = crate::releases::testdir::TestDir::new("noreplace");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        fs::create_dir(&a).unwrap();
        fs::create_dir(&b).unwrap();
        let err = rename_noreplace(&a, &b).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(a.exists());
        let c = dir.path().join("c");
        rename_noreplace(&a, &c).unwrap();
        assert!(c.exists() && !a.exists());
        let _lock = DirLock::acquire(dir.path()).unwrap();
    }
}
