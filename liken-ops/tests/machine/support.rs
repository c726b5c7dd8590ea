//! What the machine operator's integration tests stand on: one real
//! control plane (with kube-controller-manager, the scheduler, kwok and
//! the audit log) carrying the shipped manifests, and per machine a
//! scratch host root with a recording double of init on a real unix
//! socket.
//!
//! The double speaks `liken_api::control` exactly as init does and
//! records every request. When the operator asks it to reboot, the test
//! carries the reboot out the way init would: the operator is stopped,
//! the staged documents are promoted by init's own code
//! (`liken_init::staged::promote`, so init reads what the operator
//! wrote), a new boot record is published and the operator started
//! again. A release write is checked with init's own
//! `release_writer::verify` before it is answered. The new boot's record
//! says how it was reached as init's own `kexec` code decides it: the
//! way the reboot request asked for (kexec succeeds in the double unless
//! a test makes the kernel refuse it), the reason kept in init's note
//! across the reboot.

#![allow(dead_code)]

use std::fs;
use std::io::Write as _;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use liken_api::control::{
    InitStatus, ReleaseWritten, Request, Response, ServiceState, ServiceStatus, read_frame,
    write_frame,
};
use liken_api::{BootAssessment, BootRecord, Cluster, Machine, RebootVia, Slot, Time, Version};
use liken_init::kexec::{Prepared, Wanted};
use liken_testenv::scratch::TempDir;
use liken_testenv::{ControlPlane, Options};
use serde_json::{Value, json};

/// The version the test release build carries.
pub const OLD: &str = "2026.11.01-001";

/// The shared control plane, with the manifests applied.
pub fn cp() -> &'static ControlPlane {
    static CP: OnceLock<ControlPlane> = OnceLock::new();
    CP.get_or_init(|| {
        let cp = liken_testenv::start(Options {
            controller_manager: true,
            kwok: true,
            scheduler: true,
            audit: true,
            ..Options::default()
        })
        .expect("starting the control plane");
        cp.ensure_namespace("liken-system").unwrap();
        apply_manifest(&cp, "machine-operator.yaml");
        cp
    })
}

/// Applies one shipped manifest with kubectl, the version placeholder
/// filled in as the image build does.
pub fn apply_manifest(cp: &ControlPlane, file: &str) {
    let path = liken_testenv::workspace_root()
        .join("images/manifests")
        .join(file);
    let text = fs::read_to_string(&path)
        .unwrap()
        .replace("@LIKEN_VERSION@", OLD);
    cp.apply(&text);
}

/// Polls `f` until it answers `Some`, or fails with `what` and the last
/// state it saw.
pub fn wait_for<T>(what: &str, within: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + within;
    loop {
        let last = match f() {
            Ok(v) => return v,
            Err(e) => e,
        };
        if Instant::now() > deadline {
            panic!("{what} did not happen within {within:?}; last: {last}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// GETs a path as admin.
pub fn get(path: &str) -> Option<Value> {
    let (code, v) = cp().request("GET", path, None).unwrap();
    (code == 200).then_some(v)
}

/// The Machine as the API holds it.
pub fn machine(name: &str) -> Option<Machine> {
    let v = get(&format!("/apis/liken.sh/v1alpha1/machines/{name}"))?;
    Some(liken_api::decode::wire(v.to_string().as_bytes(), "test").unwrap())
}

/// JSON-merge-patches an object as admin, with kubectl: `what` names
/// it as kubectl does (`machine auto-1`, `pdb web-pdb -n shop`).
pub fn patch(what: &[&str], body: &Value) {
    let out = cp()
        .kubectl()
        .arg("patch")
        .args(what)
        .args(["--type=merge", "-p", &body.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl patch {what:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The condition of a type on a Machine, as (status, reason, message).
pub fn condition(m: &Machine, type_: &str) -> Option<(String, String, String)> {
    liken_api::condition::find(&m.status.conditions, type_)
        .map(|c| (c.status.to_string(), c.reason.clone(), c.message.clone()))
}

/// A Machine document for `name`.
pub fn machine_doc(name: &str) -> Machine {
    let mut m = Machine::new(name, Default::default());
    m.spec.sysctls.insert("vm.swappiness".into(), "60".into());
    m
}

/// The fleet's Cluster document.
pub fn cluster_doc(leaders: &[&str]) -> Cluster {
    Cluster::new(
        "home",
        liken_api::ClusterSpec {
            endpoint: "https://10.0.0.10:6443".into(),
            leaders: leaders.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        },
    )
}

/// Creates the fleet's Cluster as the cluster operator does from the
/// leader's copy (the machine operator never creates one), unless the API
/// has it.
pub fn ensure_cluster(cluster: &Cluster) {
    let body = serde_json::to_value(cluster.canonical()).unwrap();
    let (code, v) = cp()
        .request("POST", "/apis/liken.sh/v1alpha1/clusters", Some(&body))
        .unwrap();
    assert!(
        code == 201 || code == 409,
        "creating the Cluster: {code} {v}"
    );
}

/// How the double answers a status request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusMode {
    /// As init does.
    Normal,
    /// A frame that is not JSON.
    Garbage,
    /// The connection closed at once.
    Hangup,
}

/// What the double knows and has been asked.
pub struct DoubleState {
    /// The boot record it reports.
    pub record: Option<BootRecord>,
    /// Every request, in order.
    pub requests: Vec<Request>,
    /// How status requests are answered.
    pub status: StatusMode,
    /// The releases directory init writes from.
    pub releases: PathBuf,
    /// What a release write answers: `None` verifies with init's code and
    /// writes; `Some(message)` refuses.
    pub refuse_write: Option<String>,
    /// What a reboot or restart request answers: `None` accepts;
    /// `Some(message)` refuses.
    pub refuse_disrupt: Option<String>,
    /// The release written into the other slot.
    pub written: Option<Version>,
    /// k3s's pid as the double reports it; a restart gives it another.
    pub k3s_pid: u32,
    /// When the double accepted a disruption (a reboot or a k3s
    /// restart), on the test's clock: the machine is down from here.
    pub disrupted: Vec<(Instant, Request)>,
    /// When the test carried out a reboot ([`Host::reboot`]): the
    /// machine is up again from here.
    pub rebooted: Vec<Instant>,
    /// Why the kernel refuses a kexec load: `Some` makes a reboot asked
    /// by kexec go through the firmware with this reason, as init does.
    pub refuse_kexec: Option<String>,
}

impl DoubleState {
    /// What init's shutdown would have prepared for the reboot the
    /// operator asked for in this boot (the last accepted one): the way
    /// the request named (`Wanted::from_request`, with init's reason for
    /// the firmware), a kexec the kernel refuses
    /// ([`DoubleState::refuse_kexec`]) turned into the firmware. `None`
    /// when this boot asked for none: the test's reboot is a power cut.
    fn prepare_reboot(&self) -> Option<Prepared> {
        let since = self.rebooted.last().copied();
        let via = self
            .disrupted
            .iter()
            .rev()
            .take_while(|(at, _)| since.is_none_or(|s| *at >= s))
            .find_map(|(_, r)| match r {
                Request::Reboot { via } => Some(*via),
                _ => None,
            })?;
        Some(match (Wanted::from_request(via), &self.refuse_kexec) {
            (Wanted::Firmware(why), _) => Prepared::Firmware(why),
            (Wanted::Kexec, Some(why)) => Prepared::Firmware(why.clone()),
            (Wanted::Kexec, None) => Prepared::Kexec("loaded by the test's double".into()),
        })
    }
}

/// A scratch host: /run/liken, /var/lib/liken, /proc, /sys.
pub struct Host {
    /// The root.
    pub root: TempDir,
    /// Shared with the double's thread.
    pub state: Arc<Mutex<DoubleState>>,
    /// This machine's node.
    pub node: String,
}

impl Host {
    /// The machine operator `binary` as the DaemonSet runs it on this
    /// host: its Node's name, the host's paths, `kubeconfig`'s token,
    /// metrics on a free loopback port; the caller adds intervals and
    /// where its log goes.
    pub fn operator_command(&self, binary: &Path, kubeconfig: &Path) -> Command {
        let mut c = Command::new(binary);
        c.arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--run-dir={}", self.path("run/liken").display()))
            .arg(format!(
                "--var-dir={}",
                self.path("var/lib/liken").display()
            ))
            .arg(format!("--proc={}", self.path("proc").display()))
            .arg(format!("--sys={}", self.path("sys").display()))
            .arg("--metrics-address=127.0.0.1:0")
            .env("NODE_NAME", &self.node)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(Stdio::null());
        c
    }

    /// A host booted with `machine` and `cluster` on release OLD, slot A.
    pub fn new(node: &str, machine: &Machine, cluster: &Cluster) -> Host {
        let root = TempDir::new(&format!("machine-op-{node}"));
        let host = Host {
            state: Arc::new(Mutex::new(DoubleState {
                record: None,
                requests: Vec::new(),
                status: StatusMode::Normal,
                releases: root.path().join("var/lib/liken/releases"),
                refuse_write: None,
                refuse_disrupt: None,
                written: None,
                k3s_pid: 42,
                disrupted: Vec::new(),
                rebooted: Vec::new(),
                refuse_kexec: None,
            })),
            root,
            node: node.to_owned(),
        };
        for d in [
            "run/liken/documents",
            "run/liken/facts",
            "var/lib/liken",
            "proc/sys/vm",
            "sys/module",
        ] {
            fs::create_dir_all(host.root.path().join(d)).unwrap();
        }
        fs::write(
            host.root.path().join("proc/cmdline"),
            "console=ttyS0 quiet\n",
        )
        .unwrap();
        // A power-on: no kexec argument and no note from a shutdown.
        let via = liken_init::kexec::decide_via(None, None);
        host.boot(machine, cluster, Version::parse(OLD).unwrap(), Slot::A, via);
        host.serve();
        ensure_cluster(cluster);
        host
    }

    /// A path below the root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    /// Publishes a boot: documents, the kernel's view of them, and a boot
    /// record with a new time and `via` (how it was reached, and why the
    /// firmware).
    pub fn boot(
        &self,
        machine: &Machine,
        cluster: &Cluster,
        version: Version,
        slot: Slot,
        via: (RebootVia, Option<String>),
    ) {
        let docs = self.path("run/liken/documents");
        fs::write(
            docs.join("machine.yaml"),
            liken_api::decode::to_yaml(&machine.canonical()).unwrap(),
        )
        .unwrap();
        fs::write(
            docs.join("cluster.yaml"),
            liken_api::decode::to_yaml(&cluster.canonical()).unwrap(),
        )
        .unwrap();
        for (k, v) in &machine.spec.sysctls {
            let p = self.path(&format!("proc/sys/{}", k.replace('.', "/")));
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, format!("{v}\n")).unwrap();
        }
        // Boot times are whole seconds: a reboot within the same second
        // would keep the boot id.
        let previous = self.state.lock().unwrap().record.as_ref().map(|r| r.time);
        let mut time = Time::from_system(std::time::SystemTime::now());
        if let Some(p) = previous
            && time <= p
        {
            time = p.plus_seconds(1);
        }
        let record = BootRecord {
            time,
            slot: Some(slot),
            version: Some(version),
            documents: [
                ("machine".to_owned(), machine.canonical_hash()),
                ("cluster".to_owned(), cluster.canonical_hash()),
            ]
            .into(),
            assessment: Some(BootAssessment {
                counted: false,
                blessed: true,
                other_slot_bad: false,
            }),
            via: Some(via.0),
            via_reason: via.1,
            root_verity: None,
        };
        let mut json = serde_json::to_vec_pretty(&record).unwrap();
        json.push(b'\n');
        fs::write(self.path("run/liken/facts/boot.json"), json).unwrap();
        self.state.lock().unwrap().record = Some(record);
    }

    /// The boot record now published.
    pub fn record(&self) -> BootRecord {
        self.state.lock().unwrap().record.clone().unwrap()
    }

    fn serve(&self) {
        let sock = self.path("run/liken/init.sock");
        let listener = UnixListener::bind(&sock).unwrap();
        let state = self.state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                let Ok(req) = read_frame::<_, Request>(&mut s) else {
                    continue;
                };
                let mut st = state.lock().unwrap();
                st.requests.push(req.clone());
                let answer = match (&req, st.status) {
                    (Request::Status, StatusMode::Garbage) => {
                        let mut junk = 9u32.to_be_bytes().to_vec();
                        junk.extend_from_slice(b"not json!");
                        let _ = s.write_all(&junk);
                        continue;
                    }
                    (Request::Status, StatusMode::Hangup) => continue,
                    (Request::Status, StatusMode::Normal) => Response::Status(InitStatus {
                        boot: st.record.clone(),
                        machine: None,
                        problems: Vec::new(),
                        k3s: ServiceStatus {
                            state: ServiceState::Running,
                            pid: Some(st.k3s_pid),
                            restarts: 0,
                        },
                    }),
                    (Request::WriteRelease(w), _) => match &st.refuse_write {
                        Some(m) => Response::Refused { message: m.clone() },
                        None => match liken_init::release_writer::verify(&st.releases, w) {
                            Ok(v) => {
                                st.written = Some(v.release.version.clone());
                                Response::ReleaseWritten(ReleaseWritten {
                                    slot: Slot::B,
                                    version: v.release.version,
                                    bytes: 1,
                                    entry: "liken-b+3.conf".into(),
                                })
                            }
                            Err(e) => Response::Refused {
                                message: e.to_string(),
                            },
                        },
                    },
                    (Request::DisarmRelease, _) => {
                        // The written slot is no boot target any more.
                        st.written = None;
                        Response::Accepted
                    }
                    (Request::Reboot { .. } | Request::RestartK3s, _)
                        if st.refuse_disrupt.is_some() =>
                    {
                        Response::Refused {
                            message: st.refuse_disrupt.clone().unwrap_or_default(),
                        }
                    }
                    (Request::RestartK3s, _) => {
                        // init stops k3s and starts it again: a new pid.
                        st.k3s_pid += 1;
                        st.disrupted.push((Instant::now(), req.clone()));
                        Response::Accepted
                    }
                    (Request::Reboot { .. }, _) => {
                        st.disrupted.push((Instant::now(), req.clone()));
                        Response::Accepted
                    }
                    _ => Response::Accepted,
                };
                drop(st);
                let _ = write_frame(&mut s, &answer);
            }
        });
    }

    /// The requests the double has seen, status polls left out.
    pub fn asked(&self) -> Vec<Request> {
        self.state
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|r| **r != Request::Status)
            .cloned()
            .collect()
    }

    /// Carries out a reboot as init would: promote what is staged (with
    /// init's code), run the promoted documents (or the old ones), boot
    /// the written release from slot B when there is one.
    pub fn reboot(&self, old_machine: &Machine, old_cluster: &Cluster) -> (Machine, Cluster) {
        let var = self.path("var/lib/liken");
        let stamp = Time::from_system(std::time::SystemTime::now());
        for doc in liken_init::staged::Document::ALL {
            let p = liken_init::staged::promote(&var, doc, stamp);
            assert!(
                !matches!(
                    p,
                    liken_init::staged::Promotion::Rejected { .. }
                        | liken_init::staged::Promotion::Failed(_)
                ),
                "init refused what the operator staged: {p:?}"
            );
        }
        let read = |name: &str| fs::read_to_string(var.join("documents").join(name)).ok();
        let machine = read("machine.yaml")
            .map(|t| liken_api::decode::strict::<Machine>(&t, "promoted").unwrap())
            .unwrap_or_else(|| old_machine.clone());
        let cluster = read("cluster.yaml")
            .map(|t| liken_api::decode::strict::<Cluster>(&t, "promoted").unwrap())
            .unwrap_or_else(|| old_cluster.clone());
        let (written, prepared) = {
            let mut st = self.state.lock().unwrap();
            let prepared = st.prepare_reboot();
            st.rebooted.push(Instant::now());
            (st.written.take(), prepared)
        };
        let (version, slot) = match written {
            Some(v) => (v, Slot::B),
            None => (self.record().version.unwrap(), self.record().slot.unwrap()),
        };
        // Across the reboot as init carries it: the shutdown keeps the
        // firmware's reason in its note, the next boot reads it back, and
        // a kexec boot finds its entry on the command line. A reboot init
        // never prepared (a power cut) leaves neither.
        if let Some(p) = &prepared {
            liken_init::kexec::write_note(&var, p).unwrap();
        }
        let entry = format!("liken-{}.conf", slot.esp_dir());
        let kexec_arg = matches!(prepared, Some(Prepared::Kexec(_))).then_some(entry.as_str());
        let via = liken_init::kexec::decide_via(kexec_arg, liken_init::kexec::take_note(&var));
        self.boot(&machine, &cluster, version, slot, via);
        (machine, cluster)
    }
}

/// The DaemonSet's pod on `node`, once the scheduler and kwok have it.
pub fn daemon_pod(node: &str) -> (String, String) {
    wait_for(
        &format!("the machine operator's pod on {node}"),
        Duration::from_secs(60),
        || {
            let v = get(&format!(
            "/api/v1/namespaces/liken-system/pods?labelSelector=app.kubernetes.io%2Fname%3Dliken-machine-operator&fieldSelector=spec.nodeName%3D{node}"
        ))
        .ok_or("no pod list")?;
            let pod = v["items"].get(0).ok_or("no pod yet")?;
            Ok((
                pod["metadata"]["name"].as_str().unwrap().to_owned(),
                pod["metadata"]["uid"].as_str().unwrap().to_owned(),
            ))
        },
    )
}

/// A kubeconfig holding the machine operator's token as its pod on
/// `node` gets it: a TokenRequest bound to that pod, so the API server
/// records the node in the token's identity.
pub fn operator_kubeconfig(node: &str) -> PathBuf {
    let (pod, uid) = daemon_pod(node);
    let req = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600,
                 "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}}
    });
    let (code, v) = cp()
        .request(
            "POST",
            "/api/v1/namespaces/liken-system/serviceaccounts/liken-machine-operator/token",
            Some(&req),
        )
        .unwrap();
    assert_eq!(code, 201, "TokenRequest: {v}");
    cp().kubeconfig_for_token(
        &format!("machine-operator-{node}"),
        v["status"]["token"].as_str().unwrap(),
    )
    .unwrap()
}

/// A running machine operator.
pub struct Operator {
    child: Child,
    log: PathBuf,
}

impl Operator {
    /// Starts the binary as the DaemonSet would, on `host`'s paths.
    pub fn start(host: &Host, kubeconfig: &Path, extra: &[&str]) -> Operator {
        let log = host.path("operator.log");
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = host
            .operator_command(
                Path::new(env!("CARGO_BIN_EXE_liken-machine-operator")),
                kubeconfig,
            )
            .arg("--resync=1s")
            .arg("--busy-interval=300ms")
            .arg("--heartbeat-interval=10s")
            .args(extra)
            .stderr(out)
            .spawn()
            .unwrap();
        Operator { child, log }
    }

    /// Stops it with SIGTERM, as the kubelet does, and waits; it must
    /// exit 0 having posted every Event it had queued.
    pub fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                // A clean stop, with every queued Event posted.
                let log = self.log_text();
                assert!(
                    status.success(),
                    "the operator exited {status} on SIGTERM:\n{log}"
                );
                let stopped = log.lines().rev().find(|l| l.contains("msg=stopped"));
                assert!(
                    stopped.is_some_and(|l| l.contains("events_abandoned=0")),
                    "the operator stopped without flushing its Events:\n{log}"
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!(
            "the operator did not stop within 20 s of SIGTERM:\n{}",
            self.log_text()
        );
    }

    /// What it logged.
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The address the operator serves metrics on, from the line it logs
/// when it starts serving.
pub fn metrics_address(log: &str) -> Option<String> {
    log.lines()
        .find(|l| l.contains("msg=\"serving metrics\""))
        .and_then(|l| l.split("metrics=").nth(1))
        .and_then(|a| a.split_whitespace().next())
        .map(str::to_owned)
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Grants `name` a reboot turn the way the cluster operator does: the
/// RebootApproved condition added to its status (retrying on conflict).
pub fn grant(name: &str) {
    set_grant(name, true, None);
}

/// Grants `name` a turn that names `purpose` rather than what it asks for
/// (a grant issued before a release was written, or in another boot).
pub fn grant_naming(name: &str, purpose: &liken_api::coordination::TurnPurpose) {
    set_grant(name, true, Some(purpose));
}

/// Takes the turn back: the condition removed.
pub fn reclaim(name: &str) {
    set_grant(name, false, None);
}

fn set_grant(name: &str, on: bool, naming: Option<&liken_api::coordination::TurnPurpose>) {
    let path = format!("/apis/liken.sh/v1alpha1/machines/{name}/status");
    for _ in 0..20 {
        let mut v = get(&format!("/apis/liken.sh/v1alpha1/machines/{name}")).unwrap();
        let conditions = v["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut kept: Vec<Value> = conditions
            .into_iter()
            .filter(|c| c["type"] != liken_api::coordination::REBOOT_APPROVED)
            .collect();
        if on {
            // The grant names what the Machine asks for, as the cluster
            // operator's does.
            let m: liken_api::Machine = serde_json::from_value(v.clone()).unwrap();
            let purpose = naming
                .cloned()
                .unwrap_or_else(|| liken_ops::cluster::rollout::asked_purpose(&m));
            kept.push(json!({
                "type": liken_api::coordination::REBOOT_APPROVED,
                "status": "True",
                "reason": liken_api::coordination::GRANT_REASON,
                "message": liken_api::coordination::grant_message(
                    "granted by the test, as the cluster operator grants", &purpose),
                "lastTransitionTime": Time::from_system(std::time::SystemTime::now()).to_string(),
            }));
        }
        v["status"]["conditions"] = Value::Array(kept);
        let (code, body) = cp().request("PUT", &path, Some(&v)).unwrap();
        match code {
            200 => return,
            409 => std::thread::sleep(Duration::from_millis(100)),
            _ => panic!("PUT {path}: {code} {body}"),
        }
    }
    panic!("could not set the grant on {name}");
}

/// The Events about a Machine, as (reason, note).
pub fn events_about(name: &str) -> Vec<(String, String)> {
    let v = get("/apis/events.k8s.io/v1/namespaces/default/events").unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["regarding"]["name"] == name && e["regarding"]["kind"] == "Machine")
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_owned(),
                e["note"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The notes of the `Booted` Events about a Machine, oldest first, each
/// with how often it was said: a repeat within six minutes would be a
/// series (`series.count`) on one Event rather than a second Event.
pub fn booted_events(name: &str) -> Vec<(String, u64)> {
    let v = get("/apis/events.k8s.io/v1/namespaces/default/events").unwrap();
    let mut out: Vec<(String, String, u64)> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["regarding"]["name"] == name && e["reason"] == "Booted")
        .map(|e| {
            (
                e["eventTime"].as_str().unwrap_or_default().to_owned(),
                e["note"].as_str().unwrap_or_default().to_owned(),
                e["series"]["count"].as_u64().unwrap_or(1),
            )
        })
        .collect();
    out.sort();
    out.into_iter().map(|(_, note, n)| (note, n)).collect()
}

/// Waits until the Machine's operator has said `Booted` once for each of
/// `boots` (boot ids, in order) and never more, each note naming its
/// boot; answers the notes.
pub fn booted_once_per_boot(name: &str, boots: &[liken_api::Sha256Hex]) -> Vec<String> {
    wait_for(
        &format!("{name}'s Booted Events, one per boot"),
        Duration::from_secs(15),
        || {
            let said = booted_events(name);
            let ok = said.len() == boots.len()
                && said.iter().zip(boots).all(|((note, n), id)| {
                    *n == 1 && note.starts_with(&format!("boot {}:", id.short()))
                });
            ok.then(|| said.iter().map(|(note, _)| note.clone()).collect())
                .ok_or_else(|| format!("said {said:#?}"))
        },
    )
}

/// Waits for the Machine to satisfy `check`, showing its status and the
/// operator's log when it does not.
pub fn wait_machine(
    name: &str,
    what: &str,
    op: &Operator,
    within: Duration,
    check: impl Fn(&Machine) -> bool,
) -> Machine {
    wait_for(what, within, || {
        let m = machine(name).ok_or("no Machine")?;
        if check(&m) {
            Ok(m)
        } else {
            Err(format!(
                "phase {:?}\nconditions {:#?}\npending {:#?}\nannotations {:?}\nlog:\n{}",
                m.status.phase,
                m.status.conditions,
                m.status.pending,
                m.metadata.annotations,
                op.log_text()
            ))
        }
    })
}

/// Whether a condition has this reason.
pub fn has_reason(m: &Machine, type_: &str, reason: &str) -> bool {
    condition(m, type_).is_some_and(|(_, r, _)| r == reason)
}

/// Sets up a machine: its Node (kwok), its host, and its operator.
pub fn start_machine(
    name: &str,
    machine: &Machine,
    cluster: &Cluster,
    extra: &[&str],
) -> (Host, Operator) {
    cp().create_node(name, &[]).unwrap();
    let host = Host::new(name, machine, cluster);
    let kc = operator_kubeconfig(name);
    let op = Operator::start(&host, &kc, extra);
    wait_machine(
        name,
        "the machine to be Ready",
        &op,
        Duration::from_secs(60),
        |m| m.status.phase == Some(liken_api::Phase::Ready),
    );
    (host, op)
}

/// Restarts the operator after a reboot.
pub fn restart(host: &Host, extra: &[&str]) -> Operator {
    let kc = operator_kubeconfig(&host.node);
    Operator::start(host, &kc, extra)
}

/// Applies a YAML document as admin.
pub fn apply(yaml: &str) {
    cp().apply(yaml);
}

/// The names of the pods bound to `node` in `namespace` that are not
/// being deleted.
pub fn pods_on(namespace: &str, node: &str) -> Vec<String> {
    let v = get(&format!(
        "/api/v1/namespaces/{namespace}/pods?fieldSelector=spec.nodeName%3D{node}"
    ))
    .unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Writes a small release into `channel/<version>/`: kernel, boot,
/// system, and release.yaml listing them; answers release.yaml's digest.
/// `tamper` changes the system image after release.yaml was written.
pub fn write_release(channel: &Path, version: &str, seed: u64, tamper: bool) -> liken_api::Digest {
    use liken_api::release::{ARTIFACT_BOOT, ARTIFACT_KERNEL, ARTIFACT_SYSTEM, Artifact, Release};
    let dir = channel.join(version);
    fs::create_dir_all(&dir).unwrap();
    let mut artifacts = Vec::new();
    for (i, (name, file)) in [
        (ARTIFACT_KERNEL, "vmlinuz"),
        (ARTIFACT_BOOT, "boot.cpio"),
        (ARTIFACT_SYSTEM, "liken.sqfs"),
    ]
    .into_iter()
    .enumerate()
    {
        let bytes = liken_testenv::scratch::bytes(64 * 1024 + i * 4096, seed + i as u64);
        fs::write(dir.join(file), &bytes).unwrap();
        artifacts.push(Artifact {
            name: name.into(),
            file: liken_api::FileName::parse(file).unwrap(),
            sha256: liken_api::hash::sha256(&bytes),
            size: bytes.len() as u64,
        });
    }
    let release = Release::new(Version::parse(version).unwrap(), artifacts, Vec::new());
    let yaml = liken_api::decode::to_yaml(&release).unwrap();
    fs::write(dir.join("release.yaml"), &yaml).unwrap();
    if tamper {
        let mut bytes = fs::read(dir.join("liken.sqfs")).unwrap();
        bytes[100] ^= 0xff;
        fs::write(dir.join("liken.sqfs"), bytes).unwrap();
    }
    liken_api::Digest::from(liken_api::hash::sha256(yaml.as_bytes()))
}

impl Host {
    /// Republishes the boot record with another assessment (init blessing
    /// the boot, say), keeping the boot's time.
    pub fn assess(&self, assessment: BootAssessment) {
        let mut st = self.state.lock().unwrap();
        let Some(record) = st.record.as_mut() else {
            return;
        };
        record.assessment = Some(assessment);
        let mut json = serde_json::to_vec_pretty(&*record).unwrap();
        json.push(b'\n');
        fs::write(self.path("run/liken/facts/boot.json"), json).unwrap();
    }
}

impl Host {
    /// Publishes init's network facts.
    pub fn publish_network(&self, facts: &liken_api::network::NetworkFacts) {
        fs::write(
            self.path("run/liken/facts/network.json"),
            serde_json::to_vec_pretty(facts).unwrap(),
        )
        .unwrap();
    }
}

/// Signs `channel/<version>/release.yaml` with `key`, writing
/// release.yaml.sig beside it as `liken bundle -sign` does.
pub fn sign_release(channel: &Path, version: &str, key: &liken_api::signing::SigningKey) {
    let dir = channel.join(version);
    let bytes = fs::read(dir.join("release.yaml")).unwrap();
    let sig = serde_yaml::to_string(&key.sign(&bytes)).unwrap();
    fs::write(dir.join("release.yaml.sig"), sig).unwrap();
}

/// Seeds the ConfigMap liken-system/liken-cluster exactly as a leader's
/// init renders it (liken_init::seed), with a trust root of `keys`.
pub fn seed_trust(cluster: &Cluster, keys: &[&liken_api::signing::SigningKey]) {
    let root = liken_api::signing::TrustRoot::new(keys.iter().map(|k| k.public()));
    let text = serde_yaml::to_string(&root).unwrap();
    apply(&liken_init::seed::render_cluster_config_map(
        cluster,
        Some(&text),
    ));
}

/// Sets the Machine's vm.swappiness in the API, as a person would.
pub fn set_swappiness(name: &str, value: &str) {
    patch(
        &["machine", name],
        &json!({"spec": {"sysctls": {"vm.swappiness": value}}}),
    );
}

/// Whether an Event about the Machine with this reason and words in its
/// note arrives (Events are posted from their own thread, after the
/// status write that earned them).
pub fn has_event(name: &str, reason: &str, note_contains: &str) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let found = events_about(name)
            .iter()
            .any(|(r, n)| r == reason && n.contains(note_contains));
        if found || std::time::Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// After init was asked to reboot and before the machine goes down (the
/// double never does by itself), the machine keeps its turn: for a few
/// passes it stays Rebooting on `type_`, cordoned and granted, and lists
/// nothing as waiting (what is under way left status.pending).
pub fn holds_turn_until_down(name: &str, type_: &str) {
    std::thread::sleep(Duration::from_secs(3));
    let m = machine(name).unwrap();
    assert!(
        has_reason(&m, type_, liken_api::coordination::reason::REBOOTING),
        "{name} stopped rebooting before it went down: {:#?}",
        m.status.conditions
    );
    assert!(liken_api::coordination::holds_grant(&m.status.conditions));
    assert!(m.status.pending.is_empty(), "{:?}", m.status.pending);
    assert_eq!(
        get(&format!("/api/v1/nodes/{name}")).unwrap()["spec"]["unschedulable"],
        true,
        "{name} was uncordoned before it went down"
    );
}

/// Sets the Cluster's target release, its channel and its catalog.
pub fn target(source: &str, version: &str, catalog: &[(&str, &liken_api::Digest)]) {
    let catalog: Vec<_> = catalog
        .iter()
        .map(|(v, d)| json!({"version": v, "digest": d.to_string()}))
        .collect();
    patch(
        &["cluster", "home"],
        &json!({"spec": {"version": version, "releases": {"source": source, "catalog": catalog}}}),
    );
}

/// Waits for ReleaseCurrent to carry `want` and words of `says`.
pub fn release_reason(name: &str, op: &Operator, want: &str, says: &str) -> liken_api::Machine {
    wait_machine(
        name,
        &format!("ReleaseCurrent {want}: {says}"),
        op,
        Duration::from_secs(60),
        |m| {
            condition(m, liken_api::coordination::RELEASE_CURRENT)
                .is_some_and(|(_, r, msg)| r == want && msg.contains(says))
        },
    )
}

impl Host {
    /// When this machine was down, judged from what its init double
    /// accepted and when the test brought it back, never from anything an
    /// operator wrote: from an accepted reboot to the reboot the test
    /// carried out next (or to now, if it has not), and a k3s restart as
    /// the instant it was accepted. Overlapping spans are merged.
    pub fn down_intervals(&self) -> Vec<(Instant, Instant)> {
        let st = self.state.lock().unwrap();
        let now = Instant::now();
        let mut spans: Vec<(Instant, Instant)> = st
            .disrupted
            .iter()
            .map(|(at, req)| match req {
                Request::Reboot { .. } => {
                    let up = st.rebooted.iter().find(|r| **r >= *at).copied();
                    (*at, up.unwrap_or(now))
                }
                _ => (*at, *at),
            })
            .collect();
        spans.sort();
        let mut merged: Vec<(Instant, Instant)> = Vec::new();
        for (from, to) in spans {
            match merged.last_mut() {
                Some(last) if from <= last.1 => last.1 = last.1.max(to),
                _ => merged.push((from, to)),
            }
        }
        merged
    }
}

/// Fails unless, at every moment since `start`, at most `max` of `hosts`
/// were down by [`Host::down_intervals`]; the message lists every span,
/// in seconds since `start`.
pub fn assert_down_within(hosts: &[&Host], max: usize, start: Instant) {
    let mut edges: Vec<(Instant, i32, &str)> = Vec::new();
    let mut listing = String::new();
    for h in hosts {
        for (from, to) in h.down_intervals() {
            listing += &format!(
                "  {}: down {:.1}s .. {:.1}s\n",
                h.node,
                from.duration_since(start).as_secs_f64(),
                to.duration_since(start).as_secs_f64()
            );
            // An instant disruption still counts while it lasts.
            edges.push((from, 1, &h.node));
            edges.push((to, -1, &h.node));
        }
    }
    // At equal times the start sorts first, so a span ending exactly when
    // another begins counts as an overlap.
    edges.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut down = 0i32;
    for (at, step, node) in &edges {
        down += step;
        assert!(
            usize::try_from(down).unwrap() <= max,
            "{down} machines down at {:.1}s ({node} went down), over the budget of {max}:\n{listing}",
            at.duration_since(start).as_secs_f64()
        );
    }
}

/// How many of these machines hold a grant now.
pub fn grants(names: &[&str]) -> usize {
    names
        .iter()
        .filter(|n| {
            machine(n).is_some_and(|m| liken_api::coordination::holds_grant(&m.status.conditions))
        })
        .count()
}
