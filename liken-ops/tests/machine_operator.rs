//! The machine operator against a real control plane, as its own
//! binary, under its ServiceAccount's token (bound to its DaemonSet pod)
//! and the shipped RBAC and admission policy. init is a recording double
//! on a real unix socket (see `machine/support.rs`).

#[path = "machine/support.rs"]
mod support;

use std::time::Duration;

use liken_api::Phase;
use liken_api::coordination::{HEARTBEAT_NAMESPACE, MACHINE_OPERATOR};
use liken_testenv::audit::service_account_user;
use liken_testenv::exposition::{metric, scrape};
use support::*;

#[test]
fn a_machine_seeds_itself_converges_and_then_writes_only_its_heartbeat() {
    let cp = cp();
    cp.create_node("seed-1", &[]).unwrap();
    let m = machine_doc("seed-1");
    let c = cluster_doc(&["seed-1"]);
    let host = Host::new("seed-1", &m, &c);
    let kc = operator_kubeconfig("seed-1");
    let started = cp.audit_mark().unwrap();
    let op = Operator::start(&host, &kc, &["--heartbeat-interval=2s"]);

    let seeded = wait_for(
        "the Machine to be seeded and Ready",
        Duration::from_secs(60),
        || {
            let m = machine("seed-1").ok_or("no Machine yet")?;
            // The first pass may run before the watch sees the Cluster;
            // the role follows on the next.
            match m.status.phase {
                Some(Phase::Ready) if m.status.role.is_some() => Ok(m),
                p => Err(format!(
                    "phase {p:?}: {:?}\n{}",
                    m.status.conditions,
                    op.log_text()
                )),
            }
        },
    );
    assert_eq!(seeded.spec, m.spec, "seeded from the booted document");
    // The Cluster came from the leader's copy (the test's stand-in for
    // the cluster operator); the machine operator never creates one.
    let status = &seeded.status;
    assert_eq!(status.boot.as_ref().unwrap().time, Some(host.record().time));
    // A power-on: through the firmware, with no reason (init made no
    // reboot), said once in a Booted Event.
    let boot = status.boot.as_ref().unwrap();
    assert_eq!(
        (boot.via, boot.via_reason.as_deref()),
        (Some(liken_api::RebootVia::Firmware), None)
    );
    let this_boot = [host.record().boot_id()];
    let notes = booted_once_per_boot("seed-1", &this_boot);
    assert_eq!(
        notes[0],
        format!(
            "boot {}: release {OLD} in slot A, reached through the firmware",
            this_boot[0].short()
        )
    );
    assert_eq!(status.role, Some(liken_api::Role::Leader));
    assert_eq!(status.observed_generation, seeded.metadata.generation);

    let lease = wait_for("the heartbeat Lease", Duration::from_secs(30), || {
        get(&format!(
            "/apis/coordination.k8s.io/v1/namespaces/{HEARTBEAT_NAMESPACE}/leases/seed-1"
        ))
        .ok_or_else(|| "no Lease".to_owned())
    });
    assert_eq!(
        lease["metadata"]["ownerReferences"][0]["uid"],
        seeded.metadata.uid.as_str()
    );
    assert_eq!(lease["metadata"]["labels"]["liken.sh/heartbeat"], "true");
    assert_eq!(lease["spec"]["holderIdentity"], "seed-1");

    // The heartbeat is renewed before the first status write: the
    // cluster operator judges a status written while the Lease is stale
    // (a machine back from a reboot) as silent, and would mark it Lost.
    let user = service_account_user(HEARTBEAT_NAMESPACE, MACHINE_OPERATOR);
    let first: Vec<String> = cp
        .writes_by(&user, started)
        .unwrap()
        .into_iter()
        .filter(|w| w.name == "seed-1" && (w.resource == "leases" || w.subresource == "status"))
        .map(|w| w.describe())
        .collect();
    assert!(
        first.first().is_some_and(|w| w.contains("leases")),
        "the first write of this boot's heartbeat or status was not the Lease: {first:#?}"
    );

    // Settled: over several heartbeats, the only writes are the Lease's.
    std::thread::sleep(Duration::from_secs(2));
    let mark = cp.audit_mark().unwrap();
    std::thread::sleep(Duration::from_secs(9));
    // Every machine's operator runs as this ServiceAccount; this one's
    // writes are those on objects of its name (its Machine, its Node,
    // its Lease, Events named after it).
    let writes: Vec<_> = cp
        .writes_by(&user, mark)
        .unwrap()
        .into_iter()
        .filter(|w| w.name == "seed-1" || w.name.starts_with("seed-1."))
        .collect();
    assert!(writes.len() >= 3, "the Lease was renewed: {writes:?}");
    for w in &writes {
        assert!(
            w.resource == "leases" && w.name == "seed-1" && w.verb == "patch",
            "a converged machine wrote {} (all writes: {:#?})\n{}",
            w.describe(),
            writes,
            op.log_text()
        );
    }

    // Its metrics are a valid exposition, and say what happened.
    let addr = metrics_address(&op.log_text()).expect("the operator logs its metrics address");
    let text = scrape(&addr);
    liken_testenv::exposition::promtool_check(&text);
    assert_eq!(metric(&text, "liken_machine_phase{phase=\"Ready\"}"), 1.0);
    assert_eq!(metric(&text, "liken_machine_phase{phase=\"Unknown\"}"), 0.0);
    assert_eq!(metric(&text, "liken_machine_pending_disruptions"), 0.0);
    assert!(metric(&text, "liken_heartbeat_renewals_total") >= 3.0);
    assert_eq!(metric(&text, "liken_heartbeat_failures_total"), 0.0);
    assert!(metric(&text, "liken_machine_status_writes_total") >= 1.0);
    op.stop();

    // A restarted operator in the same boot says nothing of it again.
    let before = host.path("operator.log").metadata().unwrap().len();
    let op = Operator::start(&host, &kc, &["--heartbeat-interval=2s"]);
    wait_for(
        "the restarted operator's passes",
        Duration::from_secs(30),
        || {
            let log = op.log_text();
            let fresh = log.get(usize::try_from(before).unwrap()..).unwrap_or("");
            let addr = metrics_address(fresh).ok_or("not serving metrics yet")?;
            let passes = metric(&scrape(&addr), "liken_reconcile_duration_seconds_count");
            (passes >= 3.0)
                .then_some(())
                .ok_or_else(|| format!("{passes} passes"))
        },
    );
    booted_once_per_boot("seed-1", &this_boot);
    op.stop();
}

use liken_api::control::Request;
use liken_api::coordination::{SYSCTLS_APPLIED, reason};
use serde_json::json;

/// Runs kubectl with a kubeconfig; answers (success, stderr).
fn kubectl_as(kc: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = cp().kubectl_as(kc).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn one_machines_token_cannot_write_another_machine() {
    let cp = cp();
    for n in ["vap-1", "vap-2"] {
        cp.create_node(n, &[]).unwrap();
        apply(&format!(
            "apiVersion: liken.sh/v1alpha1\nkind: Machine\nmetadata: {{name: {n}}}\nspec: {{}}\n"
        ));
    }
    let kc = operator_kubeconfig("vap-1");
    // A status write as the operator makes it: PUT on /status.
    let put_status = |kc: &std::path::Path, name: &str| {
        let mut v = get(&format!("/apis/liken.sh/v1alpha1/machines/{name}")).unwrap();
        v["status"] = json!({"phase": "Degraded"});
        let path = std::env::temp_dir().join(format!("status-{name}-{}.json", std::process::id()));
        std::fs::write(&path, v.to_string()).unwrap();
        let r = kubectl_as(
            kc,
            &[
                "replace",
                "--subresource=status",
                "-f",
                path.to_str().unwrap(),
            ],
        );
        let _ = std::fs::remove_file(&path);
        r
    };
    let (ok, err) = put_status(&kc, "vap-2");
    assert!(
        !ok && err.contains("may write only its own Machine"),
        "{err}"
    );
    let (ok, err) = put_status(&kc, "vap-1");
    assert!(ok, "its own Machine's status: {err}");
    let (ok, err) = kubectl_as(
        &kc,
        &[
            "patch",
            "machine",
            "vap-1",
            "--type=merge",
            "-p",
            r#"{"spec":{"hostname":"vap-2"}}"#,
        ],
    );
    assert!(!ok && err.contains("never its spec"), "{err}");
    let (ok, err) = kubectl_as(
        &kc,
        &["annotate", "machine", "vap-2", "liken.sh/request-reboot-"],
    );
    assert!(
        !ok && err.contains("may write only its own Machine"),
        "{err}"
    );
    // (kubectl cordon exits 0 even when refused, so patch as the
    // operator does.)
    let label = r#"{"metadata":{"labels":{"liken.test/x":"1"}}}"#;
    let (ok, err) = kubectl_as(
        &kc,
        &["patch", "node", "vap-2", "--type=merge", "-p", label],
    );
    assert!(!ok && err.contains("may patch only its own Node"), "{err}");
    let (ok, err) = kubectl_as(
        &kc,
        &["patch", "node", "vap-1", "--type=merge", "-p", label],
    );
    assert!(ok, "its own Node: {err}");
    let lease = |name: &str, holder: &str| {
        format!(
            r#"{{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{{"name":"{name}","namespace":"liken-system"}},"spec":{{"holderIdentity":"{holder}"}}}}"#
        )
    };
    let create = |body: String| {
        let path = std::env::temp_dir().join(format!("lease-{}.json", std::process::id()));
        std::fs::write(&path, body).unwrap();
        let r = kubectl_as(&kc, &["create", "-f", path.to_str().unwrap()]);
        let _ = std::fs::remove_file(&path);
        r
    };
    let (ok, err) = create(lease("vap-2", "vap-2"));
    assert!(
        !ok && err.contains("may renew only the heartbeat it holds"),
        "{err}"
    );
    let (ok, err) = create(lease("vap-1", "vap-1"));
    assert!(ok, "its own heartbeat: {err}");

    // A token bound to no pod names no node, and writes nothing.
    let unbound = cp
        .kubeconfig_for("liken-system", "liken-machine-operator")
        .unwrap();
    let (ok, err) = put_status(&unbound, "vap-1");
    assert!(!ok && err.contains("names no node"), "{err}");
}

#[test]
fn bad_input_blocks_or_reports_unknown_and_never_crashes() {
    let m = machine_doc("bad-1");
    let c = cluster_doc(&["seed-1"]);
    let (host, op) = start_machine("bad-1", &m, &c, &[]);

    // A spec the strict decoder refuses is never staged.
    patch(
        &["machine", "bad-1"],
        &json!({"spec": {"sysctls": {"vm/../../etc": "1"}}}),
    );
    let blocked = wait_machine(
        "bad-1",
        "the change to be Blocked",
        &op,
        Duration::from_secs(30),
        |m| m.status.phase == Some(Phase::Blocked),
    );
    let (_, _, message) = condition(&blocked, SYSCTLS_APPLIED).unwrap();
    assert!(
        message.contains(r#"spec.sysctls["vm/../../etc"]"#),
        "{message}"
    );
    assert!(blocked.status.pending.is_empty());
    assert!(!host.path("var/lib/liken/staged/machine.yaml").exists());
    patch(
        &["machine", "bad-1"],
        &json!({"spec": {"sysctls": {"vm/../../etc": null}}}),
    );
    wait_machine(
        "bad-1",
        "Ready once the spec is right again",
        &op,
        Duration::from_secs(30),
        |m| m.status.phase == Some(Phase::Ready),
    );

    // init answering garbage, hanging up, or gone: Unknown, not a crash.
    let unknown = |what: &str| {
        let m = wait_machine("bad-1", what, &op, Duration::from_secs(30), |m| {
            m.status.phase == Some(Phase::Unknown)
        });
        condition(&m, SYSCTLS_APPLIED).unwrap()
    };
    host.state.lock().unwrap().status = StatusMode::Garbage;
    let (status, r, message) = unknown("Unknown on a malformed answer");
    assert_eq!(
        (status.as_str(), r.as_str()),
        ("Unknown", reason::FACTS_UNREADABLE)
    );
    assert!(message.contains("malformed"), "{message}");
    host.state.lock().unwrap().status = StatusMode::Normal;
    wait_machine("bad-1", "Ready again", &op, Duration::from_secs(30), |m| {
        m.status.phase == Some(Phase::Ready)
    });
    host.state.lock().unwrap().status = StatusMode::Hangup;
    unknown("Unknown when init hangs up");
    host.state.lock().unwrap().status = StatusMode::Normal;
    wait_machine("bad-1", "Ready again", &op, Duration::from_secs(30), |m| {
        m.status.phase == Some(Phase::Ready)
    });
    let sock = host.path("run/liken/init.sock");
    let aside = host.path("run/liken/init.sock.away");
    std::fs::rename(&sock, &aside).unwrap();
    let (_, _, message) = unknown("Unknown when the socket is gone");
    assert!(message.contains("init.sock"), "{message}");
    std::fs::rename(&aside, &sock).unwrap();
    wait_machine(
        "bad-1",
        "Ready once init is back",
        &op,
        Duration::from_secs(30),
        |m| m.status.phase == Some(Phase::Ready),
    );
    assert!(has_event("bad-1", reason::FACTS_UNREADABLE, "init"));
    op.stop();
}

#[test]
fn k3s_labels_and_taints_restart_k3s_then_go_onto_the_node() {
    use liken_api::coordination::K3S_CONFIGURED;
    let m = machine_doc("k3s-1");
    let c = cluster_doc(&["seed-1"]);
    let (host, op) = start_machine("k3s-1", &m, &c, &[]);
    patch(
        &["machine", "k3s-1"],
        &json!({"spec": {"k3s": {"nodeLabels": {"liken.test/role": "web"},
                                  "nodeTaints": ["dedicated=web:NoSchedule"]}}}),
    );
    let asking = wait_machine(
        "k3s-1",
        "a restart to be asked for",
        &op,
        Duration::from_secs(30),
        |m| has_reason(m, K3S_CONFIGURED, reason::AWAITING_TURN),
    );
    let p = &asking.status.pending[0];
    assert_eq!(p.kind, liken_api::machine::DisruptionKind::Restart);
    assert_eq!(
        p.summary,
        "k3s: +label liken.test/role=web, +taint dedicated=web:NoSchedule"
    );
    assert!(
        host.path("var/lib/liken/staged/machine.yaml").exists(),
        "staged for the next boot's k3s"
    );
    grant("k3s-1");
    let done = wait_machine(
        "k3s-1",
        "the Node to carry them",
        &op,
        Duration::from_secs(30),
        |m| m.status.phase == Some(Phase::Ready),
    );
    assert!(done.status.pending.is_empty());
    assert_eq!(host.asked(), [Request::RestartK3s], "a restart, no reboot");
    let node = get("/api/v1/nodes/k3s-1").unwrap();
    assert_eq!(node["metadata"]["labels"]["liken.test/role"], "web");
    let taints = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t["key"] == "dedicated" && t["value"] == "web" && t["effect"] == "NoSchedule"),
        "{taints:?}"
    );
    wait_for("the node to be uncordoned", Duration::from_secs(30), || {
        let n = get("/api/v1/nodes/k3s-1").unwrap();
        (n["spec"]["unschedulable"] != true)
            .then_some(())
            .ok_or_else(|| n["spec"].to_string())
    });
    reclaim("k3s-1");
    op.stop();
}

#[test]
fn network_configured_compares_the_running_network_and_stages_changes() {
    use liken_api::coordination::NETWORK_CONFIGURED;
    use liken_api::machine::{InterfaceSpec, NetworkSpec};
    use liken_api::network::{
        AddressFacts, AddressOrigin, LeaseFacts, LeaseState, LinkFacts, NetworkFacts,
    };
    let mut m = machine_doc("net-1");
    m.spec.network = Some(NetworkSpec {
        interfaces: vec![InterfaceSpec {
            name: Some("eth0".into()),
            dhcp: true,
            ..InterfaceSpec::default()
        }],
        ..NetworkSpec::default()
    });
    let c = cluster_doc(&["seed-1"]);
    cp().create_node("net-1", &[]).unwrap();
    let host = Host::new("net-1", &m, &c);
    let mut facts = NetworkFacts {
        links: vec![LinkFacts {
            name: "eth0".into(),
            mtu: 1500,
            up: true,
            carrier: true,
            addresses: vec![AddressFacts {
                address: "10.0.2.15/24".into(),
                origin: AddressOrigin::Dhcp,
                tentative: false,
            }],
            ..LinkFacts::default()
        }],
        leases: vec![LeaseFacts {
            interface: "eth0".into(),
            state: LeaseState::Bound,
            address: Some("10.0.2.15/24".into()),
            ..LeaseFacts::default()
        }],
        ..NetworkFacts::default()
    };
    host.publish_network(&facts);
    let op = Operator::start(&host, &operator_kubeconfig("net-1"), &[]);
    wait_machine("net-1", "Ready", &op, Duration::from_secs(60), |m| {
        m.status.phase == Some(Phase::Ready)
    });

    // The kernel lost the lease: NotApplied, saying so.
    facts.leases[0].state = LeaseState::Requesting;
    host.publish_network(&facts);
    let degraded = wait_machine("net-1", "NotApplied", &op, Duration::from_secs(30), |m| {
        has_reason(m, NETWORK_CONFIGURED, reason::NOT_APPLIED)
    });
    assert_eq!(degraded.status.phase, Some(Phase::Degraded));
    assert!(
        condition(&degraded, NETWORK_CONFIGURED)
            .unwrap()
            .2
            .contains("eth0 holds no DHCP lease")
    );
    facts.leases[0].state = LeaseState::Bound;
    host.publish_network(&facts);

    // A network change is staged for a reboot, in words.
    patch(
        &["machine", "net-1"],
        &json!({"spec": {"network": {"interfaces": [{"name": "eth0", "dhcp": true, "mtu": 9000}],
                                     "vlans": [{"name": "eth0.42", "parent": "eth0", "id": 42}]}}}),
    );
    let staged = wait_machine(
        "net-1",
        "the network change staged",
        &op,
        Duration::from_secs(30),
        |m| has_reason(m, NETWORK_CONFIGURED, reason::AWAITING_TURN),
    );
    assert_eq!(
        staged.status.pending[0].summary,
        "network: eth0 mtu default → 9000, +vlan eth0.42 (id 42 on eth0)"
    );
    assert_eq!(
        staged.status.pending[0].kind,
        liken_api::machine::DisruptionKind::Reboot
    );
    op.stop();
}

/// A grant names what it allows (issue 21): a grant for another boot, or
/// for a sysctl change alone when a release was written since, is never
/// acted on: no cordon, no request to init. Before grants named their
/// purpose, any RebootApproved condition made the machine cordon, drain
/// and reboot.
#[test]
fn a_grant_for_something_else_is_never_acted_on() {
    use liken_api::coordination::TurnPurpose;
    let m = machine_doc("purpose-1");
    let c = cluster_doc(&["seed-1"]);
    let (host, op) = start_machine("purpose-1", &m, &c, &[]);
    set_swappiness("purpose-1", "10");
    let asking = wait_machine(
        "purpose-1",
        "a reboot to be asked for",
        &op,
        Duration::from_secs(30),
        |m| has_reason(m, SYSCTLS_APPLIED, reason::AWAITING_TURN),
    );
    let asked = liken_ops::cluster::rollout::asked_purpose(&asking);
    // The same changes, but a release the machine does not stage; then
    // the same changes in another boot.
    let with_release = TurnPurpose {
        release: Some(liken_api::Version::parse("2099.01.01-001").unwrap()),
        ..asked.clone()
    };
    let other_boot = TurnPurpose {
        boot: "ffffffffffff".into(),
        ..asked.clone()
    };
    for wrong in [with_release, other_boot] {
        grant_naming("purpose-1", &wrong);
        let held = wait_machine(
            "purpose-1",
            "the grant to be judged",
            &op,
            Duration::from_secs(30),
            |m| {
                condition(m, SYSCTLS_APPLIED)
                    .is_some_and(|(_, _, msg)| msg.contains(&wrong.describe()))
            },
        );
        assert!(has_reason(&held, SYSCTLS_APPLIED, reason::AWAITING_TURN));
        std::thread::sleep(Duration::from_secs(3));
        assert!(
            host.asked().is_empty(),
            "init was asked: {:?}",
            host.asked()
        );
        let node = get("/api/v1/nodes/purpose-1").unwrap();
        assert_ne!(node["spec"]["unschedulable"], true, "cordoned on {wrong:?}");
    }
    // A grant for exactly what is staged is taken.
    grant("purpose-1");
    wait_machine(
        "purpose-1",
        "the reboot to be asked",
        &op,
        Duration::from_secs(60),
        |m| has_reason(m, SYSCTLS_APPLIED, reason::REBOOTING),
    );
    assert_eq!(
        host.asked(),
        [Request::Reboot {
            via: liken_api::RebootVia::Kexec
        }]
    );
    op.stop();
}

/// The handshake never loses an intent (issue 21): on a Manual machine,
/// a person's approval and a reboot request survive init refusing the
/// reboot (their annotations are spent before init is asked), the turn
/// stays in use, init is asked again after a backoff rather than every
/// pass, and one InitRefused Event covers the run of refusals. Before,
/// the record of the ask was dropped on a refusal, and with it the
/// approval and the request: the machine fell back to RebootPending.
#[test]
fn an_approval_and_a_request_survive_init_refusing_the_reboot() {
    use liken_api::annotations;
    let m = machine_doc("refused-1");
    let c = cluster_doc(&["seed-1"]);
    let (host, op) = start_machine("refused-1", &m, &c, &[]);
    patch(
        &["machine", "refused-1"],
        &json!({"spec": {"rebootPolicy": "Manual", "sysctls": {"vm.swappiness": "10"}}}),
    );
    let pending = wait_machine(
        "refused-1",
        "the change to wait for approval",
        &op,
        Duration::from_secs(30),
        |m| has_reason(m, SYSCTLS_APPLIED, reason::REBOOT_PENDING),
    );
    let hash = pending.status.pending[0].hash.short().to_owned();
    let boot = host.record().boot_id().short().to_owned();
    patch(
        &["machine", "refused-1"],
        &json!({"metadata": {"annotations": {
            annotations::APPROVE_DISRUPTION: hash,
            annotations::REQUEST_REBOOT: boot,
        }}}),
    );
    wait_machine(
        "refused-1",
        "the approval to ask for a turn",
        &op,
        Duration::from_secs(30),
        |m| has_reason(m, SYSCTLS_APPLIED, reason::AWAITING_TURN),
    );
    host.state.lock().unwrap().refuse_disrupt = Some("k3s is still stopping".into());
    grant("refused-1");
    let refused = wait_machine(
        "refused-1",
        "init's refusal to show",
        &op,
        Duration::from_secs(30),
        |m| {
            condition(m, SYSCTLS_APPLIED).is_some_and(|(_, r, msg)| {
                r == reason::REBOOTING && msg.contains("k3s is still stopping")
            })
        },
    );
    assert!(
        refused
            .metadata
            .annotation(annotations::APPROVE_DISRUPTION)
            .is_none(),
        "the approval's annotation is spent"
    );
    // For a few seconds: the turn stays in use, the approval and the
    // request stay carried, init is not asked every pass.
    std::thread::sleep(Duration::from_secs(6));
    let m = machine("refused-1").unwrap();
    assert!(
        liken_api::coordination::using_turn(&m.status.conditions),
        "{:#?}",
        m.status.conditions
    );
    assert!(!has_reason(&m, SYSCTLS_APPLIED, reason::REBOOT_PENDING));
    assert!(has_reason(
        &m,
        liken_api::coordination::REBOOT_REQUEST_HONORED,
        reason::REBOOTING
    ));
    assert_eq!(
        host.asked(),
        [Request::Reboot {
            via: liken_api::RebootVia::Kexec
        }],
        "asked once so far"
    );
    // init accepts now: the next ask, after the backoff, reboots.
    host.state.lock().unwrap().refuse_disrupt = None;
    wait_for("init to be asked again", Duration::from_secs(30), || {
        let asked = host.asked();
        (asked.len() == 2)
            .then_some(())
            .ok_or_else(|| format!("{asked:?}"))
    });
    assert_eq!(
        host.asked(),
        [
            Request::Reboot {
                via: liken_api::RebootVia::Kexec
            },
            Request::Reboot {
                via: liken_api::RebootVia::Kexec
            }
        ]
    );
    let refusals = events_about("refused-1")
        .iter()
        .filter(|(r, _)| r == "InitRefused")
        .count();
    assert_eq!(refusals, 1, "one Event for the refusal");
    op.stop();
}
