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
//! A blocking read cannot be interrupted: `stop` is honoured between
//! events and when the server ends the stream, so stopping takes at most
//! the watch's timeoutSeconds. Operators are crash-only and never wait.

use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::backoff::Backoff;
use crate::client::Client;
use crate::error::{Error, Status, status_error};
use crate::object::Object;
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
                ))),
                None => Err(decode(format!(
                    "a watch line is neither an event nor a Status: {e}"
                ))),
            };
        }
    };
    let object = raw.object.get().as_bytes();
    let obj = || T::decode(object, what).map_err(decode);
    match raw.kind.as_str() {
        "ADDED" => Ok(WatchEvent::Added(obj()?)),
        "MODIFIED" => Ok(WatchEvent::Modified(obj()?)),
        "DELETED" => Ok(WatchEvent::Deleted(obj()?)),
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
        let reader = self.open_stream(&req, timeout)?;
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
    },
    /// The watch could not be opened or broke.
    StreamFailed {
        /// The newest resourceVersion seen.
        resource_version: String,
        /// The server said 410 Gone.
        gone: bool,
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

/// The watcher's state machine: where to go after `outcome`.
pub fn decide_next(outcome: Outcome) -> Decision {
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
        Outcome::StreamEnded { resource_version } => Decision {
            next: WatcherState::Watching { resource_version },
            back_off: false,
            restart: false,
        },
        // The resourceVersion is no longer kept: what happened since is
        // unknown, so list again, at once.
        Outcome::StreamFailed { gone: true, .. } => Decision {
            next: WatcherState::Empty,
            back_off: false,
            restart: true,
        },
        Outcome::StreamFailed {
            resource_version,
            gone: false,
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
    /// A fresh LIST: this is now the whole set.
    Restarted(Vec<T>),
    /// An object was added or changed.
    Applied(T),
    /// An object was deleted.
    Deleted(T),
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
}

impl WatchStats {
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
}

/// Where a watcher reports the failures it retries.
pub type Report = Arc<dyn Fn(&str) + Send + Sync>;

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
    /// A watcher of everything `api` addresses.
    pub fn new(client: Client, api: Api) -> Watcher<T> {
        Watcher {
            client,
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
    /// after a restart). If it is too old the server says 410 and the
    /// watcher lists.
    pub fn resume_from(mut self, resource_version: &str) -> Watcher<T> {
        self.state = WatcherState::Watching {
            resource_version: resource_version.to_owned(),
        };
        self
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

    /// The flag that stops [`Watcher::run`].
    pub fn stopper(&self) -> Arc<AtomicBool> {
        self.stop.clone()
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
                    let rv = list.resource_version;
                    sink(Event::Restarted(list.items));
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
                let mut rv = resource_version;
                let mut stream = match self.client.watch::<T>(&self.api, &self.watch_params, &rv) {
                    Ok(s) => s,
                    Err(e) => {
                        let gone = e.is_gone();
                        return (
                            Outcome::StreamFailed {
                                resource_version: rv,
                                gone,
                            },
                            Some(e),
                        );
                    }
                };
                loop {
                    if self.stop.load(Ordering::Relaxed) {
                        return (
                            Outcome::StreamEnded {
                                resource_version: rv,
                            },
                            None,
                        );
                    }
                    let event = match stream.next_event() {
                        None => {
                            return (
                                Outcome::StreamEnded {
                                    resource_version: rv,
                                },
                                None,
                            );
                        }
                        Some(Ok(ev)) => ev,
                        Some(Err(e)) => {
                            return (
                                Outcome::StreamFailed {
                                    resource_version: rv,
                                    gone: false,
                                },
                                Some(e),
                            );
                        }
                    };
                    let (next_rv, out) = match event {
                        WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                            (o.resource_version().to_owned(), Some(Event::Applied(o)))
                        }
                        WatchEvent::Deleted(o) => {
                            (o.resource_version().to_owned(), Some(Event::Deleted(o)))
                        }
                        WatchEvent::Bookmark { resource_version } => (resource_version, None),
                        WatchEvent::Error(e) => {
                            let gone = e.is_gone();
                            return (
                                Outcome::StreamFailed {
                                    resource_version: rv,
                                    gone,
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
        }
    }

    /// Lists and watches until the stop flag is set.
    pub fn run(&mut self, sink: &mut dyn FnMut(Event<T>)) {
        let what = format!("watch {}", self.api.resource().plural);
        while !self.stop.load(Ordering::Relaxed) {
            let (outcome, error) = self.step(sink);
            let decision = decide_next(outcome);
            if decision.restart {
                self.stats.restarts.fetch_add(1, Ordering::Relaxed);
            }
            self.state = decision.next;
            if decision.back_off {
                let delay = self.backoff.next_delay(Instant::now());
                if let Some(e) = &error {
                    (self.report)(&format!(
                        "{what}: {e}; retrying in {:.1}s",
                        delay.as_secs_f64()
                    ));
                }
                self.sleep(delay);
            } else if let Some(e) = &error {
                (self.report)(&format!("{what}: {e}; listing again"));
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
        let cases = [
            (
                Outcome::Listed {
                    resource_version: rv("10"),
                },
                WatcherState::InitListed {
                    resource_version: rv("10"),
                },
                false,
                false,
            ),
            (Outcome::ListFailed, WatcherState::Empty, true, false),
            (
                Outcome::StreamEnded {
                    resource_version: rv("12"),
                },
                WatcherState::Watching {
                    resource_version: rv("12"),
                },
                false,
                false,
            ),
            (
                Outcome::StreamFailed {
                    resource_version: rv("12"),
                    gone: true,
                },
                WatcherState::Empty,
                false,
                true,
            ),
            (
                Outcome::StreamFailed {
                    resource_version: rv("12"),
                    gone: false,
                },
                WatcherState::Watching {
                    resource_version: rv("12"),
                },
                true,
                true,
            ),
        ];
        for (outcome, next, back_off, restart) in cases {
            let d = decide_next(outcome.clone());
            assert_eq!(
                d,
                Decision {
                    next,
                    back_off,
                    restart
                },
                "after {outcome:?}"
            );
        }
    }
}
