//! The release images `make qemu-images` builds, checked from the
//! outside with the standard tools: the system image's tree
//! (`unsquashfs`), its programs run from that tree (`chroot`, under a
//! user namespace when the test is not root), the bootloader files, the
//! licenses, and the two local channels `liken bundle` filled.

use std::path::{Path, PathBuf};
use std::process::Command;

use liken_api::decode;
use liken_api::release::{ARTIFACT_SYSTEM, Channel, RELEASE_FILE, Release};
use qemu_tests::{check, images, run, scratch, text, workspace};

fn sha256(path: &Path) -> String {
    let out = check(Command::new("sha256sum").arg(path));
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn is_root() -> bool {
    let out = check(Command::new("id").arg("-u"));
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

/// Runs `args` inside `root` with chroot: the program, its loader and
/// its libraries all come from the tree.
fn in_tree(root: &Path, args: &[&str]) -> String {
    let mut cmd = if is_root() {
        Command::new("chroot")
    } else {
        let mut c = Command::new("unshare");
        c.args(["-r", "chroot"]);
        c
    };
    cmd.arg(root).args(args);
    text(&check(&mut cmd))
}

/// One `unsquashfs -lls` line per entry, as (mode string, owner, path,
/// link target).
struct Entry {
    mode: String,
    owner: String,
    path: String,
    target: Option<String>,
}

fn listing(image: &Path) -> Vec<Entry> {
    let out = check(Command::new("unsquashfs").arg("-lls").arg(image));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            // drwxr-xr-x root/root 35 1970-01-01 00:00 squashfs-root/etc
            let mut f = line.splitn(6, ' ').filter(|s| !s.is_empty());
            let mode = f.next()?.to_owned();
            if mode.len() != 10 {
                return None;
            }
            let owner = f.next()?.to_owned();
            let rest = line.split_once(" squashfs-root")?.1;
            let (path, target) = match rest.split_once(" -> ") {
                Some((p, t)) => (p, Some(t.to_owned())),
                None => (rest, None),
            };
            Some(Entry {
                mode,
                owner,
                path: if path.is_empty() {
                    "/".to_owned()
                } else {
                    path.to_owned()
                },
                target,
            })
        })
        .collect()
}

fn find<'a>(entries: &'a [Entry], path: &str) -> &'a Entry {
    entries
        .iter()
        .find(|e| e.path == path)
        .unwrap_or_else(|| panic!("the system image has no {path}"))
}

/// Extracts the tree without the module tree (the tools are what runs).
fn extract(image: &Path, dir: &Path) -> PathBuf {
    let root = dir.join("root");
    check(
        Command::new("unsquashfs")
            .arg("-q")
            .arg("-no-progress")
            .arg("-d")
            .arg(&root)
            .arg(image)
            .args([
                "bin",
                "sbin",
                "lib",
                "lib64",
                "etc",
                "tmp",
                "dev",
                "usr/bin",
                "usr/sbin",
                "usr/lib64",
                "usr/lib/x86_64-linux-gnu",
                "usr/share",
            ]),
    );
    root
}

/// The operator images the Makefile builds into IMAGES_OUT (its
/// OPERATORS) and the system image carries.
const OPERATOR_IMAGES: [&str; 2] = ["liken-machine-operator.tar", "liken-cluster-operator.tar"];

fn check_tree(entries: &[Entry]) {
    for e in entries {
        assert_eq!(e.owner, "root/root", "{} is not root-owned", e.path);
    }
    for (link, to) in [
        ("/bin", "usr/bin"),
        ("/sbin", "usr/sbin"),
        ("/lib", "usr/lib"),
        ("/lib64", "usr/lib64"),
        ("/etc/resolv.conf", "/run/resolv.conf"),
        ("/etc/rancher", "/run/rancher"),
        ("/usr/sbin/iptables", "iptables-nft"),
        ("/usr/sbin/ip6tables", "ip6tables-nft"),
        ("/usr/sbin/iptables-save", "iptables-nft-save"),
        ("/usr/sbin/iptables-restore", "iptables-nft-restore"),
        ("/usr/sbin/ip6tables-save", "ip6tables-nft-save"),
        ("/usr/sbin/ip6tables-restore", "ip6tables-nft-restore"),
    ] {
        let e = find(entries, link);
        assert!(e.mode.starts_with('l'), "{link} is not a symlink");
        assert_eq!(e.target.as_deref(), Some(to), "{link}");
    }
    // Mount points: present, directories, empty.
    for dir in ["/proc", "/sys", "/dev", "/run", "/var", "/tmp"] {
        assert!(find(entries, dir).mode.starts_with('d'), "{dir}");
        let inside = format!("{dir}/");
        assert!(
            !entries.iter().any(|e| e.path.starts_with(&inside)),
            "mount point {dir} is not empty"
        );
    }
    for file in [
        "/etc/os-release",
        "/etc/passwd",
        "/etc/group",
        "/etc/ssl/certs/ca-certificates.crt",
        "/usr/sbin/xtables-nft-multi",
        "/usr/sbin/mke2fs",
        "/usr/bin/mount",
        "/usr/bin/umount",
        "/usr/sbin/conntrack",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/share/liken/manifests/crds/machines.liken.sh.yaml",
        "/usr/share/liken/manifests/crds/clusters.liken.sh.yaml",
        "/usr/share/liken/features/flux/manifests/flux-system.yaml",
        "/usr/share/liken/features/flux/manifests/flux-engine-rbac.yaml",
        "/usr/share/liken/manifests/machine-operator.yaml",
    ] {
        assert!(find(entries, file).mode.starts_with('-'), "{file}");
    }
    // The whole module tree, with the indexes modprobe reads.
    let kver = std::fs::read_to_string(images().dir.join("kernel-release")).unwrap();
    let modules = format!("/usr/lib/modules/{}", kver.trim());
    for index in ["modules.dep", "modules.alias", "modules.dep.bin"] {
        find(entries, &format!("{modules}/{index}"));
    }
    let kos = entries
        .iter()
        .filter(|e| e.path.starts_with(&modules) && e.path.ends_with(".ko"))
        .count();
    assert!(kos > 3000, "only {kos} modules in the system image");
    // No shell: nothing in the image could run a script.
    assert!(!entries.iter().any(|e| e.path == "/usr/bin/sh"));
}

fn check_etc(root: &Path) {
    let os = std::fs::read_to_string(root.join("etc/os-release")).unwrap();
    assert!(
        os.contains("NAME=liken\n") && os.contains("ID=liken\n"),
        "{os}"
    );
    let version = std::env::var("LIKEN_VERSION").unwrap_or_else(|_| "dev".to_owned());
    let version = if version.is_empty() {
        "dev".to_owned()
    } else {
        version
    };
    assert!(os.contains(&format!("VERSION_ID={version}\n")), "{os}");
    // The operators' manifests name the image of this release and label
    // their pods with it; no placeholder is left for k3s to meet.
    let manifest =
        std::fs::read_to_string(root.join("usr/share/liken/manifests/machine-operator.yaml"))
            .unwrap();
    assert!(
        manifest.contains(&format!(
            "image: liken.sh/liken-machine-operator:{version}\n"
        )),
        "{manifest}"
    );
    assert!(
        manifest.contains(&format!("liken.sh/version: \"{version}\"")),
        "{manifest}"
    );
    assert!(!manifest.contains("@LIKEN_VERSION@"), "{manifest}");
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    let users: Vec<&str> = passwd.lines().filter_map(|l| l.split(':').next()).collect();
    assert_eq!(users, ["root", "nobody"]);
    let group = std::fs::read_to_string(root.join("etc/group")).unwrap();
    let groups: Vec<&str> = group.lines().filter_map(|l| l.split(':').next()).collect();
    assert_eq!(groups, ["root", "nogroup"]);
    let ca = std::fs::read_to_string(root.join("etc/ssl/certs/ca-certificates.crt")).unwrap();
    let certs = ca.matches("-----BEGIN CERTIFICATE-----").count();
    assert!(certs > 100, "only {certs} CA certificates");
}

fn check_tools(root: &Path) {
    let v = in_tree(root, &["/usr/sbin/iptables", "--version"]);
    assert!(v.contains("iptables v") && v.contains("nf_tables"), "{v}");
    for tool in [
        "/usr/sbin/ip6tables",
        "/usr/sbin/iptables-save",
        "/usr/sbin/iptables-restore",
    ] {
        let v = in_tree(root, &[tool, "--version"]);
        assert!(v.contains("nf_tables"), "{tool}: {v}");
    }
    assert!(in_tree(root, &["/usr/bin/mount", "--version"]).contains("util-linux"));
    assert!(in_tree(root, &["/usr/sbin/modprobe", "--version"]).contains("kmod"));
    assert!(in_tree(root, &["/usr/sbin/conntrack", "--version"]).contains("conntrack"));
    // What init does on first boot: format LIKEN-DATA with the image's
    // own mke2fs, here into a file, then read it with the host's tools.
    in_tree(
        root,
        &[
            "/usr/sbin/mke2fs",
            "-q",
            "-F",
            "-t",
            "ext4",
            "-L",
            "LIKEN-DATA",
            "/tmp/data.img",
            "16M",
        ],
    );
    let fs = text(&check(
        Command::new("dumpe2fs")
            .arg("-h")
            .arg(root.join("tmp/data.img")),
    ));
    assert!(fs.contains("Filesystem volume name:   LIKEN-DATA"), "{fs}");
    assert!(fs.contains("extent"), "not ext4: {fs}");
}

#[test]
fn the_system_image_has_the_layout_and_tools_k3s_and_init_need() {
    let images = images();
    let image = images.dir.join("liken.sqfs");
    let entries = listing(&image);
    check_tree(&entries);

    // The image for people holds no stand-in: k3s is there only when the
    // build was given one, and then it is that binary.
    assert!(!entries.iter().any(|e| e.path.contains("standin")));
    let dir = scratch("images-system");
    let root = extract(&image, &dir);
    match std::env::var_os("K3S_BINARY").filter(|k| !k.is_empty()) {
        None => assert!(
            !root.join("usr/bin/k3s").exists(),
            "an image without K3S_BINARY holds a k3s"
        ),
        Some(k3s) => assert_eq!(sha256(&root.join("usr/bin/k3s")), sha256(Path::new(&k3s))),
    }
    if root.join("usr/bin/k3s").exists() {
        assert_ne!(sha256(&root.join("usr/bin/k3s")), sha256(&images.standin));
    }
    check_etc(&root);
    check_tools(&root);
    // The operators' images, byte for byte what the Makefile wrote.
    for image in OPERATOR_IMAGES {
        assert_eq!(
            sha256(&root.join("usr/share/liken/images").join(image)),
            sha256(&images.dir.join(image)),
            "{image}"
        );
    }

    // The stand-in image is the same tree with the stand-in as k3s.
    let standin = images.dir.join("system-standin.squashfs");
    let s = listing(&standin);
    check_tree(&s);
    let dir = scratch("images-standin");
    let root = extract(&standin, &dir);
    assert_eq!(sha256(&root.join("usr/bin/k3s")), sha256(&images.standin));
}

#[test]
fn the_system_image_is_reproducible() {
    let images = images();
    let dir = scratch("images-reproducible");
    let again = dir.join("liken.sqfs");
    let mut cmd = Command::new(workspace().join("images/build-system.sh"));
    for image in OPERATOR_IMAGES {
        cmd.arg("--image").arg(images.dir.join(image));
    }
    cmd.arg(&again);
    if let Some(k3s) = std::env::var_os("K3S_BINARY").filter(|k| !k.is_empty()) {
        cmd.arg(k3s);
    }
    check(&mut cmd);
    assert_eq!(
        sha256(&again),
        sha256(&images.dir.join("liken.sqfs")),
        "two builds of the system image from the same inputs differ"
    );
}

#[test]
fn bootloaders_and_licenses_are_what_the_disk_needs() {
    let dir = &images().dir;
    let efi = std::fs::read(dir.join("systemd-boot.efi")).unwrap();
    assert_eq!(&efi[..2], b"MZ", "systemd-boot.efi is not a PE image");
    assert!(
        efi.windows(12).any(|w| w == b"systemd-boot"),
        "systemd-boot.efi is not systemd-boot"
    );
    let boot = std::fs::read(dir.join("grub-boot.img")).unwrap();
    assert_eq!(boot.len(), 512);
    assert_eq!(&boot[510..], [0x55, 0xAA]);
    let core = std::fs::read(dir.join("grub-core.img")).unwrap();
    assert!(
        core.len() <= 1 << 20,
        "grub-core.img ({} bytes) does not fit the 1 MiB BIOS boot partition",
        core.len()
    );
    // core.img starts with GRUB's diskboot.img (grub-mkimage fills in
    // only the sector count at its end); the rest is compressed, so the
    // prefix is checked by booting it (the BIOS QEMU test).
    let diskboot = std::fs::read("/usr/lib/grub/i386-pc/diskboot.img").unwrap();
    assert_eq!(
        core[..500],
        diskboot[..500],
        "grub-core.img is not an i386-pc core image"
    );

    let licenses = std::fs::read_to_string(dir.join("licenses.md")).unwrap();
    for needle in [
        "### linux-image-",
        "### iptables ",
        "### libc6 ",
        "### e2fsprogs ",
        "### ca-certificates ",
        "### systemd-boot-efi ",
        "### grub-pc-bin ",
        "| liken-init | 0.1.0 | Apache-2.0 |",
        "| serde |",
        "| rustls |",
    ] {
        assert!(licenses.contains(needle), "licenses.md lacks {needle:?}");
    }
}

fn releases(channel: &Path) -> Vec<(String, Release)> {
    let mut out: Vec<(String, Release)> = std::fs::read_dir(channel)
        .unwrap_or_else(|e| panic!("{}: {e}", channel.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.') && name != "channel.yaml")
        .map(|name| {
            let text = std::fs::read_to_string(channel.join(&name).join(RELEASE_FILE)).unwrap();
            let release: Release = decode::strict(&text, RELEASE_FILE).unwrap();
            (name, release)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The release in `release_dir` holds `image` as `liken bundle` lays it
/// out: the image, then the dm-verity tree release.yaml records, its
/// salt the image's sha256. The real `veritysetup verify` (Debian's
/// cryptsetup-bin, the consumer's own check of that layout) reads the
/// artifact with the record's parameters and accepts it.
fn holds_image(release_dir: &Path, release: &Release, image: &Path) {
    let system = release.artifact(ARTIFACT_SYSTEM).unwrap();
    let file = release_dir.join(system.file.as_str());
    let v = release
        .verity
        .as_ref()
        .unwrap_or_else(|| panic!("{}: no verity record", release_dir.display()));
    assert_eq!(
        v.salt,
        sha256(image),
        "{}: the salt is not the image's digest",
        file.display()
    );
    let input = std::fs::read(image).unwrap();
    let held = std::fs::read(&file).unwrap();
    assert!(
        held.starts_with(&input) && held.len() as u64 > v.hash_offset,
        "{} does not start with {}",
        file.display(),
        image.display()
    );
    let f = file.to_string_lossy();
    run(
        "veritysetup",
        &[
            "verify",
            "--no-superblock",
            &format!("--hash-offset={}", v.hash_offset),
            &format!("--data-blocks={}", v.data_blocks),
            &format!("--salt={}", v.salt),
            &f,
            &f,
            &v.root_hash.to_string(),
        ],
    );
}

#[test]
fn make_images_bundles_local_channels() {
    let dir = &images().dir;
    let latest = |channel: &Path| {
        let text = std::fs::read_to_string(channel.join("channel.yaml")).unwrap();
        let ch: Channel = decode::strict(&text, "channel.yaml").unwrap();
        ch.latest.as_str().to_owned()
    };

    let channel = dir.join("channel");
    let all = releases(&channel);
    let (version, release) = all.last().expect("the channel has a release");
    assert_eq!(&latest(&channel), version);
    holds_image(&channel.join(version), release, &dir.join("liken.sqfs"));
    for a in &release.artifacts {
        let file = channel.join(version).join(a.file.as_str());
        assert_eq!(
            std::fs::metadata(&file).unwrap().len(),
            a.size,
            "{}",
            a.name
        );
    }
    // Without non-free-firmware there is no microcode; with a
    // microcode.cpio the release carries it.
    assert_eq!(
        release.artifact("microcode").is_some(),
        dir.join("microcode.cpio").exists()
    );

    // The tests' channel: two releases of two stand-in images that
    // differ (VERSION_ID standin-1 and standin-2), the newer one latest,
    // so a machine booted from the first has other bytes to take.
    let standin = dir.join("channel-standin");
    let all = releases(&standin);
    assert!(all.len() >= 2, "channel-standin has {} releases", all.len());
    let (older, newer) = (&all[all.len() - 2], &all[all.len() - 1]);
    assert!(older.0 < newer.0);
    assert_eq!(latest(&standin), newer.0);
    for ((v, r), image, id) in [
        (older, "system-standin.squashfs", "standin-1"),
        (newer, "system-standin-2.squashfs", "standin-2"),
    ] {
        holds_image(&standin.join(v), r, &dir.join(image));
        let os = run(
            "unsquashfs",
            &["-cat", &dir.join(image).to_string_lossy(), "etc/os-release"],
        );
        assert!(
            os.contains(&format!("\nVERSION_ID={id}\n")),
            "{image}: {os}"
        );
    }
}
