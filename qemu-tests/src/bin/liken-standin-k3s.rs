//! liken-standin-k3s: a test-only stand-in that the QEMU tests boot
//! where k3s would be (/usr/bin/k3s in a test-only cpio), so init's
//! supervision, restart backoff and control socket are exercised
//! without k3s. It is built statically by `make qemu-images` and never
//! goes into an image for people.
//!
//! What it does is chosen on the kernel command line with
//! `liken.standin=<instruction>`:
//!
//! - `run` (the default): print the arguments it was started with,
//!   init's resident memory and the boot record init published, what
//!   the machine looks like from a service's side (below), then init's
//!   resident memory again once its image-modules worker has ended
//!   (`init settled VmRSS: ...`), then stay up.
//! - `exit:<code>`: stay up half a second, then exit with `<code>`
//!   (every run, so init's backoff shows).
//! - `reboot` or `poweroff`: ask init for its status and then for a
//!   reboot (or poweroff) over the control socket, as the machine
//!   operator will, and print both answers.
//! - `write-release:<dir>`: do what the machine operator does with a
//!   downloaded release: copy `<dir>` (release.yaml and every artifact
//!   it names) into `/var/lib/liken/releases/<version>/` unless it is
//!   already there (`<dir>` may be a device, `/dev/vdb`: a FAT disk
//!   holding the release at its root, which the stand-in mounts
//!   read-only first, so a QEMU test can hand a release in on a second
//!   drive), take the SHA-256 of its release.yaml (the digest the
//!   operator checks against the catalog), ask init to write it into the
//!   inactive slot, print the answer (`release written {json}` or
//!   `write-release answered {json}`), and on success ask for a reboot.
//!   It writes nothing when the boot record says this release is already
//!   running, or when this machine's /var holds the marker of an earlier
//!   successful write of it (`/var/lib/liken-standin/written-<version>`):
//!   the new slot's entry carries this instruction on, and the release
//!   must not be written back and forth forever.
//! - `net:<targets>`: ask init for its status and print the answer, then
//!   print what a program on the machine sees of the network whenever it
//!   changes and send a datagram to each target every second
//!   (`qemu-tests/src/standin/net.rs`).
//!
//! What a service sees, printed by `run` as read from the kernel's own
//! files, not from anything init reports: the hostname
//! (`/proc/sys/kernel/hostname`), the IPv4 route table
//! (`/proc/net/route`, one `route` line each), `/etc/resolv.conf` line
//! by line (and where it links, on a system image whose /etc is
//! read-only), and the value of each sysctl named by
//! `liken.standin-sysctls=<key>,<key>` read from /proc/sys. With
//! `liken.standin-send=<ip>:<port>` it then sends one UDP datagram,
//! `liken-standin-k3s on <hostname>`, to that address (under QEMU's user
//! network 10.0.2.2 is the host), and prints that it sent it.
//!
//! Whatever the instruction, it first prints the VERSION_ID of the root
//! it runs from (`/etc/os-release`, which the system image carries and
//! an initramfs does not), so a test sees which image a slot booted.
//!
//! Every line it prints starts with `liken-standin-k3s:` so the console
//! shows plainly that this is not k3s.

use std::os::unix::net::UnixStream;
use std::time::Duration;

use std::path::{Path, PathBuf};

use liken_api::control::{
    RELEASES_DIR, Request, Response, SOCKET_PATH, WriteRelease, read_frame, write_frame,
};
use liken_api::{BootRecord, Release, decode};

#[path = "../standin/net.rs"]
mod net;

/// Where the stand-in remembers releases it had written.
const MARKER_DIR: &str = "/var/lib/liken-standin";

fn say(text: &str) {
    println!("liken-standin-k3s: {text}");
}

/// The value of `<key>=` on the kernel command line.
fn cmdline_value(key: &str) -> Option<String> {
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let prefix = format!("{key}=");
    cmdline
        .split_whitespace()
        .find_map(|a| a.strip_prefix(prefix.as_str()))
        .map(str::to_owned)
}

fn instruction() -> String {
    cmdline_value("liken.standin").unwrap_or_else(|| "run".to_owned())
}

/// An address from /proc/net/route: eight hex digits, the bytes in
/// the kernel's (network) order read as a little-endian number.
fn route_addr(hex: &str) -> Option<std::net::Ipv4Addr> {
    let n = u32::from_str_radix(hex, 16).ok()?;
    Some(std::net::Ipv4Addr::from(n.to_le_bytes()))
}

/// One `route <dest>/<len> [via <gateway>] dev <ifname>` line per IPv4
/// route in /proc/net/route.
fn routes() -> Vec<String> {
    let Ok(table) = std::fs::read_to_string("/proc/net/route") else {
        return vec!["cannot read /proc/net/route".to_owned()];
    };
    // Iface Destination Gateway Flags RefCnt Use Metric Mask ...
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (dev, dest, gw, mask) = (f.first()?, f.get(1)?, f.get(2)?, f.get(7)?);
            let len = u32::from(route_addr(mask)?).count_ones();
            let gw = route_addr(gw)?;
            let via = if gw.is_unspecified() {
                String::new()
            } else {
                format!(" via {gw}")
            };
            Some(format!("route {}/{len}{via} dev {dev}", route_addr(dest)?))
        })
        .collect()
}

/// What a service on this machine sees of its network, name and
/// kernel parameters (the module doc lists the lines).
fn report_system() {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|e| format!("(unreadable: {e})"));
    say(&format!("hostname {hostname}"));
    for r in routes() {
        say(&r);
    }
    let resolv = Path::new("/etc/resolv.conf");
    if let Ok(target) = std::fs::read_link(resolv) {
        say(&format!("/etc/resolv.conf links to {}", target.display()));
    }
    match std::fs::read_to_string(resolv) {
        Ok(text) => text.lines().for_each(|l| say(&format!("resolv.conf: {l}"))),
        Err(e) => say(&format!("cannot read /etc/resolv.conf: {e}")),
    }
    for key in cmdline_value("liken.standin-sysctls")
        .unwrap_or_default()
        .split(',')
        .filter(|k| !k.is_empty())
    {
        let path = Path::new("/proc/sys").join(key.replace('.', "/"));
        match std::fs::read_to_string(&path) {
            Ok(v) => say(&format!("sysctl {key} = {}", v.trim())),
            Err(e) => say(&format!("sysctl {key} cannot be read: {e}")),
        }
    }
    if let Some(to) = cmdline_value("liken.standin-send") {
        let sent = std::net::UdpSocket::bind("0.0.0.0:0")
            .and_then(|s| s.send_to(format!("liken-standin-k3s on {hostname}").as_bytes(), &to));
        match sent {
            Ok(n) => say(&format!("sent a {n}-byte datagram to {to}")),
            Err(e) => say(&format!("cannot send a datagram to {to}: {e}")),
        }
    }
}

fn ask(request: &Request) -> Result<Response, String> {
    let mut s =
        UnixStream::connect(SOCKET_PATH).map_err(|e| format!("connect {SOCKET_PATH}: {e}"))?;
    write_frame(&mut s, request).map_err(|e| e.to_string())?;
    read_frame(&mut s).map_err(|e| e.to_string())
}

fn say_answer(what: &str, r: &Response) {
    say(&format!(
        "{what} {}",
        serde_json::to_string(r).unwrap_or_default()
    ));
}

/// Reads the release document in `from`: the document and its bytes.
fn read_release(from: &Path) -> Result<(Release, Vec<u8>), String> {
    let yaml_path = from.join(liken_api::release::RELEASE_FILE);
    let bytes = std::fs::read(&yaml_path).map_err(|e| format!("{}: {e}", yaml_path.display()))?;
    let text = String::from_utf8(bytes.clone()).map_err(|e| e.to_string())?;
    let release: Release =
        decode::strict(&text, &yaml_path.display().to_string()).map_err(|e| e.to_string())?;
    Ok((release, bytes))
}

/// Copies release.yaml and the artifacts it names from `from` into the
/// releases directory, as a download would leave them; returns the
/// release directory.
fn stage_release(from: &Path, release: &Release, bytes: &[u8]) -> Result<PathBuf, String> {
    let dir = Path::new(RELEASES_DIR).join(release.version.to_string());
    if from != dir {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for a in &release.artifacts {
            let (src, dst) = (from.join(a.file.as_str()), dir.join(a.file.as_str()));
            std::fs::copy(&src, &dst).map_err(|e| format!("copy {}: {e}", src.display()))?;
        }
        std::fs::write(dir.join(liken_api::release::RELEASE_FILE), bytes)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        say(&format!(
            "copied release {} into {}",
            release.version,
            dir.display()
        ));
    }
    Ok(dir)
}

/// Mounts a release disk read-only and returns where.
fn mount_source(device: &str) -> Result<PathBuf, String> {
    let at = PathBuf::from("/run/liken-standin/release");
    std::fs::create_dir_all(&at).map_err(|e| format!("{}: {e}", at.display()))?;
    rustix::mount::mount(device, &at, "vfat", rustix::mount::MountFlags::RDONLY, None)
        .map_err(|e| format!("mount {device} (vfat, read-only): {e}"))?;
    Ok(at)
}

fn write_release(from: &str) {
    let source = if from.starts_with("/dev/") {
        match mount_source(from) {
            Ok(at) => at,
            Err(e) => return say(&format!("cannot read the release disk: {e}")),
        }
    } else {
        PathBuf::from(from)
    };
    let (release, yaml) = match read_release(&source) {
        Ok(r) => r,
        Err(e) => return say(&format!("cannot read the release in {from}: {e}")),
    };
    let version = release.version.to_string();
    let running = std::fs::read_to_string("/run/liken/boot.json")
        .ok()
        .and_then(|t| serde_json::from_str::<BootRecord>(&t).ok())
        .and_then(|r| r.version);
    let marker = Path::new(MARKER_DIR).join(format!("written-{version}"));
    if running.as_ref() == Some(&release.version) || marker.exists() {
        return say(&format!(
            "release {version} is already running or was written before; nothing to write"
        ));
    }
    let dir = match stage_release(&source, &release, &yaml) {
        Ok(dir) => dir,
        Err(e) => return say(&format!("cannot stage the release from {from}: {e}")),
    };
    say(&format!("asking init to write release {version}"));
    let request = Request::WriteRelease(WriteRelease {
        directory: dir.display().to_string(),
        release_sha256: liken_api::hash::sha256(&yaml),
    });
    match ask(&request) {
        Ok(r @ Response::ReleaseWritten(_)) => {
            say_answer("release written", &r);
            if let Err(e) =
                std::fs::create_dir_all(MARKER_DIR).and_then(|()| std::fs::write(&marker, b""))
            {
                say(&format!("cannot write {}: {e}", marker.display()));
            }
            say("asking for reboot");
            match ask(&Request::Reboot) {
                Ok(r) => say_answer("reboot answered", &r),
                Err(e) => say(&format!("reboot request failed: {e}")),
            }
        }
        Ok(r) => say_answer("write-release answered", &r),
        Err(e) => say(&format!("write-release request failed: {e}")),
    }
}

/// `os-release VERSION_ID=<id>` from the root's /etc/os-release.
fn os_release_version() -> String {
    match std::fs::read_to_string("/etc/os-release") {
        Ok(text) => match text.lines().find_map(|l| l.strip_prefix("VERSION_ID=")) {
            Some(id) => format!("os-release VERSION_ID={}", id.trim_matches('"')),
            None => "os-release has no VERSION_ID".to_owned(),
        },
        Err(e) => format!("no /etc/os-release: {e}"),
    }
}

/// init's `VmRSS: <n> kB` line from /proc/1/status, spaces collapsed.
fn init_rss() -> Option<String> {
    let status = std::fs::read_to_string("/proc/1/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(line.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Waits until init has no thread named `image-modules` (the worker
/// liken-init starts after a switch root); false when it outlives
/// `limit`.
fn wait_for_worker(limit: Duration) -> bool {
    let start = std::time::Instant::now();
    loop {
        let running = std::fs::read_dir("/proc/1/task")
            .map(|tasks| {
                tasks.filter_map(|t| t.ok()).any(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.trim() == "image-modules")
                })
            })
            .unwrap_or(false);
        if !running {
            return true;
        }
        if start.elapsed() > limit {
            say("init's image-modules worker is still running");
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn stay_up() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = instruction();
    say(&format!(
        "started as k3s {} (instruction {what})",
        args.join(" ")
    ));
    say(&os_release_version());
    match what.split_once(':') {
        Some(("exit", code)) => {
            let code: i32 = code.parse().unwrap_or(1);
            std::thread::sleep(Duration::from_millis(500));
            say(&format!("exiting with status {code}"));
            std::process::exit(code);
        }
        Some(("net", targets)) => {
            match ask(&Request::Status) {
                Ok(r) => say_answer("status", &r),
                Err(e) => say(&format!("status request failed: {e}")),
            }
            net::watch(targets, &say)
        }
        Some(("write-release", dir)) => {
            write_release(dir);
            stay_up();
        }
        _ if what == "reboot" || what == "poweroff" => {
            match ask(&Request::Status) {
                Ok(r) => say(&format!(
                    "status {}",
                    serde_json::to_string(&r).unwrap_or_default()
                )),
                Err(e) => say(&format!("status request failed: {e}")),
            }
            let request = if what == "reboot" {
                Request::Reboot
            } else {
                Request::Poweroff
            };
            say(&format!("asking for {what}"));
            match ask(&request) {
                Ok(r) => say(&format!(
                    "{what} answered {}",
                    serde_json::to_string(&r).unwrap_or_default()
                )),
                Err(e) => say(&format!("{what} request failed: {e}")),
            }
            stay_up();
        }
        _ => {
            // init's resident memory now that it supervises, for the
            // benchmark.
            if let Some(rss) = init_rss() {
                say(&format!("init {rss}"));
            }
            match std::fs::read_to_string("/run/liken/boot.json") {
                Ok(text) => say(&format!(
                    "boot record {}",
                    text.split_whitespace().collect::<Vec<_>>().join("")
                )),
                Err(e) => say(&format!("no boot record: {e}")),
            }
            report_system();
            // And once the boot has settled: after a switch root, init's
            // image-modules worker may still be loading (and holding the
            // full module tree) when the service starts.
            if wait_for_worker(Duration::from_secs(120))
                && let Some(rss) = init_rss()
            {
                say(&format!("init settled {rss}"));
            }
            stay_up();
        }
    }
}
