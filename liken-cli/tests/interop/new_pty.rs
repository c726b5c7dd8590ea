//! `liken new` as a person uses it: a conversation through a real
//! pseudo-terminal, each answer typed only after its question appears.
//! Also the same questions answered from a pipe, as a script would.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use liken_api::{Cluster, Machine, decode};
use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};

use crate::support::{Scratch, liken};

/// The terminal's master side and everything the program printed so far.
pub(crate) struct Terminal {
    master: File,
    output: mpsc::Receiver<Vec<u8>>,
    pub(crate) seen: String,
    matched: usize,
}

impl Terminal {
    /// Runs `cmd` with a pseudo-terminal as its standard input, output
    /// and error; returns the terminal, the child and the thread that
    /// pumps its output (it ends once the child has exited).
    pub(crate) fn spawn(
        mut cmd: std::process::Command,
    ) -> (Terminal, std::process::Child, std::thread::JoinHandle<()>) {
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let slave = File::options()
            .read(true)
            .write(true)
            .custom_flags(rustix::fs::OFlags::NOCTTY.bits() as i32)
            .open(name.to_str().unwrap())
            .unwrap();
        let child = cmd
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave))
            .spawn()
            .unwrap();
        let master = File::from(master);
        let mut reader = master.try_clone().unwrap();
        let (tx, rx) = mpsc::channel();
        let pump = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once the program has exited and the slave is closed.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        let t = Terminal {
            master,
            output: rx,
            seen: String::new(),
            matched: 0,
        };
        (t, child, pump)
    }

    /// Waits until `text` appears after the last match.
    pub(crate) fn expect(&mut self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(at) = self.seen[self.matched..].find(text) {
                self.matched += at + text.len();
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(chunk) => self.seen.push_str(&String::from_utf8_lossy(&chunk)),
                Err(_) => panic!(
                    "waited for {text:?}; the terminal shows:\n{}",
                    &self.seen[self.matched..]
                ),
            }
        }
    }

    /// Types a line.
    pub(crate) fn answer(&mut self, line: &str) {
        self.master.write_all(line.as_bytes()).unwrap();
        self.master.write_all(b"\n").unwrap();
    }
}

fn read_manifests(dir: &Path) -> (Cluster, Vec<Machine>) {
    let text = std::fs::read_to_string(dir.join("cluster.yaml")).unwrap();
    let cluster = decode::strict::<Cluster>(&text, "cluster.yaml").unwrap();
    let mut machines = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(dir.join("machines"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for p in names {
        let text = std::fs::read_to_string(&p).unwrap();
        machines.push(decode::strict::<Machine>(&text, &p.display().to_string()).unwrap());
    }
    (cluster, machines)
}

#[test]
fn new_holds_a_conversation_through_a_pty() {
    let s = Scratch::new("new-pty");
    let dir = s.path().join("lab");

    let (mut t, mut child, pump) =
        Terminal::spawn(liken([std::ffi::OsStr::new("new"), dir.as_os_str()]));

    t.expect("Cluster name [lab]: ");
    t.answer("home");
    t.expect("Machine 1 name [node-1]: ");
    t.answer("");
    t.expect("Role of node-1, leader or follower [leader]: ");
    t.answer("leader");
    t.expect("Machine 2 name (empty when done): ");
    t.answer("node-2");
    t.expect("Role of node-2, leader or follower [follower]: ");
    t.answer("sometimes");
    t.expect("\"sometimes\" is neither leader nor follower; try again");
    t.expect("Role of node-2, leader or follower [follower]: ");
    t.answer("");
    t.expect("Machine 3 name (empty when done): ");
    t.answer("");
    t.expect("API server endpoint, the URL machines join through [https://node-1:6443]: ");
    t.answer("https://192.168.1.5:6443");
    t.expect("wrote ");
    t.expect("next: ");
    let status = child.wait().unwrap();
    assert!(status.success(), "liken new exited {status}:\n{}", t.seen);
    drop(t);
    pump.join().unwrap();

    let (cluster, machines) = read_manifests(&dir);
    assert_eq!(cluster.metadata.name, "home");
    assert_eq!(cluster.spec.endpoint, "https://192.168.1.5:6443");
    assert_eq!(cluster.spec.leaders, ["node-1"]);
    let names: Vec<_> = machines.iter().map(|m| m.metadata.name.as_str()).collect();
    assert_eq!(names, ["node-1", "node-2"]);
}

#[test]
fn new_reads_answers_from_a_pipe() {
    let s = Scratch::new("new-pipe");
    let dir = s.path().join("edge");
    let mut child = liken([std::ffi::OsStr::new("new"), dir.as_os_str()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Defaults for the name and the first machine, two more machines (one
    // of them a second leader), then the default endpoint.
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"\n\n\nnode-2\nleader\nnode-3\n\n\n\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (cluster, machines) = read_manifests(&dir);
    assert_eq!(cluster.metadata.name, "edge");
    assert_eq!(cluster.spec.endpoint, "https://node-1:6443");
    assert_eq!(cluster.spec.leaders, ["node-1", "node-2"]);
    assert_eq!(machines.len(), 3);
}
