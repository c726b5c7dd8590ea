//! Carrying out module plans: find the running kernel's module tree,
//! scan /sys for device modaliases, and load what [`crate::coldplug`]
//! plans, through [`crate::sys::modules`].

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use crate::coldplug::ModuleIndex;
use crate::sys::modules::{Loaded, ModuleLoader};

/// Filesystem modules a boot that finds LIKEN partitions loads before
/// switching root: what the root step and `assess` mount (the slot's
/// squashfs, /var's ext4, the ESP's vfat), and overlay, which k3s's
/// snapshotter needs from its first second. Not loaded on every boot:
/// under QEMU's TCG each module costs tens of milliseconds, and an
/// initramfs-only boot (install media, netboot) mounts none of them.
/// Device drivers (virtio, disks, network cards) come from coldplug.
pub const FILESYSTEMS: &[&str] = &[
    "squashfs",
    "crc32c_generic",
    "ext4",
    "vfat",
    "nls_cp437",
    "nls_ascii",
    "overlay",
];

/// The other modules PLATFORM.md has init load, which nothing in the
/// boot waits on (loop devices, erofs and dm-verity images): the
/// image-modules worker loads them after its coldplug. dm_verity is
/// loaded already when the root came through dm-verity
/// ([`crate::verity_root::MODULES`]); then it is not tried again.
pub const FILESYSTEMS_LATER: &[&str] = &["loop", "erofs", "dm_verity"];

/// The running kernel's module tree and its indexes.
pub struct ModuleTree {
    /// `/lib/modules/<release>`.
    pub root: PathBuf,
    /// Its parsed indexes.
    pub index: ModuleIndex,
}

/// Opens `/lib/modules/<release>` for the release in /proc.
pub fn open_tree(modules_root: &Path, proc: &Path) -> Result<ModuleTree, String> {
    let release = std::fs::read_to_string(proc.join("sys/kernel/osrelease"))
        .map_err(|e| format!("cannot read the kernel release from /proc ({e})"))?;
    let root = modules_root.join(release.trim());
    let read = |name: &str| std::fs::read_to_string(root.join(name)).unwrap_or_default();
    let dep = std::fs::read_to_string(root.join("modules.dep")).map_err(|e| {
        format!(
            "{} has no modules.dep ({e}); the image's module tree is missing or was built without depmod",
            root.display()
        )
    })?;
    let index = ModuleIndex::parse(
        &dep,
        &read("modules.alias"),
        &read("modules.softdep"),
        &read("modules.builtin"),
    );
    Ok(ModuleTree { root, index })
}

/// Modules the kernel has already (loaded, or built in with a /sys
/// entry).
pub fn loaded_modules(sys: &Path) -> HashSet<String> {
    std::fs::read_dir(sys.join("module"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Every device's modalias under /sys/devices.
pub fn scan_modaliases(sys: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk(&sys.join("devices"), 0, &mut out);
    out
}

fn walk(dir: &Path, depth: u32, out: &mut BTreeSet<String>) {
    // sysfs device trees are shallow; the cap ends any loop a bind mount
    // could make.
    if depth > 24 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() {
            walk(&e.path(), depth.saturating_add(1), out);
        } else if kind.is_file()
            && e.file_name() == "modalias"
            && let Ok(text) = std::fs::read_to_string(e.path())
            && !text.trim().is_empty()
        {
            out.insert(text.trim().to_owned());
        }
    }
}

/// What a round of loading did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Modules the kernel took.
    pub loaded: Vec<String>,
    /// Modules that failed, with the reason.
    pub failed: Vec<(String, String)>,
    /// Names neither in the tree nor built in.
    pub missing: Vec<String>,
}

impl Report {
    /// Adds another round's results.
    pub fn absorb(&mut self, other: Report) {
        self.loaded.extend(other.loaded);
        self.failed.extend(other.failed);
        self.missing.extend(other.missing);
    }
}

/// Loads `names` and their dependencies, skipping (and adding to) `done`.
pub fn load<'a>(
    tree: &ModuleTree,
    loader: &dyn ModuleLoader,
    names: impl IntoIterator<Item = &'a str>,
    done: &mut HashSet<String>,
) -> Report {
    load_between(tree, loader, names, done, &mut |_| {})
}

/// What runs before each module a plan loads, with the set of modules
/// done: the worker that owns a tree answers other steps' requests
/// there ([`crate::image_modules`]), so they wait for one module rather
/// than a whole coldplug.
pub type Between<'b> = dyn FnMut(&mut HashSet<String>) + 'b;

/// [`load`], calling `between` before each module; a module `between`
/// loaded is not loaded again.
pub fn load_between<'a>(
    tree: &ModuleTree,
    loader: &dyn ModuleLoader,
    names: impl IntoIterator<Item = &'a str>,
    done: &mut HashSet<String>,
    between: &mut Between<'_>,
) -> Report {
    let (plan, missing) = tree.index.plan(names, done);
    let mut report = Report {
        missing: missing.into_iter().map(|m| m.0).collect(),
        ..Report::default()
    };
    for name in plan {
        between(done);
        if !done.insert(name.clone()) {
            continue;
        }
        let Some(rel) = tree.index.path(&name) else {
            continue;
        };
        match loader.load(&tree.root.join(rel)) {
            Ok(Loaded::Now) => report.loaded.push(name),
            Ok(Loaded::Already) => {}
            Err(e) => report.failed.push((name, e.to_string())),
        }
    }
    report
}

/// Loads `base`, then what the devices' modaliases ask for, rescanning
/// until a round loads nothing new (a bus driver reveals devices).
pub fn coldplug(tree: &ModuleTree, loader: &dyn ModuleLoader, sys: &Path, base: &[&str]) -> Report {
    let mut done = loaded_modules(sys);
    let mut report = load(tree, loader, base.iter().copied(), &mut done);
    report.absorb(coldplug_between(tree, loader, sys, &mut done, &mut |_| {}));
    report
}

/// The rounds of [`coldplug`] from a known `done`, calling `between`
/// before each module.
pub fn coldplug_between(
    tree: &ModuleTree,
    loader: &dyn ModuleLoader,
    sys: &Path,
    done: &mut HashSet<String>,
    between: &mut Between<'_>,
) -> Report {
    let mut report = Report::default();
    for _round in 0..4 {
        // Inserted rather than collected: collecting a set sorts, one
        // more copy of std's sort in init's size-budgeted binary.
        let mut wanted = BTreeSet::new();
        for m in scan_modaliases(sys)
            .iter()
            .flat_map(|alias| tree.index.matching(alias))
        {
            if !done.contains(&m) {
                wanted.insert(m);
            }
        }
        if wanted.is_empty() {
            break;
        }
        report.absorb(load_between(
            tree,
            loader,
            wanted.iter().map(String::as_str),
            done,
            between,
        ));
    }
    report
}

/// The modules line's text: a count on success, each failure otherwise.
pub fn describe(report: &Report, seconds: f64) -> Result<String, String> {
    if report.failed.is_empty() && report.missing.is_empty() {
        return Ok(format!("{} loaded in {seconds:.2} s", report.loaded.len()));
    }
    let mut parts: Vec<String> = report
        .failed
        .iter()
        .map(|(m, e)| format!("{m} failed to load ({e})"))
        .collect();
    parts.extend(
        report
            .missing
            .iter()
            .map(|m| format!("{m} is not in the image's module tree")),
    );
    Err(format!(
        "{} loaded, but {}; boot goes on without them: check the image's module tree (images/) and the Machine's spec.modules",
        report.loaded.len(),
        parts.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::modules::FakeLoader;

    fn tree(dir: &Path) -> ModuleTree {
        let rel = dir.join("lib/modules/6.1.0-test");
        std::fs::create_dir_all(&rel).unwrap();
        std::fs::create_dir_all(dir.join("proc/sys/kernel")).unwrap();
        std::fs::write(dir.join("proc/sys/kernel/osrelease"), "6.1.0-test\n").unwrap();
        std::fs::write(
            rel.join("modules.dep"),
            "kernel/virtio_pci.ko: kernel/virtio_pci_modern_dev.ko\nkernel/virtio_pci_modern_dev.ko:\nkernel/virtio_blk.ko:\nkernel/squashfs.ko:\n",
        )
        .unwrap();
        std::fs::write(
            rel.join("modules.alias"),
            "alias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci\nalias virtio:d00000002v* virtio_blk\n",
        )
        .unwrap();
        open_tree(&dir.join("lib/modules"), &dir.join("proc")).unwrap()
    }

    #[test]
    fn coldplug_loads_base_modules_then_what_devices_ask_for() {
        let dir = std::env::temp_dir().join(format!("liken-init-cold-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let t = tree(&dir);
        let dev = dir.join("sys/devices/pci0000:00/0000:00:03.0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(
            dev.join("modalias"),
            "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00\n",
        )
        .unwrap();
        std::fs::create_dir_all(dir.join("sys/module/squashfs")).unwrap();
        let loader = FakeLoader {
            fail: vec!["virtio_blk.ko".into()],
            ..Default::default()
        };
        let r = coldplug(
            &t,
            &loader,
            &dir.join("sys"),
            &["squashfs", "virtio_blk", "nosuch"],
        );
        assert_eq!(r.loaded, vec!["virtio_pci_modern_dev", "virtio_pci"]);
        assert_eq!(r.failed.len(), 1);
        assert_eq!(r.missing, vec!["nosuch"]);
        let loaded = loader.loaded();
        assert_eq!(
            loaded.len(),
            3,
            "virtio_blk tried once, squashfs never: {loaded:?}"
        );
        assert!(loaded[0].ends_with("kernel/virtio_blk.ko"));
        let text = describe(&r, 0.5).unwrap_err();
        assert!(text.contains("virtio_blk failed to load"), "{text}");
        assert!(text.contains("nosuch is not in"), "{text}");
        assert_eq!(
            describe(&Report::default(), 0.25).unwrap(),
            "0 loaded in 0.25 s"
        );
        assert!(open_tree(&dir.join("none"), &dir.join("proc")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
