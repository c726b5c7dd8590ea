//! Each machine's downtime, judged from what the machine itself did
//! rather than from what liken's operators write, and the budget checked
//! on it: the end-to-end scenario's independent judge of "never more
//! than `maxUnavailable` machines down at once".
//!
//! The operators' own view (phase, grants and conditions in the Machine
//! status they write) can be wrong in exactly the ways the budget must
//! survive: a machine reporting Ready while it reboots, a status write
//! lost to a conflict. So the evidence here is what no operator writes:
//!
//! - the machine's console, every line stamped by the host as it
//!   arrives ([`crate::Stamped`]): init's orderly shutdown
//!   (`liken: shutdown: ok (reboot requested)`), each boot's assessment
//!   (`liken: assess: ok (slot B on trial ...)` or `(... is blessed ...)`)
//!   and its blessing (`liken: bless: ok (...)`), all from liken-init's
//!   serve.rs and bless.rs;
//! - the test's own hand on the power (a kill, a power-on);
//! - the Node's `status.nodeInfo.bootID` as the apiserver stores it
//!   (posted by the node's kubelet, here the stand-in, which reads the
//!   kernel's boot_id), watched by the harness.
//!
//! A machine is down from init's shutdown line (or the kill) until a
//! boot of it is healthy again: its blessing line for a boot on trial;
//! for a boot of a slot that is blessed already (a reboot of the same
//! release, a power-on after a kill, a fallback from a failed release),
//! which init never blesses again, the Node Ready on a bootID it did not
//! have when the machine went down. Failed trials in between (shutdown,
//! boot, no blessing, shutdown again) stay inside one downtime. The two
//! sources are cross-checked: every closed downtime saw the Node's
//! bootID change, and every change of it fell inside a downtime; a boot
//! that no shutdown or kill announced is a downtime too, and a doubt.
//!
//! Everything here is pure ([`decide_downtime`], [`decide_overlaps`]),
//! with table tests; `fleet/mod.rs` feeds it the consoles and the watch
//! history.

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

use super::progress::clock;

/// How long after a downtime's end the watch may still deliver the
/// Node's new bootID (it is stored before init's blessing reads it, but
/// the watch and the console travel separately).
pub const SLACK: Duration = Duration::from_secs(10);

/// What a machine did, or what was done to it, at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sign {
    /// The test started its QEMU.
    PoweredOn,
    /// The test pulled its power (killed QEMU).
    Killed,
    /// init began the orderly shutdown (`liken: shutdown: ok (...)`).
    Shutdown,
    /// init assessed a new boot (`liken: assess: ...`): on trial (a
    /// counted entry, blessed once healthy), or a slot blessed already.
    Boot {
        /// The entry has a try counter.
        on_trial: bool,
    },
    /// init blessed this boot (`liken: bless: ok (...)`).
    Blessed,
    /// init wrote a release into the inactive slot and made it a boot
    /// target (`liken: write-release: ok (...)`): the detail.
    Armed(String),
    /// The apiserver's Node for the machine: its bootID and whether its
    /// Ready condition is True.
    Node {
        /// `status.nodeInfo.bootID`.
        boot_id: String,
        /// Ready=True.
        ready: bool,
    },
}

/// init's text of a console line (after `liken: `), with any escape
/// sequences or control characters a firmware left before it removed;
/// `None` for another program's line.
fn init_text(line: &str) -> Option<&str> {
    let mut rest = line;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_control() && c != '\x1b');
        match rest.strip_prefix("\x1b[") {
            Some(seq) => match seq.find(|c: char| c.is_ascii_alphabetic()) {
                Some(end) => rest = &seq[end + 1..],
                None => return None,
            },
            None => break,
        }
    }
    rest.strip_prefix("liken: ")
}

/// The sign a console line is, if any (init's wording: serve.rs's
/// shutdown milestone, bless.rs's `assess` step and `bless` milestone,
/// release_writer.rs's `write-release` milestone).
pub fn read_console(line: &str) -> Option<Sign> {
    let text = init_text(line)?;
    if text.starts_with("shutdown: ok") {
        return Some(Sign::Shutdown);
    }
    if let Some(assessed) = text.strip_prefix("assess: ") {
        // Only "slot X is blessed" is a boot init will not bless again;
        // anything else (on trial, or an assessment that failed, which
        // never ends in a blessing) leaves the downtime to a blessing.
        let blessed_already = assessed.starts_with("ok (slot ")
            && assessed
                .split(['(', ';'])
                .nth(1)
                .is_some_and(|s| s.contains(" is blessed"));
        return Some(Sign::Boot {
            on_trial: !blessed_already,
        });
    }
    if text.starts_with("bless: ok") {
        return Some(Sign::Blessed);
    }
    if let Some(detail) = text.strip_prefix("write-release: ok") {
        return Some(Sign::Armed(
            detail.trim().trim_matches(['(', ')']).to_owned(),
        ));
    }
    None
}

/// One stretch of a machine's downtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval {
    /// The machine.
    pub machine: String,
    /// When it went down.
    pub start: Instant,
    /// When it was up again; `None` if it never was.
    pub end: Option<Instant>,
    /// What began it.
    pub began: &'static str,
    /// What ended it.
    pub ended: &'static str,
    /// The boots it took.
    pub boots: u32,
}

impl Interval {
    /// How long it lasted (up to `until` if it never ended).
    pub fn length(&self, until: Instant) -> Duration {
        self.end
            .unwrap_or(until)
            .saturating_duration_since(self.start)
    }

    /// One line for a person: machine, start, end, length, and why.
    pub fn line(&self, until: Instant) -> String {
        let end = match self.end {
            Some(e) => clock(e),
            None => "(not up by the end)".to_owned(),
        };
        format!(
            "{}: down {} to {end}, {:.0} s ({} to {}; {} boot{})",
            self.machine,
            clock(self.start),
            self.length(until).as_secs_f64(),
            self.began,
            self.ended,
            self.boots,
            if self.boots == 1 { "" } else { "s" }
        )
    }
}

/// Where the two sources disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Doubt {
    /// When.
    pub at: Instant,
    /// What.
    pub what: String,
}

/// A machine's downtime.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Downtime {
    /// Its intervals, in order.
    pub intervals: Vec<Interval>,
    /// Where the console and the Node disagree.
    pub doubts: Vec<Doubt>,
}

enum State {
    Off,
    Up,
    Down(Interval),
}

/// `machine`'s downtime from its `signs` in time order (console lines,
/// the test's power actions and the Node's watch events, merged).
pub fn decide_downtime(machine: &str, signs: &[(Instant, Sign)]) -> Downtime {
    let mut out = Downtime::default();
    let mut state = State::Off;
    // The current boot's assessment, once its line is seen.
    let mut trial: Option<bool> = None;
    // The Node's bootID: the last seen, and the one when the machine
    // went down.
    let mut node: Option<String> = None;
    let mut node_at_down: Option<String> = None;
    let mut first_node: Option<Instant> = None;
    let mut changes: Vec<(Instant, String)> = Vec::new();
    let open = |at: Instant, began: &'static str| Interval {
        machine: machine.to_owned(),
        start: at,
        end: None,
        began,
        ended: "",
        boots: 0,
    };
    for (at, sign) in signs {
        let at = *at;
        state = match (state, sign) {
            (State::Off, Sign::PoweredOn) => {
                node_at_down.clone_from(&node);
                trial = None;
                State::Down(open(at, "powered on"))
            }
            (State::Up, Sign::Shutdown) => {
                node_at_down.clone_from(&node);
                trial = None;
                State::Down(open(at, "init's orderly shutdown"))
            }
            (State::Up, Sign::Killed) => {
                node_at_down.clone_from(&node);
                trial = None;
                State::Down(open(at, "power pulled"))
            }
            (State::Up, Sign::Boot { on_trial }) => {
                out.doubts.push(Doubt {
                    at,
                    what: format!(
                        "{machine} began a boot that neither init's shutdown nor the test's \
                         hand announced (a crash or a reset?)"
                    ),
                });
                node_at_down.clone_from(&node);
                trial = Some(*on_trial);
                let mut i = open(at, "an unannounced boot");
                i.boots = 1;
                State::Down(i)
            }
            (State::Down(i), Sign::Shutdown | Sign::Killed | Sign::PoweredOn) => {
                trial = None;
                State::Down(i)
            }
            (State::Down(mut i), Sign::Boot { on_trial }) => {
                trial = Some(*on_trial);
                i.boots += 1;
                State::Down(i)
            }
            (State::Down(mut i), Sign::Blessed) => {
                i.end = Some(at);
                i.ended = "init's blessing";
                out.intervals.push(i);
                State::Up
            }
            (State::Down(mut i), Sign::Node { boot_id, ready })
                if *ready
                    && trial == Some(false)
                    && node_at_down.as_deref() != Some(boot_id.as_str()) =>
            {
                i.end = Some(at);
                i.ended = "its Node Ready on a new bootID (the slot was blessed already)";
                out.intervals.push(i);
                State::Up
            }
            (s, _) => s,
        };
        if let Sign::Node { boot_id, .. } = sign {
            match &node {
                Some(before) if before != boot_id => changes.push((at, boot_id.clone())),
                Some(_) => {}
                None => first_node = Some(at),
            }
            node = Some(boot_id.clone());
        }
    }
    let still_down = match state {
        State::Down(i) => Some(i),
        _ => None,
    };
    // The cross-check, once the Node was watched: each change of its
    // bootID inside a downtime, each downtime with a change.
    let all: Vec<&Interval> = out.intervals.iter().chain(still_down.iter()).collect();
    let inside = |at: Instant, i: &Interval| at >= i.start && i.end.is_none_or(|e| at <= e + SLACK);
    for (at, id) in &changes {
        if !all.iter().any(|i| inside(*at, i)) {
            out.doubts.push(Doubt {
                at: *at,
                what: format!(
                    "{machine}'s Node changed its bootID to {id} while its console showed it up"
                ),
            });
        }
    }
    if let Some(watched) = first_node {
        for i in all.iter().filter(|i| i.start > watched && i.end.is_some()) {
            if !changes.iter().any(|(at, _)| inside(*at, i)) {
                out.doubts.push(Doubt {
                    at: i.start,
                    what: format!(
                        "{machine} was down from {} to {} by its console, but its Node's \
                         bootID never changed",
                        clock(i.start),
                        i.end.map(clock).unwrap_or_default()
                    ),
                });
            }
        }
    }
    out.intervals.extend(still_down);
    out
}

/// Whether `reported`, the boot time a Machine's status gives for the
/// boot that ended `interval`, is that boot's own: init dates a boot
/// when it starts, which is inside the downtime the console shows
/// (`wall` turns the host's instants into wall-clock times; the guest's
/// clock is the host's through QEMU's RTC, within [`SLACK`]). A time
/// before the downtime is the old boot's, or a default.
pub fn decide_boot_time(
    reported: SystemTime,
    interval: &Interval,
    wall: impl Fn(Instant) -> SystemTime,
) -> Result<(), String> {
    let earliest = wall(interval.start) - SLACK;
    let latest = wall(interval.end.unwrap_or_else(Instant::now)) + SLACK;
    let text = |t: SystemTime| liken_api::Time::from_system(t).to_string();
    if reported < earliest || reported > latest {
        return Err(format!(
            "the boot time reported, {}, is not within its downtime by the console ({} to {}, \
             give or take {} s): it was not read from this boot",
            text(reported),
            text(earliest + SLACK),
            text(latest - SLACK),
            SLACK.as_secs()
        ));
    }
    Ok(())
}

/// A stretch of time when more machines were down than the budget
/// allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overlap {
    /// From.
    pub from: Instant,
    /// To.
    pub to: Instant,
    /// The machines down, by name.
    pub machines: Vec<String>,
}

impl Overlap {
    /// One line for a person.
    pub fn line(&self) -> String {
        format!(
            "{} to {} ({:.0} s): {} down at once",
            clock(self.from),
            clock(self.to),
            self.to.saturating_duration_since(self.from).as_secs_f64(),
            self.machines.join(", ")
        )
    }
}

/// Every stretch of `[from, until)` when more than `max_unavailable`
/// of `intervals` were open at once. An interval holds from its start
/// up to but not including its end, so one machine coming up at the
/// moment another goes down is no overlap; an interval that never
/// ended holds until `until`.
pub fn decide_overlaps(
    intervals: &[Interval],
    max_unavailable: usize,
    from: Instant,
    until: Instant,
) -> Vec<Overlap> {
    // (time, opens?, machine); at equal times, ends before starts.
    let mut edges: Vec<(Instant, bool, &str)> = Vec::new();
    for i in intervals {
        let (start, end) = (i.start.max(from), i.end.unwrap_or(until).min(until));
        if start < end {
            edges.push((start, true, &i.machine));
            edges.push((end, false, &i.machine));
        }
    }
    edges.sort_by_key(|(at, opens, _)| (*at, *opens));
    let mut down: Vec<&str> = Vec::new();
    let mut out: Vec<Overlap> = Vec::new();
    let mut k = 0;
    while k < edges.len() {
        let at = edges[k].0;
        while k < edges.len() && edges[k].0 == at {
            let (_, opens, m) = edges[k];
            if opens {
                down.push(m);
            } else if let Some(p) = down.iter().position(|d| *d == m) {
                down.remove(p);
            }
            k += 1;
        }
        let next = edges.get(k).map_or(until, |e| e.0);
        if down.len() > max_unavailable && at < next {
            let machines: Vec<String> = down
                .iter()
                .map(|m| (*m).to_owned())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            match out.last_mut() {
                Some(o) if o.to == at && o.machines == machines => o.to = next,
                _ => out.push(Overlap {
                    from: at,
                    to: next,
                    machines,
                }),
            }
        }
    }
    out
}

/// The whole judgment over a scenario.
#[derive(Clone, Debug)]
pub struct Judgment {
    /// Every machine's intervals, by machine then time.
    pub intervals: Vec<Interval>,
    /// Where more machines than the budget were down, within the window.
    pub overlaps: Vec<Overlap>,
    /// Where the console and the Node disagree.
    pub doubts: Vec<Doubt>,
    /// The window's end (for open intervals' lengths).
    pub until: Instant,
}

impl Judgment {
    /// Judges `machines` (each a name and its signs in time order) under
    /// `max_unavailable` over `[from, until)`.
    pub fn of(
        machines: &[(String, Vec<(Instant, Sign)>)],
        max_unavailable: usize,
        from: Instant,
        until: Instant,
    ) -> Judgment {
        let mut j = Judgment {
            intervals: Vec::new(),
            overlaps: Vec::new(),
            doubts: Vec::new(),
            until,
        };
        for (name, signs) in machines {
            let d = decide_downtime(name, signs);
            j.intervals.extend(d.intervals);
            j.doubts.extend(d.doubts);
        }
        j.overlaps = decide_overlaps(&j.intervals, max_unavailable, from, until);
        j
    }

    /// The intervals that reach into `[from, until)`, one line each.
    pub fn lines(&self, from: Instant) -> Vec<String> {
        self.intervals
            .iter()
            .filter(|i| i.end.is_none_or(|e| e > from))
            .map(|i| i.line(self.until))
            .collect()
    }

    /// What fails the check: overlaps beyond the budget, doubts.
    pub fn failures(&self) -> Vec<String> {
        self.overlaps
            .iter()
            .map(Overlap::line)
            .chain(
                self.doubts
                    .iter()
                    .map(|d| format!("{} {}", clock(d.at), d.what)),
            )
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, ready: bool) -> Sign {
        Sign::Node {
            boot_id: id.into(),
            ready,
        }
    }

    const TRIAL: Sign = Sign::Boot { on_trial: true };
    const BLESSED_ALREADY: Sign = Sign::Boot { on_trial: false };

    /// Signs at seconds after `t0`.
    fn at(t0: Instant, signs: &[(u64, Sign)]) -> Vec<(Instant, Sign)> {
        signs
            .iter()
            .map(|(s, sign)| (t0 + Duration::from_secs(*s), sign.clone()))
            .collect()
    }

    /// (start, end) in seconds after `t0`, `None` for an open end.
    fn spans(t0: Instant, d: &Downtime) -> Vec<(u64, Option<u64>)> {
        d.intervals
            .iter()
            .map(|i| {
                (
                    i.start.duration_since(t0).as_secs(),
                    i.end.map(|e| e.duration_since(t0).as_secs()),
                )
            })
            .collect()
    }

    #[test]
    fn console_lines_are_read_in_inits_wording() {
        let table: &[(&str, Option<Sign>)] = &[
            (
                "liken: shutdown: ok (reboot requested)",
                Some(Sign::Shutdown),
            ),
            (
                "\x1b[0m\x1b[37m\x1b[40mliken: shutdown: ok (poweroff requested)",
                Some(Sign::Shutdown),
            ),
            (
                "liken: assess: ok (slot B on trial (systemd-boot entry liken-b+3.conf); blessing \
                 once node node-1 is Ready with a heartbeat from this boot, rebooting if not \
                 healthy within 90 s)",
                Some(TRIAL),
            ),
            (
                "liken: assess: ok (slot B is blessed (systemd-boot entry liken-b.conf))",
                Some(BLESSED_ALREADY),
            ),
            (
                "liken: assess: ok (slot B is blessed (systemd-boot entry liken-b.conf); slot A's \
                 entry has spent its tries: this boot fell back from it)",
                Some(BLESSED_ALREADY),
            ),
            // A failed assessment never ends in a blessing: not "blessed".
            (
                "liken: assess: cannot read LoaderEntrySelected; this boot cannot be blessed, so \
                 after its tries the other slot boots",
                Some(TRIAL),
            ),
            (
                "liken: bless: ok (slot B's entry liken-b+2-1.conf renamed: node node-1 is Ready \
                 with a heartbeat from this boot)",
                Some(Sign::Blessed),
            ),
            (
                "liken: bless: this boot did not become healthy within 90 s (...); rebooting so \
                 the bootloader spends a try",
                None,
            ),
            (
                "liken: write-release: ok (release 2026.01.01-002 in slot B, entry liken-b+3.conf, 1 bytes)",
                Some(Sign::Armed(
                    "release 2026.01.01-002 in slot B, entry liken-b+3.conf, 1 bytes".into(),
                )),
            ),
            ("liken: write-release: writing the system image", None),
            ("liken: reboot: ok", None),
            // Another program's line quoting init is not init's.
            (
                "[pod e2e/probe] liken: shutdown: ok (reboot requested)",
                None,
            ),
            ("liken-standin-k3s: Node node-1 is registered", None),
        ];
        for (line, want) in table {
            assert_eq!(&read_console(line), want, "{line:?}");
        }
    }

    #[test]
    fn inits_own_milestones_are_read() {
        // Composed by init's own code: serve.rs's shutdown milestone,
        // the bless and write-release milestones, and the assess step's
        // line as steps.rs prints a step's outcome.
        use liken_init::console::{Outcome, milestone_text};
        use liken_init::sys::power::PowerAction;
        let line =
            |step: &str, outcome: Outcome| format!("liken: {}", milestone_text(step, &outcome));
        for action in [PowerAction::Reboot, PowerAction::Poweroff] {
            let requested = Outcome::ok_with(format!("{} requested", action.name()));
            assert_eq!(
                read_console(&line("shutdown", requested)),
                Some(Sign::Shutdown)
            );
        }
        assert_eq!(
            read_console(&line(
                liken_init::bless::MILESTONE,
                Outcome::ok_with("slot B's entry renamed: node n is Ready")
            )),
            Some(Sign::Blessed)
        );
        assert_eq!(
            read_console(&line(
                liken_init::bless::MILESTONE,
                Outcome::Failed("this boot did not become healthy within 90 s".into())
            )),
            None
        );
        assert_eq!(
            read_console(&line(
                liken_init::release_writer::MILESTONE,
                Outcome::ok_with("release v in slot A, entry liken-a+3.conf, 9 bytes")
            )),
            Some(Sign::Armed(
                "release v in slot A, entry liken-a+3.conf, 9 bytes".into()
            ))
        );
        assert_eq!(
            read_console(&line(
                "assess",
                Outcome::ok_with("slot A is blessed (GRUB)")
            )),
            Some(BLESSED_ALREADY)
        );
    }

    #[test]
    fn downtimes_come_from_the_machines_own_signs() {
        let t0 = Instant::now();
        struct Case {
            name: &'static str,
            signs: Vec<(u64, Sign)>,
            spans: Vec<(u64, Option<u64>)>,
            doubts: usize,
        }
        let cases = [
            Case {
                name: "first boot, then a turn to a new release blessed on trial",
                signs: vec![
                    (0, Sign::PoweredOn),
                    (30, TRIAL),
                    (40, Sign::Blessed),
                    (50, node("b1", true)),
                    (100, Sign::Armed("release N+1 in slot B".into())),
                    (200, Sign::Shutdown),
                    (230, TRIAL),
                    (235, node("b2", true)),
                    (240, Sign::Blessed),
                ],
                spans: vec![(0, Some(40)), (200, Some(240))],
                doubts: 0,
            },
            Case {
                name: "a reboot of a blessed slot ends at the Node Ready on a new bootID",
                signs: vec![
                    (0, node("b1", true)),
                    (10, Sign::PoweredOn),
                    (20, BLESSED_ALREADY),
                    (25, node("b2", true)),
                    (100, Sign::Shutdown),
                    (120, BLESSED_ALREADY),
                    // The old boot's Node, not Ready: not the end.
                    (121, node("b2", false)),
                    (130, node("b3", false)),
                    (140, node("b3", true)),
                ],
                spans: vec![(10, Some(25)), (100, Some(140))],
                doubts: 0,
            },
            Case {
                name: "a killed machine is down from the kill to its new boot's health",
                signs: vec![
                    (1, Sign::PoweredOn),
                    (5, TRIAL),
                    // The watch starts once the fleet is up.
                    (8, node("b1", true)),
                    (9, Sign::Blessed),
                    (100, Sign::Killed),
                    // The node controller marks the old boot Unknown.
                    (140, node("b1", false)),
                    (160, Sign::PoweredOn),
                    (200, BLESSED_ALREADY),
                    (210, node("b2", true)),
                ],
                spans: vec![(1, Some(9)), (100, Some(210))],
                doubts: 0,
            },
            Case {
                name: "a fallback: failed trials inside one downtime, up on the fallback slot",
                signs: vec![
                    (1, Sign::PoweredOn),
                    (5, TRIAL),
                    // The watch starts once the fleet is up.
                    (8, node("b1", true)),
                    (9, Sign::Blessed),
                    (100, Sign::Shutdown),
                    (130, TRIAL),
                    (220, Sign::Shutdown),
                    (250, TRIAL),
                    (340, Sign::Shutdown),
                    (370, TRIAL),
                    (460, Sign::Shutdown),
                    (490, BLESSED_ALREADY),
                    (500, node("b5", true)),
                ],
                spans: vec![(1, Some(9)), (100, Some(500))],
                doubts: 0,
            },
            Case {
                name: "a fallback whose fallback slot blesses on trial",
                signs: vec![
                    (1, Sign::PoweredOn),
                    (5, TRIAL),
                    // The watch starts once the fleet is up.
                    (8, node("b1", true)),
                    (9, Sign::Blessed),
                    (100, Sign::Shutdown),
                    (130, TRIAL),
                    (220, Sign::Shutdown),
                    (250, TRIAL),
                    (340, Sign::Shutdown),
                    (370, TRIAL),
                    (380, node("b4", true)),
                    (390, Sign::Blessed),
                ],
                spans: vec![(1, Some(9)), (100, Some(390))],
                doubts: 0,
            },
            Case {
                name: "a blessing that never comes leaves the downtime open",
                signs: vec![
                    (1, Sign::PoweredOn),
                    (5, TRIAL),
                    // The watch starts once the fleet is up.
                    (8, node("b1", true)),
                    (9, Sign::Blessed),
                    (100, Sign::Shutdown),
                    (130, TRIAL),
                    (140, node("b2", true)),
                ],
                spans: vec![(1, Some(9)), (100, None)],
                doubts: 0,
            },
            Case {
                name: "a boot nobody announced is downtime and a doubt",
                signs: vec![
                    (1, Sign::PoweredOn),
                    (5, TRIAL),
                    // The watch starts once the fleet is up.
                    (8, node("b1", true)),
                    (9, Sign::Blessed),
                    (100, BLESSED_ALREADY),
                    (110, node("b2", true)),
                ],
                spans: vec![(1, Some(9)), (100, Some(110))],
                doubts: 1,
            },
            Case {
                name: "a bootID change while the console shows the machine up is a doubt",
                signs: vec![
                    (1, Sign::PoweredOn),
                    (5, TRIAL),
                    // The watch starts once the fleet is up.
                    (8, node("b1", true)),
                    (9, Sign::Blessed),
                    (200, node("b9", true)),
                ],
                spans: vec![(1, Some(9))],
                doubts: 1,
            },
            Case {
                name: "a blessing without the Node's bootID changing is a doubt",
                signs: vec![
                    (1, Sign::PoweredOn),
                    (5, TRIAL),
                    // The watch starts once the fleet is up.
                    (8, node("b1", true)),
                    (9, Sign::Blessed),
                    (100, Sign::Shutdown),
                    (130, TRIAL),
                    (140, Sign::Blessed),
                ],
                spans: vec![(1, Some(9)), (100, Some(140))],
                doubts: 1,
            },
            Case {
                name: "the bootID may arrive just after the blessing line",
                signs: vec![
                    (1, Sign::PoweredOn),
                    (5, TRIAL),
                    // The watch starts once the fleet is up.
                    (8, node("b1", true)),
                    (9, Sign::Blessed),
                    (100, Sign::Shutdown),
                    (130, TRIAL),
                    (140, Sign::Blessed),
                    (145, node("b2", true)),
                ],
                spans: vec![(1, Some(9)), (100, Some(140))],
                doubts: 0,
            },
        ];
        for c in cases {
            let d = decide_downtime("m", &at(t0, &c.signs));
            assert_eq!(spans(t0, &d), c.spans, "{}", c.name);
            assert_eq!(d.doubts.len(), c.doubts, "{}: {:?}", c.name, d.doubts);
        }
    }

    fn iv(t0: Instant, machine: &str, start: u64, end: Option<u64>) -> Interval {
        Interval {
            machine: machine.into(),
            start: t0 + Duration::from_secs(start),
            end: end.map(|e| t0 + Duration::from_secs(e)),
            began: "init's orderly shutdown",
            ended: "init's blessing",
            boots: 1,
        }
    }

    #[test]
    fn overlaps_beyond_the_budget_are_found() {
        let t0 = Instant::now();
        let s = |x: u64| t0 + Duration::from_secs(x);
        // (name, intervals, budget, overlaps as (from, to, machines))
        type Want = Vec<(u64, u64, &'static str)>;
        let cases: Vec<(&str, Vec<Interval>, usize, Want)> = vec![
            (
                "one at a time",
                vec![iv(t0, "a", 100, Some(200)), iv(t0, "b", 300, Some(400))],
                1,
                vec![],
            ),
            (
                "back to back: one up the moment the other goes down",
                vec![
                    iv(t0, "a", 100, Some(200)),
                    iv(t0, "b", 200, Some(400)),
                    iv(t0, "c", 400, Some(500)),
                ],
                1,
                vec![],
            ),
            (
                "two at once",
                vec![iv(t0, "a", 100, Some(300)), iv(t0, "b", 200, Some(400))],
                1,
                vec![(200, 300, "a, b")],
            ),
            (
                "two at once within a budget of two",
                vec![iv(t0, "a", 100, Some(300)), iv(t0, "b", 200, Some(400))],
                2,
                vec![],
            ),
            (
                "a blessing that never comes overlaps whoever goes down later",
                vec![iv(t0, "a", 100, None), iv(t0, "b", 500, Some(520))],
                1,
                vec![(500, 520, "a, b")],
            ),
            (
                "an open interval alone is no overlap",
                vec![iv(t0, "a", 100, None), iv(t0, "b", 81, Some(85))],
                1,
                vec![],
            ),
            (
                "before the window (the first boots) does not count",
                vec![
                    iv(t0, "a", 0, Some(50)),
                    iv(t0, "b", 0, Some(60)),
                    iv(t0, "c", 0, Some(80)),
                    iv(t0, "a", 100, Some(110)),
                ],
                1,
                vec![],
            ),
            (
                "an interval reaching into the window counts from its start",
                vec![iv(t0, "a", 0, Some(120)), iv(t0, "b", 100, Some(130))],
                1,
                vec![(100, 120, "a, b")],
            ),
            (
                "three, then two, then three: each stretch once",
                vec![
                    iv(t0, "a", 100, Some(200)),
                    iv(t0, "b", 110, Some(190)),
                    iv(t0, "c", 120, Some(130)),
                    iv(t0, "c", 140, Some(150)),
                ],
                1,
                vec![
                    (110, 120, "a, b"),
                    (120, 130, "a, b, c"),
                    (130, 140, "a, b"),
                    (140, 150, "a, b, c"),
                    (150, 190, "a, b"),
                ],
            ),
        ];
        for (name, intervals, budget, want) in cases {
            let got: Vec<(u64, u64, String)> = decide_overlaps(&intervals, budget, s(80), s(1000))
                .into_iter()
                .map(|o| {
                    (
                        o.from.duration_since(t0).as_secs(),
                        o.to.duration_since(t0).as_secs(),
                        o.machines.join(", "),
                    )
                })
                .collect();
            let want: Vec<(u64, u64, String)> = want
                .into_iter()
                .map(|(f, t, m)| (f, t, m.to_owned()))
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_boot_time_must_lie_in_its_downtime() {
        let t0 = Instant::now();
        let w0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_780_000_000);
        let wall = |at: Instant| w0 + at.duration_since(t0);
        let i = iv(t0, "m", 100, Some(160));
        let w = |s: u64| w0 + Duration::from_secs(s);
        let table: &[(&str, SystemTime, bool)] = &[
            ("init started mid-downtime", w(130), true),
            ("the guest's clock a little behind", w(95), true),
            ("the old boot's time", w(10), false),
            ("a default", SystemTime::UNIX_EPOCH, false),
            ("after the machine was up again", w(200), false),
        ];
        for (name, reported, ok) in table {
            assert_eq!(decide_boot_time(*reported, &i, wall).is_ok(), *ok, "{name}");
        }
    }

    #[test]
    fn the_judgment_names_each_interval_and_each_failure() {
        let t0 = Instant::now();
        let machines = vec![
            (
                "node-1".to_owned(),
                at(
                    t0,
                    &[
                        (0, node("a1", true)),
                        (100, Sign::Shutdown),
                        (120, TRIAL),
                        (125, node("a2", true)),
                        (130, Sign::Blessed),
                    ],
                ),
            ),
            (
                "node-2".to_owned(),
                at(
                    t0,
                    &[
                        (0, node("b1", true)),
                        (125, Sign::Shutdown),
                        (150, TRIAL),
                        (155, node("b2", true)),
                        (160, Sign::Blessed),
                    ],
                ),
            ),
        ];
        // Machines up from the start: Up is reached through a first
        // boot, so give each one.
        let machines: Vec<(String, Vec<(Instant, Sign)>)> = machines
            .into_iter()
            .map(|(n, mut s)| {
                s.insert(0, (t0, Sign::PoweredOn));
                s.insert(1, (t0, TRIAL));
                s.insert(2, (t0, Sign::Blessed));
                (n, s)
            })
            .collect();
        let until = t0 + Duration::from_secs(300);
        let j = Judgment::of(&machines, 1, t0 + Duration::from_secs(50), until);
        let lines = j.lines(t0 + Duration::from_secs(50));
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("node-1: down ")
                && lines[0].contains(", 30 s (init's orderly shutdown to init's blessing; 1 boot)"),
            "{}",
            lines[0]
        );
        let failures = j.failures();
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(
            failures[0].contains("(5 s): node-1, node-2 down at once"),
            "{}",
            failures[0]
        );
    }
}
