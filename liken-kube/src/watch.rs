//! Watching a resource: list once, then stream changes, resuming where
//! the stream left off and listing again only when the server says the
//! resourceVersion is gone.
//!
//! A watch is a streaming GET that sends one JSON event per line. Three
//! pieces, kept apart so each can be tested on its own:
//!
//! - [`parse_line`] reads one line as an event. A line that is not an
//!   event is read again as a `Status` (a proxy or the server may end a
//!   stream with one), so a 410 is never mistaken for garbage.
//! - [`decide_next`] is the state machine, after kube-rs's watcher:
//!   `Empty` (must list), `InitListed` (listed, watch from the list's
//!   resourceVersion), `Watching` (resume from the last event's). A clean
//!   end of stream (the server's timeoutSeconds) reopens from the last
//!   resourceVersion; 410 Gone goes back to `Empty`; any other failure
//!   keeps the resourceVersion and backs off.
//! - [`Watcher::run`] carries the decisions out, sleeping on the
//!   [`Backoff`] kept outside the state, and counts restarts and lists in
//!   [`WatchStats`] for the metrics.
//!
//! Bookmarks are asked for, so a quiet resource still advances the
//! resourceVersion and a resume after a long quiet spell does not land on
//! a compacted revision.
//!
//! Each watcher has a connection pool of its own, so [`StopHandle::stop`]
//! can close its connections (ureq's `Agent::shutdown`): a read blocked on
//! a quiet stream returns at once instead of at the server's
//! timeoutSeconds. Each read of the stream also has its own timeout
//! ([`WatchParams::read_timeout`], 150 s): the apiserver sends a bookmark
//! about every minute to a watch that asks for them, so a stream silent
//! for longer is a half-open connection, noticed long before the 320 s
//! whole-request deadline.

use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::backoff::Backoff;
use crate::client::Client;
use crate::error::{Error, Status, status_error};
use crate::metrics::Registry;
use crate::object::{Object, Unreadable};
use crate::request::{Api, ListParams, WatchParams};

/// One event of a watch stream.
#[derive(Debug, PartialEq)]
pub enum WatchEvent<T> {
    /// A new object.
    Added(T),
    /// A changed object.
    Modified(T),
    /// A deleted object, in its last state.
    Deleted(T),
    /// An object was added, changed or deleted, but this build cannot
    /// decode it; its key and resourceVersion come from the raw metadata.
    Unreadable(Unreadable),
    /// No change, but the stream is at this resourceVersion.
    Bookmark {
        /// Where a resume would start.
        resource_version: String,
    },
    /// The server ended the stream with a Status.
    Error(Error),
}

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(borrow)]
    object: &'a serde_json::value::RawValue,
}

#[derive(Deserialize)]
struct BookmarkObject {
    metadata: BookmarkMeta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BookmarkMeta {
    resource_version: String,
}

/// Reads one line of a watch stream; `what` names the request.
pub fn parse_line<T: Object>(line: &[u8], what: &str) -> Result<WatchEvent<T>, Error> {
    let decode = |message: String| Error::Decode {
        what: what.to_owned(),
        message,
    };
    let raw: RawEvent<'_> = match serde_json::from_slice(line) {
        Ok(r) => r,
        Err(e) => {
            return match Status::parse(line) {
                Some(s) => Ok(WatchEvent::Error(status_error(
                    what.to_owned(),
                    s.code,
                    s.reason,
                    s.message,
                    s.details,
                    None,
                ))),
                None => Err(decode(format!(
                    "a watch line is neither an event nor a Status: {e}"
                ))),
            };
        }
    };
    let object = raw.object.get().as_bytes();
    let obj = |make: fn(T) -> WatchEvent<T>| match T::decode(object, what) {
        Ok(o) => make(o),
        Err(message) => WatchEvent::Unreadable(Unreadable::of(object, message)),
    };
    match raw.kind.as_str() {
        "ADDED" => Ok(obj(WatchEvent::Added)),
        "MODIFIED" => Ok(obj(WatchEvent::Modified)),
        "DELETED" => Ok(obj(WatchEvent::Deleted)),
        "BOOKMARK" => {
            let b: BookmarkObject = serde_json::from_slice(object)
                .map_err(|e| decode(format!("a bookmark without a resourceVersion: {e}")))?;
            Ok(WatchEvent::Bookmark {
                resource_version: b.metadata.resource_version,
            })
        }
        "ERROR" => {
            let s: Status = serde_json::from_slice(object)
                .map_err(|e| decode(format!("an ERROR event without a Status: {e}")))?;
            Ok(WatchEvent::Error(status_error(
                what.to_owned(),
                s.code,
                s.reason,
                s.message,
                s.details,
                None,
            )))
        }
        other => Err(decode(format!("unknown watch event type {other:?}"))),
    }
}

/// An open watch stream, read one event at a time.
pub struct WatchStream<T> {
    reader: BufReader<Box<dyn Read + Send>>,
    what: String,
    line_limit: usize,
    buf: Vec<u8>,
    _kind: std::marker::PhantomData<fn() -> T>,
}

impl<T: Object> WatchStream<T> {
    /// A stream over any reader (the client's body, or bytes in a test).
    pub fn new(reader: Box<dyn Read + Send>, what: String, line_limit: usize) -> WatchStream<T> {
        WatchStream {
            reader: BufReader::with_capacity(64 << 10, reader),
            what,
            line_limit,
            buf: Vec::new(),
            _kind: std::marker::PhantomData,
        }
    }

    /// The next event; `None` when the server ended the stream cleanly.
    pub fn next_event(&mut self) -> Option<Result<WatchEvent<T>, Error>> {
        loop {
            self.buf.clear();
            let limit = self.line_limit as u64 + 1;
            let read = (&mut self.reader)
                .take(limit)
                .read_until(b'\n', &mut self.buf);
            match read {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => {
                    return Some(Err(Error::Transport {
                        what: self.what.clone(),
                        message: format!("the watch stream broke: {e}"),
                    }));
                }
            }
            if self.buf.len() > self.line_limit {
                return Some(Err(Error::TooLarge {
                    what: self.what.clone(),
                    limit: self.line_limit as u64,
                }));
            }
            let line = self.buf.trim_ascii();
            if line.is_empty() {
                continue;
            }
            return Some(parse_line(line, &self.what));
        }
    }
}

impl Client {
    /// Opens a watch from `resource_version`.
    pub fn watch<T: Object>(
        &self,
        api: &Api,
        params: &WatchParams,
        resource_version: &str,
    ) -> Result<WatchStream<T>, Error> {
        let req = api.watch(params, resource_version);
        // The server ends the stream after timeoutSeconds; the client's
        // own limit is a little later, for a connection that went silent.
        let timeout = Duration::from_secs(u64::from(params.timeout_seconds) + 30);
        let reader = self.open_stream(&req, timeout, params.read_timeout)?;
        Ok(WatchStream::new(
            Box::new(reader),
            req.what(),
            self.limits().watch_line,
        ))
    }
}

/// Where the watcher is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatcherState {
    /// Nothing known: list first.
    Empty,
    /// Listed at this resourceVersion; watch from it.
    InitListed {
        /// The list's resourceVersion.
        resource_version: String,
    },
    /// Watching; resume from the last event's resourceVersion.
    Watching {
        /// The newest resourceVersion seen.
        resource_version: String,
    },
}

/// What an attempt came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The LIST succeeded at this resourceVersion.
    Listed {
        /// The list's resourceVersion.
        resource_version: String,
    },
    /// The LIST failed.
    ListFailed,
    /// The server ended the stream cleanly; resume from here.
    StreamEnded {
        /// The newest resourceVersion seen.
        resource_version: String,
        /// Events read from the stream, bookmarks included.
        events: u64,
        /// How long the stream was open.
        lasted: Duration,
    },
    /// The watch could not be opened or broke.
    StreamFailed {
        /// The newest resourceVersion seen.
        resource_version: String,
        /// The server cannot serve that resourceVersion (410 Gone, 504
        /// ResourceVersionTooLarge): list afresh.
        relist: bool,
        /// Events read before it broke.
        events: u64,
    },
}

/// What to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The next state.
    pub next: WatcherState,
    /// Wait on the backoff before the next attempt.
    pub back_off: bool,
    /// Count this as a watch restart.
    pub restart: bool,
}

/// A stream that ends cleanly sooner than this with nothing on it is a
/// failure, not the server's timeout (client-go's reflector calls it a
/// "very short watch", tools/cache/reflector.go): a proxy or a server
/// that answers 200 and closes would otherwise be reopened in a tight
/// loop.
pub const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);

/// The watcher's state machine: where to go after `outcome`.
/// `relists_in_a_row` counts the relists forced by the server since a
/// watch last made progress.
pub fn decide_next(outcome: Outcome, relists_in_a_row: u32) -> Decision {
    match outcome {
        Outcome::Listed { resource_version } => Decision {
            next: WatcherState::InitListed { resource_version },
            back_off: false,
            restart: false,
        },
        Outcome::ListFailed => Decision {
            next: WatcherState::Empty,
            back_off: true,
            restart: false,
        },
        Outcome::StreamEnded {
            resource_version,
            events,
            lasted,
        } => {
            let very_short = events == 0 && lasted < VERY_SHORT_WATCH;
            Decision {
                next: WatcherState::Watching { resource_version },
                back_off: very_short,
                restart: very_short,
            }
        }
        // The resourceVersion cannot be served: what happened since is
        // unknown, so list again; at once the first time, after the
        // backoff when the last relist's watch met the same answer
        // (client-go relists through its backoff manager every time).
        Outcome::StreamFailed { relist: true, .. } => Decision {
            next: WatcherState::Empty,
            back_off: relists_in_a_row > 0,
            restart: true,
        },
        Outcome::StreamFailed {
            resource_version,
            relist: false,
            ..
        } => Decision {
            next: WatcherState::Watching { resource_version },
            back_off: true,
            restart: true,
        },
    }
}

/// A change the watcher hands to its consumer (the store).
#[derive(Debug)]
pub enum Event<T> {
    /// A fresh LIST: this is now the whole set (of readable objects).
    Restarted(Vec<T>),
    /// An object was added or changed.
    Applied(T),
    /// An object was deleted.
    Deleted(T),
    /// An object was added, changed or deleted, and its new state cannot
    /// be decoded: the store drops it, so it holds only objects whose
    /// current version this build can read, as after a relist. A LIST's
    /// undecodable items follow its `Restarted` as these, one each.
    Unreadable(Unreadable),
}

/// Counters a watcher keeps, for metrics and tests.
#[derive(Debug, Default)]
pub struct WatchStats {
    /// Watch streams that ended in a failure (including 410) and were
    /// reopened.
    pub restarts: AtomicU64,
    /// Successful LISTs, the first included.
    pub lists: AtomicU64,
    /// Events delivered.
    pub events: AtomicU64,
    /// Objects skipped because they could not be decoded (in a LIST or
    /// an event).
    pub unreadable: AtomicU64,
}

impl WatchStats {
    /// Exports these counters in `registry`, labelled with `resource`:
    /// `liken_watch_restarts_total`, `liken_watch_lists_total`,
    /// `liken_watch_events_total` and
    /// `liken_watch_unreadable_objects_total`. Two watchers of one resource add up
    /// in one series.
    pub fn register(self: &Arc<Self>, registry: &Registry, resource: &str) {
        type Pick = fn(&WatchStats) -> u64;
        let families: [(&str, &str, Pick); 4] = [
            (
                "liken_watch_restarts_total",
                "Watch streams that failed (410 Gone included) and were reopened.",
                WatchStats::restarts,
            ),
            (
                "liken_watch_lists_total",
                "Full LISTs of a watched resource: the first and every relist.",
                WatchStats::lists,
            ),
            (
                "liken_watch_events_total",
                "Watch events delivered to the store.",
                WatchStats::events,
            ),
            (
                "liken_watch_unreadable_objects_total",
                "Objects skipped because this build could not decode them.",
                WatchStats::unreadable,
            ),
        ];
        for (name, help, pick) in families {
            let stats = self.clone();
            registry.counter_from(name, help, &[("resource", resource)], move || {
                pick(&stats) as f64
            });
        }
    }

    /// Restarts so far.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }
    /// LISTs so far.
    pub fn lists(&self) -> u64 {
        self.lists.load(Ordering::Relaxed)
    }
    /// Events so far.
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }
    /// Unreadable objects skipped so far.
    pub fn unreadable(&self) -> u64 {
        self.unreadable.load(Ordering::Relaxed)
    }
}

/// Where a watcher reports the failures it retries.
pub type Report = Arc<dyn Fn(&str) + Send + Sync>;

/// Stops a [`Watcher`] from another thread, promptly: sets its flag and
/// closes its connections, so a read blocked on the stream returns now.
#[derive(Clone)]
pub struct StopHandle {
    flag: Arc<AtomicBool>,
    client: Client,
}

impl StopHandle {
    /// Stops the watcher. Its `run` returns within moments; the watcher
    /// cannot be restarted (its connections are closed for good).
    pub fn stop(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.client.interrupt();
    }

    /// Whether [`StopHandle::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
}

/// Lists and watches one resource, forever or until stopped.
pub struct Watcher<T> {
    client: Client,
    api: Api,
    list_params: ListParams,
    watch_params: WatchParams,
    state: WatcherState,
    backoff: Backoff,
    stats: Arc<WatchStats>,
    stop: Arc<AtomicBool>,
    report: Report,
    _kind: std::marker::PhantomData<fn() -> T>,
}

impl<T: Object> Watcher<T> {
    /// A watcher of everything `api` addresses. It reads through a
    /// connection pool of its own (see [`StopHandle`]).
    pub fn new(client: Client, api: Api) -> Watcher<T> {
        Watcher {
            client: client.detached(),
            api,
            list_params: ListParams::default().limit(500),
            watch_params: WatchParams::default(),
            state: WatcherState::Empty,
            backoff: Backoff::default(),
            stats: Arc::new(WatchStats::default()),
            stop: Arc::new(AtomicBool::new(false)),
            report: Arc::new(|line| eprintln!("liken-kube: {line}")),
            _kind: std::marker::PhantomData,
        }
    }

    /// Only objects with these labels.
    pub fn labels(mut self, selector: &str) -> Watcher<T> {
        self.list_params.label_selector = Some(selector.to_owned());
        self.watch_params.label_selector = Some(selector.to_owned());
        self
    }

    /// Only objects matching the field selector (`metadata.name=node-1`;
    /// `spec.nodeName=node-1` on Pods). Custom resources answer
    /// `metadata.name` and `metadata.namespace` only.
    pub fn fields(mut self, selector: &str) -> Watcher<T> {
        self.list_params.field_selector = Some(selector.to_owned());
        self.watch_params.field_selector = Some(selector.to_owned());
        self
    }

    /// The longest a watch stream may stay silent before it is taken for
    /// a dead connection and reopened.
    pub fn read_timeout(mut self, timeout: Duration) -> Watcher<T> {
        self.watch_params.read_timeout = timeout;
        self
    }

    /// The watch's server-side timeout (how often the stream is reopened).
    pub fn watch_timeout(mut self, seconds: u32) -> Watcher<T> {
        self.watch_params.timeout_seconds = seconds;
        self
    }

    /// The backoff between failed attempts.
    pub fn backoff(mut self, backoff: Backoff) -> Watcher<T> {
        self.backoff = backoff;
        self
    }

    /// Starts from a known resourceVersion instead of listing (a resume
    /// after a restart): the first events are the changes since. If it is
    /// too old the server says 410 and the watcher lists. An informer
    /// resumes through [`crate::Informer::spawn_seeded`] instead, which
    /// also gives its store the objects that version stands for.
    pub fn resume_from(mut self, resource_version: &str) -> Watcher<T> {
        self.state = WatcherState::Watching {
            resource_version: resource_version.to_owned(),
        };
        self
    }

    /// Forgets any resourceVersion: the next step lists.
    pub fn relist(&mut self) {
        self.state = WatcherState::Empty;
    }

    /// Where failures are reported (default: standard error).
    pub fn report(mut self, report: Report) -> Watcher<T> {
        self.report = report;
        self
    }

    /// The counters.
    pub fn stats(&self) -> Arc<WatchStats> {
        self.stats.clone()
    }

    /// The handle that stops [`Watcher::run`] from another thread.
    pub fn stopper(&self) -> StopHandle {
        StopHandle {
            flag: self.stop.clone(),
            client: self.client.clone(),
        }
    }

    /// The current state.
    pub fn state(&self) -> &WatcherState {
        &self.state
    }

    /// One attempt: a LIST or one watch stream to its end. Events go to
    /// `sink` as they arrive.
    pub fn step(&mut self, sink: &mut dyn FnMut(Event<T>)) -> (Outcome, Option<Error>) {
        match self.state.clone() {
            WatcherState::Empty => match self.client.list_all::<T>(&self.api, &self.list_params) {
                Ok(list) => {
                    self.stats.lists.fetch_add(1, Ordering::Relaxed);
                    for u in &list.skipped {
                        self.skip(u);
                    }
                    let rv = list.resource_version;
                    sink(Event::Restarted(list.items));
                    // The objects the LIST could not decode, after the
                    // set they are missing from, so a consumer that
                    // reports bad input hears of them as of a watch
                    // event's (a store has nothing to drop).
                    for u in list.skipped {
                        sink(Event::Unreadable(u));
                    }
                    (
                        Outcome::Listed {
                            resource_version: rv,
                        },
                        None,
                    )
                }
                Err(e) => (Outcome::ListFailed, Some(e)),
            },
            WatcherState::InitListed { resource_version }
            | WatcherState::Watching { resource_version } => {
                self.watch_once(resource_version, sink)
            }
        }
    }

    /// Counts and reports an object that could not be decoded.
    fn skip(&self, u: &Unreadable) {
        self.stats.unreadable.fetch_add(1, Ordering::Relaxed);
        (self.report)(&format!(
            "watch {}: skipped {} (resourceVersion {}), which this build cannot read: {}",
            self.api.resource().plural,
            u.key,
            u.resource_version,
            u.message
        ));
    }

    fn watch_once(
        &mut self,
        resource_version: String,
        sink: &mut dyn FnMut(Event<T>),
    ) -> (Outcome, Option<Error>) {
        let mut rv = resource_version;
        let opened = Instant::now();
        let mut events = 0;
        let mut stream = match self.client.watch::<T>(&self.api, &self.watch_params, &rv) {
            Ok(s) => s,
            Err(e) => {
                let relist = e.needs_relist();
                return (
                    Outcome::StreamFailed {
                        resource_version: rv,
                        relist,
                        events,
                    },
                    Some(e),
                );
            }
        };
        loop {
            let ended = |rv: String, events: u64| Outcome::StreamEnded {
                resource_version: rv,
                events,
                lasted: opened.elapsed(),
            };
            if self.stop.load(Ordering::Relaxed) {
                return (ended(rv, events), None);
            }
            let event = match stream.next_event() {
                None => return (ended(rv, events), None),
                Some(Ok(ev)) => ev,
                Some(Err(e)) => {
                    return (
                        Outcome::StreamFailed {
                            resource_version: rv,
                            relist: false,
                            events,
                        },
                        Some(e),
                    );
                }
            };
            events += 1;
            let (next_rv, out) = match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                    (o.resource_version().to_owned(), Some(Event::Applied(o)))
                }
                WatchEvent::Deleted(o) => {
                    (o.resource_version().to_owned(), Some(Event::Deleted(o)))
                }
                WatchEvent::Unreadable(u) => {
                    self.skip(&u);
                    (u.resource_version.clone(), Some(Event::Unreadable(u)))
                }
                WatchEvent::Bookmark { resource_version } => (resource_version, None),
                WatchEvent::Error(e) => {
                    let relist = e.needs_relist();
                    return (
                        Outcome::StreamFailed {
                            resource_version: rv,
                            relist,
                            events,
                        },
                        Some(e),
                    );
                }
            };
            if !next_rv.is_empty() {
                rv = next_rv;
            }
            self.state = WatcherState::Watching {
                resource_version: rv.clone(),
            };
            if let Some(out) = out {
                self.stats.events.fetch_add(1, Ordering::Relaxed);
                sink(out);
            }
        }
    }

    /// Lists and watches until stopped.
    pub fn run(&mut self, sink: &mut dyn FnMut(Event<T>)) {
        let what = format!("watch {}", self.api.resource().plural);
        let mut relists_in_a_row = 0;
        while !self.stop.load(Ordering::Relaxed) {
            let (outcome, error) = self.step(sink);
            if self.stop.load(Ordering::Relaxed) {
                // A stop interrupts a read: that error is ours, not news.
                return;
            }
            let progressed = match &outcome {
                Outcome::StreamEnded { events, lasted, .. } => {
                    *events > 0 || *lasted >= VERY_SHORT_WATCH
                }
                Outcome::StreamFailed { events, .. } => *events > 0,
                _ => false,
            };
            if progressed {
                relists_in_a_row = 0;
            }
            let very_short = matches!(&outcome, Outcome::StreamEnded { .. }) && !progressed;
            let decision = decide_next(outcome, relists_in_a_row);
            if decision.restart {
                self.stats.restarts.fetch_add(1, Ordering::Relaxed);
            }
            if decision.restart && decision.next == WatcherState::Empty {
                relists_in_a_row += 1;
            }
            self.state = decision.next;
            let why = match (&error, very_short) {
                (Some(e), _) => Some(e.to_string()),
                (None, true) => Some(
                    "very short watch: the server ended the stream within a second with no events"
                        .to_owned(),
                ),
                (None, false) => None,
            };
            if decision.back_off {
                let delay = self.backoff.next_delay(Instant::now());
                if let Some(why) = &why {
                    (self.report)(&format!(
                        "{what}: {why}; retrying in {:.1}s",
                        delay.as_secs_f64()
                    ));
                }
                self.sleep(delay);
            } else if let Some(why) = &why {
                (self.report)(&format!("{what}: {why}; listing again"));
            }
        }
    }

    fn sleep(&self, total: Duration) {
        let end = Instant::now() + total;
        while !self.stop.load(Ordering::Relaxed) {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::Machine;

    fn machine_line(kind: &str, name: &str, rv: &str) -> String {
        format!(
            r#"{{"type":"{kind}","object":{{"apiVersion":"liken.sh/v1alpha1","kind":"Machine","metadata":{{"name":"{name}","resourceVersion":"{rv}"}},"spec":{{}}}}}}"#
        )
    }

    #[test]
    fn lines_parse_into_events() {
        let e: WatchEvent<Machine> =
            parse_line(machine_line("ADDED", "a", "5").as_bytes(), "w").unwrap();
        assert!(matches!(e, WatchEvent::Added(m) if m.metadata.name == "a"));
        let e: WatchEvent<Machine> =
            parse_line(machine_line("DELETED", "a", "6").as_bytes(), "w").unwrap();
        assert!(matches!(e, WatchEvent::Deleted(m) if m.metadata.resource_version == "6"));
        let e: WatchEvent<Machine> = parse_line(
            br#"{"type":"BOOKMARK","object":{"kind":"Machine","apiVersion":"liken.sh/v1alpha1","metadata":{"resourceVersion":"77","annotations":{"k8s.io/initial-events-end":"true"}}}}"#,
            "w",
        )
        .unwrap();
        assert_eq!(
            e,
            WatchEvent::Bookmark {
                resource_version: "77".into()
            }
        );
    }

    #[test]
    fn error_events_and_bare_status_lines_are_typed() {
        let e: WatchEvent<Machine> = parse_line(
            br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 5 (90)","reason":"Expired","code":410}}"#,
            "w",
        )
        .unwrap();
        assert!(
            matches!(e, WatchEvent::Error(ref err) if err.is_gone()),
            "{e:?}"
        );
        // A line that is not an event but a Status.
        let e: WatchEvent<Machine> = parse_line(
            br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"forbidden","reason":"Forbidden","code":403}"#,
            "w",
        )
        .unwrap();
        assert!(
            matches!(e, WatchEvent::Error(Error::Forbidden { .. })),
            "{e:?}"
        );
        assert!(parse_line::<Machine>(b"garbage", "w").is_err());
        assert!(parse_line::<Machine>(br#"{"type":"WHAT","object":{}}"#, "w").is_err());
    }

    #[test]
    fn a_stream_reads_line_by_line_and_caps_lines() {
        let text = format!(
            "{}\n\n{}\n",
            machine_line("ADDED", "a", "1"),
            machine_line("MODIFIED", "a", "2")
        );
        let mut s: WatchStream<Machine> = WatchStream::new(
            Box::new(std::io::Cursor::new(text.into_bytes())),
            "w".into(),
            4096,
        );
        assert!(matches!(s.next_event(), Some(Ok(WatchEvent::Added(_)))));
        assert!(matches!(s.next_event(), Some(Ok(WatchEvent::Modified(_)))));
        assert!(s.next_event().is_none());

        let long = machine_line("ADDED", &"a".repeat(200), "1");
        let mut s: WatchStream<Machine> = WatchStream::new(
            Box::new(std::io::Cursor::new(long.into_bytes())),
            "w".into(),
            100,
        );
        assert!(matches!(
            s.next_event(),
            Some(Err(Error::TooLarge { limit: 100, .. }))
        ));
    }

    #[test]
    fn the_state_machine() {
        let rv = |s: &str| s.to_owned();
        let ms = Duration::from_millis;
        let watching = |r: &str| WatcherState::Watching {
            resource_version: rv(r),
        };
        // (outcome, relists in a row, next, back off, restart)
        let cases = [
            (
                Outcome::Listed {
                    resource_version: rv("10"),
                },
                0,
                WatcherState::InitListed {
                    resource_version: rv("10"),
                },
                false,
                false,
            ),
            (Outcome::ListFailed, 0, WatcherState::Empty, true, false),
            // The server's timeout: reopen at once.
            (
                Outcome::StreamEnded {
                    resource_version: rv("12"),
                    events: 0,
                    lasted: ms(290_000),
                },
                0,
                watching("12"),
                false,
                false,
            ),
            // A quick end with events is fine...
            (
                Outcome::StreamEnded {
                    resource_version: rv("12"),
                    events: 3,
                    lasted: ms(50),
                },
                0,
                watching("12"),
                false,
                false,
            ),
            // ...without any, a very short watch: back off.
            (
                Outcome::StreamEnded {
                    resource_version: rv("12"),
                    events: 0,
                    lasted: ms(999),
                },
                0,
                watching("12"),
                true,
                true,
            ),
            // 410: relist at once the first time...
            (
                Outcome::StreamFailed {
                    resource_version: rv("12"),
                    relist: true,
                    events: 0,
                },
                0,
                WatcherState::Empty,
                false,
                true,
            ),
            // ...after the backoff when the last relist met it too.
            (
                Outcome::StreamFailed {
                    resource_version: rv("12"),
                    relist: true,
                    events: 0,
                },
                1,
                WatcherState::Empty,
                true,
                true,
            ),
            (
                Outcome::StreamFailed {
                    resource_version: rv("12"),
                    relist: false,
                    events: 2,
                },
                0,
                watching("12"),
                true,
                true,
            ),
        ];
        for (outcome, relists, next, back_off, restart) in cases {
            let d = decide_next(outcome.clone(), relists);
            assert_eq!(
                d,
                Decision {
                    next,
                    back_off,
                    restart
                },
                "after {outcome:?} with {relists} relists in a row"
            );
        }
    }

    #[test]
    fn an_event_with_an_unreadable_object_is_named_not_fatal() {
        let line = br#"{"type":"MODIFIED","object":{"apiVersion":"liken.sh/v1alpha1","kind":"Machine",
            "metadata":{"name":"b","resourceVersion":"77"},"spec":{},"status":{"phase":"Hibernating"}}}"#;
        let e: WatchEvent<Machine> = parse_line(line, "w").unwrap();
        match e {
            WatchEvent::Unreadable(u) => {
                assert_eq!((u.key.as_str(), u.resource_version.as_str()), ("b", "77"));
                assert!(u.message.starts_with("status.phase: "), "{}", u.message);
            }
            other => panic!("{other:?}"),
        }
    }

    fn watcher_of(server: &str) -> (Watcher<Machine>, Arc<std::sync::Mutex<Vec<String>>>) {
        let config = crate::Config {
            server: server.to_owned(),
            ca_pem: None,
            auth: crate::Auth::None,
            namespace: "default".into(),
            timeout: Duration::from_secs(5),
            origin: "test".into(),
        };
        let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        let w = Watcher::new(
            Client::new(&config).unwrap(),
            Api::all(crate::request::MACHINES),
        )
        .backoff(Backoff::new(
            Duration::from_millis(200),
            Duration::from_secs(5),
            Duration::from_secs(120),
        ))
        .report(Arc::new(move |l| sink.lock().unwrap().push(l.to_owned())))
        .resume_from("1");
        (w, lines)
    }

    fn run_for(mut w: Watcher<Machine>, d: Duration) -> Arc<WatchStats> {
        let stats = w.stats();
        let stop = w.stopper();
        let t = std::thread::spawn(move || w.run(&mut |_| {}));
        std::thread::sleep(d);
        stop.stop();
        t.join().unwrap();
        stats
    }

    #[test]
    fn a_server_that_answers_200_and_closes_is_not_hammered() {
        let (server, requests) = crate::fake_server::serve(
            vec!["HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n"],
            false,
        );
        let (w, lines) = watcher_of(&server);
        let stats = run_for(w, Duration::from_secs(3));
        // Backoff 0.2, 0.4, 0.8, 1.6 s (±25%): a handful, not thousands.
        let n = requests.lock().unwrap().len() as u64;
        assert!((2..=8).contains(&n), "{n} watch requests in 3 s");
        assert!(stats.restarts() >= 2, "{}", stats.restarts());
        let lines = lines.lock().unwrap();
        assert!(
            lines.iter().any(|l| l.contains("very short watch")),
            "{lines:?}"
        );
    }

    #[test]
    fn a_silent_stream_is_noticed_by_the_read_timeout() {
        // Headers, then nothing: a half-open connection.
        let (server, requests) = crate::fake_server::serve(
            vec![
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
            ],
            true,
        );
        let (w, lines) = watcher_of(&server);
        let w = w
            .read_timeout(Duration::from_millis(300))
            .watch_timeout(290);
        let stats = run_for(w, Duration::from_millis(2500));
        let n = requests.lock().unwrap().len() as u64;
        assert!(n >= 2, "the silent stream was never given up: {n} requests");
        assert!(stats.restarts() >= 1);
        let lines = lines.lock().unwrap();
        assert!(lines.iter().any(|l| l.contains("retrying in")), "{lines:?}");
    }
}
