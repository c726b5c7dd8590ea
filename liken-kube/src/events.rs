//! An Events recorder: control loops hand Events to a thread that posts
//! them, so a loop never waits on the API server to tell a person what it
//! did.
//!
//! Events are events.k8s.io/v1 objects (`kubectl get events` and
//! `kubectl describe` show them). An Event about a cluster-scoped object
//! (a Machine, the Cluster) lives in the `default` namespace, where
//! `kubectl describe` looks for it.
//!
//! The queue is bounded. When it is full the Event is dropped and
//! counted, never waited for: Events are for people, and a slow API
//! server must not stall reconciliation. On shutdown the recorder gets a
//! fixed time to post what is queued; what is left is counted as
//! abandoned.
//!
//! Repeats become a series, as client-go's events broadcaster makes them
//! (tools/events/event_broadcaster.go): an Event with the same action,
//! reason, reporting controller and regarding object as one posted less
//! than six minutes before is not posted again; the first one's
//! `series.count` and `series.lastObservedTime` are patched instead (on
//! every repeat here, where client-go patches the second and then every
//! half hour). The note is not part of the key, so a series keeps its
//! first note. Each object has a token bucket, after client-go's spam
//! filter (tools/record/events_cache.go): 25 Events at once, then one
//! every five minutes; the rest are dropped and counted.
//!
//! A post that fails on the way (no answer within its timeout, a
//! dropped connection, a 5xx or a 429) is tried again under the same
//! Event name a few times ([`decide_retry`]), so an apiserver that is
//! slow for a moment loses no Event: an Event is said once, when what it
//! describes happens, and nothing says it again later. A try that
//! landed without its answer shows as AlreadyExists on the next one.
//!
//! The fields are checked against the apiserver's own limits
//! (pkg/apis/core/validation/events.go) before anything is queued: the
//! reporting controller is a qualified name, the instance, action and
//! reason at most 128 characters and not empty, the note cut at 1024
//! bytes, and the Event's name (`<object>.<hex>`) cut to a DNS subdomain.
//!
//! Events are posted whether or not this process leads: the recorder
//! writes through an unguarded copy of its client, so a standby can say
//! why it is waiting.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError, bounded};
use serde::Serialize;

use crate::client::Client;
use crate::error::Error;
use crate::request::{Api, EVENTS};
/// What an Event is about.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// The object's apiVersion (`liken.sh/v1alpha1`).
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its namespace; empty for cluster-scoped objects.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Its uid, so the Event is not attached to a newer namesake.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

impl ObjectReference {
    /// A reference to a Machine.
    pub fn machine(m: &liken_api::Machine) -> ObjectReference {
        ObjectReference {
            api_version: liken_api::API_VERSION.into(),
            kind: "Machine".into(),
            name: m.metadata.name.clone(),
            namespace: String::new(),
            uid: m.metadata.uid.clone(),
        }
    }

    /// A reference to a Cluster.
    pub fn cluster(c: &liken_api::Cluster) -> ObjectReference {
        ObjectReference {
            api_version: liken_api::API_VERSION.into(),
            kind: "Cluster".into(),
            name: c.metadata.name.clone(),
            namespace: String::new(),
            uid: c.metadata.uid.clone(),
        }
    }
}

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something needs a person.
    Warning,
}

impl Record {
    /// Whether the apiserver would take this Event's action and reason.
    pub fn check(&self) -> Result<(), String> {
        check_field("reason", &self.reason)?;
        check_field("action", &self.action)
    }
}

/// One Event to post.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The object it is about.
    pub regarding: ObjectReference,
    /// Normal or Warning.
    pub kind: EventType,
    /// A CamelCase reason (`RebootTurnGranted`).
    pub reason: String,
    /// What was done, CamelCase (`Reboot`, `Reconcile`).
    pub action: String,
    /// The human-readable note.
    pub note: String,
}

/// Who posts the Events.
#[derive(Clone, Debug)]
pub struct RecorderConfig {
    /// The reporting controller (`liken.sh/cluster-operator`).
    pub controller: String,
    /// This instance (the pod name).
    pub instance: String,
    /// How many Events may wait to be posted.
    pub capacity: usize,
    /// The timeout of each post.
    pub request_timeout: Duration,
    /// The waits before each new try of a post that failed on the way
    /// (see [`decide_retry`]); one try more than there are waits.
    pub retry_waits: Vec<Duration>,
}

impl RecorderConfig {
    /// A config with a 256-Event queue and 5 s posts, each tried up to
    /// five times, 1, 2, 4 and 8 s apart.
    pub fn new(controller: impl Into<String>, instance: impl Into<String>) -> RecorderConfig {
        RecorderConfig {
            controller: controller.into(),
            instance: instance.into(),
            capacity: 256,
            request_timeout: Duration::from_secs(5),
            retry_waits: [1, 2, 4, 8].map(Duration::from_secs).to_vec(),
        }
    }

    /// Whether the apiserver would take Events from this controller and
    /// instance.
    pub fn check(&self) -> Result<(), String> {
        if !is_qualified_name(&self.controller) {
            return Err(format!(
                "the reporting controller {:?} is not a qualified name (`liken.sh/cluster-operator`: \
                 an optional DNS prefix and a name of at most 63 letters, digits, '-', '_' and '.')",
                self.controller
            ));
        }
        check_field("reporting instance", &self.instance)
    }
}

/// The apiserver's limit on an Event's action, reason and reporting
/// instance (`ReasonLengthLimit` and its siblings).
pub const FIELD_LIMIT: usize = 128;
/// The apiserver's limit on an Event's note, bytes.
pub const NOTE_LIMIT: usize = 1024;

fn check_field(what: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("the Event's {what} is empty"));
    }
    if value.len() > FIELD_LIMIT {
        return Err(format!(
            "the Event's {what} {value:?} is longer than the apiserver's {FIELD_LIMIT} characters"
        ));
    }
    Ok(())
}

/// apimachinery's `IsQualifiedName`: `[prefix/]name`, the prefix a DNS
/// subdomain, the name 1 to 63 alphanumerics, `-`, `_`, `.`, starting and
/// ending alphanumeric.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    name_ok && prefix.is_none_or(is_dns_subdomain)
}

/// A DNS-1123 subdomain: at most 253 lower-case alphanumerics, `-` and
/// `.`, starting and ending alphanumeric.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EventBody<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: EventMeta<'a>,
    event_time: String,
    reporting_controller: &'a str,
    reporting_instance: &'a str,
    action: &'a str,
    reason: &'a str,
    note: &'a str,
    #[serde(rename = "type")]
    kind_of: EventType,
    regarding: &'a ObjectReference,
}

#[derive(Serialize)]
struct EventMeta<'a> {
    name: String,
    namespace: &'a str,
}

/// The namespace an Event about `r` goes in.
pub fn event_namespace(r: &ObjectReference) -> &str {
    if r.namespace.is_empty() {
        "default"
    } else {
        &r.namespace
    }
}

/// The Event's name: the object's name and `unique` in hex, as client-go
/// names them, with the object's name made a DNS subdomain (lower case,
/// other characters as `-`) and cut so the whole is at most 253.
pub fn event_name(object: &str, unique: u64) -> String {
    let suffix = format!(".{unique:016x}");
    let mut base: String = object
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(253 - suffix.len())
        .collect();
    // Start and end alphanumeric (the suffix ends in a hex digit).
    while base.ends_with(['-', '.']) {
        base.pop();
    }
    let base = base.trim_start_matches(['-', '.']);
    if base.is_empty() {
        format!("event{suffix}")
    } else {
        format!("{base}{suffix}")
    }
}

/// The Event's JSON body; `unique` makes the name unique (client-go uses
/// the time in nanoseconds as hex).
pub fn event_body(config: &RecorderConfig, record: &Record, unique: u64, now: String) -> Vec<u8> {
    let body = EventBody {
        api_version: "events.k8s.io/v1",
        kind: "Event",
        metadata: EventMeta {
            name: event_name(&record.regarding.name, unique),
            namespace: event_namespace(&record.regarding),
        },
        event_time: now,
        reporting_controller: &config.controller,
        reporting_instance: &config.instance,
        action: &record.action,
        reason: &record.reason,
        note: truncate(&record.note, NOTE_LIMIT),
        kind_of: record.kind,
        regarding: &record.regarding,
    };
    serde_json::to_vec(&body).expect("an Event serializes")
}

/// The merge patch that moves a series on.
pub fn series_patch(count: u32, last_observed: String) -> serde_json::Value {
    serde_json::json!({"series": {"count": count, "lastObservedTime": last_observed}})
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A series ends when it has not repeated for this long (client-go's
/// `finishTime`); the next repeat starts a new Event.
pub const SERIES_FINISH: Duration = Duration::from_secs(6 * 60);
/// Events an object may have at once (client-go's `defaultSpamBurst`).
pub const SPAM_BURST: u32 = 25;
/// One more Event per object per this long (client-go's `defaultSpamQPS`,
/// 1/300).
pub const SPAM_REFILL: Duration = Duration::from_secs(300);

/// What identifies a series: client-go's `getKey` (action, reason,
/// reporting controller, regarding; no related object here). The
/// controller is the recorder's own, so it is left out.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    action: String,
    reason: String,
    regarding: String,
}

/// A regarding object, for its token bucket.
fn object_key(r: &ObjectReference) -> String {
    format!(
        "{}/{}/{}/{}/{}",
        r.api_version, r.kind, r.namespace, r.name, r.uid
    )
}

#[derive(Clone, Debug)]
struct SeriesState {
    namespace: String,
    name: String,
    count: u32,
    last_observed: Instant,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refilled(&self, now: Instant) -> f64 {
        let gained =
            now.saturating_duration_since(self.at).as_secs_f64() / SPAM_REFILL.as_secs_f64();
        (self.tokens + gained).min(f64::from(SPAM_BURST))
    }
}

/// What to do with one recorded Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Post a new Event.
    Create,
    /// Patch the series of the Event `namespace/name` to `count`.
    Patch {
        /// The Event's namespace.
        namespace: String,
        /// The Event's name.
        name: String,
        /// The series' new count.
        count: u32,
    },
    /// Over the object's token bucket: drop it.
    Throttled,
}

/// The series cache and the token buckets, owned by the posting thread;
/// the clock is passed in so tests need not wait five minutes.
#[derive(Default)]
pub struct Correlator {
    series: HashMap<SeriesKey, SeriesState>,
    buckets: HashMap<String, Bucket>,
}

impl Correlator {
    fn series_key(r: &Record) -> SeriesKey {
        SeriesKey {
            action: r.action.clone(),
            reason: r.reason.clone(),
            regarding: object_key(&r.regarding),
        }
    }

    /// Decides what `record` becomes at `now`, taking a token and moving
    /// its series on.
    pub fn decide(&mut self, record: &Record, now: Instant) -> Verdict {
        let bucket = self
            .buckets
            .entry(object_key(&record.regarding))
            .or_insert(Bucket {
                tokens: f64::from(SPAM_BURST),
                at: now,
            });
        let tokens = bucket.refilled(now);
        if tokens < 1.0 {
            return Verdict::Throttled;
        }
        *bucket = Bucket {
            tokens: tokens - 1.0,
            at: now,
        };
        match self.series.get_mut(&Correlator::series_key(record)) {
            Some(s) if now.saturating_duration_since(s.last_observed) < SERIES_FINISH => {
                s.count += 1;
                s.last_observed = now;
                Verdict::Patch {
                    namespace: s.namespace.clone(),
                    name: s.name.clone(),
                    count: s.count,
                }
            }
            _ => Verdict::Create,
        }
    }

    /// Notes that `record` was posted as `namespace/name`: repeats patch it.
    pub fn created(&mut self, record: &Record, namespace: &str, name: &str, now: Instant) {
        self.series.insert(
            Correlator::series_key(record),
            SeriesState {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                count: 1,
                last_observed: now,
            },
        );
    }

    /// Forgets `record`'s series (its Event is gone): the next repeat
    /// posts a new one.
    pub fn forget(&mut self, record: &Record) {
        self.series.remove(&Correlator::series_key(record));
    }

    /// Drops finished series and full buckets, which are the same as
    /// none.
    pub fn prune(&mut self, now: Instant) {
        self.series
            .retain(|_, s| now.saturating_duration_since(s.last_observed) < SERIES_FINISH);
        self.buckets
            .retain(|_, b| b.refilled(now) < f64::from(SPAM_BURST));
    }

    /// Series and buckets held (for tests).
    pub fn held(&self) -> (usize, usize) {
        (self.series.len(), self.buckets.len())
    }
}

/// Counts of what happened to recorded Events.
#[derive(Debug, Default)]
pub struct RecorderStats {
    /// Posted as new Events.
    pub posted: AtomicU64,
    /// Repeats patched into a series.
    pub patched: AtomicU64,
    /// Refused by the server or failed in transport.
    pub failed: AtomicU64,
    /// Dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Dropped by the object's token bucket.
    pub throttled: AtomicU64,
    /// Refused before queueing: a reason or action the apiserver would
    /// refuse.
    pub invalid: AtomicU64,
}

/// What shutdown achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushReport {
    /// Events posted over the recorder's life.
    pub posted: u64,
    /// Repeats patched into a series.
    pub patched: u64,
    /// Events that failed to post.
    pub failed: u64,
    /// Events dropped on a full queue.
    pub dropped: u64,
    /// Events dropped by a token bucket.
    pub throttled: u64,
    /// Events refused before queueing.
    pub invalid: u64,
    /// Events not posted when the flush time ran out: those still
    /// queued and the one in a post.
    pub abandoned: u64,
}

/// Posts Events from its own thread.
pub struct Recorder {
    tx: Option<Sender<Record>>,
    /// A second handle on the queue, to count what a timed-out flush
    /// leaves behind.
    queue: Receiver<Record>,
    stats: Arc<RecorderStats>,
    done: Receiver<u64>,
    thread: Option<JoinHandle<()>>,
}

impl Recorder {
    /// Starts the posting thread. Fails when the apiserver would refuse
    /// every Event of `config` (see [`RecorderConfig::check`]).
    pub fn start(client: Client, config: RecorderConfig) -> Result<Recorder, String> {
        config.check()?;
        // A standby posts Events too: they are not the leader's writes.
        let client = client.unguarded();
        let (tx, rx) = bounded::<Record>(config.capacity.max(1));
        let (done_tx, done) = bounded::<u64>(1);
        let stats = Arc::new(RecorderStats::default());
        let thread_stats = stats.clone();
        let queue = rx.clone();
        let thread = std::thread::Builder::new()
            .name("liken-kube-events".into())
            .spawn(move || post_loop(client, config, rx, thread_stats, done_tx))
            .map_err(|e| format!("spawning the Events thread: {e}"))?;
        Ok(Recorder {
            tx: Some(tx),
            queue,
            stats,
            done,
            thread: Some(thread),
        })
    }

    /// Queues an Event; never blocks. Returns false if it was refused
    /// (a reason or action the apiserver would refuse, reported on
    /// standard error) or dropped on a full queue.
    pub fn record(&self, record: Record) -> bool {
        if let Err(e) = record.check() {
            self.stats.invalid.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "liken-kube: not recording an Event on {} {}: {e}",
                record.regarding.kind, record.regarding.name
            );
            return false;
        }
        let Some(tx) = &self.tx else { return false };
        match tx.try_send(record) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Queues a Normal or Warning Event.
    pub fn event(
        &self,
        regarding: ObjectReference,
        kind: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) -> bool {
        self.record(Record {
            regarding,
            kind,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note: note.to_owned(),
        })
    }

    /// The counters.
    pub fn stats(&self) -> Arc<RecorderStats> {
        self.stats.clone()
    }

    /// Stops taking Events and gives the thread up to `within` to post
    /// what is queued. Returns at the latest after `within`.
    pub fn shutdown(mut self, within: Duration) -> FlushReport {
        let deadline = Instant::now() + within;
        // Closing the channel tells the thread to drain and finish.
        self.tx = None;
        let abandoned = match self.done.recv_deadline(deadline) {
            Ok(left) => {
                if let Some(t) = self.thread.take() {
                    let _ = t.join();
                }
                left
            }
            // The thread is still in a post (or between its tries):
            // leave it, it ends with the process. That Event counts as
            // abandoned too, with those still queued.
            Err(RecvTimeoutError::Timeout) => self.queue.len() as u64 + 1,
            Err(RecvTimeoutError::Disconnected) => self.queue.len() as u64,
        };
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        FlushReport {
            posted: load(&self.stats.posted),
            patched: load(&self.stats.patched),
            failed: load(&self.stats.failed),
            dropped: load(&self.stats.dropped),
            throttled: load(&self.stats.throttled),
            invalid: load(&self.stats.invalid),
            abandoned,
        }
    }
}

/// What a failed try of a post leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// It failed on the way (no answer in time, a dropped connection, a
    /// 5xx or a 429): try the same request again.
    Again,
    /// An Event created under this name already exists after an earlier
    /// try failed on the way: that try landed, and this is done.
    Landed,
    /// Final: the apiserver refused it, or the tries are spent.
    GiveUp,
}

/// Judges a failed try. A post that gets no answer may or may not have
/// landed; a new try under the same Event name tells which, because a
/// second create of one name is refused as AlreadyExists. client-go's
/// broadcasters also try each Event again (tools/events/
/// event_broadcaster.go, `attemptRecording`: up to 12 tries, 10 s
/// apart); fewer and sooner here, so one lost answer does not hold up
/// the queue for minutes.
pub fn decide_retry(error: &Error, tried_before: bool, tries_left: bool) -> Retry {
    let on_the_way = match error {
        Error::Transport { .. } | Error::TooManyRequests { .. } => true,
        Error::AlreadyExists { .. } => {
            return if tried_before {
                Retry::Landed
            } else {
                Retry::GiveUp
            };
        }
        other => other.code().is_some_and(|c| c >= 500),
    };
    if on_the_way && tries_left {
        Retry::Again
    } else {
        Retry::GiveUp
    }
}

/// Sends what `request` makes until it is answered, tried again after
/// each of `waits` while [`decide_retry`] says so.
fn send_with_retries(
    waits: &[Duration],
    mut request: impl FnMut() -> Result<(), Error>,
) -> Result<(), Error> {
    let mut tries = 0;
    loop {
        let error = match request() {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        match decide_retry(&error, tries > 0, tries < waits.len()) {
            Retry::Again => {
                std::thread::sleep(waits[tries]);
                tries += 1;
            }
            Retry::Landed => return Ok(()),
            Retry::GiveUp => return Err(error),
        }
    }
}

fn post_loop(
    client: Client,
    config: RecorderConfig,
    rx: Receiver<Record>,
    stats: Arc<RecorderStats>,
    done: Sender<u64>,
) {
    let mut rng = crate::random::seed();
    let mut correlator = Correlator::default();
    let mut pruned = Instant::now();
    loop {
        let record = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => {
                correlator.prune(Instant::now());
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let now = Instant::now();
        if now.saturating_duration_since(pruned) > Duration::from_secs(60) {
            correlator.prune(now);
            pruned = now;
        }
        let namespace = event_namespace(&record.regarding).to_owned();
        let api = Api::namespaced(EVENTS, namespace.clone());
        let result = match correlator.decide(&record, now) {
            Verdict::Throttled => {
                stats.throttled.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Verdict::Patch { name, count, .. } => {
                let patch = series_patch(count, crate::microtime::now());
                // Setting the count is the same write however often it
                // lands, so a patch is tried again like a create.
                match send_with_retries(&config.retry_waits, || {
                    api.merge_patch(&name, patch.to_string().into_bytes())
                        .and_then(|req| client.send(&req.timeout(config.request_timeout)))
                        .map(drop)
                }) {
                    Ok(_) => {
                        stats.patched.fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    }
                    Err(e) => {
                        // The Event expired or was deleted: start afresh
                        // with the next repeat.
                        correlator.forget(&record);
                        Err(e)
                    }
                }
            }
            Verdict::Create => {
                let unique = crate::random::next(&mut rng);
                let body = event_body(&config, &record, unique, crate::microtime::now());
                let name = event_name(&record.regarding.name, unique);
                match send_with_retries(&config.retry_waits, || {
                    api.create(body.clone())
                        .and_then(|req| client.send(&req.timeout(config.request_timeout)))
                        .map(drop)
                }) {
                    Ok(_) => {
                        stats.posted.fetch_add(1, Ordering::Relaxed);
                        correlator.created(&record, &namespace, &name, now);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
        };
        if let Err(e) = result {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            eprintln!(
                "liken-kube: posting Event {} on {} {}: {e}",
                record.reason, record.regarding.kind, record.regarding.name
            );
        }
    }
    let _ = done.send(rx.len() as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str) -> Record {
        Record {
            regarding: ObjectReference {
                api_version: "liken.sh/v1alpha1".into(),
                kind: "Machine".into(),
                name: name.into(),
                namespace: String::new(),
                uid: "u-1".into(),
            },
            kind: EventType::Warning,
            reason: "MachineLost".into(),
            action: "Sweep".into(),
            note: "no heartbeat for 5m".into(),
        }
    }

    #[test]
    fn body_shape() {
        let config = RecorderConfig::new("liken.sh/cluster-operator", "pod-1");
        let body = event_body(
            &config,
            &record("node-1"),
            0xabc,
            "2026-01-01T00:00:00.000000Z".into(),
        );
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "node-1.0000000000000abc", "namespace": "default"},
                "eventTime": "2026-01-01T00:00:00.000000Z",
                "reportingController": "liken.sh/cluster-operator",
                "reportingInstance": "pod-1",
                "action": "Sweep", "reason": "MachineLost",
                "note": "no heartbeat for 5m", "type": "Warning",
                "regarding": {"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
                              "name": "node-1", "uid": "u-1"}
            })
        );
    }

    #[test]
    fn notes_are_cut_on_a_char_boundary() {
        let s = "é".repeat(600);
        let t = truncate(&s, 1024);
        assert!(t.len() <= 1024 && t.is_char_boundary(t.len()));
    }

    #[test]
    fn a_full_queue_drops_instead_of_waiting_and_shutdown_is_bounded() {
        // Nothing listens on this port: every post fails fast, but the
        // queue of one fills while the thread is busy.
        let config = crate::Config {
            server: "http://127.0.0.1:9".into(),
            ca_pem: None,
            auth: crate::Auth::None,
            namespace: "default".into(),
            timeout: Duration::from_secs(1),
            origin: "test".into(),
        };
        let client = Client::new(&config).unwrap();
        let mut rc = RecorderConfig::new("liken.sh/c", "i");
        rc.capacity = 1;
        rc.retry_waits.clear();
        let r = Recorder::start(client, rc).unwrap();
        let started = Instant::now();
        let mut accepted = 0;
        for i in 0..50 {
            if r.record(record(&format!("m{i}"))) {
                accepted += 1;
            }
        }
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "record never waits"
        );
        assert!(accepted < 50);
        let report = r.shutdown(Duration::from_secs(5));
        assert_eq!(report.dropped, 50 - accepted);
        assert_eq!(report.posted, 0);
        assert!(started.elapsed() < Duration::from_secs(6));
    }

    #[test]
    fn a_post_lost_on_the_way_is_tried_again_and_a_landed_one_is_done() {
        let (what, message) = (String::from("event"), String::from("m"));
        let transport = Error::Transport {
            what: what.clone(),
            message: message.clone(),
        };
        let exists = Error::AlreadyExists {
            what: what.clone(),
            message: message.clone(),
        };
        let other = |code| Error::Other {
            what: what.clone(),
            code,
            reason: String::new(),
            message: message.clone(),
            retry_after: None,
        };
        let forbidden = Error::Forbidden {
            what: what.clone(),
            message: message.clone(),
        };
        let table = [
            (&transport, false, true, Retry::Again),
            (&transport, true, true, Retry::Again),
            (&transport, true, false, Retry::GiveUp),
            (&other(503), false, true, Retry::Again),
            (&other(422), false, true, Retry::GiveUp),
            (&forbidden, false, true, Retry::GiveUp),
            (&exists, false, true, Retry::GiveUp),
            (&exists, true, true, Retry::Landed),
            (&exists, true, false, Retry::Landed),
        ];
        for (error, before, left, want) in table {
            assert_eq!(
                decide_retry(error, before, left),
                want,
                "{error:?} {before} {left}"
            );
        }
        // Two lost answers, then the apiserver says the first one landed.
        let mut answers = vec![Err(exists.clone()), Err(transport.clone()), Err(transport)];
        let waits = [Duration::ZERO; 4];
        assert!(send_with_retries(&waits, || answers.pop().unwrap()).is_ok());
        assert!(answers.is_empty());
        let mut tries = 0;
        let e = send_with_retries(&waits[..2], || {
            tries += 1;
            Err(other(500))
        })
        .unwrap_err();
        assert_eq!((tries, e.code()), (3, Some(500)));
    }

    #[test]
    fn a_post_still_waiting_for_its_answer_counts_as_abandoned() {
        // A port that takes connections (the kernel's backlog) and never
        // answers: the one post waits, the second Event stays queued.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let config = crate::Config {
            server: format!("http://{}", silent.local_addr().unwrap()),
            ca_pem: None,
            auth: crate::Auth::None,
            namespace: "default".into(),
            timeout: Duration::from_secs(30),
            origin: "test".into(),
        };
        let mut rc = RecorderConfig::new("liken.sh/c", "i");
        rc.request_timeout = Duration::from_secs(30);
        let r = Recorder::start(Client::new(&config).unwrap(), rc).unwrap();
        assert!(r.record(record("m1")) && r.record(record("m2")));
        std::thread::sleep(Duration::from_millis(200));
        let started = Instant::now();
        let report = r.shutdown(Duration::from_millis(300));
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!((report.posted, report.abandoned), (0, 2), "{report:?}");
    }

    #[test]
    fn names_and_fields_meet_the_apiservers_limits() {
        assert_eq!(event_name("node-1", 0xabc), "node-1.0000000000000abc");
        assert_eq!(
            event_name("system:controller:Foo", 1),
            "system-controller-foo.0000000000000001"
        );
        let long = format!("{}.{}", "a".repeat(200), "b".repeat(52));
        let n = event_name(&long, 2);
        assert_eq!(n.len(), 253);
        assert!(is_dns_subdomain(&n), "{n}");
        assert!(is_dns_subdomain(&event_name("--", 3)));
        assert!(is_qualified_name("liken.sh/cluster-operator"));
        assert!(is_qualified_name("cluster-operator"));
        for bad in [
            "",
            "Liken.sh/op",
            "liken.sh/",
            "liken.sh/-op",
            "a b",
            &"x".repeat(64),
        ] {
            assert!(!is_qualified_name(bad), "{bad:?}");
        }
        assert!(RecorderConfig::new("liken.sh/op", "pod").check().is_ok());
        assert!(RecorderConfig::new("liken op", "pod").check().is_err());
        assert!(RecorderConfig::new("liken.sh/op", "").check().is_err());
        assert!(
            RecorderConfig::new("liken.sh/op", "p".repeat(129))
                .check()
                .is_err()
        );
        let mut r = record("m");
        assert!(r.check().is_ok());
        r.reason = "R".repeat(129);
        assert!(r.check().unwrap_err().contains("128"));
        r.reason = "Reason".into();
        r.action = String::new();
        assert!(r.check().unwrap_err().contains("action is empty"));
    }

    #[test]
    fn repeats_become_a_series_that_ends_after_six_quiet_minutes() {
        let mut c = Correlator::default();
        let t = Instant::now();
        let r = record("node-1");
        assert_eq!(c.decide(&r, t), Verdict::Create);
        c.created(&r, "default", "node-1.1", t);
        for n in 2..=4 {
            assert_eq!(
                c.decide(&r, t + Duration::from_secs(n)),
                Verdict::Patch {
                    namespace: "default".into(),
                    name: "node-1.1".into(),
                    count: n as u32
                }
            );
        }
        // Another reason on the same object is another series.
        let mut other = r.clone();
        other.reason = "MachineFound".into();
        assert_eq!(c.decide(&other, t), Verdict::Create);
        // Six quiet minutes end the series.
        let later = t + Duration::from_secs(4) + SERIES_FINISH;
        assert_eq!(c.decide(&r, later), Verdict::Create);
        // A series whose Event is gone starts over.
        c.created(&r, "default", "node-1.2", later);
        c.forget(&r);
        assert_eq!(c.decide(&r, later), Verdict::Create);
    }

    #[test]
    fn each_object_has_a_burst_of_25_then_one_per_five_minutes() {
        let mut c = Correlator::default();
        let t = Instant::now();
        let a = record("a");
        let passed = (0..30)
            .filter(|_| c.decide(&a, t) != Verdict::Throttled)
            .count();
        assert_eq!(passed, SPAM_BURST as usize);
        // Another object has its own bucket.
        assert_ne!(c.decide(&record("b"), t), Verdict::Throttled);
        // One more after five minutes, then none.
        assert_eq!(
            c.decide(&a, t + Duration::from_secs(299)),
            Verdict::Throttled
        );
        assert_ne!(c.decide(&a, t + SPAM_REFILL), Verdict::Throttled);
        assert_eq!(c.decide(&a, t + SPAM_REFILL), Verdict::Throttled);
        // Full buckets and finished series are pruned.
        c.prune(t + SPAM_REFILL * 30);
        assert_eq!(c.held(), (0, 0));
    }
}
