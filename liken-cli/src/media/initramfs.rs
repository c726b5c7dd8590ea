//! `liken media`: one netboot initramfs for a PXE or iPXE server to
//! hand out beside the release's kernel.
//!
//! The kernel unpacks every cpio archive it is given, one after another,
//! into one root, skipping zero bytes between them. So the image is the
//! release's own archives, unchanged, followed by two of ours:
//!
//! ```text
//! microcode.cpio   (when the release has it: early microcode must come first)
//! boot.cpio        liken-init and its boot files
//! layer            the deployment layer (/etc/liken), as `liken layer` packs it
//! release          /liken/layer.cpio (the layer again, as a file), then
//!                  /liken/release/release.yaml and every artifact it names
//! ```
//!
//! each padded to four bytes, which newc headers need. Install mode finds
//! /liken/release in its own initramfs and installs from it; the layer's
//! own bytes ride along as /liken/layer.cpio because the installed ESP
//! boots them as a file (`liken_api::bootloader::LAYER_PATH`), and init
//! has no archiver to pack /etc/liken again. The release
//! archive is streamed from the artifact files (the system image is
//! hundreds of MiB), with the newc writer below; its entries have fixed
//! owners, modes and times, so the same inputs give the same bytes.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use super::MediaError;
use super::release::VerifiedRelease;
use crate::releases::progress::Progress;
use liken_api::release::{ARTIFACT_BOOT, ARTIFACT_MICROCODE, RELEASE_FILE};

/// Where the release lands in the unpacked initramfs.
pub const RELEASE_DIR: &str = "liken/release";

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;

/// A streaming newc writer: headers, names and data, padded to four.
pub struct NewcWriter<'w> {
    out: &'w mut dyn Write,
    written: u64,
    ino: u32,
}

impl<'w> NewcWriter<'w> {
    /// Writes into `out`, which is at a four-byte boundary.
    pub fn new(out: &'w mut dyn Write) -> NewcWriter<'w> {
        NewcWriter {
            out,
            written: 0,
            ino: 0,
        }
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> io::Result<()> {
        let n = (4 - self.written % 4) % 4;
        self.put(&[0u8; 3][..n as usize])
    }

    fn header(&mut self, name: &str, mode: u32, nlink: u32, size: u32, ino: u32) -> io::Result<()> {
        let fields = [
            ino,
            mode,
            0,
            0,
            nlink,
            0,
            size,
            0,
            0,
            0,
            0,
            name.len() as u32 + 1,
            0,
        ];
        let mut h = String::from("070701");
        for f in fields {
            h.push_str(&format!("{f:08x}"));
        }
        self.put(h.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad()
    }

    fn next_ino(&mut self) -> u32 {
        self.ino += 1;
        self.ino
    }

    /// A directory, 0755.
    pub fn dir(&mut self, name: &str) -> io::Result<()> {
        let ino = self.next_ino();
        self.header(name, S_IFDIR | 0o755, 2, 0, ino)
    }

    /// A file of `bytes`, 0644.
    pub fn bytes(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let size = u32::try_from(bytes.len())
            .map_err(|_| io::Error::other(format!("{name} is larger than a cpio entry holds")))?;
        let ino = self.next_ino();
        self.header(name, S_IFREG | 0o644, 1, size, ino)?;
        self.put(bytes)?;
        self.pad()
    }

    /// A file streamed from `path`, which must hold exactly `size` bytes.
    pub fn file(
        &mut self,
        name: &str,
        path: &Path,
        size: u64,
        progress: &mut Progress,
    ) -> Result<(), MediaError> {
        let len = u32::try_from(size).map_err(|_| MediaError::Io {
            doing: format!("packing {name}"),
            error: io::Error::other("larger than a cpio entry can hold (4 GiB)"),
        })?;
        let ino = self.next_ino();
        self.header(name, S_IFREG | 0o644, 1, len, ino)
            .map_err(write_err)?;
        copy_exact(path, size, &mut |b| self.put(b), progress)?;
        self.pad().map_err(write_err)
    }

    /// The trailer that ends one archive.
    pub fn finish(&mut self) -> io::Result<()> {
        self.header("TRAILER!!!", 0, 1, 0, 0)
    }
}

fn write_err(error: io::Error) -> MediaError {
    MediaError::Io {
        doing: "writing the image".to_owned(),
        error,
    }
}

/// Streams `path` (which must hold exactly `size` bytes, as verified)
/// into `sink`.
pub fn copy_exact(
    path: &Path,
    size: u64,
    sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    progress: &mut Progress,
) -> Result<(), MediaError> {
    let read_err = |error| MediaError::Io {
        doing: format!("reading {}", path.display()),
        error,
    };
    let mut f = File::open(path).map_err(read_err)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    loop {
        let n = f.read(&mut buf).map_err(read_err)?;
        if n == 0 {
            break;
        }
        if n as u64 > left {
            return Err(MediaError::Changed(path.to_owned()));
        }
        sink(&buf[..n]).map_err(write_err)?;
        progress.advance(n as u64);
        left -= n as u64;
    }
    if left != 0 {
        return Err(MediaError::Changed(path.to_owned()));
    }
    Ok(())
}

/// The bytes the image will hold, for progress.
pub fn content_bytes(release: &VerifiedRelease, layer: &[u8]) -> u64 {
    let early: u64 = [ARTIFACT_MICROCODE, ARTIFACT_BOOT]
        .iter()
        .filter_map(|n| release.release.artifact(n))
        .map(|a| a.size)
        .sum();
    early + 2 * layer.len() as u64 + release.release.total_size() + release.text.len() as u64
}

/// Writes the netboot initramfs into `out`.
pub fn write(
    out: &mut dyn Write,
    release: &VerifiedRelease,
    layer: &[u8],
    progress: &mut Progress,
) -> Result<(), MediaError> {
    let mut written: u64 = 0;
    let pad = |out: &mut dyn Write, written: &mut u64| -> Result<(), MediaError> {
        let n = (4 - *written % 4) % 4;
        out.write_all(&[0u8; 3][..n as usize]).map_err(write_err)?;
        *written += n;
        Ok(())
    };
    for name in [ARTIFACT_MICROCODE, ARTIFACT_BOOT] {
        let Some(a) = release.release.artifact(name) else {
            continue;
        };
        copy_exact(
            &release.path_of(a),
            a.size,
            &mut |b| out.write_all(b),
            progress,
        )?;
        written += a.size;
        pad(out, &mut written)?;
    }
    out.write_all(layer).map_err(write_err)?;
    progress.advance(layer.len() as u64);
    written += layer.len() as u64;
    pad(out, &mut written)?;

    let mut w = NewcWriter::new(out);
    w.dir("liken").map_err(write_err)?;
    w.bytes(liken_api::bootloader::LAYER_PATH, layer)
        .map_err(write_err)?;
    progress.advance(layer.len() as u64);
    w.dir(RELEASE_DIR).map_err(write_err)?;
    w.bytes(
        &format!("{RELEASE_DIR}/{RELEASE_FILE}"),
        release.text.as_bytes(),
    )
    .map_err(write_err)?;
    progress.advance(release.text.len() as u64);
    let mut artifacts: Vec<_> = release.release.artifacts.iter().collect();
    artifacts.sort_by(|a, b| a.file.as_str().cmp(b.file.as_str()));
    for a in artifacts {
        w.file(
            &format!("{RELEASE_DIR}/{}", a.file),
            &release.path_of(a),
            a.size,
            progress,
        )?;
    }
    w.finish().map_err(write_err)?;
    out.flush().map_err(write_err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::releases::progress::Style;

    #[test]
    fn newc_members_are_padded_and_numbered() {
        let mut out = Vec::new();
        let mut w = NewcWriter::new(&mut out);
        w.dir("liken").unwrap();
        w.bytes("liken/a", b"abc").unwrap();
        w.finish().unwrap();
        assert!(out.len().is_multiple_of(4));
        assert!(out.starts_with(b"07070100000001000041ed"));
        let second = &out[112 + 4..];
        assert!(
            second.starts_with(b"07070100000002000081a4"),
            "{:?}",
            &second[..22]
        );
        let dir = crate::testdir::TestDir::new("media-newc");
        let p = dir.path().join("f");
        std::fs::write(&p, b"12345").unwrap();
        let mut out = Vec::new();
        let mut w = NewcWriter::new(&mut out);
        let mut progress = Progress::new(Style::Quiet, "x", 5, 0);
        let e = w.file("f", &p, 4, &mut progress).unwrap_err();
        assert!(matches!(e, MediaError::Changed(_)), "{e}");
    }
}
