//! Pod Security by default: the admission configuration liken-init
//! writes for a leader's apiserver (liken_init::seed::render_pod_security),
//! read by the real kube-apiserver from testenv. A tenant's workload that
//! mounts /run/liken (init's socket, the facts) from the host is refused
//! with its own credentials; the machine operator's DaemonSet pod, as
//! images/manifests ships it, is admitted in liken-system.

use std::path::Path;

use liken_testenv::{ControlPlane, Options};
use serde::Deserialize as _;
use serde_json::{Value, json};

fn kubectl_as(cp: &ControlPlane, kc: &Path, args: &[&str]) -> (bool, String) {
    let out = cp.kubectl_as(kc).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn create_as(cp: &ControlPlane, kc: &Path, object: &Value) -> (bool, String) {
    let path = cp.dir().join(format!(
        "pod-{}.json",
        object["metadata"]["name"].as_str().unwrap()
    ));
    std::fs::write(&path, object.to_string()).unwrap();
    kubectl_as(cp, kc, &["create", "-f", path.to_str().unwrap()])
}

/// The shipped manifest's documents.
fn manifest(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(
        liken_testenv::workspace_root()
            .join("images/manifests")
            .join(file),
    )
    .unwrap()
    .replace("@LIKEN_VERSION@", "2026.11.01-001");
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn baseline_is_enforced_everywhere_but_the_system_namespaces() {
    let dir = std::env::temp_dir().join(format!("liken-psa-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("pod-security.yaml");
    std::fs::write(&config, liken_init::seed::render_pod_security()).unwrap();
    let cp = liken_testenv::start(Options {
        admission_config: Some(config),
        ..Options::default()
    })
    .expect("the apiserver starts with liken's admission configuration");

    // A tenant: its namespace (no Pod Security labels of its own) and a
    // ServiceAccount with every right inside it.
    cp.ensure_namespace("tenant-b").unwrap();
    cp.apply(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: default, namespace: tenant-b}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: app-admin, namespace: tenant-b}\n\
         rules: [{apiGroups: [\"*\"], resources: [\"*\"], verbs: [\"*\"]}]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: app-admin, namespace: tenant-b}\n\
         roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: app-admin}\n\
         subjects: [{kind: ServiceAccount, name: app, namespace: tenant-b}]\n",
    );
    let kc = cp.kubeconfig_for("tenant-b", "app").unwrap();
    let pod = |name: &str, volumes: Value, security: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "tenant-b"},
               "spec": {"automountServiceAccountToken": false,
                        "containers": [{"name": "c", "image": "registry.example/app:1",
                                        "securityContext": security,
                                        "volumeMounts": volumes.as_array().unwrap().iter()
                                            .map(|v| json!({"name": v["name"], "mountPath": "/host"}))
                                            .collect::<Vec<_>>()}],
                        "volumes": volumes}})
    };
    let (ok, err) = create_as(
        &cp,
        &kc,
        &pod(
            "steal-socket",
            json!([{"name": "liken", "hostPath": {"path": "/run/liken"}}]),
            json!({}),
        ),
    );
    assert!(!ok, "a hostPath on /run/liken was admitted");
    assert!(
        err.contains(
            "violates PodSecurity \"baseline:latest\": hostPath volumes (volume \"liken\")"
        ),
        "{err}"
    );
    // A plain workload is admitted, with restricted's warning.
    let (ok, err) = create_as(&cp, &kc, &pod("plain", json!([]), json!({})));
    assert!(ok, "{err}");
    assert!(
        err.contains("would violate PodSecurity \"restricted:latest\""),
        "{err}"
    );

    // liken-system as shipped, and the machine operator's DaemonSet pod:
    // host paths, the host's network, uid 0.
    for doc in manifest("liken-system.yaml") {
        cp.apply(&doc.to_string());
    }
    let daemon_set = manifest("machine-operator.yaml")
        .into_iter()
        .find(|d| d["kind"] == "DaemonSet")
        .unwrap();
    cp.apply(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: liken-machine-operator, namespace: liken-system}\n",
    );
    let mut operator = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "liken-machine-operator-x", "namespace": "liken-system"},
        "spec": daemon_set["spec"]["template"]["spec"].clone()});
    operator["spec"]["nodeName"] = json!("node-1");
    let (code, v) = cp
        .request(
            "POST",
            "/api/v1/namespaces/liken-system/pods",
            Some(&operator),
        )
        .unwrap();
    assert_eq!(code, 201, "the shipped DaemonSet's pod was refused: {v}");
    // The same pod in the tenant's namespace is refused: the exemption is
    // the namespace's, not the pod's.
    operator["metadata"]["namespace"] = json!("tenant-b");
    operator["spec"]["serviceAccountName"] = json!("default");
    let (ok, err) = create_as(&cp, &kc, &operator);
    assert!(
        !ok && err.contains("violates PodSecurity \"baseline:latest\""),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
