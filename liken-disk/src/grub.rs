//! GRUB's BIOS boot path, placed the way `grub-bios-setup` places it on
//! a GPT disk with a BIOS boot partition.
//!
//! A BIOS loads sector 0 and jumps to it. GRUB's boot.img (512 bytes) is
//! that code: it reads one sector, at the LBA patched into its
//! kernel-sector field, which is the first sector of core.img
//! (diskboot.img), and jumps to it; diskboot reads the rest of core.img
//! from the blocklist at the end of its own sector and starts GRUB, which
//! then finds `$prefix` (`(,gpt1)/grub` in our images) and grub.cfg.
//!
//! What [`install`] does, with the offsets of GRUB's
//! include/grub/i386/pc/boot.h and util/setup.c:
//! - boot.img's first 440 bytes (code, up to the NT disk signature at
//!   0x1B8) go into the MBR; the disk signature, partition table and
//!   0x55AA stay as the GPT's protective MBR wrote them. The DOS BPB
//!   area (0x03..0x5A) keeps the disk's bytes, as setup.c copies them.
//! - kernel sector (0x5C, 8 bytes LE) = the BIOS boot partition's first
//!   LBA; boot drive (0x64) = 0xFF, "use the drive the BIOS passed in
//!   DL"; the two bytes of the drive check jump (0x66) become NOPs, as
//!   setup.c does for a hard disk (BIOSes that pass a wrong DL).
//! - core.img goes into the BIOS boot partition from its first sector.
//!   The last 12 bytes of its first sector are diskboot's first
//!   blocklist entry: start (u64 LE) = partition LBA + 1, length (u16) =
//!   core.img's sectors - 1, segment (u16) = 0x820 (core.img loads at
//!   0x8000 and its first sector is already there). Entries already in
//!   use are cleared first, as setup.c does, and the entry before ours
//!   (bytes 488..500) is zeroed: the list's terminator.
//! - no Reed-Solomon codes are added (`grub-bios-setup --no-rs-codes`):
//!   the redundancy field in core.img stays 0 and GRUB skips recovery.
//!   They guard against a damaged embedding area, which a dedicated
//!   partition written once does not have.
//!
//! core.img must fit the partition; a larger one is refused before
//! anything is written.

use std::fmt;
use std::io::{self, Read, Seek, SeekFrom, Write};

use crate::SECTOR_SIZE;
use crate::gpt::{MBR_BOOT_CODE, Partition};

/// boot.img's size.
pub const BOOT_IMG_SIZE: usize = 512;
/// Offset of the LBA of core.img's first sector in boot.img.
pub const KERNEL_SECTOR: usize = 0x5C;
/// Offset of the boot drive byte in boot.img.
pub const BOOT_DRIVE: usize = 0x64;
/// Offset of the drive check jump in boot.img.
pub const DRIVE_CHECK: usize = 0x66;
/// Start and end of the DOS BPB area boot.img jumps over.
pub const BPB_START: usize = 0x03;
/// End of the BPB area (exclusive).
pub const BPB_END: usize = 0x5A;
/// Boot drive value meaning "the drive the BIOS booted from".
pub const BOOT_DRIVE_FROM_BIOS: u8 = 0xFF;
/// Size of one diskboot blocklist entry.
pub const BLOCKLIST_ENTRY: usize = 12;
/// Where diskboot's first (last in memory) blocklist entry is.
pub const FIRST_BLOCKLIST: usize = BOOT_IMG_SIZE - BLOCKLIST_ENTRY;
/// Real-mode segment core.img's second sector loads at: 0x800 (core.img
/// at 0x8000) plus one sector (0x20 paragraphs).
pub const CORE_SECOND_SEGMENT: u16 = 0x820;

/// Why GRUB could not be placed.
#[derive(Debug)]
pub enum GrubError {
    /// boot.img is not 512 bytes or lacks its 0x55AA signature.
    BadBootImg(String),
    /// core.img is empty or too short to hold diskboot's blocklist.
    BadCoreImg(String),
    /// core.img is larger than the BIOS boot partition.
    CoreTooLarge {
        /// core.img's size in bytes.
        core: u64,
        /// The partition's size in bytes.
        partition: u64,
    },
    /// Reading or writing the disk failed.
    Io(io::Error),
}

impl fmt::Display for GrubError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrubError::BadBootImg(why) => write!(
                f,
                "GRUB's boot.img {why}; use /usr/lib/grub/i386-pc/boot.img from grub-pc-bin"
            ),
            GrubError::BadCoreImg(why) => write!(
                f,
                "GRUB's core.img {why}; build it with grub-mkimage -O i386-pc"
            ),
            GrubError::CoreTooLarge { core, partition } => write!(
                f,
                "GRUB's core.img is {core} bytes but the BIOS boot partition holds {partition}; \
                 build core.img with fewer modules or make the partition larger"
            ),
            GrubError::Io(e) => write!(f, "disk I/O: {e}"),
        }
    }
}

impl std::error::Error for GrubError {}

impl From<io::Error> for GrubError {
    fn from(e: io::Error) -> GrubError {
        GrubError::Io(e)
    }
}

/// The fields [`install`] patches, as read back from a disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BootFields {
    /// boot.img's kernel sector: where core.img starts.
    pub kernel_sector: u64,
    /// boot.img's boot drive byte.
    pub boot_drive: u8,
    /// The drive check bytes (0x90 0x90 once patched).
    pub drive_check: [u8; 2],
    /// diskboot's first blocklist entry: start LBA.
    pub blocklist_start: u64,
    /// ... its length in sectors.
    pub blocklist_len: u16,
    /// ... and its load segment.
    pub blocklist_segment: u16,
}

fn check_boot_img(boot_img: &[u8]) -> Result<&[u8; BOOT_IMG_SIZE], GrubError> {
    let img: &[u8; BOOT_IMG_SIZE] = boot_img
        .try_into()
        .map_err(|_| GrubError::BadBootImg(format!("is {} bytes, not 512", boot_img.len())))?;
    if img.get(510..512) != Some([0x55, 0xAA].as_slice()) {
        return Err(GrubError::BadBootImg("has no 0x55AA signature".into()));
    }
    Ok(img)
}

/// The MBR with boot.img placed in it: boot.img's code over `mbr`'s,
/// `mbr`'s BPB area, NT disk signature, partition table and signature
/// kept, and the fields patched for core.img at `core_lba`.
pub fn decide_mbr(
    boot_img: &[u8],
    mbr: &[u8; BOOT_IMG_SIZE],
    core_lba: u64,
) -> Result<[u8; BOOT_IMG_SIZE], GrubError> {
    let img = check_boot_img(boot_img)?;
    let mut out = *mbr;
    for (i, (o, b)) in out.iter_mut().zip(img.iter()).enumerate() {
        if i < MBR_BOOT_CODE && !(BPB_START..BPB_END).contains(&i) {
            *o = *b;
        }
    }
    patch(&mut out, KERNEL_SECTOR, &core_lba.to_le_bytes());
    patch(&mut out, BOOT_DRIVE, &[BOOT_DRIVE_FROM_BIOS]);
    patch(&mut out, DRIVE_CHECK, &[0x90, 0x90]);
    patch(&mut out, 510, &[0x55, 0xAA]);
    Ok(out)
}

/// core.img's first sector with diskboot's blocklist pointing at the
/// rest of core.img (`sectors` in all, the first at `core_lba`).
pub fn decide_core_first_sector(
    first: &[u8; BOOT_IMG_SIZE],
    core_lba: u64,
    sectors: u64,
) -> Result<[u8; BOOT_IMG_SIZE], GrubError> {
    let rest = sectors
        .checked_sub(1)
        .ok_or_else(|| GrubError::BadCoreImg("is empty".into()))?;
    let len = u16::try_from(rest).map_err(|_| {
        GrubError::BadCoreImg(format!("has {sectors} sectors, too many for diskboot"))
    })?;
    let start = core_lba
        .checked_add(1)
        .ok_or_else(|| GrubError::BadCoreImg("starts past the end of a 64-bit disk".into()))?;
    let mut out = *first;
    // As setup.c: clear every entry in use, walking down from the first,
    // so the one after ours is a terminator (length 0).
    let mut at = FIRST_BLOCKLIST;
    loop {
        let len = u16::from_le_bytes(take(&out, at.saturating_add(8)));
        if len == 0 {
            break;
        }
        patch(&mut out, at, &[0; BLOCKLIST_ENTRY]);
        match at.checked_sub(BLOCKLIST_ENTRY) {
            Some(prev) if prev >= BLOCKLIST_ENTRY => at = prev,
            _ => return Err(GrubError::BadCoreImg("has no blocklist terminator".into())),
        }
    }
    let terminator = FIRST_BLOCKLIST.saturating_sub(BLOCKLIST_ENTRY);
    patch(&mut out, terminator, &[0; BLOCKLIST_ENTRY]);
    patch(&mut out, FIRST_BLOCKLIST, &start.to_le_bytes());
    patch(
        &mut out,
        FIRST_BLOCKLIST.saturating_add(8),
        &len.to_le_bytes(),
    );
    patch(
        &mut out,
        FIRST_BLOCKLIST.saturating_add(10),
        &CORE_SECOND_SEGMENT.to_le_bytes(),
    );
    Ok(out)
}

fn patch(buf: &mut [u8], at: usize, bytes: &[u8]) {
    if let Some(dst) = at
        .checked_add(bytes.len())
        .and_then(|end| buf.get_mut(at..end))
    {
        dst.copy_from_slice(bytes);
    }
}

/// Places GRUB on `disk`: core.img into `bios_partition` (zero-padded to
/// whole sectors) and boot.img into the MBR, which must already be the
/// GPT's protective MBR (write the GPT first; it keeps the boot code
/// with [`crate::gpt::MbrBootCode::Keep`] if rewritten later).
pub fn install<D: Read + Write + Seek>(
    disk: &mut D,
    boot_img: &[u8],
    core_img: &[u8],
    bios_partition: &Partition,
) -> Result<(), GrubError> {
    check_boot_img(boot_img)?;
    let core_len = core_img.len() as u64;
    if core_len < SECTOR_SIZE {
        return Err(GrubError::BadCoreImg(format!(
            "is {core_len} bytes, less than one sector"
        )));
    }
    if core_len > bios_partition.size() {
        return Err(GrubError::CoreTooLarge {
            core: core_len,
            partition: bios_partition.size(),
        });
    }
    let lba = bios_partition.first_lba;
    let sectors = core_len.div_ceil(SECTOR_SIZE);
    let (first, rest) = core_img.split_at(BOOT_IMG_SIZE);
    let first: &[u8; BOOT_IMG_SIZE] = first
        .try_into()
        .map_err(|_| GrubError::BadCoreImg("has no first sector".into()))?;
    let first = decide_core_first_sector(first, lba, sectors)?;

    let mut mbr = [0u8; BOOT_IMG_SIZE];
    disk.seek(SeekFrom::Start(0))?;
    disk.read_exact(&mut mbr)?;
    let mbr = decide_mbr(boot_img, &mbr, lba)?;

    disk.seek(SeekFrom::Start(bios_partition.offset()))?;
    disk.write_all(&first)?;
    disk.write_all(rest)?;
    let tail = (sectors.saturating_mul(SECTOR_SIZE)).saturating_sub(core_len);
    disk.write_all(&vec![0u8; usize::try_from(tail).unwrap_or(0)])?;
    disk.seek(SeekFrom::Start(0))?;
    disk.write_all(&mbr)?;
    disk.flush()?;
    Ok(())
}

/// Reads back the fields [`install`] patched: from the MBR, and from the
/// first sector of the partition the kernel-sector field names.
pub fn read_fields<D: Read + Seek>(disk: &mut D) -> Result<BootFields, GrubError> {
    let mut mbr = [0u8; BOOT_IMG_SIZE];
    disk.seek(SeekFrom::Start(0))?;
    disk.read_exact(&mut mbr)?;
    let kernel_sector = u64::from_le_bytes(take(&mbr, KERNEL_SECTOR));
    let mut first = [0u8; BOOT_IMG_SIZE];
    let at = kernel_sector
        .checked_mul(SECTOR_SIZE)
        .ok_or_else(|| GrubError::BadCoreImg("kernel sector past the disk".into()))?;
    disk.seek(SeekFrom::Start(at))?;
    disk.read_exact(&mut first)?;
    Ok(BootFields {
        kernel_sector,
        boot_drive: take::<1>(&mbr, BOOT_DRIVE)[0],
        drive_check: take(&mbr, DRIVE_CHECK),
        blocklist_start: u64::from_le_bytes(take(&first, FIRST_BLOCKLIST)),
        blocklist_len: u16::from_le_bytes(take(&first, FIRST_BLOCKLIST.saturating_add(8))),
        blocklist_segment: u16::from_le_bytes(take(&first, FIRST_BLOCKLIST.saturating_add(10))),
    })
}

fn take<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = at.checked_add(N).and_then(|end| buf.get(at..end)) {
        out.copy_from_slice(src);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guid::{BIOS_BOOT, Guid};
    use std::io::Cursor;

    fn boot_img() -> Vec<u8> {
        let mut b: Vec<u8> = (0..512).map(|i| (i % 251) as u8).collect();
        b[510] = 0x55;
        b[511] = 0xAA;
        b
    }

    fn part() -> Partition {
        Partition {
            name: "LIKEN-BIOS".into(),
            type_guid: BIOS_BOOT,
            guid: Guid::from_name("t", "bios"),
            first_lba: 4096,
            last_lba: 4096 + 2047,
            attributes: 0,
        }
    }

    #[test]
    fn mbr_keeps_the_table_and_patches_the_fields() {
        let mut mbr = [0u8; 512];
        mbr[0x10] = 0x42; // a BPB byte on the disk
        mbr[446..462].copy_from_slice(&[7; 16]);
        mbr[0x1B8] = 0x99;
        let out = decide_mbr(&boot_img(), &mbr, 4096).unwrap();
        assert_eq!(out[0], boot_img()[0]);
        assert_eq!(out[0x10], 0x42);
        assert_eq!(out[0x1B8], 0x99);
        assert_eq!(&out[446..462], &[7; 16]);
        assert_eq!(
            &out[KERNEL_SECTOR..KERNEL_SECTOR + 8],
            &4096u64.to_le_bytes()
        );
        assert_eq!(out[BOOT_DRIVE], 0xFF);
        assert_eq!(&out[DRIVE_CHECK..DRIVE_CHECK + 2], &[0x90, 0x90]);
        assert_eq!(out[0x100], boot_img()[0x100]);
        assert_eq!(&out[510..], &[0x55, 0xAA]);
        assert!(decide_mbr(&[0; 511], &mbr, 1).is_err());
        assert!(decide_mbr(&[0; 512], &mbr, 1).is_err());
    }

    #[test]
    fn places_core_and_refuses_one_too_large() {
        let mut disk = Cursor::new(vec![0u8; 4 << 20]);
        disk.get_mut()[510] = 0x55;
        disk.get_mut()[511] = 0xAA;
        let mut core: Vec<u8> = (0..(512 * 3 + 100)).map(|i| (i % 7) as u8 + 1).collect();
        // diskboot's blocklist area as GRUB builds it: zeros, then the
        // default first entry (start 2, length 0, segment 0x820).
        core[400..512].fill(0);
        core[500] = 2;
        core[510..512].copy_from_slice(&0x820u16.to_le_bytes());
        install(&mut disk, &boot_img(), &core, &part()).unwrap();
        let f = read_fields(&mut disk).unwrap();
        assert_eq!(
            f,
            BootFields {
                kernel_sector: 4096,
                boot_drive: 0xFF,
                drive_check: [0x90, 0x90],
                blocklist_start: 4097,
                blocklist_len: 3,
                blocklist_segment: 0x820,
            }
        );
        let d = disk.get_ref();
        let at = 4096 * 512;
        assert_eq!(&d[at..at + 488], &core[..488]);
        assert_eq!(&d[at + 488..at + 500], &[0; 12]);
        assert_eq!(&d[at + 512..at + core.len()], &core[512..]);
        assert!(d[at + core.len()..at + 4 * 512].iter().all(|b| *b == 0));

        // Old entries below the first are cleared.
        let mut stale = core.clone();
        stale[508..510].copy_from_slice(&5u16.to_le_bytes());
        stale[488..496].copy_from_slice(&9u64.to_le_bytes());
        stale[496..498].copy_from_slice(&5u16.to_le_bytes());
        install(&mut disk, &boot_img(), &stale, &part()).unwrap();
        let d = disk.get_ref();
        assert!(d[at + 476..at + 500].iter().all(|b| *b == 0));
        let mut all_used = core.clone();
        for e in 0..41 {
            let at = 500 - e * 12;
            all_used[at + 8..at + 10].copy_from_slice(&1u16.to_le_bytes());
        }
        assert!(install(&mut disk, &boot_img(), &all_used, &part()).is_err());

        let big = vec![1u8; 2048 * 512 + 1];
        let e = install(&mut disk, &boot_img(), &big, &part()).unwrap_err();
        assert!(matches!(e, GrubError::CoreTooLarge { .. }), "{e}");
    }
}
