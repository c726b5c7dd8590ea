//! Writing files so a crash never leaves half of one: write a temporary
//! file beside the target, fsync it, rename it over the target, fsync
//! the directory. Every replaced file in init goes through here (the
//! ESP's files too, through [`crate::esp`]), and so does every directory
//! fsync.
//!
//! And reading files so PID 1 never hangs on one: [`open_regular`] opens
//! without following a link (O_NOFOLLOW) or blocking (O_NONBLOCK: a FIFO
//! put where a document should be would otherwise stop init in open(2)
//! until a writer came), and refuses anything but a regular file;
//! [`read_capped`] reads such a file whole only up to a cap, so a huge
//! file cannot exhaust init's memory.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The directory of `path` and the temporary name beside it that a
/// replacement is written under first (`.<name>.tmp`).
pub fn temp_beside(path: &Path) -> io::Result<(&Path, PathBuf)> {
    let dir = path.parent().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "a file path has a directory")
    })?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a file path has a name"))?;
    let mut tmp_name = OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    Ok((dir, dir.join(tmp_name)))
}

/// Replaces `path` with what `source` yields, created with `mode`;
/// returns the bytes written. The directory must exist. On failure the
/// temporary file is removed and `path` is as it was.
pub fn replace_from(path: &Path, source: &mut dyn Read, mode: u32) -> io::Result<u64> {
    let (dir, tmp) = temp_beside(path)?;
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        let n = io::copy(source, &mut f)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // Once more after the rename, through the handle still open:
        // see [`sync_renamed`].
        f.sync_all()?;
        drop(f);
        sync_dir(dir)?;
        Ok(n)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Replaces `path` with `bytes`, created with `mode`.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    replace_from(path, &mut &*bytes, mode).map(drop)
}

/// Opens `path` for reading without following a link in its last
/// component, without blocking, and only when it is a regular file.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(nix::libc::ELOOP) {
                io::Error::new(io::ErrorKind::InvalidInput, "it is a symlink")
            } else {
                e
            }
        })?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is not a regular file",
        ));
    }
    Ok(f)
}

/// Reads the regular file `path` whole (see [`open_regular`]), refusing
/// one larger than `cap` bytes.
pub fn read_capped(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let f = open_regular(path)?;
    let too_big = |len: u64| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("is larger than the {cap} bytes init reads (at least {len})"),
        )
    };
    let len = f.metadata()?.len();
    if len > cap {
        return Err(too_big(len));
    }
    let mut bytes = Vec::new();
    // Files of /proc report no size: the cap holds for what is read too.
    f.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > cap {
        return Err(too_big(cap.saturating_add(1)));
    }
    Ok(bytes)
}

/// fsyncs a directory, so the entries created, renamed or removed in it
/// are on disk.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Makes a rename to `path` durable: fsyncs the renamed file, then its
/// directory `dir`. On vfat (the ESP) the directory's fsync is not
/// enough: a rename writes the new name's directory entry empty (no
/// first cluster, size 0) and the file's cluster and size reach it only
/// when the file's own inode is written back (fs/fat/namei_vfat.c,
/// vfat_rename: `mark_inode_dirty` unless the mount is `dirsync`), up
/// to half a minute later. A power cut in between leaves the new name
/// an empty file and the old one gone; a blessed boot entry would then
/// vanish from the bootloader's menu. The file's fsync writes that
/// entry (fat_file_fsync, through __fat_write_inode at its new place).
pub fn sync_renamed(path: &Path, dir: &Path) -> io::Result<()> {
    open_regular(path)?.sync_all()?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn replaces_the_file_whole() {
        let dir = std::env::temp_dir().join(format!("liken-init-fs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("boot.json");
        write_atomic(&p, b"one", 0o644).unwrap();
        write_atomic(&p, b"two", 0o644).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o644
        );
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no temporary left"
        );
        assert!(write_atomic(&dir.join("none/x"), b"", 0o644).is_err());
        // A failed write leaves the old file and no temporary.
        std::fs::create_dir(dir.join(".boot.json.tmp")).unwrap();
        assert!(write_atomic(&p, b"three", 0o644).is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        std::fs::remove_dir(dir.join(".boot.json.tmp")).unwrap();
        let n = replace_from(&p, &mut &b"four"[..], 0o600).unwrap();
        assert_eq!((n, std::fs::read(&p).unwrap()), (4, b"four".to_vec()));
        assert_eq!(
            temp_beside(&p).unwrap(),
            (dir.as_path(), dir.join(".boot.json.tmp"))
        );
        assert!(temp_beside(Path::new("/")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn reads_refuse_links_fifos_directories_and_oversize_files() {
        let dir = std::env::temp_dir().join(format!("liken-init-read-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("doc.yaml");
        std::fs::write(&file, b"0123456789").unwrap();
        assert_eq!(read_capped(&file, 10).unwrap(), b"0123456789");
        let e = read_capped(&file, 9).unwrap_err();
        assert!(e.to_string().contains("larger than the 9 bytes"), "{e}");
        std::os::unix::fs::symlink(&file, dir.join("link.yaml")).unwrap();
        let e = read_capped(&dir.join("link.yaml"), 100).unwrap_err();
        assert_eq!(e.to_string(), "it is a symlink");
        // A FIFO with no writer: a plain open would block for ever.
        let fifo = dir.join("fifo.yaml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = read_capped(&fifo, 100).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = read_capped(&dir, 100).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        // /proc's files have no size; the cap holds for what is read.
        assert!(read_capped(Path::new("/proc/self/mountinfo"), 1 << 20).is_ok());
        assert!(read_capped(Path::new("/proc/self/mountinfo"), 1).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
