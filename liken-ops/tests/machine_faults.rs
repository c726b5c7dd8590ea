//! The reboot turn under faults, judged by signals the operators do not
//! write. Two machine operators and the cluster operator, each its own
//! binary under its own ServiceAccount's token and the shipped
//! manifests, on a control plane of their own; the budget is 1.
//!
//! While the leader holds the only turn, everything that could make the
//! fleet lose count happens to it: its init answers "busy" to the reboot
//! it asks for, its facts turn unreadable mid-turn, the cluster operator
//! is killed with SIGKILL and another takes its place under a new
//! identity, and a writer bumps both Machines' resourceVersions many
//! times a second so status writes meet 409s. A person approves the
//! other machine's change in the middle of it.
//!
//! The budget is judged from the init doubles: a machine is down from
//! the moment its double accepted a reboot to the moment the test
//! carried the reboot out (`Host::down_intervals`), so no status an
//! operator wrote enters the verdict. The conflicts are counted at the
//! apiserver, from its audit log, to prove the storm really hit the
//! operators' writes. Nothing is lost: the approval survives to take its
//! turn, both changes run, and a reboot request made while the other
//! machine is down waits for its turn and is carried out.

#[path = "machine/support.rs"]
mod support;

#[path = "machine/cluster_op.rs"]
mod cluster_op;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use liken_api::control::Request;
use liken_api::coordination::{
    self, CLUSTER_OPERATOR, HEARTBEAT_NAMESPACE, MACHINE_OPERATOR, SYSCTLS_APPLIED, reason,
};
use liken_api::{Phase, annotations};
use liken_testenv::audit::service_account_user;
use serde_json::{Value, json};

use cluster_op::ClusterOperator;
use support::*;

/// Bumps the Machines' resourceVersions with label writes, as fast as
/// the apiserver answers, until `stop`: every read-modify-write an
/// operator started before one of them lands meets a 409. Answers how
/// many writes landed.
fn conflict_storm(names: &[&'static str], stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let names = names.to_vec();
    std::thread::spawn(move || {
        let mut landed = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for name in &names {
                let path = format!("/apis/liken.sh/v1alpha1/machines/{name}");
                let Some(mut v) = get(&path) else { continue };
                v["metadata"]["labels"]["storm.test/n"] = Value::String(landed.to_string());
                if let Ok((200, _)) = cp().request("PUT", &path, Some(&v)) {
                    landed += 1;
                }
            }
            // A breath only: at 20 ms the cluster operator's dozen grant
            // and reclaim writes met no 409 in about one loaded run in
            // thirty; back to back, about half of them meet one.
            std::thread::sleep(Duration::from_millis(2));
        }
        landed
    })
}

/// How many of `user`'s writes to Machines (any subresource) the
/// apiserver answered with 409 since `mark`.
fn conflicts(user: &str, mark: liken_testenv::audit::AuditMark) -> usize {
    cp().writes_by(user, mark)
        .unwrap()
        .iter()
        .filter(|w| w.resource == "machines" && w.code == 409)
        .count()
}

#[test]
fn the_budget_holds_through_a_killed_operator_a_conflict_storm_a_busy_init_and_unreadable_facts() {
    let start = Instant::now();
    let c = cluster_doc(&["lead-1"]);
    let lead = machine_doc("lead-1");
    let work = machine_doc("work-1");
    let fast = ["--drain-timeout=3s", "--heartbeat-interval=2s"];
    let (lead_host, lead_op) = start_machine("lead-1", &lead, &c, &fast);
    let (work_host, work_op) = start_machine("work-1", &work, &c, &fast);
    let mut cluster_op = Some(ClusterOperator::start());
    let both = ["lead-1", "work-1"];
    let hosts = [&lead_host, &work_host];
    let mark = cp().audit_mark().unwrap();

    // The leader's init is busy (a release write, say) when the leader
    // comes to ask for its reboot.
    lead_host.state.lock().unwrap().refuse_disrupt =
        Some("busy: a release is being written into the other slot".into());
    set_swappiness("lead-1", "10");
    // work-1's change waits for a person.
    patch(
        &["machine", "work-1"],
        &json!({"spec": {"rebootPolicy": "Manual", "sysctls": {"vm.swappiness": "5"}}}),
    );
    let pending = wait_machine(
        "work-1",
        "work-1's change to wait for a person",
        &work_op,
        Duration::from_secs(30),
        |m| has_reason(m, SYSCTLS_APPLIED, reason::REBOOT_PENDING),
    );
    let approval = pending.status.pending[0].hash.short().to_owned();
    wait_for(
        "the leader's init to refuse a reboot",
        Duration::from_secs(60),
        || {
            let asked = lead_host.asked();
            (asked.contains(&Request::Reboot {
                via: liken_api::RebootVia::Kexec,
            }) && grants(&both) == 1)
                .then_some(())
                .ok_or_else(|| format!("asked {asked:?}\n{}", lead_op.log_text()))
        },
    );
    assert!(
        coordination::holds_grant(&machine("lead-1").unwrap().status.conditions),
        "the turn is the leader's"
    );

    // Mid-turn, the leader's facts turn unreadable; the conflict storm
    // starts; the cluster operator dies without a word; a person approves
    // work-1's change; another cluster operator takes over.
    lead_host.state.lock().unwrap().status = StatusMode::Garbage;
    let stop = Arc::new(AtomicBool::new(false));
    let storm = conflict_storm(&both, stop.clone());
    wait_machine(
        "lead-1",
        "the leader to say its facts are unreadable",
        &lead_op,
        Duration::from_secs(30),
        |m| has_reason(m, SYSCTLS_APPLIED, reason::FACTS_UNREADABLE),
    );
    if let Some(op) = cluster_op.take() {
        op.kill();
    }
    patch(
        &["machine", "work-1"],
        &json!({"metadata": {"annotations": {annotations::APPROVE_DISRUPTION: approval}}}),
    );
    let second = ClusterOperator::start_as("cluster-operator-1");
    // Long enough for the old Lease to expire (3 s), the new leader to
    // sweep a few times (1 s) and the operators to meet the storm.
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(
        work_host.asked(),
        [],
        "work-1 was let go while the leader held the turn:\n{}",
        second.log_text()
    );

    // The leader's facts come back, then its init finishes what kept it
    // busy: the reboot it asks for now is accepted, and it is down.
    lead_host.state.lock().unwrap().status = StatusMode::Normal;
    std::thread::sleep(Duration::from_secs(2));
    lead_host.state.lock().unwrap().refuse_disrupt = None;
    wait_for(
        "the leader's init to accept its reboot",
        Duration::from_secs(60),
        || {
            let st = lead_host.state.lock().unwrap();
            (!st.disrupted.is_empty())
                .then_some(())
                .ok_or_else(|| format!("{:?}\n{}", st.requests, lead_op.log_text()))
        },
    );
    // Held down over several sweeps of the new leader and the storm.
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        work_host.state.lock().unwrap().disrupted.is_empty(),
        "work-1 went down while the leader was down:\n{}",
        second.log_text()
    );

    // The leader comes back on its new setting; work-1's approved change
    // takes the turn now, still through the storm, and runs.
    lead_op.stop();
    let (running, _) = lead_host.reboot(&lead, &c);
    assert_eq!(running.spec.sysctls["vm.swappiness"], "10");
    let lead_op = restart(&lead_host, &fast);
    wait_for(
        "work-1's init to accept its reboot",
        Duration::from_secs(90),
        || {
            let st = work_host.state.lock().unwrap();
            (!st.disrupted.is_empty()).then_some(()).ok_or_else(|| {
                format!(
                    "{:?}\n{}\n{}",
                    st.requests,
                    work_op.log_text(),
                    second.log_text()
                )
            })
        },
    );
    assert!(
        has_event("work-1", "DisruptionApproved", &approval),
        "{:#?}",
        events_about("work-1")
    );
    // While work-1 is down, a person asks the leader to reboot (naming
    // its new boot): the request waits out work-1's turn, through the
    // storm, and is then carried out.
    let lead_boot = lead_host.record().boot_id();
    patch(
        &["machine", "lead-1"],
        &json!({"metadata": {"annotations": {annotations::REQUEST_REBOOT: lead_boot.short()}}}),
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        lead_host.state.lock().unwrap().disrupted.len(),
        1,
        "the leader went down again while work-1 was down"
    );
    work_op.stop();
    let (running, _) = work_host.reboot(&machine_doc("work-1"), &c);
    assert_eq!(
        running.spec.sysctls["vm.swappiness"], "5",
        "the approved change ran"
    );
    let work_op = restart(&work_host, &fast);
    wait_for(
        "the leader's init to accept the requested reboot",
        Duration::from_secs(90),
        || {
            let st = lead_host.state.lock().unwrap();
            (st.disrupted.len() == 2).then_some(()).ok_or_else(|| {
                format!(
                    "{:?}\n{}\n{}",
                    st.requests,
                    lead_op.log_text(),
                    second.log_text()
                )
            })
        },
    );
    stop.store(true, Ordering::Relaxed);
    let landed = storm.join().unwrap();
    assert!(landed > 50, "the storm landed only {landed} writes");
    lead_op.stop();
    let lead_doc = {
        let mut m = lead.clone();
        m.spec.sysctls.insert("vm.swappiness".into(), "10".into());
        m
    };
    lead_host.reboot(&lead_doc, &c);
    assert_ne!(lead_host.record().boot_id(), lead_boot);
    let lead_op = restart(&lead_host, &fast);
    wait_for("the fleet to settle", Duration::from_secs(60), || {
        let ready = both
            .iter()
            .all(|n| machine(n).is_some_and(|m| m.status.phase == Some(Phase::Ready)));
        let cluster = get("/apis/liken.sh/v1alpha1/clusters/home").ok_or("no cluster")?;
        let ledger = cluster["status"]["rebootTurns"]
            .as_array()
            .map_or(0, Vec::len);
        (ready && grants(&both) == 0 && ledger == 0)
            .then_some(())
            .ok_or_else(|| format!("ledger {ledger}\n{}", second.log_text()))
    });

    // The verdicts no operator wrote: never two down, and the storm did
    // meet the operators' own writes at the apiserver.
    assert_down_within(&hosts, 1, start);
    for (who, sa) in [("machine", MACHINE_OPERATOR), ("cluster", CLUSTER_OPERATOR)] {
        let user = service_account_user(HEARTBEAT_NAMESPACE, sa);
        let n = conflicts(&user, mark);
        assert!(n > 0, "no 409 reached the {who} operator's writes");
    }
    lead_op.stop();
    work_op.stop();
}
