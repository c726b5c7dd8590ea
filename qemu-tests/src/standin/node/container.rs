//! The container runtime's inside: what runs between the stand-in
//! starting a container and the container's program.
//!
//! The stand-in is multi-threaded, and a thread cannot leave its mount
//! namespace while sharing it with others, so each container starts as
//! a fresh copy of the stand-in (`liken-standin-k3s container <spec>`,
//! [`outer`]): it enters new mount, PID and IPC namespaces, makes every
//! mount private (init shares `/` for k3s, and nothing a container
//! mounts may reach the host), and starts a second copy ([`inner`]),
//! the first process of the new PID namespace, whose host pid it writes
//! where the stand-in reads it, then waits for it and exits with its
//! status. [`inner`] builds the container's filesystem on the pod's copy
//! of the image's root: a new /proc for its PID namespace, a small /dev,
//! /sys read-only, the pod's volumes (host paths, the projected
//! ServiceAccount token), then the root itself read-only when the
//! container asks; it changes root, sets no_new_privs, drops the
//! capabilities the container does not keep from the bounding set and
//! its own sets, and executes the program with the container's
//! environment, so the program is PID 1 of its namespace, as under
//! containerd without an init.
//!
//! Limits: no user namespace (uid 0 only), no cgroup limits, no seccomp
//! profile, and the host's network (the stand-in runs only
//! `hostNetwork` pods).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rustix::mount::{MountFlags, MountPropagationFlags};
use rustix::thread::{CapabilitySet, CapabilitySets};
use serde::{Deserialize, Serialize};

/// One mount of a container, inside its root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mount {
    /// A host path bound at `target`.
    Bind {
        /// The host path.
        source: PathBuf,
        /// Where inside the container.
        target: String,
        /// Read-only.
        readonly: bool,
    },
    /// A tmpfs.
    Tmpfs {
        /// Where inside the container.
        target: String,
    },
}

impl Mount {
    /// Where inside the container.
    pub fn target(&self) -> &str {
        match self {
            Mount::Bind { target, .. } | Mount::Tmpfs { target } => target,
        }
    }
}

/// Everything [`inner`] needs, written as JSON by the stand-in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spec {
    /// The pod's copy of the image's root.
    pub rootfs: PathBuf,
    /// The pod's volumes.
    pub mounts: Vec<Mount>,
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// The environment.
    pub env: Vec<(String, String)>,
    /// The working directory inside.
    pub workdir: String,
    /// securityContext.readOnlyRootFilesystem.
    pub readonly_root: bool,
    /// The capabilities kept (names without `CAP_`); `None` keeps all
    /// (privileged).
    pub keep_caps: Option<Vec<String>>,
    /// securityContext.allowPrivilegeEscalation false.
    pub no_new_privs: bool,
    /// Where [`outer`] writes the program's host pid.
    pub pid_file: PathBuf,
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("liken-standin-k3s: container: {what}: {e}");
    std::process::exit(127);
}

fn read_spec(path: &str) -> Spec {
    let text = std::fs::read(path).unwrap_or_else(|e| fail(path, e));
    serde_json::from_slice(&text).unwrap_or_else(|e| fail(path, e))
}

/// `container <spec>`: the namespaces, then [`inner`] (see the module
/// docs).
pub fn outer(spec_path: &str) -> ! {
    let spec = read_spec(spec_path);
    use nix::sched::CloneFlags;
    nix::sched::unshare(
        CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWIPC,
    )
    .unwrap_or_else(|e| fail("entering new namespaces", e));
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .unwrap_or_else(|e| fail("making mounts private", e));
    let mut child = Command::new("/proc/self/exe")
        .args(["container-init", spec_path])
        .spawn()
        .unwrap_or_else(|e| fail("starting the container's first process", e));
    if let Err(e) = std::fs::write(&spec.pid_file, child.id().to_string()) {
        let _ = child.kill();
        fail("writing the pid file", e);
    }
    let status = child.wait().unwrap_or_else(|e| fail("waiting", e));
    use std::os::unix::process::ExitStatusExt;
    std::process::exit(
        status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
    )
}

fn inside(root: &Path, target: &str) -> PathBuf {
    root.join(target.trim_start_matches('/'))
}

/// `container-init <spec>`: the container's filesystem, privileges and
/// program (see the module docs).
pub fn inner(spec_path: &str) -> ! {
    // Dies with [`outer`], so a killed runtime leaves no container.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let spec = read_spec(spec_path);
    let root = &spec.rootfs;
    rustix::mount::mount_bind_recursive(root, root).unwrap_or_else(|e| fail("binding the root", e));
    let proc_dir = inside(root, "/proc");
    let _ = std::fs::create_dir_all(&proc_dir);
    rustix::mount::mount(
        "proc",
        &proc_dir,
        "proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        None,
    )
    .unwrap_or_else(|e| fail("mounting /proc", e));
    let sys = inside(root, "/sys");
    let _ = std::fs::create_dir_all(&sys);
    rustix::mount::mount_bind_recursive("/sys", &sys).unwrap_or_else(|e| fail("binding /sys", e));
    let _ = rustix::mount::mount_remount(&sys, MountFlags::BIND | MountFlags::RDONLY, "");
    let dev = inside(root, "/dev");
    let _ = std::fs::create_dir_all(&dev);
    rustix::mount::mount("tmpfs", &dev, "tmpfs", MountFlags::NOSUID, None)
        .unwrap_or_else(|e| fail("mounting /dev", e));
    for node in ["null", "zero", "full", "random", "urandom", "tty"] {
        let target = dev.join(node);
        if std::fs::write(&target, b"").is_ok() {
            let _ = rustix::mount::mount_bind(Path::new("/dev").join(node), &target);
        }
    }
    for m in &spec.mounts {
        let target = inside(root, m.target());
        match m {
            Mount::Bind {
                source, readonly, ..
            } => {
                if source.is_dir() {
                    let _ = std::fs::create_dir_all(&target);
                } else {
                    if let Some(p) = target.parent() {
                        let _ = std::fs::create_dir_all(p);
                    }
                    let _ = std::fs::write(&target, b"");
                }
                rustix::mount::mount_bind_recursive(source, &target)
                    .unwrap_or_else(|e| fail(&format!("binding {}", source.display()), e));
                if *readonly {
                    rustix::mount::mount_remount(
                        &target,
                        MountFlags::BIND | MountFlags::RDONLY,
                        "",
                    )
                    .unwrap_or_else(|e| fail(&format!("{} read-only", m.target()), e));
                }
            }
            Mount::Tmpfs { .. } => {
                let _ = std::fs::create_dir_all(&target);
                rustix::mount::mount("tmpfs", &target, "tmpfs", MountFlags::NOSUID, None)
                    .unwrap_or_else(|e| fail(&format!("tmpfs at {}", m.target()), e));
            }
        }
    }
    if spec.readonly_root {
        rustix::mount::mount_remount(root, MountFlags::BIND | MountFlags::RDONLY, "")
            .unwrap_or_else(|e| fail("making the root read-only", e));
    }
    rustix::process::chroot(root).unwrap_or_else(|e| fail("changing root", e));
    let workdir = if spec.workdir.is_empty() {
        "/"
    } else {
        &spec.workdir
    };
    std::env::set_current_dir(workdir).unwrap_or_else(|e| fail(workdir, e));
    if spec.no_new_privs {
        rustix::thread::set_no_new_privs(true).unwrap_or_else(|e| fail("no_new_privs", e));
    }
    if let Some(keep) = &spec.keep_caps {
        let kept = capability_set(keep).unwrap_or_else(|e| fail("capabilities", e));
        for bit in 0..64u32 {
            if let Some(one) = CapabilitySet::from_bits(1u64 << bit)
                && !kept.contains(one)
            {
                // Capabilities past the kernel's last one fail: nothing
                // to drop there.
                let _ = rustix::thread::remove_capability_from_bounding_set(one);
            }
        }
        rustix::thread::set_capabilities(
            None,
            CapabilitySets {
                effective: kept,
                permitted: kept,
                inheritable: kept,
            },
        )
        .unwrap_or_else(|e| fail("setting capabilities", e));
    }
    let Some((program, args)) = spec.argv.split_first() else {
        fail("the container", "has no command");
    };
    let e = Command::new(program)
        .args(args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .exec();
    fail(&format!("executing {program}"), e)
}

/// The capability set named by `names` (`NET_ADMIN`, with or without
/// `CAP_`).
pub fn capability_set(names: &[String]) -> Result<CapabilitySet, String> {
    let mut set = CapabilitySet::empty();
    for n in names {
        let n = n.trim_start_matches("CAP_").to_ascii_uppercase();
        let one = CapabilitySet::from_name(&n).ok_or_else(|| format!("unknown capability {n}"))?;
        set |= one;
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_named_as_kubernetes_names_them() {
        let set = capability_set(&["NET_ADMIN".into(), "CAP_SYS_TIME".into()]).unwrap();
        assert_eq!(set, CapabilitySet::NET_ADMIN | CapabilitySet::SYS_TIME);
        assert!(capability_set(&["FLY".into()]).is_err());
    }
}
