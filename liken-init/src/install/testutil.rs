//! A release and a scratch directory for install mode's tests.

use std::path::{Path, PathBuf};

use liken_api::Version;
use liken_api::decode;
use liken_api::release::{RELEASE_FILE, Release, Verity};

use crate::release_check::write_test_artifact;

/// A fresh directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("liken-init-install-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `n` bytes that differ from file to file.
pub fn bytes(seed: u32, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

/// A GRUB boot.img stand-in: 512 bytes ending in 0x55AA.
pub fn boot_img() -> Vec<u8> {
    let mut b = bytes(7, 512);
    b[510] = 0x55;
    b[511] = 0xAA;
    b
}

/// A GRUB core.img stand-in: diskboot's blocklist area at the end of
/// its first sector is empty, as grub-mkimage leaves it.
pub fn core_img() -> Vec<u8> {
    let mut c = bytes(6, 30_000);
    c[488..512].fill(0);
    c
}

/// Writes a release directory under `dir` (artifact files named as
/// `liken bundle` names them, and release.yaml built with liken-api's
/// types); microcode only when asked.
pub fn fake_release(dir: &Path, microcode: bool) -> PathBuf {
    fake_release_with(dir, microcode, None)
}

/// [`fake_release`], with a dm-verity record in release.yaml.
pub fn fake_release_with(dir: &Path, microcode: bool, verity: Option<Verity>) -> PathBuf {
    let rel = dir.join("release");
    std::fs::create_dir_all(&rel).unwrap();
    let mut files: Vec<(&str, &str, Vec<u8>)> = vec![
        ("kernel", "vmlinuz", bytes(1, 300_000)),
        ("system", "liken.sqfs", bytes(2, 3 * 1024 * 1024 + 4321)),
        ("boot", "boot.cpio", bytes(3, 200_000)),
        ("cli", "liken", bytes(4, 1000)),
        ("systemd-boot", "systemd-boot.efi", bytes(5, 90_000)),
        ("grub-boot", "grub-boot.img", boot_img()),
        ("grub-core", "grub-core.img", core_img()),
        ("licenses", "licenses.md", b"# Licenses\n".to_vec()),
    ];
    if microcode {
        files.push(("microcode", "microcode.cpio", bytes(8, 5000)));
    }
    let artifacts = files
        .iter()
        .map(|(name, file, content)| write_test_artifact(&rel, name, file, content))
        .collect();
    let mut release = Release::new(Version::parse("2026.12.02-001").unwrap(), artifacts, vec![]);
    release.verity = verity;
    std::fs::write(rel.join(RELEASE_FILE), decode::to_yaml(&release).unwrap()).unwrap();
    rel
}
