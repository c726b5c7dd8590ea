//! Boots an installed disk under UEFI: OVMF, systemd-boot from the ESP,
//! the kernel and initrds its loader entry names, then init mounting
//! slot A's squashfs as the root, formatting and mounting LIKEN-DATA at
//! /var, starting the supervisor and blessing the entry the way a
//! machine with k3s does (no `liken.bless-after`): once `k3s kubectl get
//! node` (the stand-in, answering as k3s would) shows the node Ready
//! with a heartbeat from this boot, `liken-a+3.conf`, which systemd-boot
//! renamed to `liken-a+2-1.conf` before it booted it, becomes
//! `liken-a.conf`.
//!
//! The same boots carry what k3s expects of its host and files, seen
//! from inside by the stand-in at k3s's path and checked here against
//! literal text (not against the code that wrote them): `/` shared,
//! k3s's limits, /var/run, the machine ID and the node password kept
//! across the reboot on the data partition, config.yaml, the token's
//! path and mode, server/tls with modes, and the kubelet-style nested
//! mounts below /var taken down at shutdown.
//!
//! The disk is made here with the real tools (sgdisk, mkfs.vfat, mtools;
//! see qemu_tests::disk) rather than by `liken stick` and install mode,
//! so this test checks init's side alone. After the machine powers off
//! the test reads the ESP with mdir and the data partition with blkid,
//! then boots again to see the blessed entry stay blessed and /var kept.
//!
//! A slot on trial that never becomes healthy falls back to the blessed
//! one under both bootloaders: systemd-boot's counter in the entry's
//! name (OVMF) and GRUB's in grubenv (SeaBIOS), each read from the disk
//! after the machine is off. In both, one of the trial's boots is reached
//! by kexec: init counts that try as the bootloader would (the entry's
//! rename, grubenv's counter), and the real bootloader reads what init
//! wrote on the firmware boot that follows and falls back.
//!
//! The first machine's reboot is asked for over the control socket once
//! it is blessed, with kexec disabled in the running kernel
//! (`kernel.kexec_load_disabled`): init's kexec load is refused, the
//! reboot goes through the firmware, and the next boot's record carries
//! the reason.
//!
//! That machine's slots hold a bundled stand-in release's liken.sqfs
//! (the squashfs, then its dm-verity tree) and their entries its
//! `liken.verity=`, as init's release writer writes them. Slot B, newer
//! and with one try left, has one byte of its first block inverted on
//! the disk: its mount through dm-verity is an I/O error, init reboots
//! the trial at once, and systemd-boot falls back to slot A, which boots
//! through dm-verity (the stand-in sees `/` on the mapped device), says
//! it fell back, and is blessed. The other slots here boot the bare
//! stand-in image unverified.

use std::time::Duration;

use liken_api::{BootAssessment, BootRecord, Slot};
use qemu_tests::disk::{
    Grub, Installed, SlotFiles, entry, installed_disk, installed_disk_with, release_verity,
};
use qemu_tests::firmware::{Firmware, Ovmf};
use qemu_tests::install::installed_args;
use qemu_tests::{Vm, images, scratch};

/// Deadline for the first milestones: OVMF and systemd-boot under TCG
/// add about 10 s to a kernel boot, more when tests share the cores.
const BOOT: Duration = Duration::from_secs(180);
/// Deadline for what follows a milestone already seen.
const NEXT: Duration = Duration::from_secs(60);

/// The boot record the stand-in read from /run/liken/facts/boot.json and
/// printed, and the assessment it carries.
fn record_of(vm: &mut Vm) -> (BootRecord, BootAssessment) {
    let rec = vm.expect_unordered("liken-standin-k3s: boot record ", NEXT);
    let record: BootRecord = serde_json::from_str(rec.split("boot record ").nth(1).unwrap())
        .unwrap_or_else(|e| panic!("{rec}: {e}"));
    let a = record
        .assessment
        .clone()
        .expect("the record carries the assessment");
    (record, a)
}

/// Slot B's boot on trial that never becomes healthy (`trial` is how
/// init names its bootloader's state, `reached` how its boot record
/// says the boot was reached): init gives up at the 20 s deadline and
/// reboots through the orderly shutdown, by the firmware, which judges
/// the tries left. Returns init's line giving up.
fn slot_b_gives_up(vm: &mut Vm, trial: &str, reached: &str) -> String {
    vm.expect("liken: cmdline: ok (slot B)", BOOT);
    // The bare stand-in image, with no root hash on the command line.
    vm.expect(
        "liken: root: ok (slot B from /dev/vda4 (unverified) is the root",
        NEXT,
    );
    let assess = vm.expect("liken: assess: ", NEXT);
    assert!(
        assess.contains(&format!("slot B on trial ({trial})"))
            && assess.contains("rebooting if not healthy within 20 s"),
        "{assess}"
    );
    let record = vm.expect("liken: boot-record: ok", NEXT);
    assert!(
        record.contains(&format!(", reached by {reached}")),
        "{record}"
    );
    let gave_up = vm.expect("liken: bless: ", NEXT);
    assert!(
        gave_up.contains("this boot did not become healthy within 20 s"),
        "{gave_up}"
    );
    vm.expect("liken: shutdown: ok (reboot requested)", NEXT);
    let via = vm.expect("liken: reboot-via: ", NEXT);
    assert!(
        via.contains("through the firmware: ") && via.contains("trial"),
        "{via}"
    );
    vm.expect_exit("liken: reboot: ok", NEXT);
    gave_up
}

/// The boot after the fallback: slot A (`blessed` names its state) says
/// B's tries are spent, and the boot record marks the other slot bad.
fn slot_a_reports_the_fallback(vm: &mut Vm, blessed: &str) {
    vm.expect("liken: cmdline: ok (slot A)", BOOT);
    let assess = vm.expect("liken: assess: ", NEXT);
    assert!(
        assess.contains(&format!("slot A is blessed ({blessed})"))
            && assess.contains("slot B's entry has spent its tries: this boot fell back from it"),
        "{assess}"
    );
    vm.expect("liken: supervisor: ok (k3s server pid ", NEXT);
    let (record, a) = record_of(vm);
    assert_eq!(record.slot, Some(Slot::A));
    assert!(a.blessed && !a.counted && a.other_slot_bad, "{a:?}");
    vm.reboot(NEXT);
}

/// A line the stand-in printed, without its prefix.
fn standin_says(vm: &mut Vm, start: &str) -> String {
    let line = vm.expect_unordered(&format!("liken-standin-k3s: {start}"), NEXT);
    line.split_once("liken-standin-k3s: ")
        .map(|(_, rest)| rest.to_owned())
        .unwrap_or(line)
}

/// The stand-in's lines that start with `start`, in order, without the
/// prefix, once `last` has been printed.
fn standin_lines(vm: &mut Vm, start: &str, last: &str) -> Vec<String> {
    vm.expect_unordered(&format!("liken-standin-k3s: {last}"), NEXT);
    vm.seen
        .iter()
        .filter_map(|l| l.split_once("liken-standin-k3s: ").map(|(_, r)| r))
        .filter(|r| r.starts_with(start))
        .map(str::to_owned)
        .collect()
}

/// What k3s finds of its host on every boot: `/` recursively shared,
/// install.sh's unit limits, /var/run, /etc/rancher/node on the data
/// partition. Returns the machine ID and the node password's hash.
fn expect_k3s_host(vm: &mut Vm) -> (String, String) {
    let root = standin_says(vm, "mount / propagation ");
    assert!(root.starts_with("mount / propagation [shared:"), "{root}");
    let var = standin_says(vm, "mount /var propagation ");
    assert!(var.starts_with("mount /var propagation [shared:"), "{var}");
    assert_eq!(
        standin_says(vm, "limit Max open files:"),
        "limit Max open files: 1048576 1048576 files"
    );
    assert_eq!(
        standin_says(vm, "limit Max processes:"),
        "limit Max processes: unlimited unlimited processes"
    );
    assert_eq!(
        standin_says(vm, "limit Max core file size:"),
        "limit Max core file size: unlimited unlimited bytes"
    );
    assert_eq!(standin_says(vm, "/var/run"), "/var/run -> /run");
    assert_eq!(
        standin_says(vm, "/etc/rancher/node is"),
        "/etc/rancher/node is /var/lib/rancher/node (on the /var filesystem: true)"
    );
    let id = standin_says(vm, "machine-id ");
    let id = id.trim_start_matches("machine-id ").to_owned();
    assert!(
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    let password = standin_says(vm, "node password sha256 ");
    (id, password)
}

/// k3s's files as a leader's k3s reads them, against literal text.
fn expect_leader_files(vm: &mut Vm) {
    let config = standin_lines(vm, "config.yaml| ", "token-file ");
    assert_eq!(
        config,
        [
            "config.yaml| # k3s configuration for Machine node-1 (leader) of Cluster test,",
            "config.yaml| # written by liken-init from the running documents at every boot.",
            "config.yaml| # Edit the documents, not this file: changes here are lost.",
            "config.yaml| node-name: \"node-1\"",
            "config.yaml| data-dir: \"/var/lib/rancher/k3s\"",
            "config.yaml| token-file: \"/var/lib/rancher/k3s/server/token\"",
            "config.yaml| agent-token-file: \"/var/lib/rancher/k3s/server/agent-token\"",
            "config.yaml| cluster-init: true",
            "config.yaml| tls-san:",
            "config.yaml|   - \"10.0.2.15\"",
            // Pod Security by default on leaders: the admission
            // configuration init writes (docs/security.md).
            "config.yaml| kube-apiserver-arg:",
            "config.yaml|   - \"admission-control-config-file=/run/rancher/k3s/pod-security.yaml\"",
            // Longer leader-election leases than k3s's defaults, so a
            // slow disk does not restart the controllers (seed.rs).
            "config.yaml| kube-controller-manager-arg:",
            "config.yaml|   - \"leader-elect-lease-duration=60s\"",
            "config.yaml|   - \"leader-elect-renew-deadline=40s\"",
            "config.yaml| kube-scheduler-arg:",
            "config.yaml|   - \"leader-elect-lease-duration=60s\"",
            "config.yaml|   - \"leader-elect-renew-deadline=40s\"",
        ]
    );
    assert_eq!(
        standin_says(vm, "config.yaml mode"),
        "config.yaml mode 0600"
    );
    let token = standin_says(vm, "token-file ");
    assert!(
        token.starts_with("token-file /var/lib/rancher/k3s/server/token mode 0600 ("),
        "{token}"
    );
    let tls = standin_lines(vm, "server/tls", "server/tls/service.key ");
    assert_eq!(
        tls,
        [
            "server/tls mode 0700",
            "server/tls/client-ca.crt mode 0644",
            "server/tls/client-ca.key mode 0600",
            "server/tls/etcd mode 0700",
            "server/tls/etcd/peer-ca.crt mode 0644",
            "server/tls/etcd/peer-ca.key mode 0600",
            "server/tls/etcd/server-ca.crt mode 0644",
            "server/tls/etcd/server-ca.key mode 0600",
            "server/tls/request-header-ca.crt mode 0644",
            "server/tls/request-header-ca.key mode 0600",
            "server/tls/server-ca.crt mode 0644",
            "server/tls/server-ca.key mode 0600",
            "server/tls/service.key mode 0600",
        ]
    );
}

/// Slot B's trial through dm-verity over a corrupted first block: the
/// mount is an I/O error, so init reboots the trial at once (no
/// deadline to wait out) and systemd-boot spends B's last try.
fn slot_b_fails_its_verity_check(vm: &mut Vm) {
    vm.expect("liken: cmdline: ok (slot B)", BOOT);
    let root = vm.expect("liken: root: ", NEXT);
    assert!(
        root.starts_with("liken: root: cannot mount /dev/dm-0 (squashfs) on /sysroot: ")
            && root.contains(
                " (os error 5): a block of the slot does not match its dm-verity root hash"
            )
            && root.contains("write the release again; init stays on the initramfs"),
        "{root}"
    );
    // The kernel's own word on it, from the verity target.
    vm.expect_unordered("data block 0 is corrupted", NEXT);
    let assess = vm.expect("liken: assess: ", NEXT);
    assert!(
        assess.contains(
            "slot B on trial (systemd-boot entry liken-b+1-2.conf); it cannot become healthy: \
             slot B's system image did not become the root"
        ),
        "{assess}"
    );
    let gave_up = vm.expect("liken: bless: ", NEXT);
    assert!(
        gave_up.contains("this boot cannot become healthy") && gave_up.contains("rebooting now"),
        "{gave_up}"
    );
    vm.expect("liken: shutdown: ok (reboot requested)", NEXT);
    vm.expect_exit("liken: reboot: ok", NEXT);
}

#[test]
fn boots_slot_a_from_the_disk_formats_var_and_blesses_the_entry() {
    let dir = scratch("slots-uefi");
    // The older of the stand-in channel's two current releases, as
    // bundled (this build's kernel and boot.cpio): its liken.sqfs carries
    // the dm-verity tree after the squashfs, release.yaml its root hash.
    let releases = images().standin_releases();
    let [.., release, _] = releases.as_slice() else {
        panic!("the stand-in channel holds fewer than two releases (make qemu-images)");
    };
    let files = SlotFiles::release(release);
    let verity = release_verity(release);
    let d = installed_disk(
        &dir,
        &[
            Installed {
                slot: Slot::A,
                entry: "liken-a+3.conf",
                version: "2026.12.02-001",
                // Once blessed, the stand-in disables kexec in the kernel
                // and asks for a reboot, as the machine operator would.
                extra: &["liken.standin-reboot-once=blessed-nokexec"],
                files: &files,
                verity: Some(&verity),
            },
            // Newer, so systemd-boot boots it first, with its last try.
            Installed {
                slot: Slot::B,
                entry: "liken-b+1-2.conf",
                version: "2026.12.02-002",
                extra: &[],
                files: &files,
                verity: Some(&verity),
            },
        ],
    );
    // One byte of B's first block, which the squashfs mount reads (its
    // superblock is there), but past the superblock's 96 bytes: only
    // dm-verity can tell.
    d.flip_byte("LIKEN-B", 2048);
    let ovmf = Ovmf::fresh(&dir);

    let mut vm = Vm::boot_uefi("slots-uefi-b", &d.path, &ovmf);
    slot_b_fails_its_verity_check(&mut vm);
    drop(vm);
    assert_eq!(
        d.esp_list("loader/entries"),
        ["liken-a+3.conf", "liken-b+0-3.conf"],
        "systemd-boot spent B's last try"
    );

    let through = format!(
        "through dm-verity (root hash {}\u{2026})",
        verity.root_hash().short()
    );
    let mut vm = Vm::boot_uefi("slots-uefi", &d.path, &ovmf);
    vm.expect("liken: cmdline: ok (slot A)", BOOT);
    let root = vm.expect("liken: root: ", NEXT);
    assert!(
        root.starts_with(&format!(
            "liken: root: ok (slot A from /dev/vda3 {through} is the root, /var on /dev/vda5 \
             (formatted this boot)"
        )),
        "{root}"
    );
    let assess = vm.expect("liken: assess: ", NEXT);
    assert!(
        assess.contains("slot A on trial (systemd-boot entry liken-a+3.conf)")
            && assess.contains("once node node-1 is Ready with a heartbeat from this boot")
            && assess.contains("slot B's entry has spent its tries: this boot fell back from it"),
        "{assess}"
    );
    vm.expect("liken: boot-record: ok", NEXT);
    vm.expect(
        "liken: k3s: ok (k3s server (LimitNOFILE=1048576, LimitNPROC and LimitCORE infinity))",
        NEXT,
    );
    vm.expect("liken: supervisor: ok (k3s server pid ", NEXT);
    let (record, a) = record_of(&mut vm);
    assert_eq!(record.slot, Some(Slot::A));
    assert!(a.counted && !a.blessed && a.other_slot_bad, "{a:?}");
    assert_eq!(record.root_verity.as_ref(), Some(verity.root_hash()));
    // k3s runs from the mapped device, not from the partition.
    assert_eq!(
        standin_says(&mut vm, "mount / from "),
        "mount / from /dev/dm-0 (squashfs, device-mapper liken-a)"
    );
    let (id, password) = expect_k3s_host(&mut vm);
    assert!(password.ends_with("(created)"), "{password}");
    expect_leader_files(&mut vm);
    vm.expect_unordered("liken-standin-k3s: mounted tmpfs at ", NEXT);
    // Blessed by the production test: the stand-in, asked as k3s's
    // kubectl, answers Ready with a heartbeat from now.
    let bless = vm.expect("liken: bless: ", NEXT);
    assert!(
        bless.starts_with(
            "liken: bless: ok (loader/entries/liken-a+2-1.conf renamed to liken-a.conf: \
             node node-1 is Ready with a heartbeat at "
        ) && bless.contains(", after this boot began ("),
        "{bless}"
    );
    // What a power cut now would leave, read from the disk while the
    // machine runs: the blessed entry whole, name and bytes. (vfat
    // writes a renamed file's size and first cluster with its inode,
    // not its directory, so init fsyncs the file as well; here the
    // ESP's unmount after the blessing would flush it too, but a
    // machine whose ESP stays in use past the blessing has only the
    // fsync.)
    assert_eq!(
        d.esp_list("loader/entries"),
        ["liken-a.conf", "liken-b+0-3.conf"],
        "the blessing's rename is on the disk"
    );
    assert_eq!(
        String::from_utf8_lossy(&d.esp_file("loader/entries/liken-a.conf")),
        entry(
            Slot::A,
            "2026.12.02-001",
            false,
            &["liken.standin-reboot-once=blessed-nokexec"],
            Some(&verity)
        ),
        "the blessed entry's bytes are on the disk, not only its name"
    );
    // The kernel refuses init's kexec load, so the reboot goes through
    // the firmware, and init says why.
    vm.expect_unordered(
        "liken-standin-k3s: reboot-once: kernel.kexec_load_disabled set to 1",
        NEXT,
    );
    let via = vm.expect("liken: reboot-via: ", NEXT);
    assert!(
        via.contains(
            "through the firmware: the kernel refused to load liken/a/vmlinuz (Operation not \
             permitted (os error 1)): kexec is disabled (kernel.kexec_load_disabled is 1)"
        ),
        "{via}"
    );
    // The stand-in's two nested volume mounts, deepest first, then /var.
    vm.expect("liken: unmount-nested: ok (2 below /var)", NEXT);
    vm.expect("liken: unmount: ok", NEXT);
    vm.expect_exit("liken: reboot: ok", NEXT);
    drop(vm);

    assert_eq!(
        d.esp_list("loader/entries"),
        ["liken-a.conf", "liken-b+0-3.conf"]
    );
    let data = d.probe("LIKEN-DATA");
    assert!(
        data.contains("TYPE=ext4") && data.contains("LABEL=LIKEN-DATA"),
        "blkid on LIKEN-DATA: {data}"
    );

    // The second boot: the same slot, blessed, /var kept.
    let mut vm = Vm::boot_uefi("slots-uefi-again", &d.path, &ovmf);
    let root = vm.expect("liken: root: ", BOOT);
    assert!(
        root.starts_with(&format!(
            "liken: root: ok (slot A from /dev/vda3 {through} is the root, /var on /dev/vda5;"
        )),
        "the data partition is formatted only once: {root}"
    );
    let assess = vm.expect("liken: assess: ", NEXT);
    assert!(
        assess.contains("slot A is blessed (systemd-boot entry liken-a.conf)"),
        "{assess}"
    );
    let rec = vm.expect("liken: boot-record: ", NEXT);
    assert!(
        rec.contains(
            ", reached by firmware (the kernel refused to load liken/a/vmlinuz (Operation not \
             permitted (os error 1)): kexec is disabled"
        ),
        "{rec}"
    );
    vm.expect("liken: supervisor: ok (k3s server pid ", NEXT);
    let (record, a) = record_of(&mut vm);
    assert!(!a.counted && a.blessed, "{a:?}");
    // The reason the last shutdown kept on the data partition (the
    // stand-in prints the record with its spaces squeezed out; the
    // milestone above showed it whole).
    assert_eq!(record.via, Some(liken_api::RebootVia::Firmware));
    assert!(
        record
            .via_reason
            .is_some_and(|w| w.starts_with("thekernelrefusedtoloadliken/a/vmlinuz")),
        "the record carries no reason"
    );
    vm.expect_unordered(
        "liken-standin-k3s: reboot-once: this machine asked for its reboot already",
        NEXT,
    );
    // The machine ID and k3s's node password survived the reboot on the
    // data partition.
    let (id_again, password_again) = expect_k3s_host(&mut vm);
    assert_eq!(id_again, id, "the machine ID changed across a reboot");
    assert_eq!(
        password_again,
        password.replace("(created)", "(kept)"),
        "the node password did not survive the reboot"
    );
    vm.reboot(NEXT);
    assert!(
        !vm.seen.iter().any(|l| l.starts_with("liken: bless:")),
        "a blessed boot is not blessed again"
    );
}

/// A release on trial that never becomes healthy, reached by kexec:
/// systemd-boot boots B's entry `+2-1` (renaming it `+1-2`), its stand-in
/// asks for a reboot at once (as the machine operator would for a
/// request-reboot), and init kexecs into the entry systemd-boot would
/// pick next, B again, counting its last try on the way (`+0-3`, the
/// rename systemd-boot would have made). The kexec'd boot never becomes
/// healthy: init reboots at the assessment deadline through the
/// firmware, systemd-boot finds B's tries spent, and the next boot falls
/// back to the blessed slot A, which reports the fallback.
#[test]
fn a_release_that_never_becomes_healthy_falls_back_to_the_blessed_slot() {
    let dir = scratch("slots-fallback");
    let standin = SlotFiles::standin();
    let d = installed_disk(
        &dir,
        &[
            Installed {
                slot: Slot::A,
                entry: "liken-a.conf",
                version: "2026.12.02-001",
                extra: &["liken.bless-after=5"],
                files: &standin,
                verity: None,
            },
            // Newer, so systemd-boot prefers it while it has a try left;
            // it is assessed the production way, and its node's Ready
            // condition carries a heartbeat from before the boot (the
            // Node object a dead kubelet leaves behind).
            Installed {
                slot: Slot::B,
                entry: "liken-b+2-1.conf",
                version: "2026.12.02-002",
                extra: &[
                    "liken.standin=stale-node",
                    "liken.bless-deadline=20",
                    "liken.standin-reboot-once=now",
                ],
                files: &standin,
                verity: None,
            },
        ],
    );
    let ovmf = Ovmf::fresh(&dir);

    let mut vm = Vm::boot_uefi("slots-fallback-b", &d.path, &ovmf);
    vm.expect("liken: cmdline: ok (slot B)", BOOT);
    vm.expect(
        "liken: root: ok (slot B from /dev/vda4 (unverified) is the root",
        NEXT,
    );
    let assess = vm.expect("liken: assess: ", NEXT);
    assert!(
        assess.contains("slot B on trial (systemd-boot entry liken-b+2-1.conf)")
            && assess.contains("rebooting if not healthy within 20 s"),
        "{assess}"
    );
    // While B is on trial, a release write (which would replace slot A,
    // the only release known to boot) is refused with the reason.
    let refused = vm.expect_unordered("liken-standin-k3s: write-release on trial answered ", NEXT);
    assert!(
        refused.contains(
            "slot B booted on trial and is not blessed yet: writing slot A now would remove the \
             entry of the release this machine last ran well"
        ),
        "{refused}"
    );
    // The reboot asked on trial goes by kexec into what systemd-boot
    // would boot next: B, whose last try init spends as systemd-boot
    // would have.
    vm.expect_unordered("liken-standin-k3s: asking for reboot", NEXT);
    vm.expect("liken: shutdown: ok (reboot requested)", NEXT);
    let via = vm.expect("liken: reboot-via: ", NEXT);
    assert!(
        via.contains("by kexec: slot B (liken-b+1-2.conf) loaded: liken/b/vmlinuz")
            && via.contains("try counted: liken-b+1-2.conf renamed to liken-b+0-3.conf"),
        "{via}"
    );
    let cmdline = vm.expect_kexec_jump(BOOT);
    assert!(
        cmdline.contains(" liken.kexec=liken-b+1-2.conf"),
        "{cmdline}"
    );
    // The kexec'd boot: B on its counted entry, the stale heartbeat as
    // the reason it is never blessed, and a firmware reboot at the
    // deadline so that systemd-boot judges the tries left (none).
    let reached = vm.position();
    let gave_up = slot_b_gives_up(&mut vm, "systemd-boot entry liken-b+1-2.conf", "kexec");
    assert!(
        gave_up.contains(
            "node node-1 is Ready, but its last heartbeat (2026-01-01T00:00:00Z) is from \
             before this boot began"
        ),
        "{gave_up}"
    );
    assert!(
        vm.seen[reached..].iter().any(|l| l
            .contains("liken-standin-k3s: reboot-once: this machine asked for its reboot already")),
        "the kexec'd boot's stand-in asked for a second reboot"
    );
    drop(vm);
    assert_eq!(
        d.esp_list("loader/entries"),
        ["liken-a.conf", "liken-b+0-3.conf"],
        "init spent B's last try before the kexec, as systemd-boot would have"
    );

    let mut vm = Vm::boot_uefi("slots-fallback-a", &d.path, &ovmf);
    vm.expect("BdsDxe: starting", BOOT);
    slot_a_reports_the_fallback(&mut vm, "systemd-boot entry liken-a.conf");
}

/// The same fallback through GRUB's counter under SeaBIOS, with init's
/// kexec spending a try in between: grubenv prefers slot B with two
/// tries left. GRUB spends one and boots B; B's stand-in asks for a
/// reboot at once, and init kexecs into what grub.cfg would boot next
/// (B, one try left), writing grubenv's counter down to 0 as GRUB would
/// have. The kexec'd boot never becomes healthy and reboots through
/// the firmware at its deadline; real GRUB then reads the 0 init wrote,
/// boots A, whose init reports the fallback, and B stays marked bad.
#[test]
fn grub_spends_the_tries_of_a_slot_that_never_becomes_healthy_and_falls_back() {
    let dir = scratch("slots-grub-fallback");
    let standin = SlotFiles::standin();
    let slot = |slot, entry, version| Installed {
        slot,
        entry,
        version,
        extra: &[],
        files: &standin,
        verity: None,
    };
    let d = installed_disk_with(
        &dir,
        &[
            slot(Slot::A, "liken-a.conf", "2026.12.02-001"),
            slot(Slot::B, "liken-b+2-1.conf", "2026.12.02-002"),
        ],
        Some(&Grub {
            env: &[("liken_slot", "b"), ("liken_b_tries", "2")],
            // GRUB gives both slots the same arguments; A is blessed, so
            // only B is assessed, and it never stays up an hour. The
            // reboot is asked once per machine (its mark is on /var), so
            // A does not ask again.
            extra: &[
                "liken.bless-after=3600",
                "liken.bless-deadline=20",
                "liken.standin-reboot-once=now",
            ],
        }),
    );
    let bios = |name: &str| Vm::launch(name, &installed_args(Firmware::Bios, &dir, &d.path));

    let mut vm = bios("slots-grub-fallback-b");
    vm.expect("liken: cmdline: ok (slot B)", BOOT);
    let assess = vm.expect("liken: assess: ", NEXT);
    assert!(assess.contains("slot B on trial (GRUB)"), "{assess}");
    vm.expect_unordered("liken-standin-k3s: asking for reboot", NEXT);
    vm.expect("liken: shutdown: ok (reboot requested)", NEXT);
    let via = vm.expect("liken: reboot-via: ", NEXT);
    assert!(
        via.contains("by kexec: slot B (grub) loaded: liken/b/vmlinuz")
            && via.ends_with("try counted in grub/grubenv: liken_b_tries=0)"),
        "{via}"
    );
    let cmdline = vm.expect_kexec_jump(BOOT);
    assert!(cmdline.ends_with(" liken.kexec=grub"), "{cmdline}");
    slot_b_gives_up(&mut vm, "GRUB", "kexec");
    drop(vm);
    let env = d.grubenv();
    assert_eq!(
        env.get("liken_b_tries").map(String::as_str),
        Some("0"),
        "init spent B's last try on disk before the kexec: {env:?}"
    );

    let mut vm = bios("slots-grub-fallback-a");
    slot_a_reports_the_fallback(&mut vm, "GRUB");
    drop(vm);
    // B stays marked bad, and A was never counted.
    let env = d.grubenv();
    assert_eq!(
        (
            env.get("liken_slot").map(String::as_str),
            env.get("liken_a_tries"),
            env.get("liken_b_tries").map(String::as_str)
        ),
        (Some("b"), None, Some("0")),
        "{env:?}"
    );
}
