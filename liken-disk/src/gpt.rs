//! GUID partition tables: plan a layout, write it, read it back.
//!
//! [`plan`] is pure: from the disk's size and a list of [`PartitionSpec`]s
//! it decides every partition's first and last sector (each starting on a
//! 1 MiB boundary, in the order given, one optional "rest of the disk"
//! partition last), or refuses a disk too small with the size it needs.
//! [`write`] carries a [`Layout`] out: the protective MBR in sector 0, the
//! primary header (sector 1) and entry array (sectors 2..34), and the
//! backup array and header at the end of the disk, each with its CRC32.
//! [`read`] parses a table back and verifies both copies' checksums, so
//! init can find its partitions and tests can check what was written.
//!
//! The protective MBR's first 440 bytes are boot code. [`MbrBootCode`]
//! says whether to keep what is there (GRUB's boot.img may already be
//! placed, see [`crate::grub`]) or clear it; the partition record and the
//! 0x55AA signature are always rewritten.
//!
//! Sizes are 512-byte sectors ([`crate::SECTOR_SIZE`]); the entry array
//! has the usual 128 entries of 128 bytes.

use std::fmt;
use std::io::{self, Read, Seek, SeekFrom, Write};

use crate::crc32::crc32;
use crate::guid::Guid;
use crate::{ALIGNMENT, SECTOR_SIZE};

/// Entries in the partition entry array.
pub const ENTRY_COUNT: u32 = 128;
/// Bytes per entry.
pub const ENTRY_SIZE: u32 = 128;
/// Sectors the entry array takes (128 * 128 / 512).
const ENTRY_SECTORS: u64 = 32;
/// Bytes of the header that its CRC covers.
const HEADER_SIZE: u32 = 92;
const SIGNATURE: &[u8; 8] = b"EFI PART";
const REVISION: u32 = 0x0001_0000;
/// UTF-16 code units a partition name may hold.
pub const NAME_UNITS: usize = 36;
/// Bytes of boot code at the start of the MBR, before the disk signature.
pub const MBR_BOOT_CODE: usize = 440;

const ALIGN_SECTORS: u64 = ALIGNMENT / SECTOR_SIZE;

/// How big a partition is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// Exactly this many bytes (a multiple of 512).
    Bytes(u64),
    /// Everything left after the others, and at least `min` bytes. Only
    /// the last partition may be `Rest`.
    Rest {
        /// The least the partition may have.
        min: u64,
    },
}

/// One partition to plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionSpec {
    /// The GPT name (at most 36 UTF-16 units), e.g. `LIKEN-ESP`.
    pub name: String,
    /// The partition type, e.g. [`crate::guid::ESP`].
    pub type_guid: Guid,
    /// This partition's own GUID.
    pub guid: Guid,
    /// How big it is.
    pub size: Size,
    /// The GPT attribute bits (0 for none).
    pub attributes: u64,
}

/// A planned or read partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// The GPT name.
    pub name: String,
    /// The partition type.
    pub type_guid: Guid,
    /// The partition's GUID.
    pub guid: Guid,
    /// First sector.
    pub first_lba: u64,
    /// Last sector, inclusive (GPT's convention).
    pub last_lba: u64,
    /// Attribute bits.
    pub attributes: u64,
}

impl Partition {
    /// Byte offset of the partition's start.
    pub fn offset(&self) -> u64 {
        self.first_lba.saturating_mul(SECTOR_SIZE)
    }

    /// The partition's size in bytes.
    pub fn size(&self) -> u64 {
        self.sectors().saturating_mul(SECTOR_SIZE)
    }

    /// The partition's size in sectors.
    pub fn sectors(&self) -> u64 {
        self.last_lba
            .saturating_sub(self.first_lba)
            .saturating_add(1)
    }
}

/// A whole table: the disk and its partitions, in entry order (entry 1
/// first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The disk's size in sectors.
    pub disk_sectors: u64,
    /// The disk's GUID.
    pub disk_guid: Guid,
    /// The partitions.
    pub partitions: Vec<Partition>,
}

impl Layout {
    /// The partition with this GPT name.
    pub fn by_name(&self, name: &str) -> Option<&Partition> {
        self.partitions.iter().find(|p| p.name == name)
    }

    /// First sector a partition may use.
    pub fn first_usable(&self) -> u64 {
        first_usable()
    }

    /// Last sector a partition may use.
    pub fn last_usable(&self) -> u64 {
        last_usable(self.disk_sectors).unwrap_or(0)
    }
}

/// Whether to keep the boot code already in the MBR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MbrBootCode {
    /// Keep bytes 0..440 as they are on the disk (GRUB's boot.img, or
    /// whatever a person put there).
    Keep,
    /// Clear them to zero.
    Clear,
}

/// Why a table could not be planned, written or read.
#[derive(Debug)]
pub enum GptError {
    /// The disk is smaller than the layout needs.
    DiskTooSmall {
        /// Bytes the layout needs.
        need: u64,
        /// Bytes the disk has.
        have: u64,
    },
    /// A size is not a whole number of 512-byte sectors, or is zero.
    BadSize {
        /// The partition.
        name: String,
        /// The size given.
        size: u64,
    },
    /// A `Rest` partition is not the last one.
    RestNotLast(String),
    /// More partitions than the entry array holds.
    TooManyPartitions(usize),
    /// A name longer than 36 UTF-16 units, or empty.
    BadName(String),
    /// Two partitions share a name or a GUID.
    Duplicate(String),
    /// A partition GUID or type is nil (GPT reads that as unused).
    NilGuid(String),
    /// The sizes overflow a 64-bit sector count.
    Overflow,
    /// The disk holds no GPT, or a damaged one.
    Invalid(String),
    /// Reading or writing the disk failed.
    Io(io::Error),
}

impl fmt::Display for GptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GptError::DiskTooSmall { need, have } => write!(
                f,
                "the disk has {have} bytes ({} MiB) but the partition layout needs {need} bytes \
                 ({} MiB); use a larger disk",
                have >> 20,
                need.div_ceil(1 << 20)
            ),
            GptError::BadSize { name, size } => write!(
                f,
                "partition {name:?}: size {size} is not a positive multiple of 512 bytes"
            ),
            GptError::RestNotLast(name) => write!(
                f,
                "partition {name:?} takes the rest of the disk, so it must be the last one"
            ),
            GptError::TooManyPartitions(n) => write!(
                f,
                "{n} partitions; a GPT entry array holds at most {ENTRY_COUNT}"
            ),
            GptError::BadName(name) => write!(
                f,
                "partition name {name:?} is empty or longer than {NAME_UNITS} UTF-16 units; shorten it"
            ),
            GptError::Duplicate(what) => write!(f, "{what} is used by two partitions"),
            GptError::NilGuid(name) => write!(
                f,
                "partition {name:?} has a nil GUID, which GPT reads as an unused entry"
            ),
            GptError::Overflow => write!(f, "the partition sizes overflow a 64-bit sector count"),
            GptError::Invalid(why) => write!(f, "no valid GPT on the disk: {why}"),
            GptError::Io(e) => write!(f, "disk I/O: {e}"),
        }
    }
}

impl std::error::Error for GptError {}

impl From<io::Error> for GptError {
    fn from(e: io::Error) -> GptError {
        GptError::Io(e)
    }
}

fn first_usable() -> u64 {
    // MBR + header + entry array.
    2 + ENTRY_SECTORS
}

fn last_usable(disk_sectors: u64) -> Option<u64> {
    // Backup entry array + backup header at the end.
    disk_sectors.checked_sub(ENTRY_SECTORS + 2)
}

fn align_up(lba: u64) -> Option<u64> {
    lba.checked_next_multiple_of(ALIGN_SECTORS)
}

fn sectors_of(name: &str, bytes: u64) -> Result<u64, GptError> {
    if bytes == 0 || !bytes.is_multiple_of(SECTOR_SIZE) {
        return Err(GptError::BadSize {
            name: name.to_owned(),
            size: bytes,
        });
    }
    Ok(bytes / SECTOR_SIZE)
}

fn check_specs(specs: &[PartitionSpec]) -> Result<(), GptError> {
    if specs.len() > ENTRY_COUNT as usize {
        return Err(GptError::TooManyPartitions(specs.len()));
    }
    for (i, s) in specs.iter().enumerate() {
        let units = s.name.encode_utf16().count();
        if units == 0 || units > NAME_UNITS {
            return Err(GptError::BadName(s.name.clone()));
        }
        if s.guid.is_nil() || s.type_guid.is_nil() {
            return Err(GptError::NilGuid(s.name.clone()));
        }
        if matches!(s.size, Size::Rest { .. }) && i.checked_add(1) != Some(specs.len()) {
            return Err(GptError::RestNotLast(s.name.clone()));
        }
        for other in specs.iter().take(i) {
            if other.name == s.name {
                return Err(GptError::Duplicate(format!("the name {:?}", s.name)));
            }
            if other.guid == s.guid {
                return Err(GptError::Duplicate(format!("the GUID {}", s.guid)));
            }
        }
    }
    Ok(())
}

/// The smallest disk, in bytes, that holds `specs` (a `Rest` partition
/// counted at its minimum).
pub fn minimum_disk_size(specs: &[PartitionSpec]) -> Result<u64, GptError> {
    check_specs(specs)?;
    let mut next = first_usable();
    for s in specs {
        let start = align_up(next).ok_or(GptError::Overflow)?;
        let bytes = match s.size {
            Size::Bytes(b) => b,
            Size::Rest { min } => min.max(SECTOR_SIZE),
        };
        let sectors = sectors_of(&s.name, bytes.next_multiple_of(SECTOR_SIZE))?;
        next = start.checked_add(sectors).ok_or(GptError::Overflow)?;
    }
    next.checked_add(ENTRY_SECTORS + 1)
        .and_then(|n| n.checked_mul(SECTOR_SIZE))
        .ok_or(GptError::Overflow)
}

/// Decides where each partition goes on a disk of `disk_size` bytes.
pub fn plan(disk_size: u64, disk_guid: Guid, specs: &[PartitionSpec]) -> Result<Layout, GptError> {
    check_specs(specs)?;
    let need = minimum_disk_size(specs)?;
    let disk_sectors = disk_size / SECTOR_SIZE;
    if disk_size < need {
        return Err(GptError::DiskTooSmall {
            need,
            have: disk_size,
        });
    }
    let last = last_usable(disk_sectors).ok_or(GptError::DiskTooSmall {
        need,
        have: disk_size,
    })?;
    let mut next = first_usable();
    let mut partitions = Vec::with_capacity(specs.len());
    for s in specs {
        let first_lba = align_up(next).ok_or(GptError::Overflow)?;
        let last_lba = match s.size {
            Size::Bytes(b) => {
                let n = sectors_of(&s.name, b)?;
                first_lba
                    .checked_add(n)
                    .and_then(|e| e.checked_sub(1))
                    .ok_or(GptError::Overflow)?
            }
            Size::Rest { .. } => last,
        };
        if last_lba > last || last_lba < first_lba {
            return Err(GptError::DiskTooSmall {
                need,
                have: disk_size,
            });
        }
        partitions.push(Partition {
            name: s.name.clone(),
            type_guid: s.type_guid,
            guid: s.guid,
            first_lba,
            last_lba,
            attributes: s.attributes,
        });
        next = last_lba.checked_add(1).ok_or(GptError::Overflow)?;
    }
    Ok(Layout {
        disk_sectors,
        disk_guid,
        partitions,
    })
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(dst) = at
        .checked_add(bytes.len())
        .and_then(|end| buf.get_mut(at..end))
    {
        dst.copy_from_slice(bytes);
    }
}

fn get<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = at.checked_add(N).and_then(|end| buf.get(at..end)) {
        out.copy_from_slice(src);
    }
    out
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(get(buf, at))
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(get(buf, at))
}

/// The 16 KiB partition entry array.
fn render_entries(layout: &Layout) -> Vec<u8> {
    let mut buf = vec![0u8; (ENTRY_COUNT * ENTRY_SIZE) as usize];
    for (i, p) in layout.partitions.iter().enumerate() {
        let Some(base) = i.checked_mul(ENTRY_SIZE as usize) else {
            break;
        };
        let at = |off: usize| base.saturating_add(off);
        put(&mut buf, at(0), &p.type_guid.0);
        put(&mut buf, at(16), &p.guid.0);
        put(&mut buf, at(32), &p.first_lba.to_le_bytes());
        put(&mut buf, at(40), &p.last_lba.to_le_bytes());
        put(&mut buf, at(48), &p.attributes.to_le_bytes());
        let name: Vec<u8> = p
            .name
            .encode_utf16()
            .take(NAME_UNITS)
            .flat_map(u16::to_le_bytes)
            .collect();
        put(&mut buf, at(56), &name);
    }
    buf
}

/// One header sector. `primary` picks which copy: its own LBA, the other
/// copy's, and where its entry array lies.
fn render_header(layout: &Layout, primary: bool, entries_crc: u32) -> Result<Vec<u8>, GptError> {
    let last_lba = layout
        .disk_sectors
        .checked_sub(1)
        .ok_or(GptError::Overflow)?;
    let last = last_usable(layout.disk_sectors).ok_or(GptError::Overflow)?;
    let (my_lba, other_lba, entries_lba) = if primary {
        (1, last_lba, 2)
    } else {
        (last_lba, 1, last.checked_add(1).ok_or(GptError::Overflow)?)
    };
    let mut h = vec![0u8; SECTOR_SIZE as usize];
    put(&mut h, 0, SIGNATURE);
    put(&mut h, 8, &REVISION.to_le_bytes());
    put(&mut h, 12, &HEADER_SIZE.to_le_bytes());
    // 16: header CRC, filled below; 20: reserved.
    put(&mut h, 24, &u64::to_le_bytes(my_lba));
    put(&mut h, 32, &u64::to_le_bytes(other_lba));
    put(&mut h, 40, &first_usable().to_le_bytes());
    put(&mut h, 48, &last.to_le_bytes());
    put(&mut h, 56, &layout.disk_guid.0);
    put(&mut h, 72, &u64::to_le_bytes(entries_lba));
    put(&mut h, 80, &ENTRY_COUNT.to_le_bytes());
    put(&mut h, 84, &ENTRY_SIZE.to_le_bytes());
    put(&mut h, 88, &entries_crc.to_le_bytes());
    let crc = crc32(h.get(..HEADER_SIZE as usize).unwrap_or_default());
    put(&mut h, 16, &crc.to_le_bytes());
    Ok(h)
}

/// The protective MBR's bytes from 440 on: no disk signature, one
/// partition of type 0xEE covering the disk (capped at 2^32-1 sectors),
/// and 0x55AA.
fn render_mbr_tail(disk_sectors: u64) -> [u8; 72] {
    let mut t = [0u8; 72];
    // 440..446: disk signature and reserved, zero. 446: the first record.
    let rec = 446 - MBR_BOOT_CODE;
    let size = u32::try_from(disk_sectors.saturating_sub(1)).unwrap_or(u32::MAX);
    put(
        &mut t,
        rec,
        &[0x00, 0x00, 0x02, 0x00, 0xEE, 0xFF, 0xFF, 0xFF],
    );
    put(&mut t, rec.saturating_add(8), &1u32.to_le_bytes());
    put(&mut t, rec.saturating_add(12), &size.to_le_bytes());
    put(&mut t, 70, &[0x55, 0xAA]);
    t
}

/// Writes `layout` onto `disk`: protective MBR (keeping or clearing the
/// boot code area as `boot_code` says), primary header and entries,
/// backup entries and header. The disk must already be
/// `layout.disk_sectors` long (a block device, or an image file set to
/// its length).
pub fn write<D: Read + Write + Seek>(
    disk: &mut D,
    layout: &Layout,
    boot_code: MbrBootCode,
) -> Result<(), GptError> {
    let last = last_usable(layout.disk_sectors).ok_or(GptError::Overflow)?;
    let entries = render_entries(layout);
    let entries_crc = crc32(&entries);

    let mut mbr = [0u8; SECTOR_SIZE as usize];
    if boot_code == MbrBootCode::Keep {
        disk.seek(SeekFrom::Start(0))?;
        if let Some(code) = mbr.get_mut(..MBR_BOOT_CODE) {
            disk.read_exact(code)?;
        }
    }
    put(
        &mut mbr,
        MBR_BOOT_CODE,
        &render_mbr_tail(layout.disk_sectors),
    );
    disk.seek(SeekFrom::Start(0))?;
    disk.write_all(&mbr)?;
    disk.write_all(&render_header(layout, true, entries_crc)?)?;
    disk.write_all(&entries)?;

    let backup_entries = last.checked_add(1).ok_or(GptError::Overflow)?;
    disk.seek(SeekFrom::Start(
        backup_entries
            .checked_mul(SECTOR_SIZE)
            .ok_or(GptError::Overflow)?,
    ))?;
    disk.write_all(&entries)?;
    disk.write_all(&render_header(layout, false, entries_crc)?)?;
    disk.flush()?;
    Ok(())
}

fn read_at<D: Read + Seek>(disk: &mut D, lba: u64, len: usize) -> Result<Vec<u8>, GptError> {
    let at = lba.checked_mul(SECTOR_SIZE).ok_or(GptError::Overflow)?;
    disk.seek(SeekFrom::Start(at))?;
    let mut buf = vec![0u8; len];
    disk.read_exact(&mut buf)?;
    Ok(buf)
}

struct Header {
    my_lba: u64,
    other_lba: u64,
    first_usable: u64,
    last_usable: u64,
    disk_guid: Guid,
    entries_lba: u64,
    entries_crc: u32,
}

fn parse_header(h: &[u8], which: &str) -> Result<Header, GptError> {
    let bad = |why: &str| GptError::Invalid(format!("the {which} header {why}"));
    if h.get(..8) != Some(SIGNATURE.as_slice()) {
        return Err(bad("has no \"EFI PART\" signature"));
    }
    let size = u32_at(h, 12);
    if size != HEADER_SIZE {
        return Err(bad(&format!("is {size} bytes, not {HEADER_SIZE}")));
    }
    let mut copy = h.get(..HEADER_SIZE as usize).unwrap_or_default().to_vec();
    put(&mut copy, 16, &[0; 4]);
    if crc32(&copy) != u32_at(h, 16) {
        return Err(bad("fails its CRC32"));
    }
    if u32_at(h, 80) != ENTRY_COUNT || u32_at(h, 84) != ENTRY_SIZE {
        return Err(bad(
            "has an entry array of a shape this reader does not take",
        ));
    }
    Ok(Header {
        my_lba: u64_at(h, 24),
        other_lba: u64_at(h, 32),
        first_usable: u64_at(h, 40),
        last_usable: u64_at(h, 48),
        disk_guid: Guid(get(h, 56)),
        entries_lba: u64_at(h, 72),
        entries_crc: u32_at(h, 88),
    })
}

fn parse_entries(entries: &[u8]) -> Vec<Partition> {
    entries
        .chunks_exact(ENTRY_SIZE as usize)
        .filter_map(|e| {
            let type_guid = Guid(get(e, 0));
            if type_guid.is_nil() {
                return None;
            }
            let units: Vec<u16> = e
                .get(56..128)
                .unwrap_or_default()
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes(get(c, 0)))
                .take_while(|u| *u != 0)
                .collect();
            Some(Partition {
                name: String::from_utf16_lossy(&units),
                type_guid,
                guid: Guid(get(e, 16)),
                first_lba: u64_at(e, 32),
                last_lba: u64_at(e, 40),
                attributes: u64_at(e, 48),
            })
        })
        .collect()
}

/// Reads the table on `disk`, verifying the MBR signature and both
/// headers' and entry arrays' CRC32s, and that the two copies agree.
pub fn read<D: Read + Seek>(disk: &mut D) -> Result<Layout, GptError> {
    let mbr = read_at(disk, 0, SECTOR_SIZE as usize)?;
    if mbr.get(510..512) != Some([0x55, 0xAA].as_slice()) {
        return Err(GptError::Invalid("sector 0 has no 0x55AA signature".into()));
    }
    let primary = parse_header(&read_at(disk, 1, SECTOR_SIZE as usize)?, "primary")?;
    if primary.my_lba != 1 {
        return Err(GptError::Invalid(
            "the primary header names another LBA".into(),
        ));
    }
    let array_len = (ENTRY_COUNT * ENTRY_SIZE) as usize;
    let entries = read_at(disk, primary.entries_lba, array_len)?;
    if crc32(&entries) != primary.entries_crc {
        return Err(GptError::Invalid(
            "the primary entry array fails its CRC32".into(),
        ));
    }
    let backup = parse_header(
        &read_at(disk, primary.other_lba, SECTOR_SIZE as usize)?,
        "backup",
    )?;
    let backup_entries = read_at(disk, backup.entries_lba, array_len)?;
    if crc32(&backup_entries) != backup.entries_crc || backup_entries != entries {
        return Err(GptError::Invalid(
            "the backup entry array differs from the primary one".into(),
        ));
    }
    if backup.my_lba != primary.other_lba
        || backup.other_lba != 1
        || backup.disk_guid != primary.disk_guid
        || backup.first_usable != primary.first_usable
        || backup.last_usable != primary.last_usable
    {
        return Err(GptError::Invalid(
            "the backup header does not match the primary one".into(),
        ));
    }
    let partitions = parse_entries(&entries);
    for p in &partitions {
        if p.first_lba < primary.first_usable
            || p.last_lba > primary.last_usable
            || p.last_lba < p.first_lba
        {
            return Err(GptError::Invalid(format!(
                "partition {:?} lies outside the usable sectors",
                p.name
            )));
        }
    }
    Ok(Layout {
        disk_sectors: primary.other_lba.checked_add(1).ok_or(GptError::Overflow)?,
        disk_guid: primary.disk_guid,
        partitions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guid::{BIOS_BOOT, ESP, LINUX_DATA};
    use std::io::Cursor;

    const MIB: u64 = 1 << 20;

    fn spec(name: &str, t: Guid, size: Size) -> PartitionSpec {
        PartitionSpec {
            name: name.into(),
            type_guid: t,
            guid: Guid::from_name("test", name),
            size,
            attributes: 0,
        }
    }

    fn installed() -> Vec<PartitionSpec> {
        vec![
            spec("LIKEN-ESP", ESP, Size::Bytes(512 * MIB)),
            spec("LIKEN-BIOS", BIOS_BOOT, Size::Bytes(MIB)),
            spec("LIKEN-A", LINUX_DATA, Size::Bytes(1024 * MIB)),
            spec("LIKEN-B", LINUX_DATA, Size::Bytes(1024 * MIB)),
            spec("LIKEN-DATA", LINUX_DATA, Size::Rest { min: 1024 * MIB }),
        ]
    }

    #[test]
    fn plans_aligned_partitions_in_order() {
        let l = plan(4096 * MIB, Guid::from_name("t", "disk"), &installed()).unwrap();
        let starts: Vec<u64> = l.partitions.iter().map(|p| p.first_lba).collect();
        assert_eq!(
            starts,
            [
                2048,
                2048 + 1048576,
                2048 + 1050624,
                2048 + 3147776,
                2048 + 5244928
            ]
        );
        assert!(starts.iter().all(|s| s % 2048 == 0));
        assert_eq!(l.partitions[0].size(), 512 * MIB);
        assert_eq!(l.partitions[1].size(), MIB);
        let data = &l.partitions[4];
        assert_eq!(data.last_lba, 4096 * 2048 - 34);
        assert!(data.size() >= 1024 * MIB);
    }

    #[test]
    fn a_small_disk_is_refused_with_the_need() {
        let need = minimum_disk_size(&installed()).unwrap();
        assert_eq!(
            need,
            (2048 + 512 * 2048 + 2048 + 2 * 1024 * 2048 + 1024 * 2048 + 33) * 512
        );
        plan(need, Guid::NIL, &installed()).unwrap();
        let e = plan(need - 512, Guid::NIL, &installed()).unwrap_err();
        assert!(
            matches!(e, GptError::DiskTooSmall { need: n, .. } if n == need),
            "{e}"
        );
        let e = plan(3 << 30, Guid::NIL, &installed())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("needs") && e.contains("use a larger disk"),
            "{e}"
        );
    }

    #[test]
    fn bad_specs_are_refused() {
        let mut s = installed();
        s.swap(3, 4);
        assert!(matches!(
            plan(8 << 30, Guid::NIL, &s),
            Err(GptError::RestNotLast(_))
        ));
        let mut s = installed();
        s[1].name = "LIKEN-ESP".into();
        assert!(matches!(
            plan(8 << 30, Guid::NIL, &s),
            Err(GptError::Duplicate(_))
        ));
        let mut s = installed();
        s[0].size = Size::Bytes(1000);
        assert!(matches!(
            plan(8 << 30, Guid::NIL, &s),
            Err(GptError::BadSize { .. })
        ));
        let mut s = installed();
        s[0].name = "x".repeat(37);
        assert!(matches!(
            plan(8 << 30, Guid::NIL, &s),
            Err(GptError::BadName(_))
        ));
        let mut s = installed();
        s[0].guid = Guid::NIL;
        assert!(matches!(
            plan(8 << 30, Guid::NIL, &s),
            Err(GptError::NilGuid(_))
        ));
    }

    #[test]
    fn writes_and_reads_back() {
        let size = 4096 * MIB;
        let l = plan(size, Guid::from_name("t", "disk"), &installed()).unwrap();
        // A sparse in-memory disk would be 4 GiB; use a file.
        let dir = std::env::temp_dir().join(format!("liken-disk-gpt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("disk.img");
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(size).unwrap();
        // Boot code already there is kept.
        f.write_all(&[0xAB; 440]).unwrap();
        write(&mut f, &l, MbrBootCode::Keep).unwrap();
        assert_eq!(read(&mut f).unwrap(), l);
        let mut mbr = [0u8; 512];
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_exact(&mut mbr).unwrap();
        assert!(mbr[..440].iter().all(|b| *b == 0xAB));
        assert_eq!(mbr[450], 0xEE);
        assert_eq!(&mbr[510..], &[0x55, 0xAA]);
        write(&mut f, &l, MbrBootCode::Clear).unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_exact(&mut mbr).unwrap();
        assert!(mbr[..440].iter().all(|b| *b == 0));

        // A flipped byte in the entry array is caught.
        f.seek(SeekFrom::Start(2 * 512 + 60)).unwrap();
        f.write_all(b"X").unwrap();
        let e = read(&mut f).unwrap_err().to_string();
        assert!(e.contains("CRC32"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn small_disk_in_memory() {
        let specs = [spec("ONE", ESP, Size::Rest { min: MIB })];
        let size = minimum_disk_size(&specs).unwrap();
        let l = plan(size, Guid::from_name("t", "d"), &specs).unwrap();
        let mut disk = Cursor::new(vec![0u8; size as usize]);
        write(&mut disk, &l, MbrBootCode::Clear).unwrap();
        let back = read(&mut disk).unwrap();
        assert_eq!(back, l);
        assert_eq!(back.partitions[0].first_lba, 2048);
        assert!(read(&mut Cursor::new(vec![0u8; 1 << 16])).is_err());
    }
}
