//! The host's side of a fleet under QEMU: the deployment, its control
//! plane, its release channel, and the cluster operator.
//!
//! The deployment is made the way a person makes one (`liken mint`,
//! `liken new`), and the control plane is liken-testenv's
//! (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) on
//! that same identity, configured as k3s configures its own:
//!
//! - kube-apiserver serves a certificate from the identity's server CA
//!   for the addresses it is reached at: loopback for the host's tools,
//!   and 10.0.2.2, where QEMU's user network (slirp) takes a guest's
//!   connection to the host's loopback. The Cluster's `spec.endpoint`
//!   names 10.0.2.2, so every machine joins through it.
//! - client certificates from the identity's client CA are users,
//!   `service.key` signs and verifies ServiceAccount tokens,
//!   request-header-ca names the authenticating proxies, authorization
//!   is `Node,RBAC` with NodeRestriction, and kube-controller-manager
//!   signs kubelet client certificates with the client CA (k3s
//!   pkg/daemons/control/server.go). Bootstrap tokens are accepted: they
//!   stand in for k3s's supervisor (see the node stand-in's
//!   `credentials` module).
//! - the audit log is on, so a test counts writes where they land.
//!
//! `liken serve` shares the release channel on a loopback port, which
//! the machines reach as `http://10.0.2.2:<port>`. The cluster operator
//! runs as its own binary under its ServiceAccount's token and the RBAC
//! the release ships.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use liken_testenv::pki::{Pair, Pki};
use liken_testenv::spawn::Proc;
use liken_testenv::{ControlPlane, Options};
use rcgen::{
    CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use super::progress::step;
use crate::{deployment, run};

/// Where a guest on QEMU's user network reaches the host's loopback.
pub const SLIRP_HOST: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);

/// Where the API server and the channel listen, and how the machines
/// reach them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// On the host's loopback; the machines reach it as 10.0.2.2 through
    /// QEMU's user network. Nothing leaves the host (the tests).
    Slirp,
    /// On this address of the host, which the machines reach through
    /// QEMU's user network and the host's own tools reach directly, so
    /// the Cluster's endpoint works from the workstation too (the demo).
    Address(Ipv4Addr),
}

impl Reach {
    /// The workstation's own address (the one its default route uses),
    /// or [`Reach::Slirp`] when it has none but loopback.
    pub fn workstation() -> Reach {
        let ip = std::net::UdpSocket::bind("0.0.0.0:0")
            .and_then(|s| s.connect("192.0.2.1:9").map(|()| s))
            .and_then(|s| s.local_addr());
        match ip {
            Ok(a) => match a.ip() {
                IpAddr::V4(v4) if !v4.is_loopback() && !v4.is_unspecified() => Reach::Address(v4),
                _ => Reach::Slirp,
            },
            Err(_) => Reach::Slirp,
        }
    }

    /// Where the servers listen.
    pub fn listen(self) -> Ipv4Addr {
        match self {
            Reach::Slirp => Ipv4Addr::LOCALHOST,
            Reach::Address(a) => a,
        }
    }

    /// Where the machines reach them.
    pub fn from_guest(self) -> Ipv4Addr {
        match self {
            Reach::Slirp => SLIRP_HOST,
            Reach::Address(a) => a,
        }
    }
}

/// One machine of the fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineSpec {
    /// Its name (the Node's too).
    pub name: String,
    /// Whether it is a leader.
    pub leader: bool,
    /// rebootPolicy Manual.
    pub manual: bool,
    /// Its network card's MAC address, by which its Machine asks DHCP.
    pub mac: String,
}

impl MachineSpec {
    /// Machine `n` (from 1) named `node-<n>`, with MAC 52:54:00:00:00:<n>.
    pub fn numbered(n: u8, leader: bool, manual: bool) -> MachineSpec {
        MachineSpec {
            name: format!("node-{n}"),
            leader,
            manual,
            mac: format!("52:54:00:00:00:{n:02x}"),
        }
    }
}

/// The host's side of a fleet.
pub struct Host {
    /// The deployment directory (`liken new`'s layout with its identity).
    pub deployment: PathBuf,
    /// The control plane.
    pub cp: ControlPlane,
    /// The API endpoint as the machines reach it (`https://10.0.2.2:<port>`).
    pub endpoint: String,
    /// The API server as the host reaches it (`https://127.0.0.1:<port>`).
    pub local_server: String,
    /// The admin kubeconfig for the host's tools (`liken kubeconfig
    /// -server <local_server>`).
    pub kubeconfig: PathBuf,
    /// The channel as the machines reach it (`http://10.0.2.2:<port>`).
    pub channel_url: String,
    /// The channel directory `liken serve` shares.
    pub channel: PathBuf,
    /// The machines.
    pub machines: Vec<MachineSpec>,
    /// The deployment as it was made, with the `liken` program that made
    /// it (and runs the host's other `liken` verbs).
    made: deployment::Deployment,
    procs: Vec<Proc>,
    logs: PathBuf,
}

/// The port `liken serve` bound, read from the line it prints once its
/// socket is bound (`serving <dir> on http://<address>:<port>/`). It is
/// started on port 0, so the kernel picks a port no other process holds:
/// picking a free port first and handing it over would race.
/// `liken serve` sharing `channel` on a free port of `address`, its
/// output in `logs/liken-serve.log`: the process (stopped when dropped)
/// and the port, once it accepts connections.
pub fn serve_channel(liken: &Path, channel: &Path, address: Ipv4Addr, logs: &Path) -> (Proc, u16) {
    let mut cmd = Command::new(liken);
    cmd.arg("serve").arg(channel).arg(format!("{address}:0"));
    let serve_log = logs.join("liken-serve.log");
    let log = std::fs::File::create(&serve_log).unwrap_or_else(|e| panic!("liken-serve.log: {e}"));
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone().unwrap_or_else(|e| panic!("{e}")))
        .stderr(log);
    let serve = liken_testenv::spawn::spawn("liken serve", cmd)
        .unwrap_or_else(|e| panic!("starting liken serve: {e}"));
    let port = served_port(&serve_log);
    wait_for_port(address, port, "liken serve");
    (serve, port)
}

fn served_port(log: &Path) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let port = text
            .lines()
            .filter_map(|l| l.strip_prefix("serving "))
            .filter_map(|l| l.rsplit_once(" on http://"))
            .filter_map(|(_, url)| url.trim_end_matches('/').rsplit_once(':'))
            .find_map(|(_, port)| port.parse().ok());
        if let Some(port) = port {
            return port;
        }
        assert!(
            Instant::now() < deadline,
            "liken serve did not say where it listens within 30 s; see {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn read(identity: &Path, rel: &str) -> String {
    let p = identity.join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

/// The apiserver's serving certificate, signed by the identity's server
/// CA as k3s signs its own (pkg/daemons/control/deps/deps.go,
/// genServerCerts), for `addresses` and the in-cluster names.
pub fn serving_cert(identity: &Path, addresses: &[IpAddr]) -> Pair {
    use liken_cli::identity::keys;
    let ca_key = keys::signing_key(read(identity, "server/tls/server-ca.key").as_bytes())
        .unwrap_or_else(|e| panic!("server-ca.key: {}", e.0));
    let ca_der = keys::first_certificate(read(identity, "server/tls/server-ca.crt").as_bytes())
        .unwrap_or_else(|e| panic!("server-ca.crt: {}", e.0));
    let issuer = Issuer::from_ca_cert_der(&ca_der.into(), ca_key)
        .unwrap_or_else(|e| panic!("server-ca: {e}"));
    let key = KeyPair::generate().unwrap_or_else(|e| panic!("a serving key: {e}"));
    let mut p = CertificateParams::new(
        [
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ]
        .map(str::to_owned)
        .to_vec(),
    )
    .unwrap_or_else(|e| panic!("serving certificate: {e}"));
    for a in addresses {
        p.subject_alt_names.push(SanType::IpAddress(*a));
    }
    // The kubernetes Service's address in testenv's service range.
    p.subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
    p.distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.use_authority_key_identifier_extension = true;
    let cert = p
        .signed_by(&key, &issuer)
        .unwrap_or_else(|e| panic!("serving certificate: {e}"));
    Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// The control plane's certificates from a `liken mint` identity, as
/// k3s starts kube-apiserver and kube-controller-manager on it.
pub fn identity_pki(identity: &Path, addresses: &[IpAddr]) -> Pki {
    use liken_cli::identity::kubeconfig::{admin_credential, client_credential};
    let (ca, key) = (
        read(identity, "server/tls/client-ca.crt"),
        read(identity, "server/tls/client-ca.key"),
    );
    let now = time::OffsetDateTime::now_utc();
    let (cert, k) = admin_credential(ca.as_bytes(), key.as_bytes(), now)
        .unwrap_or_else(|e| panic!("the admin certificate: {e}"));
    let admin = Pair {
        cert_pem: cert,
        key_pem: k,
    };
    // k3s's controller-manager user, which the apiserver's bootstrap
    // RBAC binds to its ClusterRole.
    let (cert, k) = client_credential(
        ca.as_bytes(),
        key.as_bytes(),
        "system:kube-controller-manager",
        &[],
        time::Duration::days(365),
        now,
    )
    .unwrap_or_else(|e| panic!("the controller-manager certificate: {e}"));
    let service_key = read(identity, "server/tls/service.key");
    Pki {
        ca: Pair {
            cert_pem: read(identity, "server/tls/server-ca.crt"),
            key_pem: read(identity, "server/tls/server-ca.key"),
        },
        apiserver: serving_cert(identity, addresses),
        admin,
        controller_manager: Pair {
            cert_pem: cert,
            key_pem: k,
        },
        // Both flags get the file itself, as k3s passes service.key.
        sa_key_pem: service_key.clone(),
        sa_pub_pem: service_key,
        client_ca_pem: Some(ca),
        client_ca_key_pem: Some(key),
        request_header_ca_pem: Some(read(identity, "server/tls/request-header-ca.crt")),
    }
}

/// The Machine document for `m`: Manual or Auto, and DHCP on its card.
pub fn machine_yaml(m: &MachineSpec) -> String {
    format!(
        "apiVersion: liken.sh/v1alpha1\nkind: Machine\nmetadata:\n  name: {name}\nspec:\n  \
         rebootPolicy: {policy}\n  network:\n    \
         interfaces:\n      - mac: \"{mac}\"\n        dhcp: true\n",
        name = m.name,
        policy = if m.manual { "Manual" } else { "Auto" },
        mac = m.mac,
    )
}

/// What a fleet's host side is made of: [`Host::start`]'s request.
pub struct HostSpec<'a> {
    /// The test's scratch directory; the deployment and the host's logs
    /// go below it.
    pub dir: &'a Path,
    /// The `liken` program.
    pub liken: &'a Path,
    /// Where the machines reach the host.
    pub reach: Reach,
    /// The Cluster's name.
    pub cluster: &'a str,
    /// The machines, each with its Machine document.
    pub machines: &'a [MachineSpec],
    /// The channel directory `liken serve` shares.
    pub channel: &'a Path,
    /// A version in the channel and its release.yaml's digest: the
    /// Cluster's target and catalog. Without it the Cluster names no
    /// target release, which a machine whose init is a development build
    /// (no version of its own) can satisfy.
    pub release: Option<(&'a str, &'a str)>,
    /// A release.pub the deployment's trust root lists (`liken trust`),
    /// so the stick packs it and the machines write only releases it
    /// signed; without, the deployment is unsigned.
    pub trusted: Option<&'a Path>,
    /// Real kubelets (the upstream node's tests): kube-controller-manager
    /// gives each Node a pod subnet from k3s's cluster CIDR, as a real
    /// kubelet's pod network needs, and the apiserver advertises the
    /// address the machines reach it at, so the `kubernetes` Service that
    /// the real kube-proxy carries pods to leads to it from a guest.
    pub node_cidrs: bool,
}

impl Host {
    /// `liken layer` of the deployment into `out` (unsigned unless
    /// [`HostSpec::trusted`] gave it a trust root), for a disk the test
    /// prepares rather than installs from a stick.
    pub fn layer(&self, out: &Path) -> PathBuf {
        self.made.layer(out)
    }

    /// Mints an identity in `<dir>/deployment/identity`, starts the
    /// control plane on it and `liken serve` on the channel, then writes
    /// the deployment (`liken new`, then each Machine's document) whose
    /// Cluster names the endpoint as the machines reach it, with the
    /// target release and trust root `spec` asks for.
    pub fn start(spec: &HostSpec<'_>) -> Host {
        let &HostSpec {
            dir,
            liken,
            reach,
            cluster,
            machines,
            channel,
            release,
            trusted,
            node_cidrs,
        } = spec;
        let deployment = dir.join("deployment");
        let identity = deployment.join("identity");
        let logs = dir.join("host-logs");
        std::fs::create_dir_all(&logs).unwrap_or_else(|e| panic!("{}: {e}", logs.display()));
        deployment::mint(liken, &deployment);

        step(
            "starting the control plane on the minted identity (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)",
        );
        let mut addresses = vec![IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V4(SLIRP_HOST)];
        if let Reach::Address(a) = reach {
            addresses.push(IpAddr::V4(a));
        }
        let cp = liken_testenv::start_with_pki(
            Options {
                controller_manager: true,
                scheduler: true,
                audit: true,
                node_authorizer: true,
                bootstrap_tokens: true,
                node_cidrs,
                address: Some(reach.listen()),
                advertise: node_cidrs.then(|| reach.from_guest()),
                ..Options::default()
            },
            identity_pki(&identity, &addresses),
        )
        .unwrap_or_else(|e| panic!("the control plane did not start: {e}"));
        let port = cp
            .server()
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .to_owned();
        let endpoint = format!("https://{}:{port}", reach.from_guest());
        let local_server = cp.server().to_owned();
        step(&format!(
            "control plane ready in {:.1} s at {local_server}; machines reach it as {endpoint}",
            cp.startup_time().as_secs_f64()
        ));

        let (serve, serve_port) = serve_channel(liken, channel, reach.listen(), &logs);
        let channel_url = format!("http://{}:{serve_port}", reach.from_guest());

        let members: Vec<deployment::Machine> = machines
            .iter()
            .map(|m| deployment::Machine {
                name: m.name.clone(),
                leader: m.leader,
                document: Some(machine_yaml(m)),
            })
            .collect();
        let made = deployment::make(&deployment::Spec {
            liken,
            dir: &deployment,
            cluster,
            endpoint: &endpoint,
            machines: &members,
            trusted: trusted.as_slice(),
            target: release.map(|(version, digest)| deployment::Target {
                version,
                digest,
                source: &channel_url,
            }),
        });
        run(
            liken,
            &[
                "kubeconfig",
                "-server",
                &local_server,
                &deployment.to_string_lossy(),
            ],
        );
        Host {
            kubeconfig: identity.join("kubeconfig"),
            deployment,
            cp,
            endpoint,
            local_server,
            channel_url,
            channel: channel.to_owned(),
            machines: machines.to_vec(),
            made,
            procs: vec![serve],
            logs,
        }
    }

    /// `kubectl` with the deployment's admin kubeconfig.
    pub fn kubectl(&self) -> Command {
        let mut c = Command::new("kubectl");
        c.env("KUBECONFIG", &self.kubeconfig);
        c
    }

    /// A liken-kube client as the deployment's admin.
    pub fn admin_client(&self) -> liken_kube::Client {
        let config = liken_kube::Config::from_kubeconfig(&self.kubeconfig, None)
            .unwrap_or_else(|e| panic!("{}: {e}", self.kubeconfig.display()));
        liken_kube::Client::new(&config)
            .unwrap_or_else(|e| panic!("a client for {}: {e}", self.local_server))
            .identify("qemu-tests", env!("CARGO_PKG_VERSION"))
    }

    /// Runs `liken <verb> -server <local> <deployment> <rest...>`, as a
    /// person on this workstation would (the Cluster's endpoint is the
    /// machines' view), and returns its output; fails the test on error.
    pub fn liken_on_cluster(&self, verb: &str, rest: &[&str]) -> String {
        let d = self.deployment.to_string_lossy().into_owned();
        let mut args = vec![verb, "-server", &self.local_server, &d];
        args.extend_from_slice(rest);
        run(&self.made.liken, &args)
    }

    /// Starts the cluster operator: `binary` (the one the release ships
    /// in its image) as its own process on the host, under the
    /// ServiceAccount and RBAC the release's manifests made (the
    /// leader's k3s applies them; this waits for the ServiceAccount to
    /// appear), with a TokenRequest token in a kubeconfig of its own,
    /// metrics on a loopback port, its log in the host's logs, and
    /// `flags` after the harness's own.
    pub fn start_cluster_operator(&mut self, binary: &Path, within: Duration, flags: &[String]) {
        step("waiting for the release's manifests to make the cluster operator's ServiceAccount");
        let deadline = Instant::now() + within;
        loop {
            let made = self
                .kubectl()
                .args([
                    "get",
                    "serviceaccount",
                    "-n",
                    "liken-system",
                    "liken-cluster-operator",
                ])
                .output()
                .is_ok_and(|o| o.status.success());
            if made {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no ServiceAccount liken-system/liken-cluster-operator within {} s: did the \
                 leader apply the release's manifests?",
                within.as_secs()
            );
            std::thread::sleep(Duration::from_secs(2));
        }
        self.refresh_operator_token();
        // The token from a file, which liken-kube reads again every
        // minute, as a pod's projected token is: refresh_operator_token
        // renews it.
        let kubeconfig = self.logs.join("cluster-operator.kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: operator\n\
             clusters:\n- name: e2e\n  cluster:\n    server: {}\n    certificate-authority: {}\n\
             users:\n- name: operator\n  user:\n    tokenFile: {}\n\
             contexts:\n- name: operator\n  context:\n    cluster: e2e\n    user: operator\n",
            self.local_server,
            self.deployment
                .join("identity/server/tls/server-ca.crt")
                .display(),
            self.operator_token().display()
        );
        std::fs::write(&kubeconfig, text)
            .unwrap_or_else(|e| panic!("{}: {e}", kubeconfig.display()));
        let log = self.logs.join("liken-cluster-operator.log");
        let file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let mut cmd = Command::new(binary);
        cmd.arg("--kubeconfig")
            .arg(&kubeconfig)
            // Port 0: the kernel picks one nobody holds (the operator logs
            // where it serves).
            .arg("--metrics-address=127.0.0.1:0")
            .arg("--identity=host")
            // The deployment's Cluster, as the Deployment mounts it from
            // the ConfigMap the leader's init seeds: the operator acts on
            // its name only and creates the Cluster from it.
            .arg(format!(
                "--cluster-file={}",
                self.deployment.join("cluster.yaml").display()
            ));
        // The deployment's trust root, as the Deployment mounts it from
        // the same ConfigMap: the channel is verified against it.
        let trust = self.deployment.join("trust.yaml");
        if trust.exists() {
            cmd.arg(format!("--trust-file={}", trust.display()));
        }
        cmd.args(flags)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap_or_else(|e| panic!("{e}")))
            .stderr(file);
        let proc = liken_testenv::spawn::spawn("liken-cluster-operator", cmd)
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        step(&format!(
            "cluster operator started on the host as liken-system/liken-cluster-operator (log {})",
            log.display()
        ));
        self.procs.push(proc);
    }

    fn operator_token(&self) -> PathBuf {
        self.logs.join("cluster-operator.token")
    }

    /// Writes a fresh TokenRequest token (a day) for the cluster
    /// operator's ServiceAccount where its kubeconfig reads it.
    pub fn refresh_operator_token(&self) {
        let token = self
            .cp
            .token_for("liken-system", "liken-cluster-operator")
            .unwrap_or_else(|e| panic!("the cluster operator's token: {e}"));
        let path = self.operator_token();
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, token)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    /// Where the host's processes log.
    pub fn logs(&self) -> &Path {
        &self.logs
    }

    /// Keeps `proc` running as long as the host.
    pub fn adopt(&mut self, proc: Proc) {
        self.procs.push(proc);
    }
}

/// Waits up to 30 s for something to listen on `address:port`.
fn wait_for_port(address: Ipv4Addr, port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect((address, port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {address}:{port} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
