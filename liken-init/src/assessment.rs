//! What boot assessment decided at boot: the [`Plan`] the `assess` step
//! keeps in the [`crate::context::Boot`], and its parts. The decisions
//! and the blessing itself are [`crate::bless`]'s; these plain types sit
//! below the steps so the boot context can hold them.

use std::path::PathBuf;
use std::time::Duration;

use liken_api::{BootAssessment, Slot};

/// Which bootloader counts this boot's tries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Loader {
    /// systemd-boot; the entry id it booted (LoaderEntrySelected).
    Uefi(String),
    /// GRUB, with grubenv.
    Grub,
}

/// The booted entry's standing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trial {
    /// The bootloader.
    pub loader: Loader,
    /// The slot whose entry booted.
    pub slot: Slot,
    /// It has a try counter: bless it once healthy.
    pub counted: bool,
    /// The other slot's entry has spent its tries.
    pub other_slot_bad: bool,
}

/// What makes the boot healthy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// The supervised service has stayed up this long.
    Uptime(Duration),
    /// The node is Ready with a heartbeat from this boot.
    K3s(K3sProbe),
    /// Nothing can make it healthy (no documents, no k3s); the reason.
    /// A boot on trial waits for its deadline all the same.
    Never(String),
    /// The boot failed in a way no waiting mends (its slot did not
    /// become the root); the reason. A boot on trial reboots at once.
    Broken(String),
}

/// How k3s's health is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct K3sProbe {
    /// The k3s binary (its `kubectl` subcommand).
    pub k3s: PathBuf,
    /// A kubeconfig k3s writes for this role.
    pub kubeconfig: PathBuf,
    /// This machine's node name (its hostname).
    pub node: String,
}

/// What the boot assessment decided at boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The entry's standing.
    pub trial: Trial,
    /// The health test.
    pub health: Health,
    /// How long the boot may take to become healthy.
    pub deadline: Duration,
    /// Whether this boot's entry is blessed (by this boot or before).
    pub blessed: bool,
}

impl Plan {
    /// The boot record's part.
    pub fn record(&self) -> BootAssessment {
        BootAssessment {
            counted: self.trial.counted,
            blessed: self.blessed,
            other_slot_bad: self.trial.other_slot_bad,
        }
    }
}
