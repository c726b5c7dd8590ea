//! The watches that feed the sweep: what the cluster operator sees.
//!
//! Four informers, all into stores and one capacity-one wake channel:
//!
//! - **Machines** (cluster-wide): every change wakes the sweep.
//! - **Clusters**: every change wakes the sweep (a new target, a budget,
//!   an annotation asking for a poll or lifting a halt).
//! - **Heartbeat Leases** in `liken-system`, selected by the
//!   `liken.sh/heartbeat` label: each machine's event is recorded in the
//!   [`Sightings`] on the watch thread the moment it arrives, on this
//!   program's clock. This copy's own election Lease carries the label
//!   too (value `election`), and its deliveries go to the [`Probe`] by
//!   which the sweep judges whether the watch is alive
//!   ([`freshness`](super::freshness)). A renewal wakes nobody: it
//!   changes no verdict until it stops coming, which the sweep's ticker
//!   catches, and at 1,000 machines renewing every ten seconds a wake per
//!   renewal would be a sweep every 10 ms. A Lease that appears or goes
//!   does wake the sweep.
//! - **The machine operator's DaemonSet** (by name, in `liken-system`):
//!   its template's release decides whether leaders go first.
//!
//! Machines and Clusters the wire decoder refuses are kept aside, by name
//! with the field that failed, so the sweep can skip them with one Event
//! and one log line each and keep the ledger entry of a Machine it cannot
//! read.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use crossbeam_channel::Sender;
use liken_api::coordination::{
    CLUSTER_OPERATOR, HEARTBEAT_LABEL, HEARTBEAT_NAMESPACE, MACHINE_OPERATOR,
};
use liken_api::{Cluster, Machine};
use liken_kube::election::Lease;
use liken_kube::metrics::Registry;
use liken_kube::object::Unreadable;
use liken_kube::request::{CLUSTERS, LEASES, MACHINES, Resource};
use liken_kube::{Api, Client, DynamicObject, Event, Informer, Object, Store, Watcher};

use super::freshness::{ELECTION_LABEL_VALUE, Probe};
use super::heartbeat::Sightings;

/// DaemonSets (`apps/v1`).
pub const DAEMON_SETS: Resource = Resource {
    group: "apps",
    version: "v1",
    plural: "daemonsets",
    kind: "DaemonSet",
    namespaced: true,
};

/// Objects a store could not decode, by key.
pub type Unreadables = Arc<Mutex<BTreeMap<String, Unreadable>>>;

/// The running watches.
pub struct Watches {
    machines: Informer<Machine>,
    clusters: Informer<Cluster>,
    leases: Informer<Lease>,
    daemon_set: Informer<DynamicObject>,
    /// What the Lease watch delivered of this copy's election Lease.
    pub probe: Arc<Mutex<Probe>>,
    /// Machines the decoder refused.
    pub unreadable_machines: Unreadables,
    /// Clusters the decoder refused.
    pub unreadable_clusters: Unreadables,
}

/// Keeps `unreadable` in step with a watch: a relist starts it over, an
/// unreadable object enters it, a readable version or a deletion leaves.
fn track<T: Object>(unreadable: &Unreadables) -> impl FnMut(&Event<T>) -> bool + Send + 'static {
    let unreadable = unreadable.clone();
    move |event| {
        let mut held = unreadable.lock().unwrap_or_else(|p| p.into_inner());
        match event {
            Event::Restarted(_) => held.clear(),
            Event::Applied(o) | Event::Deleted(o) => {
                held.remove(&o.key());
            }
            Event::Unreadable(u) => {
                held.insert(u.key.clone(), u.clone());
            }
        }
        true
    }
}

/// The Lease watch's selector: the machines' heartbeats and this copy's
/// election Lease.
pub fn lease_selector() -> String {
    format!("{HEARTBEAT_LABEL} in (true,{ELECTION_LABEL_VALUE})")
}

/// Whether a Lease the watch delivered is the cluster operator's election
/// Lease rather than a machine's heartbeat.
pub fn is_election(l: &Lease) -> bool {
    l.name() == CLUSTER_OPERATOR
}

/// Records each heartbeat as it arrives, and each delivery of the
/// election Lease in the probe; wakes only when a machine's Lease appears
/// or goes.
fn record(
    sightings: Arc<Mutex<Sightings>>,
    probe: Arc<Mutex<Probe>>,
) -> impl FnMut(&Event<Lease>) -> bool + Send + 'static {
    move |event| {
        let now = Instant::now();
        let wall = SystemTime::now();
        let delivered = match event {
            Event::Restarted(leases) => leases.iter().any(is_election),
            Event::Applied(l) => is_election(l),
            _ => false,
        };
        if delivered {
            probe.lock().unwrap_or_else(|p| p.into_inner()).delivered = Some(now);
        }
        let mut s = sightings.lock().unwrap_or_else(|p| p.into_inner());
        match event {
            Event::Restarted(leases) => {
                for l in leases.iter().filter(|l| !is_election(l)) {
                    s.observe(l.name(), renew_time(l), now, wall);
                }
                true
            }
            Event::Applied(l) if is_election(l) => false,
            Event::Deleted(l) if is_election(l) => false,
            Event::Applied(l) => {
                let new = !s.knows(l.name());
                s.observe(l.name(), renew_time(l), now, wall);
                new
            }
            Event::Deleted(l) => {
                s.forget(l.name());
                true
            }
            Event::Unreadable(_) => false,
        }
    }
}

fn renew_time(l: &Lease) -> &str {
    l.spec.renew_time.as_deref().unwrap_or_default()
}

/// Which stores hold their first LIST.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Synced {
    /// Machines.
    pub machines: bool,
    /// Clusters.
    pub clusters: bool,
    /// Heartbeat Leases.
    pub leases: bool,
    /// The machine operator's DaemonSet.
    pub daemon_set: bool,
}

/// What a sweep may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SweepGate {
    /// Nothing: the fleet itself (its Machines, its Cluster, its
    /// heartbeats) is not listed yet, so no verdict can be judged.
    Wait,
    /// Everything but grants: the DaemonSet that leaders-first judges by
    /// is not listed yet, so no turn goes out (the reason names it), while
    /// status, reclaims and Lost verdicts go on.
    NoGrants(String),
    /// Everything.
    All,
}

/// One unsynced informer stops only what depends on it: the DaemonSet
/// watch holds grants back, not the fleet's status or its Lost verdicts.
pub fn decide_sweep_gate(s: Synced) -> SweepGate {
    if !(s.machines && s.clusters && s.leases) {
        return SweepGate::Wait;
    }
    if !s.daemon_set {
        return SweepGate::NoGrants(format!(
            "the watch of DaemonSet {HEARTBEAT_NAMESPACE}/{MACHINE_OPERATOR} has not listed yet"
        ));
    }
    SweepGate::All
}

impl Watches {
    /// Starts the four watches, each waking `wake` as described above.
    pub fn start(
        client: &Client,
        wake: &Sender<()>,
        sightings: Arc<Mutex<Sightings>>,
        registry: &Registry,
        report: liken_kube::watch::Report,
    ) -> Watches {
        let unreadable_machines = Unreadables::default();
        let unreadable_clusters = Unreadables::default();
        let machines = Informer::spawn_observed(
            Watcher::new(client.clone(), Api::all(MACHINES)).report(report.clone()),
            wake.clone(),
            track::<Machine>(&unreadable_machines),
        );
        let clusters = Informer::spawn_observed(
            Watcher::new(client.clone(), Api::all(CLUSTERS)).report(report.clone()),
            wake.clone(),
            track::<Cluster>(&unreadable_clusters),
        );
        let probe = Arc::new(Mutex::new(Probe::default()));
        let leases = Informer::spawn_observed(
            Watcher::new(client.clone(), Api::namespaced(LEASES, HEARTBEAT_NAMESPACE))
                .labels(&lease_selector())
                .report(report.clone()),
            wake.clone(),
            record(sightings, probe.clone()),
        );
        let daemon_set = Informer::spawn(
            Watcher::new(
                client.clone(),
                Api::namespaced(DAEMON_SETS, HEARTBEAT_NAMESPACE),
            )
            .fields(&format!("metadata.name={MACHINE_OPERATOR}"))
            .report(report),
            wake.clone(),
        );
        machines.stats().register(registry, "machines");
        clusters.stats().register(registry, "clusters");
        leases.stats().register(registry, "leases");
        daemon_set.stats().register(registry, "daemonsets");
        Watches {
            machines,
            clusters,
            leases,
            daemon_set,
            probe,
            unreadable_machines,
            unreadable_clusters,
        }
    }

    /// The Machines' store.
    pub fn machines(&self) -> Store<Machine> {
        self.machines.store()
    }

    /// The Clusters' store.
    pub fn clusters(&self) -> Store<Cluster> {
        self.clusters.store()
    }

    /// The DaemonSet's store (zero or one object).
    pub fn daemon_set(&self) -> Store<DynamicObject> {
        self.daemon_set.store()
    }

    /// Whether every store holds its first LIST.
    pub fn synced(&self) -> bool {
        self.machines.store().is_synced()
            && self.clusters.store().is_synced()
            && self.leases.store().is_synced()
            && self.daemon_set.store().is_synced()
    }

    /// What the sweep may do with the stores as they stand
    /// ([`decide_sweep_gate`]).
    pub fn gate(&self) -> SweepGate {
        decide_sweep_gate(Synced {
            machines: self.machines.store().is_synced(),
            clusters: self.clusters.store().is_synced(),
            leases: self.leases.store().is_synced(),
            daemon_set: self.daemon_set.store().is_synced(),
        })
    }

    /// Stops every watch thread.
    pub fn stop(self) {
        self.machines.stop();
        self.clusters.stop();
        self.leases.stop();
        self.daemon_set.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_unsynced_watch_stops_only_what_depends_on_it() {
        let all = Synced {
            machines: true,
            clusters: true,
            leases: true,
            daemon_set: true,
        };
        assert_eq!(decide_sweep_gate(all), SweepGate::All);
        let no_ds = Synced {
            daemon_set: false,
            ..all
        };
        assert!(
            matches!(decide_sweep_gate(no_ds), SweepGate::NoGrants(why) if why.contains(MACHINE_OPERATOR))
        );
        for unsynced in [
            Synced {
                machines: false,
                ..all
            },
            Synced {
                clusters: false,
                ..all
            },
            Synced {
                leases: false,
                ..all
            },
        ] {
            assert_eq!(decide_sweep_gate(unsynced), SweepGate::Wait, "{unsynced:?}");
        }
    }
}
