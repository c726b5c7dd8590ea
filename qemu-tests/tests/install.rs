//! Installs a machine from a `liken stick` image, as a person would:
//! the stick on USB, a blank 4 GiB virtio disk (a sparse raw image) beside it, the stick's
//! menu booting install mode; init verifies the release on the stick,
//! partitions and writes the disk, and asks for the stick to be pulled
//! and Enter to be pressed. The test pulls the stick through QEMU's
//! monitor (`device_del`), presses Enter on the serial console, waits
//! for the power-off, then boots the installed disk alone and checks
//! that slot A came up: the root switched to its squashfs, the
//! supervisor started the service (the stand-in, in place of k3s), and
//! the boot was blessed by init's health question to k3s's kubectl (the
//! stand-in answers Ready): the stick's entry boots install mode with
//! `liken.bless-after=`, a test's knob, and the installed entries must
//! not carry it.
//!
//! Under UEFI (OVMF: systemd-boot on both disks) and under BIOS
//! (SeaBIOS, QEMU's default: GRUB's boot.img and core.img on both).
//!
//! The release is the stand-in channel `make qemu-images` bundles
//! (`$IMAGES_OUT/channel-standin/<version>/`): the older of its two
//! current versions, as an installed machine would have a newer one to
//! write into slot B.

use std::path::PathBuf;
use std::time::Duration;

use qemu_tests::disk::{Disk, release_verity};
use qemu_tests::firmware::Firmware;
use qemu_tests::install::{
    blank_disk, install_args, installed_args, press_enter_and_power_off, pull_stick_and_power_off,
    stick,
};
use qemu_tests::{Boot, Vm, cli_fleet, cli_layer, drives, images, liken, run, scratch};

/// OVMF or SeaBIOS, then systemd-boot or GRUB, then the kernel, under
/// TCG and with tests sharing the cores.
const BOOT: Duration = Duration::from_secs(300);
/// The whole install: the release read twice from an emulated USB stick
/// (verified, then copied) and slot A read back.
const INSTALL: Duration = Duration::from_secs(900);
/// What follows a milestone already seen.
const NEXT: Duration = Duration::from_secs(90);

/// The release the tests install: the older of the stand-in channel's
/// two current releases.
fn older_release() -> PathBuf {
    let releases = images().standin_releases();
    releases
        .len()
        .checked_sub(2)
        .and_then(|at| releases.get(at))
        .cloned()
        .unwrap_or_else(|| {
            panic!("the stand-in channel holds fewer than two releases: {releases:?}")
        })
}

/// A test's scratch directory, the release it installs
/// ([`older_release`]) and a `liken new` deployment.
fn prepare(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = scratch(name);
    let release = older_release();
    let (deployment, _) = cli_layer(&dir, "test", "node-1");
    (dir, release, deployment)
}

/// The installed disk's first boot as `machine`: slot A's squashfs as
/// the root (`checked`: through dm-verity with the release's root hash,
/// or unverified), the blank LIKEN-DATA formatted, the stand-in
/// supervised as k3s (`k3s server` or `k3s agent`, by the machine's
/// role).
fn expect_slot_a_first_boot(vm: &mut Vm, machine: &str, k3s: &str, checked: &str) {
    vm.expect(
        &format!("liken: cmdline: ok (machine {machine}, slot A)"),
        BOOT,
    );
    let root = vm.expect("liken: root: ", NEXT);
    assert!(
        root.starts_with(&format!(
            "liken: root: ok (slot A from /dev/vda3 {checked} is the root, /var on /dev/vda5 \
             (formatted this boot)"
        )),
        "{root}"
    );
    vm.expect(&format!("liken: supervisor: ok ({k3s} pid "), NEXT);
}

fn install_and_boot(fw: Firmware, name: &str) {
    let (dir, release, deployment) = prepare(name);
    let stick = stick(
        &images().liken,
        &dir,
        &release,
        &deployment,
        &["liken.bless-after=5"],
    );
    let target = dir.join("target.img");
    blank_disk(&target);

    let mut vm = Vm::launch(
        &format!("{name}-install"),
        &install_args(fw, &dir, &stick, &target),
    );
    vm.expect("liken: cmdline: ok (machine node-1, install mode)", BOOT);
    let from = vm.expect("liken: install: installing from the stick ", INSTALL);
    assert!(from.contains("/dev/sda1"), "{from}");
    let target_line = vm.expect("liken: install: target ", NEXT);
    assert!(target_line.contains("/dev/vda (4.0 GiB)"), "{target_line}");
    vm.expect("liken: install: release ", INSTALL);
    vm.expect("liken: install: slot A: ", INSTALL);
    vm.expect("read back (sha256 ", INSTALL);
    vm.expect("liken: install: GRUB written", NEXT);
    vm.expect(
        "liken: install: done; remove the install media and press Enter to power off",
        NEXT,
    );
    vm.expect("liken: install: ok (release ", NEXT);
    vm.expect("liken: k3s: skipped (install mode)", NEXT);
    pull_stick_and_power_off(&mut vm, NEXT);
    drop(vm);

    // The disk as written: a valid GPT with liken's partitions.
    run("sgdisk", &["-v", &target.to_string_lossy()]);

    // The installed disk alone.
    let mut vm = Vm::launch(
        &format!("{name}-installed"),
        &installed_args(fw, &dir, &target),
    );
    // systemd-boot's entry carries the release's root hash; GRUB's one
    // grub.cfg, shared by both slots, none.
    let checked = match fw {
        Firmware::Uefi => format!(
            "through dm-verity (root hash {}\u{2026})",
            release_verity(&release).root_hash().short()
        ),
        Firmware::Bios => "(unverified)".to_owned(),
    };
    expect_slot_a_first_boot(&mut vm, "node-1", "k3s server", &checked);
    // The bootloader counted the entry install mode wrote (three tries)
    // and init blessed it from k3s's answer, not from the stick's
    // liken.bless-after, which the installed entries do not carry.
    let bless = vm.expect("liken: bless: ", NEXT);
    let want = match fw {
        Firmware::Uefi => {
            "liken: bless: ok (loader/entries/liken-a+2-1.conf renamed to liken-a.conf: \
             node node-1 is Ready with a heartbeat at "
        }
        Firmware::Bios => {
            "liken: bless: ok (liken_a_tries removed from grub/grubenv: \
             node node-1 is Ready with a heartbeat at "
        }
    };
    assert!(bless.starts_with(want), "{bless}");
    vm.reboot(NEXT);
    drop(vm);

    // And the blessing is on the disk, where that firmware's bootloader
    // keeps its counter.
    let disk = Disk::read(&target);
    match fw {
        Firmware::Uefi => {
            assert_eq!(disk.esp_list("loader/entries"), ["liken-a.conf"]);
        }
        Firmware::Bios => {
            let env = String::from_utf8(disk.esp_file("grub/grubenv")).unwrap();
            assert!(
                env.contains("liken_slot=a\n") && !env.contains("liken_a_tries="),
                "{env}"
            );
        }
    }
    // Neither bootloader's entries carry the stick's test-only argument
    // (under BIOS the systemd-boot entry keeps its unspent counter).
    let mut files: Vec<String> = disk
        .esp_list("loader/entries")
        .iter()
        .map(|e| format!("loader/entries/{e}"))
        .collect();
    files.push("grub/grub.cfg".to_owned());
    for file in &files {
        let text = String::from_utf8(disk.esp_file(file)).unwrap();
        assert!(
            text.contains("liken.machine=node-1") && !text.contains("liken.bless-after"),
            "{file}: {text}"
        );
    }
}

#[test]
fn installs_from_a_stick_under_uefi_and_boots_slot_a() {
    install_and_boot(Firmware::Uefi, "install-uefi");
}

#[test]
fn installs_from_a_stick_under_bios_and_boots_slot_a() {
    install_and_boot(Firmware::Bios, "install-bios");
}

/// A machine with no disk to install onto: the installer says so, writes
/// nothing, and stays up answering requests (here Ctrl-Alt-Del).
#[test]
fn no_disk_to_install_onto_is_refused_and_the_machine_still_reboots() {
    let name = "install-no-disk";
    let (dir, release, deployment) = prepare(name);
    let stick = stick(&images().liken, &dir, &release, &deployment, &[]);
    let before = std::fs::read(&stick).unwrap();
    let mut vm = Vm::launch(name, &drives::usb_stick(&stick));
    vm.expect("liken: cmdline: ok (machine node-1, install mode)", BOOT);
    let line = vm.expect("liken: install: no disk to install onto", INSTALL);
    assert!(
        line.contains("sda is the install media") && line.contains("nothing was written"),
        "{line}"
    );
    vm.expect(
        "liken: supervisor: ok (nothing to supervise: install mode",
        NEXT,
    );
    vm.reboot(NEXT);
    drop(vm);
    assert!(
        std::fs::read(&stick).unwrap() == before,
        "the stick was written to"
    );
}

/// `liken media`: the netboot initramfs (kernel and initramfs handed to
/// QEMU directly, as a PXE server would) installs from its own
/// /liken/release; there is no stick to wait for, only Enter. The disk
/// then boots slot A under BIOS.
///
/// The machine is a follower (node-2 of a fleet whose leader is node-1),
/// and the media carry the whole fleet's layer, CA keys and server token
/// included. Its disk must hold none of it: after the install no file on
/// its ESP, and once it runs no file below its /run (the stand-in scans
/// them as k3s), holds a PRIVATE KEY block or the server token.
#[test]
fn installs_a_follower_from_netboot_media_with_no_cluster_secret_on_its_disk() {
    let name = "install-media";
    let dir = scratch(name);
    let release = older_release();
    let (deployment, _) = cli_fleet(
        &dir,
        "test",
        &[("node-1", "leader"), ("node-2", "follower")],
    );
    let server_token = std::fs::read_to_string(deployment.join("identity/server/token")).unwrap();
    let server_token = server_token.trim();
    assert!(server_token.contains("::server:"), "{server_token}");
    let media = dir.join("install.cpio");
    liken(&[
        "media",
        "-unsigned",
        "-output",
        &media.to_string_lossy(),
        &release.to_string_lossy(),
        &deployment.to_string_lossy(),
    ]);
    // The media carry every machine's secrets: they install the fleet.
    let media_bytes = std::fs::read(&media).unwrap();
    assert!(contains(&media_bytes, b"PRIVATE KEY-----"));
    let target = dir.join("target.img");
    blank_disk(&target);
    // The release unpacks into RAM beside the copies install mode keeps.
    // (QEMU's -kernel takes boot index 0.)
    let mut qemu = vec!["-m".into(), "1024".into()];
    qemu.extend(drives::virtio("target", &target, Some(1), false));
    let mut vm = Vm::boot_with(
        &Boot {
            name,
            initrd: &media,
            append: "liken.install=1 liken.machine=node-2",
        },
        &qemu,
    );
    vm.expect("liken: cmdline: ok (machine node-2, install mode)", BOOT);
    vm.expect("liken: install: installing from this initramfs", NEXT);
    vm.expect("liken: install: target /dev/vda (4.0 GiB)", NEXT);
    vm.expect(
        "liken: install: the ESP gets a follower's layer: the documents, the agent token and \
         the server CA certificate, no private key",
        NEXT,
    );
    vm.expect("read back (sha256 ", INSTALL);
    vm.expect(
        "liken: install: done; remove the install media and press Enter to power off",
        NEXT,
    );
    vm.expect(
        "liken: supervisor: ok (nothing to supervise: install mode",
        NEXT,
    );
    press_enter_and_power_off(&mut vm, NEXT);
    drop(vm);
    run("sgdisk", &["-v", &target.to_string_lossy()]);

    // Every file of the ESP, copied out with mtools and read whole.
    let esp_img = dir.join("esp.img");
    Disk::read(&target).extract("LIKEN-ESP", &esp_img);
    let esp_dir = dir.join("esp");
    std::fs::create_dir_all(&esp_dir).unwrap();
    run(
        "mcopy",
        &[
            "-s",
            "-n",
            "-i",
            &esp_img.to_string_lossy(),
            "::/",
            &esp_dir.to_string_lossy(),
        ],
    );
    let mut read = 0;
    let mut dirs = vec![esp_dir.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            let bytes = std::fs::read(&p).unwrap();
            read += 1;
            assert!(
                !contains(&bytes, b"PRIVATE KEY-----"),
                "the follower's ESP holds a private key in {}",
                p.display()
            );
            assert!(
                !contains(&bytes, server_token.as_bytes()),
                "the follower's ESP holds the server token in {}",
                p.display()
            );
        }
    }
    assert!(read >= 8, "only {read} files on the ESP");
    assert!(
        esp_dir.join("liken/layer.cpio").is_file(),
        "the ESP has a layer"
    );

    let mut vm = Vm::launch(
        &format!("{name}-installed"),
        &installed_args(Firmware::Bios, &dir, &target),
    );
    // Under BIOS: GRUB boots the slot unverified.
    expect_slot_a_first_boot(&mut vm, "node-2", "k3s agent", "(unverified)");
    // The follower's k3s runs with the agent token alone.
    let token = vm.expect_unordered("liken-standin-k3s: token-file ", NEXT);
    assert!(
        token.contains("token-file /var/lib/liken/k3s-token mode 0600"),
        "{token}"
    );
    vm.expect_unordered("liken-standin-k3s: secret scan: ", NEXT);
    let found: Vec<&String> = vm
        .seen
        .iter()
        .filter(|l| l.contains("liken-standin-k3s: secret scan: a "))
        .collect();
    assert!(
        found.is_empty(),
        "secrets below the follower's /run: {found:?}"
    );
    vm.reboot(NEXT);
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
