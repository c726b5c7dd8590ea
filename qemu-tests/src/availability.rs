//! A workload's availability as its clients see it, judged from the
//! host: each replica's port asked over HTTP once a second, and the
//! moments when no replica answered.
//!
//! This is the upstream fleet's independent witness that a rollout kept
//! a workload up. Nothing here reads what liken's operators, the
//! kubelet or the apiserver say: while the leader reboots there is no
//! apiserver to ask, and a status could claim a replica Ready that
//! serves nothing. A replica either answered `200 OK` on the port QEMU
//! forwards to its node's hostPort, or it did not.
//!
//! [`Prober`] does the asking on its own threads, one per replica's
//! port, so a slow answer from one machine never delays the other's;
//! [`decide_gaps`] is the pure judgement over what they recorded, and
//! [`decide_stopped`] whether one replica fell silent before its
//! machine went down (stopped by a drain, not by the reboot).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often each port is asked.
pub const EVERY: Duration = Duration::from_secs(1);
/// How long one question may take, connection and answer: a guest under
/// TCG with another guest rebooting beside it answers in well under a
/// second, so this is a wide margin, not a tolerance of outages.
const ANSWER_WITHIN: Duration = Duration::from_secs(3);

/// One question to one replica's port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// When it was asked.
    pub at: Instant,
    /// Which target (the index in [`Prober::start`]'s list).
    pub target: usize,
    /// The answer's body (liken-workload names its pod), or `None` when
    /// nothing answered `200 OK` in time.
    pub answer: Option<String>,
}

/// A span of time during which no target answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    /// The first question no target answered.
    pub from: Instant,
    /// The next answer from any target (or the last sample when none
    /// came).
    pub to: Instant,
}

/// The moments in `samples` when the last answer from every one of
/// `targets` targets was a failure. A target not asked yet counts as
/// not answering, so the judged window should start after each target
/// answered once. Samples may come in any order.
pub fn decide_gaps(samples: &[Sample], targets: usize) -> Vec<Gap> {
    let mut sorted: Vec<&Sample> = samples.iter().collect();
    sorted.sort_by_key(|s| s.at);
    let mut up = vec![false; targets];
    let mut gaps = Vec::new();
    let mut open: Option<Instant> = None;
    for s in &sorted {
        if let Some(u) = up.get_mut(s.target) {
            *u = s.answer.is_some();
        }
        let any = up.iter().any(|u| *u);
        match (any, open) {
            (false, None) => open = Some(s.at),
            (true, Some(from)) => {
                gaps.push(Gap { from, to: s.at });
                open = None;
            }
            _ => {}
        }
    }
    if let (Some(from), Some(last)) = (open, sorted.last()) {
        gaps.push(Gap { from, to: last.at });
    }
    gaps
}

/// One question: an HTTP/1.0 GET to `addr`; the body of a `200 OK`.
fn ask(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, ANSWER_WITHIN).ok()?;
    s.set_read_timeout(Some(ANSWER_WITHIN)).ok()?;
    s.set_write_timeout(Some(ANSWER_WITHIN)).ok()?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: workload\r\n\r\n")
        .ok()?;
    let mut answer = Vec::new();
    // A connection QEMU's user network accepted for a guest port nobody
    // listens on is closed without a byte, so an empty read is a failure.
    s.take(64 * 1024).read_to_end(&mut answer).ok()?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200 ")
        .then(|| body.trim().to_owned())
}

/// Threads asking each target's port every [`EVERY`] until
/// [`Prober::finish`].
pub struct Prober {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    threads: Vec<JoinHandle<()>>,
}

impl Prober {
    /// Starts asking each of `ports` on the host's loopback.
    pub fn start(ports: &[u16]) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let threads = ports
            .iter()
            .enumerate()
            .map(|(target, &port)| {
                let stop = Arc::clone(&stop);
                let samples = Arc::clone(&samples);
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let at = Instant::now();
                        // One retry at once: a connection lost to a
                        // guest's busy moment is not an outage unless the
                        // second question fails too.
                        let answer = ask(addr).or_else(|| ask(addr));
                        if let Ok(mut s) = samples.lock() {
                            s.push(Sample { at, target, answer });
                        }
                        std::thread::sleep(EVERY.saturating_sub(at.elapsed()));
                    }
                })
            })
            .collect();
        Prober {
            stop,
            samples,
            threads,
        }
    }

    /// What was recorded so far.
    pub fn samples(&self) -> Vec<Sample> {
        self.samples.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Stops asking; everything recorded.
    pub fn finish(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.samples()
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Whether target `target`'s replica `pod` stopped answering while its
/// machine was still up: the pod answered after `began` and, between
/// its last answer and the machine's `shutdown`, a question to that
/// node went unanswered (the eviction stopped its container before the
/// reboot did). liken-workload answers `liken-workload on <pod>`.
pub fn decide_stopped(
    samples: &[Sample],
    target: usize,
    pod: &str,
    began: Instant,
    shutdown: Instant,
) -> Result<(), String> {
    let mine: Vec<&Sample> = samples.iter().filter(|s| s.target == target).collect();
    let said = format!("liken-workload on {pod}");
    let last = mine
        .iter()
        .filter(|s| s.at >= began && s.at < shutdown && s.answer.as_deref() == Some(&said))
        .map(|s| s.at)
        .max()
        .ok_or_else(|| {
            format!("{pod} never answered between the target's move and the shutdown")
        })?;
    let silent = mine
        .iter()
        .any(|s| s.at > last && s.at < shutdown && s.answer.is_none());
    if silent {
        Ok(())
    } else {
        Err(format!(
            "{pod} answered until {:.0} s before the shutdown and no question went unanswered in \
             between: its container was not stopped before the reboot",
            shutdown.saturating_duration_since(last).as_secs_f64()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, secs: u64, target: usize, ok: bool) -> Sample {
        Sample {
            at: base + Duration::from_secs(secs),
            target,
            answer: ok.then(|| "liken-workload on web-1".to_owned()),
        }
    }

    /// A node's answers by second after the start: the pod that answered,
    /// or `None` for silence.
    type Answers = Vec<(u64, Option<&'static str>)>;

    /// Target 0's samples from its answers.
    fn node(base: Instant, answers: &[(u64, Option<&str>)]) -> Vec<Sample> {
        answers
            .iter()
            .map(|(secs, pod)| Sample {
                at: base + Duration::from_secs(*secs),
                target: 0,
                answer: pod.map(|p| format!("liken-workload on {p}")),
            })
            .collect()
    }

    #[test]
    fn a_replica_stopped_by_the_drain_fell_silent_before_the_shutdown() {
        let t = Instant::now();
        let (began, shutdown) = (t + Duration::from_secs(10), t + Duration::from_secs(20));
        let cases: [(&str, Answers, Result<(), &str>); 6] = [
            (
                "evicted, then silent until the shutdown",
                vec![
                    (5, Some("web-a")),
                    (12, Some("web-a")),
                    (15, None),
                    (18, None),
                ],
                Ok(()),
            ),
            (
                "answered until the reboot took it",
                vec![(12, Some("web-a")), (19, Some("web-a")), (21, None)],
                Err("its container was not stopped before the reboot"),
            ),
            (
                "silent only before its last answer",
                vec![(11, None), (12, Some("web-a")), (19, Some("web-a"))],
                Err("its container was not stopped"),
            ),
            (
                "only another pod answered (a replacement on the node)",
                vec![(12, Some("web-b")), (15, None)],
                Err("web-a never answered between the target's move and the shutdown"),
            ),
            (
                "answered only before the target moved",
                vec![(5, Some("web-a")), (15, None)],
                Err("web-a never answered"),
            ),
            ("never asked", vec![], Err("web-a never answered")),
        ];
        for (what, answers, want) in cases {
            let mut samples = node(t, &answers);
            // Another node's silence does not count for this one.
            samples.push(Sample {
                at: t + Duration::from_secs(19),
                target: 1,
                answer: None,
            });
            let got = decide_stopped(&samples, 0, "web-a", began, shutdown);
            match (got, want) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(w)) => assert!(e.contains(w), "{what}: {e}"),
                (got, want) => panic!("{what}: {got:?}, not {want:?}"),
            }
        }
    }

    #[test]
    fn one_replica_down_at_a_time_leaves_no_gap() {
        let t = Instant::now();
        let samples = vec![
            at(t, 0, 0, true),
            at(t, 0, 1, true),
            at(t, 1, 0, false),
            at(t, 1, 1, true),
            at(t, 2, 0, false),
            at(t, 2, 1, true),
            at(t, 3, 0, true),
            at(t, 3, 1, false),
            at(t, 4, 0, true),
            at(t, 4, 1, true),
        ];
        assert_eq!(decide_gaps(&samples, 2), vec![]);
    }

    #[test]
    fn both_down_at_once_is_a_gap_until_either_answers() {
        let t = Instant::now();
        let samples = vec![
            at(t, 0, 0, true),
            at(t, 0, 1, true),
            at(t, 1, 0, false),
            at(t, 2, 1, false),
            at(t, 3, 0, false),
            at(t, 4, 1, true),
            at(t, 5, 0, true),
        ];
        assert_eq!(
            decide_gaps(&samples, 2),
            vec![Gap {
                from: t + Duration::from_secs(2),
                to: t + Duration::from_secs(4)
            }]
        );
    }

    #[test]
    fn a_gap_still_open_at_the_end_is_reported_and_order_does_not_matter() {
        let t = Instant::now();
        let mut samples = vec![
            at(t, 0, 0, true),
            at(t, 0, 1, true),
            at(t, 1, 0, false),
            at(t, 1, 1, false),
            at(t, 2, 0, false),
        ];
        samples.reverse();
        assert_eq!(
            decide_gaps(&samples, 2),
            vec![Gap {
                from: t + Duration::from_secs(1),
                to: t + Duration::from_secs(2)
            }]
        );
    }

    #[test]
    fn a_target_never_answering_leaves_the_others_to_judge() {
        let t = Instant::now();
        let samples = vec![at(t, 0, 0, true), at(t, 1, 0, true)];
        assert_eq!(decide_gaps(&samples, 2), vec![]);
        assert_eq!(
            decide_gaps(&[at(t, 0, 1, false)], 2),
            vec![Gap { from: t, to: t }]
        );
    }

    #[test]
    fn the_prober_reads_a_workload_answer_and_counts_a_silent_port_down() {
        use std::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(mut s) = s else { continue };
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf);
                let _ = s.write_all(
                    b"HTTP/1.0 200 OK\r\nContent-Length: 24\r\n\r\nliken-workload on web-a\n",
                );
            }
        });
        // A port that accepts and closes at once, as QEMU's user network
        // does for a forwarded port nothing in the guest listens on.
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let silent_port = silent.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in silent.incoming() {
                drop(s);
            }
        });
        let prober = Prober::start(&[port, silent_port]);
        std::thread::sleep(Duration::from_millis(1500));
        let samples = prober.finish();
        assert!(
            samples
                .iter()
                .any(|s| s.target == 0 && s.answer.as_deref() == Some("liken-workload on web-a"))
        );
        assert!(
            samples
                .iter()
                .filter(|s| s.target == 1)
                .all(|s| s.answer.is_none())
        );
        assert!(samples.iter().any(|s| s.target == 1));
    }
}
