//! Eviction under a real PodDisruptionBudget: pods bound by
//! kube-scheduler to a kwok Node, running and Ready there, a budget whose
//! status kube-controller-manager's disruption controller keeps, and the
//! apiserver's eviction subresource deciding. The refusal must arrive as
//! `Error::DisruptionBudget`, apart from every other failure; the
//! apiserver's audit log shows the client's User-Agent on its writes.
//!
//! This binary runs its own control plane (kube-controller-manager,
//! kube-scheduler, kwok and the audit log).

use std::time::{Duration, Instant};

use liken_kube::request::{POD_DISRUPTION_BUDGETS, PODS};
use liken_kube::{Api, Client, Config, DeleteParams, DynamicObject, Error, ListParams};
use liken_testenv::{ControlPlane, Options};
use serde_json::json;

fn control_plane() -> ControlPlane {
    liken_testenv::start(Options {
        controller_manager: true,
        kwok: true,
        scheduler: true,
        audit: true,
        ..Options::default()
    })
    .unwrap_or_else(|e| panic!("liken-testenv: the test control plane is not available: {e}"))
}

const NS: &str = "liken-evict";

fn pod(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "labels": {"app": "web"}},
           "spec": {"containers": [{"name": "web", "image": "registry.invalid/web"}]}})
}

/// Waits until `check` holds, or fails saying `what`.
fn wait_for(what: &str, within: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn ready_pods(c: &Client) -> usize {
    c.list::<DynamicObject>(&Api::namespaced(PODS, NS), &ListParams::labels("app=web"))
        .unwrap()
        .items
        .iter()
        .filter(|p| {
            p.0["metadata"]["deletionTimestamp"].is_null()
                && p.0["status"]["phase"] == "Running"
                && p.0["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        })
        .count()
}

/// The budget's status as the disruption controller last wrote it:
/// (healthy pods it counts, disruptions it allows).
fn budget(c: &Client) -> (i64, i64) {
    let pdb: DynamicObject = c
        .get(&Api::namespaced(POD_DISRUPTION_BUDGETS, NS), "web")
        .unwrap();
    let observed = pdb.0["status"]["observedGeneration"] == pdb.0["metadata"]["generation"];
    if !observed {
        return (-1, -1);
    }
    (
        pdb.0["status"]["currentHealthy"].as_i64().unwrap_or(-1),
        pdb.0["status"]["disruptionsAllowed"].as_i64().unwrap_or(-1),
    )
}

#[test]
fn a_budget_refuses_an_eviction_as_its_own_error_and_then_allows_one() {
    let cp = control_plane();
    let admin = Client::new(&Config::from_kubeconfig(cp.kubeconfig(), None).unwrap()).unwrap();
    let drainer = admin.identify("liken-test-drainer", "2026.07.01-001");
    cp.create_node("evict-node-1", &[]).unwrap();
    cp.ensure_namespace(NS).unwrap();
    let pods = Api::namespaced(PODS, NS);
    // Pods need the namespace's default ServiceAccount, which the
    // controller-manager makes.
    wait_for(
        "the default ServiceAccount",
        Duration::from_secs(60),
        || {
            cp.request(
                "GET",
                &format!("/api/v1/namespaces/{NS}/serviceaccounts/default"),
                None,
            )
            .is_ok_and(|(code, _)| code == 200)
        },
    );
    for name in ["web-1", "web-2"] {
        admin.create::<DynamicObject, _>(&pods, &pod(name)).unwrap();
    }
    admin
        .create::<DynamicObject, _>(
            &Api::namespaced(POD_DISRUPTION_BUDGETS, NS),
            &json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": "web"},
                    "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
        )
        .unwrap();
    wait_for(
        "both pods Running and Ready on the kwok node",
        Duration::from_secs(90),
        || ready_pods(&admin) == 2,
    );
    wait_for(
        "the disruption controller counting 2 healthy pods",
        Duration::from_secs(90),
        || budget(&admin) == (2, 0),
    );

    // The budget says no: its own error, with its words, and the pod stays.
    let mark = cp.audit_mark().unwrap();
    let e = drainer
        .evict(&pods, "web-1", &DeleteParams::default())
        .unwrap_err();
    assert!(
        matches!(e, Error::DisruptionBudget { code: 429, .. }),
        "{e:?}"
    );
    assert!(e.is_disruption_budget() && !e.is_too_many_requests());
    assert!(e.message().contains("needs 2 healthy pods"), "{e}");
    assert!(e.to_string().contains("PodDisruptionBudget"), "{e}");
    let still: DynamicObject = admin.get(&pods, "web-1").unwrap();
    assert!(still.0["metadata"]["deletionTimestamp"].is_null());
    // One attempt at the apiserver: a budget's 429 is never retried.
    let evictions: Vec<_> = cp
        .audit_since(mark)
        .unwrap()
        .into_iter()
        .filter(|e| e.subresource == "eviction")
        .collect();
    assert_eq!(evictions.len(), 1, "{evictions:?}");
    assert_eq!(evictions[0].code, 429);
    assert!(
        evictions[0]
            .user_agent
            .starts_with("liken-test-drainer/2026.07.01-001 ("),
        "{:?}",
        evictions[0].user_agent
    );

    // Other failures are not a budget's: a pod that is not there.
    let e = drainer
        .evict(&pods, "web-9", &DeleteParams::default())
        .unwrap_err();
    assert!(e.is_not_found(), "{e:?}");

    // A third pod makes room for one disruption: the eviction goes
    // through and the pod is on its way out.
    admin
        .create::<DynamicObject, _>(&pods, &pod("web-3"))
        .unwrap();
    wait_for(
        "the disruption controller allowing one disruption",
        Duration::from_secs(90),
        || budget(&admin) == (3, 1),
    );
    drainer
        .evict(&pods, "web-1", &DeleteParams::default())
        .unwrap();
    wait_for("web-1 leaving", Duration::from_secs(60), || {
        admin
            .get_opt::<DynamicObject>(&pods, "web-1")
            .unwrap()
            .is_none_or(|p| !p.0["metadata"]["deletionTimestamp"].is_null())
    });

    // The cordon a drain starts with, seen at the apiserver too.
    let mark = cp.audit_mark().unwrap();
    drainer.cordon("evict-node-1").unwrap();
    let writes = cp.audit_since(mark).unwrap();
    let cordon = writes
        .iter()
        .find(|e| e.resource == "nodes" && e.verb == "patch")
        .expect("the cordon's PATCH in the audit log");
    assert!(
        cordon.user_agent.starts_with("liken-test-drainer/"),
        "{cordon:?}"
    );
    assert!(
        cordon.uri.contains("fieldManager=liken-test-drainer"),
        "{cordon:?}"
    );
}
