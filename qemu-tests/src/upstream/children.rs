//! The components the launcher runs, and how it tells they are up.
//!
//! k3s runs the kubelet and kube-proxy inside its own process and
//! containerd as a child with a death signal (k3s-io/k3s
//! pkg/agent/containerd/containerd_linux.go, `addDeathSig`), so none
//! outlives k3s. The launcher runs all three as children and gives each
//! the same death signal: it starts them through itself
//! (`<launcher> __exec <program> <args>`, [`trampoline`]), which sets
//! `PR_SET_PDEATHSIG` and then execs the program, since std offers no
//! safe hook between fork and exec. The kernel sends that signal when
//! the *thread* that forked ends, so every child is started from the
//! launcher's main thread, which lives as long as the launcher.
//! Should any component end, the launcher ends too (k3s exits when its
//! containerd or kubelet does) and init restarts it with backoff.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::console::{relay, say};

/// The hidden subcommand the launcher starts its children through.
pub const TRAMPOLINE: &str = "__exec";

/// `<launcher> __exec <program> <args...>`: arm the death signal and
/// become the program; never returns.
pub fn trampoline(args: &[String]) -> ! {
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    let Some((program, rest)) = args.split_first() else {
        say("__exec needs a program");
        std::process::exit(2);
    };
    use std::os::unix::process::CommandExt;
    let e = Command::new(program).args(rest).exec();
    say(&format!("cannot start {program}: {e}"));
    std::process::exit(127)
}

/// Where a component's output goes.
pub enum Output<'a> {
    /// To the console, each line prefixed (see [`relay`]).
    Console(&'static str),
    /// To a file (containerd's log, as k3s keeps it).
    File(&'a Path),
}

/// One running component.
pub struct Component {
    /// Its name.
    pub name: &'static str,
    /// The child.
    pub child: Child,
    /// When it was started.
    pub started: Instant,
}

/// Starts `program` with `args` through the trampoline, with `path` as
/// its PATH (the bundled bin first, as k3s's `stageAndRun` sets it).
pub fn start(
    name: &'static str,
    program: &Path,
    args: &[String],
    path: &str,
    output: Output<'_>,
) -> Result<Component, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding the launcher: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg(TRAMPOLINE)
        .arg(program)
        .args(args)
        .env("PATH", path)
        .stdin(Stdio::null());
    match output {
        Output::Console(_) => {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        Output::File(f) => {
            if let Some(d) = f.parent() {
                let _ = std::fs::create_dir_all(d);
            }
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(f)
                .map_err(|e| format!("{}: {e}", f.display()))?;
            let err = log
                .try_clone()
                .map_err(|e| format!("{}: {e}", f.display()))?;
            cmd.stdout(log).stderr(err);
        }
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting {}: {e}", program.display()))?;
    if let Output::Console(prefix) = output {
        if let Some(o) = child.stdout.take() {
            relay(prefix, o);
        }
        if let Some(e) = child.stderr.take() {
            relay(prefix, e);
        }
    }
    say(&format!(
        "started {name} (pid {}): {} {}",
        child.id(),
        program.display(),
        args.join(" ")
    ));
    Ok(Component {
        name,
        child,
        started: Instant::now(),
    })
}

/// Whether something accepts connections on the unix socket `path`.
pub fn socket_answers(path: &Path) -> bool {
    UnixStream::connect(path).is_ok()
}

/// Whether `GET http://<addr><path>` answers 200 (the kubelet's body
/// is `ok`, kube-proxy's a JSON status).
pub fn healthz(addr: &str, path: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").is_err() {
        return false;
    }
    let mut body = String::new();
    let _ = s.take(4096).read_to_string(&mut body);
    decide_healthz(&body)
}

/// Whether an HTTP answer's status is 200.
pub fn decide_healthz(answer: &str) -> bool {
    answer
        .lines()
        .next()
        .is_some_and(|l| l.split_whitespace().nth(1) == Some("200"))
}

/// Waits until `ready` holds, checking every half second, for up to
/// `within`; returns how long it took.
pub fn wait_until(within: Duration, mut ready: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    while t.elapsed() < within {
        if ready() {
            return Some(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    None
}

/// The guest's uptime in seconds (/proc/uptime), which dates the
/// launcher's milestones against the console's.
pub fn uptime() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_answers() {
        assert!(decide_healthz(
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        ));
        assert!(!decide_healthz("HTTP/1.1 500 Internal\r\n\r\nok"));
        assert!(decide_healthz(
            "HTTP/1.1 200 OK\r\n\r\n{\"nodeEligible\": true}"
        ));
        assert!(!decide_healthz(
            "HTTP/1.1 503 Service Unavailable\r\n\r\n{}"
        ));
        assert!(!decide_healthz(""));
    }
}
