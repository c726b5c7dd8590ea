//! Block devices: finding GPT partitions by their label.
//!
//! The kernel exports each partition's GPT name as `PARTNAME=` in
//! `/sys/class/block/<dev>/uevent`, so init finds LIKEN-A, LIKEN-B and
//! LIKEN-DATA without reading partition tables itself. The seam is the
//! sysfs root, which tests point at a temporary tree.
//!
//! Once a slot has booted, the other partitions are looked for only on
//! the disk that holds it ([`disk_of`]; `/sys/class/block/<part>` links
//! into the disk's directory): a second disk plugged in with partitions
//! of the same names (another machine's disk, a stick) is never taken
//! for this machine's data or ESP.

use std::path::{Path, PathBuf};

/// A partition and its device node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// The GPT partition name.
    pub label: String,
    /// The device node, `/dev/vda2`.
    pub device: PathBuf,
    /// The disk it is on (`vda`), from sysfs.
    pub disk: Option<String>,
}

/// Every partition with a GPT name, sorted by device.
pub fn labelled_partitions(sys: &Path) -> Vec<Partition> {
    let Ok(entries) = std::fs::read_dir(sys.join("class/block")) else {
        return Vec::new();
    };
    let mut out: Vec<Partition> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let uevent = std::fs::read_to_string(e.path().join("uevent")).ok()?;
            let mut p = parse_uevent(&uevent)?;
            p.disk = parent_name(&e.path());
            Some(p)
        })
        .collect();
    crate::order::by_key(&mut out, |p| crate::order::path_key(&p.device));
    out
}

/// The name of the directory a sysfs block entry's link leads into: a
/// partition's disk.
fn parent_name(entry: &Path) -> Option<String> {
    let target = std::fs::read_link(entry).ok()?;
    Some(target.parent()?.file_name()?.to_string_lossy().into_owned())
}

/// The disk that holds partition `device` (`/dev/vda3` -> `vda`).
pub fn disk_of(sys: &Path, device: &Path) -> Option<String> {
    parent_name(&sys.join("class/block").join(device.file_name()?))
}

/// The partition with this label, if exactly one has it, on `disk` when
/// one is given (the disk of the booted slot), else on any disk. Two
/// with the same label (an install stick beside an installed disk) are
/// reported rather than guessed between.
pub fn find_by_label(
    sys: &Path,
    disk: Option<&str>,
    label: &str,
) -> Result<Option<PathBuf>, Vec<PathBuf>> {
    let found: Vec<PathBuf> = labelled_partitions(sys)
        .into_iter()
        .filter(|p| p.label == label && disk.is_none_or(|d| p.disk.as_deref() == Some(d)))
        .map(|p| p.device)
        .collect();
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        _ => Err(found),
    }
}

fn parse_uevent(text: &str) -> Option<Partition> {
    let mut devname = None;
    let mut partname = None;
    let mut is_partition = false;
    for line in text.lines() {
        match line.split_once('=') {
            Some(("DEVNAME", v)) => devname = Some(v),
            Some(("PARTNAME", v)) => partname = Some(v),
            Some(("DEVTYPE", "partition")) => is_partition = true,
            _ => {}
        }
    }
    if !is_partition {
        return None;
    }
    let devname = devname?;
    // A DEVNAME that tries to leave /dev is not a kernel's.
    if devname.contains("..") || devname.starts_with('/') {
        return None;
    }
    Some(Partition {
        label: partname?.to_owned(),
        device: Path::new("/dev").join(devname),
        disk: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_partitions_by_label() {
        let dir = std::env::temp_dir().join(format!("liken-init-block-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // As sysfs lays them out: class/block/<dev> links into the
        // device tree, a partition's directory inside its disk's.
        for (disk, dev, text) in [
            (
                "",
                "vda",
                "MAJOR=254\nMINOR=0\nDEVNAME=vda\nDEVTYPE=disk\nDISKSEQ=1\n",
            ),
            (
                "vda",
                "vda2",
                "MAJOR=254\nMINOR=2\nDEVNAME=vda2\nDEVTYPE=partition\nPARTN=2\nPARTNAME=LIKEN-A\n",
            ),
            (
                "vda",
                "vda3",
                "DEVNAME=vda3\nDEVTYPE=partition\nPARTN=3\nPARTNAME=LIKEN-B\n",
            ),
            (
                "vda",
                "vda5",
                "DEVNAME=vda5\nDEVTYPE=partition\nPARTN=5\nPARTNAME=LIKEN-DATA\n",
            ),
            (
                "vdb",
                "vdb1",
                "DEVNAME=vdb1\nDEVTYPE=partition\nPARTNAME=LIKEN-B\n",
            ),
            // A foreign disk with a data partition of the same name.
            (
                "sda",
                "sda5",
                "DEVNAME=sda5\nDEVTYPE=partition\nPARTNAME=LIKEN-DATA\n",
            ),
            (
                "vda",
                "vda9",
                "DEVNAME=../evil\nDEVTYPE=partition\nPARTNAME=LIKEN-DATA\n",
            ),
        ] {
            let real = dir.join("devices/block").join(disk).join(dev);
            std::fs::create_dir_all(&real).unwrap();
            std::fs::write(real.join("uevent"), text).unwrap();
            std::fs::create_dir_all(dir.join("class/block")).unwrap();
            std::os::unix::fs::symlink(&real, dir.join("class/block").join(dev)).unwrap();
        }
        assert_eq!(labelled_partitions(&dir).len(), 5);
        assert_eq!(
            find_by_label(&dir, None, "LIKEN-A"),
            Ok(Some(PathBuf::from("/dev/vda2")))
        );
        assert_eq!(
            disk_of(&dir, Path::new("/dev/vda2")).as_deref(),
            Some("vda")
        );
        assert_eq!(
            find_by_label(&dir, None, "LIKEN-B"),
            Err(vec![PathBuf::from("/dev/vda3"), PathBuf::from("/dev/vdb1")])
        );
        assert_eq!(
            find_by_label(&dir, Some("vda"), "LIKEN-B"),
            Ok(Some(PathBuf::from("/dev/vda3")))
        );
        // The foreign disk's LIKEN-DATA is seen only when no disk is
        // named; on the booted slot's disk, the disk's own is found.
        assert_eq!(
            find_by_label(&dir, None, "LIKEN-DATA"),
            Err(vec![PathBuf::from("/dev/sda5"), PathBuf::from("/dev/vda5")])
        );
        assert_eq!(
            find_by_label(&dir, Some("vda"), "LIKEN-DATA"),
            Ok(Some(PathBuf::from("/dev/vda5")))
        );
        assert_eq!(find_by_label(&dir, Some("vdc"), "LIKEN-DATA"), Ok(None));
        assert!(labelled_partitions(&dir.join("none")).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
