//! `approve-reboot` and `request-reboot` against a real kube-apiserver with
//! liken's CRDs, on Machines whose status the test writes as the machine
//! operator would. Writes are counted at the apiserver (its
//! apiserver_request_total metric), not by the command.

use std::ffi::OsStr;
use std::process::Command;

use serde_json::{Value, json};

use crate::fleet::{self, Fleet};
use crate::new_pty::Terminal;
use crate::support::{fails, liken, ok, output};

const MACHINES: &str = "/apis/liken.sh/v1alpha1/machines";

fn sha(text: &str) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(text.as_bytes()))
}

/// Creates a Machine and writes its status, as the machine operator does.
fn machine(f: &Fleet, name: &str, policy: &str, annotations: Value, status: Value) {
    let (code, body) =
        f.cp.request(
            "POST",
            MACHINES,
            Some(&json!({
                "apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
                "metadata": {"name": name, "annotations": annotations},
                "spec": {"rebootPolicy": policy}
            })),
        )
        .unwrap();
    assert_eq!(code, 201, "{body}");
    set_status(f, name, status);
}

fn set_status(f: &Fleet, name: &str, status: Value) {
    let (_, mut m) =
        f.cp.request("GET", &format!("{MACHINES}/{name}"), None)
            .unwrap();
    m["status"] = status;
    let (code, body) =
        f.cp.request("PUT", &format!("{MACHINES}/{name}/status"), Some(&m))
            .unwrap();
    assert_eq!(code, 200, "{body}");
}

fn annotation(f: &Fleet, name: &str, key: &str) -> Option<String> {
    let (_, m) =
        f.cp.request("GET", &format!("{MACHINES}/{name}"), None)
            .unwrap();
    m["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_owned)
}

/// Every write to machines the apiserver has served (any verb that
/// changes, any subresource), from its own metrics.
fn machine_writes(f: &Fleet) -> u64 {
    let (code, body) = f.cp.request("GET", "/metrics", None).unwrap();
    assert_eq!(code, 200);
    let text = body.as_str().expect("metrics are text");
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{") && l.contains("resource=\"machines\"")
        })
        .filter(|l| {
            ["POST", "PUT", "PATCH", "DELETE", "APPLY"]
                .iter()
                .any(|v| l.contains(&format!("verb=\"{v}\"")))
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64)
        .sum()
}

fn run(f: &Fleet, args: &[&str]) -> Command {
    let mut c = liken([
        OsStr::new(args[0]),
        OsStr::new("-server"),
        OsStr::new(f.cp.server()),
    ]);
    c.arg(&f.dep).args(&args[1..]);
    c
}

fn pending(kind: &str, seed: &str, condition: &str, summary: &str) -> Value {
    json!({"condition": condition, "kind": kind, "hash": sha(seed), "summary": summary})
}

fn condition(type_: &str, reason: &str) -> Value {
    json!({"type": type_, "status": "False", "reason": reason, "message": "",
           "lastTransitionTime": "2026-07-11T08:00:00Z"})
}

#[test]
fn approve_names_the_staged_hash_once_and_converged_writes_nothing() {
    let f = fleet::shared();
    let _writes = fleet::writes_lock();
    machine(
        f,
        "approve-manual",
        "Manual",
        json!({}),
        json!({
            "phase": "UpdatePending",
            "conditions": [condition("K3sConfigured", "RestartPending"),
                           condition("KernelArgsApplied", "RebootPending")],
            "pending": [pending("Restart", "k3s", "K3sConfigured", "k3s: node label zone=a"),
                        pending("Reboot", "kargs", "KernelArgsApplied", "kernel arguments: +quiet")]
        }),
    );
    let before = machine_writes(f);
    let out = ok(run(f, &["approve-reboot", "approve-manual"]));
    let short = &sha("kargs")[..12];
    assert_eq!(
        out,
        format!(
            "approve-manual is waiting on 2 changes:\n\
             \x20 K3sConfigured  RestartPending\n\
             \x20 k3s: node label zone=a ({})\n\
             \x20 a k3s restart applies this; the machine does not reboot\n\
             \x20 KernelArgsApplied  RebootPending\n\
             \x20 kernel arguments: +quiet ({short})\n\
             \x20 a reboot applies this, and every other staged change with it\n\
             \napproved: liken.sh/approve-disruption={short}\n",
            &sha("k3s")[..12]
        )
    );
    assert_eq!(
        annotation(f, "approve-manual", "liken.sh/approve-disruption").as_deref(),
        Some(short)
    );
    assert_eq!(machine_writes(f), before + 1, "one merge patch");
    let (_, m) =
        f.cp.request("GET", &format!("{MACHINES}/approve-manual"), None)
            .unwrap();
    let managers: Vec<&str> = m["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["manager"].as_str())
        .collect();
    assert!(
        managers.contains(&"liken"),
        "the write names liken: {managers:?}"
    );

    // The same grant again: the same answer and no write.
    assert_eq!(ok(run(f, &["approve-reboot", "approve-manual"])), out);
    assert_eq!(
        machine_writes(f),
        before + 1,
        "a repeated grant writes nothing"
    );

    // Converged: said so, exit 0, no write.
    machine(
        f,
        "approve-converged",
        "Manual",
        json!({}),
        json!({"phase": "Ready"}),
    );
    let before = machine_writes(f);
    assert_eq!(
        ok(run(f, &["approve-reboot", "approve-converged"])),
        "approve-converged is converged; nothing is waiting\n"
    );
    assert_eq!(
        machine_writes(f),
        before,
        "approve when converged writes nothing"
    );
    assert_eq!(
        annotation(f, "approve-converged", "liken.sh/approve-disruption"),
        None
    );

    // No such machine.
    let err = fails(run(f, &["approve-reboot", "no-such-machine"]));
    assert!(
        err.contains("has no Machine named \"no-such-machine\""),
        "{err}"
    );
}

#[test]
fn a_stale_approval_is_replaced_by_the_staged_hash() {
    let f = fleet::shared();
    let _writes = fleet::writes_lock();
    // Approved once, then the person edited the Machine again: the
    // operator staged another document, and the old grant names nothing.
    machine(
        f,
        "approve-stale",
        "Manual",
        json!({"liken.sh/approve-disruption": &sha("first")[..12]}),
        json!({"pending": [pending("Reboot", "second", "NetworkConfigured", "network: eth0 dhcp")]}),
    );
    let out = ok(run(f, &["approve-reboot", "approve-stale"]));
    let short = &sha("second")[..12];
    assert!(
        out.ends_with(&format!("approved: liken.sh/approve-disruption={short}\n")),
        "{out}"
    );
    assert_eq!(
        annotation(f, "approve-stale", "liken.sh/approve-disruption").as_deref(),
        Some(short)
    );
}

#[test]
fn approve_all_asks_once_and_refuses_without_a_terminal() {
    let f = fleet::shared();
    let _writes = fleet::writes_lock();
    let waiting =
        json!({"pending": [pending("Reboot", "all", "ModulesLoaded", "modules: +wireguard")]});
    machine(f, "all-a", "Manual", json!({}), waiting.clone());
    machine(f, "all-b", "Manual", json!({}), waiting.clone());
    machine(f, "all-auto", "Auto", json!({}), waiting.clone());
    let before = machine_writes(f);
    let out = output(run(f, &["approve-reboot", "-all"]));
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("all-a is waiting on one change:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("all-b is waiting on one change:"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("all-auto"),
        "an Auto machine asks by itself: {stdout}"
    );
    assert!(
        stderr.contains("add -yes to approve without asking"),
        "{stderr}"
    );
    assert_eq!(machine_writes(f), before, "refused means nothing written");

    let out = ok(run(f, &["approve-reboot", "-all", "-yes"]));
    let short = &sha("all")[..12];
    assert!(
        out.ends_with(&format!(
            "\napproved all-a: liken.sh/approve-disruption={short}\n\
             approved all-b: liken.sh/approve-disruption={short}\n"
        )),
        "{out}"
    );
    assert_eq!(machine_writes(f), before + 2);
    assert_eq!(
        annotation(f, "all-auto", "liken.sh/approve-disruption"),
        None
    );
    // Nothing waits any more.
    let out = ok(run(f, &["approve-reboot", "-all"]));
    assert!(
        out.ends_with("no machine is waiting for approval\n"),
        "{out}"
    );
}

#[test]
fn request_reboot_names_the_running_boot_or_refuses() {
    let f = fleet::shared();
    let _writes = fleet::writes_lock();
    let time = "2026-07-11T08:15:00Z";
    machine(
        f,
        "request-auto",
        "Auto",
        json!({}),
        json!({"boot": {"time": time, "slot": "A", "version": "2026.07.11-001"}}),
    );
    let short = &sha(time)[..12];
    let before = machine_writes(f);
    assert_eq!(
        ok(run(f, &["request-reboot", "request-auto"])),
        format!(
            "requested: liken.sh/request-reboot={short}\n\
             request-auto takes a reboot turn from the cluster, drains its workloads, and reboots.\n\
             Nothing is staged, so the machine comes back on the documents it runs now.\n"
        )
    );
    assert_eq!(
        annotation(f, "request-auto", "liken.sh/request-reboot").as_deref(),
        Some(short)
    );
    ok(run(f, &["request-reboot", "request-auto"]));
    assert_eq!(machine_writes(f), before + 1, "asking twice is one request");

    machine(
        f,
        "request-manual",
        "Manual",
        json!({}),
        json!({"boot": {"time": time}}),
    );
    let out = ok(run(f, &["request-reboot", "request-manual"]));
    assert!(
        out.contains(&format!(
            "request-manual has rebootPolicy: Manual, so the request waits for you. Release it with:\n  \
             liken approve-reboot {} request-manual\n",
            f.dep.display()
        )),
        "{out}"
    );

    // No boot record yet: an error, exit 1, and no write.
    machine(
        f,
        "request-booting",
        "Auto",
        json!({}),
        json!({"phase": "Booting"}),
    );
    let before = machine_writes(f);
    let err = fails(run(f, &["request-reboot", "request-booting"]));
    assert_eq!(
        err,
        "liken: request-booting reports no boot time, so there is no boot to request a reboot \
         of; the machine is still starting, or it has never reported\n"
    );
    assert_eq!(machine_writes(f), before);
    assert_eq!(
        annotation(f, "request-booting", "liken.sh/request-reboot"),
        None
    );
}

#[test]
fn completion_offers_the_clusters_machines() {
    let f = fleet::shared();
    // It writes a Machine too, so it holds the lock the write counts rely
    // on: once its write landed inside approve_names_the_staged_hash's
    // count (19 writes where one merge patch was expected).
    let _writes = fleet::writes_lock();
    machine(
        f,
        "complete-me",
        "Auto",
        json!({}),
        json!({"phase": "Ready"}),
    );
    let out = ok(liken([
        OsStr::new("__complete"),
        OsStr::new("request-reboot"),
        OsStr::new("-server"),
        OsStr::new(f.cp.server()),
        f.dep.as_os_str(),
        OsStr::new("complete-"),
    ]));
    assert_eq!(out, "complete-me\n:4\n");
}

#[test]
fn approve_all_asks_on_a_terminal() {
    let f = fleet::shared();
    let _writes = fleet::writes_lock();
    machine(
        f,
        "all-pty",
        "Manual",
        json!({}),
        json!({"pending": [pending("Restart", "pty", "K3sConfigured", "k3s: taint dedicated=gpu")]}),
    );
    let short = &sha("pty")[..12];
    let before = machine_writes(f);
    let (mut t, mut child, pump) = Terminal::spawn(run(f, &["approve-reboot", "-all"]));
    t.expect("\napprove 1 machine? [y/N] ");
    t.answer("n");
    t.expect("nothing approved");
    assert!(child.wait().unwrap().success());
    pump.join().unwrap();
    assert_eq!(machine_writes(f), before, "no means nothing written");

    let (mut t, mut child, pump) = Terminal::spawn(run(f, &["approve-reboot", "-all"]));
    t.expect("all-pty is waiting on one change:");
    t.expect("\napprove 1 machine? [y/N] ");
    t.answer("y");
    t.expect(&format!(
        "approved all-pty: liken.sh/approve-disruption={short}"
    ));
    assert!(child.wait().unwrap().success(), "{}", t.seen);
    pump.join().unwrap();
    assert_eq!(machine_writes(f), before + 1);
}
