//! Shared pieces: the binary, a bundled channel and a running `liken
//! serve` whose access log the test can read. Scratch directories are
//! liken-testenv's (`scratch`), re-exported here.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use liken_testenv::scratch::TempDir;
use liken_testenv::scratch::bytes;

pub fn liken() -> Command {
    Command::new(env!("CARGO_BIN_EXE_liken"))
}

/// Runs liken with `args`; returns (success, stdout, stderr).
pub fn run(args: &[&str]) -> (bool, String, String) {
    let out = liken().args(args).stdin(Stdio::null()).output().unwrap();
    text(out)
}

pub fn text(out: Output) -> (bool, String, String) {
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The artifact files of a bundle, in the release directory.
pub const FILES: [&str; 9] = [
    "vmlinuz",
    "liken.sqfs",
    "boot.cpio",
    "microcode.cpio",
    "liken",
    "systemd-boot.efi",
    "grub-boot.img",
    "grub-core.img",
    "licenses.md",
];

/// Bundle's file arguments for the inputs in `dir` (named as [`FILES`]):
/// microcode by its flag, the other eight in order.
pub fn input_args(dir: &Path) -> Vec<String> {
    let mut args = Vec::new();
    for name in FILES {
        let p = dir.join(name).display().to_string();
        if name == "microcode.cpio" {
            args.splice(0..0, ["-microcode".to_owned(), p]);
        } else {
            args.push(p);
        }
    }
    args
}

/// Bundles a release of nine inputs into `<root>/channel`; the system
/// image has `system_size` bytes (its artifact is larger: bundle appends
/// the dm-verity tree). Returns the channel directory.
pub fn bundle(root: &Path, version: &str, system_size: usize) -> PathBuf {
    bundle_with(root, version, system_size, &[]).0
}

/// [`bundle`] with `flags` before the inputs; returns the channel
/// directory and bundle's output.
pub fn bundle_with(
    root: &Path,
    version: &str,
    system_size: usize,
    flags: &[&str],
) -> (PathBuf, String) {
    let inputs = root.join(format!("inputs-{version}"));
    std::fs::create_dir_all(&inputs).unwrap();
    let mut args: Vec<String> = vec!["bundle".into(), "-slot-size".into(), "1Gi".into()];
    args.extend(flags.iter().map(|f| f.to_string()));
    for (i, name) in FILES.iter().enumerate() {
        let p = inputs.join(name);
        let len = if i == 1 { system_size } else { 1000 + 777 * i };
        std::fs::write(&p, bytes(len, i as u64 + version.len() as u64 + 7)).unwrap();
    }
    args.extend(input_args(&inputs));
    let channel = root.join("channel");
    args.push(channel.display().to_string());
    args.push(version.into());
    args.push("linux=6.1.0-28".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, out, err) = run(&args);
    assert!(ok, "bundle failed: {out}{err}");
    (channel, out)
}

/// A key pair made by `liken keygen` in `<root>/<name>`: (release.key,
/// release.pub, the key id).
pub fn keygen(root: &Path, name: &str) -> (PathBuf, PathBuf, String) {
    let dir = root.join(name);
    let (ok, out, err) = run(&["keygen", &dir.display().to_string()]);
    assert!(ok, "keygen failed: {out}{err}");
    let id = out
        .strip_prefix("key ")
        .and_then(|r| r.split(':').next())
        .expect("keygen prints the key id first")
        .to_owned();
    (dir.join("release.key"), dir.join("release.pub"), id)
}

/// A running `liken serve` on a loopback port.
pub struct Served {
    child: Child,
    pub url: String,
    pub addr: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Served {
    pub fn start(dir: &Path) -> Served {
        let mut child = liken()
            .args(["serve", &dir.display().to_string(), "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let url = first
            .split(" on ")
            .nth(1)
            .expect("serve prints its address")
            .trim_end_matches('/')
            .to_owned();
        let addr = url.trim_start_matches("http://").to_owned();
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Served {
            child,
            url,
            addr,
            log,
        }
    }

    /// Waits until a log line satisfies `pred`, then returns it.
    pub fn wait_log(&self, pred: impl Fn(&str) -> bool) -> String {
        self.wait_log_within(Duration::from_secs(10), pred)
    }

    /// [`Served::wait_log`] with a deadline of `within`.
    pub fn wait_log_within(&self, within: Duration, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + within;
        loop {
            if let Some(l) = self.log.lock().unwrap().iter().find(|l| pred(l)) {
                return l.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no such log line: {:?}",
                self.log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs curl with `args`; returns (stdout bytes, stderr text).
pub fn curl(args: &[&str]) -> (Vec<u8>, String) {
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl is installed by scripts/setup.sh");
    (
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The HTTP status curl saw.
pub fn status(args: &[&str]) -> String {
    let mut all = vec!["-o", "/dev/null", "-w", "%{http_code}"];
    all.extend_from_slice(args);
    String::from_utf8(curl(&all).0).unwrap()
}

/// Every file under `dir`, relative, sorted.
pub fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    if dir.exists() {
        walk(dir, dir, &mut out);
    }
    out.sort();
    out
}

pub fn sha256_hex(data: &[u8]) -> String {
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(data)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}
