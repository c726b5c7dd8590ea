//! A FAT32 filesystem writer: a whole volume built at a byte offset in a
//! file or disk from a [`Tree`] of directories and files.
//!
//! An ESP has to be FAT (UEFI reads nothing else), and neither a
//! workstation without root nor init without mkfs.fat can format one and
//! mount it. Building the volume is simpler than editing one: every
//! directory and file is laid out once, contiguously, in a fixed order,
//! so there is no allocator, no fragmentation and no read-back.
//!
//! The volume, in 512-byte sectors:
//!
//! ```text
//! 0        boot sector with the BPB      6   backup boot sector
//! 1        FSInfo (free count)           7   backup FSInfo
//! 0..32    reserved sectors              32  FAT #1, then FAT #2
//! then     the data area: cluster 2 = the root directory, then every
//!          directory and file in depth-first, name order
//! ```
//!
//! - Cluster size ([`decide_geometry`]): Microsoft's FAT32 table by
//!   volume size (512 B up to 260 MiB, 4 KiB up to 8 GiB, ...), halved
//!   while the volume would have fewer than 65525 clusters, the least a
//!   FAT32 volume may have (fewer and drivers take it for FAT16). A
//!   volume too small even at 512-byte clusters (about 33 MiB) is
//!   refused.
//! - Names: every name that is not already an upper-case 8.3 name gets
//!   VFAT long-name entries (UTF-16, up to 255 units) before a generated
//!   short name (`LOADER~1`), unique in its directory. FAT compares names
//!   without case, so two names differing only in case are refused.
//! - Files come from bytes or from paths ([`Source`]); paths are
//!   streamed in 1 MiB pieces, never read whole, and must keep the size
//!   they had when added (a file that changes meanwhile is an error).
//! - Output is a function of the input alone: one timestamp for
//!   everything ([`Options::time`]), the volume id given, zero padding
//!   after every file and directory. Free clusters are not written: on a
//!   fresh (sparse) image file they read as zeros, on a used disk they
//!   hold old bytes, which FAT never reads.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::{Progress, SECTOR_SIZE};

/// Reserved sectors before the first FAT (boot sectors and FSInfo).
const RESERVED_SECTORS: u64 = 32;
const FSINFO_SECTOR: u64 = 1;
const BACKUP_BOOT_SECTOR: u64 = 6;
const NUM_FATS: u64 = 2;
/// The least cluster count of a FAT32 volume.
pub const MIN_CLUSTERS: u64 = 65525;
/// The most clusters FAT32's 28-bit entries can address.
pub const MAX_CLUSTERS: u64 = 0x0FFF_FFF4;
const FAT_EOC: u32 = 0x0FFF_FFFF;
const DIR_ENTRY: u64 = 32;
/// Directory entries a FAT directory may hold.
const MAX_DIR_ENTRIES: u64 = 65536;
/// UTF-16 units of a long name.
pub const MAX_NAME_UNITS: usize = 255;
const LFN_UNITS_PER_ENTRY: usize = 13;
const ATTR_DIRECTORY: u8 = 0x10;
const ATTR_ARCHIVE: u8 = 0x20;
const ATTR_VOLUME_ID: u8 = 0x08;
const ATTR_LFN: u8 = 0x0F;
const COPY_CHUNK: usize = 1 << 20;

/// Where a file's bytes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Small contents held in memory (configuration files).
    Bytes(Vec<u8>),
    /// A file streamed when the volume is written; `len` is its size when
    /// it was added, which it must still have.
    Path {
        /// The file.
        path: PathBuf,
        /// Its size.
        len: u64,
    },
}

impl Source {
    fn len(&self) -> u64 {
        match self {
            Source::Bytes(b) => b.len() as u64,
            Source::Path { len, .. } => *len,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Dir(BTreeMap<String, Node>),
    File(Source),
}

/// The directories and files of a volume, by path (`EFI/BOOT/BOOTX64.EFI`;
/// `/` separates components, parents are created as needed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    root: BTreeMap<String, Node>,
}

/// A timestamp for every entry, in FAT's local-time fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timestamp {
    /// 1980..=2107.
    pub year: u16,
    /// 1..=12.
    pub month: u8,
    /// 1..=31.
    pub day: u8,
    /// 0..=23.
    pub hour: u8,
    /// 0..=59.
    pub minute: u8,
    /// 0..=59 (stored in two-second steps).
    pub second: u8,
}

impl Timestamp {
    /// FAT's epoch, 1980-01-01 00:00:00.
    pub const EPOCH: Timestamp = Timestamp {
        year: 1980,
        month: 1,
        day: 1,
        hour: 0,
        minute: 0,
        second: 0,
    };

    fn valid(&self) -> bool {
        (1980..=2107).contains(&self.year)
            && (1..=12).contains(&self.month)
            && (1..=31).contains(&self.day)
            && self.hour < 24
            && self.minute < 60
            && self.second < 60
    }

    fn date(&self) -> u16 {
        (self.year.saturating_sub(1980) << 9) | (u16::from(self.month) << 5) | u16::from(self.day)
    }

    fn time(&self) -> u16 {
        (u16::from(self.hour) << 11) | (u16::from(self.minute) << 5) | u16::from(self.second / 2)
    }
}

/// What the volume is called and stamped with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The volume label: 1 to 11 of `A-Z 0-9 - _` (e.g. `LIKEN-ESP`).
    pub label: String,
    /// The volume serial number.
    pub volume_id: u32,
    /// The time every entry carries.
    pub time: Timestamp,
}

/// Why a volume could not be built.
#[derive(Debug)]
pub enum FatError {
    /// A path component FAT cannot hold.
    BadName {
        /// The path.
        path: String,
        /// What is wrong.
        why: &'static str,
    },
    /// A path is given twice, or twice in different case.
    Duplicate(String),
    /// A path goes through a file as if it were a directory.
    NotADirectory(String),
    /// A file is 4 GiB or more, FAT's limit.
    FileTooLarge {
        /// The path in the volume.
        path: String,
        /// Its size.
        size: u64,
    },
    /// A directory has more entries than FAT allows.
    DirectoryTooLarge(String),
    /// The label is not 1 to 11 of `A-Z 0-9 - _`.
    BadLabel(String),
    /// The timestamp is outside 1980..2107 or not a time.
    BadTime,
    /// The offset or size is not whole sectors.
    NotSectorAligned(u64),
    /// The volume is too small for FAT32 at all.
    VolumeTooSmall {
        /// Bytes given.
        size: u64,
        /// The least a FAT32 volume needs.
        min: u64,
    },
    /// The volume is larger than FAT32 addresses with 512-byte sectors.
    VolumeTooLarge(u64),
    /// The contents do not fit the volume.
    DoesNotFit {
        /// Bytes of clusters the contents need.
        need: u64,
        /// Bytes of clusters the volume has.
        have: u64,
    },
    /// A source file changed size after it was added.
    Changed(PathBuf),
    /// A source file could not be read.
    Source {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        error: io::Error,
    },
    /// Sizes overflowed.
    Overflow,
    /// Writing the volume failed.
    Io(io::Error),
}

impl fmt::Display for FatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FatError::BadName { path, why } => write!(f, "{path:?} cannot be a FAT name: {why}"),
            FatError::Duplicate(p) => write!(
                f,
                "{p:?} is given twice (FAT names ignore case); give each path once"
            ),
            FatError::NotADirectory(p) => {
                write!(f, "{p:?} is a file, so nothing can be put under it")
            }
            FatError::FileTooLarge { path, size } => write!(
                f,
                "{path:?} is {size} bytes; FAT32 files must be smaller than 4 GiB"
            ),
            FatError::DirectoryTooLarge(p) => write!(
                f,
                "directory {p:?} has more entries than FAT allows (65536, long names take several)"
            ),
            FatError::BadLabel(l) => write!(
                f,
                "volume label {l:?} must be 1 to 11 characters of A-Z, 0-9, '-' and '_'"
            ),
            FatError::BadTime => write!(f, "the timestamp must be a time between 1980 and 2107"),
            FatError::NotSectorAligned(n) => {
                write!(f, "{n} is not a multiple of the 512-byte sector")
            }
            FatError::VolumeTooSmall { size, min } => write!(
                f,
                "a {size}-byte volume is too small for FAT32, which needs at least {min} bytes \
                 (65525 clusters); make the partition larger"
            ),
            FatError::VolumeTooLarge(size) => write!(
                f,
                "a {size}-byte volume is larger than FAT32 with 512-byte sectors can address (2 TiB)"
            ),
            FatError::DoesNotFit { need, have } => write!(
                f,
                "the files need {need} bytes of clusters but the volume has {have}; make the \
                 partition larger or put less on it"
            ),
            FatError::Changed(p) => write!(
                f,
                "{} changed size while the volume was being written; run again once nothing \
                 writes it",
                p.display()
            ),
            FatError::Source { path, error } => write!(f, "reading {}: {error}", path.display()),
            FatError::Overflow => write!(f, "the volume's sizes overflow"),
            FatError::Io(e) => write!(f, "writing the FAT volume: {e}"),
        }
    }
}

impl std::error::Error for FatError {}

impl From<io::Error> for FatError {
    fn from(e: io::Error) -> FatError {
        FatError::Io(e)
    }
}

fn ck<T>(v: Option<T>) -> Result<T, FatError> {
    v.ok_or(FatError::Overflow)
}

/// Characters a short (8.3) name may hold besides A-Z and 0-9.
const SHORT_SPECIALS: &[u8] = b"!#$%&'()-@^_`{}~";

fn short_char_ok(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit() || SHORT_SPECIALS.contains(&b)
}

fn check_component(path: &str, c: &str) -> Result<(), FatError> {
    let bad = |why| FatError::BadName {
        path: path.to_owned(),
        why,
    };
    if c.is_empty() {
        return Err(bad("an empty path component"));
    }
    if c == "." || c == ".." {
        return Err(bad("\".\" and \"..\" are not names"));
    }
    if c.ends_with('.') || c.ends_with(' ') || c.starts_with(' ') {
        return Err(bad(
            "a name may not start with a space or end with a dot or space",
        ));
    }
    if c.chars()
        .any(|ch| ch < ' ' || "\"*/:<>?\\|\u{7f}".contains(ch))
    {
        return Err(bad(
            "control characters and \" * / : < > ? \\ | are not allowed",
        ));
    }
    if c.encode_utf16().count() > MAX_NAME_UNITS {
        return Err(bad("longer than 255 UTF-16 units"));
    }
    Ok(())
}

impl Tree {
    /// An empty volume.
    pub fn new() -> Tree {
        Tree::default()
    }

    fn insert(&mut self, path: &str, node: Node) -> Result<(), FatError> {
        let parts: Vec<&str> = path.split('/').collect();
        for c in &parts {
            check_component(path, c)?;
        }
        let Some((last, parents)) = parts.split_last() else {
            return Err(FatError::BadName {
                path: path.to_owned(),
                why: "an empty path",
            });
        };
        let mut dir = &mut self.root;
        for p in parents {
            check_case(dir, p, path)?;
            let entry = dir
                .entry((*p).to_owned())
                .or_insert_with(|| Node::Dir(BTreeMap::new()));
            dir = match entry {
                Node::Dir(d) => d,
                Node::File(_) => return Err(FatError::NotADirectory(path.to_owned())),
            };
        }
        match dir.get(*last) {
            Some(Node::Dir(_)) if matches!(node, Node::Dir(_)) => return Ok(()),
            Some(_) => return Err(FatError::Duplicate(path.to_owned())),
            None => {}
        }
        check_case(dir, last, path)?;
        dir.insert((*last).to_owned(), node);
        Ok(())
    }

    /// Adds a directory (and its parents); adding one twice is fine.
    pub fn add_dir(&mut self, path: &str) -> Result<(), FatError> {
        self.insert(path, Node::Dir(BTreeMap::new()))
    }

    /// Adds a file holding `bytes`.
    pub fn add_bytes(&mut self, path: &str, bytes: impl Into<Vec<u8>>) -> Result<(), FatError> {
        let bytes = bytes.into();
        check_file_size(path, bytes.len() as u64)?;
        self.insert(path, Node::File(Source::Bytes(bytes)))
    }

    /// Adds a file streamed from `source` when the volume is written; its
    /// size is read now.
    pub fn add_file(&mut self, path: &str, source: &Path) -> Result<(), FatError> {
        let meta = std::fs::metadata(source).map_err(|error| FatError::Source {
            path: source.to_owned(),
            error,
        })?;
        if !meta.is_file() {
            return Err(FatError::Source {
                path: source.to_owned(),
                error: io::Error::other("not a regular file"),
            });
        }
        check_file_size(path, meta.len())?;
        self.insert(
            path,
            Node::File(Source::Path {
                path: source.to_owned(),
                len: meta.len(),
            }),
        )
    }

    /// The bytes of all files together.
    pub fn content_bytes(&self) -> u64 {
        fn walk(d: &BTreeMap<String, Node>) -> u64 {
            d.values().fold(0u64, |n, node| {
                n.saturating_add(match node {
                    Node::Dir(d) => walk(d),
                    Node::File(s) => s.len(),
                })
            })
        }
        walk(&self.root)
    }
}

fn check_file_size(path: &str, size: u64) -> Result<(), FatError> {
    if size > u64::from(u32::MAX) {
        return Err(FatError::FileTooLarge {
            path: path.to_owned(),
            size,
        });
    }
    Ok(())
}

fn check_case(dir: &BTreeMap<String, Node>, name: &str, path: &str) -> Result<(), FatError> {
    let upper = name.to_uppercase();
    if dir.keys().any(|k| k != name && k.to_uppercase() == upper) {
        return Err(FatError::Duplicate(path.to_owned()));
    }
    Ok(())
}

/// A volume's shape: what [`decide_geometry`] chose for its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Sectors in the volume.
    pub total_sectors: u32,
    /// Sectors per cluster (1, 2, 4, ... 128).
    pub sectors_per_cluster: u8,
    /// Sectors of one FAT.
    pub fat_sectors: u32,
    /// Data clusters.
    pub clusters: u32,
}

impl Geometry {
    /// Bytes per cluster.
    pub fn cluster_bytes(&self) -> u64 {
        u64::from(self.sectors_per_cluster).saturating_mul(SECTOR_SIZE)
    }

    /// Bytes in all data clusters.
    pub fn data_bytes(&self) -> u64 {
        u64::from(self.clusters).saturating_mul(self.cluster_bytes())
    }

    fn data_start_sector(&self) -> u64 {
        RESERVED_SECTORS.saturating_add(NUM_FATS.saturating_mul(u64::from(self.fat_sectors)))
    }
}

fn geometry_for(sectors: u64, spc: u64) -> Option<(u64, u64)> {
    let usable = sectors.checked_sub(RESERVED_SECTORS)?;
    let upper = usable.checked_div(spc)?;
    let fat = upper.checked_add(2)?.checked_mul(4)?.div_ceil(SECTOR_SIZE);
    let clusters = usable
        .checked_sub(fat.checked_mul(NUM_FATS)?)?
        .checked_div(spc)?;
    Some((fat, clusters))
}

/// The smallest volume FAT32 allows: 65525 clusters of one sector, with
/// the FAT sized as [`decide_geometry`] sizes it (about 32.5 MiB).
pub fn min_volume_size() -> u64 {
    const START: u64 = RESERVED_SECTORS + MIN_CLUSTERS;
    let mut sectors = START;
    // The FAT takes 2 * 4 bytes per cluster: the answer is within 1/32 more.
    while sectors < START.saturating_mul(2) {
        if geometry_for(sectors, 1).is_some_and(|(_, c)| c >= MIN_CLUSTERS) {
            break;
        }
        sectors = sectors.saturating_add(1);
    }
    sectors.saturating_mul(SECTOR_SIZE)
}

/// Decides the cluster size and FAT size of a volume of `size` bytes.
pub fn decide_geometry(size: u64) -> Result<Geometry, FatError> {
    if !size.is_multiple_of(SECTOR_SIZE) {
        return Err(FatError::NotSectorAligned(size));
    }
    let sectors = size / SECTOR_SIZE;
    let total_sectors = u32::try_from(sectors).map_err(|_| FatError::VolumeTooLarge(size))?;
    const MIB: u64 = 1 << 20;
    let mut spc: u64 = match size {
        s if s <= 260 * MIB => 1,
        s if s <= 8192 * MIB => 8,
        s if s <= 16384 * MIB => 16,
        s if s <= 32768 * MIB => 32,
        _ => 64,
    };
    loop {
        let (fat, clusters) = geometry_for(sectors, spc).unwrap_or((0, 0));
        if (MIN_CLUSTERS..=MAX_CLUSTERS).contains(&clusters) {
            return Ok(Geometry {
                total_sectors,
                sectors_per_cluster: u8::try_from(spc).map_err(|_| FatError::Overflow)?,
                fat_sectors: u32::try_from(fat).map_err(|_| FatError::Overflow)?,
                clusters: u32::try_from(clusters).map_err(|_| FatError::Overflow)?,
            });
        }
        if clusters < MIN_CLUSTERS && spc > 1 {
            spc /= 2;
        } else if clusters > MAX_CLUSTERS && spc < 128 {
            spc = spc.saturating_mul(2);
        } else if clusters < MIN_CLUSTERS {
            return Err(FatError::VolumeTooSmall {
                size,
                min: min_volume_size(),
            });
        } else {
            return Err(FatError::VolumeTooLarge(size));
        }
    }
}

/// One directory or file, flattened, in allocation order.
struct Item<'t> {
    /// Long name, short name, and whether long-name entries are needed;
    /// `None` for the root.
    name: Option<(String, [u8; 11], bool)>,
    /// Index of the parent directory (the root is its own parent).
    parent: usize,
    /// For a directory: its children's indexes.
    children: Vec<usize>,
    source: Option<&'t Source>,
    bytes: u64,
    first_cluster: u32,
    clusters: u64,
}

fn lfn_entries(name: &str) -> u64 {
    name.encode_utf16().count().div_ceil(LFN_UNITS_PER_ENTRY) as u64
}

/// An exact 8.3 name when `name` already is one in upper case.
fn exact_short(name: &str) -> Option<[u8; 11]> {
    let (base, ext) = match name.split_once('.') {
        Some((b, e)) => (b, e),
        None => (name, ""),
    };
    if base.is_empty()
        || base.len() > 8
        || ext.len() > 3
        || ext.contains('.')
        || (name.contains('.') && ext.is_empty())
        || !base.bytes().chain(ext.bytes()).all(short_char_ok)
    {
        return None;
    }
    let mut out = [b' '; 11];
    for (o, b) in out.iter_mut().zip(base.bytes()) {
        *o = b;
    }
    for (o, b) in out.iter_mut().skip(8).zip(ext.bytes()) {
        *o = b;
    }
    Some(out)
}

fn short_basis(s: &str) -> Vec<u8> {
    s.chars()
        .filter(|c| *c != ' ' && *c != '.')
        .map(|c| {
            let u = c.to_ascii_uppercase();
            if u.is_ascii() && short_char_ok(u as u8) {
                u as u8
            } else {
                b'_'
            }
        })
        .collect()
}

/// A generated short name `BASIS~N.EXT` not in `taken`.
fn generate_short(name: &str, taken: &BTreeSet<[u8; 11]>) -> Result<[u8; 11], FatError> {
    let (base, ext) = match name.rsplit_once('.') {
        Some((b, e)) if !b.is_empty() => (b, e),
        _ => (name, ""),
    };
    let mut basis = short_basis(base);
    if basis.is_empty() {
        basis.push(b'_');
    }
    let ext: Vec<u8> = short_basis(ext).into_iter().take(3).collect();
    for n in 1u32..1_000_000 {
        let tail = format!("~{n}");
        let keep = 8usize.saturating_sub(tail.len()).min(basis.len());
        let mut out = [b' '; 11];
        let stem = basis.iter().take(keep).copied().chain(tail.bytes());
        for (o, b) in out.iter_mut().zip(stem) {
            *o = b;
        }
        for (o, b) in out.iter_mut().skip(8).zip(ext.iter()) {
            *o = *b;
        }
        if !taken.contains(&out) {
            return Ok(out);
        }
    }
    Err(FatError::DirectoryTooLarge(name.to_owned()))
}

fn flatten<'t>(
    dir: &'t BTreeMap<String, Node>,
    me: usize,
    path: &str,
    items: &mut Vec<Item<'t>>,
) -> Result<(), FatError> {
    // Exact names first so a generated one never takes an exact one's place.
    // Inserted one by one rather than collected: collecting sorts, and
    // that sort would be one more copy of std's in liken-init's
    // size-budgeted binary, which writes ESPs with this.
    let mut taken: BTreeSet<[u8; 11]> = BTreeSet::new();
    for short in dir.keys().filter_map(|k| exact_short(k)) {
        taken.insert(short);
    }
    let mut entries: u64 = if me == 0 { 1 } else { 2 };
    for (name, node) in dir {
        let (short, lfn) = match exact_short(name) {
            Some(s) => (s, false),
            None => {
                let s = generate_short(name, &taken)?;
                taken.insert(s);
                (s, true)
            }
        };
        entries = ck(entries
            .checked_add(1)
            .and_then(|e| e.checked_add(if lfn { lfn_entries(name) } else { 0 })))?;
        let child = items.len();
        let child_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}/{name}")
        };
        items.push(Item {
            name: Some((name.clone(), short, lfn)),
            parent: me,
            children: Vec::new(),
            source: match node {
                Node::File(s) => Some(s),
                Node::Dir(_) => None,
            },
            bytes: match node {
                Node::File(s) => s.len(),
                Node::Dir(_) => 0,
            },
            first_cluster: 0,
            clusters: 0,
        });
        if let Some(parent) = items.get_mut(me) {
            parent.children.push(child);
        }
        if let Node::Dir(d) = node {
            flatten(d, child, &child_path, items)?;
        }
    }
    if entries > MAX_DIR_ENTRIES {
        return Err(FatError::DirectoryTooLarge(if path.is_empty() {
            "/".to_owned()
        } else {
            path.to_owned()
        }));
    }
    if let Some(d) = items.get_mut(me) {
        d.bytes = ck(entries.checked_mul(DIR_ENTRY))?;
    }
    Ok(())
}

fn flat(tree: &Tree) -> Result<Vec<Item<'_>>, FatError> {
    let mut items = vec![Item {
        name: None,
        parent: 0,
        children: Vec::new(),
        source: None,
        bytes: 0,
        first_cluster: 0,
        clusters: 0,
    }];
    flatten(&tree.root, 0, "", &mut items)?;
    Ok(items)
}

/// Clusters `items` need at `cluster_bytes`, assigning each its first
/// cluster (directories always get one; empty files none).
fn allocate(items: &mut [Item<'_>], cluster_bytes: u64) -> Result<u64, FatError> {
    let mut next: u64 = 2;
    for it in items.iter_mut() {
        let n = it.bytes.div_ceil(cluster_bytes);
        let n = if it.source.is_none() { n.max(1) } else { n };
        it.clusters = n;
        it.first_cluster = if n == 0 {
            0
        } else {
            u32::try_from(next).map_err(|_| FatError::Overflow)?
        };
        next = ck(next.checked_add(n))?;
    }
    Ok(next.saturating_sub(2))
}

/// What [`plan`] decided for a tree in a volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The volume's shape.
    pub geometry: Geometry,
    /// Clusters the contents take (directories included).
    pub used_clusters: u64,
}

/// Decides how `tree` fills a volume of `size` bytes, or why it cannot.
pub fn plan(size: u64, tree: &Tree) -> Result<Plan, FatError> {
    let geometry = decide_geometry(size)?;
    let mut items = flat(tree)?;
    let used = allocate(&mut items, geometry.cluster_bytes())?;
    if used > u64::from(geometry.clusters) {
        return Err(FatError::DoesNotFit {
            need: used.saturating_mul(geometry.cluster_bytes()),
            have: geometry.data_bytes(),
        });
    }
    Ok(Plan {
        geometry,
        used_clusters: used,
    })
}

/// The smallest volume, a whole number of MiB, that holds `tree` with
/// `slack` bytes to spare (room for a later file, and what the caller
/// wants free).
pub fn minimum_size(tree: &Tree, slack: u64) -> Result<u64, FatError> {
    const MIB: u64 = 1 << 20;
    let want = |p: &Plan| {
        let free = u64::from(p.geometry.clusters).saturating_sub(p.used_clusters);
        free.saturating_mul(p.geometry.cluster_bytes()) >= slack
    };
    let floor = min_volume_size().next_multiple_of(MIB);
    let mut size = tree
        .content_bytes()
        .saturating_add(slack)
        .next_multiple_of(MIB)
        .max(floor);
    // Each step adds a 64th: a few steps cover FAT and cluster overhead.
    for _ in 0..4096 {
        match plan(size, tree) {
            Ok(p) if want(&p) => return Ok(size),
            Ok(_) | Err(FatError::DoesNotFit { .. }) => {
                size = ck(size.checked_add((size / 64).next_multiple_of(MIB)))?;
            }
            Err(e) => return Err(e),
        }
    }
    Err(FatError::Overflow)
}

fn check_label(label: &str) -> Result<[u8; 11], FatError> {
    if label.is_empty()
        || label.len() > 11
        || !label
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
    {
        return Err(FatError::BadLabel(label.to_owned()));
    }
    let mut out = [b' '; 11];
    for (o, b) in out.iter_mut().zip(label.bytes()) {
        *o = b;
    }
    Ok(out)
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(dst) = at
        .checked_add(bytes.len())
        .and_then(|end| buf.get_mut(at..end))
    {
        dst.copy_from_slice(bytes);
    }
}

fn boot_sector(g: &Geometry, opts: &Options, label: &[u8; 11], hidden: u32) -> [u8; 512] {
    let mut b = [0u8; 512];
    // Jump over the BPB to the code at 0x5A.
    put(&mut b, 0, &[0xEB, 0x58, 0x90]);
    put(&mut b, 3, b"LIKEN   ");
    put(&mut b, 11, &512u16.to_le_bytes());
    put(&mut b, 13, &[g.sectors_per_cluster]);
    put(&mut b, 14, &(RESERVED_SECTORS as u16).to_le_bytes());
    put(&mut b, 16, &[NUM_FATS as u8]);
    // 17: root entries 0, 19: 16-bit sectors 0 (FAT32 uses the 32-bit one).
    put(&mut b, 21, &[0xF8]);
    // 22: 16-bit FAT size 0.
    put(&mut b, 24, &63u16.to_le_bytes());
    put(&mut b, 26, &255u16.to_le_bytes());
    put(&mut b, 28, &hidden.to_le_bytes());
    put(&mut b, 32, &g.total_sectors.to_le_bytes());
    put(&mut b, 36, &g.fat_sectors.to_le_bytes());
    // 40: flags 0 (FATs mirrored), 42: version 0.0.
    put(&mut b, 44, &2u32.to_le_bytes());
    put(&mut b, 48, &(FSINFO_SECTOR as u16).to_le_bytes());
    put(&mut b, 50, &(BACKUP_BOOT_SECTOR as u16).to_le_bytes());
    put(&mut b, 64, &[0x80, 0x00, 0x29]);
    put(&mut b, 67, &opts.volume_id.to_le_bytes());
    put(&mut b, 71, label);
    put(&mut b, 82, b"FAT32   ");
    // Not bootable: int 18h hands the BIOS back its "try the next device",
    // then halt in a loop if it returns.
    put(&mut b, 0x5A, &[0xCD, 0x18, 0xEB, 0xFE]);
    put(&mut b, 510, &[0x55, 0xAA]);
    b
}

fn fsinfo(free: u32, next_free: u32) -> [u8; 512] {
    let mut s = [0u8; 512];
    put(&mut s, 0, &0x4161_5252u32.to_le_bytes());
    put(&mut s, 484, &0x6141_7272u32.to_le_bytes());
    put(&mut s, 488, &free.to_le_bytes());
    put(&mut s, 492, &next_free.to_le_bytes());
    put(&mut s, 508, &0xAA55_0000u32.to_le_bytes());
    s
}

fn short_entry(name: &[u8; 11], attr: u8, cluster: u32, size: u32, t: &Timestamp) -> [u8; 32] {
    let mut e = [0u8; 32];
    put(&mut e, 0, name);
    put(&mut e, 11, &[attr]);
    put(&mut e, 14, &t.time().to_le_bytes());
    put(&mut e, 16, &t.date().to_le_bytes());
    put(&mut e, 18, &t.date().to_le_bytes());
    put(&mut e, 20, &((cluster >> 16) as u16).to_le_bytes());
    put(&mut e, 22, &t.time().to_le_bytes());
    put(&mut e, 24, &t.date().to_le_bytes());
    put(&mut e, 26, &((cluster & 0xFFFF) as u16).to_le_bytes());
    put(&mut e, 28, &size.to_le_bytes());
    e
}

/// The checksum of a short name that ties long-name entries to it.
fn lfn_checksum(short: &[u8; 11]) -> u8 {
    short
        .iter()
        .fold(0u8, |sum, b| sum.rotate_right(1).wrapping_add(*b))
}

/// The long-name entries for `name`, in on-disk order (last part first).
fn lfn(name: &str, short: &[u8; 11]) -> Vec<[u8; 32]> {
    let units: Vec<u16> = name.encode_utf16().collect();
    let sum = lfn_checksum(short);
    let parts: Vec<&[u16]> = units.chunks(LFN_UNITS_PER_ENTRY).collect();
    let count = parts.len();
    let mut out = Vec::with_capacity(count);
    for (i, part) in parts.iter().enumerate().rev() {
        let mut cells = [0xFFFFu16; LFN_UNITS_PER_ENTRY];
        for (c, u) in cells.iter_mut().zip(part.iter()) {
            *c = *u;
        }
        if let Some(c) = cells.get_mut(part.len()) {
            *c = 0;
        }
        let mut e = [0u8; 32];
        let ord = u8::try_from(i.saturating_add(1)).unwrap_or(0x3F);
        let last = if i.saturating_add(1) == count {
            0x40
        } else {
            0
        };
        put(&mut e, 0, &[ord | last]);
        put(&mut e, 11, &[ATTR_LFN, 0, sum]);
        let at = [1usize, 3, 5, 7, 9, 14, 16, 18, 20, 22, 24, 28, 30];
        for (off, u) in at.iter().zip(cells.iter()) {
            put(&mut e, *off, &u.to_le_bytes());
        }
        out.push(e);
    }
    out
}

fn render_dir(items: &[Item<'_>], me: usize, opts: &Options, label: &[u8; 11]) -> Vec<u8> {
    let mut out = Vec::new();
    let Some(dir) = items.get(me) else {
        return out;
    };
    let t = &opts.time;
    if me == 0 {
        out.extend_from_slice(&short_entry(label, ATTR_VOLUME_ID, 0, 0, t));
    } else {
        let parent = items
            .get(dir.parent)
            .filter(|_| dir.parent != 0)
            .map_or(0, |p| p.first_cluster);
        out.extend_from_slice(&short_entry(
            b".          ",
            ATTR_DIRECTORY,
            dir.first_cluster,
            0,
            t,
        ));
        out.extend_from_slice(&short_entry(b"..         ", ATTR_DIRECTORY, parent, 0, t));
    }
    for c in &dir.children {
        let Some(child) = items.get(*c) else { continue };
        let Some((long, short, needs_lfn)) = &child.name else {
            continue;
        };
        if *needs_lfn {
            for e in lfn(long, short) {
                out.extend_from_slice(&e);
            }
        }
        let (attr, size) = match child.source {
            Some(_) => (ATTR_ARCHIVE, u32::try_from(child.bytes).unwrap_or(u32::MAX)),
            None => (ATTR_DIRECTORY, 0),
        };
        out.extend_from_slice(&short_entry(short, attr, child.first_cluster, size, t));
    }
    out
}

fn write_zeros<D: Write>(disk: &mut D, mut n: u64) -> io::Result<()> {
    let zeros = [0u8; 64 * 1024];
    while n > 0 {
        let k = n.min(zeros.len() as u64);
        disk.write_all(zeros.get(..k as usize).unwrap_or_default())?;
        n = n.saturating_sub(k);
    }
    Ok(())
}

/// Builds the volume: `size` bytes at byte `offset` of `disk`, holding
/// `tree`. Everything is checked and planned before the first write.
/// `progress` hears of every file byte written.
pub fn write<D: Write + Seek>(
    disk: &mut D,
    offset: u64,
    size: u64,
    tree: &Tree,
    opts: &Options,
    progress: Progress<'_>,
) -> Result<Plan, FatError> {
    if !offset.is_multiple_of(SECTOR_SIZE) {
        return Err(FatError::NotSectorAligned(offset));
    }
    let label = check_label(&opts.label)?;
    if !opts.time.valid() {
        return Err(FatError::BadTime);
    }
    let g = decide_geometry(size)?;
    let mut items = flat(tree)?;
    let used = allocate(&mut items, g.cluster_bytes())?;
    if used > u64::from(g.clusters) {
        return Err(FatError::DoesNotFit {
            need: used.saturating_mul(g.cluster_bytes()),
            have: g.data_bytes(),
        });
    }
    let hidden = u32::try_from(offset / SECTOR_SIZE).unwrap_or(u32::MAX);
    let free = u32::try_from(u64::from(g.clusters).saturating_sub(used)).unwrap_or(0);
    let next_free = if free == 0 {
        u32::MAX
    } else {
        u32::try_from(ck(used.checked_add(2))?).unwrap_or(u32::MAX)
    };
    let at = |sector: u64| -> Result<u64, FatError> {
        ck(sector
            .checked_mul(SECTOR_SIZE)
            .and_then(|b| b.checked_add(offset)))
    };

    // Reserved area: boot sector, FSInfo and their backups, zeros between.
    let boot = boot_sector(&g, opts, &label, hidden);
    let info = fsinfo(free, next_free);
    let mut reserved = vec![0u8; (RESERVED_SECTORS * SECTOR_SIZE) as usize];
    const FSINFO_AT: usize = (FSINFO_SECTOR * SECTOR_SIZE) as usize;
    const BACKUP_AT: usize = (BACKUP_BOOT_SECTOR * SECTOR_SIZE) as usize;
    const BACKUP_FSINFO_AT: usize = ((BACKUP_BOOT_SECTOR + FSINFO_SECTOR) * SECTOR_SIZE) as usize;
    put(&mut reserved, 0, &boot);
    put(&mut reserved, FSINFO_AT, &info);
    put(&mut reserved, BACKUP_AT, &boot);
    put(&mut reserved, BACKUP_FSINFO_AT, &info);
    disk.seek(SeekFrom::Start(at(0)?))?;
    disk.write_all(&reserved)?;

    // Both FATs: every chain is contiguous, so entry n points at n + 1
    // until the item's last cluster, which ends the chain.
    let mut ends: BTreeSet<u64> = BTreeSet::new();
    for it in &items {
        if it.clusters > 0 {
            ends.insert(ck(u64::from(it.first_cluster)
                .checked_add(it.clusters)
                .and_then(|e| e.checked_sub(1)))?);
        }
    }
    let fat_entries = u64::from(g.fat_sectors).saturating_mul(SECTOR_SIZE / 4);
    let last_used = ck(used.checked_add(1))?;
    let mut fat_bytes = Vec::with_capacity(64 * 1024);
    for copy in 0..NUM_FATS {
        let start =
            ck(RESERVED_SECTORS.checked_add(copy.saturating_mul(u64::from(g.fat_sectors))))?;
        disk.seek(SeekFrom::Start(at(start)?))?;
        let mut n: u64 = 0;
        while n < fat_entries {
            fat_bytes.clear();
            while n < fat_entries && fat_bytes.len() < 64 * 1024 {
                let v: u32 = match n {
                    0 => 0x0FFF_FFF8,
                    1 => FAT_EOC,
                    n if n > last_used => 0,
                    n if ends.contains(&n) => FAT_EOC,
                    n => u32::try_from(n.saturating_add(1)).unwrap_or(FAT_EOC),
                };
                fat_bytes.extend_from_slice(&v.to_le_bytes());
                n = n.saturating_add(1);
            }
            disk.write_all(&fat_bytes)?;
        }
    }

    // The data area, in allocation order.
    let cluster_bytes = g.cluster_bytes();
    let cluster_at = |cluster: u32| -> Result<u64, FatError> {
        let index = u64::from(cluster)
            .checked_sub(2)
            .ok_or(FatError::Overflow)?;
        let sector = index
            .checked_mul(u64::from(g.sectors_per_cluster))
            .and_then(|s| s.checked_add(g.data_start_sector()));
        at(ck(sector)?)
    };
    let mut buf = vec![0u8; COPY_CHUNK];
    for (i, it) in items.iter().enumerate() {
        if it.clusters == 0 {
            continue;
        }
        disk.seek(SeekFrom::Start(cluster_at(it.first_cluster)?))?;
        let room = ck(it.clusters.checked_mul(cluster_bytes))?;
        let written = match it.source {
            None => {
                let bytes = render_dir(&items, i, opts, &label);
                disk.write_all(&bytes)?;
                bytes.len() as u64
            }
            Some(Source::Bytes(b)) => {
                disk.write_all(b)?;
                progress(b.len() as u64);
                b.len() as u64
            }
            Some(Source::Path { path, len }) => {
                copy_file(disk, path, *len, &mut buf, &mut *progress)?;
                *len
            }
        };
        write_zeros(disk, room.saturating_sub(written))?;
    }
    disk.flush()?;
    Ok(Plan {
        geometry: g,
        used_clusters: used,
    })
}

fn copy_file<D: Write>(
    disk: &mut D,
    path: &Path,
    len: u64,
    buf: &mut [u8],
    progress: Progress<'_>,
) -> Result<(), FatError> {
    let src_err = |error| FatError::Source {
        path: path.to_owned(),
        error,
    };
    let mut f = File::open(path).map_err(src_err)?;
    if f.metadata().map_err(src_err)?.len() != len {
        return Err(FatError::Changed(path.to_owned()));
    }
    let mut left = len;
    loop {
        let n = f.read(buf).map_err(src_err)?;
        if n == 0 {
            break;
        }
        let n64 = n as u64;
        if n64 > left {
            return Err(FatError::Changed(path.to_owned()));
        }
        disk.write_all(buf.get(..n).unwrap_or_default())?;
        progress(n64);
        left = left.saturating_sub(n64);
    }
    if left != 0 {
        return Err(FatError::Changed(path.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    const MIB: u64 = 1 << 20;

    fn opts() -> Options {
        Options {
            label: "LIKEN-ESP".into(),
            volume_id: 0x1234_5678,
            time: Timestamp::EPOCH,
        }
    }

    #[test]
    fn geometry_meets_fat32s_cluster_floor() {
        let g = decide_geometry(512 * MIB).unwrap();
        assert_eq!(g.sectors_per_cluster, 8);
        assert!(u64::from(g.clusters) >= MIN_CLUSTERS);
        let g = decide_geometry(64 * MIB).unwrap();
        assert_eq!(g.sectors_per_cluster, 1);
        let g = decide_geometry(300 * MIB).unwrap();
        assert_eq!(g.sectors_per_cluster, 8);
        let g = decide_geometry(200 * MIB).unwrap();
        assert_eq!(g.sectors_per_cluster, 1);
        // FAT holds an entry for every cluster plus the two reserved ones.
        for size in [34 * MIB, 100 * MIB, 512 * MIB, 5000 * MIB] {
            let g = decide_geometry(size).unwrap();
            assert!((u64::from(g.clusters) + 2) * 4 <= u64::from(g.fat_sectors) * 512);
            let used =
                g.data_start_sector() + u64::from(g.clusters) * u64::from(g.sectors_per_cluster);
            assert!(used <= u64::from(g.total_sectors));
        }
        let min = min_volume_size();
        decide_geometry(min).unwrap();
        assert!(decide_geometry(min - 512).is_err());
        assert!(matches!(
            decide_geometry(32 * MIB),
            Err(FatError::VolumeTooSmall { .. })
        ));
        assert!(matches!(
            decide_geometry(MIB + 1),
            Err(FatError::NotSectorAligned(_))
        ));
    }

    #[test]
    fn short_names() {
        assert_eq!(&exact_short("BOOTX64.EFI").unwrap(), b"BOOTX64 EFI");
        assert_eq!(&exact_short("EFI").unwrap(), b"EFI        ");
        for not in [
            "loader",
            "boot.cpio",
            "A.B.C",
            "TOOLONGNAME",
            "X.TOOL",
            "X.",
        ] {
            assert!(exact_short(not).is_none(), "{not}");
        }
        let mut taken = BTreeSet::new();
        let a = generate_short("loader.conf", &taken).unwrap();
        assert_eq!(&a, b"LOADER~1CON");
        taken.insert(a);
        assert_eq!(
            &generate_short("loader.conf", &taken).unwrap(),
            b"LOADER~2CON"
        );
        assert_eq!(
            &generate_short("install-node-1.conf", &BTreeSet::new()).unwrap(),
            b"INSTAL~1CON"
        );
        assert_eq!(
            &generate_short("vmlinuz", &BTreeSet::new()).unwrap(),
            b"VMLINU~1   "
        );
        assert_eq!(
            &generate_short("é", &BTreeSet::new()).unwrap(),
            b"_~1        "
        );
    }

    #[test]
    fn lfn_entries_carry_the_name() {
        let short = *b"INSTAL~1CON";
        let es = lfn("install-node-1.conf", &short);
        assert_eq!(es.len(), 2);
        assert_eq!(es[0][0], 0x42);
        assert_eq!(es[1][0], 0x01);
        assert_eq!(es[0][11], 0x0F);
        let sum = lfn_checksum(&short);
        assert!(es.iter().all(|e| e[13] == sum));
        // "install-node-" in the first part, ".conf" then NUL and padding.
        assert_eq!(u16::from_le_bytes([es[1][1], es[1][2]]), u16::from(b'i'));
        assert_eq!(u16::from_le_bytes([es[0][1], es[0][2]]), u16::from(b'1'));
        assert_eq!(u16::from_le_bytes([es[0][14], es[0][15]]), u16::from(b'f'));
        assert_eq!(u16::from_le_bytes([es[0][16], es[0][17]]), 0);
        assert_eq!(u16::from_le_bytes([es[0][18], es[0][19]]), 0xFFFF);
    }

    #[test]
    fn tree_refuses_what_fat_cannot_hold() {
        let mut t = Tree::new();
        t.add_bytes("loader/loader.conf", b"x".to_vec()).unwrap();
        t.add_dir("loader").unwrap();
        assert!(matches!(
            t.add_bytes("LOADER/x", b"".to_vec()),
            Err(FatError::Duplicate(_))
        ));
        assert!(matches!(
            t.add_bytes("loader/loader.conf", b"".to_vec()),
            Err(FatError::Duplicate(_))
        ));
        assert!(matches!(
            t.add_bytes("loader/loader.conf/x", b"".to_vec()),
            Err(FatError::NotADirectory(_))
        ));
        for bad in ["", "a//b", "a/../b", "a:b", "trailing.", "a\\b", " lead"] {
            assert!(
                matches!(t.add_dir(bad), Err(FatError::BadName { .. })),
                "{bad}"
            );
        }
        assert!(check_label("liken").is_err());
        assert!(check_label("LIKEN-STICK").is_ok());
        assert!(check_label("LIKEN-STICK1").is_err());
    }

    #[test]
    fn writes_a_volume_deterministically_and_refuses_overflow() {
        let mut t = Tree::new();
        t.add_bytes("EFI/BOOT/BOOTX64.EFI", vec![7u8; 5000])
            .unwrap();
        t.add_bytes("loader/entries/install-node-1.conf", b"title x\n".to_vec())
            .unwrap();
        t.add_bytes("empty", Vec::new()).unwrap();
        let size = minimum_size(&t, MIB).unwrap();
        assert_eq!(size, 33 * MIB);
        let build = || {
            let mut d = Cursor::new(vec![0u8; (size + 2 * MIB) as usize]);
            let mut seen = 0u64;
            let p = write(&mut d, MIB, size, &t, &opts(), &mut |n| seen += n).unwrap();
            assert_eq!(seen, 5008);
            (d.into_inner(), p)
        };
        let (a, p) = build();
        let (b, _) = build();
        assert_eq!(a, b);
        let vol = &a[MIB as usize..];
        assert_eq!(&vol[82..90], b"FAT32   ");
        assert_eq!(&vol[0..512], &vol[6 * 512..7 * 512]);
        assert_eq!(u32::from_le_bytes(vol[28..32].try_into().unwrap()), 2048);
        // root, EFI, BOOT, file (10 clusters), loader, entries, conf
        assert_eq!(p.used_clusters, 1 + 1 + 1 + 10 + 1 + 1 + 1);
        let free = u32::from_le_bytes(vol[512 + 488..512 + 492].try_into().unwrap());
        assert_eq!(
            u64::from(free),
            u64::from(p.geometry.clusters) - p.used_clusters
        );
        // Before the volume nothing was touched.
        assert!(a[..MIB as usize].iter().all(|b| *b == 0));

        let mut big = Tree::new();
        big.add_bytes("big", vec![0u8; 40 << 20]).unwrap();
        let mut d = Cursor::new(Vec::new());
        let e = write(&mut d, 0, 34 * MIB, &big, &opts(), &mut |_| {}).unwrap_err();
        assert!(matches!(e, FatError::DoesNotFit { .. }), "{e}");
        assert!(
            d.get_ref().is_empty(),
            "nothing is written before the plan fits"
        );
    }
}
