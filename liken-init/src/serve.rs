//! The supervisor loop, where every boot ends, and the orderly shutdown
//! it leaves through.
//!
//! The loop owns all decisions after boot: it starts the service,
//! restarts it when the reaper reports its exit, answers control
//! requests and turns shutdown signals into the shutdown sequence. It
//! waits on one channel with the service's next restart as its timeout,
//! so it is idle unless something happened.
//!
//! Shutdown, like boot, is a sequence of named steps with one milestone
//! each: stop k3s (TERM, then KILL after a grace period), give the DHCP
//! leases back (the network thread), stop every other process, sync,
//! unmount in reverse, then reboot(2) or power off.
//! If the kernel refuses the reboot, init says so and retries; it never
//! returns.

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use liken_api::control::{InitStatus, RELEASES_DIR, Request, Response};
use nix::sys::signal::Signal;

use crate::bless::{self, Assessor};
use crate::console::{self, Outcome};
use crate::context::Boot;
use crate::events::Event;
use crate::kexec::{Prepared, Wanted};
use crate::mounts;
use crate::release_writer::{self, WorkerPaths, WriteGate};
use crate::supervisor::{Spawner, Supervisor};
use crate::sys::power::PowerAction;

/// How long k3s gets to stop after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(20);
/// How long the network thread gets to give its DHCP leases back.
pub const RELEASE_GRACE: Duration = Duration::from_secs(2);
/// How long the shutdown waits for a release write to let the ESP go.
pub const ESP_GRACE: Duration = Duration::from_secs(20);
/// How long other processes get after SIGTERM before SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(5);
/// How long the whole shutdown may take before init reboots without
/// syncing: both graces, their SIGKILL waits, and a minute for sync and
/// the unmounts.
pub const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(90);
/// The longest the loop sleeps with nothing to do.
const IDLE: Duration = Duration::from_secs(3600);

/// Runs the loop forever.
pub fn serve<S: Spawner>(mut boot: Boot, mut sup: Supervisor<S>, events: Receiver<Event>) -> ! {
    let started = match (&sup.service, &boot.no_service, boot.k3s_hold) {
        (Some(_), _, Some(wait)) => {
            let now = Instant::now();
            sup.hold(now.checked_add(wait).unwrap_or(now));
            format!(
                "{} {} held for {} s: the clock is behind the cluster's CA (k3s line)",
                sup.name,
                service_args(&sup),
                wait.as_secs()
            )
        }
        (Some(_), _, None) => match sup.start(Instant::now()) {
            Ok(pid) => format!("{} {} pid {pid}", sup.name, service_args(&sup)),
            Err(e) => e,
        },
        (None, Some(why), _) => format!("nothing to supervise: {why}"),
        (None, None, _) => "nothing to supervise".to_owned(),
    };
    let uptime = console::uptime().map_or(String::new(), |u| format!(", uptime {u:.2} s"));
    console::milestone(
        "supervisor",
        &Outcome::ok_with(format!("{started}{uptime}")),
    );

    let mut deferred: VecDeque<Event> = VecDeque::new();
    let writes = WriteGate::default();
    let mut assess = Assessor::start(
        boot.assessment.clone(),
        boot.started_at,
        boot.started,
        std::sync::Arc::clone(&boot.sys.run),
        boot.events.clone(),
    );
    loop {
        // Boot assessment: bless a healthy boot, or end a trial that
        // ran out of time or whose slot did not become the root
        // (crate::bless).
        if bless::run_due(&mut boot, sup.state(), &mut assess).is_some() {
            // Never by kexec: the firmware's bootloader spends the
            // slot's next try, and falls back once they are spent.
            let why = if boot.root_failure.is_some() {
                "the trial boot's slot did not become the root; the bootloader judges the slot's \
                 remaining tries"
            } else {
                "the trial boot did not become healthy in time; the bootloader judges the \
                 slot's remaining tries"
            };
            shutdown(
                &mut boot,
                &mut sup,
                &events,
                PowerAction::Reboot,
                Wanted::Firmware(why.into()),
            );
        }
        let event = match deferred.pop_front() {
            Some(e) => e,
            None => {
                let now = Instant::now();
                let wait = [sup.deadline(), assess.wake(now, sup.state())]
                    .into_iter()
                    .flatten()
                    .min()
                    .map_or(IDLE, |d| d.saturating_duration_since(now));
                match events.recv_timeout(wait) {
                    Ok(e) => e,
                    Err(RecvTimeoutError::Timeout) => {
                        tick(&mut sup);
                        continue;
                    }
                    // Every thread that sends also lives forever; with
                    // none left there is nothing to wait for but a
                    // restart, so wait on the clock alone.
                    Err(RecvTimeoutError::Disconnected) => {
                        std::thread::sleep(wait.min(IDLE));
                        tick(&mut sup);
                        continue;
                    }
                }
            }
        };
        match event {
            Event::Exited { pid, status } => {
                if let Some(line) = sup.on_exit(pid, &status, Instant::now()) {
                    console::line(&line);
                }
            }
            Event::Signal(action) => shutdown(
                &mut boot,
                &mut sup,
                &events,
                action,
                Wanted::Firmware(
                    "a signal asked init to reboot (Ctrl-Alt-Del, or SIGINT to PID 1)".into(),
                ),
            ),
            Event::Problem(problem) => boot.problems.push(problem),
            // The loop's next turn blesses (bless::run_due reads the
            // worker's finding); the event only ends the wait early.
            Event::Healthy => {}
            Event::AddressChanged {
                interface,
                from,
                to,
            } => {
                if sup.running_pid().is_some() {
                    console::line(&format!(
                        "dhcp: {interface} moved from {from} to {to}; restarting {} on the new address",
                        sup.name
                    ));
                    restart(&mut sup, &events, &mut deferred);
                }
            }
            Event::Control { request, reply } => match request {
                Request::Status => {
                    let _ = reply.send(Response::Status(status(&boot, &sup)));
                }
                Request::Reboot { .. } | Request::Poweroff => {
                    let (action, wanted) = match request {
                        Request::Reboot { via } => (PowerAction::Reboot, Wanted::from_request(via)),
                        _ => (PowerAction::Poweroff, Wanted::Firmware("a poweroff".into())),
                    };
                    // The write is safe to cut short (its entry comes
                    // last), but a client asking now would lose the
                    // write it is waiting for. Signals still shut down.
                    if writes.busy() {
                        let _ = reply.send(Response::Refused {
                            message: format!(
                                "a release is being written; ask for the {} again once it is answered",
                                action.name()
                            ),
                        });
                        continue;
                    }
                    // A client that gave up waiting (init was still
                    // booting) was told its request failed; carrying it
                    // out now would contradict that answer.
                    if reply.send(Response::Accepted).is_err() {
                        console::line(&format!(
                            "control: a {} request arrived, but its client gave up waiting; ignored",
                            action.name()
                        ));
                        continue;
                    }
                    console::line(&format!("control: {} requested", action.name()));
                    shutdown(&mut boot, &mut sup, &events, action, wanted);
                }
                Request::WriteRelease(write) => {
                    start_write(&boot, &writes, release_writer::Job::Write(write), reply)
                }
                Request::DisarmRelease => {
                    start_write(&boot, &writes, release_writer::Job::Disarm, reply)
                }
                Request::RestartK3s => {
                    if sup.service.is_none() {
                        let _ = reply.send(Response::Refused {
                            message: format!(
                                "there is no {} to restart: {}",
                                sup.name,
                                boot.no_service
                                    .as_deref()
                                    .unwrap_or("nothing is supervised")
                            ),
                        });
                        continue;
                    }
                    if reply.send(Response::Accepted).is_err() {
                        console::line(
                            "control: a restart request arrived, but its client gave up waiting; ignored",
                        );
                        continue;
                    }
                    console::line(&format!("control: restart of {} requested", sup.name));
                    restart(&mut sup, &events, &mut deferred);
                }
            },
        }
    }
}

/// Stops the service and starts it again at once.
fn restart<S: Spawner>(
    sup: &mut Supervisor<S>,
    events: &Receiver<Event>,
    deferred: &mut VecDeque<Event>,
) {
    let outcome = stop_service(sup, events, deferred);
    console::milestone("stop-k3s", &outcome);
    sup.reset_backoff();
    match sup.start(Instant::now()) {
        Ok(pid) => console::line(&format!("{}: started again, pid {pid}", sup.name)),
        Err(e) => console::line(&e),
    }
}

/// Starts a release write (or a disarm) on its worker thread, which
/// answers `reply` when done; refuses at once when one is running or
/// there is no slot to write. A disarm takes the same gate, so it never
/// runs beside a write of the same slot.
fn start_write(boot: &Boot, writes: &WriteGate, job: release_writer::Job, reply: Sender<Response>) {
    let refuse = |message: String| {
        console::milestone(release_writer::MILESTONE, &Outcome::Failed(message.clone()));
        let _ = reply.send(Response::Refused { message });
    };
    let booted = boot.cmdline.slot;
    if let Err(e) = release_writer::decide_target_slot(booted) {
        return refuse(e.to_string());
    }
    // The record's assessment is updated when the boot is blessed. A
    // disarm only takes the other slot out of reach, which is always
    // safe.
    if let release_writer::Job::Write(_) = &job
        && let Some(slot) = booted
        && let Err(e) = release_writer::decide_may_write(
            slot,
            boot.record.as_ref().and_then(|r| r.assessment.as_ref()),
        )
    {
        return refuse(e.to_string());
    }
    let Some(ticket) = writes.try_begin() else {
        return refuse(release_writer::WriteError::Busy.to_string());
    };
    match &job {
        release_writer::Job::Write(write) => console::line(&format!(
            "control: write of release {} requested",
            write.directory
        )),
        release_writer::Job::Disarm => {
            console::line("control: disarm of the inactive slot requested")
        }
    }
    let paths = WorkerPaths {
        sys: boot.paths.sys.clone(),
        boot_disk: boot.paths.boot_disk.clone(),
        proc: boot.paths.proc.clone(),
        esp_mount: boot.paths.run_liken.join("esp"),
        releases: RELEASES_DIR.into(),
    };
    let trust = crate::trust::Context {
        layer: boot.paths.etc_liken.clone(),
        state: boot.paths.var_liken.join(crate::trust::TRUST_DIR),
        booted: boot.record.as_ref().and_then(|r| r.version.clone()),
        cluster: boot.cluster.as_ref().map(|c| c.metadata.name.clone()),
        machine: boot.machine.as_ref().map(|m| m.metadata.name.clone()),
        now: liken_api::Time::from_system(std::time::SystemTime::now()),
    };
    // Signature, trust root and floor first; the release writer after.
    let write: release_writer::WriteFn = Box::new(move |machine, request| {
        crate::trust::write_checked(machine, &trust, request).map_err(|e| e.to_string())
    });
    if let Err(e) = release_writer::spawn(job, booted, paths, write, ticket, reply.clone()) {
        refuse(format!(
            "cannot start the writer thread ({e}); the machine is short of memory, try again later"
        ));
    }
}

fn service_args<S: Spawner>(sup: &Supervisor<S>) -> String {
    sup.service
        .as_ref()
        .map_or(String::new(), |s| s.args.join(" "))
}

fn tick<S: Spawner>(sup: &mut Supervisor<S>) {
    match sup.tick(Instant::now()) {
        Some(Ok(pid)) => console::line(&format!("{}: restarted, pid {pid}", sup.name)),
        Some(Err(e)) => console::line(&e),
        None => {}
    }
}

fn status<S: Spawner>(boot: &Boot, sup: &Supervisor<S>) -> InitStatus {
    InitStatus {
        boot: boot.record.clone(),
        machine: boot.machine.as_ref().map(|m| m.metadata.name.clone()),
        problems: boot.problems.clone(),
        k3s: sup.status(),
    }
}

/// Waits until the reaper reports `pid`'s exit or the deadline passes;
/// other events are kept for later. Whether it exited.
fn wait_exit(
    events: &Receiver<Event>,
    pid: u32,
    within: Duration,
    deferred: &mut VecDeque<Event>,
) -> bool {
    let deadline = Instant::now()
        .checked_add(within)
        .unwrap_or_else(Instant::now);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        match events.recv_timeout(left) {
            Ok(Event::Exited { pid: p, .. }) if p == pid => return true,
            Ok(other) => deferred.push_back(other),
            Err(_) => return false,
        }
    }
}

/// Stops the service: SIGTERM, then SIGKILL after [`STOP_GRACE`].
fn stop_service<S: Spawner>(
    sup: &mut Supervisor<S>,
    events: &Receiver<Event>,
    deferred: &mut VecDeque<Event>,
) -> Outcome {
    let Some(pid) = sup.running_pid() else {
        sup.mark_stopped();
        return Outcome::ok_with(format!("{} was not running", sup.name));
    };
    let t0 = Instant::now();
    if let Err(e) = sup.signal(Signal::SIGTERM) {
        console::line(&format!(
            "{}: cannot send SIGTERM to pid {pid}: {e}",
            sup.name
        ));
    }
    if wait_exit(events, pid, STOP_GRACE, deferred) {
        sup.mark_stopped();
        return Outcome::ok_with(format!("stopped in {:.1} s", t0.elapsed().as_secs_f64()));
    }
    let _ = sup.signal(Signal::SIGKILL);
    let gone = wait_exit(events, pid, Duration::from_secs(5), deferred);
    sup.mark_stopped();
    if gone {
        Outcome::ok_with(format!(
            "killed after ignoring SIGTERM for {} s",
            STOP_GRACE.as_secs()
        ))
    } else {
        Outcome::Failed(format!(
            "pid {pid} did not die even after SIGKILL; going on without it"
        ))
    }
}

/// The pids of user processes other than init (kernel threads have an
/// empty cmdline and ignore signals).
fn user_processes(proc: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(proc) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != 1)
        .filter(|pid| {
            std::fs::read(proc.join(pid.to_string()).join("cmdline")).is_ok_and(|c| !c.is_empty())
        })
        .collect()
}

fn kill_rest(proc: &Path) -> Outcome {
    let everyone = nix::unistd::Pid::from_raw(-1);
    if user_processes(proc).is_empty() {
        return Outcome::ok_with("none left");
    }
    let _ = nix::sys::signal::kill(everyone, Signal::SIGTERM);
    let deadline = Instant::now()
        .checked_add(KILL_GRACE)
        .unwrap_or_else(Instant::now);
    while Instant::now() < deadline {
        if user_processes(proc).is_empty() {
            return Outcome::ok_with("all stopped on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let stubborn = user_processes(proc).len();
    let _ = nix::sys::signal::kill(everyone, Signal::SIGKILL);
    std::thread::sleep(Duration::from_millis(500));
    Outcome::ok_with(format!("{stubborn} killed after SIGTERM"))
}

/// The orderly shutdown; never returns. A reboot goes by kexec when
/// `wanted` asks for it and [`crate::kexec::prepare`] could load the
/// next boot, else through the firmware.
pub fn shutdown<S: Spawner>(
    boot: &mut Boot,
    sup: &mut Supervisor<S>,
    events: &Receiver<Event>,
    action: PowerAction,
    wanted: Wanted,
) -> ! {
    console::milestone(
        "shutdown",
        &Outcome::ok_with(format!("{} requested", action.name())),
    );
    if let Err(e) = crate::sys::power::force_after(action, SHUTDOWN_DEADLINE) {
        console::line(&format!(
            "shutdown: no deadline thread ({e}); a hanging disk could stop the {}",
            action.name()
        ));
    }
    let mut deferred = VecDeque::new();
    console::milestone("stop-k3s", &stop_service(sup, events, &mut deferred));
    // Requests that arrive now get an answer rather than a timeout.
    for e in deferred.drain(..) {
        if let Event::Control { reply, .. } = e {
            let _ = reply.send(Response::Refused {
                message: format!("init is shutting down for a {}", action.name()),
            });
        }
    }
    if let Some(network) = boot.network.take() {
        let outcome = if network.stop(RELEASE_GRACE) {
            Outcome::ok_with("given back")
        } else {
            Outcome::Failed(format!(
                "the network thread did not stop within {} s; going on without releasing its leases",
                RELEASE_GRACE.as_secs()
            ))
        };
        console::milestone("leases", &outcome);
    }
    console::milestone("stop-processes", &kill_rest(&boot.paths.proc));
    // A release write in an ESP phase finishes that phase before the
    // ESP can be unmounted; then no job mounts it again (issue 28).
    let esp_hold = crate::esp::hold(ESP_GRACE);
    if esp_hold.is_none() {
        console::line(
            "shutdown: a release write still holds the ESP; going on (its entry comes last, so the running release still boots)",
        );
    }
    let kexec = action == PowerAction::Reboot && reboot_via(boot, &wanted, esp_hold.as_ref());
    boot.sys.power.sync();
    console::milestone("sync", &Outcome::Ok(None));
    // What k3s left mounted below /var (containerd's overlays, the
    // kubelet's volumes) first, deepest first, or /var stays busy.
    let (nested, nested_failed) =
        crate::k3s_host::unmount_nested(&*boot.sys.mount, &boot.paths.proc, &boot.paths.var);
    let nested_outcome = if nested_failed.is_empty() {
        Outcome::ok_with(format!("{nested} below {}", boot.paths.var.display()))
    } else {
        Outcome::Failed(format!(
            "could not unmount {}; data was synced first",
            nested_failed.join(", ")
        ))
    };
    console::milestone("unmount-nested", &nested_outcome);
    let (detached, failed) = mounts::unmount_all(&*boot.sys.mount, &boot.mounted);
    let outcome = if failed.is_empty() {
        let mut text = format!("{} filesystems", boot.mounted.len());
        if !detached.is_empty() {
            let list: Vec<String> = detached.iter().map(|d| d.display().to_string()).collect();
            text.push_str(&format!("; {} busy, detached", list.join(", ")));
        }
        Outcome::ok_with(text)
    } else {
        Outcome::Failed(format!(
            "could not unmount {}; data was synced first",
            failed.join(", ")
        ))
    };
    console::milestone("unmount", &outcome);
    if kexec {
        console::milestone("kexec", &Outcome::Ok(None));
        boot.sys.power.sync();
        let e = boot.sys.power.kexec_reboot();
        console::line(&format!(
            "kexec: the kernel refused the jump ({e}); rebooting through the firmware, which \
             counts the try once more"
        ));
    }
    power_off(boot, action)
}

/// Decides how the reboot goes, loads the next kernel for a kexec (the
/// ESP mounted under the shutdown's hold), and leaves the reason for a
/// firmware reboot on the data partition for the next boot's record.
/// Whether the reboot is by kexec.
fn reboot_via(boot: &Boot, wanted: &Wanted, hold: Option<&crate::esp::Hold>) -> bool {
    let loader = boot.assessment.as_ref().map(|p| &p.trial.loader);
    let esp_at = boot.paths.run_liken.join("esp");
    let mount = || match hold {
        Some(hold) => crate::esp::Esp::mount_holding(
            hold,
            &*boot.sys.mount,
            &boot.paths.sys,
            boot.paths.boot_disk.as_deref(),
            &esp_at,
        )
        .map_err(|e| e.to_string()),
        None => Err("a release write still held the ESP".to_owned()),
    };
    let prepared = crate::kexec::prepare(wanted, loader, mount, &*boot.sys.power);
    let outcome = match &prepared {
        Prepared::Kexec(what) => Outcome::ok_with(format!("by kexec: {what}")),
        Prepared::Firmware(why) => Outcome::ok_with(format!("through the firmware: {why}")),
    };
    console::milestone("reboot-via", &outcome);
    if let Err(e) = crate::kexec::write_note(&boot.paths.var_liken, &prepared) {
        console::line(&format!(
            "reboot-via: cannot keep the reason in {} ({e}); the next boot's record will not say it",
            boot.paths.var_liken.join(crate::kexec::NOTE).display()
        ));
    }
    matches!(prepared, Prepared::Kexec(_))
}

/// Reboots or powers off, retrying forever if the kernel refuses.
pub fn power_off(boot: &Boot, action: PowerAction) -> ! {
    console::milestone(action.name(), &Outcome::Ok(None));
    loop {
        boot.sys.power.sync();
        let e = boot.sys.power.reboot(action);
        console::line(&format!(
            "{}: the kernel refused ({e}); retrying in 10 s. Power the machine off by hand if this repeats",
            action.name()
        ));
        std::thread::sleep(Duration::from_secs(10));
    }
}
