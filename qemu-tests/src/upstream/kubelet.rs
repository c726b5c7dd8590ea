//! The kubelet's and kube-proxy's arguments and configuration, as k3s
//! gives them.
//!
//! kubelet: k3s writes its defaults as a KubeletConfiguration drop-in,
//! `agent/etc/kubelet.conf.d/00-k3s-defaults.conf`, and passes the rest
//! as flags (k3s-io/k3s pkg/daemons/agent/agent_linux.go,
//! `kubeletArgsAndConfig`, and agent.go / agent_linux.go
//! `defaultKubeletConfig`): cgroupfs as the cgroup driver, swap allowed,
//! healthz on 127.0.0.1, the read-only port off, anonymous
//! authentication off with webhook authentication and authorization,
//! the eviction thresholds, k3s's check and report intervals, parallel
//! image pulls, the CRI endpoint on k3s's containerd socket, the static
//! pod directory `agent/pod-manifests`, cluster DNS 10.43.0.10 and
//! domain cluster.local, the node's taints, and the two unsafe sysctls
//! its service load balancer needs; flags `--config-dir`, `--kubeconfig`
//! (`agent/kubelet.kubeconfig`), `--read-only-port=0`,
//! `--hostname-override`, `--node-ip` and `--node-labels`.
//!
//! Differences, each because a part k3s has is not here: no
//! `--cloud-provider=external` (k3s's embedded cloud controller, which
//! would clear the uninitialized taint, runs in its server; this is
//! k3s's `--disable-cloud-controller` branch, which passes the node IP
//! alone), no client CA file (k3s fetches `agent/client-ca.crt` from its
//! supervisor; a follower's layer holds only the server CA, so the
//! kubelet's API takes webhook authentication only), no serving
//! certificate from the supervisor (the kubelet makes its own), and
//! `--bootstrap-kubeconfig` (the TLS bootstrap in place of the
//! supervisor's certificate exchange, see `join`).
//!
//! kube-proxy: `kubeProxyArgs` in the same file: iptables mode, healthz
//! on 127.0.0.1, its kubeconfig `agent/kubeproxy.kubeconfig`, the
//! cluster CIDR 10.42.0.0/16, conntrack limits left to the kernel, and
//! the node's name.

use std::path::Path;

use serde_json::{Value, json};

use super::config::Agent;

/// k3s's default cluster CIDR (pkg/cli/cmds, `--cluster-cidr`).
pub const CLUSTER_CIDR: &str = "10.42.0.0/16";
/// k3s's default cluster DNS address (`--cluster-dns`).
pub const CLUSTER_DNS: &str = "10.43.0.10";
/// Where the kubelet answers its health check.
pub const HEALTHZ: &str = "127.0.0.1:10248";
/// Where kube-proxy answers its health check.
pub const PROXY_HEALTHZ: &str = "127.0.0.1:10256";
/// The client certificate and key the kubelet's TLS bootstrap leaves.
pub const KUBELET_CLIENT_PEM: &str = "/var/lib/kubelet/pki/kubelet-client-current.pem";

/// The KubeletConfiguration drop-in (`00-k3s-defaults.conf`), as JSON,
/// which the kubelet's decoder reads as it reads YAML.
pub fn config(agent: &Agent, containerd_sock: &Path) -> Value {
    let taints: Vec<Value> = agent
        .taints
        .iter()
        .filter_map(|t| {
            let (kv, effect) = t.rsplit_once(':')?;
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            Some(json!({"key": k, "value": v, "effect": effect}))
        })
        .collect();
    json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cpuManagerReconcilePeriod": "10s",
        "cgroupDriver": "cgroupfs",
        "clusterDomain": "cluster.local",
        "clusterDNS": [CLUSTER_DNS],
        "evictionPressureTransitionPeriod": "5m0s",
        "failSwapOn": false,
        "fileCheckFrequency": "20s",
        "httpCheckFrequency": "20s",
        "healthzBindAddress": "127.0.0.1",
        "imageMinimumGCAge": "2m0s",
        "nodeStatusReportFrequency": "5m0s",
        "nodeStatusUpdateFrequency": "10s",
        "protectKernelDefaults": false,
        "readOnlyPort": 0,
        "runtimeRequestTimeout": "2m0s",
        "streamingConnectionIdleTimeout": "4h0m0s",
        "syncFrequency": "1m0s",
        "volumeStatsAggPeriod": "1m0s",
        "evictionHard": {"imagefs.available": "5%", "nodefs.available": "5%"},
        "evictionMinimumReclaim": {"imagefs.available": "10%", "nodefs.available": "10%"},
        "authentication": {
            "anonymous": {"enabled": false},
            "webhook": {"enabled": true, "cacheTTL": "2m0s"},
        },
        "authorization": {
            "mode": "Webhook",
            "webhook": {"cacheAuthorizedTTL": "5m0s", "cacheUnauthorizedTTL": "30s"},
        },
        "logging": {"format": "text", "flushFrequency": "5s"},
        "staticPodPath": agent.data("agent/pod-manifests").display().to_string(),
        "serializeImagePulls": false,
        "containerRuntimeEndpoint": format!("unix://{}", containerd_sock.display()),
        "registerWithTaints": taints,
        "allowedUnsafeSysctls": ["net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"],
    })
}

/// The kubelet's flags.
pub fn args(agent: &Agent, bootstrap_kubeconfig: &Path) -> Vec<String> {
    let mut a = vec![
        format!(
            "--config-dir={}",
            agent.data("agent/etc/kubelet.conf.d").display()
        ),
        format!(
            "--kubeconfig={}",
            agent.data("agent/kubelet.kubeconfig").display()
        ),
        "--read-only-port=0".into(),
        format!("--hostname-override={}", agent.node),
        format!("--node-ip={}", agent.node_ip),
        format!("--node-labels={}", agent.labels.join(",")),
        format!("--bootstrap-kubeconfig={}", bootstrap_kubeconfig.display()),
    ];
    a.sort();
    a
}

/// kube-proxy's flags.
pub fn proxy_args(agent: &Agent) -> Vec<String> {
    let mut a = vec![
        "--proxy-mode=iptables".into(),
        "--healthz-bind-address=127.0.0.1".into(),
        format!(
            "--kubeconfig={}",
            agent.data("agent/kubeproxy.kubeconfig").display()
        ),
        format!("--cluster-cidr={CLUSTER_CIDR}"),
        "--conntrack-max-per-core=0".into(),
        "--conntrack-tcp-timeout-established=0s".into(),
        "--conntrack-tcp-timeout-close-wait=0s".into(),
        format!("--hostname-override={}", agent.node),
    ];
    a.sort();
    a
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn agent() -> Agent {
        Agent {
            node: "node-2".into(),
            node_ip: "10.0.2.15".into(),
            server: "https://10.0.2.2:6443".into(),
            data_dir: PathBuf::from("/var/lib/rancher/k3s"),
            token_file: PathBuf::from("/var/lib/liken/k3s-token"),
            labels: vec!["a=b".into(), "c=d".into()],
            taints: vec!["dedicated=db:NoSchedule".into()],
            pause_image: "liken.sh/liken-upstream-pause:1".into(),
        }
    }

    #[test]
    fn kubelet_as_k3s_starts_it() {
        let a = args(&agent(), Path::new("/b.kubeconfig"));
        for want in [
            "--config-dir=/var/lib/rancher/k3s/agent/etc/kubelet.conf.d",
            "--kubeconfig=/var/lib/rancher/k3s/agent/kubelet.kubeconfig",
            "--read-only-port=0",
            "--hostname-override=node-2",
            "--node-ip=10.0.2.15",
            "--node-labels=a=b,c=d",
        ] {
            assert!(a.iter().any(|x| x == want), "{want} in {a:?}");
        }
        let c = config(&agent(), Path::new("/run/k3s/containerd/containerd.sock"));
        assert_eq!(c["cgroupDriver"], "cgroupfs");
        assert_eq!(c["failSwapOn"], false);
        assert_eq!(
            c["containerRuntimeEndpoint"],
            "unix:///run/k3s/containerd/containerd.sock"
        );
        assert_eq!(
            c["staticPodPath"],
            "/var/lib/rancher/k3s/agent/pod-manifests"
        );
        assert_eq!(
            c["registerWithTaints"][0],
            json!({"key": "dedicated", "value": "db", "effect": "NoSchedule"})
        );
    }

    #[test]
    fn kube_proxy_as_k3s_starts_it() {
        let a = proxy_args(&agent());
        assert!(a.contains(&"--proxy-mode=iptables".to_owned()));
        assert!(a.contains(&"--cluster-cidr=10.42.0.0/16".to_owned()));
        assert!(
            a.contains(&"--kubeconfig=/var/lib/rancher/k3s/agent/kubeproxy.kubeconfig".to_owned())
        );
    }
}
