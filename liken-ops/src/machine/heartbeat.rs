//! The heartbeat: the Lease `liken-system/<machine>`, renewed every
//! `HEARTBEAT_RENEW_SECS` on its own thread.
//!
//! A dead machine cannot say it is dead; the cluster operator judges it
//! Lost when its heartbeat stops changing. The renewal has a thread of
//! its own so that nothing the loop waits on (a drain's evictions, a
//! slow API server) delays it. The Lease is owned by the Machine (an
//! owner reference to the Machine's uid), so deleting a Machine takes its
//! heartbeat with it, and it carries the heartbeat label so the cluster
//! operator can watch heartbeats apart from its election Lease. The
//! holder is the node's name, which the admission policy checks against
//! the token's node.
//!
//! Each renewal is one merge patch carrying the whole record (labels,
//! owner, holder, duration, renewTime), so a Lease someone edited or
//! deleted is put right, or created again, on the next renewal.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded};
use liken_api::API_VERSION;
use liken_api::coordination::{HEARTBEAT_LABEL, HEARTBEAT_NAMESPACE, HEARTBEAT_STALE_SECS};
use liken_kube::metrics::{Counter, Gauge};
use liken_kube::request::LEASES;
use liken_kube::{Api, Client, DynamicObject, Error};
use serde_json::{Value, json};

use crate::runtime::log;

/// Who the heartbeat is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The Machine's name, which is the Lease's.
    pub machine: String,
    /// The Machine's uid.
    pub uid: String,
    /// The node's name: the Lease's holder.
    pub node: String,
}

/// The Lease as one renewal writes it.
pub fn lease_body(owner: &Owner, renew_time: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": owner.machine,
            "namespace": HEARTBEAT_NAMESPACE,
            "labels": { HEARTBEAT_LABEL: "true" },
            "ownerReferences": [{
                "apiVersion": API_VERSION,
                "kind": "Machine",
                "name": owner.machine,
                "uid": owner.uid,
            }],
        },
        "spec": {
            "holderIdentity": owner.node,
            "leaseDurationSeconds": HEARTBEAT_STALE_SECS,
            "renewTime": renew_time,
        },
    })
}

/// Renews once: a merge patch, or a create when the Lease is gone.
pub fn renew(client: &Client, owner: &Owner) -> Result<(), Error> {
    let api = Api::namespaced(LEASES, HEARTBEAT_NAMESPACE);
    let body = lease_body(owner, &liken_kube::microtime::now());
    match client.merge_patch::<DynamicObject>(&api, &owner.machine, &body) {
        Ok(_) => Ok(()),
        Err(Error::NotFound { .. }) => client.create::<DynamicObject, _>(&api, &body).map(drop),
        Err(e) => Err(e),
    }
}

/// The renewing thread.
pub struct Heartbeat {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// The heartbeat's metrics.
#[derive(Clone)]
pub struct HeartbeatMetrics {
    /// Renewals that landed.
    pub renewals: Counter,
    /// Renewals that failed.
    pub failures: Counter,
    /// When the last renewal landed, Unix seconds.
    pub last: Gauge,
}

impl Heartbeat {
    /// Starts renewing every `every` for the owner `owner` holds (the
    /// loop updates it when the Machine's uid changes).
    pub fn start(
        client: Client,
        owner: Arc<Mutex<Owner>>,
        every: Duration,
        metrics: HeartbeatMetrics,
    ) -> std::io::Result<Heartbeat> {
        // The first renewal is made here, before the caller writes any
        // status: a machine back from a reboot whose status landed while
        // its Lease was still the last boot's would be judged silent and
        // marked Lost again right after it said it was up.
        beat_once(&client, &owner, &metrics);
        let (stop, stopped) = bounded::<()>(1);
        let thread = std::thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || beat(&client, &owner, every, &stopped, &metrics))?;
        Ok(Heartbeat {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops renewing (the Lease then goes stale on its own).
    pub fn stop(mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Renews every `every` until stopped; [`Heartbeat::start`] made the
/// first renewal.
fn beat(
    client: &Client,
    owner: &Mutex<Owner>,
    every: Duration,
    stopped: &Receiver<()>,
    metrics: &HeartbeatMetrics,
) {
    while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
        beat_once(client, owner, metrics);
    }
}

/// One renewal, counted in the metrics; a failure is logged and left to
/// the next beat.
fn beat_once(client: &Client, owner: &Mutex<Owner>, metrics: &HeartbeatMetrics) {
    let Some(o) = owner.lock().map(|o| o.clone()).ok() else {
        return;
    };
    match renew(client, &o) {
        Ok(()) => {
            metrics.renewals.inc();
            metrics.last.set(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64()),
            );
        }
        Err(e) => {
            metrics.failures.inc();
            log::warn(
                "renewing the heartbeat Lease failed; trying again at the next beat",
                &[("lease", &o.machine), ("err", &e)],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_names_its_machine_owner_holder_and_label() {
        let owner = Owner {
            machine: "node-1".into(),
            uid: "u-1".into(),
            node: "node-1.lan".into(),
        };
        let b = lease_body(&owner, "2026-12-02T10:00:00.000000Z");
        assert_eq!(b["metadata"]["namespace"], "liken-system");
        assert_eq!(b["metadata"]["labels"]["liken.sh/heartbeat"], "true");
        assert_eq!(b["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(b["metadata"]["ownerReferences"][0]["kind"], "Machine");
        assert_eq!(b["spec"]["holderIdentity"], "node-1.lan");
        assert_eq!(b["spec"]["leaseDurationSeconds"], 40);
    }
}
