//! The boot sequence as data: a table of named steps, each run once in
//! order, each printing exactly one milestone line.
//!
//! A step reads and adds to the [`Boot`] it is handed and returns an
//! [`Outcome`]. A failed step is recorded (the control socket's status
//! reports it) and the sequence goes on: later steps decide for
//! themselves whether they can still do their job, and say `skipped`
//! with the reason when they cannot. However a boot goes, the machine
//! ends in the supervisor loop, answering the control socket and
//! rebooting on request.
//!
//! Coldplug runs before the Machine is chosen (SPEC.md lists it after)
//! because the choice can depend on a network card's MAC address, and
//! the card has no /sys/class/net entry until its driver is loaded.
//! That first coldplug uses the initramfs's few drivers; the root step
//! starts a second, from the system image's full tree, on a worker
//! thread ([`crate::image_modules`]) so the steps after it need not wait
//! for drivers only some of them need ([`Boot::load_modules`]).
//! The layer's choice lets the root step find the disks; the documents
//! step, once /var is the data partition, promotes staged documents
//! and makes the running pair the boot's Machine and Cluster
//! ([`crate::staged`]), so every step that applies the Machine (its
//! modules, sysctls, hostname, network, NTP, k3s) comes after it.
//! Sysctls come right after the Machine's modules, as some parameters
//! exist only once their module is loaded. The clock is set (`ntp`) once
//! the network and resolv.conf are up, and k3s is seeded
//! ([`crate::seed`]) just before it is started.
//!
//! Boot assessment (step 9) is split: the `assess` step reads how the
//! bootloader counted this boot (before the boot record, which carries
//! it); the blessing itself happens later, from the supervisor loop,
//! once the boot is healthy ([`crate::bless`]).
//!
//! Install mode (step 12, [`crate::install`]) runs once the Machine's
//! modules are loaded (its disk may need one); on a boot that is not
//! an install it says `skipped`, and in install mode it leaves nothing
//! to supervise, so the k3s step skips.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use liken_api::control::StepProblem;
use liken_api::{Role, Time};

use crate::boot_record;
use crate::cmdline::Cmdline;
use crate::console::{self, Outcome};
use crate::context::{Boot, Paths};
use crate::layer;
use crate::modload;
use crate::mounts;
use crate::net;
use crate::supervisor::{Service, k3s_subcommand};
use crate::sysctls;

// The real paths name constants of the steps that own them (seed,
// staged), so they are put together here, above the steps, rather than
// in the context below them.
impl Paths {
    /// The machine's own.
    pub fn real() -> Paths {
        Paths {
            proc: "/proc".into(),
            sys: "/sys".into(),
            run_liken: liken_api::ondisk::RUN_LIKEN.into(),
            etc_liken: "/etc/liken".into(),
            modules: "/lib/modules".into(),
            k3s: "/usr/bin/k3s".into(),
            resolv_conf: "/etc/resolv.conf".into(),
            var: "/var".into(),
            var_liken: crate::staged::VAR_LIKEN.into(),
            share_liken: crate::seed::SHARE_LIKEN.into(),
            k3s_data: crate::seed::DATA_DIR.into(),
            k3s_config: crate::seed::CONFIG.into(),
            boot_disk: None,
        }
    }
}

/// One step: its milestone name and what it does.
pub struct Step {
    /// The name its milestone prints.
    pub name: &'static str,
    /// The step.
    pub run: fn(&mut Boot) -> Outcome,
}

/// The boot sequence.
pub const BOOT: &[Step] = &[
    Step {
        name: "mount",
        run: mount_pseudo,
    },
    Step {
        name: "control",
        run: start_control,
    },
    Step {
        name: "cmdline",
        run: read_cmdline,
    },
    Step {
        name: "modules",
        run: load_modules,
    },
    Step {
        name: crate::layer_credential::MILESTONE,
        run: crate::layer_credential::step,
    },
    Step {
        name: "machine",
        run: choose_machine,
    },
    Step {
        name: "root",
        run: find_root,
    },
    Step {
        name: crate::efivarfs::MILESTONE,
        run: crate::efivarfs::step,
    },
    Step {
        name: "documents",
        run: crate::staged::step,
    },
    Step {
        name: "machine-modules",
        run: load_machine_modules,
    },
    Step {
        name: "sysctls",
        run: apply_sysctls,
    },
    Step {
        name: crate::install::MILESTONE,
        run: crate::install::step,
    },
    Step {
        name: "hostname",
        run: set_hostname,
    },
    Step {
        name: "network",
        run: configure_network,
    },
    Step {
        name: "ntp",
        run: set_clock,
    },
    Step {
        name: "assess",
        run: crate::bless::step,
    },
    Step {
        name: "boot-record",
        run: publish_record,
    },
    Step {
        name: "k3s-seed",
        run: crate::seed::step,
    },
    Step {
        name: "k3s",
        run: decide_k3s,
    },
];

/// Runs the steps in order, printing each milestone.
pub fn run(boot: &mut Boot, steps: &[Step]) {
    for step in steps {
        let outcome = (step.run)(boot);
        if let Outcome::Failed(message) = &outcome {
            boot.problems.push(StepProblem {
                step: step.name.to_owned(),
                message: message.clone(),
            });
        }
        console::milestone(step.name, &outcome);
    }
}

fn mount_pseudo(boot: &mut Boot) -> Outcome {
    let (mounted, failures) = mounts::mount_all(&*boot.sys.mount, &mounts::pseudo());
    boot.mounted.extend(mounted);
    if failures.is_empty() {
        Outcome::Ok(None)
    } else {
        Outcome::Failed(format!(
            "{}; the machine goes on without them, but the image or kernel is broken: rebuild it",
            failures.join("; ")
        ))
    }
}

fn start_control(boot: &mut Boot) -> Outcome {
    let dir = &boot.paths.run_liken;
    let started = std::fs::create_dir_all(dir)
        .and_then(|()| crate::control::spawn(&dir.join("init.sock"), boot.events.clone()));
    match started {
        Ok(()) => Outcome::ok_with(format!("listening on {}", dir.join("init.sock").display())),
        Err(e) => Outcome::Failed(format!(
            "cannot listen on {}: {e}; the machine cannot take requests, \
             so reboot it with Ctrl-Alt-Del or its power button",
            dir.join("init.sock").display()
        )),
    }
}

fn read_cmdline(boot: &mut Boot) -> Outcome {
    match std::fs::read_to_string(boot.paths.proc.join("cmdline")) {
        Ok(text) => {
            boot.cmdline = Cmdline::parse(&text);
            let c = &boot.cmdline;
            if !c.unknown.is_empty() {
                return Outcome::Failed(format!(
                    "unknown liken arguments {}; correct them in the boot entry (liken.machine=, liken.install, liken.slot=)",
                    c.unknown.join(" ")
                ));
            }
            // The root step refuses the slot for it too (rootfs).
            if let Some(Err(e)) = &c.verity {
                return Outcome::Failed(format!("{e}; the slot will not be mounted"));
            }
            let mut detail = Vec::new();
            if let Some(m) = &c.machine {
                detail.push(format!("machine {m}"));
            }
            if let Some(s) = c.slot {
                detail.push(format!("slot {s}"));
            }
            if c.install {
                detail.push("install mode".to_owned());
            }
            if detail.is_empty() {
                Outcome::Ok(None)
            } else {
                Outcome::ok_with(detail.join(", "))
            }
        }
        Err(e) => Outcome::Failed(format!(
            "cannot read /proc/cmdline ({e}); continuing as if it were empty"
        )),
    }
}

fn load_modules(boot: &mut Boot) -> Outcome {
    let t0 = Instant::now();
    let tree = match modload::open_tree(&boot.paths.modules, &boot.paths.proc) {
        Ok(t) => t,
        Err(e) => {
            return Outcome::Failed(format!(
                "{e}; no modules loaded, so disks and network may be missing: rebuild the image"
            ));
        }
    };
    // Boot assessment reads EFI variables; loading their filesystem
    // here, from the initramfs, spares it a wait for the image's tree.
    let base: &[&str] = if crate::sys::efivars::is_efi_boot(&boot.paths.sys) {
        &["efivarfs"]
    } else {
        &[]
    };
    let report = modload::coldplug(&tree, &*boot.sys.modules, &boot.paths.sys, base);
    boot.modules_done.extend(report.loaded.iter().cloned());
    boot.modules_done
        .extend(modload::loaded_modules(&boot.paths.sys));
    boot.modules = Some(tree);
    match modload::describe(&report, t0.elapsed().as_secs_f64()) {
        Ok(text) => Outcome::ok_with(text),
        Err(text) => Outcome::Failed(text),
    }
}

fn choose_machine(boot: &mut Boot) -> Outcome {
    let etc = &boot.paths.etc_liken;
    let cluster = layer::read_cluster(etc);
    let candidates = match layer::read_machines(etc) {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(format!("{e}; boot with a layer made by `liken layer`")),
    };
    let macs = layer::read_macs(&boot.paths.sys);
    let dir = etc.join("machines").display().to_string();
    let machine =
        match layer::decide_machine(boot.cmdline.machine.as_deref(), &macs, &candidates, &dir) {
            Ok(m) => m.clone(),
            Err(e) => return Outcome::Failed(e.to_string()),
        };
    let name = machine.metadata.name.clone();
    boot.machine = Some(machine);
    match cluster {
        Ok(c) => {
            let role = if c.is_leader(&name) {
                Role::Leader
            } else {
                Role::Follower
            };
            let text = format!("{name}, {} of cluster {}", role.as_str(), c.metadata.name);
            boot.cluster = Some(c);
            Outcome::ok_with(text)
        }
        Err(e) => Outcome::Failed(format!("machine {name} chosen, but {e}")),
    }
}

fn load_machine_modules(boot: &mut Boot) -> Outcome {
    let Some(machine) = &boot.machine else {
        return skipped("no valid Machine document");
    };
    if machine.spec.modules.is_empty() {
        return Outcome::ok_with("none listed");
    }
    let names: Vec<String> = machine.spec.modules.clone();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let t0 = Instant::now();
    let Some(report) = boot.load_modules(&names) else {
        return Outcome::Failed(
            "the module tree could not be opened (see the modules and image-modules lines)".into(),
        );
    };
    match modload::describe(&report, t0.elapsed().as_secs_f64()) {
        Ok(text) => Outcome::ok_with(text),
        Err(text) => Outcome::Failed(text),
    }
}

fn apply_sysctls(boot: &mut Boot) -> Outcome {
    sysctls::step(boot.machine.as_ref(), &*boot.sys.sysctl)
}

fn find_root(boot: &mut Boot) -> Outcome {
    crate::rootfs::step(boot)
}

fn set_hostname(boot: &mut Boot) -> Outcome {
    let Some(machine) = &boot.machine else {
        return skipped("no valid Machine document");
    };
    let name = machine.hostname();
    match nix::unistd::sethostname(name) {
        Ok(()) => Outcome::ok_with(name.to_owned()),
        Err(e) => Outcome::Failed(format!("cannot set the hostname to {name:?}: {e}")),
    }
}

fn configure_network(boot: &mut Boot) -> Outcome {
    let Some(machine) = &boot.machine else {
        return skipped("no valid Machine document");
    };
    let spec = machine.spec.network.clone().unwrap_or_default();
    let sys = boot.paths.sys.clone();
    let mut found = net::read_interfaces(&sys);
    // A named interface's driver may be one the image's modules are
    // still loading: wait for them rather than report it missing.
    if net::decide_wait_for_drivers(&spec, &found)
        && let Some(worker) = &boot.image_modules
    {
        worker.settled();
        found = net::read_interfaces(&sys);
    }
    let mut report = net::Report::default();
    let modules = net::decide_modules(&spec);
    if !modules.is_empty() {
        match boot.load_modules(&modules) {
            Some(r) if r.failed.is_empty() && r.missing.is_empty() => {}
            Some(r) => {
                report.failed.extend(
                    r.failed
                        .iter()
                        .map(|(m, e)| format!("cannot load {m}, which bonds and VLANs need: {e}")),
                );
                report.failed.extend(
                    r.missing.iter().map(|m| {
                        format!("the image has no module {m}, which bonds and VLANs need")
                    }),
                );
            }
            None => report.failed.push(format!(
                "no module tree to load {} from; bonds and VLANs cannot be made",
                modules.join(" and ")
            )),
        }
    }
    let index_of = |name: &str| {
        std::fs::read_to_string(sys.join("class/net").join(name).join("ifindex"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let nl = std::sync::Arc::clone(&boot.sys.netlink);
    let links = net::decide_links(&spec, &found);
    net::apply(&links, &*nl, &*boot.sys.sysctl, &index_of, &mut report);
    let found = net::read_interfaces(&sys);
    let actions = net::decide_network(&spec, &found);
    net::apply(&actions, &*nl, &*boot.sys.sysctl, &index_of, &mut report);
    let wanted = report.dhcp.len();
    let daemon = net::daemon::spawn(net::daemon::Setup {
        dhcp: report.dhcp.clone(),
        spec: spec.clone(),
        problems: report.failed.clone(),
        run_liken: boot.paths.run_liken.clone(),
        resolv_conf: boot.paths.resolv_conf.clone(),
        netlink: std::sync::Arc::clone(&nl),
        events: boot.events.clone(),
    });
    let mut done = report.done.clone();
    match daemon {
        Ok(d) => {
            // The leases the boot waits for; the thread keeps asking
            // for any that are late.
            let deadline = Instant::now()
                .checked_add(net::DHCP_DEADLINE)
                .unwrap_or_else(Instant::now);
            let mut bound = Vec::new();
            let mut started = false;
            while !started || bound.len() < wanted {
                let left = deadline.saturating_duration_since(Instant::now());
                match d.next_ready(left) {
                    Some(net::daemon::Ready::Started) => started = true,
                    Some(net::daemon::Ready::Bound(what)) => bound.push(what),
                    None => break,
                }
            }
            for name in report.dhcp.iter().map(|l| &l.name) {
                if !bound
                    .iter()
                    .any(|b| b.split(' ').next() == Some(name.as_str()))
                {
                    report.failed.push(format!(
                        "{name}: no DHCP lease within {} s; init keeps asking in the background. \
                         Check the cable and the DHCP server, or give the interface static addresses",
                        net::DHCP_DEADLINE.as_secs()
                    ));
                }
            }
            done.extend(bound);
            boot.network = Some(d);
        }
        Err(e) => report.failed.push(format!(
            "cannot start the network thread ({e}): no DHCP, resolv.conf or network facts this boot"
        )),
    }
    if net::decide_wait_for_dad(&spec) {
        net::wait_for_dad(&*nl, std::time::Duration::from_secs(3));
    }
    if boot.paths.resolv_conf.exists() {
        done.push(format!("DNS in {}", boot.paths.resolv_conf.display()));
    }
    let done = if done.is_empty() {
        "loopback only".to_owned()
    } else {
        done.join(", ")
    };
    if report.failed.is_empty() {
        Outcome::ok_with(done)
    } else {
        Outcome::Failed(format!("{} (done: {done})", report.failed.join("; ")))
    }
}

fn publish_record(boot: &mut Boot) -> Outcome {
    // The ntp step may have set the clock since init started: date the
    // boot by the clock as it is now, less the time init has run, so a
    // machine that powered on with a wrong clock does not publish a boot
    // time (and so a boot id) that a later boot could repeat.
    if let Some(t) = SystemTime::now().checked_sub(boot.started_at.elapsed()) {
        boot.started = Time::from_system(t);
    }
    // A slot's boot was reached by kexec (its command line says so) or
    // through the firmware, for the reason the last shutdown left.
    let via = boot.cmdline.slot.map(|_| {
        crate::kexec::decide_via(
            boot.cmdline.kexec.as_deref(),
            crate::kexec::take_note(&boot.paths.var_liken),
        )
    });
    let mut record = boot_record::decide_record(
        boot.started,
        boot.cmdline.slot,
        boot_record::build_version(),
        boot.machine.as_ref(),
        boot.cluster.as_ref(),
        via,
    );
    record.assessment = boot.assessment.as_ref().map(crate::bless::Plan::record);
    record.root_verity.clone_from(&boot.root_verity);
    let result = std::fs::create_dir_all(&boot.paths.run_liken)
        .and_then(|()| boot_record::publish(&boot.paths.run_liken, &record));
    let outcome = match result {
        Ok(path) => {
            let via = match (&record.via, &record.via_reason) {
                (Some(v), Some(why)) => format!(", reached by {v} ({why})"),
                (Some(v), None) => format!(", reached by {v}"),
                (None, _) => String::new(),
            };
            Outcome::ok_with(format!(
                "{}, boot {}{via}",
                path.display(),
                record.boot_id().short()
            ))
        }
        Err(e) => Outcome::Failed(format!(
            "cannot write {}: {e}; the machine operator cannot see this boot",
            boot.paths.run_liken.join(boot_record::FILE).display()
        )),
    };
    boot.record = Some(record);
    outcome
}

fn set_clock(boot: &mut Boot) -> Outcome {
    // The ceiling is dated by every CA certificate this machine trusts:
    // a leader's (k3s's own once it has them, else the layer's) and the
    // ones k3s's agent fetched, which a follower has once its k3s ran
    // (k3s-io/k3s pkg/agent/config/config.go: DataDir/agent/client-ca.crt
    // and server-ca.crt).
    let mut certs = ca_certificates(&boot.paths);
    let agent = boot.paths.k3s_data.join("agent");
    certs.extend(["client-ca.crt", "server-ca.crt"].map(|f| agent.join(f)));
    let refs: Vec<&Path> = certs.iter().map(PathBuf::as_path).collect();
    crate::ntp::step(
        boot.machine.as_ref(),
        &*boot.sys.clock,
        &boot.paths.resolv_conf,
        &refs,
    )
}

fn decide_k3s(boot: &mut Boot) -> Outcome {
    // An earlier step (k3s-seed) found k3s unsafe to start.
    if let Some(why) = &boot.no_service {
        return skipped(why);
    }
    let (Some(machine), Some(cluster)) = (&boot.machine, &boot.cluster) else {
        boot.no_service = Some("no valid Machine and Cluster documents".into());
        return skipped("no valid Machine and Cluster documents");
    };
    if !boot.paths.k3s.exists() {
        let why = format!(
            "this image has no k3s ({} is absent); build it with K3S_BINARY=<path to k3s>",
            boot.paths.k3s.display()
        );
        boot.no_service = Some(why.clone());
        return Outcome::Failed(why);
    }
    let role = if cluster.is_leader(&machine.metadata.name) {
        Role::Leader
    } else {
        Role::Follower
    };
    let sub = k3s_subcommand(role);
    boot.service = Some(Service {
        program: boot.paths.k3s.clone(),
        args: vec![sub.to_owned()],
        limits: crate::k3s_host::LIMITS.to_vec(),
    });
    let what = format!("k3s {sub} (LimitNOFILE=1048576, LimitNPROC and LimitCORE infinity)");
    match check_ca_clock(&boot.paths) {
        Ok(()) => Outcome::ok_with(what),
        Err((wait, why)) => {
            boot.k3s_hold = Some(std::time::Duration::from_secs(wait));
            Outcome::Failed(format!("{why} ({what})"))
        }
    }
}

/// Whether the clock has passed the notBefore of every CA certificate
/// k3s will use ([`ca_certificates`]). `Err`: how many seconds to hold
/// k3s, and why.
fn check_ca_clock(paths: &Paths) -> Result<(), (u64, String)> {
    let certs = ca_certificates(paths);
    let refs: Vec<&Path> = certs.iter().map(PathBuf::as_path).collect();
    match crate::ca_time::latest_not_before(&refs) {
        Ok(Some((not_before, from))) => {
            crate::ca_time::decide_clock(Time::from_system(SystemTime::now()), not_before, &from)
        }
        Ok(None) => Ok(()),
        // k3s reports an unreadable certificate itself, more precisely.
        Err(why) => {
            console::line(&format!("k3s: {why}"));
            Ok(())
        }
    }
}

/// The CA certificates k3s's server side will use: those in its data
/// directory once it has them, else the layer's.
fn ca_certificates(paths: &Paths) -> Vec<PathBuf> {
    let data = paths.k3s_data.join("server/tls");
    let layer = paths
        .etc_liken
        .join(crate::seed::LAYER_IDENTITY)
        .join("tls");
    let dir = if data.join("server-ca.crt").exists() {
        data
    } else {
        layer
    };
    crate::seed::IDENTITY_FILES
        .iter()
        .filter(|(rel, secret)| !secret && rel.ends_with(".crt"))
        .map(|(rel, _)| dir.join(rel))
        .collect()
}

fn skipped(why: &str) -> Outcome {
    Outcome::Skipped(why.to_owned())
}
