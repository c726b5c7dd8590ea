//! Reading the host and writing the files init reads: the operator's
//! side of `liken_api::ondisk`.
//!
//! Every path comes from [`HostPaths`], whose defaults are the real ones
//! (/run/liken, /var/lib/liken, /proc, /sys) and which tests point at a
//! scratch root. Reads are capped and every failure becomes a value in
//! [`Facts`] with the path and the reason, never a panic.
//!
//! Staging writes a document exactly as init's staged.rs reads it: the
//! document atomically (`liken_releases::files::replace`: temporary file,
//! fsync, rename, fsync of the directory), then its checksum file the
//! same way, so a checksum always
//! names a finished document. Unstaging removes the checksum first, so a
//! half-removed pair is a lone document, which init refuses as
//! unfinished rather than promoting.
//!
//! The operator's own per-boot records (what init was asked, what
//! release was written) live in a directory on /run, a tmpfs: a reboot
//! forgets them, which is exactly when they stop being true.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use liken_api::control::InitStatus;
use liken_api::hash::sha256;
use liken_api::ondisk::{
    BOOT_RECORD, Document, REJECTED_DIR, RELEASES_DIR, RUNNING_DIR, STAGED_DIR, render_checksum,
};
use liken_api::{BootRecord, Cluster, Machine, Sha256Hex, decode};
use liken_releases::files::{PRIVATE, PUBLIC, replace};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::machine::facts::{Facts, KernelFacts, Written, sysfs_module_name};
use crate::machine::turn::Asked;

/// The largest document or record the operator reads.
const MAX_DOCUMENT: u64 = 1024 * 1024;
/// The largest /proc or /sys file it reads.
const MAX_KERNEL_FILE: u64 = 64 * 1024;
/// The operator's directory below the run directory.
pub const STATE_DIR: &str = "machine-operator";
const ASKED_FILE: &str = "asked.json";
const WRITTEN_FILE: &str = "written.json";

/// Where the host's files are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPaths {
    /// What init publishes for this boot (`/run/liken`).
    pub run: PathBuf,
    /// liken's state on the data partition (`/var/lib/liken`).
    pub var: PathBuf,
    /// The host's /proc.
    pub proc_: PathBuf,
    /// The host's /sys.
    pub sys: PathBuf,
}

impl HostPaths {
    /// init's control socket.
    pub fn socket(&self) -> PathBuf {
        self.run.join("init.sock")
    }

    /// The boot record.
    pub fn boot_record(&self) -> PathBuf {
        self.run.join(BOOT_RECORD)
    }

    /// The running network's facts.
    pub fn network(&self) -> PathBuf {
        self.run.join(liken_api::ondisk::NETWORK_FACTS)
    }

    /// A document this boot runs.
    pub fn running(&self, doc: Document) -> PathBuf {
        self.run.join(RUNNING_DIR).join(doc.file_name())
    }

    /// The staged directory.
    pub fn staged_dir(&self) -> PathBuf {
        self.var.join(STAGED_DIR)
    }

    /// What init refused.
    pub fn rejected_dir(&self) -> PathBuf {
        self.var.join(REJECTED_DIR)
    }

    /// Where releases are downloaded, one directory per version.
    pub fn releases_dir(&self) -> PathBuf {
        self.var.join(RELEASES_DIR)
    }

    /// The operator's per-boot records.
    pub fn state_dir(&self) -> PathBuf {
        self.run.join(STATE_DIR)
    }
}

/// Reads at most `cap` bytes; more is an error naming the file.
fn read_capped(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let file = File::open(path)?;
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(io::Error::other(format!(
            "{} is larger than {cap} bytes",
            path.display()
        )));
    }
    Ok(bytes)
}

/// Reads a file that may be absent.
fn read_optional(path: &Path, cap: u64) -> Result<Option<Vec<u8>>, String> {
    match read_capped(path, cap) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, String> {
    let Some(bytes) = read_optional(path, MAX_DOCUMENT)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| format!("{} is not what this release writes: {e}", path.display()))
}

fn read_document<T>(path: &Path) -> Result<Option<T>, String>
where
    T: DeserializeOwned + liken_api::Kind + liken_api::validate::Validate,
{
    let Some(bytes) = read_optional(path, MAX_DOCUMENT)? else {
        return Ok(None);
    };
    let origin = path.display().to_string();
    let text = std::str::from_utf8(&bytes).map_err(|_| format!("{origin} is not UTF-8 text"))?;
    decode::strict::<T>(text, &origin)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The /proc/sys file of a sysctl key: a dotted key's dots are slashes,
/// a slashed key is a path already (init's rule, liken-init/src/sysctls.rs).
pub fn sysctl_path(proc_: &Path, key: &str) -> Option<PathBuf> {
    let path = if key.contains('/') {
        key.to_owned()
    } else {
        key.replace('.', "/")
    };
    let safe = !path.starts_with('/')
        && path
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..");
    safe.then(|| proc_.join("sys").join(path))
}

/// The kernel's side of a running Machine.
pub fn read_kernel(paths: &HostPaths, running: &Machine) -> KernelFacts {
    let mut facts = KernelFacts::default();
    for key in running.spec.sysctls.keys() {
        let value = match sysctl_path(&paths.proc_, key) {
            Some(path) => read_capped(&path, MAX_KERNEL_FILE)
                .map_err(|e| e.to_string())
                .and_then(|b| String::from_utf8(b).map_err(|_| "not text".to_owned())),
            None => Err("not a sysctl name".to_owned()),
        };
        facts.sysctls.insert(key.clone(), value);
    }
    for m in &running.spec.modules {
        let loaded = paths.sys.join("module").join(sysfs_module_name(m)).is_dir();
        facts.modules.insert(m.clone(), loaded);
    }
    facts.cmdline = read_capped(&paths.proc_.join("cmdline"), MAX_KERNEL_FILE)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|e| e.to_string());
    facts
}

/// The SHA-256 of each document staged now, by file name.
fn read_staged(paths: &HostPaths) -> BTreeMap<String, Sha256Hex> {
    let mut out = BTreeMap::new();
    for doc in Document::ALL {
        if let Ok(Some(bytes)) =
            read_optional(&paths.staged_dir().join(doc.file_name()), MAX_DOCUMENT)
        {
            out.insert(doc.file_name().to_owned(), sha256(&bytes));
        }
    }
    out
}

/// The SHA-256 of each document init refused, by its name in rejected/.
fn read_rejected(paths: &HostPaths) -> BTreeMap<String, Sha256Hex> {
    let mut out = BTreeMap::new();
    let Ok(entries) = fs::read_dir(paths.rejected_dir()) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_document = Document::ALL.iter().any(|d| {
            name.starts_with(d.file_name()) && !name.starts_with(&d.checksum_name().to_owned())
        });
        if !is_document {
            continue;
        }
        if let Ok(Some(bytes)) = read_optional(&entry.path(), MAX_DOCUMENT) {
            out.insert(name, sha256(&bytes));
        }
    }
    out
}

/// Reads everything a pass judges by, given init's answer.
pub fn read_facts(paths: &HostPaths, init: Result<InitStatus, String>) -> Facts {
    let record = read_json::<BootRecord>(&paths.boot_record());
    let running_machine = read_document::<Machine>(&paths.running(Document::Machine));
    let running_cluster = read_document::<Cluster>(&paths.running(Document::Cluster));
    let kernel = match &running_machine {
        Ok(Some(m)) => read_kernel(paths, m),
        _ => KernelFacts::default(),
    };
    let state = paths.state_dir();
    let network = read_json::<liken_api::network::NetworkFacts>(&paths.network()).transpose();
    Facts {
        init,
        record,
        running_machine,
        running_cluster,
        kernel,
        network,
        staged: read_staged(paths),
        rejected: read_rejected(paths),
        asked: read_json::<Asked>(&state.join(ASKED_FILE)).ok().flatten(),
        written: read_json::<Written>(&state.join(WRITTEN_FILE))
            .ok()
            .flatten(),
    }
}

/// Stages a document: the document, then its checksum.
pub fn stage(paths: &HostPaths, doc: Document, bytes: &[u8]) -> io::Result<()> {
    let dir = paths.staged_dir();
    fs::create_dir_all(&dir)?;
    replace(&dir.join(doc.file_name()), bytes, PUBLIC)?;
    let sum = render_checksum(&sha256(bytes), doc.file_name());
    replace(&dir.join(doc.checksum_name()), sum.as_bytes(), PUBLIC)
}

/// Takes a staged document back: the checksum first.
pub fn unstage(paths: &HostPaths, doc: Document) -> io::Result<()> {
    let dir = paths.staged_dir();
    for name in [doc.checksum_name(), doc.file_name()] {
        match fs::remove_file(dir.join(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    File::open(&dir).and_then(|d| d.sync_all()).or_else(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            Ok(())
        } else {
            Err(e)
        }
    })
}

fn write_state<T: Serialize>(paths: &HostPaths, name: &str, value: &T) -> io::Result<()> {
    let dir = paths.state_dir();
    fs::create_dir_all(&dir)?;
    let bytes = serde_json::to_vec(value).map_err(io::Error::other)?;
    replace(&dir.join(name), &bytes, PRIVATE)
}

/// Records what init was asked this boot.
pub fn record_asked(paths: &HostPaths, asked: &Asked) -> io::Result<()> {
    write_state(paths, ASKED_FILE, asked)
}

/// Forgets what init was asked (it refused).
pub fn forget_asked(paths: &HostPaths) -> io::Result<()> {
    match fs::remove_file(paths.state_dir().join(ASKED_FILE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Records the release written this boot.
pub fn record_written(paths: &HostPaths, written: &Written) -> io::Result<()> {
    write_state(paths, WRITTEN_FILE, written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::ondisk::parse_checksum;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> HostPaths {
        let root = std::env::temp_dir().join(format!("liken-host-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        HostPaths {
            run: root.join("run/liken"),
            var: root.join("var/lib/liken"),
            proc_: root.join("proc"),
            sys: root.join("sys"),
        }
    }

    #[test]
    fn staging_writes_the_document_then_its_checksum_and_unstaging_the_reverse() {
        let paths = scratch("stage");
        let bytes = b"apiVersion: liken.sh/v1alpha1\nkind: Machine\nmetadata:\n  name: m\n";
        stage(&paths, Document::Machine, bytes).unwrap();
        let dir = paths.staged_dir();
        assert_eq!(fs::read(dir.join("machine.yaml")).unwrap(), bytes);
        let sum = fs::read(dir.join("machine.yaml.sha256")).unwrap();
        assert_eq!(parse_checksum(&sum, "machine.yaml").unwrap(), sha256(bytes));
        let names: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "no temporary file left: {names:?}");
        for name in &names {
            let mode = fs::metadata(dir.join(name)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644, "init and the operator's readers read {name}");
        }
        let facts = read_facts(&paths, Err("no init".into()));
        assert_eq!(facts.staged.get("machine.yaml"), Some(&sha256(bytes)));
        unstage(&paths, Document::Machine).unwrap();
        assert!(fs::read_dir(&dir).unwrap().next().is_none());
        unstage(&paths, Document::Cluster).unwrap();
    }

    #[test]
    fn records_are_private_replaced_whole_and_read_back() {
        let paths = scratch("records");
        let first = Written {
            boot: sha256(b"boot one"),
            version: None,
            release_sha256: sha256(b"release one"),
        };
        record_written(&paths, &first).unwrap();
        let second = Written {
            release_sha256: sha256(b"release two"),
            ..first
        };
        record_written(&paths, &second).unwrap();
        let facts = read_facts(&paths, Err("no init".into()));
        assert_eq!(facts.written, Some(second));
        let names: Vec<String> = fs::read_dir(paths.state_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, [WRITTEN_FILE], "no temporary file left");
        let mode = fs::metadata(paths.state_dir().join(WRITTEN_FILE))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn what_is_missing_or_malformed_is_a_value_with_the_path() {
        let paths = scratch("facts");
        let facts = read_facts(&paths, Ok(InitStatus::default()));
        assert_eq!(facts.record, Ok(None));
        assert_eq!(facts.running_machine, Ok(None));
        fs::create_dir_all(paths.run.join("documents")).unwrap();
        fs::create_dir_all(paths.run.join(liken_api::ondisk::FACTS_DIR)).unwrap();
        fs::write(paths.boot_record(), "{not json").unwrap();
        fs::write(
            paths.running(Document::Machine),
            "apiVersion: liken.sh/v1alpha1\nkind: Machine\nmetadata:\n  name: m\n  labels: {}\n",
        )
        .unwrap();
        let facts = read_facts(&paths, Ok(InitStatus::default()));
        let e = facts.record.unwrap_err();
        assert!(e.contains("boot.json"), "{e}");
        let e = facts.running_machine.unwrap_err();
        assert!(e.contains("metadata.labels"), "{e}");
    }

    #[test]
    fn the_kernel_is_read_where_init_wrote_it() {
        let paths = scratch("kernel");
        fs::create_dir_all(paths.proc_.join("sys/vm")).unwrap();
        fs::create_dir_all(paths.proc_.join("sys/net/ipv4/conf/eth0.100")).unwrap();
        fs::create_dir_all(paths.sys.join("module/nf_conntrack")).unwrap();
        fs::write(paths.proc_.join("sys/vm/swappiness"), "10\n").unwrap();
        fs::write(
            paths.proc_.join("sys/net/ipv4/conf/eth0.100/forwarding"),
            "1\n",
        )
        .unwrap();
        fs::write(paths.proc_.join("cmdline"), "quiet console=ttyS0\n").unwrap();
        let mut m = Machine::new("m", Default::default());
        m.spec.sysctls.insert("vm.swappiness".into(), "10".into());
        m.spec
            .sysctls
            .insert("net/ipv4/conf/eth0.100/forwarding".into(), "1".into());
        m.spec.sysctls.insert("vm.absent".into(), "1".into());
        m.spec.modules = vec!["nf-conntrack".into(), "wireguard".into()];
        let k = read_kernel(&paths, &m);
        assert_eq!(k.sysctls["vm.swappiness"], Ok("10\n".into()));
        assert_eq!(
            k.sysctls["net/ipv4/conf/eth0.100/forwarding"],
            Ok("1\n".into())
        );
        assert!(k.sysctls["vm.absent"].is_err());
        assert!(k.modules["nf-conntrack"]);
        assert!(!k.modules["wireguard"]);
        assert_eq!(k.cmdline, Ok("quiet console=ttyS0\n".into()));
        assert_eq!(sysctl_path(Path::new("/proc"), "../x"), None);
        assert_eq!(sysctl_path(Path::new("/proc"), "vm..x"), None);
    }
}
