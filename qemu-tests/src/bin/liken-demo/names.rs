//! What both kinds of demo share and name alike: the cluster, its one
//! machine, where its console goes, and how the demo's directory links
//! to what it shows a person. Below `main` and `upstream`, which both
//! use it, so neither imports the other's.

use std::path::{Path, PathBuf};

/// The demo's cluster and its one machine.
pub const CLUSTER: &str = "home";
pub const MACHINE: &str = "node-1";

/// Points `link` at `to`, replacing what was there.
pub fn link(to: &Path, link: &Path) {
    let _ = std::fs::remove_file(link);
    std::os::unix::fs::symlink(to, link).unwrap_or_else(|e| panic!("{}: {e}", link.display()));
}

/// The machine's console log (the fleet's `<fleet>-<machine>.log`).
pub fn console_log() -> PathBuf {
    qemu_tests::log_dir().join(format!("demo-{MACHINE}.log"))
}
