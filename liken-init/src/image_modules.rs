//! The system image's modules, loaded beside the boot steps.
//!
//! The initramfs carries only the drivers a boot needs to find its root
//! (images/boot-modules.txt). Once the slot's image is `/`, its full
//! module tree can serve every other device: a second coldplug. Under
//! TCG that is about a second of finit_module calls, and nothing on the
//! way to the supervisor needs most of those drivers (sensors, CPU
//! frequency, EDAC), so a worker thread does it while the boot steps go
//! on, as udev settles devices beside a normal boot. It runs at a lower
//! priority, so on a machine with one CPU the steps come first and the
//! worker has the time they spend waiting.
//!
//! The worker owns the tree and the set of modules done, so nothing is
//! shared and nothing is locked. Steps that need it talk to it over a
//! channel:
//! - [`ImageModules::load`]: a step's modules by name (the Machine's
//!   spec.modules, a stick's drivers). The worker answers between two
//!   coldplug modules, so the step waits for one module, not for the
//!   whole coldplug.
//! - [`ImageModules::settled`]: wait until the coldplug is over (the
//!   network step, when an interface the Machine names is not there
//!   yet and its driver may be one still to load).
//!
//! The worker prints its own milestone (`image-modules`) when it is
//! done; a tree it cannot open becomes a step problem through the
//! supervisor loop's channel, so the control socket's status shows it
//! like any other. When the boot steps are over init drops its handle;
//! the worker finishes, drops the tree (megabytes of parsed index) and
//! returns the heap's free pages.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use liken_api::control::StepProblem;

use crate::console::{self, Outcome};
use crate::events::Event;
use crate::modload::{self, ModuleTree, Report};
use crate::sys::modules::ModuleLoader;

/// The worker's milestone name (and its thread's name).
pub const MILESTONE: &str = "image-modules";

/// The worker's nice value: well below the boot steps, which under an
/// equal share of one CPU would take twice as long.
pub const WORKER_NICE: i32 = 10;

/// What the worker is handed.
pub struct Job {
    /// /lib/modules of the new root.
    pub modules: PathBuf,
    /// /proc (for the kernel release).
    pub proc: PathBuf,
    /// /sys (for the devices' modaliases and the loaded modules).
    pub sys: PathBuf,
    /// finit_module(2), shared with the boot steps.
    pub loader: Arc<dyn ModuleLoader + Send + Sync>,
    /// Modules loaded or tried from the initramfs.
    pub done: HashSet<String>,
    /// Modules to load by name once the coldplug is over (ones no
    /// device asks for and no boot step waits on).
    pub later: Vec<String>,
    /// The supervisor loop's channel, for a step problem.
    pub events: Sender<Event>,
}

enum Request {
    /// Load these; the reply is `None` when the tree could not be opened.
    Load {
        names: Vec<String>,
        reply: Sender<Option<Report>>,
    },
    /// Answer once the worker's loads are over.
    Settled { reply: Sender<()> },
}

/// The image's tree and the modules done, once the worker is over.
pub struct Settled {
    /// The full tree.
    pub tree: ModuleTree,
    /// Modules loaded or tried.
    pub done: HashSet<String>,
}

/// How [`ImageModules::spawn`] went.
pub enum Started {
    /// The worker runs beside the boot.
    Worker(ImageModules),
    /// No thread could start and the coldplug ran on the caller's
    /// thread: `why` says so, and the tree (when it opened) is for the
    /// boot to keep.
    Inline {
        /// The message for the root line.
        why: String,
        /// The tree and done set, for the boot's later loads.
        kept: Option<Box<Settled>>,
    },
}

/// The boot steps' handle on the worker. Dropping it lets the worker
/// finish and exit.
pub struct ImageModules {
    requests: Sender<Request>,
}

impl ImageModules {
    /// Starts the worker. When no thread can be started the coldplug
    /// runs here instead: slower, but the boot loses nothing.
    pub fn spawn(job: Job) -> Started {
        let (tx, rx) = crossbeam_channel::unbounded();
        // The job reaches the thread through a channel, and a second
        // receiver stays here: a failed spawn drops the closure, and the
        // job is taken back from the channel instead of being lost.
        let (job_tx, job_rx) = crossbeam_channel::bounded::<Job>(1);
        let kept = job_rx.clone();
        if let Err(crossbeam_channel::SendError(job)) = job_tx.send(job) {
            return inline(job, "its channel is closed");
        }
        let spawned = std::thread::Builder::new()
            .name(MILESTONE.into())
            .spawn(move || {
                if let Err(e) = crate::sys::process::set_thread_nice(WORKER_NICE) {
                    console::line(&format!(
                        "{MILESTONE}: cannot lower the worker's priority ({e}); it competes \
                         with the boot steps for the CPU"
                    ));
                }
                if let Ok(job) = job_rx.recv()
                    && let Some(settled) = work(job, &rx)
                {
                    drop(settled);
                    crate::sys::process::trim_heap();
                }
            });
        match spawned {
            Ok(_) => Started::Worker(ImageModules { requests: tx }),
            Err(e) => match kept.try_recv() {
                Ok(job) => inline(job, &e.to_string()),
                Err(_) => Started::Inline {
                    why: format!("cannot start a thread for the image's modules ({e})"),
                    kept: None,
                },
            },
        }
    }

    /// Loads `names` (and their dependencies) from the image's tree.
    /// `None` when the tree could not be opened or the worker is gone.
    pub fn load(&self, names: &[&str]) -> Option<Report> {
        let (reply, answer) = crossbeam_channel::bounded(1);
        let names = names.iter().map(|n| (*n).to_owned()).collect();
        self.requests.send(Request::Load { names, reply }).ok()?;
        answer.recv().ok().flatten()
    }

    /// Returns once the worker's loads are over (at once when they are,
    /// or when the worker is gone).
    pub fn settled(&self) {
        let (reply, answer) = crossbeam_channel::bounded(1);
        if self.requests.send(Request::Settled { reply }).is_ok() {
            let _ = answer.recv();
        }
    }
}

/// The worker's loads on the caller's thread, when no worker could start.
fn inline(job: Job, why: &str) -> Started {
    // No sender: the request loop ends as soon as it starts.
    let (_, rx) = crossbeam_channel::unbounded();
    Started::Inline {
        why: format!("cannot start a thread for the image's modules ({why}); loaded them here"),
        kept: work(job, &rx).map(Box::new),
    }
}

/// The worker: open the tree, coldplug and load `later` (answering
/// requests between modules), print the milestone, then answer requests
/// until every handle is gone. Returns the tree and done set (none when
/// the tree could not be opened).
fn work(job: Job, requests: &Receiver<Request>) -> Option<Settled> {
    let t0 = Instant::now();
    let loader = &*job.loader;
    let tree = match modload::open_tree(&job.modules, &job.proc) {
        Ok(t) => t,
        Err(e) => {
            let message = format!(
                "{e}; only the initramfs's modules are loaded, so some devices have no driver: \
                 rebuild the image (images/)"
            );
            console::milestone(MILESTONE, &Outcome::Failed(message.clone()));
            let _ = job.events.send(Event::Problem(StepProblem {
                step: MILESTONE.to_owned(),
                message,
            }));
            for request in requests {
                answer(request, None, loader, &mut HashSet::new(), None);
            }
            return None;
        }
    };
    let mut done = job.done;
    done.extend(modload::loaded_modules(&job.sys));
    let mut waiting = Vec::new();
    let mut between = |done: &mut HashSet<String>| {
        for request in requests.try_iter() {
            answer(request, Some(&tree), loader, done, Some(&mut waiting));
        }
    };
    let mut report = modload::coldplug_between(&tree, loader, &job.sys, &mut done, &mut between);
    let later = job.later.iter().map(String::as_str);
    report.absorb(modload::load_between(
        &tree,
        loader,
        later,
        &mut done,
        &mut between,
    ));
    console::milestone(
        MILESTONE,
        &Outcome::ok_with(describe(&report, t0.elapsed().as_secs_f64())),
    );
    for reply in waiting {
        let _ = reply.send(());
    }
    for request in requests {
        answer(request, Some(&tree), loader, &mut done, None);
    }
    Some(Settled { tree, done })
}

/// Answers one request. `waiting` collects Settled replies while the
/// worker's loads run; without it they are answered at once.
fn answer(
    request: Request,
    tree: Option<&ModuleTree>,
    loader: &dyn ModuleLoader,
    done: &mut HashSet<String>,
    waiting: Option<&mut Vec<Sender<()>>>,
) {
    match request {
        Request::Load { names, reply } => {
            let report =
                tree.map(|t| modload::load(t, loader, names.iter().map(String::as_str), done));
            let _ = reply.send(report);
        }
        Request::Settled { reply } => match waiting {
            Some(w) => w.push(reply),
            None => {
                let _ = reply.send(());
            }
        },
    }
}

/// The milestone's detail. Modules matched by a CPU's or a bus's alias
/// often refuse a machine they do not fit (ENODEV: acpi_cpufreq on a
/// virtual CPU), and modules built on them then fail too; that is not
/// the image's fault, so they are only named, not reported as a
/// problem.
pub fn describe(report: &Report, seconds: f64) -> String {
    let mut text = format!("{} loaded in {seconds:.2} s", report.loaded.len());
    let mut skipped: Vec<&str> = report.failed.iter().map(|(m, _)| m.as_str()).collect();
    skipped.extend(report.missing.iter().map(String::as_str));
    if !skipped.is_empty() {
        text.push_str(&format!(
            ", {} not taken by this computer ({})",
            skipped.len(),
            skipped.join(", ")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::modules::Loaded;
    use std::io;
    use std::path::Path;
    use std::sync::Mutex;
    use std::time::Duration;

    /// Records loads by module name and holds the load of each module
    /// in `gated` until the test opens the gate (once per module), so a
    /// test can act while the worker is mid-coldplug.
    struct GateLoader {
        log: Mutex<Vec<String>>,
        gated: &'static [&'static str],
        /// Told when the gated load starts.
        entered: Sender<()>,
        gate: Receiver<()>,
    }

    impl ModuleLoader for GateLoader {
        fn load(&self, path: &Path) -> io::Result<Loaded> {
            let name = crate::coldplug::module_name(&path.to_string_lossy());
            if self.gated.contains(&name.as_str()) {
                let _ = self.entered.send(());
                let _ = self.gate.recv();
            }
            self.log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(name);
            Ok(Loaded::Now)
        }
    }

    /// A loader, the gate's opener, and the channel that says a gated
    /// load has begun.
    fn gate_loader(gated: &'static [&'static str]) -> (Arc<GateLoader>, Sender<()>, Receiver<()>) {
        let (open, gate) = crossbeam_channel::unbounded();
        let (entered, inside) = crossbeam_channel::unbounded();
        let loader = Arc::new(GateLoader {
            log: Mutex::default(),
            gated,
            entered,
            gate,
        });
        (loader, open, inside)
    }

    impl GateLoader {
        fn log(&self) -> Vec<String> {
            self.log.lock().unwrap().clone()
        }
    }

    /// A root with a module tree of a, b, c (devices ask for them), m
    /// (only named) and l (loaded later), and three devices.
    fn root(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("liken-image-modules-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let tree = dir.join("lib/modules/6.1.0-test");
        std::fs::create_dir_all(&tree).unwrap();
        std::fs::create_dir_all(dir.join("proc/sys/kernel")).unwrap();
        std::fs::write(dir.join("proc/sys/kernel/osrelease"), "6.1.0-test\n").unwrap();
        std::fs::write(
            tree.join("modules.dep"),
            "k/a.ko:\nk/b.ko:\nk/c.ko:\nk/m.ko:\nk/l.ko:\n",
        )
        .unwrap();
        std::fs::write(
            tree.join("modules.alias"),
            "alias dev:a* a\nalias dev:b* b\nalias dev:c* c\n",
        )
        .unwrap();
        for d in ["a", "b", "c"] {
            let dev = dir.join(format!("sys/devices/{d}"));
            std::fs::create_dir_all(&dev).unwrap();
            std::fs::write(dev.join("modalias"), format!("dev:{d}1\n")).unwrap();
        }
        std::fs::create_dir_all(dir.join("sys/module")).unwrap();
        dir
    }

    fn job(dir: &Path, loader: Arc<dyn ModuleLoader + Send + Sync>) -> (Job, Receiver<Event>) {
        let (events, rx) = crossbeam_channel::unbounded();
        let job = Job {
            modules: dir.join("lib/modules"),
            proc: dir.join("proc"),
            sys: dir.join("sys"),
            loader,
            done: HashSet::new(),
            later: vec!["l".into()],
            events,
        };
        (job, rx)
    }

    fn worker(started: Started) -> ImageModules {
        match started {
            Started::Worker(w) => w,
            Started::Inline { why, .. } => panic!("no worker: {why}"),
        }
    }

    #[test]
    fn a_steps_request_is_answered_between_two_coldplug_modules() {
        let dir = root("between");
        // Held in a's load, and again in c's: the answers come from
        // two threads, so only a worker held where it is proves which
        // request it answered first.
        let (loader, open, inside) = gate_loader(&["a", "c"]);
        let (job, _events) = job(&dir, loader.clone());
        let w = Arc::new(worker(ImageModules::spawn(job)));
        inside.recv_timeout(Duration::from_secs(10)).unwrap();

        // The worker is held inside a's load. A step asks for m and b,
        // another for the end; neither can be answered yet.
        let (asked, answered) = crossbeam_channel::unbounded();
        let (w1, w2) = (Arc::clone(&w), Arc::clone(&w));
        // Each request is seen on the worker's queue before the next is
        // made, so the order does not hang on how soon threads run on a
        // loaded machine (a fixed sleep was not always enough on CI's
        // two shared cores).
        let queued = |n: usize| {
            let deadline = Instant::now() + Duration::from_secs(30);
            while w.requests.len() < n {
                assert!(Instant::now() < deadline, "request {n} never queued");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let a1 = asked.clone();
        std::thread::spawn(move || {
            let report = w1.load(&["m", "b"]);
            a1.send(format!("load {:?}", report.map(|r| r.loaded)))
                .unwrap();
        });
        queued(1);
        std::thread::spawn(move || {
            w2.settled();
            asked.send("settled".to_owned()).unwrap();
        });
        queued(2);
        assert!(answered.try_recv().is_err(), "answered while a was loading");

        // Out of a, the worker loads m and b and answers that request
        // before the coldplug reaches c, where it is held again.
        open.send(()).unwrap();
        let first = answered.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(first, r#"load Some(["m", "b"])"#);
        inside.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(answered.try_recv().is_err(), "settled while c was loading");
        // The coldplug then passed over b, loaded c, and the later list's
        // l, and only then was the worker settled.
        open.send(()).unwrap();
        let second = answered.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(second, "settled");
        assert_eq!(loader.log(), ["a", "m", "b", "c", "l"]);

        // Afterwards requests are answered at once, nothing loads twice.
        w.settled();
        assert_eq!(w.load(&["a", "m"]).map(|r| r.loaded), Some(vec![]));
        assert_eq!(loader.log().len(), 5);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_tree_that_cannot_be_opened_is_a_step_problem_and_loads_nothing() {
        let dir = root("broken");
        std::fs::remove_file(dir.join("lib/modules/6.1.0-test/modules.dep")).unwrap();
        let (loader, _open, _inside) = gate_loader(&[]);
        let (job, events) = job(&dir, loader.clone());
        let w = worker(ImageModules::spawn(job));
        assert!(w.load(&["m"]).is_none());
        w.settled();
        match events.recv_timeout(Duration::from_secs(10)).unwrap() {
            Event::Problem(p) => {
                assert_eq!(p.step, MILESTONE);
                assert!(p.message.contains("has no modules.dep"), "{}", p.message);
                assert!(p.message.contains("rebuild the image"), "{}", p.message);
            }
            other => panic!("{other:?}"),
        }
        assert!(loader.log().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_milestone_names_what_this_computer_did_not_take() {
        let r = Report {
            loaded: vec!["a".into(), "b".into()],
            failed: vec![("acpi_cpufreq".into(), "No such device".into())],
            missing: vec![],
        };
        assert_eq!(
            describe(&r, 0.5),
            "2 loaded in 0.50 s, 1 not taken by this computer (acpi_cpufreq)"
        );
        assert_eq!(describe(&Report::default(), 0.0), "0 loaded in 0.00 s");
    }
}
