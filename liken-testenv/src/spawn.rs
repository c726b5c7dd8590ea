//! Starting control-plane processes so that they cannot outlive the test.
//!
//! Two mechanisms, because each covers what the other cannot:
//!
//! - [`Proc`] kills its child's process group when dropped: the normal
//!   end of a test and a panic that unwinds.
//! - `PR_SET_PDEATHSIG(SIGKILL)`, set in the child between fork and exec:
//!   the kernel kills the child when its parent dies, which covers a test
//!   binary killed by a signal or a `OnceLock`'d control plane that is
//!   never dropped.
//!
//! The kernel sends the parent-death signal when the *thread* that forked
//! the child exits, not the process. Test harnesses run each test on its
//! own short-lived thread, so children are forked from one spawner thread
//! that lives as long as the process.

#![allow(unsafe_code)]

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::sync::mpsc::{Sender, channel};

use rustix::process::{Pid, Signal, getpid, getppid, kill_process_group};

/// A child process in its own process group, killed (with the group)
/// when dropped.
pub struct Proc {
    /// What it is, for messages.
    pub name: String,
    child: Child,
}

impl Proc {
    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child itself (to take its standard streams).
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Whether it has exited, and how.
    pub fn try_wait(&mut self) -> io::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait()
    }

    /// Kills the process group now and reaps the child.
    pub fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait()
            && let Some(pid) = Pid::from_raw(self.child.id() as i32)
        {
            let _ = kill_process_group(pid, Signal::KILL);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

type Job = (Command, Sender<io::Result<Child>>);

fn spawner() -> &'static std::sync::Mutex<Sender<Job>> {
    static SPAWNER: OnceLock<std::sync::Mutex<Sender<Job>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name("liken-testenv-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawning the testenv spawner thread");
        std::sync::Mutex::new(tx)
    })
}

/// Arms `cmd` so the child gets SIGKILL when the thread that forks it
/// exits.
fn arm(cmd: &mut Command) {
    let parent = getpid();
    // SAFETY: the closure runs in the forked child before exec and makes
    // only async-signal-safe system calls (prctl, getppid); it allocates
    // nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            // The parent may have died between fork and prctl; then no
            // signal will ever come, so refuse to run.
            if getppid() != Some(parent) {
                return Err(io::Error::other("the test process is gone"));
            }
            Ok(())
        });
    }
}

/// Starts `cmd` in a new process group with SIGKILL as its parent-death
/// signal, forked from the long-lived spawner thread.
pub fn spawn(name: &str, mut cmd: Command) -> io::Result<Proc> {
    cmd.process_group(0);
    arm(&mut cmd);
    let (reply_tx, reply_rx) = channel();
    spawner()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((cmd, reply_tx))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    let child = reply_rx
        .recv()
        .map_err(|_| io::Error::other("the spawner thread is gone"))??;
    Ok(Proc {
        name: name.to_owned(),
        child,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_kills_the_group() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 300 & wait"]);
        let p = spawn("sh", cmd).unwrap();
        let pgid = Pid::from_raw(p.pid() as i32).unwrap();
        assert!(rustix::process::test_kill_process_group(pgid).is_ok());
        drop(p);
        // The shell and its sleep are both gone. The sleep is reparented
        // and reaped by whoever reaps orphans here, which takes a moment on
        // a loaded machine, so poll rather than guess a delay.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while rustix::process::test_kill_process_group(pgid).is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "the process group outlived its guard by 10 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    #[test]
    fn an_armed_child_dies_with_the_thread_that_forked_it() {
        // The kernel rule the spawner thread exists for: fork from a
        // short-lived thread, let it end, and the child gets SIGKILL.
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut cmd = Command::new("sleep");
            cmd.arg("300");
            arm(&mut cmd);
            tx.send(cmd.spawn().unwrap()).unwrap();
        })
        .join()
        .unwrap();
        let mut child = rx.recv().unwrap();
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{status:?}");
    }

    #[test]
    fn spawned_children_outlive_the_test_thread_that_asked() {
        let p = std::thread::spawn(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("300");
            spawn("sleep", cmd).unwrap()
        })
        .join()
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut p = p;
        assert!(p.try_wait().unwrap().is_none(), "still running");
    }
}
