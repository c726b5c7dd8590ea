//! Which disk install mode erases.
//!
//! Erasing the wrong disk is the one mistake an installer cannot take
//! back, so the choice is a pure function ([`decide_target`]) over what
//! /sys/block shows, and it guesses only when there is nothing to guess
//! between: the Machine's `spec.installDisk` when it is set, else the
//! single whole disk that is not the install stick, not removable and
//! not a loop, RAM, zram or optical device. Two candidates is a refusal
//! that names both, and the disk holding the install source is never a
//! target, even when named.
//!
//! `spec.installDisk` may be a kernel name (`vda`), its device node
//! (`/dev/vda`) or a `/dev/disk/by-*` link. The installer runs without
//! udev, so those links exist only when something made them; besides any
//! that do exist, [`read_disks`] derives the two by-id names the kernel
//! gives enough to build: `virtio-<serial>` and `nvme-<model>_<serial>`.

use std::fmt;
use std::path::{Path, PathBuf};

/// One whole disk as /sys/block shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disk {
    /// The kernel's name (`vda`, `sda`, `nvme0n1`).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// The kernel calls it removable (card readers, some USB sticks).
    pub removable: bool,
    /// The kernel refuses writes to it.
    pub read_only: bool,
    /// `/dev/disk/by-*` paths that name it.
    pub links: Vec<String>,
}

impl Disk {
    fn describe(&self) -> String {
        format!("{} ({})", self.name, human_size(self.size))
    }
}

/// The disk install mode writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The kernel's name.
    pub name: String,
    /// Its device node.
    pub device: PathBuf,
    /// Its size in bytes.
    pub size: u64,
}

/// Why no disk was chosen. Each message says what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetError {
    /// `spec.installDisk` names no whole disk of this computer.
    NotFound {
        /// What the Machine asks for.
        wanted: String,
        /// The whole disks there are, described.
        disks: Vec<String>,
    },
    /// `spec.installDisk` names the disk the installer booted from.
    IsSource {
        /// What the Machine asks for.
        wanted: String,
        /// The disk's kernel name.
        name: String,
    },
    /// `spec.installDisk` names a device that is no disk to install on.
    Unsuitable {
        /// The disk's kernel name.
        name: String,
        /// Why not.
        why: String,
    },
    /// No disk qualifies.
    NoCandidate {
        /// The disks seen and why each was passed over.
        passed_over: Vec<String>,
    },
    /// Several disks qualify.
    Several {
        /// The candidates, described.
        candidates: Vec<String>,
    },
    /// The disk is smaller than the layout needs.
    TooSmall {
        /// The disk's kernel name.
        name: String,
        /// Its size.
        size: u64,
        /// What the layout needs.
        need: u64,
    },
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetError::NotFound { wanted, disks } => {
                let have = if disks.is_empty() {
                    "none at all".to_owned()
                } else {
                    disks.join(", ")
                };
                write!(
                    f,
                    "spec.installDisk is {wanted:?}, but this computer has no such whole disk \
                     (its disks: {have}); "
                )?;
                if wanted.starts_with("/dev/disk/") {
                    write!(
                        f,
                        "the installer has no udev, so of the /dev/disk/by-id names only \
                         virtio-<serial> and nvme-<model>_<serial> resolve: "
                    )?;
                }
                write!(
                    f,
                    "set spec.installDisk to one of the names above (as /dev/<name>), \
                     rebuild the stick and boot it again"
                )
            }
            TargetError::IsSource { wanted, name } => write!(
                f,
                "spec.installDisk is {wanted:?}, which is {name}, the disk this installer \
                 booted from; it is never erased: set spec.installDisk to the machine's own disk"
            ),
            TargetError::Unsuitable { name, why } => write!(
                f,
                "spec.installDisk names {name}, {why}; set spec.installDisk to the machine's \
                 own disk"
            ),
            TargetError::NoCandidate { passed_over } => {
                write!(f, "no disk to install onto")?;
                if !passed_over.is_empty() {
                    write!(f, " ({})", passed_over.join("; "))?;
                }
                write!(
                    f,
                    "; attach the machine's disk (the installer's kernel may lack its driver: \
                     see the modules line), or name it in spec.installDisk"
                )
            }
            TargetError::Several { candidates } => write!(
                f,
                "several disks could be the one to erase: {}; set spec.installDisk in this \
                 Machine's document to the one to install onto, rebuild the stick with \
                 `liken stick` and boot it again",
                candidates.join(", ")
            ),
            TargetError::TooSmall { name, size, need } => write!(
                f,
                "disk {name} has {} but liken's partition layout needs {}; install onto a \
                 larger disk",
                human_size(*size),
                human_size(*need)
            ),
        }
    }
}

impl std::error::Error for TargetError {}

/// Sizes for people: MiB below 10 GiB, GiB above, one decimal.
pub fn human_size(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    if bytes >= 10 * GIB {
        format!("{} GiB", bytes / GIB)
    } else if bytes >= GIB {
        format!(
            "{}.{} GiB",
            bytes / GIB,
            (bytes % GIB).saturating_mul(10) / GIB
        )
    } else {
        format!("{} MiB", bytes / MIB)
    }
}

/// Why a device is never an install target whatever the Machine says:
/// it is no disk, or not one a machine keeps.
fn virtual_kind(name: &str) -> Option<&'static str> {
    const KINDS: &[(&str, &str)] = &[
        ("loop", "a loop device"),
        ("zram", "a compressed RAM disk"),
        ("ram", "a RAM disk"),
        ("sr", "an optical drive"),
        ("fd", "a floppy drive"),
        ("nbd", "a network block device"),
    ];
    KINDS.iter().find_map(|(prefix, what)| {
        let rest = name.strip_prefix(prefix)?;
        rest.bytes().all(|b| b.is_ascii_digit()).then_some(*what)
    })
}

fn matches(disk: &Disk, wanted: &str) -> bool {
    let wanted = wanted.trim_end_matches('/');
    wanted == disk.name
        || wanted.strip_prefix("/dev/") == Some(disk.name.as_str())
        || disk.links.iter().any(|l| l == wanted)
}

/// Chooses the disk to erase. `wanted` is the Machine's
/// `spec.installDisk`; `source_disk` the kernel name of the disk the
/// installer booted from (none for netboot media); `need` the bytes the
/// layout needs.
pub fn decide_target(
    wanted: Option<&str>,
    disks: &[Disk],
    source_disk: Option<&str>,
    need: u64,
) -> Result<Target, TargetError> {
    let chosen = match wanted {
        Some(w) => {
            let disk =
                disks
                    .iter()
                    .find(|d| matches(d, w))
                    .ok_or_else(|| TargetError::NotFound {
                        wanted: w.to_owned(),
                        disks: disks.iter().map(Disk::describe).collect(),
                    })?;
            if Some(disk.name.as_str()) == source_disk {
                return Err(TargetError::IsSource {
                    wanted: w.to_owned(),
                    name: disk.name.clone(),
                });
            }
            if let Some(what) = virtual_kind(&disk.name) {
                return Err(TargetError::Unsuitable {
                    name: disk.name.clone(),
                    why: what.to_owned(),
                });
            }
            if disk.read_only {
                return Err(TargetError::Unsuitable {
                    name: disk.name.clone(),
                    why: "which the kernel reports as read-only (a write-protect switch?)"
                        .to_owned(),
                });
            }
            disk
        }
        None => {
            let mut passed_over = Vec::new();
            let mut candidates = Vec::new();
            for d in disks {
                let why = if Some(d.name.as_str()) == source_disk {
                    Some("the install media".to_owned())
                } else if let Some(what) = virtual_kind(&d.name) {
                    Some(what.to_owned())
                } else if d.removable {
                    Some("removable".to_owned())
                } else if d.read_only {
                    Some("read-only".to_owned())
                } else if d.size == 0 {
                    Some("empty (no medium)".to_owned())
                } else {
                    None
                };
                match why {
                    Some(why) => passed_over.push(format!("{} is {why}", d.name)),
                    None => candidates.push(d),
                }
            }
            match candidates.as_slice() {
                [] => return Err(TargetError::NoCandidate { passed_over }),
                [one] => *one,
                many => {
                    return Err(TargetError::Several {
                        candidates: many.iter().map(|d| d.describe()).collect(),
                    });
                }
            }
        }
    };
    if chosen.size < need {
        return Err(TargetError::TooSmall {
            name: chosen.name.clone(),
            size: chosen.size,
            need,
        });
    }
    Ok(Target {
        name: chosen.name.clone(),
        device: Path::new("/dev").join(&chosen.name),
        size: chosen.size,
    })
}

fn read_trimmed(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let t = text.trim();
    (!t.is_empty()).then(|| t.to_owned())
}

/// udev's by-id spelling of a model or serial: runs of whitespace
/// become one '_', leading and trailing ones go.
fn id_part(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join("_")
}

/// The by-id names derivable from sysfs alone.
fn derived_links(sys_block: &Path, name: &str) -> Vec<String> {
    let dir = sys_block.join(name);
    let mut out = Vec::new();
    if name.starts_with("vd")
        && let Some(serial) = read_trimmed(&dir.join("serial"))
    {
        out.push(format!("/dev/disk/by-id/virtio-{}", id_part(&serial)));
    }
    if name.starts_with("nvme")
        && let (Some(model), Some(serial)) = (
            read_trimmed(&dir.join("device/model")),
            read_trimmed(&dir.join("device/serial")),
        )
    {
        out.push(format!(
            "/dev/disk/by-id/nvme-{}_{}",
            id_part(&model),
            id_part(&serial)
        ));
    }
    out
}

/// The links under `dev`/disk/by-* that point at each kernel name.
fn existing_links(dev: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(kinds) = std::fs::read_dir(dev.join("disk")) else {
        return out;
    };
    for kind in kinds.filter_map(|e| e.ok()) {
        let Ok(links) = std::fs::read_dir(kind.path()) else {
            continue;
        };
        for link in links.filter_map(|e| e.ok()) {
            let Ok(to) = std::fs::read_link(link.path()) else {
                continue;
            };
            let (Some(target), Some(kind_name), Some(link_name)) = (
                to.file_name().and_then(|n| n.to_str()),
                kind.file_name().to_str().map(str::to_owned),
                link.file_name().to_str().map(str::to_owned),
            ) else {
                continue;
            };
            out.push((
                target.to_owned(),
                format!("/dev/disk/{kind_name}/{link_name}"),
            ));
        }
    }
    out
}

/// Every whole disk in `sys`/block, sorted by name, with the by-* links
/// found under `dev` or derived from sysfs.
pub fn read_disks(sys: &Path, dev: &Path) -> Vec<Disk> {
    let sys_block = sys.join("block");
    let Ok(entries) = std::fs::read_dir(&sys_block) else {
        return Vec::new();
    };
    let links = existing_links(dev);
    let mut disks: Vec<Disk> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_owned();
            let dir = sys_block.join(&name);
            let sectors: u64 = read_trimmed(&dir.join("size"))?.parse().ok()?;
            let flag = |f: &str| read_trimmed(&dir.join(f)).is_some_and(|v| v == "1");
            let mut all = derived_links(&sys_block, &name);
            all.extend(
                links
                    .iter()
                    .filter(|(t, _)| *t == name)
                    .map(|(_, l)| l.clone()),
            );
            Some(Disk {
                size: sectors.saturating_mul(512),
                removable: flag("removable"),
                read_only: flag("ro"),
                links: all,
                name,
            })
        })
        .collect();
    crate::order::by_key(&mut disks, |d| crate::order::text_key(&d.name));
    disks
}

/// The whole disk a partition (kernel name, `sda1`) belongs to: the
/// partition's sysfs directory sits inside its disk's.
pub fn disk_of_partition(sys: &Path, partition: &str) -> Option<String> {
    let dir = std::fs::canonicalize(sys.join("class/block").join(partition)).ok()?;
    dir.join("partition").exists().then_some(())?;
    let disk = dir.parent()?.file_name()?.to_str()?.to_owned();
    Some(disk)
}

/// The device nodes of `disk`'s partitions (and the disk itself) that
/// /proc/mounts lists as mounted or /proc/swaps as swap; an installer
/// erasing a disk in use would pull it from under the kernel.
pub fn decide_in_use(disk: &str, mounts: &str, swaps: &str) -> Vec<String> {
    let node = format!("/dev/{disk}");
    // vda1; but nvme0n1p1 and mmcblk0p1, as a name ending in a digit
    // separates its partition numbers with 'p' (nvme0n10 is another disk).
    let digit_end = disk.bytes().last().is_some_and(|b| b.is_ascii_digit());
    let ours = |dev: &str| {
        dev.strip_prefix(&node).is_some_and(|rest| {
            rest.is_empty()
                || (!digit_end && rest.bytes().all(|b| b.is_ascii_digit()))
                || rest
                    .strip_prefix('p')
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    };
    let mut out: Vec<String> = mounts
        .lines()
        .chain(swaps.lines())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|dev| ours(dev))
        .map(str::to_owned)
        .collect();
    crate::order::by_key(&mut out, |d| crate::order::text_key(d));
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn disk(name: &str, size: u64) -> Disk {
        Disk {
            name: name.into(),
            size,
            removable: false,
            read_only: false,
            links: vec![],
        }
    }

    #[test]
    fn the_only_fixed_disk_is_chosen() {
        let disks = vec![
            disk("loop0", GIB),
            disk("sda", 8 * GIB),
            disk("sr0", GIB),
            disk("vda", 4 * GIB),
            disk("zram0", GIB),
            Disk {
                removable: true,
                ..disk("sdb", 16 * GIB)
            },
        ];
        let t = decide_target(None, &disks, Some("sda"), 4 * GIB).unwrap();
        assert_eq!(
            t,
            Target {
                name: "vda".into(),
                device: "/dev/vda".into(),
                size: 4 * GIB
            }
        );
    }

    #[test]
    fn several_candidates_are_refused_and_listed() {
        let disks = vec![disk("vda", 4 * GIB), disk("vdb", 20 * GIB)];
        let e = decide_target(None, &disks, None, 4 * GIB).unwrap_err();
        assert_eq!(
            e,
            TargetError::Several {
                candidates: vec!["vda (4.0 GiB)".into(), "vdb (20 GiB)".into()]
            }
        );
        assert!(e.to_string().contains("spec.installDisk"), "{e}");
    }

    #[test]
    fn nothing_left_says_what_was_passed_over() {
        let disks = vec![disk("sda", 8 * GIB), disk("loop3", GIB)];
        let e = decide_target(None, &disks, Some("sda"), 4 * GIB).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("sda is the install media") && text.contains("loop3 is a loop device"),
            "{text}"
        );
    }

    #[test]
    fn install_disk_by_name_path_or_link() {
        let mut vdb = disk("vdb", 4 * GIB);
        vdb.links = vec!["/dev/disk/by-id/virtio-data1".into()];
        let disks = vec![disk("vda", 4 * GIB), vdb, disk("sda", 4 * GIB)];
        for w in ["vdb", "/dev/vdb", "/dev/disk/by-id/virtio-data1"] {
            assert_eq!(
                decide_target(Some(w), &disks, Some("sda"), GIB)
                    .unwrap()
                    .name,
                "vdb",
                "{w}"
            );
        }
        // Never the source, even when named.
        assert!(matches!(
            decide_target(Some("/dev/sda"), &disks, Some("sda"), GIB),
            Err(TargetError::IsSource { .. })
        ));
        let e = decide_target(Some("/dev/disk/by-id/ata-X"), &disks, None, GIB).unwrap_err();
        assert!(matches!(e, TargetError::NotFound { .. }));
        assert!(e.to_string().contains("no udev"), "{e}");
        assert!(matches!(
            decide_target(Some("/dev/vdb1"), &disks, None, GIB),
            Err(TargetError::NotFound { .. })
        ));
        let disks = vec![disk("loop0", 8 * GIB)];
        assert!(matches!(
            decide_target(Some("/dev/loop0"), &disks, None, GIB),
            Err(TargetError::Unsuitable { .. })
        ));
        let ro = vec![Disk {
            read_only: true,
            ..disk("vda", 8 * GIB)
        }];
        assert!(matches!(
            decide_target(Some("vda"), &ro, None, GIB),
            Err(TargetError::Unsuitable { .. })
        ));
    }

    #[test]
    fn a_small_disk_is_refused() {
        let disks = vec![disk("vda", 2 * GIB)];
        let e = decide_target(None, &disks, None, 4 * GIB).unwrap_err();
        assert_eq!(
            e,
            TargetError::TooSmall {
                name: "vda".into(),
                size: 2 * GIB,
                need: 4 * GIB
            }
        );
        assert!(e.to_string().contains("2.0 GiB"), "{e}");
        assert!(decide_target(Some("vda"), &disks, None, 4 * GIB).is_err());
    }

    #[test]
    fn reads_sysfs_and_dev_links() {
        let dir = std::env::temp_dir().join(format!("liken-init-target-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let sys = dir.join("sys");
        let dev = dir.join("dev");
        let devices = sys.join("devices/pci0/block");
        for (name, size, removable, serial) in [
            ("vda", "8388608", "0", Some("data1\n")),
            ("sda", "2097152", "1", None),
            ("nvme0n1", "16777216", "0", None),
        ] {
            let d = devices.join(name);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("size"), format!("{size}\n")).unwrap();
            std::fs::write(d.join("removable"), removable).unwrap();
            std::fs::write(d.join("ro"), "0\n").unwrap();
            if let Some(s) = serial {
                std::fs::write(d.join("serial"), s).unwrap();
            }
            std::fs::create_dir_all(sys.join("block")).unwrap();
            std::os::unix::fs::symlink(&d, sys.join("block").join(name)).unwrap();
        }
        let nvme = devices.join("nvme0n1/device");
        std::fs::create_dir_all(&nvme).unwrap();
        std::fs::write(nvme.join("model"), "QEMU NVMe Ctrl  \n").unwrap();
        std::fs::write(nvme.join("serial"), "deadbeef\n").unwrap();
        // sda1, a partition of sda.
        let part = devices.join("sda/sda1");
        std::fs::create_dir_all(&part).unwrap();
        std::fs::write(part.join("partition"), "1\n").unwrap();
        std::fs::create_dir_all(sys.join("class/block")).unwrap();
        std::os::unix::fs::symlink(&part, sys.join("class/block/sda1")).unwrap();
        std::os::unix::fs::symlink(devices.join("sda"), sys.join("class/block/sda")).unwrap();
        std::fs::create_dir_all(dev.join("disk/by-path")).unwrap();
        std::os::unix::fs::symlink("../../sda", dev.join("disk/by-path/pci-0:1")).unwrap();

        let disks = read_disks(&sys, &dev);
        let names: Vec<&str> = disks.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["nvme0n1", "sda", "vda"]);
        assert_eq!(
            disks[0].links,
            ["/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_deadbeef"]
        );
        assert_eq!(disks[1].links, ["/dev/disk/by-path/pci-0:1"]);
        assert!(disks[1].removable);
        assert_eq!(disks[1].size, GIB);
        assert_eq!(disks[2].links, ["/dev/disk/by-id/virtio-data1"]);
        assert_eq!(disk_of_partition(&sys, "sda1").as_deref(), Some("sda"));
        assert_eq!(
            disk_of_partition(&sys, "sda"),
            None,
            "a disk is no partition"
        );
        assert_eq!(disk_of_partition(&sys, "sdz1"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn in_use_partitions_of_the_disk() {
        let mounts = "/dev/vda1 /boot vfat rw 0 0\n/dev/vdb1 /x ext4 rw 0 0\n\
                      proc /proc proc rw 0 0\n/dev/nvme0n1p2 /y ext4 rw 0 0\n/dev/vda /z ext4 rw 0 0\n";
        let swaps = "Filename Type Size Used Priority\n/dev/vda2 partition 1 0 -2\n";
        assert_eq!(
            decide_in_use("vda", mounts, swaps),
            ["/dev/vda", "/dev/vda1", "/dev/vda2"]
        );
        assert_eq!(decide_in_use("nvme0n1", mounts, ""), ["/dev/nvme0n1p2"]);
        assert!(decide_in_use("nvme0n1", "/dev/nvme0n10 /m ext4 rw 0 0\n", "").is_empty());
        assert!(decide_in_use("vdc", mounts, swaps).is_empty());
        // sda is not sdab's prefix for these purposes.
        assert!(decide_in_use("sda", "/dev/sdab1 /m ext4 rw 0 0\n", "").is_empty());
    }
}
