//! liken's Kubernetes client: synchronous, small, and shared by the
//! operators and the CLI.
//!
//! Blocking threads and channels, ureq with rustls underneath; no async
//! runtime, no generated API types. Layers that do not reach up:
//!
//! - [`config`]: where the server is and the credentials (kubeconfig,
//!   in-cluster service account).
//! - [`request`]: requests as values (method, path, query, body), built
//!   without I/O so tests assert exact URLs: GET, LIST with label and
//!   field selectors, create, replace, merge patch, JSON patch
//!   ([`PatchOp`], with `test`), server-side apply, DELETE, the pod
//!   eviction subresource.
//! - [`error`]: typed failures with the server's Status message; a
//!   PodDisruptionBudget's refusal ([`Error::DisruptionBudget`]) and
//!   throttling ([`Error::TooManyRequests`]) are their own variants.
//! - [`metrics`]: Prometheus text exposition and `/healthz` on a std::net
//!   listener.
//! - [`retry`]: what the client repeats by itself (client-go's rules) and
//!   [`retry_on_conflict`] for read-modify-write.
//! - [`client`]: sending requests with timeouts, body caps, retries, the
//!   leader write guard, a User-Agent and fieldManager naming the program,
//!   and client-go's `rest_client_*` metrics; typed methods for every
//!   request, cordon, finalizers.
//! - [`object`]: how a kind decodes (liken's own through
//!   `liken_api::decode::wire`) and is keyed; objects this build cannot
//!   read are named and skipped, never fatal.
//! - [`watch`] and [`backoff`]: the list-then-watch state machine with
//!   resume, bookmarks, relist on 410 (and 504 ResourceVersionTooLarge),
//!   very-short-watch and relist backoff, a per-read timeout, and a
//!   [`StopHandle`] that interrupts a blocked read.
//! - [`store`]: the informer's copy of a kind, its removals, and a
//!   capacity-one wake channel.
//! - [`election`]: Lease-based leader election with client-go's timings,
//!   callbacks, a leader gauge and a liveness check.
//! - [`events`]: an Events recorder on its own thread, with series and
//!   per-object rate limits.
//!
//! # An operator on liken-kube
//!
//! The shape both operators share: one client identified as the binary,
//! one elector whose guard every write passes, informers feeding stores
//! and one wake channel, one loop that reads the stores and writes.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use liken_api::Machine;
//! use liken_kube::election::{Callbacks, ElectionConfig, Elector, Timings};
//! use liken_kube::events::{EventType, ObjectReference, Recorder, RecorderConfig};
//! use liken_kube::metrics::{self, Registry};
//! use liken_kube::request::{MACHINES, PODS};
//! use liken_kube::{
//!     Api, Client, Config, DeleteParams, Error, Informer, PatchOp, Watcher, json_pointer,
//!     retry_on_conflict, wake_channel,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let registry = Registry::new();
//! let standard = metrics::standard(&registry);
//! // User-Agent `liken-machine-operator/<version> (...)`, and
//! // fieldManager=liken-machine-operator on every write.
//! let client = Client::new(&Config::infer()?)?
//!     .identify("liken-machine-operator", "2026.07.01-001")
//!     .with_metrics(&registry);
//!
//! let (leading_tx, leading_rx) = crossbeam_channel::bounded::<bool>(4);
//! let stopped_tx = leading_tx.clone();
//! let elector = Elector::start(
//!     client.clone(),
//!     ElectionConfig {
//!         namespace: "liken-system".into(),
//!         name: "liken-machine-operator".into(),
//!         identity: "pod-a".into(),
//!         timings: Timings::default(),
//!         labels: Default::default(),
//!     },
//!     Callbacks::default()
//!         .on_started_leading(move || { let _ = leading_tx.try_send(true); })
//!         .on_stopped_leading(move || { let _ = stopped_tx.try_send(false); })
//!         .on_new_leader(|who| eprintln!("the leader is {who}")),
//! )?;
//! // leader_election_master_status, and /healthz fails if the election
//! // thread is stuck 20 s past the lease.
//! elector.register(&registry, Duration::from_secs(20));
//! let writer = client.with_write_guard(Arc::new(elector.guard()));
//! let _server = metrics::serve(metrics::DEFAULT_ADDR, registry.clone())?;
//!
//! let (wake_tx, wake_rx) = wake_channel();
//! let watcher = Watcher::<Machine>::new(client.clone(), Api::all(MACHINES))
//!     .fields("metadata.name=node-1");
//! let informer = Informer::spawn(watcher, wake_tx);
//! informer.stats().register(&registry, "machines");
//! let machines = informer.store();
//! let recorder = Recorder::start(
//!     client.clone(),
//!     RecorderConfig::new("liken.sh/machine-operator", "pod-a"),
//! )?;
//!
//! while wake_rx.recv().is_ok() {
//!     for gone in machines.take_removed() {
//!         eprintln!("{gone} is gone; forget its timers");
//!     }
//!     for m in machines.list() {
//!         // Server-side apply of the fields this program owns.
//!         let status = serde_json::json!({
//!             "apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
//!             "metadata": {"name": m.metadata.name},
//!             "status": {"phase": "Ready"},
//!         });
//!         match writer.apply_status::<Machine, _>(&Api::all(MACHINES), &m.metadata.name, &status, true) {
//!             Err(Error::NotLeader { .. }) => break, // lost the Lease: stop writing
//!             other => { other?; }
//!         }
//!         writer.add_finalizer(&Api::all(MACHINES), &m.metadata.name, "liken.sh/drain")?;
//!         recorder.event(ObjectReference::machine(&m), EventType::Normal, "Reconciled", "Reconcile", "ok");
//!     }
//!     // Drain a node: cordon, then evict through the budgets.
//!     writer.cordon("node-1")?;
//!     match writer.evict(&Api::namespaced(PODS, "web"), "web-1", &DeleteParams::default()) {
//!         Ok(()) => {}
//!         Err(Error::DisruptionBudget { .. }) => { /* the budget says wait */ }
//!         Err(e) if e.is_too_many_requests() => std::thread::sleep(e.retry_after().unwrap_or(Duration::from_secs(1))),
//!         Err(e) => return Err(e.into()),
//!     }
//!     // A conditional write: only if the label still says what was read.
//!     let ops = [
//!         PatchOp::Test { path: json_pointer(&["metadata", "labels", "stage"]), value: "a".into() },
//!         PatchOp::Replace { path: json_pointer(&["metadata", "labels", "stage"]), value: "b".into() },
//!     ];
//!     retry_on_conflict(|| writer.json_patch::<Machine>(&Api::all(MACHINES), "node-1", &ops))?;
//!     standard.reconcile_duration.observe(0.01);
//!     let _ = leading_rx.try_recv();
//! }
//! informer.stop();
//! elector.shutdown();
//! recorder.shutdown(Duration::from_secs(5));
//! # Ok(())
//! # }
//! ```

pub mod backoff;
pub mod client;
pub mod config;
pub mod election;
pub mod error;
pub mod events;
#[cfg(test)]
mod fake_server;
pub mod metrics;
pub mod microtime;
pub mod object;
mod random;
pub mod request;
pub mod retry;
pub mod store;
pub mod watch;

pub use client::{Client, Limits, WriteGuard, decide_finalizers};
pub use config::{Auth, Config, ConfigError};
pub use error::{Error, Status};
pub use object::{DynamicObject, Object, ObjectList};
pub use request::{
    Api, DeleteParams, ListParams, PatchOp, Propagation, Request, Resource, WatchParams,
    json_pointer,
};
pub use retry::retry_on_conflict;
pub use store::{Informer, Store, wake_channel};
pub use watch::{Event, StopHandle, WatchEvent, WatchStats, Watcher, WatcherState};
