//! The flux feature: the cluster operator's part of GitOps.
//!
//! A Cluster that declares `spec.features.flux` syncs the fleet's
//! declared state from a git repository with Flux. init seeds the
//! feature's own manifests (`/usr/share/liken/features/flux/`: the
//! flux-system Namespace carrying the `liken.sh/feature=flux` ownership
//! mark, and the grants this operator needs while the feature is
//! declared) into k3s's auto-deploy directory on leaders. What needs
//! the running cluster is the sweep's, once per pass:
//!
//! - [`deploy_key`]: the ed25519 deploy key in the Secret
//!   `flux-system/flux-system`, minted once, its public half published
//!   in `status.flux.publicKey`, its known_hosts following the
//!   declaration.
//!
//! The engine seed (planting Flux's controllers when they are absent)
//! and the ordered teardown of a retracted feature are built in this
//! module next, by the same hand; the sweep will call all three through
//! one entry point here.

pub mod deploy_key;

/// The engine's namespace, by Flux's convention.
pub const FLUX_NAMESPACE: &str = "flux-system";
/// The deploy key Secret's name, by Flux's convention (the sync objects
/// name it).
pub const FLUX_SECRET: &str = "flux-system";
