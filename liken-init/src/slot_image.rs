//! Writing a checked system image raw into a slot's partition, and
//! making sure the disk kept it: install mode writes slot A of the disk
//! it lays out, the write-release request the inactive slot.
//!
//! The image is opened again (not through a link) and hashed while it
//! is copied, so a file changed since [`release_check`] checked it is
//! caught; the device is then synced, its cached pages dropped, and the
//! written range read back from the disk and hashed again: a disk that
//! silently loses writes must not become a boot target. A progress line
//! comes every tenth of the image ([`decide_progress`]).
//!
//! [`release_check`]: crate::release_check

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};

use liken_api::Sha256Hex;

use crate::release_check::{self, Checked, CopyError};

const MIB: u64 = 1 << 20;

/// A slot's partition (or the whole disk holding it), as the image
/// writer needs it. A `File` on a device node is the real one; tests
/// use image files and disks that forget.
pub trait SlotDevice: Read + Write + Seek + Send {
    /// Its size in bytes.
    fn capacity(&mut self) -> io::Result<u64>;
    /// Makes everything written durable (fsync).
    fn sync(&mut self) -> io::Result<()>;
    /// Drops cached pages, so the next read comes from the disk.
    fn drop_cache(&mut self) -> io::Result<()>;
}

impl SlotDevice for File {
    fn capacity(&mut self) -> io::Result<u64> {
        let end = self.seek(SeekFrom::End(0))?;
        self.seek(SeekFrom::Start(0))?;
        Ok(end)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.sync_all()
    }

    fn drop_cache(&mut self) -> io::Result<()> {
        nix::fcntl::posix_fadvise(
            &*self,
            0,
            0,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        )
        .map_err(io::Error::from)
    }
}

/// Why the image is not (provably) in the slot. The callers say what
/// that means for their machine.
#[derive(Debug)]
pub enum ImageError {
    /// The image could not be opened again.
    Open(io::Error),
    /// Reading the image failed.
    Read(io::Error),
    /// The device failed.
    Device {
        /// What was being done to it ("writing", "syncing", ...).
        doing: &'static str,
        /// Why.
        error: io::Error,
    },
    /// The image yielded other bytes than those checked (their digest).
    Changed(Sha256Hex),
    /// The device read back other bytes than those written (their
    /// digest).
    ReadBack(Sha256Hex),
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageError::Open(e) => write!(f, "opening the system image: {e}"),
            ImageError::Read(e) => write!(f, "reading the system image: {e}"),
            ImageError::Device { doing, error } => write!(f, "{doing} the slot: {error}"),
            ImageError::Changed(d) => {
                write!(
                    f,
                    "the system image changed after it was checked (sha256 {d})"
                )
            }
            ImageError::ReadBack(d) => write!(f, "the slot read back with sha256 {d}"),
        }
    }
}

/// A progress report is due when the copy crossed another tenth;
/// returns the tenths done (1..=10) to report, given the last reported.
pub fn decide_progress(done: u64, total: u64, reported: u64) -> Option<u64> {
    let tenths = u128::from(done)
        .saturating_mul(10)
        .checked_div(u128::from(total))?;
    let tenths = u64::try_from(tenths).unwrap_or(10).min(10);
    (tenths > reported).then_some(tenths)
}

/// Writes `image` into `disk` at `offset`, syncs, and reads it back;
/// `report` hears `40% (400 of 1000 MiB)` lines.
pub fn write_image(
    image: &Checked,
    disk: &mut dyn SlotDevice,
    offset: u64,
    report: &mut dyn FnMut(&str),
) -> Result<(), ImageError> {
    let device = |doing: &'static str| move |error| ImageError::Device { doing, error };
    let size = image.artifact.size;
    let want = &image.artifact.sha256;
    let src = release_check::open_regular(&image.path).map_err(ImageError::Open)?;
    disk.seek(SeekFrom::Start(offset))
        .map_err(device("seeking in"))?;
    let mut done: u64 = 0;
    let mut reported = 0;
    let (written, n) = release_check::hash_copy(&mut src.take(size), &mut |chunk| {
        disk.write_all(chunk)?;
        done = done.saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
        if let Some(t) = decide_progress(done, size, reported) {
            reported = t;
            report(&format!(
                "{}% ({} of {} MiB)",
                t.saturating_mul(10),
                done / MIB,
                size / MIB
            ));
        }
        Ok(())
    })
    .map_err(|e| match e {
        CopyError::Read(e) => ImageError::Read(e),
        CopyError::Write(e) => device("writing")(e),
    })?;
    if n != size || written != *want {
        return Err(ImageError::Changed(written));
    }
    disk.flush().map_err(device("flushing"))?;
    disk.sync().map_err(device("syncing"))?;
    // Read what the disk holds, not what the page cache kept.
    disk.drop_cache().map_err(device("dropping the cache of"))?;
    disk.seek(SeekFrom::Start(offset))
        .map_err(device("seeking in"))?;
    let (got, n) = release_check::hash_copy(&mut (&mut *disk).take(size), &mut |_| Ok(()))
        .map_err(|(CopyError::Read(e) | CopyError::Write(e))| device("reading back")(e))?;
    if n != size || got != *want {
        return Err(ImageError::ReadBack(got));
    }
    Ok(())
}

/// An in-memory device for tests; `forget` makes it accept every write
/// and keep none (a disk that silently loses writes).
#[cfg(test)]
pub(crate) struct MemoryDisk {
    /// Its bytes.
    pub disk: io::Cursor<Vec<u8>>,
    /// Whether writes are dropped.
    pub forget: bool,
}

#[cfg(test)]
impl MemoryDisk {
    /// `size` zero bytes.
    pub fn new(size: usize, forget: bool) -> MemoryDisk {
        MemoryDisk {
            disk: io::Cursor::new(vec![0; size]),
            forget,
        }
    }
}

#[cfg(test)]
impl Read for MemoryDisk {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.disk.read(buf)
    }
}

#[cfg(test)]
impl Write for MemoryDisk {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.forget {
            return Ok(buf.len());
        }
        self.disk.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
impl Seek for MemoryDisk {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.disk.seek(to)
    }
}

#[cfg(test)]
impl SlotDevice for MemoryDisk {
    fn capacity(&mut self) -> io::Result<u64> {
        Ok(self.disk.get_ref().len() as u64)
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn drop_cache(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release_check::write_test_artifact;
    use std::path::PathBuf;

    #[test]
    fn progress_every_tenth() {
        let mut reported = 0;
        let mut seen = Vec::new();
        for done in (0..=1000u64).step_by(7).chain([1000]) {
            if let Some(t) = decide_progress(done, 1000, reported) {
                reported = t;
                seen.push(t);
            }
        }
        assert_eq!(seen, (1..=10).collect::<Vec<_>>());
        assert_eq!(decide_progress(0, 100, 0), None);
        assert_eq!(decide_progress(10, 100, 0), Some(1));
        assert_eq!(decide_progress(15, 100, 1), None);
        assert_eq!(decide_progress(100, 100, 9), Some(10));
        assert_eq!(decide_progress(5, 0, 0), None);
        assert_eq!(decide_progress(u64::MAX, u64::MAX, 0), Some(10));
    }

    fn image(test: &str, bytes: &[u8]) -> (PathBuf, Checked) {
        let dir =
            std::env::temp_dir().join(format!("liken-init-slot-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let checked = Checked {
            artifact: write_test_artifact(&dir, "system", "liken.sqfs", bytes),
            path: dir.join("liken.sqfs"),
            bytes: Vec::new(),
        };
        (dir, checked)
    }

    #[test]
    fn writes_at_the_offset_and_reads_back() {
        let data: Vec<u8> = (0..(2 * MIB as u32 + 4097))
            .map(|i| (i % 251) as u8)
            .collect();
        let (dir, checked) = image("ok", &data);
        let mut disk = MemoryDisk::new(3 * MIB as usize, false);
        let mut lines = Vec::new();
        write_image(&checked, &mut disk, 512, &mut |l| lines.push(l.to_owned())).unwrap();
        let bytes = disk.disk.into_inner();
        assert!(bytes[..512].iter().all(|b| *b == 0));
        assert_eq!(&bytes[512..512 + data.len()], data.as_slice());
        assert_eq!(
            lines,
            ["40% (1 of 2 MiB)", "90% (2 of 2 MiB)", "100% (2 of 2 MiB)"]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_changed_image_or_a_forgetful_disk_is_caught() {
        let (dir, mut checked) = image("bad", b"system image");
        let mut disk = MemoryDisk::new(1024, true);
        let e = write_image(&checked, &mut disk, 0, &mut |_| {}).unwrap_err();
        assert!(matches!(e, ImageError::ReadBack(_)), "{e}");

        disk.forget = false;
        checked.artifact.sha256 = liken_api::hash::sha256(b"system imagf");
        let e = write_image(&checked, &mut disk, 0, &mut |_| {}).unwrap_err();
        assert!(matches!(e, ImageError::Changed(_)), "{e}");
        // Shorter than checked.
        std::fs::write(&checked.path, b"system").unwrap();
        let e = write_image(&checked, &mut disk, 0, &mut |_| {}).unwrap_err();
        assert!(matches!(e, ImageError::Changed(_)), "{e}");

        std::fs::remove_file(&checked.path).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &checked.path).unwrap();
        let e = write_image(&checked, &mut disk, 0, &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
