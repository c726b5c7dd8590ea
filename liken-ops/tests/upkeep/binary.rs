//! The upkeep through the real liken-cluster-operator binary, under its
//! ServiceAccount and every RBAC file the release ships: the flux feature
//! declared then retracted (and refused on an unmarked namespace), a
//! retracted feature's DaemonSet, and an OS pod refreshed on a machine
//! that runs the template's new release.

use std::fs::File;
use std::process::{Command, Stdio};
use std::time::Duration;

use liken_api::condition::find;
use liken_api::{Cluster, Machine};
use liken_kube::request::{CLUSTERS, DAEMON_SETS, DEPLOYMENTS, MACHINES, NAMESPACES};
use liken_kube::{Api, DynamicObject};
use liken_testenv::spawn::spawn;
use serde_json::json;

use crate::support::{self, UPKEEP_RBAC};

/// The cluster operator's own manifests, as a leader's k3s applies them,
/// but for its Deployment (the test runs the binary itself).
pub const OPERATOR_MANIFESTS: [&str; 2] = [
    "images/manifests/liken-system.yaml",
    "images/manifests/cluster-operator.yaml",
];

const NEWER: &str = "2026.09.01-001";

fn apply_without_deployments(rel: &str) {
    use serde::Deserialize as _;
    let text = std::fs::read_to_string(support::root().join(rel)).unwrap();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = serde_json::Value::deserialize(doc).unwrap();
        if v.is_null() || v["kind"] == "Deployment" {
            continue;
        }
        support::apply_json(&v);
    }
}

fn cluster() -> Cluster {
    support::admin().get(&Api::all(CLUSTERS), "fleet").unwrap()
}

/// The whole upkeep through the binary's sweep.
pub fn scenario() {
    let cp = support::cp();
    let admin = support::admin();
    for rel in OPERATOR_MANIFESTS {
        apply_without_deployments(rel);
    }
    support::apply(UPKEEP_RBAC);
    support::apply_flux_feature();
    // One Cluster in the fleet, declaring flux.
    support::kubectl(&["delete", "clusters.liken.sh", "--all", "--wait=true"]);
    support::cluster("fleet", &[("flux", None)]);
    // The machine operator's DaemonSet (the steward scenario's) moves to a
    // newer release, and one machine runs it.
    let daemon_sets = Api::namespaced(DAEMON_SETS, "liken-system");
    admin
        .merge_patch::<DynamicObject>(
            &daemon_sets,
            "liken-machine-operator",
            &json!({"spec": {"template": {"metadata": {"labels": {"liken.sh/version": NEWER}}}}}),
        )
        .unwrap();
    let machines = Api::all(MACHINES);
    let m: Machine = admin
        .create(
            &machines,
            &Machine::new("node-new", liken_api::machine::MachineSpec::default()),
        )
        .unwrap();
    admin
        .merge_patch_status::<Machine>(
            &machines,
            &m.metadata.name,
            &json!({"status": {"release": {"running": NEWER}}}),
        )
        .unwrap();
    // A retracted feature's workload.
    admin
        .create::<DynamicObject, _>(
            &daemon_sets,
            &json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "nfs-client", "namespace": "liken-system",
                             "annotations": {"liken.sh/feature": "nfs"}},
                "spec": {"selector": {"matchLabels": {"app": "nfs-client"}},
                         "template": {"metadata": {"labels": {"app": "nfs-client"}},
                                      "spec": {"containers": [{"name": "c", "image": "registry.example/nfs:1"}]}}}}),
        )
        .unwrap();

    let log = cp.dir().join("upkeep-operator.log");
    let kubeconfig = cp
        .kubeconfig_for(support::SA_NAMESPACE, support::SA_NAME)
        .unwrap();
    // The deployment's copy of the Cluster, as the Deployment mounts it.
    let copy = cp.dir().join("upkeep-cluster.yaml");
    std::fs::write(
        &copy,
        serde_json::to_string(&cluster().canonical()).unwrap(),
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_liken-cluster-operator"));
    cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--cluster-file={}", copy.display()))
        .args([
            "--metrics-address=127.0.0.1:0",
            "--identity=upkeep",
            "--sweep-interval=1s",
            "--heartbeat-stale-after=3s",
            "--lease-duration=3s",
            "--renew-deadline=2s",
            "--retry-period=500ms",
        ])
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(File::create(&log).unwrap())
        .stderr(File::create(&log).unwrap());
    let mut operator = spawn("liken-cluster-operator", cmd).unwrap();
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let wait = |what: &str, check: &mut dyn FnMut() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        while !check() {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}; operator log:\n{}",
                log_text()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    };

    // Declared: the key in the status, the engine planted.
    wait("the public key in the status", &mut || {
        cluster().status.flux.public_key.ends_with(" liken:fleet")
    });
    let deployments = Api::namespaced(DEPLOYMENTS, "flux-system");
    wait("the engine", &mut || {
        matches!(
            admin.get_opt::<DynamicObject>(&deployments, "kustomize-controller"),
            Ok(Some(_))
        )
    });
    // The janitor and the steward on the same sweeps.
    wait("the retracted feature's DaemonSet to go", &mut || {
        matches!(
            admin.get_opt::<DynamicObject>(&daemon_sets, "nfs-client"),
            Ok(None)
        )
    });
    wait("node-new's OS pod from the newer template", &mut || {
        support::pods(
            "liken-system",
            "app.kubernetes.io/name=liken-machine-operator",
        )
        .iter()
        .any(|p| {
            p.pointer("/spec/nodeName") == Some(&json!("node-new"))
                && p.pointer("/metadata/labels/liken.sh~1version") == Some(&json!(NEWER))
        })
    });
    assert!(
        support::pods(
            "liken-system",
            "app.kubernetes.io/name=liken-machine-operator"
        )
        .iter()
        .any(|p| p.pointer("/spec/nodeName") == Some(&json!("node-old"))
            && p.pointer("/metadata/labels/liken.sh~1version") != Some(&json!(NEWER))),
        "node-old runs no newer release, so its OS pod stays"
    );

    // Retracted: the teardown runs to the end and the key leaves the
    // status.
    admin
        .merge_patch::<Cluster>(
            &Api::all(CLUSTERS),
            "fleet",
            &json!({"spec": {"features": null}}),
        )
        .unwrap();
    let namespaces = Api::all(NAMESPACES);
    wait("the teardown to finish", &mut || {
        matches!(
            admin.get_opt::<DynamicObject>(&namespaces, "flux-system"),
            Ok(None)
        )
    });
    wait("the key to leave the status", &mut || {
        cluster().status.flux.public_key.is_empty()
    });

    // A Flux liken did not plant: refused, reported, nothing deleted.
    support::kubectl(&["create", "namespace", "flux-system"]);
    wait("the FluxTeardown refusal", &mut || {
        find(&cluster().status.conditions, "FluxTeardown")
            .is_some_and(|c| c.reason == "NotPlantedByLiken")
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        admin
            .get_opt::<DynamicObject>(&namespaces, "flux-system")
            .unwrap()
            .is_some()
    );
    // Gone again: the condition goes with it.
    support::kubectl(&["delete", "namespace", "flux-system", "--wait=true"]);
    wait("the refusal to clear", &mut || {
        find(&cluster().status.conditions, "FluxTeardown").is_none()
    });

    operator.kill();
    assert!(!log_text().contains("panicked"), "{}", log_text());
}
