//! The dm-verity kernel argument: `liken.verity=<root>:<salt>:<blocks>`.
//!
//! A slot's boot entry carries the root hash of its system image's
//! dm-verity tree on the kernel command line, and init opens the slot
//! through the kernel's `verity` target with it. The argument holds what
//! the target's table needs that is not fixed, and nothing else:
//!
//! - `<root>`: the root hash, 64 lower-case hex digits (SHA-256);
//! - `<salt>`: the salt, 1 to 256 bytes as lower-case hex;
//! - `<blocks>`: how many 4096-byte data blocks the tree covers, in
//!   decimal without leading zeros.
//!
//! Everything else is the one format a release's [`Verity`] record
//! allows (hash format 1, SHA-256, 4096-byte data and hash blocks, the
//! hash area right after the data, in the same partition), so the hash
//! area starts at block `<blocks>` and the device is `<blocks>` × 8
//! sectors long. A reader cannot get a field wrong because there is no
//! field to get wrong: a value outside that grammar is refused, never
//! read loosely, and [`VerityArg::render`] of what [`VerityArg::parse`]
//! accepted gives back the same text.
//!
//! The kernel's table is documented in Linux's
//! Documentation/admin-guide/device-mapper/verity.rst:
//! `<version> <data_dev> <hash_dev> <data_block_size> <hash_block_size>
//! <num_data_blocks> <hash_start_block> <algorithm> <digest> <salt>`.
//!
//! This module renders and parses text only; init does the device
//! mapper's I/O.

use std::fmt;

use crate::digest::Sha256Hex;
use crate::release::{VERITY_ALGORITHM, VERITY_BLOCK_SIZE, VERITY_MAX_SALT, Verity};

/// The argument's name on the kernel command line.
pub const ARG: &str = "liken.verity";

/// The verity target's hash format version: 1, the salt hashed first
/// (what `veritysetup` and liken-disk's tree write).
pub const FORMAT_VERSION: u32 = 1;

/// Sectors (the device mapper's 512-byte unit) per 4096-byte block.
const SECTORS_PER_BLOCK: u64 = VERITY_BLOCK_SIZE / 512;

/// The argument, parsed: known good everywhere once it exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerityArg {
    root_hash: Sha256Hex,
    salt: String,
    data_blocks: u64,
}

/// Why a `liken.verity=` value or a release's record was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VerityArgError {
    /// Not three fields separated by ':'.
    Fields(String),
    /// The root hash is not 64 lower-case hex digits.
    RootHash(String),
    /// The salt is empty, odd, too long or not lower-case hex.
    Salt(String),
    /// The block count is not a decimal number from 1 up to what a
    /// device can address in 4096-byte blocks.
    DataBlocks(String),
    /// The argument appears more than once on the command line.
    Twice,
    /// A release's record is not the one format the argument carries
    /// (another hash, block size or hash offset); the message names it.
    Record(String),
}

impl fmt::Display for VerityArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const FIX: &str = "the boot entry was not written by liken: write the release again, \
                           which writes its entry";
        match self {
            VerityArgError::Fields(v) => write!(
                f,
                "{ARG}={v:?} is not <root hash>:<salt>:<data blocks>; {FIX}"
            ),
            VerityArgError::RootHash(v) => write!(
                f,
                "{ARG}'s root hash {v:?} is not 64 lower-case hex digits; {FIX}"
            ),
            VerityArgError::Salt(v) => write!(
                f,
                "{ARG}'s salt {v:?} is not 1 to {VERITY_MAX_SALT} bytes of lower-case hex; {FIX}"
            ),
            VerityArgError::DataBlocks(v) => write!(
                f,
                "{ARG}'s data block count {v:?} is not a number of 4096-byte blocks from 1 up \
                 (decimal, no leading zeros); {FIX}"
            ),
            VerityArgError::Twice => write!(
                f,
                "{ARG}= is given more than once, so which root hash is meant is unknown; {FIX}"
            ),
            VerityArgError::Record(why) => write!(
                f,
                "release.yaml's verity record cannot go on the kernel command line: {why}; \
                 bundle the release again with `liken bundle`"
            ),
        }
    }
}

impl std::error::Error for VerityArgError {}

/// Lower-case hex digits only (the record's and veritysetup's form).
fn lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The most data blocks a table can name: their sectors must fit a
/// `u64` (the device mapper's length) and their bytes the hash offset.
const MAX_DATA_BLOCKS: u64 = u64::MAX / VERITY_BLOCK_SIZE;

impl VerityArg {
    /// An argument from its parts, checked as [`VerityArg::parse`]
    /// checks them.
    pub fn new(
        root_hash: Sha256Hex,
        salt: &str,
        data_blocks: u64,
    ) -> Result<VerityArg, VerityArgError> {
        if salt.is_empty()
            || !salt.len().is_multiple_of(2)
            || salt.len() > 2 * VERITY_MAX_SALT
            || !lower_hex(salt)
        {
            return Err(VerityArgError::Salt(salt.to_owned()));
        }
        if data_blocks == 0 || data_blocks > MAX_DATA_BLOCKS {
            return Err(VerityArgError::DataBlocks(data_blocks.to_string()));
        }
        Ok(VerityArg {
            root_hash,
            salt: salt.to_owned(),
            data_blocks,
        })
    }

    /// Parses the value of `liken.verity=` (the text after the '=').
    pub fn parse(value: &str) -> Result<VerityArg, VerityArgError> {
        let fields: Vec<&str> = value.split(':').collect();
        let [root, salt, blocks] = fields.as_slice() else {
            return Err(VerityArgError::Fields(value.to_owned()));
        };
        // Sha256Hex takes lower-case hex only, as the record does.
        let root_hash =
            Sha256Hex::parse(root).map_err(|_| VerityArgError::RootHash((*root).to_owned()))?;
        let bad_blocks = || VerityArgError::DataBlocks((*blocks).to_owned());
        if blocks.is_empty() || !blocks.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad_blocks());
        }
        if blocks.starts_with('0') {
            return Err(bad_blocks());
        }
        let data_blocks: u64 = blocks.parse().map_err(|_| bad_blocks())?;
        VerityArg::new(root_hash, salt, data_blocks)
    }

    /// The argument for a release's verity record, which must be the one
    /// format the argument carries: SHA-256, 4096-byte blocks, the hash
    /// area right after the data.
    pub fn from_record(v: &Verity) -> Result<VerityArg, VerityArgError> {
        let record = VerityArgError::Record;
        if v.algorithm != VERITY_ALGORITHM {
            return Err(record(format!(
                "its algorithm is {:?}, not {VERITY_ALGORITHM}",
                v.algorithm
            )));
        }
        if v.data_block_size != VERITY_BLOCK_SIZE || v.hash_block_size != VERITY_BLOCK_SIZE {
            return Err(record(format!(
                "its blocks are {} (data) and {} (hash) bytes, not {VERITY_BLOCK_SIZE}",
                v.data_block_size, v.hash_block_size
            )));
        }
        if v.data_blocks.checked_mul(VERITY_BLOCK_SIZE) != Some(v.hash_offset) {
            return Err(record(format!(
                "its hash offset {} is not its {} data blocks × {VERITY_BLOCK_SIZE}",
                v.hash_offset, v.data_blocks
            )));
        }
        VerityArg::new(v.root_hash.clone(), &v.salt, v.data_blocks).map_err(|e| match e {
            VerityArgError::Salt(s) => record(format!(
                "its salt {s:?} is not 1 to {VERITY_MAX_SALT} bytes of lower-case hex"
            )),
            VerityArgError::DataBlocks(n) => {
                record(format!("its data block count {n} is out of range"))
            }
            other => other,
        })
    }

    /// The root hash.
    pub fn root_hash(&self) -> &Sha256Hex {
        &self.root_hash
    }

    /// The salt, as lower-case hex.
    pub fn salt(&self) -> &str {
        &self.salt
    }

    /// How many 4096-byte data blocks the tree covers.
    pub fn data_blocks(&self) -> u64 {
        self.data_blocks
    }

    /// Where the hash area starts, in 4096-byte hash blocks from the
    /// start of the partition: right after the data.
    pub fn hash_start_block(&self) -> u64 {
        self.data_blocks
    }

    /// Where the hash area starts, in bytes (a release record's
    /// `hashOffset`).
    pub fn hash_offset(&self) -> u64 {
        // new() keeps data_blocks at most MAX_DATA_BLOCKS.
        self.data_blocks.saturating_mul(VERITY_BLOCK_SIZE)
    }

    /// The verified device's length in 512-byte sectors: the data only.
    pub fn sectors(&self) -> u64 {
        self.data_blocks.saturating_mul(SECTORS_PER_BLOCK)
    }

    /// The value after `liken.verity=`.
    pub fn value(&self) -> String {
        format!("{}:{}:{}", self.root_hash, self.salt, self.data_blocks)
    }

    /// The whole argument, `liken.verity=<root>:<salt>:<blocks>`.
    pub fn render(&self) -> String {
        format!("{ARG}={}", self.value())
    }

    /// The `verity` target's parameters for a partition that holds both
    /// the data and, after it, the hash area: `device` names it as the
    /// kernel takes it (`major:minor`, or a path).
    pub fn table_params(&self, device: &str) -> String {
        format!(
            "{FORMAT_VERSION} {device} {device} {VERITY_BLOCK_SIZE} {VERITY_BLOCK_SIZE} {} {} \
             {VERITY_ALGORITHM} {} {}",
            self.data_blocks,
            self.hash_start_block(),
            self.root_hash,
            self.salt
        )
    }
}

impl fmt::Display for VerityArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> String {
        "1a2b3c4d".repeat(8)
    }

    fn record() -> Verity {
        Verity {
            root_hash: Sha256Hex::parse(&root()).unwrap(),
            salt: "0f".repeat(32),
            hash_offset: 513 * 4096,
            data_block_size: 4096,
            hash_block_size: 4096,
            algorithm: "sha256".into(),
            data_blocks: 513,
        }
    }

    #[test]
    fn renders_and_parses_back_the_same_text() {
        let a = VerityArg::from_record(&record()).unwrap();
        let text = a.render();
        assert_eq!(
            text,
            format!("liken.verity={}:{}:513", root(), "0f".repeat(32))
        );
        let value = text.strip_prefix("liken.verity=").unwrap();
        assert_eq!(VerityArg::parse(value).unwrap(), a);
        assert_eq!(a.root_hash().as_str(), root());
        assert_eq!(a.salt(), "0f".repeat(32));
        assert_eq!(a.data_blocks(), 513);
        assert_eq!(a.hash_start_block(), 513);
        assert_eq!(a.hash_offset(), 513 * 4096);
        assert_eq!(a.sectors(), 513 * 8);
        assert_eq!(a.to_string(), text);
    }

    #[test]
    fn the_table_is_the_kernels_verity_line() {
        let a = VerityArg::parse(&format!("{}:ab:3", root())).unwrap();
        // verity.rst: <version> <data_dev> <hash_dev> <data_block_size>
        // <hash_block_size> <num_data_blocks> <hash_start_block>
        // <algorithm> <digest> <salt>
        assert_eq!(
            a.table_params("254:4"),
            format!("1 254:4 254:4 4096 4096 3 3 sha256 {} ab", root())
        );
    }

    #[test]
    fn anything_outside_the_grammar_is_refused() {
        let r = root();
        let cases: &[(String, VerityArgError)] = &[
            (String::new(), VerityArgError::Fields(String::new())),
            (r.clone(), VerityArgError::Fields(r.clone())),
            (format!("{r}:ab"), VerityArgError::Fields(format!("{r}:ab"))),
            (
                format!("{r}:ab:1:2"),
                VerityArgError::Fields(format!("{r}:ab:1:2")),
            ),
            (
                format!("{}:ab:1", r.to_uppercase()),
                VerityArgError::RootHash(r.to_uppercase()),
            ),
            (
                format!("{}:ab:1", &r[1..]),
                VerityArgError::RootHash(r[1..].to_owned()),
            ),
            (format!("{r}::1"), VerityArgError::Salt(String::new())),
            (format!("{r}:abc:1"), VerityArgError::Salt("abc".into())),
            (format!("{r}:AB:1"), VerityArgError::Salt("AB".into())),
            (format!("{r}:zz:1"), VerityArgError::Salt("zz".into())),
            (
                format!("{r}:{}:1", "00".repeat(257)),
                VerityArgError::Salt("00".repeat(257)),
            ),
            (format!("{r}:ab:0"), VerityArgError::DataBlocks("0".into())),
            (
                format!("{r}:ab:"),
                VerityArgError::DataBlocks(String::new()),
            ),
            (
                format!("{r}:ab:01"),
                VerityArgError::DataBlocks("01".into()),
            ),
            (
                format!("{r}:ab:+1"),
                VerityArgError::DataBlocks("+1".into()),
            ),
            (
                format!("{r}:ab:-1"),
                VerityArgError::DataBlocks("-1".into()),
            ),
            (
                format!("{r}:ab:1 "),
                VerityArgError::DataBlocks("1 ".into()),
            ),
            (
                format!("{r}:ab:99999999999999999999"),
                VerityArgError::DataBlocks("99999999999999999999".into()),
            ),
            // Blocks whose bytes would not fit the hash offset.
            (
                format!("{r}:ab:{}", u64::MAX / 4096 + 1),
                VerityArgError::DataBlocks((u64::MAX / 4096 + 1).to_string()),
            ),
        ];
        for (value, want) in cases {
            assert_eq!(VerityArg::parse(value).as_ref(), Err(want), "{value:?}");
            // Every refusal says what to do.
            assert!(
                want.to_string().contains("write the release again"),
                "{want}"
            );
        }
        // The largest count that still fits is taken.
        let most = VerityArg::parse(&format!("{r}:ab:{}", u64::MAX / 4096)).unwrap();
        assert_eq!(most.hash_offset(), u64::MAX / 4096 * 4096);
        // The longest salt veritysetup takes is taken.
        assert!(VerityArg::parse(&format!("{r}:{}:1", "00".repeat(256))).is_ok());
    }

    #[test]
    fn a_record_of_another_format_is_refused() {
        let bad = |change: &dyn Fn(&mut Verity)| {
            let mut v = record();
            change(&mut v);
            VerityArg::from_record(&v).unwrap_err().to_string()
        };
        assert!(bad(&|v| v.algorithm = "sha1".into()).contains("\"sha1\", not sha256"));
        assert!(bad(&|v| v.data_block_size = 512).contains("512 (data)"));
        assert!(bad(&|v| v.hash_block_size = 8192).contains("8192 (hash)"));
        assert!(bad(&|v| v.hash_offset = 514 * 4096).contains("hash offset 2105344"));
        assert!(bad(&|v| v.salt = String::new()).contains("its salt \"\""));
        let e = bad(&|v| {
            v.data_blocks = 0;
            v.hash_offset = 0;
        });
        assert!(e.contains("data block count 0"), "{e}");
        assert!(e.contains("bundle the release again"), "{e}");
    }
}
