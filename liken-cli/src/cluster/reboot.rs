//! `approve-reboot` and `request-reboot`: the two ways a person tells a
//! machine to take a disruption.
//!
//! A machine whose rebootPolicy is Manual stages a change, lists it in
//! `status.pending`, and waits. `approve-reboot` reads that list, shows
//! what waits, and writes the `liken.sh/approve-disruption` annotation
//! naming the staged document's hash (its first 12 hex digits). Naming the
//! hash makes the grant one-shot: once the change applies, the annotation
//! names nothing that is pending, so it needs no cleanup and cannot
//! approve a later change by accident. Writing the same value twice is
//! the same grant, so the command can be repeated; when the annotation
//! already holds the value, nothing is written at all.
//!
//! `request-reboot` is for a machine with nothing staged that should
//! reboot anyway (a driver bound to the wrong device, an experiment). It
//! writes `liken.sh/request-reboot` naming the running boot's id, derived
//! from `status.boot.time` ([`liken_api::BootStatus::boot_id`]); the next
//! boot has another id, so the request spends itself. The machine still
//! takes its turn from the cluster's disruption budget, cordons and
//! drains; on Manual it waits for `approve-reboot` like a staged change.
//!
//! Both write by JSON merge patch on metadata.annotations alone, so they
//! never touch the spec or status the operators own. What to approve and
//! what to say are pure functions ([`decide_approval`],
//! [`decide_awaiting`], [`render_pending`], [`render_request`]); the
//! command functions only read, write and print.

use std::io::IsTerminal;
use std::path::Path;

use liken_api::annotations::{APPROVE_DISRUPTION, REQUEST_REBOOT};
use liken_api::machine::{DisruptionKind, PendingDisruption};
use liken_api::{Machine, RebootPolicy, condition};
use liken_kube::{Client, ListParams};

use super::{ClusterError, connect, machines};
use crate::{Io, args::Parsed};

/// The pending entry a grant names. One reboot applies every staged
/// document at once, so a Reboot-class entry, when there is one, covers
/// the whole list. Otherwise each Restart-class change applies on its own
/// grant: the first stands for the list, and running the command again
/// approves the next.
pub fn decide_approval(pending: &[PendingDisruption]) -> Option<&PendingDisruption> {
    pending
        .iter()
        .find(|p| p.kind == DisruptionKind::Reboot)
        .or_else(|| pending.first())
}

/// The machines `approve-reboot -all` approves, each with the entry it
/// names: rebootPolicy Manual (an Auto machine asks for its turn by
/// itself), something pending, and no approval of that entry already
/// written. Sorted by name.
pub fn decide_awaiting(machines: &[Machine]) -> Vec<(&Machine, &PendingDisruption)> {
    let mut waiting: Vec<_> = machines
        .iter()
        .filter(|m| m.reboot_policy() == RebootPolicy::Manual)
        .filter_map(|m| decide_approval(&m.status.pending).map(|p| (m, p)))
        .filter(|(m, p)| m.metadata.annotation(APPROVE_DISRUPTION) != Some(p.hash.short()))
        .collect();
    waiting.sort_by(|a, b| a.0.metadata.name.cmp(&b.0.metadata.name));
    waiting
}

/// What a machine waits for, as a person reads it before granting: each
/// change's condition and reason, its summary with the short hash a grant
/// names, and which disruption applies it.
pub fn render_pending(m: &Machine) -> String {
    let name = &m.metadata.name;
    let pending = &m.status.pending;
    if pending.is_empty() {
        return format!("{name} is converged; nothing is waiting\n");
    }
    let count = match pending.len() {
        1 => "one change".to_owned(),
        n => format!("{n} changes"),
    };
    let mut s = format!("{name} is waiting on {count}:\n");
    for p in pending {
        let condition = match condition::find(&m.status.conditions, &p.condition) {
            Some(c) => format!("{}  {}", p.condition, c.reason),
            None => p.condition.clone(),
        };
        let applies = match p.kind {
            DisruptionKind::Reboot => {
                "a reboot applies this, and every other staged change with it"
            }
            DisruptionKind::Restart => "a k3s restart applies this; the machine does not reboot",
        };
        s.push_str(&format!(
            "  {condition}\n  {} ({})\n  {applies}\n",
            p.summary,
            p.hash.short()
        ));
    }
    s
}

/// What a reboot request set in motion: the annotation, and which of the
/// two paths the machine's rebootPolicy puts it on, naming the command
/// that finishes the Manual one.
pub fn render_request(m: &Machine, dir: &Path, short: &str) -> String {
    let name = &m.metadata.name;
    let mut s = format!("requested: {REQUEST_REBOOT}={short}\n");
    match m.reboot_policy() {
        RebootPolicy::Auto => s.push_str(&format!(
            "{name} takes a reboot turn from the cluster, drains its workloads, and reboots.\n"
        )),
        RebootPolicy::Manual => s.push_str(&format!(
            "{name} has rebootPolicy: Manual, so the request waits for you. Release it with:\n  \
             liken approve-reboot {} {name}\n",
            dir.display()
        )),
    }
    s.push_str("Nothing is staged, so the machine comes back on the documents it runs now.\n");
    s
}

fn get_machine(client: &Client, name: &str) -> Result<Machine, ClusterError> {
    client
        .get::<Machine>(&machines(), name)
        .map_err(|e| match e {
            liken_kube::Error::NotFound { .. } => ClusterError::NoMachine {
                name: name.to_owned(),
                server: client.server().to_owned(),
            },
            e => ClusterError::Api(e),
        })
}

/// Sets one annotation on a Machine unless it already holds `value`.
fn annotate(client: &Client, m: &Machine, key: &str, value: &str) -> Result<(), ClusterError> {
    if m.metadata.annotation(key) == Some(value) {
        return Ok(());
    }
    let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
    client.merge_patch::<Machine>(&machines(), &m.metadata.name, &patch)?;
    Ok(())
}

/// Runs `liken approve-reboot [-server URL] <deployment-dir> <machine>` or
/// `liken approve-reboot [-server URL] -all [-yes] <deployment-dir>`.
pub fn approve_command(parsed: Parsed, io: &mut Io) -> Result<(), crate::Error> {
    if parsed.switch("all") {
        let [dir] = parsed.paths()?;
        return approve_all(&dir, parsed.value("server"), parsed.switch("yes"), io);
    }
    if parsed.switch("yes") {
        return Err(parsed.usage());
    }
    let [dir, name] = parsed.paths()?;
    let client = connect(&dir, parsed.value("server"))?;
    let m = get_machine(&client, &name.to_string_lossy())?;
    io.out.write_all(render_pending(&m).as_bytes())?;
    let Some(choice) = decide_approval(&m.status.pending) else {
        return Ok(());
    };
    let short = choice.hash.short();
    annotate(&client, &m, APPROVE_DISRUPTION, short)?;
    writeln!(io.out, "\napproved: {APPROVE_DISRUPTION}={short}")?;
    Ok(())
}

fn approve_all(
    dir: &Path,
    server: Option<&str>,
    yes: bool,
    io: &mut Io,
) -> Result<(), crate::Error> {
    let client = connect(dir, server)?;
    let all = client
        .list_all::<Machine>(&machines(), &ListParams::default())
        .map_err(ClusterError::Api)?
        .items;
    let waiting = decide_awaiting(&all);
    if waiting.is_empty() {
        writeln!(io.out, "no machine is waiting for approval")?;
        return Ok(());
    }
    for (i, (m, _)) in waiting.iter().enumerate() {
        if i > 0 {
            writeln!(io.out)?;
        }
        io.out.write_all(render_pending(m).as_bytes())?;
    }
    let count = waiting.len();
    if !yes {
        if !std::io::stdin().is_terminal() {
            return Err(ClusterError::NotATerminal { count }.into());
        }
        let noun = if count == 1 { "machine" } else { "machines" };
        write!(io.out, "\napprove {count} {noun}? [y/N] ")?;
        io.out.flush()?;
        let mut answer = String::new();
        io.stdin
            .read_line(&mut answer)
            .map_err(ClusterError::Answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes" | "Yes" | "YES") {
            writeln!(io.out, "nothing approved")?;
            return Ok(());
        }
    }
    writeln!(io.out)?;
    for (m, p) in waiting {
        let short = p.hash.short();
        annotate(&client, m, APPROVE_DISRUPTION, short)?;
        writeln!(
            io.out,
            "approved {}: {APPROVE_DISRUPTION}={short}",
            m.metadata.name
        )?;
    }
    Ok(())
}

/// Runs `liken request-reboot [-server URL] <deployment-dir> <machine>`.
pub fn request_command(parsed: Parsed, io: &mut Io) -> Result<(), crate::Error> {
    let [dir, name] = parsed.paths()?;
    let client = connect(&dir, parsed.value("server"))?;
    let m = get_machine(&client, &name.to_string_lossy())?;
    // A machine with no boot time has published nothing to name: it is
    // still starting, or it never reported.
    let Some(id) = m.status.boot.as_ref().and_then(|b| b.boot_id()) else {
        return Err(ClusterError::NoBoot {
            machine: m.metadata.name.clone(),
        }
        .into());
    };
    let short = id.short();
    annotate(&client, &m, REQUEST_REBOOT, short)?;
    io.out
        .write_all(render_request(&m, &dir, short).as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::hash::sha256;
    use liken_api::{Condition, ConditionStatus, MachineSpec};

    fn pending(kind: DisruptionKind, seed: &str, condition: &str) -> PendingDisruption {
        PendingDisruption {
            condition: condition.to_owned(),
            kind,
            hash: sha256(seed.as_bytes()),
            summary: format!("{seed} changes"),
        }
    }

    fn machine(name: &str, policy: RebootPolicy, p: Vec<PendingDisruption>) -> Machine {
        let mut m = Machine::new(
            name,
            MachineSpec {
                reboot_policy: Some(policy),
                ..MachineSpec::default()
            },
        );
        m.status.pending = p;
        m
    }

    #[test]
    fn a_reboot_entry_covers_the_list_else_the_first() {
        let restart = pending(DisruptionKind::Restart, "k3s", "K3sConfigured");
        let reboot = pending(DisruptionKind::Reboot, "kernel", "KernelArgsApplied");
        let both = [restart.clone(), reboot.clone()];
        assert_eq!(decide_approval(&both), Some(&reboot));
        let restarts = [restart.clone(), pending(DisruptionKind::Restart, "b", "X")];
        assert_eq!(decide_approval(&restarts), Some(&restart));
        assert_eq!(decide_approval(&[]), None);
    }

    #[test]
    fn awaiting_is_manual_with_something_pending_and_not_yet_approved() {
        let p = pending(DisruptionKind::Reboot, "net", "NetworkConfigured");
        let mut approved = machine("c-approved", RebootPolicy::Manual, vec![p.clone()]);
        approved
            .metadata
            .annotations
            .insert(APPROVE_DISRUPTION.into(), p.hash.short().into());
        let mut stale = machine("b-stale", RebootPolicy::Manual, vec![p.clone()]);
        stale
            .metadata
            .annotations
            .insert(APPROVE_DISRUPTION.into(), "000000000000".into());
        let all = [
            machine("e-auto", RebootPolicy::Auto, vec![p.clone()]),
            approved,
            machine("d-converged", RebootPolicy::Manual, vec![]),
            stale,
            machine("a-manual", RebootPolicy::Manual, vec![p.clone()]),
        ];
        let names: Vec<_> = decide_awaiting(&all)
            .iter()
            .map(|(m, _)| m.metadata.name.as_str())
            .collect();
        assert_eq!(names, ["a-manual", "b-stale"]);
    }

    #[test]
    fn pending_renders_condition_reason_summary_hash_and_disruption() {
        let mut m = machine(
            "node-1",
            RebootPolicy::Manual,
            vec![pending(
                DisruptionKind::Reboot,
                "kernel",
                "KernelArgsApplied",
            )],
        );
        assert_eq!(
            render_pending(&m),
            format!(
                "node-1 is waiting on one change:\n  KernelArgsApplied\n  kernel changes ({})\n  \
                 a reboot applies this, and every other staged change with it\n",
                &sha256(b"kernel").as_str()[..12]
            )
        );
        m.status.conditions.push(Condition::new(
            "KernelArgsApplied",
            ConditionStatus::False,
            "RebootPending",
            "",
        ));
        m.status
            .pending
            .push(pending(DisruptionKind::Restart, "k3s", "K3sConfigured"));
        let text = render_pending(&m);
        assert!(
            text.starts_with(
                "node-1 is waiting on 2 changes:\n  KernelArgsApplied  RebootPending\n"
            )
        );
        assert!(text.ends_with("a k3s restart applies this; the machine does not reboot\n"));
        m.status.pending.clear();
        assert_eq!(
            render_pending(&m),
            "node-1 is converged; nothing is waiting\n"
        );
    }

    #[test]
    fn a_request_says_which_path_the_policy_takes() {
        let auto = machine("node-2", RebootPolicy::Auto, vec![]);
        assert_eq!(
            render_request(&auto, Path::new("home"), "0123456789ab"),
            "requested: liken.sh/request-reboot=0123456789ab\n\
             node-2 takes a reboot turn from the cluster, drains its workloads, and reboots.\n\
             Nothing is staged, so the machine comes back on the documents it runs now.\n"
        );
        let manual = machine("node-1", RebootPolicy::Manual, vec![]);
        assert!(
            render_request(&manual, Path::new("home"), "0123456789ab").contains(
                "so the request waits for you. Release it with:\n  liken approve-reboot home node-1\n"
            )
        );
    }
}
