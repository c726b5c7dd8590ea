use std::collections::BTreeSet;
use std::time::Duration;

use liken_api::BootStatus;
use liken_api::cluster::{ClusterSpec, DisruptionBudget};
use liken_api::coordination::{GRANT_REASON, REBOOT_APPROVED, RELEASE_CURRENT, SYSCTLS_APPLIED};
use liken_api::machine::ReleaseStatus;
use liken_api::{Machine, MachineSpec};
use proptest::prelude::*;

use super::*;
use crate::cluster::heartbeat::Heartbeat;

const NOW: i64 = 1_800_000_000;
const STALE: Duration = Duration::from_secs(40);
const STALL: Duration = Duration::from_secs(1800);

fn v(s: &str) -> Version {
    Version::parse(s).unwrap()
}

const OLD: &str = "2026.07.01-001";
const NEW: &str = "2026.08.01-001";

/// One machine of a scenario.
#[derive(Clone)]
struct M {
    name: &'static str,
    phase: Phase,
    fresh: bool,
    /// Asks for a turn (AwaitingTurn on a convergence condition).
    wants: bool,
    /// Mid-turn (Rebooting on a convergence condition).
    using: bool,
    granted: bool,
    rv: &'static str,
    running: Option<&'static str>,
    staged: Option<&'static str>,
    boot: i64,
    blocked: bool,
    /// Rebooted into its release, which init has not blessed yet.
    trial: bool,
    asked_at: i64,
    /// The grant names this purpose instead of what the machine asks.
    grant_names: Option<TurnPurpose>,
}

fn m(name: &'static str) -> M {
    M {
        name,
        phase: Phase::Ready,
        fresh: true,
        wants: false,
        using: false,
        granted: false,
        rv: "10",
        running: Some(OLD),
        staged: None,
        boot: 1000,
        blocked: false,
        trial: false,
        asked_at: 500,
        grant_names: None,
    }
}

impl M {
    fn asking(mut self) -> M {
        self.wants = true;
        self
    }
    fn for_release(mut self) -> M {
        self.wants = true;
        self.staged = Some(NEW);
        self
    }
    fn phase(mut self, p: Phase) -> M {
        self.phase = p;
        self
    }
    fn build(&self) -> Machine {
        let mut machine = Machine::new(self.name, MachineSpec::default());
        machine.metadata.resource_version = self.rv.into();
        machine.status.phase = Some(self.phase);
        machine.status.boot = Some(BootStatus {
            time: Some(Time::from_unix(self.boot)),
            ..BootStatus::default()
        });
        machine.status.release = Some(ReleaseStatus {
            running: self.running.map(v),
            staged: self.staged.map(v),
            target: None,
        });
        let c = &mut machine.status.conditions;
        let mut cond = |type_: &str, status, reason: &str| {
            let mut k = Condition::new(type_, status, reason, "");
            k.last_transition_time = Time::from_unix(self.asked_at);
            c.push(k);
        };
        if self.wants {
            cond(
                SYSCTLS_APPLIED,
                ConditionStatus::False,
                reason::AWAITING_TURN,
            );
        } else if self.using {
            cond(SYSCTLS_APPLIED, ConditionStatus::False, reason::REBOOTING);
        }
        if self.blocked {
            cond(RELEASE_CURRENT, ConditionStatus::False, reason::BLOCKED);
        }
        if self.trial {
            cond(RELEASE_CURRENT, ConditionStatus::False, reason::ON_TRIAL);
        }
        if self.granted {
            let staged = self.staged.filter(|s| Some(*s) != self.running);
            let asked = TurnPurpose::new(&boot_short(self.boot), staged.map(v), []);
            let purpose = self.grant_names.clone().unwrap_or(asked);
            let mut k = Condition::new(
                REBOOT_APPROVED,
                ConditionStatus::True,
                GRANT_REASON,
                coordination::grant_message("granted", &purpose),
            );
            k.last_transition_time = Time::from_unix(self.asked_at);
            c.push(k);
        }
        machine
    }
}

fn boot_short(t: i64) -> String {
    BootStatus {
        time: Some(Time::from_unix(t)),
        ..BootStatus::default()
    }
    .boot_id()
    .unwrap()
    .short()
    .to_owned()
}

fn turn(machine: &str, rv: &str, release: Option<&str>, boot: i64, since: i64) -> RebootTurn {
    RebootTurn {
        machine: machine.into(),
        machine_resource_version: rv.into(),
        since: Time::from_unix(since),
        release: release.map(v),
        boot: boot_short(boot),
        changes: vec![],
    }
}

struct Scenario {
    machines: Vec<M>,
    budget: u32,
    leaders: Vec<&'static str>,
    target: Option<&'static str>,
    ledger: Vec<RebootTurn>,
    halt: Option<RolloutHalt>,
    resume: Option<&'static str>,
    template: Template,
    watched: u64,
    unreadable: Vec<&'static str>,
}

fn scenario(machines: Vec<M>) -> Scenario {
    Scenario {
        machines,
        budget: 1,
        leaders: vec!["l1"],
        target: Some(NEW),
        ledger: vec![],
        halt: None,
        resume: None,
        template: Template::Release(v(NEW)),
        watched: 3600,
        unreadable: vec![],
    }
}

impl Scenario {
    fn cluster(&self) -> Cluster {
        let mut c = Cluster::new(
            "home",
            ClusterSpec {
                endpoint: "https://10.0.0.1:6443".into(),
                leaders: self.leaders.iter().map(|s| s.to_string()).collect(),
                version: self.target.map(v),
                disruption_budget: Some(DisruptionBudget {
                    max_unavailable: Some(self.budget),
                }),
                ..ClusterSpec::default()
            },
        );
        c.status.reboot_turns = self.ledger.clone();
        c.status.rollout_halt = self.halt.clone();
        if let Some(r) = self.resume {
            c.metadata
                .annotations
                .insert(RESUME_ROLLOUT.into(), r.into());
        }
        c
    }

    fn decide(&self) -> Rollout {
        let cluster = self.cluster();
        let built: Vec<(Machine, bool)> =
            self.machines.iter().map(|x| (x.build(), x.fresh)).collect();
        decide_on(&cluster, &built, self)
    }
}

fn decide_on(cluster: &Cluster, built: &[(Machine, bool)], s: &Scenario) -> Rollout {
    let judged: Vec<Judged<'_>> = built
        .iter()
        .map(|(machine, fresh)| {
            Judged::new(
                machine,
                Heartbeat {
                    fresh: *fresh,
                    last_renewal: None,
                },
            )
        })
        .collect();
    let unreadable: BTreeSet<String> = s.unreadable.iter().map(|s| s.to_string()).collect();
    decide_rollout(&RolloutInput {
        cluster,
        machines: &judged,
        unreadable: &unreadable,
        template: &s.template,
        watched_for: Duration::from_secs(s.watched),
        stale_after: STALE,
        stall_after: STALL,
        now: Time::from_unix(NOW),
        windows: &crate::cluster::windows::Gate::open(),
    })
}

fn granted(r: &Rollout) -> Vec<&str> {
    r.grants
        .iter()
        .filter(|g| !g.confirm)
        .map(|g| g.machine.as_str())
        .collect()
}

fn ledger(r: &Rollout) -> Vec<&str> {
    r.turns.iter().map(|t| t.machine.as_str()).collect()
}

#[test]
fn grants_fill_the_budget_in_order() {
    // Budget 1: the first by ask time, then by name.
    let mut s = scenario(vec![m("b").asking(), m("a").asking(), m("c")]);
    let r = s.decide();
    assert_eq!(granted(&r), ["a"]);
    assert_eq!(ledger(&r), ["a"]);
    let t = &r.turns[0];
    assert_eq!(
        (
            t.machine_resource_version.as_str(),
            t.since,
            t.release.clone(),
            t.boot.clone()
        ),
        ("10", Time::from_unix(NOW), None, boot_short(1000))
    );
    assert_eq!(r.progressing.reason, ROLLING_OUT);
    assert_eq!(
        r.progressing.message,
        "0/3 machines run 2026.08.01-001; turns held: a; waiting for a turn: b (budget 1)"
    );

    // The one that asked first goes first.
    s.machines[0].asked_at = 100;
    assert_eq!(granted(&s.decide()), ["b"]);

    // Budget 3 with one Lost: two more.
    let mut s = scenario(vec![
        m("a").asking(),
        m("b").asking(),
        m("c").asking(),
        m("d").phase(Phase::Lost),
    ]);
    s.budget = 3;
    assert_eq!(granted(&s.decide()), ["a", "b"]);
}

#[test]
fn machines_already_down_count_against_the_budget() {
    for down in [Phase::Lost, Phase::Booting, Phase::Updating] {
        let s = scenario(vec![m("a").asking(), m("z").phase(down)]);
        let r = s.decide();
        assert!(r.grants.is_empty(), "{down}");
        assert!(r.progressing.message.contains("waiting for a turn: a"));
    }
    // A stale heartbeat is Lost whatever the status says.
    let mut z = m("z");
    z.fresh = false;
    assert!(
        scenario(vec![m("a").asking(), z])
            .decide()
            .grants
            .is_empty()
    );
    // Blocked, Degraded, Downloading and UpdatePending machines are up.
    for up in [
        Phase::Blocked,
        Phase::Degraded,
        Phase::Downloading,
        Phase::UpdatePending,
    ] {
        let s = scenario(vec![m("a").asking(), m("z").phase(up)]);
        assert_eq!(granted(&s.decide()), ["a"], "{up}");
    }
    // A machine already counted as down costs nothing more.
    let s = scenario(vec![
        m("a").asking().phase(Phase::Updating),
        m("b").asking(),
    ]);
    assert_eq!(granted(&s.decide()), ["a"]);
    // A silent machine that asks gets nothing.
    let mut a = m("a").asking();
    a.fresh = false;
    let mut s = scenario(vec![a]);
    s.budget = 2;
    assert!(s.decide().grants.is_empty());
}

#[test]
fn leaders_go_first_and_one_at_a_time() {
    // Leaders first in order.
    let mut s = scenario(vec![m("a").asking(), m("l1").asking()]);
    s.leaders = vec!["l1", "l2", "l3"];
    assert_eq!(granted(&s.decide()), ["l1"]);
    // Never two leaders down at once, whatever the budget.
    let mut s = scenario(vec![m("l1").asking(), m("l2").asking(), m("a").asking()]);
    s.leaders = vec!["l1", "l2", "l3"];
    s.budget = 3;
    assert_eq!(granted(&s.decide()), ["l1", "a"]);
    let mut s = scenario(vec![m("l2").asking(), m("l3").phase(Phase::Booting)]);
    s.leaders = vec!["l1", "l2", "l3"];
    s.budget = 3;
    assert!(s.decide().grants.is_empty());
    // While the DaemonSet template lags the target, followers wait for
    // release turns; a turn that boots no release still goes.
    let mut s = scenario(vec![
        m("a").for_release(),
        m("b").asking(),
        m("l1").for_release(),
    ]);
    s.template = Template::Release(v(OLD));
    s.budget = 3;
    let r = s.decide();
    assert_eq!(granted(&r), ["l1", "b"]);
    assert!(
        r.progressing
            .message
            .contains("waiting for a turn: a (leaders first"),
        "{}",
        r.progressing.message
    );
    assert_eq!(r.grants[0].release, Some(v(NEW)));
    // Caught up: followers go.
    s.template = Template::Release(v(NEW));
    assert_eq!(granted(&s.decide()), ["l1", "a", "b"]);
    // An unlabelled template (a development build) restricts nothing.
    s.template = Template::Unlabelled;
    assert_eq!(granted(&s.decide()), ["l1", "a", "b"]);
}

#[test]
fn holds_grant_nothing() {
    let mut s = scenario(vec![m("a").asking()]);
    s.watched = 39;
    let r = s.decide();
    assert!(r.grants.is_empty());
    assert!(
        r.progressing
            .message
            .contains("until this operator has watched heartbeats for 40s"),
        "{}",
        r.progressing.message
    );
    s.watched = 40;
    assert_eq!(granted(&s.decide()), ["a"]);
    s.template = Template::Unreadable("daemonsets.apps \"x\" not found".into());
    let r = s.decide();
    assert!(r.grants.is_empty());
    assert!(r.progressing.message.contains("DaemonSet cannot be read"));
}

#[test]
fn the_ledger_keeps_what_may_still_land() {
    let mut held = m("held").asking();
    held.granted = true;
    held.rv = "12";
    let unchanged = m("unchanged").asking(); // rv 10, no grant yet
    let mut moved = m("moved").asking();
    moved.rv = "11";
    let mut s = scenario(vec![held, unchanged, moved]);
    s.budget = 5;
    s.ledger = vec![
        turn("held", "10", None, 1000, NOW - 60),
        turn("unchanged", "10", None, 1000, NOW - 60),
        turn("moved", "10", None, 1000, NOW - 60),
        turn("deleted", "10", None, 1000, NOW - 60),
        turn("unreadable", "10", None, 1000, NOW - 60),
    ];
    s.unreadable = vec!["unreadable"];
    let r = s.decide();
    assert_eq!(ledger(&r), ["held", "unchanged", "unreadable", "moved"]);
    assert_eq!(r.freed, ["moved", "deleted"]);
    // "unchanged" gets its grant sent again on the same version; "moved"
    // asks anew and is granted on its new version.
    assert_eq!(
        r.grants,
        [
            Grant {
                machine: "moved".into(),
                resource_version: "11".into(),
                release: None,
                purpose: TurnPurpose::new(&boot_short(1000), None, []),
                confirm: false,
            },
            Grant {
                machine: "unchanged".into(),
                resource_version: "10".into(),
                release: None,
                purpose: TurnPurpose::new(&boot_short(1000), None, []),
                confirm: true,
            },
        ]
    );
}

#[test]
fn finished_turns_are_reclaimed_and_stray_grants_counted() {
    let mut done = m("done");
    done.granted = true;
    let mut busy = m("busy");
    busy.granted = true;
    busy.using = true;
    let mut stray = m("stray").asking();
    stray.granted = true;
    let mut s = scenario(vec![done, busy, stray, m("next").asking()]);
    s.budget = 3;
    s.ledger = vec![
        turn("done", "9", None, 1000, NOW - 60),
        turn("busy", "9", None, 1000, NOW - 60),
    ];
    let r = s.decide();
    assert_eq!(r.reclaims, ["done"]);
    // The reclaimed entry still counts until its grant is gone, and the
    // stray grant is adopted, so the budget of 3 is full.
    assert_eq!(ledger(&r), ["done", "busy", "stray"]);
    assert!(r.grants.is_empty());
}

#[test]
fn a_grant_for_something_else_is_taken_back() {
    // Each machine asks for a turn while holding a grant; only a grant
    // naming exactly what it asks for stays.
    let sysctl = TurnPurpose::new(&boot_short(1000), None, []);
    let cases: Vec<(&str, Option<TurnPurpose>, Option<&'static str>, bool)> = vec![
        ("same purpose", None, None, false),
        // Granted for a sysctl change; a release was written since.
        (
            "release written since",
            Some(sysctl.clone()),
            Some(NEW),
            true,
        ),
        (
            "granted in an earlier boot",
            Some(TurnPurpose::new(&boot_short(999), None, [])),
            None,
            true,
        ),
        (
            "other changes",
            Some(TurnPurpose::new(&boot_short(1000), None, ["aaaaaaaaaaaa"])),
            None,
            true,
        ),
    ];
    for (why, names, staged, reclaimed) in cases {
        let mut x = m("x").asking();
        x.granted = true;
        x.staged = staged;
        x.grant_names = names;
        let mut s = scenario(vec![x]);
        s.ledger = vec![turn("x", "10", None, 1000, NOW - 60)];
        let r = s.decide();
        let want: &[&str] = if reclaimed { &["x"] } else { &[] };
        assert_eq!(r.reclaims, want, "{why}");
        // The turn stays counted until its grant is gone.
        assert_eq!(ledger(&r), ["x"], "{why}");
        assert!(r.grants.is_empty(), "{why}");
    }
    // Mid-turn, a grant is never taken back this way.
    let mut busy = m("busy");
    busy.granted = true;
    busy.using = true;
    busy.grant_names = Some(TurnPurpose::new(&boot_short(999), None, []));
    let r = scenario(vec![busy]).decide();
    assert!(r.reclaims.is_empty());
}

#[test]
fn a_new_grant_names_the_boot_release_and_changes_asked_for() {
    let mut x = m("x").for_release();
    let built = {
        let mut b = x.build();
        b.status.pending = vec![liken_api::machine::PendingDisruption {
            condition: SYSCTLS_APPLIED.into(),
            kind: liken_api::machine::DisruptionKind::Reboot,
            hash: liken_api::hash::sha256(b"doc"),
            summary: String::new(),
        }];
        b
    };
    x.granted = false;
    let s = scenario(vec![x]);
    let r = decide_on(&s.cluster(), &[(built, true)], &s);
    let purpose = TurnPurpose::new(
        &boot_short(1000),
        Some(v(NEW)),
        [liken_api::hash::sha256(b"doc").as_str()],
    );
    assert_eq!(r.grants.len(), 1);
    assert_eq!(r.grants[0].purpose, purpose);
    assert_eq!(r.turns[0].purpose(), purpose);
}

#[test]
fn a_turn_held_too_long_stalls_the_rollout() {
    let mut a = m("a").asking();
    a.granted = true;
    let mut s = scenario(vec![a]);
    s.ledger = vec![turn("a", "9", None, 1000, NOW - 1801)];
    let r = s.decide();
    assert_eq!(r.progressing.status, ConditionStatus::False);
    assert_eq!(r.progressing.reason, ROLLOUT_STALLED);
    assert_eq!(
        r.progressing.message,
        "reboot turns held longer than 30m without finishing: a (since 2027-01-15T07:29:59Z); \
         see those machines' conditions and Events"
    );
    s.ledger = vec![turn("a", "9", None, 1000, NOW - 1800)];
    assert_eq!(s.decide().progressing.reason, ROLLING_OUT);
}

fn fell_back() -> M {
    // Given a turn for NEW at boot 1000; now boot 2000, running OLD, and
    // asking again (the machine operator would retry on its own).
    let mut a = m("a").for_release();
    a.granted = true;
    a.boot = 2000;
    a
}

#[test]
fn a_release_that_falls_back_halts_its_rollout() {
    let mut s = scenario(vec![fell_back(), m("b").for_release(), m("c").asking()]);
    s.budget = 3;
    s.ledger = vec![turn("a", "9", Some(NEW), 1000, NOW - 600)];
    s.resume = Some("1");
    let r = s.decide();
    let halt = r.halt.clone().unwrap();
    assert_eq!(
        halt,
        RolloutHalt {
            release: v(NEW),
            machine: "a".into(),
            cause: HaltCause::FellBack,
            since: Time::from_unix(NOW),
            resume: "1".into(),
        }
    );
    assert_eq!(r.progressing.status, ConditionStatus::False);
    assert_eq!(r.progressing.reason, RELEASE_FAILED);
    assert_eq!(
        r.progressing.message,
        "release 2026.08.01-001 failed on machine a: it rebooted into it and came back running \
         an older release (its boot fell back to the other slot); no reboot turn is granted for \
         2026.08.01-001. Change spec.version, or set the annotation liken.sh/resume-rollout on \
         the Cluster to a new value to try again"
    );
    // a's grant is taken back; b (for NEW) waits; c (no release) goes.
    assert_eq!(r.reclaims, ["a"]);
    assert_eq!(granted(&r), ["c"]);

    // The halt holds on the next sweep, with a's entry gone.
    s.ledger = vec![];
    s.machines[0].granted = false;
    s.halt = Some(halt.clone());
    let r = s.decide();
    assert_eq!(r.halt, Some(halt.clone()));
    assert_eq!(granted(&r), ["c"]);
    // A new resume value lifts it, and so does a new target.
    s.resume = Some("2");
    let r = s.decide();
    assert_eq!(r.halt, None);
    assert_eq!(granted(&r), ["a", "b", "c"]);
    s.resume = Some("1");
    s.target = Some("2026.08.02-001");
    assert_eq!(s.decide().halt, None);
}

#[test]
fn a_fall_back_halts_even_once_its_grant_is_gone() {
    // The sweep that saw the fall-back failed to write the Cluster's
    // status; a reclaim went out anyway, and the machine has written
    // since. The entry is freed, but the halt is still recorded.
    let mut a = fell_back();
    a.granted = false;
    a.rv = "12";
    let mut s = scenario(vec![a, m("b").for_release()]);
    s.budget = 3;
    s.ledger = vec![turn("a", "9", Some(NEW), 1000, NOW - 600)];
    let r = s.decide();
    assert_eq!(r.freed, ["a"]);
    assert_eq!(r.halt.as_ref().map(|h| h.cause), Some(HaltCause::FellBack));
    assert!(granted(&r).is_empty(), "{:?}", r.grants);
    // A sweep whose ledger did not land sends neither grants nor reclaims.
    let mut held = fell_back();
    held.granted = true;
    let mut s = scenario(vec![held]);
    s.ledger = vec![turn("a", "9", Some(NEW), 1000, NOW - 600)];
    let r = s.decide();
    assert_eq!(r.reclaims, ["a"]);
    let r = r.without_grants();
    assert!(r.reclaims.is_empty() && r.grants.is_empty());
}

#[test]
fn a_release_reported_blocked_halts_and_a_good_boot_does_not() {
    let mut a = m("a").for_release();
    a.granted = true;
    a.blocked = true;
    let mut s = scenario(vec![a]);
    s.ledger = vec![turn("a", "9", Some(NEW), 1000, NOW - 60)];
    let r = s.decide();
    assert_eq!(r.halt.as_ref().map(|h| h.cause), Some(HaltCause::Blocked));
    assert!(r.progressing.message.contains("reported it Blocked"));

    // Rebooted and running NEW: no halt, and the finished turn goes back.
    let mut a = m("a");
    a.granted = true;
    a.boot = 2000;
    a.running = Some(NEW);
    let mut s = scenario(vec![a]);
    s.ledger = vec![turn("a", "9", Some(NEW), 1000, NOW - 60)];
    let r = s.decide();
    assert_eq!(r.halt, None);
    assert_eq!(r.reclaims, ["a"]);
    // A turn for a release that is no longer the target halts nothing.
    let mut s = scenario(vec![fell_back()]);
    s.ledger = vec![turn("a", "9", Some(OLD), 1000, NOW - 60)];
    assert_eq!(s.decide().halt, None);
}

#[test]
fn a_turn_stays_in_use_until_the_new_boot_is_blessed() {
    // Back up on NEW, but on trial: a failed trial reboots into the
    // other slot, so the machine keeps its turn and the next waits.
    let mut a = m("a").phase(Phase::Updating);
    a.granted = true;
    a.boot = 2000;
    a.running = Some(NEW);
    a.trial = true;
    let mut s = scenario(vec![a.clone(), m("b").for_release()]);
    s.ledger = vec![turn("a", "9", Some(NEW), 1000, NOW - 60)];
    let r = s.decide();
    assert!(r.reclaims.is_empty(), "{:?}", r.reclaims);
    assert_eq!(r.halt, None);
    assert_eq!(ledger(&r), ["a"]);
    assert!(granted(&r).is_empty(), "{:?}", granted(&r));

    // Blessed: converged, the turn goes back. The entry counts until
    // the grant is gone, so b waits one more sweep.
    a.trial = false;
    a.phase = Phase::Ready;
    let mut s = scenario(vec![a, m("b").for_release()]);
    s.ledger = vec![turn("a", "9", Some(NEW), 1000, NOW - 60)];
    let r = s.decide();
    assert_eq!(r.reclaims, ["a"]);
    assert!(granted(&r).is_empty(), "{:?}", granted(&r));
}

#[test]
fn complete_when_nothing_is_held_asked_or_behind() {
    let mut a = m("a");
    a.running = Some(NEW);
    let r = scenario(vec![a.clone()]).decide();
    assert_eq!(
        (
            r.progressing.status,
            r.progressing.reason.as_str(),
            r.progressing.message.as_str()
        ),
        (
            ConditionStatus::True,
            ROLLOUT_COMPLETE,
            "all 1 machines run 2026.08.01-001"
        )
    );
    let mut s = scenario(vec![a.clone(), m("b")]);
    let r = s.decide();
    assert_eq!(r.progressing.reason, ROLLING_OUT);
    assert_eq!(r.progressing.message, "1/2 machines run 2026.08.01-001");
    s.target = None;
    assert_eq!(
        s.decide().progressing.message,
        "no machine holds or waits for a reboot turn"
    );
}

#[test]
fn a_pruned_ledger_is_detected() {
    let s = scenario(vec![m("a").asking()]);
    let r = s.decide();
    let mut stored = s.cluster();
    assert!(!ledger_kept(&r, &stored));
    stored.status.reboot_turns = r.turns.clone();
    assert!(ledger_kept(&r, &stored));
    assert!(r.clone().without_grants().grants.is_empty());
}

// The invariant: over random fleets, phases, heartbeats, requests,
// grants, ledgers and budgets, a sweep that grants a new turn leaves no
// more machines down (unavailable or in the ledger) than the budget, and
// never more than one leader; every grant is in the ledger; and an entry
// whose grant could still land is never dropped.
fn phase_strategy() -> impl Strategy<Value = Phase> {
    proptest::sample::select(Phase::ALL.to_vec())
}

#[derive(Clone, Debug)]
struct Gen {
    phase: Phase,
    fresh: bool,
    wants: bool,
    using: bool,
    granted: bool,
    rv: u8,
    staged: bool,
    leader: bool,
    unreadable: bool,
    asked_at: i64,
}

fn gen_machine() -> impl Strategy<Value = Gen> {
    (
        phase_strategy(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop::bool::weighted(0.2),
        0u8..3,
        any::<bool>(),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.1),
        0i64..5,
    )
        .prop_map(
            |(phase, fresh, wants, using, granted, rv, staged, leader, unreadable, asked_at)| Gen {
                phase,
                fresh,
                wants,
                using,
                granted,
                rv,
                staged,
                leader,
                unreadable,
                asked_at,
            },
        )
}

const NAMES: [&str; 12] = [
    "m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", "m10", "m11",
];
const RVS: [&str; 3] = ["1", "2", "3"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn grants_never_exceed_the_budget(
        fleet in prop::collection::vec(gen_machine(), 0..12),
        ledger in prop::collection::vec((0usize..14, 0u8..3), 0..6),
        budget in 1u32..5,
        lagging in any::<bool>(),
        watched in prop::sample::select(vec![0u64, 39, 40, 3600]),
        halted in any::<bool>(),
    ) {
        let mut s = scenario(vec![]);
        s.budget = budget;
        s.watched = watched;
        s.template = Template::Release(v(if lagging { OLD } else { NEW }));
        s.leaders = fleet.iter().enumerate().filter(|(_, g)| g.leader).map(|(i, _)| NAMES[i]).collect();
        if s.leaders.is_empty() {
            s.leaders = vec!["m0"];
        }
        if halted {
            s.halt = Some(RolloutHalt {
                release: v(NEW),
                machine: "m0".into(),
                cause: HaltCause::Blocked,
                since: Time::from_unix(NOW - 5),
                resume: String::new(),
            });
        }
        s.ledger = ledger
            .iter()
            .map(|(i, rv)| {
                let name = NAMES.get(*i).copied().unwrap_or("gone");
                turn(name, RVS[*rv as usize], Some(NEW), 1000, NOW - 60)
            })
            .collect();
        let mut built = Vec::new();
        for (i, g) in fleet.iter().enumerate() {
            if g.unreadable {
                s.unreadable.push(NAMES[i]);
                continue;
            }
            let mut x = m(NAMES[i]);
            x.phase = g.phase;
            x.fresh = g.fresh;
            x.wants = g.wants;
            x.using = g.using;
            x.granted = g.granted;
            x.rv = RVS[g.rv as usize];
            x.staged = g.staged.then_some(NEW);
            x.asked_at = g.asked_at;
            built.push((x.build(), x.fresh));
        }
        let cluster = s.cluster();
        let r = decide_on(&cluster, &built, &s);

        let judged: Vec<Judged<'_>> = built
            .iter()
            .map(|(machine, fresh)| Judged::new(machine, Heartbeat { fresh: *fresh, last_renewal: None }))
            .collect();
        let mut down: BTreeSet<&str> = judged
            .iter()
            .filter(|j| matches!(j.phase, Phase::Lost | Phase::Booting | Phase::Updating))
            .map(|j| j.name())
            .collect();
        let before = {
            let mut d = down.clone();
            d.extend(cluster.status.reboot_turns.iter().map(|t| t.machine.as_str()));
            d.extend(judged.iter().filter(|j| coordination::holds_grant(&j.machine.status.conditions)).map(|j| j.name()));
            d
        };
        down.extend(r.turns.iter().map(|t| t.machine.as_str()));
        let new: Vec<&Grant> = r.grants.iter().filter(|g| !g.confirm).collect();
        if !new.is_empty() {
            prop_assert!(down.len() <= budget as usize, "down {:?} budget {}", down, budget);
            let leaders_down = down.iter().filter(|d| cluster.is_leader(d)).count();
            let leaders_before = before.iter().filter(|d| cluster.is_leader(d)).count();
            prop_assert!(leaders_down <= leaders_before.max(1));
            prop_assert!(watched >= 40);
        } else {
            // Without new grants nothing new is counted either.
            prop_assert!(down.is_subset(&before), "{:?} {:?}", down, before);
        }
        for g in &r.grants {
            prop_assert!(r.turns.iter().any(|t| t.machine == g.machine));
            if !g.confirm {
                // A new grant is a new entry, on the version it is sent with.
                let t = r.turns.iter().find(|t| t.machine == g.machine).unwrap();
                prop_assert_eq!(&t.machine_resource_version, &g.resource_version);
                prop_assert_eq!(t.since, Time::from_unix(NOW));
            }
            if halted && !g.confirm {
                prop_assert!(g.release.as_ref() != Some(&v(NEW)));
            }
        }
        // Conservation: an entry is dropped only when its Machine is gone
        // (and not unreadable), or shows no grant and has moved on.
        for e in &cluster.status.reboot_turns {
            if r.turns.iter().any(|t| t.machine == e.machine) {
                continue;
            }
            prop_assert!(!s.unreadable.contains(&e.machine.as_str()));
            if let Some(j) = judged.iter().find(|j| j.name() == e.machine) {
                prop_assert!(!coordination::holds_grant(&j.machine.status.conditions));
                prop_assert!(j.machine.metadata.resource_version != e.machine_resource_version);
            }
        }
        let mut names: Vec<&str> = r.turns.iter().map(|t| t.machine.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        prop_assert_eq!(names.len(), r.turns.len());
        // Every machine holding a grant stays counted.
        for j in &judged {
            if coordination::holds_grant(&j.machine.status.conditions) {
                prop_assert!(r.turns.iter().any(|t| t.machine == j.name()));
            }
        }
    }
}
