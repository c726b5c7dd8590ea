//! Install mode end to end on an image file: the disk read back with
//! liken-disk's GPT reader, mtools, fsck.vfat and sgdisk.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;

use liken_api::Slot;
use liken_api::bootloader::{self, EntryParams};
use liken_disk::gpt;
use liken_disk::guid;

use super::testutil::{bytes, fake_release, scratch};
use super::write::{self, EntryArgs};
use super::*;
use crate::release_check::CheckError;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn args() -> EntryArgs {
    write::decide_entry_args(
        "console=ttyS0,115200 liken.install=1 liken.machine=node-1 liken.bless-after=5",
        "node-1",
        &[],
    )
}

fn disk_file(path: &Path, size: u64) {
    File::create(path).unwrap().set_len(size).unwrap();
}

fn read_at(path: &Path, offset: u64, len: u64) -> Vec<u8> {
    let mut f = File::open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    let mut buf = vec![0u8; len as usize];
    f.read_exact(&mut buf).unwrap();
    buf
}

fn write_at(path: &Path, offset: u64, data: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(data).unwrap();
}

/// The layout any 4 GiB disk gets (offsets do not depend on GUIDs).
fn layout(size: u64) -> gpt::Layout {
    let g = |n: &str| guid::Guid::from_name("t", n);
    gpt::plan(
        size,
        g("d"),
        &write::layout_specs([g("1"), g("2"), g("3"), g("4"), g("5")]),
    )
    .unwrap()
}

fn tool(cmd: &mut Command) -> Vec<u8> {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}; run scripts/setup.sh"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn mtype(disk: &Path, offset: u64, path: &str) -> Vec<u8> {
    tool(
        Command::new("mtype")
            .arg("-i")
            .arg(format!("{}@@{offset}", disk.display()))
            .arg(format!("::{path}")),
    )
}

#[test]
fn a_full_install_onto_an_image_file() {
    let dir = scratch("full");
    let rel = fake_release(&dir, true);
    let layer_bytes = bytes(9, 12_345);
    let disk = dir.join("disk.img");
    disk_file(&disk, 4 * GIB);
    // A reused disk: old bytes where slot B and the data partition go.
    let planned = layout(4 * GIB);
    for name in ["LIKEN-B", "LIKEN-DATA"] {
        let p = planned.by_name(name).unwrap();
        write_at(&disk, p.offset(), &vec![0xAA; 2 * MIB as usize]);
    }
    write_at(&disk, 0, &[0xCC; 440]);

    let mut lines = Vec::new();
    let done = install_release(&rel, &layer_bytes, &disk, &args(), None, &mut |l| {
        lines.push(l.to_owned())
    })
    .unwrap();
    assert_eq!(done.version.as_str(), "2026.12.02-001");
    assert_eq!(done.size, 4 * GIB);
    for want in [
        "kernel checked",
        "partition table written",
        "cleared",
        "slot A: 100%",
        "read back",
        "ESP written",
        "GRUB written",
    ] {
        assert!(
            lines.iter().any(|l| l.contains(want)),
            "no line with {want:?} in {lines:#?}"
        );
    }

    // The table, read back with its checksums verified.
    let mut f = File::open(&disk).unwrap();
    let t = gpt::read(&mut f).unwrap();
    let names: Vec<&str> = t.partitions.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "LIKEN-ESP",
            "LIKEN-BIOS",
            "LIKEN-A",
            "LIKEN-B",
            "LIKEN-DATA"
        ]
    );
    assert_eq!(t.partitions[0].type_guid, guid::ESP);
    assert_eq!(t.partitions[1].type_guid, guid::BIOS_BOOT);
    assert!(
        t.partitions[2..]
            .iter()
            .all(|p| p.type_guid == guid::LINUX_DATA)
    );
    assert_eq!(t.partitions[0].size(), 512 * MIB);
    assert_eq!(t.partitions[1].size(), MIB);
    assert_eq!(t.partitions[2].size(), GIB);
    assert_eq!(t.partitions[3].size(), GIB);
    assert_eq!(t.partitions[4].last_lba, t.last_usable());
    assert!(t.partitions.iter().all(|p| p.first_lba % 2048 == 0));
    assert_ne!(t.partitions[2].guid, t.partitions[3].guid);
    tool(Command::new("sgdisk").arg("-v").arg(&disk));

    // Slot A holds the system image; B and DATA start with zeros.
    let system = std::fs::read(rel.join("liken.sqfs")).unwrap();
    let a = t.by_name("LIKEN-A").unwrap();
    assert_eq!(read_at(&disk, a.offset(), system.len() as u64), system);
    for name in ["LIKEN-B", "LIKEN-DATA"] {
        let p = t.by_name(name).unwrap();
        assert!(
            read_at(&disk, p.offset(), write::ZEROED_HEAD)
                .iter()
                .all(|b| *b == 0),
            "{name} still holds old bytes"
        );
    }

    // GRUB: boot.img patched to find core.img in LIKEN-BIOS.
    let bios = t.by_name("LIKEN-BIOS").unwrap();
    let fields = liken_disk::grub::read_fields(&mut f).unwrap();
    assert_eq!(fields.kernel_sector, bios.first_lba);
    assert_eq!(fields.blocklist_start, bios.first_lba + 1);
    let core = std::fs::read(rel.join("grub-core.img")).unwrap();
    assert_eq!(
        read_at(&disk, bios.offset() + 512, core.len() as u64 - 512),
        core[512..]
    );
    let mbr = read_at(&disk, 0, 512);
    assert_eq!(&mbr[510..], &[0x55, 0xAA]);
    assert_ne!(&mbr[..440], &[0xCC; 440][..], "the old boot code is gone");

    // The ESP, through mtools.
    let esp = t.by_name("LIKEN-ESP").unwrap();
    let listing = String::from_utf8(tool(
        Command::new("mdir")
            .arg("-/")
            .arg("-b")
            .arg("-i")
            .arg(format!("{}@@{}", disk.display(), esp.offset()))
            .arg("::"),
    ))
    .unwrap();
    for want in [
        "::/EFI/BOOT/BOOTX64.EFI",
        "::/loader/loader.conf",
        "::/loader/entries/liken-a+3.conf",
        "::/liken/a/vmlinuz",
        "::/liken/a/boot.cpio",
        "::/liken/a/microcode.cpio",
        "::/liken/layer.cpio",
        "::/grub/grub.cfg",
        "::/grub/grubenv",
    ] {
        assert!(
            listing.lines().any(|l| l.trim_end_matches('/') == want),
            "{want} missing from\n{listing}"
        );
    }
    let off = esp.offset();
    for (path, file) in [
        ("/EFI/BOOT/BOOTX64.EFI", "systemd-boot.efi"),
        ("/liken/a/vmlinuz", "vmlinuz"),
        ("/liken/a/boot.cpio", "boot.cpio"),
        ("/liken/a/microcode.cpio", "microcode.cpio"),
    ] {
        assert_eq!(
            mtype(&disk, off, path),
            std::fs::read(rel.join(file)).unwrap(),
            "{path}"
        );
    }
    assert_eq!(mtype(&disk, off, "/liken/layer.cpio"), layer_bytes);
    let entry = String::from_utf8(mtype(&disk, off, "/loader/entries/liken-a+3.conf")).unwrap();
    assert_eq!(
        entry,
        bootloader::render_entry(&EntryParams {
            slot: Slot::A,
            version: done.version.clone(),
            microcode: true,
            console_args: vec!["console=ttyS0,115200".into()],
            extra_args: vec!["liken.machine=node-1".into()],
            verity: None,
        })
    );
    assert!(
        entry
            .ends_with("options liken.slot=a panic=10 console=ttyS0,115200 liken.machine=node-1\n"),
        "{entry}"
    );
    assert_eq!(
        String::from_utf8(mtype(&disk, off, "/loader/loader.conf")).unwrap(),
        bootloader::render_loader_conf()
    );
    let grub_cfg = String::from_utf8(mtype(&disk, off, "/grub/grub.cfg")).unwrap();
    assert!(
        grub_cfg.contains("liken.slot=$boot panic=10 console=ttyS0,115200 liken.machine=node-1"),
        "{grub_cfg}"
    );
    let env = bootloader::parse_grubenv(&mtype(&disk, off, "/grub/grubenv")).unwrap();
    let want: BTreeMap<String, String> = [("liken_a_tries", "3"), ("liken_slot", "a")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    assert_eq!(env, want);

    // The ESP on its own passes fsck.vfat, with the right label.
    let part = dir.join("esp.img");
    std::fs::write(&part, read_at(&disk, esp.offset(), esp.size())).unwrap();
    tool(Command::new("fsck.vfat").arg("-n").arg(&part));
    let label = String::from_utf8(tool(
        Command::new("mlabel")
            .arg("-s")
            .arg("-i")
            .arg(&part)
            .arg("::"),
    ))
    .unwrap();
    assert!(label.contains("LIKEN-ESP"), "{label}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The regions of a 4 GiB disk an install writes first: the MBR and
/// primary GPT, the ESP's start, slot A's start, the backup GPT.
fn untouched(disk: &Path, size: u64) -> bool {
    let l = layout(4 * GIB);
    let a = l.by_name("LIKEN-A").unwrap().offset();
    let esp = l.by_name("LIKEN-ESP").unwrap().offset();
    [(0, MIB), (esp, MIB), (a, 4 * MIB), (size - MIB, MIB)]
        .into_iter()
        .filter(|(o, _)| *o < size)
        .all(|(o, n)| read_at(disk, o, n.min(size - o)).iter().all(|b| *b == 0))
}

#[test]
fn a_verity_record_gives_slot_as_entry_its_root_hash_and_grub_none() {
    let dir = scratch("verity");
    let record = liken_api::release::Verity {
        root_hash: liken_api::hash::sha256(b"tree"),
        salt: "0f".repeat(32),
        // fake_release's system image is 3 MiB and a bit.
        hash_offset: 768 * 4096,
        data_block_size: 4096,
        hash_block_size: 4096,
        algorithm: "sha256".into(),
        data_blocks: 768,
    };
    let rel = super::testutil::fake_release_with(&dir, false, Some(record));
    let v = source::verify(&rel, &mut |_| {}).unwrap();
    let want = format!(
        "liken.verity={}:{}:768",
        liken_api::hash::sha256(b"tree"),
        "0f".repeat(32)
    );
    assert_eq!(v.verity.as_ref().map(|a| a.render()), Some(want.clone()));
    let entry = bootloader::render_entry(&write::entry_params(&v, &args()));
    assert!(
        entry.ends_with(&format!(
            "options liken.slot=a {want} panic=10 console=ttyS0,115200 liken.machine=node-1\n"
        )),
        "{entry}"
    );
    // Without a record, no argument.
    let plain = source::verify(&fake_release(&scratch("verity-none"), false), &mut |_| {}).unwrap();
    assert_eq!(plain.verity, None);
    assert!(!bootloader::render_entry(&write::entry_params(&plain, &args())).contains("verity"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_tampered_artifact_writes_nothing() {
    let dir = scratch("tampered");
    let rel = fake_release(&dir, false);
    let disk = dir.join("disk.img");
    disk_file(&disk, 4 * GIB);
    // The last byte of the system image, so every other artifact and the
    // system image's size check out first.
    let sys = rel.join("liken.sqfs");
    let mut s = std::fs::read(&sys).unwrap();
    *s.last_mut().unwrap() ^= 0xFF;
    std::fs::write(&sys, &s).unwrap();
    let e = install_release(&rel, b"layer", &disk, &args(), None, &mut |_| {}).unwrap_err();
    assert!(
        matches!(&e, InstallError::Source(SourceError::Check(CheckError::Artifact { name, .. })) if name == "system"),
        "{e}"
    );
    assert!(e.to_string().contains("nothing was written"), "{e}");
    assert!(untouched(&disk, 4 * GIB));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_small_disk_is_refused_before_writing() {
    let dir = scratch("small");
    let rel = fake_release(&dir, false);
    let disk = dir.join("disk.img");
    disk_file(&disk, 3 * GIB);
    let e = install_release(&rel, b"layer", &disk, &args(), None, &mut |_| {}).unwrap_err();
    assert!(
        matches!(&e, InstallError::Write(WriteError::Plan(_))),
        "{e}"
    );
    let text = e.to_string();
    assert!(
        text.contains("use a larger disk") && text.contains("nothing was written"),
        "{text}"
    );
    assert!(untouched(&disk, 3 * GIB));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn finds_the_stick_and_its_disk_in_sysfs() {
    let dir = scratch("sticks");
    let sys = dir.join("sys");
    let devices = sys.join("devices/usb1/host0/block");
    let class = sys.join("class/block");
    std::fs::create_dir_all(&class).unwrap();
    for (disk, part, name) in [("sda", "sda1", "LIKEN-STICK"), ("vda", "vda1", "LIKEN-ESP")] {
        let d = devices.join(disk);
        let p = d.join(part);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(d.join("uevent"), format!("DEVNAME={disk}\nDEVTYPE=disk\n")).unwrap();
        std::fs::write(
            p.join("uevent"),
            format!("DEVNAME={part}\nDEVTYPE=partition\nPARTN=1\nPARTNAME={name}\n"),
        )
        .unwrap();
        std::fs::write(p.join("partition"), "1\n").unwrap();
        std::os::unix::fs::symlink(&d, class.join(disk)).unwrap();
        std::os::unix::fs::symlink(&p, class.join(part)).unwrap();
    }
    let sticks = find_sticks(&sys);
    assert_eq!(
        sticks,
        [Stick {
            device: "/dev/sda1".into(),
            disk: Some("sda".into())
        }]
    );
    // With the stick as the only source, the origin is the stick.
    let paths = InstallPaths {
        root: dir.join("initramfs"),
        sys: sys.clone(),
        dev: dir.join("dev"),
        proc: dir.join("proc"),
        stick_mount: dir.join("stick"),
        console: dir.join("console"),
        etc_liken: dir.join("etc-liken"),
    };
    assert_eq!(
        find_origin(&paths, Duration::ZERO).unwrap(),
        Origin::Stick(sticks[0].clone())
    );
    // A release in the initramfs wins, but only with its layer.
    let media = paths.root.join(source::RELEASE_DIR);
    std::fs::create_dir_all(&media).unwrap();
    std::fs::write(media.join("release.yaml"), "x").unwrap();
    assert!(matches!(
        find_origin(&paths, Duration::ZERO),
        Err(SourceError::MediaWithoutLayer)
    ));
    std::fs::write(paths.root.join(source::LAYER_FILE), "x").unwrap();
    assert_eq!(find_origin(&paths, Duration::ZERO).unwrap(), Origin::Media);
    // Nothing at all: refused once the wait is over.
    let empty = InstallPaths {
        root: dir.join("none"),
        sys: dir.join("nosys"),
        ..paths
    };
    assert!(matches!(
        find_origin(&empty, Duration::from_millis(300)),
        Err(SourceError::NoSource { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn enter_on_the_console_is_a_line() {
    let dir = scratch("console");
    let c = dir.join("console");
    std::fs::write(&c, "abc\n").unwrap();
    wait_for_line(&c).unwrap();
    std::fs::write(&c, "no newline").unwrap();
    assert!(wait_for_line(&c).is_err());
    assert!(wait_for_line(&dir.join("none")).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stick made with `liken stick -secureboot` carries the fleet's keys
/// in loader/keys/auto: the installed ESP gets the same three files and
/// `secure-boot-enroll force` in loader.conf, so systemd-boot on the disk
/// enrols them if the firmware is in setup mode. A stick without them
/// gives neither (the full install above), and a directory missing a
/// file is refused before the disk is touched.
#[test]
fn the_sticks_secure_boot_keys_go_onto_the_esp() {
    let dir = scratch("keys");
    let rel = fake_release(&dir, false);
    let stick = dir.join("stick");
    assert_eq!(source::read_enrol_keys(&stick).unwrap(), None);
    let keys_dir = stick.join(bootloader::SECURE_BOOT_KEYS_DIR);
    std::fs::create_dir_all(&keys_dir).unwrap();
    for (i, name) in bootloader::SECURE_BOOT_KEY_FILES.iter().enumerate() {
        std::fs::write(keys_dir.join(name), bytes(i as u32 + 40, 1500 + i)).unwrap();
    }
    let keys = source::read_enrol_keys(&stick).unwrap().unwrap();
    let names: Vec<&str> = keys.files.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["db.auth", "KEK.auth", "PK.auth"]);

    let disk = dir.join("disk.img");
    disk_file(&disk, 4 * GIB);
    install_release(&rel, b"layer", &disk, &args(), Some(&keys), &mut |_| {}).unwrap();
    let off = layout(4 * GIB).by_name("LIKEN-ESP").unwrap().offset();
    for (name, want) in &keys.files {
        assert_eq!(
            &mtype(&disk, off, &format!("/loader/keys/auto/{name}")),
            want,
            "{name}"
        );
    }
    let conf = String::from_utf8(mtype(&disk, off, "/loader/loader.conf")).unwrap();
    assert_eq!(conf, bootloader::render_loader_conf_enrolling());
    assert!(conf.ends_with("secure-boot-enroll force\n"), "{conf}");

    // One file missing, or one far too large: refused, naming it.
    std::fs::remove_file(keys_dir.join("KEK.auth")).unwrap();
    let e = source::read_enrol_keys(&stick).unwrap_err();
    assert!(
        e.to_string().contains("KEK.auth cannot be read")
            && e.to_string().contains("nothing was written"),
        "{e}"
    );
    std::fs::write(keys_dir.join("KEK.auth"), vec![0u8; 100_000]).unwrap();
    let e = source::read_enrol_keys(&stick).unwrap_err();
    assert!(e.to_string().contains("is 65537 bytes"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_release_with_unified_kernel_images_boots_slot_a_from_its_signed_image() {
    use liken_api::release::{Release, Uki, Verity};
    let dir = scratch("uki");
    let rel = super::testutil::fake_release_with(
        &dir,
        false,
        Some(Verity {
            root_hash: liken_api::hash::sha256(b"tree"),
            salt: "0f".repeat(32),
            hash_offset: 768 * 4096,
            data_block_size: 4096,
            hash_block_size: 4096,
            algorithm: "sha256".into(),
            data_blocks: 768,
        }),
    );
    let yaml = rel.join("release.yaml");
    let mut release: Release =
        liken_api::decode::strict(&std::fs::read_to_string(&yaml).unwrap(), "release.yaml")
            .unwrap();
    let uki_a = bytes(50, 70_000);
    for (name, file, body) in [
        ("uki-a", "liken-a.efi", uki_a.clone()),
        ("uki-b", "liken-b.efi", bytes(51, 70_000)),
    ] {
        release
            .artifacts
            .push(crate::release_check::write_test_artifact(
                &rel, name, file, &body,
            ));
    }
    release.uki = Some(Uki {
        command_line: "panic=10 console=ttyS0,115200".into(),
    });
    std::fs::write(&yaml, liken_api::decode::to_yaml(&release).unwrap()).unwrap();

    let disk = dir.join("disk.img");
    disk_file(&disk, 4 * GIB);
    install_release(&rel, b"the layer", &disk, &args(), None, &mut |_| {}).unwrap();
    let off = layout(4 * GIB).by_name("LIKEN-ESP").unwrap().offset();
    assert_eq!(mtype(&disk, off, "/EFI/Linux/liken-a+3.efi"), uki_a);
    assert_eq!(
        mtype(&disk, off, "/loader/credentials/liken-layer.cred"),
        b"the layer"
    );
    assert_eq!(mtype(&disk, off, "/liken/layer.cpio"), b"the layer");
    // No type #1 entry beside the image: its command line is unsigned.
    let listing = String::from_utf8(tool(
        Command::new("mdir")
            .args(["-/", "-b", "-i"])
            .arg(format!("{}@@{off}", disk.display()))
            .arg("::/"),
    ))
    .unwrap();
    assert!(listing.contains("/EFI/Linux/liken-a+3.efi"), "{listing}");
    assert!(!listing.contains("loader/entries/"), "{listing}");
    let _ = std::fs::remove_dir_all(&dir);
}
