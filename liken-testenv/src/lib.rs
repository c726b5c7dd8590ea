//! A real Kubernetes control plane for integration tests.
//!
//! [`start`] runs etcd and kube-apiserver (and kube-controller-manager
//! when asked) from the binaries `testenv/build.sh` builds, on free
//! loopback ports, in a private temporary directory, with certificates
//! minted for the run. RBAC is on, a service-account key signs
//! TokenRequest tokens, and liken's CRDs from `images/manifests/crds/`
//! are applied and Established before the control plane is handed out.
//! Tests get an admin kubeconfig ([`ControlPlane::kubeconfig`]) and a
//! token for any ServiceAccount ([`ControlPlane::token_for`]).
//!
//! Startup takes seconds, so a test binary normally shares one control
//! plane through [`shared`]. Processes cannot outlive the test binary
//! (see [`spawn`]).
//!
//! Finding the binaries: `LIKEN_TESTENV_BIN`, else the last line
//! `testenv/build.sh` prints (it builds once, then reuses its cache).
//! When neither works the test fails with a message saying to run
//! `testenv/build.sh`; nothing is skipped. The same directory holds the
//! kubectl of the control plane's release ([`kubectl_bin`]), which every
//! test runs instead of whatever kubectl the machine has on PATH.
//!
//! Options add kube-controller-manager, kube-scheduler, kwok (fake nodes
//! that turn Ready and pods that turn Running, so drains evict real pod
//! objects under real PodDisruptionBudgets) and the apiserver's audit
//! log (so tests count writes at the apiserver, by user).
//!
//! Tests that need no control plane use [`scratch`] alone: scratch
//! directories and the host's tools that check the files they write.

pub mod audit;
pub mod exposition;
pub mod nginx;
pub mod pki;
pub mod scratch;
pub mod spawn;

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

use crate::pki::Pki;
use crate::spawn::Proc;

/// What to start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Also run kube-controller-manager (ServiceAccount tokens for pods,
    /// garbage collection, namespace deletion).
    pub controller_manager: bool,
    /// Turn off the apiserver's watch cache, so every watch is served by
    /// etcd itself and an etcd compaction reaches watchers as 410 Gone.
    pub no_watch_cache: bool,
    /// Also run kube-scheduler, so pods (DaemonSet pods included) are
    /// bound to nodes. It (and kwok) run as ServiceAccounts of their own
    /// in kube-system, bound to cluster-admin, so the audit log tells
    /// their writes from a test's.
    pub scheduler: bool,
    /// Also run kwok, which keeps the Nodes made by
    /// [`ControlPlane::create_node`] Ready (renewing their leases) and
    /// runs the pods bound to them: they turn Running and Ready, so the
    /// disruption controller counts them for PodDisruptionBudgets and an
    /// eviction has something real to refuse. Implies `scheduler`.
    pub kwok: bool,
    /// Write the apiserver's audit log (every request at the Metadata
    /// level, as JSON lines), so a test counts the writes a program made
    /// where they land ([`ControlPlane::audit_since`]) rather than
    /// trusting the program's own counters.
    pub audit: bool,
    /// Authorize as k3s does, `--authorization-mode=Node,RBAC` with the
    /// NodeRestriction admission plugin (k3s
    /// pkg/daemons/control/server.go, apiServer), so a kubelet's
    /// credential (`system:node:<name>` in `system:nodes`) may register
    /// its own Node, report its pods, and ask for ServiceAccount tokens
    /// bound to its own pods, and nothing else.
    pub node_authorizer: bool,
    /// Accept bootstrap tokens (`--enable-bootstrap-token-auth`): a
    /// `bootstrap.kubernetes.io/token` Secret in kube-system names a
    /// `system:bootstrap:<id>` user in `system:bootstrappers`, which a
    /// node uses to ask for its first client certificate through a
    /// CertificateSigningRequest (kubeadm's TLS bootstrap).
    pub bootstrap_tokens: bool,
    /// The address kube-apiserver listens on and advertises (127.0.0.1
    /// when `None`): a workstation's own address lets machines under
    /// QEMU's user network and the workstation's tools reach it by one
    /// URL. The serving certificate (from [`start_with_pki`]) must name
    /// it.
    pub address: Option<std::net::Ipv4Addr>,
    /// The apiserver's `--admission-control-config-file`: a file liken
    /// writes for it (init's Pod Security configuration), read by the
    /// real apiserver.
    pub admission_config: Option<PathBuf>,
    /// Have kube-controller-manager give each Node a pod subnet from
    /// k3s's default cluster CIDR, 10.42.0.0/16, as k3s configures it
    /// (`--allocate-node-cidrs`, `--cluster-cidr`; k3s
    /// pkg/daemons/control/server.go, controllerManager), so a real
    /// kubelet's node gets the `spec.podCIDR` its pod network is made
    /// from. Needs `controller_manager`.
    pub node_cidrs: bool,
    /// The address the apiserver advertises (`--advertise-address`: the
    /// endpoint of the `kubernetes` Service, which kube-proxy carries a
    /// pod's `KUBERNETES_SERVICE_HOST` to), when it is not the address
    /// it listens on: a guest on QEMU's user network reaches the host's
    /// loopback as 10.0.2.2, so a pod there that talks to the API
    /// through the Service (the machine operator) needs 10.0.2.2 in the
    /// Service, not the host's 127.0.0.1. k3s advertises the server's
    /// own node address, which its agents reach (pkg/daemons/control).
    pub advertise: Option<std::net::Ipv4Addr>,
}

/// A running control plane. Dropping it kills the processes and removes
/// its directory.
pub struct ControlPlane {
    dir: PathBuf,
    server: String,
    etcd_url: String,
    kubeconfig: PathBuf,
    pki: Pki,
    agent: ureq::Agent,
    startup: Duration,
    procs: Mutex<Vec<Proc>>,
}

/// Why the control plane could not start or a helper failed.
#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

fn fail<T>(msg: impl Into<String>) -> Result<T, Error> {
    Err(Error(msg.into()))
}

/// The workspace root (the directory holding testenv/ and images/).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate sits in the workspace")
        .to_owned()
}

/// The directory holding etcd and kube-apiserver.
pub fn bin_dir() -> Result<PathBuf, Error> {
    const HOW: &str = "run `testenv/build.sh` (it builds etcd and kube-apiserver from the Go module \
                       proxy into ~/.cache/liken/testenv) or set LIKEN_TESTENV_BIN to its bin directory";
    let dir = match std::env::var_os("LIKEN_TESTENV_BIN") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => {
            let script = workspace_root().join("testenv/build.sh");
            let out = Command::new("bash")
                .arg(&script)
                .stdin(Stdio::null())
                .stderr(Stdio::inherit())
                .output()
                .map_err(|e| Error(format!("running {}: {e}; {HOW}", script.display())))?;
            if !out.status.success() {
                return fail(format!(
                    "{} failed ({}); {HOW}",
                    script.display(),
                    out.status
                ));
            }
            let text = String::from_utf8_lossy(&out.stdout);
            match text.lines().rev().find(|l| !l.trim().is_empty()) {
                Some(l) => PathBuf::from(l.trim()),
                None => {
                    return fail(format!(
                        "{} printed no bin directory; {HOW}",
                        script.display()
                    ));
                }
            }
        }
    };
    for b in ["etcd", "kube-apiserver"] {
        if !dir.join(b).is_file() {
            return fail(format!("{} has no {b}; {HOW}", dir.display()));
        }
    }
    Ok(dir)
}

/// The annotation that hands a Node to kwok (its
/// `--manage-nodes-with-annotation-selector`).
pub const KWOK_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// One of testenv's binaries by name (`kubectl`, `client-go-list`, ...),
/// or an error saying how to build it.
pub fn testenv_bin(name: &str) -> Result<PathBuf, Error> {
    let path = bin_dir()?.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        fail(format!(
            "{} is missing; run `testenv/build.sh` (it builds {name} with the control plane), \
             or point LIKEN_TESTENV_BIN at a directory that has it",
            path.display()
        ))
    }
}

/// The kubectl testenv builds from the same Kubernetes release as the
/// apiserver. Panics with how to build it: a test that needs kubectl
/// fails rather than skips or runs another one.
pub fn kubectl_bin() -> PathBuf {
    static KUBECTL: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match KUBECTL.get_or_init(|| testenv_bin("kubectl").map_err(|e| e.0)) {
        Ok(p) => p.clone(),
        Err(e) => panic!("liken-testenv: no kubectl: {e}"),
    }
}

fn free_port() -> Result<u16, Error> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| Error(format!("no free port: {e}")))?;
    Ok(l.local_addr().map_err(|e| Error(e.to_string()))?.port())
}

/// The policy: everything at Metadata, one event per request once it is
/// complete (the RequestReceived and ResponseStarted stages would count
/// each request twice or three times).
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
";

/// Adds the audit flags to kube-apiserver's command line and writes the
/// policy into the control plane's directory. Here rather than in
/// [`audit`], which reads the log back through [`ControlPlane`]: so the
/// two files import in one direction.
fn configure_audit(cmd: &mut Command, dir: &Path) -> Result<(), Error> {
    let policy = dir.join("audit-policy.yaml");
    if !policy.exists() {
        write_private(&policy, AUDIT_POLICY.as_bytes())?;
    }
    cmd.arg(format!("--audit-policy-file={}", policy.display()))
        .arg(format!(
            "--audit-log-path={}",
            audit_log_path(dir).display()
        ))
        .arg("--audit-log-format=json")
        .arg("--audit-log-mode=blocking")
        // The log is read whole by tests; rotation would hide events.
        .arg("--audit-log-maxsize=0");
    Ok(())
}

/// Where kube-apiserver writes the audit log ([`audit`] reads it).
pub(crate) fn audit_log_path(dir: &Path) -> PathBuf {
    dir.join("audit.log")
}

fn write_private(path: &Path, contents: &[u8]) -> Result<(), Error> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error(format!("writing {}: {e}", path.display())))?;
    f.write_all(contents)
        .and_then(|_| f.sync_all())
        .map_err(|e| Error(format!("writing {}: {e}", path.display())))
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn kubeconfig_text(server: &str, ca: &str, user: &pki::Pair) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: testenv\n\
         clusters:\n- name: testenv\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\n\
         users:\n- name: testenv\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n\
         contexts:\n- name: testenv\n  context:\n    cluster: testenv\n    user: testenv\n",
        b64(ca),
        b64(&user.cert_pem),
        b64(&user.key_pem)
    )
}

/// The last lines of a log, for an error message.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Removes directories of earlier runs whose process is gone (a shared
/// control plane is never dropped, so its directory is swept here).
fn sweep(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name.split('-').next().and_then(|p| p.parse::<i32>().ok());
        let alive = pid
            .and_then(rustix::process::Pid::from_raw)
            .is_some_and(|p| rustix::process::test_kill_process(p).is_ok());
        if !alive {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn new_dir() -> Result<PathBuf, Error> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let root = std::env::temp_dir().join("liken-testenv");
    std::fs::create_dir_all(&root).map_err(|e| Error(format!("{}: {e}", root.display())))?;
    sweep(&root);
    let dir = root.join(format!(
        "{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir(&dir).map_err(|e| Error(format!("{}: {e}", dir.display())))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| Error(format!("{}: {e}", dir.display())))?;
    Ok(dir)
}

/// Points a command's stdout and stderr at one log file.
fn log_to(cmd: &mut Command, dir: &Path, name: &str) -> Result<(), Error> {
    let f = std::fs::File::create(dir.join(name)).map_err(|e| Error(format!("{name}: {e}")))?;
    let g = f.try_clone().map_err(|e| Error(format!("{name}: {e}")))?;
    cmd.stdin(Stdio::null()).stdout(f).stderr(g);
    Ok(())
}

/// Starts a control plane.
pub fn start(options: Options) -> Result<ControlPlane, Error> {
    start_with_pki(options, Pki::mint().map_err(Error)?)
}

/// Starts a control plane with certificates the caller made (liken-cli's
/// interop test runs one on a `liken mint` identity). `pki.ca` must have
/// signed `pki.apiserver` (for 127.0.0.1); `pki.admin` and
/// `pki.controller_manager` must be signed by `pki.client_ca_pem`, or by
/// `pki.ca` when that is `None`. With `pki.request_header_ca_pem`, a
/// client certificate it signed for `system:auth-proxy` may name the user
/// in `X-Remote-User` (and groups in `X-Remote-Group`), as k3s configures
/// kube-apiserver (pkg/daemons/control/server.go, apiServer).
pub fn start_with_pki(options: Options, pki: Pki) -> Result<ControlPlane, Error> {
    let began = Instant::now();
    let bin = bin_dir()?;
    let dir = new_dir()?;
    let client_ca = pki
        .client_ca_pem
        .clone()
        .unwrap_or_else(|| pki.ca.cert_pem.clone());
    let files = [
        ("client-ca.crt", client_ca.as_str()),
        ("ca.crt", pki.ca.cert_pem.as_str()),
        ("ca.key", pki.ca.key_pem.as_str()),
        ("apiserver.crt", pki.apiserver.cert_pem.as_str()),
        ("apiserver.key", pki.apiserver.key_pem.as_str()),
        ("sa.key", pki.sa_key_pem.as_str()),
        ("sa.pub", pki.sa_pub_pem.as_str()),
    ];
    for (name, text) in files {
        write_private(&dir.join(name), text.as_bytes())?;
    }
    if let Some(ca) = &pki.request_header_ca_pem {
        write_private(&dir.join("request-header-ca.crt"), ca.as_bytes())?;
    }
    if let Some(key) = &pki.client_ca_key_pem {
        write_private(&dir.join("client-ca.key"), key.as_bytes())?;
    }
    let agent = admin_agent(&pki)?;
    let mut cp = ControlPlane {
        dir: dir.clone(),
        server: String::new(),
        etcd_url: String::new(),
        kubeconfig: dir.join("admin.kubeconfig"),
        pki,
        agent,
        startup: Duration::ZERO,
        procs: Mutex::new(Vec::new()),
    };

    // etcd, retried on a port race with another process.
    let mut last = String::new();
    for _ in 0..3 {
        let (client, peer) = (free_port()?, free_port()?);
        let url = format!("http://127.0.0.1:{client}");
        let data = dir.join(format!("etcd-{client}"));
        let mut cmd = Command::new(bin.join("etcd"));
        cmd.arg("--name=testenv")
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-client-urls={url}"))
            .arg(format!("--advertise-client-urls={url}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!("--initial-cluster=testenv=http://127.0.0.1:{peer}"))
            // Test data: durability buys nothing and costs seconds.
            .arg("--unsafe-no-fsync")
            .arg("--log-level=warn");
        log_to(&mut cmd, &dir, "etcd.log")?;
        let proc = spawn::spawn("etcd", cmd).map_err(|e| Error(format!("starting etcd: {e}")))?;
        cp.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(proc);
        match cp.wait_http(&format!("{url}/health"), "etcd", Duration::from_secs(30)) {
            Ok(()) => {
                cp.etcd_url = url;
                break;
            }
            Err(e) => {
                last = format!("{e}\netcd.log:\n{}", tail(&dir.join("etcd.log")));
                cp.kill_last();
            }
        }
    }
    if cp.etcd_url.is_empty() {
        return fail(format!("etcd did not start: {last}"));
    }

    for _ in 0..3 {
        let port = free_port()?;
        let address = options
            .address
            .unwrap_or(std::net::Ipv4Addr::LOCALHOST)
            .to_string();
        let server = format!("https://{address}:{port}");
        let d = |f: &str| dir.join(f).display().to_string();
        let mut cmd = Command::new(bin.join("kube-apiserver"));
        cmd.arg(format!("--etcd-servers={}", cp.etcd_url))
            .arg(format!("--bind-address={address}"))
            .arg(format!(
                "--advertise-address={}",
                options
                    .advertise
                    .map_or_else(|| address.clone(), |a| a.to_string())
            ))
            .arg(format!("--secure-port={port}"))
            .arg(format!("--tls-cert-file={}", d("apiserver.crt")))
            .arg(format!("--tls-private-key-file={}", d("apiserver.key")))
            .arg(format!("--client-ca-file={}", d("client-ca.crt")))
            .arg(if options.node_authorizer {
                "--authorization-mode=Node,RBAC"
            } else {
                "--authorization-mode=RBAC"
            })
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg(format!("--service-account-key-file={}", d("sa.pub")))
            .arg(format!(
                "--service-account-signing-key-file={}",
                d("sa.key")
            ))
            .arg("--service-cluster-ip-range=10.0.0.0/24")
            .arg(format!("--cert-dir={}", d("apiserver-certs")));
        log_to(&mut cmd, &dir, "apiserver.log")?;
        if options.no_watch_cache {
            cmd.arg("--watch-cache=false");
        }
        if let Some(config) = &options.admission_config {
            cmd.arg(format!(
                "--admission-control-config-file={}",
                config.display()
            ));
        }
        if options.node_authorizer {
            cmd.arg("--enable-admission-plugins=NodeRestriction");
        }
        if options.bootstrap_tokens {
            cmd.arg("--enable-bootstrap-token-auth");
        }
        if cp.pki.request_header_ca_pem.is_some() {
            // k3s's values (pkg/daemons/control/server.go, apiServer;
            // the proxy's name is deps.RequestHeaderCN).
            cmd.arg(format!(
                "--requestheader-client-ca-file={}",
                d("request-header-ca.crt")
            ))
            .arg("--requestheader-allowed-names=system:auth-proxy")
            .arg("--requestheader-username-headers=X-Remote-User")
            .arg("--requestheader-group-headers=X-Remote-Group")
            .arg("--requestheader-extra-headers-prefix=X-Remote-Extra-");
        }
        if options.audit {
            configure_audit(&mut cmd, &dir)?;
        }
        let proc = spawn::spawn("kube-apiserver", cmd)
            .map_err(|e| Error(format!("starting kube-apiserver: {e}")))?;
        cp.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(proc);
        cp.server = server.clone();
        match cp.wait_http(
            &format!("{server}/readyz"),
            "kube-apiserver",
            Duration::from_secs(180),
        ) {
            Ok(()) => break,
            Err(e) => {
                let log = tail(&dir.join("apiserver.log"));
                let race = log.contains("address already in use");
                cp.kill_last();
                cp.server.clear();
                if !race {
                    return fail(format!("{e}\napiserver.log:\n{log}"));
                }
                last = log;
            }
        }
    }
    if cp.server.is_empty() {
        return fail(format!("kube-apiserver did not start: {last}"));
    }
    write_private(
        &cp.kubeconfig,
        kubeconfig_text(&cp.server, &cp.pki.ca.cert_pem, &cp.pki.admin).as_bytes(),
    )?;
    cp.apply_crds()?;
    if options.controller_manager {
        cp.start_controller_manager(&bin, options.node_cidrs)?;
    }
    if options.scheduler || options.kwok {
        cp.start_scheduler(&bin)?;
    }
    if options.kwok {
        cp.start_kwok(&bin)?;
    }
    cp.startup = began.elapsed();
    Ok(cp)
}

/// One control plane per test binary, started on first use. Panics with
/// the reason (and how to fix it) if it cannot start: a test that needs
/// the apiserver must fail, never skip.
pub fn shared() -> &'static ControlPlane {
    static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
    let cp = SHARED.get_or_init(|| {
        let cp = start(Options::default()).map_err(|e| e.0)?;
        eprintln!(
            "liken-testenv: control plane at {} ready in {:.1}s",
            cp.server,
            cp.startup.as_secs_f64()
        );
        Ok(cp)
    });
    match cp {
        Ok(cp) => cp,
        Err(e) => panic!("liken-testenv: the test control plane is not available: {e}"),
    }
}

fn admin_agent(pki: &Pki) -> Result<ureq::Agent, Error> {
    use ureq::tls::{Certificate, ClientCert, PrivateKey, RootCerts, TlsConfig};
    let ca = Certificate::from_pem(pki.ca.cert_pem.as_bytes()).map_err(|e| Error(e.to_string()))?;
    let cert =
        Certificate::from_pem(pki.admin.cert_pem.as_bytes()).map_err(|e| Error(e.to_string()))?;
    let key =
        PrivateKey::from_pem(pki.admin.key_pem.as_bytes()).map_err(|e| Error(e.to_string()))?;
    let tls = TlsConfig::builder()
        .root_certs(RootCerts::new_with_certs(&[ca]))
        .client_cert(Some(ClientCert::new_with_certs(&[cert], key)))
        .build();
    Ok(ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into())
}

impl ControlPlane {
    /// `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The admin kubeconfig (O=system:masters), mode 0600.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// etcd's client URL (`http://127.0.0.1:<port>`).
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.pki.ca.cert_pem
    }

    /// How long [`start`] took.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    /// The control plane's private directory (logs, certificates).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A command running testenv's kubectl ([`kubectl_bin`]) with the
    /// admin kubeconfig.
    pub fn kubectl(&self) -> Command {
        self.kubectl_as(&self.kubeconfig)
    }

    /// A `kubectl` command with another kubeconfig (one from
    /// [`ControlPlane::kubeconfig_for`], say).
    pub fn kubectl_as(&self, kubeconfig: &Path) -> Command {
        let mut c = Command::new(kubectl_bin());
        c.arg(format!("--kubeconfig={}", kubeconfig.display()));
        c
    }

    /// `kubectl apply -f -` of `yaml` as admin; fails the test with
    /// kubectl's output when it does not succeed.
    pub fn apply(&self, yaml: &str) {
        let mut child = self
            .kubectl()
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running kubectl apply: {e}"));
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(yaml.as_bytes())
                .unwrap_or_else(|e| panic!("writing to kubectl apply: {e}"));
        }
        let out = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("waiting for kubectl apply: {e}"));
        assert!(
            out.status.success(),
            "kubectl apply failed: {}{}\n--- applied ---\n{yaml}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The pids of the running processes (etcd, kube-apiserver, ...).
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|p| (p.name.clone(), p.pid()))
            .collect()
    }

    fn kill_last(&self) {
        if let Some(mut p) = self.procs.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            p.kill();
        }
    }

    fn wait_http(&self, url: &str, what: &str, within: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < deadline {
            {
                let mut procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(p) = procs.last_mut()
                    && let Ok(Some(status)) = p.try_wait()
                {
                    return fail(format!("{what} exited ({status}) before it was ready"));
                }
            }
            match self.agent.get(url).call() {
                Ok(r) if r.status() == 200 => return Ok(()),
                Ok(mut r) => {
                    last = format!(
                        "HTTP {}: {}",
                        r.status(),
                        r.body_mut().read_to_string().unwrap_or_default()
                    )
                }
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        fail(format!(
            "{what} was not ready at {url} within {}s: {last}",
            within.as_secs()
        ))
    }

    /// Sends a JSON request as admin; returns the status code and body.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), Error> {
        let url = format!("{}{path}", self.server);
        let req = ureq::http::Request::builder()
            .method(method)
            .uri(&url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json");
        let resp = match body {
            Some(b) => self
                .agent
                .run(req.body(b.to_string()).map_err(|e| Error(e.to_string()))?),
            None => self
                .agent
                .run(req.body(()).map_err(|e| Error(e.to_string()))?),
        }
        .map_err(|e| Error(format!("{method} {path}: {e}")))?;
        let code = resp.status().as_u16();
        let text = resp
            .into_body()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .map_err(|e| Error(format!("{method} {path}: {e}")))?;
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((code, v))
    }

    fn must(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        ok: &[u16],
    ) -> Result<Value, Error> {
        let (code, v) = self.request(method, path, body)?;
        if (200..300).contains(&code) || ok.contains(&code) {
            Ok(v)
        } else {
            fail(format!("{method} {path}: HTTP {code}: {v}"))
        }
    }

    fn apply_crds(&self) -> Result<(), Error> {
        let dir = workspace_root().join("images/manifests/crds");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| Error(format!("{}: {e}", dir.display())))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        if files.is_empty() {
            return fail(format!("no CRDs in {}", dir.display()));
        }
        let base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        let mut names = Vec::new();
        for f in &files {
            let text =
                std::fs::read_to_string(f).map_err(|e| Error(format!("{}: {e}", f.display())))?;
            let crd: Value = serde_yaml::from_str(&text)
                .map_err(|e| Error(format!("{}: not YAML: {e}", f.display())))?;
            let name = crd["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            self.must("POST", base, Some(&crd), &[])
                .map_err(|e| Error(format!("applying {}: {e}", f.display())))?;
            names.push((name, crd));
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        for (name, crd) in names {
            loop {
                let v = self.must("GET", &format!("{base}/{name}"), None, &[])?;
                let established = v["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Established" && c["status"] == "True")
                });
                // Established is set before the handler serves; wait for a
                // LIST to answer too.
                let served = established && {
                    let group = crd["spec"]["group"].as_str().unwrap_or_default();
                    let version = crd["spec"]["versions"][0]["name"]
                        .as_str()
                        .unwrap_or_default();
                    let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default();
                    let (code, _) =
                        self.request("GET", &format!("/apis/{group}/{version}/{plural}"), None)?;
                    code == 200
                };
                if served {
                    break;
                }
                if Instant::now() > deadline {
                    return fail(format!("CRD {name} was not Established within 60s: {v}"));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    fn start_controller_manager(&self, bin: &Path, node_cidrs: bool) -> Result<(), Error> {
        if !bin.join("kube-controller-manager").is_file() {
            return fail(format!(
                "{} has no kube-controller-manager; run `testenv/build.sh`",
                bin.display()
            ));
        }
        let kc = self.dir.join("kcm.kubeconfig");
        write_private(
            &kc,
            kubeconfig_text(
                &self.server,
                &self.pki.ca.cert_pem,
                &self.pki.controller_manager,
            )
            .as_bytes(),
        )?;
        let port = free_port()?;
        let d = |f: &str| self.dir.join(f).display().to_string();
        let mut cmd = Command::new(bin.join("kube-controller-manager"));
        cmd.arg(format!("--kubeconfig={}", kc.display()))
            .arg(format!("--authentication-kubeconfig={}", kc.display()))
            .arg(format!("--authorization-kubeconfig={}", kc.display()))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(format!("--cert-dir={}", d("kcm-certs")))
            .arg("--leader-elect=false")
            .arg("--use-service-account-credentials=true")
            .arg(format!(
                "--service-account-private-key-file={}",
                d("sa.key")
            ))
            .arg(format!("--root-ca-file={}", d("ca.crt")));
        if self.pki.client_ca_key_pem.is_some() {
            // k3s's signers (pkg/daemons/control/server.go,
            // controllerManager): client certificates, a kubelet's
            // included, from the client CA; serving ones from the server
            // CA.
            for signer in ["kube-apiserver-client", "kubelet-client"] {
                cmd.arg(format!(
                    "--cluster-signing-{signer}-cert-file={}",
                    d("client-ca.crt")
                ))
                .arg(format!(
                    "--cluster-signing-{signer}-key-file={}",
                    d("client-ca.key")
                ));
            }
            for signer in ["kubelet-serving", "legacy-unknown"] {
                cmd.arg(format!(
                    "--cluster-signing-{signer}-cert-file={}",
                    d("ca.crt")
                ))
                .arg(format!(
                    "--cluster-signing-{signer}-key-file={}",
                    d("ca.key")
                ));
            }
        } else {
            cmd.arg(format!("--cluster-signing-cert-file={}", d("ca.crt")))
                .arg(format!("--cluster-signing-key-file={}", d("ca.key")));
        }
        cmd.arg("--service-cluster-ip-range=10.0.0.0/24");
        if node_cidrs {
            cmd.arg("--allocate-node-cidrs=true")
                .arg("--cluster-cidr=10.42.0.0/16");
        }
        log_to(&mut cmd, &self.dir, "kcm.log")?;
        let proc = spawn::spawn("kube-controller-manager", cmd)
            .map_err(|e| Error(format!("starting kube-controller-manager: {e}")))?;
        self.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(proc);
        // The serviceaccount controller makes `default` in every
        // namespace: its arrival shows the controller-manager works.
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let (code, _) = self.request(
                "GET",
                "/api/v1/namespaces/default/serviceaccounts/default",
                None,
            )?;
            if code == 200 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return fail(format!(
                    "kube-controller-manager made no default ServiceAccount within 90s\nkcm.log:\n{}",
                    tail(&self.dir.join("kcm.log"))
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn start_scheduler(&self, bin: &Path) -> Result<(), Error> {
        if !bin.join("kube-scheduler").is_file() {
            return fail(format!(
                "{} has no kube-scheduler; run `testenv/build.sh`",
                bin.display()
            ));
        }
        let port = free_port()?;
        let kc = self.scaffold_kubeconfig("testenv-scheduler")?;
        let kc = kc.display().to_string();
        let mut cmd = Command::new(bin.join("kube-scheduler"));
        cmd.arg(format!("--kubeconfig={kc}"))
            .arg(format!("--authentication-kubeconfig={kc}"))
            .arg(format!("--authorization-kubeconfig={kc}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg(format!(
                "--cert-dir={}",
                self.dir.join("scheduler-certs").display()
            ))
            .arg("--leader-elect=false");
        log_to(&mut cmd, &self.dir, "scheduler.log")?;
        let proc = spawn::spawn("kube-scheduler", cmd)
            .map_err(|e| Error(format!("starting kube-scheduler: {e}")))?;
        self.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(proc);
        // /healthz is open to anonymous requests on its own self-signed
        // certificate, which is not worth trusting for a liveness probe.
        self.wait_local_health(
            &format!("https://127.0.0.1:{port}/healthz"),
            "kube-scheduler",
            "scheduler.log",
        )
    }

    fn start_kwok(&self, bin: &Path) -> Result<(), Error> {
        if !bin.join("kwok").is_file() {
            return fail(format!(
                "{} has no kwok; run `testenv/build.sh`",
                bin.display()
            ));
        }
        let stages = workspace_root().join("testenv/kwok/stages.yaml");
        let port = free_port()?;
        let kc = self.scaffold_kubeconfig("testenv-kwok")?;
        let mut cmd = Command::new(bin.join("kwok"));
        cmd.arg(format!("--kubeconfig={}", kc.display()))
            .arg(format!("--config={}", stages.display()))
            .arg(format!("--server-address=127.0.0.1:{port}"))
            // Only Nodes that ask for it (create_node) are kwok's, so a
            // test that registers a Node of its own keeps it to itself.
            .arg("--manage-all-nodes=false")
            .arg(format!(
                "--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake"
            ))
            .arg("--node-lease-duration-seconds=40")
            .arg("--cidr=10.244.0.0/16")
            .arg("--node-ip=10.244.0.1");
        log_to(&mut cmd, &self.dir, "kwok.log")?;
        let proc = spawn::spawn("kwok", cmd).map_err(|e| Error(format!("starting kwok: {e}")))?;
        self.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(proc);
        self.wait_local_health(
            &format!("http://127.0.0.1:{port}/healthz"),
            "kwok",
            "kwok.log",
        )
    }

    /// A kubeconfig for a piece of scaffolding (the scheduler, kwok): a
    /// ServiceAccount in kube-system bound to cluster-admin. The
    /// scaffolding is not under test, so it may do anything; it has an
    /// identity of its own so the audit log never mixes its writes (pod
    /// bindings and statuses) with a test's admin requests.
    fn scaffold_kubeconfig(&self, name: &str) -> Result<PathBuf, Error> {
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": name, "namespace": "kube-system"}});
        self.must(
            "POST",
            "/api/v1/namespaces/kube-system/serviceaccounts",
            Some(&sa),
            &[409],
        )?;
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}]});
        self.must(
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            Some(&binding),
            &[409],
        )?;
        // A day: longer than any test binary keeps a control plane.
        let req = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                         "spec": {"expirationSeconds": 86_400}});
        let v = self.must(
            "POST",
            &format!("/api/v1/namespaces/kube-system/serviceaccounts/{name}/token"),
            Some(&req),
            &[],
        )?;
        let token = v["status"]["token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| Error(format!("TokenRequest for {name} returned no token")))?;
        self.kubeconfig_for_token(name, token)
    }

    /// Polls a helper process's own health endpoint (TLS unverified: the
    /// endpoint is on loopback and only says the process is up).
    fn wait_local_health(&self, url: &str, what: &str, log: &str) -> Result<(), Error> {
        use ureq::tls::TlsConfig;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .tls_config(TlsConfig::builder().disable_verification(true).build())
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .into();
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            {
                let mut procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(p) = procs.last_mut()
                    && let Ok(Some(status)) = p.try_wait()
                {
                    return fail(format!(
                        "{what} exited ({status})\n{log}:\n{}",
                        tail(&self.dir.join(log))
                    ));
                }
            }
            let last = match agent.get(url).call() {
                Ok(r) if r.status() == 200 => return Ok(()),
                Ok(r) => format!("HTTP {}", r.status()),
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                return fail(format!(
                    "{what} was not healthy at {url} within 90s: {last}\n{log}:\n{}",
                    tail(&self.dir.join(log))
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Registers a Node that kwok keeps Ready (it must have been started
    /// with `kwok: true`) and waits until it is Ready. `labels` are added
    /// to the Node's own `kubernetes.io/hostname`.
    pub fn create_node(&self, name: &str, labels: &[(&str, &str)]) -> Result<(), Error> {
        let mut label_map = serde_json::Map::new();
        label_map.insert("kubernetes.io/hostname".into(), Value::from(name));
        for (k, v) in labels {
            label_map.insert((*k).into(), Value::from(*v));
        }
        let node = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": label_map,
                         "annotations": {KWOK_ANNOTATION: "fake"}},
        });
        self.must("POST", "/api/v1/nodes", Some(&node), &[409])?;
        self.wait_node_ready(name, Duration::from_secs(60))
    }

    /// Waits until Node `name` reports Ready=True.
    pub fn wait_node_ready(&self, name: &str, within: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + within;
        loop {
            let (code, v) = self.request("GET", &format!("/api/v1/nodes/{name}"), None)?;
            let ready = code == 200
                && v["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return fail(format!(
                    "node {name} was not Ready within {}s (is kwok running? start with kwok: true): HTTP {code} {v}",
                    within.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Writes a kubeconfig (0600) that authenticates with `token`
    /// against this control plane, trusting its CA, and returns its
    /// path. With [`ControlPlane::token_for`] this runs a program under
    /// a ServiceAccount's own identity, so RBAC decides what it may do.
    pub fn kubeconfig_for_token(&self, name: &str, token: &str) -> Result<PathBuf, Error> {
        let path = self.dir.join(format!("{name}.kubeconfig"));
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: {name}\n\
             clusters:\n- name: testenv\n  cluster:\n    server: {}\n    certificate-authority-data: {}\n\
             users:\n- name: {name}\n  user:\n    token: {token}\n\
             contexts:\n- name: {name}\n  context:\n    cluster: testenv\n    user: {name}\n",
            self.server,
            b64(&self.pki.ca.cert_pem),
        );
        let _ = std::fs::remove_file(&path);
        write_private(&path, text.as_bytes())?;
        Ok(path)
    }

    /// A kubeconfig for ServiceAccount `namespace/name` (made if missing)
    /// with a fresh TokenRequest token: see
    /// [`ControlPlane::kubeconfig_for_token`].
    pub fn kubeconfig_for(&self, namespace: &str, name: &str) -> Result<PathBuf, Error> {
        let token = self.token_for(namespace, name)?;
        self.kubeconfig_for_token(&format!("{namespace}-{name}"), &token)
    }

    /// Makes sure a namespace exists.
    pub fn ensure_namespace(&self, name: &str) -> Result<(), Error> {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        self.must("POST", "/api/v1/namespaces", Some(&ns), &[409])
            .map(|_| ())
    }

    /// A token for ServiceAccount `namespace/name` (made if missing),
    /// from the TokenRequest API, valid for an hour.
    pub fn token_for(&self, namespace: &str, name: &str) -> Result<String, Error> {
        self.ensure_namespace(namespace)?;
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": name, "namespace": namespace}});
        self.must(
            "POST",
            &format!("/api/v1/namespaces/{namespace}/serviceaccounts"),
            Some(&sa),
            &[409],
        )?;
        let req = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                         "spec": {"expirationSeconds": 3600}});
        let v = self.must(
            "POST",
            &format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"),
            Some(&req),
            &[],
        )?;
        match v["status"]["token"].as_str() {
            Some(t) if !t.is_empty() => Ok(t.to_owned()),
            _ => fail(format!(
                "TokenRequest for {namespace}/{name} returned no token"
            )),
        }
    }

    fn etcd(&self, path: &str, body: &Value) -> Result<Value, Error> {
        let url = format!("{}{path}", self.etcd_url);
        let resp = self
            .agent
            .post(&url)
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .map_err(|e| Error(format!("etcd {path}: {e}")))?;
        let code = resp.status().as_u16();
        let text = resp
            .into_body()
            .read_to_string()
            .map_err(|e| Error(format!("etcd {path}: {e}")))?;
        if code != 200 {
            return fail(format!("etcd {path}: HTTP {code}: {text}"));
        }
        serde_json::from_str(&text).map_err(|e| Error(format!("etcd {path}: {e}: {text}")))
    }

    /// etcd's current revision (what a resourceVersion counts).
    pub fn etcd_revision(&self) -> Result<i64, Error> {
        // Any range request reports the store's revision in its header.
        let v = self.etcd("/v3/kv/range", &json!({"key": b64("/"), "limit": 1}))?;
        v["header"]["revision"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Error(format!("etcd range header has no revision: {v}")))
    }

    /// Compacts etcd at its current revision through the gRPC gateway;
    /// returns that revision. Watches from older resourceVersions that
    /// etcd serves then fail with 410 Gone.
    pub fn compact_etcd(&self) -> Result<i64, Error> {
        let rev = self.etcd_revision()?;
        match self.etcd(
            "/v3/kv/compaction",
            &json!({"revision": rev.to_string(), "physical": true}),
        ) {
            Ok(_) => Ok(rev),
            // Someone (another test, the apiserver's own compactor)
            // compacted at this revision or later already: same result.
            Err(e) if e.0.contains("required revision has been compacted") => Ok(rev),
            Err(e) => Err(e),
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Reverse order: the apiserver before etcd.
        let mut procs = self.procs.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(mut p) = procs.pop() {
            p.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
