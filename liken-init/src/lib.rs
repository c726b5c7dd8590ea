//! liken-init, PID 1 of a liken machine.
//!
//! It never exits and never panics: a PID 1 that exits or panics is a
//! kernel panic. Every failure becomes a console line and a degraded
//! state the machine can recover from, and whatever happens the machine
//! keeps reaping, answering its control socket and rebooting on request.
//!
//! Threads: the main thread runs the boot steps and then the supervisor
//! loop ([`serve`]); the signal thread ([`reaper`]) takes every signal
//! through sigwait and reaps; the control thread ([`control`]) serves
//! /run/liken/init.sock. They talk through one channel of [`events`]
//! into the loop, which alone decides.
//!
//! Module map:
//! - [`steps`]: the boot sequence as a table of named steps.
//! - [`console`]: milestone lines.
//! - [`cmdline`], [`layer`]: the kernel command line; the documents and
//!   the choice of this computer's Machine.
//! - [`coldplug`] (pure) and [`modload`]: kernel modules.
//! - [`mounts`]: the pseudo filesystems and the reverse unmount.
//! - [`sysctls`]: the Machine's kernel parameters under /proc/sys.
//! - [`net`]: the network plan, DHCP and resolv.conf.
//! - [`boot_record`], [`fsutil`]: /run/liken/boot.json, atomic writes.
//! - [`supervisor`], [`backoff`], [`output`]: the supervised service,
//!   its restarts, and its output to the console and a bounded log.
//! - [`serve`]: the loop and the shutdown sequence; [`fatal`]: the last
//!   resort.
//! - [`sys`]: the kernel, one narrow seam per area.

#![deny(unsafe_code)]
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects
    )
)]

pub mod backoff;
pub mod boot_record;
pub mod cmdline;
pub mod coldplug;
pub mod console;
pub mod control;
pub mod events;
pub mod fatal;
pub mod fsutil;
pub mod layer;
pub mod modload;
pub mod mounts;
pub mod net;
pub mod output;
pub mod reaper;
pub mod serve;
pub mod steps;
pub mod supervisor;
pub mod sys;
pub mod sysctls;

use std::sync::{Arc, Mutex};

use crate::backoff::Backoff;
use crate::reaper::ChildTable;
use crate::steps::{Boot, Paths};
use crate::supervisor::{RealSpawner, Supervisor};
use crate::sys::Sys;

/// Boots the machine and supervises it; never returns.
pub fn run() -> ! {
    let sys = Sys::real();
    // Before any thread exists, so all of them inherit the mask and only
    // the signal thread ever takes these signals.
    if let Err(e) = reaper::block() {
        fatal::fatal(&*sys.power, &format!("cannot block signals ({e})"));
    }
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        console::line(&format!(
            "bug: thread {} panicked: {info}; init goes on without it, but report this",
            thread.name().unwrap_or("unnamed")
        ));
    }));
    if let Err(e) = sys.power.cad_to_signal() {
        console::line(&format!(
            "ctrl-alt-del: cannot route it to init ({e}); the keystroke reboots at once"
        ));
    }
    let table = Arc::new(Mutex::new(ChildTable::default()));
    let (tx, rx) = crossbeam_channel::unbounded();
    if let Err(e) = reaper::spawn(Arc::clone(&table), tx.clone()) {
        fatal::fatal(
            &*sys.power,
            &format!("cannot start the signal thread ({e})"),
        );
    }
    console::line(&format!("init {} starting", liken_api::BUILD_VERSION));
    let mut boot = Boot::new(sys, Paths::real(), tx);
    steps::run(&mut boot, steps::BOOT);
    let spawner = RealSpawner {
        table,
        log: Some(boot.paths.run_liken.join("k3s.log")),
    };
    let sup = Supervisor::new("k3s", boot.service.take(), spawner, Backoff::default());
    serve::serve(boot, sup, rx)
}
