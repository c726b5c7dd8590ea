//! liken's operators: the programs that run the fleet from inside
//! Kubernetes.
//!
//! - `liken-machine-operator` is a DaemonSet pod on every machine. It
//!   turns its Machine's spec into a staged, approved, coordinated change,
//!   talks to init over init's control socket, and writes only its own
//!   Machine's status and its own heartbeat Lease.
//! - `liken-cluster-operator` is one acting copy per fleet (leader
//!   elected). It writes the verdicts no single machine can: Lost on
//!   silent machines, the Cluster's status, and the reboot turns of a
//!   rollout.
//!
//! Both are synchronous: blocking threads and crossbeam channels, with
//! liken-kube underneath. Each has one loop that owns every write;
//! watches only feed stores and a capacity-one wake channel; every
//! decision is a pure `decide_*` function of the stores and the clock.
//!
//! Module map:
//! - [`runtime`]: what both binaries share to run like a controller:
//!   flags, structured logs, signals, where the credentials come from.
//! - [`cluster`]: the cluster operator.
//! - [`fleet_cluster`]: the one Cluster both act on, named by the
//!   deployment.
//! - [`kinds`]: the core Kubernetes kinds the operators read (Node, Pod).
//! - [`machine`]: the machine operator.
//! - [`windows`]: maintenance windows: zones from the tz database and
//!   each machine's verdict, for both operators.

pub mod cluster;
pub mod fleet_cluster;
pub mod kinds;
pub mod machine;
pub mod runtime;
pub mod windows;
