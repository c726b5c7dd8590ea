//! The machine operator: one per machine, as a DaemonSet pod.
//!
//! It turns its Machine's spec into a staged, approved, coordinated
//! change. Each pass reads what this boot runs (init's boot record and
//! running documents, the network facts, the kernel's state) and what the
//! API asks for, derives one convergence condition per kind of change and
//! a phase from them, stages what differs for init to promote at the next
//! boot, and, when the cluster grants a turn, drains the node and asks
//! init to reboot (or to restart k3s). It downloads the Cluster's target
//! release and has init write it into the inactive slot. It writes only
//! its own Machine's status and annotations, its own Node, and its own
//! heartbeat Lease.
//!
//! Module map, pure decisions first:
//! - [`phase`]: the table from conditions to the phase.
//! - [`changes`]: what differs between two documents, with summaries.
//! - [`network`]: the running network against the running Machine.
//! - [`node`]: k3s labels and taints against the Node.
//! - [`approval`]: what the approve and request annotations mean.
//! - [`drain`], [`turn`]: from a granted turn to init's reboot and back.
//! - [`release`]: ReleaseCurrent and the download worker's next step.
//! - [`facts`]: what init and the host report, as data.
//! - [`pass`]: one pass, from all of the above to a verdict.
//! - [`status`]: the status a pass writes, and its Events.
//!
//! Then what carries the verdicts out:
//! - [`host`]: reading the host, staging for init (`liken_api::ondisk`).
//! - [`init_client`]: init's control socket (`liken_api::control`).
//! - [`download`]: the release download worker.
//! - [`trust`]: release.yaml's signature, checked before a download
//!   against the deployment's trust root.
//! - [`heartbeat`]: the Lease renewed on its own thread.
//! - [`seed`]: the Machine and Cluster created from the booted documents.
//! - [`flags`], [`operator`]: the flags and the loop.

pub mod approval;
pub mod changes;
pub mod download;
pub mod drain;
pub mod facts;
pub mod flags;
pub mod heartbeat;
pub mod host;
pub mod init_client;
pub mod network;
pub mod node;
pub mod operator;
pub mod pass;
pub mod phase;
pub mod release;
pub mod seed;
pub mod status;
pub mod trust;
pub mod turn;
