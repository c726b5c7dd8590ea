//! The cluster operator's own metrics, beside liken-kube's standard ones
//! (`liken_reconcile_duration_seconds` is the sweep's duration,
//! `liken_reconcile_errors_total` the sweeps that failed,
//! `liken_watch_restarts_total{resource}` each watch's restarts,
//! `rest_client_*` every request, `leader_election_master_status`).
//!
//! The fleet gauges come from the same verdict the sweep writes onto the
//! Cluster, so a graph and `kubectl get cluster` never disagree.

use std::collections::BTreeMap;

use liken_api::Phase;
use liken_kube::metrics::{Counter, Gauge, Registry};

use super::fleet::FleetSweep;
use super::rollout::Rollout;

/// What went wrong, for `liken_cluster_operator_errors_total{kind}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ErrorKind {
    /// A read the sweep needed failed (a fresh Machine, the DaemonSet).
    Read,
    /// A write failed for a reason other than a conflict.
    Write,
    /// A write lost to a newer version of its object (skipped, not
    /// retried).
    Conflict,
    /// An object the wire decoder refused, skipped.
    Unreadable,
    /// A poll of the release channel failed.
    Channel,
}

impl ErrorKind {
    const ALL: [ErrorKind; 5] = [
        ErrorKind::Read,
        ErrorKind::Write,
        ErrorKind::Conflict,
        ErrorKind::Unreadable,
        ErrorKind::Channel,
    ];

    fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Read => "read",
            ErrorKind::Write => "write",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Unreadable => "unreadable",
            ErrorKind::Channel => "channel",
        }
    }
}

/// The cluster operator's gauges and counters.
#[derive(Clone)]
pub struct ClusterMetrics {
    machines: BTreeMap<Phase, Gauge>,
    awaiting_approval: Gauge,
    turns: Gauge,
    halted: Gauge,
    lease_watch_behind: Gauge,
    errors: BTreeMap<ErrorKind, Counter>,
}

impl ClusterMetrics {
    /// Registers every series (each phase and each error kind at zero, so
    /// a dashboard sees them before the first occurrence).
    pub fn register(registry: &Registry) -> ClusterMetrics {
        let machines = Phase::ALL
            .iter()
            .map(|p| {
                (
                    *p,
                    registry.gauge(
                        "liken_cluster_machines",
                        "Machines by effective phase (Lost when the heartbeat is stale).",
                        &[("phase", p.as_str())],
                    ),
                )
            })
            .collect();
        let errors = ErrorKind::ALL
            .iter()
            .map(|k| {
                (
                    *k,
                    registry.counter(
                        "liken_cluster_operator_errors_total",
                        "Failures by kind: read, write, conflict (a write that lost to a newer \
                         version), unreadable (an object skipped), channel (a failed poll).",
                        &[("kind", k.as_str())],
                    ),
                )
            })
            .collect();
        ClusterMetrics {
            machines,
            awaiting_approval: registry.gauge(
                "liken_cluster_machines_awaiting_approval",
                "Machines whose staged change waits for a person's approval.",
                &[],
            ),
            turns: registry.gauge(
                "liken_cluster_reboot_turns_outstanding",
                "Reboot turns in the Cluster's ledger.",
                &[],
            ),
            halted: registry.gauge(
                "liken_cluster_rollout_halted",
                "1 while a failed release halts the rollout, else 0.",
                &[],
            ),
            lease_watch_behind: registry.gauge(
                "liken_cluster_lease_watch_behind",
                "1 while the heartbeat Lease watch is behind this copy's own election Lease \
                 renewals and sweeps read the Leases directly, else 0.",
                &[],
            ),
            errors,
        }
    }

    /// Publishes one sweep's verdict.
    pub fn observe(&self, fleet: &FleetSweep, rollout: &Rollout) {
        for (phase, gauge) in &self.machines {
            gauge.set(f64::from(fleet.phases.get(phase).copied().unwrap_or(0)));
        }
        self.awaiting_approval
            .set(f64::from(fleet.awaiting_approval));
        self.turns.set(rollout.turns.len() as f64);
        self.halted
            .set(if rollout.halt.is_some() { 1.0 } else { 0.0 });
    }

    /// Publishes whether the heartbeat watch is behind.
    pub fn lease_watch(&self, behind: bool) {
        self.lease_watch_behind.set(if behind { 1.0 } else { 0.0 });
    }

    /// Counts one failure.
    pub fn error(&self, kind: ErrorKind) {
        if let Some(c) = self.errors.get(&kind) {
            c.inc();
        }
    }
}
