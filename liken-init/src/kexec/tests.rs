use std::path::PathBuf;

use liken_api::bootloader::{EntryParams, GrubParams, render_entry, render_grub_cfg};
use liken_api::{Slot, Version};

use super::*;
use crate::sys::mount::FakeMounter;
use crate::sys::power::FakePower;

/// A scratch ESP: slot A blessed with 2026.12.02-001, slot B freshly
/// written with 2026.12.03-001, both kernels and initrds present.
struct World {
    dir: PathBuf,
    mounter: FakeMounter,
}

impl World {
    fn new(name: &str) -> World {
        let dir =
            std::env::temp_dir().join(format!("liken-init-kexec-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for d in ["loader/entries", "liken/a", "liken/b", "grub"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        for (slot, version, file) in [
            (Slot::A, "2026.12.02-001", "liken-a.conf"),
            (Slot::B, "2026.12.03-001", "liken-b+3.conf"),
        ] {
            let text = render_entry(&EntryParams {
                slot,
                version: Version::parse(version).unwrap(),
                microcode: false,
                console_args: vec!["console=ttyS0".into()],
                extra_args: vec![],
                verity: None,
            });
            std::fs::write(dir.join("loader/entries").join(file), text).unwrap();
            let d = slot.esp_dir();
            std::fs::write(
                dir.join(format!("liken/{d}/vmlinuz")),
                format!("KERNEL-{d}"),
            )
            .unwrap();
            std::fs::write(
                dir.join(format!("liken/{d}/boot.cpio")),
                format!("BOOT-{d}|"),
            )
            .unwrap();
        }
        std::fs::write(dir.join("liken/layer.cpio"), "LAYER").unwrap();
        World {
            dir,
            mounter: FakeMounter::default(),
        }
    }

    fn esp(&self) -> Result<Esp<'_>, String> {
        Ok(Esp::at_directory(&self.mounter, &self.dir))
    }

    fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.dir.join("loader/entries"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn grub(&self, env: &[(&str, &str)]) {
        let vars: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        std::fs::write(self.dir.join(GRUBENV), render_grubenv(&vars).unwrap()).unwrap();
        let cfg = render_grub_cfg(&GrubParams {
            console_args: vec!["console=ttyS0".into()],
            extra_args: vec![],
        });
        std::fs::write(self.dir.join(GRUB_CFG), cfg).unwrap();
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn uefi() -> Loader {
    Loader::Uefi("liken-a.conf".into())
}

fn loaded(p: &FakePower) -> (String, String, String) {
    let (k, i, c) = p
        .loaded
        .lock()
        .unwrap()
        .clone()
        .expect("a kernel was loaded");
    (
        String::from_utf8(k).unwrap(),
        String::from_utf8(i).unwrap(),
        c,
    )
}

#[test]
fn initrds_are_padded_to_four_bytes() {
    assert_eq!(
        (0..9).map(pad_to_four).collect::<Vec<_>>(),
        [0, 3, 2, 1, 0, 3, 2, 1, 0]
    );
    assert_eq!(pad_to_four(u64::MAX), 1);
}

#[test]
fn kexec_loads_the_entry_systemd_boot_would_pick_and_counts_its_try() {
    let w = World::new("uefi");
    let power = FakePower::default();
    let done = prepare(&Wanted::Kexec, Some(&uefi()), || w.esp(), &power);
    let Prepared::Kexec(what) = done else {
        panic!("{done:?}")
    };
    assert!(
        what.contains("liken-b+3.conf renamed to liken-b+2-1.conf"),
        "{what}"
    );
    assert_eq!(
        loaded(&power),
        (
            "KERNEL-b".to_owned(),
            // Each initrd padded to four bytes with zeros, as the
            // bootloaders place them.
            "BOOT-b|\0LAYER\0\0\0".to_owned(),
            "liken.slot=b panic=10 console=ttyS0 liken.kexec=liken-b+3.conf".to_owned()
        )
    );
    assert_eq!(w.entries(), ["liken-a.conf", "liken-b+2-1.conf"]);
    assert_eq!(power.calls(), ["kexec-load"]);

    // The next kexec (the trial blessed nothing and a reboot was asked
    // anyway) counts on from the renamed entry, as systemd-boot would.
    let power = FakePower::default();
    assert!(matches!(
        prepare(&Wanted::Kexec, Some(&uefi()), || w.esp(), &power),
        Prepared::Kexec(_)
    ));
    assert!(loaded(&power).2.ends_with("liken.kexec=liken-b+2-1.conf"));
    assert_eq!(w.entries(), ["liken-a.conf", "liken-b+1-2.conf"]);
}

#[test]
fn a_refused_load_counts_nothing_and_says_why() {
    let w = World::new("refused");
    let power = FakePower {
        refuse_load: Some(nix::libc::EPERM),
        ..FakePower::default()
    };
    let done = prepare(&Wanted::Kexec, Some(&uefi()), || w.esp(), &power);
    let Prepared::Firmware(why) = done else {
        panic!("{done:?}")
    };
    assert!(why.contains("kexec_load_disabled"), "{why}");
    assert_eq!(
        w.entries(),
        ["liken-a.conf", "liken-b+3.conf"],
        "no try spent"
    );
}

#[test]
fn a_try_that_cannot_be_counted_is_not_jumped_into() {
    let w = World::new("uncounted");
    // The rename's target is taken by a directory, so the rename fails.
    std::fs::create_dir_all(w.dir.join("loader/entries/liken-b+2-1.conf")).unwrap();
    let power = FakePower::default();
    let done = prepare(&Wanted::Kexec, Some(&uefi()), || w.esp(), &power);
    let Prepared::Firmware(why) = done else {
        panic!("{done:?}")
    };
    assert!(why.contains("could not be counted"), "{why}");
    assert_eq!(power.calls(), ["kexec-load", "kexec-unload"]);
    assert!(w.entries().contains(&"liken-b+3.conf".to_owned()));
}

#[test]
fn grub_machines_spend_the_try_in_grubenv() {
    let w = World::new("grub");
    w.grub(&[("liken_slot", "b"), ("liken_b_tries", "3")]);
    let power = FakePower::default();
    let done = prepare(&Wanted::Kexec, Some(&Loader::Grub), || w.esp(), &power);
    let Prepared::Kexec(said) = &done else {
        panic!("{done:?}")
    };
    assert!(
        said.ends_with("try counted in grub/grubenv: liken_b_tries=2"),
        "{said}"
    );
    assert_eq!(
        loaded(&power),
        (
            "KERNEL-b".to_owned(),
            // Each initrd padded to four bytes with zeros, as the
            // bootloaders place them.
            "BOOT-b|\0LAYER\0\0\0".to_owned(),
            "liken.slot=b panic=10 console=ttyS0 liken.kexec=grub".to_owned()
        )
    );
    let env = parse_grubenv(&std::fs::read(w.dir.join(GRUBENV)).unwrap()).unwrap();
    assert_eq!(env["liken_b_tries"], "2");
    assert_eq!(env["liken_slot"], "b");
}

#[test]
fn firmware_when_asked_or_when_the_loader_is_unknown() {
    let w = World::new("firmware");
    let power = FakePower::default();
    let asked = Wanted::from_request(RebootVia::Firmware);
    assert!(matches!(
        prepare(&asked, Some(&uefi()), || w.esp(), &power),
        Prepared::Firmware(why) if why.contains("spec.reboot: firmware")
    ));
    assert!(matches!(
        prepare(&Wanted::Kexec, None, || w.esp(), &power),
        Prepared::Firmware(why) if why.contains("no bootloader try counter")
    ));
    // A missing kernel is a reason too, and nothing is counted.
    std::fs::remove_file(w.dir.join("liken/b/vmlinuz")).unwrap();
    assert!(matches!(
        prepare(&Wanted::Kexec, Some(&uefi()), || w.esp(), &power),
        Prepared::Firmware(why) if why.contains("liken/b/vmlinuz")
    ));
    assert!(power.calls().is_empty());
    assert_eq!(w.entries(), ["liken-a.conf", "liken-b+3.conf"]);
}

#[test]
fn the_note_tells_the_next_boot_why_the_firmware() {
    let w = World::new("note");
    let var = w.dir.join("var");
    std::fs::create_dir_all(&var).unwrap();
    write_note(&var, &Prepared::Firmware("kexec is disabled".into())).unwrap();
    let note = take_note(&var);
    assert_eq!(note.as_deref(), Some("kexec is disabled"));
    assert_eq!(take_note(&var), None, "read once");
    assert_eq!(
        decide_via(None, note),
        (RebootVia::Firmware, Some("kexec is disabled".into()))
    );
    write_note(&var, &Prepared::Firmware("x".into())).unwrap();
    write_note(&var, &Prepared::Kexec("loaded".into())).unwrap();
    assert_eq!(take_note(&var), None, "a kexec clears the note");
    assert_eq!(
        decide_via(Some("liken-b+3.conf"), Some("stale".into())),
        (RebootVia::Kexec, None)
    );
}

#[test]
fn a_unified_kernel_image_on_the_esp_reboots_through_the_firmware_counting_nothing() {
    let w = World::new("uki");
    std::fs::create_dir_all(w.dir.join("EFI/Linux")).unwrap();
    std::fs::write(w.dir.join("EFI/Linux/liken-b+3.efi"), "MZ signed").unwrap();
    let power = FakePower::default();
    let done = prepare(&Wanted::Kexec, Some(&uefi()), || w.esp(), &power);
    let Prepared::Firmware(why) = done else {
        panic!("{done:?}")
    };
    assert!(
        why.contains("EFI/Linux/liken-b+3.efi") && why.contains("firmware starts it"),
        "{why}"
    );
    assert!(power.calls().is_empty(), "{:?}", power.calls());
    assert_eq!(w.entries(), ["liken-a.conf", "liken-b+3.conf"]);
    assert!(w.dir.join("EFI/Linux/liken-b+3.efi").exists());
    // Another program's image there changes nothing.
    assert_eq!(
        decide_uki_refusal(&["other.efi".into(), "liken-a.conf".into()]),
        Ok(())
    );
}
