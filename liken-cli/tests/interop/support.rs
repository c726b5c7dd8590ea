//! What the interop tests share: the built binary, scratch directories,
//! and running real tools with their output kept for the failure message.

use std::borrow::BorrowMut;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// The `liken` binary cargo built for these tests.
pub fn liken_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_liken"))
}

/// A `liken` command.
pub fn liken<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new(liken_bin());
    c.args(args);
    c
}

/// A fresh directory, removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    /// Creates `<tmp>/liken-interop-<label>-<pid>-<n>`.
    pub fn new(label: &str) -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p =
            std::env::temp_dir().join(format!("liken-interop-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `cmd` with no input and returns its output, whatever its status.
pub fn output(mut cmd: impl BorrowMut<Command>) -> Output {
    let cmd = cmd.borrow_mut();
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"))
}

/// Runs `cmd`, asserts it succeeded, and returns its stdout.
pub fn ok(mut cmd: impl BorrowMut<Command>) -> String {
    let cmd = cmd.borrow_mut();
    let out = output(&mut *cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `cmd`, asserts it failed with status 1, and returns its stderr.
pub fn fails(mut cmd: impl BorrowMut<Command>) -> String {
    let cmd = cmd.borrow_mut();
    let out = output(&mut *cmd);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{cmd:?} should exit 1:\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A deployment made by the real binary: `new` from flags, then `mint`.
pub fn deployment(dir: &Path) {
    ok(liken([
        OsStr::new("new"),
        OsStr::new("-name"),
        OsStr::new("home"),
        OsStr::new("-endpoint"),
        OsStr::new("https://127.0.0.1:6443"),
        OsStr::new("-machine"),
        OsStr::new("node-1=leader"),
        OsStr::new("-machine"),
        OsStr::new("node-2=follower"),
        dir.as_os_str(),
    ]));
    ok(liken([
        OsStr::new("mint"),
        dir.join("identity").as_os_str(),
    ]));
    // The trust root `liken layer` wants: a key from keygen beside the
    // deployment, listed by trust.
    let mut keys = dir.as_os_str().to_owned();
    keys.push("-keys");
    let keys = std::path::PathBuf::from(keys);
    ok(liken([OsStr::new("keygen"), keys.as_os_str()]));
    ok(liken([
        OsStr::new("trust"),
        dir.join("trust.yaml").as_os_str(),
        keys.join("release.pub").as_os_str(),
    ]));
}

/// The permission bits of a file.
pub fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}
