//! The flux feature: the cluster operator's part of GitOps.
//!
//! A Cluster that declares `spec.features.flux` syncs the fleet's
//! declared state from a git repository with Flux. init seeds the
//! feature's own manifests (`/usr/share/liken/features/flux/`, from
//! `images/features/flux/`: the flux-system Namespace carrying the
//! `liken.sh/feature=flux` ownership mark, and the grants this operator
//! needs while the feature is declared) into k3s's auto-deploy directory
//! on leaders. What needs the running cluster is the sweep's, through
//! [`Flux::sweep`], once per pass:
//!
//! - While the feature is declared: [`deploy_key`] makes sure the
//!   ed25519 deploy key exists in the Secret `flux-system/flux-system`
//!   and answers its public half for `status.flux.publicKey`; then
//!   [`engine`] plants Flux's controllers from the embedded seed if the
//!   applier is gone (probed at most once a minute).
//! - While it is not: [`teardown`] removes the Flux liken planted, one
//!   ordered stage per sweep, or refuses (the FluxTeardown condition) when
//!   the namespace carries no ownership mark.
//!
//! The sweep calls [`Flux::sweep`] before it composes the Cluster's
//! status, and puts the answer in [`crate::cluster::status::Extras`]
//! (`public_key`, `flux_teardown`).
//!
//! Not built here: the sync objects (the GitRepository and Kustomization
//! `flux-system` that point Flux at `features.flux.url`, `branch` and
//! `path`). Nothing in liken creates them yet; a repository bootstrapped
//! by `flux bootstrap` carries them, but the first sync needs them in the
//! cluster.

use std::time::Instant;

use liken_api::Cluster;
use liken_api::cluster::FEATURE_FLUX;
use liken_api::condition::Condition;
use liken_kube::Client;
use liken_kube::events::Recorder;

pub mod deploy_key;
pub mod engine;
pub mod names;
pub mod teardown;

/// What one pass of the flux upkeep gives the Cluster's status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FluxReport {
    /// The deploy key's public half, when this pass read or minted it;
    /// `None` keeps the published one (or clears it, once the feature is
    /// retracted: the status decides).
    pub public_key: Option<String>,
    /// The teardown's refusal, while it refuses.
    pub teardown: Option<Condition>,
}

/// The flux upkeep, with what it remembers across sweeps: when it last
/// probed for the engine.
#[derive(Debug, Default)]
pub struct Flux {
    probe: engine::EngineProbe,
}

impl Flux {
    /// A fresh upkeep: the first pass probes.
    pub fn new() -> Flux {
        Flux::default()
    }

    /// One pass: the key and the engine while the Cluster declares flux,
    /// the teardown while it does not. `client` is the leader-guarded
    /// client; `now` paces the engine probe.
    pub fn sweep(
        &mut self,
        client: &Client,
        recorder: &Recorder,
        cluster: &Cluster,
        now: Instant,
    ) -> FluxReport {
        if !cluster.feature_enabled(FEATURE_FLUX) {
            return FluxReport {
                public_key: None,
                teardown: teardown::advance(client),
            };
        }
        let public_key = deploy_key::ensure_deploy_key(client, recorder, cluster);
        engine::ensure_engine(client, recorder, cluster, &mut self.probe, now);
        FluxReport {
            public_key,
            teardown: None,
        }
    }
}
