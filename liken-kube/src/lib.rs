//! liken's Kubernetes client: synchronous, small, and shared by the
//! operators and the CLI.
//!
//! Blocking threads and channels, ureq with rustls underneath; no async
//! runtime, no generated API types. Layers that do not reach up:
//!
//! - [`config`]: where the server is and the credentials (kubeconfig,
//!   in-cluster service account).
//! - [`request`]: requests as values (method, path, query, body), built
//!   without I/O so tests assert exact URLs.
//! - [`error`]: typed failures with the server's Status message.
//! - [`client`]: sending requests with timeouts, body caps and the leader
//!   write guard; typed GET/LIST/POST/PUT/PATCH/DELETE.
//! - [`object`]: how a kind decodes (liken's own through
//!   `liken_api::decode::wire`) and is keyed.
//! - [`watch`] and [`backoff`]: the list-then-watch state machine with
//!   resume, bookmarks, relist on 410 and jittered backoff.
//! - [`store`]: the informer's copy of a kind and a capacity-one wake
//!   channel.
//! - [`election`]: Lease-based leader election with client-go's timings.
//! - [`events`]: an Events recorder on its own thread.
//! - [`metrics`]: Prometheus text exposition on a std::net listener.

pub mod backoff;
pub mod client;
pub mod config;
pub mod election;
pub mod error;
pub mod events;
pub mod metrics;
pub mod microtime;
pub mod object;
mod random;
pub mod request;
pub mod store;
pub mod watch;

pub use client::{Client, Limits, WriteGuard};
pub use config::{Auth, Config, ConfigError};
pub use error::{Error, Status};
pub use object::{DynamicObject, Object, ObjectList};
pub use request::{Api, DeleteParams, ListParams, Propagation, Request, Resource, WatchParams};
pub use store::{Informer, Store, wake_channel};
pub use watch::{Event, WatchEvent, WatchStats, Watcher, WatcherState};
