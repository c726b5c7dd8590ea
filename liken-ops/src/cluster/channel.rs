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
//!
//! When the deployment carries a trust root, an answer is taken only from
//! a channel.yaml that a trusted key signed ([`decide_take`]), whose
//! serial does not go below the highest one taken before, and that is not
//! past its expiry. A refused document leaves the last answer in place
//! and is reported on the Cluster's [`RELEASE_CHANNEL`] condition (a
//! Warning Event on each transition), so a frozen or replayed channel is
//! noticed at the next poll, and an expired one at the next sweep. The
//! document taken is kept in `status.releases.channel` too, so a new
//! leader starts from its serial rather than from nothing.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, bounded};
use liken_api::cluster::ChannelTaken;
use liken_api::condition::Condition;
use liken_api::release::{ChannelRefusal, decide_channel_freshness};
use liken_api::signing::{FileError, TrustRoot, VerifyError};
use liken_api::{ConditionStatus, Time, Version};
use liken_releases::fetch::ChannelDocument;

/// The Cluster condition that says whether the channel's answer is
/// current: present while spec.releases.source names a channel.
pub const RELEASE_CHANNEL: &str = "ReleaseChannel";
/// [`RELEASE_CHANNEL`]'s reason when the last document was taken and is
/// not past its expiry.
pub const CHANNEL_CURRENT: &str = "ChannelCurrent";
/// [`RELEASE_CHANNEL`]'s reason when the last document's signature was
/// missing, unreadable, by a key the trust root does not list, or bad.
pub const CHANNEL_UNVERIFIED: &str = "ChannelUnverified";

/// Why a served channel document was not taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// channel.yaml.sig is not a signature document.
    SignatureUnreadable(String),
    /// The signature does not hold against the trust root.
    Unverified(VerifyError),
    /// The document is signed but old: replayed or past its expiry.
    Stale(ChannelRefusal),
}

impl Refusal {
    /// The [`RELEASE_CHANNEL`] reason for it.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::SignatureUnreadable(_) | Refusal::Unverified(_) => CHANNEL_UNVERIFIED,
            Refusal::Stale(r) => r.reason(),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::SignatureUnreadable(why) => write!(
                f,
                "channel.yaml.sig cannot be read ({why}); the last answer is kept. Sign the \
                 channel again with `liken sign`"
            ),
            Refusal::Unverified(e) => write!(
                f,
                "channel.yaml was not taken: {e}; the last answer is kept"
            ),
            Refusal::Stale(r) => write!(f, "{r}"),
        }
    }
}

/// Whether `served`, read from `source`, is taken as the channel's
/// answer. With no trust root (a deployment packed with `-unsigned`) every
/// readable document is; with one, the signature must hold and the
/// document must be fresh against `seen`, the highest serial taken from
/// this source before.
pub fn decide_take(
    served: &ChannelDocument,
    source: &str,
    trust: Option<&TrustRoot>,
    seen: Option<u64>,
    now: Time,
) -> Result<ChannelTaken, Refusal> {
    let taken = |key_id: Option<String>| ChannelTaken {
        source: source.to_owned(),
        serial: served.channel.serial,
        expires: served.channel.expires,
        key_id,
    };
    let Some(trust) = trust else {
        return Ok(taken(None));
    };
    let key = trust
        .verify_file(
            &served.bytes,
            served.signature.as_deref(),
            "channel.yaml.sig",
        )
        .map_err(|e| match e {
            FileError::Unreadable(e) => Refusal::SignatureUnreadable(e.to_string()),
            FileError::Verify(e) => Refusal::Unverified(e),
        })?;
    decide_channel_freshness(&served.channel, seen, now).map_err(Refusal::Stale)?;
    Ok(taken(Some(key.to_string())))
}

/// The [`RELEASE_CHANNEL`] condition for this sweep, or `None` when the
/// Cluster names no channel or nothing has been learnt of it yet. A
/// signed document taken before can go stale between polls: its expiry is
/// judged at every sweep, against `now`.
pub fn decide_condition(
    source: &str,
    taken: Option<&ChannelTaken>,
    refusal: Option<&(String, String)>,
    now: Time,
) -> Option<Condition> {
    if source.is_empty() {
        return None;
    }
    if let Some((reason, message)) = refusal {
        return Some(Condition::new(
            RELEASE_CHANNEL,
            ConditionStatus::False,
            reason,
            message,
        ));
    }
    let taken = taken?;
    let Some(key) = &taken.key_id else {
        return Some(Condition::new(
            RELEASE_CHANNEL,
            ConditionStatus::True,
            CHANNEL_CURRENT,
            "channel.yaml is taken unverified: this deployment carries no trust root \
             (packed with `liken layer -unsigned`)",
        ));
    };
    let serial = taken
        .serial
        .map_or_else(|| "no serial".to_owned(), |s| format!("serial {s}"));
    match taken.expires {
        Some(t) if now < t => Some(Condition::new(
            RELEASE_CHANNEL,
            ConditionStatus::True,
            CHANNEL_CURRENT,
            format!("channel.yaml {serial}, signed by key {key}, is current until {t}"),
        )),
        expired => {
            let stale = ChannelRefusal::Stale { expired };
            Some(Condition::new(
                RELEASE_CHANNEL,
                ConditionStatus::False,
                stale.reason(),
                stale.to_string(),
            ))
        }
    }
}

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
    /// The document that answer came from.
    taken: Option<ChannelTaken>,
    /// The highest serial taken from this source, here or (read back from
    /// the Cluster's status) by an earlier leader.
    seen: Option<u64>,
    /// Why the last document served was refused (reason, message);
    /// cleared when one is taken.
    refusal: Option<(String, String)>,
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
            // Everything learnt was of the old source; a poll of it may
            // still be running (one at a time), and its answer is dropped.
            *self = PollState {
                source: source.to_owned(),
                check: check.to_owned(),
                in_flight: self.in_flight,
                ..PollState::default()
            };
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

    /// Takes what the Cluster's status holds from an earlier leader (or
    /// this one's last write) for this source: its serial bounds what a
    /// poll may take, and, before this copy's first answer, its answer
    /// stands, so a restart neither forgets a serial nor blanks the status.
    pub fn adopt(&mut self, available: Option<&Version>, held: Option<&ChannelTaken>) {
        let Some(held) = held.filter(|h| h.source == self.source && !self.source.is_empty()) else {
            return;
        };
        self.seen = self.seen.max(held.serial);
        if self.taken.is_none() && self.refusal.is_none() {
            self.available = available.cloned();
            self.taken = Some(held.clone());
        }
    }

    /// Records a poll's outcome, judged against `trust` at `now`. An
    /// answer for a source no longer asked about is dropped; a failure or
    /// a refused document keeps the last answer. Returns the refusal, for
    /// the log.
    pub fn finished(
        &mut self,
        source: &str,
        outcome: Result<ChannelDocument, String>,
        trust: Option<&TrustRoot>,
        now: Time,
    ) -> Result<(), String> {
        self.in_flight = false;
        let served = outcome?;
        if source != self.source {
            return Ok(());
        }
        match decide_take(&served, source, trust, self.seen, now) {
            Ok(taken) => {
                self.seen = self.seen.max(taken.serial);
                self.available = Some(served.channel.latest);
                self.taken = Some(taken);
                self.refusal = None;
                Ok(())
            }
            Err(refusal) => {
                let message = refusal.to_string();
                self.refusal = Some((refusal.reason().to_owned(), message.clone()));
                Err(message)
            }
        }
    }

    /// The last good answer.
    pub fn available(&self) -> Option<&Version> {
        self.available.as_ref()
    }

    /// The document the last good answer came from.
    pub fn taken(&self) -> Option<&ChannelTaken> {
        self.taken.as_ref()
    }

    /// Why the last document served was refused, if it was.
    pub fn refusal(&self) -> Option<&(String, String)> {
        self.refusal.as_ref()
    }
}

/// How the poller's thread reads a channel's channel.yaml (and its
/// signature).
pub type Fetch = Box<dyn Fn(&str) -> Result<ChannelDocument, String> + Send>;

/// Where a failed poll is reported: the source and what went wrong.
pub type Report = Box<dyn Fn(&str, &str) + Send>;

/// The poller: its state, shared with its thread, and the thread's inbox.
pub struct Poller {
    state: Arc<Mutex<PollState>>,
    requests: Sender<String>,
    interval: Duration,
}

impl Poller {
    /// Starts the poller's thread. Documents are judged against `trust`
    /// (none: the deployment is unsigned). `report` receives one line per
    /// failed or refused poll.
    pub fn start(
        fetch: Fetch,
        trust: Option<TrustRoot>,
        interval: Duration,
        report: Report,
    ) -> std::io::Result<Poller> {
        let state = Arc::new(Mutex::new(PollState::default()));
        // One request at a time: decide() never asks while one runs.
        let (requests, inbox) = bounded::<String>(1);
        let thread_state = state.clone();
        std::thread::Builder::new()
            .name("channel-poller".into())
            .spawn(move || {
                for source in inbox {
                    let outcome = fetch(&source);
                    let now = Time::from_system(std::time::SystemTime::now());
                    let judged =
                        lock(&thread_state).finished(&source, outcome, trust.as_ref(), now);
                    if let Err(e) = judged {
                        report(&source, &e);
                    }
                }
            })?;
        Ok(Poller {
            state,
            requests,
            interval,
        })
    }

    /// Gives the poller this sweep's look at the Cluster (its source, its
    /// check-releases value, and what its status holds of the channel);
    /// never blocks.
    pub fn observe(
        &self,
        source: &str,
        check: &str,
        held: (Option<&Version>, Option<&ChannelTaken>),
        now: Instant,
    ) {
        let mut state = lock(&self.state);
        let due = state.decide(source, check, now, self.interval);
        state.adopt(held.0, held.1);
        if due && self.requests.try_send(source.to_owned()).is_err() {
            // The thread is gone (it cannot be busy: one poll at a time).
            let gone = Err("the poller thread has stopped".into());
            let _ = state.finished(source, gone, None, Time::from_unix(0));
        }
    }

    /// The channel's last good answer.
    pub fn available(&self) -> Option<Version> {
        lock(&self.state).available().cloned()
    }

    /// What the status says of the channel: the document taken and the
    /// last refusal.
    pub fn report(&self) -> (Option<ChannelTaken>, Option<(String, String)>) {
        let state = lock(&self.state);
        (state.taken().cloned(), state.refusal().cloned())
    }
}

fn lock(m: &Mutex<PollState>) -> std::sync::MutexGuard<'_, PollState> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::release::Channel;
    use liken_api::signing::{SigningKey, key_pair};

    const SIX_HOURS: Duration = Duration::from_secs(6 * 3600);
    const NOW: Time = Time::from_unix(1_790_000_000);

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn unsigned(latest: &str) -> Result<ChannelDocument, String> {
        let channel = Channel::new(v(latest));
        Ok(ChannelDocument {
            bytes: serde_yaml::to_string(&channel).unwrap().into_bytes(),
            channel,
            signature: None,
        })
    }

    /// channel.yaml with `serial` and an expiry `days` from [`NOW`]
    /// (negative: in the past), signed by `key`.
    fn signed(key: &SigningKey, latest: &str, serial: u64, days: i64) -> ChannelDocument {
        let mut channel = Channel::new(v(latest));
        channel.serial = Some(serial);
        channel.expires = Some(Time::from_unix(NOW.unix() + days * 86_400));
        let bytes = serde_yaml::to_string(&channel).unwrap().into_bytes();
        let sig = serde_yaml::to_string(&key.sign(&bytes))
            .unwrap()
            .into_bytes();
        ChannelDocument {
            channel,
            bytes,
            signature: Some(sig),
        }
    }

    fn trust(key: &SigningKey) -> TrustRoot {
        TrustRoot::new([key.public()])
    }

    #[test]
    fn polls_on_the_interval_on_a_new_source_and_on_a_new_check_value() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut p = PollState::default();
        let fin = |p: &mut PollState, source: &str, outcome| {
            let _ = p.finished(source, outcome, None, NOW);
        };
        assert!(!p.decide("", "", at(0), SIX_HOURS));
        assert!(p.decide("https://a", "", at(0), SIX_HOURS));
        // In flight: no second poll.
        assert!(!p.decide("https://a", "x", at(1), SIX_HOURS));
        fin(&mut p, "https://a", unsigned("2026.08.01-001"));
        assert_eq!(p.available(), Some(&v("2026.08.01-001")));
        // The check value changed while in flight: honoured once the
        // running poll is done, and only once.
        assert!(p.decide("https://a", "x", at(2), SIX_HOURS));
        fin(&mut p, "https://a", unsigned("2026.08.01-001"));
        assert!(!p.decide("https://a", "x", at(3), SIX_HOURS));
        assert!(p.decide("https://a", "y", at(3), SIX_HOURS));
        // A failure keeps the last answer, and is not retried every sweep.
        fin(&mut p, "https://a", Err("connection refused".into()));
        assert_eq!(p.available(), Some(&v("2026.08.01-001")));
        assert!(!p.decide("https://a", "y", at(13), SIX_HOURS));
        assert!(p.decide("https://a", "y", at(3 + 6 * 3600), SIX_HOURS));
        // A new source drops the old answer; a late answer for the old
        // source is dropped too.
        assert!(!p.decide("https://b", "y", at(7 * 3600), SIX_HOURS));
        fin(&mut p, "https://a", unsigned("2026.09.01-001"));
        assert_eq!(p.available(), None);
        assert!(p.decide("https://b", "y", at(7 * 3600 + 1), SIX_HOURS));
        // No source: nothing kept.
        fin(&mut p, "https://b", unsigned("2026.09.01-001"));
        assert!(!p.decide("", "y", at(7 * 3600 + 2), SIX_HOURS));
        assert_eq!(p.available(), None);
    }

    #[test]
    fn a_signed_channel_is_taken_only_when_verified_and_fresh() {
        let (a, _) = key_pair([1; 32]);
        let (b, _) = key_pair([2; 32]);
        let root = trust(&a);
        let take = |s: &ChannelDocument, seen| decide_take(s, "https://a", Some(&root), seen, NOW);

        let good = signed(&a, "2026.08.01-001", 5, 3);
        let t = take(&good, Some(4)).unwrap();
        assert_eq!(t.serial, Some(5));
        assert_eq!(t.key_id.as_deref(), Some(a.public().id.as_str()));
        // The same document asked again is no replay.
        assert!(take(&good, Some(5)).is_ok());

        let reason = |r: Result<ChannelTaken, Refusal>| r.unwrap_err().reason();
        assert_eq!(reason(take(&good, Some(6))), "ChannelReplayed");
        assert_eq!(
            reason(take(&signed(&a, "2026.08.01-001", 7, -1), None)),
            "ChannelStale"
        );
        assert_eq!(
            reason(take(&signed(&b, "2026.08.01-001", 7, 3), None)),
            CHANNEL_UNVERIFIED
        );
        let mut bare = good.clone();
        bare.signature = None;
        assert_eq!(
            take(&bare, None).unwrap_err(),
            Refusal::Unverified(VerifyError::Unsigned)
        );
        let mut changed = good.clone();
        changed.bytes.push(b'\n');
        assert!(matches!(
            take(&changed, None).unwrap_err(),
            Refusal::Unverified(VerifyError::Changed { .. })
        ));
        let mut garbled = good.clone();
        garbled.signature = Some(b"not: a signature".to_vec());
        assert!(matches!(
            take(&garbled, None).unwrap_err(),
            Refusal::SignatureUnreadable(_)
        ));
        // Verification comes first: an old document by a stranger is
        // reported as the stranger's.
        assert_eq!(
            reason(take(&signed(&b, "2026.08.01-001", 1, -1), Some(9))),
            CHANNEL_UNVERIFIED
        );
        // No trust root: taken as served, unverified.
        let t = decide_take(&bare, "https://a", None, Some(9), NOW).unwrap();
        assert_eq!(t.key_id, None);
    }

    #[test]
    fn a_refusal_keeps_the_answer_and_a_restart_keeps_the_serial() {
        let (a, _) = key_pair([1; 32]);
        let root = trust(&a);
        let t0 = Instant::now();
        let mut p = PollState::default();
        assert!(p.decide("https://a", "", t0, SIX_HOURS));
        p.finished(
            "https://a",
            Ok(signed(&a, "2026.08.01-001", 5, 3)),
            Some(&root),
            NOW,
        )
        .unwrap();
        assert!(p.decide("https://a", "1", t0, SIX_HOURS));
        let refused = p.finished(
            "https://a",
            Ok(signed(&a, "2026.07.01-001", 4, 3)),
            Some(&root),
            NOW,
        );
        assert!(refused.unwrap_err().contains("serial 5 was seen before"));
        assert_eq!(p.available(), Some(&v("2026.08.01-001")));
        assert_eq!(p.taken().unwrap().serial, Some(5));
        assert_eq!(p.refusal().unwrap().0, "ChannelReplayed");

        // A new leader starts from the status the old one wrote: the
        // serial bounds its first poll, and the answer stands meanwhile.
        let held = p.taken().cloned();
        let mut q = PollState::default();
        assert!(q.decide("https://a", "", t0, SIX_HOURS));
        q.adopt(Some(&v("2026.08.01-001")), held.as_ref());
        assert_eq!(q.available(), Some(&v("2026.08.01-001")));
        assert!(
            q.finished(
                "https://a",
                Ok(signed(&a, "2026.07.01-001", 4, 3)),
                Some(&root),
                NOW
            )
            .is_err()
        );
        // What another source's status held is not adopted.
        let mut r = PollState::default();
        assert!(r.decide("https://b", "", t0, SIX_HOURS));
        r.adopt(Some(&v("2026.08.01-001")), held.as_ref());
        assert_eq!(r.available(), None);
        assert!(
            r.finished(
                "https://b",
                Ok(signed(&a, "2026.07.01-001", 4, 3)),
                Some(&root),
                NOW
            )
            .is_ok()
        );
    }

    #[test]
    fn the_condition_says_current_stale_refused_or_unverified() {
        let taken = |key: Option<&str>, expires: i64| ChannelTaken {
            source: "https://a".into(),
            serial: Some(3),
            expires: Some(Time::from_unix(NOW.unix() + expires)),
            key_id: key.map(Into::into),
        };
        assert_eq!(
            decide_condition("", Some(&taken(Some("k"), 10)), None, NOW),
            None
        );
        assert_eq!(decide_condition("https://a", None, None, NOW), None);
        let current =
            decide_condition("https://a", Some(&taken(Some("k"), 10)), None, NOW).unwrap();
        assert_eq!(
            (current.status, current.reason.as_str()),
            (ConditionStatus::True, CHANNEL_CURRENT)
        );
        assert!(
            current.message.contains("serial 3, signed by key k"),
            "{}",
            current.message
        );
        // Past its expiry between polls: stale at this sweep.
        let stale = decide_condition("https://a", Some(&taken(Some("k"), 0)), None, NOW).unwrap();
        assert_eq!(
            (stale.status, stale.reason.as_str()),
            (ConditionStatus::False, "ChannelStale")
        );
        // An unsigned deployment is current however old the document.
        let loose = decide_condition("https://a", Some(&taken(None, -10)), None, NOW).unwrap();
        assert_eq!(loose.status, ConditionStatus::True);
        assert!(loose.message.contains("unverified"));
        // A refusal wins over the document kept.
        let refusal = ("ChannelReplayed".to_owned(), "served 2, seen 3".to_owned());
        let c = decide_condition(
            "https://a",
            Some(&taken(Some("k"), 10)),
            Some(&refusal),
            NOW,
        )
        .unwrap();
        assert_eq!(
            (c.reason.as_str(), c.message.as_str()),
            ("ChannelReplayed", "served 2, seen 3")
        );
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
                unsigned("2026.08.01-001")
            }
        });
        let failures = Arc::new(Mutex::new(Vec::new()));
        let seen = failures.clone();
        let p = Poller::start(
            fetch,
            None,
            SIX_HOURS,
            Box::new(move |s, e| seen.lock().unwrap().push(format!("{s}: {e}"))),
        )
        .unwrap();
        let t0 = Instant::now();
        let started = Instant::now();
        p.observe("https://a", "", (None, None), t0);
        p.observe("https://a", "", (None, None), t0 + Duration::from_secs(10));
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(p.available(), None);
        release.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while p.available().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(p.available(), Some(v("2026.08.01-001")));
        p.observe(
            "https://dead",
            "",
            (None, None),
            t0 + Duration::from_secs(20),
        );
        release.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while failures.lock().unwrap().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(*failures.lock().unwrap(), ["https://dead: timed out"]);
    }
}
