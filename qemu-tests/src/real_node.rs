//! How the upstream-node tests judge a real node, from outside it: the
//! Node and its pods as an apiserver stores them, read by testenv's real
//! kubectl with an admin kubeconfig, and the containers as the guest's
//! real `ctr` lists them on the console. Nothing here asks the launcher
//! or liken's operators what happened; a kubelet wrote the statuses.
//!
//! Shared by `tests/upstream_node.rs` (one machine, against the host's
//! control plane or its own) and `tests/upstream_fleet.rs` (a leader
//! and a follower on one network segment).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fleet::{Release, releases_in};
use crate::{Images, Vm, make_images, run};

/// The upstream channel's versions (qemu-tests/upstream-images.sh): N,
/// which the upstream tests install, and N+1, the upgrade.
pub const UPSTREAM_VERSIONS: [&str; 2] = ["2026.02.01-001", "2026.02.01-002"];

/// The upstream node's channel (`make upstream-images`, which needs
/// `make testenv-node`), built first unless the caller's make has just
/// built it: its directory and its releases N and N+1.
pub fn upstream_channel(images: &Images) -> (PathBuf, Vec<Release>) {
    make_images(
        "upstream-images",
        &images.dir,
        "; this test needs the upstream node's releases (make upstream-images, which needs \
         make testenv-node)",
    );
    let dir = images.dir.join("channel-upstream");
    let releases = releases_in(&dir);
    let versions: Vec<&str> = releases.iter().map(|r| r.version.as_str()).collect();
    assert_eq!(
        versions,
        UPSTREAM_VERSIONS,
        "{} holds other releases",
        dir.display()
    );
    (dir, releases)
}

/// What one upstream release was assembled from (`IMAGES_OUT/upstream/<version>/`):
/// its boot.cpio, whose liken-init knows the version, and its system
/// image as a slot holds it (without the verity tree the release appends).
pub fn upstream_release_files(images: &Images, version: &str) -> (PathBuf, PathBuf) {
    let dir = images.dir.join("upstream").join(version);
    let files = (dir.join("boot.cpio"), dir.join("system.squashfs"));
    for f in [&files.0, &files.1] {
        assert!(f.exists(), "no {} (make upstream-images)", f.display());
    }
    files
}

/// The upstream node's system image N, built first as
/// [`upstream_channel`] builds it.
pub fn upstream_system_image(images: &Images) -> PathBuf {
    upstream_channel(images);
    upstream_release_files(images, UPSTREAM_VERSIONS[0]).1
}

/// The workload image the upstream release carries (the Makefile's
/// `UPSTREAM_WORKLOAD`, from `liken-workload`).
pub const WORKLOAD_IMAGE: &str = "liken.sh/liken-upstream-workload:1";
/// The port liken-workload serves on.
pub const WORKLOAD_PORT: u16 = 8080;

/// k3s's documented minimum memory for a server, in MB, as issue 25
/// states it (k3s's Requirements page, docs.k3s.io/installation/requirements,
/// section Hardware; the figure is printed beside the measurement, not
/// asserted against it).
pub const K3S_SERVER_MINIMUM_MB: u32 = 512;

/// testenv's kubectl with one kubeconfig: the host's control plane's, or
/// the deployment's admin credential for a leader's API.
#[derive(Clone, Debug)]
pub struct Kubectl {
    /// The kubeconfig every command runs with.
    pub kubeconfig: PathBuf,
}

impl Kubectl {
    /// kubectl with `kubeconfig`.
    pub fn new(kubeconfig: &Path) -> Kubectl {
        Kubectl {
            kubeconfig: kubeconfig.to_owned(),
        }
    }

    /// A kubectl command, to add arguments to.
    pub fn command(&self) -> Command {
        let mut c = Command::new(liken_testenv::kubectl_bin());
        c.env("KUBECONFIG", &self.kubeconfig);
        c
    }

    /// kubectl's standard output when it succeeds.
    pub fn text(&self, args: &[&str]) -> Option<String> {
        let out = self.command().args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// kubectl's output as JSON (`-o json` is the caller's), or None
    /// while the API does not answer or the object is absent.
    pub fn json(&self, args: &[&str]) -> Option<Value> {
        self.text(args).and_then(|t| serde_json::from_str(&t).ok())
    }

    /// `kubectl apply -f <file or directory>`, failing the test if it
    /// fails.
    pub fn apply(&self, what: &Path) {
        let out = self
            .command()
            .args(["apply", "-f"])
            .arg(what)
            .output()
            .unwrap_or_else(|e| panic!("kubectl: {e}"));
        assert!(
            out.status.success(),
            "kubectl apply -f {}: {}",
            what.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The Node as the apiserver stores it, or None.
    pub fn node(&self, name: &str) -> Option<Value> {
        self.json(&["get", "node", name, "-o", "json"])
    }

    /// The pods on `node` whose name starts with one of `prefixes`.
    pub fn pods_on(&self, node: &str, prefixes: &[&str]) -> Vec<Value> {
        let selector = format!("spec.nodeName={node}");
        let v = self
            .json(&[
                "get",
                "pods",
                "--all-namespaces",
                "--field-selector",
                &selector,
                "-o",
                "json",
            ])
            .unwrap_or_default();
        v["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|p| {
                let n = p["metadata"]["name"].as_str().unwrap_or_default();
                prefixes.iter().any(|pre| n.starts_with(pre))
            })
            .collect()
    }

    /// Every Event, oldest first, for a failure message.
    pub fn events(&self) -> String {
        self.text(&[
            "get",
            "events",
            "--all-namespaces",
            "--sort-by=.lastTimestamp",
        ])
        .unwrap_or_default()
    }

    /// Waits until `want` pods of `prefixes` run on `node` as
    /// [`decide_pod`] judges them (a pod being deleted, or whose
    /// containers include one of `stale`, the IDs of an earlier boot,
    /// does not count); returns them with their container IDs. The
    /// console's tail is printed on failure.
    pub fn wait_pods(
        &self,
        node: &str,
        prefixes: &[&str],
        want: usize,
        stale: &[String],
        within: Duration,
        vm: &Vm,
    ) -> Vec<(String, Vec<String>)> {
        let deadline = Instant::now() + within;
        loop {
            let pods = self.pods_on(node, prefixes);
            let judged: Vec<_> = pods
                .iter()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .map(|p| {
                    let name = p["metadata"]["name"].as_str().unwrap_or("?").to_owned();
                    let judged = decide_pod(p).and_then(|ids| {
                        if ids.iter().any(|i| stale.contains(i)) {
                            Err(format!("{name} still shows a container of the boot before"))
                        } else {
                            Ok(ids)
                        }
                    });
                    (name, judged)
                })
                .collect();
            let running: Vec<_> = judged
                .iter()
                .filter_map(|(n, r)| r.as_ref().ok().map(|ids| (n.clone(), ids.clone())))
                .collect();
            if running.len() == want {
                return running;
            }
            if Instant::now() >= deadline {
                let why: Vec<String> = judged
                    .iter()
                    .map(|(n, r)| match r {
                        Ok(_) => format!("{n}: running"),
                        Err(e) => e.clone(),
                    })
                    .collect();
                panic!(
                    "{want} pods of {prefixes:?} did not run on {node} within {} s: {why:?}\n\
                     statuses: {}\nevents:\n{}\n{}",
                    within.as_secs(),
                    Value::Array(pods.iter().map(|p| p["status"].clone()).collect()),
                    self.events(),
                    vm.tail(60)
                );
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    }

    /// Waits until the heartbeat Lease `liken-system/<node>` is held by
    /// `node`: its machine operator, in its container, reached the API.
    pub fn wait_heartbeat(&self, node: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let holder = self
                .text(&[
                    "get",
                    "lease",
                    "-n",
                    "liken-system",
                    node,
                    "-o",
                    "jsonpath={.spec.holderIdentity}",
                ])
                .map(|t| t.trim().to_owned());
            if holder.as_deref() == Some(node) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the machine operator's heartbeat Lease liken-system/{node} is not held by {node} \
                 within {} s (holder {holder:?}): its container does not reach the API",
                within.as_secs()
            );
            std::thread::sleep(Duration::from_secs(2));
        }
    }
}

/// Whether a Node's Ready condition is True.
pub fn ready(n: &Value) -> bool {
    n["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// The Node's InternalIP, as its kubelet reported it.
pub fn internal_ip(n: &Value) -> Option<String> {
    n["status"]["addresses"]
        .as_array()?
        .iter()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .map(str::to_owned)
}

/// Whether a pod runs as its kubelet reports it: Running, Ready, and
/// every container started and ready with a containerd container ID.
/// Returns the container IDs, or why not.
pub fn decide_pod(pod: &Value) -> Result<Vec<String>, String> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("?");
    let status = &pod["status"];
    let phase = status["phase"].as_str().unwrap_or("none");
    if phase != "Running" {
        return Err(format!("{name} is {phase}"));
    }
    let ready = status["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    if !ready {
        return Err(format!("{name} is Running but not Ready"));
    }
    let containers = status["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if containers.is_empty() {
        return Err(format!("{name} reports no containers"));
    }
    let mut ids = Vec::new();
    for c in &containers {
        let cname = c["name"].as_str().unwrap_or("?");
        let id = c["containerID"].as_str().unwrap_or_default();
        if !id.starts_with("containerd://") || id.len() <= "containerd://".len() {
            return Err(format!(
                "{name}/{cname} has no containerd container ID ({id:?})"
            ));
        }
        if c["started"] != true || c["ready"] != true {
            return Err(format!(
                "{name}/{cname} is not started and ready (started {}, ready {})",
                c["started"], c["ready"]
            ));
        }
        if c["state"]["running"].is_null() {
            return Err(format!(
                "{name}/{cname} is not in state running: {}",
                c["state"]
            ));
        }
        ids.push(id.to_owned());
    }
    Ok(ids)
}

/// The test's workload: `replicas` of liken-workload, never pulled (the
/// image comes only from the release's airgap archives), ready when the
/// kubelet's HTTP probe reaches it on the pod network. With `host_port`
/// each replica is also reachable on its node's port `host_port` (the
/// CNI portmap plugin's DNAT), which also keeps two replicas off one
/// node: the scheduler places no two pods claiming one hostPort together.
pub fn workload_yaml(replicas: u32, host_port: Option<u16>) -> String {
    let host_port = host_port
        .map(|p| format!("\n          hostPort: {p}"))
        .unwrap_or_default();
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\n\
         spec:\n  replicas: {replicas}\n  selector:\n    matchLabels:\n      app: web\n  \
         template:\n    metadata:\n      labels:\n        app: web\n    spec:\n      \
         terminationGracePeriodSeconds: 10\n      containers:\n      - name: web\n        \
         image: {WORKLOAD_IMAGE}\n        imagePullPolicy: Never\n        args: \
         [\"{WORKLOAD_PORT}\"]\n        ports:\n        - containerPort: {WORKLOAD_PORT}{host_port}\n        \
         readinessProbe:\n          httpGet:\n            path: /\n            port: \
         {WORKLOAD_PORT}\n          periodSeconds: 2\n"
    )
}

/// The shipped manifests, as the release carries them for init to hand
/// a leader's k3s (`/usr/share/liken/manifests`, with the release's
/// version in the operators' image names), read out of the system image
/// with unsquashfs into `dir`.
pub fn release_manifests(system: &Path, dir: &Path) -> PathBuf {
    let out = dir.join("release-root");
    let _ = std::fs::remove_dir_all(&out);
    run(
        "unsquashfs",
        &[
            "-q",
            "-n",
            "-d",
            &out.to_string_lossy(),
            &system.to_string_lossy(),
            "usr/share/liken/manifests",
        ],
    );
    out.join("usr/share/liken/manifests")
}

/// Waits until the guest's containerd lists container `id` (the launcher
/// prints `ctr containers list` when it changes), so a pod's container
/// is seen by the runtime itself, not only in the kubelet's report.
pub fn ctr_lists(vm: &mut Vm, id: &str, pod: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        vm.drain();
        let listed = vm.seen.iter().any(|l| {
            l.split_once("containerd's k8s.io containers (ctr containers list):")
                .is_some_and(|(_, ids)| ids.split_whitespace().any(|i| i == id))
        });
        if listed {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "containerd in the guest does not list {pod}'s container {id}:\n{}",
            vm.tail(30)
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// A TCP port on the host's loopback that nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("a free port: {e}"))
}

/// A UDP port on the host's loopback that nothing is bound to now (for
/// QEMU's `-netdev dgram` ends).
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("a free UDP port: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script that builds the channel names the versions the tests
    /// expect, in order; a change to one alone would fail every upstream
    /// QEMU test only after its images were built.
    #[test]
    fn the_channel_script_builds_the_versions_the_tests_expect() {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/upstream-images.sh");
        let text = std::fs::read_to_string(script).unwrap();
        let listed = format!("versions=({})", UPSTREAM_VERSIONS.join(" "));
        assert!(
            text.lines().any(|l| l == listed),
            "{script} does not set {listed}"
        );
    }

    /// The Makefile images the workload under the name the pods ask for.
    #[test]
    fn the_makefile_builds_the_workload_image() {
        let makefile = concat!(env!("CARGO_MANIFEST_DIR"), "/../Makefile");
        let text = std::fs::read_to_string(makefile).unwrap();
        let line = format!("UPSTREAM_WORKLOAD := {WORKLOAD_IMAGE}");
        assert!(
            text.lines().any(|l| l == line),
            "{makefile} does not set {line}"
        );
    }

    fn pod(phase: &str, ready: &str, id: &str, started: bool) -> Value {
        serde_json::json!({
            "metadata": {"name": "web-1"},
            "status": {
                "phase": phase,
                "conditions": [{"type": "Ready", "status": ready}],
                "containerStatuses": [{
                    "name": "web", "containerID": id, "started": started, "ready": started,
                    "state": if started { serde_json::json!({"running": {}}) }
                             else { serde_json::json!({"waiting": {}}) },
                }],
            },
        })
    }

    #[test]
    fn a_pod_runs_only_as_its_kubelet_reports_it_running_under_containerd() {
        assert_eq!(
            decide_pod(&pod("Running", "True", "containerd://abc", true)),
            Ok(vec!["containerd://abc".to_owned()])
        );
        assert!(decide_pod(&pod("Pending", "False", "", false)).is_err());
        assert!(decide_pod(&pod("Running", "False", "containerd://abc", true)).is_err());
        assert!(decide_pod(&pod("Running", "True", "containerd://", true)).is_err());
        assert!(decide_pod(&pod("Running", "True", "docker://abc", true)).is_err());
        assert!(decide_pod(&pod("Running", "True", "containerd://abc", false)).is_err());
        let mut none = pod("Running", "True", "containerd://abc", true);
        none["status"]["containerStatuses"] = serde_json::json!([]);
        assert!(decide_pod(&none).is_err());
    }

    #[test]
    fn a_node_is_ready_only_by_its_ready_condition() {
        let n = |s: &str| {
            serde_json::json!({"status": {
                "conditions": [{"type": "MemoryPressure", "status": "True"},
                               {"type": "Ready", "status": s}],
                "addresses": [{"type": "Hostname", "address": "node-1"},
                              {"type": "InternalIP", "address": "192.168.77.1"}],
            }})
        };
        assert!(ready(&n("True")));
        assert!(!ready(&n("False")));
        assert!(!ready(&serde_json::json!({})));
        assert_eq!(internal_ip(&n("True")).as_deref(), Some("192.168.77.1"));
        assert_eq!(internal_ip(&serde_json::json!({})), None);
    }

    #[test]
    fn the_workload_claims_its_host_port_only_when_asked() {
        let port = |yaml: &str| -> Value {
            let v: Value = serde_yaml::from_str(yaml).unwrap();
            v["spec"]["template"]["spec"]["containers"][0]["ports"][0].clone()
        };
        let with = port(&workload_yaml(2, Some(30080)));
        assert_eq!(with["hostPort"], 30080);
        assert_eq!(with["containerPort"], u64::from(WORKLOAD_PORT));
        let without = port(&workload_yaml(1, None));
        assert!(without["hostPort"].is_null());
        assert_eq!(without["containerPort"], u64::from(WORKLOAD_PORT));
    }
}
