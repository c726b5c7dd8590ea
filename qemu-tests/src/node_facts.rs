//! What a machine's host gives its real kubelet and containerd, judged
//! from a pod on that node: issue 25's checks from inside the guest.
//!
//! The machine has no shell, and the launcher's kubelet cannot be asked
//! through the apiserver's proxy (it has no client CA for the apiserver's
//! certificate), so the test asks the node the way a cluster's owner
//! could: a privileged pod pinned to the node, sharing the host's PID and
//! network namespaces and mounting the host paths it reads, runs
//! `liken-workload facts` from the release's airgap image and returns its
//! report as the container's termination message, which the kubelet puts
//! in the pod's status. Every fact is read where the consumer reads it:
//! the host's mounts from init's own /proc/1/mountinfo, the container's
//! root as containerd's snapshotter mounted it, the pod's cgroup as the
//! kubelet made it, the sysctls of the host's network namespace.
//!
//! [`decide_node_facts`] judges the report (pure, tested on reports from
//! a real node); [`node_facts`] runs the pod and removes it, so no bare
//! pod is left for a drain to meet.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::real_node::{Kubectl, WORKLOAD_IMAGE};

/// Where k3s's containerd keeps its overlayfs snapshots (k3s-io/k3s
/// pkg/agent/config/config.go: `agent/containerd` under the data dir,
/// and containerd's snapshotter directory below its root).
pub const SNAPSHOTS: &str =
    "/var/lib/rancher/k3s/agent/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/";

/// The controllers the kubelet needs in a pod's cgroup to enforce its
/// resources (cgroup v2, cgroupfs driver: `/kubepods/pod<uid>` for a
/// Guaranteed pod).
pub const POD_CONTROLLERS: [&str; 3] = ["cpu", "memory", "pids"];

/// The facts pod's limits (requests equal, so it is Guaranteed and its
/// cgroup is `kubepods/pod<uid>`), and what the kubelet must have
/// written for them: memory.max in bytes, cpu.max as quota and period.
const MEMORY_LIMIT: &str = "32Mi";
const MEMORY_MAX: &str = "33554432";
const CPU_LIMIT: &str = "100m";
const CPU_MAX: &str = "10000 100000";

/// The facts pod for `node`, named `name`: pinned by `nodeName` (no
/// scheduler decision to wait for), run once, privileged with the host's
/// PID and network namespaces, the cgroup tree, /etc/machine-id and
/// /etc/rancher/node mounted read-only. The namespace must admit
/// privileged pods.
pub fn facts_pod_yaml(name: &str, node: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  \
         nodeName: {node}\n  restartPolicy: Never\n  hostPID: true\n  hostNetwork: true\n  \
         tolerations:\n  - operator: Exists\n  containers:\n  - name: facts\n    image: \
         {WORKLOAD_IMAGE}\n    imagePullPolicy: Never\n    args: [\"facts\"]\n    \
         securityContext:\n      privileged: true\n    env:\n    - name: POD_UID\n      \
         valueFrom:\n        fieldRef:\n          fieldPath: metadata.uid\n    resources:\n      \
         requests:\n        cpu: {CPU_LIMIT}\n        memory: {MEMORY_LIMIT}\n      limits:\n        \
         cpu: {CPU_LIMIT}\n        memory: {MEMORY_LIMIT}\n    volumeMounts:\n    - name: cgroup\n      \
         mountPath: /host/cgroup\n      readOnly: true\n    - name: machine-id\n      mountPath: \
         /host/machine-id\n      readOnly: true\n    - name: node\n      mountPath: /host/node\n      \
         readOnly: true\n  volumes:\n  - name: cgroup\n    hostPath:\n      path: /sys/fs/cgroup\n      \
         type: Directory\n  - name: machine-id\n    hostPath:\n      path: /etc/machine-id\n      \
         type: File\n  - name: node\n    hostPath:\n      path: /etc/rancher/node\n      type: \
         Directory\n"
    )
}

/// What a node's report established, for comparing across a reboot and
/// for the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFacts {
    /// The host's machine ID (/etc/machine-id).
    pub machine_id: String,
    /// SHA-256 of the node password file k3s's agent keeps.
    pub password_sha256: String,
    /// The propagation of the host's `/` (`shared:N`).
    pub root_propagation: String,
    /// The host mount holding containerd's snapshots: mount point, type
    /// and source (`/var ext4 /dev/vda5`).
    pub snapshots_on: String,
    /// br_netfilter in /sys/module (`present`, or `absent` when built in).
    pub br_netfilter: String,
}

/// A mountinfo line's mount point, optional fields, type and source.
fn mount_fields(line: &str) -> Option<(&str, Vec<&str>, &str, &str)> {
    let (before, after) = line.split_once(" - ")?;
    let point = before.split(' ').nth(4)?;
    let optional = before.split(' ').skip(6).collect();
    let mut after = after.split(' ');
    Some((point, optional, after.next()?, after.next()?))
}

/// The upper directory of an overlay mount's mountinfo line, from its
/// super options (after ` - `: type, source, options).
pub fn upperdir(line: &str) -> Option<&str> {
    let (_, after) = line.split_once(" - ")?;
    after
        .split(' ')
        .nth(2)?
        .split(',')
        .find_map(|o| o.strip_prefix("upperdir="))
}

/// Whether mount point `point` holds `path` (is it or an ancestor).
pub fn holds(point: &str, path: &str) -> bool {
    point == "/"
        || path
            .strip_prefix(point)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Judges a facts report (`key value` lines, as `liken-workload facts`
/// writes them): the facts, or every problem found.
pub fn decide_node_facts(report: &str) -> Result<NodeFacts, Vec<String>> {
    let mut problems = Vec::new();
    let mut values: Vec<(&str, &str)> = Vec::new();
    let mut host_mounts = Vec::new();
    for line in report.lines() {
        if let Some(e) = line.strip_prefix("error ") {
            problems.push(format!("the pod could not read {e}"));
        } else if let Some(m) = line.strip_prefix("host-mount ") {
            host_mounts.push(m);
        } else if let Some(v) = line.strip_prefix("sysctl ") {
            if let Some((k, v)) = v.split_once(' ') {
                values.push((k, v));
            }
        } else if let Some((k, v)) = line.split_once(' ') {
            values.push((k, v));
        }
    }
    let get = |key: &str| {
        values
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    };
    let want = |key: &str, problems: &mut Vec<String>| -> String {
        match get(key) {
            Some(v) => v.to_owned(),
            None => {
                problems.push(format!("the report has no {key}"));
                String::new()
            }
        }
    };

    // `/` shared: the last host line for `/` is the mount on top.
    let root = host_mounts
        .iter()
        .filter_map(|l| mount_fields(l))
        .rfind(|(p, ..)| *p == "/");
    let root_propagation = match &root {
        Some((_, optional, ..)) => match optional.iter().find(|o| o.starts_with("shared:")) {
            Some(s) => (*s).to_owned(),
            None => {
                problems.push(format!(
                    "the host's / is not shared (optional fields {optional:?}): the kubelet's \
                     volume mounts would not reach containers"
                ));
                String::new()
            }
        },
        None => {
            problems.push("the report has no host mount for /".into());
            String::new()
        }
    };

    // The container's root is an overlay whose upper directory is one of
    // containerd's snapshots, on the host's /var.
    let own = want("own-root", &mut problems);
    let upper = upperdir(&own).unwrap_or_default().to_owned();
    let mut snapshots_on = String::new();
    if !upper.starts_with(SNAPSHOTS) {
        problems.push(format!(
            "the container's root is not one of containerd's snapshots in {SNAPSHOTS}: {own}"
        ));
    } else {
        // The innermost host mount holding it (the last line of the
        // longest mount point).
        let holder = host_mounts
            .iter()
            .filter_map(|l| mount_fields(l))
            .filter(|(p, ..)| holds(p, &upper))
            .fold(
                None,
                |best: Option<(&str, Vec<&str>, &str, &str)>, m| match best {
                    Some(b) if b.0.len() > m.0.len() => Some(b),
                    _ => Some(m),
                },
            );
        match holder {
            Some((point, _, fstype, source)) => {
                snapshots_on = format!("{point} {fstype} {source}");
                if point != "/var" {
                    problems.push(format!(
                        "containerd's snapshots are on {snapshots_on}, not on /var (the data \
                         partition)"
                    ));
                }
            }
            None => problems.push(format!("no host mount holds {upper}")),
        }
    }

    // cgroup v2: the root delegates the controllers, the pod's cgroup
    // has them, and the kubelet wrote the pod's limits through them.
    let subtree = want("cgroup-subtree-control", &mut problems);
    let controllers = want("pod-cgroup-controllers", &mut problems);
    for c in POD_CONTROLLERS {
        if !subtree.split_whitespace().any(|s| s == c) {
            problems.push(format!(
                "the root cgroup does not delegate {c} (cgroup.subtree_control: {subtree:?})"
            ));
        }
        if !controllers.split_whitespace().any(|s| s == c) {
            problems.push(format!(
                "the pod's cgroup has no {c} controller (cgroup.controllers: {controllers:?})"
            ));
        }
    }
    for (key, expected) in [("pod-memory-max", MEMORY_MAX), ("pod-cpu-max", CPU_MAX)] {
        let got = want(key, &mut problems);
        if got != expected {
            problems.push(format!(
                "{key} is {got:?}, not the pod's limit {expected:?}"
            ));
        }
    }

    for key in ["net.bridge.bridge-nf-call-iptables", "net.ipv4.ip_forward"] {
        let got = want(key, &mut problems);
        if got != "1" {
            problems.push(format!(
                "{key} is {got:?} in the host's network namespace, not 1"
            ));
        }
    }
    let br_netfilter = want("module", &mut problems);

    let machine_id = want("machine-id", &mut problems);
    if machine_id.len() != 32 || !machine_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        problems.push(format!("{machine_id:?} is not a machine ID"));
    }
    let password_sha256 = want("node-password-sha256", &mut problems);
    if password_sha256.len() != 64 {
        problems.push(format!(
            "{password_sha256:?} is not the node password's digest"
        ));
    }

    if problems.is_empty() {
        Ok(NodeFacts {
            machine_id,
            password_sha256,
            root_propagation,
            snapshots_on,
            br_netfilter: br_netfilter
                .strip_prefix("br_netfilter ")
                .unwrap_or(&br_netfilter)
                .to_owned(),
        })
    } else {
        Err(problems)
    }
}

/// Runs the facts pod `name` on `node` (in `dir`'s file `<name>.yaml`),
/// waits up to `within` for its report, deletes the pod and judges the
/// report; fails the test with every problem and the report.
pub fn node_facts(
    api: &Kubectl,
    dir: &Path,
    name: &str,
    node: &str,
    within: Duration,
) -> NodeFacts {
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, facts_pod_yaml(name, node))
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    api.apply(&file);
    let deadline = Instant::now() + within;
    let (phase, report) = loop {
        let pod = api
            .json(&["get", "pod", name, "-o", "json"])
            .unwrap_or_default();
        let phase = pod["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if phase == "Succeeded" || phase == "Failed" {
            let message = pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            break (phase, message);
        }
        assert!(
            Instant::now() < deadline,
            "the facts pod {name} on {node} did not finish within {} s (phase {phase:?}): {}\n\
             events:\n{}",
            within.as_secs(),
            pod["status"],
            api.events()
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    let _ = api.text(&["delete", "pod", name, "--wait=false"]);
    match decide_node_facts(&report) {
        Ok(facts) if phase == "Succeeded" => facts,
        Ok(_) => panic!("the facts pod {name} on {node} failed; its report:\n{report}"),
        Err(problems) => panic!(
            "{node}'s host, as its facts pod {name} read it:\n  {}\nthe report:\n{report}",
            problems.join("\n  ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// A report as a pod on a liken node would write it.
    fn report() -> String {
        format!(
            "own-root 901 870 0:88 / / rw,relatime master:1 - overlay overlay \
             rw,lowerdir={SNAPSHOTS}3/fs,upperdir={SNAPSHOTS}14/fs,workdir={SNAPSHOTS}14/work\n\
             host-mount 22 1 254:0 / / ro,relatime shared:1 - squashfs /dev/mapper/liken-root ro\n\
             host-mount 30 22 252:5 / /var rw,relatime shared:9 - ext4 /dev/vda5 rw\n\
             cgroup-subtree-control cpuset cpu io memory hugetlb pids rdma misc\n\
             pod-cgroup-controllers cpuset cpu io memory hugetlb pids rdma misc\n\
             pod-memory-max 33554432\n\
             pod-cpu-max 10000 100000\n\
             sysctl net.bridge.bridge-nf-call-iptables 1\n\
             sysctl net.ipv4.ip_forward 1\n\
             module br_netfilter present\n\
             machine-id 0123456789abcdef0123456789abcdef\n\
             node-password-sha256 {}\n",
            "ab".repeat(32)
        )
    }

    #[test]
    fn a_liken_node_passes() {
        let facts = decide_node_facts(&report()).unwrap();
        assert_eq!(facts.root_propagation, "shared:1");
        assert_eq!(facts.snapshots_on, "/var ext4 /dev/vda5");
        assert_eq!(facts.br_netfilter, "present");
        assert_eq!(facts.machine_id, "0123456789abcdef0123456789abcdef");
    }

    fn problems(report: &str) -> String {
        decide_node_facts(report).unwrap_err().join("\n")
    }

    #[test]
    fn each_missing_promise_is_named() {
        let r = report();
        let p = problems(&r.replace(" shared:1 ", " "));
        assert!(p.contains("the host's / is not shared"), "{p}");
        // Snapshots left on the root (no /var mount holding them).
        let p = problems(&r.replace(" /var ", " /srv "));
        assert!(p.contains("not on /var") && p.contains("/ squashfs"), "{p}");
        let p = problems(&r.replace("upperdir=/var/lib/rancher", "upperdir=/tmp"));
        assert!(p.contains("not one of containerd's snapshots"), "{p}");
        let p = problems(&r.replace(
            "cgroup-subtree-control cpuset cpu io memory",
            "cgroup-subtree-control cpuset io",
        ));
        assert!(
            p.contains("does not delegate cpu") && p.contains("does not delegate memory"),
            "{p}"
        );
        let p = problems(&r.replace("pod-memory-max 33554432", "pod-memory-max max"));
        assert!(p.contains("pod-memory-max is \"max\""), "{p}");
        let p = problems(&r.replace("ip_forward 1", "ip_forward 0"));
        assert!(p.contains("net.ipv4.ip_forward is \"0\""), "{p}");
        let p = problems(&r.replace(
            "sysctl net.bridge.bridge-nf-call-iptables 1\n",
            "error sysctl net.bridge.bridge-nf-call-iptables: /proc/sys/net/bridge: No such file\n",
        ));
        assert!(p.contains("could not read sysctl net.bridge"), "{p}");
        assert!(p.contains("no net.bridge.bridge-nf-call-iptables"), "{p}");
        let p = problems(&r.replace("machine-id 0123", "machine-id xyz"));
        assert!(p.contains("is not a machine ID"), "{p}");
    }

    #[test]
    fn the_innermost_mount_holds_the_snapshots() {
        // A bind of containerd's directory would be the holder, and is
        // not /var.
        let r = report().replace(
            "host-mount 30 22",
            "host-mount 31 30 252:5 /x /var/lib/rancher/k3s/agent/containerd rw - ext4 /dev/vda5 rw\nhost-mount 30 22",
        );
        let p = problems(&r);
        assert!(
            p.contains("on /var/lib/rancher/k3s/agent/containerd ext4"),
            "{p}"
        );
        assert!(holds("/var", "/var") && holds("/var", "/var/x") && !holds("/var", "/varx"));
        assert!(holds("/", "/var/x") && !holds("/var/lib/cc", "/var/lib/c/x"));
        assert!(!holds("/va", "/var/x") && !holds("/run", "/var/x"));
        assert_eq!(upperdir("22 1 8:5 / /var rw - ext4 /dev/vda5 rw"), None);
    }

    #[test]
    fn the_pod_is_pinned_privileged_and_guaranteed() {
        let pod: Value = serde_yaml::from_str(&facts_pod_yaml("facts-node-1", "node-1")).unwrap();
        assert_eq!(pod["spec"]["nodeName"], "node-1");
        assert_eq!(pod["spec"]["hostPID"], true);
        assert_eq!(pod["spec"]["hostNetwork"], true);
        let c = &pod["spec"]["containers"][0];
        assert_eq!(c["securityContext"]["privileged"], true);
        assert_eq!(c["resources"]["requests"], c["resources"]["limits"]);
        assert_eq!(c["args"][0], "facts");
        let paths: Vec<&str> = pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["hostPath"]["path"].as_str())
            .collect();
        assert_eq!(
            paths,
            ["/sys/fs/cgroup", "/etc/machine-id", "/etc/rancher/node"]
        );
    }
}
