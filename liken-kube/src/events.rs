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
//! abandoned. Repeats are not merged into an Event series.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError, bounded};
use serde::Serialize;

use crate::client::Client;
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
}

impl RecorderConfig {
    /// A config with a 256-Event queue and 5 s posts.
    pub fn new(controller: impl Into<String>, instance: impl Into<String>) -> RecorderConfig {
        RecorderConfig {
            controller: controller.into(),
            instance: instance.into(),
            capacity: 256,
            request_timeout: Duration::from_secs(5),
        }
    }
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

/// The Event's JSON body; `unique` makes the name unique (client-go uses
/// the time in nanoseconds as hex).
pub fn event_body(config: &RecorderConfig, record: &Record, unique: u64, now: String) -> Vec<u8> {
    let body = EventBody {
        api_version: "events.k8s.io/v1",
        kind: "Event",
        metadata: EventMeta {
            name: format!("{}.{unique:016x}", record.regarding.name),
            namespace: event_namespace(&record.regarding),
        },
        event_time: now,
        reporting_controller: &config.controller,
        reporting_instance: &config.instance,
        action: &record.action,
        reason: &record.reason,
        // The API caps a note at 1 kB.
        note: truncate(&record.note, 1024),
        kind_of: record.kind,
        regarding: &record.regarding,
    };
    serde_json::to_vec(&body).expect("an Event serializes")
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

/// Counts of what happened to recorded Events.
#[derive(Debug, Default)]
pub struct RecorderStats {
    /// Posted successfully.
    pub posted: AtomicU64,
    /// Refused by the server or failed in transport.
    pub failed: AtomicU64,
    /// Dropped because the queue was full.
    pub dropped: AtomicU64,
}

/// What shutdown achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushReport {
    /// Events posted over the recorder's life.
    pub posted: u64,
    /// Events that failed to post.
    pub failed: u64,
    /// Events dropped on a full queue.
    pub dropped: u64,
    /// Events still queued when the flush time ran out.
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
    /// Starts the posting thread.
    pub fn start(client: Client, config: RecorderConfig) -> Recorder {
        let (tx, rx) = bounded::<Record>(config.capacity.max(1));
        let (done_tx, done) = bounded::<u64>(1);
        let stats = Arc::new(RecorderStats::default());
        let thread_stats = stats.clone();
        let queue = rx.clone();
        let thread = std::thread::Builder::new()
            .name("liken-kube-events".into())
            .spawn(move || post_loop(client, config, rx, thread_stats, done_tx))
            .expect("spawning the Events thread");
        Recorder {
            tx: Some(tx),
            queue,
            stats,
            done,
            thread: Some(thread),
        }
    }

    /// Queues an Event; never blocks. Returns false if it was dropped.
    pub fn record(&self, record: Record) -> bool {
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
            // The thread is stuck in a post; leave it, it ends with the
            // process.
            Err(_) => self.queue.len() as u64,
        };
        FlushReport {
            posted: self.stats.posted.load(Ordering::Relaxed),
            failed: self.stats.failed.load(Ordering::Relaxed),
            dropped: self.stats.dropped.load(Ordering::Relaxed),
            abandoned,
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
    loop {
        let record = match rx.recv_timeout(Duration::from_secs(3600)) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let unique = crate::random::next(&mut rng);
        let body = event_body(&config, &record, unique, crate::microtime::now());
        let api = Api::namespaced(EVENTS, event_namespace(&record.regarding));
        let result = api
            .create(body)
            .and_then(|req| client.send(&req.timeout(config.request_timeout)));
        match result {
            Ok(_) => {
                stats.posted.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                stats.failed.fetch_add(1, Ordering::Relaxed);
                eprintln!(
                    "liken-kube: posting Event {} on {} {}: {e}",
                    record.reason, record.regarding.kind, record.regarding.name
                );
            }
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
        let mut rc = RecorderConfig::new("c", "i");
        rc.capacity = 1;
        let r = Recorder::start(client, rc);
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
}
