//! The context the boot steps share, below them: the [`Boot`] each step
//! is handed, [`Paths`] (where init finds things), and the limits and
//! helpers more than one step reads.
//!
//! It imports the ground ([`crate::sys`]) and plain modules that import
//! no step, and no step itself, so every step can import it and none
//! needs another step or the table that runs them ([`crate::steps`]).

use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use crossbeam_channel::Sender;
use liken_api::control::StepProblem;
use liken_api::{BootRecord, Cluster, Machine, Sha256Hex, Time};

use crate::cmdline::Cmdline;
use crate::events::Event;
use crate::modload::{self, ModuleTree};
use crate::net;
use crate::supervisor::Service;
use crate::sys::Sys;

/// Where init finds things. Real boots use [`Paths::real`]; tests point
/// these into a temporary tree.
#[derive(Clone, Debug)]
pub struct Paths {
    /// /proc.
    pub proc: PathBuf,
    /// /sys.
    pub sys: PathBuf,
    /// /run/liken: the boot record and the control socket.
    pub run_liken: PathBuf,
    /// /etc/liken: the deployment layer's documents.
    pub etc_liken: PathBuf,
    /// /lib/modules.
    pub modules: PathBuf,
    /// The k3s binary.
    pub k3s: PathBuf,
    /// The resolver configuration the network step writes.
    pub resolv_conf: PathBuf,
    /// /var: where the data partition is mounted.
    pub var: PathBuf,
    /// /var/lib/liken: staged, promoted and rejected documents.
    pub var_liken: PathBuf,
    /// /usr/share/liken: the manifests, features and operator images
    /// the system image carries.
    pub share_liken: PathBuf,
    /// k3s's data directory.
    pub k3s_data: PathBuf,
    /// k3s's config.yaml (/etc/rancher is a symlink to /run/rancher).
    pub k3s_config: PathBuf,
    /// The disk that holds the booted slot (`vda`), once the root step
    /// found it: the data partition and the ESP are looked for on it
    /// alone.
    pub boot_disk: Option<String>,
}

/// What the boot has learnt so far.
pub struct Boot {
    /// The kernel.
    pub sys: Sys,
    /// Where things are.
    pub paths: Paths,
    /// When init started (wall clock), for the boot record.
    pub started: Time,
    /// When init started (monotonic).
    pub started_at: Instant,
    /// The supervisor loop's channel, for the control thread.
    pub events: Sender<Event>,
    /// Filesystems mounted this boot, in mount order.
    pub mounted: Vec<PathBuf>,
    /// The command line.
    pub cmdline: Cmdline,
    /// The module tree, once opened.
    pub modules: Option<ModuleTree>,
    /// Modules loaded or attempted, so no module is tried twice.
    pub modules_done: std::collections::HashSet<String>,
    /// The worker loading the system image's modules, once the root is
    /// switched; while it runs it owns the full tree, and module loads
    /// go through it ([`Boot::load_modules`]).
    pub image_modules: Option<crate::image_modules::ImageModules>,
    /// The Cluster document, when valid.
    pub cluster: Option<Cluster>,
    /// This computer's Machine document, when chosen and valid.
    pub machine: Option<Machine>,
    /// The published boot record.
    pub record: Option<BootRecord>,
    /// What to supervise.
    pub service: Option<Service>,
    /// Why there is nothing to supervise, when there is not.
    pub no_service: Option<String>,
    /// How long to hold k3s's first start: the clock reads earlier than
    /// a cluster CA's notBefore ([`crate::ca_time`]).
    pub k3s_hold: Option<std::time::Duration>,
    /// Failed steps.
    pub problems: Vec<StepProblem>,
    /// Boot assessment's plan, once the `assess` step has looked.
    pub assessment: Option<crate::assessment::Plan>,
    /// The network thread, once the network step started it; the
    /// shutdown stops it, which gives the DHCP leases back.
    pub network: Option<net::daemon::Daemon>,
    /// The dm-verity root hash the root was opened with, once the root
    /// step made a verified slot the root.
    pub root_verity: Option<Sha256Hex>,
    /// Why the root step could not make the booted slot the root: a
    /// boot on trial that has it can never become healthy, so boot
    /// assessment reboots it at once ([`crate::bless`]).
    pub root_failure: Option<String>,
}

impl Boot {
    /// A boot starting now.
    pub fn new(sys: Sys, paths: Paths, events: Sender<Event>) -> Boot {
        Boot {
            sys,
            paths,
            started: Time::from_system(SystemTime::now()),
            started_at: Instant::now(),
            events,
            mounted: Vec::new(),
            cmdline: Cmdline::default(),
            modules: None,
            modules_done: Default::default(),
            image_modules: None,
            cluster: None,
            machine: None,
            record: None,
            service: None,
            no_service: None,
            k3s_hold: None,
            problems: Vec::new(),
            assessment: None,
            network: None,
            root_verity: None,
            root_failure: None,
        }
    }
}

impl Boot {
    /// Loads `names` and their dependencies: through the image's module
    /// worker when it runs, else from the tree this boot opened. `None`
    /// when there is no tree to load from (the modules or image-modules
    /// line said why).
    pub fn load_modules(&mut self, names: &[&str]) -> Option<modload::Report> {
        // Names this boot has loaded need no round trip to the worker.
        let names: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| !self.modules_done.contains(&crate::coldplug::module_name(n)))
            .collect();
        if names.is_empty() {
            return Some(modload::Report::default());
        }
        if let Some(worker) = &self.image_modules {
            return worker.load(&names);
        }
        let tree = self.modules.as_ref()?;
        Some(modload::load(
            tree,
            &*self.sys.modules,
            names.iter().copied(),
            &mut self.modules_done,
        ))
    }
}

/// The most bytes a staged or promoted document (or its digest file)
/// may have; a Machine or Cluster document is a few kilobytes.
pub const MAX_DOCUMENT: u64 = 1 << 20;

/// A /proc/self/mountinfo field with its escapes decoded: the kernel
/// escapes space, tab, newline and backslash as octal.
pub fn unescape(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// The most of /proc/self/mountinfo init reads (k3s's containers add a
/// few lines each).
pub const MOUNTINFO_CAP: u64 = 4 << 20;
