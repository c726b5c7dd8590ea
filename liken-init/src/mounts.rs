//! The filesystems every boot mounts first (step 1), and unmounting
//! them in reverse at shutdown.
//!
//! The table is data so a test can check it and the shutdown can walk
//! it backwards. devtmpfs is mounted by init because the Debian kernel
//! does not mount it itself (DEVTMPFS_MOUNT is off).

use std::path::PathBuf;

use crate::sys::mount::{MountRequest, Mounter, MsFlags};

fn req(
    source: &str,
    target: &str,
    fstype: &str,
    flags: MsFlags,
    data: Option<&str>,
) -> MountRequest {
    MountRequest {
        source: source.to_owned(),
        target: PathBuf::from(target),
        fstype: fstype.to_owned(),
        flags,
        data: data.map(str::to_owned),
    }
}

/// The pseudo filesystems, in mount order.
///
/// efivarfs is not among them: the Debian kernel builds it as a module
/// the initramfs does not carry, and /sys/firmware/efi can only be looked
/// at once sysfs is mounted. Boot assessment mounts it (`bless.rs`) once
/// the system image's module tree is there, which is the first time init
/// needs an EFI variable.
pub fn pseudo() -> Vec<MountRequest> {
    let safe = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    vec![
        req("proc", "/proc", "proc", safe, None),
        req("sysfs", "/sys", "sysfs", safe, None),
        req(
            "devtmpfs",
            "/dev",
            "devtmpfs",
            MsFlags::MS_NOSUID,
            Some("mode=0755"),
        ),
        req(
            "devpts",
            "/dev/pts",
            "devpts",
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
            Some("gid=5,mode=0620,ptmxmode=0666"),
        ),
        req(
            "tmpfs",
            "/dev/shm",
            "tmpfs",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=1777"),
        ),
        req(
            "tmpfs",
            "/run",
            "tmpfs",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755"),
        ),
        req(
            "cgroup2",
            "/sys/fs/cgroup",
            "cgroup2",
            safe,
            Some("nsdelegate"),
        ),
    ]
}

/// Mounts each in order, creating mount points. Returns what was
/// mounted and a message per failure; a failure does not stop the rest.
pub fn mount_all(m: &dyn Mounter, list: &[MountRequest]) -> (Vec<PathBuf>, Vec<String>) {
    let mut mounted = Vec::new();
    let mut failures = Vec::new();
    for r in list {
        // The mount point may exist already (the initramfs ships it) or
        // live on a filesystem mounted just before; either way a failure
        // here shows up as the mount's own error.
        let _ = std::fs::create_dir_all(&r.target);
        match m.mount(r) {
            Ok(()) => mounted.push(r.target.clone()),
            Err(e) => failures.push(format!(
                "cannot mount {} on {} ({e})",
                r.fstype,
                r.target.display()
            )),
        }
    }
    (mounted, failures)
}

/// Unmounts in reverse order; a busy filesystem is detached instead.
/// Returns the ones that needed detaching and the ones that failed.
pub fn unmount_all(m: &dyn Mounter, mounted: &[PathBuf]) -> (Vec<PathBuf>, Vec<String>) {
    let mut detached = Vec::new();
    let mut failed = Vec::new();
    for target in mounted.iter().rev() {
        if m.unmount(target, false).is_ok() {
            continue;
        }
        match m.unmount(target, true) {
            Ok(()) => detached.push(target.clone()),
            Err(e) => failed.push(format!("{} ({e})", target.display())),
        }
    }
    (detached, failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::mount::{FakeMounter, MountCall};
    use std::path::Path;

    #[test]
    fn the_table_mounts_proc_first_and_leaves_efivarfs_to_assessment() {
        let l = pseudo();
        assert_eq!(l[0].target, Path::new("/proc"));
        assert!(l.iter().all(|r| r.fstype != "efivarfs"));
        // Every mount point below another comes after it.
        for (i, r) in l.iter().enumerate() {
            for parent in &l[i + 1..] {
                assert!(!r.target.starts_with(&parent.target), "{:?}", r.target);
            }
        }
    }

    #[test]
    fn failures_are_reported_and_unmounting_runs_backwards() {
        let dir = std::env::temp_dir().join(format!("liken-init-mnt-{}", std::process::id()));
        let list = vec![
            req(
                "a",
                dir.join("a").to_str().unwrap(),
                "tmpfs",
                MsFlags::empty(),
                None,
            ),
            req(
                "b",
                dir.join("b").to_str().unwrap(),
                "bad",
                MsFlags::empty(),
                None,
            ),
            req(
                "c",
                dir.join("c").to_str().unwrap(),
                "tmpfs",
                MsFlags::empty(),
                None,
            ),
        ];
        let fake = FakeMounter {
            fail_mount: vec![dir.join("b")],
            busy: vec![dir.join("a")],
            ..Default::default()
        };
        let (mounted, failures) = mount_all(&fake, &list);
        assert_eq!(mounted, vec![dir.join("a"), dir.join("c")]);
        assert_eq!(failures.len(), 1);
        assert!(failures[0].contains("cannot mount bad"), "{failures:?}");
        let (detached, failed) = unmount_all(&fake, &mounted);
        assert_eq!(detached, vec![dir.join("a")]);
        assert!(failed.is_empty());
        let unmounts: Vec<MountCall> = fake.calls().into_iter().skip(3).collect();
        assert_eq!(
            unmounts,
            vec![
                MountCall::Unmount(dir.join("c"), false),
                MountCall::Unmount(dir.join("a"), false),
                MountCall::Unmount(dir.join("a"), true),
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
