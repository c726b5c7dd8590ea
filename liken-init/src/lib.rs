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
//! Layers: [`sys`] is the ground, speaking to the kernel and importing
//! nothing above it, and [`context`] sits on it with what the steps
//! share (the [`context::Boot`], its paths and limits). The step modules
//! import only those two and plain utilities, and the step table
//! ([`steps`]) and the supervisor loop ([`serve`]) sit on top, so every
//! import points down (`make lint` checks it: scripts/import-layers.py).
//!
//! Module map:
//! - [`steps`]: the boot sequence as a table of named steps.
//! - [`context`]: the boot context the steps share; [`assessment`]: the
//!   plan boot assessment keeps in it.
//! - [`console`]: milestone lines.
//! - [`cmdline`], [`layer`]: the kernel command line; the documents and
//!   the choice of this computer's Machine.
//! - [`coldplug`] (pure) and [`modload`]: kernel modules;
//!   [`image_modules`]: the worker that loads the system image's
//!   modules beside the boot steps.
//! - [`mounts`]: the pseudo filesystems and the reverse unmount.
//! - [`rootfs`]: the slot's system image as the root, /var on the data
//!   partition, and the switch from the initramfs; [`verity_root`]: the
//!   slot opened through dm-verity when its entry gives a root hash.
//! - [`sysctls`]: the Machine's kernel parameters under /proc/sys.
//! - [`staged`]: staged documents promoted, and the running documents
//!   published in /run/liken/documents.
//! - [`net`]: the network plan, DHCP and resolv.conf; [`ntp`]: the
//!   clock set from the Machine's NTP servers; [`dns`]: the stub
//!   resolver that finds them by name.
//! - [`seed`]: k3s's config.yaml, identity, token, manifests and airgap
//!   images.
//! - [`boot_record`], [`fsutil`]: /run/liken/facts/boot.json, atomic writes;
//!   [`order`]: every list sorted through one sort (binary size).
//! - [`install`]: install mode, liken written onto the machine's disk
//!   from an install stick or netboot media.
//! - [`esp`]: the EFI system partition, mounted on demand and written
//!   with FAT's fsync discipline.
//! - [`supervisor`], [`backoff`], [`output`]: the supervised service,
//!   its restarts, and its output to the console and a bounded log.
//! - [`release_writer`]: the write-release request: a verified release
//!   into the inactive slot and its files and entry onto the ESP.
//! - [`release_check`]: the one check of a release directory (strict
//!   release.yaml, every artifact's size and streamed SHA-256) that
//!   install mode and the write-release request both run;
//!   [`slot_image`]: the system image written raw into a slot and read
//!   back, for both.
//! - [`trust`]: the write-release request's signature, trust root,
//!   floor and rollback permits, checked before the release writer runs.
//! - [`bless`]: boot assessment, blessing a healthy boot's entry.
//! - [`serve`]: the loop and the shutdown sequence; [`fatal`]: the last
//!   resort; [`kexec`]: a reboot into the bootloader's next entry
//!   without the firmware, its try counted as the bootloader would.
//! - [`sys`]: the kernel, one narrow seam per area.
//! - [`udp`]: the connected socket and deadline wait that DNS and NTP
//!   share.

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

pub mod assessment;
pub mod backoff;
pub mod bless;
pub mod boot_record;
pub mod ca_time;
pub mod cmdline;
pub mod coldplug;
pub mod console;
pub mod context;
pub mod control;
pub mod dns;
pub mod efivarfs;
pub mod esp;
pub mod events;
pub mod fatal;
pub mod fsutil;
pub mod image_modules;
pub mod install;
pub mod k3s_host;
pub mod kexec;
pub mod layer;
pub mod layer_credential;
pub mod layer_seal;
pub mod modload;
pub mod mounts;
pub mod net;
pub mod ntp;
pub mod order;
pub mod output;
pub mod reaper;
pub mod release_check;
pub mod release_writer;
pub mod role_layer;
pub mod rootfs;
pub mod seed;
pub mod serve;
pub mod slot_image;
pub mod staged;
pub mod steps;
pub mod supervisor;
pub mod sys;
pub mod sysctls;
pub mod trust;
pub mod udp;
pub mod verity_root;

use std::sync::{Arc, Mutex};

use crate::backoff::Backoff;
use crate::context::{Boot, Paths};
use crate::supervisor::{RealSpawner, Supervisor};
use crate::sys::Sys;
use crate::sys::children::ChildTable;

/// Boots the machine and supervises it; never returns.
pub fn run() -> ! {
    let table = Arc::new(Mutex::new(ChildTable::default()));
    let sys = Sys::real(Arc::clone(&table));
    // Before any thread exists, so all of them inherit the mask and only
    // the signal thread ever takes these signals.
    if let Err(e) = reaper::block() {
        fatal::fatal(&*sys.power, &format!("cannot block signals ({e})"));
    }
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        // The shipped profile aborts (Cargo.toml, release-init says why);
        // test builds unwind. Say what is about to happen either way.
        let next = if cfg!(panic = "abort") {
            "init aborts and the kernel reboots (panic= on the command line)"
        } else {
            "init goes on without that thread"
        };
        console::line(&format!(
            "bug: thread {} panicked: {info}; {next}; report this",
            thread.name().unwrap_or("unnamed")
        ));
    }));
    if let Err(e) = sys.power.cad_to_signal() {
        console::line(&format!(
            "ctrl-alt-del: cannot route it to init ({e}); the keystroke reboots at once"
        ));
    }
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
    // The module tree's parsed indexes (the full image's modules.alias
    // and modules.dep: megabytes) serve only the boot steps; PID 1 lives
    // on for the machine's whole uptime, so they go now, and the pages
    // they held go back to the kernel.
    boot.modules = None;
    // Dropping the handle lets the image's module worker end once its
    // coldplug is over; it trims the heap again as it goes.
    boot.image_modules = None;
    sys::process::trim_heap();
    let spawner = RealSpawner {
        table,
        log: Some(boot.paths.run_liken.join("k3s.log")),
    };
    let sup = Supervisor::new("k3s", boot.service.take(), spawner, Backoff::default());
    serve::serve(boot, sup, rx)
}
