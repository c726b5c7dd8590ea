//! The supervised service (k3s, or a test's stand-in): start it, notice
//! when it ends, restart it after a backoff, stop it on request.
//!
//! The state is an enum and each event a method that moves it; nothing
//! here waits. The loop in [`crate::serve`] feeds it exits (from the
//! reaper) and the clock, and asks it for the next deadline. Starting
//! goes through a [`Spawner`] so tests drive every transition with a
//! fake and made-up instants.

use std::io;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use liken_api::Role;
use liken_api::control::{ServiceState, ServiceStatus};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::backoff::Backoff;
use crate::sys::children::{ExitStatus, SharedTable, lock};

/// What to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// The process limits it starts with (k3s's: [`crate::k3s_host::LIMITS`]).
    pub limits: Vec<crate::sys::process::Limit>,
}

/// k3s's word for a role. This is the one place liken's roles become
/// k3s's subcommands.
pub fn k3s_subcommand(role: Role) -> &'static str {
    match role {
        Role::Leader => "server",
        Role::Follower => "agent",
    }
}

/// Starting and signalling processes.
pub trait Spawner {
    /// Starts the service; returns its pid, already recorded for the
    /// reaper.
    fn spawn(&self, service: &Service) -> io::Result<u32>;
    /// Sends a signal to a pid.
    fn signal(&self, pid: u32, signal: Signal) -> io::Result<()>;
}

/// Real processes, recorded in the reaper's table.
pub struct RealSpawner {
    /// The reaper's table.
    pub table: SharedTable,
    /// Where the service's output is logged besides the console; `None`
    /// leaves its output on init's own stdout and stderr.
    pub log: Option<PathBuf>,
}

/// The PATH a service starts with; init's own environment (whatever the
/// kernel passed) is not handed on.
pub const SERVICE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl Spawner for RealSpawner {
    fn spawn(&self, service: &Service) -> io::Result<u32> {
        // Held across fork and exec: the reaper cannot reap (and so
        // cannot miss) the child before its pid is in the table.
        let mut table = lock(&self.table);
        let mut command = Command::new(&service.program);
        crate::sys::process::unblock_signals_in_child(&mut command);
        crate::sys::process::limits_in_child(&mut command, &service.limits);
        command
            .args(&service.args)
            .env_clear()
            .env("PATH", SERVICE_PATH)
            .env("HOME", "/root")
            .stdin(Stdio::null());
        // One pipe for stdout and stderr keeps their lines in the order
        // the service wrote them.
        let reader = match &self.log {
            Some(_) => {
                let (reader, writer) = std::io::pipe()?;
                command.stdout(writer.try_clone()?).stderr(writer);
                Some(reader)
            }
            None => None,
        };
        let child = command.spawn()?;
        // The parent's copies of the write end went with `command` when
        // spawn returned; drop it so the reader sees EOF at the child's
        // exit.
        drop(command);
        let pid = child.id();
        table.insert(pid);
        if let (Some(reader), Some(log)) = (reader, &self.log)
            && let Err(e) = crate::output::spawn_copier(reader, log)
        {
            crate::console::line(&format!(
                "k3s log: cannot start the output thread ({e}); k3s may stall once the pipe fills"
            ));
        }
        // Dropping a Child neither waits for nor kills it; the reaper
        // owns the exit.
        drop(child);
        Ok(pid)
    }

    fn signal(&self, pid: u32, signal: Signal) -> io::Result<()> {
        let pid = i32::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        nix::sys::signal::kill(Pid::from_raw(pid), signal).map_err(io::Error::from)
    }
}

/// Where the service stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Never started (nothing to run, or not yet).
    NotStarted,
    /// Running since the instant.
    Running {
        /// Its pid.
        pid: u32,
        /// When it started.
        since: Instant,
    },
    /// Ended; starts again at the instant.
    Waiting {
        /// When to start it.
        until: Instant,
    },
    /// Stopped on purpose; stays down.
    Stopped,
}

/// The service and its history.
pub struct Supervisor<S: Spawner> {
    /// What to run, if anything.
    pub service: Option<Service>,
    spawner: S,
    state: State,
    backoff: Backoff,
    restarts: u32,
    /// The service's name in console lines.
    pub name: &'static str,
}

impl<S: Spawner> Supervisor<S> {
    /// A supervisor for `service` (none: nothing to supervise).
    pub fn new(name: &'static str, service: Option<Service>, spawner: S, backoff: Backoff) -> Self {
        Supervisor {
            service,
            spawner,
            state: State::NotStarted,
            backoff,
            restarts: 0,
            name,
        }
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The running pid.
    pub fn running_pid(&self) -> Option<u32> {
        match self.state {
            State::Running { pid, .. } => Some(pid),
            _ => None,
        }
    }

    /// Starts the service now. On failure it is retried after the
    /// backoff, and the message says so.
    pub fn start(&mut self, now: Instant) -> Result<u32, String> {
        let Some(service) = &self.service else {
            return Err(format!("{}: nothing to start", self.name));
        };
        match self.spawner.spawn(service) {
            Ok(pid) => {
                self.state = State::Running { pid, since: now };
                Ok(pid)
            }
            Err(e) => {
                let delay = self.backoff.after_exit(Duration::ZERO);
                self.state = State::Waiting {
                    until: now.checked_add(delay).unwrap_or(now),
                };
                Err(format!(
                    "{}: cannot start {}: {e}; retrying in {} s (check that the image holds a working {})",
                    self.name,
                    service.program.display(),
                    delay.as_secs(),
                    self.name,
                ))
            }
        }
    }

    /// Holds the first start until `until`; the loop's [`Supervisor::tick`]
    /// starts it then.
    pub fn hold(&mut self, until: Instant) {
        if self.service.is_some() {
            self.state = State::Waiting { until };
        }
    }

    /// A child ended. Returns the console line when it was the service.
    pub fn on_exit(&mut self, pid: u32, status: &ExitStatus, now: Instant) -> Option<String> {
        let State::Running {
            pid: running,
            since,
        } = self.state
        else {
            return None;
        };
        if pid != running {
            return None;
        }
        let ran = now.saturating_duration_since(since);
        let delay = self.backoff.after_exit(ran);
        self.state = State::Waiting {
            until: now.checked_add(delay).unwrap_or(now),
        };
        Some(format!(
            "{}: {status} after {:.1} s; restarting in {} s",
            self.name,
            ran.as_secs_f64(),
            delay.as_secs()
        ))
    }

    /// When the loop must wake next, if ever.
    pub fn deadline(&self) -> Option<Instant> {
        match self.state {
            State::Waiting { until } => Some(until),
            _ => None,
        }
    }

    /// Restarts the service if its backoff is over; the result of the
    /// start when one was made.
    pub fn tick(&mut self, now: Instant) -> Option<Result<u32, String>> {
        match self.state {
            State::Waiting { until } if now >= until => {
                self.restarts = self.restarts.saturating_add(1);
                Some(self.start(now))
            }
            _ => None,
        }
    }

    /// Sends `signal` to the running service.
    pub fn signal(&self, signal: Signal) -> io::Result<()> {
        match self.running_pid() {
            Some(pid) => self.spawner.signal(pid, signal),
            None => Ok(()),
        }
    }

    /// Marks the service stopped on purpose; it stays down.
    pub fn mark_stopped(&mut self) {
        self.state = State::Stopped;
    }

    /// Forgets the failure history (after a requested restart).
    pub fn reset_backoff(&mut self) {
        self.backoff.reset();
    }

    /// The protocol's view.
    pub fn status(&self) -> ServiceStatus {
        let (state, pid) = match self.state {
            State::NotStarted => (ServiceState::NotStarted, None),
            State::Running { pid, .. } => (ServiceState::Running, Some(pid)),
            State::Waiting { .. } => (ServiceState::Backoff, None),
            State::Stopped => (ServiceState::Stopped, None),
        };
        ServiceStatus {
            state,
            pid,
            restarts: self.restarts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[derive(Default)]
    struct FakeSpawner {
        next: RefCell<u32>,
        fail: bool,
        signals: RefCell<Vec<(u32, Signal)>>,
    }

    impl Spawner for &FakeSpawner {
        fn spawn(&self, _: &Service) -> io::Result<u32> {
            if self.fail {
                return Err(io::ErrorKind::NotFound.into());
            }
            let mut n = self.next.borrow_mut();
            *n += 1;
            Ok(100 + *n)
        }
        fn signal(&self, pid: u32, signal: Signal) -> io::Result<()> {
            self.signals.borrow_mut().push((pid, signal));
            Ok(())
        }
    }

    fn service() -> Option<Service> {
        Some(Service {
            program: "/usr/bin/k3s".into(),
            args: vec![k3s_subcommand(Role::Leader).into()],
            limits: Vec::new(),
        })
    }

    #[test]
    fn restarts_with_backoff() {
        let fake = FakeSpawner::default();
        let mut s = Supervisor::new("k3s", service(), &fake, Backoff::default());
        let t0 = Instant::now();
        assert_eq!(s.start(t0), Ok(101));
        assert_eq!(s.status().state, ServiceState::Running);
        // Another pid's exit is not the service's.
        assert_eq!(s.on_exit(7, &ExitStatus::Code(0), t0), None);
        let line = s
            .on_exit(101, &ExitStatus::Code(3), t0 + Duration::from_millis(500))
            .unwrap();
        assert_eq!(
            line,
            "k3s: exited with status 3 after 0.5 s; restarting in 1 s"
        );
        let due = s.deadline().unwrap();
        assert_eq!(due, t0 + Duration::from_millis(1500));
        assert_eq!(s.tick(due - Duration::from_millis(1)), None);
        assert_eq!(s.tick(due), Some(Ok(102)));
        let line = s
            .on_exit(102, &ExitStatus::Signal("SIGKILL".into()), due)
            .unwrap();
        assert!(line.ends_with("restarting in 2 s"), "{line}");
        assert_eq!(s.status().restarts, 1);
        assert_eq!(s.status().state, ServiceState::Backoff);
    }

    #[test]
    fn stops_and_signals() {
        let fake = FakeSpawner::default();
        let mut s = Supervisor::new("k3s", service(), &fake, Backoff::default());
        let t0 = Instant::now();
        s.start(t0).unwrap();
        s.signal(Signal::SIGTERM).unwrap();
        assert_eq!(*fake.signals.borrow(), vec![(101, Signal::SIGTERM)]);
        s.mark_stopped();
        assert_eq!(s.deadline(), None);
        assert_eq!(s.tick(t0 + Duration::from_secs(100)), None);
        assert_eq!(s.status().state, ServiceState::Stopped);
    }

    #[test]
    fn a_failed_start_is_retried() {
        let fake = FakeSpawner {
            fail: true,
            ..Default::default()
        };
        let mut s = Supervisor::new("k3s", service(), &fake, Backoff::default());
        let t0 = Instant::now();
        let e = s.start(t0).unwrap_err();
        assert!(e.contains("retrying in 1 s"), "{e}");
        assert_eq!(s.deadline(), Some(t0 + Duration::from_secs(1)));
        let mut none = Supervisor::new("k3s", None, &fake, Backoff::default());
        assert!(none.start(t0).is_err());
        assert_eq!(none.deadline(), None);
    }

    #[test]
    fn roles_become_k3s_subcommands() {
        assert_eq!(k3s_subcommand(Role::Leader), "server");
        assert_eq!(k3s_subcommand(Role::Follower), "agent");
    }
}
