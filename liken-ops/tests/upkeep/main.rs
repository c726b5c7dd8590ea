//! The cluster operator's upkeep against real parts: the flux feature
//! (deploy key, engine seed, teardown), the feature janitor and the
//! steward.
//!
//! One control plane serves the whole binary (kube-apiserver with its
//! audit log, kube-controller-manager for namespace deletion, garbage
//! collection and DaemonSets, kube-scheduler and kwok for pods on fake
//! nodes). The code under test runs under the cluster operator's own
//! ServiceAccount token, bound by the RBAC files the release ships, so a
//! missing verb fails a test. Tests that share a namespace the code
//! names (flux-system, liken-system) hold that namespace's lock.

mod key;
mod support;
