//! What the cluster operator's tests stand on: a real control plane with
//! the shipped manifests applied, the operator as its own binary under its
//! ServiceAccount's token, machines played the way their operators would
//! play them, and a recording of every watch event.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use liken_api::condition::{self, Condition};
use liken_api::coordination::{
    self, HEARTBEAT_LABEL, HEARTBEAT_NAMESPACE, MACHINE_OPERATOR, RELEASE_CURRENT, VERSION_LABEL,
    reason,
};
use liken_api::machine::ReleaseStatus;
use liken_api::signing::{SigningKey, TrustRoot};
use liken_api::{BootStatus, Cluster, ConditionStatus, Machine, Phase, Time, Version};
use liken_kube::request::{CLUSTERS, LEASES, MACHINES};
use liken_kube::{
    Api, Client, Config, DeleteParams, DynamicObject, Event, Object, StopHandle, Watcher,
};
use liken_testenv::spawn::{Proc, spawn};
use liken_testenv::{ControlPlane, Options};
use serde_json::{Value, json};

/// The operator's ServiceAccount user, as the audit log names it.
pub fn operator_user() -> String {
    liken_testenv::audit::service_account_user(HEARTBEAT_NAMESPACE, "liken-cluster-operator")
}

/// A control plane with liken-system, the operator's RBAC and a machine
/// operator DaemonSet in place.
pub struct Env {
    pub cp: ControlPlane,
    pub admin: Client,
    /// A kubeconfig with the operator ServiceAccount's token.
    pub operator_kubeconfig: PathBuf,
}

/// The release tests stamp on manifests and machines.
pub const OLD: &str = "2026.11.01-001";
pub const NEW: &str = "2026.12.01-001";

pub fn v(s: &str) -> Version {
    Version::parse(s).unwrap()
}

pub fn deadline(d: Duration) -> Instant {
    Instant::now() + d
}

impl Env {
    pub fn start() -> Env {
        let cp = liken_testenv::start(Options {
            controller_manager: true,
            audit: true,
            ..Options::default()
        })
        .unwrap_or_else(|e| panic!("liken-testenv: the test control plane is not available: {e}"));
        let admin = Client::new(&Config::from_kubeconfig(cp.kubeconfig(), None).unwrap()).unwrap();
        let root = liken_testenv::workspace_root().join("images/manifests");
        for file in [
            "liken-system.yaml",
            "cluster-operator.yaml",
            "cluster-operator-upkeep.yaml",
        ] {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            apply(&cp, &text.replace("@LIKEN_VERSION@", OLD));
        }
        let env = Env {
            operator_kubeconfig: cp
                .kubeconfig_for(HEARTBEAT_NAMESPACE, "liken-cluster-operator")
                .unwrap(),
            cp,
            admin,
        };
        env.daemon_set(OLD);
        env
    }

    /// Creates or replaces the machine operator's DaemonSet, its template
    /// labelled with `release` (what the manifests a leader applies say).
    pub fn daemon_set(&self, release: &str) {
        let ds = json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": MACHINE_OPERATOR, "namespace": HEARTBEAT_NAMESPACE},
            "spec": {
                "selector": {"matchLabels": {"app": "liken-machine-operator"}},
                "template": {
                    "metadata": {"labels": {"app": "liken-machine-operator", VERSION_LABEL: release}},
                    "spec": {"containers": [{"name": "op",
                        "image": format!("liken.sh/liken-machine-operator:{release}")}]},
                },
            },
        });
        let text = serde_json::to_string(&ds).unwrap();
        apply(&self.cp, &text);
    }

    /// Starts the operator binary as the operator's ServiceAccount.
    pub fn operator(&self, name: &str, extra: &[&str]) -> Operator {
        operator_binary(
            self,
            env!("CARGO_BIN_EXE_liken-cluster-operator"),
            name,
            extra,
        )
    }

    /// The Cluster as stored.
    pub fn cluster(&self, name: &str) -> Cluster {
        self.admin.get(&Api::all(CLUSTERS), name).unwrap()
    }

    /// The Machine as stored.
    pub fn machine(&self, name: &str) -> Machine {
        self.admin.get(&Api::all(MACHINES), name).unwrap()
    }

    /// Creates the Cluster.
    pub fn create_cluster(&self, name: &str, leaders: &[&str], target: &str, budget: u32) {
        let c = json!({
            "apiVersion": "liken.sh/v1alpha1", "kind": "Cluster",
            "metadata": {"name": name},
            "spec": {"endpoint": "https://10.0.0.1:6443", "leaders": leaders,
                     "version": target, "disruptionBudget": {"maxUnavailable": budget}},
        });
        // A running operator creates "home" from the deployment's copy
        // when a scenario cleared it; the scenario's spec then replaces it.
        match self.admin.create::<Cluster, _>(&Api::all(CLUSTERS), &c) {
            Ok(_) => {}
            Err(liken_kube::Error::AlreadyExists { .. }) => {
                for _ in 0..20 {
                    let mut held: DynamicObject =
                        self.admin.get(&Api::all(CLUSTERS), name).unwrap();
                    held.0["spec"] = c["spec"].clone();
                    match self
                        .admin
                        .replace::<Cluster, _>(&Api::all(CLUSTERS), name, &held.0)
                    {
                        Ok(_) => return,
                        Err(e) if e.is_conflict() => {
                            std::thread::sleep(std::time::Duration::from_millis(100));
                        }
                        Err(e) => panic!("replacing Cluster {name}: {e}"),
                    }
                }
                panic!("Cluster {name} kept changing under the test");
            }
            Err(e) => panic!("creating Cluster {name}: {e}"),
        }
    }

    /// Deletes every Machine, Cluster and heartbeat Lease, so a scenario
    /// starts from nothing.
    pub fn clear(&self) {
        for m in self
            .admin
            .list_all::<DynamicObject>(&Api::all(MACHINES), &Default::default())
            .unwrap()
            .items
        {
            let _ = self
                .admin
                .delete(&Api::all(MACHINES), m.name(), &DeleteParams::default());
        }
        for c in self
            .admin
            .list_all::<DynamicObject>(&Api::all(CLUSTERS), &Default::default())
            .unwrap()
            .items
        {
            let _ = self
                .admin
                .delete(&Api::all(CLUSTERS), c.name(), &DeleteParams::default());
        }
        // Events name objects by name; a new Machine "b" must not inherit
        // the last scenario's.
        let (code, v) = self
            .cp
            .request(
                "DELETE",
                "/apis/events.k8s.io/v1/namespaces/default/events",
                None,
            )
            .unwrap();
        assert_eq!(code, 200, "{v}");
        let leases = Api::namespaced(LEASES, HEARTBEAT_NAMESPACE);
        for l in self
            .admin
            .list_all::<DynamicObject>(&leases, &Default::default())
            .unwrap()
            .items
        {
            if l.name() != "liken-cluster-operator" {
                let _ = self
                    .admin
                    .delete(&leases, l.name(), &DeleteParams::default());
            }
        }
    }

    /// Waits until `check` holds of the Cluster, or panics naming `what`.
    pub fn wait_cluster(
        &self,
        name: &str,
        what: &str,
        within: Duration,
        check: impl Fn(&Cluster) -> bool,
    ) -> Cluster {
        let end = deadline(within);
        loop {
            if let Ok(c) = self.admin.get::<Cluster>(&Api::all(CLUSTERS), name)
                && check(&c)
            {
                return c;
            }
            assert!(
                Instant::now() < end,
                "{what}: not within {within:?}; the Cluster is {}",
                self.admin
                    .get::<Cluster>(&Api::all(CLUSTERS), name)
                    .map(|c| serde_json::to_string_pretty(&c).unwrap_or_default())
                    .unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The Events about `name` with `reason` (in default, where Events
    /// about cluster-scoped objects go).
    pub fn events(&self, name: &str, reason: &str) -> Vec<Value> {
        let (code, v) = self
            .cp
            .request(
                "GET",
                "/apis/events.k8s.io/v1/namespaces/default/events",
                None,
            )
            .unwrap();
        assert_eq!(code, 200, "{v}");
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["regarding"]["name"] == name && e["reason"] == reason)
            .cloned()
            .collect()
    }
}

/// The release-signing key the tests' deployment trusts.
pub fn release_key() -> SigningKey {
    liken_api::signing::key_pair([7; 32]).0
}

/// Starts `binary` as the operator's ServiceAccount, with [`FAST`] and
/// then `extra` (a later flag wins).
pub fn operator_binary(env: &Env, binary: &str, name: &str, extra: &[&str]) -> Operator {
    operator_binary_via(env, binary, name, &env.operator_kubeconfig, extra)
}

/// [`operator_binary`] with another kubeconfig for the same
/// ServiceAccount (one that points at a proxy, say).
pub fn operator_binary_via(
    env: &Env,
    binary: &str,
    name: &str,
    kubeconfig: &std::path::Path,
    extra: &[&str],
) -> Operator {
    let log = env.cp.dir().join(format!("{name}.log"));
    // The deployment's copy of the Cluster, as the Deployment mounts it
    // from the ConfigMap init seeds: the fleet's Cluster is "home".
    let copy = env.cp.dir().join("deployment-cluster.yaml");
    std::fs::write(
        &copy,
        "apiVersion: liken.sh/v1alpha1\nkind: Cluster\nmetadata: {name: home}\n\
         spec: {endpoint: \"https://10.0.0.1:6443\", leaders: [a]}\n",
    )
    .unwrap();
    // And its trust root, beside it in the same ConfigMap.
    let trust = env.cp.dir().join("deployment-trust.yaml");
    std::fs::write(
        &trust,
        serde_yaml::to_string(&TrustRoot::new([release_key().public()])).unwrap(),
    )
    .unwrap();
    let mut cmd = Command::new(binary);
    cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--cluster-file={}", copy.display()))
        .arg(format!("--trust-file={}", trust.display()))
        .arg("--metrics-address=127.0.0.1:0")
        .arg(format!("--identity={name}"))
        .args(FAST)
        .args(extra)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(File::create(&log).unwrap())
        .stderr(File::create(&log).unwrap());
    let proc = spawn(name, cmd).unwrap();
    Operator { proc, log }
}

/// Intervals short enough for tests: sweeps every second, heartbeats
/// stale after 3 s, a turn stalled after 4 s, a 3 s election term.
pub const FAST: &[&str] = &[
    "--sweep-interval=1s",
    "--heartbeat-stale-after=3s",
    "--rollout-stall-after=4s",
    "--lease-duration=3s",
    "--renew-deadline=2s",
    "--retry-period=500ms",
];

/// The stale limit in [`FAST`].
pub const STALE: Duration = Duration::from_secs(3);

fn apply(cp: &ControlPlane, text: &str) {
    cp.apply(text);
}

/// A running operator process.
pub struct Operator {
    pub proc: Proc,
    pub log: PathBuf,
}

impl Operator {
    fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.proc.pid() as i32);
        nix::sys::signal::kill(pid, sig).unwrap();
    }

    /// SIGSTOP: the process freezes wherever it is.
    pub fn pause(&self) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
    }

    /// SIGKILL: gone mid-sweep, with no step-down and no last write.
    pub fn kill(&self) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
    }

    /// SIGTERM, then waits for the exit; answers the exit status.
    pub fn terminate(&mut self, within: Duration) -> std::process::ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let end = deadline(within);
        loop {
            if let Some(status) = self.proc.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < end,
                "the operator did not stop within {within:?}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// What a played machine is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do; Ready.
    Idle,
    /// Staged a release; asks for a turn.
    Asking,
    /// Holds its grant; draining.
    Draining(Instant),
    /// Rebooting until then (no heartbeat).
    Rebooting(Instant),
}

/// One played machine.
#[derive(Clone, Debug)]
pub struct Sim {
    pub step: Step,
    /// Whether its heartbeat is renewed.
    pub up: bool,
    /// The release it runs.
    pub running: String,
    /// The release to boot on its next turn.
    pub staged: Option<String>,
    /// Whether its next boot of the staged release falls back.
    pub fails: bool,
    /// How long a reboot keeps it silent.
    pub reboot_for: Duration,
    /// Its boot time (unix seconds).
    pub boot: i64,
}

impl Sim {
    pub fn ready(running: &str) -> Sim {
        Sim {
            step: Step::Idle,
            up: true,
            running: running.into(),
            staged: None,
            fails: false,
            reboot_for: Duration::from_millis(500),
            boot: 1_790_000_000,
        }
    }
}

/// Plays machines the way their operators would: renews their heartbeat
/// Leases, asks for turns, acts on grants (drain, reboot, come back) and
/// writes their statuses with the resourceVersion it read, carrying the
/// grant along.
pub struct Player {
    pub sims: Arc<Mutex<BTreeMap<String, Sim>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Player {
    pub fn start(env: &Env, sims: BTreeMap<String, Sim>) -> Player {
        let admin = env.admin.clone();
        for name in sims.keys() {
            let m = json!({"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
                           "metadata": {"name": name}, "spec": {}});
            let created: Machine = admin.create(&Api::all(MACHINES), &m).unwrap();
            let lease = json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": HEARTBEAT_NAMESPACE,
                             "labels": {HEARTBEAT_LABEL: "true"},
                             "ownerReferences": [{"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
                                                  "name": name, "uid": created.metadata.uid}]},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                         "renewTime": liken_kube::microtime::now()},
            });
            admin
                .create::<DynamicObject, _>(&Api::namespaced(LEASES, HEARTBEAT_NAMESPACE), &lease)
                .unwrap();
        }
        let sims = Arc::new(Mutex::new(sims));
        let stop = Arc::new(AtomicBool::new(false));
        // Heartbeats on a thread of their own, as a machine operator renews
        // its Lease apart from its passes: on a loaded machine the status
        // writes of a tick could otherwise hold every renewal back past
        // the tests' 3 s stale limit.
        let (t_sims, t_stop, t_admin) = (sims.clone(), stop.clone(), admin.clone());
        let heartbeats = std::thread::spawn(move || {
            while !t_stop.load(Ordering::SeqCst) {
                let up: Vec<String> = t_sims
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|(_, s)| s.up)
                    .map(|(n, _)| n.clone())
                    .collect();
                for name in up {
                    let _ = t_admin.merge_patch::<DynamicObject>(
                        &Api::namespaced(LEASES, HEARTBEAT_NAMESPACE),
                        &name,
                        &json!({"spec": {"renewTime": liken_kube::microtime::now()}}),
                    );
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        });
        let (t_sims, t_stop) = (sims.clone(), stop.clone());
        let passes = std::thread::spawn(move || {
            while !t_stop.load(Ordering::SeqCst) {
                let names: Vec<String> = t_sims.lock().unwrap().keys().cloned().collect();
                for name in names {
                    play(&admin, &t_sims, &name);
                }
                std::thread::sleep(Duration::from_millis(150));
            }
        });
        let p = Player {
            sims,
            stop,
            threads: vec![heartbeats, passes],
        };
        // The first statuses land before the test goes on.
        std::thread::sleep(Duration::from_millis(400));
        p
    }

    pub fn with<R>(&self, name: &str, f: impl FnOnce(&mut Sim) -> R) -> R {
        f(self.sims.lock().unwrap().get_mut(name).unwrap())
    }
}

impl Drop for Player {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn cond(type_: &str, status: ConditionStatus, reason: &str) -> Condition {
    Condition::new(type_, status, reason, "played by the test")
}

/// One tick of one played machine.
fn play(admin: &Client, sims: &Mutex<BTreeMap<String, Sim>>, name: &str) {
    // Held for the whole tick, so a test's change (`Player::with`) is
    // never overwritten by a tick that read the machine before it.
    let mut all = sims.lock().unwrap();
    let sim = all.get_mut(name).unwrap();
    let now = Instant::now();
    if let Step::Rebooting(until) = sim.step
        && now >= until
    {
        // Back from the reboot: the staged release, or the old one when
        // its boot fell back.
        sim.up = true;
        sim.boot += 60;
        let staged = sim.staged.take();
        if sim.fails {
            // The fallback: the operator finds the target still not
            // running and asks again.
            sim.staged = staged;
            sim.step = Step::Asking;
        } else {
            sim.running = staged.unwrap_or_else(|| sim.running.clone());
            sim.step = Step::Idle;
        }
    }
    let Ok(m) = admin.get::<Machine>(&Api::all(MACHINES), name) else {
        return;
    };
    if !sim.up {
        return;
    }
    let granted = coordination::holds_grant(&m.status.conditions);
    match sim.step {
        Step::Asking if granted => sim.step = Step::Draining(now),
        Step::Draining(since) if now.duration_since(since) > Duration::from_millis(300) => {
            sim.step = Step::Rebooting(now + sim.reboot_for);
        }
        _ => {}
    }
    let (phase, status_, why) = match sim.step {
        Step::Idle => (Phase::Ready, ConditionStatus::True, reason::CONVERGED),
        Step::Asking => (
            Phase::UpdatePending,
            ConditionStatus::False,
            reason::AWAITING_TURN,
        ),
        Step::Draining(_) => (Phase::Updating, ConditionStatus::False, reason::DRAINING),
        Step::Rebooting(_) => (Phase::Updating, ConditionStatus::False, reason::REBOOTING),
    };
    let mut status = m.status.clone();
    // Its own conditions set, every other (the grant) carried along.
    let stamp = Time::from_system(SystemTime::now());
    for type_ in [RELEASE_CURRENT, coordination::READY] {
        condition::set(&mut status.conditions, cond(type_, status_, why), stamp);
    }
    status.phase = Some(phase);
    status.boot = Some(BootStatus {
        time: Some(Time::from_unix(sim.boot)),
        ..BootStatus::default()
    });
    status.release = Some(ReleaseStatus {
        running: Some(v(&sim.running)),
        staged: sim.staged.as_deref().map(v),
        target: None,
    });
    let written = if status == m.status {
        true
    } else {
        // Its heartbeat first, as a returning machine operator renews
        // before it reports, so no status arrives while its Lease is stale.
        let _ = admin.merge_patch::<DynamicObject>(
            &Api::namespaced(LEASES, HEARTBEAT_NAMESPACE),
            name,
            &json!({"spec": {"renewTime": liken_kube::microtime::now()}}),
        );
        let mut body = m.clone();
        body.status = status;
        // Conditioned on the version read: a grant that landed since makes
        // this a conflict, and the next tick carries it.
        admin
            .replace_status::<Machine, _>(&Api::all(MACHINES), name, &body)
            .is_ok()
    };
    if written && matches!(sim.step, Step::Rebooting(_)) {
        // It said it reboots; now it is silent until it is back.
        sim.up = false;
    }
}

/// Every event of a watch on Machines and on Clusters, recorded from
/// before a scenario starts.
pub struct History {
    pub machines: Arc<Mutex<Vec<Event<Machine>>>>,
    pub clusters: Arc<Mutex<Vec<Event<Cluster>>>>,
    stops: Vec<StopHandle>,
    threads: Vec<JoinHandle<()>>,
}

impl History {
    pub fn record(env: &Env) -> History {
        let machines = Arc::new(Mutex::new(Vec::new()));
        let clusters = Arc::new(Mutex::new(Vec::new()));
        let mut stops = Vec::new();
        let mut threads = Vec::new();
        {
            let mut w = Watcher::<Machine>::new(env.admin.clone(), Api::all(MACHINES));
            stops.push(w.stopper());
            let sink = machines.clone();
            threads.push(std::thread::spawn(move || {
                w.run(&mut |e| sink.lock().unwrap().push(e))
            }));
        }
        {
            let mut w = Watcher::<Cluster>::new(env.admin.clone(), Api::all(CLUSTERS));
            stops.push(w.stopper());
            let sink = clusters.clone();
            threads.push(std::thread::spawn(move || {
                w.run(&mut |e| sink.lock().unwrap().push(e))
            }));
        }
        let end = deadline(Duration::from_secs(10));
        while (machines.lock().unwrap().is_empty() || clusters.lock().unwrap().is_empty())
            && Instant::now() < end
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        History {
            machines,
            clusters,
            stops,
            threads,
        }
    }

    /// Stops recording.
    pub fn stop(mut self) -> (Vec<Event<Machine>>, Vec<Event<Cluster>>) {
        for s in &self.stops {
            s.stop();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let m = std::mem::take(&mut *self.machines.lock().unwrap());
        let c = std::mem::take(&mut *self.clusters.lock().unwrap());
        (m, c)
    }
}

/// Whether a machine counts against the budget: it holds a grant, or it
/// is down (Lost, Booting, Updating).
pub fn disrupting(m: &Machine) -> bool {
    coordination::holds_grant(&m.status.conditions)
        || matches!(
            m.status.phase,
            Some(Phase::Lost | Phase::Booting | Phase::Updating)
        )
}

/// Replays the Machines' history and answers the most machines ever
/// disrupting at once, with the moment (the event index and names).
pub fn peak_disruption(events: &[Event<Machine>]) -> (usize, String) {
    let mut now: BTreeMap<String, Machine> = BTreeMap::new();
    let mut peak = (0, String::new());
    for (i, e) in events.iter().enumerate() {
        match e {
            Event::Restarted(items) => {
                now = items
                    .iter()
                    .map(|m| (m.metadata.name.clone(), m.clone()))
                    .collect();
            }
            Event::Applied(m) => {
                now.insert(m.metadata.name.clone(), m.clone());
            }
            Event::Deleted(m) => {
                now.remove(&m.metadata.name);
            }
            Event::Unreadable(_) => {}
        }
        let down: Vec<&str> = now
            .values()
            .filter(|m| disrupting(m))
            .map(|m| m.metadata.name.as_str())
            .collect();
        if down.len() > peak.0 {
            peak = (down.len(), format!("event {i}: {}", down.join(", ")));
        }
    }
    peak
}

/// Every Machine state in the history that holds a grant while the
/// Cluster's ledger, as last stored before it, does not list that
/// machine: the grant went out before (or outlived) its ledger entry.
///
/// The two watches are replayed in the order etcd wrote them: Machines
/// and Clusters live in the test's one etcd, whose revision (the
/// resourceVersion it serves, opaque to clients but a single counter
/// here) orders every write to both.
pub fn grants_outside_the_ledger(
    machines: &[Event<Machine>],
    clusters: &[Event<Cluster>],
) -> Vec<String> {
    let revision = |rv: &str| -> u64 {
        rv.parse()
            .unwrap_or_else(|_| panic!("resourceVersion {rv:?} is not an etcd revision"))
    };
    // (revision, the machines the ledger lists from then on).
    let mut ledgers: Vec<(u64, Vec<String>)> = Vec::new();
    let mut record = |c: &Cluster, deleted: bool| {
        let names = if deleted {
            Vec::new()
        } else {
            c.status
                .reboot_turns
                .iter()
                .map(|t| t.machine.clone())
                .collect()
        };
        ledgers.push((revision(&c.metadata.resource_version), names));
    };
    for e in clusters {
        match e {
            Event::Restarted(items) => items.iter().for_each(|c| record(c, false)),
            Event::Applied(c) => record(c, false),
            Event::Deleted(c) => record(c, true),
            Event::Unreadable(_) => {}
        }
    }
    ledgers.sort_by_key(|(rv, _)| *rv);
    let holding = machines.iter().flat_map(|e| match e {
        Event::Restarted(items) => items.iter().collect::<Vec<_>>(),
        Event::Applied(m) => vec![m],
        _ => vec![],
    });
    holding
        .filter(|m| coordination::holds_grant(&m.status.conditions))
        .filter_map(|m| {
            let at = revision(&m.metadata.resource_version);
            let before = ledgers.iter().rev().find(|(rv, _)| *rv < at);
            let listed = before.is_some_and(|(_, names)| names.contains(&m.metadata.name));
            (!listed).then(|| {
                format!(
                    "{} holds a grant at revision {at}; the ledger before it: {:?}",
                    m.metadata.name, before
                )
            })
        })
        .collect()
}

/// The longest ledger the Cluster's history ever held.
pub fn peak_ledger(events: &[Event<Cluster>]) -> usize {
    events
        .iter()
        .map(|e| match e {
            Event::Restarted(items) => items
                .iter()
                .map(|c| c.status.reboot_turns.len())
                .max()
                .unwrap_or(0),
            Event::Applied(c) => c.status.reboot_turns.len(),
            _ => 0,
        })
        .max()
        .unwrap_or(0)
}

/// The operator's /metrics text (its address is in its log).
pub fn metrics_text(op: &Operator) -> String {
    let log = op.log_text();
    let addr = log
        .lines()
        .find_map(|l| l.split("metrics=").nth(1))
        .map(|a| a.split_whitespace().next().unwrap_or_default().to_owned())
        .expect("the operator logs its metrics address");
    liken_testenv::exposition::scrape(&addr)
}

pub use liken_testenv::exposition::metric;

/// How many sweeps the operator has run.
pub fn sweeps(op: &Operator) -> f64 {
    metric(&metrics_text(op), "liken_reconcile_duration_seconds_count")
}
