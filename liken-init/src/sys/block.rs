//! Block devices: finding GPT partitions by their label.
//!
//! The kernel exports each partition's GPT name as `PARTNAME=` in
//! `/sys/class/block/<dev>/uevent`, so init finds LIKEN-A, LIKEN-B and
//! LIKEN-DATA without reading partition tables itself. The seam is the
//! sysfs root, which tests point at a temporary tree.

use std::path::{Path, PathBuf};

/// A partition and its device node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// The GPT partition name.
    pub label: String,
    /// The device node, `/dev/vda2`.
    pub device: PathBuf,
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
            parse_uevent(&uevent)
        })
        .collect();
    crate::order::by_key(&mut out, |p| crate::order::path_key(&p.device));
    out
}

/// The partition with this label, if exactly one has it. Two disks with
/// the same label (an install stick beside an installed disk) are
/// reported rather than guessed between.
pub fn find_by_label(sys: &Path, label: &str) -> Result<Option<PathBuf>, Vec<PathBuf>> {
    let found: Vec<PathBuf> = labelled_partitions(sys)
        .into_iter()
        .filter(|p| p.label == label)
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_partitions_by_label() {
        let dir = std::env::temp_dir().join(format!("liken-init-block-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (dev, text) in [
            (
                "vda",
                "MAJOR=254\nMINOR=0\nDEVNAME=vda\nDEVTYPE=disk\nDISKSEQ=1\n",
            ),
            (
                "vda2",
                "MAJOR=254\nMINOR=2\nDEVNAME=vda2\nDEVTYPE=partition\nPARTN=2\nPARTNAME=LIKEN-A\n",
            ),
            (
                "vda3",
                "DEVNAME=vda3\nDEVTYPE=partition\nPARTN=3\nPARTNAME=LIKEN-B\n",
            ),
            (
                "vdb1",
                "DEVNAME=vdb1\nDEVTYPE=partition\nPARTNAME=LIKEN-B\n",
            ),
            (
                "vda9",
                "DEVNAME=../evil\nDEVTYPE=partition\nPARTNAME=LIKEN-DATA\n",
            ),
        ] {
            std::fs::create_dir_all(dir.join("class/block").join(dev)).unwrap();
            std::fs::write(dir.join("class/block").join(dev).join("uevent"), text).unwrap();
        }
        assert_eq!(labelled_partitions(&dir).len(), 3);
        assert_eq!(
            find_by_label(&dir, "LIKEN-A"),
            Ok(Some(PathBuf::from("/dev/vda2")))
        );
        assert_eq!(find_by_label(&dir, "LIKEN-DATA"), Ok(None));
        assert_eq!(
            find_by_label(&dir, "LIKEN-B"),
            Err(vec![PathBuf::from("/dev/vda3"), PathBuf::from("/dev/vdb1")])
        );
        assert!(labelled_partitions(&dir.join("none")).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
