//! What of the deployment layer a machine keeps, by its role.
//!
//! The layer `liken layer` packs carries the whole cluster identity: the
//! CA keys, the service-account key, the server token (which joins
//! servers and opens the datastore) and the agent token. A leader needs
//! all of it; a follower needs only to join as an agent: the agent
//! token (k3s-io/k3s pkg/daemons/control/deps/deps.go, genUsers: the
//! supervisor's `node` user, which cannot join a server) and the server
//! CA certificate, so it can check whom it talks to. The ESP is FAT,
//! without permissions, and a disk leaves a machine with it, so a
//! follower's ESP must hold nothing more.
//!
//! - Install mode writes a per-role layer to the ESP ([`pack`]): a
//!   leader's is the whole layer, a follower's only its documents,
//!   `identity/server/agent-token` and `identity/server/tls/server-ca.crt`.
//!   The stick and the netboot media keep the whole layer, since they
//!   install every machine of the fleet.
//! - At every boot, init copies into /run only what the role needs
//!   ([`keep`]): the same rule, so a leader's layer handed to a follower
//!   (an older install) leaves no key in its RAM either.
//!
//! A leader's ESP keeps the identity (CA keys, service key, both
//! tokens): a leader reinstalled, or whose data partition is lost, must
//! be able to come back as the same cluster without a person carrying
//! keys to it, and the boot partition is the only place that survives a
//! wiped LIKEN-DATA. The README says so.

use std::path::Path;

use liken_api::Role;
use liken_disk::cpio::{Archive, Body, Entry};

/// The identity's directory in the layer, below /etc/liken.
pub const IDENTITY_DIR: &str = "identity";
/// The identity files a follower keeps, below /etc/liken.
pub const FOLLOWER_IDENTITY: [&str; 2] = [
    "identity/server/agent-token",
    "identity/server/tls/server-ca.crt",
];
/// The layer's root in its archive.
pub const ARCHIVE_ROOT: &str = "etc/liken";
/// The largest layer file packed.
const MAX_FILE: u64 = 1 << 20;
/// How deep the layer's tree may go.
const MAX_DEPTH: u32 = 8;

/// Whether a machine of `role` keeps `rel` (a path below /etc/liken): a
/// leader everything; a follower everything outside the identity, the
/// identity files in [`FOLLOWER_IDENTITY`] and the directories on their
/// way.
pub fn keep(role: Role, rel: &str) -> bool {
    if role == Role::Leader {
        return true;
    }
    let in_identity = rel == IDENTITY_DIR || rel.starts_with("identity/");
    !in_identity
        || FOLLOWER_IDENTITY
            .iter()
            .any(|f| *f == rel || f.strip_prefix(rel).is_some_and(|r| r.starts_with('/')))
}

/// The per-role layer archive of the tree at `etc_liken` (the layer as
/// the initramfs unpacked it), with each file's mode kept: files and
/// directories below `etc/liken`, sorted, owner 0:0, mtime 0.
pub fn pack(etc_liken: &Path, role: Role) -> Result<Vec<u8>, String> {
    let mut archive = Archive::new();
    let mut add = |path: String, perm: u32, body: Body| {
        archive
            .add(Entry { path, perm, body })
            .map_err(|e| e.to_string())
    };
    add("etc".into(), 0o755, Body::Dir)?;
    add(ARCHIVE_ROOT.into(), 0o755, Body::Dir)?;
    walk(etc_liken, "", role, 0, &mut add)?;
    Ok(archive.finish())
}

fn walk(
    dir: &Path,
    rel: &str,
    role: Role,
    depth: u32,
    add: &mut dyn FnMut(String, u32, Body) -> Result<(), String>,
) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    if depth > MAX_DEPTH {
        return Err(format!("{} nests too deep for a layer", dir.display()));
    }
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for e in entries {
        let e = e.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let sub = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        if !keep(role, &sub) {
            continue;
        }
        let path = e.path();
        let meta = std::fs::symlink_metadata(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let perm = meta.permissions().mode() & 0o777;
        let archived = format!("{ARCHIVE_ROOT}/{sub}");
        if meta.is_dir() {
            add(archived, perm, Body::Dir)?;
            walk(&path, &sub, role, depth.saturating_add(1), add)?;
        } else {
            let bytes = crate::fsutil::read_capped(&path, MAX_FILE)
                .map_err(|e| format!("cannot pack {}: {e}", path.display()))?;
            add(archived, perm, Body::File(bytes))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_keeps_its_documents_the_agent_token_and_the_server_ca() {
        for rel in [
            "cluster.yaml",
            "machines",
            "machines/node-2.yaml",
            "identity",
            "identity/server",
            "identity/server/tls",
            "identity/server/tls/server-ca.crt",
            "identity/server/agent-token",
        ] {
            assert!(keep(Role::Follower, rel), "{rel}");
        }
        for rel in [
            "identity/server/token",
            "identity/server/tls/server-ca.key",
            "identity/server/tls/client-ca.crt",
            "identity/server/tls/service.key",
            "identity/server/tls/etcd",
            "identity/server/tls/etcd/peer-ca.key",
            "identity/server/agent-token.bak",
            "identity/kubeconfig",
        ] {
            assert!(!keep(Role::Follower, rel), "{rel}");
            assert!(keep(Role::Leader, rel), "{rel}");
        }
    }

    /// The packed layers, listed by GNU cpio (the format the kernel
    /// unpacks): a follower's holds no key and no server token, modes
    /// kept; a leader's holds everything.
    #[test]
    fn packed_layers_read_back_with_cpio() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("liken-init-rolepack-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let layer = dir.join("etc-liken");
        for (rel, text, mode) in [
            ("cluster.yaml", "c", 0o644),
            ("machines/node-2.yaml", "m", 0o644),
            ("identity/server/token", "K10x::server:s", 0o600),
            ("identity/server/agent-token", "K10x::node:a", 0o600),
            ("identity/server/tls/server-ca.crt", "CERT", 0o644),
            ("identity/server/tls/server-ca.key", "KEY", 0o600),
        ] {
            let p = layer.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let list = |role: Role| {
            let archive = dir.join("layer.cpio");
            std::fs::write(&archive, pack(&layer, role).unwrap()).unwrap();
            let out = std::process::Command::new("cpio")
                .args(["-itv", "--quiet", "-F"])
                .arg(&archive)
                .output()
                .expect("GNU cpio (scripts/setup.sh installs it)");
            assert!(out.status.success(), "{out:?}");
            let text = String::from_utf8(out.stdout).unwrap();
            let mut files: Vec<String> = text
                .lines()
                .filter(|l| l.starts_with('-'))
                .map(|l| {
                    let w: Vec<&str> = l.split_whitespace().collect();
                    format!("{} {}", w[0], w[w.len() - 1])
                })
                .collect();
            files.sort();
            files
        };
        assert_eq!(
            list(Role::Follower),
            [
                "-rw------- etc/liken/identity/server/agent-token",
                "-rw-r--r-- etc/liken/cluster.yaml",
                "-rw-r--r-- etc/liken/identity/server/tls/server-ca.crt",
                "-rw-r--r-- etc/liken/machines/node-2.yaml",
            ]
        );
        assert_eq!(list(Role::Leader).len(), 6);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
