//! The booted slot opened through dm-verity, for the root step.
//!
//! When the boot entry carries `liken.verity=` ([`liken_api::verity`]),
//! the slot's partition holds the squashfs, zeros to a 4096-byte block,
//! then the hash tree. init maps the data part through the kernel's
//! `verity` target (one read-only table over the partition, the tree
//! read from the same partition right after the data), and mounts the
//! mapped device, `/dev/dm-<minor>`, instead of the partition. Every
//! block read through it is hashed and checked up the tree to the root
//! hash from the command line; a block that does not match is an I/O
//! error, at mount time or whenever a later read meets it. The root
//! hash never comes from the disk the tree protects.
//!
//! The decisions (the device's name, the target) are pure; the device
//! mapper's calls go through [`crate::sys::dm`], whose fake the tests
//! use.
//!
//! Limits: the target runs with the kernel's defaults for a mismatch
//! (the read fails with EIO; no `restart_on_corruption`, no forward
//! error correction), so what a mismatch does after the root is mounted
//! is up to whatever read it: a program that cannot load, k3s that does
//! not get healthy. A boot on trial then reboots at its deadline and the
//! bootloader falls back, as for any release that does not get healthy.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::Duration;

use liken_api::Slot;
use liken_api::verity::VerityArg;

use crate::sys::dm::{self, DevNum, DeviceMapper, Mapped, Target};

/// The modules the verity target needs, loaded by name before the
/// mapping (their dependencies, dm-bufio among them, come through
/// modules.dep). boot.cpio carries them (images/boot-modules.txt).
pub const MODULES: &[&str] = &["dm_mod", "dm_verity"];

/// How long the mapped device's node may take to appear in /dev.
pub const NODE_DEADLINE: Duration = Duration::from_secs(5);

/// The device-mapper name of a slot's verified device: `liken-a`.
pub fn dm_name(slot: Slot) -> String {
    format!("liken-{}", slot.esp_dir())
}

/// The one target: the data's sectors, mapped through `verity` over the
/// partition `partition`, which holds the tree after the data.
pub fn decide_target(arg: &VerityArg, partition: DevNum) -> Target {
    Target {
        start: 0,
        sectors: arg.sectors(),
        kind: "verity".to_owned(),
        params: arg.table_params(&partition.to_string()),
    }
}

/// How the root milestone names a verified root: `through dm-verity
/// (root hash 1a2b3c4d5e6f…)`.
pub fn describe(arg: &VerityArg) -> String {
    format!(
        "through dm-verity (root hash {}\u{2026})",
        arg.root_hash().short()
    )
}

/// The partition's device number, from its node (a block device, not a
/// link to one).
pub fn partition_dev(device: &Path) -> Result<DevNum, String> {
    let meta = std::fs::symlink_metadata(device)
        .map_err(|e| format!("cannot look at {} ({e})", device.display()))?;
    if !meta.file_type().is_block_device() {
        return Err(format!(
            "{} is not a block device; the slot's partition cannot be mapped",
            device.display()
        ));
    }
    Ok(DevNum::from_rdev(meta.rdev()))
}

/// Maps slot `slot`'s partition `partition` (device number `dev`)
/// through dm-verity and waits for the mapped device's node under
/// `dev_dir`. A failure leaves nothing mapped; its message says what
/// failed and what to do.
pub fn open(
    dm: &dyn DeviceMapper,
    slot: Slot,
    arg: &VerityArg,
    partition: DevNum,
    dev_dir: &Path,
    deadline: Duration,
) -> Result<Mapped, String> {
    let target = decide_target(arg, partition);
    let node = |d: DevNum| {
        let path = dm::node_path(dev_dir, d);
        dm::wait_for_node(&path, d, deadline).map(|()| path)
    };
    dm::open(dm, &dm_name(slot), &[target], true, &node)
}

/// Removes a mapped device again (the switch to it failed); says why it
/// could not.
pub fn close(dm: &dyn DeviceMapper, mapped: &Mapped) -> Result<(), String> {
    dm.remove(&mapped.name).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::dm::{DmCall, FakeDeviceMapper, Op};

    fn arg() -> VerityArg {
        VerityArg::parse(&format!("{}:{}:513", "1a2b3c4d".repeat(8), "0f".repeat(32))).unwrap()
    }

    #[test]
    fn the_table_maps_the_data_and_reads_the_tree_after_it() {
        let t = decide_target(
            &arg(),
            DevNum {
                major: 254,
                minor: 4,
            },
        );
        assert_eq!(
            t,
            Target {
                start: 0,
                sectors: 513 * 8,
                kind: "verity".into(),
                params: format!(
                    "1 254:4 254:4 4096 4096 513 513 sha256 {} {}",
                    "1a2b3c4d".repeat(8),
                    "0f".repeat(32)
                ),
            }
        );
        assert_eq!(dm_name(Slot::B), "liken-b");
        assert_eq!(
            describe(&arg()),
            "through dm-verity (root hash 1a2b3c4d1a2b\u{2026})"
        );
    }

    #[test]
    fn the_slot_is_mapped_read_only_and_a_missing_node_undoes_it() {
        let dm = FakeDeviceMapper {
            minor: 7,
            ..Default::default()
        };
        let part = DevNum {
            major: 254,
            minor: 4,
        };
        let dir = std::env::temp_dir().join(format!("liken-init-vroot-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        // No node appears in a plain directory: the device goes again.
        let e = open(&dm, Slot::B, &arg(), part, &dir, Duration::from_millis(20)).unwrap_err();
        assert!(e.contains("dm-7 is not block device 253:7"), "{e}");
        assert_eq!(
            dm.calls(),
            [
                DmCall::Version,
                DmCall::Create("liken-b".into()),
                DmCall::Load("liken-b".into(), vec![decide_target(&arg(), part)], true),
                DmCall::Resume("liken-b".into()),
                DmCall::Remove("liken-b".into()),
            ]
        );
        let dm = FakeDeviceMapper {
            fail: vec![(Op::Remove, nix::libc::ENXIO)],
            ..Default::default()
        };
        let mapped = Mapped {
            name: "liken-a".into(),
            dev: part,
            node: "/dev/dm-0".into(),
        };
        assert!(
            close(&dm, &mapped)
                .unwrap_err()
                .contains("DM_DEV_REMOVE liken-a")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_a_block_device_is_mapped() {
        assert!(
            partition_dev(Path::new("/proc/self/cmdline"))
                .unwrap_err()
                .contains("is not a block device")
        );
        assert!(partition_dev(Path::new("/nonexistent")).is_err());
    }
}
