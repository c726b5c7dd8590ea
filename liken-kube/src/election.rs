//! Leader election on a coordination.k8s.io/v1 Lease, after client-go's
//! leaderelection package, with a write guard.
//!
//! Copies of an operator compete for one Lease. The holder renews it
//! every retry period; the others watch the record and take it only once
//! it has gone unchanged, by their own clock, for the lease duration.
//! Every takeover and renewal is a PUT carrying the resourceVersion just
//! read, so two candidates racing for an expired Lease cannot both win:
//! the second write is a Conflict. The PUT sends back the whole Lease as
//! read, fields this build does not model included (labels, annotations,
//! ownerReferences, spec.strategy, spec.preferredHolder), changing only
//! the election record, as client-go's LeaseLock.Update does with the
//! object it got (tools/leaderelection/resourcelock/leaselock.go).
//!
//! The timings are client-go's: 15 s lease, 10 s renew deadline, 2 s
//! retry. They give the guard its margin. The holder may write only until
//! *renew deadline* after the start of its last successful renewal
//! ([`Elector::may_write`] checks the clock, not a flag, so a stalled or
//! killed renew thread stops writes by itself). A rival cannot take over
//! before *lease duration* after it saw that renewal, which is later.
//! Between the two lies 5 s for clock-rate drift and request latency.
//! Like client-go's, this is not a fence against a write already in
//! flight when the guard lapses; the operators keep their own ledgers for
//! that.
//!
//! On shutdown the holder stops writing first, then releases the Lease
//! as client-go does (empty holder, leaseDurationSeconds 1), so a
//! successor starts at once instead of waiting out the term.
//!
//! [`Callbacks`] are client-go's `LeaderCallbacks`
//! (tools/leaderelection/leaderelection.go): started leading, stopped
//! leading, and a new leader observed (any holder other than the last one
//! seen, this candidate included). They run on the election thread, so
//! they must return at once (send on a channel); a callback that blocks
//! delays renewals. Unlike client-go, stopped-leading is called only after
//! a term this candidate actually held. [`Elector::register`] exports
//! client-go's `leader_election_master_status` gauge and a liveness check
//! after client-go's `HealthzAdaptor`: a candidate that believes it leads
//! but has not renewed for the lease duration plus a tolerance is stuck
//! and should be restarted.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::client::{Client, WriteGuard};
use crate::error::Error;
use crate::metrics::Registry;
use crate::object::{Meta, Object, decode_plain};
use crate::request::{Api, LEASES};

/// A Lease object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    /// `coordination.k8s.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `Lease`.
    #[serde(default)]
    pub kind: String,
    /// Name, namespace, resourceVersion.
    #[serde(default)]
    pub metadata: Meta,
    /// The holder's record.
    #[serde(default)]
    pub spec: LeaseSpec,
}

/// The election record a Lease carries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseSpec {
    /// Who holds it; empty or absent when released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_identity: Option<String>,
    /// How long the holder's term lasts after a renewal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration_seconds: Option<i32>,
    /// When the current holder took it (MicroTime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquire_time: Option<String>,
    /// When the holder last renewed (MicroTime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<String>,
    /// How many times the holder changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_transitions: Option<i32>,
    /// Fields this build does not model (strategy, preferredHolder, and
    /// whatever newer servers add), sent back as read.
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

impl Object for Lease {
    fn decode(bytes: &[u8], origin: &str) -> Result<Self, String> {
        decode_plain(bytes, origin)
    }
    fn name(&self) -> &str {
        &self.metadata.name
    }
    fn namespace(&self) -> &str {
        &self.metadata.namespace
    }
    fn resource_version(&self) -> &str {
        &self.metadata.resource_version
    }
}

/// The election's three durations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    /// How long a rival waits after the last change it saw before taking
    /// the Lease.
    pub lease_duration: Duration,
    /// How long the holder keeps writing after the start of its last
    /// successful renewal.
    pub renew_deadline: Duration,
    /// How often the holder renews and candidates retry.
    pub retry_period: Duration,
}

impl Default for Timings {
    /// client-go's defaults.
    fn default() -> Timings {
        Timings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timings {
    /// client-go's rules: the lease outlasts the renew deadline, which
    /// outlasts a jittered retry period.
    pub fn check(&self) -> Result<(), String> {
        if self.lease_duration <= self.renew_deadline {
            return Err("the lease duration must be longer than the renew deadline".into());
        }
        if self.renew_deadline <= self.retry_period.mul_f64(1.2) {
            return Err("the renew deadline must be longer than 1.2 retry periods".into());
        }
        if self.lease_duration.as_secs() < 1 {
            return Err("the lease duration must be at least one second".into());
        }
        Ok(())
    }
}

/// What a candidate does with the Lease it just read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No Lease exists: create it, holding it.
    Create,
    /// Released or expired: take it over.
    Take,
    /// It is ours: renew it.
    Renew,
    /// Someone else holds a live term: wait.
    Wait,
}

/// Decides what to do with `lease` (None when absent). `unchanged_for`
/// is how long this candidate has seen the same record; the term is
/// measured on the local clock from when the record last changed, never
/// from the renewTime written by another machine's clock.
pub fn decide_acquire(lease: Option<&LeaseSpec>, me: &str, unchanged_for: Duration) -> Verdict {
    let Some(spec) = lease else {
        return Verdict::Create;
    };
    match spec.holder_identity.as_deref() {
        None | Some("") => Verdict::Take,
        Some(h) if h == me => Verdict::Renew,
        Some(_) => {
            let term = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
            if unchanged_for >= term {
                Verdict::Take
            } else {
                Verdict::Wait
            }
        }
    }
}

/// Which Lease and who we are.
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This candidate's identity (the pod name), unique among candidates.
    pub identity: String,
    /// The durations.
    pub timings: Timings,
    /// Labels the Lease carries: set when this candidate creates it, and
    /// put back on every takeover and renewal, so a watch that selects by
    /// them (the cluster operator's, which judges its own freshness by
    /// this Lease) sees a Lease made by an older build too.
    pub labels: BTreeMap<String, String>,
}

#[derive(Default)]
struct LeaderState {
    leading: bool,
    /// Writes are allowed until then.
    valid_until: Option<Instant>,
    /// When the last successful renewal started.
    renewed_at: Option<Instant>,
    /// The holder last seen on the Lease (this candidate included).
    leader: Option<String>,
}

struct Shared {
    state: Mutex<LeaderState>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, LeaderState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn may_write(&self) -> bool {
        let s = self.lock();
        s.leading && s.valid_until.is_some_and(|v| Instant::now() < v)
    }
}

/// `metadata`'s other fields with `labels` set among its labels; every
/// other label and field is kept as read.
fn label_map(
    labels: &BTreeMap<String, String>,
    mut other: serde_json::Map<String, serde_json::Value>,
) -> serde_json::Map<String, serde_json::Value> {
    if labels.is_empty() {
        return other;
    }
    let entry = other
        .entry("labels")
        .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    if !entry.is_object() {
        *entry = serde_json::Value::Object(serde_json::Map::new());
    }
    if let Some(map) = entry.as_object_mut() {
        for (k, v) in labels {
            map.insert(k.clone(), serde_json::Value::String(v.clone()));
        }
    }
    other
}

/// The liveness verdict: `Err` when this candidate believes it leads but
/// its last renewal started more than `lease_duration + tolerance` ago
/// (client-go's `LeaderElector.Check`).
pub fn decide_liveness(
    leading: bool,
    renewed_for: Option<Duration>,
    lease_duration: Duration,
    tolerance: Duration,
) -> Result<(), String> {
    match renewed_for {
        Some(d) if leading && d > lease_duration + tolerance => Err(format!(
            "the leader has not renewed its Lease for {:.0}s (lease {}s, tolerance {}s); the election thread is stuck",
            d.as_secs_f64(),
            lease_duration.as_secs(),
            tolerance.as_secs()
        )),
        _ => Ok(()),
    }
}

/// A callback without arguments.
pub type Callback = Arc<dyn Fn() + Send + Sync>;

/// What the elector calls on the way, on its own thread: each must return
/// at once (hand the news to a channel), or renewals wait on it.
#[derive(Clone)]
pub struct Callbacks {
    started_leading: Option<Callback>,
    stopped_leading: Option<Callback>,
    new_leader: Option<Report>,
    report: Report,
}

impl Default for Callbacks {
    /// No callbacks; reports to standard error.
    fn default() -> Callbacks {
        Callbacks {
            started_leading: None,
            stopped_leading: None,
            new_leader: None,
            report: Arc::new(|line| eprintln!("liken-kube: {line}")),
        }
    }
}

impl Callbacks {
    /// Called when this candidate takes the Lease and may write.
    pub fn on_started_leading(mut self, f: impl Fn() + Send + Sync + 'static) -> Callbacks {
        self.started_leading = Some(Arc::new(f));
        self
    }

    /// Called when a term this candidate held ends: lost to another,
    /// not renewed within the deadline, or released on shutdown. Writes
    /// are already refused when it runs.
    pub fn on_stopped_leading(mut self, f: impl Fn() + Send + Sync + 'static) -> Callbacks {
        self.stopped_leading = Some(Arc::new(f));
        self
    }

    /// Called with the holder's identity whenever the Lease is seen held
    /// by someone other than the last holder seen (the first holder seen
    /// included, this candidate included). A released Lease (no holder)
    /// is not reported.
    pub fn on_new_leader(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Callbacks {
        self.new_leader = Some(Arc::new(f));
        self
    }

    /// Where failures the elector retries, and its transitions, are
    /// reported as lines (default: standard error).
    pub fn report(mut self, report: Report) -> Callbacks {
        self.report = report;
        self
    }
}

/// The write guard of an elector, for [`Client::with_write_guard`].
#[derive(Clone)]
pub struct LeaderGuard(Arc<Shared>);

impl LeaderGuard {
    /// When this candidate's last successful renewal started, while it
    /// leads: each one wrote a new renewTime, so a watch of the Lease
    /// that is alive delivers it shortly after.
    pub fn renewed_at(&self) -> Option<Instant> {
        let s = self.0.lock();
        if s.leading { s.renewed_at } else { None }
    }
}

impl WriteGuard for LeaderGuard {
    fn may_write(&self) -> bool {
        self.0.may_write()
    }
}

/// A running candidate.
pub struct Elector {
    shared: Arc<Shared>,
    config: ElectionConfig,
    stop: Arc<AtomicBool>,
    abandon: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Where the elector reports becoming and ceasing to be leader, and
/// failures it retries.
pub type Report = Arc<dyn Fn(&str) + Send + Sync>;

impl Elector {
    /// Starts competing for the Lease in a thread of its own. `client`
    /// should be unguarded: the election's own writes cannot wait on it.
    pub fn start(
        client: Client,
        config: ElectionConfig,
        callbacks: Callbacks,
    ) -> Result<Elector, String> {
        config.timings.check()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(LeaderState::default()),
            changed: Condvar::new(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let abandon = Arc::new(AtomicBool::new(false));
        let mut run = Run {
            client: client.unguarded(),
            api: Api::namespaced(LEASES, config.namespace.clone()),
            config: config.clone(),
            shared: shared.clone(),
            stop: stop.clone(),
            abandon: abandon.clone(),
            observed: None,
            callbacks,
            rng: crate::random::seed(),
        };
        let thread = std::thread::Builder::new()
            .name("liken-kube-election".into())
            .spawn(move || run.run())
            .map_err(|e| format!("spawning the election thread: {e}"))?;
        Ok(Elector {
            shared,
            config,
            stop,
            abandon,
            thread: Some(thread),
        })
    }

    /// The holder last seen on the Lease (this candidate's identity while
    /// it leads), if any has been seen.
    pub fn leader(&self) -> Option<String> {
        self.shared.lock().leader.clone()
    }

    /// The liveness verdict now, with `tolerance` beyond the lease
    /// duration (client-go's `HealthzAdaptor` takes 20 s in most
    /// components).
    pub fn check(&self, tolerance: Duration) -> Result<(), String> {
        liveness(&self.shared, self.config.timings.lease_duration, tolerance)
    }

    /// Exports `leader_election_master_status{name="<namespace>/<lease>"}`
    /// (1 while this candidate may write, else 0) and a `leader-election`
    /// health check for [`crate::metrics::serve`]'s `/healthz`, failing
    /// as [`Elector::check`] does. Both outlive the elector: after a
    /// shutdown the gauge reads 0 and the check passes.
    pub fn register(&self, registry: &Registry, tolerance: Duration) {
        let lease = format!("{}/{}", self.config.namespace, self.config.name);
        let shared = self.shared.clone();
        registry.gauge_from(
            "leader_election_master_status",
            "1 while this process holds the leader Lease and may write, else 0.",
            &[("name", &lease)],
            move || if shared.may_write() { 1.0 } else { 0.0 },
        );
        let shared = self.shared.clone();
        let lease_duration = self.config.timings.lease_duration;
        registry.health_check("leader-election", move || {
            liveness(&shared, lease_duration, tolerance)
        });
    }

    /// The guard to hand to [`Client::with_write_guard`].
    pub fn guard(&self) -> LeaderGuard {
        LeaderGuard(self.shared.clone())
    }

    /// Whether writes are allowed now.
    pub fn may_write(&self) -> bool {
        self.guard().may_write()
    }

    /// Waits up to `timeout` until this candidate may write.
    pub fn wait_leading(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut s = self.shared.lock();
        loop {
            if s.leading && s.valid_until.is_some_and(|v| Instant::now() < v) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            s = self
                .shared
                .changed
                .wait_timeout(s, left.min(Duration::from_millis(50)))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Stops competing; if leading, stops writing and releases the Lease.
    pub fn shutdown(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Stops the renew thread at once, without releasing and without
    /// clearing the guard: what a crashed or frozen process leaves
    /// behind. The guard lapses on its own at the renew deadline.
    pub fn abandon(mut self) {
        self.abandon.store(true, Ordering::SeqCst);
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn liveness(shared: &Shared, lease_duration: Duration, tolerance: Duration) -> Result<(), String> {
    let s = shared.lock();
    decide_liveness(
        s.leading,
        s.renewed_at.map(|t| t.elapsed()),
        lease_duration,
        tolerance,
    )
}

impl Drop for Elector {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Run {
    client: Client,
    api: Api,
    config: ElectionConfig,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    abandon: Arc<AtomicBool>,
    /// The last record seen and when it was first seen.
    observed: Option<(LeaseSpec, Instant)>,
    callbacks: Callbacks,
    rng: u64,
}

enum Attempt {
    /// We hold the Lease as of a request started at this instant.
    Held,
    /// Someone else holds it.
    HeldByOther,
    /// The attempt failed (transport, conflict, refusal).
    Failed(Error),
}

impl Run {
    fn run(&mut self) {
        let retry = self.config.timings.retry_period;
        while !self.stop.load(Ordering::SeqCst) {
            let started = Instant::now();
            let attempt = self.try_acquire_or_renew();
            if self.abandon.load(Ordering::SeqCst) {
                return;
            }
            let leading = self.shared.lock().leading;
            self.report_new_leader();
            match attempt {
                Attempt::Held => {
                    let mut s = self.shared.lock();
                    s.valid_until = Some(started + self.config.timings.renew_deadline);
                    s.renewed_at = Some(started);
                    let became = !s.leading;
                    s.leading = true;
                    drop(s);
                    self.shared.changed.notify_all();
                    if became {
                        (self.callbacks.report)(&format!(
                            "{} became leader on Lease {}/{}",
                            self.config.identity, self.config.namespace, self.config.name
                        ));
                        if let Some(f) = &self.callbacks.started_leading {
                            f();
                        }
                    }
                }
                Attempt::HeldByOther => {
                    if leading {
                        self.step_down("another candidate holds the Lease");
                    }
                }
                Attempt::Failed(e) => {
                    if leading {
                        let expired = self
                            .shared
                            .lock()
                            .valid_until
                            .is_none_or(|v| Instant::now() >= v);
                        if expired {
                            self.step_down(&format!("could not renew within the deadline: {e}"));
                        }
                    } else if !e.is_conflict() && !matches!(e, Error::AlreadyExists { .. }) {
                        (self.callbacks.report)(&format!(
                            "{}: leader election on {}/{}: {e}",
                            self.config.identity, self.config.namespace, self.config.name
                        ));
                    }
                }
            }
            // Candidates jitter their retries (client-go's factor 1.2) so
            // they do not stampede a released Lease; the holder renews on
            // the period.
            let wait = if self.shared.lock().leading {
                retry
            } else {
                let r = crate::random::next(&mut self.rng);
                retry + retry.mul_f64(0.2 * ((r >> 11) as f64 / (1u64 << 53) as f64))
            };
            self.sleep_until(started + wait);
        }
        if !self.abandon.load(Ordering::SeqCst) {
            self.release();
        }
    }

    fn sleep_until(&self, t: Instant) {
        while !self.stop.load(Ordering::SeqCst) {
            let left = t.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left.min(Duration::from_millis(20)));
        }
    }

    fn step_down(&self, why: &str) {
        let mut s = self.shared.lock();
        s.leading = false;
        s.valid_until = None;
        drop(s);
        self.shared.changed.notify_all();
        (self.callbacks.report)(&format!(
            "{} stopped leading on Lease {}/{}: {why}",
            self.config.identity, self.config.namespace, self.config.name
        ));
        if let Some(f) = &self.callbacks.stopped_leading {
            f();
        }
    }

    /// Calls on_new_leader when the holder last observed differs from
    /// the one last reported.
    fn report_new_leader(&self) {
        let holder = self
            .observed
            .as_ref()
            .and_then(|(spec, _)| spec.holder_identity.clone())
            .filter(|h| !h.is_empty());
        let Some(holder) = holder else { return };
        let mut s = self.shared.lock();
        if s.leader.as_deref() == Some(holder.as_str()) {
            return;
        }
        s.leader = Some(holder.clone());
        drop(s);
        if let Some(f) = &self.callbacks.new_leader {
            f(&holder);
        }
    }

    fn request_timeout(&self) -> Duration {
        (self.config.timings.renew_deadline / 2).max(Duration::from_millis(200))
    }

    fn try_acquire_or_renew(&mut self) -> Attempt {
        let timeout = self.request_timeout();
        let get = match self.api.get(&self.config.name) {
            Ok(r) => r.timeout(timeout),
            Err(e) => return Attempt::Failed(e),
        };
        let current: Option<Lease> = match self.client.send(&get) {
            Ok(bytes) => match Lease::decode(&bytes, &get.what()) {
                Ok(l) => Some(l),
                Err(message) => {
                    return Attempt::Failed(Error::Decode {
                        what: get.what(),
                        message,
                    });
                }
            },
            Err(e) if e.is_not_found() => None,
            Err(e) => return Attempt::Failed(e),
        };
        let now = Instant::now();
        let unchanged_for = match (&current, &self.observed) {
            (Some(l), Some((seen, at))) if *seen == l.spec => now.saturating_duration_since(*at),
            (Some(l), _) => {
                self.observed = Some((l.spec.clone(), now));
                Duration::ZERO
            }
            (None, _) => {
                self.observed = None;
                Duration::ZERO
            }
        };
        let me = self.config.identity.clone();
        let verdict = decide_acquire(current.as_ref().map(|l| &l.spec), &me, unchanged_for);
        let stamp = crate::microtime::now();
        let duration = self.config.timings.lease_duration.as_secs().max(1) as i32;
        let result = match (verdict, current) {
            (Verdict::Wait, _) => return Attempt::HeldByOther,
            (Verdict::Create, _) => {
                let lease = Lease {
                    api_version: "coordination.k8s.io/v1".into(),
                    kind: "Lease".into(),
                    metadata: Meta {
                        name: self.config.name.clone(),
                        namespace: self.config.namespace.clone(),
                        other: label_map(&self.config.labels, serde_json::Map::new()),
                        ..Meta::default()
                    },
                    spec: LeaseSpec {
                        holder_identity: Some(me),
                        lease_duration_seconds: Some(duration),
                        acquire_time: Some(stamp.clone()),
                        renew_time: Some(stamp),
                        lease_transitions: Some(0),
                        other: serde_json::Map::new(),
                    },
                };
                self.write(
                    self.api
                        .create(serde_json::to_vec(&lease).unwrap_or_default()),
                )
            }
            (Verdict::Take | Verdict::Renew, Some(mut lease)) => {
                if verdict == Verdict::Take {
                    // As client-go counts: every change of holder, a
                    // released Lease's included.
                    lease.spec.lease_transitions =
                        Some(lease.spec.lease_transitions.unwrap_or(0) + 1);
                    lease.spec.acquire_time = Some(stamp.clone());
                }
                lease.metadata.other = label_map(
                    &self.config.labels,
                    std::mem::take(&mut lease.metadata.other),
                );
                lease.spec.holder_identity = Some(me);
                lease.spec.lease_duration_seconds = Some(duration);
                lease.spec.renew_time = Some(stamp);
                // The resourceVersion read above rides along: if anyone
                // wrote since, this is a Conflict and we hold nothing.
                self.write(self.api.replace(
                    &self.config.name,
                    serde_json::to_vec(&lease).unwrap_or_default(),
                ))
            }
            (Verdict::Take | Verdict::Renew, None) => return Attempt::HeldByOther,
        };
        match result {
            Ok(written) => {
                self.observed = Some((written.spec, Instant::now()));
                Attempt::Held
            }
            Err(e) => Attempt::Failed(e),
        }
    }

    fn write(&self, req: Result<crate::request::Request, Error>) -> Result<Lease, Error> {
        let req = req?.timeout(self.request_timeout());
        let bytes = self.client.send(&req)?;
        Lease::decode(&bytes, &req.what()).map_err(|message| Error::Decode {
            what: req.what(),
            message,
        })
    }

    /// Stops writing, then hands the Lease back if it is still ours.
    fn release(&mut self) {
        let was_leading = {
            let mut s = self.shared.lock();
            let was = s.leading;
            s.leading = false;
            s.valid_until = None;
            was
        };
        self.shared.changed.notify_all();
        if !was_leading {
            return;
        }
        if let Some(f) = &self.callbacks.stopped_leading {
            f();
        }
        let timeout = self.request_timeout();
        let Ok(get) = self.api.get(&self.config.name) else {
            return;
        };
        let Ok(bytes) = self.client.send(&get.timeout(timeout)) else {
            return;
        };
        let Ok(mut lease) = Lease::decode(&bytes, "release") else {
            return;
        };
        if lease.spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        let stamp = crate::microtime::now();
        // The rest of the Lease (labels, owners, newer spec fields) is
        // sent back as read.
        lease.spec.holder_identity = None;
        lease.spec.lease_duration_seconds = Some(1);
        lease.spec.acquire_time = Some(stamp.clone());
        lease.spec.renew_time = Some(stamp);
        match self.write(self.api.replace(
            &self.config.name,
            serde_json::to_vec(&lease).unwrap_or_default(),
        )) {
            Ok(_) => (self.callbacks.report)(&format!(
                "{} released Lease {}/{}",
                self.config.identity, self.config.namespace, self.config.name
            )),
            Err(e) => (self.callbacks.report)(&format!(
                "{} could not release Lease {}/{}: {e}",
                self.config.identity, self.config.namespace, self.config.name
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: Some(seconds),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn the_acquire_table() {
        let s = Duration::from_secs;
        let cases = [
            (None, s(0), Verdict::Create),
            (Some(spec(None, 15)), s(0), Verdict::Take),
            (Some(spec(Some(""), 1)), s(0), Verdict::Take),
            (Some(spec(Some("me"), 15)), s(0), Verdict::Renew),
            (Some(spec(Some("me"), 15)), s(100), Verdict::Renew),
            (Some(spec(Some("them"), 15)), s(14), Verdict::Wait),
            (Some(spec(Some("them"), 15)), s(15), Verdict::Take),
            // A released Lease's one-second term.
            (Some(spec(Some("them"), 1)), s(1), Verdict::Take),
        ];
        for (lease, unchanged, want) in cases {
            assert_eq!(
                decide_acquire(lease.as_ref(), "me", unchanged),
                want,
                "{lease:?} unchanged for {unchanged:?}"
            );
        }
    }

    #[test]
    fn timings_follow_client_go_rules() {
        assert!(Timings::default().check().is_ok());
        let bad = Timings {
            lease_duration: Duration::from_secs(10),
            ..Timings::default()
        };
        assert!(bad.check().is_err());
        let bad = Timings {
            retry_period: Duration::from_secs(9),
            ..Timings::default()
        };
        assert!(bad.check().is_err());
    }

    #[test]
    fn the_guard_lapses_by_the_clock() {
        let shared = Arc::new(Shared {
            state: Mutex::new(LeaderState {
                leading: true,
                valid_until: Some(Instant::now() + Duration::from_millis(30)),
                ..LeaderState::default()
            }),
            changed: Condvar::new(),
        });
        let g = LeaderGuard(shared);
        assert!(g.may_write());
        std::thread::sleep(Duration::from_millis(40));
        assert!(!g.may_write(), "no renewal, no writes");
    }

    #[test]
    fn liveness_fails_only_for_a_stuck_leader() {
        let s = Duration::from_secs;
        let cases = [
            (false, None, true),
            (false, Some(s(100)), true),
            (true, None, true),
            (true, Some(s(2)), true),
            (true, Some(s(35)), true),
            (true, Some(s(36)), false),
        ];
        for (leading, renewed_for, ok) in cases {
            assert_eq!(
                decide_liveness(leading, renewed_for, s(15), s(20)).is_ok(),
                ok,
                "leading {leading}, renewed {renewed_for:?} ago"
            );
        }
    }

    #[test]
    fn a_lease_keeps_what_this_build_does_not_model() {
        let read = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "op", "namespace": "ns", "resourceVersion": "5",
                         "uid": "u", "labels": {"app": "liken"},
                         "annotations": {"a": "b"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                              "name": "owner", "uid": "o"}]},
            "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15,
                     "strategy": "OldestEmulationVersion", "preferredHolder": "pod-b"}
        });
        let mut lease: Lease = serde_json::from_value(read.clone()).unwrap();
        lease.spec.holder_identity = Some("pod-c".into());
        let mut want = read;
        want["spec"]["holderIdentity"] = "pod-c".into();
        assert_eq!(serde_json::to_value(&lease).unwrap(), want);
    }

    #[test]
    fn lease_json_shape() {
        let l = Lease {
            api_version: "coordination.k8s.io/v1".into(),
            kind: "Lease".into(),
            metadata: Meta {
                name: "op".into(),
                namespace: "ns".into(),
                ..Meta::default()
            },
            spec: LeaseSpec {
                holder_identity: Some("pod-a".into()),
                lease_duration_seconds: Some(15),
                acquire_time: None,
                renew_time: Some("2026-01-01T00:00:00.000000Z".into()),
                lease_transitions: Some(2),
                other: serde_json::Map::new(),
            },
        };
        assert_eq!(
            serde_json::to_value(&l).unwrap(),
            serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "op", "namespace": "ns"},
                "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15,
                         "renewTime": "2026-01-01T00:00:00.000000Z", "leaseTransitions": 2}
            })
        );
    }
}
