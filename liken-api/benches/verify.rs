//! What a release signature costs its checkers: init before every write,
//! the machine operator before every download, the cluster operator at
//! every channel poll. Target: one check of a release.yaml's detached
//! signature against a trust root of three keys under 1 ms, measured
//! here beside the reference measured in the same run: the strict decode
//! of the same release.yaml, which each of them does anyway.
//!
//! The release.yaml is a real-sized one (nine artifacts and three
//! components, as `liken bundle` writes it), and the signature is the
//! `.sig` file's text, decoded and checked as init does. A missed target
//! fails the run. `LIKEN_BENCH_SMOKE=1` runs a few rounds and checks
//! nothing.

use std::time::{Duration, Instant};

use liken_api::release::{Artifact, Component, Release};
use liken_api::signing::{DetachedSignature, TrustRoot, key_pair};
use liken_api::{FileName, Version, decode};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// A release.yaml as `liken bundle` writes it.
fn release_yaml() -> String {
    let artifacts = [
        ("kernel", "vmlinuz"),
        ("boot", "boot.cpio"),
        ("system", "liken.sqfs"),
        ("microcode", "microcode.cpio"),
        ("cli", "liken"),
        ("systemd-boot", "systemd-boot.efi"),
        ("grub-boot", "grub-boot.img"),
        ("grub-core", "grub-core.img"),
        ("licenses", "licenses.md"),
    ]
    .iter()
    .enumerate()
    .map(|(i, (name, file))| Artifact {
        name: (*name).into(),
        file: FileName::parse(file).unwrap(),
        sha256: liken_api::hash::sha256(file.as_bytes()),
        size: 1_000_000 * (i as u64 + 1),
    })
    .collect();
    let components = ["linux=6.1.0-28", "k3s=v1.31.4+k3s1", "containerd=2.0.4"]
        .iter()
        .map(|c| {
            let (name, version) = c.split_once('=').unwrap();
            Component {
                name: name.into(),
                version: version.into(),
            }
        })
        .collect();
    let release = Release::new(
        Version::parse("2026.12.06-001").unwrap(),
        artifacts,
        components,
    );
    decode::to_yaml(&release).unwrap()
}

fn main() {
    let smoke = std::env::var_os("LIKEN_BENCH_SMOKE").is_some_and(|v| v == "1");
    let rounds = if smoke { 5 } else { 2000 };
    let keys: Vec<_> = (1..=3u8).map(|i| key_pair([i; 32]).0).collect();
    let root = TrustRoot::new(keys.iter().map(|k| k.public()));
    let yaml = release_yaml();
    // Signed by the last key of the root, so the lookup walks it whole.
    let sig_text = serde_yaml::to_string(&keys[2].sign(yaml.as_bytes())).unwrap();

    let (mut verify, mut reference) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        let sig: DetachedSignature = decode::strict(&sig_text, "release.yaml.sig").unwrap();
        let key = root.verify(yaml.as_bytes(), Some(&sig)).unwrap();
        std::hint::black_box(key);
        verify.push(t.elapsed());

        let t = Instant::now();
        let release: Release = decode::strict(&yaml, "release.yaml").unwrap();
        std::hint::black_box(release);
        reference.push(t.elapsed());
    }
    let (v, r) = (median(verify), median(reference));
    println!(
        "release signature: decoding release.yaml.sig and checking it against a trust root of \
         3 keys {:.1} µs (median of {rounds}; target < 1000 µs): {:.2}x the {:.1} µs of \
         decoding the same {}-byte release.yaml",
        us(v),
        us(v) / us(r),
        us(r),
        yaml.len()
    );
    if !smoke && v >= Duration::from_millis(1) {
        eprintln!("release signature: target missed: {:.1} µs", us(v));
        std::process::exit(1);
    }
}
