//! The path for a failure init cannot work around: no threads, no
//! channel. It says so, syncs, and then serves signals alone in the main
//! thread (reaping on SIGCHLD, rebooting on SIGTERM/SIGINT or
//! Ctrl-Alt-Del, powering off on SIGPWR/SIGUSR2) forever. It never
//! returns: PID 1 exiting is a kernel panic.

use std::time::Duration;

use crate::console;
use crate::reaper::{self, SignalAction};
use crate::sys::power::{Power, PowerAction};

/// Reports `message` and serves signals forever.
pub fn fatal(power: &dyn Power, message: &str) -> ! {
    console::line(&format!(
        "fatal: {message}; init keeps reaping and reboots on Ctrl-Alt-Del, SIGTERM or the power button"
    ));
    power.sync();
    let set = reaper::handled();
    loop {
        let Ok(signal) = set.wait() else {
            std::thread::sleep(Duration::from_secs(1));
            continue;
        };
        let action = match reaper::decide_signal(signal) {
            SignalAction::Reap => {
                reap_orphans();
                continue;
            }
            SignalAction::Ignore => continue,
            SignalAction::Shutdown(action) => action,
        };
        power.sync();
        let e = power.reboot(action);
        console::line(&format!("{}: the kernel refused ({e})", action.name()));
        if action == PowerAction::Poweroff {
            let _ = power.reboot(PowerAction::Reboot);
        }
    }
}

fn reap_orphans() {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}
