//! The flux teardown on a real control plane: kube-controller-manager
//! (garbage collection, namespace deletion), kube-scheduler and kwok (the
//! controllers' pods run and terminate), the order read from the
//! apiserver's audit log.

use std::time::{Duration, Instant};

use liken_kube::request::{CONFIG_MAPS, DEPLOYMENTS, ListParams, NAMESPACES, Resource, SECRETS};
use liken_kube::{Api, DynamicObject};
use liken_ops::cluster::flux::engine::CUSTOM_RESOURCE_DEFINITIONS;
use liken_ops::cluster::flux::teardown::{
    CLUSTER_REMAINS, CONTROLLERS, GIT_REPOSITORIES, KUSTOMIZATIONS, refusal,
};
use liken_ops::cluster::flux::{Flux, FluxReport};
use serde_json::json;

use crate::support::{self, UPKEEP_RBAC};

const CONTROLLER_PODS: &str = "app in (source-controller,kustomize-controller)";

/// The resource a CustomResourceDefinition serves, read from the CRD
/// itself (its group, plural, scope and first served version).
fn served_resource(admin: &liken_kube::Client, crd: &str) -> Resource {
    let found = admin
        .get_opt::<DynamicObject>(&Api::all(CUSTOM_RESOURCE_DEFINITIONS), crd)
        .unwrap()
        .unwrap_or_else(|| panic!("{crd} vanished"));
    let text = |pointer: &str| -> &'static str {
        let value = found
            .pointer(pointer)
            .and_then(|v| v.as_str())
            .unwrap_or_else(|| panic!("{crd} has no {pointer}"));
        Box::leak(value.to_owned().into_boxed_str())
    };
    let versions = found
        .pointer("/spec/versions")
        .and_then(|v| v.as_array())
        .unwrap_or_else(|| panic!("{crd} has no versions"));
    let version = versions
        .iter()
        .find(|v| v["served"] == true)
        .and_then(|v| v["name"].as_str())
        .unwrap_or_else(|| panic!("{crd} serves no version"));
    Resource {
        group: text("/spec/group"),
        version: Box::leak(version.to_owned().into_boxed_str()),
        plural: text("/spec/names/plural"),
        kind: text("/spec/names/kind"),
        namespaced: text("/spec/scope") == "Namespaced",
    }
}

fn running_controller_pods() -> usize {
    support::pods("flux-system", CONTROLLER_PODS)
        .iter()
        .filter(|p| p.pointer("/status/phase") == Some(&json!("Running")))
        .count()
}

/// A planted Flux is torn down in order; an unmarked one is refused.
pub fn scenario() {
    let cp = support::cp();
    let admin = support::admin();
    let operator = support::operator();
    let recorder = support::recorder();
    support::apply(UPKEEP_RBAC);
    support::apply_flux_feature();
    cp.create_node("flux-node", &[("kubernetes.io/os", "linux")])
        .unwrap();

    // Declared: the key is minted and the engine planted; its
    // controllers run on the kwok node.
    let mut cluster = support::cluster("torn", &[("flux", None)]);
    let deployments = Api::namespaced(DEPLOYMENTS, "flux-system");
    for name in CONTROLLERS {
        let _ = admin.delete(&deployments, name, &Default::default());
        support::wait_gone(&admin, &deployments, name);
    }
    let mut flux = Flux::new();
    let t0 = Instant::now();
    let report = flux.sweep(&operator, &recorder, &cluster, t0);
    assert!(
        report.public_key.is_some() && report.teardown.is_none(),
        "{report:?}"
    );
    support::wait(Duration::from_secs(90), "both controllers running", || {
        running_controller_pods() == 2
    });
    // As in a running cluster, every CRD of the engine is served before
    // anything is torn down (the apiserver's own cleanup of a CRD deleted
    // seconds after its creation can stall behind its retry backoff).
    for (resource, name) in CLUSTER_REMAINS {
        if resource.plural != "customresourcedefinitions" {
            continue;
        }
        support::wait(
            Duration::from_secs(60),
            &format!("{name} established"),
            || {
                admin
                    .get_opt::<DynamicObject>(&Api::all(*resource), name)
                    .ok()
                    .flatten()
                    .and_then(|crd| crd.pointer("/status/conditions").cloned())
                    .and_then(|c| c.as_array().cloned())
                    .is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Established" && c["status"] == "True")
                    })
            },
        );
        // Established is not enough: the apiserver's cleanup lists the
        // instances through the watch cache, and a cache still filling
        // answers "storage is (re)initializing", after which the cleanup's
        // retries back off for minutes on a loaded machine. A list at
        // resourceVersion 0 is served by that same cache, so its success
        // says the cleanup will find it ready.
        let served = served_resource(&admin, name);
        support::wait(
            Duration::from_secs(60),
            &format!("{name}'s watch cache ready"),
            || {
                let params = ListParams {
                    resource_version: Some("0".into()),
                    limit: Some(1),
                    ..ListParams::default()
                };
                admin
                    .list::<DynamicObject>(&Api::all(served), &params)
                    .is_ok()
            },
        );
    }
    // The sync objects, with the finalizer Flux's controllers add, and
    // something the repository deployed.
    let sync = |kind: &str, spec: serde_json::Value| {
        json!({
            "apiVersion": if kind == "Kustomization" { "kustomize.toolkit.fluxcd.io/v1" } else { "source.toolkit.fluxcd.io/v1" },
            "kind": kind,
            "metadata": {"name": "flux-system", "namespace": "flux-system",
                         "finalizers": ["finalizers.fluxcd.io"]},
            "spec": spec,
        })
    };
    admin
        .create::<DynamicObject, _>(
            &Api::namespaced(GIT_REPOSITORIES, "flux-system"),
            &sync(
                "GitRepository",
                json!({"url": "ssh://git@forge.example/fleet.git", "interval": "1m",
                       "ref": {"branch": "main"}, "secretRef": {"name": "flux-system"}}),
            ),
        )
        .unwrap();
    admin
        .create::<DynamicObject, _>(
            &Api::namespaced(KUSTOMIZATIONS, "flux-system"),
            &sync(
                "Kustomization",
                json!({"interval": "10m", "path": "./", "prune": true,
                       "sourceRef": {"kind": "GitRepository", "name": "flux-system"}}),
            ),
        )
        .unwrap();
    let deployed = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "deployed-by-flux", "namespace": "default",
                     "labels": {"kustomize.toolkit.fluxcd.io/name": "flux-system"}}});
    let _ = admin.create::<DynamicObject, _>(&Api::namespaced(CONFIG_MAPS, "default"), &deployed);

    // Retracted, but the namespace has lost its mark: nothing is
    // deleted, and the refusal says how to hand the Flux to liken.
    cluster.spec.features.clear();
    support::kubectl(&["annotate", "namespace", "flux-system", "liken.sh/feature-"]);
    let mark = cp.audit_mark().unwrap();
    for _ in 0..3 {
        let report = flux.sweep(&operator, &recorder, &cluster, Instant::now());
        assert_eq!(
            report,
            FluxReport {
                public_key: None,
                teardown: Some(refusal())
            }
        );
    }
    let requests = support::operator_requests(mark);
    let seen: Vec<String> = requests.iter().map(|e| e.describe()).collect();
    assert!(
        requests
            .iter()
            .all(|e| e.verb == "get" && e.resource == "namespaces" && e.name == "flux-system"),
        "a refused teardown did more than read the namespace: {seen:#?}"
    );
    assert_eq!(running_controller_pods(), 2);

    // The mark back: the teardown proceeds, one stage a sweep.
    support::kubectl(&[
        "annotate",
        "namespace",
        "flux-system",
        "liken.sh/feature=flux",
    ]);
    let mark = cp.audit_mark().unwrap();
    let namespaces = Api::all(NAMESPACES);
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut passes = 0;
    loop {
        let report = flux.sweep(&operator, &recorder, &cluster, Instant::now());
        assert_eq!(report, FluxReport::default());
        passes += 1;
        let gone = matches!(
            admin.get_opt::<DynamicObject>(&namespaces, "flux-system"),
            Ok(None)
        );
        if gone {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the teardown did not finish within 3 minutes"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        passes >= 3,
        "a teardown needs a pass per stage; took {passes}"
    );

    // The order, from the audit log.
    let all = cp.audit_since(mark).unwrap();
    let by_operator: Vec<(usize, &liken_testenv::audit::AuditEvent)> = all
        .iter()
        .enumerate()
        .filter(|(_, e)| e.user == support::operator_user() && e.is_write())
        .collect();
    let refused: Vec<String> = by_operator
        .iter()
        .filter(|(_, e)| e.code == 403)
        .map(|(_, e)| e.describe())
        .collect();
    assert!(refused.is_empty(), "refused: {refused:?}");
    let first = |pred: &dyn Fn(&liken_testenv::audit::AuditEvent) -> bool| {
        by_operator
            .iter()
            .find(|(_, e)| pred(e))
            .map(|(i, _)| *i)
            .unwrap_or_else(|| {
                panic!(
                    "no such request; the operator wrote: {:#?}",
                    by_operator
                        .iter()
                        .map(|(_, e)| e.describe())
                        .collect::<Vec<_>>()
                )
            })
    };
    let last = |pred: &dyn Fn(&liken_testenv::audit::AuditEvent) -> bool| {
        all.iter()
            .enumerate()
            .filter(|(_, e)| pred(e))
            .map(|(i, _)| i)
            .max()
            .unwrap()
    };
    let controller_deletes: Vec<usize> = CONTROLLERS
        .iter()
        .map(|c| {
            first(&|e| {
                e.verb == "delete" && e.resource == "deployments" && e.name == *c && e.code == 200
            })
        })
        .collect();
    let first_strip = first(&|e| {
        e.verb == "patch"
            && e.name == "flux-system"
            && (e.resource == "kustomizations" || e.resource == "gitrepositories")
    });
    // Stage 1 before stage 3.
    assert!(controller_deletes.iter().all(|d| *d < first_strip));
    // Stage 2: the last controller pod was gone (its final delete
    // answered) before the first finalizer was stripped.
    let last_pod_delete = last(&|e| {
        e.verb == "delete" && e.resource == "pods" && e.namespace == "flux-system" && e.code == 200
    });
    assert!(
        last_pod_delete < first_strip,
        "a finalizer was stripped while a controller pod existed"
    );
    // Each sync object: finalizers stripped, then deleted.
    for resource in ["kustomizations", "gitrepositories"] {
        let strip = first(&|e| e.verb == "patch" && e.resource == resource && e.code == 200);
        let delete = first(&|e| e.verb == "delete" && e.resource == resource && e.code == 200);
        assert!(
            strip < delete,
            "{resource}: deleted before its finalizers were stripped"
        );
    }
    // The cluster-scoped remains after the sync objects, in the declared
    // order, and the namespace last of all.
    let mut previous = first(&|e| e.verb == "delete" && e.resource == "gitrepositories");
    for (resource, name) in CLUSTER_REMAINS {
        let at = first(&|e| e.verb == "delete" && e.resource == resource.plural && e.name == *name);
        assert!(
            at > previous,
            "{} {name} deleted out of order",
            resource.kind
        );
        previous = at;
    }
    let namespace_delete = first(&|e| e.verb == "delete" && e.resource == "namespaces");
    assert!(namespace_delete > previous);
    assert!(
        by_operator.iter().all(|(i, e)| *i <= namespace_delete
            || e.verb != "delete"
            || e.resource == "namespaces")
    );

    // Everything of the engine is gone; what the repository deployed stays.
    assert!(support::pods("flux-system", CONTROLLER_PODS).is_empty());
    for (resource, name) in CLUSTER_REMAINS {
        support::wait_gone(&admin, &Api::all(*resource), name);
    }
    assert!(
        admin
            .get_opt::<DynamicObject>(&Api::namespaced(SECRETS, "flux-system"), "flux-system")
            .unwrap()
            .is_none()
    );
    assert!(
        admin
            .get_opt::<DynamicObject>(&Api::namespaced(CONFIG_MAPS, "default"), "deployed-by-flux")
            .unwrap()
            .is_some()
    );

    // Converged: one read a sweep, no writes.
    let mark = cp.audit_mark().unwrap();
    assert_eq!(
        flux.sweep(&operator, &recorder, &cluster, Instant::now()),
        FluxReport::default()
    );
    let seen: Vec<String> = support::operator_requests(mark)
        .iter()
        .map(|e| e.describe())
        .collect();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].starts_with("get namespaces flux-system/flux-system -> 404"),
        "{seen:?}"
    );
    recorder.shutdown(Duration::from_secs(5));
}
