//! The flux teardown: what happens when a Cluster stops declaring flux.
//!
//! **Ownership first.** An adopted cluster may run a Flux somebody else
//! installed long before liken arrived, and `spec.features` is an opt-in
//! list, so a Cluster without `flux` says nothing about that Flux. liken
//! removes only the installation it planted: the flux-system Namespace
//! must carry the `liken.sh/feature=flux` annotation, which the flux
//! feature's own manifest (and the engine seed) put there. Without it the
//! teardown deletes nothing and reports the FluxTeardown condition
//! (reason NotPlantedByLiken) on the Cluster, with the one command that
//! hands the installation to liken. Failing closed has a cost (a
//! namespace whose mark was removed by hand is left alone) and the
//! condition names the remedy; failing open would delete somebody else's
//! GitOps.
//!
//! **Order is the design.** Flux's objects are not inert: deleting the
//! Kustomization while kustomize-controller runs fires its finalizer, and
//! with prune on that garbage-collects everything the repository ever
//! applied, Machines and the Cluster included. So the controllers die
//! first, the finalizers are stripped by hand only once no controller
//! can run them, and only then is anything else deleted. Each sweep
//! advances at most one stage and returns, so the stages are separated
//! by fresh observations, never by waits:
//!
//! 0. No mark on the Namespace: delete nothing, refuse.
//! 1. A controller Deployment (source-controller, kustomize-controller)
//!    exists: delete it (background propagation).
//! 2. A controller pod is still listed (terminating pods included: a
//!    controller that is still shutting down could still run a
//!    finalizer): wait.
//! 3. No controller can run: strip the finalizers of the sync objects
//!    (Kustomization and GitRepository `flux-system`), delete them, the
//!    engine's CRDs, its cluster-scoped RBAC and the planter's grant, and
//!    last the Namespace, which takes the deploy key Secret and every
//!    other namespaced remain with it. The Namespace, which holds the
//!    ownership mark, goes only after every other delete succeeded or
//!    found nothing, so a failed delete is retried on the next sweep
//!    under the same gate, and a Namespace that is already terminating
//!    means the teardown is complete.
//!
//! What survives is deliberate: nothing of the engine (the deploy key
//! goes with the namespace; a re-enabled feature mints a fresh one to
//! register), and everything the repository deployed, as orphans:
//! stopping the sync must not undeploy what it deployed. A converged
//! cluster costs one GET a sweep (the Namespace, absent).
//!
//! Known limit: only the sync objects named `flux-system` have their
//! finalizers stripped. Other Flux objects with finalizers (a second
//! Kustomization, say) keep their CRD in deletion until a person removes
//! their finalizers (`kubectl patch kustomization <name> -n <ns> --type
//! merge -p '{"metadata":{"finalizers":null}}'`).
//!
//! The rights this takes are standing, in the operator's own manifests
//! (images/manifests/cluster-operator-upkeep.yaml), because this work
//! begins exactly when the feature's delivered grants stop applying.

use liken_api::condition::Condition;
use liken_api::{ConditionStatus, annotations::FEATURE, cluster::FEATURE_FLUX};
use liken_kube::request::{DEPLOYMENTS, NAMESPACES, PODS, Resource};
use liken_kube::{Api, Client, DeleteParams, DynamicObject, Error, ListParams, Propagation};
use serde_json::json;

use super::engine::{CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, CUSTOM_RESOURCE_DEFINITIONS};
use super::names::FLUX_NAMESPACE;
use crate::cluster::status::{FLUX_TEARDOWN, NOT_PLANTED_BY_LIKEN};
use crate::runtime::log;

/// The engine's controllers, by Deployment name (and pod `app` label).
pub const CONTROLLERS: [&str; 2] = ["source-controller", "kustomize-controller"];

/// The name of the sync objects liken's flux feature uses.
pub const SYNC_NAME: &str = "flux-system";

/// kustomize.toolkit.fluxcd.io/v1 Kustomizations.
pub const KUSTOMIZATIONS: Resource = Resource {
    group: "kustomize.toolkit.fluxcd.io",
    version: "v1",
    plural: "kustomizations",
    kind: "Kustomization",
    namespaced: true,
};

/// source.toolkit.fluxcd.io/v1 GitRepositories.
pub const GIT_REPOSITORIES: Resource = Resource {
    group: "source.toolkit.fluxcd.io",
    version: "v1",
    plural: "gitrepositories",
    kind: "GitRepository",
    namespaced: true,
};

/// The sync objects, whose finalizers are stripped before they go.
pub const SYNC_OBJECTS: [Resource; 2] = [KUSTOMIZATIONS, GIT_REPOSITORIES];

/// The cluster-scoped remains of stage 3, in the order they are
/// deleted: the engine's CRDs, its RBAC, the planter's grant. The names
/// must match the engine seed and the flux feature's manifests; a test
/// holds them to both.
pub const CLUSTER_REMAINS: &[(Resource, &str)] = &[
    (
        CUSTOM_RESOURCE_DEFINITIONS,
        "buckets.source.toolkit.fluxcd.io",
    ),
    (
        CUSTOM_RESOURCE_DEFINITIONS,
        "externalartifacts.source.toolkit.fluxcd.io",
    ),
    (
        CUSTOM_RESOURCE_DEFINITIONS,
        "gitrepositories.source.toolkit.fluxcd.io",
    ),
    (
        CUSTOM_RESOURCE_DEFINITIONS,
        "helmcharts.source.toolkit.fluxcd.io",
    ),
    (
        CUSTOM_RESOURCE_DEFINITIONS,
        "helmrepositories.source.toolkit.fluxcd.io",
    ),
    (
        CUSTOM_RESOURCE_DEFINITIONS,
        "ocirepositories.source.toolkit.fluxcd.io",
    ),
    (
        CUSTOM_RESOURCE_DEFINITIONS,
        "kustomizations.kustomize.toolkit.fluxcd.io",
    ),
    (CLUSTER_ROLES, "crd-controller-flux-system"),
    (CLUSTER_ROLES, "flux-edit-flux-system"),
    (CLUSTER_ROLES, "flux-view-flux-system"),
    (CLUSTER_ROLE_BINDINGS, "cluster-reconciler-flux-system"),
    (CLUSTER_ROLE_BINDINGS, "crd-controller-flux-system"),
    (CLUSTER_ROLES, PLANTER),
    (CLUSTER_ROLE_BINDINGS, PLANTER),
];

/// The planter's grant, which the flux feature's manifests deliver.
pub const PLANTER: &str = "liken-engine-planter";

/// What a read of the flux-system Namespace found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceView {
    /// No Namespace: nothing to tear down.
    Absent,
    /// The read failed: nothing is known about ownership.
    Unreadable,
    /// The Namespace.
    Present {
        /// Whether it carries `liken.sh/feature=flux`.
        marked: bool,
        /// Whether it is being deleted already.
        terminating: bool,
    },
}

impl NamespaceView {
    /// Reads a Namespace object.
    pub fn of(ns: &DynamicObject) -> NamespaceView {
        let annotation = format!("/metadata/annotations/{}", FEATURE.replace('/', "~1"));
        NamespaceView::Present {
            marked: ns.pointer(&annotation).and_then(|v| v.as_str()) == Some(FEATURE_FLUX),
            terminating: ns.pointer("/metadata/deletionTimestamp").is_some(),
        }
    }
}

/// The ownership gate's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Nothing to do: no installation, one already going, or nothing
    /// known.
    Nothing,
    /// An installation liken did not plant: report, delete nothing.
    Refuse,
    /// liken's installation: go on to the stages.
    Proceed,
}

/// Stage 0: may the teardown touch this installation?
pub fn decide_gate(namespace: &NamespaceView) -> Gate {
    match namespace {
        NamespaceView::Absent | NamespaceView::Unreadable => Gate::Nothing,
        // Stage 3 deletes the Namespace last, after everything else is
        // gone: a terminating Namespace means the teardown has finished
        // (or someone else is deleting it), and the namespace controller
        // does the rest.
        NamespaceView::Present {
            terminating: true, ..
        } => Gate::Nothing,
        NamespaceView::Present { marked: false, .. } => Gate::Refuse,
        NamespaceView::Present { marked: true, .. } => Gate::Proceed,
    }
}

/// The stage a gated teardown is at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Stage 1: delete these controller Deployments.
    DeleteControllers(Vec<&'static str>),
    /// Stage 2: controller pods remain (or could not be listed): wait.
    AwaitPods,
    /// Stage 3: no controller can run; finish.
    Finish,
}

/// Stages 1 to 3, from the controller Deployments that still exist (or
/// could not be read: not provably gone) and the controller pods listed
/// (`None` when the list failed or was not needed).
pub fn decide_stage(controllers: &[&'static str], pods: Option<usize>) -> Stage {
    if !controllers.is_empty() {
        return Stage::DeleteControllers(controllers.to_vec());
    }
    match pods {
        Some(0) => Stage::Finish,
        _ => Stage::AwaitPods,
    }
}

/// The FluxTeardown condition of a refusal. The message carries the
/// remedy, because a person who does want liken to own this Flux needs
/// exactly one command.
pub fn refusal() -> Condition {
    Condition::new(
        FLUX_TEARDOWN,
        ConditionStatus::False,
        NOT_PLANTED_BY_LIKEN,
        format!(
            "the Cluster no longer declares flux, but the {FLUX_NAMESPACE} Namespace carries no \
             {FEATURE}={FEATURE_FLUX} annotation, so liken did not plant this Flux and deleted \
             nothing; to have liken tear it down (controllers, sync objects, the namespace with its \
             Secrets, the CRDs and the engine's ClusterRoles), run: kubectl annotate namespace \
             {FLUX_NAMESPACE} {FEATURE}={FEATURE_FLUX}"
        ),
    )
}

/// Advances the teardown of a retracted flux feature by at most one
/// stage. Answers the FluxTeardown condition while it refuses; `None`
/// means there is nothing to report.
pub fn advance(client: &Client) -> Option<Condition> {
    let namespace = match client.get_opt::<DynamicObject>(&Api::all(NAMESPACES), FLUX_NAMESPACE) {
        Ok(Some(ns)) => NamespaceView::of(&ns),
        Ok(None) => NamespaceView::Absent,
        Err(e) => {
            log::warn(
                "reading the flux-system namespace for the flux teardown",
                &[("error", &e)],
            );
            NamespaceView::Unreadable
        }
    };
    match decide_gate(&namespace) {
        Gate::Nothing => return None,
        Gate::Refuse => return Some(refusal()),
        Gate::Proceed => {}
    }

    let deployments = Api::namespaced(DEPLOYMENTS, FLUX_NAMESPACE);
    let standing: Vec<&'static str> = CONTROLLERS
        .into_iter()
        .filter(
            |name| match client.get_opt::<DynamicObject>(&deployments, name) {
                Ok(found) => found.is_some(),
                Err(e) => {
                    log::warn(
                        "reading a flux controller Deployment for the teardown",
                        &[("deployment", name), ("error", &e)],
                    );
                    true
                }
            },
        )
        .collect();
    let pods = if standing.is_empty() {
        controller_pods(client)
    } else {
        None
    };

    match decide_stage(&standing, pods) {
        Stage::DeleteControllers(names) => {
            let background = DeleteParams {
                propagation: Some(Propagation::Background),
                ..DeleteParams::default()
            };
            for name in names {
                match client.delete(&deployments, name, &background) {
                    Ok(()) => log::info(
                        "the Cluster no longer declares flux and liken planted it; deleted a \
                         controller first, so no prune finalizer can fire",
                        &[("deployment", &name)],
                    ),
                    Err(e) if e.is_not_found() => {}
                    Err(e) => log::warn(
                        "flux teardown: deleting a controller Deployment",
                        &[("deployment", &name), ("error", &e)],
                    ),
                }
            }
        }
        Stage::AwaitPods => {}
        Stage::Finish => finish(client),
    }
    None
}

/// The engine's controller pods in flux-system, alive or terminating;
/// `None` when they could not be listed.
fn controller_pods(client: &Client) -> Option<usize> {
    let selector = format!("app in ({})", CONTROLLERS.join(","));
    match client.list::<DynamicObject>(
        &Api::namespaced(PODS, FLUX_NAMESPACE),
        &ListParams::labels(selector),
    ) {
        Ok(list) => Some(list.items.len() + list.skipped.len()),
        Err(e) => {
            log::warn(
                "listing the flux controller pods for the teardown",
                &[("error", &e)],
            );
            None
        }
    }
}

/// Stage 3.
fn finish(client: &Client) {
    let gone = |e: &Error| e.is_not_found() || e.is_conflict();
    let mut all_gone = true;
    for resource in SYNC_OBJECTS {
        let api = Api::namespaced(resource, FLUX_NAMESPACE);
        let strip = json!({"metadata": {"finalizers": null}});
        if let Err(e) = client.merge_patch::<DynamicObject>(&api, SYNC_NAME, &strip)
            && !gone(&e)
        {
            log::warn(
                "flux teardown: stripping a sync object's finalizers",
                &[("kind", &resource.kind), ("error", &e)],
            );
        }
    }
    let targets = SYNC_OBJECTS
        .iter()
        .map(|r| (Api::namespaced(*r, FLUX_NAMESPACE), SYNC_NAME))
        .chain(CLUSTER_REMAINS.iter().map(|(r, n)| (Api::all(*r), *n)));
    for (api, name) in targets {
        match client.delete(&api, name, &DeleteParams::default()) {
            Ok(()) => log::info(
                "the Cluster no longer declares flux and liken planted it; no controller is \
                 left to run a prune finalizer, so deleted",
                &[("kind", &api.resource().kind), ("name", &name)],
            ),
            Err(e) if gone(&e) => {}
            Err(e) => {
                all_gone = false;
                log::warn(
                    "flux teardown: deleting",
                    &[
                        ("kind", &api.resource().kind),
                        ("name", &name),
                        ("error", &e),
                    ],
                );
            }
        }
    }
    if !all_gone {
        log::warn(
            "flux teardown: keeping the flux-system namespace (and its ownership mark) until every other delete succeeds; the next sweep retries",
            &[],
        );
        return;
    }
    match client.delete(
        &Api::all(NAMESPACES),
        FLUX_NAMESPACE,
        &DeleteParams::default(),
    ) {
        Ok(()) => log::info(
            "the Cluster no longer declares flux and liken planted it; deleted the flux-system \
             namespace, the deploy key Secret with it; the flux teardown is complete",
            &[],
        ),
        Err(e) if gone(&e) => {}
        Err(e) => log::warn(
            "flux teardown: deleting the flux-system namespace",
            &[("error", &e)],
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::flux::engine::{embedded_seed, resolve};

    #[test]
    fn the_gate() {
        let present = |marked, terminating| NamespaceView::Present {
            marked,
            terminating,
        };
        let cases = [
            ("no namespace", NamespaceView::Absent, Gate::Nothing),
            ("unreadable", NamespaceView::Unreadable, Gate::Nothing),
            ("somebody else's flux", present(false, false), Gate::Refuse),
            ("liken's flux", present(true, false), Gate::Proceed),
            ("finished, terminating", present(true, true), Gate::Nothing),
            (
                "someone deleting theirs",
                present(false, true),
                Gate::Nothing,
            ),
        ];
        for (name, view, want) in cases {
            assert_eq!(decide_gate(&view), want, "{name}");
        }
    }

    #[test]
    fn the_stages() {
        let cases: [(&str, &[&'static str], Option<usize>, Stage); 6] = [
            (
                "both controllers up",
                &CONTROLLERS,
                None,
                Stage::DeleteControllers(CONTROLLERS.to_vec()),
            ),
            (
                "one left",
                &["kustomize-controller"],
                Some(0),
                Stage::DeleteControllers(vec!["kustomize-controller"]),
            ),
            ("pods terminating", &[], Some(2), Stage::AwaitPods),
            ("pods unlisted", &[], None, Stage::AwaitPods),
            ("provably gone", &[], Some(0), Stage::Finish),
            (
                "a Deployment back while pods are gone",
                &["source-controller"],
                Some(0),
                Stage::DeleteControllers(vec!["source-controller"]),
            ),
        ];
        for (name, controllers, pods, want) in cases {
            assert_eq!(decide_stage(controllers, pods), want, "{name}");
        }
    }

    #[test]
    fn the_namespace_view() {
        let view = |v: serde_json::Value| NamespaceView::of(&DynamicObject(v));
        assert_eq!(
            view(json!({"metadata": {"annotations": {"liken.sh/feature": "flux"}}})),
            NamespaceView::Present {
                marked: true,
                terminating: false
            }
        );
        assert_eq!(
            view(
                json!({"metadata": {"annotations": {"liken.sh/feature": "other"},
                         "deletionTimestamp": "2026-12-03T00:00:00Z"}})
            ),
            NamespaceView::Present {
                marked: false,
                terminating: true
            }
        );
        assert_eq!(
            view(json!({"metadata": {}})),
            NamespaceView::Present {
                marked: false,
                terminating: false
            }
        );
    }

    #[test]
    fn the_refusal_names_the_command() {
        let c = refusal();
        assert_eq!(c.type_, FLUX_TEARDOWN);
        assert_eq!(c.reason, NOT_PLANTED_BY_LIKEN);
        assert_eq!(c.status, ConditionStatus::False);
        assert!(
            c.message
                .ends_with("run: kubectl annotate namespace flux-system liken.sh/feature=flux"),
            "{}",
            c.message
        );
    }

    /// Every cluster-scoped object the seed plants or the feature's
    /// engine RBAC makes is deleted by stage 3, and stage 3 deletes
    /// nothing the seed or the feature does not make.
    #[test]
    fn the_remains_match_the_seed_and_the_feature() {
        let seed = embedded_seed().as_ref().unwrap();
        let mut planted: Vec<(String, String)> = seed
            .iter()
            .filter(|o| !resolve(o).unwrap().resource().namespaced && o.kind != "Namespace")
            .map(|o| (o.kind.clone(), o.name.clone()))
            .collect();
        let rbac = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../images/features/flux/manifests/flux-engine-rbac.yaml"
        ))
        .unwrap();
        let rbac = crate::cluster::flux::engine::parse_seed(&rbac).unwrap();
        assert!(rbac.iter().all(|o| o.namespace.is_empty()), "{rbac:?}");
        planted.extend(rbac.iter().map(|o| (o.kind.clone(), o.name.clone())));
        planted.push(("ClusterRole".into(), PLANTER.into()));
        planted.push(("ClusterRoleBinding".into(), PLANTER.into()));
        planted.sort();
        let mut deleted: Vec<(String, String)> = CLUSTER_REMAINS
            .iter()
            .map(|(r, n)| (r.kind.to_owned(), (*n).to_owned()))
            .collect();
        deleted.sort();
        assert_eq!(deleted, planted);
        for c in CONTROLLERS {
            assert!(
                seed.iter().any(|o| o.kind == "Deployment" && o.name == c),
                "{c}"
            );
        }
        let feature = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../images/features/flux/manifests/flux-system.yaml"
        ))
        .unwrap();
        assert!(feature.contains(&format!("name: {PLANTER}\n")));
    }
}
