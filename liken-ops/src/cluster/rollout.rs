//! The rollout: reboot turns handed out under the disruption budget.
//!
//! A machine that needs a disruption asks for a turn (a convergence
//! condition with the reason AwaitingTurn, see
//! [`liken_api::coordination`]); this module decides who gets one. The
//! rules, in the order they apply:
//!
//! - **The budget counts what is already down.** Machines whose effective
//!   phase is Lost, Booting or Updating are unavailable whether or not
//!   they hold a turn, and every machine in the ledger counts too; a turn
//!   goes out only while that union is smaller than
//!   `spec.disruptionBudget.maxUnavailable`. A candidate that is already
//!   counted costs nothing more.
//! - **The ledger is the fence.** Every turn is written into the
//!   Cluster's `status.rebootTurns`, with the Machine's resourceVersion
//!   the grant is conditioned on, before the grant is written onto the
//!   Machine (the caller keeps that order). An entry is freed only when
//!   the Machine shows no grant and has been written since that
//!   resourceVersion, so a grant sent by a copy of this program that
//!   paused (a stopped process, a partition) and lands late can never
//!   land outside the budget: leader election is not a fence, the ledger
//!   is. An entry whose grant does not show while the Machine is
//!   unchanged is sent again (a confirm), conditioned on the same
//!   version. A Machine this build cannot read keeps its entry.
//! - **A new leader waits.** Until this copy has watched heartbeats for
//!   the stale limit, a dead machine can still read alive
//!   ([`super::heartbeat`]), so no turn is granted.
//! - **Leaders first.** While the machine operator DaemonSet's template
//!   lags the target release (its pods come from the manifests a leader
//!   applies when it boots the new release), only leaders get turns that
//!   boot a release. And only one leader is unavailable at a time, so the
//!   datastore keeps its quorum whatever the budget says.
//! - **Order.** Leaders, then the machine that has asked longest, then by
//!   name.
//! - **A grant names its purpose.** Each turn records what it allows
//!   ([`TurnPurpose`]): the machine's boot, the release its reboot boots
//!   and the staged changes it applies, read from the Machine's status
//!   at the version the grant is conditioned on. The same purpose ends
//!   the grant's message, and the machine acts only on a grant naming
//!   exactly what it is about to apply.
//! - **Reclaims.** A machine that holds a grant and neither asks for a
//!   turn nor is using one (draining, rebooting, restarting) has finished:
//!   its grant is removed, and its ledger entry freed on a later sweep.
//!   A machine that asks for a turn for something other than its grant
//!   names (a release written, a change staged, a reboot since) gets its
//!   grant taken back the same way, and asks again.
//! - **Stalls.** A turn held longer than the stall limit turns
//!   Progressing False with RolloutStalled; the turn stays counted.
//! - **A failed release halts.** A machine given a turn for the target
//!   release N that comes back running an older release (its boot fell
//!   back to the other slot), or reports ReleaseCurrent Blocked, halts N:
//!   no further turn that boots N, Progressing False with ReleaseFailed
//!   naming the release and the machine, and that machine's grant is
//!   taken back so it does not retry on its own. The halt is stored in
//!   `status.rolloutHalt`; a new `spec.version`, or a new value of the
//!   `liken.sh/resume-rollout` annotation, lifts it.

use std::collections::BTreeSet;
use std::time::Duration;

use liken_api::annotations::RESUME_ROLLOUT;
use liken_api::cluster::{HaltCause, RebootTurn, RolloutHalt};
use liken_api::condition::find;
use liken_api::coordination::{self, TurnPurpose, reason};
use liken_api::{Cluster, Condition, ConditionStatus, Phase, Time, Version};

use super::fleet::{Judged, name_list};

/// The Progressing condition type.
pub const PROGRESSING: &str = "Progressing";
/// Progressing True: turns are held or asked for, or machines lag the
/// target.
pub const ROLLING_OUT: &str = "RollingOut";
/// Progressing True: nothing is held, asked for, or behind.
pub const ROLLOUT_COMPLETE: &str = "RolloutComplete";
/// Progressing False: a turn has been held past the stall limit.
pub const ROLLOUT_STALLED: &str = "RolloutStalled";
/// Progressing False: the target release failed on a machine.
pub const RELEASE_FAILED: &str = "ReleaseFailed";

/// The release the machine operator DaemonSet's pod template carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Template {
    /// Its `liken.sh/version` label names this release.
    Release(Version),
    /// It carries no readable release label (a development build).
    Unlabelled,
    /// It could not be read (absent, forbidden, unreachable): no turn is
    /// granted, because leaders-first cannot be judged.
    Unreadable(String),
}

/// What a rollout decision reads.
pub struct RolloutInput<'a> {
    /// The Cluster: its spec (target, budget, leaders), its ledger and
    /// halt, its resume annotation.
    pub cluster: &'a Cluster,
    /// Every readable Machine, judged.
    pub machines: &'a [Judged<'a>],
    /// Names of Machines the store could not decode.
    pub unreadable: &'a BTreeSet<String>,
    /// The DaemonSet template's release.
    pub template: &'a Template,
    /// How long this copy has watched heartbeats.
    pub watched_for: Duration,
    /// The heartbeat stale limit.
    pub stale_after: Duration,
    /// How long a turn may be held before the rollout reads stalled.
    pub stall_after: Duration,
    /// The wall clock, for ledger times.
    pub now: Time,
    /// The maintenance-window gate: machines that get no new turn now.
    pub windows: &'a super::windows::Gate,
}

/// A grant to write onto a Machine after the ledger holding it is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The Machine.
    pub machine: String,
    /// The resourceVersion the write is conditioned on.
    pub resource_version: String,
    /// The release the turn boots, if any.
    pub release: Option<Version>,
    /// What the grant allows (its message ends with it).
    pub purpose: TurnPurpose,
    /// Whether this re-sends a grant already in the ledger.
    pub confirm: bool,
}

/// A rollout decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Rollout {
    /// The ledger to store.
    pub turns: Vec<RebootTurn>,
    /// Grants to write once the ledger is stored.
    pub grants: Vec<Grant>,
    /// Machines whose grant to remove.
    pub reclaims: Vec<String>,
    /// Ledger entries freed this sweep (for the log).
    pub freed: Vec<String>,
    /// The halt to store.
    pub halt: Option<RolloutHalt>,
    /// Progressing (no generation or time yet).
    pub progressing: Condition,
}

impl Rollout {
    /// The same decision with no grant and no reclaim: what a sweep
    /// carries out when the ledger it must write first did not land as
    /// sent. A reclaim waits too, because the halt the sweep found (and
    /// the entry a reclaim lets the next sweep free) is only recorded by
    /// that write.
    pub fn without_grants(mut self) -> Rollout {
        self.grants.clear();
        self.reclaims.clear();
        self
    }
}

/// The short boot id a machine reports (first 12 hex digits).
fn boot_of(m: &liken_api::Machine) -> String {
    m.status
        .boot
        .as_ref()
        .and_then(|b| b.boot_id())
        .map(|id| id.short().to_owned())
        .unwrap_or_default()
}

/// The release a turn would boot: the staged one, when it differs from
/// the running one.
fn turn_release(m: &liken_api::Machine) -> Option<Version> {
    let r = m.status.release.as_ref()?;
    let staged = r.staged.as_ref()?;
    (r.running.as_ref() != Some(staged)).then(|| staged.clone())
}

/// What the machine asks a turn for, as its status says: its boot, the
/// release its reboot would boot, and its staged changes. A grant names
/// this purpose, and the machine takes its turn only for exactly it.
pub fn asked_purpose(machine: &liken_api::Machine) -> TurnPurpose {
    TurnPurpose::new(
        &boot_of(machine),
        turn_release(machine),
        machine.status.pending.iter().map(|p| p.hash.as_str()),
    )
}

fn running<'a>(j: &Judged<'a>) -> Option<&'a Version> {
    j.machine.status.release.as_ref()?.running.as_ref()
}

/// What a machine holding a turn for `release` says about that release.
fn failure(j: &Judged<'_>, turn: &RebootTurn, release: &Version) -> Option<HaltCause> {
    let booted_since = !turn.boot.is_empty() && {
        let now = boot_of(j.machine);
        !now.is_empty() && now != turn.boot
    };
    if booted_since && running(j).is_some_and(|r| r < release) {
        return Some(HaltCause::FellBack);
    }
    let blocked = find(&j.machine.status.conditions, coordination::RELEASE_CURRENT)
        .is_some_and(|c| c.status != ConditionStatus::True && c.reason == reason::BLOCKED);
    blocked.then_some(HaltCause::Blocked)
}

/// When the machine started asking: the earliest transition among its
/// AwaitingTurn conditions.
fn asked_since(j: &Judged<'_>) -> Time {
    j.machine
        .status
        .conditions
        .iter()
        .filter(|c| c.status != ConditionStatus::True && c.reason == reason::AWAITING_TURN)
        .map(|c| c.last_transition_time)
        .min()
        .unwrap_or(Time::EPOCH)
}

fn unavailable_phase(p: Phase) -> bool {
    matches!(p, Phase::Lost | Phase::Booting | Phase::Updating)
}

fn duration_text(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s >= 60 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// Decides the rollout for one sweep.
pub fn decide_rollout(input: &RolloutInput<'_>) -> Rollout {
    let cluster = input.cluster;
    let target = cluster.spec.version.as_ref();
    let resume = cluster
        .metadata
        .annotation(RESUME_ROLLOUT)
        .unwrap_or_default();

    // The halt as stored, unless the target moved or a new resume value
    // lifted it.
    let mut halt = cluster.active_halt().cloned();

    // The ledger: keep what may still hold or land, free the rest.
    let mut turns: Vec<RebootTurn> = Vec::new();
    let mut freed = Vec::new();
    let mut confirms = Vec::new();
    let mut failed: Vec<(String, HaltCause)> = Vec::new();
    for e in &cluster.status.reboot_turns {
        if turns.iter().any(|t| t.machine == e.machine) {
            continue;
        }
        // The ledger holds a handful of entries: a scan costs less than
        // indexing ten thousand names.
        let Some(j) = input.machines.iter().find(|j| j.name() == e.machine) else {
            if input.unreadable.contains(&e.machine) {
                turns.push(e.clone());
            } else {
                freed.push(e.machine.clone());
            }
            continue;
        };
        let granted = coordination::holds_grant(&j.machine.status.conditions);
        let unchanged = j.machine.metadata.resource_version == e.machine_resource_version;
        // The failure is judged before the entry may be freed: a sweep
        // whose status write failed may already have taken the grant
        // back, and the entry is the only record of what the turn booted.
        if let (Some(release), Some(t)) = (&e.release, target)
            && release == t
            && let Some(cause) = failure(j, e, release)
        {
            failed.push((e.machine.clone(), cause));
        }
        if !granted && !unchanged {
            freed.push(e.machine.clone());
            continue;
        }
        if !granted && coordination::wants_turn(&j.machine.status.conditions) {
            confirms.push(Grant {
                machine: e.machine.clone(),
                resource_version: e.machine_resource_version.clone(),
                release: e.release.clone(),
                purpose: e.purpose(),
                confirm: true,
            });
        }
        turns.push(e.clone());
    }

    // A grant the ledger does not hold (a ledger lost to an older schema,
    // a write by hand) is counted all the same.
    for j in input.machines {
        if coordination::holds_grant(&j.machine.status.conditions)
            && !turns.iter().any(|t| t.machine == j.name())
        {
            let purpose = coordination::grant_purpose(&j.machine.status.conditions)
                .unwrap_or_else(|| asked_purpose(j.machine));
            turns.push(RebootTurn {
                machine: j.name().to_owned(),
                machine_resource_version: j.machine.metadata.resource_version.clone(),
                since: input.now,
                release: purpose.release,
                boot: purpose.boot,
                changes: purpose.changes,
            });
        }
    }

    if halt.is_none()
        && let (Some((machine, cause)), Some(t)) = (failed.first(), target)
    {
        halt = Some(RolloutHalt {
            release: t.clone(),
            machine: machine.clone(),
            cause: *cause,
            since: input.now,
            resume: resume.to_owned(),
        });
    }
    let halted =
        |release: Option<&Version>| halt.as_ref().is_some_and(|h| release == Some(&h.release));

    // Reclaims: finished turns, and the grant of a machine that failed
    // the halted release.
    let mut reclaims = Vec::new();
    for j in input.machines {
        let c = &j.machine.status.conditions;
        if !coordination::holds_grant(c) {
            continue;
        }
        let finished = !coordination::wants_turn(c) && !coordination::using_turn(c);
        // Asking again while holding a grant: the grant is for something
        // else (the machine wrote a release or staged a change since, or
        // rebooted), so it is taken back and the new ask waits its turn.
        let repurposed = coordination::wants_turn(c)
            && !coordination::using_turn(c)
            && coordination::grant_purpose(c).as_ref() != Some(&asked_purpose(j.machine));
        let failed_here = failed.iter().any(|(m, _)| m == j.name()) && halted(target);
        if finished || repurposed || failed_here {
            reclaims.push(j.name().to_owned());
        }
    }
    confirms
        .retain(|g| !halted(g.release.as_ref()) && !failed.iter().any(|(m, _)| *m == g.machine));

    // The budget.
    let mut down: BTreeSet<String> = input
        .machines
        .iter()
        .filter(|j| unavailable_phase(j.phase))
        .map(|j| j.name().to_owned())
        .collect();
    down.extend(turns.iter().map(|t| t.machine.clone()));
    let budget = cluster.max_unavailable() as usize;
    let mut leader_down = down.iter().any(|m| cluster.is_leader(m));

    let hold = if input.watched_for < input.stale_after {
        Some(format!(
            "no turn is granted until this operator has watched heartbeats for {} \
             (it took the lead recently)",
            duration_text(input.stale_after)
        ))
    } else if let Template::Unreadable(why) = input.template {
        Some(format!(
            "no turn is granted while the machine operator DaemonSet cannot be read: {why}"
        ))
    } else {
        None
    };
    let lags = match (input.template, target) {
        (Template::Release(v), Some(t)) => v < t,
        _ => false,
    };

    let mut candidates: Vec<&Judged<'_>> = input
        .machines
        .iter()
        .filter(|j| {
            let c = &j.machine.status.conditions;
            coordination::wants_turn(c)
                && !coordination::holds_grant(c)
                && j.heartbeat.fresh
                && j.phase != Phase::Lost
                && !turns.iter().any(|t| t.machine == j.name())
        })
        .collect();
    candidates.sort_by(|a, b| {
        let key = |j: &Judged<'_>| (!cluster.is_leader(j.name()), asked_since(j));
        key(a).cmp(&key(b)).then_with(|| a.name().cmp(b.name()))
    });

    let mut grants = Vec::new();
    let mut waiting = Vec::new();
    let mut outside = Vec::new();
    for j in candidates {
        let name = j.name();
        if !input.windows.allows(name) {
            outside.push(name);
            continue;
        }
        let release = turn_release(j.machine);
        let leader = cluster.is_leader(name);
        let counted = down.contains(name);
        // A machine already counted costs nothing more, but a grant still
        // goes out only while the count is within the budget.
        let fits = if counted {
            down.len() <= budget
        } else {
            down.len() < budget
        };
        let allowed = hold.is_none()
            && !halted(release.as_ref())
            && !(lags && !leader && release.is_some())
            && !(leader && leader_down && !counted)
            && fits;
        if !allowed {
            waiting.push(name);
            continue;
        }
        let purpose = asked_purpose(j.machine);
        turns.push(RebootTurn {
            machine: name.to_owned(),
            machine_resource_version: j.machine.metadata.resource_version.clone(),
            since: input.now,
            release: release.clone(),
            boot: purpose.boot.clone(),
            changes: purpose.changes.clone(),
        });
        grants.push(Grant {
            machine: name.to_owned(),
            resource_version: j.machine.metadata.resource_version.clone(),
            release,
            purpose,
            confirm: false,
        });
        down.insert(name.to_owned());
        leader_down |= leader;
    }
    grants.extend(confirms);

    let stalled: Vec<String> = turns
        .iter()
        .filter(|t| {
            let held = input.now.seconds_since(t.since);
            held > 0 && held as u64 > input.stall_after.as_secs()
        })
        .map(|t| format!("{} (since {})", t.machine, t.since))
        .collect();
    let stalled: Vec<&str> = stalled.iter().map(String::as_str).collect();

    let progressing = progressing(&ProgressFacts {
        cluster,
        input,
        halt: halt.as_ref(),
        stalled: &stalled,
        turns: &turns,
        waiting: &waiting,
        outside: &outside,
        hold: hold.as_deref(),
        lags,
    });
    Rollout {
        turns,
        grants,
        reclaims,
        freed,
        halt,
        progressing,
    }
}

struct ProgressFacts<'a> {
    cluster: &'a Cluster,
    input: &'a RolloutInput<'a>,
    halt: Option<&'a RolloutHalt>,
    stalled: &'a [&'a str],
    turns: &'a [RebootTurn],
    waiting: &'a [&'a str],
    outside: &'a [&'a str],
    hold: Option<&'a str>,
    lags: bool,
}

fn progressing(f: &ProgressFacts<'_>) -> Condition {
    if let Some(h) = f.halt {
        let what = match h.cause {
            HaltCause::FellBack => {
                "rebooted into it and came back running an older release \
                 (its boot fell back to the other slot)"
            }
            HaltCause::Blocked => "reported it Blocked (see its ReleaseCurrent condition)",
        };
        return Condition::new(
            PROGRESSING,
            ConditionStatus::False,
            RELEASE_FAILED,
            format!(
                "release {} failed on machine {}: it {what}; no reboot turn is granted for {}. \
                 Change spec.version, or set the annotation {RESUME_ROLLOUT} on the Cluster \
                 to a new value to try again",
                h.release, h.machine, h.release
            ),
        );
    }
    if !f.stalled.is_empty() {
        return Condition::new(
            PROGRESSING,
            ConditionStatus::False,
            ROLLOUT_STALLED,
            format!(
                "reboot turns held longer than {} without finishing: {}; \
                 see those machines' conditions and Events",
                duration_text(f.input.stall_after),
                name_list(f.stalled)
            ),
        );
    }
    let target = f.cluster.spec.version.as_ref();
    let machines = f.input.machines;
    let on_target = target.map(|t| machines.iter().filter(|j| running(j) == Some(t)).count());
    let behind = on_target.is_some_and(|n| n < machines.len());
    let mut parts = Vec::new();
    if let (Some(t), Some(n)) = (target, on_target) {
        parts.push(format!("{n}/{} machines run {t}", machines.len()));
    }
    if !f.turns.is_empty() {
        let mut held: Vec<&str> = f.turns.iter().map(|t| t.machine.as_str()).collect();
        held.sort_unstable();
        parts.push(format!("turns held: {}", name_list(&held)));
    }
    if !f.waiting.is_empty() {
        let mut waiting = f.waiting.to_vec();
        waiting.sort_unstable();
        let why = match f.hold {
            Some(h) => format!(" ({h})"),
            None if f.lags => format!(
                " (leaders first: the machine operator DaemonSet still runs an older release \
                 than {}; budget {})",
                target.map(Version::as_str).unwrap_or_default(),
                f.cluster.max_unavailable()
            ),
            None => format!(" (budget {})", f.cluster.max_unavailable()),
        };
        parts.push(format!("waiting for a turn: {}{why}", name_list(&waiting)));
    }
    if !f.outside.is_empty() {
        parts.push(f.input.windows.waiting_text(f.outside));
    }
    if !f.turns.is_empty() || !f.waiting.is_empty() || !f.outside.is_empty() || behind {
        return Condition::new(
            PROGRESSING,
            ConditionStatus::True,
            ROLLING_OUT,
            parts.join("; "),
        );
    }
    let message = match target {
        Some(t) => format!("all {} machines run {t}", machines.len()),
        None => "no machine holds or waits for a reboot turn".to_owned(),
    };
    Condition::new(
        PROGRESSING,
        ConditionStatus::True,
        ROLLOUT_COMPLETE,
        message,
    )
}

/// Whether the stored Cluster kept the ledger and the halt the sweep sent.
/// A Cluster CRD from an older release prunes fields it does not declare;
/// grants must not go out on a ledger the server did not keep.
pub fn ledger_kept(sent: &Rollout, stored: &Cluster) -> bool {
    stored.status.reboot_turns == sent.turns && stored.status.rollout_halt == sent.halt
}

/// Progressing while the served schema prunes the ledger: no turn goes
/// out, and the message says why. The reason stays RollingOut.
pub fn pruned_progressing() -> Condition {
    Condition::new(
        PROGRESSING,
        ConditionStatus::True,
        ROLLING_OUT,
        "reboot turns wait for a Cluster schema that stores status.rebootTurns and \
         status.rolloutHalt; the served CustomResourceDefinition comes from an older release",
    )
}

#[cfg(test)]
mod tests;
