//! The boot record: what this boot is, published for the machine
//! operator as /run/liken/facts/boot.json (`liken_api::BootRecord`).
//!
//! The record is decided from what the earlier steps found (start
//! time, slot, version, the documents' canonical hashes) by a pure
//! function, then written atomically, so the operator never reads half
//! a record.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use liken_api::{BootRecord, Cluster, Machine, RebootVia, Slot, Time, Version};

use crate::fsutil::write_atomic;

/// The record's file name under /run/liken.
pub const FILE: &str = liken_api::ondisk::BOOT_RECORD;

/// The record for this boot. `via`: how it was reached, and why through
/// the firmware when the last shutdown said ([`crate::kexec::decide_via`];
/// `None` for a boot with no slot, from install media or netboot).
pub fn decide_record(
    started: Time,
    slot: Option<Slot>,
    version: Option<Version>,
    machine: Option<&Machine>,
    cluster: Option<&Cluster>,
    via: Option<(RebootVia, Option<String>)>,
) -> BootRecord {
    let mut documents = BTreeMap::new();
    if let Some(m) = machine {
        documents.insert("machine".to_owned(), m.canonical_hash());
    }
    if let Some(c) = cluster {
        documents.insert("cluster".to_owned(), c.canonical_hash());
    }
    BootRecord {
        time: started,
        slot,
        version,
        documents,
        assessment: None,
        via: via.as_ref().map(|(v, _)| *v),
        via_reason: via.and_then(|(_, why)| why),
        root_verity: None,
    }
}

/// The release version this init was built for, when the build set a
/// real one (a plain `cargo build` says `dev`, which is no release).
pub fn build_version() -> Option<Version> {
    Version::parse(liken_api::BUILD_VERSION).ok()
}

/// Writes the record into `dir`; returns the file's path.
pub fn publish(dir: &Path, record: &BootRecord) -> io::Result<PathBuf> {
    // Compact JSON, as the network facts and the seeded ConfigMap: their
    // readers are programs, and the pretty printer's code was about 3 kB
    // of init's size budget.
    let mut bytes = serde_json::to_vec(record).map_err(io::Error::other)?;
    bytes.push(b'\n');
    let path = dir.join(FILE);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    write_atomic(&path, &bytes, 0o644)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::MachineSpec;

    #[test]
    fn the_record_names_the_documents_it_booted() {
        let m = Machine::new("web-1", MachineSpec::default());
        let r = decide_record(
            Time::from_unix(1_780_000_000),
            Some(Slot::B),
            None,
            Some(&m),
            None,
            Some((RebootVia::Firmware, Some("kexec is disabled".into()))),
        );
        assert_eq!(r.via, Some(RebootVia::Firmware));
        assert_eq!(r.via_reason.as_deref(), Some("kexec is disabled"));
        assert_eq!(r.documents.get("machine"), Some(&m.canonical_hash()));
        assert!(!r.documents.contains_key("cluster"));
        assert_eq!(r.slot, Some(Slot::B));

        let dir = std::env::temp_dir().join(format!("liken-init-rec-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = publish(&dir, &r).unwrap();
        let back: BootRecord = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        assert_eq!(back, r);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
