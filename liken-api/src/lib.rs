//! The vocabulary of the `liken.sh/v1alpha1` API group.
//!
//! Every liken program speaks these types: init reads the Machine and
//! Cluster it booted with, the operators read and write them through the
//! API server, and the CLI writes them for people. This crate holds the
//! shapes and the rules that belong to the shapes (how a condition
//! transitions, how versions order, what a valid Machine is, how a
//! document hashes) and nothing that does I/O, so init links it without
//! pulling in a network stack.
//!
//! Module map:
//! - [`meta`]: the group, `ObjectMeta`, the [`meta::Kind`] trait.
//! - [`phase`], [`role`], [`condition`]: the status vocabulary.
//! - [`version`], [`time`], [`digest`]: validated scalar types.
//! - [`tzif`]: time zones from the tz database's compiled files.
//! - [`machine`], [`cluster`], [`release`], [`boot`]: the documents.
//! - [`maintenance`]: the weekly windows in which reboot turns may be
//!   granted, and the decision whether one is open.
//! - [`network`]: the running network init publishes for the machine
//!   operator.
//! - [`annotations`]: one-shot request names.
//! - [`coordination`]: the condition types, reasons, grant and heartbeat
//!   names the machine operators and the cluster operator share.
//! - [`control`]: init's control-socket requests, responses and framing.
//! - [`signing`]: release keys, detached signatures, the trust root and
//!   rollback permits, and the ed25519 check.
//! - [`hash`]: the canonical document hash for staged changes.
//! - [`ondisk`]: the files init and the machine operator hand each other
//!   (staged documents and their checksums, the boot record, releases).
//! - [`decode`]: strict (hand-written) and wire (API server) decoders.
//! - [`validate`]: semantic checks shared by the decoders.
//! - [`crd`]: the CustomResourceDefinitions generated from the types.
//! - [`bootloader`]: systemd-boot entries, grub.cfg and grubenv for the
//!   A/B slots, and the try-counter decisions init makes about them.
//! - [`verity`]: the `liken.verity=` kernel argument a slot's entry
//!   carries, and the dm-verity table init builds from it.

pub mod annotations;
pub mod boot;
pub mod bootloader;
pub mod cluster;
pub mod condition;
pub mod control;
pub mod coordination;
pub mod crd;
pub mod decode;
pub mod digest;
pub mod hash;
pub mod layer_seal;
pub mod machine;
pub mod maintenance;
pub mod meta;
pub mod network;
pub mod next_boot;
pub mod ondisk;
pub mod phase;
pub mod release;
pub mod role;
pub mod signing;
pub mod time;
pub mod tzif;
pub mod validate;
pub mod verity;
pub mod version;

pub use boot::{BootAssessment, BootRecord, BootStatus, RebootVia, Slot};
pub use cluster::{Cluster, ClusterSpec, ClusterStatus};
pub use condition::{Condition, ConditionStatus};
pub use decode::DecodeError;
pub use digest::{Digest, FileName, Sha256Hex};
pub use machine::{Machine, MachineSpec, MachineStatus, RebootPolicy};
pub use meta::{API_VERSION, Kind, ObjectMeta};
pub use phase::Phase;
pub use release::{Channel, Release};
pub use role::Role;
pub use time::Time;
pub use version::Version;

/// The version this build of liken carries: the release version the
/// image build sets through `LIKEN_VERSION`, or `dev` for a plain
/// `cargo build`.
pub const BUILD_VERSION: &str = match option_env!("LIKEN_VERSION") {
    Some(v) => v,
    None => "dev",
};
