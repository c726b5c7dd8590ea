//! What tests that write files and images share: scratch directories,
//! deterministic bytes to fill them with, and the host's system tools
//! (sgdisk, fsck.vfat, mtools, grub-mkimage, cpio, ...) run so that a
//! failure shows what the tool said.
//!
//! liken-cli's media and releases tests and liken-disk's tool checks
//! each carried a copy of these; they live here, in the dev-only crate
//! the test crates already build, so a fix reaches every one of them.
//! The tools come from scripts/setup.sh. A missing one fails the test
//! with a message saying to run it; nothing is skipped, because a
//! skipped check looks the same as a passing one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh, empty directory, removed with what it holds when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `<tmp>/liken-<label>-<pid>-<n>`. The label names the
    /// suite and the test (`media-stick`, `disk-fat`), so a directory a
    /// killed run leaves behind says whose it is.
    pub fn new(label: &str) -> TempDir {
        // The pid and a counter: test binaries run side by side, and so
        // do the tests within one, often with the same label.
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "liken-{label}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        // A reused pid can meet a directory a killed run left.
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p)
            .unwrap_or_else(|e| panic!("cannot create the scratch directory {}: {e}", p.display()));
        TempDir(p)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `len` pseudo-random bytes, the same for the same `seed` (xorshift),
/// so a failing test fails the same way again.
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Where system tools are looked for. The sbin directories are not on a
/// normal user's PATH, and sgdisk and fsck.vfat live there.
const TOOL_DIRS: [&str; 4] = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"];

/// A command for the system tool `name`, with no input (a tool that
/// would prompt fails instead of waiting). Fails the test when the tool
/// is not installed.
pub fn tool(name: &str) -> Command {
    let found = TOOL_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "{name} is missing (looked in {}); run scripts/setup.sh as root",
                TOOL_DIRS.join(", ")
            )
        });
    let mut c = Command::new(found);
    // mtools refuses geometries it finds odd unless told not to check;
    // the other tools ignore the variable.
    c.env("MTOOLS_SKIP_CHECK", "1").stdin(Stdio::null());
    c
}

/// Runs `c` and returns its output, failing the test with its stdout
/// and stderr when it does not succeed.
pub fn ok(mut c: Command) -> Output {
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
    assert!(
        out.status.success(),
        "{c:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// GRUB's i386-pc directory (boot.img and the modules grub-mkimage
/// packs), from grub-pc-bin. Fails the test when it is not installed.
pub fn grub_dir() -> PathBuf {
    let d = PathBuf::from("/usr/lib/grub/i386-pc");
    assert!(
        d.join("boot.img").exists(),
        "GRUB's i386-pc images are missing; run scripts/setup.sh as root (grub-pc-bin)"
    );
    d
}

/// Builds a real GRUB core.img at `out` with grub-mkimage: prefix
/// `(,gpt1)/grub` as liken's layouts use, and a subset of the modules
/// images/build-loaders.sh packs, since the tests check where core.img
/// is placed and how its fields are set, not what it boots.
pub fn grub_core(out: &Path) {
    let mut c = tool("grub-mkimage");
    c.arg("-O")
        .arg("i386-pc")
        .arg("-d")
        .arg(grub_dir())
        .arg("-o")
        .arg(out)
        .arg("-p")
        .arg("(,gpt1)/grub")
        .args([
            "biosdisk",
            "part_gpt",
            "fat",
            "normal",
            "configfile",
            "linux",
            "echo",
            "test",
            "loadenv",
        ]);
    ok(c);
}
