//! `liken stick` end to end.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};

use liken_disk::{gpt, grub};

use crate::support::{
    TempDir, assert_warned_once, deployment, layer, liken, ok, release, tool, tree,
};

#[test]
fn a_stick_passes_the_tools_and_holds_every_file() {
    let tmp = TempDir::new("media-stick");
    let rel = release(tmp.path(), true);
    let dep = deployment(tmp.path());
    let img = tmp.path().join("stick.img");
    let imgs = img.to_str().unwrap();
    let args = [
        "stick",
        "-output",
        imgs,
        "-console",
        "ttyS0,115200",
        "-console",
        "tty0",
        "-kernel-arg",
        "liken.bless-after=20",
        rel.to_str().unwrap(),
        dep.to_str().unwrap(),
    ];
    let (success, out, err) = liken(&args);
    assert!(success, "{err}");
    assert!(out.contains("install entries for node-1, node-2"), "{out}");
    assert_warned_once(&out, &err);
    assert!(
        err.contains("wipe the stick once the machines are installed"),
        "{err}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&img).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the image holds private keys");

    // The partition table.
    let mut c = tool("sgdisk");
    c.arg("-v").arg(&img);
    let v = String::from_utf8(ok(c).stdout).unwrap();
    assert!(v.contains("No problems found"), "{v}");
    let mut c = tool("sgdisk");
    c.arg("-p").arg(&img);
    let p = String::from_utf8(ok(c).stdout).unwrap();
    assert!(
        p.lines()
            .any(|l| l.contains("EF00") && l.contains("LIKEN-STICK")),
        "{p}"
    );
    assert!(
        p.lines()
            .any(|l| l.contains("EF02") && l.contains("LIKEN-BIOS")),
        "{p}"
    );
    let mut f = File::open(&img).unwrap();
    let layout = gpt::read(&mut f).unwrap();
    let esp = layout.by_name("LIKEN-STICK").unwrap().clone();
    let bios = layout.by_name("LIKEN-BIOS").unwrap().clone();
    assert_eq!(layout.partitions[0].name, "LIKEN-STICK", "the ESP is gpt1");

    // GRUB: boot.img in the MBR pointing at core.img in LIKEN-BIOS.
    let core = std::fs::read(rel.join("grub-core.img")).unwrap();
    let fields = grub::read_fields(&mut f).unwrap();
    assert_eq!(fields.kernel_sector, bios.first_lba);
    assert_eq!(fields.blocklist_start, bios.first_lba + 1);
    assert_eq!(
        u64::from(fields.blocklist_len),
        (core.len() as u64).div_ceil(512) - 1
    );
    let boot_img = std::fs::read(rel.join("grub-boot.img")).unwrap();
    let mut mbr = [0u8; 512];
    f.read_exact(&mut mbr).unwrap_or(());
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_exact(&mut mbr).unwrap();
    assert_eq!(&mbr[0x68..0x1B8], &boot_img[0x68..0x1B8]);
    let mut on_disk = vec![0u8; core.len()];
    f.seek(SeekFrom::Start(bios.offset())).unwrap();
    f.read_exact(&mut on_disk).unwrap();
    assert_eq!(&on_disk[512..], &core[512..]);

    // The FAT partition, alone, through fsck.
    let alone = tmp.path().join("esp.img");
    let mut out = File::create(&alone).unwrap();
    f.seek(SeekFrom::Start(esp.offset())).unwrap();
    std::io::copy(&mut (&f).take(esp.size()), &mut out).unwrap();
    out.flush().unwrap();
    let mut c = tool("fsck.vfat");
    c.arg("-n").arg(&alone);
    ok(c);
    let at = format!("{imgs}@@{}", esp.offset());
    let mut c = tool("mlabel");
    c.args(["-s", "-i", &at, "::"]);
    let label = String::from_utf8(ok(c).stdout).unwrap();
    assert!(label.contains("LIKEN-STICK"), "{label}");

    // Every file, listed and read back.
    let mut want: Vec<(String, Vec<u8>)> = Vec::new();
    let read = |n: &str| std::fs::read(rel.join(n)).unwrap();
    want.push(("EFI/BOOT/BOOTX64.EFI".into(), read("systemd-boot.efi")));
    want.push(("liken/vmlinuz".into(), read("vmlinuz")));
    want.push(("liken/boot.cpio".into(), read("boot.cpio")));
    want.push(("liken/microcode.cpio".into(), read("microcode.cpio")));
    want.push(("liken/layer.cpio".into(), layer(tmp.path(), &dep)));
    for (rel_path, b) in tree(&rel) {
        want.push((format!("liken/release/{rel_path}"), b));
    }
    let mtype = |path: &str| -> Vec<u8> {
        let mut c = tool("mtype");
        c.args(["-i", &at, &format!("::/{path}")]);
        ok(c).stdout
    };
    let mut c = tool("mdir");
    c.args(["-/", "-b", "-i", &at, "::/"]);
    let listing = String::from_utf8(ok(c).stdout).unwrap();
    let mut listed: Vec<String> = listing
        .lines()
        .filter(|l| !l.ends_with('/'))
        .map(|l| l.trim_start_matches("::/").to_owned())
        .collect();
    listed.sort();
    let mut names: Vec<String> = want.iter().map(|(p, _)| p.clone()).collect();
    for extra in [
        "grub/grub.cfg",
        "loader/entries/install-node-1.conf",
        "loader/entries/install-node-2.conf",
        "loader/loader.conf",
    ] {
        names.push(extra.to_owned());
    }
    names.sort();
    assert_eq!(listed, names);
    for (path, b) in &want {
        assert!(mtype(path) == *b, "{path} reads back as the release's file");
    }

    // The menus.
    let entry = String::from_utf8(mtype("loader/entries/install-node-2.conf")).unwrap();
    assert_eq!(
        entry,
        "title Install liken 2026.12.02-001 on node-2\n\
         sort-key liken-install\n\
         version 2026.12.02-001\n\
         linux /liken/vmlinuz\n\
         initrd /liken/microcode.cpio\n\
         initrd /liken/boot.cpio\n\
         initrd /liken/layer.cpio\n\
         options liken.install=1 liken.machine=node-2 console=ttyS0,115200 console=tty0 liken.bless-after=20\n"
    );
    let loader = String::from_utf8(mtype("loader/loader.conf")).unwrap();
    assert!(loader.starts_with("timeout menu-force\n"), "{loader}");
    let cfg = mtype("grub/grub.cfg");
    let cfg_path = tmp.path().join("grub.cfg");
    std::fs::write(&cfg_path, &cfg).unwrap();
    let mut c = tool("grub-script-check");
    c.arg(&cfg_path);
    ok(c);
    let cfg = String::from_utf8(cfg).unwrap();
    for m in ["node-1", "node-2"] {
        assert!(
            cfg.contains(&format!(
                "  linux /liken/vmlinuz liken.install=1 liken.machine={m} console=ttyS0,115200 console=tty0 liken.bless-after=20\n  initrd /liken/microcode.cpio /liken/boot.cpio /liken/layer.cpio\n"
            )),
            "{cfg}"
        );
    }

    // An existing image needs -force; the same inputs give the same image.
    let before = std::fs::read(&img).unwrap();
    let (success, _, err) = liken(&args);
    assert!(!success && err.contains("pass -force"), "{err}");
    let mut forced = args.to_vec();
    forced.insert(1, "-force");
    let (success, _, err) = liken(&forced);
    assert!(success, "{err}");
    assert!(
        std::fs::read(&img).unwrap() == before,
        "the image is reproducible"
    );
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "no temporary files are left");
}

#[test]
fn a_tampered_release_is_refused_before_any_output_exists() {
    let tmp = TempDir::new("media-stick-tampered");
    let rel = release(tmp.path(), false);
    let dep = deployment(tmp.path());
    let out_dir = tmp.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let img = out_dir.join("stick.img");
    let run = || {
        liken(&[
            "stick",
            "-output",
            img.to_str().unwrap(),
            rel.to_str().unwrap(),
            dep.to_str().unwrap(),
        ])
    };

    // One byte changed, same size.
    let sqfs = rel.join("liken.sqfs");
    let mut b = std::fs::read(&sqfs).unwrap();
    b[1000] ^= 0xFF;
    std::fs::write(&sqfs, &b).unwrap();
    let (success, _, err) = run();
    assert!(!success);
    assert!(
        err.contains("liken.sqfs has sha256") && err.contains("fetch the release again"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&out_dir).unwrap().count(),
        0,
        "nothing is written"
    );

    // A byte missing.
    b[1000] ^= 0xFF;
    b.pop();
    std::fs::write(&sqfs, &b).unwrap();
    let (success, _, err) = run();
    assert!(
        !success && err.contains("bytes but release.yaml says"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&out_dir).unwrap().count(), 0);

    // A console argument that would break the menu.
    let (success, _, err) = liken(&[
        "stick",
        "-output",
        img.to_str().unwrap(),
        "-console",
        "ttyS0 init=/bin/sh",
        rel.to_str().unwrap(),
        dep.to_str().unwrap(),
    ]);
    assert!(!success && err.contains("-console"), "{err}");
    let (success, _, err) = liken(&["stick", rel.to_str().unwrap(), dep.to_str().unwrap()]);
    assert!(!success && err.contains("usage: liken stick"), "{err}");
    assert_eq!(std::fs::read_dir(&out_dir).unwrap().count(), 0);
}

/// A follower's stick: its menu lists the followers only, and no file
/// on its FAT partition, read back with mtools, holds a private key or
/// the server token (the layer among them); a leader's still does.
#[test]
fn a_followers_stick_holds_no_private_key() {
    let tmp = TempDir::new("media-stick-roles");
    let rel = release(tmp.path(), false);
    let dep = deployment(tmp.path());
    let files_of = |role: &str| -> (String, String, Vec<(String, Vec<u8>)>) {
        let img = tmp.path().join(format!("{role}.img"));
        let imgs = img.to_str().unwrap();
        let (success, out, err) = liken(&[
            "stick",
            "-role",
            role,
            "-output",
            imgs,
            rel.to_str().unwrap(),
            dep.to_str().unwrap(),
        ]);
        assert!(success, "{err}");
        let mut f = File::open(&img).unwrap();
        let esp = gpt::read(&mut f)
            .unwrap()
            .by_name("LIKEN-STICK")
            .unwrap()
            .offset();
        let at = format!("{imgs}@@{esp}");
        let mut c = tool("mdir");
        c.args(["-/", "-b", "-i", &at, "::/"]);
        let listing = String::from_utf8(ok(c).stdout).unwrap();
        let files = listing
            .lines()
            .filter(|l| !l.ends_with('/'))
            .map(|l| {
                let path = l.trim_start_matches("::/").to_owned();
                let mut c = tool("mtype");
                c.args(["-i", &at, &format!("::/{path}")]);
                (path, ok(c).stdout)
            })
            .collect();
        (out, err, files)
    };
    let with = |files: &[(String, Vec<u8>)], needle: &str| -> Vec<String> {
        files
            .iter()
            .filter(|(_, b)| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            .map(|(p, _)| p.clone())
            .collect()
    };
    let (out, err, files) = files_of("follower");
    assert!(out.contains("install entries for node-2 "), "{out}");
    assert!(err.contains("no private key or server token"), "{err}");
    assert!(files.iter().any(|(p, _)| p == "liken/layer.cpio"));
    assert!(!files.iter().any(|(p, _)| p.contains("install-node-1")));
    assert!(
        with(&files, "PRIVATE KEY").is_empty(),
        "{:?}",
        with(&files, "PRIVATE KEY")
    );
    assert!(with(&files, "::server:").is_empty());
    assert_eq!(with(&files, "::node:"), ["liken/layer.cpio"]);

    let (out, _, files) = files_of("leader");
    assert!(out.contains("install entries for node-1 "), "{out}");
    assert_eq!(with(&files, "PRIVATE KEY"), ["liken/layer.cpio"]);
}

/// The files of a stick's FAT partition, read back with mtools.
fn esp_files(img: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut f = File::open(img).unwrap();
    let esp = gpt::read(&mut f)
        .unwrap()
        .by_name("LIKEN-STICK")
        .unwrap()
        .offset();
    let at = format!("{}@@{esp}", img.display());
    let mut c = tool("mdir");
    c.args(["-/", "-b", "-i", &at, "::/"]);
    let listing = String::from_utf8(ok(c).stdout).unwrap();
    listing
        .lines()
        .filter(|l| !l.ends_with('/'))
        .map(|l| {
            let path = l.trim_start_matches("::/").to_owned();
            let mut c = tool("mtype");
            c.args(["-i", &at, &format!("::/{path}")]);
            (path, ok(c).stdout)
        })
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `-secureboot`: the three .auth files from `liken keygen -secureboot`
/// in loader/keys/auto, byte for byte, `secure-boot-enroll force` in
/// loader.conf, and none of the private keys anywhere in the image (as
/// PEM or as DER). The fake release's boot files are not signed by the
/// fleet's db key, which the command warns about; signed with sbsign,
/// they pass without a warning.
#[test]
fn a_secureboot_stick_carries_the_public_keys_and_asks_systemd_boot_to_enrol_them() {
    let tmp = TempDir::new("media-stick-secureboot");
    let keys = tmp.path().join("sb");
    let (success, out, err) = liken(&["keygen", "-secureboot", keys.to_str().unwrap()]);
    assert!(success, "{err}");
    assert!(out.contains("liken stick -secureboot"), "{out}");
    let rel = release(tmp.path(), false);
    let dep = deployment(tmp.path());
    let img = tmp.path().join("stick.img");
    let make = |rel: &std::path::Path, img: &std::path::Path| {
        liken(&[
            "stick",
            "-role",
            "follower",
            "-secureboot",
            keys.to_str().unwrap(),
            "-output",
            img.to_str().unwrap(),
            rel.to_str().unwrap(),
            dep.to_str().unwrap(),
        ])
    };
    let (success, out, err) = make(&rel, &img);
    assert!(success, "{err}");
    assert!(
        out.contains("Secure Boot: loader/keys/auto holds the fleet's PK, KEK and db")
            && out.contains("secure-boot-enroll force"),
        "{out}"
    );
    assert!(
        err.contains("'s systemd-boot.efi and vmlinuz carry no signature by the fleet's db key"),
        "{err}"
    );

    let files = esp_files(&img);
    let under_keys: Vec<&str> = files
        .iter()
        .filter(|(p, _)| p.starts_with("loader/keys/"))
        .map(|(p, _)| p.as_str())
        .collect();
    assert_eq!(
        under_keys,
        [
            "loader/keys/auto/KEK.auth",
            "loader/keys/auto/PK.auth",
            "loader/keys/auto/db.auth"
        ]
    );
    for name in ["PK", "KEK", "db"] {
        let on_stick = &files
            .iter()
            .find(|(p, _)| *p == format!("loader/keys/auto/{name}.auth"))
            .unwrap()
            .1;
        assert!(
            *on_stick == std::fs::read(keys.join(format!("{name}.auth"))).unwrap(),
            "{name}.auth is the keygen's"
        );
    }
    let loader = String::from_utf8(
        files
            .iter()
            .find(|(p, _)| p == "loader/loader.conf")
            .unwrap()
            .1
            .clone(),
    )
    .unwrap();
    assert!(
        loader.ends_with("auto-firmware no\nsecure-boot-enroll force\n"),
        "{loader}"
    );

    // No private key: not in any file of the ESP (a follower's stick
    // has none of the cluster's either), and not anywhere in the image,
    // as PEM lines or as DER.
    for (path, bytes) in &files {
        assert!(!contains(bytes, b"PRIVATE KEY"), "{path}");
    }
    let image = std::fs::read(&img).unwrap();
    for name in ["PK", "KEK", "db"] {
        let key = keys.join(format!("{name}.key"));
        // One line of its PEM body stands for the rest: 64 characters of
        // base64 that nothing else holds.
        let pem = std::fs::read_to_string(&key).unwrap();
        let line = pem.lines().nth(1).unwrap();
        assert_eq!(line.len(), 64);
        assert!(!contains(&image, line.as_bytes()), "{name}.key: {line}");
        let mut c = tool("openssl");
        c.args(["pkey", "-outform", "DER", "-in"]).arg(&key);
        let der = ok(c).stdout;
        assert!(der.len() > 1000);
        assert!(!contains(&image, &der), "{name}.key as DER");
    }

    // A release whose systemd-boot and kernel carry signatures by db
    // (sbsign, as item 2's bundle will): no warning.
    let signed_root = tmp.path().join("signed");
    let signed_dir = signed_root.join("channel").join(crate::support::VERSION);
    std::fs::create_dir_all(&signed_dir).unwrap();
    for (input, file) in [
        (
            "/usr/lib/systemd/boot/efi/systemd-bootx64.efi",
            "systemd-boot.efi",
        ),
        ("/usr/lib/systemd/boot/efi/linuxx64.efi.stub", "vmlinuz"),
    ] {
        let mut c = tool("sbsign");
        c.arg("--key")
            .arg(keys.join("db.key"))
            .arg("--cert")
            .arg(keys.join("db.crt"))
            .arg("--output")
            .arg(signed_dir.join(file))
            .arg(input);
        ok(c);
    }
    let signed = release(&signed_root, false);
    let (success, _, err) = make(&signed, &tmp.path().join("signed.img"));
    assert!(success, "{err}");
    assert!(!err.contains("no signature"), "{err}");
    // The kernel signed by another fleet's db: the warning names it alone.
    let other = tmp.path().join("other-sb");
    let (success, _, err) = liken(&["keygen", "-secureboot", other.to_str().unwrap()]);
    assert!(success, "{err}");
    let other_root = tmp.path().join("other");
    let other_dir = other_root.join("channel").join(crate::support::VERSION);
    std::fs::create_dir_all(&other_dir).unwrap();
    std::fs::copy(
        signed.join("systemd-boot.efi"),
        other_dir.join("systemd-boot.efi"),
    )
    .unwrap();
    let mut c = tool("sbsign");
    c.arg("--key")
        .arg(other.join("db.key"))
        .arg("--cert")
        .arg(other.join("db.crt"))
        .arg("--output")
        .arg(other_dir.join("vmlinuz"))
        .arg("/usr/lib/systemd/boot/efi/linuxx64.efi.stub");
    ok(c);
    let other_rel = release(&other_root, false);
    let (success, _, err) = make(&other_rel, &tmp.path().join("other.img"));
    assert!(success, "{err}");
    assert!(
        err.contains("'s vmlinuz carries no signature by the fleet's db key"),
        "{err}"
    );

    // Not a keygen directory: refused before any output exists.
    let (success, _, err) = liken(&[
        "stick",
        "-secureboot",
        dep.to_str().unwrap(),
        "-output",
        tmp.path().join("none.img").to_str().unwrap(),
        rel.to_str().unwrap(),
        dep.to_str().unwrap(),
    ]);
    assert!(!success, "{err}");
    assert!(
        err.contains("-secureboot: ") && err.contains("db.auth"),
        "{err}"
    );
    assert!(!tmp.path().join("none.img").exists());
}
