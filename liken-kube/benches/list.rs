//! `make bench`: LIST and decode 5,000 Machines through liken-kube
//! against `kubectl get machines -o json` in the same run, and the
//! resident memory of a store holding 10,000 Machines.
//!
//! Both clients page the same way (500 objects a page, kubectl's
//! default chunk size) against the same real apiserver; each is run
//! once to warm up (kubectl's discovery cache, the connection) and then
//! timed five times, medians compared. The store's memory is measured in
//! a child process (this binary re-run), whose VmRSS after its informer
//! synced 10,000 Machines is the whole process: TLS, client, store.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use liken_api::Machine;
use liken_kube::request::MACHINES;
use liken_kube::{Api, Client, Config, Informer, ListParams, wake_channel};
use serde_json::json;

const LIST_N: usize = 5_000;
const STORE_N: usize = 10_000;
const RUNS: usize = 5;
const CHILD: &str = "LIKEN_BENCH_STORE_CHILD";

/// A Machine as a running fleet has it: a spec with network and
/// kernel settings, a status with conditions and releases.
fn machine(i: usize) -> serde_json::Value {
    let name = format!("bench-{i:05}");
    let t = "2026-07-01T12:00:00Z";
    json!({
        "apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "labels": {"liken-bench": "yes"}},
        "spec": {
            "hostname": name,
            "rebootPolicy": "Auto",
            "sysctls": {"vm.max_map_count": "262144", "net.ipv4.ip_forward": "1"},
            "kernelArgs": ["console=ttyS0", "quiet"],
            "network": {
                "interfaces": [{"name": "eth0", "dhcp": false,
                                "addresses": [format!("10.1.{}.{}/16", i / 250, i % 250 + 1)],
                                "routes": [{"to": "0.0.0.0/0", "via": "10.1.0.1"}],
                                "dns": ["10.1.0.2"]}],
                "ntp": ["pool.ntp.org"]
            },
            "installDisk": "/dev/vda",
        },
        "status": {
            "phase": "Ready", "role": if i < 3 { "leader" } else { "follower" },
            "observedGeneration": 1,
            "release": {"running": "2026.07.01-001", "target": "2026.07.01-001"},
            "conditions": [
                {"type": "SysctlsApplied", "status": "True", "reason": "Converged", "message": "all sysctls applied", "lastTransitionTime": t},
                {"type": "NetworkConfigured", "status": "True", "reason": "Converged", "message": "eth0 configured", "lastTransitionTime": t},
                {"type": "ReleaseCurrent", "status": "True", "reason": "Converged", "message": "running the target release", "lastTransitionTime": t}
            ]
        }
    })
}

fn client(kubeconfig: &std::path::Path) -> Client {
    Client::new(&Config::from_kubeconfig(kubeconfig, None).expect("kubeconfig")).expect("client")
}

/// Creates Machines `from..to` (spec, then status) on four threads.
fn create(c: &Client, from: usize, to: usize) {
    let next = AtomicUsize::new(from);
    let api = Api::all(MACHINES);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= to {
                        return;
                    }
                    let m = machine(i);
                    let created: Machine = c.create(&api, &m).expect("create");
                    let mut status = m.clone();
                    status["metadata"]["resourceVersion"] =
                        created.metadata.resource_version.into();
                    let req = api
                        .replace_status(
                            &created.metadata.name,
                            serde_json::to_vec(&status).unwrap(),
                        )
                        .unwrap();
                    c.send(&req).expect("status");
                }
            });
        }
    });
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn vm_rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// The child: sync an informer on every Machine and report memory.
fn store_child(kubeconfig: &str) {
    let before = vm_rss_kib();
    let c = client(std::path::Path::new(kubeconfig));
    let (tx, _rx) = wake_channel();
    let informer = Informer::<Machine>::start(c, Api::all(MACHINES), tx);
    let store = informer.store();
    assert!(
        store.wait_synced(Duration::from_secs(300)),
        "the store never synced"
    );
    // Let the watch settle and transient buffers go.
    std::thread::sleep(Duration::from_millis(500));
    let after = vm_rss_kib();
    println!("{} {before} {after}", store.len());
}

fn main() {
    if let Ok(kc) = std::env::var(CHILD) {
        store_child(&kc);
        return;
    }
    // `cargo bench` passes --bench; nothing else is accepted.
    let t0 = Instant::now();
    let cp = liken_testenv::start(liken_testenv::Options::default())
        .unwrap_or_else(|e| panic!("liken-testenv: the control plane is not available: {e}"));
    eprintln!(
        "control plane ready in {:.1}s",
        cp.startup_time().as_secs_f64()
    );
    let c = client(cp.kubeconfig());
    let t = Instant::now();
    create(&c, 0, LIST_N);
    eprintln!(
        "created {LIST_N} Machines in {:.1}s",
        t.elapsed().as_secs_f64()
    );

    let api = Api::all(MACHINES);
    let params = ListParams::default().limit(500);
    let liken = |check: bool| {
        let t = Instant::now();
        let list = c.list_all::<Machine>(&api, &params).expect("list");
        let d = t.elapsed();
        if check {
            assert_eq!(list.items.len(), LIST_N);
        }
        d
    };
    let kubectl = |check: bool| {
        let t = Instant::now();
        let out = cp
            .kubectl()
            .args(["get", "machines.liken.sh", "-o", "json", "--chunk-size=500"])
            .output()
            .expect("kubectl runs");
        let d = t.elapsed();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if check {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["items"].as_array().unwrap().len(), LIST_N);
        }
        d
    };
    liken(true);
    kubectl(true);
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..RUNS {
        ours.push(liken(false));
        theirs.push(kubectl(false));
    }
    let (ours, theirs) = (median(ours), median(theirs));
    let ratio = theirs.as_secs_f64() / ours.as_secs_f64();
    println!(
        "LIST+decode of {LIST_N} Machines: liken-kube {:.0} ms, kubectl get -o json {:.0} ms (median of {RUNS}): \
         liken-kube is {ratio:.1}x faster (target >= 3x) {}",
        ours.as_secs_f64() * 1e3,
        theirs.as_secs_f64() * 1e3,
        if ratio >= 3.0 { "PASS" } else { "MISS" }
    );

    let t = Instant::now();
    create(&c, LIST_N, STORE_N);
    eprintln!(
        "created {} more Machines in {:.1}s",
        STORE_N - LIST_N,
        t.elapsed().as_secs_f64()
    );
    let exe = std::env::current_exe().expect("this binary");
    let out = Command::new(exe)
        .env(CHILD, cp.kubeconfig())
        .output()
        .expect("the store child runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let nums: Vec<u64> = text
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect();
    let [count, before, after] = nums[..] else {
        panic!("the child printed {text:?}")
    };
    assert_eq!(count as usize, STORE_N);
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "store of {count} Machines: process RSS {:.1} MiB after sync ({:.1} MiB at start, {:.1} MiB added) \
         (target < 60 MB) {}",
        mib(after),
        mib(before),
        mib(after.saturating_sub(before)),
        if (after * 1024) < 60_000_000 {
            "PASS"
        } else {
            "MISS"
        }
    );
    eprintln!("bench done in {:.0}s", t0.elapsed().as_secs_f64());
}
