//! liken-disk: disk images written directly, without loop mounts or root.
//!
//! `liken stick` builds a bootable USB image on a workstation and
//! liken-init's install mode lays out a machine's disk; both need the
//! same three things, and neither may call mkfs, sgdisk or grub-install
//! (the workstation has no root, the machine has no such tools). So the
//! on-disk formats are written here, from their specifications:
//!
//! - [`gpt`]: plan a GUID partition table from partition specs (1 MiB
//!   aligned), write it with its protective MBR and backup copy, and read
//!   one back with its checksums verified.
//! - [`fat`]: build a FAT32 filesystem with long file names from a tree
//!   of directories and files, at a byte offset in a file.
//! - [`grub`]: place GRUB's BIOS boot code: boot.img in the MBR, core.img
//!   in the BIOS boot partition, both patched to find each other.
//! - [`guid`]: GUIDs, random (v4) or derived from a name (reproducible
//!   images).
//! - [`crc32`]: the checksum GPT uses.
//! - [`cpio`]: a deterministic newc archive (an initramfs part): the
//!   deployment layer `liken layer` packs, and the per-role layer
//!   install mode writes to a machine's ESP.
//! - [`verity`]: the dm-verity hash tree of a slot's system image, as
//!   `veritysetup format` lays it out, and its root hash.
//!
//! Everything works on a `Read + Write + Seek` at byte offsets (a
//! `std::fs::File` of an image or a block device); `verity` only needs
//! to read the image as a stream and write the tree as one. Pure planning
//! functions (`gpt::plan`, `fat::plan`) decide the layout; separate
//! functions write it, so the decisions are tested without a disk.
//! Nothing here syncs: the caller decides when to fsync (init fsyncs
//! each step; the CLI fsyncs before its rename).

#![forbid(unsafe_code)]
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects
    )
)]

pub mod cpio;
pub mod crc32;
pub mod fat;
pub mod gpt;
pub mod grub;
pub mod guid;
pub mod verity;

/// The sector size everything here uses. 4Kn disks are not supported:
/// GRUB's boot.img and the installed layout both assume 512.
pub const SECTOR_SIZE: u64 = 512;

/// Partition alignment: 1 MiB, what every partitioning tool uses, so
/// partitions start on erase-block and 4 KiB physical sector boundaries.
pub const ALIGNMENT: u64 = 1 << 20;

/// Progress of a long write: called with the number of bytes just
/// written (the CLI draws a bar; init passes a no-op).
pub type Progress<'a> = &'a mut dyn FnMut(u64);
