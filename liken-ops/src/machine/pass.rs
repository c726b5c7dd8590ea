//! One pass: from what the machine runs and what the API asks for, to
//! conditions, a phase, what to stage and what to do next.
//!
//! [`decide_pass`] is a pure function of the Machine and Cluster from
//! the API, this machine's Node, the facts read from init and the host,
//! and the download worker's state. It answers everything the loop then
//! carries out: the convergence conditions and the phase, the pending
//! disruptions, the documents to stage (or unstage), what the
//! annotations mean, the disruption to ask the cluster for and the
//! turn's next step, the labels and taints to patch onto the Node now,
//! and what the download worker should do.
//!
//! The order of judgement for each kind of change:
//!
//! 1. Facts that cannot be read make every condition Unknown
//!    (FactsUnreadable), except that an init gone silent after this boot
//!    asked it to reboot makes them Rebooting (the reboot is under way);
//!    a boot init has not finished publishing makes them Booting.
//!    Nothing is staged or disrupted on such a pass.
//! 2. A difference between the running document and the API's is a
//!    change: staged (when the strict decoder takes the document and init
//!    has not already refused these very bytes) and listed as pending,
//!    or Blocked naming the field.
//! 3. With no change, what the kernel, the Node or the network shows is
//!    compared with the running document: a gap is NotApplied.
//! 4. Otherwise Converged.

use std::collections::BTreeMap;

use liken_api::coordination::{
    self, GrantFor, K3S_CONFIGURED, KERNEL_ARGS_APPLIED, MODULES_LOADED, NETWORK_CONFIGURED,
    REBOOT_REQUEST_HONORED, RELEASE_CURRENT, SYSCTLS_APPLIED, TurnPurpose, reason,
};
use liken_api::hash::sha256;
use liken_api::machine::{DisruptionKind, PendingDisruption, ReleaseStatus};
use liken_api::ondisk::{Document, REJECTED_DIR, VAR_LIKEN};
use liken_api::{
    BootRecord, BootStatus, Cluster, Condition, ConditionStatus, Machine, Phase, RebootVia, Role,
    Sha256Hex, Time, annotations, decode,
};

use crate::kinds::Node;
use crate::machine::approval::{
    Approval, RebootRequest, covered, decide_approval, decide_carried, decide_request,
    decide_wanted,
};
use crate::machine::changes::{
    self, Change, cluster_change, cluster_settings, machine_changes, machine_settings,
};
use crate::machine::facts::{Facts, decide_kernel_gaps};
use crate::machine::node::{Managed, NodeDrift, decide_node_drift};
use crate::machine::phase::{decide_phase, decide_ready};
use crate::machine::release::{Intent, Worker, decide_release};
use crate::machine::turn::{Asked, TurnStep, decide_turn};

/// What one pass reads.
#[derive(Clone, Copy, Debug)]
pub struct PassInput<'a> {
    /// This machine's Machine, as the API holds it.
    pub machine: &'a Machine,
    /// The fleet's Cluster, when there is one.
    pub cluster: Option<&'a Cluster>,
    /// This machine's Node, when the API has it.
    pub node: Option<&'a Node>,
    /// What init and the host report.
    pub facts: &'a Facts,
    /// The download worker's state.
    pub worker: &'a Worker,
    /// Now, on this machine's clock.
    pub now: Time,
    /// When the machine is outside its maintenance windows, the clause
    /// naming the next opening ([`crate::windows::machine_note`]).
    pub window: Option<&'a str>,
}

/// A document to put in staged/ or take out of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Staging {
    /// Write these bytes (and then their checksum).
    Write {
        /// Which document.
        doc: Document,
        /// Its YAML.
        bytes: Vec<u8>,
        /// The SHA-256 of the bytes, for the checksum file.
        sha256: Sha256Hex,
        /// What changes, for the Event.
        summary: String,
    },
    /// Remove what is staged: the API went back to what runs, or now
    /// asks for something that cannot be staged.
    Remove {
        /// Which document.
        doc: Document,
    },
}

/// Everything one pass decided.
#[derive(Clone, Debug)]
pub struct Pass {
    /// The convergence conditions and the Ready roll-up, unstamped.
    pub conditions: Vec<Condition>,
    /// The phase they give.
    pub phase: Phase,
    /// The staged changes and what applies each.
    pub pending: Vec<PendingDisruption>,
    /// status.pending: those of `pending` the turn is not carrying out
    /// yet.
    pub waiting: Vec<PendingDisruption>,
    /// status.boot.
    pub boot: Option<BootStatus>,
    /// status.release.
    pub release: Option<ReleaseStatus>,
    /// status.role.
    pub role: Option<Role>,
    /// What to stage or unstage.
    pub staging: Vec<Staging>,
    /// What the approve-disruption annotation means.
    pub approval: Approval,
    /// What the request-reboot annotation means.
    pub request: RebootRequest,
    /// The disruption asked of the cluster.
    pub wanted: Option<DisruptionKind>,
    /// What a turn taken now would apply: this boot, the release a reboot
    /// would boot, the staged changes. A grant allows the turn only when
    /// it names exactly this.
    pub purpose: TurnPurpose,
    /// The grant held, judged against `purpose`.
    pub grant: GrantFor,
    /// The turn's next step.
    pub turn: TurnStep,
    /// Labels and taints to patch onto the Node now.
    pub node_patch: Option<NodeDrift>,
    /// What the download worker should do.
    pub intent: Intent,
    /// Ask init to disarm the release this boot wrote (its rollout
    /// halted).
    pub disarm: bool,
    /// The running boot's id, when known.
    pub boot_id: Option<Sha256Hex>,
    /// The desired Machine's canonical hash (what a restart applies).
    pub machine_hash: Sha256Hex,
    /// k3s's pid as init reports it, recorded with a restart request.
    pub k3s_pid: Option<u32>,
    /// How a reboot asked of init now is to be made: the Machine's
    /// `spec.reboot`, else the Cluster's, else kexec. Taken from the API
    /// rather than the running documents, so a change applies at the very
    /// next reboot without one of its own.
    pub via: RebootVia,
    /// What init was asked this boot, when anything was (a re-ask after
    /// a refusal counts on from it).
    pub asked: Option<Asked>,
    /// Whether the facts were unreadable or the boot is unfinished: the
    /// loop then carries out nothing but the status.
    pub blind: bool,
}

impl Pass {
    /// Rewrites every condition now using the turn (Draining) to another
    /// reason and message, and derives the phase and roll-up again: the
    /// drain's outcome (DrainBlocked) and init's answer (Rebooting) are
    /// known only once the loop has carried the step out.
    pub fn in_turn(&mut self, new_reason: &'static str, message: &str) {
        for c in &mut self.conditions {
            if c.reason == reason::DRAINING {
                c.reason = new_reason.to_owned();
                c.message = format!("{}; {message}", c.message);
            }
        }
        self.rederive();
    }

    /// Whether this pass takes a disruptive step (cordon, drain, or asks
    /// init): one that needs a live grant for [`Pass::purpose`].
    pub fn disrupts(&self) -> bool {
        matches!(
            self.turn,
            TurnStep::Cordon | TurnStep::Drain { .. } | TurnStep::Asked { .. }
        )
    }

    /// The grant this pass acted on turned out gone or for something else
    /// (a fresh read, or the copy a conflict returned, says so): the pass
    /// takes no disruptive step and asks again, and the conditions say
    /// why.
    pub fn grant_gone(&mut self, grant: GrantFor) {
        let note = match &grant {
            GrantFor::Other(Some(p)) => format!(
                "the turn the cluster granted is for {}, not for what is staged now; \
                 waiting for a turn granted for this",
                p.describe()
            ),
            GrantFor::Other(None) => "the grant held names no purpose, so it allows nothing; \
                 waiting for a turn granted for what is staged"
                .to_owned(),
            _ => "the cluster took the turn back before this step; waiting for a turn".to_owned(),
        };
        self.grant = grant;
        self.turn = TurnStep::Await;
        for c in &mut self.conditions {
            if c.status != ConditionStatus::True
                && matches!(
                    c.reason.as_str(),
                    reason::DRAINING
                        | reason::DRAIN_BLOCKED
                        | reason::REBOOTING
                        | reason::RESTARTING
                )
            {
                c.reason = reason::AWAITING_TURN.to_owned();
                c.message = note.clone();
            }
        }
        self.waiting = self.pending.clone();
        self.rederive();
    }

    /// Marks one condition NotApplied (a patch that failed), and derives
    /// the phase again.
    pub fn not_applied(&mut self, type_: &str, message: &str) {
        if let Some(c) = self.conditions.iter_mut().find(|c| c.type_ == type_) {
            c.status = ConditionStatus::False;
            c.reason = reason::NOT_APPLIED.to_owned();
            c.message = message.to_owned();
        }
        self.rederive();
    }

    fn rederive(&mut self) {
        self.conditions.retain(|c| c.type_ != coordination::READY);
        self.phase = decide_phase(&self.conditions);
        let ready = decide_ready(&self.conditions, self.phase);
        self.conditions.push(ready);
    }
}

fn condition(type_: &str, status: ConditionStatus, reason: &str, message: String) -> Condition {
    Condition::new(type_, status, reason, message)
}

/// Every convergence condition with one verdict, for a pass that cannot
/// judge.
fn blind(facts: &Facts, status: ConditionStatus, reason: &str, message: String) -> Pass {
    let mut conditions: Vec<Condition> = coordination::CONVERGENCE
        .iter()
        .map(|t| condition(t, status, reason, message.clone()))
        .collect();
    let phase = decide_phase(&conditions);
    conditions.push(decide_ready(&conditions, phase));
    let record = facts.record.as_ref().ok().and_then(Option::as_ref);
    Pass {
        conditions,
        phase,
        pending: Vec::new(),
        waiting: Vec::new(),
        boot: record.map(BootRecord::status),
        release: None,
        role: None,
        staging: Vec::new(),
        approval: Approval::None,
        request: RebootRequest::None,
        wanted: None,
        purpose: TurnPurpose::default(),
        grant: GrantFor::None,
        turn: TurnStep::Idle,
        node_patch: None,
        intent: Intent::None,
        disarm: false,
        boot_id: record.map(BootRecord::boot_id),
        machine_hash: sha256(b""),
        k3s_pid: None,
        // A blind pass asks init for nothing.
        via: RebootVia::default(),
        asked: None,
        blind: true,
    }
}

/// A pass while init does not answer. When this operator asked init to
/// reboot in this very boot, the silence is that reboot: init stops
/// answering while it shuts down ("init is shutting down for a reboot"),
/// and the machine keeps reporting Rebooting. Were it to say Unknown, its
/// conditions would neither ask for nor use the turn, and the cluster
/// operator would take the turn back before the machine went down, and
/// could grant the next one while this machine reboots. Otherwise
/// nothing can be judged (FactsUnreadable). A k3s restart keeps init
/// answering, so silence during one is not explained by it; nor is a
/// reboot init itself answered with a refusal (busy writing a release,
/// say): that machine is not going down, and saying Rebooting would both
/// misreport it and keep a turn it cannot use. An ask whose answer was
/// lost may have been carried out, so it still explains the silence.
fn init_silent(facts: &Facts, error: &str) -> Pass {
    let boot = facts
        .record
        .as_ref()
        .ok()
        .and_then(Option::as_ref)
        .map(BootRecord::boot_id);
    let rebooting = boot
        .as_ref()
        .and_then(|b| Asked::in_boot(facts.asked.as_ref(), b))
        .filter(|a| a.kind == DisruptionKind::Reboot)
        .filter(|a| !a.refused.as_ref().is_some_and(|r| r.by_init));
    match rebooting {
        Some(asked) => blind(
            facts,
            ConditionStatus::False,
            reason::REBOOTING,
            format!(
                "init was asked to reboot at {} and no longer answers ({error}); the reboot is \
                 under way",
                asked.at
            ),
        ),
        None => blind(
            facts,
            ConditionStatus::Unknown,
            reason::FACTS_UNREADABLE,
            error.to_owned(),
        ),
    }
}

/// What staging a document came to.
enum Staged {
    /// The API asks for what runs.
    Same,
    /// The bytes to stage, and their hash.
    Ready(Vec<u8>, Sha256Hex),
    /// It cannot be staged; why.
    Blocked(String),
}

/// Renders a desired document, checks it as init will (the strict
/// decoder) and against what init refused before.
fn stage_document(doc: Document, yaml: Result<String, String>, facts: &Facts) -> Staged {
    let origin = format!("the {} the API holds", doc.file_name());
    let text = match yaml {
        Ok(t) => t,
        Err(e) => return Staged::Blocked(format!("{origin} cannot be rendered: {e}")),
    };
    let checked = match doc {
        Document::Machine => decode::strict::<Machine>(&text, &origin).map(drop),
        Document::Cluster => decode::strict::<Cluster>(&text, &origin).map(drop),
    };
    if let Err(e) = checked {
        return Staged::Blocked(format!("not staged, init would refuse it: {e}"));
    }
    let bytes = text.into_bytes();
    let hash = sha256(&bytes);
    if let Some((name, _)) = facts.rejected.iter().find(|(_, h)| **h == hash) {
        return Staged::Blocked(format!(
            "init refused these very bytes at boot and kept them as {VAR_LIKEN}/{REJECTED_DIR}/{name} \
             (the console says why); change the document again to stage something else"
        ));
    }
    Staged::Ready(bytes, hash)
}

/// Plans staged/ for one document: write what differs, remove what no
/// longer should be there.
fn plan_staging(
    doc: Document,
    differs: bool,
    staged: &Staged,
    facts: &Facts,
    summary: String,
    out: &mut Vec<Staging>,
) {
    let present = facts.staged.get(doc.file_name());
    match (differs, staged) {
        (true, Staged::Ready(bytes, hash)) => {
            if present != Some(hash) {
                out.push(Staging::Write {
                    doc,
                    bytes: bytes.clone(),
                    sha256: hash.clone(),
                    summary,
                });
            }
        }
        _ => {
            if present.is_some() {
                out.push(Staging::Remove { doc });
            }
        }
    }
}

/// Decides one pass.
pub fn decide_pass(input: PassInput<'_>) -> Pass {
    let PassInput {
        machine,
        cluster,
        node,
        facts,
        worker,
        now,
        window,
    } = input;
    let unknown = ConditionStatus::Unknown;
    let init = match &facts.init {
        Err(e) => return init_silent(facts, e),
        Ok(s) => s,
    };
    let record = match &facts.record {
        Err(e) => return blind(facts, unknown, reason::FACTS_UNREADABLE, e.clone()),
        Ok(None) => {
            return blind(
                facts,
                ConditionStatus::False,
                reason::BOOTING,
                "init has not published this boot's record yet".into(),
            );
        }
        Ok(Some(r)) => r,
    };
    let running = match &facts.running_machine {
        Err(e) => return blind(facts, unknown, reason::FACTS_UNREADABLE, e.clone()),
        Ok(None) => {
            return blind(
                facts,
                ConditionStatus::False,
                reason::BOOTING,
                "init has not published the documents this boot runs yet".into(),
            );
        }
        Ok(Some(m)) => m,
    };
    if running.metadata.name != machine.metadata.name {
        return blind(
            facts,
            unknown,
            reason::FACTS_UNREADABLE,
            format!(
                "this machine runs the Machine {:?}, not {:?}: the operator was pointed at \
                 another machine's document",
                running.metadata.name, machine.metadata.name
            ),
        );
    }
    let boot_id = record.boot_id();
    let desired_hash = machine.canonical_hash();

    // The Machine document: its changes, staged or blocked.
    let machine_differs = desired_hash != running.canonical_hash();
    let machine_staged = if machine_differs {
        stage_document(
            Document::Machine,
            decode::to_yaml(&machine.canonical()).map_err(|e| e.to_string()),
            facts,
        )
    } else {
        Staged::Same
    };
    let mut doc_changes: Vec<Change> = machine_changes(&running.spec, &machine.spec);

    // What init was asked this boot. A restart that applies this very
    // document counts as applied once k3s runs again under a new pid;
    // until then the change stays pending and the turn stays in use.
    let under_way = Asked::in_boot(facts.asked.as_ref(), &boot_id);
    let restarted = under_way
        .is_some_and(|a| a.restart_for(&boot_id, &desired_hash) && a.restart_done(&init.k3s));

    // The k3s labels and taints, judged on the Node.
    let k3s_current = running.spec.k3s == machine.spec.k3s || restarted;
    let mut node_patch = None;
    let mut node_note: Option<String> = None;
    match node {
        Some(n) => {
            let managed = Managed::recorded(n, Managed::of(running.spec.k3s.as_ref()));
            let drift = decide_node_drift(machine.spec.k3s.as_ref(), n, &managed);
            if !drift.is_empty() {
                let items = drift.items(n);
                if k3s_current {
                    node_note = Some(changes::summarize("patching the Node", items));
                    node_patch = Some(drift);
                } else {
                    doc_changes.push(Change {
                        condition: K3S_CONFIGURED,
                        kind: DisruptionKind::Restart,
                        summary: changes::summarize("k3s", items),
                    });
                }
            }
        }
        None => {
            node_note = Some(format!(
                "the API has no Node for this machine (looked for {:?})",
                machine.hostname()
            ));
        }
    }

    // The Cluster document.
    let running_cluster = facts.running_cluster.as_ref().ok().and_then(Option::as_ref);
    let cluster_change = match (running_cluster, cluster) {
        (Some(r), Some(c)) => cluster_change(r, c),
        _ => None,
    };
    let cluster_differs = match (running_cluster, cluster) {
        (Some(r), Some(c)) => r.canonical_hash() != c.canonical_hash(),
        _ => false,
    };
    let cluster_hash = cluster.map(Cluster::canonical_hash);
    let cluster_staged = match cluster {
        Some(c) if cluster_differs => stage_document(
            Document::Cluster,
            decode::to_yaml(&c.canonical()).map_err(|e| e.to_string()),
            facts,
        ),
        _ => Staged::Same,
    };

    // The staging Event names every difference: the changes, then the
    // settings that ride along without a disruption of their own.
    let mut staging = Vec::new();
    let mut machine_summary: Vec<String> = doc_changes.iter().map(|c| c.summary.clone()).collect();
    let settings = machine_settings(&running.spec, &machine.spec);
    if !settings.is_empty() {
        machine_summary.push(changes::summarize("settings", settings));
    }
    plan_staging(
        Document::Machine,
        machine_differs,
        &machine_staged,
        facts,
        machine_summary.join("; "),
        &mut staging,
    );
    let mut cluster_summary: Vec<String> =
        cluster_change.iter().map(|c| c.summary.clone()).collect();
    if let (Some(r), Some(c)) = (running_cluster, cluster) {
        let settings = cluster_settings(r, c);
        if !settings.is_empty() {
            cluster_summary.push(changes::summarize("cluster settings", settings));
        }
    }
    plan_staging(
        Document::Cluster,
        cluster_differs,
        &cluster_staged,
        facts,
        cluster_summary.join("; "),
        &mut staging,
    );

    // Blocked changes by condition; the rest become pending entries.
    let mut blocked: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut pending: Vec<PendingDisruption> = Vec::new();
    for c in &doc_changes {
        match &machine_staged {
            Staged::Blocked(why) => {
                blocked.insert(c.condition, why.clone());
            }
            _ => pending.push(PendingDisruption {
                condition: c.condition.to_owned(),
                kind: c.kind,
                hash: desired_hash.clone(),
                summary: c.summary.clone(),
            }),
        }
    }
    if let (Some(c), Some(hash)) = (&cluster_change, &cluster_hash) {
        match &cluster_staged {
            Staged::Blocked(why) => {
                blocked.insert(c.condition, why.clone());
            }
            _ => pending.push(PendingDisruption {
                condition: c.condition.to_owned(),
                kind: c.kind,
                hash: hash.clone(),
                summary: c.summary.clone(),
            }),
        }
    }

    // The release.
    let stored = machine.status.release.as_ref();
    let stored_staged = stored.and_then(|r| r.staged.as_ref());
    let written = facts.written.as_ref().filter(|w| w.boot == boot_id);
    let release = decide_release(cluster, record, stored_staged, written, worker);
    if let Some(p) = &release.pending {
        pending.push(p.clone());
    }

    // The reboot request; one a reboot already asked of init answers
    // stays outstanding (its annotation is spent) until the machine goes
    // down.
    let mut request = decide_request(
        machine.metadata.annotation(annotations::REQUEST_REBOOT),
        &boot_id,
    );
    if request == RebootRequest::None
        && under_way.is_some_and(|a| a.kind == DisruptionKind::Reboot && a.requested)
    {
        request = RebootRequest::Outstanding;
    }
    if request == RebootRequest::Outstanding {
        pending.push(PendingDisruption {
            condition: REBOOT_REQUEST_HONORED.to_owned(),
            kind: DisruptionKind::Reboot,
            hash: boot_id.clone(),
            summary: format!(
                "reboot requested for boot {}; nothing is staged for it, the machine comes back \
                 on the documents it runs now",
                boot_id.short()
            ),
        });
    }

    // Approval, what to ask for, and the turn.
    let auto = machine.reboot_policy() == liken_api::RebootPolicy::Auto;
    let approval = match (
        decide_approval(
            machine.metadata.annotation(annotations::APPROVE_DISRUPTION),
            &pending,
        ),
        under_way,
    ) {
        (Approval::None, Some(asked)) => decide_carried(asked, &pending),
        (a, _) => a,
    };
    let wanted = decide_wanted(auto, &pending, &approval);
    // What this boot wrote (or disarmed) is the last word on the other
    // slot; the stored status speaks for earlier boots.
    let staged_version = match written {
        Some(w) => w.version.clone(),
        None => stored_staged
            .filter(|v| Some(*v) != record.version.as_ref())
            .cloned(),
    };
    let purpose = TurnPurpose::new(
        boot_id.as_str(),
        staged_version
            .clone()
            .filter(|v| Some(v) != record.version.as_ref()),
        pending.iter().map(|p| p.hash.as_str()),
    );
    let grant = coordination::grant_for(&machine.status.conditions, &purpose);
    let turn = decide_turn(
        wanted,
        grant == GrantFor::This,
        node,
        facts.asked.as_ref(),
        (&boot_id, &desired_hash),
        now,
    );
    // status.pending lists what still waits: an entry the turn is
    // carrying out leaves it, so `liken approve-reboot` run again names
    // the next one.
    let in_turn = matches!(
        turn,
        TurnStep::Cordon | TurnStep::Drain { .. } | TurnStep::Asked { .. }
    );
    let waiting: Vec<PendingDisruption> = pending
        .iter()
        .filter(|p| !(in_turn && covered(auto, p, &approval, wanted)))
        .cloned()
        .collect();

    // The conditions.
    let gaps = decide_kernel_gaps(&running.spec, &facts.kernel);
    let observed: BTreeMap<&str, Vec<String>> = [
        (SYSCTLS_APPLIED, gaps.sysctls),
        (MODULES_LOADED, gaps.modules),
        (KERNEL_ARGS_APPLIED, gaps.kernel_args),
        (NETWORK_CONFIGURED, network_gaps(running, facts)),
        (
            K3S_CONFIGURED,
            if node.is_none() {
                node_note.clone().into_iter().collect()
            } else {
                Vec::new()
            },
        ),
    ]
    .into();
    let mut conditions = Vec::new();
    for type_ in coordination::CONVERGENCE {
        let c = if type_ == RELEASE_CURRENT {
            match release.reason {
                reason::AWAITING_TURN => pending_condition(
                    type_,
                    &pending,
                    &approval,
                    auto,
                    wanted,
                    (&turn, &grant),
                    machine,
                ),
                r => condition(type_, release.status, r, release.message.clone()),
            }
        } else if let Some(why) = blocked.get(type_) {
            condition(type_, ConditionStatus::False, reason::BLOCKED, why.clone())
        } else if pending.iter().any(|p| p.condition == type_) {
            pending_condition(
                type_,
                &pending,
                &approval,
                auto,
                wanted,
                (&turn, &grant),
                machine,
            )
        } else if let Some(list) = observed.get(type_).filter(|l| !l.is_empty()) {
            condition(
                type_,
                ConditionStatus::False,
                reason::NOT_APPLIED,
                list.join("; "),
            )
        } else {
            condition(
                type_,
                ConditionStatus::True,
                reason::CONVERGED,
                converged_message(type_, node_note.as_deref()),
            )
        };
        conditions.push(c);
    }
    // Outside its maintenance windows the machine still asks, and says
    // when the cluster can next grant it a turn.
    if let Some(why) = window {
        for c in conditions
            .iter_mut()
            .filter(|c| c.status != ConditionStatus::True && c.reason == reason::AWAITING_TURN)
        {
            c.message = format!("{}; {why}", c.message);
        }
    }
    let phase = decide_phase(&conditions);
    conditions.push(decide_ready(&conditions, phase));

    Pass {
        conditions,
        phase,
        pending,
        waiting,
        boot: Some(record.status()),
        release: Some(ReleaseStatus {
            running: record.version.clone(),
            staged: staged_version,
            target: cluster.and_then(|c| c.spec.version.clone()),
        }),
        role: cluster.map(|c| {
            if c.is_leader(&machine.metadata.name) {
                Role::Leader
            } else {
                Role::Follower
            }
        }),
        staging,
        approval,
        request,
        wanted,
        purpose,
        grant,
        turn,
        node_patch,
        intent: release.intent,
        disarm: release.disarm,
        boot_id: Some(boot_id),
        machine_hash: desired_hash,
        k3s_pid: init.k3s.pid,
        via: RebootVia::decide(machine.spec.reboot, cluster.and_then(|c| c.spec.reboot)),
        asked: under_way.cloned(),
        blind: false,
    }
}

/// What the running network lacks of the running Machine's; an
/// unreadable facts file is one gap saying so.
fn network_gaps(running: &Machine, facts: &Facts) -> Vec<String> {
    let empty = liken_api::machine::NetworkSpec::default();
    let spec = running.spec.network.as_ref().unwrap_or(&empty);
    match &facts.network {
        None => Vec::new(),
        Some(Ok(f)) => crate::machine::network::decide_network_gaps(spec, f),
        Some(Err(e)) => vec![format!("init's network facts cannot be read: {e}")],
    }
}

fn converged_message(type_: &str, node_note: Option<&str>) -> String {
    match type_ {
        SYSCTLS_APPLIED => "the running sysctls are the spec's".into(),
        MODULES_LOADED => "the spec's modules are loaded".into(),
        KERNEL_ARGS_APPLIED => "the running command line carries the spec's arguments".into(),
        NETWORK_CONFIGURED => "the running network is the spec's".into(),
        K3S_CONFIGURED => node_note.map_or_else(
            || "k3s runs with the spec's labels and taints and the Cluster's settings".into(),
            str::to_owned,
        ),
        REBOOT_REQUEST_HONORED => "no reboot is requested".into(),
        _ => "converged".into(),
    }
}

/// The condition of a type with pending entries: waiting for a person,
/// asking for a turn, or using it.
fn pending_condition(
    type_: &str,
    pending: &[PendingDisruption],
    approval: &Approval,
    auto: bool,
    wanted: Option<DisruptionKind>,
    (turn, grant): (&TurnStep, &GrantFor),
    machine: &Machine,
) -> Condition {
    let mine: Vec<&PendingDisruption> = pending.iter().filter(|p| p.condition == type_).collect();
    let summary = mine
        .iter()
        .map(|p| format!("{} (staged as {})", p.summary, p.hash.short()))
        .collect::<Vec<_>>()
        .join("; ");
    let kind = if mine.iter().any(|p| p.kind == DisruptionKind::Reboot) {
        DisruptionKind::Reboot
    } else {
        DisruptionKind::Restart
    };
    if !mine.iter().all(|p| covered(auto, p, approval, wanted)) {
        let (r, what) = match kind {
            DisruptionKind::Reboot => (reason::REBOOT_PENDING, "a reboot"),
            DisruptionKind::Restart => (reason::RESTART_PENDING, "a k3s restart"),
        };
        let first = mine.first().map_or("", |p| p.hash.short());
        return condition(
            type_,
            ConditionStatus::False,
            r,
            format!(
                "{summary}; rebootPolicy is Manual, so {what} waits for approval: \
                 liken approve-reboot <deployment> {} (annotation {}={first})",
                machine.metadata.name,
                annotations::APPROVE_DISRUPTION
            ),
        );
    }
    let (r, next) = match turn {
        TurnStep::Cordon | TurnStep::Drain { .. } => (
            reason::DRAINING,
            "the cluster granted a turn; cordoning and draining the node".to_owned(),
        ),
        TurnStep::Asked {
            kind,
            refused: Some(why),
            ..
        } => (
            if *kind == DisruptionKind::Reboot {
                reason::REBOOTING
            } else {
                reason::RESTARTING
            },
            format!(
                "init refused to {} ({why}); the turn is kept and init is asked again after a \
                 backoff",
                if *kind == DisruptionKind::Reboot {
                    "reboot"
                } else {
                    "restart k3s"
                }
            ),
        ),
        TurnStep::Asked {
            kind: DisruptionKind::Reboot,
            ..
        } => (reason::REBOOTING, "init was asked to reboot".to_owned()),
        TurnStep::Asked {
            kind: DisruptionKind::Restart,
            ..
        } => (
            reason::RESTARTING,
            "init was asked to restart k3s".to_owned(),
        ),
        TurnStep::Idle | TurnStep::Await | TurnStep::Uncordon => (
            reason::AWAITING_TURN,
            match grant {
                GrantFor::Other(Some(p)) => format!(
                    "the turn the cluster granted was for {}, not for what is staged now; \
                     waiting for it to be taken back and a turn granted for this",
                    p.describe()
                ),
                GrantFor::Other(None) => "the grant held names no purpose (an older cluster \
                     operator wrote it), so it allows nothing; waiting for a turn granted for \
                     what is staged"
                    .to_owned(),
                _ => "waiting for the cluster to grant a reboot turn".to_owned(),
            },
        ),
    };
    condition(
        type_,
        ConditionStatus::False,
        r,
        format!("{summary}; {next}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::Meta;
    use crate::machine::facts::KernelFacts;
    use crate::machine::turn::Asked;
    use liken_api::control::{InitStatus, ServiceState, ServiceStatus};
    use liken_api::machine::{K3sSpec, MachineSpec};
    use liken_api::{ClusterSpec, RebootPolicy, Slot, Version};

    const NOW: Time = Time::from_unix(1_780_000_600);

    fn running() -> Machine {
        Machine::new(
            "node-1",
            MachineSpec {
                sysctls: [("vm.swappiness".to_owned(), "60".to_owned())].into(),
                ..MachineSpec::default()
            },
        )
    }

    fn cluster() -> Cluster {
        Cluster::new(
            "home",
            ClusterSpec {
                endpoint: "https://10.0.0.10:6443".into(),
                leaders: vec!["node-1".into()],
                ..ClusterSpec::default()
            },
        )
    }

    fn record() -> BootRecord {
        BootRecord {
            time: Time::from_unix(1_780_000_000),
            slot: Some(Slot::A),
            version: Some(Version::parse("2026.11.01-001").unwrap()),
            documents: Default::default(),
            assessment: None,
            via: None,
            via_reason: None,
            root_verity: None,
        }
    }

    fn facts(running: &Machine) -> Facts {
        Facts {
            init: Ok(InitStatus::default()),
            record: Ok(Some(record())),
            running_machine: Ok(Some(running.clone())),
            running_cluster: Ok(Some(cluster())),
            network: None,
            kernel: KernelFacts {
                sysctls: [("vm.swappiness".to_owned(), Ok("60\n".to_owned()))].into(),
                modules: BTreeMap::new(),
                cmdline: Ok("console=ttyS0".into()),
            },
            staged: BTreeMap::new(),
            rejected: BTreeMap::new(),
            asked: None,
            written: None,
        }
    }

    fn node() -> Node {
        Node {
            metadata: Meta {
                name: "node-1".into(),
                resource_version: "5".into(),
                ..Meta::default()
            },
            ..Node::default()
        }
    }

    fn api(spec: impl FnOnce(&mut MachineSpec)) -> Machine {
        let mut m = running();
        m.metadata.uid = "uid-1".into();
        m.metadata.generation = 3;
        spec(&mut m.spec);
        m
    }

    fn pass(machine: &Machine, facts: &Facts, node: Option<&Node>) -> Pass {
        let c = cluster();
        decide_pass(PassInput {
            machine,
            cluster: Some(&c),
            node,
            facts,
            worker: &Worker::Idle,
            now: NOW,
            window: None,
        })
    }

    /// Grants `m` a turn for what a pass over `f` asks, as the cluster
    /// operator does.
    fn grant(m: &mut Machine, f: &Facts) {
        let asked = pass(m, f, Some(&node())).purpose;
        m.status.conditions.push(Condition::new(
            coordination::REBOOT_APPROVED,
            ConditionStatus::True,
            coordination::GRANT_REASON,
            coordination::grant_message("granted", &asked),
        ));
    }

    fn reason_of<'a>(p: &'a Pass, type_: &str) -> &'a str {
        &p.conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_}"))
            .reason
    }

    fn swappiness(spec: &mut MachineSpec) {
        spec.sysctls.insert("vm.swappiness".into(), "10".into());
    }

    #[test]
    fn facts_that_cannot_be_read_judge_nothing() {
        let m = api(|_| {});
        let mut f = facts(&running());
        f.init = Err("init does not answer on /run/liken/init.sock: connection refused".into());
        let p = pass(&m, &f, Some(&node()));
        assert!(p.blind);
        assert_eq!(p.phase, Phase::Unknown);
        assert_eq!(reason_of(&p, SYSCTLS_APPLIED), reason::FACTS_UNREADABLE);
        assert!(p.staging.is_empty() && p.pending.is_empty());
        assert_eq!(p.turn, TurnStep::Idle);

        // Silence after this boot asked init to reboot is the reboot:
        // the turn stays in use and the machine counts as disrupted.
        let silent = "init refused: init is shutting down for a reboot".to_owned();
        let asked = |kind, boot: Sha256Hex| Asked {
            boot,
            kind,
            hash: None,
            at: NOW,
            requested: false,
            k3s_pid: None,
            refused: None,
        };
        let mut f = facts(&running());
        f.init = Err(silent.clone());
        f.asked = Some(asked(DisruptionKind::Reboot, record().boot_id()));
        let p = pass(&m, &f, Some(&node()));
        assert!(p.blind);
        assert_eq!(p.phase, Phase::Updating);
        assert_eq!(reason_of(&p, RELEASE_CURRENT), reason::REBOOTING);
        assert!(coordination::using_turn(&p.conditions));
        assert!(p.conditions[0].message.contains("shutting down"));
        assert_eq!(p.turn, TurnStep::Idle);
        // An ask whose answer was lost may have been carried out: still
        // the reboot.
        let refused = |by_init| Asked {
            refused: Some(crate::machine::turn::Refused {
                times: 1,
                message: "init refused: busy writing a release".into(),
                by_init,
            }),
            ..asked(DisruptionKind::Reboot, record().boot_id())
        };
        f.asked = Some(refused(false));
        let p = pass(&m, &f, Some(&node()));
        assert_eq!(reason_of(&p, RELEASE_CURRENT), reason::REBOOTING);
        // Asked in an earlier boot, or a restart (init answers through
        // one), or a reboot init itself refused (the machine is not going
        // down): the silence says nothing, so nothing is judged.
        for other in [
            asked(DisruptionKind::Reboot, sha256(b"an earlier boot")),
            asked(DisruptionKind::Restart, record().boot_id()),
            refused(true),
        ] {
            f.asked = Some(other);
            let p = pass(&m, &f, Some(&node()));
            assert_eq!(p.phase, Phase::Unknown);
            assert_eq!(reason_of(&p, RELEASE_CURRENT), reason::FACTS_UNREADABLE);
            assert!(!coordination::using_turn(&p.conditions));
        }

        let mut f = facts(&running());
        f.record = Ok(None);
        let p = pass(&m, &f, Some(&node()));
        assert_eq!(p.phase, Phase::Booting);
        assert_eq!(reason_of(&p, RELEASE_CURRENT), reason::BOOTING);

        let mut f = facts(&running());
        f.running_machine = Ok(Some(Machine::new("node-2", MachineSpec::default())));
        let p = pass(&m, &f, Some(&node()));
        assert_eq!(p.phase, Phase::Unknown);
        assert!(
            p.conditions[0].message.contains("node-2"),
            "{:?}",
            p.conditions[0]
        );
    }

    #[test]
    fn a_converged_machine_stages_and_asks_nothing() {
        let m = api(|_| {});
        let p = pass(&m, &facts(&running()), Some(&node()));
        assert_eq!(p.phase, Phase::Ready, "{:?}", p.conditions);
        assert!(p.staging.is_empty() && p.pending.is_empty());
        assert_eq!(p.turn, TurnStep::Idle);
        assert_eq!(p.role, Some(Role::Leader));
        assert!(
            p.conditions.iter().all(|c| c.is_true()),
            "{:?}",
            p.conditions
        );
        assert_eq!(p.release.as_ref().unwrap().running, record().version);
    }

    #[test]
    fn outside_its_windows_a_machine_says_when_the_next_opens() {
        let auto = api(swappiness);
        let f = facts(&running());
        let why = "outside the maintenance windows; the next opens Sun 2026-12-06 02:00 CET \
                   (Europe/Berlin)";
        let c = cluster();
        let p = decide_pass(PassInput {
            machine: &auto,
            cluster: Some(&c),
            node: Some(&node()),
            facts: &f,
            worker: &Worker::Idle,
            now: NOW,
            window: Some(why),
        });
        // Still UpdatePending and still asking: the cluster decides.
        assert_eq!(p.phase, Phase::UpdatePending);
        assert_eq!(p.wanted, Some(DisruptionKind::Reboot));
        let c = p
            .conditions
            .iter()
            .find(|c| c.type_ == SYSCTLS_APPLIED)
            .unwrap();
        assert_eq!(c.reason, reason::AWAITING_TURN);
        assert!(
            c.message.ends_with(&format!(
                "waiting for the cluster to grant a reboot turn; {why}"
            )),
            "{}",
            c.message
        );
        // Converged conditions say nothing of windows.
        let quiet = pass(&running(), &f, Some(&node()));
        assert!(
            quiet
                .conditions
                .iter()
                .all(|c| !c.message.contains("maintenance"))
        );
    }

    #[test]
    fn a_change_is_staged_and_asks_per_policy() {
        let auto = api(swappiness);
        let f = facts(&running());
        let p = pass(&auto, &f, Some(&node()));
        let [
            Staging::Write {
                doc,
                bytes,
                sha256: sum,
                summary,
            },
        ] = &p.staging[..]
        else {
            panic!("{:?}", p.staging);
        };
        assert_eq!(*doc, Document::Machine);
        assert_eq!(*sum, sha256(bytes));
        assert_eq!(summary, "sysctls: vm.swappiness 60 → 10");
        let text = std::str::from_utf8(bytes).unwrap();
        let back: Machine = decode::strict(text, "staged").unwrap();
        assert_eq!(back.canonical_hash(), auto.canonical_hash());
        assert_eq!(p.pending.len(), 1);
        assert_eq!(p.pending[0].hash, auto.canonical_hash());
        assert_eq!(p.pending[0].summary, "sysctls: vm.swappiness 60 → 10");
        assert_eq!(reason_of(&p, SYSCTLS_APPLIED), reason::AWAITING_TURN);
        assert_eq!(p.phase, Phase::UpdatePending);
        assert_eq!(p.wanted, Some(DisruptionKind::Reboot));
        assert_eq!(p.turn, TurnStep::Await);

        // Already staged: nothing to write again.
        let mut again = f.clone();
        again.staged.insert("machine.yaml".into(), sum.clone());
        assert!(pass(&auto, &again, Some(&node())).staging.is_empty());

        // Manual waits for a person; the message says how to approve.
        let mut manual = api(swappiness);
        manual.spec.reboot_policy = Some(RebootPolicy::Manual);
        let p = pass(&manual, &f, Some(&node()));
        assert_eq!(reason_of(&p, SYSCTLS_APPLIED), reason::REBOOT_PENDING);
        assert_eq!(p.wanted, None);
        assert_eq!(p.turn, TurnStep::Idle);
        let message = &p.conditions[0].message;
        assert!(message.contains("liken approve-reboot"), "{message}");
        assert!(
            message.contains(manual.canonical_hash().short()),
            "{message}"
        );

        // Approved: asks for its turn. A stale approval does not.
        let hash = manual.canonical_hash();
        manual
            .metadata
            .annotations
            .insert(annotations::APPROVE_DISRUPTION.into(), hash.short().into());
        let p = pass(&manual, &f, Some(&node()));
        assert_eq!(reason_of(&p, SYSCTLS_APPLIED), reason::AWAITING_TURN);
        assert_eq!(p.wanted, Some(DisruptionKind::Reboot));
        manual.metadata.annotations.insert(
            annotations::APPROVE_DISRUPTION.into(),
            "0123456789ab".into(),
        );
        let p = pass(&manual, &f, Some(&node()));
        assert!(matches!(p.approval, Approval::Stale(_)), "{:?}", p.approval);
        assert_eq!(reason_of(&p, SYSCTLS_APPLIED), reason::REBOOT_PENDING);
    }

    #[test]
    fn a_grant_allows_only_what_it_names() {
        // Granted for a sysctl change in this boot.
        let mut m = api(swappiness);
        let f = facts(&running());
        grant(&mut m, &f);
        assert_eq!(pass(&m, &f, Some(&node())).turn, TurnStep::Cordon);

        // A release written since: the grant does not let it boot.
        let mut written = f.clone();
        written.written = Some(crate::machine::facts::Written {
            boot: record().boot_id(),
            version: Some(liken_api::Version::parse("2026.12.01-001").unwrap()),
            release_sha256: sha256(b"release.yaml"),
        });
        let p = pass(&m, &written, Some(&node()));
        assert_eq!(p.turn, TurnStep::Await);
        assert!(matches!(p.grant, GrantFor::Other(Some(_))), "{:?}", p.grant);
        assert_eq!(reason_of(&p, SYSCTLS_APPLIED), reason::AWAITING_TURN);
        assert!(!coordination::using_turn(&p.conditions));

        // Another change staged since.
        let other = api(|s| {
            swappiness(s);
            s.sysctls.insert("vm.overcommit_memory".into(), "1".into());
        });
        let mut other_m = other.clone();
        other_m.status = m.status.clone();
        assert_eq!(pass(&other_m, &f, Some(&node())).turn, TurnStep::Await);

        // A grant from before this boot.
        let mut next_boot = f.clone();
        if let Ok(Some(r)) = next_boot.record.as_mut() {
            r.time = Time::from_unix(1_780_000_060);
        }
        assert_eq!(pass(&m, &next_boot, Some(&node())).turn, TurnStep::Await);

        // A grant naming no purpose allows nothing.
        let mut old = api(swappiness);
        old.status.conditions.push(Condition::new(
            coordination::REBOOT_APPROVED,
            ConditionStatus::True,
            coordination::GRANT_REASON,
            "granted",
        ));
        let p = pass(&old, &f, Some(&node()));
        assert_eq!(p.turn, TurnStep::Await);
        assert_eq!(p.grant, GrantFor::Other(None));

        // Taking the step back mid-drain: nothing says the turn is in use.
        let mut p = pass(&m, &f, Some(&node()));
        assert!(p.disrupts());
        p.grant_gone(GrantFor::None);
        assert!(!p.disrupts());
        assert!(!coordination::using_turn(&p.conditions));
        assert!(coordination::wants_turn(&p.conditions));
        assert_eq!(p.waiting, p.pending);
    }

    #[test]
    fn a_granted_turn_drains_then_reboots() {
        let mut m = api(swappiness);
        let f = facts(&running());
        grant(&mut m, &f);
        let p = pass(&m, &f, Some(&node()));
        assert_eq!(p.turn, TurnStep::Cordon);
        assert_eq!(reason_of(&p, SYSCTLS_APPLIED), reason::DRAINING);
        assert_eq!(p.phase, Phase::Updating);
        let mut blocked = p.clone();
        blocked.in_turn(
            reason::DRAIN_BLOCKED,
            "apps/web is held by PodDisruptionBudget web-pdb",
        );
        assert_eq!(reason_of(&blocked, SYSCTLS_APPLIED), reason::DRAIN_BLOCKED);
        assert_eq!(blocked.phase, Phase::Updating);
        let ready = blocked.conditions.last().unwrap();
        assert!(ready.message.contains("web-pdb"), "{ready:?}");

        // The entry the turn carries out leaves status.pending.
        assert_eq!(p.pending.len(), 1);
        assert!(p.waiting.is_empty(), "{:?}", p.waiting);

        let mut asked = f.clone();
        asked.asked = Some(Asked {
            boot: record().boot_id(),
            kind: DisruptionKind::Reboot,
            hash: None,
            at: NOW,
            requested: false,
            k3s_pid: None,
            refused: None,
        });
        let p = pass(&m, &asked, Some(&node()));
        assert_eq!(reason_of(&p, SYSCTLS_APPLIED), reason::REBOOTING);
        assert!(matches!(p.turn, TurnStep::Asked { again: false, .. }));
        assert!(p.waiting.is_empty());

        // On Manual the approval was spent before init was asked; what
        // init was asked carries it until the machine goes down, so the
        // machine neither uncordons nor gives the turn back early.
        // (The policy is part of the staged document, so the grant names
        // the document with it.)
        let mut manual = m.clone();
        manual.spec.reboot_policy = Some(RebootPolicy::Manual);
        manual.status.conditions.clear();
        grant(&mut manual, &asked);
        let p = pass(&manual, &asked, Some(&node()));
        assert_eq!(reason_of(&p, SYSCTLS_APPLIED), reason::REBOOTING);
        assert_eq!(p.wanted, Some(DisruptionKind::Reboot));
        assert!(matches!(p.turn, TurnStep::Asked { again: false, .. }));
        assert!(coordination::using_turn(&p.conditions));
        // A record from an earlier boot carries nothing.
        let mut earlier = asked.clone();
        if let Some(a) = earlier.asked.as_mut() {
            a.boot = sha256(b"an earlier boot");
        }
        let p = pass(&manual, &earlier, Some(&node()));
        assert_eq!(reason_of(&p, SYSCTLS_APPLIED), reason::REBOOT_PENDING);
        assert_eq!(p.waiting.len(), 1);
    }

    #[test]
    fn what_cannot_be_staged_is_blocked_and_unstaged() {
        let bad = api(|s| {
            s.sysctls.insert("vm/../../x".into(), "1".into());
        });
        let mut f = facts(&running());
        f.staged
            .insert("machine.yaml".into(), sha256(b"an earlier change"));
        let p = pass(&bad, &f, Some(&node()));
        assert_eq!(reason_of(&p, SYSCTLS_APPLIED), reason::BLOCKED);
        assert_eq!(p.phase, Phase::Blocked);
        let message = &p.conditions[0].message;
        assert!(
            message.contains("spec.sysctls[\"vm/../../x\"]"),
            "{message}"
        );
        assert_eq!(
            p.staging,
            [Staging::Remove {
                doc: Document::Machine
            }]
        );
        assert!(p.pending.is_empty());

        // Bytes init refused at boot are not staged again.
        let m = api(swappiness);
        let first = pass(&m, &facts(&running()), Some(&node()));
        let Staging::Write { sha256: sum, .. } = &first.staging[0] else {
            panic!();
        };
        let mut f = facts(&running());
        f.rejected
            .insert("machine.yaml.2026-12-02T10:00:00Z".into(), sum.clone());
        let p = pass(&m, &f, Some(&node()));
        assert_eq!(reason_of(&p, SYSCTLS_APPLIED), reason::BLOCKED);
        assert!(
            p.conditions[0]
                .message
                .contains("rejected/machine.yaml.2026")
        );
        assert!(p.staging.is_empty());

        // A spec that went back to what runs takes the staged file away.
        let mut f = facts(&running());
        f.staged.insert("machine.yaml".into(), sum.clone());
        let p = pass(&api(|_| {}), &f, Some(&node()));
        assert_eq!(
            p.staging,
            [Staging::Remove {
                doc: Document::Machine
            }]
        );
        assert_eq!(p.phase, Phase::Ready);
    }

    #[test]
    fn a_request_reboot_asks_for_a_reboot_with_nothing_staged() {
        let mut m = api(|_| {});
        m.metadata.annotations.insert(
            annotations::REQUEST_REBOOT.into(),
            record().boot_id().short().into(),
        );
        let p = pass(&m, &facts(&running()), Some(&node()));
        assert!(p.staging.is_empty());
        assert_eq!(p.pending.len(), 1);
        assert_eq!(p.pending[0].hash, record().boot_id());
        assert_eq!(reason_of(&p, REBOOT_REQUEST_HONORED), reason::AWAITING_TURN);
        assert_eq!(p.wanted, Some(DisruptionKind::Reboot));
        m.metadata
            .annotations
            .insert(annotations::REQUEST_REBOOT.into(), "aaaaaaaaaaaa".into());
        let p = pass(&m, &facts(&running()), Some(&node()));
        assert!(matches!(p.request, RebootRequest::Stale(_)));
        assert_eq!(p.phase, Phase::Ready);

        // Granted and asked: the annotation is spent, the record keeps
        // the request outstanding until the machine goes down, and the
        // entry is no longer listed as waiting.
        let mut m = api(|_| {});
        let mut f = facts(&running());
        f.asked = Some(Asked {
            boot: record().boot_id(),
            kind: DisruptionKind::Reboot,
            hash: None,
            at: NOW,
            requested: true,
            k3s_pid: None,
            refused: None,
        });
        for policy in [RebootPolicy::Auto, RebootPolicy::Manual] {
            m.spec.reboot_policy = Some(policy);
            m.status.conditions.clear();
            grant(&mut m, &f);
            let p = pass(&m, &f, Some(&node()));
            assert_eq!(p.request, RebootRequest::Outstanding, "{policy:?}");
            assert_eq!(
                reason_of(&p, REBOOT_REQUEST_HONORED),
                reason::REBOOTING,
                "{policy:?}"
            );
            assert_eq!(p.phase, Phase::Updating);
            assert!(p.waiting.is_empty() && p.pending.len() == 1);
        }
    }

    #[test]
    fn k3s_labels_restart_once_then_go_onto_the_node() {
        let m = api(|s| {
            s.k3s = Some(K3sSpec {
                node_labels: [("role".to_owned(), "web".to_owned())].into(),
                node_taints: vec![],
            });
        });
        let f = facts(&running());
        let p = pass(&m, &f, Some(&node()));
        assert_eq!(p.pending.len(), 1);
        assert_eq!(p.pending[0].kind, DisruptionKind::Restart);
        assert_eq!(p.pending[0].summary, "k3s: +label role=web");
        assert_eq!(p.wanted, Some(DisruptionKind::Restart));
        assert_eq!(p.node_patch, None);

        // Asked, and k3s not back yet: the turn is in use, the entry no
        // longer waits, and nothing is patched on yet.
        let mut granted = m.clone();
        grant(&mut granted, &f);
        let mut asked = f.clone();
        asked.init.as_mut().unwrap().k3s = ServiceStatus {
            state: ServiceState::Running,
            pid: Some(42),
            restarts: 0,
        };
        asked.asked = Some(Asked {
            boot: record().boot_id(),
            kind: DisruptionKind::Restart,
            hash: Some(m.canonical_hash()),
            at: NOW,
            requested: false,
            k3s_pid: Some(42),
            refused: None,
        });
        for policy in [RebootPolicy::Auto, RebootPolicy::Manual] {
            granted.spec.reboot_policy = Some(policy);
            granted.status.conditions.clear();
            grant(&mut granted, &f);
            if let Some(a) = asked.asked.as_mut() {
                a.hash = Some(granted.canonical_hash());
            }
            let p = pass(&granted, &asked, Some(&node()));
            assert_eq!(
                reason_of(&p, K3S_CONFIGURED),
                reason::RESTARTING,
                "{policy:?}"
            );
            assert!(matches!(p.turn, TurnStep::Asked { again: false, .. }));
            assert!(p.waiting.is_empty() && p.pending.len() == 1);
            assert_eq!(p.node_patch, None);
        }

        // k3s runs again under a new pid: the labels are patched on.
        let mut restarted = asked.clone();
        restarted.init.as_mut().unwrap().k3s.pid = Some(77);
        if let Some(a) = restarted.asked.as_mut() {
            a.hash = Some(m.canonical_hash());
        }
        let p = pass(&m, &restarted, Some(&node()));
        assert!(p.pending.is_empty());
        assert_eq!(p.wanted, None);
        assert!(p.node_patch.is_some());
        assert_eq!(reason_of(&p, K3S_CONFIGURED), reason::CONVERGED);
        let mut failed = p.clone();
        failed.not_applied(K3S_CONFIGURED, "patching the Node: forbidden");
        assert_eq!(failed.phase, Phase::Degraded);
    }

    #[test]
    fn what_the_kernel_does_not_hold_is_not_applied() {
        let mut f = facts(&running());
        f.kernel
            .sysctls
            .insert("vm.swappiness".into(), Ok("30\n".into()));
        let p = pass(&api(|_| {}), &f, Some(&node()));
        assert_eq!(reason_of(&p, SYSCTLS_APPLIED), reason::NOT_APPLIED);
        assert_eq!(p.phase, Phase::Degraded);
        assert!(
            p.conditions[0]
                .message
                .contains("vm.swappiness is \"30\", not \"60\"")
        );
        let p = pass(&api(|_| {}), &facts(&running()), None);
        assert_eq!(reason_of(&p, K3S_CONFIGURED), reason::NOT_APPLIED);
    }

    #[test]
    fn the_way_a_reboot_is_made_stages_no_disruption_and_rides_the_next_reboot() {
        use liken_api::RebootVia::{Firmware, Kexec};
        let f = facts(&running());
        let with = |machine: Option<liken_api::RebootVia>,
                    cluster_via: Option<liken_api::RebootVia>,
                    spec: fn(&mut MachineSpec)| {
            let mut m = api(spec);
            m.spec.reboot = machine;
            let mut c = cluster();
            c.spec.reboot = cluster_via;
            decide_pass(PassInput {
                machine: &m,
                cluster: Some(&c),
                node: Some(&node()),
                facts: &f,
                worker: &Worker::Idle,
                now: NOW,
                window: None,
            })
        };

        // spec.reboot alone, on the Machine, the Cluster or both: both
        // documents are staged for the next boot, nothing is pending,
        // nothing asks for a turn, the machine stays Ready.
        let p = with(Some(Kexec), Some(Firmware), |_| {});
        assert_eq!(p.phase, Phase::Ready, "{:?}", p.conditions);
        assert!(
            p.pending.is_empty() && p.waiting.is_empty(),
            "{:?}",
            p.pending
        );
        assert_eq!(p.wanted, None);
        assert_eq!(p.turn, TurnStep::Idle);
        let summaries: Vec<(Document, &str)> = p
            .staging
            .iter()
            .map(|s| match s {
                Staging::Write { doc, summary, .. } => (*doc, summary.as_str()),
                Staging::Remove { doc } => (*doc, "removed"),
            })
            .collect();
        assert_eq!(
            summaries,
            [
                (
                    Document::Machine,
                    "settings: reboot unset → kexec (from the next reboot)"
                ),
                (
                    Document::Cluster,
                    "cluster settings: reboot unset → firmware (from the next reboot)"
                ),
            ]
        );
        // The Machine's choice wins; the Cluster's applies without one;
        // kexec with neither.
        assert_eq!(p.via, Kexec);
        assert_eq!(with(None, Some(Firmware), |_| {}).via, Firmware);
        assert_eq!(with(Some(Firmware), Some(Kexec), |_| {}).via, Firmware);
        assert_eq!(with(None, None, |_| {}).via, Kexec);

        // Beside a real change, only the change is pending, and the
        // reboot it takes is made the new way at once.
        let p = with(Some(Firmware), None, swappiness);
        assert_eq!(p.pending.len(), 1, "{:?}", p.pending);
        assert_eq!(p.pending[0].condition, SYSCTLS_APPLIED);
        assert_eq!(p.wanted, Some(DisruptionKind::Reboot));
        assert_eq!(p.via, Firmware);
        assert!(
            matches!(
                &p.staging[0],
                Staging::Write { summary, .. }
                    if summary == "sysctls: vm.swappiness 60 → 10; \
                                   settings: reboot unset → firmware (from the next reboot)"
            ),
            "{:?}",
            p.staging
        );
    }

    #[test]
    fn a_cluster_change_stages_the_cluster() {
        let m = api(|_| {});
        let f = facts(&running());
        let mut c = cluster();
        c.spec.leaders.push("node-2".into());
        let p = decide_pass(PassInput {
            machine: &m,
            cluster: Some(&c),
            node: Some(&node()),
            facts: &f,
            worker: &Worker::Idle,
            now: NOW,
            window: None,
        });
        let [
            Staging::Write {
                doc: Document::Cluster,
                summary,
                ..
            },
        ] = &p.staging[..]
        else {
            panic!("{:?}", p.staging);
        };
        assert_eq!(summary, "cluster: leaders node-1 → node-1, node-2");
        assert_eq!(reason_of(&p, K3S_CONFIGURED), reason::AWAITING_TURN);
        assert_eq!(p.pending[0].hash, c.canonical_hash());

        // A new target release alone restages the Cluster, asks nothing
        // of k3s, and starts the download.
        let mut c = cluster();
        c.spec.version = Some(Version::parse("2026.12.02-001").unwrap());
        c.spec.releases = Some(liken_api::cluster::ReleasesSpec {
            source: "http://channel".into(),
            catalog: vec![liken_api::cluster::CatalogEntry {
                version: Version::parse("2026.12.02-001").unwrap(),
                digest: liken_api::Digest::parse(&format!("sha256:{}", "a".repeat(64))).unwrap(),
            }],
        });
        let p = decide_pass(PassInput {
            machine: &m,
            cluster: Some(&c),
            node: Some(&node()),
            facts: &f,
            worker: &Worker::Idle,
            now: NOW,
            window: None,
        });
        assert_eq!(reason_of(&p, K3S_CONFIGURED), reason::CONVERGED);
        assert_eq!(reason_of(&p, RELEASE_CURRENT), reason::DOWNLOADING);
        assert_eq!(p.phase, Phase::Downloading);
        assert!(matches!(p.intent, Intent::Download { .. }));
        assert!(matches!(
            &p.staging[..],
            [Staging::Write {
                doc: Document::Cluster,
                ..
            }]
        ));
        assert!(p.pending.is_empty());
    }
}
