//! Reading a liken release channel, for every program that takes a
//! release from one: the `liken` CLI (`fetch`, and `bundle` and `index`
//! on the publishing side) and the machine operator, which downloads the
//! Cluster's target release before it asks init to write it into the
//! inactive slot. One copy of this code means the CLI and the operator
//! trust a release by exactly the same rules.
//!
//! A channel is a directory of immutable releases (see [`layout`]):
//! `channel.yaml` names the latest, and each `<version>/` holds the
//! artifacts and `release.yaml`. Trust runs catalog digest ->
//! release.yaml -> every artifact ([`fetch`]): nothing is used before it
//! is hashed, and a final name only ever holds verified bytes.
//!
//! Module map:
//! - [`layout`]: the channel's file layout (names, the slot-bound
//!   artifacts, temporary names).
//! - [`channel`]: channel.yaml's `latest`, which only moves forward.
//! - [`client`]: the ureq agent (rustls) and capped document reads.
//! - [`fetch`]: one release copied from a channel, verified, resumable.
//! - [`stream`], [`progress`], [`size`]: hashing copies, progress
//!   reports, byte counts for people.
//! - [`files`]: all-or-nothing writes (create-new, replace by rename,
//!   publish a directory without replacing, a directory lock).
//! - [`terminal`]: what a channel says, made safe to print.

pub mod channel;
pub mod client;
pub mod fetch;
pub mod files;
pub mod layout;
pub mod progress;
pub mod size;
pub mod stream;
pub mod terminal;
