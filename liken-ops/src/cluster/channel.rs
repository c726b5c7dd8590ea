//! The channel poller: which release the channel announces, for
//! `status.releases.available`.
//!
//! The answer is advisory ("should someone think about upgrading?"):
//! machines download only what the Cluster's catalog pins by digest, so a
//! stale or missing answer costs nothing. Two facts shape the poller.
//! Channels change about once a week while the sweep runs every ten
//! seconds, so it asks on a long interval (six hours by default), and
//! again at once when the source changes or the Cluster's
//! `liken.sh/check-releases` annotation takes a new value (a person who
//! just published a release and wants the answer now). And a slow or dead
//! release server must never delay a Lost verdict, so the fetch runs on
//! the poller's own thread: [`Poller::observe`] only decides and hands the
//! request over, and the sweep reads the last good answer.
//!
//! A failed poll keeps the last answer and is retried on the interval (the
//! attempt's time is recorded before it runs, so a dead server is not
//! asked every sweep). A new source drops the old source's answer.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, bounded};
use liken_api::Version;

/// What the poller remembers between sweeps.
#[derive(Debug, Default)]
pub struct PollState {
    /// The source it last asked.
    source: String,
    /// The check-releases value it last honoured.
    check: String,
    /// When the last attempt started.
    polled: Option<Instant>,
    /// Whether a poll is running.
    in_flight: bool,
    /// The channel's last good answer.
    available: Option<Version>,
}

impl PollState {
    /// Decides, at one sweep, whether to poll `source` now; marks the poll
    /// as started when it answers yes.
    pub fn decide(&mut self, source: &str, check: &str, now: Instant, interval: Duration) -> bool {
        if source.is_empty() {
            // No channel: nothing to ask and nothing to keep.
            *self = PollState::default();
            return false;
        }
        if source != self.source {
            self.source = source.to_owned();
            self.check = check.to_owned();
            self.available = None;
            self.polled = None;
        } else if check != self.check {
            // Asked to poll now: the last answer stays visible until the
            // fresh one replaces it.
            self.check = check.to_owned();
            self.polled = None;
        }
        let due = self
            .polled
            .is_none_or(|p| now.saturating_duration_since(p) >= interval);
        if self.in_flight || !due {
            return false;
        }
        self.polled = Some(now);
        self.in_flight = true;
        true
    }

    /// Records a poll's outcome. An answer for a source no longer asked
    /// about is dropped; a failure keeps the last answer.
    pub fn finished(&mut self, source: &str, outcome: Result<Version, String>) {
        self.in_flight = false;
        if source == self.source
            && let Ok(v) = outcome
        {
            self.available = Some(v);
        }
    }

    /// The last good answer.
    pub fn available(&self) -> Option<&Version> {
        self.available.as_ref()
    }
}

/// How the poller's thread asks a channel for its latest release.
pub type Fetch = Box<dyn Fn(&str) -> Result<Version, String> + Send>;

/// Where a failed poll is reported: the source and what went wrong.
pub type Report = Box<dyn Fn(&str, &str) + Send>;

/// The poller: its state, shared with its thread, and the thread's inbox.
pub struct Poller {
    state: Arc<Mutex<PollState>>,
    requests: Sender<String>,
    interval: Duration,
}

impl Poller {
    /// Starts the poller's thread. `report` receives one line per failed
    /// poll.
    pub fn start(fetch: Fetch, interval: Duration, report: Report) -> std::io::Result<Poller> {
        let state = Arc::new(Mutex::new(PollState::default()));
        // One request at a time: decide() never asks while one runs.
        let (requests, inbox) = bounded::<String>(1);
        let thread_state = state.clone();
        std::thread::Builder::new()
            .name("channel-poller".into())
            .spawn(move || {
                for source in inbox {
                    let outcome = fetch(&source);
                    if let Err(e) = &outcome {
                        report(&source, e);
                    }
                    lock(&thread_state).finished(&source, outcome);
                }
            })?;
        Ok(Poller {
            state,
            requests,
            interval,
        })
    }

    /// Gives the poller this sweep's look at the Cluster; never blocks.
    pub fn observe(&self, source: &str, check: &str, now: Instant) {
        let mut state = lock(&self.state);
        if state.decide(source, check, now, self.interval)
            && self.requests.try_send(source.to_owned()).is_err()
        {
            // The thread is gone (it cannot be busy: one poll at a time).
            state.finished(source, Err("the poller thread has stopped".into()));
        }
    }

    /// The channel's last good answer.
    pub fn available(&self) -> Option<Version> {
        lock(&self.state).available().cloned()
    }
}

fn lock(m: &Mutex<PollState>) -> std::sync::MutexGuard<'_, PollState> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIX_HOURS: Duration = Duration::from_secs(6 * 3600);

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn polls_on_the_interval_on_a_new_source_and_on_a_new_check_value() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut p = PollState::default();
        assert!(!p.decide("", "", at(0), SIX_HOURS));
        assert!(p.decide("https://a", "", at(0), SIX_HOURS));
        // In flight: no second poll.
        assert!(!p.decide("https://a", "x", at(1), SIX_HOURS));
        p.finished("https://a", Ok(v("2026.08.01-001")));
        assert_eq!(p.available(), Some(&v("2026.08.01-001")));
        // The check value changed while in flight: honoured once the
        // running poll is done, and only once.
        assert!(p.decide("https://a", "x", at(2), SIX_HOURS));
        p.finished("https://a", Ok(v("2026.08.01-001")));
        assert!(!p.decide("https://a", "x", at(3), SIX_HOURS));
        assert!(p.decide("https://a", "y", at(3), SIX_HOURS));
        // A failure keeps the last answer, and is not retried every sweep.
        p.finished("https://a", Err("connection refused".into()));
        assert_eq!(p.available(), Some(&v("2026.08.01-001")));
        assert!(!p.decide("https://a", "y", at(13), SIX_HOURS));
        assert!(p.decide("https://a", "y", at(3 + 6 * 3600), SIX_HOURS));
        // A new source drops the old answer; a late answer for the old
        // source is dropped too.
        assert!(!p.decide("https://b", "y", at(7 * 3600), SIX_HOURS));
        p.finished("https://a", Ok(v("2026.09.01-001")));
        assert_eq!(p.available(), None);
        assert!(p.decide("https://b", "y", at(7 * 3600 + 1), SIX_HOURS));
        // No source: nothing kept.
        p.finished("https://b", Ok(v("2026.09.01-001")));
        assert!(!p.decide("", "y", at(7 * 3600 + 2), SIX_HOURS));
        assert_eq!(p.available(), None);
    }

    #[test]
    fn the_thread_fetches_without_blocking_the_caller() {
        let (release, hold) = bounded::<()>(0);
        let fetch: Fetch = Box::new(move |source: &str| {
            // Blocks until the test lets it answer, like a slow server.
            let _ = hold.recv();
            if source.contains("dead") {
                Err("timed out".into())
            } else {
                Ok(v("2026.08.01-001"))
            }
        });
        let failures = Arc::new(Mutex::new(Vec::new()));
        let seen = failures.clone();
        let p = Poller::start(
            fetch,
            SIX_HOURS,
            Box::new(move |s, e| seen.lock().unwrap().push(format!("{s}: {e}"))),
        )
        .unwrap();
        let t0 = Instant::now();
        let started = Instant::now();
        p.observe("https://a", "", t0);
        p.observe("https://a", "", t0 + Duration::from_secs(10));
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(p.available(), None);
        release.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while p.available().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(p.available(), Some(v("2026.08.01-001")));
        p.observe("https://dead", "", t0 + Duration::from_secs(20));
        release.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while failures.lock().unwrap().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(*failures.lock().unwrap(), ["https://dead: timed out"]);
    }
}
