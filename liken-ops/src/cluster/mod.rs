//! The cluster operator: the verdicts no single machine can write.
//!
//! Each machine's operator reports on itself, which leaves three things
//! only a fleet-wide observer can do: say that a silent machine is Lost
//! (a dead machine cannot), total the fleet on the Cluster, and hand out
//! reboot turns so that a rollout never takes down more machines than
//! the Cluster's disruption budget allows. One copy acts at a time
//! (leader election); it watches Machines, the heartbeat Leases, the
//! Cluster and the machine operator's DaemonSet, and one loop sweeps the
//! whole fleet every ten seconds and on every change, deciding with pure
//! functions and writing in a fixed order: the Cluster's status (with the
//! turn ledger) first, then the grants and reclaims on Machines, then the
//! Lost verdicts.
//!
//! Module map, decisions first:
//! - [`heartbeat`]: renewals seen on this program's own clock.
//! - [`freshness`]: whether the heartbeat watch is alive, judged by this
//!   copy's own election Lease.
//! - [`fleet`]: Lost verdicts, the tally, MachinesReady.
//! - [`rollout`]: reboot turns under the budget, the ledger, stalls,
//!   reclaims, and the halt of a failed release.
//! - [`status`]: the Cluster's status, written only when it changed.
//! - [`channel`]: the release channel poller on its own thread.
//! - [`flux`]: the flux feature: the deploy key, the engine seed, the
//!   ordered teardown of a retracted feature.
//! - [`janitor`]: the workloads of retracted features.
//! - [`windows`]: the maintenance-window gate on new grants.
//! - [`steward`]: the OS's own DaemonSet pods, refreshed on machines that
//!   already run the template's release.
//!
//! Then the code that carries the decisions out:
//! - [`deployment`]: the one Cluster the deployment names, created from
//!   its copy; foreign Clusters reported, never followed.
//! - [`watches`]: the informers that feed the sweep.
//! - [`sweep`]: one sweep, and every write, in order.
//! - [`events`], [`metrics`]: what the operator tells people and
//!   Prometheus.
//! - [`run`]: flags, the election, the loop, shutdown.

pub mod channel;
pub mod deployment;
pub mod events;
pub mod fleet;
pub mod flux;
pub mod freshness;
pub mod heartbeat;
pub mod janitor;
pub mod metrics;
pub mod rollout;
pub mod run;
pub mod status;
pub mod steward;
pub mod sweep;
pub mod watches;
pub mod windows;
