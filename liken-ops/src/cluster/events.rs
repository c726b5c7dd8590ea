//! The Events the cluster operator posts, and their reasons.
//!
//! Machines and Clusters are cluster-scoped, so their Events live in the
//! `default` namespace; `kubectl describe machine <name>` lists them under
//! the status, so a person reads the history of a rollout or of a machine
//! that went silent with no log to open.
//!
//! - Each Cluster condition that transitions posts one Event with the
//!   condition's own reason, after the status write lands: MachinesReady
//!   (AllMachinesReady, MachinesUpdating, MachinesDegraded), Progressing
//!   (RollingOut, RolloutComplete, RolloutStalled, ReleaseFailed),
//!   ReleaseChannel (ChannelCurrent, ChannelUnverified, ChannelReplayed,
//!   ChannelStale) and FluxTeardown (NotPlantedByLiken). The ones that
//!   need a person are Warnings.
//! - Each verdict written onto a Machine posts one Event on that Machine,
//!   named after the action: [`MACHINE_LOST`] (Warning, with the last
//!   renewal this program saw), [`REBOOT_TURN_GRANTED`],
//!   [`REBOOT_TURN_RECLAIMED`].
//! - Each Machine or Cluster the decoder refuses posts [`UNREADABLE`]
//!   once per version, naming the field.
//!
//! Nothing that repeats every sweep posts an Event: a channel poll, a
//! sweep, a grant the budget defers.

/// A silent machine was marked Lost.
pub const MACHINE_LOST: &str = "MachineLost";
/// A machine was granted a reboot turn.
pub const REBOOT_TURN_GRANTED: &str = "RebootTurnGranted";
/// A machine's reboot turn was taken back.
pub const REBOOT_TURN_RECLAIMED: &str = "RebootTurnReclaimed";
/// An object the wire decoder refuses was skipped.
pub const UNREADABLE: &str = "UnreadableObject";

/// The action of a condition transition or a skipped object.
pub const ACTION_SWEEP: &str = "Sweep";
/// The action of [`REBOOT_TURN_GRANTED`].
pub const ACTION_GRANT: &str = "GrantRebootTurn";
/// The action of [`REBOOT_TURN_RECLAIMED`].
pub const ACTION_RECLAIM: &str = "ReclaimRebootTurn";
/// The action of [`MACHINE_LOST`].
pub const ACTION_MARK_LOST: &str = "MarkLost";
