//! Running a host program from a test: to its end, with its output in
//! the failure when it fails. Below everything else in the crate (it
//! imports nothing of it), so any module may run a program without
//! importing the crate root.

use std::ffi::OsStr;
use std::process::{Command, Output};

/// Runs `cmd` to its end, failing the test with its output unless it
/// succeeds.
pub fn check(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("cannot run {cmd:?}: {e}; scripts/setup.sh installs the tools the tests use")
    });
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}",
        out.status,
        text(&out)
    );
    out
}

/// A program's stdout, then its stderr, as text.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `program` with `args` (see [`check`]); returns its output.
pub fn run(program: impl AsRef<OsStr>, args: &[&str]) -> String {
    text(&check(Command::new(program).args(args)))
}
