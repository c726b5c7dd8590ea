//! The signal thread: every signal init handles arrives here, and here
//! alone, through sigwait(2).
//!
//! The handled signals are blocked in the main thread before any other
//! thread starts, so every thread inherits the mask and none of them is
//! ever interrupted by a handler; this thread takes them one at a time
//! with sigwait. (std's process spawning resets the mask in the child,
//! so k3s starts with normal signals.)
//!
//! On SIGCHLD it reaps with WNOHANG until nothing is left to reap: one
//! SIGCHLD can stand for many exits, and an orphan reparented to PID 1
//! must never stay a zombie. Reaping happens under the [`ChildTable`]
//! lock, and the spawner holds that lock from before fork until the new
//! pid is recorded, so the reaper never meets a supervised child it does
//! not know yet, and std's own wait for a failed exec never races it.

use std::io;

use crossbeam_channel::Sender;
use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};

use crate::console;
use crate::events::Event;
use crate::sys::children::ExitStatus;
use crate::sys::power::PowerAction;

// The table is the ground's (sys::children), shared with sys::command;
// these are its public paths too.
pub use crate::sys::children::{ChildTable, SharedTable, lock};

/// What a signal means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalAction {
    /// Reap children.
    Reap,
    /// Shut down and then reboot or power off.
    Shutdown(PowerAction),
    /// Nothing.
    Ignore,
}

/// The signals init takes through sigwait.
pub fn handled() -> SigSet {
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGPWR,
        Signal::SIGHUP,
        Signal::SIGPIPE,
    ] {
        set.add(s);
    }
    set
}

/// SIGTERM and SIGINT (which Ctrl-Alt-Del becomes) reboot; SIGUSR2 and
/// SIGPWR power off, as other inits read them.
pub fn decide_signal(signal: Signal) -> SignalAction {
    match signal {
        Signal::SIGCHLD => SignalAction::Reap,
        Signal::SIGTERM | Signal::SIGINT => SignalAction::Shutdown(PowerAction::Reboot),
        Signal::SIGUSR2 | Signal::SIGPWR => SignalAction::Shutdown(PowerAction::Poweroff),
        _ => SignalAction::Ignore,
    }
}

/// Blocks the handled signals in the calling thread; called by the main
/// thread before any other thread exists.
pub fn block() -> io::Result<()> {
    handled().thread_block().map_err(io::Error::from)
}

/// Starts the signal thread.
pub fn spawn(table: SharedTable, events: Sender<Event>) -> io::Result<()> {
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || signal_loop(&table, &events))
        .map(drop)
}

fn signal_loop(table: &SharedTable, events: &Sender<Event>) {
    let set = handled();
    loop {
        match set.wait() {
            Ok(signal) => match decide_signal(signal) {
                SignalAction::Reap => {
                    reap_all(table, events);
                }
                SignalAction::Shutdown(action) => {
                    let _ = events.send(Event::Signal(action));
                }
                SignalAction::Ignore => {}
            },
            Err(e) => {
                console::line(&format!("signals: sigwait failed ({e}); retrying"));
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
    }
}

/// Reaps every child that has ended, telling the loop about supervised
/// ones. Returns how many were reaped.
pub fn reap_all(table: &SharedTable, events: &Sender<Event>) -> usize {
    let mut guard = lock(table);
    let mut reaped = 0usize;
    loop {
        let (pid, status) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => (pid, ExitStatus::Code(code)),
            Ok(WaitStatus::Signaled(pid, signal, _)) => {
                (pid, ExitStatus::Signal(signal.as_str().to_owned()))
            }
            Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
            Err(Errno::EINTR) => continue,
            // Stopped/continued children are not reported without
            // WUNTRACED; anything else is not an exit to act on.
            Ok(_) => continue,
            Err(_) => break,
        };
        reaped = reaped.saturating_add(1);
        let Ok(pid) = u32::try_from(pid.as_raw()) else {
            continue;
        };
        if let Some(waiter) = guard.take_waiter(pid) {
            let _ = waiter.send(status);
        } else if guard.remove(pid) {
            let _ = events.send(Event::Exited { pid, status });
        }
    }
    reaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_map_to_actions() {
        assert_eq!(decide_signal(Signal::SIGCHLD), SignalAction::Reap);
        assert_eq!(
            decide_signal(Signal::SIGINT),
            SignalAction::Shutdown(PowerAction::Reboot)
        );
        assert_eq!(
            decide_signal(Signal::SIGTERM),
            SignalAction::Shutdown(PowerAction::Reboot)
        );
        assert_eq!(
            decide_signal(Signal::SIGPWR),
            SignalAction::Shutdown(PowerAction::Poweroff)
        );
        assert_eq!(decide_signal(Signal::SIGHUP), SignalAction::Ignore);
        assert!(handled().contains(Signal::SIGCHLD));
    }
}
