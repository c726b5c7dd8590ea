//! A release directory and a deployment for the media tests. Scratch
//! directories and the tools that read images back are liken-testenv's
//! (`scratch`), shared with liken-disk's tests and re-exported here.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use liken_api::release::{Artifact, RELEASE_FILE, Release};
use liken_api::{FileName, Version, decode};
pub use liken_testenv::scratch::{TempDir, ok, tool};
use liken_testenv::scratch::{bytes, grub_core, grub_dir};

/// Runs the `liken` binary; returns (success, stdout, stderr).
pub fn liken(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_liken"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub const VERSION: &str = "2026.12.02-001";

/// A release directory: every artifact a real file (GRUB's from
/// grub-pc-bin, the rest small stand-ins of the right names), and
/// release.yaml written with liken-api's Release type and YAML encoder,
/// as `liken bundle` writes it. Returns the directory.
pub fn release(root: &Path, microcode: bool) -> PathBuf {
    let dir = root.join("channel").join(VERSION);
    std::fs::create_dir_all(&dir).unwrap();
    let grub = grub_dir();
    grub_core(&dir.join("grub-core.img"));
    std::fs::copy(grub.join("boot.img"), dir.join("grub-boot.img")).unwrap();
    let mut files: Vec<(&str, &str)> = vec![
        ("kernel", "vmlinuz"),
        ("system", "liken.sqfs"),
        ("boot", "boot.cpio"),
        ("cli", "liken"),
        ("systemd-boot", "systemd-boot.efi"),
        ("grub-boot", "grub-boot.img"),
        ("grub-core", "grub-core.img"),
        ("licenses", "licenses.md"),
    ];
    if microcode {
        files.push(("microcode", "microcode.cpio"));
    }
    for (i, (_, file)) in files.iter().enumerate() {
        let p = dir.join(file);
        if !p.exists() {
            let len = match *file {
                "liken.sqfs" => 3_000_001,
                "vmlinuz" => 1_500_000,
                "systemd-boot.efi" => 123_457,
                _ => 4099 + i,
            };
            std::fs::write(&p, bytes(len, i as u64 + 10)).unwrap();
        }
    }
    let artifacts = files
        .iter()
        .map(|(name, file)| {
            let b = std::fs::read(dir.join(file)).unwrap();
            Artifact {
                name: (*name).to_owned(),
                file: FileName::parse(file).unwrap(),
                sha256: liken_cli::releases::stream::sha256(&b),
                size: b.len() as u64,
            }
        })
        .collect();
    let r = Release::new(Version::parse(VERSION).unwrap(), artifacts, vec![]);
    std::fs::write(dir.join(RELEASE_FILE), decode::to_yaml(&r).unwrap()).unwrap();
    dir
}

/// Asserts that a run said once, on stderr and before its output, that
/// the medium holds cluster `home`'s secrets, and that its output does not
/// repeat it.
pub fn assert_warned_once(stdout: &str, stderr: &str) {
    let warning = "will hold the secrets of cluster home (its CA keys, service-account key, \
                   server token and agent token)";
    assert_eq!(stderr.matches(warning).count(), 1, "{stderr}");
    assert!(stderr.contains("liken: warning: "), "{stderr}");
    assert!(!stdout.contains("secret"), "{stdout}");
}

/// A deployment from `liken new` and `liken mint`: machines node-1 and
/// node-2.
pub fn deployment(root: &Path) -> PathBuf {
    let d = root.join("deployment");
    let ds = d.to_str().unwrap();
    let (ok1, _, e) = liken(&[
        "new",
        "-name",
        "home",
        "-endpoint",
        "https://10.0.0.10:6443",
        "-machine",
        "node-1=leader",
        "-machine",
        "node-2=follower",
        ds,
    ]);
    assert!(ok1, "{e}");
    let (ok2, _, e) = liken(&["mint", d.join("identity").to_str().unwrap()]);
    assert!(ok2, "{e}");
    // A trust root, as `liken layer` wants one: a key made by keygen,
    // listed by trust.
    let keys = root.join("keys");
    let (ok3, _, e) = liken(&["keygen", keys.to_str().unwrap()]);
    assert!(ok3, "{e}");
    let (ok4, _, e) = liken(&[
        "trust",
        d.join("trust.yaml").to_str().unwrap(),
        keys.join("release.pub").to_str().unwrap(),
    ]);
    assert!(ok4, "{e}");
    d
}

/// The layer `liken layer` packs for `deployment` (deterministic, so
/// the same bytes the media must hold).
pub fn layer(root: &Path, deployment: &Path) -> Vec<u8> {
    let out = root.join("layer.cpio");
    let (okl, _, e) = liken(&[
        "layer",
        deployment.to_str().unwrap(),
        deployment.join("identity").to_str().unwrap(),
        out.to_str().unwrap(),
    ]);
    assert!(okl, "{e}");
    std::fs::read(out).unwrap()
}

/// The files of a directory tree, relative paths and bytes, sorted.
pub fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(base: &Path, d: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}
