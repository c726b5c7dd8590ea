//! Installing a machine from install media under QEMU, the way a person
//! does it: `liken stick` writes the stick, the machine boots it from
//! USB beside a blank disk, install mode writes the disk and waits; the
//! stick is pulled (`device_del` on QEMU's monitor) and Enter pressed on
//! the serial console, and the machine powers off. Shared by
//! tests/install.rs and the demo (src/bin/liken-demo/), which check
//! and show the milestones in between.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::disk::DISK_BYTES;
use crate::firmware::Firmware;
use crate::{Vm, drives, run};

/// Writes `<dir>/stick.img` with `liken` (the CLI binary): the release
/// directory and the deployment, the console on ttyS0, and
/// `kernel_args` on the install entries (install mode carries
/// `console=` and `liken.bless-deadline=` on into the installed
/// machine's, never `liken.bless-after=`).
pub fn stick(
    liken: &Path,
    dir: &Path,
    release: &Path,
    deployment: &Path,
    kernel_args: &[&str],
) -> PathBuf {
    let stick = dir.join("stick.img");
    let out = stick.to_string_lossy().into_owned();
    let mut args = vec!["stick", "-output", &out, "-console", "ttyS0"];
    // A deployment with no trust root (the stand-in channel's releases
    // are unsigned, see cli_fleet) is packed as liken allows it only
    // when asked.
    if !deployment.join("trust.yaml").exists() {
        args.push("-unsigned");
    }
    for a in kernel_args {
        args.extend(["-kernel-arg", a]);
    }
    let release = release.to_string_lossy();
    let deployment = deployment.to_string_lossy();
    args.extend([&*release, &*deployment]);
    run(liken, &args);
    stick
}

/// A blank target disk: a sparse raw image of the minimum size, so its
/// 4 GiB cost what is written.
pub fn blank_disk(path: &Path) {
    std::fs::File::create(path)
        .and_then(|f| f.set_len(DISK_BYTES))
        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
}

/// The install machine: `fw`, the stick first in the boot order, the
/// target disk (vda) after it, so a firmware that finds nothing on the
/// disk goes on to the stick.
pub fn install_args(fw: Firmware, dir: &Path, stick: &Path, target: &Path) -> Vec<OsString> {
    let mut args = fw.args(dir);
    args.extend(drives::usb_stick(stick));
    args.extend(drives::virtio("target", target, Some(1), false));
    args
}

/// The installed machine: `fw` and the target disk alone.
pub fn installed_args(fw: Firmware, dir: &Path, target: &Path) -> Vec<OsString> {
    let mut args = fw.args(dir);
    args.extend(drives::virtio("target", target, Some(0), false));
    args
}

/// After install mode's "done" milestone: pulls the stick, waits for
/// init to see it gone, then presses Enter and waits for the power-off.
pub fn pull_stick_and_power_off(vm: &mut Vm, within: Duration) {
    vm.monitor(&format!("device_del {}", drives::STICK_DEVICE));
    vm.expect("liken: install: the install stick (sda) is gone", within);
    press_enter_and_power_off(vm, within);
}

/// Presses Enter on the serial console, as install mode asks once the
/// disk is written, and waits for the machine to power off.
pub fn press_enter_and_power_off(vm: &mut Vm, within: Duration) {
    vm.send_serial("\n");
    vm.expect("liken: install: powering off", within);
    vm.expect_exit("liken: poweroff: ok", within);
}
