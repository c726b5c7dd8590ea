//! Writes releases into slot B through init's control socket, under a
//! real kernel with real virtio disks, and checks the disk afterwards.
//!
//! The machine boots from the initramfs with `liken.slot=a` (as if slot
//! A had booted) and two disks: `vda` with the installed layout (an ESP
//! holding slot A's entry, a stale, spent slot B entry and the floor,
//! and blank slots), and `vdb`, a FAT disk holding releases made and
//! signed by `liken bundle -sign` and `liken sign`, and a script. The
//! stand-in (`liken.standin=write-script:/dev/vdb`) does what the machine
//! operator does for each attempt the script lists: copies the release
//! under /var/lib/liken/releases, asks init to write it with its
//! signature (and a rollback permit), prints the answer and the digest of
//! LIKEN-B as the block device holds it, and asks for a reboot after the
//! last, written one; QEMU's `-no-reboot` ends the run there. Only the
//! releases signed by a key the machine trusts, at or above the floor or
//! with a permit, are written. Midway the layer's trust.yaml is replaced
//! under /etc/liken (where the kernel unpacks a layer booted from the
//! ESP, and where root on the machine could write one): first by a root
//! of key C signed only by C, which init does not take, then by a
//! rotation to A and C signed by A, which it takes, so a release signed
//! by C is then written. The test then reads the disk image: slot B's
//! partition must start with the last release's system image, the ESP
//! must hold slot B's kernel and initrds, the new `liken-b+3.conf` with
//! slot A's console arguments, no stale entry, a grubenv preferring B
//! with three tries, and the floor the permit lowered.
//!
//! The system images in that first test are random bytes, as the writer
//! does not care what it writes, only that it reads it back. The second
//! test (the plan's test (c)) boots an installed disk under UEFI into
//! slot A, writes the stand-in channel's newest release into slot B the
//! same way, and asks for the reboot as the machine operator does: init
//! reboots by kexec into the entry systemd-boot would pick (B's, its try
//! counted by init: `+3` to `+2-1`), in the same QEMU with no firmware
//! line between the jump and the new kernel's first, and B's boot,
//! recorded as reached by kexec, blesses that entry. A reboot through
//! the firmware then boots the blessed entry from systemd-boot. The
//! third does the same upgrade under SeaBIOS and GRUB: the kexec loads
//! what grub.cfg would boot and counts the try in grubenv, and B's boot
//! blesses by removing the counter. The two releases hold different system images (VERSION_ID
//! standin-1 and standin-2, `make qemu-images`), so a writer that copied
//! slot A into B would fail: LIKEN-B is hashed against the new image,
//! and the stand-in on each slot prints the VERSION_ID of the root it
//! runs from. The disk is made as `tests/slots.rs` makes it (sgdisk,
//! mkfs.vfat, mtools), not by `liken stick`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use liken_api::bootloader;
use liken_api::release::ARTIFACT_SYSTEM;
use liken_api::{Release, Slot, decode};
use qemu_tests::disk::{
    Disk, Grub, Installed, SlotFiles, entry, esp_image, installed_disk, installed_disk_with,
    release_disk, release_verity,
};
use qemu_tests::firmware::{Firmware, Ovmf};
use qemu_tests::{
    Boot, Vm, cli_layer_trusting, drives, images, initrd, liken, run, scratch, standin_cpio,
};

/// Deadline for the boot up to the stand-in: a TCG boot takes 3 to 5 s
/// alone, more when tests share the two cores.
const BOOT: Duration = Duration::from_secs(120);
/// Deadline for the write and what follows it.
const WRITE: Duration = Duration::from_secs(120);

const VERSION: &str = "2026.12.02-042";
/// The release signed by the rotated-in key C.
const ROTATED: &str = "2026.12.03-001";

/// A release channel made with the real CLI from small stand-in inputs,
/// the real kernel and boot.cpio, signed by `key` (`liken bundle -sign`).
/// `seed` picks the system image's bytes. Returns the release directory.
fn bundle(dir: &Path, version: &str, seed: u64, key: &Path) -> PathBuf {
    let images = images();
    let inputs = dir.join("inputs");
    std::fs::create_dir_all(&inputs).unwrap();
    // 3 MiB and a bit of bytes no two blocks of which are alike, so a
    // misplaced or dropped block shows in the comparison.
    let mut state: u64 = seed;
    let system: Vec<u8> = (0..(3 << 20) + 777)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(inputs.join("liken.sqfs"), &system).unwrap();
    for (name, text) in [
        ("systemd-boot.efi", "not systemd-boot"),
        ("grub-boot.img", "not grub"),
        ("grub-core.img", "not grub either"),
        ("licenses.md", "# licenses\n"),
        ("microcode.cpio", "not microcode"),
    ] {
        std::fs::write(inputs.join(name), text).unwrap();
    }
    let s = |p: PathBuf| p.to_string_lossy().into_owned();
    let channel = dir.join("channel");
    liken(&[
        "bundle",
        "-sign",
        &s(key.to_path_buf()),
        "-microcode",
        &s(inputs.join("microcode.cpio")),
        &s(images.dir.join("vmlinuz")),
        &s(inputs.join("liken.sqfs")),
        &s(images.boot_cpio.clone()),
        &s(images.liken.clone()),
        &s(inputs.join("systemd-boot.efi")),
        &s(inputs.join("grub-boot.img")),
        &s(inputs.join("grub-core.img")),
        &s(inputs.join("licenses.md")),
        &s(channel.clone()),
        version,
    ]);
    channel.join(version)
}

fn slot_a_entry() -> String {
    entry(
        Slot::A,
        BOOTED,
        false,
        &["liken.standin=write-script:/dev/vdb"],
        None,
    )
}

/// The release slot A runs, and the floor the ESP holds: the newest
/// release this machine ever blessed.
const BOOTED: &str = "2026.12.01-001";
/// A genuine release signed by the trusted key, older than the floor.
const OLDER: &str = "2026.11.20-001";

/// Copies `from` into `to`: release.yaml and its signature, and the
/// artifacts too when `artifacts`.
fn copy_release(from: &Path, to: &Path, artifacts: bool) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if artifacts || name.starts_with("release.yaml") {
            std::fs::copy(e.path(), to.join(&name)).unwrap();
        }
    }
}

/// The script's answer for `label`: init's response, the LIKEN-B digest
/// the stand-in read after it, and the digest of the trust root init
/// keeps on the data partition.
fn attempt(vm: &mut Vm, label: &str) -> (serde_json::Value, String, String) {
    let line = vm.expect_unordered(
        &format!("liken-standin-k3s: attempt {label} answered "),
        WRITE,
    );
    let json = line
        .split_once(" answered ")
        .map(|(_, j)| j.trim())
        .unwrap();
    let answer = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let line = vm.expect_unordered(
        &format!("liken-standin-k3s: attempt {label} slot B "),
        WRITE,
    );
    let digest = line
        .split_once(" slot B ")
        .map(|(_, d)| d.trim().to_owned())
        .unwrap();
    let line = vm.expect_unordered(
        &format!("liken-standin-k3s: attempt {label} kept root "),
        WRITE,
    );
    let kept = line
        .split_once(" kept root ")
        .map(|(_, d)| d.trim().to_owned())
        .unwrap();
    (answer, digest, kept)
}

/// init is the last word on what is written, under the real kernel and
/// disks. The machine's layer trusts key A (`liken keygen`, `liken trust`,
/// `liken layer`), and its ESP holds the floor, the release it runs. In
/// one boot the stand-in asks init to write, in turn: release N+1
/// unsigned, N+1 signed by B, N+1 signed by A with one byte of
/// release.yaml changed, N-1 signed by A (below the floor), N-1 with a
/// rollback permit signed by A (`liken sign -allow-rollback`), and N+1
/// signed by A (`liken bundle -sign`). The first four are refused with
/// their reasons and LIKEN-B, read from the block device by the stand-in
/// after each answer, stays as it was; the next two are written. Then
/// the layer's trust root is swapped twice (`liken trust -sign`): to key
/// C alone signed by C, and N+2 signed by C is refused with the kept root
/// unchanged on the data partition; to A and C signed by A, which init
/// keeps, and the same N+2 is written. The disk is then read on the host:
/// slot B holds N+2's system image byte for byte, and the ESP the new
/// entry, kernel and initrds, and grubenv.
#[test]
fn only_releases_signed_by_a_trusted_key_are_written_into_slot_b() {
    let images = images();
    let dir = scratch("write-release");
    let keys = dir.join("keys");
    let s = |p: &Path| p.to_string_lossy().into_owned();
    for k in ["a", "b", "c"] {
        liken(&["keygen", &s(&keys.join(k))]);
    }
    let key = |k: &str| keys.join(k).join("release.key");
    let id_of = |k: &str| {
        let public: liken_api::signing::ReleaseKey = decode::strict(
            &std::fs::read_to_string(keys.join(k).join("release.pub")).unwrap(),
            "release.pub",
        )
        .unwrap();
        public.id.to_string()
    };
    let release_dir = bundle(&dir, VERSION, 0x9e37_79b9_7f4a_7c15, &key("a"));
    let older_dir = bundle(&dir, OLDER, 0x2545_f491_4f6c_dd1d, &key("a"));
    let rotated_dir = bundle(&dir, ROTATED, 0x6a09_e667_f3bc_c908, &key("c"));
    let release: Release = decode::strict(
        &std::fs::read_to_string(rotated_dir.join("release.yaml")).unwrap(),
        "release.yaml",
    )
    .unwrap();

    // The release disk: one directory per attempt, and the script. Only
    // the first attempt of a version carries its artifacts.
    let disk_dir = dir.join("release-disk");
    copy_release(&release_dir, &disk_dir.join("unsigned"), true);
    std::fs::remove_file(disk_dir.join("unsigned/release.yaml.sig")).unwrap();
    let foreign = disk_dir.join("foreign");
    copy_release(&release_dir, &foreign, false);
    std::fs::remove_file(foreign.join("release.yaml.sig")).unwrap();
    liken(&[
        "sign",
        "-key",
        &s(&key("b")),
        &s(&foreign.join("release.yaml")),
    ]);
    let changed = disk_dir.join("changed");
    copy_release(&release_dir, &changed, false);
    let mut yaml = std::fs::read(changed.join("release.yaml")).unwrap();
    // One hex digit of the first artifact's digest, flipped.
    let at = yaml.windows(8).position(|w| w == b"sha256: ").unwrap() + 8;
    yaml[at] = if yaml[at] == b'0' { b'1' } else { b'0' };
    std::fs::write(changed.join("release.yaml"), &yaml).unwrap();
    copy_release(&older_dir, &disk_dir.join("older"), true);
    copy_release(&release_dir, &disk_dir.join("good"), false);
    liken(&[
        "sign",
        "-key",
        &s(&key("a")),
        "-allow-rollback",
        OLDER,
        "-cluster",
        "test",
        "-machine",
        "node-1",
        &s(&disk_dir.join("permit.yaml")),
    ]);
    // The two trust roots the layer is given midway, as a person makes
    // them: C alone, signed by C; A and C, signed by A (a rotation).
    let public = |k: &str| s(&keys.join(k).join("release.pub"));
    let only_c = disk_dir.join("only-c").join("trust.yaml");
    let rotation = disk_dir.join("rotation").join("trust.yaml");
    for (file, by, listed) in [(&only_c, "c", vec!["c"]), (&rotation, "a", vec!["a", "c"])] {
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let mut args = vec!["trust".to_owned(), "-sign".into(), s(&key(by)), s(file)];
        args.extend(listed.iter().map(|k| public(k)));
        liken(&args.iter().map(String::as_str).collect::<Vec<_>>());
    }
    copy_release(&rotated_dir, &disk_dir.join("by-c"), true);
    std::fs::write(
        disk_dir.join("script"),
        "unsigned unsigned\nforeign foreign\nchanged changed\nbelow-floor older\n\
         permit older permit.yaml\ngood good\n\
         @layer only-c\nc-only by-c\n@layer rotation\nrotated by-c\n",
    )
    .unwrap();

    // The installed disk: slot A's entry (blessed) and kernel, a spent
    // slot B entry and kernel from an older release, grubenv preferring
    // A, and the floor.
    let files = dir.join("esp-files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("liken-a.conf"), slot_a_entry()).unwrap();
    std::fs::write(files.join("liken-b+0-3.conf"), "title old b\n").unwrap();
    std::fs::write(files.join("old-vmlinuz"), "old kernel").unwrap();
    std::fs::write(files.join("floor"), format!("{BOOTED}\n")).unwrap();
    let mut env = BTreeMap::new();
    env.insert("liken_slot".to_string(), "a".to_string());
    env.insert("liken_b_tries".to_string(), "0".to_string());
    std::fs::write(
        files.join("grubenv"),
        bootloader::render_grubenv(&env).unwrap(),
    )
    .unwrap();
    let esp = dir.join("esp.img");
    esp_image(
        &esp,
        &[
            ("loader/entries/liken-a.conf", &files.join("liken-a.conf")),
            (
                "loader/entries/liken-b+0-3.conf",
                &files.join("liken-b+0-3.conf"),
            ),
            ("liken/a/vmlinuz", &images.dir.join("vmlinuz")),
            ("liken/b/vmlinuz", &files.join("old-vmlinuz")),
            ("liken/floor", &files.join("floor")),
            ("grub/grubenv", &files.join("grubenv")),
        ],
    );
    let disk = Disk::partitioned(&dir.join("disk.img"));
    disk.write_into("LIKEN-ESP", &esp);
    let blank_b = liken_api::hash::sha256(&disk.read_part("LIKEN-B", 4 << 20)).to_string();
    let rel = dir.join("release.img");
    release_disk(&rel, &disk_dir);

    let trusted = keys.join("a").join("release.pub");
    let (deployment, layer) = cli_layer_trusting(&dir, "test", "node-1", &[&trusted]);
    let sha_of = |p: &Path| liken_api::hash::sha256(&std::fs::read(p).unwrap()).to_string();
    let first_root = sha_of(&deployment.join("trust.yaml"));
    let parts = [images.boot_cpio.clone(), layer, standin_cpio(&dir)];
    let mut qemu = drives::virtio("disk", &disk.path, None, false);
    qemu.extend(drives::virtio("release", &rel, None, true));
    let mut vm = Vm::boot_with(
        &Boot {
            name: "write-release",
            initrd: &initrd(&dir, &parts),
            append: "liken.slot=a liken.standin=write-script:/dev/vdb",
        },
        &qemu,
    );
    let boot = Duration::max(BOOT, WRITE);
    vm.expect_unordered("liken-standin-k3s: attempt unsigned: asking init", boot);

    // Refused, each with its reason, and slot B as it was.
    let refused = |vm: &mut Vm, label: &str, says: &[&str], slot_b: &str| {
        let (answer, b, kept) = attempt(vm, label);
        assert_eq!(answer["response"], "refused", "{label}: {answer}");
        let message = answer["message"].as_str().unwrap_or_default().to_owned();
        for want in says {
            assert!(message.contains(want), "{label}: {answer}");
        }
        assert!(message.contains("nothing was written"), "{label}: {answer}");
        assert_eq!(b, slot_b, "{label}: LIKEN-B changed after a refusal");
        // The layer's first root is what init keeps, whatever came since.
        assert_eq!(kept, first_root, "{label}: the kept trust root");
    };
    refused(&mut vm, "unsigned", &["refused (unsigned)"], &blank_b);
    refused(
        &mut vm,
        "foreign",
        &["refused (unknown-key)", &id_of("b"), &id_of("a")],
        &blank_b,
    );
    refused(&mut vm, "changed", &["refused (changed)"], &blank_b);
    refused(
        &mut vm,
        "below-floor",
        &[&format!(
            "refused (below-floor): release {OLDER} is older than {BOOTED}"
        )],
        &blank_b,
    );
    // The permit lets the older release through; the newer one follows.
    let (answer, after_permit, _) = attempt(&mut vm, "permit");
    assert_eq!(answer["response"], "releaseWritten", "{answer}");
    assert_eq!(answer["version"], OLDER, "{answer}");
    assert_ne!(
        after_permit, blank_b,
        "the permitted write left LIKEN-B as it was"
    );
    let (answer, after_good, _) = attempt(&mut vm, "good");
    assert_eq!(answer["response"], "releaseWritten", "{answer}");
    assert_eq!(answer["version"], VERSION, "{answer}");
    assert_ne!(
        after_good, after_permit,
        "the second write left LIKEN-B as it was"
    );

    // A root of C signed only by C is not taken: C's release is refused
    // as unknown, and the console says why the layer's root was passed
    // over.
    vm.expect_unordered(
        "liken-standin-k3s: layer only-c: trust.yaml replaced",
        WRITE,
    );
    refused(
        &mut vm,
        "c-only",
        &["refused (unknown-key)", &id_of("c"), &id_of("a")],
        &after_good,
    );
    assert!(
        vm.seen.iter().any(
            |l| l.contains("the layer's trust.yaml differs from the one kept and is not taken")
        ),
        "no console line on the refused root; see {}",
        vm.log.display()
    );
    // The rotation signed by A is kept, and C's release is written.
    vm.expect_unordered(
        "liken-standin-k3s: layer rotation: trust.yaml replaced",
        WRITE,
    );
    let (answer, after_rotation, kept) = attempt(&mut vm, "rotated");
    let written = &answer;
    assert_eq!(written["response"], "releaseWritten", "{answer}");
    assert_eq!(written["slot"], "B", "{answer}");
    assert_eq!(written["version"], ROTATED, "{answer}");
    assert_eq!(written["entry"], "liken-b+3.conf", "{answer}");
    assert_eq!(kept, sha_of(&rotation), "init did not keep the rotation");
    assert_ne!(
        after_rotation, after_good,
        "the rotated key's write left LIKEN-B as it was"
    );
    // Progress reached the end of the slot write.
    assert!(
        vm.seen
            .iter()
            .any(|l| l.contains("liken: write-release: 100% (")),
        "no progress line; see {}",
        vm.log.display()
    );
    vm.expect_unordered("liken-standin-k3s: asking for reboot", WRITE);
    let status = vm.wait_exit(WRITE);
    assert!(status.success(), "QEMU ended with {status}");

    // Slot B holds the system image, byte for byte.
    let system = std::fs::read(rotated_dir.join("liken.sqfs")).unwrap();
    let got = disk.read_part("LIKEN-B", system.len());
    assert!(got == system, "slot B does not hold the system image");
    // Slot A's partition was not touched.
    let head = disk.read_part("LIKEN-A", 1 << 20);
    assert!(head.iter().all(|b| *b == 0), "slot A was written");

    // The ESP: the new entry only, the files it names, grubenv.
    assert_eq!(
        disk.esp_list("loader/entries"),
        ["liken-a.conf", "liken-b+3.conf"]
    );
    // The entry as systemd-boot reads it (the Boot Loader Specification's
    // type #1 keys), spelt out rather than rendered by the code that
    // wrote it: slot B's kernel and initrds, the shared layer, the
    // release's dm-verity root hash, salt and data blocks from its
    // release.yaml, and the booted entry's console and liken arguments
    // carried on.
    let written_entry = String::from_utf8(disk.esp_file("loader/entries/liken-b+3.conf")).unwrap();
    let v = release.verity.as_ref().expect("bundle records the tree");
    assert_eq!(
        written_entry,
        format!(
            "title liken 2026.12.03-001 (slot B)\n\
             sort-key liken\n\
             version 2026.12.03-001\n\
             linux /liken/b/vmlinuz\n\
             initrd /liken/b/microcode.cpio\n\
             initrd /liken/b/boot.cpio\n\
             initrd /liken/layer.cpio\n\
             options liken.slot=b liken.verity={}:{}:{} panic=10 console=ttyS0 \
             liken.standin=write-script:/dev/vdb\n",
            v.root_hash, v.salt, v.data_blocks
        )
    );
    for (name, file) in [
        ("kernel", "vmlinuz"),
        ("boot", "boot.cpio"),
        ("microcode", "microcode.cpio"),
    ] {
        let a = release.artifact(name).unwrap();
        let bytes = disk.esp_file(&format!("liken/b/{file}"));
        assert_eq!(bytes.len() as u64, a.size, "{file}");
        assert_eq!(liken_api::hash::sha256(&bytes), a.sha256, "{file}");
    }
    assert_eq!(
        disk.esp_list("liken/b"),
        ["boot.cpio", "microcode.cpio", "vmlinuz"]
    );
    let env = bootloader::parse_grubenv(&disk.esp_file("grub/grubenv")).unwrap();
    assert_eq!(env["liken_slot"], "b");
    assert_eq!(env["liken_b_tries"], "3");
    // The permit lowered the floor to the release it allowed, on the ESP
    // too.
    assert_eq!(
        String::from_utf8(disk.esp_file("liken/floor"))
            .unwrap()
            .trim(),
        OLDER
    );
    // The FAT init wrote is consistent.
    let esp_after = dir.join("esp-after.img");
    disk.extract("LIKEN-ESP", &esp_after);
    run("fsck.vfat", &["-n", &esp_after.to_string_lossy()]);
}

/// UEFI firmware, the installed disk first (booted), the release disk
/// second.
fn boot_uefi_with_release(name: &str, disk: &Path, release: &Path, ovmf: &Ovmf) -> Vm {
    let mut args = ovmf.args();
    args.extend(drives::virtio("disk", disk, Some(0), false));
    args.extend(drives::virtio("release", release, None, true));
    Vm::launch(name, &args)
}

/// The stand-in channel's two newest releases, older first, each with
/// its directory; their system images differ.
fn two_releases() -> [(PathBuf, Release); 2] {
    let releases = images().standin_releases();
    let [.., older, newest] = releases.as_slice() else {
        panic!("the stand-in channel holds fewer than two releases (make qemu-images)");
    };
    let read = |dir: &PathBuf| -> (PathBuf, Release) {
        let r = decode::strict(
            &std::fs::read_to_string(dir.join("release.yaml")).unwrap(),
            "release.yaml",
        )
        .unwrap();
        (dir.clone(), r)
    };
    let both = [read(older), read(newest)];
    assert_ne!(
        system(&both[0].1).sha256,
        system(&both[1].1).sha256,
        "the stand-in channel's two releases hold the same system image"
    );
    both
}

fn system(r: &Release) -> liken_api::release::Artifact {
    r.artifact(ARTIFACT_SYSTEM).unwrap().clone()
}

/// LIKEN-B holds `new`'s system image, not slot A's.
fn slot_b_holds(d: &Disk, new: &Release) {
    let b = d.read_part("LIKEN-B", system(new).size as usize);
    assert_eq!(
        liken_api::hash::sha256(&b),
        system(new).sha256,
        "LIKEN-B does not hold release {}'s system image",
        new.version
    );
}

/// init wrote `new` into slot B with a new, counted entry, and the
/// stand-in then asked for the reboot that boots it.
fn written_then_reboot_asked(vm: &mut Vm, new: &Release) {
    let ok = vm.expect_unordered("liken: write-release: ok", WRITE);
    assert!(
        ok.contains(&format!(
            "release {} in slot B, entry liken-b+3.conf",
            new.version
        )),
        "{ok}"
    );
    vm.expect_unordered("liken-standin-k3s: asking for reboot", WRITE);
}

#[test]
fn a_release_written_into_slot_b_boots_and_is_blessed() {
    let dir = scratch("write-release-reboot");
    let [(older, old), (newest, new)] = two_releases();
    let (older, newest) = (&older, &newest);

    // Slot A installed with the older release, its entry blessed and
    // carrying its root hash, as install mode writes it.
    let old_verity = release_verity(older);
    let new_verity = release_verity(newest);
    let d = installed_disk(
        &dir,
        &[Installed {
            slot: Slot::A,
            entry: "liken-a.conf",
            version: old.version.as_str(),
            extra: &[
                "liken.bless-after=5",
                "liken.standin=write-release:/dev/vdb",
            ],
            files: &SlotFiles::release(older),
            verity: Some(&old_verity),
        }],
    );
    let through = |v: &liken_api::verity::VerityArg| {
        format!(
            "through dm-verity (root hash {}\u{2026}) is the root",
            v.root_hash().short()
        )
    };
    let rel = dir.join("release.img");
    release_disk(&rel, newest);
    let ovmf = Ovmf::fresh(&dir);

    // Slot A writes the newer release into B and reboots.
    let mut vm = boot_uefi_with_release("write-release-a", &d.path, &rel, &ovmf);
    vm.expect("liken: cmdline: ok (slot A)", BOOT);
    vm.expect(
        &format!(
            "liken: root: ok (slot A from /dev/vda3 {}",
            through(&old_verity)
        ),
        WRITE,
    );
    vm.expect_unordered("liken-standin-k3s: os-release VERSION_ID=standin-1", WRITE);
    vm.expect_unordered(
        &format!(
            "liken-standin-k3s: asking init to write release {}",
            new.version
        ),
        WRITE,
    );
    written_then_reboot_asked(&mut vm, &new);
    // The reboot goes by kexec (the default): init loads the entry
    // systemd-boot would pick, the new one, and counts its try as
    // systemd-boot would before it jumps.
    let via = vm.expect("liken: reboot-via: ", WRITE);
    assert!(
        via.contains("by kexec: slot B (liken-b+3.conf) loaded: liken/b/vmlinuz")
            && via.contains("try counted: liken-b+3.conf renamed to liken-b+2-1.conf"),
        "{via}"
    );
    // The new kernel's first line, in the same QEMU, with no firmware
    // in between.
    let cmdline = vm.expect_kexec_jump(BOOT);
    assert!(cmdline.contains(" liken.kexec=liken-b+3.conf"), "{cmdline}");
    vm.expect("liken: cmdline: ok (slot B)", BOOT);
    // The entry init wrote carries the new release's own root hash,
    // and the kexec handed it to the new kernel.
    vm.expect(
        &format!(
            "liken: root: ok (slot B from /dev/vda4 {}",
            through(&new_verity)
        ),
        WRITE,
    );
    let record = vm.expect("liken: boot-record: ok", WRITE);
    assert!(record.ends_with(", reached by kexec)"), "{record}");
    vm.expect_unordered("liken-standin-k3s: os-release VERSION_ID=standin-2", WRITE);
    vm.expect_unordered(
        &format!(
            "liken-standin-k3s: release {} is already running or was written before; nothing to write",
            new.version
        ),
        WRITE,
    );
    // Blessed from k3s's answer (the stand-in's kubectl says Ready):
    // the entry init counted is the one it blesses.
    let bless = vm.expect("liken: bless: ", WRITE);
    assert!(
        bless.starts_with(
            "liken: bless: ok (loader/entries/liken-b+2-1.conf renamed to liken-b.conf: \
             node "
        ) && bless.contains(" is Ready with a heartbeat at "),
        "{bless}"
    );
    vm.reboot(WRITE);
    drop(vm);
    assert_eq!(
        d.esp_list("loader/entries"),
        ["liken-a.conf", "liken-b.conf"]
    );
    slot_b_holds(&d, &new);

    // Through the firmware now (the reboot above was a signal's):
    // systemd-boot boots the blessed entry init left, uncounted.
    let mut vm = boot_uefi_with_release("write-release-b", &d.path, &rel, &ovmf);
    vm.expect("BdsDxe: starting", BOOT);
    vm.expect("liken: cmdline: ok (slot B)", BOOT);
    let assess = vm.expect("liken: assess: ", WRITE);
    assert!(
        assess.contains("slot B is blessed (systemd-boot entry liken-b.conf)"),
        "{assess}"
    );
    let record = vm.expect("liken: boot-record: ok", WRITE);
    assert!(
        record.contains(", reached by firmware (a signal asked init to reboot"),
        "{record}"
    );
    vm.reboot(WRITE);
    drop(vm);
    assert_eq!(
        d.esp_list("loader/entries"),
        ["liken-a.conf", "liken-b.conf"]
    );
    // Slot B was blessed by k3s's answer: slot A's test-only uptime
    // blessing did not come along into the entry init wrote.
    let b = String::from_utf8(d.esp_file("loader/entries/liken-b.conf")).unwrap();
    assert!(
        b.contains("liken.standin=write-release:/dev/vdb") && !b.contains("liken.bless-after"),
        "{b}"
    );
    // Nor did slot A's root hash: B's entry names B's own.
    assert!(
        b.contains(&new_verity.render()) && !b.contains(old_verity.root_hash().as_str()),
        "{b}"
    );
}

/// The same upgrade on a BIOS machine: slot A, blessed in grubenv,
/// writes the newer release into B (its entry and grubenv's `+3` tries),
/// and the reboot goes by kexec into what grub.cfg would boot next, B,
/// with the try init spent in grubenv (3 to 2) as GRUB would have. In
/// the same QEMU, with no `BOOT_IMAGE=` from GRUB on the new kernel's
/// command line, B's boot is recorded as reached by kexec and blesses
/// by removing B's counter. (That real GRUB reads the counter init
/// writes is `tests/slots.rs`' GRUB fallback.)
#[test]
fn under_bios_a_release_written_into_slot_b_is_reached_by_kexec_and_blessed() {
    let dir = scratch("write-release-bios");
    let [(older, old), (newest, new)] = two_releases();
    let d = installed_disk_with(
        &dir,
        &[Installed {
            slot: Slot::A,
            entry: "liken-a.conf",
            version: old.version.as_str(),
            extra: &[],
            files: &SlotFiles::release(&older),
            verity: None,
        }],
        Some(&Grub {
            env: &[("liken_slot", "a")],
            extra: &["liken.standin=write-release:/dev/vdb"],
        }),
    );
    let rel = dir.join("release.img");
    release_disk(&rel, &newest);
    let mut args = Firmware::Bios.args(&dir);
    args.extend(drives::virtio("disk", &d.path, Some(0), false));
    args.extend(drives::virtio("release", &rel, None, true));

    let mut vm = Vm::launch("write-release-bios", &args);
    vm.expect("liken: cmdline: ok (slot A)", BOOT);
    let assess = vm.expect("liken: assess: ", WRITE);
    assert!(assess.contains("slot A is blessed (GRUB)"), "{assess}");
    written_then_reboot_asked(&mut vm, &new);
    let via = vm.expect("liken: reboot-via: ", WRITE);
    assert!(
        via.contains("by kexec: slot B (grub) loaded: ")
            && via.ends_with("try counted in grub/grubenv: liken_b_tries=2)"),
        "{via}"
    );
    let cmdline = vm.expect_kexec_jump(BOOT);
    assert!(cmdline.ends_with(" liken.kexec=grub"), "{cmdline}");
    vm.expect("liken: cmdline: ok (slot B)", BOOT);
    // grub.cfg, shared by both slots, carries no root hash.
    vm.expect(
        "liken: root: ok (slot B from /dev/vda4 (unverified) is the root",
        WRITE,
    );
    let assess = vm.expect("liken: assess: ", WRITE);
    assert!(assess.contains("slot B on trial (GRUB)"), "{assess}");
    let record = vm.expect("liken: boot-record: ok", WRITE);
    assert!(record.ends_with(", reached by kexec)"), "{record}");
    vm.expect_unordered("liken-standin-k3s: os-release VERSION_ID=standin-2", WRITE);
    let bless = vm.expect("liken: bless: ", WRITE);
    assert!(
        bless.starts_with("liken: bless: ok (liken_b_tries removed from grub/grubenv: node ")
            && bless.contains(" is Ready with a heartbeat at "),
        "{bless}"
    );
    vm.reboot(WRITE);
    drop(vm);
    let env = d.grubenv();
    assert_eq!(
        (
            env.get("liken_slot").map(String::as_str),
            env.get("liken_b_tries")
        ),
        (Some("b"), None),
        "grubenv should prefer the blessed slot B: {env:?}"
    );
    slot_b_holds(&d, &new);
}
