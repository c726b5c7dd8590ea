//! liken-standin-k3s: a test-only stand-in that the QEMU tests boot
//! where k3s would be (/usr/bin/k3s in a test-only cpio), so init's
//! supervision, restart backoff and control socket are exercised
//! without k3s. It is built statically by `make qemu-images` and never
//! goes into an image for people.
//!
//! What it does is chosen on the kernel command line with
//! `liken.standin=<instruction>`, else by the system image's
//! /usr/share/liken-standin/instruction (the end-to-end releases name
//! `node` or `unhealthy` there: an installed machine's entries carry no
//! `liken.standin=`):
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
//! - `write-script:<dir>`: the signed-release scenario, several writes in
//!   one boot. `<dir>` (or the FAT disk, as above) holds a `script`, one
//!   attempt a line: `<label> <subdir> [<permit>]`. Each attempt stages
//!   the release in `<subdir>` as `write-release` does, asks init to write
//!   it with the `release.yaml.sig` found there (none if absent) and, when
//!   given, the rollback permit `<permit>` with `<permit>.sig`, then prints
//!   `attempt <label> answered {json}` and `attempt <label> slot B
//!   <sha256>`: the SHA-256 of the first 4 MiB of the LIKEN-B partition,
//!   read from the block device by this program, not by init, and
//!   `attempt <label> kept root <sha256>` of the trust root init keeps
//!   in /var/lib/liken/trust (the data partition on an installed
//!   machine; `none` when there is none). A line `@layer
//!   <subdir>` instead puts `<subdir>`'s trust.yaml (and its .sig, or
//!   none) in place of the layer's under /etc/liken, where a new layer
//!   booted from the ESP would put it and where root on the machine
//!   could write it: init reads the layer's trust root on every write.
//!   After the last attempt it asks for a reboot if that one was
//!   written.
//! - `net:<targets>`: ask init for its status and print the answer, then
//!   print what a program on the machine sees of the network whenever it
//!   changes and send a datagram to each target every second
//!   (`qemu-tests/src/standin/net.rs`).
//! - `lease-memory:<n>,<n>,...`: print init's memory as the kernel
//!   reports it (/proc/1/status) once the first DHCP lease is bound and
//!   again as the lease's renewal count in init's facts reaches each
//!   `<n>` (`qemu-tests/src/standin/memory.rs`), for the lease
//!   benchmark.
//!
//! - `stale-node`: as `run`, but its `kubectl get node` answers (below)
//!   carry a heartbeat from long before this boot, as a Node object left
//!   from an earlier boot would, so init must never bless this boot. It
//!   also asks init to write a release while this boot is on trial, and
//!   prints the answer (init must refuse: the other slot holds the only
//!   release known to boot).
//!
//! - `unhealthy`: a release built never to become healthy: as k3s it
//!   exits 1 at once, and as `k3s kubectl` it answers nothing.
//! - `node`: the node stand-in (`qemu-tests/src/standin/node/`): as
//!   `k3s server` or `k3s agent` it does what k3s and its kubelet would
//!   do for liken against the test's control plane on the host (the
//!   kubelet's credentials, the Node and its Lease, a server's
//!   auto-deploy manifests, the DaemonSet pods from the airgap images),
//!   and as `k3s kubectl get node` it answers from the real Node.
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
//! With `liken.standin-reboot-once=<when>`, `run` and `stale-node` then
//! ask init for a reboot, as the machine operator does for an update,
//! once per machine: `now` asks at once (on trial too), `blessed` once
//! init has blessed the boot (the boot record says so), as the operator
//! holds its turn until then; `blessed-nokexec` first sets the kernel's
//! `kernel.kexec_load_disabled`, so the kernel refuses init's kexec load
//! and the reboot must go through the firmware. The first boot that asks
//! leaves `/var/lib/liken-standin/rebooted-once` on the data partition,
//! since the argument rides on into the boot init reaches (a kexec
//! passes the entry's own options).
//!
//! Whatever the instruction, it first prints the VERSION_ID of the root
//! it runs from (`/etc/os-release`, which the system image carries and
//! an initramfs does not), so a test sees which image a slot booted.
//!
//! In `run` (and `stale-node`) it also prints what k3s would find of
//! its host and its files, for the tests to assert (`print_host`,
//! `print_k3s_files`): the propagation of `/` and what it is mounted
//! from (with the device-mapper name of a slot opened through
//! dm-verity), its own limits, the /var/run link, the machine ID, where /etc/rancher/node resolves and
//! whether it is on the data partition, a node password kept there as
//! k3s's agent keeps one, config.yaml line by line, the token file's
//! path and mode, server/tls with modes, and which files below /run hold
//! a private key or a server token (by path). It mounts two tmpfs under
//! /var/lib/kubelet, one inside the other, as the kubelet mounts volumes,
//! for init's shutdown to take down.
//!
//! Started as `k3s kubectl ... get node <name> -o jsonpath=...` (how
//! init asks whether the boot is healthy) it answers as k3s's kubectl
//! would for that template: the Node's name, Ready `True`, a heartbeat
//! taken now (or, with `stale-node`, one from 2026-01-01) and the reason,
//! on stdout, and a warning on stderr, which init must not read as an
//! answer.
//!
//! Every line it prints starts with, or holds, `liken-standin-k3s` so
//! the console shows plainly that this is not k3s.

use std::os::unix::net::UnixStream;
use std::time::Duration;

use std::path::{Path, PathBuf};

use liken_api::control::{
    RELEASES_DIR, Request, Response, SOCKET_PATH, SignedDocument, WriteRelease, read_frame,
    write_frame,
};
use liken_api::{BootRecord, Release, decode};

use console::say;

#[path = "../standin/console.rs"]
mod console;
#[path = "../k3s_node.rs"]
mod k3s_node;
#[path = "../standin/memory.rs"]
mod memory;
#[path = "../standin/net.rs"]
mod net;

#[path = "../standin/node/mod.rs"]
mod node;
#[path = "../standin/probe.rs"]
mod probe;

/// Where the stand-in remembers releases it had written.
const MARKER_DIR: &str = "/var/lib/liken-standin";

/// The value of `<key>=` on the kernel command line.
fn cmdline_value(key: &str) -> Option<String> {
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let prefix = format!("{key}=");
    cmdline
        .split_whitespace()
        .find_map(|a| a.strip_prefix(prefix.as_str()))
        .map(str::to_owned)
}

/// Where a test image names the stand-in's instruction, for the boots
/// of an installed disk (whose entries carry no `liken.standin=`).
const IMAGE_INSTRUCTION: &str = "/usr/share/liken-standin/instruction";

fn instruction() -> String {
    let image = std::fs::read_to_string(IMAGE_INSTRUCTION).unwrap_or_default();
    cmdline_value("liken.standin")
        .or_else(|| Some(image.trim().to_owned()).filter(|i| !i.is_empty()))
        .unwrap_or_else(|| "run".to_owned())
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
            // A write-script's later attempts of one version carry only
            // release.yaml (and its signature): the artifacts staged by
            // the first stay. init checks them all either way.
            if !src.exists() && dst.exists() {
                continue;
            }
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

/// Where a release source is read from: `from` itself, or, for a device
/// (`/dev/...`), where it is mounted read-only.
fn source_dir(from: &str) -> Result<PathBuf, String> {
    if from.starts_with("/dev/") {
        mount_source(from)
    } else {
        Ok(PathBuf::from(from))
    }
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
    let source = match source_dir(from) {
        Ok(at) => at,
        Err(e) => return say(&format!("cannot read the release disk: {e}")),
    };
    let (release, yaml) = match read_release(&source) {
        Ok(r) => r,
        Err(e) => return say(&format!("cannot read the release in {from}: {e}")),
    };
    let version = release.version.to_string();
    let running = std::fs::read_to_string("/run/liken/facts/boot.json")
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
        // The signature beside release.yaml, when the channel is signed.
        signature: std::fs::read_to_string(source.join("release.yaml.sig")).ok(),
        rollback_permit: None,
    });
    match ask(&request) {
        Ok(r @ Response::ReleaseWritten(_)) => {
            say_answer("release written", &r);
            if let Err(e) =
                std::fs::create_dir_all(MARKER_DIR).and_then(|()| std::fs::write(&marker, b""))
            {
                say(&format!("cannot write {}: {e}", marker.display()));
            }
            ask_reboot();
        }
        Ok(r) => say_answer("write-release answered", &r),
        Err(e) => say(&format!("write-release request failed: {e}")),
    }
}

/// Runs a `write-script` (see the module's documentation).
fn write_script(from: &str) {
    let source = match source_dir(from) {
        Ok(at) => at,
        Err(e) => return say(&format!("cannot read the release disk: {e}")),
    };
    let script = match std::fs::read_to_string(source.join("script")) {
        Ok(s) => s,
        Err(e) => return say(&format!("cannot read {from}/script: {e}")),
    };
    let mut written = false;
    for line in script.lines().filter(|l| !l.trim().is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["@layer", sub] = words.as_slice() {
            match replace_layer_trust(&source.join(sub)) {
                Ok(()) => say(&format!("layer {sub}: trust.yaml replaced in {LAYER_DIR}")),
                Err(e) => return say(&format!("layer {sub}: {e}")),
            }
            continue;
        }
        let (label, sub, permit) = match words.as_slice() {
            [label, sub] => (*label, *sub, None),
            [label, sub, permit] => (*label, *sub, Some(*permit)),
            _ => return say(&format!("cannot read the script line {line:?}")),
        };
        let dir = source.join(sub);
        let staged = read_release(&dir).and_then(|(release, yaml)| {
            stage_release(&dir, &release, &yaml).map(|staged| (staged, yaml))
        });
        let (staged, yaml) = match staged {
            Ok(s) => s,
            Err(e) => return say(&format!("attempt {label}: cannot stage {sub}: {e}")),
        };
        let rollback_permit = match permit {
            None => None,
            Some(p) => {
                let read = |name: &str| std::fs::read_to_string(source.join(name));
                match (read(p), read(&format!("{p}.sig"))) {
                    (Ok(document), Ok(signature)) => Some(SignedDocument {
                        document,
                        signature,
                    }),
                    _ => return say(&format!("attempt {label}: cannot read the permit {p}")),
                }
            }
        };
        let request = Request::WriteRelease(WriteRelease {
            directory: staged.display().to_string(),
            release_sha256: liken_api::hash::sha256(&yaml),
            signature: std::fs::read_to_string(dir.join("release.yaml.sig")).ok(),
            rollback_permit,
        });
        say(&format!("attempt {label}: asking init to write {sub}"));
        match ask(&request) {
            Ok(r) => {
                written = matches!(r, Response::ReleaseWritten(_));
                say_answer(&format!("attempt {label} answered"), &r);
            }
            Err(e) => return say(&format!("attempt {label}: request failed: {e}")),
        }
        say(&format!("attempt {label} slot B {}", slot_b_digest()));
        say(&format!("attempt {label} kept root {}", kept_root_digest()));
    }
    if written {
        ask_reboot();
    }
}

/// Where the deployment layer is unpacked.
const LAYER_DIR: &str = "/etc/liken";
/// The trust root init keeps (on the data partition, when /var is one).
const KEPT_ROOT: &str = "/var/lib/liken/trust/trust.yaml";

/// Puts `from`'s trust.yaml, and its signature or none, in the layer.
fn replace_layer_trust(from: &Path) -> Result<(), String> {
    let layer = Path::new(LAYER_DIR);
    for name in ["trust.yaml", "trust.yaml.sig"] {
        let (src, dst) = (from.join(name), layer.join(name));
        if src.exists() {
            std::fs::copy(&src, &dst).map_err(|e| format!("copy {}: {e}", src.display()))?;
        } else if dst.exists() {
            std::fs::remove_file(&dst).map_err(|e| format!("{}: {e}", dst.display()))?;
        }
    }
    Ok(())
}

/// The SHA-256 of the trust root init keeps, `none`, or why it could
/// not be read.
fn kept_root_digest() -> String {
    match std::fs::read(KEPT_ROOT) {
        Ok(bytes) => liken_api::hash::sha256(&bytes).to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "none".to_owned(),
        Err(e) => format!("unreadable: {KEPT_ROOT}: {e}"),
    }
}

/// `liken.standin-reboot-once=`: asks init for a reboot the first time
/// a boot of this machine gets here (see the module doc).
fn reboot_once() {
    let Some(when) = cmdline_value("liken.standin-reboot-once") else {
        return;
    };
    let marker = Path::new(MARKER_DIR).join("rebooted-once");
    if marker.exists() {
        say("reboot-once: this machine asked for its reboot already");
        return;
    }
    if when.starts_with("blessed") && !wait_blessed(Duration::from_secs(300)) {
        say("reboot-once: the boot was not blessed within 300 s; not asking");
        return;
    }
    let _ = std::fs::create_dir_all(MARKER_DIR);
    if let Err(e) = std::fs::write(&marker, b"") {
        say(&format!(
            "reboot-once: cannot leave {} ({e}); not asking",
            marker.display()
        ));
        return;
    }
    if when.ends_with("-nokexec") {
        match std::fs::write("/proc/sys/kernel/kexec_load_disabled", b"1") {
            Ok(()) => say("reboot-once: kernel.kexec_load_disabled set to 1"),
            Err(e) => say(&format!("reboot-once: cannot disable kexec ({e})")),
        }
    }
    ask_reboot();
}

/// Waits until init's boot record says the boot is blessed (or was
/// never on trial).
fn wait_blessed(within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        let record = std::fs::read_to_string("/run/liken/facts/boot.json")
            .ok()
            .and_then(|t| serde_json::from_str::<BootRecord>(&t).ok());
        if record.and_then(|r| r.assessment).is_some_and(|a| a.blessed) {
            return true;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    false
}

/// Asks init for the reboot that boots a written slot, and prints the
/// answer.
fn ask_reboot() {
    say("asking for reboot");
    match ask(&Request::Reboot {
        via: liken_api::RebootVia::Kexec,
    }) {
        Ok(r) => say_answer("reboot answered", &r),
        Err(e) => say(&format!("reboot request failed: {e}")),
    }
}

/// The SHA-256 of the first 4 MiB of the partition labelled LIKEN-B,
/// found through sysfs (`PARTNAME=` in each block device's uevent), or
/// why it could not be read.
fn slot_b_digest() -> String {
    let found = std::fs::read_dir("/sys/class/block")
        .ok()
        .and_then(|entries| {
            entries.flatten().find_map(|e| {
                let uevent = std::fs::read_to_string(e.path().join("uevent")).ok()?;
                uevent
                    .lines()
                    .any(|l| l == "PARTNAME=LIKEN-B")
                    .then(|| e.file_name().to_string_lossy().into_owned())
            })
        });
    let Some(name) = found else {
        return "unreadable: no LIKEN-B partition".to_owned();
    };
    let mut head = vec![0u8; 4 << 20];
    let read = std::fs::File::open(format!("/dev/{name}"))
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head));
    match read {
        Ok(()) => liken_api::hash::sha256(&head).to_string(),
        Err(e) => format!("unreadable: /dev/{name}: {e}"),
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

/// Asks init to write a release (the one the boot record says is
/// running, whatever the releases directory holds) and prints the answer.
fn ask_write_on_trial() {
    let version = std::fs::read_to_string("/run/liken/facts/boot.json")
        .ok()
        .and_then(|t| serde_json::from_str::<BootRecord>(&t).ok())
        .and_then(|r| r.version)
        .map_or_else(|| "2026.12.02-001".to_owned(), |v| v.to_string());
    let request = Request::WriteRelease(WriteRelease {
        directory: format!("{RELEASES_DIR}/{version}"),
        release_sha256: liken_api::hash::sha256(b""),
        signature: None,
        rollback_permit: None,
    });
    say("asking init to write a release while this boot is on trial");
    match ask(&request) {
        Ok(r) => say_answer("write-release on trial answered", &r),
        Err(e) => say(&format!("write-release request failed: {e}")),
    }
}

/// `k3s kubectl ... get node <name> -o jsonpath=<template>`: what k3s's
/// kubectl prints for init's health question (stdout): the template
/// init uses names the Node's name, then its Ready condition's status,
/// lastHeartbeatTime and reason, space-separated. The reason is
/// `liken-standin-k3s`, so even that line says what answered. A warning
/// goes to stderr, which init must not read; other questions are
/// refused.
fn kubectl(args: &[String], what: &str) -> i32 {
    eprintln!("liken-standin-k3s: W kubectl warning on stderr, which init must not read");
    let node = args
        .windows(2)
        .find(|w| w[0] == "node")
        .map(|w| w[1].clone());
    let template = args.iter().find_map(|a| a.strip_prefix("jsonpath="));
    let known = "{.metadata.name} {range .status.conditions[?(@.type==\"Ready\")]}\
                 {.status} {.lastHeartbeatTime} {.reason}{end}";
    let (Some(node), Some(true)) = (node, template.map(|t| t == known)) else {
        eprintln!(
            "liken-standin-k3s: kubectl {} is not answered",
            args.join(" ")
        );
        return 1;
    };
    let heartbeat = if what == "stale-node" {
        "2026-01-01T00:00:00Z".to_owned()
    } else {
        liken_api::Time::from_system(std::time::SystemTime::now()).to_string()
    };
    println!("{node} True {heartbeat} liken-standin-k3s");
    0
}

/// What k3s would find of its host: the propagation of `/` and /var,
/// this process's limits, /var/run, the machine ID, /etc/rancher/node
/// and the node password k3s's agent keeps there (created on the first
/// boot, read on later ones), then two nested tmpfs mounts below
/// /var/lib/kubelet as the kubelet would make for a pod's volumes.
fn print_host() {
    use std::os::unix::fs::MetadataExt;
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for point in ["/", "/var"] {
        // The last line for a mount point is the one on top.
        let line = info
            .lines()
            .rfind(|l| l.split(' ').nth(4) == Some(point))
            .unwrap_or("");
        let fields: Vec<&str> = line.split(' ').collect();
        let optional: Vec<&str> = fields
            .iter()
            .skip(6)
            .take_while(|f| **f != "-")
            .copied()
            .collect();
        say(&format!(
            "mount {point} propagation [{}]",
            optional.join(" ")
        ));
    }
    // What the root is mounted from (after the optional fields, "-",
    // the type and the source), and the device mapper's name for it when
    // it is a mapped device: dm-verity's, on a verified slot.
    let root = info
        .lines()
        .rfind(|l| l.split(' ').nth(4) == Some("/"))
        .unwrap_or("");
    let mut after = root.split(" - ").nth(1).unwrap_or("").split(' ');
    let (fstype, source) = (after.next().unwrap_or(""), after.next().unwrap_or(""));
    let mapped = source
        .strip_prefix("/dev/")
        .filter(|d| d.starts_with("dm-"))
        .and_then(|d| std::fs::read_to_string(format!("/sys/block/{d}/dm/name")).ok())
        .map_or(String::new(), |n| format!(", device-mapper {}", n.trim()));
    say(&format!("mount / from {source} ({fstype}{mapped})"));
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    for name in ["Max open files", "Max processes", "Max core file size"] {
        let line = limits.lines().find(|l| l.starts_with(name)).unwrap_or("");
        let words: Vec<&str> = line[name.len().min(line.len())..]
            .split_whitespace()
            .collect();
        say(&format!("limit {name}: {}", words.join(" ")));
    }
    match std::fs::read_link("/var/run") {
        Ok(t) => say(&format!("/var/run -> {}", t.display())),
        Err(e) => say(&format!("/var/run is not a link: {e}")),
    }
    match std::fs::read_to_string("/etc/machine-id") {
        Ok(id) => say(&format!("machine-id {}", id.trim())),
        Err(e) => say(&format!("no machine-id: {e}")),
    }
    let node = Path::new("/etc/rancher/node");
    let on_var = |p: &Path| {
        let (a, b) = (std::fs::metadata(p), std::fs::metadata("/var"));
        matches!((a, b), (Ok(a), Ok(b)) if a.dev() == b.dev())
    };
    match std::fs::canonicalize(node) {
        Ok(real) => say(&format!(
            "/etc/rancher/node is {} (on the /var filesystem: {})",
            real.display(),
            on_var(&real)
        )),
        Err(e) => say(&format!("/etc/rancher/node does not resolve: {e}")),
    }
    // As k3s's EnsureNodePassword: read it, or make one on first start.
    let password = node.join("password");
    let (text, how) = match std::fs::read_to_string(&password) {
        Ok(t) => (t, "kept"),
        Err(_) => {
            let mut random = [0u8; 16];
            let read = std::fs::File::open("/dev/urandom")
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut random));
            if let Err(e) = read {
                return say(&format!("cannot read /dev/urandom: {e}"));
            }
            let t = format!("{}\n", liken_api::digest::to_hex(&random));
            match std::fs::write(&password, &t) {
                Ok(()) => (t, "created"),
                Err(e) => return say(&format!("cannot write {}: {e}", password.display())),
            }
        }
    };
    say(&format!(
        "node password sha256 {} ({how})",
        liken_api::hash::sha256(text.as_bytes()).short()
    ));
    let volume = Path::new("/var/lib/kubelet/pods/standin/volumes/kubernetes.io~empty-dir/cache");
    let inner = volume.join("nested");
    let mounted = std::fs::create_dir_all(volume)
        .map_err(|e| e.to_string())
        .and_then(|()| mount_tmpfs(volume))
        .and_then(|()| std::fs::create_dir_all(&inner).map_err(|e| e.to_string()))
        .and_then(|()| mount_tmpfs(&inner));
    match mounted {
        Ok(()) => say(&format!(
            "mounted tmpfs at {} and {}",
            volume.display(),
            inner.display()
        )),
        Err(e) => say(&format!("cannot mount the volumes: {e}")),
    }
}

fn mount_tmpfs(at: &Path) -> Result<(), String> {
    rustix::mount::mount(
        "tmpfs",
        at,
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        None,
    )
    .map_err(|e| format!("mount tmpfs on {}: {e}", at.display()))
}

/// Every regular file below /run (what a follower's RAM holds of the
/// layer, and everything else init put there), searched for a private
/// key's PEM block and for a server token (`K10<hash>::server:<secret>`,
/// the part that joins servers); each finding is printed by path, never
/// its bytes, and the count of files read closes the scan.
fn scan_run_for_secrets() {
    let mut files = 0usize;
    let mut dirs = vec![PathBuf::from("/run")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(kind) = e.file_type() else { continue };
            let p = e.path();
            if kind.is_dir() {
                dirs.push(p);
            } else if kind.is_file() {
                let Ok(bytes) = std::fs::read(&p) else {
                    continue;
                };
                files += 1;
                let text = String::from_utf8_lossy(&bytes);
                if text.contains("PRIVATE KEY-----") {
                    say(&format!(
                        "secret scan: a PRIVATE KEY block in {}",
                        p.display()
                    ));
                }
                if text.contains("::server:") {
                    say(&format!("secret scan: a server token in {}", p.display()));
                }
            }
        }
    }
    say(&format!("secret scan: {files} files below /run read"));
}

/// What k3s would read of its own files: config.yaml line by line, the
/// token file config.yaml names (path, mode and size; never its
/// bytes), and server/tls with modes.
fn print_k3s_files() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| {
        std::fs::symlink_metadata(p).map_or("absent".to_owned(), |m| {
            format!("{:04o}", m.permissions().mode() & 0o7777)
        })
    };
    let config = Path::new(k3s_node::CONFIG_PATH);
    let text = std::fs::read_to_string(config).unwrap_or_default();
    say(&format!("config.yaml mode {}", mode(config)));
    for line in text.lines() {
        say(&format!("config.yaml| {line}"));
    }
    let token = text
        .lines()
        .find_map(|l| l.strip_prefix("token-file: "))
        .map(|t| t.trim_matches('"').to_owned());
    if let Some(token) = token {
        let p = Path::new(&token);
        let size = std::fs::metadata(p).map_or(0, |m| m.len());
        say(&format!(
            "token-file {token} mode {} ({size} bytes)",
            mode(p)
        ));
    }
    let tls = Path::new("/var/lib/rancher/k3s/server/tls");
    let mut found = Vec::new();
    let mut dirs = vec![tls.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p.clone());
            }
            found.push(p);
        }
    }
    found.sort();
    say(&format!("server/tls mode {}", mode(tls)));
    for p in found {
        let rel = p.strip_prefix(tls).unwrap_or(&p);
        say(&format!("server/tls/{} mode {}", rel.display(), mode(&p)));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // The node stand-in's container runtime runs as copies of this
    // program (standin/node/container.rs).
    match args.as_slice() {
        [mode, spec] if mode == "container" => node::container::outer(spec),
        [mode, spec] if mode == "container-init" => node::container::inner(spec),
        [mode, port] if mode == "probe" => probe::run(port),
        _ => {}
    }
    let what = instruction();
    if what == "node" || what == "unhealthy" {
        if what == "unhealthy" {
            // A release built never to become healthy: its k3s fails at
            // once and answers nothing, as a broken release's would.
            let why = "this release is built never to become healthy (instruction unhealthy): \
                       its k3s fails, as a broken release's would";
            if args.first().map(String::as_str) == Some("kubectl") {
                eprintln!("liken-standin-k3s: {why}");
            } else {
                say(&format!("started as k3s {}: {why}", args.join(" ")));
            }
            std::process::exit(1);
        }
        // `k3s kubectl` answers on stdout for init: nothing else there.
        if args.first().map(String::as_str) == Some("kubectl") {
            std::process::exit(node::kubectl::run(&args[1..]));
        }
        say(&format!(
            "started as k3s {} (instruction node)",
            args.join(" ")
        ));
        node::run(args.first().map_or("", String::as_str));
    }
    if args.first().map(String::as_str) == Some("kubectl") {
        std::process::exit(kubectl(&args, &what));
    }
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
        Some(("lease-memory", checkpoints)) => memory::watch(checkpoints, &say),
        Some(("write-release", dir)) => {
            write_release(dir);
            stay_up();
        }
        Some(("write-script", dir)) => {
            write_script(dir);
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
                Request::Reboot {
                    via: liken_api::RebootVia::Kexec,
                }
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
            print_host();
            print_k3s_files();
            scan_run_for_secrets();
            if what == "stale-node" {
                ask_write_on_trial();
            }
            // init's resident memory now that it supervises, for the
            // benchmark.
            if let Some(rss) = init_rss() {
                say(&format!("init {rss}"));
            }
            match std::fs::read_to_string("/run/liken/facts/boot.json") {
                Ok(text) => say(&format!(
                    "boot record {}",
                    text.split_whitespace().collect::<Vec<_>>().join("")
                )),
                Err(e) => say(&format!("no boot record: {e}")),
            }
            report_system();
            reboot_once();
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
