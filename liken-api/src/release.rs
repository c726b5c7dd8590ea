//! Release and channel documents: what a release directory holds and
//! which release a channel calls latest.
//!
//! `release.yaml` lists every artifact of one release with its SHA-256
//! and size. The Cluster's catalog pins release.yaml itself by digest, so
//! the chain of trust is: catalog digest → release.yaml → each artifact.
//! Nothing is used before its digest is checked against that chain.
//!
//! `channel.yaml` names the channel's latest version. It is advisory:
//! it tells a person (and the Cluster's status) that something newer
//! exists, but a machine only runs what the catalog pins.

use serde::{Deserialize, Serialize};

use crate::digest::{FileName, Sha256Hex};
use crate::meta::{API_VERSION, Kind, is_dns_label};
use crate::validate::{Problem, Problems, Validate};
use crate::version::Version;

/// The artifact name of the kernel image.
pub const ARTIFACT_KERNEL: &str = "kernel";
/// The artifact name of the initramfs holding liken-init (boot.cpio).
pub const ARTIFACT_BOOT: &str = "boot";
/// The artifact name of the squashfs system image written raw into a slot.
pub const ARTIFACT_SYSTEM: &str = "system";
/// The artifact name of the CPU microcode initramfs, loaded before boot.cpio.
pub const ARTIFACT_MICROCODE: &str = "microcode";
/// The artifact name of the `liken` workstation CLI shipped with the release.
pub const ARTIFACT_CLI: &str = "cli";
/// The artifact name of systemd-boot's EFI binary (UEFI machines).
pub const ARTIFACT_SYSTEMD_BOOT: &str = "systemd-boot";
/// The artifact name of GRUB's boot.img, the MBR stage (BIOS machines).
pub const ARTIFACT_GRUB_BOOT: &str = "grub-boot";
/// The artifact name of GRUB's core.img, the BIOS boot partition stage.
pub const ARTIFACT_GRUB_CORE: &str = "grub-core";
/// The artifact name of the licenses of everything the release ships.
pub const ARTIFACT_LICENSES: &str = "licenses";

/// The file name of a release document inside its release directory.
pub const RELEASE_FILE: &str = "release.yaml";
/// The file name of the channel document at a channel's root.
pub const CHANNEL_FILE: &str = "channel.yaml";

/// A release: `<channel>/<version>/release.yaml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Release {
    /// Always [`API_VERSION`].
    #[serde(default)]
    pub api_version: String,
    /// Always `Release`.
    #[serde(default)]
    pub kind: String,
    /// The release's version, also the name of its directory.
    pub version: Version,
    /// Every file of the release.
    pub artifacts: Vec<Artifact>,
    /// What went into it (kernel, k3s, liken), for people to read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<Component>,
}

/// One file of a release.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// What the file is (`kernel`, `boot`, `system`, ...).
    pub name: String,
    /// The file's name in the release directory.
    pub file: FileName,
    /// Its SHA-256.
    pub sha256: Sha256Hex,
    /// Its size in bytes.
    pub size: u64,
}

/// One component and its upstream version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Component {
    /// The component (`linux`, `k3s`).
    pub name: String,
    /// Its own version string, in its own scheme.
    pub version: String,
}

/// A channel: `<channel>/channel.yaml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Channel {
    /// Always [`API_VERSION`].
    #[serde(default)]
    pub api_version: String,
    /// Always `Channel`.
    #[serde(default)]
    pub kind: String,
    /// The newest version published to this channel.
    pub latest: Version,
}

impl Kind for Release {
    const KIND: &'static str = "Release";
    fn api_version(&self) -> &str {
        &self.api_version
    }
    fn kind(&self) -> &str {
        &self.kind
    }
}

impl Kind for Channel {
    const KIND: &'static str = "Channel";
    fn api_version(&self) -> &str {
        &self.api_version
    }
    fn kind(&self) -> &str {
        &self.kind
    }
}

impl Release {
    /// A release document with the given version and artifacts.
    pub fn new(version: Version, artifacts: Vec<Artifact>, components: Vec<Component>) -> Release {
        Release {
            api_version: API_VERSION.to_owned(),
            kind: <Release as Kind>::KIND.to_owned(),
            version,
            artifacts,
            components,
        }
    }

    /// The artifact of the given name.
    pub fn artifact(&self, name: &str) -> Option<&Artifact> {
        self.artifacts.iter().find(|a| a.name == name)
    }

    /// The total size of all artifacts, saturating.
    pub fn total_size(&self) -> u64 {
        self.artifacts
            .iter()
            .fold(0u64, |n, a| n.saturating_add(a.size))
    }
}

impl Channel {
    /// A channel document naming `latest`.
    pub fn new(latest: Version) -> Channel {
        Channel {
            api_version: API_VERSION.to_owned(),
            kind: <Channel as Kind>::KIND.to_owned(),
            latest,
        }
    }
}

impl Validate for Release {
    fn validate(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        if self.artifacts.is_empty() {
            p.add("artifacts", "a release lists at least one artifact");
        }
        for (i, a) in self.artifacts.iter().enumerate() {
            let earlier = &self.artifacts[..i];
            if !is_dns_label(&a.name) {
                p.add(
                    format!("artifacts[{i}].name"),
                    format!("{:?} is not a lower-case name", a.name),
                );
            }
            if earlier.iter().any(|o| o.name == a.name) {
                p.add(
                    format!("artifacts[{i}].name"),
                    format!("artifact {:?} is listed twice", a.name),
                );
            }
            if earlier.iter().any(|o| o.file == a.file) || a.file.as_str() == RELEASE_FILE {
                p.add(
                    format!("artifacts[{i}].file"),
                    format!("file {:?} is used twice", a.file.as_str()),
                );
            }
        }
        p.0
    }
}

impl Validate for Channel {
    fn validate(&self) -> Vec<Problem> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact(name: &str, file: &str) -> Artifact {
        Artifact {
            name: name.into(),
            file: FileName::parse(file).unwrap(),
            sha256: Sha256Hex::parse(&"0".repeat(64)).unwrap(),
            size: 10,
        }
    }

    #[test]
    fn lookups_and_checks() {
        let mut r = Release::new(
            Version::parse("2026.07.11-001").unwrap(),
            vec![
                artifact("kernel", "vmlinuz"),
                artifact("system", "system.squashfs"),
            ],
            vec![],
        );
        assert!(r.validate().is_empty());
        assert_eq!(
            r.artifact("system").unwrap().file.as_str(),
            "system.squashfs"
        );
        assert_eq!(r.total_size(), 20);
        r.artifacts.push(artifact("kernel", "vmlinuz"));
        r.artifacts.push(artifact("manifest", "release.yaml"));
        let fields: Vec<String> = r.validate().into_iter().map(|p| p.field).collect();
        assert_eq!(
            fields,
            [
                "artifacts[2].name",
                "artifacts[2].file",
                "artifacts[3].file"
            ]
        );
    }
}
