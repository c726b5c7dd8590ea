//! Running like a controller: the parts both operator binaries share.
//!
//! - [`flags`]: a declarative flag table, both `-flag` and `--flag`
//!   spellings, `--help` generated from the table, durations like `10s`.
//! - [`log`]: one structured line per event on stderr (logfmt).
//! - [`signals`]: SIGTERM and SIGINT delivered as a channel message, so
//!   the loop stops between two passes rather than in the middle of one.
//! - [`credentials`]: which kubeconfig or service account to use, the way
//!   kubectl and client-go choose.
//! - [`start`]: the start-up lines both share: the `--kubeconfig` and
//!   `--metrics-address` flags, the named client, the metrics listener.

pub mod credentials;
pub mod flags;
pub mod log;
pub mod signals;
pub mod start;
