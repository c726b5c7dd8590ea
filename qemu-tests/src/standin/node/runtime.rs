//! Starting and stopping containers: the outside half of the stand-in's
//! runtime ([`super::container`] is the inside).
//!
//! A container gets its own copy of its image's root under the pod's
//! directory (`/run/liken-standin/pods/<uid>/<container>/rootfs`), so
//! mount points can be made in it before it turns read-only; a spec
//! file beside it; and a process tree started as
//! `liken-standin-k3s container <spec>`. Its output is relayed to the
//! console line by line, each line prefixed with the stand-in's name
//! and the pod's, and kept in the kubelet's log path
//! (`/var/log/pods/<namespace>_<name>_<uid>/<container>/0.log`).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use super::container::Spec;

/// Where pods' files live.
pub const PODS_DIR: &str = "/run/liken-standin/pods";

/// A running container.
pub struct Running {
    child: Child,
    pid: Option<Pid>,
    pid_file: PathBuf,
    /// When it started.
    pub started: Instant,
}

/// Copies a directory tree (an image's unpacked root), keeping modes
/// and links.
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let kind = e.file_type()?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst)?;
        }
        let mode = std::fs::symlink_metadata(&src)?.permissions().mode();
        if !kind.is_symlink() {
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(mode))?;
        }
    }
    Ok(())
}

/// Starts a container from `spec` (written to `<dir>/spec.json`); its
/// output goes to the console as `liken-standin-k3s: [<label>] <line>`
/// and to `log`.
pub fn start(spec: &Spec, dir: &Path, label: &str, log: &Path) -> Result<Running, String> {
    let spec_path = dir.join("spec.json");
    let _ = std::fs::remove_file(&spec.pid_file);
    std::fs::write(
        &spec_path,
        serde_json::to_vec(spec).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("{}: {e}", spec_path.display()))?;
    if let Some(p) = log.parent() {
        let _ = std::fs::create_dir_all(p);
    }
    let mut child = Command::new("/proc/self/exe")
        .arg("container")
        .arg(&spec_path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    for stream in [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        let label = label.to_owned();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .ok();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).split(b'\n').map_while(Result::ok) {
                let line = String::from_utf8_lossy(&line);
                crate::say(&format!("[{label}] {line}"));
                if let Some(f) = file.as_mut() {
                    let _ = writeln!(f, "{line}");
                }
            }
        });
    }
    Ok(Running {
        child,
        pid: None,
        pid_file: spec.pid_file.clone(),
        started: Instant::now(),
    })
}

impl Running {
    /// The program's host pid, once the runtime has written it.
    fn pid(&mut self) -> Option<Pid> {
        if self.pid.is_none() {
            self.pid = std::fs::read_to_string(&self.pid_file)
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok())
                .and_then(Pid::from_raw);
        }
        self.pid
    }

    /// The exit code, once the container has ended (128 + signal for a
    /// killed one).
    pub fn exited(&mut self) -> Option<i32> {
        self.child
            .try_wait()
            .ok()
            .flatten()
            .map(|s| s.code().unwrap_or(137))
    }

    /// Stops it: SIGTERM to the program, up to `grace` to end, then
    /// SIGKILL; returns the exit code.
    pub fn stop(&mut self, grace: Duration) -> i32 {
        if let Some(code) = self.exited() {
            return code;
        }
        if let Some(pid) = self.pid() {
            let _ = rustix::process::kill_process(pid, Signal::TERM);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(code) = self.exited() {
                return code;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        if let Some(pid) = self.pid() {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
        let _ = self.child.kill();
        self.child.wait().map_or(137, |s| s.code().unwrap_or(137))
    }
}
