//! liken-pause: the pod sandbox's one process, the upstream node's
//! pause image (`liken.sh/liken-upstream-pause`, `make upstream-images`).
//!
//! containerd's CRI starts every pod as a sandbox container running the
//! image its configuration pins (`pinned_images.sandbox`), whose process
//! holds the pod's namespaces open while the pod's containers come and
//! go, and, as PID 1 of a pod that shares its process namespace, adopts
//! and reaps the orphans of every container. It does what Kubernetes'
//! own pause program does (kubernetes/kubernetes build/pause): nothing
//! but wait, reap every child that ends, and end with status 0 on
//! SIGINT or SIGTERM (the runtime stops a sandbox with SIGTERM, then
//! SIGKILL after the grace period). k3s pins Rancher's copy of it
//! (`rancher/mirrored-pause`), which no airgap archive here carries, so
//! the upstream node's release ships this one, built from this file.
//!
//! It waits synchronously: the three signals are blocked and taken one
//! at a time with sigwait, so no handler runs and nothing has to be
//! async-signal-safe. A signal sent to PID 1 of a namespace whose
//! disposition is the default is dropped by the kernel, so blocking and
//! waiting is also what makes SIGTERM reach it as the namespace's init.

use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use rustix::process::{WaitOptions, wait};

/// What one signal asks of the pause process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// A child ended (or several: SIGCHLD does not queue): reap them all.
    Reap,
    /// The runtime stops the sandbox: end with status 0.
    Exit,
    /// Nothing: not one of the signals it waits for.
    Ignore,
}

/// The signals it blocks and waits for.
const SIGNALS: [Signal; 3] = [Signal::SIGCHLD, Signal::SIGINT, Signal::SIGTERM];

fn decide(signal: Signal) -> Action {
    match signal {
        Signal::SIGCHLD => Action::Reap,
        Signal::SIGINT | Signal::SIGTERM => Action::Exit,
        _ => Action::Ignore,
    }
}

/// Reaps every child that has ended, without waiting for one that has not.
fn reap() {
    // ECHILD (no children at all) ends the loop as well as None does.
    while let Ok(Some(_)) = wait(WaitOptions::NOHANG) {}
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("-v") {
        println!(
            "liken-pause {} (the upstream node's pod sandbox)",
            env!("CARGO_PKG_VERSION")
        );
        return;
    }
    if std::process::id() != 1 {
        eprintln!(
            "liken-pause: warning: not PID 1 of its namespace, so orphans are not its to reap"
        );
    }
    let mut set = SigSet::empty();
    for s in SIGNALS {
        set.add(s);
    }
    if let Err(e) = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None) {
        eprintln!("liken-pause: cannot block SIGCHLD, SIGINT and SIGTERM: {e}");
        std::process::exit(1);
    }
    loop {
        match set.wait().map(decide) {
            Ok(Action::Reap) => reap(),
            Ok(Action::Exit) => {
                eprintln!("liken-pause: stopping on the runtime's signal");
                std::process::exit(0);
            }
            Ok(Action::Ignore) => {}
            // sigwait fails only on an invalid set; waiting again on the
            // same set would spin, so end as a stop would, for the
            // runtime to see.
            Err(e) => {
                eprintln!("liken-pause: sigwait: {e}");
                std::process::exit(2);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_on_int_and_term_and_reaps_on_chld() {
        assert_eq!(decide(Signal::SIGTERM), Action::Exit);
        assert_eq!(decide(Signal::SIGINT), Action::Exit);
        assert_eq!(decide(Signal::SIGCHLD), Action::Reap);
        assert_eq!(decide(Signal::SIGHUP), Action::Ignore);
    }
}
