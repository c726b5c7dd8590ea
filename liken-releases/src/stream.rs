//! Copy and hash in one pass.
//!
//! bundle copies each input into the channel and fetch writes each
//! download to disk; both need the SHA-256 of exactly the bytes written.
//! Hashing while copying reads the data once, which is what lets fetch
//! beat a download followed by `sha256sum`. sha2 uses the CPU's SHA
//! extensions where present, so the hash keeps up with loopback.
//!
//! A read error and a write error mean different things to the caller
//! (the network dropped versus the local disk is full), so they stay
//! apart in [`CopyError`].
//!
//! Both commands fsync what they copy before giving it its final name.
//! Left to the end, that fsync writes a whole gigabyte back at once while
//! the progress bar sits at 100%. A [`Flusher`] instead asks a helper
//! thread to `fdatasync` every [`FLUSH_EVERY`] bytes, so writeback runs
//! alongside the copy and the final fsync has little left to do.

use std::fs::File;
use std::io::{self, Read, Write};
use std::thread::JoinHandle;

use sha2::{Digest as _, Sha256};

use crate::progress::Progress;

/// The copy buffer: large enough that syscalls and hash calls are a small
/// cost per byte, small enough to stay in the L2 cache with the hash state.
pub const BUFFER: usize = 256 << 10;

/// How many bytes are written between two background flushes.
pub const FLUSH_EVERY: u64 = 64 << 20;

/// Background writeback of a file being written.
pub struct Flusher {
    poke: Option<crossbeam_channel::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    /// Starts a flusher for `file` (a duplicate descriptor of it).
    pub fn new(file: &File) -> io::Result<Flusher> {
        let file = file.try_clone()?;
        // Capacity one: a poke while a flush runs is folded into the
        // next flush rather than queued.
        let (poke, rx) = crossbeam_channel::bounded::<()>(1);
        let thread = std::thread::Builder::new()
            .name("flush".into())
            .spawn(move || {
                for () in rx {
                    // An error here is reported by the caller's own final
                    // fsync, which sees the same writeback failure.
                    let _ = file.sync_data();
                }
            })?;
        Ok(Flusher {
            poke: Some(poke),
            thread: Some(thread),
        })
    }

    fn poke(&self) {
        if let Some(p) = &self.poke {
            let _ = p.try_send(());
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.poke.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Why a copy stopped.
#[derive(Debug)]
pub enum CopyError {
    /// Reading the source failed.
    Read(io::Error),
    /// Writing the destination failed.
    Write(io::Error),
    /// The source held more than the allowed number of bytes.
    TooLong {
        /// The number allowed.
        limit: u64,
    },
}

/// Copies `from` into `to` until end of input, feeding every byte to
/// `hasher` and `progress`, and returns the number of bytes copied.
/// Reading more than `limit` bytes in total stops with
/// [`CopyError::TooLong`] before the excess is written. With a
/// `flusher`, writeback is started every [`FLUSH_EVERY`] bytes.
pub fn copy_hashing(
    from: &mut dyn Read,
    to: &mut dyn Write,
    hasher: &mut Sha256,
    limit: u64,
    progress: &mut Progress,
    flusher: Option<&Flusher>,
) -> Result<u64, CopyError> {
    let mut unflushed = 0u64;
    let mut buf = vec![0u8; BUFFER];
    let mut total = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CopyError::Read(e)),
        };
        let len = n as u64;
        if total + len > limit {
            return Err(CopyError::TooLong { limit });
        }
        hasher.update(&buf[..n]);
        to.write_all(&buf[..n]).map_err(CopyError::Write)?;
        total += len;
        progress.advance(len);
        unflushed += len;
        if unflushed >= FLUSH_EVERY
            && let Some(f) = flusher
        {
            f.poke();
            unflushed = 0;
        }
    }
}

/// Hashes everything `from` yields (an existing file, a partial
/// download's prefix) and returns the byte count.
pub fn hash_all(from: &mut dyn Read, hasher: &mut Sha256) -> io::Result<u64> {
    let mut buf = vec![0u8; BUFFER];
    let mut total = 0u64;
    loop {
        match from.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => {
                hasher.update(&buf[..n]);
                total += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The hex digest of a finished hash.
pub fn finish(hasher: Sha256) -> liken_api::Sha256Hex {
    liken_api::Sha256Hex::from_bytes(hasher.finalize().into())
}

/// The SHA-256 of a byte string.
pub fn sha256(bytes: &[u8]) -> liken_api::Sha256Hex {
    let mut h = Sha256::new();
    h.update(bytes);
    finish(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::Style;

    #[test]
    fn copies_hashes_and_counts() {
        let data: Vec<u8> = (0..(BUFFER * 2 + 17)).map(|i| (i % 251) as u8).collect();
        let mut out = Vec::new();
        let mut h = Sha256::new();
        let mut p = Progress::new(Style::Quiet, "t", data.len() as u64, 0);
        let n = copy_hashing(&mut &data[..], &mut out, &mut h, u64::MAX, &mut p, None).unwrap();
        assert_eq!(n, data.len() as u64);
        assert_eq!(out, data);
        assert_eq!(finish(h), sha256(&data));
        assert_eq!(
            sha256(b"").as_str(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn stops_before_writing_past_the_limit() {
        let data = [7u8; 100];
        let mut out = Vec::new();
        let mut p = Progress::new(Style::Quiet, "t", 10, 0);
        let e = copy_hashing(
            &mut &data[..],
            &mut out,
            &mut Sha256::new(),
            10,
            &mut p,
            None,
        );
        assert!(matches!(e, Err(CopyError::TooLong { limit: 10 })));
        assert!(out.is_empty());
    }
}
