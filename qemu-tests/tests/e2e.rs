//! End to end: a fleet under QEMU against a control plane on the host,
//! run by liken's own parts (see qemu-tests/src/fleet/).

use std::time::Duration;

use qemu_tests::fleet::host::{Host, MachineSpec, Reach};
use qemu_tests::fleet::progress::step;
use qemu_tests::fleet::{self, Fleet};
use qemu_tests::images;
use serde_json::Value;

/// How long a machine may take from power-on to a Ready Node under TCG
/// with the others running.
const TO_READY: Duration = Duration::from_secs(600);

fn node_ready(fleet: &Fleet, name: &str) -> Result<String, String> {
    let node = fleet.get_json(&["node", name])?;
    let ready = node["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or(Value::Null);
    if ready["status"] == "True" {
        Ok(ready["lastHeartbeatTime"].as_str().unwrap_or("").to_owned())
    } else {
        Err(format!("Node {name} Ready={}", ready["status"]))
    }
}

/// The wiring, in one boot (part of `make test`): one leader installed
/// from a `liken stick` stick against the host's control plane on its
/// minted identity. The node stand-in registers the Node and keeps it
/// Ready, init blesses the boot from that Node, a DaemonSet's pod runs
/// from the release's airgap images with a token bound to it, the
/// machine operator (the release's DaemonSet, run the same way) seeds
/// and reports its Machine Ready on this boot (the Cluster names no
/// target release: the images' init is a development build), and the cluster operator
/// runs on the host under the RBAC the release's manifests made and
/// tallies it. The fleet scenario (three machines, upgrades) is
/// `make test-e2e`.
#[test]
fn a_machine_joins_the_host_control_plane_and_runs_its_node_agents() {
    let (channel, releases) = fleet::channel();
    let n = &releases[0];
    let dir = fleet::dir("e2e");
    let specs = [MachineSpec::numbered(1, true, false)];
    let host = Host::start(
        &dir,
        &images().liken,
        Reach::Slirp,
        "e2e",
        &specs,
        channel,
        None,
    );
    let mut fleet = Fleet::install(
        "e2e",
        host,
        &n.dir,
        &n.version,
        &dir,
        &["liken.bless-deadline=600"],
    );
    let name = specs[0].name.clone();
    let heartbeat = fleet.wait_for(&format!("Node {name} Ready"), Some(&name), TO_READY, |f| {
        node_ready(f, &name)
    });
    step(&format!("{name}: Ready, heartbeat {heartbeat}"));
    let blessed = fleet
        .machine(&name)
        .console_after(0, "liken: bless: ", TO_READY)
        .unwrap_or_else(|| fleet.fail(Some(&name), "init never said whether it blessed the boot"));
    assert!(
        blessed.contains("liken: bless: ok")
            && blessed.contains(&format!("node {name} is registered")),
        "{blessed}"
    );
    probe(&mut fleet, &n.version);
    // The machine operator: the release's DaemonSet, run by the stand-in
    // from the release's image with a token bound to its pod, seeds the
    // Machine and the Cluster from the documents init booted with and
    // reports this boot.
    fleet.wait_for(
        &format!("Machine {name} Ready in slot A, from its own operator"),
        Some(&name),
        TO_READY,
        |f| {
            let m = f.get_json(&["machine", &name])?;
            let s = &m["status"];
            let release = s["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "ReleaseCurrent"))
                .and_then(|c| c["message"].as_str())
                .unwrap_or_default()
                .to_owned();
            let seen = (s["phase"].as_str(), s["boot"]["slot"].as_str());
            // The test images' init is a development build, which knows
            // no release of its own: the Cluster names no target, and the
            // operator says so rather than guess.
            if seen == (Some("Ready"), Some("A"))
                && release.starts_with("the Cluster names no target release")
            {
                Ok(())
            } else {
                Err(format!(
                    "phase and slot {seen:?}, ReleaseCurrent {release:?}"
                ))
            }
        },
    );
    let operator = images().dir.join("e2e/liken-cluster-operator");
    fleet.host.start_cluster_operator(&operator, TO_READY);
    fleet.wait_for(
        "the cluster operator leading (its Lease held by the host's copy)",
        None,
        Duration::from_secs(120),
        |f| {
            let lease = f.get_json(&["lease", "-n", "liken-system", "liken-cluster-operator"])?;
            match lease["spec"]["holderIdentity"].as_str() {
                Some("host") => Ok(()),
                other => Err(format!("holder {other:?}")),
            }
        },
    );
    fleet.wait_for(
        "the Cluster's tally 1/1 from the cluster operator",
        None,
        Duration::from_secs(180),
        |f| {
            let c = f.get_json(&["cluster", "e2e"])?;
            match c["status"]["machines"]["summary"].as_str() {
                Some("1/1") => Ok(()),
                other => Err(format!("summary {other:?}")),
            }
        },
    );
}

/// A DaemonSet of the stand-in's probe workload (from the release's
/// airgap images): one pod per node, run by the node stand-in in
/// namespaces of its own with a token bound to the pod.
fn probe(fleet: &mut Fleet, version: &str) {
    let manifest = format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: e2e
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: probe
  namespace: e2e
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: probe
  namespace: e2e
spec:
  selector:
    matchLabels: {{app: probe}}
  template:
    metadata:
      labels: {{app: probe}}
    spec:
      serviceAccountName: probe
      hostNetwork: true
      tolerations: [{{operator: Exists}}]
      containers:
        - name: probe
          image: liken.sh/liken-standin-probe:{version}
          args: ["probe", "9201"]
          env:
            - name: NODE_NAME
              valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}
          livenessProbe:
            httpGet: {{path: /healthz, port: 9201}}
            periodSeconds: 10
          securityContext:
            readOnlyRootFilesystem: true
            allowPrivilegeEscalation: false
            capabilities: {{drop: ["ALL"]}}
          volumeMounts:
            - {{name: var-liken, mountPath: /var/lib/liken}}
      volumes:
        - name: var-liken
          hostPath: {{path: /var/lib/liken, type: DirectoryOrCreate}}
"#
    );
    let path = fleet.host.logs().join("probe.yaml");
    std::fs::write(&path, manifest).unwrap();
    let out = fleet
        .host
        .kubectl()
        .args(["apply", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<String> = fleet.machines.iter().map(|m| m.spec.name.clone()).collect();
    for name in names {
        let mark = 0;
        let line = fleet
            .machine(&name)
            .console_after(
                mark,
                "probe: the apiserver says this token is",
                Duration::from_secs(300),
            )
            .unwrap_or_else(|| panic!("{name}: no probe answer"));
        assert!(
            line.contains("system:serviceaccount:e2e:probe bound to node ")
                && line.ends_with(&name),
            "{line}"
        );
        let writable = fleet
            .machine(&name)
            .console_after(
                mark,
                "probe: root filesystem writable",
                Duration::from_secs(10),
            )
            .unwrap_or_default();
        assert!(
            writable.contains("writable: false; /var/lib/liken writable: true"),
            "{writable}"
        );
    }
    fleet.wait_for(
        "the probe pods Running and Ready",
        None,
        Duration::from_secs(300),
        |f| {
            let pods = f.get_json(&["pods", "-n", "e2e"])?;
            let items = pods["items"].as_array().cloned().unwrap_or_default();
            let ready = items
                .iter()
                .filter(|p| {
                    p["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
                })
                .count();
            if ready == f.machines.len() {
                Ok(())
            } else {
                Err(format!("{ready} of {} Ready", items.len()))
            }
        },
    );
}
