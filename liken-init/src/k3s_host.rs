//! What k3s expects of the init that starts it, beyond its own files:
//! process limits, mount propagation, a few links and files on the data
//! partition, and nested mounts taken down in order at shutdown.
//!
//! k3s is normally started by systemd from the unit its install.sh
//! writes (`create_systemd_service_file` in k3s-io/k3s install.sh), on a
//! distribution that has already set up the rest. On liken, init is
//! that systemd, so it gives k3s the same:
//!
//! - **Limits** ([`LIMITS`]): the unit's `LimitNOFILE=1048576`,
//!   `LimitNPROC=infinity`, `LimitCORE=infinity`; containerd and the
//!   kubelet hold a file per container, socket and watch, and the
//!   kernel's default of 1024 runs out with a few dozen pods.
//! - **`/` recursively shared** ([`share_root`]): systemd makes every
//!   mount shared at boot, and the kubelet and containerd rely on it
//!   (volume mounts made under /var/lib/kubelet must propagate into the
//!   containers that asked for `mountPropagation: HostToContainer` or
//!   `Bidirectional`; the kubelet refuses Bidirectional on a private
//!   root). Done right after the switch of root.
//! - **`/var/run` -> `/run`** ([`VAR_RUN`]): FHS's link, which
//!   containerd's and CNI's default paths (/var/run/netns,
//!   /var/run/flannel) and many workloads' hostPath mounts assume; /var
//!   is the data partition, so the link lives there.
//! - **/etc/machine-id** ([`MACHINE_ID`]): the kubelet reports it as the
//!   node's machine ID, and log shippers key on it. The system image
//!   links /etc/machine-id to the data partition, and init writes a
//!   random one there on the first boot, so it stays the same across
//!   reboots and upgrades, and differs between machines installed from
//!   one image.
//! - **/etc/rancher/node** ([`NODE_STORE`]): the k3s agent keeps its node
//!   password in /etc/rancher/node/password (pkg/agent/config/config.go:
//!   `filepath.Join("/etc/rancher/node", "password")`, made by
//!   `EnsureNodePassword` on first start), and the server refuses a
//!   node whose password changed. /etc/rancher is a link to /run/rancher
//!   (a RAM disk), so init points /run/rancher/node at a directory on the
//!   data partition.
//! - **Nested mounts under /var at shutdown** ([`decide_nested_unmounts`]):
//!   containerd's overlays, the kubelet's volume mounts (tmpfs for
//!   secrets, bind mounts) sit below /var; /var cannot be unmounted while
//!   they are there, and unmounting a parent before its child fails.
//!   They are unmounted deepest first, detached when busy.

use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::sys::resource::{RLIM_INFINITY, Resource};

use crate::sys::mount::{MountRequest, Mounter, MsFlags};

// A process limit is the kernel's (sys::process sets it in the child);
// this is its public path too.
pub use crate::sys::process::Limit;

/// The limits k3s starts with: install.sh's systemd unit's
/// `LimitNOFILE=1048576`, `LimitNPROC=infinity`, `LimitCORE=infinity`.
pub const LIMITS: [Limit; 3] = [
    Limit {
        resource: Resource::RLIMIT_NOFILE,
        value: 1_048_576,
    },
    Limit {
        resource: Resource::RLIMIT_NPROC,
        value: RLIM_INFINITY,
    },
    Limit {
        resource: Resource::RLIMIT_CORE,
        value: RLIM_INFINITY,
    },
];

/// /var/run, relative to /var.
pub const VAR_RUN: &str = "run";
/// Where /var/run points.
pub const RUN: &str = "/run";
/// The machine ID on the data partition, relative to /var/lib/liken;
/// the system image's /etc/machine-id links here.
pub const MACHINE_ID: &str = "machine-id";
/// The node password's directory on the data partition, relative to
/// /var (k3s's own `/var/lib/rancher` beside its data directory).
pub const NODE_STORE: &str = "lib/rancher/node";
/// The link k3s opens as /etc/rancher/node, relative to /run/rancher.
pub const NODE_LINK: &str = "node";

/// Makes `/` and every mount below it shared (`mount --make-rshared /`).
pub fn share_root(m: &dyn Mounter) -> io::Result<()> {
    m.mount(&MountRequest {
        source: "none".into(),
        target: PathBuf::from("/"),
        fstype: "none".into(),
        flags: MsFlags::MS_REC | MsFlags::MS_SHARED,
        data: None,
    })
}

/// Whether `text` is a machine ID as machine-id(5) defines it: 32
/// lower-case hexadecimal characters and a newline, not all zeros.
pub fn valid_machine_id(text: &[u8]) -> bool {
    let Some(id) = text.strip_suffix(b"\n") else {
        return false;
    };
    id.len() == 32
        && id
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
        && id.iter().any(|c| *c != b'0')
}

/// A new machine ID from 16 random bytes (a version 4 UUID's bits, as
/// systemd-id128 writes them, without the dashes).
pub fn machine_id_from(mut bytes: [u8; 16]) -> String {
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let mut s = String::with_capacity(33);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s.push('\n');
    s
}

fn random_16() -> io::Result<[u8; 16]> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// What [`prepare`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Prepared {
    /// Paths written or corrected.
    pub written: Vec<PathBuf>,
    /// Paths already right.
    pub unchanged: usize,
    /// What failed.
    pub failures: Vec<String>,
}

/// Puts the links and files k3s expects in place on the data partition
/// (`var`) and under `rancher_run` (/run/rancher): /var/run, the machine
/// ID in `var_liken`, and the node password's directory. Only what is
/// missing or wrong is written.
pub fn prepare(var: &Path, var_liken: &Path, rancher_run: &Path) -> Prepared {
    let mut p = Prepared::default();
    let mut note = |path: PathBuf, r: io::Result<bool>| match r {
        Ok(true) => p.written.push(path),
        Ok(false) => p.unchanged = p.unchanged.saturating_add(1),
        Err(e) => p.failures.push(format!("{}: {e}", path.display())),
    };
    let var_run = var.join(VAR_RUN);
    note(var_run.clone(), ensure_link(&var_run, Path::new(RUN)));
    let id = var_liken.join(MACHINE_ID);
    note(id.clone(), ensure_machine_id(var_liken, &id));
    let store = var.join(NODE_STORE);
    let made = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&store);
    let link = rancher_run.join(NODE_LINK);
    note(
        link.clone(),
        made.and_then(|()| std::fs::create_dir_all(rancher_run))
            .and_then(|()| ensure_link(&link, &store)),
    );
    p
}

/// Points `link` at `target` unless it does already. An empty directory
/// in its place is replaced; anything else is left and reported.
fn ensure_link(link: &Path, target: &Path) -> io::Result<bool> {
    match std::fs::symlink_metadata(link) {
        Ok(m) if m.file_type().is_symlink() => {
            if std::fs::read_link(link)? == target {
                return Ok(false);
            }
            std::fs::remove_file(link)?;
        }
        Ok(m) if m.is_dir() => std::fs::remove_dir(link).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "is a directory, not a link to {}, and not empty ({e})",
                    target.display()
                ),
            )
        })?,
        Ok(_) => {
            return Err(io::Error::other(format!(
                "is a file, not a link to {}; remove it",
                target.display()
            )));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::os::unix::fs::symlink(target, link)?;
    Ok(true)
}

fn ensure_machine_id(var_liken: &Path, id: &Path) -> io::Result<bool> {
    if let Ok(text) = crate::fsutil::read_capped(id, 64)
        && valid_machine_id(&text)
    {
        return Ok(false);
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(var_liken)?;
    let text = machine_id_from(random_16()?);
    crate::fsutil::write_atomic(id, text.as_bytes(), 0o444)?;
    let _ = std::fs::set_permissions(id, std::fs::Permissions::from_mode(0o444));
    Ok(true)
}

/// The mount points strictly below `under` in `mountinfo`
/// (/proc/self/mountinfo's text), in the order to unmount them: deepest
/// first, and among equally deep ones the later-mounted first (a mount
/// stacked on another is listed after it).
pub fn decide_nested_unmounts(mountinfo: &str, under: &Path) -> Vec<PathBuf> {
    let mut found: Vec<(usize, usize, PathBuf)> = mountinfo
        .lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let point = PathBuf::from(crate::context::unescape(line.split(' ').nth(4)?));
            (point != under && point.starts_with(under)).then(|| {
                let depth = point.components().count();
                (depth, i, point)
            })
        })
        .collect();
    // Deepest first, and among equals the one mounted last first: the
    // reverse of (depth, line) order, through init's one shared sort.
    crate::order::by_key(&mut found, |(depth, line, _)| {
        let mut key = depth.to_be_bytes().to_vec();
        key.extend(line.to_be_bytes());
        key
    });
    found.into_iter().rev().map(|(_, _, p)| p).collect()
}

/// Unmounts what is mounted below `var`, deepest first (detached when
/// busy). Returns how many were unmounted and what failed.
pub fn unmount_nested(m: &dyn Mounter, proc: &Path, var: &Path) -> (usize, Vec<String>) {
    let info = match crate::fsutil::read_capped(
        &proc.join("self/mountinfo"),
        crate::context::MOUNTINFO_CAP,
    ) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => return (0, vec![format!("cannot read the mount table: {e}")]),
    };
    let points = decide_nested_unmounts(&info, var);
    let mut failed = Vec::new();
    for p in &points {
        if m.unmount(p, false).is_err()
            && let Err(e) = m.unmount(p, true)
        {
            failed.push(format!("{} ({e})", p.display()));
        }
    }
    (points.len().saturating_sub(failed.len()), failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::mount::{FakeMounter, MountCall};

    #[test]
    fn machine_ids() {
        let id = machine_id_from([0xff; 16]);
        assert_eq!(id, "ffffffffffff4fffbfffffffffffffff\n");
        assert!(valid_machine_id(id.as_bytes()));
        assert!(valid_machine_id(machine_id_from([0; 16]).as_bytes()));
        for bad in [
            &b"ffffffffffff4fffbfffffffffffffff"[..],
            b"FFFFFFFFFFFF4FFFBFFFFFFFFFFFFFFF\n",
            b"00000000000000000000000000000000\n",
            b"uninitialized\n",
            b"",
        ] {
            assert!(!valid_machine_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn nested_mounts_go_deepest_first() {
        let info = "\
22 1 0:20 / / rw shared:1 - squashfs /dev/vda3 ro
30 22 254:5 / /var rw,relatime shared:9 - ext4 /dev/vda5 rw
31 30 0:40 / /var/lib/kubelet/pods/a/volumes/kubernetes.io~secret/tok rw shared:20 - tmpfs tmpfs rw
32 30 0:41 / /var/lib/rancher/k3s/agent/containerd/io.containerd.runtime.v2.task/k8s.io/x/rootfs rw shared:21 - overlay overlay rw
33 30 254:5 /lib/kubelet /var/lib/kubelet rw shared:9 - ext4 /dev/vda5 rw
34 33 0:42 / /var/lib/kubelet/pods/b/volumes/with\\040space rw shared:22 - tmpfs tmpfs rw
35 22 0:43 / /variable rw shared:23 - tmpfs tmpfs rw
36 22 0:44 / /run rw shared:24 - tmpfs tmpfs rw
";
        let order = decide_nested_unmounts(info, Path::new("/var"));
        let order: Vec<&str> = order.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(
            order,
            [
                "/var/lib/rancher/k3s/agent/containerd/io.containerd.runtime.v2.task/k8s.io/x/rootfs",
                "/var/lib/kubelet/pods/a/volumes/kubernetes.io~secret/tok",
                "/var/lib/kubelet/pods/b/volumes/with space",
                "/var/lib/kubelet",
            ]
        );
        assert!(decide_nested_unmounts("", Path::new("/var")).is_empty());
        assert!(decide_nested_unmounts("garbage\n\n1 2", Path::new("/var")).is_empty());
    }

    #[test]
    fn nested_mounts_are_unmounted_and_busy_ones_detached() {
        let dir = std::env::temp_dir().join(format!("liken-init-nested-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("self")).unwrap();
        std::fs::write(
            dir.join("self/mountinfo"),
            "30 22 254:5 / /var rw - ext4 /dev/vda5 rw\n\
             31 30 0:40 / /var/a rw - tmpfs tmpfs rw\n\
             32 31 0:41 / /var/a/b rw - tmpfs tmpfs rw\n",
        )
        .unwrap();
        let m = FakeMounter {
            busy: vec![PathBuf::from("/var/a")],
            ..Default::default()
        };
        assert_eq!(unmount_nested(&m, &dir, Path::new("/var")), (2, vec![]));
        assert_eq!(
            m.calls(),
            [
                MountCall::Unmount("/var/a/b".into(), false),
                MountCall::Unmount("/var/a".into(), false),
                MountCall::Unmount("/var/a".into(), true),
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn root_is_made_recursively_shared() {
        let m = FakeMounter::default();
        share_root(&m).unwrap();
        assert_eq!(m.calls(), [MountCall::Mount("none".into(), "/".into())]);
    }

    #[test]
    fn links_and_the_machine_id_are_made_once() {
        let dir = std::env::temp_dir().join(format!("liken-init-host-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (var, run) = (dir.join("var"), dir.join("run/rancher"));
        let var_liken = var.join("lib/liken");
        std::fs::create_dir_all(var.join("run")).unwrap();
        let first = prepare(&var, &var_liken, &run);
        assert!(first.failures.is_empty(), "{first:?}");
        assert_eq!(first.written.len(), 3, "{first:?}");
        assert_eq!(
            std::fs::read_link(var.join("run")).unwrap(),
            Path::new("/run")
        );
        assert_eq!(
            std::fs::read_link(run.join("node")).unwrap(),
            var.join("lib/rancher/node")
        );
        let meta = std::fs::metadata(var.join("lib/rancher/node")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        let id = std::fs::read(var_liken.join("machine-id")).unwrap();
        assert!(valid_machine_id(&id));
        // A second boot: the ID kept, nothing written.
        let again = prepare(&var, &var_liken, &run);
        assert_eq!((again.written.len(), again.unchanged), (0, 3), "{again:?}");
        assert_eq!(std::fs::read(var_liken.join("machine-id")).unwrap(), id);
        // A /var/run directory with something in it is not thrown away.
        std::fs::remove_file(var.join("run")).unwrap();
        std::fs::create_dir_all(var.join("run/x")).unwrap();
        let kept = prepare(&var, &var_liken, &run);
        assert!(kept.failures[0].contains("not empty"), "{kept:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
