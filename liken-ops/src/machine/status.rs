//! The Machine's status as this pass writes it, and whether it changed.
//!
//! The operator composes the whole status and writes it only when it
//! differs from the stored one, so a converged machine writes nothing.
//! Conditions keep their lastTransitionTime unless their status flips
//! (`liken_api::condition::set`); conditions of types the operator does
//! not own (the cluster operator's grant) are carried along unchanged.
//! A pass that could not read its facts keeps the last known boot,
//! release, role and pending list: they are still the machine's last
//! word, and only the conditions say that it cannot judge now.
//!
//! The Events a write earns are decided here too, from the status it
//! replaced and the one stored: condition transitions, the approval that
//! released a change, and the first write of each boot ([`decide_booted`]).

use liken_api::condition::{self, transitions};
use liken_api::coordination::{self, machine_owned, reason};
use liken_api::machine::MachineStatus;
use liken_api::{BootStatus, Condition, RebootVia, Time};
use liken_kube::events::EventType;

use crate::machine::pass::Pass;

/// The status to write after `pass`, from the `stored` one.
pub fn compose(stored: &MachineStatus, pass: &Pass, generation: i64, now: Time) -> MachineStatus {
    let mut owned: Vec<Condition> = stored
        .conditions
        .iter()
        .filter(|c| machine_owned(&c.type_))
        .cloned()
        .collect();
    owned.retain(|c| pass.conditions.iter().any(|p| p.type_ == c.type_));
    for c in &pass.conditions {
        condition::set(&mut owned, c.clone().with_generation(generation), now);
    }
    // The pass's order, then whatever the operator does not own.
    let mut conditions: Vec<Condition> = pass
        .conditions
        .iter()
        .filter_map(|p| owned.iter().find(|c| c.type_ == p.type_).cloned())
        .collect();
    conditions.extend(coordination::carry_foreign(&stored.conditions).cloned());
    MachineStatus {
        phase: Some(pass.phase),
        conditions,
        role: pass.role.or(stored.role),
        boot: pass.boot.clone().or_else(|| stored.boot.clone()),
        release: pass.release.clone().or_else(|| stored.release.clone()),
        pending: if pass.blind {
            stored.pending.clone()
        } else {
            pass.waiting.clone()
        },
        observed_generation: generation,
    }
}

/// The Events a status write earns: one per convergence condition that
/// transitioned (new, or a changed status or reason), with its reason.
/// The Ready roll-up repeats them and posts none.
pub fn transition_events(
    stored: &[Condition],
    written: &[Condition],
) -> Vec<(EventType, String, String)> {
    transitions(stored, written)
        .into_iter()
        .filter(|c| coordination::CONVERGENCE.contains(&c.type_.as_str()))
        .map(|c| {
            let kind = match c.reason.as_str() {
                reason::BLOCKED
                | reason::DRAIN_BLOCKED
                | reason::NOT_APPLIED
                | reason::FACTS_UNREADABLE => EventType::Warning,
                _ => EventType::Normal,
            };
            (
                kind,
                c.reason.clone(),
                format!("{}: {}", c.type_, c.message),
            )
        })
        .collect()
}

/// The note of the `Booted` Event a status write earns: when the status
/// it replaced named another boot (or none) and the stored one names a
/// boot, this is the first write of that boot, so the Event is said once
/// per boot however many passes, restarts or failed writes it takes (a
/// write that fails posts nothing, and the next one still replaces the
/// old boot). The note says how the boot was reached; a firmware boot
/// with no reason is one init did not make (a power-on, a reset).
pub fn decide_booted(stored: Option<&BootStatus>, written: Option<&BootStatus>) -> Option<String> {
    let written = written?;
    let id = written.boot_id()?;
    if stored.and_then(BootStatus::boot_id).as_ref() == Some(&id) {
        return None;
    }
    let release = written.version.as_ref().map_or_else(
        || "an unknown release".to_owned(),
        |v| format!("release {v}"),
    );
    let place = written.slot.map_or_else(
        || " with no slot (install media or netboot)".to_owned(),
        |s| format!(" in slot {s}"),
    );
    let via = match (written.via, written.via_reason.as_deref()) {
        (Some(RebootVia::Kexec), _) => ", reached by kexec".to_owned(),
        (Some(RebootVia::Firmware), Some(why)) => {
            format!(", reached through the firmware: {why}")
        }
        (Some(RebootVia::Firmware), None) => ", reached through the firmware".to_owned(),
        // An init older than kexec reboots says nothing of the way.
        (None, _) => String::new(),
    };
    Some(format!("boot {}: {release}{place}{via}", id.short()))
}

/// The convergence conditions a person's approval just released: those
/// that waited for one (RebootPending, RestartPending) in the stored
/// status and now use or ask for the turn. Only an approval moves a
/// change that way (an Auto machine never waits for a person), and the
/// change to Auto does not count: the caller asks only when the pass
/// holds an approval.
pub fn decide_released(stored: &[Condition], written: &[Condition]) -> Vec<String> {
    let waited = |r: &str| r == reason::REBOOT_PENDING || r == reason::RESTART_PENDING;
    let moving = |r: &str| {
        [
            reason::AWAITING_TURN,
            reason::DRAINING,
            reason::DRAIN_BLOCKED,
            reason::REBOOTING,
            reason::RESTARTING,
        ]
        .contains(&r)
    };
    written
        .iter()
        .filter(|w| coordination::CONVERGENCE.contains(&w.type_.as_str()) && moving(&w.reason))
        .filter(|w| {
            stored
                .iter()
                .any(|s| s.type_ == w.type_ && waited(&s.reason))
        })
        .map(|w| w.type_.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::coordination::{GRANT_REASON, REBOOT_APPROVED, SYSCTLS_APPLIED};
    use liken_api::{ConditionStatus, Phase};

    fn pass_with(conditions: Vec<Condition>, blind: bool) -> Pass {
        Pass {
            phase: crate::machine::phase::decide_phase(&conditions),
            conditions,
            pending: Vec::new(),
            waiting: Vec::new(),
            boot: None,
            release: None,
            role: None,
            staging: Vec::new(),
            approval: crate::machine::approval::Approval::None,
            request: crate::machine::approval::RebootRequest::None,
            wanted: None,
            purpose: liken_api::coordination::TurnPurpose::default(),
            grant: liken_api::coordination::GrantFor::None,
            turn: crate::machine::turn::TurnStep::Idle,
            node_patch: None,
            intent: crate::machine::release::Intent::None,
            disarm: false,
            boot_id: None,
            machine_hash: liken_api::hash::sha256(b""),
            k3s_pid: None,
            via: liken_api::RebootVia::Kexec,
            asked: None,
            blind,
        }
    }

    #[test]
    fn unchanged_verdicts_compose_an_unchanged_status() {
        let t0 = Time::from_unix(100);
        let t1 = Time::from_unix(200);
        let converged = vec![Condition::new(
            SYSCTLS_APPLIED,
            ConditionStatus::True,
            reason::CONVERGED,
            "ok",
        )];
        let first = compose(
            &MachineStatus::default(),
            &pass_with(converged.clone(), false),
            3,
            t0,
        );
        assert_eq!(first.phase, Some(Phase::Ready));
        assert_eq!(first.conditions[0].last_transition_time, t0);
        assert_eq!(first.conditions[0].observed_generation, 3);
        // The same verdict later: the same status, to the byte.
        assert_eq!(compose(&first, &pass_with(converged, false), 3, t1), first);

        // A flip moves the time and is one transition.
        let pending = vec![Condition::new(
            SYSCTLS_APPLIED,
            ConditionStatus::False,
            reason::AWAITING_TURN,
            "sysctls: vm.swappiness 60 → 10",
        )];
        let second = compose(&first, &pass_with(pending, false), 4, t1);
        assert_eq!(second.conditions[0].last_transition_time, t1);
        assert_eq!(second.phase, Some(Phase::UpdatePending));
        let events = transition_events(&first.conditions, &second.conditions);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].1, reason::AWAITING_TURN);
        assert_eq!(events[0].0, EventType::Normal);
    }

    #[test]
    fn the_grant_is_carried_and_a_blind_pass_keeps_the_last_known_facts() {
        let mut stored = MachineStatus::default();
        stored.conditions.push(Condition::new(
            REBOOT_APPROVED,
            ConditionStatus::True,
            GRANT_REASON,
            "",
        ));
        stored.pending.push(liken_api::machine::PendingDisruption {
            condition: SYSCTLS_APPLIED.into(),
            kind: liken_api::machine::DisruptionKind::Reboot,
            hash: liken_api::hash::sha256(b"x"),
            summary: "s".into(),
        });
        let unknown = vec![Condition::new(
            SYSCTLS_APPLIED,
            ConditionStatus::Unknown,
            reason::FACTS_UNREADABLE,
            "init does not answer",
        )];
        let s = compose(&stored, &pass_with(unknown, true), 1, Time::from_unix(5));
        assert_eq!(s.phase, Some(Phase::Unknown));
        assert_eq!(s.pending, stored.pending);
        assert_eq!(s.conditions.last().unwrap().type_, REBOOT_APPROVED);
        let events = transition_events(&stored.conditions, &s.conditions);
        assert_eq!(events[0].0, EventType::Warning);
    }

    fn boot(at: i64, via: Option<RebootVia>, why: Option<&str>) -> BootStatus {
        BootStatus {
            time: Some(Time::from_unix(at)),
            slot: Some(liken_api::Slot::B),
            version: Some(liken_api::Version::parse("2026.12.02-001").unwrap()),
            via,
            via_reason: why.map(str::to_owned),
        }
    }

    #[test]
    fn the_status_says_how_the_boot_was_reached() {
        let why = "the kernel refused to load liken/b/vmlinuz (EPERM): kexec is disabled";
        let mut pass = pass_with(Vec::new(), false);
        pass.boot = Some(boot(1_780_000_000, Some(RebootVia::Firmware), Some(why)));
        let s = compose(&MachineStatus::default(), &pass, 1, Time::from_unix(5));
        let b = s.boot.as_ref().unwrap();
        assert_eq!(b.via, Some(RebootVia::Firmware));
        assert_eq!(b.via_reason.as_deref(), Some(why));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["boot"]["via"], "firmware");
        assert_eq!(json["boot"]["viaReason"], why);
    }

    #[test]
    fn booted_is_said_on_the_first_write_of_each_boot() {
        use RebootVia::{Firmware, Kexec};
        let earlier = boot(1_780_000_000, Some(Firmware), None);
        let kexec = boot(1_780_000_600, Some(Kexec), None);
        let note = |b: &BootStatus| {
            format!(
                "boot {}: release 2026.12.02-001 in slot B",
                b.boot_id().unwrap().short()
            )
        };
        // A new boot, reached each way.
        assert_eq!(
            decide_booted(Some(&earlier), Some(&kexec)),
            Some(format!("{}, reached by kexec", note(&kexec)))
        );
        let refused = boot(
            1_780_000_600,
            Some(Firmware),
            Some("the kernel refused to load liken/b/vmlinuz (ENOSYS)"),
        );
        assert_eq!(
            decide_booted(Some(&earlier), Some(&refused)),
            Some(format!(
                "{}, reached through the firmware: the kernel refused to load liken/b/vmlinuz (ENOSYS)",
                note(&refused)
            ))
        );
        // A power-on: no reason; the first status ever: a boot too.
        assert_eq!(
            decide_booted(None, Some(&earlier)),
            Some(format!("{}, reached through the firmware", note(&earlier)))
        );
        // An init that says nothing of the way, on install media.
        let bare = BootStatus {
            time: Some(Time::from_unix(1_780_000_900)),
            ..BootStatus::default()
        };
        let bare_id = bare.boot_id().unwrap();
        assert_eq!(
            decide_booted(Some(&kexec), Some(&bare)),
            Some(format!(
                "boot {}: an unknown release with no slot (install media or netboot)",
                bare_id.short()
            ))
        );
        // The same boot again (another pass, a restarted operator, the
        // via filled in later): nothing.
        assert_eq!(decide_booted(Some(&kexec), Some(&kexec)), None);
        let mut same = kexec.clone();
        same.via = None;
        assert_eq!(decide_booted(Some(&same), Some(&kexec)), None);
        // No boot to name: nothing.
        assert_eq!(decide_booted(Some(&kexec), None), None);
        assert_eq!(
            decide_booted(Some(&kexec), Some(&BootStatus::default())),
            None
        );
    }

    #[test]
    fn an_approval_releases_what_waited_for_a_person() {
        use liken_api::coordination::{K3S_CONFIGURED, READY};
        let c = |t: &str, r: &str| Condition::new(t, ConditionStatus::False, r, "");
        let cases = [
            // Waited, now asks for the turn: released.
            (
                vec![c(SYSCTLS_APPLIED, reason::REBOOT_PENDING)],
                vec![c(SYSCTLS_APPLIED, reason::AWAITING_TURN)],
                vec![SYSCTLS_APPLIED],
            ),
            // A restart straight into the turn the machine already holds.
            (
                vec![
                    c(K3S_CONFIGURED, reason::RESTART_PENDING),
                    c(SYSCTLS_APPLIED, reason::CONVERGED),
                ],
                vec![
                    c(K3S_CONFIGURED, reason::DRAINING),
                    c(SYSCTLS_APPLIED, reason::CONVERGED),
                ],
                vec![K3S_CONFIGURED],
            ),
            // Still waiting, or already moving before: nothing new.
            (
                vec![c(SYSCTLS_APPLIED, reason::REBOOT_PENDING)],
                vec![c(SYSCTLS_APPLIED, reason::REBOOT_PENDING)],
                vec![],
            ),
            (
                vec![c(SYSCTLS_APPLIED, reason::AWAITING_TURN)],
                vec![c(SYSCTLS_APPLIED, reason::REBOOTING)],
                vec![],
            ),
            // Withdrawn (the spec went back): not an approval.
            (
                vec![c(SYSCTLS_APPLIED, reason::REBOOT_PENDING)],
                vec![c(SYSCTLS_APPLIED, reason::CONVERGED)],
                vec![],
            ),
            // The roll-up repeats reasons; it is not a change.
            (
                vec![c(READY, reason::REBOOT_PENDING)],
                vec![c(READY, reason::AWAITING_TURN)],
                vec![],
            ),
        ];
        for (stored, written, want) in cases {
            assert_eq!(
                decide_released(&stored, &written),
                want,
                "{stored:?} -> {written:?}"
            );
        }
    }
}
