//! The fleet's own Secure Boot keys, enrolled by their real consumer:
//! systemd-boot 252 on OVMF's Secure Boot build, in setup mode.
//!
//! `liken keygen -secureboot` makes the keys; a release is bundled with
//! its systemd-boot and kernel signed by the fleet's db key (sbsign, as
//! the release's owner will at bundle time); `liken stick -secureboot`
//! writes the stick. One QEMU run boots it on a blank variable store (no
//! PK: setup mode) and resets in place:
//!
//! 1. systemd-boot reads `secure-boot-enroll force`, finds
//!    loader/keys/auto, says "Enrolling secure boot keys from directory:
//!    \loader\keys\auto" (its own line), writes db, KEK and PK, and
//!    resets the machine;
//! 2. the firmware, now in user mode, checks the signed systemd-boot
//!    against db and starts it; systemd-boot has the firmware check the
//!    kernel the same way; the kernel's EFI stub reads SecureBoot from
//!    the firmware ("EFI stub: UEFI Secure Boot is enabled.") and the
//!    kernel says "secureboot: Secure boot enabled";
//!    init's first milestones follow, and the test quits QEMU.
//!
//! Then the variable store itself, read with virt-fw-vars (PyPI's
//! virt-firmware, not liken): PK, KEK and db hold exactly the lists
//! keygen wrote, with its timestamp and the attributes of authenticated
//! variables. A second, firmware-only run on that store boots a copy of
//! the stick whose systemd-boot is Debian's unsigned build: the firmware
//! refuses it ("Access Denied"), so the enrolled db is what decides.
//!
//! systemd-boot 252 skips its 15 s countdown under a hypervisor, so the
//! enrolment costs no wait here: about 30 s for the whole test under TCG.
//!
//! The second test boots the signed unified kernel images `liken bundle
//! -secureboot-key -layer-key` makes, with the keys enrolled by
//! virt-fw-vars: first with the sealed layer changed on the ESP, which
//! init refuses; then slot A's image with the sealed layer under Secure
//! Boot through dm-verity, blessed; a slot B image
//! signed by another fleet refused by the firmware, and slot A after the
//! reset; a hand-written type #1 entry without the root hash, whose
//! slot init refuses to mount unverified; and a type #1 entry naming the
//! signed image with an attacker's initrd, which systemd-stub refuses to
//! start. About 75 s under TCG.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use qemu_tests::disk::Disk;
use qemu_tests::firmware::Ovmf;
use qemu_tests::{Launch, Vm, check, cli_layer, drives, images, liken, run, scratch};

/// OVMF (its Secure Boot build, with SMM, is slower than the plain one),
/// then systemd-boot, under TCG and with tests sharing the cores.
const BOOT: Duration = Duration::from_secs(300);
/// What follows a milestone already seen.
const NEXT: Duration = Duration::from_secs(120);
const VERSION: &str = "2026.12.01-001";
/// A newer release, bundled by another fleet.
const NEWER: &str = "2026.12.01-002";
/// The version a hand-written type #1 entry claims.
const HAND_WRITTEN: &str = "2026.12.01-003";

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// `input` signed with the fleet's db key into `output` (sbsign adds its
/// signature beside any the file has: Debian's kernel keeps Debian's).
fn sbsign(keys: &Path, input: &Path, output: &Path) {
    run(
        "sbsign",
        &[
            "--key",
            &s(&keys.join("db.key")),
            "--cert",
            &s(&keys.join("db.crt")),
            "--output",
            &s(output),
            &s(input),
        ],
    );
}

/// A release of the images' kernel and systemd-boot, each signed by the
/// fleet's db key, the real boot.cpio and GRUB images, and a small
/// stand-in system image (this test never installs it), bundled with
/// `liken bundle`.
fn signed_release(dir: &Path, keys: &Path) -> PathBuf {
    let images = images();
    let inputs = dir.join("inputs");
    std::fs::create_dir_all(&inputs).unwrap();
    sbsign(keys, &images.vmlinuz, &inputs.join("vmlinuz"));
    sbsign(
        keys,
        &qemu_tests::disk::systemd_boot(&images.dir),
        &inputs.join("systemd-boot.efi"),
    );
    std::fs::write(inputs.join("liken.sqfs"), vec![0x5a; 1 << 20]).unwrap();
    let channel = dir.join("channel");
    liken(&[
        "bundle",
        &s(&inputs.join("vmlinuz")),
        &s(&inputs.join("liken.sqfs")),
        &s(&images.boot_cpio),
        &s(&images.liken),
        &s(&inputs.join("systemd-boot.efi")),
        &s(&images.dir.join("grub-boot.img")),
        &s(&images.dir.join("grub-core.img")),
        &s(&images.dir.join("licenses.md")),
        &s(&channel),
        VERSION,
    ]);
    channel.join(VERSION)
}

/// What a signed fleet's tests start from: the fleet's Secure Boot keys
/// (`liken keygen -secureboot`), the release key that seals its layers
/// (`liken keygen`), and the images' systemd-boot signed by its db key.
struct SignedFleet {
    dir: PathBuf,
    keys: PathBuf,
    release_keys: PathBuf,
    sd_boot: PathBuf,
}

impl SignedFleet {
    fn new(dir: &Path) -> SignedFleet {
        let keys = dir.join("keys");
        liken(&["keygen", "-secureboot", &s(&keys)]);
        let release_keys = dir.join("release-keys");
        liken(&["keygen", &s(&release_keys)]);
        let inputs = dir.join("inputs");
        std::fs::create_dir_all(&inputs).unwrap();
        let sd_boot = inputs.join("systemd-boot.efi");
        sbsign(
            &keys,
            &qemu_tests::disk::systemd_boot(&images().dir),
            &sd_boot,
        );
        SignedFleet {
            dir: dir.to_owned(),
            keys,
            release_keys,
            sd_boot,
        }
    }

    /// The public half of the key that seals the fleet's layers, which
    /// the signed images name.
    fn layer_pub(&self) -> PathBuf {
        self.release_keys.join("release.pub")
    }

    /// `liken bundle -secureboot-key <db_keys> -layer-key` of the images'
    /// kernel and boot.cpio with `system`, into `channel`, each of
    /// `uki_args` as `-uki-arg`; the release directory and what bundle
    /// said.
    fn bundle(
        &self,
        db_keys: &Path,
        system: &Path,
        channel: &Path,
        version: &str,
        uki_args: &[&str],
    ) -> (PathBuf, String) {
        let images = images();
        let mut args = vec![
            "bundle".to_owned(),
            "-secureboot-key".to_owned(),
            s(db_keys),
            "-layer-key".to_owned(),
            s(&self.layer_pub()),
        ];
        for a in uki_args {
            args.extend(["-uki-arg".to_owned(), (*a).to_owned()]);
        }
        args.extend(
            [
                &images.vmlinuz,
                system,
                &images.boot_cpio,
                &images.liken,
                &self.sd_boot,
                &images.dir.join("grub-boot.img"),
                &images.dir.join("grub-core.img"),
                &images.dir.join("licenses.md"),
                channel,
            ]
            .map(s),
        );
        args.push(version.to_owned());
        let said = liken(&args.iter().map(String::as_str).collect::<Vec<_>>());
        (channel.join(version), said)
    }

    /// A one-leader deployment's layer, sealed by the fleet's release key
    /// (`liken layer -seal-key`); the layer and what `liken layer` said.
    fn sealed_layer(&self) -> (PathBuf, String) {
        let (deployment, _) = cli_layer(&self.dir, "test", "node-1");
        let layer = self.dir.join("sealed.cpio");
        let said = liken(&[
            "layer",
            "-unsigned",
            "-seal-key",
            &s(&self.release_keys.join("release.key")),
            &s(&deployment),
            &s(&deployment.join("identity")),
            &s(&layer),
        ]);
        (layer, said)
    }

    /// A disk whose ESP holds the signed systemd-boot, loader.conf, `uki`
    /// as the type #2 entry `EFI/Linux/<entry>` and `credential` as the
    /// layer's credential, with `system` (a release's liken.sqfs, its
    /// verity tree appended) in slot A.
    fn disk(&self, entry: &str, uki: &Path, credential: &Path, system: &Path) -> Disk {
        let loader_conf = self.dir.join("loader.conf");
        std::fs::write(&loader_conf, liken_api::bootloader::render_loader_conf()).unwrap();
        let esp = self.dir.join("esp.img");
        let entry = format!("EFI/Linux/{entry}");
        qemu_tests::disk::esp_image(
            &esp,
            &[
                ("EFI/BOOT/BOOTX64.EFI", &self.sd_boot),
                ("loader/loader.conf", &loader_conf),
                (&entry, uki),
                ("loader/credentials/liken-layer.cred", credential),
            ],
        );
        let d = Disk::partitioned(&self.dir.join("disk.img"));
        d.write_into("LIKEN-ESP", &esp);
        d.write_into("LIKEN-A", system);
        d
    }
}

/// A variable of the store as virt-fw-vars prints it in JSON.
#[derive(Debug)]
struct Var {
    attr: u64,
    data: Vec<u8>,
    time: Option<Vec<u8>>,
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// virt-fw-vars: where scripts/setup.sh installs it (a venv of PyPI's
/// virt-firmware in the cache, at the version it pins), else on PATH.
fn virt_fw_vars() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let cached = home.join(".cache/liken/tools/virt-firmware-26.10/bin/virt-fw-vars");
    if cached.exists() {
        cached
    } else {
        PathBuf::from("virt-fw-vars")
    }
}

/// The variable store, read by virt-fw-vars, by name.
fn read_store(vars: &Path, json: &Path) -> Vec<(String, Var)> {
    check(
        std::process::Command::new(virt_fw_vars())
            .arg("-i")
            .arg(vars)
            .arg("--output-json")
            .arg(json),
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    doc["variables"]
        .as_array()
        .unwrap_or_else(|| panic!("virt-fw-vars wrote no variables: {doc}"))
        .iter()
        .map(|v| {
            let text = |k: &str| v[k].as_str().map(str::to_owned);
            (
                text("name").unwrap_or_else(|| panic!("no name in {v}")),
                Var {
                    attr: v["attr"]
                        .as_u64()
                        .unwrap_or_else(|| panic!("no attr in {v}")),
                    data: unhex(&text("data").unwrap_or_default()),
                    time: text("time").map(|t| unhex(&t)),
                },
            )
        })
        .collect()
}

#[test]
fn systemd_boot_enrols_the_fleets_keys_and_the_firmware_enforces_them() {
    let t0 = Instant::now();
    let dir = scratch("secureboot");
    let keys = dir.join("keys");
    let made = liken(&["keygen", "-secureboot", &s(&keys)]);
    assert!(made.contains("PK.key (private, 0600)"), "{made}");
    let release = signed_release(&dir, &keys);
    let (deployment, _) = cli_layer(&dir, "test", "node-1");
    let stick = dir.join("stick.img");
    let said = liken(&[
        "stick",
        "-output",
        &s(&stick),
        "-console",
        "ttyS0",
        "-unsigned",
        "-secureboot",
        &s(&keys),
        &s(&release),
        &s(&deployment),
    ]);
    assert!(
        said.contains("Secure Boot: loader/keys/auto holds the fleet's PK, KEK and db"),
        "{said}"
    );
    // The release is signed for this fleet, so stick has nothing to warn of.
    assert!(!said.contains("no signature"), "{said}");
    println!(
        "keys, release and stick made in {:.0} s",
        t0.elapsed().as_secs_f64()
    );

    // Boot 1 (setup mode): systemd-boot enrols and resets; boot 2 (the
    // same QEMU, after the reset): the firmware enforces the keys.
    let ovmf = Ovmf::secure_boot_setup_mode(&dir);
    let mut args: Vec<OsString> = ovmf.secure_args();
    args.extend(drives::usb_stick(&stick));
    let mut vm = Vm::start(
        "secureboot-enrol",
        &args,
        &Launch {
            reboot_in_place: true,
            ..Launch::default()
        },
    );
    let enrolling = vm.expect("Enrolling secure boot keys from directory: ", BOOT);
    assert!(enrolling.contains("\\loader\\keys\\auto"), "{enrolling}");
    let enrolled_at = vm.wall();
    // The reset: the firmware starts the stick's systemd-boot again, and
    // this time it boots the install entry's (signed) kernel.
    vm.expect("BdsDxe: starting Boot", BOOT);
    vm.expect("EFI stub: UEFI Secure Boot is enabled.", BOOT);
    let sb = vm.expect("secureboot: ", BOOT);
    assert!(sb.ends_with("secureboot: Secure boot enabled"), "{sb}");
    vm.expect("liken: cmdline: ok (machine node-1, install mode)", BOOT);
    println!(
        "enrolled at {enrolled_at:.0} s, the signed kernel booted with Secure Boot on at {:.0} s",
        vm.wall()
    );
    vm.monitor("quit");
    vm.wait_exit(NEXT);
    drop(vm);

    // The variable store, read by a program that is not liken.
    let store = read_store(&ovmf.vars, &dir.join("vars.json"));
    let auth_time =
        liken_cli::secureboot::efi::parse_auth(&std::fs::read(keys.join("PK.auth")).unwrap())
            .unwrap()
            .time
            .bytes();
    for name in ["PK", "KEK", "db"] {
        let var = store
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no {name} in the variable store"));
        assert_eq!(
            var.data,
            std::fs::read(keys.join(format!("{name}.esl"))).unwrap(),
            "{name} holds the list keygen wrote: the fleet's certificate, owned by its GUID"
        );
        // NV | BS | RT | TIME_BASED_AUTHENTICATED_WRITE_ACCESS.
        assert_eq!(var.attr, 0x27, "{name}");
        assert_eq!(var.time.as_deref(), Some(&auth_time[..]), "{name}");
    }
    if let Some((_, enable)) = store.iter().find(|(n, _)| n == "SecureBootEnable") {
        assert_eq!(enable.data, [1], "SecureBootEnable");
    }

    // Boot 3, firmware only: the stick with Debian's unsigned
    // systemd-boot, on the enrolled store.
    let unsigned = dir.join("unsigned-stick.img");
    std::fs::copy(&stick, &unsigned).unwrap();
    let copy = Disk::read(&unsigned);
    run(
        "mcopy",
        &[
            "-o",
            "-i",
            &copy.mtools_image("LIKEN-STICK"),
            &s(&qemu_tests::disk::systemd_boot(&images().dir)),
            "::EFI/BOOT/BOOTX64.EFI",
        ],
    );
    let mut args = ovmf.secure_args();
    args.extend(drives::usb_stick(&unsigned));
    let mut vm = Vm::launch("secureboot-unsigned", &args);
    let refused = vm.expect("Access Denied", BOOT);
    assert!(refused.contains("failed to load Boot"), "{refused}");
    println!("the unsigned systemd-boot refused at {:.0} s", vm.wall());
    vm.monitor("quit");
    vm.wait_exit(NEXT);
    assert!(
        !vm.seen.iter().any(|l| l.contains("Linux version")),
        "no kernel ran"
    );
    println!("whole test: {:.0} s", t0.elapsed().as_secs_f64());
}

/// Keys enrolled into a copy of the Secure Boot build's blank store by
/// virt-fw-vars (not liken, not systemd-boot, whose enrolment the test
/// above covers): the fleet's PK, KEK and db certificates under the
/// fleet's owner GUID, and Secure Boot switched on.
fn enrolled(dir: &Path, keys: &Path) -> Ovmf {
    let ovmf = Ovmf::secure_boot_setup_mode(dir);
    let guid = std::fs::read_to_string(keys.join("GUID")).unwrap();
    let guid = guid.trim();
    let out = dir.join("OVMF_VARS_4M.enrolled.fd");
    check(
        std::process::Command::new(virt_fw_vars())
            .arg("-i")
            .arg(&ovmf.vars)
            .args(["--set-pk", guid])
            .arg(keys.join("PK.crt"))
            .args(["--add-kek", guid])
            .arg(keys.join("KEK.crt"))
            .args(["--add-db", guid])
            .arg(keys.join("db.crt"))
            .arg("--secure-boot")
            .arg("-o")
            .arg(&out),
    );
    std::fs::rename(&out, &ovmf.vars).unwrap();
    ovmf
}

/// Issue 24's signed boot image: `liken bundle -secureboot-key` makes
/// slot A's unified kernel image (the stand-in system image's root hash
/// on its command line); the disk holds it as systemd-boot's type #2
/// entry `EFI/Linux/liken-a+3.efi`, the layer (sealed by the release
/// key the image names) as systemd-boot's credential, and the db-signed
/// systemd-boot. The attack comes first: the credential rewritten with
/// one line added to the Machine is refused by init, which chooses no
/// Machine from it. Then, with the sealed layer, on OVMF's Secure Boot
/// build with the fleet's keys enrolled, the firmware checks systemd-boot
/// and the image, systemd-boot counts the image's try in its file name,
/// the stub hands the layer to init, init checks its seal, says Secure
/// Boot is on, mounts
/// the slot through dm-verity with the image's root hash, and blesses the
/// image by renaming it; the disk is read back afterwards with mtools.
#[test]
fn the_signed_image_of_slot_a_boots_under_secure_boot_through_dm_verity() {
    let t0 = Instant::now();
    let dir = scratch("secureboot-uki");
    let fleet = SignedFleet::new(&dir);
    let images = images();
    let (release, said) = fleet.bundle(
        &fleet.keys,
        &images.system_standin,
        &dir.join("channel"),
        VERSION,
        &[],
    );
    assert!(said.contains("uki-a liken-a.efi"), "{said}");
    let verity = qemu_tests::disk::release_verity(&release);

    let (layer, packed) = fleet.sealed_layer();
    let key_id = std::fs::read_to_string(fleet.layer_pub())
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("id: ").map(str::to_owned))
        .expect("release.pub names its id");
    assert!(
        packed.contains(&format!("sealed by key {key_id}")),
        "{packed}"
    );
    // The attacker's layer: the sealed one with the Machine changed (a
    // label added), as someone who can write the ESP would.
    let tampered = dir.join("tampered.cpio");
    let mut entries = liken_disk::cpio::read(&std::fs::read(&layer).unwrap()).unwrap();
    let machine = entries
        .iter_mut()
        .find(|e| e.path == "etc/liken/machines/node-1.yaml")
        .unwrap();
    let liken_disk::cpio::Body::File(text) = &mut machine.body else {
        panic!("the Machine is a file")
    };
    text.extend_from_slice(b"# changed on the ESP\n");
    let mut archive = liken_disk::cpio::Archive::new();
    for e in entries {
        archive.add(e).unwrap();
    }
    std::fs::write(&tampered, archive.finish()).unwrap();
    let d = fleet.disk(
        "liken-a+3.efi",
        &release.join("liken-a.efi"),
        &tampered,
        &release.join("liken.sqfs"),
    );
    let ovmf = enrolled(&dir, &fleet.keys);
    println!(
        "keys, release, disk and variable store made in {:.0} s",
        t0.elapsed().as_secs_f64()
    );

    let mut args = ovmf.secure_args();
    args.extend(drives::virtio("disk", &d.path, None, false));
    // The changed layer is refused before anything of it is trusted: no
    // Machine is chosen from it.
    let mut vm = Vm::launch("secureboot-uki-tampered", &args);
    vm.expect("liken: cmdline: ok (slot A)", BOOT);
    let refused = vm.expect("liken: layer: ", NEXT);
    assert!(
        refused.contains(
            "the layer is refused: machines/node-1.yaml is not the file the layer's \
             seal lists"
        ),
        "{refused}"
    );
    let machine = vm.expect("liken: machine: ", NEXT);
    assert!(!machine.contains("node-1"), "{machine}");
    println!("the changed layer refused at {:.0} s", vm.wall());
    vm.monitor("quit");
    vm.wait_exit(NEXT);
    drop(vm);
    d.esp_put("loader/credentials/liken-layer.cred", &layer);

    let mut vm = Vm::launch("secureboot-uki", &args);
    let sb = vm.expect("secureboot: ", BOOT);
    assert!(sb.ends_with("secureboot: Secure boot enabled"), "{sb}");
    vm.expect("liken: cmdline: ok (slot A)", NEXT);
    let layer_line = vm.expect("liken: layer: ", NEXT);
    assert!(
        layer_line.contains(&format!(
            "from systemd-boot's credential /.extra/global_credentials/liken-layer.cred, sealed \
             by key {key_id}"
        )),
        "{layer_line}"
    );
    let root = vm.expect("liken: root: ", NEXT);
    assert!(
        root.contains(&format!(
            "through dm-verity (root hash {}\u{2026})",
            verity.root_hash().short()
        )),
        "{root}"
    );
    let state = vm.expect("liken: secureboot: ", NEXT);
    assert_eq!(state, "liken: secureboot: ok (enabled)");
    let assess = vm.expect("liken: assess: ", NEXT);
    assert!(
        assess.contains("slot A on trial (systemd-boot entry liken-a+2-1.efi)"),
        "{assess}"
    );
    let bless = vm.expect("liken: bless: ", NEXT);
    assert!(
        bless.starts_with(
            "liken: bless: ok (EFI/Linux/liken-a+1-2.efi renamed to liken-a.efi: node node-1 is \
             Ready"
        ),
        "{bless}"
    );
    println!("blessed under Secure Boot at {:.0} s", vm.wall());
    vm.monitor("quit");
    vm.wait_exit(NEXT);
    drop(vm);
    // systemd-boot spent a try on each boot (+3 to +2-1 to +1-2); the
    // refused layer's boot blessed nothing, the sealed one's removed the
    // counter.
    assert_eq!(d.esp_list("EFI/Linux"), ["liken-a.efi"]);

    // Slot B, newer and on its last try, holds an image that another
    // fleet's db key signed (a release bundled the same way, by the
    // wrong owner): systemd-boot picks it first and spends the try, the
    // firmware refuses to load it, and the next boot is slot A's.
    let other = dir.join("other-keys");
    liken(&["keygen", "-secureboot", &s(&other)]);
    let (foreign, _) = fleet.bundle(
        &other,
        &images.system_standin,
        &dir.join("other-channel"),
        NEWER,
        &[],
    );
    d.write_into("LIKEN-B", &foreign.join("liken.sqfs"));
    d.esp_put("EFI/Linux/liken-b+1-2.efi", &foreign.join("liken-b.efi"));
    let mut vm = Vm::start(
        "secureboot-uki-foreign",
        &args,
        &Launch {
            reboot_in_place: true,
            ..Launch::default()
        },
    );
    let refused = vm.expect("Access Denied", BOOT);
    assert!(refused.contains("liken-b"), "{refused}");
    println!("slot B's foreign image refused at {:.0} s", vm.wall());
    // systemd-boot 252 hands the error back to the firmware, which has no
    // other boot option here and waits: the reset a watchdog or a person
    // gives a machine stuck in its firmware.
    vm.monitor("system_reset");
    vm.expect("liken: cmdline: ok (slot A)", BOOT);
    let assess = vm.expect("liken: assess: ", NEXT);
    assert!(
        assess.contains("slot A is blessed (systemd-boot entry liken-a.efi)")
            && assess.contains("slot B's entry has spent its tries: this boot fell back from it"),
        "{assess}"
    );
    println!("fell back to slot A at {:.0} s", vm.wall());
    vm.monitor("quit");
    vm.wait_exit(NEXT);
    assert!(
        !vm.seen
            .iter()
            .any(|l| l.contains("Command line: liken.slot=b")),
        "no kernel of slot B ran"
    );
    drop(vm);
    assert_eq!(
        d.esp_list("EFI/Linux"),
        ["liken-a.efi", "liken-b+0-3.efi"],
        "systemd-boot spent B's last try on the refused image"
    );

    // A type #1 entry written onto the ESP, newer and blessed, boots
    // slot A with a kernel the fleet's db key signed on its own and a
    // command line without the root hash: the firmware starts it, and
    // init refuses to mount the slot unverified under Secure Boot.
    let signed_kernel = dir.join("inputs/vmlinuz");
    sbsign(&fleet.keys, &images.vmlinuz, &signed_kernel);
    let entry = dir.join("liken-a.conf");
    std::fs::write(
        &entry,
        qemu_tests::disk::entry(liken_api::Slot::A, HAND_WRITTEN, false, &[], None),
    )
    .unwrap();
    // loader/entries is there already after the boots above; mmd
    // refuses a directory that exists, and mcopy below fails loudly on
    // one that is missing.
    for dir in ["liken", "liken/a", "loader/entries"] {
        let _ = std::process::Command::new("mmd")
            .args(["-i", &d.mtools_image("LIKEN-ESP"), &format!("::{dir}")])
            .output();
    }
    d.esp_put("liken/a/vmlinuz", &signed_kernel);
    d.esp_put("liken/a/boot.cpio", &images.boot_cpio);
    d.esp_put("liken/layer.cpio", &layer);
    d.esp_put("loader/entries/liken-a.conf", &entry);
    let mut vm = Vm::launch("secureboot-uki-unverified", &args);
    // systemd-boot puts the entry's initrds first on a type #1 line.
    let line = vm.expect("Command line: ", BOOT);
    assert!(
        line.ends_with(" liken.slot=a panic=10 console=ttyS0") && !line.contains("liken.verity"),
        "{line}"
    );
    let root = vm.expect("liken: root: ", BOOT);
    assert!(
        root.starts_with(
            "liken: root: Secure Boot is enabled, but this boot's command line gives slot A no \
             liken.verity= root hash"
        ) && root.contains("slot A is not mounted unverified"),
        "{root}"
    );
    println!("the unverified root refused at {:.0} s", vm.wall());
    vm.monitor("quit");
    vm.wait_exit(NEXT);
    drop(vm);

    // The attacker's other way in: a type #1 entry, newest of all, that
    // names slot A's signed image with an initrd of its own (an unsealed
    // layer; it could as well hold another /init). The firmware checks
    // the image and systemd-boot hands it the initrd, but systemd-stub
    // 252 registers its own initrds and refuses to start when the loader
    // already registered one: no kernel runs, so nothing of the
    // attacker's initrd reaches the boot.
    let (_, unsealed) = cli_layer(&dir.join("attacker"), "evil", "node-1");
    d.esp_put("liken/evil.cpio", &unsealed);
    let evil = dir.join("evil.conf");
    std::fs::write(
        &evil,
        "title not liken\nsort-key liken\nversion 2026.12.01-009\n\
         linux /EFI/Linux/liken-a.efi\ninitrd /liken/evil.cpio\n",
    )
    .unwrap();
    d.esp_put("loader/entries/liken-evil.conf", &evil);
    let mut vm = Vm::launch("secureboot-uki-extra-initrd", &args);
    vm.expect("Error registering initrd: Already started", BOOT);
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        !vm.seen
            .iter()
            .any(|l| l.contains("Command line:") || l.contains("liken: ")),
        "a kernel ran with the attacker's initrd"
    );
    println!(
        "the signed image with another initrd refused by the stub at {:.0} s",
        vm.wall()
    );
    vm.monitor("quit");
    vm.wait_exit(NEXT);
    println!("whole test: {:.0} s", t0.elapsed().as_secs_f64());
}

/// The release a signed machine upgrades to, in the upgrade test.
const UPGRADE: &str = "2026.12.01-004";

/// A signed machine's upgrade, as the fleet does it: slot A boots its
/// signed image under Secure Boot, init writes a newer signed release
/// into slot B (its system image and its own signed image as
/// `EFI/Linux/liken-b+3.efi`, release.yaml's digests checked), and the
/// reboot goes through the firmware, which checks B's image, whose
/// command line opens B through dm-verity with the new root hash; B's
/// boot checks the sealed layer again and blesses B's image.
#[test]
fn a_signed_release_written_into_slot_b_boots_under_secure_boot_and_is_blessed() {
    let t0 = Instant::now();
    let dir = scratch("secureboot-upgrade");
    let fleet = SignedFleet::new(&dir);
    let images = images();
    // The release's own command line runs the stand-in's `write-release`
    // from the second disk, as the machine operator writes a downloaded
    // release.
    let bundle = |system: &Path, version: &str| {
        fleet
            .bundle(
                &fleet.keys,
                system,
                &dir.join(format!("channel-{version}")),
                version,
                &[
                    "panic=10",
                    "console=ttyS0",
                    "liken.standin=write-release:/dev/vdb",
                ],
            )
            .0
    };
    let old = bundle(&images.system_standin, VERSION);
    let new = bundle(&images.dir.join("system-standin-2.squashfs"), UPGRADE);
    let old_verity = qemu_tests::disk::release_verity(&old);
    let new_verity = qemu_tests::disk::release_verity(&new);

    let (layer, _) = fleet.sealed_layer();
    // Slot A installed and blessed, as install mode and a first boot
    // leave a signed machine.
    let d = fleet.disk(
        "liken-a.efi",
        &old.join("liken-a.efi"),
        &layer,
        &old.join("liken.sqfs"),
    );
    let rel = dir.join("release.img");
    qemu_tests::disk::release_disk(&rel, &new);
    let ovmf = enrolled(&dir, &fleet.keys);
    println!(
        "keys, two signed releases, disk and variable store made in {:.0} s",
        t0.elapsed().as_secs_f64()
    );
    let mut args = ovmf.secure_args();
    args.extend(drives::virtio("disk", &d.path, Some(0), false));
    args.extend(drives::virtio("release", &rel, None, true));

    let through = |v: &liken_api::verity::VerityArg| {
        format!(
            "through dm-verity (root hash {}\u{2026})",
            v.root_hash().short()
        )
    };
    let mut vm = Vm::launch("secureboot-upgrade-a", &args);
    vm.expect("liken: cmdline: ok (slot A)", BOOT);
    let layer_line = vm.expect("liken: layer: ", NEXT);
    assert!(layer_line.contains("sealed by key"), "{layer_line}");
    let root = vm.expect("liken: root: ", NEXT);
    assert!(root.contains(&through(&old_verity)), "{root}");
    let ok = vm.expect_unordered("liken: write-release: ok", NEXT);
    assert!(
        ok.contains(&format!("release {UPGRADE} in slot B, entry liken-b+3.efi")),
        "{ok}"
    );
    vm.expect_unordered("liken-standin-k3s: asking for reboot", NEXT);
    let via = vm.expect("liken: reboot-via: ", NEXT);
    assert!(via.contains("firmware"), "{via}");
    println!(
        "slot B written, rebooting through the firmware at {:.0} s",
        vm.wall()
    );
    vm.wait_exit(NEXT);
    drop(vm);
    assert_eq!(d.esp_list("EFI/Linux"), ["liken-a.efi", "liken-b+3.efi"]);
    // The image init wrote is the release's, byte for byte.
    assert_eq!(
        d.esp_file("EFI/Linux/liken-b+3.efi"),
        std::fs::read(new.join("liken-b.efi")).unwrap()
    );

    let mut vm = Vm::launch("secureboot-upgrade-b", &args);
    vm.expect("liken: cmdline: ok (slot B)", BOOT);
    let layer_line = vm.expect("liken: layer: ", NEXT);
    assert!(layer_line.contains("sealed by key"), "{layer_line}");
    let root = vm.expect("liken: root: ", NEXT);
    assert!(root.contains(&through(&new_verity)), "{root}");
    assert_eq!(
        vm.expect("liken: secureboot: ", NEXT),
        "liken: secureboot: ok (enabled)"
    );
    let bless = vm.expect("liken: bless: ", NEXT);
    assert!(
        bless.starts_with("liken: bless: ok (EFI/Linux/liken-b+2-1.efi renamed to liken-b.efi"),
        "{bless}"
    );
    println!("slot B blessed under Secure Boot at {:.0} s", vm.wall());
    vm.monitor("quit");
    vm.wait_exit(NEXT);
    drop(vm);
    assert_eq!(d.esp_list("EFI/Linux"), ["liken-a.efi", "liken-b.efi"]);
    println!("whole test: {:.0} s", t0.elapsed().as_secs_f64());
}
