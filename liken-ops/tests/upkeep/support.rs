//! What the upkeep tests share: the control plane, clients, the shipped
//! RBAC, and locks on the namespaces the code under test names.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use liken_api::Cluster;
use liken_api::cluster::ClusterSpec;
use liken_kube::events::{Recorder, RecorderConfig};
use liken_kube::request::CLUSTERS;
use liken_kube::{Api, Client, Config};
use liken_testenv::{ControlPlane, Options};

/// The cluster operator's ServiceAccount.
pub const SA_NAMESPACE: &str = "liken-system";
/// Its name.
pub const SA_NAME: &str = "liken-cluster-operator";

/// The control plane of this test binary.
pub fn cp() -> &'static ControlPlane {
    static CP: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    let cp = CP.get_or_init(|| {
        liken_testenv::start(Options {
            controller_manager: true,
            kwok: true,
            scheduler: true,
            audit: true,
            ..Options::default()
        })
        .map_err(|e| e.0)
    });
    match cp {
        Ok(cp) => cp,
        Err(e) => panic!("liken-testenv: the test control plane is not available: {e}"),
    }
}

/// The repository's root.
pub fn root() -> PathBuf {
    liken_testenv::workspace_root()
}

/// An admin client.
pub fn admin() -> Client {
    Client::new(&Config::from_kubeconfig(cp().kubeconfig(), None).unwrap()).unwrap()
}

/// A client under the cluster operator's ServiceAccount token, named as
/// the operator names itself.
pub fn operator() -> Client {
    let kubeconfig = cp().kubeconfig_for(SA_NAMESPACE, SA_NAME).unwrap();
    Client::new(&Config::from_kubeconfig(&kubeconfig, None).unwrap())
        .unwrap()
        .identify("liken-cluster-operator", "test")
}

/// The audit log's name for the operator.
pub fn operator_user() -> String {
    liken_testenv::audit::service_account_user(SA_NAMESPACE, SA_NAME)
}

/// An Events recorder writing as admin: the Events RBAC is the cluster
/// operator's manifest's, tested with the operator itself.
pub fn recorder() -> Recorder {
    Recorder::start(
        admin(),
        RecorderConfig::new("liken.sh/cluster-operator", "upkeep-test"),
    )
    .unwrap()
}

/// Runs kubectl as admin and fails the test when it fails.
pub fn kubectl(args: &[&str]) -> String {
    run(cp().kubectl().args(args))
}

fn run(c: &mut Command) -> String {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{c:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Applies one object as admin.
pub fn apply_json(object: &serde_json::Value) {
    use std::io::Write as _;
    let mut child = cp()
        .kubectl()
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(object.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Applies a manifest file of the repository as admin (as k3s would).
pub fn apply(rel: &str) {
    let path = root().join(rel);
    assert!(path.exists(), "{} is missing", path.display());
    kubectl(&["apply", "-f", path.to_str().unwrap()]);
}

/// The writes the operator made since `mark`, from the audit log.
pub fn operator_writes(
    mark: liken_testenv::audit::AuditMark,
) -> Vec<liken_testenv::audit::AuditEvent> {
    cp().writes_by(&operator_user(), mark).unwrap()
}

/// The pods in `namespace` that `selector` (labels) selects, as admin.
pub fn pods(namespace: &str, selector: &str) -> Vec<liken_kube::DynamicObject> {
    admin()
        .list::<liken_kube::DynamicObject>(
            &Api::namespaced(liken_kube::request::PODS, namespace),
            &liken_kube::ListParams::labels(selector),
        )
        .unwrap()
        .items
}

/// The flux feature's manifest: the cluster operator's grants.
pub const FLUX_FEATURE: &str = "images/features/flux/manifests/flux-system.yaml";
/// The flux feature's other manifest: the engine's own RBAC, which k3s
/// applies and the cluster operator has no right to write.
pub const FLUX_ENGINE_RBAC: &str = "images/features/flux/manifests/flux-engine-rbac.yaml";

/// Applies every manifest of the flux feature as admin, as k3s applies
/// them on a leader while the Cluster declares flux.
pub fn apply_flux_feature() {
    apply(FLUX_FEATURE);
    apply(FLUX_ENGINE_RBAC);
}
/// The cluster operator's standing upkeep rights.
pub const UPKEEP_RBAC: &str = "images/manifests/cluster-operator-upkeep.yaml";

/// The requests the operator made since `mark`, from the audit log.
pub fn operator_requests(
    mark: liken_testenv::audit::AuditMark,
) -> Vec<liken_testenv::audit::AuditEvent> {
    cp().audit_since(mark)
        .unwrap()
        .into_iter()
        .filter(|e| e.user == operator_user())
        .collect()
}

/// A Cluster, created (or replaced) on the apiserver, with `features`.
pub fn cluster(name: &str, features: &[(&str, Option<serde_json::Value>)]) -> Cluster {
    let mut c = Cluster::new(
        name,
        ClusterSpec {
            endpoint: "https://10.0.0.1:6443".into(),
            leaders: vec!["node-1".into()],
            ..ClusterSpec::default()
        },
    );
    for (slug, config) in features {
        let config = config.clone().map(|v| serde_json::from_value(v).unwrap());
        c.spec.features.insert((*slug).into(), config);
    }
    let admin = admin();
    let api = Api::all(CLUSTERS);
    let _ = admin.delete(&api, name, &Default::default());
    wait_gone(&admin, &api, name);
    admin.create(&api, &c).unwrap()
}

/// Waits until `name` is gone (up to two minutes); on a timeout the
/// failure shows the object as it stands.
pub fn wait_gone(client: &Client, api: &Api, name: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let found = client.get_opt::<liken_kube::DynamicObject>(api, name);
        if matches!(found, Ok(None)) {
            return;
        }
        if std::time::Instant::now() > deadline {
            let status = found
                .as_ref()
                .ok()
                .and_then(|o| o.as_ref())
                .and_then(|o| o.pointer("/status").cloned());
            panic!(
                "{name} was not gone within 120s: status {status:?}, finalizers {:?}",
                found
                    .as_ref()
                    .ok()
                    .and_then(|o| o.as_ref())
                    .map(|o| o.finalizers())
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Polls `check` every 200 ms until it holds, failing after `within`.
pub fn wait(within: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !check() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
