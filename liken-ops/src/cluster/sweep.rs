//! One sweep, carried out: read the stores, decide, write in order.
//!
//! Everything this program writes is written here, from the one loop.
//! The order of the writes is the design:
//!
//! 0. **The upkeep**, whose writes touch no Machine and no Cluster: the
//!    steward's evictions of stale OS pods ([`super::steward`]), the
//!    feature janitor's deletes ([`super::janitor`]), then the flux
//!    feature's key, engine or teardown ([`super::flux`]), whose public
//!    key and refusal the status below carries.
//! 1. **The Cluster's status**, carrying the turn ledger, with the
//!    resourceVersion the sweep read (a conflict means another copy wrote
//!    since, and this sweep's grants and reclaims must not go out: a
//!    reclaim lets the next sweep free a ledger entry, which must not
//!    happen before the halt this sweep found is stored). Each condition that
//!    transitioned posts its Event after the write lands. If the stored
//!    answer lacks the ledger or halt that was sent (a CRD from an older
//!    release pruned them), no grant goes out and Progressing says why.
//! 2. **The grants**, each a merge patch of the Machine's conditions
//!    conditioned on the resourceVersion recorded in the ledger; then the
//!    **reclaims**. A conflict means the machine wrote first: skipped,
//!    not retried (the next sweep decides again from the new version).
//! 3. **The Lost verdicts**, only onto machines whose heartbeat is stale
//!    (so their own operator is not writing), again conditioned on the
//!    version read; a conflict means the machine came back, which is the
//!    outcome this write exists to allow.
//!
//! Before any of it, the heartbeat watch is judged by this copy's own
//! election Lease ([`freshness`](super::freshness)): when the watch is
//! behind, the heartbeat Leases are read directly and recorded as the
//! watch would have, and a sweep whose direct read fails too does
//! nothing, so no machine is judged from a silent watch.
//!
//! A Machine or Cluster the wire decoder refuses is skipped with one Event
//! and one log line naming the field (once per object and reason, however
//! often it is written), and the sweep goes on with the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use liken_api::annotations::CHECK_RELEASES;
use liken_api::condition::{self, Condition};
use liken_api::coordination::{
    self, GRANT_REASON, HEARTBEAT_NAMESPACE, REBOOT_APPROVED, VERSION_LABEL,
};
use liken_api::{Cluster, ConditionStatus, Machine, Phase, Time, Version};
use liken_kube::election::{LeaderGuard, Lease};
use liken_kube::events::{EventType, ObjectReference, Recorder};
use liken_kube::request::{CLUSTERS, LEASES, ListParams, MACHINES};
use liken_kube::{Api, Client, DynamicObject, Error, Object};
use serde_json::json;

use super::channel::Poller;
use super::deployment::Deployment;
use super::events;
use super::fleet::{self, FleetSweep, Judged, decide_fleet_sweep};
use super::flux::Flux;
use super::freshness::{self, LeaseWatch};
use super::heartbeat::{Heartbeat, Sightings};
use super::janitor;
use super::metrics::{ClusterMetrics, ErrorKind};
use super::rollout::{self, Rollout, RolloutInput, Template, decide_rollout};
use super::status::{self, Extras};
use super::steward::Steward;
use super::watches::{self, Watches};
use super::windows;
use crate::runtime::log;
use crate::windows::{ZONEINFO, Zones};

/// The intervals a sweep judges by.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A heartbeat not renewed for this long is stale.
    pub stale_after: Duration,
    /// A turn held this long stalls the rollout.
    pub stall_after: Duration,
}

/// Why a sweep could not reach a verdict.
#[derive(Debug)]
pub enum SweepError {
    /// A Machine that holds a ledger entry could not be read fresh.
    ReadMachine {
        /// The Machine.
        name: String,
        /// What failed.
        error: Error,
    },
    /// The heartbeat watch is behind and the direct read of the Leases
    /// failed: nothing can be judged.
    ReadLeases {
        /// How long the watch has been silent.
        silent_for: Duration,
        /// What failed.
        error: Error,
    },
    /// The watch's copy of the Leases would mark machines Lost and the
    /// direct read that confirms it failed: nothing is marked.
    ConfirmLost {
        /// The machines the watch's copy found silent.
        machines: Vec<String>,
        /// What failed.
        error: Error,
    },
}

impl std::fmt::Display for SweepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SweepError::ReadMachine { name, error } => write!(
                f,
                "reading machine {name}, which holds a reboot turn, before deciding its turn: {error}"
            ),
            SweepError::ReadLeases { silent_for, error } => write!(
                f,
                "the heartbeat Lease watch has been silent for {}s and reading the Leases \
                 directly failed, so this sweep judges no machine: {error}",
                silent_for.as_secs()
            ),
            SweepError::ConfirmLost { machines, error } => write!(
                f,
                "the heartbeat Lease watch has seen no renewal from {} within the stale limit, \
                 and reading the Leases directly to confirm it failed, so this sweep marks \
                 nothing Lost and judges no machine: {error}",
                machines.join(", ")
            ),
        }
    }
}

/// What a sweep needs that outlives it.
pub struct Sweeper {
    /// The leader-guarded client: every write passes the election first.
    pub client: Client,
    /// The watches.
    pub watches: Watches,
    /// The heartbeat record the Lease watch fills.
    pub sightings: Arc<Mutex<Sightings>>,
    /// The Events recorder.
    pub recorder: Recorder,
    /// The channel poller.
    pub poller: Poller,
    /// The fleet gauges and error counters.
    pub metrics: ClusterMetrics,
    /// The intervals.
    pub limits: Limits,
    /// The Cluster the deployment names.
    deployment: Deployment,
    /// The flux feature's upkeep (when it last probed for the engine).
    flux: Flux,
    /// The steward (the terminating OS pods it has reported).
    steward: Steward,
    /// Unreadable objects already reported, by kind and key, with the
    /// [`refusal_key`] of what the decoder said.
    reported: BTreeMap<(&'static str, String), String>,
    /// The Cluster this copy operates, once found (for the log).
    operating: Option<String>,
    /// Whether the wait for a Cluster has been logged.
    waiting_logged: bool,
    /// The tz database the maintenance windows are judged by.
    zones: Zones,
    /// The election's guard: when this copy last renewed its Lease.
    renewals: LeaderGuard,
    /// The heartbeat watch's state at the last sweep.
    lease_watch: LeaseWatch,
    /// The oldest renewal of the election Lease the watch owes.
    owed: freshness::Owed,
}

impl Sweeper {
    /// A sweeper over running watches.
    #[allow(clippy::too_many_arguments)] // each is a part the loop owns
    pub fn new(
        client: Client,
        watches: Watches,
        sightings: Arc<Mutex<Sightings>>,
        recorder: Recorder,
        poller: Poller,
        metrics: ClusterMetrics,
        limits: Limits,
        deployment: Deployment,
        renewals: LeaderGuard,
    ) -> Sweeper {
        Sweeper {
            client,
            watches,
            sightings,
            recorder,
            poller,
            metrics,
            limits,
            deployment,
            flux: Flux::new(),
            steward: Steward::new(),
            reported: BTreeMap::new(),
            operating: None,
            waiting_logged: false,
            zones: Zones::new(ZONEINFO),
            renewals,
            lease_watch: LeaseWatch::Current,
            owed: freshness::Owed::default(),
        }
    }

    /// One sweep of the whole fleet.
    pub fn sweep(&mut self) -> Result<(), SweepError> {
        let gate = self.watches.gate();
        if gate == super::watches::SweepGate::Wait {
            return Ok(());
        }
        self.report_unreadable();
        let Some(cluster) = self.pick_cluster() else {
            return Ok(());
        };
        let mono = Instant::now();
        let now = Time::from_system(SystemTime::now());

        self.check_lease_watch(mono)?;
        let machines = self.machines_for(&cluster)?;
        let unreadable: BTreeSet<String> = lock(&self.watches.unreadable_machines)
            .keys()
            .cloned()
            .collect();
        let (mut heartbeats, mut watched_for) = self.judge_heartbeats(&machines, mono);
        let mut judged = judge(&machines, &heartbeats);
        let mut fleet = decide_fleet_sweep(&judged);
        // A Lost verdict is a write every other decision follows, and the
        // watch can have gone silent a moment before the sweep that would
        // notice it (an owed renewal is judged only after it waits
        // freshness::behind_after): confirm it with one direct read of the
        // Leases, and judge again from what that read finds.
        if !fleet.lost.is_empty() && self.lease_watch == LeaseWatch::Current {
            self.read_leases()
                .map_err(|error| SweepError::ConfirmLost {
                    machines: fleet.lost.clone(),
                    error,
                })?;
            let mono = Instant::now();
            (heartbeats, watched_for) = self.judge_heartbeats(&machines, mono);
            judged = judge(&machines, &heartbeats);
            fleet = decide_fleet_sweep(&judged);
        }
        let template = match gate {
            super::watches::SweepGate::NoGrants(why) => Template::Unreadable(why),
            _ => self.template(),
        };
        let zones = windows::load_zones(&mut self.zones, &cluster, &judged);
        let windows_gate = windows::decide_gate(&cluster, &judged, zones, now);
        let mut rollout = decide_rollout(&RolloutInput {
            cluster: &cluster,
            machines: &judged,
            unreadable: &unreadable,
            template: &template,
            watched_for,
            stale_after: self.limits.stale_after,
            stall_after: self.limits.stall_after,
            now,
            windows: &windows_gate,
        });

        let releases = cluster.spec.releases.as_ref();
        self.poller.observe(
            releases.map_or("", |r| r.source.as_str()),
            cluster
                .metadata
                .annotation(CHECK_RELEASES)
                .unwrap_or_default(),
            (
                cluster.status.releases.available.as_ref(),
                cluster.status.releases.channel.as_ref(),
            ),
            mono,
        );
        // The upkeep, in the seed's order: the OS's own pods on machines
        // that already run the template's release, the workloads of
        // retracted features, then the flux feature (its key and engine,
        // or its teardown), whose answer the status carries.
        if let Some(ds) = self.machine_operator() {
            let machines = machines.iter().map(|m| m.as_ref());
            self.steward.sweep(&self.client, &ds, &template, machines);
        }
        janitor::sweep(&self.client, &cluster);
        let flux = self
            .flux
            .sweep(&self.client, &self.recorder, &cluster, mono);
        let extras = Extras {
            available: self.poller.available(),
            channel: self.poller.report(),
            public_key: flux.public_key,
            flux_teardown: flux.teardown,
        };

        // 1. The Cluster's status, ledger first.
        if !self.publish(&cluster, &fleet, &rollout, &extras, now) {
            rollout = rollout.without_grants();
        }
        // 2. Grants, then reclaims.
        let by_name: BTreeMap<&str, &Machine> = machines
            .iter()
            .map(|m| (m.metadata.name.as_str(), m.as_ref()))
            .collect();
        self.grant(&cluster, &rollout, &by_name, now);
        self.reclaim(&rollout, &by_name);
        // 3. Lost.
        self.mark_lost(&fleet, &judged, now);

        self.metrics.observe(&fleet, &rollout);
        Ok(())
    }

    /// Judges the heartbeat watch by this copy's election Lease and, while
    /// it is behind, records a direct read of the Leases in the sightings
    /// as the watch would have (a changed renewTime is a renewal now).
    fn check_lease_watch(&mut self, mono: Instant) -> Result<(), SweepError> {
        let probe = *lock(&self.watches.probe);
        let (state, owed) = freshness::decide_lease_watch(
            probe,
            self.renewals.renewed_at(),
            self.owed,
            mono,
            freshness::behind_after(self.limits.stale_after),
        );
        self.owed = owed;
        if let Some(line) = freshness::decide_report(self.lease_watch, state) {
            log::warn(&line, &[]);
        }
        self.lease_watch = state;
        self.metrics
            .lease_watch(matches!(state, LeaseWatch::Behind { .. }));
        let LeaseWatch::Behind { silent_for } = state else {
            return Ok(());
        };
        self.read_leases()
            .map_err(|error| SweepError::ReadLeases { silent_for, error })
    }

    /// Reads the heartbeat Leases directly and records what the read finds
    /// in the sightings as the watch would have (a changed renewTime is a
    /// renewal now).
    fn read_leases(&mut self) -> Result<(), Error> {
        let leases = self
            .client
            .list_all::<Lease>(
                &Api::namespaced(LEASES, HEARTBEAT_NAMESPACE),
                &ListParams::labels(watches::lease_selector()),
            )
            .inspect_err(|_| self.metrics.error(ErrorKind::Read))?;
        let (now, wall) = (Instant::now(), SystemTime::now());
        let mut s = lock(&self.sightings);
        for l in leases.items.iter().filter(|l| !watches::is_election(l)) {
            s.observe(
                l.name(),
                l.spec.renew_time.as_deref().unwrap_or_default(),
                now,
                wall,
            );
        }
        Ok(())
    }

    /// Judges every Machine's heartbeat at `mono` from the sightings, and
    /// says how long the sightings have watched.
    fn judge_heartbeats(
        &self,
        machines: &[Arc<Machine>],
        mono: Instant,
    ) -> (Vec<Heartbeat>, Duration) {
        let mut s = lock(&self.sightings);
        s.begin(mono);
        let beats: Vec<_> = machines
            .iter()
            .map(|m| s.judge(&m.metadata.name, mono, self.limits.stale_after))
            .collect();
        let names: BTreeSet<&str> = machines.iter().map(|m| m.metadata.name.as_str()).collect();
        s.retain_machines(&|n| names.contains(n));
        (beats, s.watched_for(mono))
    }

    /// The fleet's Cluster: the one the deployment names, never another
    /// (crate::fleet_cluster); created from the deployment's copy when the
    /// API has none of that name.
    fn pick_cluster(&mut self) -> Option<Cluster> {
        let clusters = self.watches.clusters();
        let picked = self
            .deployment
            .pick(&self.client, &self.recorder, &clusters);
        let Some(cluster) = picked else {
            if !self.waiting_logged {
                log::info(
                    "waiting for the Cluster the deployment names",
                    &[("cluster", &self.deployment.name())],
                );
                self.waiting_logged = true;
            }
            return None;
        };
        if self.operating.as_deref() != Some(cluster.metadata.name.as_str()) {
            log::info("operating cluster", &[("cluster", &cluster.metadata.name)]);
            self.operating = Some(cluster.metadata.name.clone());
        }
        Some(cluster)
    }

    /// The Machines as the store holds them, except that each one with a
    /// ledger entry and no grant in its copy is read fresh: freeing its
    /// slot depends on its current resourceVersion, and the store may lag
    /// the Cluster's copy (two watches, two streams).
    fn machines_for(&self, cluster: &Cluster) -> Result<Vec<Arc<Machine>>, SweepError> {
        let mut machines = self.watches.machines().list();
        machines.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        for entry in &cluster.status.reboot_turns {
            let held = machines
                .iter()
                .position(|m| m.metadata.name == entry.machine);
            if held.is_some_and(|i| coordination::holds_grant(&machines[i].status.conditions)) {
                continue;
            }
            if held.is_none()
                && lock(&self.watches.unreadable_machines).contains_key(&entry.machine)
            {
                continue;
            }
            match self
                .client
                .get::<Machine>(&Api::all(MACHINES), &entry.machine)
            {
                Ok(fresh) => match held {
                    Some(i) => machines[i] = Arc::new(fresh),
                    None => machines.push(Arc::new(fresh)),
                },
                Err(e) if e.is_not_found() => {
                    if let Some(i) = held {
                        machines.remove(i);
                    }
                }
                Err(error) => {
                    self.metrics.error(ErrorKind::Read);
                    return Err(SweepError::ReadMachine {
                        name: entry.machine.clone(),
                        error,
                    });
                }
            }
        }
        Ok(machines)
    }

    /// The machine operator's DaemonSet, as the watch holds it.
    fn machine_operator(&self) -> Option<Arc<DynamicObject>> {
        self.watches.daemon_set().get(&machine_operator_key())
    }

    /// The release the machine operator DaemonSet's template carries.
    fn template(&self) -> Template {
        let Some(ds) = self.machine_operator() else {
            let key = machine_operator_key();
            return Template::Unreadable(format!(
                "DaemonSet {key} does not exist (or this operator may not read it)"
            ));
        };
        let label = format!(
            "/spec/template/metadata/labels/{}",
            VERSION_LABEL.replace('~', "~0").replace('/', "~1")
        );
        match ds.pointer(&label).and_then(|v| v.as_str()) {
            Some(v) => Version::parse(v).map_or(Template::Unlabelled, Template::Release),
            None => Template::Unlabelled,
        }
    }

    /// Writes the Cluster's status when it changed and posts the
    /// transitions. Answers whether the ledger the rollout decided is the
    /// one the API server holds, so its grants may go out.
    fn publish(
        &mut self,
        cluster: &Cluster,
        fleet: &FleetSweep,
        rollout: &Rollout,
        extras: &Extras,
        now: Time,
    ) -> bool {
        let composed = status::compose_status(cluster, fleet, rollout, extras, now);
        let Some(next) = status::decide_status_write(cluster, composed) else {
            return true;
        };
        let mut body = cluster.clone();
        body.status = next;
        let stored = match self.write_cluster_status(&body) {
            Some(stored) => stored,
            None => return false,
        };
        for c in condition::transitions(&cluster.status.conditions, &body.status.conditions) {
            let kind = if status::needs_a_person(c) {
                EventType::Warning
            } else {
                EventType::Normal
            };
            self.recorder.event(
                ObjectReference::cluster(cluster),
                kind,
                &c.reason,
                events::ACTION_SWEEP,
                &c.message,
            );
        }
        if rollout::ledger_kept(rollout, &stored) {
            return true;
        }
        log::warn(
            "the served Cluster schema does not store status.rebootTurns or status.rolloutHalt; \
             granting no reboot turn",
            &[("cluster", &cluster.metadata.name)],
        );
        let mut pruned = stored.clone();
        condition::set(
            &mut pruned.status.conditions,
            rollout::pruned_progressing().with_generation(stored.metadata.generation),
            now,
        );
        if pruned.status != stored.status {
            self.write_cluster_status(&pruned);
        }
        false
    }

    fn write_cluster_status(&self, body: &Cluster) -> Option<Cluster> {
        let name = &body.metadata.name;
        match self
            .client
            .replace_status::<Cluster, _>(&Api::all(CLUSTERS), name, body)
        {
            Ok(stored) => Some(stored),
            Err(e) if e.is_conflict() => {
                self.metrics.error(ErrorKind::Conflict);
                log::info(
                    "the Cluster changed since this sweep read it; no reboot turn goes out \
                     until the next sweep",
                    &[("cluster", name)],
                );
                None
            }
            Err(e) => {
                self.metrics.error(ErrorKind::Write);
                log::warn(
                    "publishing the cluster status",
                    &[("cluster", name), ("error", &e)],
                );
                None
            }
        }
    }

    /// Merge-patches a Machine's status conditioned on `resource_version`.
    fn patch_machine(
        &self,
        name: &str,
        resource_version: &str,
        phase: Option<Phase>,
        conditions: &[Condition],
    ) -> Result<Machine, Error> {
        let mut status = json!({ "conditions": conditions });
        if let Some(p) = phase {
            status["phase"] = json!(p);
        }
        self.client.merge_patch_status::<Machine>(
            &Api::all(MACHINES),
            name,
            &json!({"metadata": {"resourceVersion": resource_version}, "status": status}),
        )
    }

    /// Counts and logs a failed Machine write; a conflict is the machine
    /// writing first, and is skipped.
    fn machine_write_failed(&self, what: &str, name: &str, e: &Error) {
        if e.is_conflict() {
            self.metrics.error(ErrorKind::Conflict);
            log::info(
                "the machine wrote its status first; skipped until the next sweep",
                &[("machine", &name), ("write", &what)],
            );
        } else {
            self.metrics.error(ErrorKind::Write);
            log::warn(what, &[("machine", &name), ("error", e)]);
        }
    }

    fn grant(
        &self,
        cluster: &Cluster,
        rollout: &Rollout,
        machines: &BTreeMap<&str, &Machine>,
        now: Time,
    ) {
        let budget = cluster.max_unavailable();
        for g in &rollout.grants {
            let Some(m) = machines.get(g.machine.as_str()) else {
                continue;
            };
            if m.metadata.resource_version != g.resource_version {
                // The copy moved on since the entry was written: a grant
                // conditioned on the old version cannot land, and the
                // next sweep frees the entry.
                continue;
            }
            let release = g
                .release
                .as_ref()
                .map(|r| format!(" for release {r}"))
                .unwrap_or_default();
            let mut conditions = m.status.conditions.clone();
            condition::set(
                &mut conditions,
                Condition::new(
                    REBOOT_APPROVED,
                    ConditionStatus::True,
                    GRANT_REASON,
                    coordination::grant_message(
                        &format!(
                            "the cluster operator granted this machine a reboot turn{release} \
                             (spec.disruptionBudget.maxUnavailable {budget}); it allows only \
                             what it names"
                        ),
                        &g.purpose,
                    ),
                )
                .with_generation(m.metadata.generation),
                now,
            );
            match self.patch_machine(&g.machine, &g.resource_version, None, &conditions) {
                Ok(_) => {
                    log::info(
                        "granted a reboot turn",
                        &[
                            ("machine", &g.machine),
                            ("release", &g.release.as_ref().map_or("", |v| v.as_str())),
                            ("confirm", &g.confirm),
                        ],
                    );
                    self.recorder.event(
                        ObjectReference::machine(m),
                        EventType::Normal,
                        events::REBOOT_TURN_GRANTED,
                        events::ACTION_GRANT,
                        &format!("granted a reboot turn{release} (maxUnavailable {budget})"),
                    );
                }
                Err(e) => self.machine_write_failed("granting a reboot turn", &g.machine, &e),
            }
        }
    }

    fn reclaim(&self, rollout: &Rollout, machines: &BTreeMap<&str, &Machine>) {
        for name in &rollout.reclaims {
            let Some(m) = machines.get(name.as_str()) else {
                continue;
            };
            let mut conditions = m.status.conditions.clone();
            condition::remove(&mut conditions, REBOOT_APPROVED);
            let failed = rollout.halt.as_ref().filter(|h| &h.machine == name);
            match self.patch_machine(name, &m.metadata.resource_version, None, &conditions) {
                Ok(_) => {
                    let note = match failed {
                        Some(h) => format!(
                            "took the reboot turn back: release {} failed on this machine",
                            h.release
                        ),
                        None => "the machine finished its turn; reclaimed it".to_owned(),
                    };
                    log::info(&note, &[("machine", name)]);
                    self.recorder.event(
                        ObjectReference::machine(m),
                        EventType::Normal,
                        events::REBOOT_TURN_RECLAIMED,
                        events::ACTION_RECLAIM,
                        &note,
                    );
                }
                Err(e) => self.machine_write_failed("reclaiming a reboot turn", name, &e),
            }
        }
    }

    fn mark_lost(&self, fleet: &FleetSweep, judged: &[Judged<'_>], now: Time) {
        for j in judged
            .iter()
            .filter(|j| fleet.lost.iter().any(|l| l == j.name()))
        {
            let m = j.machine;
            let conditions = fleet::lost_conditions(m, now);
            match self.patch_machine(
                j.name(),
                &m.metadata.resource_version,
                Some(Phase::Lost),
                &conditions,
            ) {
                Ok(_) => {
                    let note = fleet::lost_message(&j.heartbeat);
                    log::info(
                        "machine has gone silent; marked Lost",
                        &[("machine", &j.name()), ("detail", &note)],
                    );
                    self.recorder.event(
                        ObjectReference::machine(m),
                        EventType::Warning,
                        events::MACHINE_LOST,
                        events::ACTION_MARK_LOST,
                        &note,
                    );
                }
                Err(e) => self.machine_write_failed("marking the machine Lost", j.name(), &e),
            }
        }
    }

    /// One Event and one log line per unreadable object and reason: a
    /// newer machine operator that keeps writing a status this build
    /// cannot read (a download's progress) is reported once, and again
    /// only when the decoder names another problem, or after the object
    /// was readable or gone in between.
    fn report_unreadable(&mut self) {
        for (kind, held) in [
            ("Machine", &self.watches.unreadable_machines),
            ("Cluster", &self.watches.unreadable_clusters),
        ] {
            let now: Vec<_> = lock(held).values().cloned().collect();
            self.reported
                .retain(|(k, key), _| *k != kind || now.iter().any(|u| &u.key == key));
            for u in now {
                let seen = self.reported.get(&(kind, u.key.clone()));
                let refusal = refusal_key(&u.message);
                if seen.is_some_and(|s| s == refusal) {
                    continue;
                }
                self.reported
                    .insert((kind, u.key.clone()), refusal.to_owned());
                self.metrics.error(ErrorKind::Unreadable);
                let note = format!(
                    "this {kind} cannot be read by liken-cluster-operator {} and is skipped \
                     until it is fixed: {}",
                    liken_api::BUILD_VERSION,
                    u.message
                );
                log::warn(
                    "skipping an object the decoder refuses",
                    &[("kind", &kind), ("name", &u.key), ("error", &u.message)],
                );
                self.recorder.event(
                    ObjectReference {
                        api_version: liken_api::API_VERSION.into(),
                        kind: kind.into(),
                        name: u.key.clone(),
                        ..ObjectReference::default()
                    },
                    EventType::Warning,
                    events::UNREADABLE,
                    events::ACTION_SWEEP,
                    &note,
                );
            }
        }
    }
}

/// What makes two refusals of one object the same problem: the field the
/// decoder stopped at (`status.phase: GET /apis/...: unknown variant ...`),
/// else its message without the request it came from or the position,
/// both of which change as the object is written again.
fn refusal_key(message: &str) -> &str {
    let (head, rest) = message.split_once(": ").unwrap_or(("", message));
    if !head.is_empty() && !head.contains(char::is_whitespace) {
        return head;
    }
    rest.rfind(" at line ").map_or(rest, |i| &rest[..i])
}

/// The store key of the machine operator's DaemonSet.
fn machine_operator_key() -> String {
    format!(
        "{}/{}",
        coordination::HEARTBEAT_NAMESPACE,
        coordination::MACHINE_OPERATOR
    )
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Each Machine with its heartbeat, as the fleet and rollout decisions take
/// them.
fn judge<'a>(machines: &'a [Arc<Machine>], heartbeats: &[Heartbeat]) -> Vec<Judged<'a>> {
    machines
        .iter()
        .zip(heartbeats)
        .map(|(m, h)| Judged::new(m.as_ref(), *h))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::refusal_key;

    #[test]
    fn a_refusal_is_its_field_else_its_message_without_where_it_was_read() {
        for (message, key) in [
            (
                "status.phase: GET /apis/liken.sh/v1alpha1/machines: unknown variant \
                 `Hibernating` at line 1 column 670",
                "status.phase",
            ),
            (
                "status.phase: WATCH /apis/liken.sh/v1alpha1/machines: unknown variant \
                 `Hibernating` at line 1 column 749",
                "status.phase",
            ),
            (
                "GET /apis/liken.sh/v1alpha1/clusters: expected value at line 1 column 2",
                "expected value",
            ),
            ("unreadable", "unreadable"),
        ] {
            assert_eq!(refusal_key(message), key, "{message}");
        }
    }
}
