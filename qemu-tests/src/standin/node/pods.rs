//! The kubelet's part for pods: the pods bound to this node, run or
//! refused, and their status reported.
//!
//! Every two seconds the stand-in lists the pods the scheduler (or the
//! DaemonSet controller) bound to its Node and decides for each
//! ([`decide_pod`]):
//!
//! - **Run**: a DaemonSet's pod, on the host's network, whose images
//!   k3s imported from the airgap directory: a node agent such as the
//!   machine operator. Its volumes are made as the kubelet makes them
//!   (host paths, the projected ServiceAccount token from the
//!   TokenRequest API bound to this pod, kube-root-ca.crt, the
//!   namespace), its environment resolved (values, `fieldRef`s, and
//!   `KUBERNETES_SERVICE_HOST`/`PORT`, which here name the apiserver's
//!   endpoint directly: there is no kube-proxy to carry the
//!   `kubernetes` Service's address there), and each container run by
//!   [`super::runtime`]: restarted with the kubelet's backoff when it
//!   ends, and when its HTTP liveness probe fails `failureThreshold`
//!   times.
//! - **Pretend**: a pod annotated `liken-standin-k3s.test/pretend:
//!   "true"` (test workloads, so a drain has real pods to evict under a
//!   real PodDisruptionBudget) is reported Running and Ready while
//!   nothing runs, as kwok reports its pods, and its status says so.
//! - **Refuse**: anything else (a Deployment's pod: the tests run
//!   controllers beside the control plane on the host; a pod off the
//!   host network: the stand-in has no CNI; an image k3s did not import:
//!   an airgapped node pulls nothing) stays Pending with a waiting
//!   reason and a message saying why.
//!
//! A pod being deleted has its containers stopped (SIGTERM, its grace
//! period, SIGKILL) and is then deleted for good, with its uid as a
//! precondition, as the kubelet finishes a deletion.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use liken_kube::request::{CONFIG_MAPS, PODS};
use liken_kube::{Api, Client, DynamicObject, ListParams, Object};
use serde_json::{Value, json};

use super::config::Setup;
use super::container::{Mount, Spec, capability_set};
use super::images::Image;
use super::runtime::{self, PODS_DIR, Running};
use crate::k3s_node::write_private;

/// How often the pods are listed.
pub const SYNC_EVERY: Duration = Duration::from_secs(2);
/// The annotation that asks the stand-in to report a pod Running
/// without running it.
pub const PRETEND: &str = "liken-standin-k3s.test/pretend";
/// The kubelet's first restart delay, doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(10);
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How soon a pod whose setup failed is set up again.
const RETRY_SETUP: Duration = Duration::from_secs(20);

/// What the stand-in does with a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Run its containers.
    Run,
    /// Report it running; run nothing.
    Pretend,
    /// Leave it Pending: the waiting reason and the message.
    Refuse(&'static str, String),
}

/// Decides what to do with `pod` (its JSON) given the imported images.
pub fn decide_pod(pod: &Value, images: &[Image]) -> Verdict {
    if pod["metadata"]["annotations"][PRETEND] == "true" {
        return Verdict::Pretend;
    }
    let owned_by_daemonset = pod["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|o| o.iter().any(|r| r["kind"] == "DaemonSet"));
    if !owned_by_daemonset {
        return Verdict::Refuse(
            "NotRunByStandin",
            "liken-standin-k3s runs DaemonSet pods only (node agents); the tests run \
             controllers beside the control plane on the host"
                .into(),
        );
    }
    if pod["spec"]["hostNetwork"] != true {
        return Verdict::Refuse(
            "NotRunByStandin",
            "liken-standin-k3s runs host-network pods only: it has no CNI".into(),
        );
    }
    if pod["spec"]["initContainers"]
        .as_array()
        .is_some_and(|c| !c.is_empty())
    {
        return Verdict::Refuse(
            "NotRunByStandin",
            "liken-standin-k3s does not run init containers".into(),
        );
    }
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        let image = c["image"].as_str().unwrap_or("");
        if !images.iter().any(|i| i.name == image) {
            return Verdict::Refuse(
                "ImagePullBackOff",
                format!(
                    "image {image} is not among the images k3s imported from its airgap \
                     directory ({}), and an airgapped node pulls nothing",
                    if images.is_empty() {
                        "none".to_owned()
                    } else {
                        images
                            .iter()
                            .map(|i| i.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
            );
        }
        let uid = c["securityContext"]["runAsUser"]
            .as_i64()
            .or(pod["spec"]["securityContext"]["runAsUser"].as_i64());
        if uid.is_some_and(|u| u != 0) {
            return Verdict::Refuse(
                "NotRunByStandin",
                "liken-standin-k3s runs containers as uid 0 only".into(),
            );
        }
    }
    Verdict::Run
}

/// The argv of a container: Kubernetes' rule for command and args over
/// the image's Entrypoint and Cmd.
pub fn decide_argv(container: &Value, image: &Image) -> Vec<String> {
    let list = |v: &Value| -> Option<Vec<String>> {
        v.as_array().map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
    };
    match (list(&container["command"]), list(&container["args"])) {
        (Some(command), args) => [command, args.unwrap_or_default()].concat(),
        (None, Some(args)) => [image.entrypoint.clone(), args].concat(),
        (None, None) => [image.entrypoint.clone(), image.cmd.clone()].concat(),
    }
}

/// An HTTP liveness probe.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Probe {
    port: u16,
    path: String,
    period: Duration,
    timeout: Duration,
    initial_delay: Duration,
    failures: u32,
}

fn probe_of(container: &Value) -> Option<Probe> {
    let p = &container["livenessProbe"];
    let get = &p["httpGet"];
    if get.is_null() {
        return None;
    }
    let port = match &get["port"] {
        Value::Number(n) => n.as_u64()?,
        Value::String(name) => container["ports"]
            .as_array()?
            .iter()
            .find(|cp| cp["name"] == name.as_str())?["containerPort"]
            .as_u64()?,
        _ => return None,
    };
    let secs = |k: &str, d: u64| Duration::from_secs(p[k].as_u64().unwrap_or(d));
    Some(Probe {
        port: u16::try_from(port).ok()?,
        path: get["path"].as_str().unwrap_or("/").to_owned(),
        period: secs("periodSeconds", 10),
        timeout: secs("timeoutSeconds", 1),
        initial_delay: secs("initialDelaySeconds", 0),
        failures: u32::try_from(p["failureThreshold"].as_u64().unwrap_or(3)).unwrap_or(3),
    })
}

/// One HTTP GET on loopback; true for a 2xx or 3xx answer.
fn probe_ok(p: &Probe) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&([127, 0, 0, 1], p.port).into(), p.timeout) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(p.timeout));
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nUser-Agent: kube-probe/liken-standin\r\nConnection: close\r\n\r\n",
        p.path, p.port
    );
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    if s.read_exact(&mut head).is_err() {
        return false;
    }
    let code = std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|c| c.parse::<u16>().ok());
    code.is_some_and(|c| (200..400).contains(&c))
}

/// One container of a running pod.
struct ContainerState {
    name: String,
    image: Image,
    spec: Spec,
    dir: PathBuf,
    log: PathBuf,
    running: Option<Running>,
    started_at: String,
    restarts: u32,
    last_exit: Option<(i32, String, String)>,
    backoff: Duration,
    next_start: Instant,
    probe: Option<Probe>,
    probe_failures: u32,
    next_probe: Instant,
}

/// A projected ServiceAccount token to keep fresh.
struct TokenFile {
    path: PathBuf,
    service_account: String,
    audiences: Vec<String>,
    seconds: u64,
    renew_at: Instant,
}

/// One pod the stand-in knows.
struct PodState {
    namespace: String,
    name: String,
    uid: String,
    verdict: Verdict,
    containers: Vec<ContainerState>,
    tokens: Vec<TokenFile>,
    start_time: String,
    reported: Value,
    dir: PathBuf,
    /// The spec's containers: name and image.
    declared: Vec<(String, String)>,
    /// When a pod whose containers could not be set up is tried again.
    retry_at: Option<Instant>,
}

/// The pods of this node.
pub struct Pods {
    client: Client,
    setup: Setup,
    images: Vec<Image>,
    node_ip: String,
    pods: HashMap<String, PodState>,
}

fn now_text() -> String {
    liken_api::Time::from_system(SystemTime::now()).to_string()
}

impl Pods {
    /// The pods of `setup`'s node, run from `images`.
    pub fn new(client: Client, setup: Setup, images: Vec<Image>, node_ip: String) -> Pods {
        Pods {
            client,
            setup,
            images,
            node_ip,
            pods: HashMap::new(),
        }
    }

    /// Lists the pods and acts on each, forever.
    pub fn run(&mut self) -> ! {
        loop {
            if let Err(e) = self.pass() {
                crate::say(&format!("pods: {e}"));
            }
            std::thread::sleep(SYNC_EVERY);
        }
    }

    fn pass(&mut self) -> Result<(), String> {
        let api = Api::all(PODS);
        let list = self
            .client
            .list::<DynamicObject>(
                &api,
                &ListParams::fields(format!("spec.nodeName={}", self.setup.node)),
            )
            .map_err(|e| format!("listing this node's pods: {e}"))?;
        let mut seen = Vec::new();
        for pod in &list.items {
            let uid = pod.0["metadata"]["uid"].as_str().unwrap_or("").to_owned();
            seen.push(uid.clone());
            if !pod.0["metadata"]["deletionTimestamp"].is_null() {
                self.finish_deletion(pod);
                continue;
            }
            if pod.0["status"]["phase"] == "Succeeded" || pod.0["status"]["phase"] == "Failed" {
                continue;
            }
            if self
                .pods
                .get(&uid)
                .and_then(|p| p.retry_at)
                .is_some_and(|at| Instant::now() >= at)
            {
                self.pods.remove(&uid);
            }
            if !self.pods.contains_key(&uid) {
                let state = self.admit(pod);
                self.pods.insert(uid.clone(), state);
            }
            if let Some(state) = self.pods.get_mut(&uid) {
                drive(state);
                let token_client = self.client.clone();
                refresh_tokens(&token_client, state);
                let status = pod_status(state, &self.node_ip);
                if status != state.reported {
                    match self.client.merge_patch_status::<DynamicObject>(
                        &Api::namespaced(PODS, &state.namespace),
                        &state.name,
                        &json!({"status": status}),
                    ) {
                        Ok(_) => state.reported = status,
                        Err(e) => crate::say(&format!(
                            "pod {}/{}: reporting its status: {e}",
                            state.namespace, state.name
                        )),
                    }
                }
            }
        }
        let gone: Vec<String> = self
            .pods
            .keys()
            .filter(|u| !seen.contains(u))
            .cloned()
            .collect();
        for uid in gone {
            if let Some(mut state) = self.pods.remove(&uid) {
                crate::say(&format!(
                    "pod {}/{} is gone from the API; stopping it",
                    state.namespace, state.name
                ));
                stop_all(&mut state, Duration::from_secs(5));
                let _ = std::fs::remove_dir_all(&state.dir);
            }
        }
        Ok(())
    }

    /// Stops a pod that is being deleted and deletes it for good.
    fn finish_deletion(&mut self, pod: &DynamicObject) {
        let uid = pod.0["metadata"]["uid"].as_str().unwrap_or("");
        let grace = pod.0["metadata"]["deletionGracePeriodSeconds"]
            .as_u64()
            .or(pod.0["spec"]["terminationGracePeriodSeconds"].as_u64())
            .unwrap_or(30);
        if let Some(mut state) = self.pods.remove(uid) {
            crate::say(&format!(
                "pod {}/{} is being deleted; stopping its containers (grace {grace} s)",
                state.namespace, state.name
            ));
            stop_all(&mut state, Duration::from_secs(grace));
            let _ = std::fs::remove_dir_all(&state.dir);
        }
        // The kubelet's last word on a pod: delete it with no grace left,
        // and only this incarnation of the name.
        let ns = pod.namespace().to_owned();
        let req = liken_kube::Request {
            method: liken_kube::request::Method::Delete,
            path: format!("/api/v1/namespaces/{ns}/pods/{}", pod.name()),
            query: Vec::new(),
            body: Some(
                json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                       "preconditions": {"uid": uid}})
                .to_string()
                .into_bytes(),
            ),
            content_type: Some(liken_kube::request::JSON),
            timeout: None,
        };
        if let Err(e) = self.client.send(&req)
            && !matches!(e, liken_kube::Error::NotFound { .. })
        {
            crate::say(&format!(
                "pod {ns}/{}: finishing its deletion: {e}",
                pod.name()
            ));
        }
    }

    /// A new pod: its verdict, and for one to run, its volumes and
    /// containers prepared.
    fn admit(&self, pod: &DynamicObject) -> PodState {
        let p = &pod.0;
        let namespace = pod.namespace().to_owned();
        let name = pod.name().to_owned();
        let uid = p["metadata"]["uid"].as_str().unwrap_or("").to_owned();
        let dir = Path::new(PODS_DIR).join(&uid);
        let mut state = PodState {
            namespace: namespace.clone(),
            name: name.clone(),
            uid: uid.clone(),
            verdict: decide_pod(p, &self.images),
            containers: Vec::new(),
            tokens: Vec::new(),
            start_time: now_text(),
            reported: Value::Null,
            dir,
            declared: p["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap_or("").to_owned(),
                        c["image"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect(),
            retry_at: None,
        };
        match &state.verdict {
            Verdict::Run => {
                if let Err(e) = self.prepare(p, &mut state) {
                    // The kubelet tries again: a volume may appear.
                    state.verdict = Verdict::Refuse("CreateContainerConfigError", e);
                    state.retry_at = Some(Instant::now() + RETRY_SETUP);
                }
            }
            Verdict::Pretend => {}
            Verdict::Refuse(..) => {}
        }
        let what = match &state.verdict {
            Verdict::Run => "runs it".to_owned(),
            Verdict::Pretend => "reports it running without running anything (pretend)".to_owned(),
            Verdict::Refuse(reason, message) => format!("leaves it pending: {reason}: {message}"),
        };
        crate::say(&format!(
            "pod {namespace}/{name} is bound to this node; the stand-in {what}"
        ));
        state
    }

    /// Volumes, then one [`Spec`] per container.
    fn prepare(&self, pod: &Value, state: &mut PodState) -> Result<(), String> {
        let _ = std::fs::remove_dir_all(&state.dir);
        std::fs::create_dir_all(&state.dir).map_err(|e| e.to_string())?;
        let mut volumes: HashMap<String, Mount> = HashMap::new();
        for v in pod["spec"]["volumes"].as_array().into_iter().flatten() {
            let vname = v["name"].as_str().unwrap_or("").to_owned();
            let mount = if let Some(path) = v["hostPath"]["path"].as_str() {
                let kind = v["hostPath"]["type"].as_str().unwrap_or("");
                let p = PathBuf::from(path);
                match kind {
                    "DirectoryOrCreate" => {
                        std::fs::create_dir_all(&p).map_err(|e| format!("hostPath {path}: {e}"))?
                    }
                    "Directory" if !p.is_dir() => {
                        return Err(format!(
                            "hostPath {path} is not a directory on this machine"
                        ));
                    }
                    _ => {}
                }
                Mount::Bind {
                    source: p,
                    target: String::new(),
                    readonly: false,
                }
            } else if v["projected"].is_object() {
                let dir = state.dir.join("volumes").join(&vname);
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                self.project(pod, &v["projected"], &dir, state)?;
                Mount::Bind {
                    source: dir,
                    target: String::new(),
                    readonly: true,
                }
            } else if v["emptyDir"].is_object() {
                if v["emptyDir"]["medium"] == "Memory" {
                    Mount::Tmpfs {
                        target: String::new(),
                    }
                } else {
                    let dir = state.dir.join("volumes").join(&vname);
                    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                    Mount::Bind {
                        source: dir,
                        target: String::new(),
                        readonly: false,
                    }
                }
            } else {
                return Err(format!(
                    "volume {vname}: liken-standin-k3s makes hostPath, projected and emptyDir volumes only"
                ));
            };
            volumes.insert(vname, mount);
        }
        for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
            let cname = c["name"].as_str().unwrap_or("").to_owned();
            let image_name = c["image"].as_str().unwrap_or("");
            let image = self
                .images
                .iter()
                .find(|i| i.name == image_name)
                .cloned()
                .ok_or_else(|| format!("image {image_name} vanished"))?;
            let dir = state.dir.join(&cname);
            let rootfs = dir.join("rootfs");
            runtime::copy_tree(&image.rootfs, &rootfs)
                .map_err(|e| format!("copying {image_name}'s root: {e}"))?;
            let mut mounts = Vec::new();
            for m in c["volumeMounts"].as_array().into_iter().flatten() {
                let vname = m["name"].as_str().unwrap_or("");
                let target = m["mountPath"].as_str().unwrap_or("").to_owned();
                let readonly = m["readOnly"] == true;
                let mount = match volumes.get(vname) {
                    Some(Mount::Bind {
                        source,
                        readonly: ro,
                        ..
                    }) => Mount::Bind {
                        source: source.clone(),
                        target,
                        readonly: *ro || readonly,
                    },
                    Some(Mount::Tmpfs { .. }) => Mount::Tmpfs { target },
                    None => return Err(format!("container {cname} mounts unknown volume {vname}")),
                };
                mounts.push(mount);
            }
            let sc = &c["securityContext"];
            let privileged = sc["privileged"] == true;
            let keep_caps = if privileged {
                None
            } else if sc["capabilities"]["drop"]
                .as_array()
                .is_some_and(|d| d.iter().any(|x| x == "ALL"))
            {
                let add: Vec<String> = sc["capabilities"]["add"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect();
                capability_set(&add)?;
                Some(add)
            } else {
                // containerd's default set.
                Some(
                    [
                        "CHOWN",
                        "DAC_OVERRIDE",
                        "FSETID",
                        "FOWNER",
                        "MKNOD",
                        "NET_RAW",
                        "SETGID",
                        "SETUID",
                        "SETFCAP",
                        "SETPCAP",
                        "NET_BIND_SERVICE",
                        "SYS_CHROOT",
                        "KILL",
                        "AUDIT_WRITE",
                    ]
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect(),
                )
            };
            let spec = Spec {
                rootfs,
                mounts,
                argv: decide_argv(c, &image),
                env: self.environment(pod, c, &image)?,
                workdir: c["workingDir"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| image.working_dir.clone()),
                readonly_root: sc["readOnlyRootFilesystem"] == true,
                keep_caps,
                no_new_privs: sc["allowPrivilegeEscalation"] == false,
                pid_file: dir.join("pid"),
            };
            if spec.argv.is_empty() {
                return Err(format!(
                    "container {cname} has no command and its image no entrypoint"
                ));
            }
            let log = PathBuf::from(format!(
                "/var/log/pods/{}_{}_{}/{cname}/0.log",
                state.namespace, state.name, state.uid
            ));
            state.containers.push(ContainerState {
                name: cname,
                probe: probe_of(c),
                image,
                spec,
                dir,
                log,
                running: None,
                started_at: String::new(),
                restarts: 0,
                last_exit: None,
                backoff: FIRST_BACKOFF,
                next_start: Instant::now(),
                probe_failures: 0,
                next_probe: Instant::now(),
            });
        }
        Ok(())
    }

    /// Writes a projected volume's sources into `dir`.
    fn project(
        &self,
        pod: &Value,
        projected: &Value,
        dir: &Path,
        state: &mut PodState,
    ) -> Result<(), String> {
        let sa = pod["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or("default")
            .to_owned();
        for source in projected["sources"].as_array().into_iter().flatten() {
            if let Some(t) = source.get("serviceAccountToken") {
                let mut token = TokenFile {
                    path: dir.join(t["path"].as_str().unwrap_or("token")),
                    service_account: sa.clone(),
                    audiences: t["audience"]
                        .as_str()
                        .map(|a| vec![a.to_owned()])
                        .unwrap_or_default(),
                    seconds: t["expirationSeconds"].as_u64().unwrap_or(3607),
                    renew_at: Instant::now(),
                };
                request_token(&self.client, state, &mut token)?;
                state.tokens.push(token);
            } else if let Some(cm) = source.get("configMap") {
                let name = cm["name"].as_str().unwrap_or("");
                let obj: DynamicObject = self
                    .client
                    .get(&Api::namespaced(CONFIG_MAPS, &state.namespace), name)
                    .map_err(|e| format!("configMap {name}: {e}"))?;
                let data = obj.0["data"].as_object().cloned().unwrap_or_default();
                let items: Vec<(String, String)> = match cm["items"].as_array() {
                    Some(items) => items
                        .iter()
                        .map(|i| {
                            (
                                i["key"].as_str().unwrap_or("").to_owned(),
                                i["path"].as_str().unwrap_or("").to_owned(),
                            )
                        })
                        .collect(),
                    None => data.keys().map(|k| (k.clone(), k.clone())).collect(),
                };
                for (key, path) in items {
                    let text = data.get(&key).and_then(|v| v.as_str()).unwrap_or("");
                    std::fs::write(dir.join(&path), text).map_err(|e| e.to_string())?;
                }
            } else if let Some(d) = source.get("downwardAPI") {
                for item in d["items"].as_array().into_iter().flatten() {
                    let field = item["fieldRef"]["fieldPath"].as_str().unwrap_or("");
                    let value = field_value(pod, field, &self.setup.node, &self.node_ip)
                        .ok_or_else(|| format!("downwardAPI field {field} is not provided"))?;
                    let path = item["path"].as_str().unwrap_or("");
                    std::fs::write(dir.join(path), value).map_err(|e| e.to_string())?;
                }
            } else {
                return Err("a projected volume source other than serviceAccountToken, configMap or downwardAPI".into());
            }
        }
        Ok(())
    }

    /// The container's environment: the image's, the Service variables,
    /// then the container's own.
    fn environment(
        &self,
        pod: &Value,
        c: &Value,
        image: &Image,
    ) -> Result<Vec<(String, String)>, String> {
        let mut env: Vec<(String, String)> = image
            .env
            .iter()
            .filter_map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
            })
            .collect();
        let hostport = self.setup.endpoint.trim_start_matches("https://");
        let (host, port) = hostport
            .split('/')
            .next()
            .and_then(|h| h.rsplit_once(':'))
            .unwrap_or((hostport, "443"));
        for (k, v) in [
            ("KUBERNETES_SERVICE_HOST", host.to_owned()),
            ("KUBERNETES_SERVICE_PORT", port.to_owned()),
            ("KUBERNETES_SERVICE_PORT_HTTPS", port.to_owned()),
            ("KUBERNETES_PORT", format!("tcp://{host}:{port}")),
        ] {
            env.push((k.to_owned(), v));
        }
        for e in c["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().unwrap_or("").to_owned();
            let value = if let Some(v) = e["value"].as_str() {
                v.to_owned()
            } else if let Some(field) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                field_value(pod, field, &self.setup.node, &self.node_ip)
                    .ok_or_else(|| format!("env {name}: fieldRef {field} is not provided"))?
            } else if e["valueFrom"].is_object() {
                return Err(format!(
                    "env {name}: only values and fieldRefs are provided"
                ));
            } else {
                String::new()
            };
            env.retain(|(k, _)| *k != name);
            env.push((name, value));
        }
        Ok(env)
    }
}

/// A pod field a fieldRef or downwardAPI item names.
fn field_value(pod: &Value, field: &str, node: &str, ip: &str) -> Option<String> {
    let s = |v: &Value| v.as_str().map(str::to_owned);
    match field {
        "spec.nodeName" => Some(node.to_owned()),
        "metadata.name" => s(&pod["metadata"]["name"]),
        "metadata.namespace" => s(&pod["metadata"]["namespace"]),
        "metadata.uid" => s(&pod["metadata"]["uid"]),
        "spec.serviceAccountName" => s(&pod["spec"]["serviceAccountName"]),
        "status.podIP" | "status.hostIP" => Some(ip.to_owned()),
        _ => None,
    }
}

/// Asks the TokenRequest API for `token`, bound to the pod, and writes
/// it (0600, through a temporary name, so a reader never sees half).
fn request_token(client: &Client, state: &PodState, token: &mut TokenFile) -> Result<(), String> {
    let mut spec = json!({
        "expirationSeconds": token.seconds,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": state.name, "uid": state.uid},
    });
    if !token.audiences.is_empty() {
        spec["audiences"] = json!(token.audiences);
    }
    let req = liken_kube::Request {
        method: liken_kube::request::Method::Post,
        path: format!(
            "/api/v1/namespaces/{}/serviceaccounts/{}/token",
            state.namespace, token.service_account
        ),
        query: Vec::new(),
        body: Some(
            serde_json::to_vec(&json!({"apiVersion": "authentication.k8s.io/v1",
                                        "kind": "TokenRequest", "spec": spec}))
            .map_err(|e| e.to_string())?,
        ),
        content_type: Some(liken_kube::request::JSON),
        timeout: None,
    };
    let answer: Value = client
        .send(&req)
        .map_err(|e| {
            format!(
                "a token for {}/{}: {e}",
                state.namespace, token.service_account
            )
        })
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))?;
    let text = answer["status"]["token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or("the TokenRequest answer holds no token")?;
    write_private(&token.path, text.as_bytes())?;
    // The kubelet renews at 80% of the lifetime.
    token.renew_at = Instant::now() + Duration::from_secs(token.seconds * 8 / 10);
    Ok(())
}

fn refresh_tokens(client: &Client, state: &mut PodState) {
    let mut tokens = std::mem::take(&mut state.tokens);
    for t in &mut tokens {
        if Instant::now() >= t.renew_at
            && let Err(e) = request_token(client, state, t)
        {
            crate::say(&format!("pod {}/{}: {e}", state.namespace, state.name));
        }
    }
    state.tokens = tokens;
}

/// Starts, restarts and probes the pod's containers.
fn drive(state: &mut PodState) {
    if state.verdict != Verdict::Run {
        return;
    }
    let label = format!("{}/{}", state.namespace, state.name);
    for c in &mut state.containers {
        if let Some(r) = c.running.as_mut() {
            let mut ended = r.exited();
            if ended.is_none()
                && let Some(p) = &c.probe
                && r.started.elapsed() >= p.initial_delay
                && Instant::now() >= c.next_probe
            {
                c.next_probe = Instant::now() + p.period;
                if probe_ok(p) {
                    c.probe_failures = 0;
                } else {
                    c.probe_failures += 1;
                    if c.probe_failures >= p.failures {
                        crate::say(&format!(
                            "pod {label} container {}: liveness probe failed {} times; restarting it",
                            c.name, c.probe_failures
                        ));
                        ended = Some(r.stop(Duration::from_secs(10)));
                    }
                }
            }
            if let Some(code) = ended {
                let ran = r.started.elapsed();
                crate::say(&format!(
                    "pod {label} container {} ended with status {code} after {} s",
                    c.name,
                    ran.as_secs()
                ));
                c.last_exit = Some((code, c.started_at.clone(), now_text()));
                c.running = None;
                c.restarts += 1;
                c.probe_failures = 0;
                if ran > Duration::from_secs(600) {
                    c.backoff = FIRST_BACKOFF;
                }
                c.next_start = Instant::now() + c.backoff;
                c.backoff = (c.backoff * 2).min(MAX_BACKOFF);
            }
        } else if Instant::now() >= c.next_start {
            match runtime::start(&c.spec, &c.dir, &format!("{label} {}", c.name), &c.log) {
                Ok(r) => {
                    crate::say(&format!(
                        "pod {label} container {}: started {} from image {} ({})",
                        c.name,
                        c.spec.argv.join(" "),
                        c.image.name,
                        c.image.digest
                    ));
                    c.started_at = now_text();
                    c.next_probe = Instant::now();
                    c.running = Some(r);
                }
                Err(e) => {
                    crate::say(&format!("pod {label} container {}: {e}", c.name));
                    c.next_start = Instant::now() + c.backoff;
                }
            }
        }
    }
}

fn stop_all(state: &mut PodState, grace: Duration) {
    for c in &mut state.containers {
        if let Some(mut r) = c.running.take() {
            let code = r.stop(grace);
            crate::say(&format!(
                "pod {}/{} container {} stopped (status {code})",
                state.namespace, state.name, c.name
            ));
        }
    }
}

/// The pod's status as the kubelet would report it.
fn pod_status(state: &PodState, ip: &str) -> Value {
    let cond =
        |kind: &str, ok: bool| json!({"type": kind, "status": if ok { "True" } else { "False" }});
    let ips = json!([{"ip": ip}]);
    let (phase, ready, statuses): (&str, bool, Vec<Value>) = match &state.verdict {
        Verdict::Pretend => ("Running", true, Vec::new()),
        Verdict::Refuse(reason, message) => (
            "Pending",
            false,
            state
                .declared
                .iter()
                .map(|(name, image)| {
                    json!({"name": name, "ready": false, "restartCount": 0, "image": image,
                           "imageID": "", "state": {"waiting": {"reason": reason, "message": message}}})
                })
                .collect(),
        ),
        Verdict::Run => {
            let statuses: Vec<Value> = state
                .containers
                .iter()
                .map(|c| {
                    let state_v = if c.running.is_some() {
                        json!({"running": {"startedAt": c.started_at}})
                    } else if c.restarts > 0 {
                        json!({"waiting": {"reason": "CrashLoopBackOff",
                                           "message": format!("back-off {} s restarting the container", c.backoff.as_secs() / 2)}})
                    } else {
                        json!({"waiting": {"reason": "ContainerCreating"}})
                    };
                    let mut s = json!({
                        "name": c.name, "image": c.image.name,
                        "imageID": format!("{}@{}", c.image.name, c.image.digest),
                        "containerID": format!("liken-standin://{}/{}", state.uid, c.name),
                        "ready": c.running.is_some(), "started": c.running.is_some(),
                        "restartCount": c.restarts, "state": state_v,
                    });
                    if let Some((code, started, finished)) = &c.last_exit {
                        s["lastState"] = json!({"terminated": {"exitCode": code,
                            "startedAt": started, "finishedAt": finished,
                            "reason": if *code == 0 { "Completed" } else { "Error" }}});
                    }
                    s
                })
                .collect();
            let ready = !state.containers.is_empty() && state.containers.iter().all(|c| c.running.is_some());
            ("Running", ready, statuses)
        }
    };
    let mut status = json!({
        "phase": phase,
        "hostIP": ip, "hostIPs": ips, "podIP": ip, "podIPs": ips,
        "startTime": state.start_time,
        "conditions": [
            cond("PodScheduled", true), cond("Initialized", true),
            cond("ContainersReady", ready), cond("Ready", ready),
        ],
    });
    if !statuses.is_empty() {
        status["containerStatuses"] = Value::from(statuses);
    }
    if state.verdict == Verdict::Pretend {
        status["message"] = Value::from(
            "liken-standin-k3s reports this pod running; nothing runs it (a test workload)",
        );
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(name: &str) -> Image {
        Image {
            name: name.into(),
            digest: "sha256:00".into(),
            rootfs: PathBuf::from("/r"),
            entrypoint: vec!["/usr/bin/op".into()],
            cmd: vec!["--default".into()],
            env: vec![],
            working_dir: String::new(),
        }
    }

    fn pod(owner: &str, host_network: bool, image: &str) -> Value {
        json!({"metadata": {"ownerReferences": [{"kind": owner}]},
               "spec": {"hostNetwork": host_network, "containers": [{"name": "c", "image": image}]}})
    }

    #[test]
    fn pods_are_run_pretended_or_refused_by_a_table() {
        let images = [image("liken.sh/op:1")];
        let cases: [(Value, &str); 6] = [
            (pod("DaemonSet", true, "liken.sh/op:1"), "Run"),
            (pod("ReplicaSet", true, "liken.sh/op:1"), "NotRunByStandin"),
            (pod("DaemonSet", false, "liken.sh/op:1"), "NotRunByStandin"),
            (pod("DaemonSet", true, "liken.sh/op:2"), "ImagePullBackOff"),
            (
                json!({"metadata": {"annotations": {PRETEND: "true"}}, "spec": {}}),
                "Pretend",
            ),
            (
                {
                    let mut p = pod("DaemonSet", true, "liken.sh/op:1");
                    p["spec"]["securityContext"] = json!({"runAsUser": 1000});
                    p
                },
                "NotRunByStandin",
            ),
        ];
        for (p, want) in cases {
            let got = match decide_pod(&p, &images) {
                Verdict::Run => "Run",
                Verdict::Pretend => "Pretend",
                Verdict::Refuse(r, _) => r,
            };
            assert_eq!(got, want, "{p}");
        }
    }

    #[test]
    fn argv_follows_kubernetes_rules_over_the_image() {
        let i = image("x");
        assert_eq!(decide_argv(&json!({}), &i), ["/usr/bin/op", "--default"]);
        assert_eq!(
            decide_argv(&json!({"args": ["-a"]}), &i),
            ["/usr/bin/op", "-a"]
        );
        assert_eq!(decide_argv(&json!({"command": ["/b"]}), &i), ["/b"]);
        assert_eq!(
            decide_argv(&json!({"command": ["/b"], "args": ["-a"]}), &i),
            ["/b", "-a"]
        );
    }

    #[test]
    fn a_named_probe_port_resolves() {
        let c = json!({"ports": [{"name": "metrics", "containerPort": 9200}],
                       "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"},
                                         "periodSeconds": 30, "failureThreshold": 4}});
        let p = probe_of(&c).unwrap();
        assert_eq!((p.port, p.path.as_str(), p.failures), (9200, "/healthz", 4));
        assert_eq!(p.period, Duration::from_secs(30));
    }
}
