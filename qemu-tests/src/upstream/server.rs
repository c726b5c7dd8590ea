//! `k3s server`: the control plane inside the leader, then the agent
//! half joining it, in k3s's order (k3s-io/k3s pkg/cli/server/server.go
//! `run`, pkg/daemons/control/server.go `Server` and `prepare`):
//!
//! 1. config.yaml read as a server reads it (`token-file`,
//!    `agent-token-file`, `tls-san`, `cluster-init`, the `kube-*-arg`
//!    lists) beside the agent's keys;
//! 2. the bundled programs unpacked (`agent::programs`);
//! 3. the leaf certificates and `server/cred` kubeconfigs made from the
//!    CAs liken-init seeded in `server/tls` (`certs`);
//! 4. etcd (`cluster-init`: k3s's embedded etcd, a one-member cluster
//!    whose name is kept in `server/db/etcd/name`, as k3s keeps it),
//!    then kube-apiserver once etcd answers (`control`);
//! 5. once the API is ready: /etc/rancher/k3s/k3s.yaml (0600, k3s's
//!    `write-kubeconfig-mode` default), the agent token registered
//!    ([`agents_yaml`]), kube-controller-manager and kube-scheduler, the
//!    deploy controller on `server/manifests` (`deploy`), and the
//!    control-plane role labels on this machine's Node
//!    (pkg/server/server.go `setNodeLabelsAndAnnotations`);
//! 6. the agent half (`agent::run_joined`): containerd, the kubelet and
//!    kube-proxy, joining this machine's own API at 127.0.0.1:6443 with
//!    the agent token, as any follower joins.
//!
//! **The agent token.** A k3s server makes its supervisor's `node` user
//! from the agent token (pkg/daemons/control/deps/deps.go `genUsers`), and
//! an agent presenting it gets its kubelet certificate from the
//! supervisor. The launcher has no supervisor; in its place the server
//! registers what the test's host registered for a follower before:
//! a bootstrap token whose id and secret derive from the agent token's
//! secret (`join::bootstrap_token`), allowed to authenticate only, and
//! the bindings that let `system:bootstrappers` ask for and have
//! auto-approved a kubelet client certificate, plus `system:node-proxier`
//! for `system:nodes` (kube-proxy runs on the kubelet's certificate).
//! So a follower joins a leader exactly as it joined the host, and this
//! machine's own kubelet joins the same way, proving the registration.
//!
//! Every component is a child started from the main thread with the
//! launcher's death signal (`children`), and the launcher exits when
//! any of them ends, for init to restart it with backoff, as k3s exits
//! when its embedded etcd or API server does.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::agent::mark;
use super::children::{self, Component, Output};
use super::config::{self, Agent};
use super::console::say;
use super::{agent, certs, control, deploy, join};
use crate::k3s_node::{until_ok, write_private};

/// The API as this machine's own components reach it.
pub const LOCAL_URL: &str = "https://127.0.0.1:6443";
/// Where k3s writes the admin kubeconfig (`--write-kubeconfig`).
pub const K3S_YAML: &str = "/etc/rancher/k3s/k3s.yaml";
/// How long etcd and the API may take to answer under TCG.
const START_WAIT: Duration = Duration::from_secs(600);
/// How long after this Node turns Ready the memory is read again: the
/// control plane's start-up work (informers' first lists, the deploy
/// controller's applies, leader elections) is over by then.
pub const SETTLE: Duration = Duration::from_secs(60);
/// The annotation on what the launcher registers in place of k3s.
pub const NOT_K3S: &str = "liken-upstream-k3s.test/not-k3s";

/// config.yaml's keys a server reads beyond the agent's.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub struct ServerConfig {
    /// The server token's file.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The agent token's file.
    #[serde(default)]
    pub agent_token_file: Option<PathBuf>,
    /// Start the embedded etcd.
    #[serde(default)]
    pub cluster_init: bool,
    /// Join another server (a second leader).
    #[serde(default)]
    pub server: Option<String>,
    /// Extra names and addresses for the API's certificate.
    #[serde(default, deserialize_with = "super::config::one_or_many")]
    pub tls_san: Vec<String>,
    /// Extra kube-apiserver flags (`key=value`).
    #[serde(default, deserialize_with = "super::config::one_or_many")]
    pub kube_apiserver_arg: Vec<String>,
    /// Extra kube-controller-manager flags.
    #[serde(default, deserialize_with = "super::config::one_or_many")]
    pub kube_controller_manager_arg: Vec<String>,
    /// Extra kube-scheduler flags.
    #[serde(default, deserialize_with = "super::config::one_or_many")]
    pub kube_scheduler_arg: Vec<String>,
}

/// Everything the server needs to know about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    /// The agent half, joining [`LOCAL_URL`] with the agent token.
    pub agent: Agent,
    /// `tls-san`.
    pub tls_san: Vec<String>,
    /// `kube-apiserver-arg`.
    pub apiserver_args: Vec<String>,
    /// `kube-controller-manager-arg`.
    pub controller_args: Vec<String>,
    /// `kube-scheduler-arg`.
    pub scheduler_args: Vec<String>,
}

/// Decides the server's setup from config.yaml's text, the hostname and
/// the default route's address.
pub fn decide_server(text: &str, hostname: &str, route_ip: Option<&str>) -> Result<Server, String> {
    let sc: ServerConfig =
        serde_yaml::from_str(text).map_err(|e| format!("{}: {e}", config::CONFIG_PATH))?;
    if let Some(url) = &sc.server {
        return Err(format!(
            "config.yaml names a server to join ({url}): this leader would join another \
             leader's etcd, which the upstream node launcher does not build (only the first \
             leader, with cluster-init, runs the control plane)"
        ));
    }
    let mut k = config::parse(text)?;
    // The agent half joins this machine's own API with the agent token,
    // else the server token (k3s's agent on a server uses the server
    // token; its secret serves as well, see join::decide_token).
    k.server = Some(LOCAL_URL.to_owned());
    k.token_file = sc.agent_token_file.clone().or(sc.token_file.clone());
    let agent = config::decide_agent(&k, hostname, route_ip)?;
    Ok(Server {
        agent,
        tls_san: super::config::split_commas(&sc.tls_san),
        apiserver_args: sc.kube_apiserver_arg,
        controller_args: sc.kube_controller_manager_arg,
        scheduler_args: sc.kube_scheduler_arg,
    })
}

fn read_server() -> Result<Server, String> {
    let text = std::fs::read_to_string(config::CONFIG_PATH)
        .map_err(|e| format!("reading {}: {e}", config::CONFIG_PATH))?;
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    decide_server(&text, hostname.trim(), config::route_ip().as_deref())
}

/// What the server registers so agents holding the agent token may
/// join (see the module docs): the bootstrap token `<id>.<secret>` and
/// the bindings of Kubernetes' TLS bootstrap.
pub fn agents_yaml(bootstrap: &str) -> String {
    let (id, secret) = bootstrap.split_once('.').unwrap_or((bootstrap, ""));
    let note = "made by liken-upstream-k3s in place of k3s's supervisor: agents holding the \
                agent token may ask for a kubelet certificate";
    let binding = |name: &str, role: &str, group: &str| {
        format!(
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  \
             name: {name}\n  annotations:\n    {NOT_K3S}: \"{note}\"\nroleRef:\n  apiGroup: \
             rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: {role}\nsubjects:\n- \
             apiGroup: rbac.authorization.k8s.io\n  kind: Group\n  name: {group}\n"
        )
    };
    format!(
        "apiVersion: v1\nkind: Secret\ntype: bootstrap.kubernetes.io/token\nmetadata:\n  name: \
         bootstrap-token-{id}\n  namespace: kube-system\n  annotations:\n    {NOT_K3S}: \
         \"{note}\"\nstringData:\n  token-id: \"{id}\"\n  token-secret: \"{secret}\"\n  \
         usage-bootstrap-authentication: \"true\"\n{}{}{}",
        binding(
            "liken-upstream-k3s:bootstrapper",
            "system:node-bootstrapper",
            "system:bootstrappers"
        ),
        binding(
            "liken-upstream-k3s:autoapprove",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            "system:bootstrappers"
        ),
        binding(
            "liken-upstream-k3s:proxier",
            "system:node-proxier",
            "system:nodes"
        ),
    )
}

/// The control-plane role labels k3s puts on a server's Node.
pub const ROLE_LABELS: [&str; 3] = [
    "node-role.kubernetes.io/control-plane=true",
    "node-role.kubernetes.io/master=true",
    "node-role.kubernetes.io/etcd=true",
];

/// etcd's member name, kept in `server/db/etcd/name` as k3s keeps it:
/// the node's name and eight random hex digits, made once.
fn etcd_name(server: &Path, node: &str) -> Result<String, String> {
    let file = server.join("db/etcd/name");
    if let Ok(name) = std::fs::read_to_string(&file)
        && !name.trim().is_empty()
    {
        return Ok(name.trim().to_owned());
    }
    let mut bytes = [0u8; 4];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("reading /dev/urandom: {e}"))?;
    let name = format!(
        "{node}-{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    write_private(&file, name.as_bytes())?;
    Ok(name)
}

fn fail(what: &str) -> ! {
    agent::exit_for_restart("server", what)
}

/// Waits until `ready` holds, failing if a component ends meanwhile.
fn wait_for(running: &mut [Component], what: &str, mut ready: impl FnMut() -> bool) -> f64 {
    let t = Instant::now();
    while t.elapsed() < START_WAIT {
        for c in running.iter_mut() {
            if let Ok(Some(status)) = c.child.try_wait() {
                fail(&format!(
                    "{} ended ({status}) while waiting for {what}",
                    c.name
                ));
            }
        }
        if ready() {
            return t.elapsed().as_secs_f64();
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    fail(&format!(
        "{what} did not happen within {} s",
        START_WAIT.as_secs()
    ))
}

fn kubectl(bin: &Path, kubeconfig: &Path) -> Command {
    let mut c = Command::new(bin.join("kubectl"));
    c.arg("--kubeconfig").arg(kubeconfig);
    c
}

fn kubectl_ok(mut c: Command) -> Result<String, String> {
    let o = c.output().map_err(|e| format!("cannot run kubectl: {e}"))?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&o.stderr).trim().to_owned())
    }
}

/// `k3s server`; never returns.
pub fn run() -> ! {
    let t0 = Instant::now();
    say(
        "the upstream node launcher, started as k3s server: etcd, kube-apiserver, \
         kube-controller-manager and kube-scheduler from their own projects, with k3s's paths \
         and arguments, then the agent half; this is not k3s",
    );
    let s = until_ok("reading the server's configuration", say, read_server);
    let server = s.agent.data("server");
    say(&format!(
        "server {} at {}: the control plane on the identity in {}",
        s.agent.node,
        s.agent.node_ip,
        server.join("tls").display()
    ));
    let bin = agent::programs(&s.agent.data_dir, t0);
    let path = agent::path_with(&bin);

    let (dns, ips) = certs::decide_sans(&s.agent.node, &s.agent.node_ip, &s.tls_san);
    let t = Instant::now();
    until_ok("making the server's certificates", say, || {
        certs::generate(&server, &certs::leaves(&dns, &ips), LOCAL_URL).map_err(|e| e.to_string())
    });
    let certs_s = t.elapsed().as_secs_f64();
    mark(
        t0,
        &format!(
            "made the serving, client and etcd certificates and the server/cred kubeconfigs \
             from the seeded CAs, as k3s does at start ({certs_s:.1} s)"
        ),
    );

    let name = etcd_name(&server, &s.agent.node).unwrap_or_else(|e| fail(&e));
    let mut running: Vec<Component> = Vec::new();
    running.push(
        children::start(
            "etcd",
            &bin.join("etcd"),
            &control::etcd(&server, &name, &s.agent.node_ip),
            &path,
            Output::Console("etcd"),
        )
        .unwrap_or_else(|e| fail(&e)),
    );
    let etcd_s = wait_for(&mut running, "etcd to accept connections", || {
        TcpStream::connect("127.0.0.1:2379").is_ok()
    });
    mark(t0, &format!("etcd accepts connections after {etcd_s:.1} s"));

    running.push(
        children::start(
            "kube-apiserver",
            &bin.join("kube-apiserver"),
            &control::apiserver(&server, &s.agent.node_ip, &s.apiserver_args),
            &path,
            Output::Console("kube-apiserver"),
        )
        .unwrap_or_else(|e| fail(&e)),
    );
    let admin = server.join("cred/admin.kubeconfig");
    let mut last_try = Instant::now() - Duration::from_secs(10);
    let api_s = wait_for(&mut running, "kube-apiserver's /readyz", || {
        // kubectl is a large program to start under TCG: ask every 3 s
        // once the port is open.
        if TcpStream::connect(("127.0.0.1", control::API_PORT)).is_err()
            || last_try.elapsed() < Duration::from_secs(3)
        {
            return false;
        }
        last_try = Instant::now();
        let mut c = kubectl(&bin, &admin);
        c.args(["get", "--raw", "/readyz"]);
        kubectl_ok(c).is_ok_and(|o| o.trim() == "ok")
    });
    mark(
        t0,
        &format!("kube-apiserver answers ready after {api_s:.1} s"),
    );

    write_k3s_yaml(&server).unwrap_or_else(|e| fail(&e));
    mark(t0, &format!("wrote {K3S_YAML} (0600)"));

    let bootstrap = until_ok("reading the agent token", say, || {
        let text = std::fs::read_to_string(&s.agent.token_file)
            .map_err(|e| format!("{}: {e}", s.agent.token_file.display()))?;
        join::decide_token(&text).map(|(_, secret)| join::bootstrap_token(secret))
    });
    let file = server.join("cred/liken-upstream-agents.yaml");
    write_private(&file, agents_yaml(&bootstrap).as_bytes()).unwrap_or_else(|e| fail(&e));
    until_ok("registering the agent token", say, || {
        let mut c = kubectl(&bin, &admin);
        c.args(["apply", "-f"]).arg(&file);
        kubectl_ok(c)
    });
    mark(
        t0,
        "registered the agent token as a bootstrap token, with the TLS bootstrap's bindings \
         (in place of k3s's supervisor)",
    );

    for (name, program, args) in [
        (
            "kube-controller-manager",
            "kube-controller-manager",
            control::controller_manager(&server, &s.controller_args),
        ),
        (
            "kube-scheduler",
            "kube-scheduler",
            control::scheduler(&server, &s.scheduler_args),
        ),
    ] {
        running.push(
            children::start(
                name,
                &bin.join(program),
                &args,
                &path,
                Output::Console(name),
            )
            .unwrap_or_else(|e| fail(&e)),
        );
    }
    let started = Instant::now();
    {
        let (dir, kubectl, kc) = (server.join("manifests"), bin.join("kubectl"), admin.clone());
        std::thread::spawn(move || deploy::run(dir, kubectl, kc));
    }
    {
        let (bin, admin, node) = (bin.clone(), admin.clone(), s.agent.node.clone());
        let figures = (certs_s, etcd_s, api_s);
        std::thread::spawn(move || settle(&bin, &admin, &node, t0, started, figures));
    }
    agent::run_joined(
        s.agent.clone(),
        &server.join("tls/server-ca.crt"),
        running,
        t0,
    )
}

fn write_k3s_yaml(server: &Path) -> Result<(), String> {
    let read = |rel: &str| {
        let p = server.join(rel);
        std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))
    };
    let text = certs::k3s_yaml(
        LOCAL_URL,
        &read("tls/server-ca.crt")?,
        &read("tls/client-admin.crt")?,
        &read("tls/client-admin.key")?,
    );
    write_private(Path::new(K3S_YAML), text.as_bytes())
}

/// Waits for the controller manager's and scheduler's ports and for
/// this Node; labels it as k3s labels a server's; prints the control
/// plane's start times, and the memory in use [`SETTLE`] after the Node
/// turns Ready.
fn settle(
    bin: &Path,
    admin: &Path,
    node: &str,
    t0: Instant,
    started: Instant,
    (certs_s, etcd_s, api_s): (f64, f64, f64),
) {
    let since = |t: Instant| t.elapsed().as_secs_f64();
    let (mut kcm, mut sched, mut labelled, mut ready) = (None, None, None, None);
    loop {
        if kcm.is_none() && TcpStream::connect("127.0.0.1:10257").is_ok() {
            kcm = Some(since(started));
            mark(t0, "kube-controller-manager listens on 10257");
        }
        if sched.is_none() && TcpStream::connect("127.0.0.1:10259").is_ok() {
            sched = Some(since(started));
            mark(t0, "kube-scheduler listens on 10259");
        }
        if labelled.is_none() {
            let mut c = kubectl(bin, admin);
            c.args(["label", "node", node, "--overwrite"])
                .args(ROLE_LABELS);
            if kubectl_ok(c).is_ok() {
                labelled = Some(since(t0));
                mark(
                    t0,
                    &format!("labelled Node {node} as a control-plane node, as k3s does"),
                );
            }
        }
        if labelled.is_some() && ready.is_none() {
            let mut c = kubectl(bin, admin);
            c.args([
                "get",
                "node",
                node,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ]);
            if kubectl_ok(c).is_ok_and(|o| o.trim() == "True") {
                ready = Some(since(t0));
            }
        }
        if kcm.is_some()
            && sched.is_some()
            && let Some(r) = ready
        {
            let f = |v: Option<f64>| v.map_or("-".to_owned(), |s| format!("{s:.1}"));
            say(&format!(
                "control plane start times: certificates {certs_s:.1} s, etcd {etcd_s:.1} s, \
                 kube-apiserver ready {api_s:.1} s; from their start: kube-controller-manager \
                 {} s, kube-scheduler {} s; start to this Node Ready {r:.1} s; memory in use {}",
                f(kcm),
                f(sched),
                agent::memory_in_use()
            ));
            std::thread::sleep(SETTLE);
            say(&format!(
                "control plane settled ({} s after this Node turned Ready): memory in use {}",
                SETTLE.as_secs(),
                agent::memory_in_use()
            ));
            return;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEADER: &str = "node-name: \"node-1\"\ndata-dir: \"/var/lib/rancher/k3s\"\n\
        token-file: \"/var/lib/rancher/k3s/server/token\"\n\
        agent-token-file: \"/var/lib/rancher/k3s/server/agent-token\"\ncluster-init: true\n\
        tls-san:\n  - \"10.0.2.15\"\nkube-apiserver-arg:\n  - \
        \"admission-control-config-file=/run/rancher/k3s/pod-security.yaml\"\n";

    #[test]
    fn a_server_from_inits_leader_config() {
        let s = decide_server(LEADER, "ignored", Some("10.0.2.15")).unwrap();
        assert_eq!(s.agent.node, "node-1");
        assert_eq!(s.agent.server, LOCAL_URL);
        assert_eq!(
            s.agent.token_file,
            PathBuf::from("/var/lib/rancher/k3s/server/agent-token")
        );
        assert_eq!(s.tls_san, ["10.0.2.15"]);
        assert_eq!(
            s.apiserver_args,
            ["admission-control-config-file=/run/rancher/k3s/pod-security.yaml"]
        );
        let joining = format!("{LEADER}server: \"https://10.0.2.16:6443\"\n");
        assert!(decide_server(&joining, "h", Some("10.0.2.15")).is_err());
        let no_agent_token = LEADER.replace(
            "agent-token-file: \"/var/lib/rancher/k3s/server/agent-token\"\n",
            "",
        );
        let s = decide_server(&no_agent_token, "h", Some("10.0.2.15")).unwrap();
        assert_eq!(
            s.agent.token_file,
            PathBuf::from("/var/lib/rancher/k3s/server/token")
        );
    }

    #[test]
    fn the_registration_names_the_bootstrap_token() {
        let y = agents_yaml("0a1b2c.0123456789abcdef");
        assert!(y.contains("name: bootstrap-token-0a1b2c\n"));
        assert!(y.contains("token-id: \"0a1b2c\"\n"));
        assert!(y.contains("token-secret: \"0123456789abcdef\"\n"));
        assert!(y.contains("usage-bootstrap-authentication: \"true\"\n"));
        assert!(
            y.contains("name: system:certificates.k8s.io:certificatesigningrequests:nodeclient\n")
        );
        assert!(y.contains("name: system:node-proxier\n"));
        let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&y)
            .map(|d| serde_yaml::Value::deserialize(d).unwrap())
            .collect();
        assert_eq!(docs.len(), 4);
    }
}
