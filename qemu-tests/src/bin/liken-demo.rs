//! liken-demo (`make demo`, after scripts/demo.sh's CLI steps): a
//! machine installed from a `liken stick` stick and booted from its own
//! disk, as a person would do it, under QEMU with OVMF.
//!
//! It writes the stick from the newest release `make images` bundled in
//! `<images>/channel/` (the image built for people, never the tests'
//! stand-in channel) and the deployment scripts/demo.sh made, boots it
//! from USB beside a blank 4 GiB disk (a sparse file), picks node-1 in
//! systemd-boot's menu (a stick for two machines waits for a choice)
//! with Enter on the serial console, and prints init's `liken:` console
//! lines as they arrive. At install mode's prompt it
//! pulls the stick through QEMU's monitor and presses Enter on the
//! serial console; once the machine is off it boots the disk alone and
//! shows its milestones up to the supervisor, then says what ran and,
//! when the image has no k3s, how to build one that has.
//!
//! Every wait has a deadline; a missed one ends the demo with a message
//! naming the console log (kept under `<target dir>/qemu-logs/`).
//!
//! usage: liken-demo <liken binary> <images dir> <deployment dir> <work dir>

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use qemu_tests::firmware::Firmware;
use qemu_tests::install::{
    blank_disk, install_args, installed_args, pull_stick_and_power_off, stick,
};
use qemu_tests::{Vm, channel_releases, log_dir};

/// The machine scripts/demo.sh's `liken new` names first (the leader).
const MACHINE: &str = "node-1";
/// OVMF, systemd-boot and the kernel under TCG, up to init's first lines.
const BOOT: Duration = Duration::from_secs(300);
/// The whole install: the release checked, then copied, from an
/// emulated USB stick, and slot A read back.
const INSTALL: Duration = Duration::from_secs(900);
/// What follows a milestone already seen.
const NEXT: Duration = Duration::from_secs(120);

fn step(text: &str) {
    println!("\n\x1b[1m== {text}\x1b[0m");
}

fn main() {
    // A missed deadline or a failed tool is a panic in the harness; say
    // it as the demo's error, without a backtrace hint.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("the demo failed");
        eprintln!("demo: {msg}");
    }));
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [liken, images, deployment, work] = args.as_slice() else {
        eprintln!("usage: liken-demo <liken binary> <images dir> <deployment dir> <work dir>");
        std::process::exit(2);
    };
    let started = Instant::now();
    let releases = channel_releases(&images.join("channel"));
    let release = releases
        .last()
        .unwrap_or_else(|| panic!("no release in {}", images.join("channel").display()));
    let version = release
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();

    step(&format!(
        "liken stick: an install stick for {MACHINE} from release {version} ({})",
        release.display()
    ));
    let stick = stick(liken, work, release, deployment, &[]);
    let size = std::fs::metadata(&stick).map(|m| m.len()).unwrap_or(0);
    println!(
        "{} ({:.1} MiB): the release, the deployment layer, systemd-boot and GRUB, \
         one install entry per machine with console=ttyS0",
        shown(work, &stick),
        size as f64 / f64::from(1 << 20)
    );

    step(&format!(
        "install {MACHINE} under QEMU (UEFI, TCG): the stick on USB, a blank 4 GiB disk on virtio"
    ));
    let target = work.join("disk.img");
    blank_disk(&target);
    println!(
        "console logs: {} and {}",
        log_dir().join("demo-install.log").display(),
        log_dir().join("demo-installed.log").display()
    );
    let mut vm = Vm::launch_showing(
        "demo-install",
        &install_args(Firmware::Uefi, work, &stick, &target),
        "liken:",
    );
    // systemd-boot draws its menu with cursor moves, not lines.
    vm.expect_drawn(&format!("Install liken {version} on {MACHINE}"), BOOT);
    step(&format!(
        "systemd-boot's menu lists one install entry per machine: Enter picks {MACHINE}, the first"
    ));
    vm.send_serial("\r");
    vm.expect(
        &format!("liken: cmdline: ok (machine {MACHINE}, install mode)"),
        BOOT,
    );
    vm.expect(
        "liken: install: done; remove the install media and press Enter to power off",
        INSTALL,
    );
    vm.expect("liken: install: ok (release ", NEXT);
    step("pull the stick (device_del on QEMU's monitor), press Enter on the serial console");
    pull_stick_and_power_off(&mut vm, NEXT);
    let install_secs = vm.wall();
    drop(vm);

    step(&format!("boot {MACHINE} from its disk alone"));
    let mut vm = Vm::launch_showing(
        "demo-installed",
        &installed_args(Firmware::Uefi, work, &target),
        "liken:",
    );
    vm.expect(
        &format!("liken: cmdline: ok (machine {MACHINE}, slot A)"),
        BOOT,
    );
    let root = vm.expect("liken: root: ", NEXT);
    let k3s = vm.expect("liken: k3s: ", NEXT);
    let supervisor = vm.expect("liken: supervisor: ", NEXT);
    let boot_secs = vm.wall();
    drop(vm);

    step("done");
    println!(
        "{MACHINE} was installed from the stick in {install_secs:.0} s of QEMU time, then booted \
         slot A from its own disk in {boot_secs:.0} s ({:.0} s in all):",
        started.elapsed().as_secs_f64()
    );
    println!("  {root}");
    println!("  {k3s}");
    println!("  {supervisor}");
    if k3s.contains("this image has no k3s") {
        println!(
            "The release was built without K3S_BINARY=, so its system image has no k3s and \
             the supervisor has nothing to run. To get k3s, build the images with a k3s \
             binary: make demo K3S_BINARY=/path/to/k3s (or make images K3S_BINARY=...)."
        );
    }
}

/// `path` relative to the demo's work directory, as the CLI steps show it.
fn shown(work: &Path, path: &Path) -> String {
    path.strip_prefix(work)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}
