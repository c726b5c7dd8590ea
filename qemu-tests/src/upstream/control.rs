//! The control plane's arguments, as k3s gives them: etcd,
//! kube-apiserver, kube-controller-manager and kube-scheduler, on the
//! files below `<data-dir>/server` (see `certs`).
//!
//! Pure functions, so each argument is pinned by a test against the k3s
//! source it follows:
//!
//! - etcd: k3s-io/k3s pkg/etcd/etcd.go (`cluster`, `newCluster`): client
//!   URLs on the node's address and 127.0.0.1:2379, metrics on
//!   127.0.0.1:2381, peers on the node's address :2380, the server and
//!   peer trust with client certificates required, election timeout
//!   5000 ms and heartbeat 500 ms, the zap logger to stderr, data in
//!   `server/db/etcd`. k3s's default datastore is kine on SQLite;
//!   `cluster-init` (what liken-init writes on the first leader) selects
//!   the embedded etcd, so this is the path liken's leaders take.
//! - kube-apiserver: pkg/daemons/control/server.go (`apiServer`): etcd
//!   with its client certificate, Node and RBAC authorization, k3s's
//!   service CIDR and NodePort range, the serving, kubelet-client and
//!   request-header (auth proxy) certificates, the client CA,
//!   NodeRestriction, anonymous auth and profiling off, then config.yaml's
//!   `kube-apiserver-arg`s (liken-init names its Pod Security file there).
//! - kube-controller-manager (`controllerManager`): its kubeconfig, the
//!   service-account key, node CIDRs from 10.42.0.0/16, the server CA as
//!   root CA, service-account credentials, and the cluster signers: client
//!   certificates (kubelets' included) from the client CA, kubelet
//!   serving ones from the server CA.
//! - kube-scheduler (`scheduler`): its kubeconfig, bound to loopback.
//!
//! Differences, each because a part k3s has is not here:
//!
//! - kube-apiserver listens on 6443 on every address. k3s binds it to
//!   127.0.0.1:6444 and puts its supervisor in front on 6443 (the
//!   supervisor also serves the join handshake, `/cacerts`,
//!   `/v1-k3s/...`); with no supervisor the API itself is the port.
//! - `--enable-bootstrap-token-auth`: the kubelets join through
//!   Kubernetes' TLS bootstrap with a token derived from the agent token
//!   (see `join` and `server`), in place of the supervisor's exchange.
//! - No `--kubelet-certificate-authority`: k3s's kubelets serve with a
//!   certificate the supervisor signed with the server CA; here each
//!   kubelet serves with the self-signed one it makes, so the API server
//!   would refuse it (logs and exec would fail), and it is left to trust
//!   the kubelet's address.
//! - No egress selector (k3s's tunnel through the supervisor) and no
//!   cloud controller manager (the `--disable-cloud-controller` branch:
//!   the controller manager keeps its default controllers).
//! - Flags that the Kubernetes of testenv no longer takes (`--port`,
//!   `--address`, `--insecure-port`, `--advertise-port` in older k3s)
//!   are left out; the secure ports k3s uses with them (10257, 10259)
//!   stay.

use std::path::Path;

/// k3s's cluster (pod) CIDR.
pub const CLUSTER_CIDR: &str = "10.42.0.0/16";
/// k3s's service CIDR.
pub const SERVICE_CIDR: &str = "10.43.0.0/16";
/// k3s's NodePort range.
pub const NODE_PORT_RANGE: &str = "30000-32767";
/// The API's port (see the module docs).
pub const API_PORT: u16 = 6443;
/// etcd's client port on loopback.
pub const ETCD_CLIENT: &str = "https://127.0.0.1:2379";

/// `<server>/<rel>` as an argument's text.
fn at(server: &Path, rel: &str) -> String {
    server.join(rel).display().to_string()
}

/// etcd's arguments for a new one-member cluster named `name` on
/// `node_ip`.
pub fn etcd(server: &Path, name: &str, node_ip: &str) -> Vec<String> {
    let peer = format!("https://{node_ip}:2380");
    vec![
        format!("--name={name}"),
        format!("--data-dir={}", at(server, "db/etcd")),
        format!("--listen-client-urls=https://{node_ip}:2379,{ETCD_CLIENT}"),
        "--listen-metrics-urls=http://127.0.0.1:2381".into(),
        format!("--listen-peer-urls={peer}"),
        format!("--advertise-client-urls=https://{node_ip}:2379"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster={name}={peer}"),
        "--initial-cluster-state=new".into(),
        format!("--cert-file={}", at(server, "tls/etcd/server-client.crt")),
        format!("--key-file={}", at(server, "tls/etcd/server-client.key")),
        "--client-cert-auth=true".into(),
        format!("--trusted-ca-file={}", at(server, "tls/etcd/server-ca.crt")),
        format!(
            "--peer-cert-file={}",
            at(server, "tls/etcd/peer-server-client.crt")
        ),
        format!(
            "--peer-key-file={}",
            at(server, "tls/etcd/peer-server-client.key")
        ),
        "--peer-client-cert-auth=true".into(),
        format!(
            "--peer-trusted-ca-file={}",
            at(server, "tls/etcd/peer-ca.crt")
        ),
        "--election-timeout=5000".into(),
        "--heartbeat-interval=500".into(),
        "--logger=zap".into(),
        "--log-outputs=stderr".into(),
    ]
}

/// `--<arg>` for each of config.yaml's `*-arg` entries (`key=value`),
/// as k3s appends them after its own (config.GetArgs: a later value of
/// the same flag wins).
pub fn extra(args: &[String]) -> Vec<String> {
    args.iter()
        .map(|a| format!("--{}", a.trim_start_matches('-')))
        .collect()
}

/// kube-apiserver's arguments.
pub fn apiserver(server: &Path, node_ip: &str, extra_args: &[String]) -> Vec<String> {
    let mut a = vec![
        "--storage-backend=etcd3".into(),
        format!("--etcd-servers={ETCD_CLIENT}"),
        format!("--etcd-cafile={}", at(server, "tls/etcd/server-ca.crt")),
        format!("--etcd-certfile={}", at(server, "tls/etcd/client.crt")),
        format!("--etcd-keyfile={}", at(server, "tls/etcd/client.key")),
        format!("--cert-dir={}", at(server, "tls/temporary-certs")),
        "--allow-privileged=true".into(),
        "--authorization-mode=Node,RBAC".into(),
        format!(
            "--service-account-signing-key-file={}",
            at(server, "tls/service.key")
        ),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        format!("--service-node-port-range={NODE_PORT_RANGE}"),
        format!("--advertise-address={node_ip}"),
        format!("--secure-port={API_PORT}"),
        "--bind-address=0.0.0.0".into(),
        format!(
            "--tls-cert-file={}",
            at(server, "tls/serving-kube-apiserver.crt")
        ),
        format!(
            "--tls-private-key-file={}",
            at(server, "tls/serving-kube-apiserver.key")
        ),
        format!(
            "--service-account-key-file={}",
            at(server, "tls/service.key")
        ),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        "--api-audiences=https://kubernetes.default.svc.cluster.local,k3s".into(),
        format!(
            "--kubelet-client-certificate={}",
            at(server, "tls/client-kube-apiserver.crt")
        ),
        format!(
            "--kubelet-client-key={}",
            at(server, "tls/client-kube-apiserver.key")
        ),
        format!(
            "--requestheader-client-ca-file={}",
            at(server, "tls/request-header-ca.crt")
        ),
        "--requestheader-allowed-names=system:auth-proxy".into(),
        format!(
            "--proxy-client-cert-file={}",
            at(server, "tls/client-auth-proxy.crt")
        ),
        format!(
            "--proxy-client-key-file={}",
            at(server, "tls/client-auth-proxy.key")
        ),
        "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
        "--requestheader-group-headers=X-Remote-Group".into(),
        "--requestheader-username-headers=X-Remote-User".into(),
        format!("--client-ca-file={}", at(server, "tls/client-ca.crt")),
        "--enable-admission-plugins=NodeRestriction".into(),
        "--anonymous-auth=false".into(),
        "--profiling=false".into(),
        "--enable-bootstrap-token-auth=true".into(),
    ];
    a.extend(extra(extra_args));
    a
}

/// kube-controller-manager's arguments.
pub fn controller_manager(server: &Path, extra_args: &[String]) -> Vec<String> {
    let kc = at(server, "cred/controller.kubeconfig");
    let client_ca = at(server, "tls/client-ca.crt");
    let client_key = at(server, "tls/client-ca.key");
    let mut a = vec![
        format!("--kubeconfig={kc}"),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        format!(
            "--service-account-private-key-file={}",
            at(server, "tls/service.key")
        ),
        "--allocate-node-cidrs=true".into(),
        format!("--cluster-cidr={CLUSTER_CIDR}"),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        format!("--root-ca-file={}", at(server, "tls/server-ca.crt")),
        "--profiling=false".into(),
        "--bind-address=127.0.0.1".into(),
        "--secure-port=10257".into(),
        "--use-service-account-credentials=true".into(),
        format!("--cluster-signing-kube-apiserver-client-cert-file={client_ca}"),
        format!("--cluster-signing-kube-apiserver-client-key-file={client_key}"),
        format!("--cluster-signing-kubelet-client-cert-file={client_ca}"),
        format!("--cluster-signing-kubelet-client-key-file={client_key}"),
        format!(
            "--cluster-signing-kubelet-serving-cert-file={}",
            at(server, "tls/server-ca.crt")
        ),
        format!(
            "--cluster-signing-kubelet-serving-key-file={}",
            at(server, "tls/server-ca.key")
        ),
        format!("--cluster-signing-legacy-unknown-cert-file={client_ca}"),
        format!("--cluster-signing-legacy-unknown-key-file={client_key}"),
    ];
    a.extend(extra(extra_args));
    a
}

/// kube-scheduler's arguments.
pub fn scheduler(server: &Path, extra_args: &[String]) -> Vec<String> {
    let kc = at(server, "cred/scheduler.kubeconfig");
    let mut a = vec![
        format!("--kubeconfig={kc}"),
        format!("--authentication-kubeconfig={kc}"),
        format!("--authorization-kubeconfig={kc}"),
        "--bind-address=127.0.0.1".into(),
        "--secure-port=10259".into(),
        "--profiling=false".into(),
    ];
    a.extend(extra(extra_args));
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = "/var/lib/rancher/k3s/server";

    fn has(args: &[String], want: &str) -> bool {
        args.iter().any(|a| a == want)
    }

    #[test]
    fn etcd_as_k3s_starts_it() {
        let a = etcd(Path::new(S), "node-1-0a1b2c3d", "10.0.2.15");
        for want in [
            "--name=node-1-0a1b2c3d",
            "--data-dir=/var/lib/rancher/k3s/server/db/etcd",
            "--listen-client-urls=https://10.0.2.15:2379,https://127.0.0.1:2379",
            "--listen-metrics-urls=http://127.0.0.1:2381",
            "--listen-peer-urls=https://10.0.2.15:2380",
            "--advertise-client-urls=https://10.0.2.15:2379",
            "--initial-cluster=node-1-0a1b2c3d=https://10.0.2.15:2380",
            "--initial-cluster-state=new",
            "--cert-file=/var/lib/rancher/k3s/server/tls/etcd/server-client.crt",
            "--trusted-ca-file=/var/lib/rancher/k3s/server/tls/etcd/server-ca.crt",
            "--peer-trusted-ca-file=/var/lib/rancher/k3s/server/tls/etcd/peer-ca.crt",
            "--client-cert-auth=true",
            "--peer-client-cert-auth=true",
            "--election-timeout=5000",
            "--heartbeat-interval=500",
            "--logger=zap",
        ] {
            assert!(has(&a, want), "{want} in {a:?}");
        }
    }

    #[test]
    fn the_apiserver_as_k3s_starts_it() {
        let a = apiserver(
            Path::new(S),
            "10.0.2.15",
            &["admission-control-config-file=/run/rancher/k3s/pod-security.yaml".into()],
        );
        for want in [
            "--etcd-servers=https://127.0.0.1:2379",
            "--etcd-certfile=/var/lib/rancher/k3s/server/tls/etcd/client.crt",
            "--authorization-mode=Node,RBAC",
            "--service-cluster-ip-range=10.43.0.0/16",
            "--service-node-port-range=30000-32767",
            "--tls-cert-file=/var/lib/rancher/k3s/server/tls/serving-kube-apiserver.crt",
            "--client-ca-file=/var/lib/rancher/k3s/server/tls/client-ca.crt",
            "--kubelet-client-certificate=/var/lib/rancher/k3s/server/tls/client-kube-apiserver.crt",
            "--requestheader-allowed-names=system:auth-proxy",
            "--proxy-client-cert-file=/var/lib/rancher/k3s/server/tls/client-auth-proxy.crt",
            "--service-account-key-file=/var/lib/rancher/k3s/server/tls/service.key",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--api-audiences=https://kubernetes.default.svc.cluster.local,k3s",
            "--enable-admission-plugins=NodeRestriction",
            "--anonymous-auth=false",
            "--enable-bootstrap-token-auth=true",
            "--secure-port=6443",
        ] {
            assert!(has(&a, want), "{want} in {a:?}");
        }
        assert_eq!(
            a.last().map(String::as_str),
            Some("--admission-control-config-file=/run/rancher/k3s/pod-security.yaml")
        );
        assert!(
            !a.iter()
                .any(|x| x.starts_with("--kubelet-certificate-authority"))
        );
    }

    #[test]
    fn the_controller_manager_and_scheduler_as_k3s_start_them() {
        let a = controller_manager(Path::new(S), &[]);
        for want in [
            "--kubeconfig=/var/lib/rancher/k3s/server/cred/controller.kubeconfig",
            "--allocate-node-cidrs=true",
            "--cluster-cidr=10.42.0.0/16",
            "--root-ca-file=/var/lib/rancher/k3s/server/tls/server-ca.crt",
            "--use-service-account-credentials=true",
            "--cluster-signing-kubelet-client-cert-file=/var/lib/rancher/k3s/server/tls/client-ca.crt",
            "--cluster-signing-kubelet-serving-key-file=/var/lib/rancher/k3s/server/tls/server-ca.key",
            "--secure-port=10257",
        ] {
            assert!(has(&a, want), "{want} in {a:?}");
        }
        let s = scheduler(Path::new(S), &["v=2".into()]);
        assert!(has(
            &s,
            "--kubeconfig=/var/lib/rancher/k3s/server/cred/scheduler.kubeconfig"
        ));
        assert!(has(&s, "--secure-port=10259"));
        assert_eq!(s.last().map(String::as_str), Some("--v=2"));
    }
}
