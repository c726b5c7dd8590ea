//! Release and channel documents: what a release directory holds and
//! which release a channel calls latest.
//!
//! `release.yaml` lists every artifact of one release with its SHA-256
//! and size. The Cluster's catalog pins release.yaml itself by digest, so
//! the chain of trust is: catalog digest → release.yaml → each artifact.
//! Nothing is used before its digest is checked against that chain.
//!
//! A release may also carry a [`Verity`] record for its system artifact:
//! the dm-verity root hash and geometry of the hash tree `liken bundle`
//! appends to the squashfs. It sits in release.yaml so the release's
//! digest and signature cover it; the root hash is what lets the kernel
//! check every block of a slot as it reads it. Releases from before the
//! record have none and still read.
//!
//! A release bundled for Secure Boot also carries one signed unified
//! kernel image per slot ([`ARTIFACT_UKI_A`], [`ARTIFACT_UKI_B`]: the
//! kernel, the initrds and the slot's command line with the verity root
//! hash, in one PE file signed by the fleet's db key) and a [`Uki`]
//! record of the command line they were built with. Their sizes and
//! digests sit among the artifacts, so the release's signature covers
//! them like any other file.
//!
//! `channel.yaml` names the channel's latest version. It is advisory:
//! it tells a person (and the Cluster's status) that something newer
//! exists, but a machine only runs what the catalog pins.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::digest::{FileName, Sha256Hex};
use crate::meta::{API_VERSION, Kind, is_dns_label};
use crate::time::Time;
use crate::validate::{Problem, Problems, Validate};
use crate::version::Version;

/// The artifact name of the kernel image.
pub const ARTIFACT_KERNEL: &str = "kernel";
/// The artifact name of the initramfs holding liken-init (boot.cpio).
pub const ARTIFACT_BOOT: &str = "boot";
/// The artifact name of the squashfs system image written raw into a slot,
/// with its dm-verity hash tree appended (see [`Verity`]).
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
/// The artifact name of slot A's signed unified kernel image.
pub const ARTIFACT_UKI_A: &str = "uki-a";
/// The artifact name of slot B's signed unified kernel image.
pub const ARTIFACT_UKI_B: &str = "uki-b";

/// The artifact name of `slot`'s unified kernel image.
pub fn uki_artifact(slot: crate::boot::Slot) -> &'static str {
    match slot {
        crate::boot::Slot::A => ARTIFACT_UKI_A,
        crate::boot::Slot::B => ARTIFACT_UKI_B,
    }
}

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
    /// The dm-verity hash tree appended to the system artifact, if the
    /// release was bundled with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verity: Option<Verity>,
    /// How the release's unified kernel images were built, when it
    /// carries them (`liken bundle -secureboot-key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uki: Option<Uki>,
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

/// The block size a [`Verity`] record allows, for data and hash blocks:
/// the page size the kernel's dm-verity target needs a data block not to
/// exceed, and veritysetup's default.
pub const VERITY_BLOCK_SIZE: u64 = 4096;
/// The hash a [`Verity`] record allows.
pub const VERITY_ALGORITHM: &str = "sha256";
/// The longest salt a [`Verity`] record allows, in bytes: veritysetup's
/// limit.
pub const VERITY_MAX_SALT: usize = 256;

/// The dm-verity hash tree of the system artifact (hash format 1, no
/// superblock, as `veritysetup format --no-superblock` writes it): the
/// artifact holds the squashfs zero-padded to `hashOffset` bytes, then
/// the hash area. These are the parameters of the kernel's verity table
/// and of `veritysetup verify`; `dataBlocks` and `hashOffset` say where
/// the data ends and the tree begins.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verity {
    /// The root hash of the tree.
    pub root_hash: Sha256Hex,
    /// The salt hashed before every block, as lower-case hex.
    pub salt: String,
    /// Where the hash area starts in the system artifact, in bytes:
    /// `dataBlocks` × `dataBlockSize`.
    pub hash_offset: u64,
    /// The data block size in bytes: 4096.
    pub data_block_size: u64,
    /// The hash block size in bytes: 4096.
    pub hash_block_size: u64,
    /// The hash: `sha256`.
    pub algorithm: String,
    /// How many data blocks the tree covers.
    pub data_blocks: u64,
}

/// The unified kernel images of a release: one per slot, artifacts
/// [`ARTIFACT_UKI_A`] and [`ARTIFACT_UKI_B`]. Each image's command line
/// is `liken.slot=<slot> liken.verity=<the verity record> ` followed by
/// `commandLine`, the same for every machine that boots the release:
/// under Secure Boot systemd-boot's stub ignores any command line the
/// bootloader passes, so per-machine kernel arguments cannot reach a
/// UKI boot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Uki {
    /// The arguments after the slot and the root hash
    /// (`panic=10 console=tty0 console=ttyS0,115200` by default).
    pub command_line: String,
}

/// The longest [`Uki::command_line`]: the kernel's own limit on x86 is
/// 2048 bytes, and the slot and root hash take about 500 of them.
pub const UKI_MAX_COMMAND_LINE: usize = 1024;

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
    /// Raised by one each time channel.yaml is written: a signed channel
    /// whose serial goes backwards is an old document served again (a
    /// replay), which [`decide_channel_freshness`] refuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<u64>,
    /// When this document stops being news: a signed channel past it has
    /// stopped moving (a frozen mirror, or a server held back), so the
    /// publisher publishes before then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Time>,
}

/// How long a channel.yaml written by `liken bundle` stays fresh unless
/// told otherwise: a weekly release rhythm with a week to spare.
pub const DEFAULT_CHANNEL_VALIDITY_DAYS: u32 = 14;

/// [`ChannelRefusal::Replayed`]'s condition reason.
pub const CHANNEL_REPLAYED: &str = "ChannelReplayed";
/// [`ChannelRefusal::Stale`]'s condition reason.
pub const CHANNEL_STALE: &str = "ChannelStale";

/// Why a channel document is not taken as the channel's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChannelRefusal {
    /// Its serial is below one already seen: an old document served
    /// again.
    Replayed {
        /// The serial seen before.
        seen: u64,
        /// The serial served now (none: a document from before serials).
        served: Option<u64>,
    },
    /// It is past its expiry, or names none: the channel stopped moving.
    Stale {
        /// Its expiry, if it has one.
        expired: Option<Time>,
    },
}

impl ChannelRefusal {
    /// The condition reason the cluster operator raises for it.
    pub fn reason(&self) -> &'static str {
        match self {
            ChannelRefusal::Replayed { .. } => CHANNEL_REPLAYED,
            ChannelRefusal::Stale { .. } => CHANNEL_STALE,
        }
    }
}

impl fmt::Display for ChannelRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChannelRefusal::Replayed { seen, served } => write!(
                f,
                "channel.yaml's serial is {} but serial {seen} was seen before: the server is \
                 handing out an older channel document; the last answer is kept. Check the \
                 release server or the mirror in front of it",
                served.map_or_else(|| "missing".to_owned(), |s| s.to_string()),
            ),
            ChannelRefusal::Stale { expired: Some(t) } => write!(
                f,
                "channel.yaml expired at {t}: the channel has stopped moving (a frozen mirror, \
                 or a publisher who has not published since); the last answer is kept. Publish \
                 again with `liken bundle`, which writes a fresh one"
            ),
            ChannelRefusal::Stale { expired: None } => write!(
                f,
                "channel.yaml names no expiry, so nothing shows it is current; the last answer \
                 is kept. Publish again with `liken bundle`, which writes one"
            ),
        }
    }
}

/// Whether a signed channel document may be taken as the channel's
/// answer: not past its expiry (one without any is stale, as nothing
/// shows it is current) and its serial not below `seen`, the highest
/// serial taken before. An equal serial is the same document asked again.
pub fn decide_channel_freshness(
    channel: &Channel,
    seen: Option<u64>,
    now: Time,
) -> Result<(), ChannelRefusal> {
    if let Some(seen) = seen
        && channel.serial.is_none_or(|s| s < seen)
    {
        return Err(ChannelRefusal::Replayed {
            seen,
            served: channel.serial,
        });
    }
    match channel.expires {
        Some(t) if now < t => Ok(()),
        expired => Err(ChannelRefusal::Stale { expired }),
    }
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
            verity: None,
            uki: None,
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
            serial: None,
            expires: None,
        }
    }

    /// The next channel document after `previous`: `latest`, the serial
    /// one past the previous one's (1 for a first), fresh until
    /// `expires`.
    pub fn next(previous: Option<&Channel>, latest: Version, expires: Time) -> Channel {
        let serial = previous
            .and_then(|p| p.serial)
            .map_or(1, |s| s.saturating_add(1));
        Channel {
            serial: Some(serial),
            expires: Some(expires),
            ..Channel::new(latest)
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
        if let Some(v) = &self.verity {
            v.check(self.artifact(ARTIFACT_SYSTEM), &mut p);
        }
        let ukis = [ARTIFACT_UKI_A, ARTIFACT_UKI_B].map(|n| self.artifact(n).is_some());
        match &self.uki {
            None if ukis.contains(&true) => p.add(
                "uki",
                "the release lists a unified kernel image but no uki record; bundle it again \
                 with -secureboot-key",
            ),
            None => {}
            Some(u) => {
                if ukis != [true, true] {
                    p.add(
                        "uki",
                        format!(
                            "a uki record needs both {ARTIFACT_UKI_A:?} and {ARTIFACT_UKI_B:?} \
                             artifacts"
                        ),
                    );
                }
                if self.verity.is_none() {
                    p.add(
                        "uki",
                        "a unified kernel image carries the slot's root hash, so the release \
                         needs a verity record",
                    );
                }
                if u.command_line.len() > UKI_MAX_COMMAND_LINE
                    || u.command_line.bytes().any(|b| !(0x20..0x7f).contains(&b))
                {
                    p.add(
                        "uki.commandLine",
                        format!(
                            "must be printable ASCII of at most {UKI_MAX_COMMAND_LINE} bytes \
                             on one line"
                        ),
                    );
                }
            }
        }
        p.0
    }
}

impl Verity {
    /// The record's own checks, and that the system artifact it
    /// describes is there and large enough to hold the data it covers.
    /// Only the one format bundle writes is accepted, so a record that
    /// reads is one init can hand to the kernel as it is.
    fn check(&self, system: Option<&Artifact>, p: &mut Problems) {
        let salt_ok = !self.salt.is_empty()
            && self.salt.len().is_multiple_of(2)
            && self.salt.len() <= 2 * VERITY_MAX_SALT
            && self
                .salt
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !salt_ok {
            p.add(
                "verity.salt",
                format!(
                    "{:?} is not a salt: it must be 1 to {VERITY_MAX_SALT} bytes written as an \
                     even number of lower-case hex digits",
                    self.salt
                ),
            );
        }
        if self.algorithm != VERITY_ALGORITHM {
            p.add(
                "verity.algorithm",
                format!(
                    "{:?} is not supported; liken's verity trees use {VERITY_ALGORITHM}",
                    self.algorithm
                ),
            );
        }
        for (field, size) in [
            ("verity.dataBlockSize", self.data_block_size),
            ("verity.hashBlockSize", self.hash_block_size),
        ] {
            if size != VERITY_BLOCK_SIZE {
                p.add(
                    field,
                    format!(
                        "{size} is not supported; liken's verity trees use {VERITY_BLOCK_SIZE}"
                    ),
                );
            }
        }
        if self.data_blocks == 0 {
            p.add(
                "verity.dataBlocks",
                "a verity tree covers at least one block",
            );
        }
        if !self.hash_offset.is_multiple_of(VERITY_BLOCK_SIZE) {
            p.add(
                "verity.hashOffset",
                format!(
                    "{} is not a multiple of {VERITY_BLOCK_SIZE}: the hash area starts on a block",
                    self.hash_offset
                ),
            );
        } else if self.data_blocks.checked_mul(VERITY_BLOCK_SIZE) != Some(self.hash_offset) {
            p.add(
                "verity.hashOffset",
                format!(
                    "{} is not dataBlocks × {VERITY_BLOCK_SIZE} ({} × {VERITY_BLOCK_SIZE}): the \
                     hash area starts right after the data",
                    self.hash_offset, self.data_blocks
                ),
            );
        }
        match system {
            None => p.add(
                "verity",
                format!("the release has no {ARTIFACT_SYSTEM:?} artifact for the tree to cover"),
            ),
            Some(a) if a.size < self.hash_offset => p.add(
                "verity",
                format!(
                    "the system artifact is {} bytes, shorter than the {} bytes of data the tree \
                     covers",
                    a.size, self.hash_offset
                ),
            ),
            Some(_) => {}
        }
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

    /// A release whose 2 MiB + 5 bytes system artifact carries a verity
    /// record: 513 data blocks, then a 5-block tree.
    fn verified() -> Release {
        let mut r = Release::new(
            Version::parse("2026.12.06-001").unwrap(),
            vec![Artifact {
                size: 513 * 4096 + 5 * 4096,
                ..artifact("system", "liken.sqfs")
            }],
            vec![],
        );
        r.verity = Some(Verity {
            root_hash: Sha256Hex::parse(&"ab".repeat(32)).unwrap(),
            salt: "0f".repeat(32),
            hash_offset: 513 * 4096,
            data_block_size: 4096,
            hash_block_size: 4096,
            algorithm: "sha256".into(),
            data_blocks: 513,
        });
        r
    }

    #[test]
    fn a_uki_record_needs_both_images_and_a_verity_record() {
        let mut r = verified();
        r.artifacts.push(artifact("uki-a", "liken-a.efi"));
        r.artifacts.push(artifact("uki-b", "liken-b.efi"));
        // Images without the record.
        let fields: Vec<String> = r.validate().into_iter().map(|p| p.field).collect();
        assert_eq!(fields, ["uki"]);
        r.uki = Some(Uki {
            command_line: "panic=10 console=ttyS0,115200".into(),
        });
        assert!(r.validate().is_empty(), "{:?}", r.validate());
        let text = crate::decode::to_yaml(&r).unwrap();
        assert!(
            text.contains("uki:\n  commandLine: panic=10 console=ttyS0,115200\n"),
            "{text}"
        );
        let back: Release = crate::decode::strict(&text, "release.yaml").unwrap();
        assert_eq!(back, r);
        // Strict: a field the record does not have is named.
        let e = crate::decode::strict::<Release>(
            &text.replace("uki:\n", "uki:\n  addons: []\n"),
            "release.yaml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("uki.addons"), "{e}");
        // One slot's image alone, no verity record, a second line.
        let mut one = r.clone();
        one.artifacts.retain(|a| a.name != "uki-b");
        assert!(one.validate().iter().any(|p| p.field == "uki"));
        let mut unverified = r.clone();
        unverified.verity = None;
        assert!(unverified.validate().iter().any(|p| p.field == "uki"));
        let mut two_lines = r.clone();
        two_lines.uki = Some(Uki {
            command_line: "panic=10\ninit=/bin/sh".into(),
        });
        assert!(
            two_lines
                .validate()
                .iter()
                .any(|p| p.field == "uki.commandLine")
        );
    }

    #[test]
    fn a_verity_record_round_trips_and_an_old_release_reads_without_one() {
        let r = verified();
        assert!(r.validate().is_empty(), "{:?}", r.validate());
        let text = crate::decode::to_yaml(&r).unwrap();
        let record = text.split_once("verity:\n").unwrap().1;
        assert!(
            record.starts_with(&format!(
                "  rootHash: {}\n  salt: {}\n  hashOffset: 2101248\n  dataBlockSize: 4096\n  \
                 hashBlockSize: 4096\n  algorithm: sha256\n  dataBlocks: 513\n",
                "ab".repeat(32),
                "0f".repeat(32)
            )),
            "{text}"
        );
        let back: Release = crate::decode::strict(&text, "release.yaml").unwrap();
        assert_eq!(back, r);

        // Without the record nothing of it is written, and such a file
        // (every release before it) still reads.
        let old = Release {
            verity: None,
            ..r.clone()
        };
        let text = crate::decode::to_yaml(&old).unwrap();
        assert!(!text.contains("verity"), "{text}");
        let back: Release = crate::decode::strict(&text, "release.yaml").unwrap();
        assert_eq!(back.verity, None);

        // The strict decoder names a field the record does not have.
        let text = crate::decode::to_yaml(&r)
            .unwrap()
            .replace("  dataBlocks: 513\n", "  dataBlocks: 513\n  fec: true\n");
        let e = crate::decode::strict::<Release>(&text, "release.yaml").unwrap_err();
        assert!(e.to_string().contains("verity.fec"), "{e}");
        // And a root hash that is not one fails to decode.
        let text = crate::decode::to_yaml(&r)
            .unwrap()
            .replace(&"ab".repeat(32), &"AB".repeat(32));
        let e = crate::decode::strict::<Release>(&text, "release.yaml").unwrap_err();
        assert!(e.to_string().contains("lower-case hex"), "{e}");
    }

    #[test]
    fn a_verity_record_is_held_to_the_one_format_bundle_writes() {
        let problems = |change: &dyn Fn(&mut Release)| {
            let mut r = verified();
            change(&mut r);
            r.validate()
                .into_iter()
                .map(|p| format!("{p}"))
                .collect::<Vec<_>>()
        };
        fn v(r: &mut Release) -> &mut Verity {
            r.verity.as_mut().unwrap()
        }
        type Change<'a> = &'a dyn Fn(&mut Release);
        let cases: [(Change, &str); 13] = [
            (
                &|r| v(r).salt = String::new(),
                "verity.salt: \"\" is not a salt",
            ),
            (&|r| v(r).salt = "abc".into(), "verity.salt: \"abc\""),
            (&|r| v(r).salt = "0F".into(), "verity.salt: \"0F\""),
            (&|r| v(r).salt = "zz".into(), "verity.salt: \"zz\""),
            (&|r| v(r).salt = "00".repeat(257), "verity.salt"),
            (
                &|r| v(r).algorithm = "sha1".into(),
                "verity.algorithm: \"sha1\" is not supported",
            ),
            (
                &|r| v(r).data_block_size = 512,
                "verity.dataBlockSize: 512 is not supported",
            ),
            (
                &|r| v(r).hash_block_size = 8192,
                "verity.hashBlockSize: 8192 is not supported",
            ),
            (
                &|r| v(r).hash_offset += 1,
                "verity.hashOffset: 2101249 is not a multiple of 4096",
            ),
            (
                &|r| v(r).hash_offset += 4096,
                "verity.hashOffset: 2105344 is not dataBlocks × 4096 (513 × 4096)",
            ),
            (
                &|r| {
                    v(r).data_blocks = 0;
                    v(r).hash_offset = 0;
                },
                "verity.dataBlocks: a verity tree covers at least one block",
            ),
            (
                &|r| r.artifacts[0].size = 513 * 4096 - 1,
                "verity: the system artifact is 2101247 bytes, shorter than",
            ),
            (
                &|r| r.artifacts[0].name = "kernel".into(),
                "verity: the release has no \"system\" artifact",
            ),
        ];
        for (change, expected) in cases {
            let found = problems(change);
            assert!(
                found.len() == 1 && found[0].starts_with(expected),
                "expected {expected:?}, found {found:?}"
            );
        }
        // The longest salt veritysetup takes is fine, and so is a
        // one-block image whose tree is empty.
        assert!(problems(&|r| v(r).salt = "00".repeat(256)).is_empty());
        assert!(
            problems(&|r| {
                v(r).data_blocks = 1;
                v(r).hash_offset = 4096;
                r.artifacts[0].size = 4096;
            })
            .is_empty()
        );
    }

    fn channel(serial: Option<u64>, expires: Option<i64>) -> Channel {
        Channel {
            serial,
            expires: expires.map(Time::from_unix),
            ..Channel::new(Version::parse("2026.12.05-001").unwrap())
        }
    }

    #[test]
    fn a_channel_is_fresh_until_it_expires_and_while_its_serial_does_not_go_back() {
        let now = Time::from_unix(1_000);
        assert_eq!(
            decide_channel_freshness(&channel(Some(3), Some(1_001)), None, now),
            Ok(())
        );
        // The same document asked again, and a newer one.
        assert_eq!(
            decide_channel_freshness(&channel(Some(3), Some(1_001)), Some(3), now),
            Ok(())
        );
        assert_eq!(
            decide_channel_freshness(&channel(Some(4), Some(1_001)), Some(3), now),
            Ok(())
        );

        let replayed = decide_channel_freshness(&channel(Some(2), Some(9_999)), Some(3), now);
        assert_eq!(
            replayed,
            Err(ChannelRefusal::Replayed {
                seen: 3,
                served: Some(2)
            })
        );
        let e = replayed.unwrap_err();
        assert_eq!(e.reason(), "ChannelReplayed");
        assert!(
            e.to_string().contains("serial is 2 but serial 3 was seen"),
            "{e}"
        );
        // A document from before serials, served after one with a serial.
        assert_eq!(
            decide_channel_freshness(&channel(None, Some(9_999)), Some(1), now),
            Err(ChannelRefusal::Replayed {
                seen: 1,
                served: None
            })
        );

        // Expiry is exclusive: at the instant it names, it is over.
        let stale = decide_channel_freshness(&channel(Some(3), Some(1_000)), Some(3), now);
        assert_eq!(
            stale,
            Err(ChannelRefusal::Stale {
                expired: Some(Time::from_unix(1_000))
            })
        );
        assert_eq!(stale.unwrap_err().reason(), "ChannelStale");
        let e = decide_channel_freshness(&channel(Some(1), None), None, now).unwrap_err();
        assert_eq!(
            e.to_string(),
            "channel.yaml names no expiry, so nothing shows it is current; the last answer is \
             kept. Publish again with `liken bundle`, which writes one"
        );
        // Every message reads as one sentence run, not a source layout.
        for e in [
            ChannelRefusal::Replayed {
                seen: 3,
                served: Some(2),
            },
            ChannelRefusal::Stale { expired: Some(now) },
            ChannelRefusal::Stale { expired: None },
        ] {
            assert!(!e.to_string().contains("  "), "{e}");
        }
    }

    #[test]
    fn the_next_channel_document_raises_the_serial() {
        let v = Version::parse("2026.12.05-002").unwrap();
        let t = Time::from_unix(5);
        let first = Channel::next(None, v.clone(), t);
        assert_eq!((first.serial, first.expires), (Some(1), Some(t)));
        let second = Channel::next(Some(&first), v.clone(), t);
        assert_eq!(second.serial, Some(2));
        // A channel written before serials starts them at 1.
        assert_eq!(
            Channel::next(Some(&Channel::new(v.clone())), v, t).serial,
            Some(1)
        );
        // And the fields survive a round trip through YAML.
        let text = crate::decode::to_yaml(&second).unwrap();
        assert!(
            text.contains("serial: 2") && text.contains("expires: "),
            "{text}"
        );
        let back: Channel = crate::decode::strict(&text, "channel.yaml").unwrap();
        assert_eq!(back, second);
        // An old channel.yaml without them still reads, and writes as it was.
        let old = "apiVersion: liken.sh/v1alpha1\nkind: Channel\nlatest: 2026.12.05-002\n";
        let back: Channel = crate::decode::strict(old, "channel.yaml").unwrap();
        assert_eq!((back.serial, back.expires), (None, None));
    }
}
