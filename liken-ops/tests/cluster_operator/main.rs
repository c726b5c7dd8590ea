//! The cluster operator against a real control plane (etcd,
//! kube-apiserver, kube-controller-manager, with the audit log), running
//! as its own binary under its ServiceAccount's token bound by the shipped
//! RBAC (`images/manifests/cluster-operator.yaml`), so a missing verb
//! fails a test. The tests play the machines as their operators would:
//! they renew (or stop renewing) heartbeat Leases and write Machine
//! statuses with admin credentials.
//!
//! Budgets are judged from the full watch history of the Machines and the
//! Cluster, recorded from before a scenario starts, never from the end
//! state; writes are counted in the apiserver's audit log.

mod freeze_proxy;
mod harness;
mod windows;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use harness::*;
use liken_api::annotations::RESUME_ROLLOUT;
use liken_api::cluster::HaltCause;
use liken_api::condition::find;
use liken_api::coordination::{self, HEARTBEAT_NAMESPACE};
use liken_api::release::Channel;
use liken_api::signing::SigningKey;
use liken_api::{Cluster, ConditionStatus, Machine, Phase, Time, Version};
use liken_kube::request::{CLUSTERS, LEASES, MACHINES};
use liken_kube::{Api, DynamicObject, Event};
use liken_testenv::audit::{compare_rbac, grants};
use serde_json::{Value, json};

fn sims(list: &[(&str, Sim)]) -> BTreeMap<String, Sim> {
    list.iter()
        .map(|(n, s)| ((*n).to_owned(), s.clone()))
        .collect()
}

fn asking(staged: &str) -> Sim {
    let mut s = Sim::ready(OLD);
    s.step = Step::Asking;
    s.staged = Some(staged.into());
    s
}

fn condition_reason(c: &liken_api::Cluster, type_: &str) -> String {
    find(&c.status.conditions, type_)
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

/// Whether the Cluster's Progressing message contains `text`.
fn progressing_says(c: &liken_api::Cluster, text: &str) -> bool {
    find(&c.status.conditions, "Progressing").is_some_and(|p| p.message.contains(text))
}

fn all_run(env: &Env, names: &[&str], release: &str) -> bool {
    names.iter().all(|n| {
        env.machine(n)
            .status
            .release
            .and_then(|r| r.running)
            .is_some_and(|r| r.as_str() == release)
    })
}

fn wait_all_run(env: &Env, names: &[&str], release: &str, within: Duration, op: &Operator) {
    let end = deadline(within);
    while !all_run(env, names, release) {
        assert!(
            Instant::now() < end,
            "not every machine of {names:?} runs {release} within {within:?}; cluster status: {:?}\noperator log:\n{}",
            env.cluster("home").status,
            op.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Machines that were ever granted a turn, from the history.
fn granted_ever(events: &[Event<Machine>]) -> BTreeSet<String> {
    events
        .iter()
        .flat_map(|e| match e {
            Event::Restarted(items) => items.iter().collect::<Vec<_>>(),
            Event::Applied(m) => vec![m],
            _ => vec![],
        })
        .filter(|m| coordination::holds_grant(&m.status.conditions))
        .map(|m| m.metadata.name.clone())
        .collect()
}

#[test]
fn the_fleet_under_the_shipped_rbac() {
    let env = Env::start();
    let start = env.cp.audit_mark().unwrap();
    the_deployment_is_restricted(&env);
    // The one copy keeps the default election term: a renewal slowed past
    // the tests' 2 s deadline on a loaded machine would end it, and no
    // copy would be left to act. The paused-copy test shortens it.
    let mut op = env.operator(
        "copy-a",
        &[
            "--lease-duration=15s",
            "--renew-deadline=10s",
            "--retry-period=2s",
        ],
    );

    lost_and_back(&env, &op);
    rollout_within_budget(&env, &op);
    failed_release_halts(&env, &op);
    the_channel_is_polled(&env, &op);
    settled_fleet_writes_nothing(&env, &op);
    unreadable_objects_are_skipped(&env, &op);
    one_cluster_named_by_the_deployment(&env, &op);
    a_pruning_schema_stops_grants(&env, &op);

    // SIGTERM: the loop ends, Events flush, the Lease is released.
    let status = op.terminate(Duration::from_secs(20));
    assert!(status.success(), "{status:?}\n{}", op.log_text());
    assert!(
        op.log_text().contains("released the leader Lease"),
        "{}",
        op.log_text()
    );
    assert_eq!(lease_holder(&env), "", "the Lease was not released");
    a_silent_lease_watch_loses_no_machine(&env);

    rbac_is_exactly_what_was_used(&env, start);
}

/// The shipped Deployment: two replicas, a read-only root filesystem, and
/// a pod the apiserver's Pod Security admission admits at the restricted
/// level (non-root, no privilege escalation, every capability dropped,
/// RuntimeDefault seccomp, no host namespaces or paths), tried with a
/// server-side dry run in a namespace that enforces it.
fn the_deployment_is_restricted(env: &Env) {
    let path = liken_testenv::workspace_root().join("images/manifests/cluster-operator.yaml");
    let text = std::fs::read_to_string(path)
        .unwrap()
        .replace("@LIKEN_VERSION@", NEW);
    let deployment: Value = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .find(|d: &Value| d["kind"] == "Deployment")
        .expect("cluster-operator.yaml holds a Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod_spec = &deployment["spec"]["template"]["spec"];
    let containers = pod_spec["containers"].as_array().unwrap();
    for c in containers {
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true, "{c}");
        assert_eq!(
            c["image"],
            format!("liken.sh/liken-cluster-operator:{NEW}"),
            "{c}"
        );
    }

    let ns = "restricted-check";
    let sa = pod_spec["serviceAccountName"].as_str().unwrap();
    let create = |path: &str, body: Value| {
        let (code, v) = env.cp.request("POST", path, Some(&body)).unwrap();
        assert_eq!(code, 201, "POST {path}: {v}");
    };
    create(
        "/api/v1/namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest"}}}),
    );
    create(
        &format!("/api/v1/namespaces/{ns}/serviceaccounts"),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}}),
    );
    // The check has teeth: the same pod with a capability back is refused.
    let pod = |spec: &Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "liken-cluster-operator", "namespace": ns}, "spec": spec})
    };
    let path = format!("/api/v1/namespaces/{ns}/pods?dryRun=All");
    let (code, v) = env.cp.request("POST", &path, Some(&pod(pod_spec))).unwrap();
    assert_eq!(code, 201, "the restricted level refused the pod: {v}");
    let mut weaker = pod_spec.clone();
    weaker["containers"][0]["securityContext"]["capabilities"] = json!({"add": ["NET_RAW"]});
    let (code, v) = env.cp.request("POST", &path, Some(&pod(&weaker))).unwrap();
    assert_eq!(code, 403, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap_or_default()
            .contains("restricted"),
        "{v}"
    );
}

/// A machine that stops renewing its heartbeat becomes Lost (only after
/// the stale limit, with a MachineLost Event naming the last renewal), the
/// Cluster says so, and the machine's own next status puts it back.
fn lost_and_back(env: &Env, op: &Operator) {
    env.clear();
    env.create_cluster("home", &["a"], OLD, 1);
    let player = Player::start(env, sims(&[("a", Sim::ready(OLD)), ("b", Sim::ready(OLD))]));
    let c = env.wait_cluster(
        "home",
        "the fleet reads ready",
        Duration::from_secs(30),
        |c| {
            condition_reason(c, "MachinesReady") == "AllMachinesReady"
                && condition_reason(c, "Progressing") == "RolloutComplete"
        },
    );
    assert_eq!(c.status.machines.summary, "2/2");
    assert_eq!(c.status.phase, Some(Phase::Ready));
    assert_eq!(c.status.observed_generation, c.metadata.generation);

    player.with("b", |s| s.up = false);
    let silent = Instant::now();
    let end = deadline(Duration::from_secs(30));
    let lost = loop {
        let m = env.machine("b");
        if m.status.phase == Some(Phase::Lost) {
            break m;
        }
        assert!(
            Instant::now() < end,
            "b was not marked Lost\n{}",
            op.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        silent.elapsed() >= STALE - Duration::from_millis(300),
        "marked Lost {:?} after the last renewal, before the stale limit",
        silent.elapsed()
    );
    let ready = find(&lost.status.conditions, coordination::READY).unwrap();
    assert_eq!(ready.status, ConditionStatus::Unknown);
    assert_eq!(ready.reason, coordination::HEARTBEAT_STALE);
    assert_eq!(env.machine("a").status.phase, Some(Phase::Ready));
    let c = env.wait_cluster(
        "home",
        "the Cluster names b unwell",
        Duration::from_secs(10),
        |c| {
            find(&c.status.conditions, "MachinesReady")
                .is_some_and(|m| m.message == "1/2 machines ready; unwell: b")
        },
    );
    assert_eq!(c.status.phase, Some(Phase::Degraded));
    let end = deadline(Duration::from_secs(10));
    while env.events("b", "MachineLost").is_empty() {
        assert!(Instant::now() < end, "no MachineLost Event on b");
        std::thread::sleep(Duration::from_millis(100));
    }
    let event = &env.events("b", "MachineLost")[0];
    assert_eq!(event["type"], "Warning");
    assert!(
        event["note"].as_str().unwrap().contains("last renewed at"),
        "{event}"
    );

    player.with("b", |s| s.up = true);
    env.wait_cluster(
        "home",
        "the fleet reads ready again",
        Duration::from_secs(30),
        |c| condition_reason(c, "MachinesReady") == "AllMachinesReady",
    );
    assert_eq!(env.machine("b").status.phase, Some(Phase::Ready));
    assert!(!env.events("home", "MachinesDegraded").is_empty());
    assert!(!env.events("home", "AllMachinesReady").is_empty());
}

/// Three machines take release NEW one at a time: the leader first while
/// the machine operator DaemonSet lags, one of them silent long enough
/// during its reboot to be marked Lost and to stall the rollout, and never
/// more than the budget down at once in the whole recorded history.
fn rollout_within_budget(env: &Env, op: &Operator) {
    env.clear();
    env.daemon_set(OLD);
    let history = History::record(env);
    env.create_cluster("home", &["a"], NEW, 1);
    let mut slow = asking(NEW);
    slow.reboot_for = STALE + Duration::from_secs(3);
    let player = Player::start(
        env,
        sims(&[("a", asking(NEW)), ("b", slow), ("c", asking(NEW))]),
    );

    // Leaders first: the followers wait while the template says OLD.
    env.wait_cluster(
        "home",
        "followers wait for the leader",
        Duration::from_secs(30),
        |c| progressing_says(c, "leaders first"),
    );
    wait_all_run(env, &["a"], NEW, Duration::from_secs(60), op);
    assert!(!all_run(env, &["b"], NEW) && !all_run(env, &["c"], NEW));
    // The leader booted NEW, and k3s applied its manifests.
    env.daemon_set(NEW);
    wait_all_run(env, &["a", "b", "c"], NEW, Duration::from_secs(90), op);
    let c = env.wait_cluster(
        "home",
        "the rollout completes",
        Duration::from_secs(30),
        |c| {
            condition_reason(c, "Progressing") == "RolloutComplete"
                && c.status.reboot_turns.is_empty()
        },
    );
    assert_eq!(
        find(&c.status.conditions, "Progressing").unwrap().message,
        format!("all 3 machines run {NEW}")
    );
    drop(player);
    let (machines, clusters) = history.stop();
    let (peak, at) = peak_disruption(&machines);
    assert!(
        peak <= 1,
        "{peak} machines down at once ({at}) under maxUnavailable 1"
    );
    assert!(peak_ledger(&clusters) <= 1);
    let early = grants_outside_the_ledger(&machines, &clusters);
    assert!(
        early.is_empty(),
        "grants not in the stored ledger: {early:#?}"
    );
    assert_eq!(
        granted_ever(&machines),
        BTreeSet::from(["a".into(), "b".into(), "c".into()])
    );
    // b was silent past the limit during its reboot: Lost, while holding
    // its turn, which it held past the stall limit.
    assert!(machines.iter().any(|e| matches!(e,
        Event::Applied(m) if m.metadata.name == "b" && m.status.phase == Some(Phase::Lost))));
    assert!(
        clusters.iter().any(|e| matches!(e, Event::Applied(c)
            if find(&c.status.conditions, "Progressing").is_some_and(|p| p.reason == "RolloutStalled"
                && p.status == ConditionStatus::False
                && p.message.contains("held longer than 4s without finishing: b (since")))),
        "the rollout never read stalled on b"
    );
    let stalled = env.events("home", "RolloutStalled");
    assert_eq!(stalled.len(), 1, "{stalled:#?}");
    assert_eq!(stalled[0]["type"], "Warning");
    for m in ["a", "b", "c"] {
        assert!(!env.events(m, "RebootTurnGranted").is_empty(), "{m}");
        assert!(!env.events(m, "RebootTurnReclaimed").is_empty(), "{m}");
    }
}

/// The leader, a, boots NEW and falls back, the follower b waits: the
/// player running them, and the Cluster once the operator recorded the
/// halt.
fn a_failed_release(env: &Env) -> (Player, Cluster) {
    env.clear();
    env.daemon_set(NEW);
    env.create_cluster("home", &["a"], NEW, 1);
    let mut failing = asking(NEW);
    failing.fails = true;
    let player = Player::start(env, sims(&[("a", failing), ("b", asking(NEW))]));
    let c = env.wait_cluster("home", "NEW halts", Duration::from_secs(60), |c| {
        condition_reason(c, "Progressing") == "ReleaseFailed"
    });
    (player, c)
}

/// The leader boots NEW and falls back: NEW halts (ReleaseFailed, the
/// leader's grant taken back, the follower never granted), until the
/// resume annotation takes a new value.
fn failed_release_halts(env: &Env, op: &Operator) {
    let (player, c) = a_failed_release(env);
    let halt = c.status.rollout_halt.clone().unwrap();
    assert_eq!(
        (halt.release.as_str(), halt.machine.as_str(), halt.cause),
        (NEW, "a", HaltCause::FellBack)
    );
    let p = find(&c.status.conditions, "Progressing").unwrap();
    assert_eq!(p.status, ConditionStatus::False);
    assert!(
        p.message
            .contains(&format!("release {NEW} failed on machine a")),
        "{}",
        p.message
    );
    // Held for a while: nobody is granted NEW, and a's grant is gone.
    std::thread::sleep(Duration::from_secs(4));
    for m in ["a", "b"] {
        assert!(
            !coordination::holds_grant(&env.machine(m).status.conditions),
            "{m} holds a grant during the halt\n{}",
            op.log_text()
        );
    }
    assert!(env.events("b", "RebootTurnGranted").is_empty());
    let event = &env.events("home", "ReleaseFailed")[0];
    assert_eq!(event["type"], "Warning");
    assert_eq!(
        env.cluster("home").status.rollout_halt.as_ref(),
        Some(&halt),
        "the halt holds"
    );
    metrics_are_promtool_clean(op, true);

    // The person fixes the release and resumes.
    player.with("a", |s| s.fails = false);
    env.admin
        .merge_patch::<DynamicObject>(
            &Api::all(CLUSTERS),
            "home",
            &json!({"metadata": {"annotations": {RESUME_ROLLOUT: "fixed-1"}}}),
        )
        .unwrap();
    wait_all_run(env, &["a", "b"], NEW, Duration::from_secs(60), op);
    let c = env.wait_cluster(
        "home",
        "the resumed rollout completes",
        Duration::from_secs(30),
        |c| condition_reason(c, "Progressing") == "RolloutComplete",
    );
    assert_eq!(c.status.rollout_halt, None);
    drop(player);
}

/// The channel poller asks the Cluster's source (`liken serve`'s server,
/// run in this process from liken-cli, serving a channel directory),
/// again on a new check-releases value, and keeps its last answer when
/// the channel is gone. The deployment trusts
/// [`release_key`]: a channel.yaml is taken only when that key signed it,
/// its serial does not go back and it is not past its expiry; anything
/// else keeps the answer and turns ReleaseChannel False with a Warning.
fn the_channel_is_polled(env: &Env, op: &Operator) {
    // liken serve shares only world-readable files; the channel is
    // published as a person publishes one.
    let www = liken_testenv::scratch::TempDir::new("cluster-operator-channel");
    let root = www.path().join("root");
    let channel = root.join("stable");
    std::fs::create_dir_all(&channel).unwrap();
    for d in [www.path(), &root, &channel] {
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let key = release_key();
    let stranger = liken_api::signing::key_pair([8; 32]).0;
    let from_now = |secs: i64| Time::from_unix(Time::from_system(SystemTime::now()).unix() + secs);
    let in_a_day = || from_now(86_400);
    // Publishes channel.yaml and its detached signature as `liken bundle
    // -sign` lays them out; returns both files' bytes.
    let publish = |by: &SigningKey, latest: &str, serial: u64, expires: Time| {
        let mut doc = Channel::new(Version::parse(latest).unwrap());
        doc.serial = Some(serial);
        doc.expires = Some(expires);
        let bytes = serde_yaml::to_string(&doc).unwrap();
        let sig = serde_yaml::to_string(&by.sign(bytes.as_bytes())).unwrap();
        put(&channel, &bytes, &sig);
        (bytes, sig)
    };
    let first = publish(&key, NEW, 1, in_a_day());
    let server = liken_cli::releases::serve::Server::bind(
        &root,
        "127.0.0.1:0",
        liken_cli::releases::serve::Config::default(),
    )
    .unwrap();
    let url = format!("http://{}", server.local_addr().unwrap());
    // Serves until the test process ends; its access log is dropped.
    std::thread::spawn(move || server.run(&mut std::io::sink()));
    let patch = |v: Value| {
        env.admin
            .merge_patch::<DynamicObject>(&Api::all(CLUSTERS), "home", &v)
            .unwrap();
    };
    let channel_condition = |c: &Cluster| {
        find(&c.status.conditions, "ReleaseChannel").map(|c| (c.reason.clone(), c.message.clone()))
    };
    let reason_is = |r: &'static str| {
        move |c: &Cluster| channel_condition(c).is_some_and(|(reason, _)| reason == r)
    };
    // The catalog (what the fleet may run) names the newest release; the
    // channel (what is published) its latest.
    let digest = format!("sha256:{}", "ab".repeat(32));
    patch(
        json!({"spec": {"releases": {"source": format!("{url}/stable"), "catalog": [
        {"version": OLD, "digest": digest}, {"version": "2026.11.15-002", "digest": digest}]}}}),
    );
    let c = env.wait_cluster(
        "home",
        "the channel's latest shows",
        Duration::from_secs(30),
        |c| c.status.releases.available.as_ref().map(|v| v.as_str()) == Some(NEW),
    );
    assert_eq!(
        c.status.releases.newest.as_ref().map(|v| v.as_str()),
        Some("2026.11.15-002")
    );
    let taken = c.status.releases.channel.clone().unwrap();
    assert_eq!(taken.serial, Some(1));
    assert_eq!(taken.key_id.as_deref(), Some(key.public().id.as_str()));
    assert_eq!(channel_condition(&c).unwrap().0, "ChannelCurrent");

    // A new release is published; a person asks for a poll now.
    publish(&key, "2026.12.24-001", 2, in_a_day());
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        env.cluster("home")
            .status
            .releases
            .available
            .unwrap()
            .as_str(),
        NEW,
        "polled again before the interval with no request"
    );
    patch(json!({"metadata": {"annotations": {"liken.sh/check-releases": "1"}}}));
    env.wait_cluster(
        "home",
        "the new latest shows",
        Duration::from_secs(30),
        |c| c.status.releases.available.as_ref().map(|v| v.as_str()) == Some("2026.12.24-001"),
    );

    // The server hands out the first document again, genuinely signed:
    // a replay. The answer stays; the condition and a Warning say why.
    put(&channel, &first.0, &first.1);
    patch(json!({"metadata": {"annotations": {"liken.sh/check-releases": "2"}}}));
    let c = env.wait_cluster(
        "home",
        "the replay is refused",
        Duration::from_secs(30),
        reason_is("ChannelReplayed"),
    );
    assert_eq!(
        c.status.releases.available.as_ref().unwrap().as_str(),
        "2026.12.24-001"
    );
    assert_eq!(c.status.releases.channel.as_ref().unwrap().serial, Some(2));
    let (_, message) = channel_condition(&c).unwrap();
    assert!(message.contains("serial 2 was seen before"), "{message}");
    wait_warning(env, "ChannelReplayed");

    // A newer document signed by a key the deployment does not trust.
    publish(&stranger, "2027.01.01-001", 3, in_a_day());
    patch(json!({"metadata": {"annotations": {"liken.sh/check-releases": "3"}}}));
    let c = env.wait_cluster(
        "home",
        "the stranger's channel is refused",
        Duration::from_secs(30),
        reason_is("ChannelUnverified"),
    );
    let (_, message) = channel_condition(&c).unwrap();
    assert!(message.contains(stranger.public().id.as_str()), "{message}");
    assert_eq!(
        c.status.releases.available.as_ref().unwrap().as_str(),
        "2026.12.24-001"
    );
    wait_warning(env, "ChannelUnverified");

    // A good document that expires in a few seconds: taken, then stale
    // at a later sweep with no poll in between (a channel that stopped
    // moving is noticed without waiting for the six-hour interval).
    publish(&key, "2026.12.24-001", 4, from_now(4));
    patch(json!({"metadata": {"annotations": {"liken.sh/check-releases": "4"}}}));
    env.wait_cluster(
        "home",
        "the renewed channel is taken",
        Duration::from_secs(30),
        |c| {
            c.status
                .releases
                .channel
                .as_ref()
                .is_some_and(|t| t.serial == Some(4))
        },
    );
    let c = env.wait_cluster(
        "home",
        "the channel goes stale",
        Duration::from_secs(30),
        reason_is("ChannelStale"),
    );
    assert_eq!(
        c.status.releases.available.as_ref().unwrap().as_str(),
        "2026.12.24-001"
    );
    wait_warning(env, "ChannelStale");

    // The channel goes away (its directory removed; the server answers
    // 404): the last answer stays, the failure is counted.
    std::fs::remove_dir_all(&channel).unwrap();
    let failures = || {
        metric(
            &metrics_text(op),
            "liken_cluster_operator_errors_total{kind=\"channel\"}",
        )
    };
    let before = failures();
    patch(json!({"metadata": {"annotations": {"liken.sh/check-releases": "5"}}}));
    let end = deadline(Duration::from_secs(30));
    while failures() <= before {
        assert!(
            Instant::now() < end,
            "the failed poll was not counted\n{}",
            op.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        env.cluster("home")
            .status
            .releases
            .available
            .unwrap()
            .as_str(),
        "2026.12.24-001"
    );
    assert!(op.log_text().contains("keeping the last answer"));
}

/// Writes channel.yaml and channel.yaml.sig into `dir`, each by a rename,
/// as a publisher's tools do, so the server never serves half a file.
fn put(dir: &std::path::Path, channel: &str, signature: &str) {
    for (name, text) in [("channel.yaml", channel), ("channel.yaml.sig", signature)] {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
}

/// Waits for a Warning Event with `reason` on the Cluster home.
fn wait_warning(env: &Env, reason: &str) {
    let end = deadline(Duration::from_secs(10));
    while env.events("home", reason).is_empty() {
        assert!(Instant::now() < end, "no {reason} Event on the Cluster");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(env.events("home", reason)[0]["type"], "Warning");
}

/// A settled fleet: ten sweeps and more, and the operator writes nothing
/// but its own election Lease's renewals (counted in the audit log).
fn settled_fleet_writes_nothing(env: &Env, op: &Operator) {
    env.clear();
    env.create_cluster("home", &["a"], NEW, 1);
    let player = Player::start(
        env,
        sims(&[
            ("a", Sim::ready(NEW)),
            ("b", Sim::ready(NEW)),
            ("c", Sim::ready(NEW)),
        ]),
    );
    env.wait_cluster("home", "the fleet settles", Duration::from_secs(30), |c| {
        condition_reason(c, "MachinesReady") == "AllMachinesReady"
            && condition_reason(c, "Progressing") == "RolloutComplete"
    });
    std::thread::sleep(Duration::from_secs(2));
    let mark = env.cp.audit_mark().unwrap();
    let sweeps_before = sweeps(op);
    std::thread::sleep(Duration::from_secs(12));
    let swept = sweeps(op) - sweeps_before;
    assert!(swept >= 10.0, "only {swept} sweeps ran");
    let writes: Vec<String> = env
        .cp
        .writes_by(&operator_user(), mark)
        .unwrap()
        .into_iter()
        .filter(|e| !(e.resource == "leases" && e.name == "liken-cluster-operator"))
        .map(|e| e.describe())
        .collect();
    assert!(
        writes.is_empty(),
        "a settled fleet was written to: {writes:?}"
    );
    the_watch_delivers_the_election_lease(env, op);
    drop(player);
}

/// The heartbeat watch judges itself by the operator's own election
/// Lease: the Lease bears the label the watch selects, the apiserver's
/// selector returns it beside the machines' heartbeats, and over a
/// settled stretch (renewals every 2 s, a 1.5 s limit on an owed one)
/// the watch delivered each renewal in time, so the sweeps never fell
/// back to direct reads. A Lease the watch did not deliver would leave
/// the gauge at 1 from the first seconds and log the fallback.
fn the_watch_delivers_the_election_lease(env: &Env, op: &Operator) {
    let listed = env
        .admin
        .list::<DynamicObject>(
            &Api::namespaced(LEASES, HEARTBEAT_NAMESPACE),
            &liken_kube::request::ListParams::labels("liken.sh/heartbeat in (true,election)"),
        )
        .unwrap();
    let labelled: BTreeMap<String, String> = listed
        .items
        .iter()
        .map(|l| {
            let v = serde_json::to_value(l).unwrap();
            (
                v["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                v["metadata"]["labels"]["liken.sh/heartbeat"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        labelled.get("liken-cluster-operator").map(String::as_str),
        Some("election"),
        "the watch's selector does not return the election Lease: {labelled:?}"
    );
    assert_eq!(
        labelled.get("a").map(String::as_str),
        Some("true"),
        "nor the heartbeats: {labelled:?}"
    );
    assert_eq!(
        metric(&metrics_text(op), "liken_cluster_lease_watch_behind"),
        0.0,
        "{}",
        op.log_text()
    );
    assert!(
        !op.log_text()
            .contains("has not delivered this copy's own Lease renewal"),
        "{}",
        op.log_text()
    );
}

/// The heartbeat watch goes silent without closing (a proxy stops the
/// server side of the operator's open streams; its reads and its election
/// go through fresh connections): the operator notices that the watch did
/// not deliver its own election Lease's renewals and judges heartbeats
/// from direct reads. A machine that keeps renewing stays Ready well past
/// the stale limit (a watch-only operator would mark it Lost from its
/// frozen copy of the Leases), and one that stops is still found Lost.
///
/// The freeze falls just after an election renewal, and the retry period
/// (8 s) is well past the stale limit (3 s): the election owes its next
/// renewal 8 s after the freeze, so the watch is found behind 9.5 s after
/// it, while its frozen copy reads every machine stale from 3 s. Sweeps
/// come at least every 5 s, so one always falls in that window, and only
/// the direct read that confirms each Lost verdict keeps `a` Ready there.
fn a_silent_lease_watch_loses_no_machine(env: &Env) {
    env.clear();
    env.create_cluster("home", &["a"], NEW, 1);
    let player = Player::start(env, sims(&[("a", Sim::ready(NEW)), ("b", Sim::ready(NEW))]));
    let upstream = env
        .cp
        .server()
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_owned();
    let proxy = freeze_proxy::FreezeProxy::start(&upstream);
    let kubeconfig = env.cp.dir().join("operator-via-proxy.kubeconfig");
    let text = std::fs::read_to_string(&env.operator_kubeconfig).unwrap();
    assert!(text.contains(env.cp.server()), "{text}");
    {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        // It holds the ServiceAccount's token: 0600, as every kubeconfig.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&kubeconfig)
            .unwrap()
            .write_all(
                text.replace(env.cp.server(), &format!("https://{}", proxy.address))
                    .as_bytes(),
            )
            .unwrap();
    }
    let mut op = operator_binary_via(
        env,
        env!("CARGO_BIN_EXE_liken-cluster-operator"),
        "copy-behind-a-proxy",
        &kubeconfig,
        &[
            "--lease-duration=15s",
            "--renew-deadline=10s",
            "--retry-period=8s",
        ],
    );
    env.wait_cluster("home", "the fleet settles", Duration::from_secs(30), |c| {
        condition_reason(c, "MachinesReady") == "AllMachinesReady"
    });
    assert_eq!(
        metric(&metrics_text(&op), "liken_cluster_lease_watch_behind"),
        0.0
    );

    // The watches opened a moment ago; the freeze only takes connections
    // the client has left alone for a second (see freeze_proxy).
    std::thread::sleep(Duration::from_secs(2));
    let election = |env: &Env| {
        env.admin
            .get::<DynamicObject>(
                &Api::namespaced(LEASES, "liken-system"),
                "liken-cluster-operator",
            )
            .unwrap()
            .0
            .pointer("/spec/renewTime")
            .cloned()
    };
    let renewed = election(env);
    let waited = Instant::now();
    while election(env) == renewed {
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "the election Lease was not renewed in 20 s
{}",
            op.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    proxy.freeze();
    assert!(
        proxy.frozen() >= 3,
        "the freeze took {} streams",
        proxy.frozen()
    );
    player.with("b", |s| s.up = false);
    let frozen = Instant::now();
    let mut behind = false;
    let mut b_lost = false;
    while frozen.elapsed() < STALE * 4
        || (!(behind && b_lost) && frozen.elapsed() < Duration::from_secs(30))
    {
        assert_ne!(
            env.machine("a").status.phase,
            Some(Phase::Lost),
            "a kept renewing but was marked Lost from the silent watch
{}",
            op.log_text()
        );
        b_lost |= env.machine("b").status.phase == Some(Phase::Lost);
        behind |= metric(&metrics_text(&op), "liken_cluster_lease_watch_behind") == 1.0;
        std::thread::sleep(Duration::from_millis(200));
    }
    // The fault was real: streams stayed frozen with data held back.
    assert!(
        proxy.frozen() >= 1 && proxy.held() >= 1,
        "the freeze silenced nothing ({} frozen, {} chunks held)",
        proxy.frozen(),
        proxy.held()
    );
    assert!(
        behind,
        "the gauge never showed the watch behind
{}",
        op.log_text()
    );
    assert!(
        op.log_text()
            .contains("has not delivered this copy's own Lease renewal"),
        "{}",
        op.log_text()
    );
    assert!(
        b_lost,
        "b stopped renewing and was not marked Lost
{}",
        op.log_text()
    );

    proxy.thaw();
    player.with("b", |s| s.up = true);
    env.wait_cluster(
        "home",
        "the fleet reads ready again",
        Duration::from_secs(30),
        |c| condition_reason(c, "MachinesReady") == "AllMachinesReady",
    );
    let status = op.terminate(Duration::from_secs(20));
    assert!(status.success(), "{status:?}\n{}", op.log_text());
    drop(player);
}

/// The exposition passes promtool's checks, and carries the operator's
/// own series.
fn metrics_are_promtool_clean(op: &Operator, halted: bool) {
    let text = metrics_text(op);
    liken_testenv::exposition::promtool_check(&text);
    assert_eq!(
        metric(&text, "liken_cluster_rollout_halted"),
        if halted { 1.0 } else { 0.0 }
    );
    for series in [
        "liken_cluster_machines{phase=\"Ready\"}",
        "liken_cluster_machines{phase=\"Lost\"}",
        "liken_cluster_machines_awaiting_approval",
        "liken_cluster_reboot_turns_outstanding",
        "liken_cluster_operator_errors_total{kind=\"conflict\"}",
        "liken_reconcile_errors_total",
        "liken_watch_restarts_total{resource=\"machines\"}",
        "leader_election_master_status{name=\"liken-system/liken-cluster-operator\"}",
    ] {
        metric(&text, series);
    }
}

/// Edits a CRD's served schema (its openAPIV3Schema), as another
/// release's CRD might differ, so the apiserver stores (or prunes) what
/// this build does not expect.
fn edit_schema(env: &Env, crd_name: &str, edit: impl FnOnce(&mut Value)) {
    let crds = Api::all(liken_kube::request::Resource {
        group: "apiextensions.k8s.io",
        version: "v1",
        plural: "customresourcedefinitions",
        kind: "CustomResourceDefinition",
        namespaced: false,
    });
    let mut crd: DynamicObject = env.admin.get(&crds, crd_name).unwrap();
    edit(&mut crd.0["spec"]["versions"][0]["schema"]["openAPIV3Schema"]);
    env.admin
        .replace::<DynamicObject, _>(&crds, crd_name, &crd)
        .unwrap();
}

/// Drops one check (`key`) from a CRD's schema at `path` (property names
/// from the root), as a newer release's CRD might.
fn loosen(env: &Env, crd_name: &str, path: &[&str], key: &str) {
    edit_schema(env, crd_name, |schema| {
        let mut at = schema;
        for p in path {
            at = &mut at["properties"][*p];
        }
        assert!(
            at.as_object_mut().unwrap().remove(key).is_some(),
            "{crd_name} has no {key} at {path:?}"
        );
    });
}

/// Retries `write` until the loosened CRD takes it.
fn until_accepted<T: std::fmt::Debug>(
    what: &str,
    write: impl Fn() -> Result<T, liken_kube::Error>,
) {
    let end = deadline(Duration::from_secs(30));
    loop {
        let r = write();
        if r.is_ok() {
            return;
        }
        assert!(
            Instant::now() < end,
            "the loosened CRD refused {what}: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A Machine and a Cluster the decoder refuses (a phase, a version scheme
/// a newer release might bring) are each skipped with one Event and one log
/// line naming the field, however often they are written again, and the
/// sweep goes on with the others: the readable Cluster is still operated
/// though the unreadable one sorts first.
fn unreadable_objects_are_skipped(env: &Env, op: &Operator) {
    // A phase this build does not know, on a Machine's status.
    loosen(env, "machines.liken.sh", &["status", "phase"], "enum");
    let m = json!({"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
                   "metadata": {"name": "odd"}, "spec": {}});
    env.admin
        .create::<DynamicObject, _>(&Api::all(MACHINES), &m)
        .unwrap();
    until_accepted("phase Hibernating", || {
        env.admin.merge_patch_status::<DynamicObject>(
            &Api::all(MACHINES),
            "odd",
            &json!({"status": {"phase": "Hibernating"}}),
        )
    });
    // A version scheme this build does not know, on a Cluster's spec from
    // its creation (readable for no moment, so never operated).
    loosen(env, "clusters.liken.sh", &["spec", "version"], "pattern");
    until_accepted("version 2027.1", || {
        env.admin.create::<DynamicObject, _>(
            &Api::all(CLUSTERS),
            &json!({"apiVersion": "liken.sh/v1alpha1", "kind": "Cluster",
                    "metadata": {"name": "aaa-odd"},
                    "spec": {"endpoint": "https://10.0.0.1:6443", "leaders": ["a"],
                             "version": "2027.1"}}),
        )
    });
    for name in ["odd", "aaa-odd"] {
        let end = deadline(Duration::from_secs(20));
        while env.events(name, "UnreadableObject").is_empty() {
            assert!(
                Instant::now() < end,
                "no UnreadableObject Event on {name}\n{}",
                op.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    // Both written again, still unreadable for the same reason: not
    // reported again. The readable Cluster takes a spec change meanwhile,
    // and its status follows it.
    for (api, name) in [(Api::all(MACHINES), "odd"), (Api::all(CLUSTERS), "aaa-odd")] {
        for n in 0..3 {
            env.admin
                .merge_patch::<DynamicObject>(
                    &api,
                    name,
                    &json!({"metadata": {"labels": {"rewritten": n.to_string()}}}),
                )
                .unwrap();
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    env.admin
        .merge_patch::<DynamicObject>(
            &Api::all(CLUSTERS),
            "home",
            &json!({"spec": {"disruptionBudget": {"maxUnavailable": 2}}}),
        )
        .unwrap();
    let home = env.wait_cluster(
        "home",
        "the readable Cluster is still operated",
        Duration::from_secs(20),
        |c| c.status.observed_generation == c.metadata.generation,
    );
    assert_eq!(home.status.machines.total, 3, "{:?}", home.status.machines);
    std::thread::sleep(Duration::from_secs(3));

    let log = op.log_text();
    for (kind, name, field) in [
        ("Machine", "odd", "status.phase"),
        ("Cluster", "aaa-odd", "spec.version"),
    ] {
        let events = env.events(name, "UnreadableObject");
        assert_eq!(events.len(), 1, "{events:#?}");
        assert_eq!(events[0]["type"], "Warning");
        assert!(
            events[0]["note"].as_str().unwrap().contains(field),
            "{}",
            events[0]
        );
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("refuses") && l.contains(&format!("kind={kind} ")))
            .collect();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains(&format!("name={name} ")) && lines[0].contains(field),
            "{}",
            lines[0]
        );
    }
    assert!(!log.contains("cluster=aaa-odd"), "{log}");
    assert!(!log.contains("panicked"));
    let _ = env
        .admin
        .delete(&Api::all(MACHINES), "odd", &Default::default());
    let _ = env
        .admin
        .delete(&Api::all(CLUSTERS), "aaa-odd", &Default::default());
}

/// The fleet's Cluster is the one the deployment names: created from the
/// deployment's copy when the API has none, and a second Cluster that
/// sorts first (the attack a follower's root could make before the
/// machine operator lost clusters: create) is reported, marked
/// Operated=False, and never followed.
fn one_cluster_named_by_the_deployment(env: &Env, op: &Operator) {
    env.clear();
    let end = deadline(Duration::from_secs(20));
    let home = loop {
        if let Ok(Some(c)) = env
            .admin
            .get_opt::<liken_api::Cluster>(&Api::all(CLUSTERS), "home")
        {
            break c;
        }
        assert!(
            Instant::now() < end,
            "the Cluster was not created from the deployment's copy\n{}",
            op.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(home.spec.leaders, ["a"]);
    assert_eq!(home.spec.endpoint, "https://10.0.0.1:6443");
    assert!(
        op.log_text()
            .contains("created the Cluster from the deployment's copy"),
        "{}",
        op.log_text()
    );
    env.admin
        .create::<DynamicObject, _>(
            &Api::all(CLUSTERS),
            &json!({"apiVersion": "liken.sh/v1alpha1", "kind": "Cluster",
                    "metadata": {"name": "aaa-evil"},
                    "spec": {"endpoint": "https://10.0.0.66:6443", "leaders": ["a"],
                             "version": NEW,
                             "releases": {"source": "http://10.0.0.66/channel"}}}),
        )
        .unwrap();
    let evil = env.wait_cluster(
        "aaa-evil",
        "the foreign Cluster marked",
        Duration::from_secs(20),
        |c| c.status.conditions.iter().any(|c| c.type_ == "Operated"),
    );
    let cond = evil
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Operated")
        .unwrap();
    assert_eq!(cond.status, liken_api::ConditionStatus::False);
    assert_eq!(cond.reason, "ForeignCluster");
    assert!(
        cond.message
            .contains("the deployment names its Cluster home"),
        "{}",
        cond.message
    );
    let end = deadline(Duration::from_secs(20));
    while env.events("aaa-evil", "ForeignCluster").is_empty() {
        assert!(
            Instant::now() < end,
            "no ForeignCluster Event
{}",
            op.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let events = env.events("aaa-evil", "ForeignCluster");
    assert_eq!(events[0]["type"], "Warning");
    // Only the marking: no tally, no ledger, no release status on it,
    // while home's status follows home.
    std::thread::sleep(Duration::from_secs(3));
    let evil = env.cluster("aaa-evil");
    assert_eq!(evil.status.machines.total, 0, "{:?}", evil.status);
    assert!(evil.status.reboot_turns.is_empty());
    assert_eq!(
        evil.status.conditions.len(),
        1,
        "{:?}",
        evil.status.conditions
    );
    assert!(!op.log_text().contains("operating cluster cluster=aaa-evil"));
    let _ = env
        .admin
        .delete(&Api::all(CLUSTERS), "aaa-evil", &Default::default());
}

/// An older release's Cluster schema, without status.rebootTurns, prunes
/// the ledger from every status write: no grant goes out (none could be
/// counted), and Progressing says why.
fn a_pruning_schema_stops_grants(env: &Env, op: &Operator) {
    env.clear();
    env.daemon_set(NEW);
    edit_schema(env, "clusters.liken.sh", |schema| {
        let status = schema["properties"]["status"]["properties"]
            .as_object_mut()
            .unwrap();
        assert!(status.remove("rebootTurns").is_some());
    });
    env.create_cluster("home", &["a"], NEW, 2);
    let player = Player::start(env, sims(&[("a", asking(NEW)), ("b", asking(NEW))]));
    env.wait_cluster(
        "home",
        "Progressing says the schema holds the turns back",
        Duration::from_secs(30),
        |c| progressing_says(c, "reboot turns wait for a Cluster schema"),
    );
    std::thread::sleep(Duration::from_secs(4));
    for m in ["a", "b"] {
        assert!(
            !coordination::holds_grant(&env.machine(m).status.conditions),
            "{m} was granted a turn that no ledger counts\n{}",
            op.log_text()
        );
        assert!(env.events(m, "RebootTurnGranted").is_empty(), "{m}");
    }
    assert!(env.cluster("home").status.reboot_turns.is_empty());
    assert!(op.log_text().contains("does not store status.rebootTurns"));
    drop(player);
}

/// The verbs the operator used (from the audit log, since `start`) are
/// the ones the shipped RBAC grants: nothing it used was refused or
/// ungranted by cluster-operator.yaml and cluster-operator-upkeep.yaml
/// together (the upkeep's standing rights are checked by the upkeep
/// tests), and nothing cluster-operator.yaml grants went unused.
fn rbac_is_exactly_what_was_used(env: &Env, start: liken_testenv::audit::AuditMark) {
    let used: Vec<liken_testenv::audit::AuditEvent> = env
        .cp
        .audit_since(start)
        .unwrap()
        .into_iter()
        .filter(|e| e.user == operator_user())
        .collect();
    let read = |file: &str| {
        let path = liken_testenv::workspace_root()
            .join("images/manifests")
            .join(file);
        grants(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let sweep = read("cluster-operator.yaml");
    let mut all = sweep.clone();
    all.extend(read("cluster-operator-upkeep.yaml"));
    let ungranted = compare_rbac(&all, &used).ungranted;
    assert!(
        ungranted.is_empty(),
        "used but not granted (or refused): {ungranted:#?}"
    );
    let unused = compare_rbac(&sweep, &used).unused;
    assert!(unused.is_empty(), "granted but never used: {unused:#?}");
    let verbs: BTreeSet<String> = used
        .iter()
        .map(|e| {
            let r = if e.subresource.is_empty() {
                e.resource.clone()
            } else {
                format!("{}/{}", e.resource, e.subresource)
            };
            format!("{} {r}", e.verb)
        })
        .collect();
    eprintln!("the operator used: {verbs:?}");
}

/// The election Lease's holder.
fn lease_holder(env: &Env) -> String {
    let lease: DynamicObject = env
        .admin
        .get(
            &Api::namespaced(LEASES, HEARTBEAT_NAMESPACE),
            "liken-cluster-operator",
        )
        .unwrap();
    lease.0["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Two copies; the acting one is paused with SIGSTOP at a random moment
/// of a rollout, held until the other copy has taken the Lease, and
/// resumed a random while later (it must then exit: the kubelet would
/// restart it as a standby), twice per run over several randomized runs
/// (`LIKEN_PAUSE_RUNS`, default 3). Never more machines down than the
/// budget, and never a grant outside the stored ledger, in the recorded
/// history.
#[test]
fn two_copies_one_paused_never_exceed_the_budget() {
    let env = Env::start();
    let runs: u64 = std::env::var("LIKEN_PAUSE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("seed {seed} (runs {runs})");
    let mut rand = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut copies = [
        ("copy-a".to_owned(), env.operator("copy-a", &[])),
        ("copy-b".to_owned(), env.operator("copy-b", &[])),
    ];
    for run in 0..runs {
        env.clear();
        env.daemon_set(NEW);
        let budget = 1 + rand(2) as u32;
        let history = History::record(&env);
        env.create_cluster("home", &["m0"], NEW, budget);
        let names = ["m0", "m1", "m2", "m3"];
        let player = Player::start(
            &env,
            names
                .iter()
                .map(|n| ((*n).to_owned(), asking(NEW)))
                .collect(),
        );
        let end = deadline(Duration::from_secs(180));
        let mut pauses = 0;
        while !all_run(&env, &names, NEW) {
            assert!(
                Instant::now() < end,
                "run {run}: the rollout did not finish\n{}\n{}",
                copies[0].1.log_text(),
                copies[1].1.log_text()
            );
            if pauses < 2 {
                std::thread::sleep(Duration::from_millis(rand(2500)));
                let who = lease_holder(&env);
                if let Some(i) = copies.iter().position(|(n, _)| *n == who) {
                    // Frozen until the other copy holds the Lease, then a
                    // random while longer: it wakes believing it acts, with
                    // whatever sweep it was in still under way.
                    copies[i].1.pause();
                    let end = deadline(Duration::from_secs(20));
                    let successor = loop {
                        let h = lease_holder(&env);
                        if !h.is_empty() && h != who {
                            break h;
                        }
                        assert!(
                            Instant::now() < end,
                            "run {run}: no copy took the Lease from the paused {who}\n{}",
                            copies[1 - i].1.log_text()
                        );
                        std::thread::sleep(Duration::from_millis(100));
                    };
                    let extra = rand(2000);
                    std::thread::sleep(Duration::from_millis(extra));
                    copies[i].1.resume();
                    eprintln!(
                        "run {run}: paused {who}; {successor} took the Lease; resumed {extra} ms later"
                    );
                    // The woken copy finds the Lease gone and exits.
                    let end = deadline(Duration::from_secs(20));
                    while copies[i].1.proc.try_wait().unwrap().is_none() {
                        assert!(
                            Instant::now() < end,
                            "run {run}: {who} still runs after losing the Lease\n{}",
                            copies[i].1.log_text()
                        );
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    pauses += 1;
                }
            } else {
                std::thread::sleep(Duration::from_millis(200));
            }
            // A copy that lost the lead exits; the kubelet would start it
            // again as a standby.
            for (i, slot) in ["a", "b"].iter().enumerate() {
                if copies[i].1.proc.try_wait().unwrap().is_some() {
                    let log = copies[i].1.log_text();
                    assert!(log.contains("lost the leader Lease"), "{log}");
                    let name = format!("copy-{slot}-{run}-{pauses}");
                    copies[i] = (name.clone(), env.operator(&name, &[]));
                }
            }
        }
        drop(player);
        std::thread::sleep(Duration::from_secs(1));
        let (machines, clusters) = history.stop();
        let (peak, at) = peak_disruption(&machines);
        assert!(
            peak <= budget as usize,
            "run {run}: {peak} machines down at once ({at}) under maxUnavailable {budget}"
        );
        assert!(peak_ledger(&clusters) <= budget as usize);
        let early = grants_outside_the_ledger(&machines, &clusters);
        assert!(
            early.is_empty(),
            "run {run}: grants not in the stored ledger: {early:#?}"
        );
        assert!(pauses > 0, "run {run}: the rollout ended before any pause");
        eprintln!("run {run}: budget {budget}, peak {peak}, {pauses} pauses");
    }
    a_halt_outlives_the_copy_that_recorded_it(&env, &copies);
}

/// A release fails and the acting copy records the halt; that copy is
/// killed with SIGKILL (no step-down, no last write) and the other takes
/// the Lease. The halt is read back from the Cluster: over several sweeps
/// of the new copy nobody is granted a turn for the failed release.
fn a_halt_outlives_the_copy_that_recorded_it(env: &Env, copies: &[(String, Operator); 2]) {
    let (player, c) = a_failed_release(env);
    let halt = c.status.rollout_halt.clone().unwrap();
    let who = lease_holder(env);
    let i = copies
        .iter()
        .position(|(n, _)| *n == who)
        .unwrap_or_else(|| panic!("the Lease is held by {who:?}, neither copy"));
    copies[i].1.kill();
    let end = deadline(Duration::from_secs(20));
    loop {
        let h = lease_holder(env);
        if !h.is_empty() && h != who {
            break;
        }
        assert!(
            Instant::now() < end,
            "no copy took the Lease from the killed {who}\n{}",
            copies[1 - i].1.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let successor = &copies[1 - i].1;
    let swept = sweeps(successor);
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        sweeps(successor) - swept >= 3.0,
        "the new copy did not sweep\n{}",
        successor.log_text()
    );
    for m in ["a", "b"] {
        assert!(
            !coordination::holds_grant(&env.machine(m).status.conditions),
            "{m} was granted a turn for the halted release\n{}",
            successor.log_text()
        );
    }
    assert!(env.events("b", "RebootTurnGranted").is_empty());
    assert_eq!(
        env.cluster("home").status.rollout_halt.as_ref(),
        Some(&halt),
        "the halt did not outlive its copy"
    );
    drop(player);
}

/// The binary alone: `--help` lists every flag with its default and exits
/// 0; a bad flag, a zero interval and missing credentials each end it
/// with status 1 and a message that says what to do.
#[test]
fn the_binary_explains_itself() {
    let copy = std::env::temp_dir().join(format!("explains-{}.yaml", std::process::id()));
    std::fs::write(
        &copy,
        "apiVersion: liken.sh/v1alpha1\nkind: Cluster\nmetadata: {name: home}\n\
         spec: {endpoint: \"https://10.0.0.1:6443\", leaders: [a]}\n",
    )
    .unwrap();
    let with_copy = format!("--cluster-file={}", copy.display());
    let run = |args: &[&str], env: &[(&str, &str)]| {
        // Every case but the one about the file has the deployment's copy.
        let file: &[&str] = if args.iter().any(|a| a.starts_with("--cluster-file")) {
            &[]
        } else {
            &[with_copy.as_str()]
        };
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_liken-cluster-operator"))
            .args(file)
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, help, _) = run(&["--help"], &[]);
    assert_eq!(code, Some(0));
    for flag in liken_ops::cluster::run::PROGRAM.flags {
        assert!(help.contains(&format!("--{}", flag.name)), "{help}");
        if let Some(default) = flag.default {
            assert!(help.contains(default), "{}: {help}", flag.name);
        }
    }
    for (args, env, says) in [
        (
            &["--bogus"][..],
            &[][..],
            "unknown flag --bogus; run liken-cluster-operator --help",
        ),
        (
            &["--sweep-interval=0s"],
            &[],
            "liken-cluster-operator: --sweep-interval must be longer than zero",
        ),
        (
            &["--kubeconfig=/nonexistent/kubeconfig"],
            &[],
            "/nonexistent/kubeconfig",
        ),
        // No flag, no KUBECONFIG, no service account, no home.
        (&[], &[], "liken-cluster-operator: "),
        (
            &["--cluster-file="],
            &[],
            "liken-cluster-operator: --cluster-file is required: the deployment's cluster.yaml \
             names the one Cluster this operator acts on",
        ),
        (
            &["--cluster-file=/nonexistent/cluster.yaml"],
            &[],
            "cannot read the deployment's Cluster at /nonexistent/cluster.yaml",
        ),
    ] {
        let (code, _, err) = run(args, env);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}
