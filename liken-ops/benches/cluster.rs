//! `make bench`: the cluster operator's targets, each printed beside a
//! reference measured in the same run.
//!
//! 1. One sweep's decisions (heartbeat judgement, the fleet verdict, the
//!    maintenance-window gate, the rollout, the composed Cluster status)
//!    over 10,000 Machines, one in 50 asking for a turn outside the
//!    Cluster's maintenance windows: under 10 ms. Reference: decoding the same 10,000 Machines from the JSON a
//!    LIST returns, which every informer pays once per relist.
//! 2. A settled fleet of 100 Machines: zero writes over 10 sweeps,
//!    counted in the apiserver's audit log. Reference: the writes the
//!    operator made while the same fleet settled, and its election
//!    renewals in the quiet window.
//! 3. The stripped static binary under 6 MB, beside kubectl's.
//! 4. Resident memory under 20 MB with 1,000 Machines watched, beside the
//!    peak RSS of `kubectl get machines -o json` listing the same 1,000.
//!
//! `make bench` passes the stripped static release binary in
//! `LIKEN_CLUSTER_OPERATOR_BINARY` and fails when a target is missed.
//! `LIKEN_BENCH_SMOKE=1` (`make bench-smoke`, part of `make test`) runs it
//! all once at a tiny size with the test build of the binary; its figures
//! are not measurements and no target is checked.

#[path = "../tests/cluster_operator/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use harness::{Env, NEW, deadline, operator_user};
use liken_api::cluster::{ClusterSpec, DisruptionBudget};
use liken_api::coordination::{HEARTBEAT_LABEL, HEARTBEAT_NAMESPACE};
use liken_api::maintenance::{MaintenanceSpec, MaintenanceWindow, Weekday};
use liken_api::{Cluster, Machine, Time};
use liken_kube::request::{LEASES, MACHINES};
use liken_kube::{Api, Client, DynamicObject};
use liken_ops::cluster::fleet::{Judged, decide_fleet_sweep};
use liken_ops::cluster::heartbeat::Sightings;
use liken_ops::cluster::rollout::{RolloutInput, Template, decide_rollout};
use liken_ops::cluster::status::{Extras, compose_status};
use liken_ops::cluster::windows;
use liken_ops::windows::{ZONEINFO, Zones};
use serde_json::json;

struct Size {
    decisions: usize,
    settled: usize,
    watched: usize,
    rounds: usize,
    smoke: bool,
}

impl Size {
    fn from_env() -> Size {
        if std::env::var("LIKEN_BENCH_SMOKE").is_ok_and(|v| v == "1") {
            Size {
                decisions: 200,
                settled: 5,
                watched: 20,
                rounds: 1,
                smoke: true,
            }
        } else {
            Size {
                decisions: 10_000,
                settled: 100,
                watched: 1_000,
                rounds: 20,
                smoke: false,
            }
        }
    }
}

/// A Machine as a settled fleet has it, as the API server sends it.
fn machine_json(i: usize) -> serde_json::Value {
    machine_json_with(i, false)
}

/// A Machine as the API server sends it; with `rolling`, one in 50 asks
/// for a turn (so the maintenance-window gate has work) and one in 500
/// declares windows of its own.
fn machine_json_with(i: usize, rolling: bool) -> serde_json::Value {
    let name = format!("bench-{i:05}");
    let t = "2026-12-01T12:00:00Z";
    let asking = rolling && i % 50 == 1;
    let mut spec = json!({"hostname": name, "rebootPolicy": "Auto",
                          "sysctls": {"vm.max_map_count": "262144"},
                          "network": {"interfaces": [{"name": "eth0", "dhcp": true}]}});
    if rolling && i % 500 == 1 {
        spec["maintenance"] = json!({"windows": [
            {"days": ["Fri"], "start": "07:00", "duration": "2h", "timeZone": "UTC"}]});
    }
    let release = if asking {
        json!({"type": "ReleaseCurrent", "status": "False", "reason": "AwaitingTurn", "message": "", "lastTransitionTime": t})
    } else {
        json!({"type": "ReleaseCurrent", "status": "True", "reason": "Converged", "message": "", "lastTransitionTime": t})
    };
    json!({
        "apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "resourceVersion": format!("{}", 1000 + i), "generation": 1,
                     "uid": format!("00000000-0000-0000-0000-{i:012}")},
        "spec": spec,
        "status": {
            "phase": if asking { "UpdatePending" } else if i.is_multiple_of(97) { "Downloading" } else { "Ready" },
            "role": if i < 3 { "leader" } else { "follower" },
            "observedGeneration": 1,
            "boot": {"time": t, "slot": "A", "version": NEW},
            "release": {"running": NEW, "target": NEW},
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Converged", "message": "", "lastTransitionTime": t},
                {"type": "SysctlsApplied", "status": "True", "reason": "Converged", "message": "", "lastTransitionTime": t},
                {"type": "NetworkConfigured", "status": "True", "reason": "Converged", "message": "", "lastTransitionTime": t},
                release
            ]
        }
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// 1. The decisions of one sweep over `n` Machines.
fn decisions(size: &Size) -> Option<String> {
    let n = size.decisions;
    let list = json!({"items": (0..n).map(|i| machine_json_with(i, true)).collect::<Vec<_>>()});
    let bytes = serde_json::to_vec(&list).unwrap();
    let mut decode_times = Vec::new();
    let mut machines: Vec<Arc<Machine>> = Vec::new();
    for _ in 0..size.rounds {
        let t = Instant::now();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        machines = v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                Arc::new(liken_api::decode::wire_value::<Machine>(m.clone(), "bench").unwrap())
            })
            .collect();
        decode_times.push(t.elapsed());
    }
    let mut cluster = Cluster::new(
        "home",
        ClusterSpec {
            endpoint: "https://10.0.0.1:6443".into(),
            leaders: vec!["bench-00000".into()],
            version: Some(liken_api::Version::parse(NEW).unwrap()),
            disruption_budget: Some(DisruptionBudget {
                max_unavailable: Some(3),
            }),
            // The sweep judges every asking machine against these (the
            // bench's clock reads a Friday morning, so they are closed).
            maintenance: Some(MaintenanceSpec {
                windows: Some(vec![MaintenanceWindow {
                    days: vec![Weekday::Sat, Weekday::Sun],
                    start: "02:00".into(),
                    duration: "4h".into(),
                    time_zone: "Europe/Berlin".into(),
                }]),
            }),
            ..ClusterSpec::default()
        },
    );
    cluster.metadata.generation = 1;
    let mut zones = Zones::new(ZONEINFO);
    let mut sightings = Sightings::new();
    let t0 = Instant::now();
    sightings.begin(t0);
    for m in &machines {
        sightings.observe(
            &m.metadata.name,
            "2026-12-01T12:00:00.000000Z",
            t0,
            SystemTime::now(),
        );
    }
    let unreadable = BTreeSet::new();
    let mut sweep_times = Vec::new();
    for round in 0..size.rounds {
        let now = t0 + Duration::from_secs(60 + round as u64);
        let t = Instant::now();
        let judged: Vec<Judged<'_>> = machines
            .iter()
            .map(|m| {
                Judged::new(
                    m,
                    sightings.judge(&m.metadata.name, now, Duration::from_secs(40)),
                )
            })
            .collect();
        let fleet = decide_fleet_sweep(&judged);
        let now_wall = Time::from_unix(1_800_000_000);
        let zone_map = windows::load_zones(&mut zones, &cluster, &judged);
        let gate = windows::decide_gate(&cluster, &judged, zone_map, now_wall);
        let rollout = decide_rollout(&RolloutInput {
            cluster: &cluster,
            machines: &judged,
            unreadable: &unreadable,
            template: &Template::Unlabelled,
            watched_for: Duration::from_secs(3600),
            stale_after: Duration::from_secs(40),
            stall_after: Duration::from_secs(1800),
            now: Time::from_unix(1_800_000_000),
            windows: &gate,
        });
        // The gate did its work: the fleet's asking machines wait for
        // Saturday, those with their own Friday window may be granted.
        assert!(!gate.allows("bench-00051") && gate.allows("bench-00501"));
        assert!(
            gate.why("bench-00051")
                .is_some_and(|w| w.contains("Europe/Berlin"))
        );
        let status = compose_status(
            &cluster,
            &fleet,
            &rollout,
            &Extras::default(),
            Time::from_unix(1_800_000_000),
        );
        sweep_times.push(t.elapsed());

        cluster.status = status;
    }
    let (sweep, decode) = (median(sweep_times), median(decode_times));
    println!(
        "cluster operator: one sweep's decisions over {n} Machines {:.2} ms (median of {}; target < 10 ms): \
         {:.2}x the {:.1} ms of decoding the same Machines from a LIST",
        ms(sweep),
        size.rounds,
        ms(sweep) / ms(decode),
        ms(decode)
    );
    (!size.smoke && ms(sweep) >= 10.0)
        .then(|| format!("a sweep's decisions took {:.2} ms", ms(sweep)))
}

/// Creates Machines `from..to` with Ready statuses and heartbeat Leases,
/// on four threads.
fn create_fleet(admin: &Client, from: usize, to: usize) {
    let per = (to - from).div_ceil(4).max(1);
    std::thread::scope(|s| {
        for start in (from..to).step_by(per) {
            let admin = admin.clone();
            s.spawn(move || {
                for i in start..(start + per).min(to) {
                    let mut m = machine_json(i);
                    let status = m["status"].take();
                    m["metadata"] = json!({"name": m["metadata"]["name"]});
                    let created: Machine = admin.create(&Api::all(MACHINES), &m).unwrap();
                    let mut body = serde_json::to_value(&created).unwrap();
                    body["status"] = status;
                    let name = created.metadata.name.clone();
                    admin
                        .replace_status::<Machine, _>(&Api::all(MACHINES), &name, &body)
                        .unwrap();
                    let lease = json!({
                        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": {"name": name, "namespace": HEARTBEAT_NAMESPACE,
                                     "labels": {HEARTBEAT_LABEL: "true"}},
                        "spec": {"holderIdentity": name, "renewTime": liken_kube::microtime::now()},
                    });
                    admin
                        .create::<DynamicObject, _>(
                            &Api::namespaced(LEASES, HEARTBEAT_NAMESPACE),
                            &lease,
                        )
                        .unwrap();
                }
            });
        }
    });
}

/// Renews every heartbeat Lease every `every`, until dropped.
struct Renewer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Renewer {
    fn start(admin: &Client, names: Vec<String>, every: Duration) -> Renewer {
        let stop = Arc::new(AtomicBool::new(false));
        let (admin, flag) = (admin.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                let started = Instant::now();
                for n in &names {
                    let _ = admin.merge_patch::<DynamicObject>(
                        &Api::namespaced(LEASES, HEARTBEAT_NAMESPACE),
                        n,
                        &json!({"spec": {"renewTime": liken_kube::microtime::now()}}),
                    );
                }
                while started.elapsed() < every && !flag.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        Renewer {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Renewer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn kib(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        // cargo's test harness asks for the list of benchmarks.
        return;
    }
    let size = Size::from_env();
    if size.smoke {
        println!(
            "cluster operator bench: smoke size (LIKEN_BENCH_SMOKE=1): the figures below are not measurements"
        );
    }
    let mut missed: Vec<String> = Vec::new();
    missed.extend(decisions(&size));

    let binary = std::env::var("LIKEN_CLUSTER_OPERATOR_BINARY")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_liken-cluster-operator").to_owned());
    let env = Env::start();
    env.daemon_set(NEW);
    let kubectl = liken_testenv::testenv_bin("kubectl").unwrap();

    // 3. The binary.
    let bytes = std::fs::metadata(&binary).unwrap().len();
    let kubectl_bytes = std::fs::metadata(&kubectl).unwrap().len();
    println!(
        "cluster operator: binary {:.2} MB ({binary}; target < 6 MB): {:.2}x kubectl's {:.1} MB",
        bytes as f64 / 1e6,
        bytes as f64 / kubectl_bytes as f64,
        kubectl_bytes as f64 / 1e6
    );
    if !size.smoke && bytes >= 6_000_000 {
        missed.push(format!("the binary is {bytes} bytes"));
    }

    // 2. A settled fleet.
    let cluster = json!({
        "apiVersion": "liken.sh/v1alpha1", "kind": "Cluster",
        "metadata": {"name": "home"},
        "spec": {"endpoint": "https://10.0.0.1:6443", "leaders": ["bench-00000"], "version": NEW},
    });
    env.admin
        .create::<Cluster, _>(&Api::all(liken_kube::request::CLUSTERS), &cluster)
        .unwrap();
    create_fleet(&env.admin, 0, size.settled);
    let names = |n: usize| (0..n).map(|i| format!("bench-{i:05}")).collect::<Vec<_>>();
    let renewer = Renewer::start(&env.admin, names(size.settled), Duration::from_secs(5));
    let start = env.cp.audit_mark().unwrap();
    // Production intervals but a 1 s sweep, so ten sweeps take ten seconds.
    let args = [
        "--sweep-interval=1s",
        "--heartbeat-stale-after=40s",
        "--lease-duration=15s",
        "--renew-deadline=10s",
        "--retry-period=2s",
    ];
    let mut op = harness::operator_binary(&env, &binary, "bench", &args);
    let settled = size.settled;
    // Every 97th Machine is Downloading, the rest Ready.
    let ready = (0..settled).filter(|i| !i.is_multiple_of(97)).count();
    env.wait_cluster("home", "the fleet settles", Duration::from_secs(120), |c| {
        c.status.machines.total as usize == settled && c.status.machines.ready as usize == ready
    });
    std::thread::sleep(Duration::from_secs(3));
    let settling = count_writes(&env, start);
    let mark = env.cp.audit_mark().unwrap();
    let before = harness::sweeps(&op);
    let end = deadline(Duration::from_secs(60));
    while harness::sweeps(&op) - before < 10.0 {
        assert!(
            Instant::now() < end,
            "fewer than 10 sweeps in 60 s\n{}",
            op.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let quiet = count_writes(&env, mark);
    println!(
        "cluster operator: a settled fleet of {settled} Machines over 10 sweeps wrote {} requests \
         (target 0; reference: {} writes while the same fleet settled, {} election renewals in the window)",
        quiet.0, settling.0, quiet.1
    );
    if quiet.0 != 0 {
        missed.push(format!("a settled fleet was written to {} times", quiet.0));
    }

    // 4. Memory with `watched` Machines.
    create_fleet(&env.admin, size.settled, size.watched);
    drop(renewer);
    let _renewer = Renewer::start(&env.admin, names(size.watched), Duration::from_secs(10));
    let watched = size.watched;
    env.wait_cluster(
        "home",
        "the operator sees every Machine",
        Duration::from_secs(300),
        |c| c.status.machines.total as usize == watched,
    );
    std::thread::sleep(Duration::from_secs(3));
    let status = std::fs::read_to_string(format!("/proc/{}/status", op.proc.pid())).unwrap();
    let (rss, hwm) = (kib(&status, "VmRSS:"), kib(&status, "VmHWM:"));
    let out = std::process::Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .arg(&kubectl)
        .arg(format!("--kubeconfig={}", env.cp.kubeconfig().display()))
        .args(["get", "machines", "-o", "json"])
        .output()
        .expect("GNU time is missing: run scripts/setup.sh (it installs Debian's time)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["items"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(listed, watched);
    let kubectl_kib: u64 = String::from_utf8_lossy(&out.stderr)
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap();
    println!(
        "cluster operator: RSS {:.1} MB (peak {:.1} MB) with {watched} Machines watched (target < 20 MB): \
         {:.2}x the {:.1} MB peak of kubectl get machines -o json listing the same {watched}",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0,
        rss as f64 / kubectl_kib as f64,
        kubectl_kib as f64 / 1024.0
    );
    if !size.smoke && rss >= 20 * 1024 {
        missed.push(format!("RSS was {rss} KiB"));
    }
    op.terminate(Duration::from_secs(20));
    if !missed.is_empty() {
        eprintln!("cluster operator: targets missed: {}", missed.join("; "));
        std::process::exit(1);
    }
}

/// The operator's writes since `mark`: to the fleet, and to its election
/// Lease.
fn count_writes(env: &Env, mark: liken_testenv::audit::AuditMark) -> (usize, usize) {
    let writes = env.cp.writes_by(&operator_user(), mark).unwrap();
    let election = writes
        .iter()
        .filter(|e| e.resource == "leases" && e.name == "liken-cluster-operator")
        .count();
    (writes.len() - election, election)
}
