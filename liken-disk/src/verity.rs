//! The dm-verity hash tree of a read-only image, built in Rust.
//!
//! A slot's squashfs is mounted through the kernel's dm-verity target,
//! which hashes every block it reads and climbs a tree of hashes up to a
//! root hash given on the (signed) kernel command line: a changed block
//! becomes an I/O error instead of a changed file. This module writes
//! that tree. `liken bundle` runs it on the workstation, where Debian's
//! `veritysetup` may not be installed and liken-disk already holds every
//! other on-disk format liken writes; the tests hold it to the real
//! `veritysetup verify`.
//!
//! # The format
//!
//! Exactly what `veritysetup format --no-superblock` writes with its
//! defaults, and what the kernel's target reads (Linux
//! Documentation/admin-guide/device-mapper/verity.rst; cryptsetup
//! lib/verity/verity_hash.c, `hash_levels` and `create_or_verify`):
//!
//! - Hash format version 1, SHA-256, 4096-byte data and hash blocks.
//! - Version 1 prepends the salt: a block's digest is
//!   `sha256(salt || block)`, for data blocks and hash blocks alike.
//! - Each hash block holds 128 digests (32 bytes each: version 1 pads a
//!   digest to a power of two, which SHA-256's already is), in block
//!   order; the rest of the last block of a level is zeros.
//! - Level 0 holds the digests of the data blocks, level 1 those of
//!   level 0's blocks, and so on until a level is one block. The root
//!   hash is the digest of that block. With a single data block there
//!   are no levels at all: the root hash is that block's digest and the
//!   hash area is empty (`hash_levels` counts levels while
//!   `(blocks - 1) >> (7 * levels)` is non-zero).
//! - The hash area stores the levels top first ("a depth at a time,
//!   starting from the root", verity.rst), each level's blocks in
//!   increasing order. Without a superblock the area starts right at
//!   the hash offset, which the kernel's table names in hash blocks
//!   (`hash_start_block`) and veritysetup in bytes (`--hash-offset`).
//!
//! Data whose length is not a multiple of 4096 is hashed as if
//! zero-padded to the next block: the device must hold those zeros too
//! ([`Tree::padding`] says how many), because the kernel hashes whole
//! blocks as it reads them.
//!
//! # Limits
//!
//! The data streams through once and is never held whole; the tree is
//! held in memory until it is written, which is 1/127 of the data (8 MiB
//! for a 1 GiB image), so the hash area can be written with a plain
//! [`Write`] (appended to the image, as bundle does) rather than needing
//! a seekable output. Only the format above is built: no other hash, no
//! other block size, no superblock, no forward error correction.

use std::fmt;
use std::io::{self, Read, Write};

use sha2::{Digest as _, Sha256};

/// The data and hash block size, in bytes.
pub const BLOCK_SIZE: u64 = 4096;
/// The hash algorithm, as veritysetup and the kernel's table name it.
pub const ALGORITHM: &str = "sha256";
/// The hash format version (1: salt prepended, digests padded to a
/// power of two).
pub const FORMAT_VERSION: u32 = 1;
/// The size of one SHA-256 digest.
pub const DIGEST_SIZE: usize = 32;
/// The longest salt veritysetup accepts (`VERITY_create` refuses more).
pub const MAX_SALT: usize = 256;

/// [`BLOCK_SIZE`] as a buffer length.
const BLOCK: usize = 4096;
/// How many digests fill one hash block.
const HASHES_PER_BLOCK: u64 = (BLOCK / DIGEST_SIZE) as u64;
/// Data blocks read per call: large enough that syscalls cost little per
/// byte, small enough to stay in cache with the hash state.
const CHUNK_BLOCKS: usize = 64;

/// Why a tree could not be built.
#[derive(Debug)]
pub enum VerityError {
    /// The data holds no byte at all.
    Empty,
    /// The salt is longer than veritysetup and the kernel accept.
    SaltTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The data is too large for its size in bytes to be counted.
    TooLarge,
    /// Reading the data failed.
    Read(io::Error),
    /// Writing the hash area failed.
    Write(io::Error),
}

impl fmt::Display for VerityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerityError::Empty => write!(
                f,
                "the image is empty, and a dm-verity device needs at least one 4096-byte block; \
                 check that the image was built completely"
            ),
            VerityError::SaltTooLong { len } => write!(
                f,
                "the salt is {len} bytes but veritysetup and the kernel take at most {MAX_SALT}; \
                 use a shorter salt (liken uses 32 bytes)"
            ),
            VerityError::TooLarge => write!(
                f,
                "the image is too large to address in 4096-byte blocks; check its size"
            ),
            VerityError::Read(e) => write!(
                f,
                "reading the image to hash it failed: {e}; check that the file is readable and \
                 nothing is writing it"
            ),
            VerityError::Write(e) => write!(
                f,
                "writing the hash tree failed: {e}; check that the destination has space for it \
                 (about 1/127 of the image)"
            ),
        }
    }
}

impl std::error::Error for VerityError {}

/// The shape of a tree over a number of data blocks, without its hashes:
/// enough to size a slot or place the hash area before anything is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// The data blocks covered.
    pub data_blocks: u64,
    /// The hash blocks of each level, level 0 (the data's digests) first.
    pub levels: Vec<u64>,
}

impl Geometry {
    /// The geometry of a tree over `data_blocks` blocks. Mirrors
    /// cryptsetup's `hash_levels`: level `i` has
    /// `ceil(data_blocks / 128^(i+1))` blocks, and levels are added until
    /// one block is left (none at all for a single data block).
    pub fn new(data_blocks: u64) -> Result<Geometry, VerityError> {
        if data_blocks == 0 {
            return Err(VerityError::Empty);
        }
        data_blocks
            .checked_mul(BLOCK_SIZE)
            .ok_or(VerityError::TooLarge)?;
        let mut levels = Vec::new();
        let mut n = data_blocks;
        while n > 1 {
            n = n.div_ceil(HASHES_PER_BLOCK);
            levels.push(n);
        }
        Ok(Geometry {
            data_blocks,
            levels,
        })
    }

    /// The geometry of a tree over `len` bytes of data, zero-padded to
    /// whole blocks.
    pub fn for_len(len: u64) -> Result<Geometry, VerityError> {
        Geometry::new(len.div_ceil(BLOCK_SIZE))
    }

    /// The data's size in bytes once padded to whole blocks: the hash
    /// offset when the tree is appended to the data.
    pub fn data_size(&self) -> u64 {
        // Checked in `new`.
        self.data_blocks.saturating_mul(BLOCK_SIZE)
    }

    /// The hash blocks of all levels together.
    pub fn hash_blocks(&self) -> u64 {
        self.levels
            .iter()
            .fold(0u64, |sum, n| sum.saturating_add(*n))
    }

    /// The hash area's size in bytes.
    pub fn hash_size(&self) -> u64 {
        // The tree is about 1/127 of the data, whose size in bytes fits.
        self.hash_blocks().saturating_mul(BLOCK_SIZE)
    }
}

/// A built tree: what the kernel's table and release.yaml need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    /// The root hash.
    pub root_hash: [u8; DIGEST_SIZE],
    /// The shape of the tree, and the data blocks it covers.
    pub geometry: Geometry,
    /// The bytes of data read, before padding.
    pub data_len: u64,
}

impl Tree {
    /// The zero bytes after the data up to the block boundary, which the
    /// device must hold for its last block to hash as the tree says.
    pub fn padding(&self) -> u64 {
        self.geometry.data_size().saturating_sub(self.data_len)
    }
}

/// Builds the tree of everything `data` yields, hashed with `salt`, and
/// writes its hash area (top level first) to `hash_area`. Returns the
/// root hash and the geometry; `hash_area` receives exactly
/// `geometry.hash_size()` bytes.
pub fn build(
    data: &mut dyn Read,
    salt: &[u8],
    hash_area: &mut dyn Write,
) -> Result<Tree, VerityError> {
    if salt.len() > MAX_SALT {
        return Err(VerityError::SaltTooLong { len: salt.len() });
    }
    let salted = Sha256::new_with_prefix(salt);
    let digest = |block: &[u8]| -> [u8; DIGEST_SIZE] {
        let mut h = salted.clone();
        h.update(block);
        h.finalize().into()
    };

    // Level 0 as the digests of the data blocks, streamed.
    let mut digests: Vec<u8> = Vec::new();
    let mut data_len = 0u64;
    let mut buf = vec![0u8; BLOCK * CHUNK_BLOCKS];
    loop {
        let n = fill(data, &mut buf).map_err(VerityError::Read)?;
        data_len = data_len
            .checked_add(n as u64)
            .ok_or(VerityError::TooLarge)?;
        let filled = buf.get_mut(..n.next_multiple_of(BLOCK)).unwrap_or_default();
        // The last block, if partial, is hashed zero-padded.
        if let Some(tail) = filled.get_mut(n..) {
            tail.fill(0);
        }
        for block in filled.chunks_exact(BLOCK) {
            digests.extend_from_slice(&digest(block));
        }
        if n < buf.len() {
            break;
        }
    }
    let geometry = Geometry::for_len(data_len)?;

    // Each level packs the digests below it into zero-padded blocks; the
    // digests of those blocks make the next level, until one block is
    // left, whose digest is the root. One data block has no level: its
    // digest is the root.
    let mut levels: Vec<Vec<u8>> = Vec::with_capacity(geometry.levels.len());
    let root_hash = loop {
        if let Ok(root) = <[u8; DIGEST_SIZE]>::try_from(digests.as_slice()) {
            break root;
        }
        let mut level = digests;
        level.resize(level.len().next_multiple_of(BLOCK), 0);
        digests = level.chunks_exact(BLOCK).flat_map(&digest).collect();
        levels.push(level);
    };

    for level in levels.iter().rev() {
        hash_area.write_all(level).map_err(VerityError::Write)?;
    }
    Ok(Tree {
        root_hash,
        geometry,
        data_len,
    })
}

/// Reads into `buf` until it is full or the input ends; returns the
/// bytes read. `Read::read_exact` cannot say how much a short final read
/// held, and the last block's length matters here.
fn fill(from: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while let Some(rest) = buf.get_mut(n..) {
        if rest.is_empty() {
            break;
        }
        match from.read(rest) {
            Ok(0) => break,
            Ok(k) => n = n.saturating_add(k),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test pattern the vectors were made from: byte `i` is
    /// `(31 i + i / 4096) mod 251`, so no two blocks are equal.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| ((i * 31 + i / 4096) % 251) as u8)
            .collect()
    }

    fn salt() -> Vec<u8> {
        (0u8..32).collect()
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn sha256(bytes: &[u8]) -> String {
        hex(&Sha256::digest(bytes))
    }

    /// Builds over `data` and returns the tree and its hash area.
    fn tree(data: &[u8], salt: &[u8]) -> (Tree, Vec<u8>) {
        let mut area = Vec::new();
        let t = build(&mut &data[..], salt, &mut area).unwrap();
        assert_eq!(area.len() as u64, t.geometry.hash_size());
        (t, area)
    }

    // The vectors: `veritysetup format --no-superblock --salt=<hex>` (2.6.1,
    // Debian 12's cryptsetup-bin) on the pattern written to a file and
    // zero-padded to whole blocks, with `sha256sum` of the hash file it
    // wrote. The salt is the bytes 0..32, as hex 000102...1f.

    #[test]
    fn one_block_has_no_levels_and_its_digest_is_the_root() {
        let (t, area) = tree(&pattern(4096), &salt());
        assert_eq!(
            hex(&t.root_hash),
            "33561da3c7f9c5d82512adbb75ca33f49d2983467c5a506f96824963c22d74bd"
        );
        assert!(area.is_empty());
        assert_eq!(t.geometry.levels, Vec::<u64>::new());
        assert_eq!(t.padding(), 0);

        // With no salt (`--salt=-`) the root is the block's plain SHA-256.
        let (t, _) = tree(&pattern(4096), &[]);
        assert_eq!(hex(&t.root_hash), sha256(&pattern(4096)));
    }

    #[test]
    fn a_partial_last_block_is_hashed_zero_padded() {
        // 5000 bytes: two blocks, the second mostly padding; one level.
        let (t, area) = tree(&pattern(5000), &salt());
        assert_eq!(
            hex(&t.root_hash),
            "388cd5359d8992add51b0fe894044c730c37b603091d369f7894cf4a31d9a8ca"
        );
        assert_eq!(
            sha256(&area),
            "3a26eac2642e0d8079e9f35fd89de301cbed619aa74c1c26183d82855c66e6d8"
        );
        assert_eq!(t.geometry.levels, [1]);
        assert_eq!((t.data_len, t.padding()), (5000, 3192));
        // The same bytes with the padding written out are the same tree.
        let mut padded = pattern(5000);
        padded.resize(8192, 0);
        assert_eq!(tree(&padded, &salt()).0.root_hash, t.root_hash);
    }

    #[test]
    fn one_hundred_twenty_nine_blocks_make_two_levels_stored_top_first() {
        let data = pattern(129 * 4096);
        let (t, area) = tree(&data, &salt());
        assert_eq!(
            hex(&t.root_hash),
            "4c39c5f81cf392a8031a0d74e3634d84c09f91f6be40f6fd4b32f84a4bf55e14"
        );
        assert_eq!(
            sha256(&area),
            "3292f942f470c395c12de2fe061242f011e65898bd666cfc13703d00fe297852"
        );
        assert_eq!(t.geometry.levels, [2, 1]);

        // Taken apart by hand: the top block first, then level 0's two.
        let h = |b: &[u8]| {
            let mut s = Sha256::new_with_prefix(salt());
            s.update(b);
            <[u8; 32]>::from(s.finalize())
        };
        let (top, level0) = area.split_at(4096);
        assert_eq!(h(top), t.root_hash);
        assert_eq!(&top[..32], &h(&level0[..4096]));
        assert_eq!(&top[32..64], &h(&level0[4096..]));
        assert!(top[64..].iter().all(|&b| b == 0));
        assert_eq!(&level0[128 * 32..128 * 32 + 32], &h(&data[128 * 4096..]));
        assert!(level0[129 * 32..].iter().all(|&b| b == 0));
    }

    #[test]
    fn the_geometry_follows_cryptsetups_level_count() {
        let g = |n| Geometry::new(n).unwrap().levels;
        assert_eq!(g(1), Vec::<u64>::new());
        assert_eq!(g(2), [1]);
        assert_eq!(g(128), [1]);
        assert_eq!(g(129), [2, 1]);
        assert_eq!(g(128 * 128), [128, 1]);
        assert_eq!(g(128 * 128 + 1), [129, 2, 1]);
        // A 1 GiB slot's worth: 262144 blocks.
        let gib = Geometry::for_len(1 << 30).unwrap();
        assert_eq!(gib.levels, [2048, 16, 1]);
        assert_eq!(gib.hash_size(), 2065 * 4096);
        assert_eq!(gib.data_size(), 1 << 30);
        // cryptsetup's rule, written as it writes it.
        for n in [1u64, 2, 127, 128, 129, 16383, 16384, 16385, 2_097_153] {
            let mut levels = 0;
            while 7 * levels < 64 && (n - 1) >> (7 * levels) != 0 {
                levels += 1;
            }
            let geometry = Geometry::new(n).unwrap();
            assert_eq!(geometry.levels.len() as u64, levels, "{n} blocks");
            for (i, size) in geometry.levels.iter().enumerate() {
                assert_eq!(
                    *size,
                    n.div_ceil(1 << (7 * (i + 1))),
                    "{n} blocks, level {i}"
                );
            }
        }
    }

    #[test]
    fn refuses_empty_data_long_salts_and_reports_io_errors() {
        let e = build(&mut &[][..], &salt(), &mut Vec::new()).unwrap_err();
        assert!(matches!(e, VerityError::Empty), "{e}");
        assert!(
            e.to_string().contains("at least one 4096-byte block"),
            "{e}"
        );
        let e = build(&mut &pattern(10)[..], &[0; 257], &mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("257 bytes"), "{e}");
        assert!(matches!(
            Geometry::new(u64::MAX),
            Err(VerityError::TooLarge)
        ));

        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("disk gone"))
            }
        }
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::other("disk full"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let e = build(&mut Broken, &salt(), &mut Vec::new()).unwrap_err();
        assert!(e.to_string().starts_with("reading the image"), "{e}");
        let e = build(&mut &pattern(8192)[..], &salt(), &mut Broken).unwrap_err();
        assert!(e.to_string().contains("disk full"), "{e}");
    }

    #[test]
    fn short_reads_change_nothing() {
        // A reader that hands out 1000 bytes at a time, across block and
        // chunk boundaries.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = buf.len().min(1000).min(self.0.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let data = pattern(300 * 4096 + 17);
        let (whole, area) = tree(&data, &salt());
        let mut trickled = Vec::new();
        let t = build(&mut Trickle(&data), &salt(), &mut trickled).unwrap();
        assert_eq!((t, trickled), (whole, area));
    }
}
