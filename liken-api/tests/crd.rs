//! The generated CRDs: the committed YAML is what the code generates, and
//! the schemas describe exactly the fields the types serialize.

use std::collections::BTreeSet;
use std::path::Path;

use liken_api::cluster::{
    ChannelTaken, ClusterFluxStatus, ClusterReleasesStatus, DisruptionBudget, HaltCause,
    MachineTally, RebootTurn, RolloutHalt,
};
use liken_api::machine::{DisruptionKind, PendingDisruption, ReleaseStatus};
use liken_api::{
    BootStatus, Cluster, Condition, ConditionStatus, Machine, Phase, Role, Sha256Hex, Slot, Time,
    Version, crd, decode,
};
use serde_json::Value;

fn committed_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../images/manifests/crds")
}

#[test]
fn committed_crds_match_the_generator() {
    for (name, value) in crd::all() {
        let path = committed_dir().join(name);
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run `make crds`", path.display()));
        assert!(
            committed == crd::render(&value),
            "{} differs from what liken-api generates; run `make crds` and commit the result",
            path.display()
        );
    }
}

fn v(s: &str) -> Version {
    Version::parse(s).unwrap()
}

fn condition() -> Condition {
    let mut c =
        Condition::new("Ready", ConditionStatus::True, "Converged", "all good").with_generation(2);
    c.last_transition_time = Time::from_unix(1_780_000_000);
    c
}

/// A Machine with every field, spec and status, set.
fn full_machine() -> Machine {
    let mut m: Machine = decode::strict(
        include_str!("fixtures/machine.yaml"),
        "fixtures/machine.yaml",
    )
    .unwrap();
    m.spec.network.as_mut().unwrap().interfaces[0].addresses = vec!["10.0.0.2/24".into()];
    m.spec.network.as_mut().unwrap().interfaces[0].routes =
        m.spec.network.as_ref().unwrap().interfaces[1]
            .routes
            .clone();
    m.spec.network.as_mut().unwrap().interfaces[0].dns = vec!["10.0.0.1".into()];
    m.status.phase = Some(Phase::UpdatePending);
    m.status.conditions = vec![condition()];
    m.status.role = Some(Role::Follower);
    m.status.boot = Some(BootStatus {
        time: Some(Time::from_unix(1_780_000_000)),
        slot: Some(Slot::B),
        version: Some(v("2026.07.11-001")),
        via: Some(liken_api::RebootVia::Firmware),
        via_reason: Some("kexec is disabled".into()),
    });
    m.status.release = Some(ReleaseStatus {
        running: Some(v("2026.07.11-001")),
        staged: Some(v("2026.08.01-001")),
        target: Some(v("2026.08.01-001")),
    });
    m.status.pending = vec![PendingDisruption {
        condition: "ReleaseCurrent".into(),
        kind: DisruptionKind::Reboot,
        hash: Sha256Hex::parse(&"c".repeat(64)).unwrap(),
        summary: "release 2026.08.01-001".into(),
    }];
    m.status.observed_generation = 2;
    m
}

/// A Cluster with every field set.
fn full_cluster() -> Cluster {
    let mut c: Cluster = decode::strict(
        include_str!("fixtures/cluster.yaml"),
        "fixtures/cluster.yaml",
    )
    .unwrap();
    c.spec.disruption_budget = Some(DisruptionBudget {
        max_unavailable: Some(1),
    });
    c.status.machines = MachineTally::new(1, 2);
    c.status.phase = Some(Phase::Updating);
    c.status.conditions = vec![condition()];
    c.status.releases = ClusterReleasesStatus {
        newest: Some(v("2026.07.11-001")),
        available: Some(v("2026.08.01-001")),
        channel: Some(ChannelTaken {
            source: "https://releases.example.com/stable".into(),
            serial: Some(7),
            expires: Some(Time::from_unix(1_781_000_000)),
            key_id: Some("0123456789ab".into()),
        }),
    };
    c.status.flux = ClusterFluxStatus {
        public_key: "ssh-ed25519 AAAA home".into(),
    };
    c.status.reboot_turns = vec![RebootTurn {
        machine: "node-1".into(),
        machine_resource_version: "77".into(),
        since: Time::from_unix(1_780_000_000),
        release: Some(v("2026.08.01-001")),
        boot: "0123456789ab".into(),
        changes: vec!["aaaaaaaaaaaa".into()],
    }];
    c.status.rollout_halt = Some(RolloutHalt {
        release: v("2026.08.01-001"),
        machine: "node-2".into(),
        cause: HaltCause::FellBack,
        since: Time::from_unix(1_780_000_100),
        resume: "1".into(),
    });
    c.status.observed_generation = 3;
    c
}

/// Every object key path in a value, arrays collapsed to `[]`. Feature
/// configurations are free-form and stop the walk.
fn value_paths(v: &Value, at: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let path = if at.ends_with(".features") {
                    format!("{at}.*")
                } else {
                    format!("{at}.{k}")
                };
                out.insert(path.clone());
                if !path.ends_with(".*") {
                    value_paths(child, &path, out);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                value_paths(item, &format!("{at}[]"), out);
            }
        }
        _ => {}
    }
}

/// Every property path a schema declares, in the same notation.
fn schema_paths(s: &Value, at: &str, out: &mut BTreeSet<String>) {
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        for (k, child) in props {
            let path = format!("{at}.{k}");
            out.insert(path.clone());
            if k != "metadata" {
                schema_paths(child, &path, out);
            }
        }
    }
    if let Some(items) = s.get("items") {
        schema_paths(items, &format!("{at}[]"), out);
    }
    if let Some(extra) = s.get("additionalProperties")
        && extra.get("x-kubernetes-preserve-unknown-fields").is_some()
    {
        out.insert(format!("{at}.*"));
    }
}

fn assert_schema_covers(doc: Value, crd: Value) {
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let mut written = BTreeSet::new();
    value_paths(&doc, "", &mut written);
    // Metadata is the server's to define; the schema leaves it open.
    written.retain(|p| !p.starts_with(".metadata."));
    // String maps (sysctls, labels) have free keys too.
    let free_keys = [".spec.sysctls.", ".spec.k3s.nodeLabels."];
    written.retain(|p| !free_keys.iter().any(|f| p.starts_with(f)));
    let mut declared = BTreeSet::new();
    schema_paths(schema, "", &mut declared);

    let undeclared: Vec<_> = written.difference(&declared).collect();
    assert!(
        undeclared.is_empty(),
        "serialized but not in the schema (the server would prune them): {undeclared:?}"
    );
    let unwritten: Vec<_> = declared.difference(&written).collect();
    assert!(
        unwritten.is_empty(),
        "in the schema but the full example never writes them: {unwritten:?}"
    );
}

#[test]
fn machine_schema_covers_exactly_the_machine_fields() {
    assert_schema_covers(
        serde_json::to_value(full_machine()).unwrap(),
        crd::machine_crd(),
    );
}

#[test]
fn cluster_schema_covers_exactly_the_cluster_fields() {
    assert_schema_covers(
        serde_json::to_value(full_cluster()).unwrap(),
        crd::cluster_crd(),
    );
}

#[test]
fn crds_carry_status_subresource_columns_and_enums() {
    let m = crd::machine_crd();
    let version = &m["spec"]["versions"][0];
    assert_eq!(m["metadata"]["name"], "machines.liken.sh");
    assert_eq!(m["spec"]["scope"], "Cluster");
    assert_eq!(version["subresources"]["status"], serde_json::json!({}));
    let columns: Vec<&str> = version["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["Phase", "Role", "Version", "Age", "Booted-Via"]);
    // How the boot was reached is for `-o wide`: the plain listing stays
    // as narrow as it was.
    let wide: Vec<&str> = version["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["priority"] == 1)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(wide, ["Booted-Via"]);
    let status = &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
    assert_eq!(
        status["phase"]["enum"].as_array().unwrap().len(),
        Phase::ALL.len()
    );
    assert_eq!(
        status["role"]["enum"],
        serde_json::json!(["leader", "follower"])
    );
    assert_eq!(
        status["release"]["properties"]["running"]["pattern"],
        liken_api::version::VERSION_PATTERN
    );

    let c = crd::cluster_crd();
    let version = &c["spec"]["versions"][0];
    let columns: Vec<&str> = version["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["Phase", "Ready", "Version", "Newest", "Age"]);
    let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert!(
        spec["x-kubernetes-validations"][0]["rule"]
            .as_str()
            .unwrap()
            .contains("e.version <= self.version")
    );
    assert_eq!(
        m["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["rebootPolicy"]
            ["enum"],
        serde_json::json!(["Auto", "Manual"])
    );
    // The reboot way: the same enum on both kinds and in the status, and
    // the descriptions `kubectl explain` shows say the default and who
    // wins.
    let machine_reboot = &m["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["reboot"];
    let cluster_reboot = &spec["properties"]["reboot"];
    for r in [
        machine_reboot,
        cluster_reboot,
        &status["boot"]["properties"]["via"],
    ] {
        assert_eq!(r["enum"], serde_json::json!(["kexec", "firmware"]), "{r}");
    }
    let said = |v: &Value| v["description"].as_str().unwrap_or_default().to_owned();
    assert!(said(machine_reboot).contains("kexec (the default"));
    assert!(said(machine_reboot).contains("replaces the Cluster's spec.reboot"));
    assert!(said(cluster_reboot).contains("kexec (the default"));
    assert!(said(cluster_reboot).contains("A Machine's own spec.reboot replaces this one"));
    assert_eq!(
        status["boot"]["properties"]["viaReason"]["type"],
        serde_json::json!("string")
    );
}
