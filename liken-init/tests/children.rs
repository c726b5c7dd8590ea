//! Real children, spawned and reaped the way init does it: signals
//! blocked and taken by the signal thread, pids recorded under the
//! table lock before the reaper can see them.
//!
//! This file runs without the test harness (Cargo.toml: harness =
//! false): the signals must be blocked in the main thread before any
//! other thread exists, as init does, or the harness's threads would
//! take SIGCHLD; and no other test may fork while the reaper runs
//! (waitpid(-1) would take their children too).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use liken_init::events::{Event, ExitStatus};
use liken_init::reaper::{self, ChildTable};
use liken_init::supervisor::{RealSpawner, Service, Spawner};
use nix::sys::signal::Signal;

fn exit_of(rx: &crossbeam_channel::Receiver<Event>, pid: u32) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Event::Exited { pid: p, status }) if p == pid => return status,
            Ok(_) => {}
            Err(e) => panic!("no exit for pid {pid}: {e}"),
        }
    }
}

/// What every check shares: the table the spawner records pids in and
/// the channel the reaper reports exits on.
struct Reaper {
    table: liken_init::reaper::SharedTable,
    rx: crossbeam_channel::Receiver<Event>,
}

/// A named check over the shared reaper.
type Check = (&'static str, fn(&Reaper));

fn main() {
    // Before any other thread exists, as init does.
    reaper::block().unwrap();
    let table = Arc::new(Mutex::new(ChildTable::default()));
    let (tx, rx) = crossbeam_channel::unbounded();
    reaper::spawn(Arc::clone(&table), tx).unwrap();
    let r = Reaper { table, rx };
    let checks: [Check; 2] = [
        (
            "children_are_recorded_reaped_and_stopped",
            children_are_recorded_reaped_and_stopped,
        ),
        (
            "commands_run_to_their_end_beside_the_reaper",
            commands_run_to_their_end_beside_the_reaper,
        ),
    ];
    // A failed check panics, which ends the run with its message.
    let mut ran = 0;
    for (name, check) in checks {
        check(&r);
        ran += 1;
        println!("test {name} ... ok");
    }
    println!("{ran} passed, 0 failed");
}

fn children_are_recorded_reaped_and_stopped(r: &Reaper) {
    let (table, rx) = (&r.table, &r.rx);
    let spawner = RealSpawner {
        table: Arc::clone(table),
        log: None,
    };

    // A child that exits at once is still reported: its pid was in the
    // table before the reaper could reap it.
    let quick = Service {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), "exit 7".into()],
        limits: Vec::new(),
    };
    for _ in 0..20 {
        let pid = spawner.spawn(&quick).unwrap();
        assert_eq!(exit_of(rx, pid), ExitStatus::Code(7));
    }

    // The child starts with signals unblocked, so SIGTERM ends it, and
    // with the limits it is given, set between fork and exec. (k3s's own,
    // k3s_host::LIMITS, raise hard limits, which a test without
    // CAP_SYS_RESOURCE may not: the QEMU tests read those from the
    // stand-in. Lowering a hard limit and raising a soft one to an
    // unlimited hard one are allowed to anyone.)
    use nix::sys::resource::{RLIM_INFINITY, Resource};
    let (_, core_hard) = nix::sys::resource::getrlimit(Resource::RLIMIT_CORE).unwrap();
    let sleeper = Service {
        program: "/bin/sleep".into(),
        args: vec!["30".into()],
        limits: vec![
            liken_init::k3s_host::Limit {
                resource: Resource::RLIMIT_NOFILE,
                value: 1000,
            },
            liken_init::k3s_host::Limit {
                resource: Resource::RLIMIT_CORE,
                value: core_hard,
            },
        ],
    };
    let pid = spawner.spawn(&sleeper).unwrap();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let core = if core_hard == RLIM_INFINITY {
        "unlimited unlimited bytes".to_owned()
    } else {
        format!("{core_hard} {core_hard} bytes")
    };
    for (name, want) in [
        ("Max open files", "1000 1000 files"),
        ("Max core file size", core.as_str()),
    ] {
        let line = limits.lines().find(|l| l.starts_with(name)).unwrap();
        let got = line[name.len()..].split_whitespace().collect::<Vec<_>>();
        assert_eq!(got.join(" "), want, "{name}");
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let blocked = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(
        blocked, "0000000000000000",
        "the child inherited init's signal mask"
    );
    spawner.signal(pid, Signal::SIGTERM).unwrap();
    assert_eq!(exit_of(rx, pid), ExitStatus::Signal("SIGTERM".into()));

    // With a log, the child's stdout and stderr go through one pipe to
    // the console and the log file, in order.
    let dir = std::env::temp_dir().join(format!("liken-init-children-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let logged = RealSpawner {
        table: Arc::clone(table),
        log: Some(dir.join("k3s.log")),
    };
    let chatty = Service {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), "echo out; echo err >&2; echo done".into()],
        limits: Vec::new(),
    };
    let pid = logged.spawn(&chatty).unwrap();
    assert_eq!(exit_of(rx, pid), ExitStatus::Code(0));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(dir.join("k3s.log")).unwrap_or_default();
        if text == "out\nerr\ndone\n" {
            break;
        }
        assert!(Instant::now() < deadline, "log holds {text:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&dir);

    // A program that cannot start is an error, not a panic, and leaves
    // nothing behind for the reaper.
    let missing = Service {
        program: "/nonexistent/k3s".into(),
        args: vec![],
        limits: Vec::new(),
    };
    assert!(spawner.spawn(&missing).is_err());
}

/// Commands (mke2fs, `k3s kubectl`) get their own exit status back
/// although the reaper takes every child's, and none of it reaches the
/// loop's channel.
fn commands_run_to_their_end_beside_the_reaper(r: &Reaper) {
    use liken_init::sys::command::{CommandSpec, RealRunner, Runner};
    let (table, rx) = (&r.table, &r.rx);
    let runner = RealRunner {
        table: Arc::clone(table),
    };
    for _ in 0..10 {
        let out = runner
            .run(&CommandSpec::new(
                "/bin/sh",
                &["-c", "echo ok; echo oops >&2; exit 3"],
                Duration::from_secs(10),
            ))
            .unwrap();
        assert_eq!(out.status, Some(ExitStatus::Code(3)));
        assert_eq!(
            (out.stdout.as_str(), out.stderr.as_str()),
            ("ok\n", "oops\n")
        );
    }
    let t0 = Instant::now();
    let out = runner
        .run(&CommandSpec::new(
            "/bin/sleep",
            &["30"],
            Duration::from_millis(300),
        ))
        .unwrap();
    assert_eq!(out.status, None, "an overrunning command is killed");
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(
        runner
            .run(&CommandSpec::new(
                "/nonexistent",
                &[],
                Duration::from_secs(1)
            ))
            .is_err()
    );
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "a command's exit is not the loop's business"
    );
}
