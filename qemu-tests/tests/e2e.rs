//! End to end: a fleet under QEMU against a control plane on the host,
//! run by liken's own parts (see qemu-tests/src/fleet/).

use std::time::{Duration, Instant};

use qemu_tests::fleet::history::{self, History};
use qemu_tests::fleet::host::{Host, HostSpec, MachineSpec, Reach};
use qemu_tests::fleet::progress::{self, step};
use qemu_tests::fleet::reboots::{self, Path as RebootPath};
use qemu_tests::fleet::{self, Fleet, downtime, hold, rollout};
use qemu_tests::images;
use serde_json::Value;

/// How long a machine may take from power-on to a Ready Node under TCG
/// with the others running.
const TO_READY: Duration = Duration::from_secs(600);

fn node_ready(fleet: &Fleet, name: &str) -> Result<String, String> {
    let node = fleet.get_json(&["node", name])?;
    let ready = node["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or(Value::Null);
    if ready["status"] == "True" {
        Ok(ready["lastHeartbeatTime"].as_str().unwrap_or("").to_owned())
    } else {
        Err(format!("Node {name} Ready={}", ready["status"]))
    }
}

/// A DaemonSet of the stand-in's probe workload (from the release's
/// airgap images): one pod per node, run by the node stand-in in
/// namespaces of its own with a token bound to the pod.
fn probe(fleet: &mut Fleet, version: &str) {
    let manifest = format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: e2e
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: probe
  namespace: e2e
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: probe
  namespace: e2e
spec:
  selector:
    matchLabels: {{app: probe}}
  template:
    metadata:
      labels: {{app: probe}}
    spec:
      serviceAccountName: probe
      hostNetwork: true
      tolerations: [{{operator: Exists}}]
      containers:
        - name: probe
          image: liken.sh/liken-standin-probe:{version}
          args: ["probe", "9201"]
          env:
            - name: NODE_NAME
              valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}
          livenessProbe:
            httpGet: {{path: /healthz, port: 9201}}
            periodSeconds: 10
          securityContext:
            readOnlyRootFilesystem: true
            allowPrivilegeEscalation: false
            capabilities: {{drop: ["ALL"]}}
          volumeMounts:
            - {{name: var-liken, mountPath: /var/lib/liken}}
      volumes:
        - name: var-liken
          hostPath: {{path: /var/lib/liken, type: DirectoryOrCreate}}
"#
    );
    let path = fleet.host.logs().join("probe.yaml");
    std::fs::write(&path, manifest).unwrap();
    let out = fleet
        .host
        .kubectl()
        .args(["apply", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<String> = fleet.machines.iter().map(|m| m.spec.name.clone()).collect();
    for name in names {
        let mark = 0;
        let line = fleet
            .machine(&name)
            .console_after(
                mark,
                "probe: the apiserver says this token is",
                Duration::from_secs(300),
            )
            .unwrap_or_else(|| panic!("{name}: no probe answer"));
        assert!(
            line.contains("system:serviceaccount:e2e:probe bound to node ")
                && line.ends_with(&name),
            "{line}"
        );
        let writable = fleet
            .machine(&name)
            .console_after(
                mark,
                "probe: root filesystem writable",
                Duration::from_secs(10),
            )
            .unwrap_or_default();
        assert!(
            writable.contains("writable: false; /var/lib/liken writable: true"),
            "{writable}"
        );
    }
    fleet.wait_for(
        "the probe pods Running and Ready",
        None,
        Duration::from_secs(300),
        |f| {
            let pods = f.get_json(&["pods", "-n", "e2e"])?;
            let items = pods["items"].as_array().cloned().unwrap_or_default();
            let ready = items
                .iter()
                .filter(|p| {
                    p["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
                })
                .count();
            if ready == f.machines.len() {
                Ok(())
            } else {
                Err(format!("{ready} of {} Ready", items.len()))
            }
        },
    );
}

/// The Cluster's disruption budget in this scenario.
const MAX_UNAVAILABLE: usize = 1;
/// The host's cluster operator's sweep interval (its default, given
/// explicitly so the hold windows below follow it).
const SWEEP: Duration = Duration::from_secs(10);
/// The host's cluster operator's stall limit: 60 s rather than the
/// default 30 minutes, so a wait held for two sweeps plus the stall
/// limit ([`hold::window`]) fits the scenario. A stall only changes the
/// Cluster's Progressing condition; the scenario waits for none.
const STALL: Duration = Duration::from_secs(60);

/// The product's own view, kept as a second opinion: fails the test
/// when the whole watch history so far shows two machines disrupted at
/// once by the status the operators write (a turn held or used, or phase
/// Updating, Booting or Lost: `history::disrupted`).
fn no_two_disrupted(history: &History) {
    let overlaps = history::overlapping_disruptions(&history.records());
    assert!(
        overlaps.is_empty(),
        "two machines were disrupted at once by the operators' status ({} records):\n{}",
        history.len(),
        overlaps.join("\n")
    );
}

/// Fails the test when a watcher of the history relisted (lost its
/// place) or could not read an object: a judgment from a history with a
/// hole in it proves nothing.
fn history_whole(history: &History, after: &str) {
    let holes = history::decide_complete(&history.watches());
    assert!(
        holes.is_empty(),
        "the watch history is not whole after {after}:\n{}",
        holes.join("\n")
    );
}

/// The independent judge (`fleet/downtime.rs`) over `[from, now)`:
/// every machine's downtime from its own console (init's shutdown to
/// its blessing, or to its Node Ready on a new bootID for a slot blessed
/// already; a kill to the same) cross-checked with its Node's bootID,
/// printed; fails the test when more than the budget were down at once
/// or the two sources disagree. Then the operators' own view, the
/// second opinion, and the history's wholeness.
fn judge(fleet: &Fleet, history: &History, from: Instant, after: &str) -> downtime::Judgment {
    let j = fleet.judge(&history.records(), MAX_UNAVAILABLE, from);
    step(&format!(
        "downtime so far by the machines' own consoles and Nodes (after {after}; budget \
         {MAX_UNAVAILABLE}):"
    ));
    let lines = j.lines(from);
    for l in &lines {
        step(&format!("  {l}"));
    }
    let failures = j.failures();
    assert!(
        failures.is_empty(),
        "more than {MAX_UNAVAILABLE} machine(s) down at once, or the machines' own consoles and \
         their Nodes disagree (after {after}):\n{}\nevery downtime:\n{}",
        failures.join("\n"),
        lines.join("\n")
    );
    no_two_disrupted(history);
    history_whole(history, after);
    j
}

/// Holds `machines`' wait from now over [`hold::window`] and fails the
/// test if any of them was granted a turn, rebooted or armed a slot
/// within it (`fleet/hold.rs`).
fn hold_wait(fleet: &Fleet, history: &History, machines: &[&str], what: &str) {
    let window = hold::window(SWEEP, STALL);
    let from = Instant::now();
    step(&format!(
        "holding {what} for {} s (two sweeps and the stall limit): no grant, no reboot, no \
         slot armed on {}",
        window.as_secs(),
        machines.join(", ")
    ));
    std::thread::sleep(window);
    let to = Instant::now();
    let records = history.records();
    let mut broke = Vec::new();
    for (name, signs) in fleet.signs(&records) {
        if machines.contains(&name.as_str()) {
            broke.extend(hold::decide_held(&name, &signs, &records, from, to));
        }
    }
    assert!(
        broke.is_empty(),
        "{what} did not hold for {} s:\n{}",
        window.as_secs(),
        broke.join("\n")
    );
    step(&format!("{what} held for {} s", window.as_secs()));
}

/// Waits for every Node cordoned in the history to be uncordoned
/// (a turn's drain lifted once the machine is back), then checks
/// `drained` were cordoned at least once (so the check was exercised).
fn uncordoned(fleet: &mut Fleet, history: &History, drained: &[&str]) {
    let cordons = fleet.wait_for(
        "every drained Node uncordoned",
        None,
        Duration::from_secs(180),
        |_| {
            let c = history::decide_cordons(&history.records());
            if c.still.is_empty() {
                Ok(c)
            } else {
                Err(format!("still cordoned: {}", c.still.join(", ")))
            }
        },
    );
    step(&format!("cordons so far, by Node: {:?}", cordons.cordoned));
    for name in drained {
        assert!(
            cordons.cordoned.get(*name).is_some_and(|n| *n > 0),
            "{name} took a turn but its Node was never cordoned (drained): {:?}",
            cordons.cordoned
        );
    }
}

/// A Machine's JSON.
fn machine(f: &Fleet, name: &str) -> Result<Value, String> {
    f.get_json(&["machine", name])
}

/// A condition of an object's status, or null.
fn condition<'a>(object: &'a Value, kind: &str) -> &'a Value {
    object["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

/// What a test reads of a Machine: phase, the boot's slot, version and
/// time (the boot's identity), and ReleaseCurrent's reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    phase: String,
    slot: String,
    version: String,
    boot_time: String,
    release: String,
}

fn seen(m: &Value) -> Seen {
    let s = &m["status"];
    let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let rc = condition(m, "ReleaseCurrent");
    Seen {
        phase: text(&s["phase"]),
        slot: text(&s["boot"]["slot"]),
        version: text(&s["boot"]["version"]),
        boot_time: text(&s["boot"]["time"]),
        release: format!("{}: {}", text(&rc["reason"]), text(&rc["message"])),
    }
}

/// Waits for machine `name` Ready on `version` in `slot`, its release
/// current; returns what was seen.
fn wait_on(fleet: &mut Fleet, name: &str, version: &str, slot: &str, within: Duration) -> Seen {
    fleet.wait_for(
        &format!("Machine {name} Ready on {version} in slot {slot}"),
        Some(name),
        within,
        |f| {
            let s = seen(&machine(f, name)?);
            if s.phase == "Ready"
                && s.version == version
                && s.slot == slot
                && s.release.starts_with("Converged")
            {
                Ok(s)
            } else {
                Err(format!("{s:?}"))
            }
        },
    )
}

/// The id of the key the end-to-end channel is signed with.
fn release_key_id() -> String {
    let path = fleet::release_key();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let key: liken_api::signing::ReleaseKey = liken_api::decode::strict(&text, "release.pub")
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    key.id.to_string()
}

/// The Cluster's spec naming `target` from the catalog `releases`.
fn target(fleet: &Fleet, releases: &[&fleet::Release], target: &str) {
    let catalog: Vec<Value> = releases
        .iter()
        .map(|r| serde_json::json!({"version": r.version, "digest": r.digest}))
        .collect();
    let patch = serde_json::json!({"spec": {
        "version": target,
        "disruptionBudget": {"maxUnavailable": 1},
        "releases": {"source": fleet.host.channel_url, "catalog": catalog},
    }});
    merge_patch(fleet, &["cluster", "e2e"], &patch);
    step(&format!("the Cluster's target is now {target}"));
}

/// `kubectl patch <what> --type=merge` as the admin.
fn merge_patch(fleet: &Fleet, what: &[&str], patch: &Value) {
    let out = fleet
        .host
        .kubectl()
        .arg("patch")
        .args(what)
        .args(["--type=merge", "-p"])
        .arg(patch.to_string())
        .output()
        .unwrap_or_else(|e| panic!("kubectl patch: {e}"));
    assert!(
        out.status.success(),
        "kubectl patch {}: {}",
        what.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How the rollout to N+1 reboots (the Cluster's `spec.reboot`):
/// `LIKEN_ROLLOUT_REBOOT` (`kexec`, the default, or `firmware`), which
/// `make bench-rollout` sets to run the same rollout both ways.
fn rollout_reboot() -> &'static str {
    match std::env::var("LIKEN_ROLLOUT_REBOOT").as_deref() {
        Err(_) | Ok("") | Ok("kexec") => "kexec",
        Ok("firmware") => "firmware",
        Ok(other) => panic!("LIKEN_ROLLOUT_REBOOT is {other:?}; set it to kexec or firmware"),
    }
}

/// The rollout's figures for `make bench-rollout`: written to
/// `LIKEN_ROLLOUT_FIGURES` when set, and compared with the other way's
/// run in `LIKEN_ROLLOUT_BASELINE` when set (the ratio checked when
/// `LIKEN_ROLLOUT_TARGET=check`).
fn rollout_figures(figures: &rollout::Figures) {
    if let Ok(path) = std::env::var("LIKEN_ROLLOUT_FIGURES") {
        let text = serde_json::to_string_pretty(figures).unwrap();
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {path}: {e}"));
        step(&format!("  the rollout's figures are in {path}"));
    }
    let Ok(path) = std::env::var("LIKEN_ROLLOUT_BASELINE") else {
        return;
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    let other: rollout::Figures =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (kexec, firmware) = match (figures.reboot.as_str(), other.reboot.as_str()) {
        ("kexec", "firmware") => (figures, &other),
        ("firmware", "kexec") => (&other, figures),
        (a, b) => panic!("{path} holds a rollout by {b}, this one went by {a}: nothing to compare"),
    };
    let (lines, ratio) = rollout::compare(kexec, firmware);
    step("the same rollout by kexec and by the firmware:");
    for l in &lines {
        step(&format!("  {l}"));
    }
    if std::env::var("LIKEN_ROLLOUT_TARGET").as_deref() == Ok("check") {
        let ratio = ratio.unwrap_or_else(|| panic!("the two rollouts share no machine: {lines:?}"));
        assert!(
            ratio >= rollout::KEXEC_TARGET,
            "kexec's rollout is only {ratio:.2}x faster than the firmware's (target {:.1}x)",
            rollout::KEXEC_TARGET
        );
    }
}

/// The Machine's `status.boot.via` and `viaReason`.
fn booted_via(fleet: &Fleet, name: &str) -> (String, String) {
    let m = machine(fleet, name).unwrap_or_default();
    let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
    (
        text(&m["status"]["boot"]["via"]),
        text(&m["status"]["boot"]["viaReason"]),
    )
}

/// How long one machine's turn may take under TCG with the others
/// running: download, write, drain, reboot, boot, blessing.
const TURN: Duration = Duration::from_secs(1200);

/// Issue 14's scenario (`make test-e2e`): three machines (one leader,
/// two followers, one of them Manual) installed from one stick on
/// release N, against the host's control plane, run by their own
/// operators and the cluster operator on the host.
///
/// 1. The wiring: each Node registered and kept Ready by the node
///    stand-in, each boot blessed by init from it, the cluster operator
///    leading on the host, a DaemonSet's pod (the stand-in's probe from
///    the release's airgap images) on every machine with a token bound
///    to its node; all three Machines Ready on N in slot A with their
///    boot records, reported by their own machine operators; the
///    Cluster tallies 3/3.
///    The channel and every release in it are signed by a key `make
///    e2e-images` made; the deployment trusts it, and the cluster
///    operator says it takes channel.yaml only signed by that key.
/// 2. N+1, published in the channel `liken serve` shares, set as the
///    target: each machine downloads it, has init write slot B (init
///    says it checked the signature against the layer's key), takes
///    its turn, reboots and reports N+1; the Manual one shows
///    UpdatePending and stays on N until `liken approve-reboot`. From
///    the whole watch history of Machines and Cluster: never two
///    machines disrupted at once. The time of each turn and its parts
///    are printed (the rollout benchmark's figures).
/// 3. `liken request-reboot` reboots one machine through a turn.
/// 4. A machine's power pulled: its Machine turns Lost within the stale
///    limit, and Ready again when it is powered on.
/// 5. N+2, whose node never becomes healthy: the leader (first while
///    the operator DaemonSet lags) boots it, is never blessed, spends
///    its tries and falls back to N+1; the rollout halts with
///    ReleaseFailed naming N+2 and the machine; the followers stay on
///    N+1, on the same boot.
///
/// On a missed wait the test fails with the last console lines of the
/// machine concerned (see [`Fleet::wait_for`]).
#[test]
#[ignore = "make test-e2e runs it: about 20 minutes under TCG"]
fn a_fleet_upgrades_itself_one_machine_at_a_time() {
    let (channel, releases) = fleet::channel();
    let (n, n1, n2) = (&releases[0], &releases[1], &releases[2]);
    let dir = fleet::dir("fleet");
    let specs = [
        MachineSpec::numbered(1, true, false),
        MachineSpec::numbered(2, false, false),
        MachineSpec::numbered(3, false, true),
    ];
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    let (leader, auto, manual) = (names[0].clone(), names[1].clone(), names[2].clone());
    let host = Host::start(&HostSpec {
        dir: &dir,
        liken: &images().liken,
        reach: Reach::Slirp,
        cluster: "e2e",
        machines: &specs,
        channel,
        release: Some((&n.version, &n.digest)),
        trusted: Some(&fleet::release_key()),
        node_cidrs: false,
    });
    // A trial boot that is not healthy reboots after this long. Healthy
    // ones bless 5 to 15 s after init starts under TCG (the first boots
    // after install, with the others installing beside them, included),
    // so 90 s leaves a wide margin while N+2's three failed trials cost
    // about six minutes rather than the default's three quarters of an
    // hour.
    let mut fleet = Fleet::install(
        "fleet",
        host,
        &n.dir,
        &n.version,
        &dir,
        &["liken.bless-deadline=90"],
    );

    // 1. The wiring, then three machines Ready on N. The node stand-in
    // registers each Node and keeps it Ready, and init blesses each
    // boot from that Node.
    for name in &names {
        let heartbeat = fleet.wait_for(&format!("Node {name} Ready"), Some(name), TO_READY, |f| {
            node_ready(f, name)
        });
        step(&format!("{name}: Ready, heartbeat {heartbeat}"));
        let blessed = fleet
            .machine(name)
            .console_after(0, "liken: bless: ", TO_READY)
            .unwrap_or_else(|| {
                fleet.fail(Some(name), "init never said whether it blessed the boot")
            });
        assert!(
            blessed.contains("liken: bless: ok")
                && blessed.contains(&format!("node {name} is Ready with a heartbeat")),
            "{blessed}"
        );
    }
    fleet.wait_for(
        "the release's CRDs (applied by the leader)",
        Some(&leader),
        TO_READY,
        |f| f.get_json(&["crd", "machines.liken.sh"]).map(drop),
    );
    let history = History::start(&fleet.host.admin_client());
    // The cluster operator on the host, under the RBAC the release's
    // manifests made (the leader applied them), leading.
    let operator = fleet::operator_binary("liken-cluster-operator");
    fleet.host.start_cluster_operator(
        &operator,
        TO_READY,
        &[
            format!("--sweep-interval={}s", SWEEP.as_secs()),
            format!("--rollout-stall-after={}s", STALL.as_secs()),
        ],
    );
    fleet.wait_for(
        "the cluster operator leading (its Lease held by the host's copy)",
        None,
        Duration::from_secs(180),
        |f| {
            let lease = f.get_json(&["lease", "-n", "liken-system", "liken-cluster-operator"])?;
            match lease["spec"]["holderIdentity"].as_str() {
                Some("host") => Ok(()),
                other => Err(format!("holder {other:?}")),
            }
        },
    );
    // The machine operator (the release's DaemonSet, run by the
    // stand-in from the release's image with a token bound to its pod)
    // seeds the Machines and reports each boot, on N as its boot record
    // says.
    let mut boots = std::collections::BTreeMap::new();
    for name in &names {
        let s = wait_on(&mut fleet, name, &n.version, "A", TO_READY);
        assert!(!s.boot_time.is_empty(), "{name}: no boot record: {s:?}");
        boots.insert(name.clone(), s);
    }
    probe(&mut fleet, &n.version);
    fleet.wait_for("the Cluster's tally 3/3", None, TO_READY, |f| {
        let c = f.get_json(&["cluster", "e2e"])?;
        match c["status"]["machines"]["summary"].as_str() {
            Some("3/3") => Ok(()),
            other => Err(format!("summary {other:?}")),
        }
    });

    // The channel is signed by the fleet's key (make e2e-images), and
    // the cluster operator took that key from the deployment's trust
    // root. (It runs on the host here, where the Cluster's source, the
    // host as the guests reach it, is not reachable, so its channel
    // verdicts are tested against nginx in liken-ops' the_channel_is_polled.)
    let key_id = release_key_id();
    let log = fleet.host.logs().join("liken-cluster-operator.log");
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        said.contains("channel.yaml is taken only when signed by a key the deployment trusts")
            && said.contains(&format!("keys={key_id}")),
        "the cluster operator did not take the deployment's trust root; see {}",
        log.display()
    );

    // From here the fleet is up: the independent judge counts every
    // downtime after this moment against the budget.
    let fleet_up = Instant::now();
    history_whole(&history, "the wiring");

    // 2. The rollout to N+1, by kexec unless the benchmark asks for the
    // firmware.
    let via = rollout_reboot();
    let via_path = if via == "kexec" {
        RebootPath::Kexec
    } else {
        RebootPath::Firmware
    };
    if via != "kexec" {
        merge_patch(
            &fleet,
            &["cluster", "e2e"],
            &serde_json::json!({"spec": {"reboot": via}}),
        );
    }
    step(&format!("the rollout to N+1 reboots by {via}"));
    let mark = history.len();
    let rollout_began = std::time::Instant::now();
    target(&fleet, &[n, n1], &n1.version);
    fleet.wait_for(
        &format!("the Manual {manual} UpdatePending on N, its reboot waiting for approval"),
        Some(&manual),
        TURN,
        |f| {
            let s = seen(&machine(f, &manual)?);
            if s.phase == "UpdatePending"
                && s.version == n.version
                && s.release.starts_with("RebootPending")
            {
                Ok(())
            } else {
                Err(format!("{s:?}"))
            }
        },
    );
    for name in [&leader, &auto] {
        wait_on(&mut fleet, name, &n1.version, "B", TURN);
    }
    let waiting = seen(&machine(&fleet, &manual).unwrap_or_default());
    assert!(
        waiting.release.starts_with("RebootPending"),
        "the Manual machine must wait for approval: {waiting:?}"
    );
    assert_eq!(
        (waiting.phase.as_str(), &waiting.boot_time),
        ("UpdatePending", &boots[&manual].boot_time),
        "the Manual machine must wait on its first boot until approved: {waiting:?}"
    );
    step(&format!("{manual} still waits: {}", waiting.release));
    hold_wait(
        &fleet,
        &history,
        &[&manual],
        &format!("the Manual {manual}'s wait for approval"),
    );
    let still = seen(&machine(&fleet, &manual).unwrap_or_default());
    assert!(
        still.release.starts_with("RebootPending") && still.boot_time == waiting.boot_time,
        "the Manual machine must still wait after the window: {still:?}"
    );
    let approved = fleet.host.liken_on_cluster("approve-reboot", &[&manual]);
    step(&format!(
        "liken approve-reboot {manual}: {}",
        approved.trim()
    ));
    wait_on(&mut fleet, &manual, &n1.version, "B", TURN);
    let rollout_took = rollout_began.elapsed().as_secs_f64();
    // init, the last word, checked N+1's signature against the trust
    // root the stick's layer carried before it wrote slot B.
    for name in &names {
        let needle = format!("release {} signed by trusted key {key_id}", n1.version);
        if fleet
            .machine(name)
            .console_after(0, &needle, Duration::from_secs(5))
            .is_none()
        {
            fleet.fail(Some(name), &format!("init never said: {needle}"));
        }
    }
    let rollout_records = history.since(mark);
    judge(&fleet, &history, fleet_up, "the rollout to N+1");
    let turns = rollout::decide_turns(&rollout_records, &n1.version);
    step("the rollout to N+1, from the watch history (the rollout benchmark's figures):");
    for line in rollout::report(&turns, &n1.version) {
        step(&format!("  {line}"));
    }
    // Issue 14's target: the three-machine rolling upgrade within 20
    // minutes under TCG on the 2-core build machines. Checked by `make
    // bench-rollout` (LIKEN_ROLLOUT_TARGET=check); printed always, as
    // load from other work on the machine stretches it.
    let limit = 1200.0;
    step(&format!(
        "  rollout to N+1: {rollout_took:.0} s from setting the target to all three Ready on it \
         (target < {limit:.0} s: {:.2}x)",
        rollout_took / limit
    ));
    if std::env::var("LIKEN_ROLLOUT_TARGET").as_deref() == Ok("check") {
        assert!(
            rollout_took < limit,
            "the rollout took {rollout_took:.0} s, over the {limit:.0} s target"
        );
    }
    assert_eq!(
        turns.iter().filter(|t| t.ready.is_some()).count(),
        3,
        "every machine's turn to {} should be in the history: {turns:?}",
        n1.version
    );
    // Each turn's reboot went the Cluster's way, by the consoles (a
    // firmware line before the new kernel or none) and by the Machines.
    let reboots_now = fleet.reboots();
    for t in &turns {
        let granted = t.granted.expect("every turn was granted");
        let first = reboots_now
            .iter()
            .filter(|r| r.machine == t.machine && r.shutdown >= granted)
            .min_by_key(|r| r.shutdown)
            .unwrap_or_else(|| panic!("{}: no reboot on its console after its grant", t.machine));
        assert_eq!(
            first.path, via_path,
            "{}'s turn rebooted by {:?}, the Cluster says {via}: {first:?}",
            t.machine, first.path
        );
        let (booted, why) = booted_via(&fleet, &t.machine);
        assert_eq!(
            booted, via,
            "{}: status.boot.via {booted:?} ({why})",
            t.machine
        );
    }
    rollout_figures(&rollout::decide_figures(via, &turns, &reboots_now));
    fleet.wait_for("the Cluster's tally 3/3 on N+1", None, TO_READY, |f| {
        let c = f.get_json(&["cluster", "e2e"])?;
        match c["status"]["machines"]["summary"].as_str() {
            Some("3/3") => Ok(()),
            other => Err(format!("summary {other:?}")),
        }
    });
    for name in &names {
        let s = seen(&machine(&fleet, name).unwrap_or_default());
        boots.insert(name.clone(), s);
    }
    uncordoned(&mut fleet, &history, &[&leader, &auto, &manual]);

    // 3. request-reboot: a new boot of the same release, through a turn,
    // the other way than the rollout's: the Machine's spec.reboot
    // replaces the Cluster's for this machine (a setting, never itself a
    // reason to reboot).
    let other = if via == "kexec" { "firmware" } else { "kexec" };
    merge_patch(
        &fleet,
        &["machine", &auto],
        &serde_json::json!({"spec": {"reboot": other}}),
    );
    step(&format!("{auto}: spec.reboot {other}"));
    let before = boots[&auto].boot_time.clone();
    let asked_at = Instant::now();
    let asked = fleet.host.liken_on_cluster("request-reboot", &[&auto]);
    step(&format!("liken request-reboot {auto}: {}", asked.trim()));
    let after = fleet.wait_for(
        &format!("{auto} booted again on N+1 after request-reboot"),
        Some(&auto),
        TURN,
        |f| {
            let s = seen(&machine(f, &auto)?);
            if s.boot_time != before && s.phase == "Ready" && s.version == n1.version {
                Ok(s)
            } else {
                Err(format!("{s:?}"))
            }
        },
    );
    // It used a turn, and its new boot's time is the boot's own: within
    // the downtime its console shows, not a default or the old boot's.
    let records = history.records();
    let turn = history::granted_at(&records, &auto, asked_at, Instant::now());
    assert!(
        turn.is_some(),
        "request-reboot rebooted {auto} without a reboot turn (no RebootApproved in the history)"
    );
    let j = judge(&fleet, &history, fleet_up, "request-reboot");
    let rebooted: Vec<&downtime::Interval> = j
        .intervals
        .iter()
        .filter(|i| i.machine == auto && i.start >= asked_at)
        .collect();
    assert_eq!(
        rebooted.len(),
        1,
        "request-reboot should reboot {auto} once by its console: {rebooted:?}"
    );
    let reported = after
        .boot_time
        .parse::<liken_api::Time>()
        .unwrap_or_else(|e| panic!("{auto}'s boot time {:?}: {e}", after.boot_time));
    if let Err(e) = downtime::decide_boot_time(reported.to_system(), rebooted[0], progress::wall) {
        panic!("{auto}'s boot after request-reboot: {e}");
    }
    step(&format!(
        "{auto}: request-reboot took a turn and rebooted once; its boot time {} lies in its \
         downtime ({})",
        after.boot_time,
        rebooted[0].line(Instant::now())
    ));
    let (booted, why) = booted_via(&fleet, &auto);
    assert_eq!(booted, other, "{auto}: status.boot.via {booted:?} ({why})");
    if other == "firmware" {
        assert!(
            why.contains("spec.reboot: firmware"),
            "{auto}: viaReason {why:?}"
        );
    }
    let last = fleet
        .reboots()
        .into_iter()
        .filter(|r| r.machine == auto)
        .max_by_key(|r| r.shutdown)
        .unwrap_or_else(|| panic!("{auto}: no reboot on its console"));
    assert_eq!(
        last.path,
        if other == "kexec" {
            RebootPath::Kexec
        } else {
            RebootPath::Firmware
        },
        "{auto}'s request-reboot by its console: {last:?}"
    );
    step(&format!(
        "{auto}: booted by {other} as its Machine asked ({:.1} s from shutdown to kernel by its \
         console)",
        last.to_kernel.as_secs_f64()
    ));
    boots.insert(auto.clone(), after);
    uncordoned(&mut fleet, &history, &[]);

    // 4. Power pulled: Lost within the stale limit, back when on again.
    fleet.machine(&manual).kill();
    let pulled = std::time::Instant::now();
    fleet.wait_for(
        &format!("{manual} Lost after its power was pulled"),
        Some(&manual),
        Duration::from_secs(180),
        |f| {
            let s = seen(&machine(f, &manual)?);
            if s.phase == "Lost" {
                Ok(())
            } else {
                Err(format!("{s:?}"))
            }
        },
    );
    let lost_after = pulled.elapsed().as_secs();
    // The stale limit (40 s) plus one sweep (10 s) and the watch's delay.
    assert!(
        lost_after <= 90,
        "{manual} turned Lost only after {lost_after} s"
    );
    fleet.machine(&manual).boot();
    let back = wait_on(&mut fleet, &manual, &n1.version, "B", TO_READY);
    boots.insert(manual.clone(), back);
    judge(&fleet, &history, fleet_up, "the power cut");

    // 5. N+2 never becomes healthy: the leader falls back and the
    // rollout halts.
    target(&fleet, &[n, n1, n2], &n2.version);
    let halt = fleet.wait_for(
        "the rollout of N+2 halted (ReleaseFailed)",
        Some(&leader),
        Duration::from_secs(3600),
        |f| {
            let c = f.get_json(&["cluster", "e2e"])?;
            let p = condition(&c, "Progressing");
            if p["reason"] == "ReleaseFailed" {
                Ok(p["message"].as_str().unwrap_or("").to_owned())
            } else {
                let s = seen(&machine(f, &leader)?);
                Err(format!("Progressing {p}; {leader}: {s:?}"))
            }
        },
    );
    assert!(
        halt.contains(&n2.version) && halt.contains(&leader),
        "the halt should name {} and {leader}: {halt}",
        n2.version
    );
    step(&format!("the Cluster says: {halt}"));
    let fell_back = seen(&machine(&fleet, &leader).unwrap_or_default());
    assert_eq!(
        (fell_back.version.as_str(), fell_back.slot.as_str()),
        (n1.version.as_str(), "B"),
        "{leader} should run N+1 from slot B again: {fell_back:?}"
    );
    let gave_up = fleet
        .machine(&leader)
        .console_after(0, "did not become healthy within", Duration::from_secs(5))
        .unwrap_or_default();
    assert!(
        !gave_up.is_empty(),
        "{leader}'s init never gave up on N+2's boot"
    );
    step(&format!("{leader}: {gave_up}"));
    for name in [&auto, &manual] {
        let s = seen(&machine(&fleet, name).unwrap_or_default());
        assert_eq!(
            (s.version.as_str(), s.slot.as_str(), &s.boot_time),
            (n1.version.as_str(), "B", &boots[name].boot_time),
            "{name} should stay on N+1, on the same boot, while N+2 is halted: {s:?}"
        );
    }
    let j = judge(&fleet, &history, fleet_up, "the halt of N+2");
    let fell_back: Vec<&downtime::Interval> = j
        .intervals
        .iter()
        .filter(|i| i.machine == leader && i.boots > 1)
        .collect();
    assert!(
        !fell_back.is_empty(),
        "{leader}'s failed trials and fallback should show as one downtime of several boots"
    );
    let open: Vec<String> = j
        .intervals
        .iter()
        .filter(|i| i.end.is_none())
        .map(|i| i.line(j.until))
        .collect();
    assert!(
        open.is_empty(),
        "by their own consoles, machines are still down at the end:\n{}",
        open.join("\n")
    );
    hold_wait(
        &fleet,
        &history,
        &[&leader, &auto, &manual],
        &format!("the halt of {}", n2.version),
    );
    uncordoned(&mut fleet, &history, &[]);
    let whole = judge(&fleet, &history, fleet_up, "the whole scenario");
    // The reboots of the whole scenario by path, judged from the
    // consoles: every kexec reached its kernel sooner after init's last
    // line than any firmware reboot did, and the downtimes of each path
    // are printed beside each other.
    let paths = reboots::decide_paths(&fleet.reboots(), &whole.intervals, whole.until);
    step("the reboots by their consoles (a firmware line before the kernel, or none):");
    for l in paths.lines() {
        step(&format!("  {l}"));
    }
    if let Some(problem) = &paths.problem {
        panic!("{problem}: {:?}", paths.lines());
    }
}
