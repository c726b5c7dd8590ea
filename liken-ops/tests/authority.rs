//! Who can speak for the fleet: each closed path performed with the
//! attacker's own credentials against the real kube-apiserver, under the
//! RBAC and admission policy images/manifests ships, and the exact
//! refusal asserted.
//!
//! - a machine operator's token (a TokenRequest bound to its DaemonSet
//!   pod on its node, as the kubelet gets it), which is what root on one
//!   follower holds;
//! - a tenant's namespaced ServiceAccount.

#[path = "machine/support.rs"]
mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::*;

const POLICY: &str = "ValidatingAdmissionPolicy 'liken-machine-operator-own-machine'";
const OPERATOR: &str = "system:serviceaccount:liken-system:liken-machine-operator";

/// The shared control plane, once the admission policy is in force.
///
/// kube-apiserver compiles a ValidatingAdmissionPolicy and its binding
/// from its own informer, a moment after they are applied, and admits
/// everything until then: an attack tried in that moment was seen admitted
/// once. So before any attack, a probe the policy refuses (node
/// auth-probe's operator creating a Lease under another name) is tried
/// until it is refused; an admitted probe is deleted and tried again.
fn cp() -> &'static liken_testenv::ControlPlane {
    static READY: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    let cp = support::cp();
    READY.get_or_init(|| {
        cp.create_node("auth-probe", &[]).unwrap();
        let kc = operator_kubeconfig("auth-probe");
        let probe = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": {"name": "auth-probe-other", "namespace": "liken-system"},
                           "spec": {"holderIdentity": "auth-probe"}});
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let path =
            std::env::temp_dir().join(format!("authority-{}-probe.json", std::process::id()));
        std::fs::write(&path, probe.to_string()).unwrap();
        loop {
            // Not create_as: that reaches this function again, whose
            // initialisation is under way.
            let out = cp
                .kubectl_as(&kc)
                .args(["create", "-f", path.to_str().unwrap()])
                .output()
                .unwrap();
            let (ok, err) = (
                out.status.success(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
            if !ok && err.contains(POLICY) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the admission policy was not in force within 60 s: {err}"
            );
            if ok {
                let _ = cp
                    .kubectl()
                    .args(["-n", "liken-system", "delete", "lease", "auth-probe-other"])
                    .output();
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        let _ = std::fs::remove_file(&path);
    });
    cp
}

/// Runs kubectl with a kubeconfig; answers (success, stderr).
fn kubectl_as(kc: &Path, args: &[&str]) -> (bool, String) {
    let out = cp().kubectl_as(kc).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kubectl create -f` of one object, as `kc`.
fn create_as(kc: &Path, object: &Value) -> (bool, String) {
    let path = std::env::temp_dir().join(format!(
        "authority-{}-{}.json",
        std::process::id(),
        object["metadata"]["name"].as_str().unwrap_or("x")
    ));
    std::fs::write(&path, object.to_string()).unwrap();
    let r = kubectl_as(kc, &["create", "-f", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    r
}

fn refused_by_policy(ok: bool, err: &str, message: &str) {
    assert!(!ok, "admitted; expected the policy to refuse: {message}");
    assert!(
        err.contains(POLICY) && err.contains(message),
        "refused, but not as expected ({message}):\n{err}"
    );
}

fn forbidden(ok: bool, err: &str, verb: &str, resource: &str, group: &str, user: &str) {
    assert!(!ok, "admitted; expected RBAC to forbid {verb} {resource}");
    let want =
        format!("User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"{group}\"");
    assert!(err.contains(&want), "expected {want:?} in:\n{err}");
}

/// The fleet's Cluster cannot be created, replaced or shadowed by a
/// machine: the operator's token may only read Clusters.
#[test]
fn a_machine_cannot_create_or_write_a_cluster() {
    let cp = cp();
    cp.create_node("auth-c1", &[]).unwrap();
    ensure_cluster(&cluster_doc(&["auth-leader"]));
    let kc = operator_kubeconfig("auth-c1");
    // The attack of the security read: a second Cluster named to sort
    // first, with the attacker's own source.
    let evil = json!({
        "apiVersion": "liken.sh/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "aaa-evil"},
        "spec": {"endpoint": "https://10.0.0.66:6443", "leaders": ["auth-c1"],
                 "releases": {"source": "http://10.0.0.66/channel"}}
    });
    let (ok, err) = create_as(&kc, &evil);
    forbidden(ok, &err, "create", "clusters", "liken.sh", OPERATOR);
    let (ok, err) = kubectl_as(
        &kc,
        &[
            "patch",
            "cluster",
            "home",
            "--type=merge",
            "-p",
            r#"{"spec":{"releases":{"source":"http://10.0.0.66/channel"}}}"#,
        ],
    );
    forbidden(ok, &err, "patch", "clusters", "liken.sh", OPERATOR);
    let (ok, err) = kubectl_as(&kc, &["delete", "cluster", "home"]);
    forbidden(ok, &err, "delete", "clusters", "liken.sh", OPERATOR);
    // Reading is what it needs, and all it has.
    let (ok, err) = kubectl_as(&kc, &["get", "cluster", "home"]);
    assert!(ok, "{err}");
}

/// One machine cannot take another's heartbeat before it first beats,
/// nor add Machines that count against the budget.
#[test]
fn a_machine_writes_only_what_bears_its_own_name() {
    let cp = cp();
    for n in ["auth-n1", "auth-n2"] {
        cp.create_node(n, &[]).unwrap();
    }
    let kc = operator_kubeconfig("auth-n1");
    let lease = |name: &str, holder: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": name, "namespace": "liken-system"},
               "spec": {"holderIdentity": holder}})
    };
    // auth-2's Lease, held by the attacker, before auth-2's first beat.
    let (ok, err) = create_as(&kc, &lease("auth-n2", "auth-n1"));
    refused_by_policy(
        ok,
        &err,
        "the machine operator on node auth-n1 may renew only the heartbeat it holds, named \
         auth-n1, not auth-n2",
    );
    let (ok, err) = create_as(&kc, &lease("auth-n1", "auth-n1"));
    assert!(ok, "its own heartbeat: {err}");

    // Machines under other names, even ones that claim its hostname.
    let machine = |name: &str, hostname: Option<&str>| {
        let mut m = json!({"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
                           "metadata": {"name": name}, "spec": {}});
        if let Some(h) = hostname {
            m["spec"]["hostname"] = json!(h);
        }
        m
    };
    for (name, hostname) in [("auth-extra", Some("auth-n1")), ("auth-n2", None)] {
        let (ok, err) = create_as(&kc, &machine(name, hostname));
        refused_by_policy(
            ok,
            &err,
            &format!(
                "the machine operator on node auth-n1 may create only the Machine named \
                 auth-n1, not {name}"
            ),
        );
    }
    let (ok, err) = create_as(&kc, &machine("auth-n1", Some("auth-n2")));
    refused_by_policy(
        ok,
        &err,
        "the machine operator on node auth-n1 may create only the Machine named auth-n1",
    );
    let (ok, err) = create_as(&kc, &machine("auth-n1", None));
    assert!(ok, "its own Machine: {err}");
}

/// On its own Node, a machine may not claim what the control plane
/// decides: the kubernetes.io and k8s.io labels and taints NodeRestriction
/// keeps from kubelets. What a Machine's spec declares still applies.
#[test]
fn a_machine_cannot_promote_itself_on_its_node() {
    let cp = cp();
    cp.create_node("auth-p1", &[]).unwrap();
    // The control plane's own taint, as on a leader.
    let out = cp
        .kubectl()
        .args([
            "patch",
            "node",
            "auth-p1",
            "--type=merge",
            "-p",
            r#"{"spec":{"taints":[{"key":"node-role.kubernetes.io/control-plane","effect":"NoSchedule"}]}}"#,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kc = operator_kubeconfig("auth-p1");
    let patch = |body: &str| {
        kubectl_as(
            &kc,
            &["patch", "node", "auth-p1", "--type=merge", "-p", body],
        )
    };

    for (key, value) in [
        ("node-role.kubernetes.io/control-plane", "true"),
        ("node-restriction.kubernetes.io/leader", "true"),
        ("kubernetes.io/role", "leader"),
        ("example.k8s.io/trusted", "yes"),
    ] {
        let (ok, err) = patch(&format!(
            r#"{{"metadata":{{"labels":{{"{key}":"{value}"}}}}}}"#
        ));
        refused_by_policy(
            ok,
            &err,
            &format!(
                "the machine operator on node auth-p1 may not set or remove the labels {key}: \
                 keys in the kubernetes.io and k8s.io namespaces outside the kubelet's own set \
                 are the control plane's (NodeRestriction)"
            ),
        );
    }
    // Clearing the control plane's taint (to draw workloads) is refused,
    // and so is adding one of its namespace.
    let (ok, err) = patch(r#"{"spec":{"taints":[]}}"#);
    refused_by_policy(
        ok,
        &err,
        "the machine operator on node auth-p1 may not add or remove the taints \
         node-role.kubernetes.io/control-plane: taints in the kubernetes.io and k8s.io \
         namespaces are the control plane's",
    );
    // What a Machine spec declares (its own keys), and the kubelet's own
    // set, still apply; the control plane's taint is kept as it was.
    let (ok, err) = patch(
        r#"{"metadata":{"labels":{"liken.test/tier":"db","node.kubernetes.io/pool":"a","topology.kubernetes.io/zone":"z1"}},
            "spec":{"taints":[{"key":"node-role.kubernetes.io/control-plane","effect":"NoSchedule"},
                              {"key":"liken.test/dedicated","value":"db","effect":"NoSchedule"}]}}"#,
    );
    assert!(ok, "the spec's labels and taints: {err}");
    let node = get("/api/v1/nodes/auth-p1").unwrap();
    assert_eq!(node["metadata"]["labels"]["liken.test/tier"], "db");
    assert_eq!(node["spec"]["taints"].as_array().unwrap().len(), 2);
    let (ok, err) = patch(r#"{"metadata":{"labels":{"liken.test/tier":null}}}"#);
    assert!(ok, "removing its own label: {err}");
}

/// A tenant's namespaced ServiceAccount can touch none of it.
#[test]
fn a_tenant_cannot_touch_the_fleet() {
    let cp = cp();
    cp.ensure_namespace("tenant-a").unwrap();
    let (code, v) = cp
        .request(
            "POST",
            "/api/v1/namespaces/tenant-a/serviceaccounts",
            Some(&json!({"metadata": {"name": "app"}})),
        )
        .unwrap();
    assert!(code == 201 || code == 409, "{code} {v}");
    // The tenant's admin inside its namespace: every right there.
    cp.apply(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: app-admin, namespace: tenant-a}\n\
         roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}\n\
         subjects: [{kind: ServiceAccount, name: app, namespace: tenant-a}]\n",
    );
    ensure_cluster(&cluster_doc(&["auth-leader"]));
    let kc = cp.kubeconfig_for("tenant-a", "app").unwrap();
    let user = "system:serviceaccount:tenant-a:app";
    let evil = json!({"apiVersion": "liken.sh/v1alpha1", "kind": "Cluster",
                      "metadata": {"name": "aaa-tenant"},
                      "spec": {"endpoint": "https://10.0.0.66:6443", "leaders": ["x"]}});
    let (ok, err) = create_as(&kc, &evil);
    forbidden(ok, &err, "create", "clusters", "liken.sh", user);
    let (ok, err) = kubectl_as(&kc, &["get", "machines"]);
    forbidden(ok, &err, "list", "machines", "liken.sh", user);
    let (ok, err) = kubectl_as(&kc, &["-n", "liken-system", "get", "lease"]);
    forbidden(ok, &err, "list", "leases", "coordination.k8s.io", user);
    let (ok, err) = kubectl_as(
        &kc,
        &[
            "-n",
            "liken-system",
            "create",
            "token",
            "liken-machine-operator",
        ],
    );
    forbidden(ok, &err, "create", "serviceaccounts/token", "", user);
}

/// The attack's other half: a second Cluster that sorts first, created by
/// whoever still could, is never followed by a machine operator. Its
/// Machine keeps judging the deployment's Cluster, and it says so once,
/// in a Warning Event about the other Cluster.
#[test]
fn a_machine_operator_follows_only_the_deployments_cluster() {
    // The fleet's one Cluster, as every test here makes it.
    let c = cluster_doc(&["auth-leader"]);
    let m = machine_doc("auth-f1");
    let (_host, op) = start_machine("auth-f1", &m, &c, &[]);
    let (code, v) = cp()
        .request(
            "POST",
            "/apis/liken.sh/v1alpha1/clusters",
            Some(
                &json!({"apiVersion": "liken.sh/v1alpha1", "kind": "Cluster",
                         "metadata": {"name": "aaa-foreign"},
                         "spec": {"endpoint": "https://10.0.0.66:6443", "leaders": ["auth-f1"],
                                  "version": "2026.12.01-001",
                                  "releases": {"source": "http://10.0.0.66/channel"}}}),
            ),
        )
        .unwrap();
    assert_eq!(code, 201, "{v}");
    let note = wait_for(
        "the ForeignCluster Event",
        std::time::Duration::from_secs(30),
        || {
            let v = get("/apis/events.k8s.io/v1/namespaces/default/events").unwrap();
            v["items"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| {
                    e["regarding"]["name"] == "aaa-foreign"
                        && e["reason"] == "ForeignCluster"
                        && e["reportingController"] == "liken.sh/machine-operator"
                })
                .map(|e| e["note"].as_str().unwrap_or_default().to_owned())
                .ok_or_else(|| op.log_text())
        },
    );
    assert!(
        note.contains("the deployment names its Cluster home"),
        "{note}"
    );
    std::thread::sleep(std::time::Duration::from_secs(3));
    let machine = machine("auth-f1").unwrap();
    let (status, _, message) =
        condition(&machine, liken_api::coordination::RELEASE_CURRENT).unwrap();
    assert_eq!(status, "True", "{message}");
    assert!(
        message.contains("the Cluster names no target release"),
        "the operator judged the foreign Cluster's target: {message}"
    );
    let _ = cp().request(
        "DELETE",
        "/apis/liken.sh/v1alpha1/clusters/aaa-foreign",
        None,
    );
    op.stop();
}
