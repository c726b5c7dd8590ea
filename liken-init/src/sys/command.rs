//! Running a program to its end: mke2fs formatting the data partition,
//! `k3s kubectl` asking k3s whether it is healthy.
//!
//! init reaps every child itself (waitpid(-1) in [`crate::reaper`]), so
//! std's `Child::wait` would race the reaper for the exit status. A
//! command therefore registers its pid as a *waiter* in the reaper's
//! table, under the table lock across fork and exec as the supervisor
//! does, and the reaper hands the exit to it. A command that overruns
//! its timeout is killed.
//!
//! The seam is the [`Runner`] trait: the real one needs the reaper
//! thread running (tests/children.rs drives it), and [`FakeRunner`]
//! answers with scripted results and records what was run.

use std::io::{self, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::children::{ExitStatus, SharedTable, lock};

/// The most output kept from a command; the rest is read and dropped.
pub const OUTPUT_LIMIT: usize = 64 * 1024;

/// A program to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandSpec {
    /// The program, as seen from `root` when one is given.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// A directory to chroot into before exec (the mounted system image
    /// before init has switched to it).
    pub root: Option<PathBuf>,
    /// How long it may take before it is killed.
    pub timeout: Duration,
}

impl CommandSpec {
    /// `program args…`, in init's root, with `timeout`.
    pub fn new(program: impl Into<PathBuf>, args: &[&str], timeout: Duration) -> CommandSpec {
        CommandSpec {
            program: program.into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            root: None,
            timeout,
        }
    }

    /// The command line, for messages.
    pub fn display(&self) -> String {
        let mut s = self.program.display().to_string();
        for a in &self.args {
            s.push(' ');
            s.push_str(a);
        }
        s
    }
}

/// How a command ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandOutput {
    /// Its exit; `None` when it overran its timeout and was killed.
    pub status: Option<ExitStatus>,
    /// What it printed on stdout, up to [`OUTPUT_LIMIT`] bytes: the
    /// answer, kept apart from stderr so a warning cannot be read as one.
    pub stdout: String,
    /// What it printed on stderr, up to [`OUTPUT_LIMIT`] bytes: where
    /// programs say what went wrong.
    pub stderr: String,
}

impl CommandOutput {
    /// Whether it exited with status 0.
    pub fn success(&self) -> bool {
        self.status == Some(ExitStatus::Code(0))
    }

    /// The last line of its stderr (where programs put their error),
    /// else of its stdout, for a console message.
    pub fn last_line(&self) -> &str {
        fn last(text: &str) -> Option<&str> {
            text.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::trim)
        }
        last(&self.stderr)
            .or_else(|| last(&self.stdout))
            .unwrap_or("")
    }
}

/// Running commands.
pub trait Runner {
    /// Runs `spec` to its end (or its timeout). An error means it could
    /// not be started.
    fn run(&self, spec: &CommandSpec) -> io::Result<CommandOutput>;
}

/// Real processes, reaped through the reaper's table.
pub struct RealRunner {
    /// The reaper's table.
    pub table: SharedTable,
}

/// The PATH commands start with.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl Runner for RealRunner {
    fn run(&self, spec: &CommandSpec) -> io::Result<CommandOutput> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let mut command = Command::new(&spec.program);
        crate::sys::process::unblock_signals_in_child(&mut command);
        if let Some(root) = &spec.root {
            crate::sys::process::chroot_in_child(&mut command, root)?;
        }
        let (out_reader, out_writer) = std::io::pipe()?;
        let (err_reader, err_writer) = std::io::pipe()?;
        command
            .args(&spec.args)
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", "/root")
            .stdin(Stdio::null())
            .stdout(out_writer)
            .stderr(err_writer);
        let pid = {
            // Held across fork and exec, so the reaper cannot take the
            // exit before the waiter is recorded.
            let mut table = lock(&self.table);
            let child = command.spawn()?;
            let pid = child.id();
            table.insert_waiter(pid, tx);
            // Neither waits nor kills: the reaper owns the exit.
            drop(child);
            pid
        };
        // The write ends went with `command`; the reader sees EOF when
        // the child (and anything it left holding the pipe) is gone.
        drop(command);
        let stdout = read_in_thread(out_reader)?;
        let stderr = read_in_thread(err_reader)?;
        let status = match rx.recv_timeout(spec.timeout) {
            Ok(status) => Some(status),
            Err(_) => {
                if let Ok(raw) = i32::try_from(pid) {
                    let _ = nix::sys::signal::kill(Pid::from_raw(raw), Signal::SIGKILL);
                }
                // Its exit still comes through the reaper; wait for it so
                // the waiter does not linger in the table.
                let _ = rx.recv_timeout(Duration::from_secs(5));
                None
            }
        };
        // A grandchild keeping a pipe open must not hang init.
        let stdout = stdout
            .recv_timeout(Duration::from_secs(2))
            .unwrap_or_default();
        let stderr = stderr
            .recv_timeout(Duration::from_secs(1))
            .unwrap_or_default();
        Ok(CommandOutput {
            status,
            stdout,
            stderr,
        })
    }
}

/// Reads a pipe to its end (bounded) on a thread of its own, so a child
/// that fills one pipe while init waits on the other cannot stall.
fn read_in_thread(reader: std::io::PipeReader) -> io::Result<crossbeam_channel::Receiver<String>> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::Builder::new()
        .name("command-output".into())
        .spawn(move || {
            let _ = tx.send(read_bounded(reader));
        })?;
    Ok(rx)
}

fn read_bounded(mut reader: impl Read) -> String {
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let room = OUTPUT_LIMIT.saturating_sub(kept.len());
                if let Some(part) = buf.get(..n.min(room)) {
                    kept.extend_from_slice(part);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

/// A scripted answer: commands whose program path ends with `program`
/// get `result`.
#[derive(Clone, Debug)]
pub struct Script {
    /// The program's file name (`mke2fs`, `k3s`).
    pub program: String,
    /// A word its arguments must hold for this answer (`""`: any).
    pub arg: String,
    /// What it returns; `Err` makes the start fail.
    pub result: Result<CommandOutput, io::ErrorKind>,
}

/// Answers from a script and records every command.
#[derive(Clone, Default)]
pub struct FakeRunner {
    /// Every command run, in order.
    pub calls: Arc<Mutex<Vec<CommandSpec>>>,
    /// The answers, first match wins; no match is a start failure
    /// (NotFound).
    pub script: Arc<Mutex<Vec<Script>>>,
}

impl FakeRunner {
    /// The commands so far.
    pub fn calls(&self) -> Vec<CommandSpec> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Adds an answer: `program` (with `arg` among its arguments, or any
    /// when empty) exits with `code` printing `stdout` (and nothing on
    /// stderr).
    pub fn answer(&self, program: &str, arg: &str, code: i32, stdout: &str) {
        self.answer_with(program, arg, code, stdout, "");
    }

    /// As [`FakeRunner::answer`], with `stderr` too.
    pub fn answer_with(&self, program: &str, arg: &str, code: i32, stdout: &str, stderr: &str) {
        self.script
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                0,
                Script {
                    program: program.to_owned(),
                    arg: arg.to_owned(),
                    result: Ok(CommandOutput {
                        status: Some(ExitStatus::Code(code)),
                        stdout: stdout.to_owned(),
                        stderr: stderr.to_owned(),
                    }),
                },
            );
    }
}

impl Runner for FakeRunner {
    fn run(&self, spec: &CommandSpec) -> io::Result<CommandOutput> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(spec.clone());
        let script = self
            .script
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let found = script.iter().find(|s| {
            spec.program.ends_with(&s.program) && (s.arg.is_empty() || spec.args.contains(&s.arg))
        });
        match found {
            Some(s) => s.result.clone().map_err(io::Error::from),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fake_follows_its_script() {
        let fake = FakeRunner::default();
        fake.answer("k3s", "", 1, "not yet\n");
        fake.answer("k3s", "/readyz", 0, "ok\n");
        let ready = CommandSpec::new(
            "/usr/bin/k3s",
            &["kubectl", "get", "--raw", "/readyz"],
            Duration::from_secs(5),
        );
        let r = fake.run(&ready).unwrap();
        assert!(r.success());
        assert_eq!(r.last_line(), "ok");
        let node = CommandSpec::new("/usr/bin/k3s", &["kubectl", "get", "node"], Duration::ZERO);
        assert!(!fake.run(&node).unwrap().success());
        assert!(
            fake.run(&CommandSpec::new("/x", &[], Duration::ZERO))
                .is_err()
        );
        assert_eq!(fake.calls().len(), 3);
        assert_eq!(ready.display(), "/usr/bin/k3s kubectl get --raw /readyz");
    }

    #[test]
    fn output_is_bounded() {
        let big = vec![b'x'; OUTPUT_LIMIT + 10];
        assert_eq!(read_bounded(&big[..]).len(), OUTPUT_LIMIT);
        let mut out = CommandOutput {
            status: None,
            stdout: "a\nlast words\n\n".into(),
            stderr: String::new(),
        };
        assert_eq!(out.last_line(), "last words");
        assert!(!out.success());
        out.stderr = "error: it broke\n".into();
        assert_eq!(out.last_line(), "error: it broke");
    }
}
