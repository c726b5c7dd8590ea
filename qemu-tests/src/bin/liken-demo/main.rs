//! liken-demo (`make demo`, `make demo-stop`): a one-machine fleet under
//! QEMU, installed from a `liken stick` stick and run by liken's own
//! operators against a control plane on this workstation, left running
//! for a person to try liken's commands on.
//!
//! - `up <dir>` starts the fleet unless it runs already (a daemon,
//!   `daemon <dir>`, detached with setsid, owns every process), shows its
//!   progress until the machine is Ready, prints `liken kubectl home get
//!   machines` and what to try next, and, when standard input is a
//!   terminal, opens a shell in `<dir>` with `liken` and `kubectl` on its
//!   PATH. Without a terminal it returns, leaving the fleet running.
//! - `daemon <dir>`: the control plane (etcd, kube-apiserver,
//!   kube-controller-manager, kube-scheduler from liken-testenv) on a
//!   `liken mint` identity, on this workstation's own address so that
//!   the machines (through QEMU's user network) and the workstation's
//!   tools reach it by one URL; `liken serve` for the test channel; the
//!   machine installed from the stick and booted; the cluster operator.
//!   It runs until SIGTERM or SIGINT, then stops the machine, the
//!   cluster operator, `liken serve` and the control plane and removes
//!   its pid file; killed outright, everything it started dies with it
//!   all the same (liken-testenv's spawner arms each child with
//!   PR_SET_PDEATHSIG).
//! - `stop <dir>` ends the daemon, and with it the fleet, and returns
//!   once it is gone.
//!
//! The machine runs the test images' k3s stand-in (`liken-standin-k3s`,
//! not k3s: it says so on every line), which registers the machine's
//! Node with the control plane, runs the machine operator from the
//! release's image, and answers init's health checks from the Node.
//! Everything else is liken's.
//!
//! With `LIKEN_DEMO_NODE=upstream` (`make demo NODE=upstream`) the
//! machine is a real node instead, the API inside it (see `upstream`):
//! no control plane or cluster operator on the workstation.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod names;
mod upstream;

use names::{CLUSTER, MACHINE, console_log, link};

use nix::sys::signal::{SigSet, Signal};
use qemu_tests::fleet::host::{Host, HostSpec, MachineSpec, Reach};
use qemu_tests::fleet::progress::step;
use qemu_tests::fleet::{self, Fleet};

/// How long each of the start's waits may take on a slow machine.
const START: Duration = Duration::from_secs(3600);
/// A knob for `make test-demo` alone, no option of the demo (hence its
/// name): `<seconds>` installs the machine from the test channel's third
/// release (N+2, built never to become healthy: its k3s stand-in exits
/// at once, so no Node ever registers and init never blesses the boot)
/// instead of the first, and gives each of the start's waits that long
/// instead of [`START`], so the start really fails and the failure path
/// (the machine's last console lines, what to do, nothing left running)
/// can be proven.
const TEST_ONLY_UNHEALTHY: &str = "LIKEN_DEMO_TEST_ONLY_UNHEALTHY";
/// Which node the demo's machine runs (`make demo NODE=...`).
const NODE: &str = "LIKEN_DEMO_NODE";
/// How long `stop` gives the daemon to tear down before SIGKILL.
const STOP: Duration = Duration::from_secs(60);
/// How often the daemon renews the cluster operator's token, which
/// lasts a day.
const RENEW: Duration = Duration::from_secs(1800);

/// Set once the fleet is up and the daemon's main thread waits for a
/// stop signal; before that a signal ends the daemon at once.
static UP: AtomicBool = AtomicBool::new(false);

fn usage() -> ! {
    eprintln!("usage: liken-demo up|daemon|stop <dir>");
    std::process::exit(2);
}

fn main() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("the demo failed");
        eprintln!("demo: failed: {msg}");
    }));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [verb, dir] = args.as_slice() else {
        usage()
    };
    let dir = PathBuf::from(dir);
    match verb.as_str() {
        "up" => up(&dir),
        "daemon" => daemon(&dir),
        "stop" => stop(&dir),
        _ => usage(),
    }
}

fn pid_file(dir: &Path) -> PathBuf {
    dir.join("demo.pid")
}

/// The daemon's pid, if it runs.
fn running(dir: &Path) -> Option<rustix::process::Pid> {
    let pid = std::fs::read_to_string(pid_file(dir)).ok()?;
    let pid = rustix::process::Pid::from_raw(pid.trim().parse().ok()?)?;
    rustix::process::test_kill_process(pid).ok().map(|()| pid)
}

/// The daemon's pid file, removed when the daemon ends (also by a
/// failure, as the panic unwinds).
struct PidFile(PathBuf);

impl PidFile {
    fn write(dir: &Path) -> PidFile {
        let path = pid_file(dir);
        std::fs::write(&path, std::process::id().to_string())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        PidFile(path)
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The workstation CLI the demo's commands use: the one `make images`
/// built, which `<dir>/bin` links to so that a person can put it on
/// PATH.
fn liken_bin() -> PathBuf {
    qemu_tests::images().liken.clone()
}

fn up(dir: &Path) {
    if let Err(e) = decide_node(std::env::var(NODE).ok().as_deref()) {
        eprintln!("demo: {e}");
        std::process::exit(2);
    }
    let log = dir.join("demo.log");
    if running(dir).is_none() {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let out = std::fs::File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let me = std::env::current_exe().unwrap_or_else(|e| panic!("this program's path: {e}"));
        // setsid -f: the daemon outlives make and the terminal, in a
        // session of its own, so the shell's job control and a ^C at the
        // prompt leave the fleet alone.
        let started = Command::new("setsid")
            // The daemon outlives the make that ran `up`, so it must not
            // take part in that make's job server.
            .env_remove("MAKEFLAGS")
            .env_remove("MFLAGS")
            .env_remove("MAKELEVEL")
            .arg("-f")
            .arg(me)
            .arg("daemon")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap_or_else(|e| panic!("{e}")))
            .stderr(out)
            .status()
            .unwrap_or_else(|e| panic!("cannot start the demo's daemon with setsid: {e}"));
        assert!(
            started.success(),
            "setsid could not start the demo's daemon ({started})"
        );
        println!("demo: started; its log is {}", log.display());
    } else {
        println!("demo: already running (make demo-stop ends it)");
    }
    follow(&log, dir);
    // The commands are shown as a person types them in the demo's
    // directory, where its shell starts; the directory is named once.
    let table = Command::new(dir.join("bin").join("liken"))
        .arg("kubectl")
        .arg(CLUSTER)
        .args(["get", "machines"])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("liken kubectl: {e}"));
    print!("{}", render_where(dir));
    println!("\n$ liken kubectl {CLUSTER} get machines");
    print!("{}", String::from_utf8_lossy(&table.stdout));
    eprint!("{}", String::from_utf8_lossy(&table.stderr));
    print!(
        "{}",
        std::fs::read_to_string(dir.join("next.txt")).unwrap_or_default()
    );
    if !table.status.success() {
        eprintln!("demo: `liken kubectl get machines` failed; make demo-stop ends the fleet");
        std::process::exit(1);
    }
    if std::io::stdin().is_terminal() {
        shell(dir);
    }
}

/// Replaces this process with an interactive bash in `dir`, with the
/// demo's `liken` first on PATH and its completion loaded.
fn shell(dir: &Path) -> ! {
    use std::os::unix::process::CommandExt;
    println!(
        "\nA shell in the demo's directory with liken (and kubectl) on its PATH; `exit` leaves the fleet running."
    );
    let rc = dir.join("bashrc");
    std::fs::write(
        &rc,
        format!(
            "[ -f ~/.bashrc ] && . ~/.bashrc\nexport PATH='{}':\"$PATH\"\n\
             PS1='(liken demo) \\w $ '\nsource <(liken completion bash)\n",
            dir.join("bin").display()
        ),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", rc.display()));
    let e = Command::new("bash")
        .arg("--rcfile")
        .arg(&rc)
        .arg("-i")
        .current_dir(dir)
        .exec();
    panic!("cannot start bash: {e}");
}

/// Prints the daemon's log as it grows until it says ready or failed.
/// On a failure the log already holds the failing machine's last
/// console lines (the fleet's wait puts them in its message).
fn follow(log: &Path, dir: &Path) {
    let began = Instant::now();
    let mut at = 0usize;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.len() > at {
            print!("{}", &text[at..]);
            let _ = std::io::stdout().flush();
            at = text.len();
        }
        if text.lines().any(|l| l == "demo: ready") {
            return;
        }
        let ended = running(dir).is_none() && began.elapsed() > Duration::from_secs(10);
        if ended || text.lines().any(|l| l.starts_with("demo: failed")) {
            // Let the daemon finish tearing down, so nothing is left
            // running when this returns.
            let deadline = Instant::now() + STOP;
            while running(dir).is_some() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(500));
            }
            let text = std::fs::read_to_string(log).unwrap_or_default();
            print!("{}", text.get(at..).unwrap_or_default());
            let _ = std::io::stdout().flush();
            eprintln!(
                "demo: failed before the machine was Ready. The lines above say what failed \
                 (for a wait: what was awaited, the last answer and the machine's last console \
                 lines); the machine's whole console is in {}, the demo's log in {}.",
                console_log().display(),
                log.display()
            );
            match running(dir) {
                None => eprintln!(
                    "demo: everything the demo started is stopped; run make demo again once \
                     the cause is mended"
                ),
                Some(pid) => eprintln!(
                    "demo: its daemon ({}) still runs: make demo-stop ends it",
                    pid.as_raw_nonzero()
                ),
            }
            std::process::exit(1);
        }
        if began.elapsed() > START {
            eprintln!(
                "demo: not ready within {} s; its log is {} (make demo-stop ends it)",
                START.as_secs(),
                log.display()
            );
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Blocks SIGTERM and SIGINT in this thread, and so in every thread it
/// starts after, and gives them to a thread of their own: before the
/// fleet is up a signal ends the daemon at once (its children die with
/// it); after, the main thread receives it and stops the fleet in order.
fn stop_signals(dir: &Path) -> crossbeam_channel::Receiver<Signal> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block()
        .unwrap_or_else(|e| panic!("blocking SIGTERM and SIGINT: {e}"));
    let (tx, rx) = crossbeam_channel::bounded(1);
    let pid = pid_file(dir);
    std::thread::spawn(move || {
        let Ok(sig) = set.wait() else { return };
        if UP.load(Ordering::SeqCst) {
            let _ = tx.send(sig);
        } else {
            eprintln!("demo: stopped by {sig} while starting");
            let _ = std::fs::remove_file(&pid);
            std::process::exit(1);
        }
    });
    rx
}

/// The test-only knob's deadline, if it is set (`None` when not).
fn decide_test_only_unhealthy(value: Option<&str>) -> Result<Option<Duration>, String> {
    match value {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|s| *s > 0)
            .map(|s| Some(Duration::from_secs(s)))
            .ok_or_else(|| {
                format!("{TEST_ONLY_UNHEALTHY}={v:?} is not a number of seconds (a test's knob)")
            }),
    }
}

/// The demo's machine: the quick stand-in, or a real node with the API
/// inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    Standin,
    Upstream,
}

/// The node `make demo NODE=` names (unset or empty: the stand-in).
fn decide_node(value: Option<&str>) -> Result<Node, String> {
    match value.map(str::trim) {
        None | Some("" | "standin") => Ok(Node::Standin),
        Some("upstream") => Ok(Node::Upstream),
        Some(other) => Err(format!(
            "NODE={other:?} is not a node the demo runs: NODE=standin (the default, about two \
             minutes to Ready) or NODE=upstream (a real kubelet and containerd with the API in \
             the machine, about ten)"
        )),
    }
}

/// What the daemon keeps running until it is stopped.
enum Up {
    /// The stand-in's fleet: the control plane, the cluster operator,
    /// `liken serve` and the machine.
    Standin(Box<Fleet>),
    /// The upstream node and `liken serve`.
    Upstream(Box<upstream::Running>),
}

fn daemon(dir: &Path) {
    let signals = stop_signals(dir);
    let pid = PidFile::write(dir);
    let unhealthy = decide_test_only_unhealthy(std::env::var(TEST_ONLY_UNHEALTHY).ok().as_deref())
        .unwrap_or_else(|e| panic!("{e}"));
    let node = decide_node(std::env::var(NODE).ok().as_deref()).unwrap_or_else(|e| panic!("{e}"));
    let start = unhealthy.unwrap_or(START);
    step(&format!(
        "the demo's daemon runs as pid {} (make demo-stop ends it)",
        std::process::id()
    ));
    // The workstation CLI beside the deployment.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    link(&liken_bin(), &bin.join("liken"));
    let (mut up, next) = match node {
        Node::Standin => {
            let (fleet, next) = standin(dir, unhealthy, start);
            (Up::Standin(Box::new(fleet)), next)
        }
        Node::Upstream => {
            if unhealthy.is_some() {
                panic!("{TEST_ONLY_UNHEALTHY} is for the stand-in demo only");
            }
            let (running, next) = upstream::start(dir, &liken_bin(), start);
            (Up::Upstream(Box::new(running)), next)
        }
    };
    write_next(dir, &next);
    UP.store(true, Ordering::SeqCst);
    step("the fleet is up");
    println!("demo: ready");
    loop {
        match signals.recv_timeout(RENEW) {
            Ok(sig) => {
                step(&format!("demo: stopping on {sig}"));
                drop(up);
                drop(pid);
                step("demo: stopped");
                return;
            }
            Err(_) => match &mut up {
                Up::Standin(fleet) => fleet.host.refresh_operator_token(),
                // The cluster operator runs in the machine, with a token
                // its kubelet renews.
                Up::Upstream(running) => running.vm.drain(),
            },
        }
    }
}

/// The stand-in's fleet, up: the control plane and `liken serve` on
/// this workstation, node-1 installed from a stick, the cluster operator
/// as its own binary; with `unhealthy`, from N+2 (the test's failure
/// path). Returns the fleet and the release the upgrade hint names.
fn standin(dir: &Path, unhealthy: Option<Duration>, start: Duration) -> (Fleet, fleet::Release) {
    let (channel, releases) = fleet::channel();
    let (mut n, next) = (&releases[0], &releases[1]);
    if let Some(within) = unhealthy {
        n = &releases[2];
        step(&format!(
            "{TEST_ONLY_UNHEALTHY}: node-1 is installed from {}, built never to become healthy, \
             so no Node registers; each wait gives up after {} s (a test of the failure path)",
            n.version,
            within.as_secs()
        ));
    }
    let reach = Reach::workstation();
    step(&format!(
        "the control plane and the channel listen on {} ({})",
        reach.listen(),
        match reach {
            Reach::Address(_) =>
                "this workstation's address: the machine and your tools reach it alike",
            Reach::Slirp =>
                "loopback: this workstation has no other address, so the machine reaches it as 10.0.2.2",
        }
    ));
    let spec = MachineSpec::numbered(1, true, false);
    let host = Host::start(&HostSpec {
        dir: &dir.join("work"),
        liken: &liken_bin(),
        reach,
        cluster: CLUSTER,
        machines: std::slice::from_ref(&spec),
        channel,
        // The test releases' inits know their versions (e2e-images), so
        // the Cluster names N as its target and the channel as source.
        release: Some((&n.version, &n.digest)),
        // Its releases are signed by a key make e2e-images made once.
        trusted: Some(&fleet::release_key()),
        node_cidrs: false,
    });
    // The deployment where a person expects it.
    link(&host.deployment, &dir.join(CLUSTER));
    let mut fleet = Fleet::install(
        "demo",
        host,
        &n.dir,
        &n.version,
        &dir.join("work"),
        &["liken.bless-deadline=900"],
    );
    fleet.wait_for(
        &format!("Node {MACHINE} Ready (the node stand-in registers it)"),
        Some(MACHINE),
        start,
        |f| {
            let node = f.get_json(&["node", MACHINE])?;
            let ready = node["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .is_some_and(|c| c["status"] == "True");
            if ready {
                Ok(())
            } else {
                Err("not Ready yet".into())
            }
        },
    );
    let operator = fleet::operator_binary("liken-cluster-operator");
    fleet.host.start_cluster_operator(&operator, start, &[]);
    fleet.wait_for(
        &format!("Machine {MACHINE} Ready (from its machine operator)"),
        Some(MACHINE),
        start,
        |f| {
            let m = f.get_json(&["machine", MACHINE])?;
            match m["status"]["phase"].as_str() {
                Some("Ready") => Ok(()),
                other => Err(format!("phase {other:?}")),
            }
        },
    );
    fleet.wait_for(
        "the Cluster's tally 1/1 (from the cluster operator)",
        None,
        start,
        |f| {
            let c = f.get_json(&["cluster", CLUSTER])?;
            match c["status"]["machines"]["summary"].as_str() {
                Some("1/1") => Ok(()),
                other => Err(format!("tally {other:?}")),
            }
        },
    );
    (fleet, next.clone())
}

/// What to try next, with the exact commands (next.txt): a reboot
/// through the cluster's turns, the same waiting for a person's
/// approval, and an upgrade to the channel's next release.
fn write_next(dir: &Path, next: &fleet::Release) {
    let text = render_next(&next.version, &next.digest, &console_log());
    std::fs::write(dir.join("next.txt"), text)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join("next.txt").display()));
}

/// Where the demo's commands are typed: its directory, named once, and
/// the one line that makes any other shell like the demo's (the line
/// `make test-demo` runs before the hints).
fn render_where(dir: &Path) -> String {
    format!(
        "\nThe commands below are typed in the demo's directory with liken on PATH,\n\
         as in the shell the demo opens there. In another shell, first:\n\
         \x20 cd {dir} && export PATH=\"$PWD/bin:$PATH\"\n",
        dir = shell_word(&dir.display().to_string()),
    )
}

/// The hints, as a person types them in the demo's directory with
/// liken on PATH: the deployment is `home`, not its full path.
fn render_next(version: &str, digest: &str, console: &Path) -> String {
    format!(
        "\nTry next:\n\
         \n\
         \x20 liken kubectl {CLUSTER} get machines -w\n\
         \x20     watch the machine's phase while you try the rest in another shell\n\
         \x20 liken request-reboot {CLUSTER} {MACHINE}\n\
         \x20     a reboot through the cluster's turns: Updating, then Ready again\n\
         \x20 liken kubectl {CLUSTER} patch machine {MACHINE} --type merge -p '{{\"spec\":{{\"rebootPolicy\":\"Manual\"}}}}'\n\
         \x20 liken request-reboot {CLUSTER} {MACHINE}\n\
         \x20 liken approve-reboot {CLUSTER} {MACHINE}\n\
         \x20     with rebootPolicy Manual the machine waits (UpdatePending) until you approve\n\
         \x20 liken kubectl {CLUSTER} patch machine {MACHINE} --type merge -p '{{\"spec\":{{\"rebootPolicy\":\"Auto\"}}}}'\n\
         \x20     back to Auto: the machine takes its turns without asking you\n\
         \x20 liken kubectl {CLUSTER} patch cluster {CLUSTER} --type json -p '[{{\"op\":\"add\",\"path\":\"/spec/releases/catalog/-\",\"value\":{{\"version\":\"{v}\",\"digest\":\"{d}\"}}}},{{\"op\":\"replace\",\"path\":\"/spec/version\",\"value\":\"{v}\"}}]'\n\
         \x20     an upgrade to {v} from the local channel `liken serve` shares\n\
         \x20     (the machine downloads it into slot B, reboots into it and reports it)\n\
         \n\
         The machine's console: {console}\n\
         Stop it all with: make demo-stop (in the liken checkout)\n",
        v = version,
        d = digest,
        console = console.display(),
    )
}

/// `word` as one shell word: as it is when it holds nothing a shell
/// reads specially, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%~".contains(c))
        && !word.starts_with('~');
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn stop(dir: &Path) {
    let Some(pid) = running(dir) else {
        let _ = std::fs::remove_file(pid_file(dir));
        println!("demo: not running");
        return;
    };
    println!("demo: stopping (the machine, the cluster operator, liken serve, the control plane)");
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    let deadline = Instant::now() + STOP;
    while rustix::process::test_kill_process(pid).is_ok() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    if rustix::process::test_kill_process(pid).is_ok() {
        eprintln!(
            "demo: the daemon did not stop within {} s; killing it (its children die with it)",
            STOP.as_secs()
        );
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    let _ = std::fs::remove_file(pid_file(dir));
    println!("demo: stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hints as printed, one command a line (what test-demo.sh runs).
    fn hints(text: &str) -> Vec<&str> {
        text.lines()
            .filter_map(|l| l.strip_prefix("  liken "))
            .collect()
    }

    #[test]
    fn hints_are_typed_in_the_demo_directory_and_name_no_path() {
        let dir = "/home/me/.cache/liken/cargo/rustc-1.93.0/demo";
        let console = Path::new("/home/me/.cache/liken/cargo/x/qemu-logs/demo-node-1.log");
        let text = render_next("2026.01.01-002", "sha256:ab12", console);
        let hints = hints(&text);
        assert_eq!(hints.len(), 7, "{text}");
        assert_eq!(hints[0], "kubectl home get machines -w");
        assert_eq!(hints[1], "request-reboot home node-1");
        assert_eq!(hints[4], "approve-reboot home node-1");
        assert!(hints[6].starts_with("kubectl home patch cluster home --type json -p '[{\"op\":\"add\",\"path\":\"/spec/releases/catalog/-\",\"value\":{\"version\":\"2026.01.01-002\",\"digest\":\"sha256:ab12\"}}"), "{}", hints[6]);
        for h in &hints {
            assert!(
                !h.contains('/') || h.contains("--type json"),
                "a path in a hint: {h}"
            );
            assert!(!h.contains(".cache"), "the cache path in a hint: {h}");
        }
        assert!(!text.contains(dir), "{text}");
        // The directory appears once, in the line saying where to type them.
        let place = render_where(Path::new(dir));
        assert_eq!(place.matches(dir).count(), 1, "{place}");
        assert!(
            place.contains(&format!("\n  cd {dir} && export PATH=\"$PWD/bin:$PATH\"\n")),
            "{place}"
        );
    }

    /// The line for another shell, run by bash: it ends in the demo's
    /// directory with its bin first on PATH, also for a directory a
    /// shell would split or expand.
    #[test]
    fn the_line_for_another_shell_works_in_bash() {
        let scratch = std::env::temp_dir().join(format!("liken-demo-where-{}", std::process::id()));
        for name in ["plain", "with space", "it's $HOME"] {
            let dir = scratch.join(name);
            std::fs::create_dir_all(dir.join("bin")).unwrap();
            let place = render_where(&dir);
            let line = place
                .lines()
                .find_map(|l| l.strip_prefix("  cd ").map(|rest| format!("cd {rest}")))
                .unwrap_or_else(|| panic!("{place}"));
            let out = Command::new("bash")
                .args(["-c", &format!("{line} && pwd && echo \"${{PATH%%:*}}\"")])
                .output()
                .unwrap();
            assert!(out.status.success(), "{line}: {out:?}");
            let got = String::from_utf8(out.stdout).unwrap();
            assert_eq!(
                got,
                format!("{}\n{}/bin\n", dir.display(), dir.display()),
                "{line}"
            );
        }
        std::fs::remove_dir_all(&scratch).unwrap();
    }

    #[test]
    fn the_node_is_the_stand_in_unless_named() {
        assert_eq!(decide_node(None), Ok(Node::Standin));
        assert_eq!(decide_node(Some("")), Ok(Node::Standin));
        assert_eq!(decide_node(Some("standin")), Ok(Node::Standin));
        assert_eq!(decide_node(Some("upstream")), Ok(Node::Upstream));
        let e = decide_node(Some("k3s")).unwrap_err();
        assert!(
            e.contains("NODE=upstream") && e.contains("NODE=standin"),
            "{e}"
        );
    }

    #[test]
    fn the_test_only_knob_takes_seconds_or_is_refused() {
        for (value, want) in [
            (None, Ok(None)),
            (Some("90"), Ok(Some(Duration::from_secs(90)))),
            (Some(" 5\n"), Ok(Some(Duration::from_secs(5)))),
        ] {
            assert_eq!(decide_test_only_unhealthy(value), want, "{value:?}");
        }
        for bad in ["", "0", "-1", "1m", "yes"] {
            let err = decide_test_only_unhealthy(Some(bad)).unwrap_err();
            assert!(err.contains(TEST_ONLY_UNHEALTHY), "{err}");
        }
    }
}
