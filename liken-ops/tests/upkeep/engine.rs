//! The engine seed, planted into a real apiserver under the planter's
//! grant the flux feature ships.

use std::time::{Duration, Instant};

use liken_kube::request::{DEPLOYMENTS, Resource};
use liken_kube::{Api, DynamicObject, Error};
use liken_ops::cluster::flux::engine::{
    self, CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, EngineProbe, ensure_engine, resolve,
};
use serde_json::json;

use crate::support::{self, UPKEEP_RBAC};

/// An absent engine is planted, once a probe, and present objects stay.
pub fn scenario() {
    let admin = support::admin();
    let operator = support::operator();
    let recorder = support::recorder();
    support::apply(UPKEEP_RBAC);
    support::apply_flux_feature();
    let cluster = support::cluster("seeded", &[("flux", None)]);
    let deployments = Api::namespaced(DEPLOYMENTS, "flux-system");
    for name in ["kustomize-controller", "source-controller"] {
        let _ = admin.delete(&deployments, name, &Default::default());
        support::wait_gone(&admin, &deployments, name);
    }
    let seed = engine::embedded_seed().as_ref().unwrap();

    // The first pass probes, finds no applier, and plants every object;
    // the Namespace (made by the feature's manifest) is left as it is.
    let t0 = Instant::now();
    let mut probe = EngineProbe::default();
    let mark = support::cp().audit_mark().unwrap();
    ensure_engine(&operator, &recorder, &cluster, &mut probe, t0);
    let requests = support::operator_requests(mark);
    let creates: Vec<_> = requests.iter().filter(|e| e.verb == "create").collect();
    assert_eq!(creates.len(), seed.len(), "{requests:#?}");
    // Nothing refused: every create landed or found its name taken.
    let refused: Vec<_> = requests
        .iter()
        .filter(|e| e.verb == "create" && !matches!(e.code, 201 | 409))
        .collect();
    assert!(refused.is_empty(), "refused: {refused:#?}");
    for o in seed {
        let got: Option<DynamicObject> = admin.get_opt(&resolve(o).unwrap(), &o.name).unwrap();
        assert!(got.is_some(), "{} {} was not planted", o.kind, o.name);
    }
    let ns: DynamicObject = admin
        .get(&Api::all(liken_kube::request::NAMESPACES), "flux-system")
        .unwrap();
    assert_eq!(
        ns.pointer("/metadata/annotations/liken.sh~1feature"),
        Some(&json!("flux"))
    );

    // Within the minute no request at all; at the minute, one GET.
    let mark = support::cp().audit_mark().unwrap();
    ensure_engine(
        &operator,
        &recorder,
        &cluster,
        &mut probe,
        t0 + Duration::from_secs(10),
    );
    ensure_engine(
        &operator,
        &recorder,
        &cluster,
        &mut probe,
        t0 + Duration::from_secs(59),
    );
    assert!(support::operator_requests(mark).is_empty());
    ensure_engine(
        &operator,
        &recorder,
        &cluster,
        &mut probe,
        t0 + Duration::from_secs(60),
    );
    let requests = support::operator_requests(mark);
    let seen: Vec<(&str, &str, &str)> = requests
        .iter()
        .map(|e| (e.verb.as_str(), e.resource.as_str(), e.name.as_str()))
        .collect();
    assert_eq!(seen, [("get", "deployments", "kustomize-controller")]);

    // The applier deleted, the source controller changed by hand: only
    // the applier comes back, and the hand edit stays.
    admin
        .merge_patch::<DynamicObject>(
            &deployments,
            "source-controller",
            &json!({"metadata": {"labels": {"edited": "by-hand"}}}),
        )
        .unwrap();
    admin
        .delete(&deployments, "kustomize-controller", &Default::default())
        .unwrap();
    support::wait_gone(&admin, &deployments, "kustomize-controller");
    let mark = support::cp().audit_mark().unwrap();
    ensure_engine(
        &operator,
        &recorder,
        &cluster,
        &mut probe,
        t0 + Duration::from_secs(120),
    );
    let created: Vec<String> = support::operator_requests(mark)
        .iter()
        .filter(|e| e.verb == "create" && e.code == 201)
        .map(|e| format!("{}/{}", e.resource, e.name))
        .collect();
    assert_eq!(created, ["deployments/kustomize-controller"], "{created:?}");
    let source: DynamicObject = admin.get(&deployments, "source-controller").unwrap();
    assert_eq!(
        source.pointer("/metadata/labels/edited"),
        Some(&json!("by-hand"))
    );

    // Both plantings posted FluxEngineSeeded; as client-go's recorder
    // does, the second one (same reason, action and object, within the
    // series window) counts in the first Event's series.
    recorder.shutdown(Duration::from_secs(10));
    let notes = support::kubectl(&[
        "get",
        "events.events.k8s.io",
        "-n",
        "default",
        "--field-selector",
        "reason=FluxEngineSeeded,regarding.name=seeded",
        "-o",
        "jsonpath={range .items[*]}{.type} {.series.count} {.note}{\"\\n\"}{end}",
    ]);
    let first = format!(
        "Normal 2 the flux engine was absent; planted its seed: {} objects created, 1 present already, 0 failed",
        seed.len() - 1
    );
    assert_eq!(notes.trim(), first, "{notes}");
}

/// rbac.authorization.k8s.io/v1 RoleBindings.
const ROLE_BINDINGS: Resource = Resource {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    plural: "rolebindings",
    kind: "RoleBinding",
    namespaced: true,
};

/// The attack the planter's grant once allowed: with every right the
/// flux feature gives it, the cluster operator's own token (what root on
/// a leader holds) cannot make itself cluster-admin, write a ClusterRole,
/// or widen the engine's. The engine's RBAC is applied by k3s, not
/// planted, so the grant holds no `bind`, `escalate` or RBAC write.
pub fn cannot_grant_itself_anything() {
    support::apply_flux_feature();
    let operator = support::operator();
    let user = support::operator_user();
    // `refusal`: the end of the apiserver's message after the user's
    // name, e.g. `create resource "clusterroles"` (and the namespace,
    // for a namespaced resource).
    let refused = |what: &str, result: Result<DynamicObject, Error>, refusal: &str| match result {
        Err(Error::Forbidden { message, .. }) => assert!(
            message.contains(&format!("User \"{user}\" cannot {refusal}")),
            "{what}: {message}"
        ),
        other => panic!("{what} was not refused as forbidden: {other:?}"),
    };
    let subject = json!([{"kind": "ServiceAccount", "name": support::SA_NAME,
                          "namespace": support::SA_NAMESPACE}]);
    refused(
        "binding cluster-admin to the operator",
        operator.create(
            &Api::all(CLUSTER_ROLE_BINDINGS),
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": "liken-takeover"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": "cluster-admin"},
                    "subjects": subject}),
        ),
        r#"create resource "clusterrolebindings" in API group "rbac.authorization.k8s.io""#,
    );
    refused(
        "a ClusterRole reading every Secret",
        operator.create(
            &Api::all(CLUSTER_ROLES),
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": {"name": "liken-takeover"},
                    "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]}),
        ),
        r#"create resource "clusterroles" in API group "rbac.authorization.k8s.io""#,
    );
    // The engine's own role, which its controllers are bound to, widened
    // to everything.
    refused(
        "widening the engine's ClusterRole",
        operator.merge_patch(
            &Api::all(CLUSTER_ROLES),
            "crd-controller-flux-system",
            &json!({"rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
        ),
        r#"patch resource "clusterroles" in API group "rbac.authorization.k8s.io""#,
    );
    // A namespaced way round: cluster-admin bound in flux-system, where
    // the feature's Role lets the operator create the engine's objects.
    refused(
        "a RoleBinding to cluster-admin",
        operator.create(
            &Api::namespaced(ROLE_BINDINGS, "flux-system"),
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": "liken-takeover", "namespace": "flux-system"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": "cluster-admin"},
                    "subjects": subject}),
        ),
        r#"create resource "rolebindings" in API group "rbac.authorization.k8s.io" in the namespace "flux-system""#,
    );
}
