//! Boots: which slot and release a machine is running, and since when.
//!
//! init publishes a [`BootRecord`] in /run/liken at every boot; the
//! machine operator copies its public part ([`BootStatus`]) into the
//! Machine's status. The boot's identity is derived from its start time,
//! so a reboot request that names one boot (the request-reboot annotation)
//! means nothing to the next one and needs no cleanup.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::digest::Sha256Hex;
use crate::hash::sha256;
use crate::time::Time;
use crate::version::Version;

/// One of the two system slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Slot {
    /// Partition LIKEN-A, ESP directory /liken/a.
    A,
    /// Partition LIKEN-B, ESP directory /liken/b.
    B,
}

impl Slot {
    /// Both slots.
    pub const ALL: [Slot; 2] = [Slot::A, Slot::B];

    /// The slot a release is written into while this one runs.
    pub fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }

    /// The slot's name as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Slot::A => "A",
            Slot::B => "B",
        }
    }

    /// The GPT partition label of the slot's system image.
    pub fn partition_label(self) -> &'static str {
        match self {
            Slot::A => "LIKEN-A",
            Slot::B => "LIKEN-B",
        }
    }

    /// The slot's directory on the ESP, below /liken.
    pub fn esp_dir(self) -> &'static str {
        match self {
            Slot::A => "a",
            Slot::B => "b",
        }
    }
}

/// How a machine goes from one boot to the next when it reboots on
/// purpose (an update, a requested reboot).
///
/// `Kexec` lets the running kernel load the next boot's kernel and jump
/// to it, skipping the firmware (on a server, the one to five minutes of
/// POST and option ROMs that dominate a reboot); init counts the try on
/// the bootloader's entry itself, so the A/B fallback is unchanged.
/// `Firmware` goes through the firmware and the bootloader every time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RebootVia {
    /// Jump straight into the next boot's kernel (the default).
    #[default]
    Kexec,
    /// Reset through the firmware and the bootloader.
    Firmware,
}

impl RebootVia {
    /// Both, in the order the CRD enum lists them.
    pub const ALL: [RebootVia; 2] = [RebootVia::Kexec, RebootVia::Firmware];

    /// The name as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            RebootVia::Kexec => "kexec",
            RebootVia::Firmware => "firmware",
        }
    }

    /// The way a machine reboots: its Machine's choice, else its
    /// Cluster's, else kexec.
    pub fn decide(machine: Option<RebootVia>, cluster: Option<RebootVia>) -> RebootVia {
        machine.or(cluster).unwrap_or_default()
    }
}

impl fmt::Display for RebootVia {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The running boot, as the Machine's status reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootStatus {
    /// When init started this boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    /// The slot that booted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<Slot>,
    /// The release in that slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<Version>,
    /// How the boot was reached: by kexec from the previous boot, or
    /// through the firmware.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<RebootVia>,
    /// Why a reboot init made went through the firmware rather than by
    /// kexec (kexec was not asked for, not possible, or refused); absent
    /// after a kexec or a power-on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via_reason: Option<String>,
}

impl BootStatus {
    /// The boot's identity: SHA-256 over its start time in RFC 3339.
    /// `None` when no boot time is reported, because then there is no
    /// boot to name yet (the machine is starting, or never reported).
    pub fn boot_id(&self) -> Option<Sha256Hex> {
        self.time.map(|t| sha256(t.to_string().as_bytes()))
    }
}

/// What init publishes about the boot it made (/run/liken/facts/boot.json).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootRecord {
    /// When init started this boot.
    pub time: Time,
    /// The slot that booted; `None` when booted from install media or
    /// netboot with no slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<Slot>,
    /// The release that booted, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<Version>,
    /// The hash of each document this boot runs, by document
    /// ("machine", "cluster"), so the operator can tell a staged document
    /// from the running one.
    #[serde(default)]
    pub documents: BTreeMap<String, Sha256Hex>,
    /// How this boot stands with the bootloader's try counter, once init
    /// has looked (boot assessment); `None` for a boot with no slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assessment: Option<BootAssessment>,
    /// How the boot was reached ([`BootStatus::via`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<RebootVia>,
    /// Why the reboot into it went through the firmware
    /// ([`BootStatus::via_reason`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via_reason: Option<String>,
    /// The dm-verity root hash the booted slot's system image was opened
    /// with (from the entry's `liken.verity=`): every block of the root
    /// is checked against it as it is read. Absent when the root was
    /// mounted unverified (no `liken.verity=`, as on a BIOS machine
    /// booting through GRUB, or a release bundled without a tree), and
    /// when no slot is the root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_verity: Option<Sha256Hex>,
}

/// Boot assessment: whether the booted entry was on trial, whether init
/// has blessed it, and whether the other slot spent its tries (so this
/// boot is a fallback from it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootAssessment {
    /// The booted entry still had a try counter: a release on trial.
    pub counted: bool,
    /// The booted entry is blessed (this boot blessed it, or an earlier
    /// one did): the bootloader keeps booting this slot.
    pub blessed: bool,
    /// The other slot's entry has no tries left: a release written there
    /// failed to become healthy and the machine fell back to this slot.
    pub other_slot_bad: bool,
}

impl BootRecord {
    /// The part of the record the Machine's status carries.
    pub fn status(&self) -> BootStatus {
        BootStatus {
            time: Some(self.time),
            slot: self.slot,
            version: self.version.clone(),
            via: self.via,
            via_reason: self.via_reason.clone(),
        }
    }

    /// The boot's identity ([`BootStatus::boot_id`]).
    pub fn boot_id(&self) -> Sha256Hex {
        sha256(self.time.to_string().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_id_is_derived_from_the_boot_time() {
        let mut b = BootStatus::default();
        assert_eq!(b.boot_id(), None);
        b.time = Some(Time::from_unix(1_780_000_000));
        let id = b.boot_id().unwrap();
        // printf '2026-05-28T20:26:40Z' | sha256sum
        assert_eq!(id, sha256(b"2026-05-28T20:26:40Z"));
        assert_eq!(id.short().len(), 12);
        b.slot = Some(Slot::B);
        assert_eq!(b.boot_id().unwrap(), id, "only the time names the boot");
        b.time = Some(Time::from_unix(1_780_000_001));
        assert_ne!(b.boot_id().unwrap(), id);
    }

    #[test]
    fn reboot_via_machine_first_then_cluster_then_kexec() {
        use RebootVia::{Firmware, Kexec};
        assert_eq!(RebootVia::decide(None, None), Kexec);
        assert_eq!(RebootVia::decide(None, Some(Firmware)), Firmware);
        assert_eq!(RebootVia::decide(Some(Kexec), Some(Firmware)), Kexec);
        assert_eq!(RebootVia::decide(Some(Firmware), None), Firmware);
        assert_eq!(serde_json::to_string(&Firmware).unwrap(), r#""firmware""#);
        assert_eq!(
            serde_json::from_str::<RebootVia>(r#""kexec""#).unwrap(),
            Kexec
        );
        assert!(serde_json::from_str::<RebootVia>(r#""Kexec""#).is_err());
    }

    #[test]
    fn slots() {
        assert_eq!(Slot::A.other(), Slot::B);
        assert_eq!(Slot::B.partition_label(), "LIKEN-B");
        assert_eq!(Slot::A.esp_dir(), "a");
    }

    #[test]
    fn boot_record_round_trips() {
        let r = BootRecord {
            time: Time::from_unix(1_780_000_000),
            slot: Some(Slot::A),
            version: Some(Version::parse("2026.05.28-001").unwrap()),
            documents: [("machine".to_owned(), sha256(b"m"))].into(),
            assessment: Some(BootAssessment {
                counted: true,
                blessed: true,
                other_slot_bad: false,
            }),
            via: Some(RebootVia::Kexec),
            via_reason: None,
            root_verity: None,
        };
        let json = serde_json::to_string(&r).unwrap();
        assert!(
            json.starts_with(
                r#"{"time":"2026-05-28T20:26:40Z","slot":"A","version":"2026.05.28-001""#
            ),
            "{json}"
        );
        // An unverified root says nothing: a record from before the
        // field reads the same.
        assert!(!json.contains("rootVerity"), "{json}");
        assert_eq!(serde_json::from_str::<BootRecord>(&json).unwrap(), r);
        assert_eq!(Some(r.boot_id()), r.status().boot_id());
        let verified = BootRecord {
            root_verity: Some(sha256(b"tree")),
            ..r
        };
        let json = serde_json::to_string(&verified).unwrap();
        assert!(
            json.ends_with(&format!(r#","rootVerity":"{}"}}"#, sha256(b"tree"))),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<BootRecord>(&json).unwrap(), verified);
    }
}
