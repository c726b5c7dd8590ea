//! A wait held over a window: what a machine must not do while it waits
//! (a Manual machine for its approval, every machine while a release is
//! halted), judged over a stretch long enough for the cluster operator
//! to have changed its mind: at least two of its sweeps plus its stall
//! interval ([`window`]).
//!
//! Held means, within the window: no reboot turn granted to it (the
//! Machine's RebootApproved turning True, from the watch history), no reboot (no
//! shutdown, boot, kill or power-on on its console or by the test, and
//! its Node's bootID unchanged), and no slot armed (no release written
//! into its inactive slot: init's `write-release: ok` line, which
//! makes the slot the next boot's target). The judgment is the pure
//! [`decide_held`].

use std::time::{Duration, Instant};

use super::downtime::Sign;
use super::history::{Record, granted_at};
use super::progress::clock;

/// How long a wait must hold: two sweeps and the stall interval of the
/// cluster operator the test runs (its `--sweep-interval` and
/// `--rollout-stall-after`).
pub fn window(sweep: Duration, stall: Duration) -> Duration {
    sweep * 2 + stall
}

/// What `machine` did in `[from, to]` that a held wait forbids, one
/// line each; empty when it held. `signs` are its console's and the
/// test's (time order), with its Node's; `records` the watch history.
pub fn decide_held(
    machine: &str,
    signs: &[(Instant, Sign)],
    records: &[Record],
    from: Instant,
    to: Instant,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut boot_id: Option<&str> = None;
    for (at, sign) in signs {
        let inside = *at >= from && *at <= to;
        let what = match sign {
            Sign::Node { boot_id: id, .. } => {
                let changed = boot_id.is_some_and(|b| b != id);
                boot_id = Some(id);
                match changed && inside {
                    true => format!("its Node's bootID changed to {id}"),
                    false => continue,
                }
            }
            _ if !inside => continue,
            Sign::Shutdown => "init began a shutdown".to_owned(),
            Sign::Boot { .. } => "a boot began".to_owned(),
            Sign::Killed | Sign::PoweredOn => "the test turned its power".to_owned(),
            Sign::Armed(detail) => format!("init armed a slot ({detail})"),
            Sign::Blessed => continue,
        };
        out.push(format!("{} {machine}: {what}", clock(*at)));
    }
    if let Some(at) = granted_at(records, machine, from, to) {
        out.push(format!("{} {machine}: granted a reboot turn", clock(at)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine(at: Instant, name: &str, approved: &str) -> Record {
        Record {
            at,
            kind: "Machine",
            event: "APPLIED",
            object: json!({"metadata": {"name": name},
                "status": {"conditions": [{"type": "RebootApproved", "status": approved}]}}),
        }
    }

    #[test]
    fn a_held_wait_forbids_grants_reboots_and_arming() {
        let t0 = Instant::now();
        let s = |x: u64| t0 + Duration::from_secs(x);
        let node = |id: &str| Sign::Node {
            boot_id: id.into(),
            ready: true,
        };
        let (from, to) = (s(100), s(180));
        // (name, signs, records, how many violations)
        type Case = (&'static str, Vec<(Instant, Sign)>, Vec<Record>, usize);
        let cases: Vec<Case> = vec![
            (
                "quiet: the Node's heartbeats and another machine's grant",
                vec![
                    (s(10), node("b1")),
                    (s(120), node("b1")),
                    (s(170), node("b1")),
                ],
                vec![
                    machine(s(110), "m", "False"),
                    machine(s(120), "other", "True"),
                ],
                0,
            ),
            (
                "before and after the window does not count",
                vec![
                    (s(50), Sign::Armed("release N+1 in slot B".into())),
                    (s(90), Sign::Shutdown),
                    (s(200), Sign::Shutdown),
                ],
                vec![machine(s(99), "m", "True"), machine(s(181), "m", "True")],
                0,
            ),
            (
                "a grant held since before the window is not a new one",
                vec![],
                vec![machine(s(90), "m", "True"), machine(s(120), "m", "True")],
                0,
            ),
            (
                "a grant inside",
                vec![],
                vec![machine(s(150), "m", "True")],
                1,
            ),
            (
                "a reboot inside, seen on the console and by the Node",
                vec![
                    (s(10), node("b1")),
                    (s(130), Sign::Shutdown),
                    (s(150), Sign::Boot { on_trial: false }),
                    (s(160), node("b2")),
                ],
                vec![],
                3,
            ),
            (
                "a slot armed inside",
                vec![(s(101), Sign::Armed("release N+2 in slot A".into()))],
                vec![],
                1,
            ),
            (
                "power pulled inside",
                vec![(s(140), Sign::Killed)],
                vec![],
                1,
            ),
        ];
        for (name, signs, records, n) in cases {
            let found = decide_held("m", &signs, &records, from, to);
            assert_eq!(found.len(), n, "{name}: {found:?}");
        }
        assert_eq!(
            window(Duration::from_secs(10), Duration::from_secs(60)),
            Duration::from_secs(80)
        );
    }
}
