//! Boot assessment (step 9): a release on trial is blessed once the
//! machine is healthy, and a trial that never gets healthy is ended by a
//! reboot, so the bootloader spends the slot's tries and falls back.
//!
//! At boot (the `assess` step) init looks at how it was booted: under
//! UEFI systemd-boot names the entry in the LoaderEntrySelected EFI
//! variable and keeps the try counter in the entry's file name; under
//! BIOS GRUB keeps it in grubenv. Either way the booted slot's entry is
//! *counted* (on trial) or blessed already, and the other slot's entry
//! may be *bad* (tries spent), which means this boot is a fallback from
//! a release that failed. That goes into the boot record.
//!
//! Healthy means what the cluster needs, not "init started": with k3s,
//! this machine's Node is `Ready=True` with a heartbeat taken after this
//! boot began. A Node object and the kubelet's kubeconfig survive
//! reboots, so "the apiserver answers and the node exists" can hold
//! while this boot's kubelet never started; a Ready condition whose
//! `lastHeartbeatTime` is older than the boot is such a leftover. The
//! kubelet stamps that time from this machine's own clock
//! (kubelet_node_status.go's setters), the same clock that dates the
//! boot, so the comparison holds even when the cluster's clocks differ.
//! init asks through the image's own `k3s kubectl get node <name>` with
//! a JSONPath template ([`NODE_JSONPATH`]: the name, then the Ready
//! condition's status, heartbeat and reason), run as a child with a
//! timeout, from a worker thread (every second for the first minute,
//! then every five: [`decide_poll`]), and reads only its stdout: a
//! warning on stderr is never taken for an answer. The worker wakes the
//! supervisor loop with the healthy answer, so the blessing follows it
//! at once. So init needs no TLS client and no JSON decoder for it, and
//! stays small. Without k3s (tests with the stand-in) `liken.bless-after=<s>`
//! on the command line makes "the supervised service has stayed up that
//! long" the test; it stays on the entry a test wrote it into, since
//! neither install nor the release writer carries it on.
//!
//! Blessing removes the counter: the UEFI entry is renamed to
//! `liken-<slot>.conf` (`decide_bless`; the directory fsynced after),
//! or the slot's tries variable is removed from grubenv, rewritten in
//! place as one 1024-byte block (`decide_grub_bless`). A counted boot
//! that is not healthy by its deadline (`liken.bless-deadline=<s>`,
//! [`DEFAULT_DEADLINE`] otherwise) is rebooted through the orderly
//! shutdown.
//!
//! The decisions are pure functions ([`decide_trial`],
//! [`decide_health`], [`decide_verdict`], [`decide_k3s_health`]); the
//! supervisor loop ([`crate::serve`]) calls [`Assessor::poll`] and
//! carries out what it says.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use liken_api::bootloader::{
    self, ENTRIES_DIR, EntryName, UKI_DIR, decide_grub_bless, parse_grubenv, render_grubenv,
};
use liken_api::{BootAssessment, Role, Slot, Time};

use crate::console::Outcome;
use crate::context::Boot;
use crate::esp::{Esp, EspError};
use crate::events::Event;
use crate::supervisor::State;
use crate::sys::command::{CommandOutput, CommandSpec, Runner};
use crate::sys::efivars;

// The plan's parts live below the steps (the Boot holds the plan);
// these are their public paths too.
pub use crate::assessment::{Health, K3sProbe, Loader, Plan, Trial};

/// How long a counted boot may take to become healthy.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(15 * 60);
/// How often k3s's health is asked once the boot's first minute of asking
/// has passed, and how often the loop looks at the answer on its own.
pub const POLL: Duration = Duration::from_secs(5);
/// How often it is asked at first. A boot on trial holds the fleet's
/// turn (the disruption budget) until it is blessed, and a node that
/// comes up well turns Ready in its first minute; each second between
/// that and the blessing is a second the next machine waits. One
/// `k3s kubectl` a second for a minute is cheap beside that.
pub const POLL_FIRST: Duration = Duration::from_secs(1);
/// How many asks go at [`POLL_FIRST`] before [`POLL`] takes over.
pub const FIRST_ASKS: u32 = 60;
/// How long one `k3s kubectl` may take.
pub const KUBECTL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long to wait before trying a blessing that failed again.
pub const RETRY: Duration = Duration::from_secs(30);
/// grubenv on the ESP (GRUB's prefix directory is `grub`).
pub const GRUBENV: &str = "grub/grubenv";
/// The milestone name.
pub const MILESTONE: &str = "bless";

/// Decides the trial from the slot on the command line, LoaderEntrySelected
/// (when systemd-boot booted), the entries in loader/entries and the
/// grubenv variables (when there is a grubenv). `Err` says why nothing
/// can be assessed.
pub fn decide_trial(
    slot: Slot,
    selected: Option<&str>,
    entries: &[String],
    grubenv: Option<&BTreeMap<String, String>>,
) -> Result<Trial, String> {
    if let Some(selected) = selected {
        let name = bootloader::selected_file_name(selected);
        let booted = EntryName::parse(&name)
            .map_err(|_| {
                format!(
                    "systemd-boot booted {selected:?}, which is not a liken entry: nothing to bless"
                )
            })?
            .slot;
        let parsed: Vec<EntryName> = entries
            .iter()
            .filter_map(|n| EntryName::parse(n).ok())
            .collect();
        let mine: Vec<&EntryName> = parsed.iter().filter(|e| e.slot == booted).collect();
        if mine.is_empty() {
            return Err(format!(
                "systemd-boot booted {selected:?}, but neither {ENTRIES_DIR} nor {UKI_DIR} holds \
                 an entry for slot {booted}; write the release again"
            ));
        }
        return Ok(Trial {
            loader: Loader::Uefi(selected.to_owned()),
            slot: booted,
            counted: mine.iter().any(|e| e.tries_left.is_some()),
            other_slot_bad: parsed
                .iter()
                .any(|e| e.slot == booted.other() && e.is_bad()),
        });
    }
    let Some(env) = grubenv else {
        return Err(
            "booted neither by systemd-boot (no LoaderEntrySelected) nor by GRUB (no grub/grubenv \
             on the ESP): no try counter to assess"
                .into(),
        );
    };
    Ok(Trial {
        loader: Loader::Grub,
        slot,
        counted: env.contains_key(&bootloader::grub_tries_var(slot)),
        other_slot_bad: env
            .get(&bootloader::grub_tries_var(slot.other()))
            .is_some_and(|v| v == "0"),
    })
}

/// The entry a kexec boot names (`liken.kexec=`): `Some(Some(entry))`
/// for systemd-boot's, `Some(None)` for GRUB's (grubenv counts), and
/// `None` when the boot came through the firmware, whose bootloader
/// says in LoaderEntrySelected.
pub fn decide_selected(kexec_arg: Option<&str>) -> Option<Option<String>> {
    match kexec_arg? {
        liken_api::next_boot::KEXEC_GRUB => Some(None),
        entry => Some(Some(entry.to_owned())),
    }
}

/// The kubeconfig k3s writes on a server (admin) and on an agent
/// (the kubelet's, which may read /readyz and its own node).
pub fn kubeconfig_for(role: Role) -> &'static str {
    match role {
        Role::Leader => "/etc/rancher/k3s/k3s.yaml",
        Role::Follower => "/var/lib/rancher/k3s/agent/kubelet.kubeconfig",
    }
}

/// Decides the health test: `liken.bless-after` when given, else k3s's
/// when there is a k3s to run (`k3s`: its path if the image has it, the
/// role and node name from the documents).
pub fn decide_health(
    bless_after: Option<u64>,
    k3s: Option<&Path>,
    role_and_node: Option<(Role, &str)>,
    no_service: Option<&str>,
) -> Health {
    if let Some(s) = bless_after {
        return Health::Uptime(Duration::from_secs(s));
    }
    match (k3s, role_and_node) {
        (Some(k3s), Some((role, node))) => Health::K3s(K3sProbe {
            k3s: k3s.to_owned(),
            kubeconfig: kubeconfig_for(role).into(),
            node: node.to_owned(),
        }),
        _ => Health::Never(
            no_service
                .unwrap_or("there is no k3s to become healthy")
                .to_owned(),
        ),
    }
}

/// What kubectl prints of the Node: its name, then its Ready
/// condition's status, heartbeat and reason, separated by spaces (text
/// outside a JSONPath template's braces is printed as it is; a filter
/// picks the Ready condition). kubectl does the JSON, so init carries no
/// JSON decoder for it.
pub const NODE_JSONPATH: &str = "jsonpath={.metadata.name} \
    {range .status.conditions[?(@.type==\"Ready\")]}{.status} {.lastHeartbeatTime} {.reason}{end}";

/// The question for k3s: this machine's Node, on stdout.
pub fn probe_command(p: &K3sProbe) -> CommandSpec {
    let kc = p.kubeconfig.display().to_string();
    CommandSpec::new(
        &p.k3s,
        &[
            "kubectl",
            "--kubeconfig",
            &kc,
            "get",
            "node",
            &p.node,
            "-o",
            NODE_JSONPATH,
        ],
        KUBECTL_TIMEOUT,
    )
}

/// Decides from `k3s kubectl get node <node> -o` [`NODE_JSONPATH`]
/// whether the node is healthy this boot: `Ok` with a detail, or `Err`
/// with what is not there yet. Only stdout is read; `since` is when this
/// boot began.
pub fn decide_k3s_health(
    node: &str,
    since: Time,
    answer: &io::Result<CommandOutput>,
) -> Result<String, String> {
    let out = match answer {
        Err(e) => return Err(format!("node {node}: cannot run k3s kubectl ({e})")),
        Ok(out) => out,
    };
    match &out.status {
        None => {
            return Err(format!(
                "node {node}: k3s kubectl ran past {} s",
                KUBECTL_TIMEOUT.as_secs()
            ));
        }
        Some(s) if !out.success() => {
            return Err(format!("node {node}: k3s kubectl {s}: {}", out.last_line()));
        }
        Some(_) => {}
    }
    let mut words = out.stdout.split_whitespace();
    let name = words.next().unwrap_or("");
    if name != node {
        return Err(format!(
            "node {node}: k3s kubectl answered for {name:?}, not this node"
        ));
    }
    let (Some(status), Some(heartbeat)) = (words.next(), words.next()) else {
        return Err(format!("node {node} has no Ready condition yet"));
    };
    let reason = words.next().unwrap_or("");
    if status != "True" {
        return Err(format!(
            "node {node} is not Ready (Ready={status}: {reason})"
        ));
    }
    let beat: Time = heartbeat.parse().map_err(|e| {
        format!("node {node} is Ready, but its heartbeat time cannot be read ({e})")
    })?;
    if beat < since {
        return Err(format!(
            "node {node} is Ready, but its last heartbeat ({beat}) is from before this boot \
             began ({since}): this boot's kubelet has not reported yet"
        ));
    }
    Ok(format!(
        "node {node} is Ready with a heartbeat at {beat}, after this boot began ({since})"
    ))
}

/// What the loop should do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing until this instant.
    Wait(Instant),
    /// The boot is healthy: bless it (the detail says why).
    Bless(String),
    /// The deadline passed: reboot (the message says why).
    Reboot(String),
    /// Nothing more to do this boot.
    Done,
}

/// Decides the next move of a counted boot's assessment. `service`: the
/// supervised service's state; `k3s`: the worker's finding (healthy
/// detail, or the last reason it is not).
pub fn decide_verdict(
    health: &Health,
    started: Instant,
    deadline: Duration,
    now: Instant,
    service: State,
    k3s: Option<&Result<String, String>>,
) -> Verdict {
    let due = started.checked_add(deadline).unwrap_or(now);
    let next = |at: Instant| Verdict::Wait(at.min(due));
    let not_yet = match health {
        Health::Uptime(after) => match service {
            State::Running { since, .. } => {
                let up = now.saturating_duration_since(since);
                if up >= *after {
                    return Verdict::Bless(format!(
                        "the supervised service has stayed up {} s (liken.bless-after)",
                        after.as_secs()
                    ));
                }
                if now < due {
                    return next(since.checked_add(*after).unwrap_or(now));
                }
                format!(
                    "the supervised service had been up only {:.0} s of the {} s liken.bless-after asks",
                    up.as_secs_f64(),
                    after.as_secs()
                )
            }
            _ => {
                if now < due {
                    return next(now.checked_add(POLL).unwrap_or(now));
                }
                "the supervised service is not running".to_owned()
            }
        },
        Health::K3s(_) => match k3s {
            Some(Ok(detail)) => return Verdict::Bless(detail.clone()),
            _ if now < due => return next(now.checked_add(POLL).unwrap_or(now)),
            Some(Err(why)) => why.clone(),
            None => "k3s's health was never answered".to_owned(),
        },
        Health::Never(why) => {
            if now < due {
                return Verdict::Wait(due);
            }
            why.clone()
        }
        Health::Broken(why) => {
            return Verdict::Reboot(format!(
                "this boot cannot become healthy ({why}); rebooting now so the bootloader \
                 spends a try of this slot and, once they are spent, falls back to the other one"
            ));
        }
    };
    Verdict::Reboot(format!(
        "this boot did not become healthy within {} s ({not_yet}); rebooting so the bootloader \
         spends a try of this slot and, once they are spent, falls back to the other one",
        deadline.as_secs()
    ))
}

/// The k3s worker's findings, shared with the loop.
type Finding = Arc<Mutex<Option<Result<String, String>>>>;

/// The assessment while the machine runs: the plan and what is known.
pub struct Assessor {
    plan: Option<Plan>,
    started: Instant,
    finding: Finding,
    retry_at: Option<Instant>,
    done: bool,
}

impl Assessor {
    /// Starts the assessment of a plan (none: nothing to assess). A k3s
    /// health test starts its worker thread now; `since` is when this
    /// boot began by the wall clock (after the ntp step set it), which a
    /// heartbeat must follow.
    pub fn start(
        plan: Option<Plan>,
        started: Instant,
        since: Time,
        runner: Arc<dyn Runner + Send + Sync>,
        events: Sender<Event>,
    ) -> Assessor {
        let finding: Finding = Arc::new(Mutex::new(None));
        let counted = plan.as_ref().is_some_and(|p| p.trial.counted && !p.blessed);
        if counted
            && let Some(Plan {
                health: Health::K3s(probe),
                ..
            }) = &plan
        {
            let probe = probe.clone();
            let shared = Arc::clone(&finding);
            let spawned = std::thread::Builder::new()
                .name("k3s-health".into())
                .spawn(move || k3s_worker(&probe, since, &*runner, &shared, &events));
            if let Err(e) = spawned {
                crate::console::line(&format!(
                    "bless: cannot start the k3s health thread ({e}); this boot cannot be blessed"
                ));
            }
        }
        Assessor {
            plan,
            started,
            finding,
            retry_at: None,
            done: !counted,
        }
    }

    /// When the loop must call [`Assessor::poll`] next; `None`: never.
    pub fn wake(&self, now: Instant, service: State) -> Option<Instant> {
        match self.verdict(now, service) {
            Verdict::Wait(at) => Some(at),
            Verdict::Done => None,
            _ => Some(now),
        }
    }

    fn verdict(&self, now: Instant, service: State) -> Verdict {
        let Some(plan) = &self.plan else {
            return Verdict::Done;
        };
        if self.done {
            return Verdict::Done;
        }
        let finding = self
            .finding
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let v = decide_verdict(
            &plan.health,
            self.started,
            plan.deadline,
            now,
            service,
            finding.as_ref(),
        );
        match (v, self.retry_at) {
            (Verdict::Bless(_), Some(at)) if now < at => Verdict::Wait(at),
            (v, _) => v,
        }
    }

    /// What to do now.
    pub fn poll(&self, now: Instant, service: State) -> Verdict {
        self.verdict(now, service)
    }

    /// The blessing worked: nothing more to do; returns the record's part.
    pub fn blessed(&mut self) -> Option<BootAssessment> {
        self.done = true;
        let plan = self.plan.as_mut()?;
        plan.blessed = true;
        Some(plan.record())
    }

    /// The blessing failed: try again after [`RETRY`] (the deadline still
    /// holds).
    pub fn failed(&mut self, now: Instant) {
        self.retry_at = now.checked_add(RETRY);
    }

    /// The plan, for blessing.
    pub fn plan(&self) -> Option<&Plan> {
        self.plan.as_ref()
    }
}

/// The pause before the `asked`-th ask (counting from 0): often at first,
/// then every [`POLL`].
pub fn decide_poll(asked: u32) -> Duration {
    if asked < FIRST_ASKS { POLL_FIRST } else { POLL }
}

fn k3s_worker(
    probe: &K3sProbe,
    since: Time,
    runner: &dyn Runner,
    finding: &Finding,
    events: &Sender<Event>,
) {
    let command = probe_command(probe);
    let mut asked: u32 = 0;
    loop {
        std::thread::sleep(decide_poll(asked));
        asked = asked.saturating_add(1);
        let verdict = decide_k3s_health(&probe.node, since, &runner.run(&command));
        let healthy = verdict.is_ok();
        *finding
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(verdict);
        if healthy {
            // The loop may be asleep until its next poll; it blesses now.
            // A loop that is gone has nothing left to bless.
            let _ = events.send(Event::Healthy);
            return;
        }
    }
}

/// Carries out the blessing on the ESP: the entry renamed (UEFI) or the
/// slot's tries removed from grubenv (GRUB). Returns what was done.
pub fn bless(esp: &Esp<'_>, trial: &Trial) -> Result<String, String> {
    let io = |e: EspError| e.to_string();
    match &trial.loader {
        Loader::Uefi(selected) => {
            let entries = esp.list_entries().map_err(io)?;
            match bootloader::decide_bless(selected, &entries) {
                Some((from, to)) => {
                    let from = bootloader::entry_path(&from);
                    esp.rename(&from, &bootloader::entry_path(&to))
                        .map_err(io)?;
                    Ok(format!("{from} renamed to {to}"))
                }
                None => Ok(format!("slot {}'s entry was blessed already", trial.slot)),
            }
        }
        Loader::Grub => {
            let block = esp.read(GRUBENV).map_err(io)?;
            let env = parse_grubenv(&block).map_err(|e| e.to_string())?;
            match decide_grub_bless(&env, trial.slot) {
                Some(next) => {
                    let bytes = render_grubenv(&next).map_err(|e| e.to_string())?;
                    esp.overwrite_in_place(GRUBENV, &bytes).map_err(io)?;
                    Ok(format!(
                        "{} removed from {GRUBENV}",
                        bootloader::grub_tries_var(trial.slot)
                    ))
                }
                None => Ok(format!(
                    "slot {} was blessed already in {GRUBENV}",
                    trial.slot
                )),
            }
        }
    }
}

/// Does what the assessment asks now, from the supervisor loop: blesses
/// a healthy boot (on the ESP, then in the boot record), or returns the
/// reason to reboot when the deadline has passed.
pub fn run_due(boot: &mut Boot, service: State, assess: &mut Assessor) -> Option<String> {
    let now = Instant::now();
    match assess.poll(now, service) {
        Verdict::Wait(_) | Verdict::Done => None,
        Verdict::Reboot(why) => {
            crate::console::milestone(MILESTONE, &Outcome::Failed(why.clone()));
            Some(why)
        }
        Verdict::Bless(why) => {
            let trial = assess.plan()?.trial.clone();
            let esp_mount = boot.paths.run_liken.join("esp");
            let result = match Esp::try_mount(
                &*boot.sys.mount,
                &boot.paths.sys,
                boot.paths.boot_disk.as_deref(),
                &esp_mount,
            ) {
                Ok(esp) => {
                    let done = bless(&esp, &trial);
                    if let Err(e) = esp.unmount() {
                        crate::console::line(&format!("esp: {e}"));
                    }
                    done
                }
                Err(e) => Err(e.to_string()),
            };
            match result {
                Ok(done) => {
                    let part = assess.blessed();
                    let mut note = String::new();
                    if let Some(record) = boot.record.as_mut() {
                        record.assessment = part;
                        if let Err(e) = crate::boot_record::publish(&boot.paths.run_liken, record) {
                            note = format!("; but the boot record could not be updated ({e})");
                        }
                    }
                    crate::console::milestone(
                        MILESTONE,
                        &Outcome::ok_with(format!("{done}: {why}{note}")),
                    );
                }
                Err(e) => {
                    assess.failed(now);
                    crate::console::milestone(
                        MILESTONE,
                        &Outcome::Failed(format!(
                            "the boot is healthy ({why}), but blessing it failed: {e}; \
                             trying again in {} s",
                            RETRY.as_secs()
                        )),
                    );
                }
            }
            None
        }
    }
}

/// The boot step: how this boot stands with the bootloader, and the
/// health test that will bless it.
pub fn step(boot: &mut Boot) -> Outcome {
    if boot.cmdline.install {
        return Outcome::Skipped("install mode".into());
    }
    let Some(slot) = boot.cmdline.slot else {
        return Outcome::ok_with("no slot booted: nothing to assess");
    };
    // A boot reached by kexec names its entry on the command line: the
    // EFI variables still describe the boot before it (crate::kexec).
    let selected = match decide_selected(boot.cmdline.kexec.as_deref()) {
        Some(from_kexec) => from_kexec,
        None => {
            if let Err(e) = crate::efivarfs::ensure_mounted(boot) {
                crate::console::line(&format!("assess: {e}"));
            }
            match efivars::loader_entry_selected(&boot.paths.sys) {
                Ok(s) => s,
                Err(e) => {
                    return Outcome::Failed(format!(
                        "{e}; this boot cannot be blessed, so after its tries the other slot boots"
                    ));
                }
            }
        }
    };
    let esp_mount = boot.paths.run_liken.join("esp");
    let (entries, grubenv) = {
        let esp = match Esp::mount(
            &*boot.sys.mount,
            &boot.paths.sys,
            boot.paths.boot_disk.as_deref(),
            &esp_mount,
        ) {
            Ok(esp) => esp,
            Err(e) => {
                return Outcome::Failed(format!(
                    "{e}; this boot cannot be blessed, so after its tries the other slot boots"
                ));
            }
        };
        let entries = esp.list_entries().unwrap_or_default();
        let grubenv = match esp.exists(GRUBENV) {
            Ok(true) => esp.read(GRUBENV).ok().and_then(|b| parse_grubenv(&b).ok()),
            _ => None,
        };
        if let Err(e) = esp.unmount() {
            crate::console::line(&format!("esp: {e}"));
        }
        (entries, grubenv)
    };
    let trial = match decide_trial(slot, selected.as_deref(), &entries, grubenv.as_ref()) {
        Ok(t) => t,
        Err(why) => return Outcome::ok_with(why),
    };
    let role_and_node = match (&boot.machine, &boot.cluster) {
        (Some(m), Some(c)) => {
            let role = if c.is_leader(&m.metadata.name) {
                Role::Leader
            } else {
                Role::Follower
            };
            Some((role, m.hostname().to_owned()))
        }
        _ => None,
    };
    let k3s = boot.paths.k3s.exists().then_some(boot.paths.k3s.as_path());
    let no_k3s = if boot.paths.k3s.exists() {
        "no valid Machine and Cluster documents, so k3s cannot start".to_owned()
    } else {
        format!(
            "this image has no k3s ({} is absent)",
            boot.paths.k3s.display()
        )
    };
    let health = match &boot.root_failure {
        // The root line said why; nothing after it can mend that.
        Some(_) => Health::Broken(format!(
            "slot {}'s system image did not become the root (the root line says why)",
            trial.slot
        )),
        None => decide_health(
            boot.cmdline.bless_after,
            k3s,
            role_and_node.as_ref().map(|(r, n)| (*r, n.as_str())),
            Some(&no_k3s),
        ),
    };
    let deadline = boot
        .cmdline
        .bless_deadline
        .map_or(DEFAULT_DEADLINE, Duration::from_secs);
    let loader = match &trial.loader {
        Loader::Uefi(sel) => format!("systemd-boot entry {sel}"),
        Loader::Grub => "GRUB".to_owned(),
    };
    let mut detail = if let (true, Health::Broken(why)) = (trial.counted, &health) {
        format!(
            "slot {} on trial ({loader}); it cannot become healthy: {why}, so it reboots now \
             and the bootloader spends a try",
            trial.slot
        )
    } else if trial.counted {
        let test = match &health {
            Health::Uptime(d) => format!("once the service has stayed up {} s", d.as_secs()),
            Health::K3s(p) => format!(
                "once node {} is Ready with a heartbeat from this boot",
                p.node
            ),
            Health::Never(why) | Health::Broken(why) => format!("never: {why}"),
        };
        format!(
            "slot {} on trial ({loader}); blessing {test}, rebooting if not healthy within {} s",
            trial.slot,
            deadline.as_secs()
        )
    } else {
        format!("slot {} is blessed ({loader})", trial.slot)
    };
    if trial.other_slot_bad {
        detail.push_str(&format!(
            "; slot {}'s entry has spent its tries: this boot fell back from it",
            trial.slot.other()
        ));
    }
    let blessed = !trial.counted;
    boot.assessment = Some(Plan {
        trial,
        health,
        deadline,
        blessed,
    });
    Outcome::ok_with(detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    use crate::events::ExitStatus;
    use crate::sys::command::FakeRunner;
    use crate::sys::mount::FakeMounter;

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_kexec_boot_names_its_entry_on_the_command_line() {
        assert_eq!(decide_selected(None), None);
        assert_eq!(decide_selected(Some("grub")), Some(None));
        let selected = decide_selected(Some("liken-b+3.conf")).unwrap();
        assert_eq!(selected.as_deref(), Some("liken-b+3.conf"));
        // The entry was renamed when the try was counted; the trial is
        // read from the slot it names, as with LoaderEntrySelected.
        let t = decide_trial(
            Slot::B,
            selected.as_deref(),
            &names(&["liken-a.conf", "liken-b+2-1.conf"]),
            None,
        )
        .unwrap();
        assert_eq!(t.slot, Slot::B);
        assert!(t.counted);
    }

    #[test]
    fn uefi_trials_come_from_the_entries() {
        let entries = names(&["liken-a+2-1.conf", "liken-b+0-3.conf"]);
        let t = decide_trial(Slot::A, Some("liken-a+3.conf"), &entries, None).unwrap();
        assert_eq!(t.loader, Loader::Uefi("liken-a+3.conf".into()));
        assert!(t.counted && t.other_slot_bad);
        let t = decide_trial(
            Slot::A,
            Some("liken-a.conf"),
            &names(&["liken-a.conf"]),
            None,
        )
        .unwrap();
        assert!(!t.counted && !t.other_slot_bad);
        // The selected entry decides the slot.
        let t = decide_trial(
            Slot::A,
            Some("liken-b+3.conf"),
            &names(&["liken-b+2-1.conf"]),
            None,
        )
        .unwrap();
        assert_eq!(t.slot, Slot::B);
        assert!(decide_trial(Slot::A, Some("windows.conf"), &entries, None).is_err());
        assert!(
            decide_trial(
                Slot::A,
                Some("liken-a.conf"),
                &names(&["liken-b.conf"]),
                None
            )
            .unwrap_err()
            .contains("holds an entry for slot A")
        );
        assert!(decide_trial(Slot::A, None, &entries, None).is_err());
        // A unified kernel image is a type #2 entry: LoaderEntrySelected
        // names its file, counter and .efi included.
        let ukis = names(&["liken-a.conf", "liken-b+2-1.efi"]);
        let t = decide_trial(Slot::A, Some("liken-b+3.efi"), &ukis, None).unwrap();
        assert_eq!(t.slot, Slot::B);
        assert!(t.counted && !t.other_slot_bad);
    }

    #[test]
    fn grub_trials_come_from_grubenv() {
        let env: BTreeMap<String, String> = [
            ("liken_b_tries".to_owned(), "2".to_owned()),
            ("liken_a_tries".to_owned(), "0".to_owned()),
        ]
        .into();
        let t = decide_trial(Slot::B, None, &[], Some(&env)).unwrap();
        assert_eq!(t.loader, Loader::Grub);
        assert!(t.counted && t.other_slot_bad);
        let t = decide_trial(Slot::A, None, &[], Some(&BTreeMap::new())).unwrap();
        assert!(!t.counted && !t.other_slot_bad);
    }

    fn out(code: i32, stdout: &str, stderr: &str) -> io::Result<CommandOutput> {
        Ok(CommandOutput {
            status: Some(ExitStatus::Code(code)),
            stdout: stdout.into(),
            stderr: stderr.into(),
        })
    }

    /// What `k3s kubectl get node <name> -o` [`NODE_JSONPATH`] prints.
    fn node_line(name: &str, ready: &str, heartbeat: &str) -> String {
        format!("{name} {ready} {heartbeat} KubeletReady")
    }

    #[test]
    fn k3s_health_needs_a_ready_node_with_a_heartbeat_from_this_boot() {
        let since: Time = "2026-12-03T10:00:00Z".parse().unwrap();
        let fresh = node_line("n1", "True", "2026-12-03T10:00:42Z");
        assert_eq!(
            decide_k3s_health("n1", since, &out(0, &fresh, "")),
            Ok(
                "node n1 is Ready with a heartbeat at 2026-12-03T10:00:42Z, after this boot \
                began (2026-12-03T10:00:00Z)"
                    .into()
            )
        );
        // The Node from before the reboot: Ready, but stale.
        let stale = node_line("n1", "True", "2026-12-03T09:58:10Z");
        let e = decide_k3s_health("n1", since, &out(0, &stale, "")).unwrap_err();
        assert!(e.contains("from before this boot began"), "{e}");
        // Fresh, but NotReady (or Unknown after the node controller's grace).
        for status in ["False", "Unknown"] {
            let not = node_line("n1", status, "2026-12-03T10:01:00Z");
            let e = decide_k3s_health("n1", since, &out(0, &not, "")).unwrap_err();
            assert!(e.contains(&format!("not Ready (Ready={status}")), "{e}");
        }
        // Noise on stderr is not read, whichever way it points: a
        // warning beside a good answer blesses, and a good-looking line
        // there beside a stale answer does not.
        let warned = out(
            0,
            &fresh,
            "W1203 10:00:43.1 loader.go:223] Config not found: /etc/rancher/k3s/k3s.yaml\n",
        );
        assert!(decide_k3s_health("n1", since, &warned).is_ok());
        let e = decide_k3s_health("n1", since, &out(0, &stale, &fresh)).unwrap_err();
        assert!(e.contains("from before this boot"), "{e}");
        // The answer on stderr only is no answer.
        assert!(
            decide_k3s_health("n1", since, &out(0, "", &fresh))
                .unwrap_err()
                .contains("answered for \"\"")
        );
        // Another node's, a failure, no Ready condition, a bad time.
        let other = node_line("n2", "True", "2026-12-03T10:00:42Z");
        assert!(
            decide_k3s_health("n1", since, &out(0, &other, ""))
                .unwrap_err()
                .contains("\"n2\", not this node")
        );
        let e = decide_k3s_health(
            "n1",
            since,
            &out(
                1,
                "",
                "Error from server (NotFound): nodes \"n1\" not found\n",
            ),
        )
        .unwrap_err();
        assert!(
            e.contains("exited with status 1") && e.contains("not found"),
            "{e}"
        );
        assert!(
            decide_k3s_health("n1", since, &out(0, "n1 ", ""))
                .unwrap_err()
                .contains("no Ready condition")
        );
        assert!(
            decide_k3s_health("n1", since, &out(0, "n1 True yesterday", ""))
                .unwrap_err()
                .contains("cannot be read")
        );
        let e = decide_k3s_health("n1", since, &Err(io::ErrorKind::NotFound.into())).unwrap_err();
        assert!(e.contains("cannot run"), "{e}");
        let timed = Ok(CommandOutput {
            status: None,
            stdout: String::new(),
            stderr: String::new(),
        });
        assert!(
            decide_k3s_health("n1", since, &timed)
                .unwrap_err()
                .contains("ran past")
        );
    }

    #[test]
    fn health_follows_the_command_line_then_k3s() {
        assert_eq!(
            decide_health(Some(5), Some(Path::new("/usr/bin/k3s")), None, None),
            Health::Uptime(Duration::from_secs(5))
        );
        let Health::K3s(p) = decide_health(
            None,
            Some(Path::new("/usr/bin/k3s")),
            Some((Role::Follower, "n2")),
            None,
        ) else {
            panic!()
        };
        assert_eq!(
            p.kubeconfig,
            PathBuf::from("/var/lib/rancher/k3s/agent/kubelet.kubeconfig")
        );
        assert_eq!(
            probe_command(&p).display(),
            "/usr/bin/k3s kubectl --kubeconfig /var/lib/rancher/k3s/agent/kubelet.kubeconfig \
             get node n2 -o jsonpath={.metadata.name} {range .status.conditions[?(@.type==\"Ready\")]}\
             {.status} {.lastHeartbeatTime} {.reason}{end}"
        );
        assert!(matches!(
            decide_health(None, None, Some((Role::Leader, "n")), Some("no k3s")),
            Health::Never(w) if w == "no k3s"
        ));
    }

    #[test]
    fn verdicts_over_time() {
        let t0 = Instant::now();
        let dl = Duration::from_secs(100);
        let up = Health::Uptime(Duration::from_secs(5));
        let running = State::Running {
            pid: 9,
            since: t0 + Duration::from_secs(2),
        };
        assert_eq!(
            decide_verdict(&up, t0, dl, t0 + Duration::from_secs(3), running, None),
            Verdict::Wait(t0 + Duration::from_secs(7))
        );
        assert!(matches!(
            decide_verdict(&up, t0, dl, t0 + Duration::from_secs(7), running, None),
            Verdict::Bless(_)
        ));
        assert_eq!(
            decide_verdict(&up, t0, dl, t0, State::NotStarted, None),
            Verdict::Wait(t0 + POLL)
        );
        let late = decide_verdict(&up, t0, dl, t0 + dl, State::NotStarted, None);
        assert!(
            matches!(&late, Verdict::Reboot(w) if w.contains("within 100 s") && w.contains("not running")),
            "{late:?}"
        );
        let k = Health::K3s(K3sProbe {
            k3s: "/usr/bin/k3s".into(),
            kubeconfig: "/k".into(),
            node: "n".into(),
        });
        let not = Err("k3s is not ready: refused".to_owned());
        assert_eq!(
            decide_verdict(
                &k,
                t0,
                dl,
                t0 + Duration::from_secs(98),
                running,
                Some(&not)
            ),
            Verdict::Wait(t0 + dl)
        );
        assert!(matches!(
            decide_verdict(&k, t0, dl, t0 + dl, running, Some(&not)),
            Verdict::Reboot(w) if w.contains("refused")
        ));
        assert!(matches!(
            decide_verdict(&k, t0, dl, t0, running, Some(&Ok("fine".into()))),
            Verdict::Bless(d) if d == "fine"
        ));
        let never = Health::Never("no k3s".into());
        assert_eq!(
            decide_verdict(&never, t0, dl, t0, running, None),
            Verdict::Wait(t0 + dl)
        );
        // A slot that did not become the root reboots at once, long
        // before the deadline.
        let broken = Health::Broken("slot B's system image did not become the root".into());
        let now = decide_verdict(&broken, t0, dl, t0, State::NotStarted, None);
        assert!(
            matches!(&now, Verdict::Reboot(w) if w.starts_with(
                "this boot cannot become healthy (slot B's system image did not become the \
                 root); rebooting now"
            )),
            "{now:?}"
        );
    }

    #[test]
    fn health_is_asked_every_second_for_a_minute_then_every_five() {
        assert_eq!(decide_poll(0), POLL_FIRST);
        assert_eq!(decide_poll(FIRST_ASKS - 1), POLL_FIRST);
        assert_eq!(decide_poll(FIRST_ASKS), POLL);
        assert_eq!(decide_poll(u32::MAX), POLL);
        assert_eq!(POLL_FIRST * FIRST_ASKS, Duration::from_secs(60));
    }

    #[test]
    fn a_healthy_answer_wakes_the_loop_and_blesses_without_its_poll() {
        let t0 = Instant::now();
        let plan = Plan {
            trial: Trial {
                loader: Loader::Grub,
                slot: Slot::B,
                counted: true,
                other_slot_bad: false,
            },
            health: Health::K3s(K3sProbe {
                k3s: "/usr/local/bin/k3s".into(),
                kubeconfig: "/etc/rancher/k3s/k3s.yaml".into(),
                node: "node-1".into(),
            }),
            deadline: Duration::from_secs(600),
            blessed: false,
        };
        let fake = FakeRunner::default();
        // Not Ready on the first ask, Ready with this boot's heartbeat
        // on the next: the answer the worker reports.
        fake.answer(
            "/usr/local/bin/k3s",
            "",
            0,
            "node-1 False 2026-12-07T00:00:01Z KubeletNotReady",
        );
        let runner: Arc<dyn Runner + Send + Sync> = Arc::new(fake.clone());
        let (events, woken) = crossbeam_channel::unbounded();
        let since: Time = "2026-12-07T00:00:00Z".parse().unwrap();
        let a = Assessor::start(Some(plan), t0, since, runner, events);
        // Between the first ask (a second in) and the second.
        std::thread::sleep(POLL_FIRST * 3 / 2);
        fake.script.lock().unwrap().clear();
        fake.answer(
            "/usr/local/bin/k3s",
            "",
            0,
            "node-1 True 2026-12-07T00:00:03Z KubeletReady",
        );
        // The second ask comes a second after the first, well before the
        // loop's own poll would look again.
        let asked = Instant::now();
        assert!(matches!(
            woken.recv_timeout(POLL_FIRST * 3),
            Ok(Event::Healthy)
        ));
        assert!(asked.elapsed() < POLL, "woken after {:?}", asked.elapsed());
        let running = State::Running { pid: 1, since: t0 };
        assert!(
            matches!(a.poll(Instant::now(), running), Verdict::Bless(d) if d.contains("node-1"))
        );
        assert_eq!(fake.calls().len(), 2);
    }

    #[test]
    fn the_assessor_blesses_once_and_retries_failures() {
        let t0 = Instant::now();
        let plan = Plan {
            trial: Trial {
                loader: Loader::Grub,
                slot: Slot::A,
                counted: true,
                other_slot_bad: false,
            },
            health: Health::Uptime(Duration::from_secs(1)),
            deadline: Duration::from_secs(60),
            blessed: false,
        };
        let runner: Arc<dyn Runner + Send + Sync> = Arc::new(FakeRunner::default());
        let (events, _) = crossbeam_channel::unbounded();
        let mut a = Assessor::start(
            Some(plan.clone()),
            t0,
            Time::EPOCH,
            Arc::clone(&runner),
            events.clone(),
        );
        let running = State::Running { pid: 1, since: t0 };
        let later = t0 + Duration::from_secs(2);
        assert!(matches!(a.poll(later, running), Verdict::Bless(_)));
        a.failed(later);
        assert_eq!(a.poll(later, running), Verdict::Wait(later + RETRY));
        let rec = a.blessed().unwrap();
        assert!(rec.blessed && rec.counted);
        assert_eq!(a.poll(later, running), Verdict::Done);
        assert_eq!(a.wake(later, running), None);
        // A blessed boot has nothing to assess.
        let done = Assessor::start(
            Some(Plan {
                blessed: true,
                trial: Trial {
                    counted: false,
                    ..plan.trial
                },
                ..plan
            }),
            t0,
            Time::EPOCH,
            runner,
            events,
        );
        assert_eq!(done.poll(t0, running), Verdict::Done);
    }

    #[test]
    fn blessing_renames_the_entry_or_rewrites_grubenv() {
        let dir = std::env::temp_dir().join(format!("liken-init-bless-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("loader/entries")).unwrap();
        std::fs::create_dir_all(dir.join("grub")).unwrap();
        std::fs::write(dir.join("loader/entries/liken-a+1-2.conf"), "a").unwrap();
        std::fs::write(dir.join("loader/entries/liken-b.conf"), "b").unwrap();
        let env: BTreeMap<String, String> = [
            ("liken_a_tries".to_owned(), "1".to_owned()),
            ("liken_slot".to_owned(), "a".to_owned()),
        ]
        .into();
        std::fs::write(dir.join(GRUBENV), render_grubenv(&env).unwrap()).unwrap();
        let m = FakeMounter::default();
        let esp = Esp::at_directory(&m, &dir);
        let uefi = Trial {
            loader: Loader::Uefi("liken-a+2-1.conf".into()),
            slot: Slot::A,
            counted: true,
            other_slot_bad: false,
        };
        assert_eq!(
            bless(&esp, &uefi).unwrap(),
            "loader/entries/liken-a+1-2.conf renamed to liken-a.conf"
        );
        assert_eq!(
            esp.list(ENTRIES_DIR).unwrap(),
            ["liken-a.conf", "liken-b.conf"]
        );
        assert!(bless(&esp, &uefi).unwrap().contains("blessed already"));
        // Slot B's signed image, booted on trial, is renamed in EFI/Linux.
        std::fs::create_dir_all(dir.join("EFI/Linux")).unwrap();
        std::fs::write(dir.join("EFI/Linux/liken-b+2-1.efi"), "MZ").unwrap();
        std::fs::remove_file(dir.join("loader/entries/liken-b.conf")).unwrap();
        let uki = Trial {
            loader: Loader::Uefi("liken-b+3.efi".into()),
            slot: Slot::B,
            counted: true,
            other_slot_bad: false,
        };
        assert_eq!(
            bless(&esp, &uki).unwrap(),
            "EFI/Linux/liken-b+2-1.efi renamed to liken-b.efi"
        );
        assert_eq!(esp.list("EFI/Linux").unwrap(), ["liken-b.efi"]);
        assert_eq!(esp.list_entries().unwrap(), ["liken-a.conf", "liken-b.efi"]);
        let grub = Trial {
            loader: Loader::Grub,
            ..uefi
        };
        assert_eq!(
            bless(&esp, &grub).unwrap(),
            "liken_a_tries removed from grub/grubenv"
        );
        let block = std::fs::read(dir.join(GRUBENV)).unwrap();
        assert_eq!(block.len(), bootloader::GRUBENV_SIZE);
        let back = parse_grubenv(&block).unwrap();
        assert_eq!(back.get("liken_slot").map(String::as_str), Some("a"));
        assert!(!back.contains_key("liken_a_tries"));
        assert!(bless(&esp, &grub).unwrap().contains("blessed already"));
        drop(esp);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
