//! The Auto path end to end with the real cluster operator: two machine
//! operators and the cluster operator, each its own binary under its own
//! ServiceAccount's token and the shipped manifests, on a control plane
//! of their own (the cluster operator judges the whole fleet, so it must
//! not meet the other test binaries' machines). Turns come one at a time
//! (the budget is 1), and the drain meets a PodDisruptionBudget that
//! first holds it and then lets it go. Along the way the way a reboot is
//! made changes: the Cluster asks for the firmware and work-1 keeps
//! kexec, which disrupts nothing by itself, reaches init with the next
//! reboots, and comes back in each Machine's status and Booted Events.

#[path = "machine/support.rs"]
mod support;

#[path = "machine/cluster_op.rs"]
mod cluster_op;

use std::time::Duration;

use cluster_op::ClusterOperator;
use liken_api::RebootVia::{Firmware, Kexec};
use liken_api::control::Request;
use liken_api::coordination::{
    self, HEARTBEAT_NAMESPACE, MACHINE_OPERATOR, SYSCTLS_APPLIED, reason,
};
use liken_api::{Phase, annotations};
use liken_testenv::audit::service_account_user;
use serde_json::json;
use support::*;

#[test]
fn auto_machines_take_turns_from_the_cluster_operator_and_drain_under_a_budget() {
    let c = cluster_doc(&["lead-1"]);
    let lead = machine_doc("lead-1");
    let work = machine_doc("work-1");
    let fast = ["--drain-timeout=3s", "--heartbeat-interval=2s"];
    let (lead_host, lead_op) = start_machine("lead-1", &lead, &c, &fast);
    let (work_host, work_op) = start_machine("work-1", &work, &c, &fast);
    let mut lead_boots = vec![lead_host.record().boot_id()];
    let mut work_boots = vec![work_host.record().boot_id()];
    let cluster_op = ClusterOperator::start();
    let both = ["lead-1", "work-1"];

    cp().ensure_namespace("shop").unwrap();
    apply(
        "apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      nodeSelector: {kubernetes.io/hostname: work-1}
      containers: [{name: web, image: registry.example/web:1}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web-pdb, namespace: shop}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
",
    );
    wait_for(
        "the web pods to run on work-1",
        Duration::from_secs(60),
        || {
            let v = get("/apis/policy/v1/namespaces/shop/poddisruptionbudgets/web-pdb")
                .ok_or("no pdb")?;
            (v["status"]["currentHealthy"] == 2 && pods_on("shop", "work-1").len() == 2)
                .then_some(())
                .ok_or_else(|| format!("pdb status {}", v["status"]))
        },
    );

    // work-1 changes first: it stages and asks, and the cluster operator
    // grants it the turn; the budget holds its drain past the timeout.
    let mark = cp().audit_mark().unwrap();
    set_swappiness("work-1", "10");
    let staged = wait_machine(
        "work-1",
        "the change staged",
        &work_op,
        Duration::from_secs(30),
        |m| !m.status.pending.is_empty(),
    );
    let p = &staged.status.pending[0];
    assert_eq!(p.summary, "sysctls: vm.swappiness 60 → 10");
    assert_eq!(p.hash, staged.canonical_hash());
    assert!(has_event("work-1", "ChangeStaged", "vm.swappiness 60 → 10"));
    let blocked = wait_for(
        "work-1's drain to be blocked",
        Duration::from_secs(60),
        || {
            let m = machine("work-1").ok_or("no machine")?;
            if has_reason(&m, SYSCTLS_APPLIED, reason::DRAIN_BLOCKED) {
                Ok(m)
            } else {
                Err(format!(
                    "{:?}\n{}",
                    m.status.conditions,
                    cluster_op.log_text()
                ))
            }
        },
    );

    // The leader changes too, while work-1 holds the only turn: it asks
    // and waits.
    set_swappiness("lead-1", "10");
    wait_machine(
        "lead-1",
        "the leader to ask",
        &lead_op,
        Duration::from_secs(30),
        |m| has_reason(m, SYSCTLS_APPLIED, reason::AWAITING_TURN),
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(grants(&both), 1, "two turns at once, or none");
    assert_eq!(blocked.status.phase, Some(Phase::Updating));
    let (_, _, message) = condition(&blocked, SYSCTLS_APPLIED).unwrap();
    assert!(message.contains("PodDisruptionBudget web-pdb"), "{message}");
    assert!(message.contains("shop/web-"), "{message}");
    assert!(has_event("work-1", "DrainBlocked", "web-pdb"));
    assert_eq!(
        get("/api/v1/nodes/work-1").unwrap()["spec"]["unschedulable"],
        true
    );
    assert_eq!(
        pods_on("shop", "work-1").len(),
        2,
        "the budget held both pods"
    );
    let leader = machine("lead-1").unwrap();
    assert!(
        has_reason(&leader, SYSCTLS_APPLIED, reason::AWAITING_TURN),
        "{:?}",
        leader.status.conditions
    );
    assert!(lead_host.asked().is_empty() && work_host.asked().is_empty());

    // The budget allows it: the pods are evicted, init asked to reboot.
    patch(
        &["pdb", "web-pdb", "-n", "shop"],
        &json!({"spec": {"minAvailable": 0}}),
    );
    wait_for(
        "work-1's init to be asked to reboot",
        Duration::from_secs(60),
        || {
            assert!(grants(&both) <= 1, "two turns at once");
            (work_host.asked() == [Request::Reboot { via: Kexec }])
                .then_some(())
                .ok_or_else(|| format!("asked {:?}\n{}", work_host.asked(), work_op.log_text()))
        },
    );
    assert!(pods_on("shop", "work-1").is_empty(), "the web pods left");
    assert_eq!(
        pods_on("liken-system", "work-1").len(),
        1,
        "the DaemonSet's own pod stays"
    );
    holds_turn_until_down("work-1", SYSCTLS_APPLIED);
    let user = service_account_user(HEARTBEAT_NAMESPACE, MACHINE_OPERATOR);
    let writes = cp().writes_by(&user, mark).unwrap();
    assert!(
        writes
            .iter()
            .any(|w| w.resource == "pods" && w.subresource == "eviction" && w.code == 201),
        "evicted through the Eviction API: {writes:#?}"
    );
    assert!(
        !writes
            .iter()
            .any(|w| w.resource == "pods" && w.verb == "delete"),
        "no pod deleted directly: {writes:#?}"
    );

    // work-1 reboots into the promoted document; the cluster operator
    // reclaims its turn and grants the leader its own.
    work_op.stop();
    let (running, _) = work_host.reboot(&work, &c);
    work_boots.push(work_host.record().boot_id());
    assert_eq!(running.spec.sysctls["vm.swappiness"], "10");
    let work_op = restart(&work_host, &fast);
    wait_for(
        "the leader's init to be asked to reboot",
        Duration::from_secs(90),
        || {
            assert!(grants(&both) <= 1, "two turns at once");
            (lead_host.asked() == [Request::Reboot { via: Kexec }])
                .then_some(())
                .ok_or_else(|| format!("{}\n{}", lead_op.log_text(), cluster_op.log_text()))
        },
    );
    let back = machine("work-1").unwrap();
    assert_eq!(
        back.status.phase,
        Some(Phase::Ready),
        "{:?}",
        back.status.conditions
    );
    assert_ne!(
        get("/api/v1/nodes/work-1").unwrap()["spec"]["unschedulable"],
        true
    );
    lead_op.stop();
    lead_host.reboot(&lead, &c);
    lead_boots.push(lead_host.record().boot_id());
    let lead_op = restart(&lead_host, &fast);

    // Both converged, every turn reclaimed, the ledger empty.
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
            .ok_or_else(|| {
                format!(
                    "ledger {ledger}, grants {}\n{}",
                    grants(&both),
                    cluster_op.log_text()
                )
            })
    });
    assert!(has_event("work-1", "RebootTurnGranted", ""));
    assert!(has_event("work-1", "Uncordoned", "work-1"));
    let settled = || {
        wait_for("the fleet to settle", Duration::from_secs(60), || {
            let ready = both
                .iter()
                .all(|n| machine(n).is_some_and(|m| m.status.phase == Some(Phase::Ready)));
            (ready && grants(&both) == 0)
                .then_some(())
                .ok_or_else(|| cluster_op.log_text())
        })
    };
    // Nothing asked for another way, so both rebooted by kexec, and each
    // said so once for the power-on and once for the kexec boot.
    for (name, boots) in [("lead-1", &lead_boots), ("work-1", &work_boots)] {
        let boot = machine(name).unwrap().status.boot.unwrap();
        assert_eq!((boot.via, boot.via_reason), (Some(Kexec), None), "{name}");
        let notes = booted_once_per_boot(name, boots);
        assert!(
            notes[0].ends_with("in slot A, reached through the firmware"),
            "{notes:?}"
        );
        assert!(notes[1].ends_with("reached by kexec"), "{notes:?}");
    }

    // The Cluster asks for firmware reboots and work-1 keeps kexec. That
    // alone disrupts nothing: each machine stages the documents for its
    // next boot, stays Ready and asks for no turn. One at a time, since
    // an operator's second staging Event within minutes joins the first
    // one's series and keeps its note.
    let staged = |name: &str, host: &Host, doc: &str| {
        let path = host.path(&format!("var/lib/liken/staged/{doc}"));
        wait_for(
            &format!("{name} to stage {doc}"),
            Duration::from_secs(30),
            || {
                path.exists()
                    .then_some(())
                    .ok_or_else(|| "not staged".to_owned())
            },
        );
    };
    patch(
        &["machine", "work-1"],
        &json!({"spec": {"reboot": "kexec"}}),
    );
    staged("work-1", &work_host, "machine.yaml");
    assert!(has_event(
        "work-1",
        "ChangeStaged",
        "settings: reboot unset → kexec (from the next reboot)"
    ));
    patch(
        &["cluster", "home"],
        &json!({"spec": {"reboot": "firmware"}}),
    );
    staged("lead-1", &lead_host, "cluster.yaml");
    staged("work-1", &work_host, "cluster.yaml");
    assert!(has_event(
        "lead-1",
        "ChangeStaged",
        "cluster settings: reboot unset → firmware (from the next reboot)"
    ));
    std::thread::sleep(Duration::from_secs(2));
    for name in both {
        let m = machine(name).unwrap();
        assert_eq!(
            m.status.phase,
            Some(Phase::Ready),
            "{:?}",
            m.status.conditions
        );
        assert!(
            m.status.pending.is_empty(),
            "{name}: {:?}",
            m.status.pending
        );
    }
    assert_eq!(grants(&both), 0, "no turn for the way reboots are made");
    assert_eq!(lead_host.asked().len(), 1, "nothing more asked of init");

    // Manual: the change waits for a person, the cluster grants nothing;
    // a stale approval is ignored and removed with an Event; the right
    // one lets the machine ask, and the cluster grants the turn.
    patch(
        &["machine", "work-1"],
        &json!({"spec": {"rebootPolicy": "Manual", "sysctls": {"vm.swappiness": "5"}}}),
    );
    let pending = wait_machine(
        "work-1",
        "the change to wait for a person",
        &work_op,
        Duration::from_secs(30),
        |m| has_reason(m, SYSCTLS_APPLIED, reason::REBOOT_PENDING),
    );
    assert_eq!(pending.status.phase, Some(Phase::UpdatePending));
    let hash = pending.status.pending[0].hash.clone();
    assert!(
        pending
            .status
            .conditions
            .iter()
            .any(|c| c.message.contains("liken approve-reboot"))
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(grants(&both), 0, "no turn for a change nobody approved");
    patch(
        &["machine", "work-1"],
        &json!({"metadata": {"annotations": {annotations::APPROVE_DISRUPTION: "0123456789ab"}}}),
    );
    wait_machine(
        "work-1",
        "the stale approval to be removed",
        &work_op,
        Duration::from_secs(30),
        |m| {
            !m.metadata
                .annotations
                .contains_key(annotations::APPROVE_DISRUPTION)
        },
    );
    assert!(has_event("work-1", "ApprovalIgnored", "0123456789ab"));
    assert!(has_reason(
        &machine("work-1").unwrap(),
        SYSCTLS_APPLIED,
        reason::REBOOT_PENDING
    ));
    assert_eq!(
        work_host.asked(),
        [Request::Reboot { via: Kexec }],
        "nothing more asked of init"
    );
    // work-1's own kexec wins over the Cluster's firmware; this time its
    // kernel refuses the load, so init falls back to the firmware.
    let refusal = "the kernel refused to load liken/a/vmlinuz (Operation not permitted): \
                   kexec is disabled (kernel.kexec_load_disabled is 1) or kernel lockdown \
                   forbids it";
    work_host.state.lock().unwrap().refuse_kexec = Some(refusal.into());
    patch(
        &["machine", "work-1"],
        &json!({"metadata": {"annotations": {annotations::APPROVE_DISRUPTION: hash.short()}}}),
    );
    wait_for(
        "work-1's init to be asked to reboot again",
        Duration::from_secs(60),
        || {
            (work_host.asked()
                == [
                    Request::Reboot { via: Kexec },
                    Request::Reboot { via: Kexec },
                ])
            .then_some(())
            .ok_or_else(|| format!("{}\n{}", work_op.log_text(), cluster_op.log_text()))
        },
    );
    assert!(has_event(
        "work-1",
        "Rebooting",
        "init is asked to reboot by kexec"
    ));
    assert!(
        !machine("work-1")
            .unwrap()
            .metadata
            .annotations
            .contains_key(annotations::APPROVE_DISRUPTION),
        "the approval is spent"
    );
    assert!(
        has_event("work-1", "DisruptionApproved", hash.short()),
        "{:#?}\n{}",
        events_about("work-1"),
        work_op.log_text()
    );
    holds_turn_until_down("work-1", SYSCTLS_APPLIED);
    work_op.stop();
    let (running, _) = work_host.reboot(&running, &c);
    work_boots.push(work_host.record().boot_id());
    assert_eq!(running.spec.sysctls["vm.swappiness"], "5");
    assert_eq!(running.spec.reboot, Some(Kexec));
    let work_op = restart(&work_host, &fast);
    settled();
    let boot = wait_machine(
        "work-1",
        "the new boot in the status",
        &work_op,
        Duration::from_secs(30),
        |m| m.status.boot.as_ref().and_then(|b| b.boot_id()).as_ref() == work_boots.last(),
    )
    .status
    .boot
    .unwrap();
    assert_eq!(boot.via, Some(Firmware));
    assert_eq!(boot.via_reason.as_deref(), Some(refusal));
    let notes = booted_once_per_boot("work-1", &work_boots);
    assert!(
        notes[2].ends_with(&format!("reached through the firmware: {refusal}")),
        "{notes:?}"
    );

    // A reboot request names the running boot and takes a turn too.
    let boot = lead_host.record().boot_id();
    patch(
        &["machine", "lead-1"],
        &json!({"metadata": {"annotations": {annotations::REQUEST_REBOOT: boot.short()}}}),
    );
    // lead-1 sets no way of its own: the Cluster's firmware.
    wait_for(
        "lead-1's init to be asked to reboot again",
        Duration::from_secs(60),
        || {
            (lead_host.asked()
                == [
                    Request::Reboot { via: Kexec },
                    Request::Reboot { via: Firmware },
                ])
            .then_some(())
            .ok_or_else(|| format!("{}\n{}", lead_op.log_text(), cluster_op.log_text()))
        },
    );
    assert!(has_event(
        "lead-1",
        "Rebooting",
        "init is asked to reboot through the firmware"
    ));
    assert!(
        !lead_host.path("var/lib/liken/staged/machine.yaml").exists(),
        "nothing staged"
    );
    assert!(
        !machine("lead-1")
            .unwrap()
            .metadata
            .annotations
            .contains_key(annotations::REQUEST_REBOOT),
        "the request is spent"
    );
    holds_turn_until_down("lead-1", coordination::REBOOT_REQUEST_HONORED);
    lead_op.stop();
    let lead_doc = {
        let mut m = lead.clone();
        m.spec.sysctls.insert("vm.swappiness".into(), "10".into());
        m
    };
    lead_host.reboot(&lead_doc, &c);
    assert_ne!(lead_host.record().boot_id(), boot);
    lead_boots.push(lead_host.record().boot_id());
    let lead_op = restart(&lead_host, &fast);
    settled();
    let back = wait_machine(
        "lead-1",
        "the new boot in the status",
        &lead_op,
        Duration::from_secs(30),
        |m| m.status.boot.as_ref().and_then(|b| b.boot_id()).as_ref() == lead_boots.last(),
    );
    let firmware = "the machine's documents ask for firmware reboots (spec.reboot: firmware)";
    let boot = back.status.boot.unwrap();
    assert_eq!(boot.via, Some(Firmware));
    assert_eq!(boot.via_reason.as_deref(), Some(firmware));
    let notes = booted_once_per_boot("lead-1", &lead_boots);
    assert!(
        notes[2].ends_with(&format!("reached through the firmware: {firmware}")),
        "{notes:?}"
    );
    // Still once per boot on both, after every pass since.
    booted_once_per_boot("work-1", &work_boots);
    lead_op.stop();
    work_op.stop();
}
