//! The loop: watches feed stores and wake it, each pass reads the facts,
//! decides ([`crate::machine::pass`]) and carries the verdict out. This
//! is the one place that writes, and it writes only what changed.
//!
//! The order of a pass's writes follows what other programs rely on:
//! staged files before the status lists them as pending; the status that
//! says Rebooting before init is asked, so the cluster operator sees the
//! turn in use (and never reclaims it) before the machine goes down; the
//! spent annotations removed just before init is asked; Events posted
//! after the status write lands, so a refused write posts nothing and
//! the next pass finds the same transition again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, select};
use liken_api::control::Request;
use liken_api::coordination::{self, GrantFor, K3S_CONFIGURED, reason};
use liken_api::machine::DisruptionKind;
use liken_api::ondisk::Document;
use liken_api::{Cluster, Machine, RebootVia, Time, annotations};
use liken_kube::events::{EventType, ObjectReference, Recorder, RecorderConfig};
use liken_kube::metrics::{self, Counter, Gauge, Registry};
use liken_kube::request::{CLUSTERS, MACHINES, NODES, PODS};
use liken_kube::{
    Api, Client, DeleteParams, DynamicObject, Error, Informer, ListParams, PatchOp, Store, Watcher,
    json_pointer,
};

use crate::fleet_cluster::{FOREIGN_REASON, decide_cluster, foreign_note};
use crate::kinds::{Node, Pod};
use crate::machine::approval::{Approval, RebootRequest};
use crate::machine::download::Downloads;
use crate::machine::drain::{Refusal, decide_drain};
use crate::machine::flags::Config;
use crate::machine::heartbeat::{Heartbeat, HeartbeatMetrics, Owner};
use crate::machine::host;
use crate::machine::init_client::{InitClient, InitError};
use crate::machine::node::node_patch;
use crate::machine::pass::{Pass, PassInput, Staging, decide_pass};
use crate::machine::release::Worker;
use crate::machine::seed::{Seeded, seed_machine};
use crate::machine::status::{compose, decide_booted, decide_released, transition_events};
use crate::machine::turn::{
    Asked, Refused, TurnStep, cordon_patch, decide_same_ask, uncordon_patch,
};
use crate::runtime::log;
use crate::runtime::signals::{self, Stop};
use crate::runtime::start;
use crate::windows::{ZONEINFO, Zones, machine_note};

/// The component name in logs, metrics, the User-Agent and Events.
pub const COMPONENT: &str = "liken-machine-operator";
/// The Events' reporting controller.
pub const CONTROLLER: &str = "liken.sh/machine-operator";

/// Event reasons that are not condition transitions (a transition's
/// Event takes the condition's reason).
pub mod event_reason {
    /// A changed document was written into staged/.
    pub const STAGED: &str = "ChangeStaged";
    /// A person's approval was recognised.
    pub const APPROVED: &str = "DisruptionApproved";
    /// An approval that names nothing pending was removed.
    pub const APPROVAL_IGNORED: &str = "ApprovalIgnored";
    /// A reboot request that names another boot was removed.
    pub const REQUEST_IGNORED: &str = "RebootRequestIgnored";
    /// The cluster's grant was taken up: cordoning and draining.
    pub const TURN_TAKEN: &str = "TurnTaken";
    /// init was asked to reboot.
    pub const REBOOTING: &str = "Rebooting";
    /// init was asked to restart k3s.
    pub const RESTARTING: &str = "RestartingK3s";
    /// A release written before its rollout halted was disarmed.
    pub const DISARMED: &str = "ReleaseDisarmed";
    /// init refused (or did not answer) a disruption.
    pub const INIT_REFUSED: &str = "InitRefused";
    /// The node was uncordoned after the turn.
    pub const UNCORDONED: &str = "Uncordoned";
    /// The Machine or the Cluster was created from the booted documents.
    pub const SEEDED: &str = "Seeded";
    /// The first status write of a new boot: its release, slot and how
    /// it was reached (kexec, or the firmware and why).
    pub const BOOTED: &str = "Booted";
}

/// Why the operator stopped.
#[derive(Debug)]
pub enum OperatorError {
    /// The flags.
    Flags(crate::runtime::flags::FlagError),
    /// The credentials or the client.
    Config(liken_kube::ConfigError),
    /// Setting up (signals, metrics, threads).
    Setup(String),
}

impl std::fmt::Display for OperatorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OperatorError::Flags(e) => write!(f, "{e}"),
            OperatorError::Config(e) => write!(f, "{e}"),
            OperatorError::Setup(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for OperatorError {}

/// The operator's own metrics.
struct OperatorMetrics {
    standard: metrics::Standard,
    status_writes: Counter,
    phase: Vec<(liken_api::Phase, Gauge)>,
    pending: Gauge,
    evictions: Counter,
    refusals: Counter,
}

impl OperatorMetrics {
    fn register(registry: &Registry) -> OperatorMetrics {
        OperatorMetrics {
            standard: metrics::standard(registry),
            status_writes: registry.counter(
                "liken_machine_status_writes_total",
                "Writes of this Machine's status (only when it changed).",
                &[],
            ),
            phase: liken_api::Phase::ALL
                .iter()
                .map(|p| {
                    (
                        *p,
                        registry.gauge(
                            "liken_machine_phase",
                            "1 for this machine's phase, 0 for the others.",
                            &[("phase", p.as_str())],
                        ),
                    )
                })
                .collect(),
            pending: registry.gauge(
                "liken_machine_pending_disruptions",
                "Staged changes waiting for their disruption.",
                &[],
            ),
            evictions: registry.counter(
                "liken_machine_evictions_total",
                "Pods evicted by drains.",
                &[],
            ),
            refusals: registry.counter(
                "liken_machine_eviction_refusals_total",
                "Evictions a PodDisruptionBudget (or anything else) refused.",
                &[],
            ),
        }
    }

    fn observe(&self, pass: &Pass) {
        for (p, g) in &self.phase {
            g.set(if *p == pass.phase { 1.0 } else { 0.0 });
        }
        self.pending.set(pass.waiting.len() as f64);
    }
}

/// The watched objects.
struct Watches {
    machines: Informer<Machine>,
    clusters: Informer<Cluster>,
    nodes: Informer<Node>,
}

impl Watches {
    fn start(
        client: &Client,
        machine: &str,
        node: &str,
        registry: &Registry,
        wake: crossbeam_channel::Sender<()>,
    ) -> Watches {
        let machines = Informer::spawn(
            Watcher::new(client.clone(), Api::all(MACHINES))
                .fields(&format!("metadata.name={machine}")),
            wake.clone(),
        );
        let clusters = Informer::spawn(
            Watcher::new(client.clone(), Api::all(CLUSTERS)),
            wake.clone(),
        );
        let nodes = Informer::spawn(
            Watcher::new(client.clone(), Api::all(NODES)).fields(&format!("metadata.name={node}")),
            wake,
        );
        machines.stats().register(registry, "machines");
        clusters.stats().register(registry, "clusters");
        nodes.stats().register(registry, "nodes");
        Watches {
            machines,
            clusters,
            nodes,
        }
    }

    fn wait_synced(&self, within: Duration) -> bool {
        self.machines.store().wait_synced(within)
            && self.clusters.store().wait_synced(within)
            && self.nodes.store().wait_synced(within)
    }

    fn stop(self) {
        self.machines.stop();
        self.clusters.stop();
        self.nodes.stop();
    }
}

/// Everything a pass uses.
struct Operator {
    cfg: Config,
    client: Client,
    recorder: Recorder,
    init: InitClient,
    machine: String,
    machines: Store<Machine>,
    clusters: Store<Cluster>,
    nodes: Store<Node>,
    downloads: Option<Downloads>,
    refusals: BTreeMap<String, Refusal>,
    /// The foreign Clusters already reported (crate::fleet_cluster).
    foreign_reported: BTreeSet<String>,
    /// The Machine as the last status write returned it, newer than the
    /// store until the watch delivers it.
    written: Option<Machine>,
    metrics: OperatorMetrics,
    owner: Option<Arc<Mutex<Owner>>>,
    /// The tz database the maintenance windows are judged by.
    zones: Zones,
}

/// Runs the operator until SIGTERM.
pub fn run(values: crate::runtime::flags::Values) -> Result<(), OperatorError> {
    log::init(COMPONENT);
    let cfg = Config::from_values(&values).map_err(OperatorError::Flags)?;
    let stop = signals::listen().map_err(|e| OperatorError::Setup(e.to_string()))?;
    let (client, registry) =
        start::connect(COMPONENT, cfg.kubeconfig.as_deref(), &[("node", &cfg.node)])
            .map_err(OperatorError::Config)?;
    let metrics = OperatorMetrics::register(&registry);
    let _server = start::serve_metrics(cfg.metrics_address.as_deref(), &registry)
        .map_err(|e| OperatorError::Setup(e.to_string()))?;
    let recorder = Recorder::start(
        client.clone(),
        RecorderConfig::new(CONTROLLER, cfg.node.clone()),
    )
    .map_err(OperatorError::Setup)?;
    let init = InitClient::new(&cfg.paths.socket());

    // Which Machine this is: the flag, else the document init booted
    // with, once init has published it.
    let Some(machine) = wait_for_machine_name(&cfg, &stop) else {
        recorder.shutdown(cfg.shutdown_flush);
        return Ok(());
    };
    log::info("serving", &[("machine", &machine)]);

    let (wake_tx, wake) = liken_kube::wake_channel();
    let watches = Watches::start(&client, &machine, &cfg.node, &registry, wake_tx.clone());
    let mut op = Operator {
        machines: watches.machines.store(),
        clusters: watches.clusters.store(),
        nodes: watches.nodes.store(),
        downloads: None,
        refusals: BTreeMap::new(),
        foreign_reported: BTreeSet::new(),
        written: None,
        metrics,
        owner: None,
        zones: Zones::new(ZONEINFO),
        cfg: cfg.clone(),
        client: client.clone(),
        recorder,
        init,
        machine,
    };
    if !watches.wait_synced(Duration::from_secs(30)) {
        log::warn(
            "the watches have not listed yet; passing on what they have",
            &[],
        );
    }
    op.seed();
    if !cfg.once {
        let trust_client = client.clone();
        op.downloads = Some(Downloads::start(
            cfg.paths.clone(),
            InitClient::new(&cfg.paths.socket()),
            Box::new(move || crate::machine::trust::read_deployed(&trust_client)),
            wake_tx,
        ));
    }

    let mut heartbeat: Option<Heartbeat> = None;
    loop {
        // Before the pass: the Lease is renewed before this boot's first
        // status write (see Heartbeat::start). Until the Machine is in the
        // store there is no owner to renew for, and the next loop tries.
        if heartbeat.is_none() && !cfg.once {
            heartbeat = op.start_heartbeat(&registry);
        }
        let started = Instant::now();
        let busy = op.pass();
        op.metrics
            .standard
            .reconcile_duration
            .observe_duration(started.elapsed());
        if cfg.once {
            break;
        }
        let wait = if busy { cfg.busy_interval } else { cfg.resync };
        select! {
            recv(wake) -> _ => {}
            recv(stop) -> s => {
                log::info("stopping", &[("signal", &format!("{:?}", s.unwrap_or(Stop::Terminate)))]);
                break;
            }
            default(wait) => {}
        }
    }
    if let Some(h) = heartbeat {
        h.stop();
    }
    if let Some(d) = op.downloads.take() {
        d.stop();
    }
    watches.stop();
    let report = op.recorder.shutdown(cfg.shutdown_flush);
    log::info(
        "stopped",
        &[
            ("events_posted", &report.posted),
            ("events_abandoned", &report.abandoned),
        ],
    );
    Ok(())
}

/// Waits for the Machine's name: `--machine`, or the running document's.
fn wait_for_machine_name(cfg: &Config, stop: &Receiver<Stop>) -> Option<String> {
    if let Some(m) = &cfg.machine {
        return Some(m.clone());
    }
    let mut said = false;
    loop {
        let facts = host::read_facts(&cfg.paths, Err(String::new()));
        match facts.running_machine {
            Ok(Some(m)) => return Some(m.metadata.name),
            other => {
                if !said {
                    let why = match other {
                        Err(e) => e,
                        _ => format!(
                            "{} is not there yet",
                            cfg.paths.running(Document::Machine).display()
                        ),
                    };
                    log::warn("waiting for the Machine init booted with", &[("why", &why)]);
                    said = true;
                }
            }
        }
        if cfg.once {
            return None;
        }
        select! {
            recv(stop) -> _ => return None,
            default(cfg.busy_interval) => {}
        }
    }
}

fn machine_ref(m: &Machine) -> ObjectReference {
    ObjectReference::machine(m)
}

impl Operator {
    fn event(&self, m: &Machine, kind: EventType, reason: &str, note: &str) {
        self.recorder
            .event(machine_ref(m), kind, reason, "Reconcile", note);
    }

    /// Creates the Machine from the booted document when the API does not
    /// have it. Never the Cluster: that is the cluster operator's, from
    /// the leader's copy (crate::fleet_cluster).
    fn seed(&mut self) {
        let facts = host::read_facts(&self.cfg.paths, Err(String::new()));
        if let Ok(Some(running)) = &facts.running_machine
            && running.metadata.name == self.machine
            && self.machines.get(&self.machine).is_none()
        {
            match seed_machine(&self.client, running) {
                Ok(Seeded::Created) => {
                    log::info(
                        "created the Machine from the booted document",
                        &[("machine", &self.machine)],
                    );
                }
                Ok(Seeded::Existed) => {}
                Err(e) => log::warn(
                    "seeding the Machine failed; the next pass tries again",
                    &[("err", &e)],
                ),
            }
        }
    }

    /// The fleet's Cluster: the one named by the Cluster document this
    /// boot runs (the deployment's name), never another. Each other
    /// Cluster gets one Warning Event from this process.
    fn fleet_cluster(&mut self, facts: &crate::machine::facts::Facts) -> Option<Cluster> {
        let Ok(Some(running)) = &facts.running_cluster else {
            return None;
        };
        let name = &running.metadata.name;
        let chosen = decide_cluster(name, &self.clusters.list());
        for foreign in chosen.foreign {
            if !self.foreign_reported.insert(foreign.clone()) {
                continue;
            }
            if let Some(c) = self.clusters.get(&foreign) {
                log::warn(
                    "ignoring a Cluster the deployment does not name",
                    &[("cluster", &foreign), ("fleet", name)],
                );
                self.recorder.event(
                    ObjectReference::cluster(&c),
                    EventType::Warning,
                    FOREIGN_REASON,
                    "Ignore",
                    &foreign_note(&foreign, name),
                );
            }
        }
        chosen.ours.map(|c| (*c).clone())
    }

    fn start_heartbeat(&mut self, registry: &Registry) -> Option<Heartbeat> {
        let m = self.current_machine()?;
        let owner = Owner {
            machine: m.metadata.name.clone(),
            uid: m.metadata.uid.clone(),
            node: self.cfg.node.clone(),
        };
        let shared = Arc::new(Mutex::new(owner));
        self.owner = Some(shared.clone());
        let metrics = HeartbeatMetrics {
            renewals: registry.counter(
                "liken_heartbeat_renewals_total",
                "Heartbeat Lease renewals.",
                &[],
            ),
            failures: registry.counter(
                "liken_heartbeat_failures_total",
                "Heartbeat Lease renewals that failed.",
                &[],
            ),
            last: registry.gauge(
                "liken_heartbeat_last_renewal_seconds",
                "When the heartbeat Lease was last renewed, Unix time.",
                &[],
            ),
        };
        match Heartbeat::start(self.client.clone(), shared, self.cfg.heartbeat, metrics) {
            Ok(h) => Some(h),
            Err(e) => {
                log::warn("starting the heartbeat thread failed", &[("err", &e)]);
                None
            }
        }
    }

    /// The Machine: the store's copy, or the copy the last status write
    /// returned when the watch has not caught up with it.
    fn current_machine(&self) -> Option<Machine> {
        let stored = self.machines.get(&self.machine).map(|m| (*m).clone());
        match (stored, &self.written) {
            (Some(s), Some(w)) if rv(w) > rv(&s) => Some(w.clone()),
            (Some(s), _) => Some(s),
            (None, w) => w.clone(),
        }
    }

    /// One pass; answers whether the machine is busy (a turn or a
    /// download under way), so the loop looks again sooner.
    fn pass(&mut self) -> bool {
        let Some(mut machine) = self.current_machine() else {
            log::warn(
                "the Machine is not in the API yet",
                &[("machine", &self.machine)],
            );
            self.seed();
            return true;
        };
        if let Some(owner) = &self.owner
            && let Ok(mut o) = owner.lock()
            && o.uid != machine.metadata.uid
        {
            o.uid = machine.metadata.uid.clone();
        }
        let node = self.nodes.get(&self.cfg.node).map(|n| (*n).clone());
        let init = self.init.status().map_err(|e| e.to_string());
        let facts = host::read_facts(&self.cfg.paths, init);
        let cluster = self.fleet_cluster(&facts);
        let worker = self
            .downloads
            .as_ref()
            .map_or(Worker::Idle, Downloads::state);
        let now = Time::from_system(std::time::SystemTime::now());
        let window = machine_note(&mut self.zones, cluster.as_ref(), &machine, now);
        let mut pass = decide_pass(PassInput {
            machine: &machine,
            cluster: cluster.as_ref(),
            node: node.as_ref(),
            facts: &facts,
            worker: &worker,
            now,
            window: window.as_deref(),
        });

        if !pass.blind {
            self.carry_out_staging(&machine, &pass);
            self.spend_stale_annotations(&mut machine, &pass);
            if let (Some(drift), Some(n)) = (&pass.node_patch, &node) {
                let patch = node_patch(n, drift, machine.spec.k3s.as_ref());
                match self.client.merge_patch::<DynamicObject>(
                    &Api::all(NODES),
                    &n.metadata.name,
                    &patch,
                ) {
                    Ok(_) => log::info(
                        "patched the Node's labels and taints",
                        &[("node", &n.metadata.name)],
                    ),
                    Err(e) => pass.not_applied(
                        K3S_CONFIGURED,
                        &format!("patching the Node's labels and taints failed: {e}"),
                    ),
                }
            }
            if let (Some(d), Some(c)) = (&self.downloads, &cluster) {
                d.ask(&pass.intent, c, pass.boot_id.as_ref());
            }
            if pass.disarm
                && let Some(w) = &facts.written
            {
                self.disarm_release(&machine, w);
            }
        }
        // Every disruptive step (cordon, drain, init's request) first
        // reads the Machine fresh: the grant must still be there and name
        // exactly what this turn applies.
        if !pass.blind && pass.disrupts() {
            self.check_grant(&mut pass);
        }
        let disrupt = if pass.blind {
            None
        } else {
            self.carry_out_turn(&machine, node.as_ref(), &mut pass, now)
        };

        self.metrics.observe(&pass);
        let written = self.write_status(&machine, &mut pass, now);
        if let Some(kind) = disrupt {
            // The status saying Rebooting or Restarting has landed on a
            // copy holding the grant (or the disruption waits for the
            // next pass); a write that found the grant gone took the
            // step back.
            if written && pass.disrupts() && self.check_grant(&mut pass) {
                self.disrupt(&machine, &pass, kind, now);
            }
        }
        // A boot on trial is busy too: its blessing ends the turn, and
        // the next machine waits for this one to notice it.
        !matches!(pass.turn, TurnStep::Idle | TurnStep::Await)
            || coordination::using_turn(&pass.conditions)
            || matches!(worker, Worker::Downloading { .. } | Worker::Writing { .. })
    }

    fn carry_out_staging(&self, machine: &Machine, pass: &Pass) {
        for s in &pass.staging {
            match s {
                Staging::Write {
                    doc,
                    bytes,
                    sha256,
                    summary,
                } => match host::stage(&self.cfg.paths, *doc, bytes) {
                    Ok(()) => {
                        log::info(
                            "staged",
                            &[
                                ("document", &doc.file_name()),
                                ("sha256", &sha256),
                                ("change", summary),
                            ],
                        );
                        self.event(
                            machine,
                            EventType::Normal,
                            event_reason::STAGED,
                            &format!(
                                "staged {} ({}) for the next boot: {summary}",
                                doc.file_name(),
                                &sha256.as_str()[..12]
                            ),
                        );
                    }
                    Err(e) => log::warn(
                        "staging failed; the next pass tries again",
                        &[("document", &doc.file_name()), ("err", &e)],
                    ),
                },
                Staging::Remove { doc } => match host::unstage(&self.cfg.paths, *doc) {
                    Ok(()) => log::info("unstaged", &[("document", &doc.file_name())]),
                    Err(e) => log::warn(
                        "unstaging failed",
                        &[("document", &doc.file_name()), ("err", &e)],
                    ),
                },
            }
        }
    }

    /// Removes annotations that mean nothing now: a stale approval or
    /// request (with an Event saying why), an approval with nothing left
    /// to approve (silently).
    fn spend_stale_annotations(&self, machine: &mut Machine, pass: &Pass) {
        let mut remove = Vec::new();
        match &pass.approval {
            Approval::Stale(why) => {
                self.event(
                    machine,
                    EventType::Warning,
                    event_reason::APPROVAL_IGNORED,
                    why,
                );
                remove.push(annotations::APPROVE_DISRUPTION);
            }
            Approval::Spent => remove.push(annotations::APPROVE_DISRUPTION),
            _ => {}
        }
        if let RebootRequest::Stale(why) = &pass.request {
            self.event(
                machine,
                EventType::Warning,
                event_reason::REQUEST_IGNORED,
                why,
            );
            remove.push(annotations::REQUEST_REBOOT);
        }
        if !remove.is_empty() {
            self.remove_annotations(machine, &remove);
        }
    }

    /// Removes annotations, each only while it still holds the value this
    /// pass judged: a person who wrote a new approval or request since
    /// (the watch may lag) keeps it, and the next pass judges it.
    fn remove_annotations(&self, machine: &Machine, keys: &[&str]) {
        let ops = decide_removal(machine, keys);
        if ops.is_empty() {
            return;
        }
        match self.client.json_patch::<DynamicObject>(
            &Api::all(MACHINES),
            &machine.metadata.name,
            &ops,
        ) {
            Ok(_) => {}
            Err(e) if e.code() == Some(422) => log::info(
                "an annotation changed before it was removed; the next pass judges the new value",
                &[("keys", &keys.join(","))],
            ),
            Err(e) => log::warn(
                "removing spent annotations failed",
                &[("keys", &keys.join(",")), ("err", &e)],
            ),
        }
    }

    /// Carries out the turn's step; answers the disruption to ask init for
    /// once the status is written.
    fn carry_out_turn(
        &mut self,
        machine: &Machine,
        node: Option<&Node>,
        pass: &mut Pass,
        now: Time,
    ) -> Option<DisruptionKind> {
        let nodes = Api::all(NODES);
        match pass.turn.clone() {
            TurnStep::Idle | TurnStep::Await => {
                self.refusals.clear();
                None
            }
            TurnStep::Uncordon => {
                self.refusals.clear();
                if let Some(n) = node {
                    match self.client.merge_patch::<DynamicObject>(
                        &nodes,
                        &n.metadata.name,
                        &uncordon_patch(n),
                    ) {
                        Ok(_) => self.event(
                            machine,
                            EventType::Normal,
                            event_reason::UNCORDONED,
                            &format!("uncordoned {}: the turn is over", n.metadata.name),
                        ),
                        Err(e) if e.is_conflict() => log::info(
                            "the Node changed since it was judged (a person's cordon?); \
                             the next pass judges it again",
                            &[("node", &n.metadata.name)],
                        ),
                        Err(e) => log::warn("uncordoning failed", &[("err", &e)]),
                    }
                }
                None
            }
            TurnStep::Cordon => {
                let n = node?;
                match self.client.merge_patch::<DynamicObject>(
                    &nodes,
                    &n.metadata.name,
                    &cordon_patch(n, now),
                ) {
                    Ok(_) => self.event(
                        machine,
                        EventType::Normal,
                        event_reason::TURN_TAKEN,
                        &format!(
                            "the cluster granted a turn for a {}; cordoned {} and draining it",
                            kind_word(pass.wanted),
                            n.metadata.name
                        ),
                    ),
                    Err(e) => pass.in_turn(
                        reason::DRAINING,
                        &format!("cordoning failed ({e}); trying again"),
                    ),
                }
                None
            }
            TurnStep::Drain { since } => self.drain(machine, pass, since, now),
            TurnStep::Asked {
                kind,
                again,
                refused,
            } => {
                if again {
                    match refused {
                        Some(why) => log::info(
                            "init refused the disruption; asking again after the backoff",
                            &[("kind", &kind.as_str()), ("refused", &why)],
                        ),
                        None => log::warn(
                            "init accepted a disruption a while ago and the machine is still up; asking again",
                            &[("kind", &kind.as_str())],
                        ),
                    }
                    Some(kind)
                } else {
                    None
                }
            }
        }
    }

    /// One pass of the drain; answers the disruption once the node is
    /// empty.
    fn drain(
        &mut self,
        machine: &Machine,
        pass: &mut Pass,
        since: Time,
        now: Time,
    ) -> Option<DisruptionKind> {
        let pods_api = Api::all(PODS);
        let params = ListParams::fields(format!("spec.nodeName={}", self.cfg.node));
        let pods: Vec<Pod> = match self.client.list_all::<Pod>(&pods_api, &params) {
            Ok(list) => list.items,
            Err(e) => {
                pass.in_turn(
                    reason::DRAINING,
                    &format!("listing the node's pods failed ({e}); trying again"),
                );
                return None;
            }
        };
        let timeout = i64::try_from(self.cfg.drain_timeout.as_secs()).unwrap_or(i64::MAX);
        let step = decide_drain(&pods, &self.refusals, since, now, timeout);
        for key in &step.evict {
            let Some((ns, name)) = key.split_once('/') else {
                continue;
            };
            let api = Api::namespaced(PODS, ns);
            match self.client.evict(&api, name, &DeleteParams::default()) {
                Ok(()) | Err(Error::NotFound { .. }) => {
                    self.metrics.evictions.inc();
                    self.refusals.remove(key);
                    log::info("evicted", &[("pod", key)]);
                }
                Err(e) => {
                    self.metrics.refusals.inc();
                    let message = match &e {
                        Error::DisruptionBudget { message, .. } => message.clone(),
                        other => other.to_string(),
                    };
                    let r = Refusal::after(self.refusals.get(key), now, message);
                    log::info(
                        "eviction refused; asking again after a backoff",
                        &[
                            ("pod", key),
                            ("budget", &r.budget.clone().unwrap_or_default()),
                            ("err", &r.message),
                        ],
                    );
                    self.refusals.insert(key.clone(), r);
                }
            }
        }
        self.refusals.retain(|k, _| step.left.contains(k));
        if let Some(blocked) = &step.blocked {
            pass.in_turn(reason::DRAIN_BLOCKED, blocked);
            return None;
        }
        if !step.left.is_empty() {
            pass.in_turn(
                reason::DRAINING,
                &format!(
                    "{} pod(s) left to move: {}",
                    step.left.len(),
                    step.left.join(", ")
                ),
            );
            return None;
        }
        let kind = pass.wanted?;
        // The condition (and so its transition's Event) says the way: the
        // Rebooting Event posted when init is asked joins the transition's
        // series and keeps its note.
        let (r, what) = match (kind, pass.via) {
            (DisruptionKind::Reboot, RebootVia::Kexec) => (
                reason::REBOOTING,
                "drained; init is asked to reboot by kexec",
            ),
            (DisruptionKind::Reboot, RebootVia::Firmware) => (
                reason::REBOOTING,
                "drained; init is asked to reboot through the firmware",
            ),
            (DisruptionKind::Restart, _) => {
                (reason::RESTARTING, "drained; init is asked to restart k3s")
            }
        };
        pass.in_turn(r, what);
        let _ = machine;
        Some(kind)
    }

    /// Asks init for the disruption: the spent annotations go first, the
    /// record of what was asked next, then the request.
    fn disrupt(&mut self, machine: &Machine, pass: &Pass, kind: DisruptionKind, now: Time) {
        let Some(boot) = pass.boot_id.clone() else {
            return;
        };
        let requested =
            kind == DisruptionKind::Reboot && pass.request == RebootRequest::Outstanding;
        let mut spent = Vec::new();
        if matches!(pass.approval, Approval::Approved { .. }) {
            spent.push(annotations::APPROVE_DISRUPTION);
        }
        if requested {
            spent.push(annotations::REQUEST_REBOOT);
        }
        // Asking again, the annotations are gone already.
        spent.retain(|k| machine.metadata.annotation(k).is_some());
        if !spent.is_empty() {
            self.remove_annotations(machine, &spent);
        }
        // Asking again after a refusal counts on from the record.
        let before = pass
            .asked
            .as_ref()
            .filter(|a| decide_same_ask(a, kind, &boot, &pass.machine_hash));
        let refusals = before
            .and_then(|a| a.refused.as_ref())
            .map_or(0, |r| r.times);
        let mut asked = Asked {
            boot,
            kind,
            hash: (kind == DisruptionKind::Restart).then(|| pass.machine_hash.clone()),
            at: now,
            requested,
            k3s_pid: pass.k3s_pid,
            refused: None,
        };
        if let Err(e) = host::record_asked(&self.cfg.paths, &asked) {
            log::warn(
                "recording the request to init failed; asking anyway",
                &[("err", &e)],
            );
        }
        let (request, reason_, note) = match kind {
            DisruptionKind::Reboot => (
                Request::Reboot { via: pass.via },
                event_reason::REBOOTING,
                match pass.via {
                    RebootVia::Kexec => "drained; asking init to reboot by kexec",
                    RebootVia::Firmware => "drained; asking init to reboot through the firmware",
                },
            ),
            DisruptionKind::Restart => (
                Request::RestartK3s,
                event_reason::RESTARTING,
                "drained; asking init to restart k3s",
            ),
        };
        if before.is_none() {
            self.event(machine, EventType::Normal, reason_, note);
        }
        match self.init.disrupt(request) {
            Ok(()) => match kind {
                DisruptionKind::Reboot => log::info(
                    "init accepted",
                    &[("kind", &kind.as_str()), ("via", &pass.via.as_str())],
                ),
                DisruptionKind::Restart => log::info("init accepted", &[("kind", &kind.as_str())]),
            },
            Err(e) => {
                // The record stays, refused: it carries the spent approval
                // and reboot request, and spaces the next ask out. One
                // Event for a run of refusals; the condition keeps the
                // latest answer.
                asked.refused = Some(Refused {
                    times: refusals.saturating_add(1),
                    message: e.to_string(),
                    by_init: matches!(e, InitError::Refused(_)),
                });
                if let Err(err) = host::record_asked(&self.cfg.paths, &asked) {
                    log::warn("recording init's refusal failed", &[("err", &err)]);
                }
                let wait = asked.again_after();
                log::info(
                    "init refused the disruption; asking again after a backoff",
                    &[("kind", &kind.as_str()), ("err", &e), ("after_secs", &wait)],
                );
                if refusals == 0 {
                    let advice = match e {
                        InitError::Refused(_) => "asking again after a backoff",
                        _ => "init may be down; asking again after a backoff",
                    };
                    self.event(
                        machine,
                        EventType::Warning,
                        event_reason::INIT_REFUSED,
                        &format!("{e}; {advice} (first in {wait} s)"),
                    );
                }
            }
        }
    }

    /// Asks init to disarm the release this boot wrote (its rollout
    /// halted), then records the slot as holding nothing to boot, so the
    /// status stops listing it as staged. A refusal is tried again on the
    /// next pass; until init answers, no reboot is asked for.
    fn disarm_release(&self, machine: &Machine, written: &crate::machine::facts::Written) {
        match self.init.disarm_release() {
            Ok(()) => {
                let disarmed = crate::machine::facts::Written {
                    version: None,
                    ..written.clone()
                };
                if let Err(e) = host::record_written(&self.cfg.paths, &disarmed) {
                    log::warn("recording the disarm failed", &[("err", &e)]);
                }
                let version = written.version.as_ref().map_or("", |v| v.as_str());
                log::info("disarmed a halted release", &[("release", &version)]);
                self.event(
                    machine,
                    EventType::Warning,
                    event_reason::DISARMED,
                    &format!(
                        "the rollout of {version} halted after it was written into the inactive \
                         slot; init took it out of the bootloaders' reach, so the next boot is \
                         the running release"
                    ),
                );
            }
            Err(e) => log::warn(
                "asking init to disarm a halted release failed; the next pass asks again",
                &[("err", &e)],
            ),
        }
    }

    /// Reads the Machine fresh and answers whether it holds a grant for
    /// exactly what this pass applies; when it does not, the pass takes
    /// its step back ([`Pass::grant_gone`]). A failed read allows nothing.
    fn check_grant(&mut self, pass: &mut Pass) -> bool {
        match self
            .client
            .get::<Machine>(&Api::all(MACHINES), &self.machine)
        {
            Ok(fresh) => {
                let grant = coordination::grant_for(&fresh.status.conditions, &pass.purpose);
                if self.written.as_ref().is_none_or(|w| rv(&fresh) > rv(w)) {
                    self.written = Some(fresh);
                }
                if grant == GrantFor::This {
                    return true;
                }
                log::info(
                    "the grant is gone or names something else; taking no disruptive step",
                    &[("purpose", &pass.purpose.describe())],
                );
                pass.grant_gone(grant);
                false
            }
            Err(e) => {
                log::warn(
                    "reading the Machine to check its grant failed; taking no disruptive step",
                    &[("err", &e)],
                );
                pass.grant_gone(GrantFor::None);
                false
            }
        }
    }

    /// Writes the status when it changed; answers whether the status now
    /// stored is this pass's.
    fn write_status(&mut self, machine: &Machine, pass: &mut Pass, now: Time) -> bool {
        let generation = machine.metadata.generation;
        let status = compose(&machine.status, pass, generation, now);
        if status == machine.status {
            return true;
        }
        let api = Api::all(MACHINES);
        let mut body = machine.clone();
        body.status = status;
        let mut attempt = body;
        // The boot the written status replaces: the copy the attempt was
        // composed on (after a conflict, theirs).
        let mut replaced_boot = machine.status.boot.clone();
        for _ in 0..2 {
            match self
                .client
                .replace_status::<Machine, _>(&api, &self.machine, &attempt)
            {
                Ok(stored) => {
                    self.metrics.status_writes.inc();
                    if let Some(note) =
                        decide_booted(replaced_boot.as_ref(), stored.status.boot.as_ref())
                    {
                        self.event(&stored, EventType::Normal, event_reason::BOOTED, &note);
                    }
                    for (kind, r, note) in
                        transition_events(&machine.status.conditions, &stored.status.conditions)
                    {
                        self.event(&stored, kind, &r, &note);
                    }
                    self.approved_event(machine, pass, &stored);
                    self.written = Some(stored);
                    return true;
                }
                Err(Error::Conflict { .. }) => {
                    // Someone else wrote (the cluster operator's grant, a
                    // person's annotation): compose again on their copy.
                    match self.client.get::<Machine>(&api, &self.machine) {
                        Ok(fresh) => {
                            // The grant this pass acted on may be gone
                            // from their copy: check again before saying
                            // (and doing) anything that uses it.
                            if pass.disrupts() {
                                let grant = coordination::grant_for(
                                    &fresh.status.conditions,
                                    &pass.purpose,
                                );
                                if grant != GrantFor::This {
                                    log::info(
                                        "the grant changed under a status write; taking the \
                                         turn's step back",
                                        &[("purpose", &pass.purpose.describe())],
                                    );
                                    pass.grant_gone(grant);
                                }
                            }
                            let status =
                                compose(&fresh.status, pass, fresh.metadata.generation, now);
                            if status == fresh.status {
                                self.written = Some(fresh);
                                return true;
                            }
                            replaced_boot = fresh.status.boot.clone();
                            attempt = fresh;
                            attempt.status = status;
                        }
                        Err(e) => {
                            log::warn(
                                "re-reading the Machine after a conflict failed",
                                &[("err", &e)],
                            );
                            return false;
                        }
                    }
                }
                Err(e) => {
                    self.metrics.standard.reconcile_errors.inc();
                    log::warn(
                        "writing the status failed; the next pass tries again",
                        &[("err", &e)],
                    );
                    return false;
                }
            }
        }
        false
    }

    /// The Event saying a person's approval released what waited for
    /// it, once: on the status write that moves it on.
    fn approved_event(&self, before: &Machine, pass: &Pass, stored: &Machine) {
        let Approval::Approved { kind, .. } = &pass.approval else {
            return;
        };
        let Some(value) = before.metadata.annotation(annotations::APPROVE_DISRUPTION) else {
            return;
        };
        let released = decide_released(&before.status.conditions, &stored.status.conditions);
        if released.is_empty() {
            return;
        }
        self.event(
            stored,
            EventType::Normal,
            event_reason::APPROVED,
            &format!(
                "{} {value} approved a {}: {}",
                annotations::APPROVE_DISRUPTION,
                kind_word(Some(*kind)),
                released.join(", ")
            ),
        );
    }
}

/// The JSON patch that removes `keys` from the Machine's annotations,
/// each guarded by a test of the value `machine` shows, so a value
/// written since is not removed unseen. Keys it does not carry are left
/// out.
pub fn decide_removal(machine: &Machine, keys: &[&str]) -> Vec<PatchOp> {
    let mut ops = Vec::new();
    for k in keys {
        let Some(value) = machine.metadata.annotation(k) else {
            continue;
        };
        let path = json_pointer(&["metadata", "annotations", k]);
        ops.push(PatchOp::Test {
            path: path.clone(),
            value: value.into(),
        });
        ops.push(PatchOp::Remove { path });
    }
    ops
}

fn kind_word(kind: Option<DisruptionKind>) -> &'static str {
    match kind {
        Some(DisruptionKind::Restart) => "k3s restart",
        _ => "reboot",
    }
}

fn rv(m: &Machine) -> u64 {
    m.metadata.resource_version.parse().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_value_judged_is_removed() {
        let mut m = Machine::new("m1", liken_api::machine::MachineSpec::default());
        m.metadata.annotations.insert(
            annotations::APPROVE_DISRUPTION.into(),
            "0123456789ab".into(),
        );
        let ops = decide_removal(
            &m,
            &[annotations::APPROVE_DISRUPTION, annotations::REQUEST_REBOOT],
        );
        let path = "/metadata/annotations/liken.sh~1approve-disruption".to_owned();
        assert_eq!(
            ops,
            [
                PatchOp::Test {
                    path: path.clone(),
                    value: "0123456789ab".into()
                },
                PatchOp::Remove { path }
            ]
        );
        assert!(decide_removal(&m, &[annotations::REQUEST_REBOOT]).is_empty());
    }
}
