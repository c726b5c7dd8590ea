//! Approvals and reboot requests: what a person's annotation on the
//! Machine means this pass.
//!
//! Both annotations name the thing they are about, which is what makes
//! them one-shot ([`liken_api::annotations`]):
//!
//! - `liken.sh/approve-disruption` names a staged change by the first 12
//!   hex digits of its hash (`status.pending[].hash`). On `rebootPolicy:
//!   Manual` nothing is disrupted without it. Approving a Reboot entry
//!   approves every pending entry, because one reboot applies them all;
//!   approving a Restart entry approves the entries of that hash alone.
//!   A value that names nothing pending is stale: it is removed, and an
//!   Event says what it named and what is pending instead. With nothing
//!   pending at all it is simply spent.
//! - `liken.sh/request-reboot` names the running boot by the first 12 hex
//!   digits of its id. A value naming another boot is stale (a request
//!   for a boot that is over), removed with an Event.
//!
//! Both are removed once acted on: just before the operator asks init to
//! reboot or restart k3s. The decisions here are pure; the pass carries
//! out the removals.

use liken_api::Sha256Hex;
use liken_api::annotations::SHORT_HEX_LEN;
use liken_api::machine::{DisruptionKind, PendingDisruption};

use crate::machine::turn::Asked;

/// What the approve-disruption annotation means now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Approval {
    /// No annotation.
    None,
    /// It names a pending entry: these hashes are approved, for this
    /// disruption.
    Approved {
        /// The approved entries' hashes.
        hashes: Vec<Sha256Hex>,
        /// Reboot when the named entry is reboot-class (which approves
        /// everything pending), else Restart.
        kind: DisruptionKind,
    },
    /// Nothing is pending: the annotation was spent (or never needed).
    Spent,
    /// It names nothing pending; the message says what it named and what
    /// is pending.
    Stale(String),
}

/// Whether an annotation's value names `hash`: at least 12 lower-case hex
/// digits that the hash starts with.
pub fn names(value: &str, hash: &Sha256Hex) -> bool {
    let v = value.trim();
    v.len() >= SHORT_HEX_LEN && v.bytes().all(|b| b.is_ascii_hexdigit()) && {
        let lower = v.to_ascii_lowercase();
        hash.as_str().starts_with(&lower)
    }
}

/// Judges the approve-disruption annotation against what is pending.
pub fn decide_approval(value: Option<&str>, pending: &[PendingDisruption]) -> Approval {
    let Some(value) = value else {
        return Approval::None;
    };
    if pending.is_empty() {
        return Approval::Spent;
    }
    let Some(named) = pending.iter().find(|p| names(value, &p.hash)) else {
        let waiting: Vec<String> = pending
            .iter()
            .map(|p| format!("{} ({})", p.hash.short(), p.summary))
            .collect();
        return Approval::Stale(format!(
            "liken.sh/approve-disruption names {:?}, which is not a staged change; \
             pending: {}; approve one of those (liken approve-reboot does)",
            value.trim(),
            waiting.join("; ")
        ));
    };
    match named.kind {
        DisruptionKind::Reboot => Approval::Approved {
            hashes: pending.iter().map(|p| p.hash.clone()).collect(),
            kind: DisruptionKind::Reboot,
        },
        DisruptionKind::Restart => Approval::Approved {
            hashes: pending
                .iter()
                .filter(|p| p.hash == named.hash)
                .map(|p| p.hash.clone())
                .collect(),
            kind: DisruptionKind::Restart,
        },
    }
}

/// What the request-reboot annotation means now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RebootRequest {
    /// No annotation.
    None,
    /// It names the running boot: a reboot is requested.
    Outstanding,
    /// It names another boot, or is not a boot id at all.
    Stale(String),
}

/// Judges the request-reboot annotation against the running boot.
pub fn decide_request(value: Option<&str>, boot_id: &Sha256Hex) -> RebootRequest {
    match value {
        None => RebootRequest::None,
        Some(v) if names(v, boot_id) => RebootRequest::Outstanding,
        Some(v) => RebootRequest::Stale(format!(
            "liken.sh/request-reboot names boot {:?}, but the running boot is {}; \
             a request names the running boot (liken request-reboot does)",
            v.trim(),
            boot_id.short()
        )),
    }
}

/// The disruption the machine asks the cluster for: under Auto, a Reboot
/// when any pending entry needs one, else a Restart; under Manual, only
/// what was approved. `None` when nothing may be asked for yet.
pub fn decide_wanted(
    auto: bool,
    pending: &[PendingDisruption],
    approval: &Approval,
) -> Option<DisruptionKind> {
    if auto {
        if pending.iter().any(|p| p.kind == DisruptionKind::Reboot) {
            return Some(DisruptionKind::Reboot);
        }
        return pending.first().map(|_| DisruptionKind::Restart);
    }
    match approval {
        Approval::Approved { kind, .. } => Some(*kind),
        _ => None,
    }
}

/// Whether one pending entry may go ahead: Auto, or approved.
pub fn entry_approved(auto: bool, entry: &PendingDisruption, approval: &Approval) -> bool {
    auto || matches!(approval, Approval::Approved { hashes, .. } if hashes.contains(&entry.hash))
}

/// Whether the disruption asked for (`wanted`) applies one pending
/// entry: it may go ahead, and a reboot applies everything while a
/// restart applies only restart-class entries.
pub fn covered(
    auto: bool,
    entry: &PendingDisruption,
    approval: &Approval,
    wanted: Option<DisruptionKind>,
) -> bool {
    entry_approved(auto, entry, approval)
        && match wanted {
            Some(DisruptionKind::Reboot) => true,
            Some(DisruptionKind::Restart) => entry.kind == DisruptionKind::Restart,
            None => false,
        }
}

/// The approval a disruption already asked of init this boot still
/// carries. The annotation is spent just before init is asked, but what
/// it approved is under way until the machine goes down (a reboot
/// applies every pending entry) or k3s runs again (a restart applies the
/// restart-class entries of the document it was asked for).
pub fn decide_carried(asked: &Asked, pending: &[PendingDisruption]) -> Approval {
    let hashes: Vec<Sha256Hex> = pending
        .iter()
        .filter(|p| match asked.kind {
            DisruptionKind::Reboot => true,
            DisruptionKind::Restart => {
                p.kind == DisruptionKind::Restart && asked.hash.as_ref() == Some(&p.hash)
            }
        })
        .map(|p| p.hash.clone())
        .collect();
    if hashes.is_empty() {
        Approval::None
    } else {
        Approval::Approved {
            hashes,
            kind: asked.kind,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::coordination::{K3S_CONFIGURED, REBOOT_REQUEST_HONORED, SYSCTLS_APPLIED};
    use liken_api::hash::sha256;

    fn entry(
        condition: &str,
        kind: DisruptionKind,
        seed: &[u8],
        summary: &str,
    ) -> PendingDisruption {
        PendingDisruption {
            condition: condition.into(),
            kind,
            hash: sha256(seed),
            summary: summary.into(),
        }
    }

    #[test]
    fn approvals_name_a_staged_hash() {
        let sysctls = entry(
            SYSCTLS_APPLIED,
            DisruptionKind::Reboot,
            b"m",
            "sysctls: a 1 → 2",
        );
        let labels = entry(
            K3S_CONFIGURED,
            DisruptionKind::Restart,
            b"m",
            "k3s: +label a=b",
        );
        let request = entry(
            REBOOT_REQUEST_HONORED,
            DisruptionKind::Reboot,
            b"boot",
            "reboot",
        );
        let restart_only = entry(
            K3S_CONFIGURED,
            DisruptionKind::Restart,
            b"k",
            "k3s: -label x",
        );
        let m = sha256(b"m").short().to_owned();
        let full = sha256(b"m").as_str().to_owned();
        let k = sha256(b"k").short().to_owned();
        let spaced = format!(" {} ", m.to_ascii_uppercase());
        let cases: Vec<(Option<&str>, Vec<PendingDisruption>, Approval)> = vec![
            (None, vec![sysctls.clone()], Approval::None),
            (Some(&m), vec![], Approval::Spent),
            (
                Some(&m),
                vec![sysctls.clone(), request.clone()],
                Approval::Approved {
                    hashes: vec![sha256(b"m"), sha256(b"boot")],
                    kind: DisruptionKind::Reboot,
                },
            ),
            // The full hash, upper case, and surrounding space all name it.
            (
                Some(&full),
                vec![labels.clone()],
                Approval::Approved {
                    hashes: vec![sha256(b"m")],
                    kind: DisruptionKind::Restart,
                },
            ),
            (
                Some(&spaced),
                vec![labels.clone()],
                Approval::Approved {
                    hashes: vec![sha256(b"m")],
                    kind: DisruptionKind::Restart,
                },
            ),
            // A restart approval leaves other hashes waiting.
            (
                Some(&k),
                vec![sysctls.clone(), restart_only.clone()],
                Approval::Approved {
                    hashes: vec![sha256(b"k")],
                    kind: DisruptionKind::Restart,
                },
            ),
        ];
        for (value, pending, want) in cases {
            assert_eq!(decide_approval(value, &pending), want, "{value:?}");
        }
        // Too short, not hex, or another hash: stale, and the message
        // names what is pending.
        for bad in [&m[..8], "zzzzzzzzzzzz", sha256(b"other").short()] {
            let Approval::Stale(why) = decide_approval(Some(bad), std::slice::from_ref(&sysctls))
            else {
                panic!("{bad} was not stale");
            };
            assert!(why.contains(bad), "{why}");
            assert!(why.contains(&m), "{why}");
            assert!(why.contains("sysctls: a 1 → 2"), "{why}");
        }
    }

    #[test]
    fn a_request_names_the_running_boot() {
        let boot = sha256(b"2026-12-02T10:00:00Z");
        assert_eq!(decide_request(None, &boot), RebootRequest::None);
        assert_eq!(
            decide_request(Some(boot.short()), &boot),
            RebootRequest::Outstanding
        );
        let old = sha256(b"2026-12-01T10:00:00Z");
        let RebootRequest::Stale(why) = decide_request(Some(old.short()), &boot) else {
            panic!("not stale");
        };
        assert!(
            why.contains(old.short()) && why.contains(boot.short()),
            "{why}"
        );
    }

    #[test]
    fn what_the_machine_asks_for() {
        let reboot = entry(SYSCTLS_APPLIED, DisruptionKind::Reboot, b"m", "s");
        let restart = entry(K3S_CONFIGURED, DisruptionKind::Restart, b"k", "k");
        let both = vec![reboot.clone(), restart.clone()];
        let approve_restart = decide_approval(Some(sha256(b"k").short()), &both);
        let cases = [
            (true, vec![], Approval::None, None),
            (
                true,
                both.clone(),
                Approval::None,
                Some(DisruptionKind::Reboot),
            ),
            (
                true,
                vec![restart.clone()],
                Approval::None,
                Some(DisruptionKind::Restart),
            ),
            (false, both.clone(), Approval::None, None),
            (false, both.clone(), Approval::Stale("x".into()), None),
            (
                false,
                both.clone(),
                approve_restart.clone(),
                Some(DisruptionKind::Restart),
            ),
        ];
        for (auto, pending, approval, want) in cases {
            assert_eq!(
                decide_wanted(auto, &pending, &approval),
                want,
                "{auto} {approval:?}"
            );
        }
        assert!(entry_approved(false, &restart, &approve_restart));
        assert!(!entry_approved(false, &reboot, &approve_restart));
        assert!(entry_approved(true, &reboot, &Approval::None));

        // What the disruption asked for applies: a reboot all that may
        // go, a restart only the restart-class entries.
        use DisruptionKind::{Reboot, Restart};
        let approve_all = decide_approval(Some(sha256(b"m").short()), &both);
        let cases = [
            (true, &reboot, Approval::None, Some(Reboot), true),
            (true, &restart, Approval::None, Some(Reboot), true),
            (true, &reboot, Approval::None, Some(Restart), false),
            (true, &restart, Approval::None, Some(Restart), true),
            (true, &restart, Approval::None, None, false),
            (false, &reboot, Approval::None, Some(Reboot), false),
            (false, &reboot, approve_all.clone(), Some(Reboot), true),
            (
                false,
                &restart,
                approve_restart.clone(),
                Some(Restart),
                true,
            ),
            (
                false,
                &reboot,
                approve_restart.clone(),
                Some(Restart),
                false,
            ),
        ];
        for (auto, entry, approval, wanted, want) in cases {
            assert_eq!(
                covered(auto, entry, &approval, wanted),
                want,
                "{auto} {} {approval:?} {wanted:?}",
                entry.summary
            );
        }
    }

    #[test]
    fn what_init_was_asked_keeps_its_approval_after_the_annotation_is_spent() {
        use DisruptionKind::{Reboot, Restart};
        let reboot = entry(SYSCTLS_APPLIED, Reboot, b"m", "s");
        let restart = entry(K3S_CONFIGURED, Restart, b"m", "k");
        let other_restart = entry(K3S_CONFIGURED, Restart, b"k", "k2");
        let asked = |kind, hash: Option<&[u8]>| Asked {
            boot: sha256(b"boot"),
            kind,
            hash: hash.map(sha256),
            at: liken_api::Time::EPOCH,
            requested: false,
            k3s_pid: None,
            refused: None,
        };
        let all = vec![reboot.clone(), restart.clone(), other_restart.clone()];
        let cases = [
            (
                asked(Reboot, None),
                all.clone(),
                Approval::Approved {
                    hashes: vec![sha256(b"m"), sha256(b"m"), sha256(b"k")],
                    kind: Reboot,
                },
            ),
            (
                asked(Restart, Some(b"m")),
                all.clone(),
                Approval::Approved {
                    hashes: vec![sha256(b"m")],
                    kind: Restart,
                },
            ),
            // Nothing of what was asked is pending any more.
            (asked(Restart, Some(b"gone")), all.clone(), Approval::None),
            (asked(Reboot, None), vec![], Approval::None),
        ];
        for (a, pending, want) in cases {
            assert_eq!(decide_carried(&a, &pending), want, "{a:?}");
        }
    }
}
