//! One machine of a fleet under QEMU: installed from the fleet's
//! `liken stick` image onto its own disk, then booted from that disk on
//! QEMU's user network for as long as the test runs.
//!
//! The install is a person's: the stick on USB beside a blank disk,
//! the machine's entry chosen in systemd-boot's menu (`j` and `k` to
//! move, read back from what the console drew, and Enter: a stick for
//! several machines waits for a choice), install mode's milestones, the stick pulled and Enter
//! pressed. The installed machine then runs in one QEMU process whose
//! guest reboots in place (the firmware, systemd-boot's try counters in
//! OVMF's variables and the disk stay), so a reboot the machine asks for
//! is the machine's own. Its console goes to one log
//! (`<target>/qemu-logs/<fleet>-<machine>.log`, appended across starts)
//! and, each line stamped with the moment the host received it, to one
//! timeline ([`Machine::console`]) that the downtime judge reads
//! ([`Machine::signs`]). [`Machine::kill`] pulls its power;
//! [`Machine::boot`] starts it again; both are noted with their times.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::downtime::{Sign, read_console};
use super::host::MachineSpec;
use super::progress::step;
use crate::firmware::{Firmware, Ovmf};
use crate::install::{blank_disk, install_args, pull_stick_and_power_off};
use crate::{Launch, Timeline, Vm, drives};

/// The entries of systemd-boot's menu as the serial console drew them
/// last, top to bottom, and which one is highlighted: each entry is
/// drawn at a cursor position (`ESC[<row>;<col>H`), the highlighted one
/// in black on white (`ESC[30m ESC[47m`) before its text.
pub fn read_menu(drawn: &str) -> (Vec<String>, Option<String>) {
    let mut rows: std::collections::BTreeMap<u32, String> = Default::default();
    let mut highlighted = None;
    let (mut row, mut fg, mut bg) = (0u32, 0u32, 0u32);
    for chunk in drawn.split('\x1b').skip(1) {
        let Some(rest) = chunk.strip_prefix('[') else {
            continue;
        };
        // The sequence ends at its first letter; text may follow it.
        let Some(end) = rest.find(|c: char| c.is_ascii_alphabetic()) else {
            continue;
        };
        let (args, kind, text) = (&rest[..end], &rest[end..=end], &rest[end + 1..]);
        match kind {
            "H" => {
                row = args
                    .split(';')
                    .next()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0)
            }
            "m" => match args.parse::<u32>().unwrap_or(0) {
                0 => (fg, bg) = (0, 0),
                c @ 30..=37 => fg = c,
                c @ 40..=47 => bg = c,
                _ => {}
            },
            _ => {}
        }
        let title = text.trim();
        if title.starts_with("Install liken") {
            rows.insert(row, title.to_owned());
            if (fg, bg) == (30, 47) {
                highlighted = Some(title.to_owned());
            }
        }
    }
    (rows.into_values().collect(), highlighted)
}

/// Moves systemd-boot's highlight to the entry titled `title` with `j`
/// and `k` (down and up, plain characters, so the firmware's terminal
/// has no escape sequence to time), reading the menu back after each
/// key; fails the test if it cannot.
fn choose(vm: &mut Vm, title: &str) {
    vm.expect_drawn(title, BOOT);
    for _ in 0..10 {
        // The whole menu is drawn once its last entry is.
        std::thread::sleep(Duration::from_millis(500));
        let (entries, highlighted) = read_menu(&vm.drawn());
        let (Some(want), Some(now)) = (
            entries.iter().position(|e| e == title),
            highlighted
                .as_ref()
                .and_then(|h| entries.iter().position(|e| e == h)),
        ) else {
            continue;
        };
        if want == now {
            return;
        }
        vm.send_serial(if want > now { "j" } else { "k" });
    }
    panic!(
        "systemd-boot's menu did not highlight {title:?}; the console is in {}",
        vm.log.display()
    );
}

/// OVMF, systemd-boot and the kernel under TCG with other machines on
/// the same cores, up to init's first lines.
pub const BOOT: Duration = Duration::from_secs(420);
/// A whole install from the emulated USB stick.
pub const INSTALL: Duration = Duration::from_secs(1200);
/// What follows a milestone already seen.
pub const NEXT: Duration = Duration::from_secs(180);
/// Each machine's memory.
pub const MEMORY_MIB: u32 = 1024;

/// Boots `stick` beside the blank `disk` (UEFI, a fresh variable store
/// in `dir`) and picks `name`'s entry in the stick's menu (release
/// `version`), as a person does at the console; returns the machine in
/// install mode, its console in `<log_name>-install.log`. Its variable
/// store is the installed machine's too ([`installed_ovmf`]). Several
/// machines install at once when each is begun before the first is
/// finished ([`finish_install`]).
pub fn begin_install(
    log_name: &str,
    dir: &Path,
    stick: &Path,
    disk: &Path,
    name: &str,
    version: &str,
) -> Vm {
    step(&format!(
        "{name}: installing from the stick (UEFI, TCG; console in {})",
        crate::log_dir()
            .join(format!("{log_name}-install.log"))
            .display()
    ));
    let mut vm = Vm::start(
        &format!("{log_name}-install"),
        &install_args(Firmware::Uefi, dir, stick, disk),
        &Launch {
            memory_mib: MEMORY_MIB,
            ..Launch::default()
        },
    );
    choose(&mut vm, &format!("Install liken {version} on {name}"));
    vm.send_serial("\r");
    vm.expect(
        &format!("liken: cmdline: ok (machine {name}, install mode)"),
        BOOT,
    );
    vm
}

/// Waits for install mode to write `name`'s disk, pulls the stick,
/// presses Enter and waits for the power-off.
pub fn finish_install(vm: &mut Vm, name: &str) {
    vm.expect(
        "liken: install: done; remove the install media and press Enter to power off",
        INSTALL,
    );
    pull_stick_and_power_off(vm, NEXT);
    step(&format!("{name}: installed in {:.0} s", vm.wall()));
}

/// The firmware of a machine [`begin_install`] installed in `dir`: the
/// variable store install mode's boot used, since the installed machine
/// is the same computer.
pub fn installed_ovmf(dir: &Path) -> Ovmf {
    Ovmf {
        code: PathBuf::from("/usr/share/OVMF/OVMF_CODE.fd"),
        vars: dir.join("OVMF_VARS.fd"),
    }
}

/// A machine of the fleet.
pub struct Machine {
    /// What it is.
    pub spec: MachineSpec,
    /// Its disk.
    pub disk: PathBuf,
    /// The console log's name (`<fleet>-<machine>`).
    pub log_name: String,
    ovmf: Ovmf,
    vm: Option<Vm>,
    /// How many times its QEMU was started.
    pub starts: u32,
    /// Every console line of the installed machine, across its starts,
    /// with the moment the host received it.
    pub console: Timeline,
    /// The test's hand on its power: each power-on and kill, timed.
    pub power: Vec<(Instant, Sign)>,
}

impl Machine {
    /// Installs `spec` from `stick` (whose menu lists it as release
    /// `version`) onto a blank disk in `dir`.
    pub fn install(
        fleet: &str,
        spec: &MachineSpec,
        dir: &Path,
        stick: &Path,
        version: &str,
    ) -> Machine {
        let mdir = dir.join(&spec.name);
        std::fs::create_dir_all(&mdir).unwrap_or_else(|e| panic!("{}: {e}", mdir.display()));
        let disk = mdir.join("disk.img");
        blank_disk(&disk);
        let log_name = format!("{fleet}-{}", spec.name);
        let mut vm = begin_install(&log_name, &mdir, stick, &disk, &spec.name, version);
        finish_install(&mut vm, &spec.name);
        drop(vm);
        Machine {
            spec: spec.clone(),
            disk,
            log_name,
            ovmf: installed_ovmf(&mdir),
            vm: None,
            starts: 0,
            console: Timeline::default(),
            power: Vec::new(),
        }
    }

    fn args(&self) -> Vec<OsString> {
        let mut args = self.ovmf.args();
        args.extend(drives::virtio("target", &self.disk, Some(0), false));
        args.extend(
            [
                "-netdev".to_owned(),
                "user,id=n0".to_owned(),
                "-device".to_owned(),
                format!("virtio-net-pci,netdev=n0,mac={}", self.spec.mac),
                // A machine has a hardware random source; key generation
                // at boot should not wait for entropy.
                "-device".to_owned(),
                "virtio-rng-pci".to_owned(),
            ]
            .map(OsString::from),
        );
        args
    }

    /// Starts (or starts again) the installed machine.
    pub fn boot(&mut self) {
        self.starts += 1;
        self.power.push((Instant::now(), Sign::PoweredOn));
        step(&format!(
            "{}: powering on (console in {})",
            self.spec.name,
            crate::log_dir()
                .join(format!("{}.log", self.log_name))
                .display()
        ));
        self.vm = Some(Vm::start(
            &self.log_name,
            &self.args(),
            &Launch {
                memory_mib: MEMORY_MIB,
                reboot_in_place: true,
                append_log: true,
                timeline: Some(self.console.clone()),
                ..Launch::default()
            },
        ));
    }

    /// Pulls the machine's power (SIGKILL to QEMU).
    pub fn kill(&mut self) {
        self.power.push((Instant::now(), Sign::Killed));
        if let Some(vm) = self.vm.as_mut() {
            vm.kill();
        }
        step(&format!("{}: power pulled (QEMU killed)", self.spec.name));
        self.vm = None;
    }

    /// What the machine did by its console, and what the test did to
    /// its power, in time order: the downtime judge's evidence from this
    /// side (the Node's comes from the watch history).
    pub fn signs(&self) -> Vec<(Instant, Sign)> {
        let mut signs: Vec<(Instant, Sign)> = self
            .console
            .lock()
            .map(|lines| {
                lines
                    .iter()
                    .filter_map(|l| Some((l.at, read_console(&l.text)?)))
                    .collect()
            })
            .unwrap_or_default();
        signs.extend(self.power.iter().cloned());
        signs.sort_by_key(|(at, _)| *at);
        signs
    }

    /// Whether the machine's QEMU runs.
    pub fn is_on(&mut self) -> bool {
        self.vm.as_mut().is_some_and(|vm| !vm.has_exited())
    }

    /// Where the console is, for a mark to wait from.
    pub fn mark(&mut self) -> usize {
        self.vm.as_mut().map_or(0, |vm| {
            vm.drain();
            vm.seen.len()
        })
    }

    /// Waits up to `within` for a console line with `needle` after
    /// `mark`.
    pub fn console_after(&mut self, mark: usize, needle: &str, within: Duration) -> Option<String> {
        self.vm.as_mut()?.find_after(mark, needle, within)
    }

    /// The last `n` console lines, with the log's path.
    pub fn tail(&mut self, n: usize) -> String {
        match self.vm.as_mut() {
            Some(vm) => {
                vm.drain();
                format!(
                    "--- {} (last {n} console lines; all in {}):\n{}",
                    self.spec.name,
                    vm.log.display(),
                    vm.tail(n)
                )
            }
            None => format!("--- {}: powered off", self.spec.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_systemd_boots_menu_as_drawn() {
        // As OVMF's serial terminal received it (e2e-node-2-install.log).
        let drawn = "\x1b[2J\x1b[01;01H\x1b[25;19H   Install liken 2026.01.01-001 on node-2   \
                     \x1b[26;19H\x1b[0m\x1b[30m\x1b[47m   Install liken 2026.01.01-001 on node-1   \
                     \x1b[27;01H\x1b[0m\x1b[37m\x1b[40m          ";
        let (entries, highlighted) = read_menu(drawn);
        assert_eq!(
            entries,
            [
                "Install liken 2026.01.01-001 on node-2",
                "Install liken 2026.01.01-001 on node-1"
            ]
        );
        assert_eq!(
            highlighted.as_deref(),
            Some("Install liken 2026.01.01-001 on node-1")
        );
        // After `k`: the old row redrawn plain, the new one highlighted.
        let after = format!(
            "{drawn}\x1b[26;19H\x1b[0m\x1b[37m\x1b[40m   Install liken 2026.01.01-001 on node-1   \
             \x1b[25;19H\x1b[0m\x1b[30m\x1b[47m   Install liken 2026.01.01-001 on node-2   "
        );
        assert_eq!(
            read_menu(&after).1.as_deref(),
            Some("Install liken 2026.01.01-001 on node-2")
        );
    }
}
