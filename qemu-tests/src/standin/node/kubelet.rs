//! The kubelet's part for the Node: register it, report its status,
//! renew its Lease.
//!
//! A kubelet creates its Node with its labels, taints and status
//! (pkg/kubelet/kubelet_node_status.go, registerWithAPIServer), then
//! keeps the Lease in kube-node-lease renewed every 10 s and posts the
//! Node's status when it starts and whenever it changes (at least every
//! five minutes). The stand-in does the same with the machine's own
//! facts: its address, CPUs, memory, boot and machine IDs, kernel and OS
//! from /proc, /sys and /etc. Its conditions say Ready once the stand-in
//! is serving, with a heartbeat from this machine's clock, which is what
//! liken-init's blessing asks of a boot; its messages and the Node's
//! annotation say plainly that this is the stand-in, not k3s's kubelet.
//! It posts status every minute rather than every five, so the Node
//! shows the machine alive at a glance. When the machine stops, the
//! Lease and the heartbeat stop with it and kube-controller-manager
//! marks the Node NotReady, as for any dead kubelet.

use std::net::UdpSocket;
use std::time::{Duration, Instant, SystemTime};

use liken_kube::request::{LEASES, NODES};
use liken_kube::{Api, Client, DynamicObject, Error};
use serde_json::{Value, json};

use super::config::Setup;
use super::supervisor::NOT_K3S;

/// How often the Lease is renewed (the kubelet's 10 s).
pub const LEASE_RENEW: Duration = Duration::from_secs(10);
/// How long the Lease lasts (the kubelet's 40 s).
const LEASE_SECONDS: u32 = 40;
/// How often the status is posted even when nothing changed.
pub const STATUS_EVERY: Duration = Duration::from_secs(60);
/// What the stand-in says it is, in nodeInfo.
pub const RUNTIME_VERSION: &str = concat!("liken-standin-k3s://", env!("CARGO_PKG_VERSION"));

/// The machine's facts for the Node's status.
#[derive(Clone, Debug, PartialEq)]
pub struct Facts {
    /// The address the machine reaches the apiserver from.
    pub address: String,
    /// Online CPUs.
    pub cpus: usize,
    /// MemTotal in KiB.
    pub memory_kib: u64,
    /// /etc/machine-id.
    pub machine_id: String,
    /// /proc/sys/kernel/random/boot_id.
    pub boot_id: String,
    /// The DMI product UUID.
    pub system_uuid: String,
    /// /proc/sys/kernel/osrelease.
    pub kernel: String,
    /// PRETTY_NAME from /etc/os-release.
    pub os_image: String,
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

impl Facts {
    /// Reads the facts; `endpoint` is the apiserver, whose route decides
    /// the node's address (the kubelet's node IP is the one its default
    /// route uses).
    pub fn read(endpoint: &str) -> Facts {
        let target = endpoint
            .trim_start_matches("https://")
            .split('/')
            .next()
            .unwrap_or("")
            .to_owned();
        let address = UdpSocket::bind("0.0.0.0:0")
            .and_then(|s| s.connect(&target).map(|()| s))
            .and_then(|s| s.local_addr())
            .map(|a| a.ip().to_string())
            .unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        let os_image = os_release
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim_matches('"').to_owned())
            .unwrap_or_default();
        Facts {
            address,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_kib,
            machine_id: read_trim("/etc/machine-id"),
            boot_id: read_trim("/proc/sys/kernel/random/boot_id"),
            system_uuid: read_trim("/sys/class/dmi/id/product_uuid"),
            kernel: read_trim("/proc/sys/kernel/osrelease"),
            os_image,
        }
    }
}

/// The Node's status as this stand-in reports it at `now`.
pub fn node_status(facts: &Facts, now: &str) -> Value {
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    let resources = json!({
        "cpu": facts.cpus.to_string(),
        "memory": format!("{}Ki", facts.memory_kib),
        "pods": "110",
    });
    json!({
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                      "liken-standin-k3s does not measure memory pressure"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                      "liken-standin-k3s does not measure disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID",
                      "liken-standin-k3s does not measure PID pressure"),
            condition("Ready", "True", "KubeletReady",
                      "liken-standin-k3s is posting ready status (a test stand-in, not k3s's kubelet)"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": facts.address},
        ],
        "capacity": resources,
        "allocatable": resources,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": facts.machine_id, "systemUUID": facts.system_uuid,
            "bootID": facts.boot_id, "kernelVersion": facts.kernel, "osImage": facts.os_image,
            "containerRuntimeVersion": RUNTIME_VERSION,
            "kubeletVersion": concat!("v0.0.0-liken-standin-", env!("CARGO_PKG_VERSION")),
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64",
        },
    })
}

/// The Node as the stand-in registers it: labels (the kubelet's own and
/// config.yaml's), taints, the stand-in's annotation, and the status.
pub fn node_object(setup: &Setup, facts: &Facts, now: &str) -> Value {
    let mut labels = serde_json::Map::new();
    for (k, v) in [
        ("kubernetes.io/hostname", setup.node.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
    ] {
        labels.insert(k.into(), Value::from(v));
    }
    for (k, v) in &setup.labels {
        labels.insert(k.clone(), Value::from(v.as_str()));
    }
    let taints: Vec<Value> = setup
        .taints
        .iter()
        .map(|(k, v, e)| json!({"key": k, "value": v, "effect": e}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": setup.node, "labels": labels,
            "annotations": {NOT_K3S: "this Node is registered and reported by liken-standin-k3s, \
                                      a test stand-in, not by k3s's kubelet"},
        },
        "spec": {"taints": taints},
        "status": node_status(facts, now),
    })
}

/// The node's kubelet half.
pub struct Kubelet {
    client: Client,
    setup: Setup,
}

impl Kubelet {
    /// A kubelet for `setup` speaking as `client` (`system:node:<name>`).
    pub fn new(client: Client, setup: Setup) -> Kubelet {
        Kubelet { client, setup }
    }

    /// Registers the Node (or finds it registered by an earlier boot)
    /// and posts this boot's status.
    pub fn register(&self) -> Result<(), String> {
        let facts = Facts::read(&self.setup.endpoint);
        let now = liken_api::Time::from_system(SystemTime::now()).to_string();
        let api = Api::all(NODES);
        match self
            .client
            .create::<DynamicObject, _>(&api, &node_object(&self.setup, &facts, &now))
        {
            Ok(_) => crate::say(&format!(
                "registered Node {} ({}, {} CPUs, {} KiB), as k3s's kubelet would",
                self.setup.node, facts.address, facts.cpus, facts.memory_kib
            )),
            Err(Error::AlreadyExists { .. }) => crate::say(&format!(
                "Node {} is registered from an earlier boot; reporting this boot ({})",
                self.setup.node, facts.boot_id
            )),
            Err(e) => return Err(format!("registering Node {}: {e}", self.setup.node)),
        }
        self.post_status(&facts)
    }

    fn post_status(&self, facts: &Facts) -> Result<(), String> {
        let now = liken_api::Time::from_system(SystemTime::now()).to_string();
        self.client
            .merge_patch_status::<DynamicObject>(
                &Api::all(NODES),
                &self.setup.node,
                &json!({"status": node_status(facts, &now)}),
            )
            .map(|_| ())
            .map_err(|e| format!("posting Node {}'s status: {e}", self.setup.node))
    }

    /// Renews the Lease every [`LEASE_RENEW`] and posts the status every
    /// [`STATUS_EVERY`], forever; failures are reported and retried.
    pub fn heartbeat(&self) -> ! {
        let mut last_status = Instant::now();
        loop {
            if let Err(e) = self.renew_lease() {
                crate::say(&format!("node lease: {e}"));
            }
            if last_status.elapsed() >= STATUS_EVERY {
                match self.post_status(&Facts::read(&self.setup.endpoint)) {
                    Ok(()) => last_status = Instant::now(),
                    Err(e) => crate::say(&e),
                }
            }
            std::thread::sleep(LEASE_RENEW);
        }
    }

    fn renew_lease(&self) -> Result<(), String> {
        let api = Api::namespaced(LEASES, "kube-node-lease");
        let now = liken_kube::microtime::now();
        let patch = json!({"spec": {"holderIdentity": self.setup.node,
                                    "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now}});
        match self
            .client
            .merge_patch::<DynamicObject>(&api, &self.setup.node, &patch)
        {
            Ok(_) => Ok(()),
            Err(Error::NotFound { .. }) => {
                let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.setup.node, "namespace": "kube-node-lease"},
                    "spec": patch["spec"]});
                self.client
                    .create::<DynamicObject, _>(&api, &lease)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn the_node_says_it_is_the_stand_in_and_carries_its_labels_and_taints() {
        let setup = Setup {
            role: super::super::config::Role::Agent,
            node: "node-2".into(),
            endpoint: "https://10.0.2.2:6443".into(),
            data_dir: PathBuf::from("/d"),
            token_file: PathBuf::from("/t"),
            agent_token_file: None,
            labels: vec![("zone".into(), "a".into())],
            taints: vec![("gpu".into(), "yes".into(), "NoSchedule".into())],
        };
        let facts = Facts {
            address: "10.0.2.15".into(),
            cpus: 1,
            memory_kib: 1000,
            machine_id: "m".into(),
            boot_id: "b".into(),
            system_uuid: "u".into(),
            kernel: "6.1".into(),
            os_image: "liken x".into(),
        };
        let n = node_object(&setup, &facts, "2026-12-03T10:00:00Z");
        assert_eq!(n["metadata"]["labels"]["zone"], "a");
        assert_eq!(n["metadata"]["labels"]["kubernetes.io/hostname"], "node-2");
        assert_eq!(n["spec"]["taints"][0]["effect"], "NoSchedule");
        assert!(
            n["metadata"]["annotations"][NOT_K3S]
                .as_str()
                .unwrap()
                .contains("not by k3s")
        );
        let ready = &n["status"]["conditions"][3];
        assert_eq!(
            (ready["type"].as_str(), ready["status"].as_str()),
            (Some("Ready"), Some("True"))
        );
        assert_eq!(ready["lastHeartbeatTime"], "2026-12-03T10:00:00Z");
        assert_eq!(n["status"]["nodeInfo"]["bootID"], "b");
    }
}
