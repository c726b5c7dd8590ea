//! The plugin's record: which image digest each CLI reference is pinned
//! to on this workstation, and what is installed.
//!
//! A tag is a name a registry may move at any time, so `sync` pulls
//! only by digest. The first time it meets a tag it resolves it once,
//! asks (on a terminal) or needs `-pin` (in a script) before it trusts
//! the answer, and writes the pin here; from then on that reference
//! always pulls the pinned digest, whatever the tag names later. The
//! record also holds what was installed (reference and digest), which
//! `list` shows instead of running the CLI: a plugin is never executed
//! to learn its version.
//!
//! One JSON file per domain, `~/.liken/plugins/records/<domain>.json`,
//! written atomically. A record that cannot be read is an error naming
//! the file, never a silent re-pin.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What was installed, and from which pinned image.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Installed {
    /// The CLI image's tagged reference (`host/repo-cli:1.0`).
    pub reference: String,
    /// The digest it was pulled by.
    pub digest: String,
}

/// One domain's record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Tagged reference to the digest it is pinned to.
    #[serde(default)]
    pub pins: BTreeMap<String, String>,
    /// What is installed now, when anything is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed: Option<Installed>,
}

impl Record {
    /// The tag of the installed reference: the version `list` shows.
    pub fn installed_version(&self) -> Option<&str> {
        let r = &self.installed.as_ref()?.reference;
        let last = r.rsplit('/').next()?;
        last.rsplit_once(':').map(|(_, tag)| tag)
    }
}

/// The directory of records beside the plugin directory's `bin`.
pub fn dir(bin: &Path) -> PathBuf {
    liken_releases::files::parent(bin).join("records")
}

/// The record file of `domain`.
pub fn path(bin: &Path, domain: &str) -> PathBuf {
    dir(bin).join(format!("{domain}.json"))
}

/// Reads `domain`'s record; an absent file is an empty record.
pub fn read(bin: &Path, domain: &str) -> Result<Record, (PathBuf, String)> {
    let p = path(bin, domain);
    match std::fs::read(&p) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            (
                p,
                format!("{e}; fix or delete it, and `liken plugins sync -pin` pins again"),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Record::default()),
        Err(e) => Err((p, e.to_string())),
    }
}

/// Writes `domain`'s record atomically.
pub fn write(bin: &Path, domain: &str, record: &Record) -> Result<(), (PathBuf, String)> {
    let d = dir(bin);
    liken_releases::files::create_dirs(&d, 0o755).map_err(|e| (d.clone(), e.to_string()))?;
    let p = path(bin, domain);
    let mut bytes = serde_json::to_vec_pretty(record).map_err(|e| (p.clone(), e.to_string()))?;
    bytes.push(b'\n');
    liken_releases::files::replace(&p, &bytes, 0o644).map_err(|e| (p, e.to_string()))
}

/// How `sync` may come by a digest for a reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinDecision {
    /// The record pins it: pull this digest.
    Pinned(String),
    /// Not pinned: resolve the tag once and ask on the terminal.
    Ask,
    /// Not pinned: resolve the tag once and pin it (`-pin`).
    Pin,
    /// Not pinned, no terminal to ask on and no `-pin`: refuse.
    Refuse,
}

/// Decides how a reference gets its digest.
pub fn decide_pin(record: &Record, reference: &str, terminal: bool, pin: bool) -> PinDecision {
    match record.pins.get(reference) {
        Some(d) => PinDecision::Pinned(d.clone()),
        None if pin => PinDecision::Pin,
        None if terminal => PinDecision::Ask,
        None => PinDecision::Refuse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_reference_pulls_its_pin_and_a_new_tag_needs_consent() {
        let mut r = Record::default();
        r.pins.insert("h/a-cli:1".into(), "sha256:aa".into());
        assert_eq!(
            decide_pin(&r, "h/a-cli:1", false, false),
            PinDecision::Pinned("sha256:aa".into())
        );
        assert_eq!(
            decide_pin(&r, "h/a-cli:1", true, true),
            PinDecision::Pinned("sha256:aa".into()),
            "-pin never re-pins a tag that moved"
        );
        assert_eq!(
            decide_pin(&r, "h/a-cli:2", false, false),
            PinDecision::Refuse
        );
        assert_eq!(decide_pin(&r, "h/a-cli:2", true, false), PinDecision::Ask);
        assert_eq!(decide_pin(&r, "h/a-cli:2", false, true), PinDecision::Pin);
    }

    #[test]
    fn records_round_trip_and_name_the_installed_version() {
        let tmp = crate::testdir::TestDir::new("plugin-record");
        let bin = tmp.path().join("plugins/bin");
        assert_eq!(read(&bin, "audio").unwrap(), Record::default());
        let mut r = Record::default();
        r.pins
            .insert("127.0.0.1:5000/l/a-cli:1.0".into(), "sha256:ab".into());
        r.installed = Some(Installed {
            reference: "127.0.0.1:5000/l/a-cli:1.0".into(),
            digest: "sha256:ab".into(),
        });
        write(&bin, "audio", &r).unwrap();
        let back = read(&bin, "audio").unwrap();
        assert_eq!(back, r);
        assert_eq!(back.installed_version(), Some("1.0"));
        std::fs::write(path(&bin, "audio"), "{\"pins\": 3}").unwrap();
        let (p, why) = read(&bin, "audio").unwrap_err();
        assert!(p.ends_with("plugins/records/audio.json"), "{}", p.display());
        assert!(why.contains("fix or delete it"), "{why}");
    }
}
