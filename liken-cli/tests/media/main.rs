//! `liken stick` and `liken media` run as the real binary on a small but
//! real release directory (real GRUB images from grub-pc-bin, a real
//! deployment from `liken new` and `liken mint`), and their output read
//! back by the standard tools: sgdisk, fsck.vfat, mtools, grub-script-check
//! and cpio. scripts/setup.sh installs them.

mod media;
mod stick;
mod support;
