//! The machine operator's targets, measured on its static release binary
//! (`LIKEN_MACHINE_OPERATOR_BINARY`, which `make bench` builds) running
//! against a real control plane on a converged machine:
//!
//! - the stripped static binary under 6 MB, beside kubectl's size;
//! - its RSS under 12 MB, beside a `kubectl get machine -w` watching the
//!   same Machine (a Go client holding one watch);
//! - one converged pass under 5 ms of CPU: the main thread's CPU time
//!   (it runs the passes and nothing else) over the passes it made,
//!   counted from its own reconcile histogram, at a 100 ms resync;
//! - a converged machine writes nothing but its Lease renewals, counted
//!   in the apiserver's audit log.
//!
//! Each figure is printed with its target and, where there is one, the
//! reference measured in the same run. A missed target fails the run.
//! `LIKEN_BENCH_SMOKE=1` measures for a few seconds and checks nothing.

#[path = "../tests/machine/support.rs"]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use liken_api::Phase;
use liken_api::coordination::{HEARTBEAT_NAMESPACE, MACHINE_OPERATOR};
use liken_testenv::audit::service_account_user;
use liken_testenv::exposition::{metric, scrape};
use support::*;

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// VmRSS of a process, bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Fields of a /proc stat file, from the state on (the command before
/// it may hold spaces and ends at the last closing parenthesis).
fn stat_fields(path: &str) -> Vec<f64> {
    let stat = std::fs::read_to_string(path).unwrap();
    stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .map(|f| f.parse::<f64>().unwrap_or(0.0))
        .collect()
}

/// The CPU time of one thread (utime + stime, stat fields 14 and 15),
/// seconds.
fn thread_cpu(pid: u32, tid: u32) -> f64 {
    let f = stat_fields(&format!("/proc/{pid}/task/{tid}/stat"));
    (f[11] + f[12]) / 100.0
}

/// The CPU (user and system) of one look at the Machine with kubectl,
/// the cheapest way a person reads the same object: the median of three
/// runs, in ms, from the children's rusage.
fn kubectl_look_ms() -> f64 {
    let mut runs: Vec<f64> = (0..3)
        .map(|_| {
            let before = children_cpu();
            let out = Command::new("kubectl")
                .arg(format!("--kubeconfig={}", cp().kubeconfig().display()))
                .args(["get", "machine", "bench-1", "-o", "json"])
                .output()
                .unwrap();
            assert!(out.status.success(), "kubectl get machine failed");
            (children_cpu() - before) * 1000.0
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[1]
}

/// The user and system CPU of this process's waited-for children
/// (cutime + cstime, stat fields 16 and 17), seconds.
fn children_cpu() -> f64 {
    let f = stat_fields("/proc/self/stat");
    (f[13] + f[14]) / 100.0
}

/// The number of passes the operator has made, from its metrics.
fn passes(addr: &str) -> f64 {
    metric(&scrape(addr), "liken_reconcile_duration_seconds_count")
}

fn main() {
    let smoke = std::env::var_os("LIKEN_BENCH_SMOKE").is_some();
    let binary = std::env::var("LIKEN_MACHINE_OPERATOR_BINARY")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_liken-machine-operator").to_owned());
    let window = if smoke {
        Duration::from_secs(3)
    } else {
        Duration::from_secs(30)
    };
    let mut missed = Vec::new();

    // Size, beside kubectl.
    let size = std::fs::metadata(&binary).unwrap().len();
    let kubectl = Command::new("sh")
        .args(["-c", "command -v kubectl"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap();
    let kubectl_size = std::fs::metadata(std::fs::canonicalize(&kubectl).unwrap())
        .unwrap()
        .len();
    println!(
        "machine operator binary: {:.2} MB (target < 6 MB); kubectl {:.2} MB (reference); ratio {:.2}",
        mb(size),
        mb(kubectl_size),
        size as f64 / kubectl_size as f64
    );
    if size >= 6_000_000 {
        missed.push("binary size");
    }

    // A converged machine, the binary at a fast resync.
    cp().create_node("bench-1", &[]).unwrap();
    let m = machine_doc("bench-1");
    let c = cluster_doc(&["bench-1"]);
    let host = Host::new("bench-1", &m, &c);
    let kc = operator_kubeconfig("bench-1");
    let log = host.path("operator.log");
    let mut child = host
        .operator_command(std::path::Path::new(&binary), &kc)
        .args(["--resync=100ms", "--heartbeat-interval=10s"])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_for("the machine to be Ready", Duration::from_secs(60), || {
        machine("bench-1")
            .filter(|m| m.status.phase == Some(Phase::Ready))
            .map(drop)
            .ok_or_else(|| std::fs::read_to_string(&log).unwrap_or_default())
    });
    let metrics = wait_for("the metrics address", Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        metrics_address(&text).ok_or(text)
    });
    std::thread::sleep(Duration::from_secs(2));

    // The window: CPU per pass, writes.
    let mark = cp().audit_mark().unwrap();
    let (cpu0, passes0) = (thread_cpu(pid, pid), passes(&metrics));
    let started = Instant::now();
    std::thread::sleep(window);
    let (cpu1, passes1) = (thread_cpu(pid, pid), passes(&metrics));
    let n = passes1 - passes0;
    let per_pass_ms = (cpu1 - cpu0) * 1000.0 / n.max(1.0);
    let look_ms = kubectl_look_ms();
    println!(
        "one converged pass: {per_pass_ms:.2} ms of CPU (target < 5 ms; {:.2}x the target), over {n} passes in {:.0} s; \
         one `kubectl get machine bench-1 -o json` {look_ms:.0} ms of CPU (reference); ratio {:.3}",
        per_pass_ms / 5.0,
        started.elapsed().as_secs_f64(),
        per_pass_ms / look_ms.max(0.001)
    );
    if per_pass_ms >= 5.0 {
        missed.push("CPU per pass");
    }
    let user = service_account_user(HEARTBEAT_NAMESPACE, MACHINE_OPERATOR);
    let writes = cp().writes_by(&user, mark).unwrap();
    let leases = writes
        .iter()
        .filter(|w| w.resource == "leases" && w.name == "bench-1" && w.verb == "patch")
        .count();
    let others: Vec<String> = writes
        .iter()
        .filter(|w| !(w.resource == "leases" && w.name == "bench-1" && w.verb == "patch"))
        .map(|w| w.describe())
        .collect();
    println!(
        "a converged machine over {:.0} s: {} writes besides {leases} Lease renewals (target 0)",
        window.as_secs_f64(),
        others.len()
    );
    if !others.is_empty() {
        println!("  {}", others.join("\n  "));
        missed.push("writes");
    }

    // RSS, beside kubectl watching the same Machine.
    let own = rss(pid);
    let mut watch = Command::new("kubectl")
        .arg(format!("--kubeconfig={}", cp().kubeconfig().display()))
        .args(["get", "machine", "bench-1", "-w", "-o", "json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let reference = rss(watch.id());
    let _ = watch.kill();
    let _ = watch.wait();
    println!(
        "RSS: {:.1} MB (target < 12 MB; {:.2}x the target); kubectl get machine -w {:.1} MB (reference); ratio {:.2}",
        mb(own),
        own as f64 / 12e6,
        mb(reference),
        own as f64 / reference.max(1) as f64
    );
    if own >= 12_000_000 {
        missed.push("RSS");
    }
    let _ = child.kill();
    let _ = child.wait();

    if !smoke && !missed.is_empty() {
        eprintln!("machine operator bench: missed {}", missed.join(", "));
        std::process::exit(1);
    }
}
