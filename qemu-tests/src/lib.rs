//! The harness the QEMU tests share: build the images (through the
//! Makefile, cached), assemble an initramfs from cpio parts, boot it
//! under QEMU, and read the serial console line by line with a deadline
//! per milestone.
//!
//! QEMU runs under TCG unless `LIKEN_QEMU_ACCEL=kvm` asks for KVM: on
//! the project's build machines /dev/kvm cannot run a stock kernel
//! (../shared/PLATFORM.md). The kernel boots as an uncompressed vmlinux
//! through QEMU's PVH entry, which saves seconds per boot under TCG.
//!
//! Every boot's console goes to `<target dir>/qemu-logs/<test>.log` as
//! it arrives, so a failed test leaves the whole console for a person
//! to read; the failure message names the file.
//!
//! The images are built by `make qemu-images` the first time a test
//! needs them; if that fails the test fails with make's output. A test
//! never skips because an image is missing.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use liken_api::{Channel, Version, decode};

pub mod availability;
pub mod command;
pub mod deployment;
pub mod disk;
pub mod drives;
pub mod firmware;
pub mod fleet;
pub mod install;
pub mod netns;
pub mod node_facts;
pub mod real_node;

pub use command::{check, run, text};

/// `make -s <target>` in the workspace with `IMAGES_OUT=<images>` and
/// this target directory, without the package variables `cargo test`
/// set for this test (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, ...): build
/// scripts such as ring's ask to be run again when those change, so
/// with them the release builds under a test and under a person's
/// `make` would each rebuild everything the other built.
pub fn make(target: &str, images: &Path) -> Command {
    let mut cmd = Command::new("make");
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("CARGO_PKG_")
            || k.starts_with("CARGO_BIN_EXE_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
            ]
            .contains(&k.as_ref())
        {
            cmd.env_remove(k.as_ref());
        }
    }
    cmd.arg("-C")
        .arg(workspace())
        .arg("-s")
        .arg(target)
        .arg(format!("IMAGES_OUT={}", images.display()))
        .arg(format!("CARGO_TARGET_DIR={}", target_dir().display()));
    cmd
}

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// Cargo's target directory: CARGO_TARGET_DIR when set, else the
/// workspace's `target`.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
}

/// Where console logs are kept.
pub fn log_dir() -> PathBuf {
    target_dir().join("qemu-logs")
}

/// The built images the tests boot.
#[derive(Debug)]
pub struct Images {
    /// The directory holding them (the Makefile's IMAGES_OUT).
    pub dir: PathBuf,
    /// The uncompressed kernel.
    pub vmlinux: PathBuf,
    /// The same kernel as a bzImage, which bootloaders load.
    pub vmlinuz: PathBuf,
    /// boot.cpio: /init and the boot modules.
    pub boot_cpio: PathBuf,
    /// The static stand-in service.
    pub standin: PathBuf,
    /// The benchmark's reference PID 1.
    pub hello: PathBuf,
    /// The static liken-init that boot.cpio holds.
    pub init: PathBuf,
    /// The workstation CLI, which writes deployment layers.
    pub liken: PathBuf,
    /// The system image with the stand-in as /usr/bin/k3s.
    pub system_standin: PathBuf,
}

impl Images {
    /// The stand-in channel's release directories, oldest first, the
    /// last one its channel.yaml's latest.
    pub fn standin_releases(&self) -> Vec<PathBuf> {
        channel_releases(&self.dir.join("channel-standin"))
    }
}

/// Set (to `1`) by the Makefile's recipes whose prerequisites have just
/// built every image (`demo`, `test-e2e`, `bench-rollout`): [`images`]
/// and [`fleet::channel`] then use them without running make again (its
/// up-to-date checks take about 27 s on the 2-core build machine).
pub const IMAGES_JUST_BUILT: &str = "LIKEN_IMAGES_JUST_BUILT";

/// Whether [`IMAGES_JUST_BUILT`] says make has just built the images.
pub fn images_just_built() -> bool {
    std::env::var_os(IMAGES_JUST_BUILT).is_some_and(|v| v == "1")
}

/// Runs `make <target>` for the images in `images`, unless
/// [`images_just_built`]; fails the test with make's output and `hint`
/// when it fails.
pub fn make_images(target: &str, images: &Path, hint: &str) {
    if images_just_built() {
        return;
    }
    let out = make(target, images)
        .output()
        .unwrap_or_else(|e| panic!("cannot run make {target}: {e}; install make"));
    if !out.status.success() {
        panic!(
            "`make {target}` failed ({}){hint}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Builds the images once per test process (make caches the kernel and
/// cargo the binaries; skipped when [`images_just_built`]), or fails the
/// test with make's output.
pub fn images() -> &'static Images {
    static IMAGES: OnceLock<Images> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let dir = target_dir().join("images");
        make_images(
            "qemu-images",
            &dir,
            "; the QEMU tests need its images. Run scripts/setup.sh for the Debian packages it \
             uses.",
        );
        let images = Images {
            vmlinux: dir.join("vmlinux"),
            vmlinuz: dir.join("vmlinuz"),
            system_standin: dir.join("system-standin.squashfs"),
            boot_cpio: dir.join("boot.cpio"),
            standin: dir.join("liken-standin-k3s"),
            hello: dir.join("liken-hello-pid1"),
            init: dir.join("liken-init"),
            liken: dir.join("liken"),
            dir,
        };
        for f in [
            &images.vmlinux,
            &images.vmlinuz,
            &images.system_standin,
            &images.boot_cpio,
            &images.standin,
            &images.hello,
            &images.init,
            &images.liken,
        ] {
            assert!(
                f.exists(),
                "`make qemu-images` succeeded but left no {}",
                f.display()
            );
        }
        images
    })
}

/// A scratch directory for one test, emptied first.
pub fn scratch(test: &str) -> PathBuf {
    let dir = target_dir().join("qemu-scratch").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// Packs `files` (path inside the archive, contents, mode) into a newc
/// cpio with the image build's own packer, images/cpio.sh.
pub fn cpio(
    dir: &Path,
    name: &str,
    files: &[(&str, &[u8], u32)],
    symlinks: &[(&str, &str)],
) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let tree = dir.join(format!("{name}.tree"));
    let _ = std::fs::remove_dir_all(&tree);
    for (path, contents, mode) in files {
        let p = tree.join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("mkdir {}: {e}", parent.display()));
        }
        std::fs::write(&p, contents).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
    }
    for (link, to) in symlinks {
        let p = tree.join(link);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("mkdir {}: {e}", parent.display()));
        }
        std::os::unix::fs::symlink(to, &p)
            .unwrap_or_else(|e| panic!("symlink {}: {e}", p.display()));
    }
    let archive = dir.join(format!("{name}.cpio"));
    let status = Command::new(workspace().join("images/cpio.sh"))
        .arg(&tree)
        .arg(&archive)
        .status()
        .unwrap_or_else(|e| panic!("cannot run images/cpio.sh: {e}"));
    assert!(
        status.success(),
        "images/cpio.sh failed for {}",
        tree.display()
    );
    archive
}

/// Runs the workstation CLI with `args`, failing the test with its
/// output when it fails.
pub fn liken(args: &[&str]) -> String {
    run(&images().liken, args)
}

/// A local channel's release directories (`liken bundle`'s layout),
/// oldest first; the last is the one channel.yaml names latest, and
/// nothing newer than it counts.
pub fn channel_releases(channel: &Path) -> Vec<PathBuf> {
    let file = channel.join("channel.yaml");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; `make images` bundles the release channels",
            file.display()
        )
    });
    let latest: Channel =
        decode::strict(&text, "channel.yaml").unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut versions: Vec<Version> = std::fs::read_dir(channel)
        .unwrap_or_else(|e| panic!("{}: {e}", channel.display()))
        .filter_map(|e| Version::parse(e.ok()?.file_name().to_str()?).ok())
        .filter(|v| *v <= latest.latest)
        .collect();
    versions.sort();
    assert_eq!(
        versions.last(),
        Some(&latest.latest),
        "{} names {} latest, which is not there",
        file.display(),
        latest.latest
    );
    versions
        .iter()
        .map(|v| channel.join(v.to_string()))
        .collect()
}

/// The Cluster document of the layers tests pack by hand.
pub const CLUSTER: &str = "apiVersion: liken.sh/v1alpha1
kind: Cluster
metadata:
  name: test
spec:
  endpoint: https://10.0.2.15:6443
  leaders: [node-1]
";

/// node-1's Machine document in the layers tests pack by hand.
pub const MACHINE: &str = "apiVersion: liken.sh/v1alpha1
kind: Machine
metadata:
  name: node-1
spec:
  hostname: node-1
";

/// A layer packed by hand rather than by `liken layer` (which refuses a
/// broken document, as an older or hand-made layer could hold one):
/// [`CLUSTER`] and `machine` as node-1's Machine document, and the
/// `unsigned` marker `liken layer -unsigned` packs (no trust root: init
/// writes unsigned releases).
pub fn hand_layer(dir: &Path, machine: &str) -> PathBuf {
    cpio(
        dir,
        "layer",
        &[
            ("etc/liken/cluster.yaml", CLUSTER.as_bytes(), 0o644),
            ("etc/liken/machines/node-1.yaml", machine.as_bytes(), 0o644),
            ("etc/liken/unsigned", b"packed by hand\n", 0o644),
        ],
        &[],
    )
}

/// A deployment layer made the way a person makes one: `liken new`
/// with one leader, `liken mint`, `liken layer`. Returns the
/// deployment directory and the layer.
pub fn cli_layer(dir: &Path, cluster: &str, machine: &str) -> (PathBuf, PathBuf) {
    cli_fleet(dir, cluster, &[(machine, "leader")])
}

/// As [`cli_layer`], with several machines, each `(name, role)`.
pub fn cli_fleet(dir: &Path, cluster: &str, machines: &[(&str, &str)]) -> (PathBuf, PathBuf) {
    cli_deployment(dir, cluster, machines, &[])
}

/// As [`cli_layer`], with a trust root of the release keys `trusted`
/// (`release.pub` files from `liken keygen`), written by `liken trust` and
/// packed by `liken layer` as every signed fleet's is.
pub fn cli_layer_trusting(
    dir: &Path,
    cluster: &str,
    machine: &str,
    trusted: &[&Path],
) -> (PathBuf, PathBuf) {
    assert!(!trusted.is_empty(), "a trust root needs a key");
    cli_deployment(dir, cluster, &[(machine, "leader")], trusted)
}

/// `liken mint`, `new` and `layer` for `machines`; `-unsigned` when
/// `trusted` is empty, else with a trust root of those keys.
fn cli_deployment(
    dir: &Path,
    cluster: &str,
    machines: &[(&str, &str)],
    trusted: &[&Path],
) -> (PathBuf, PathBuf) {
    let machines: Vec<deployment::Machine> = machines
        .iter()
        .map(|(name, role)| deployment::Machine {
            name: (*name).to_owned(),
            leader: match *role {
                "leader" => true,
                "follower" => false,
                other => panic!("{name}: role {other:?}; a machine is a leader or a follower"),
            },
            document: None,
        })
        .collect();
    // Unsigned without keys: the fleets' channels (images/release.sh,
    // qemu-tests/e2e-images.sh) publish unsigned releases.
    let made = deployment::make(&deployment::Spec {
        liken: &images().liken,
        dir: &dir.join("deployment"),
        cluster,
        endpoint: "https://10.0.2.15:6443",
        machines: &machines,
        trusted,
        target: None,
    });
    let layer = made.layer(&dir.join("layer.cpio"));
    (made.dir, layer)
}

/// The stand-in service as a cpio part: the binary under its own name,
/// and /usr/bin/k3s pointing at it, where init looks for k3s.
pub fn standin_cpio(dir: &Path) -> PathBuf {
    let bin = std::fs::read(&images().standin).unwrap_or_else(|e| panic!("read stand-in: {e}"));
    cpio(
        dir,
        "standin",
        &[("usr/libexec/liken-standin-k3s", &bin, 0o755)],
        &[("usr/bin/k3s", "/usr/libexec/liken-standin-k3s")],
    )
}

/// Concatenates cpio parts into one initramfs (the kernel unpacks
/// concatenated archives in order).
pub fn initrd(dir: &Path, parts: &[impl AsRef<Path>]) -> PathBuf {
    let path = dir.join("initrd.cpio");
    let mut out = std::fs::File::create(&path).unwrap_or_else(|e| panic!("create initrd: {e}"));
    for p in parts {
        let p = p.as_ref();
        let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
        out.write_all(&bytes)
            .unwrap_or_else(|e| panic!("write initrd: {e}"));
    }
    path
}

/// How a VM is started beyond its arguments.
#[derive(Clone, Debug)]
pub struct Launch {
    /// Console lines starting with this are printed on stdout too.
    pub shown: Option<&'static str>,
    /// The guest's memory.
    pub memory_mib: u32,
    /// The guest's virtual CPUs. Under TCG each is a host thread
    /// (multi-threaded TCG), so a machine with two competes for both of
    /// the build machine's cores.
    pub cpus: u32,
    /// A guest reboot resets the machine and it boots again (a fleet's
    /// machines); otherwise QEMU exits (`-no-reboot`), so a test sees a
    /// reboot as QEMU's end.
    pub reboot_in_place: bool,
    /// Append to the console log instead of starting it afresh (a
    /// machine booted again keeps one log).
    pub append_log: bool,
    /// The network namespace QEMU runs in ([`netns::Netns`]), where its
    /// `-netdev tap` devices are.
    pub netns: Option<String>,
    /// Where every console line also goes with the moment the host
    /// received it (a fleet's machine keeps one across its starts).
    pub timeline: Option<Timeline>,
}

/// A console line and the moment the host received it, on the host's
/// monotonic clock: taken by the thread that reads QEMU's serial output
/// as the line's newline arrives, so the time is the host's, not the
/// guest's, and not when a test got round to reading the line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stamped {
    /// When the line arrived.
    pub at: Instant,
    /// The line, without its line end.
    pub text: String,
}

/// A console's lines with their arrival times, shared with the thread
/// that reads them.
pub type Timeline = Arc<Mutex<Vec<Stamped>>>;

impl Default for Launch {
    fn default() -> Launch {
        Launch {
            shown: None,
            memory_mib: 512,
            cpus: 1,
            reboot_in_place: false,
            append_log: false,
            netns: None,
            timeline: None,
        }
    }
}

/// A running virtual machine and its console.
pub struct Vm {
    child: liken_testenv::spawn::Proc,
    /// QEMU's stdin: the serial port's input (`-serial stdio`).
    serial_in: Option<std::process::ChildStdin>,
    lines: Receiver<String>,
    /// The console log.
    pub log: PathBuf,
    monitor: PathBuf,
    started: Instant,
    /// Every console line so far.
    pub seen: Vec<String>,
    /// Where in `seen` the next `expect` starts looking.
    cursor: usize,
    /// What the console printed since its last newline: a firmware or
    /// bootloader menu draws with cursor moves, not lines.
    drawing: Arc<Mutex<Vec<u8>>>,
}

/// How a VM is booted.
pub struct Boot<'a> {
    /// The test's name (the log's name).
    pub name: &'a str,
    /// The initramfs.
    pub initrd: &'a Path,
    /// Kernel arguments after the console ones.
    pub append: &'a str,
}

impl Vm {
    /// Boots the images' kernel with `boot.initrd`. The guest's reboot
    /// ends QEMU (`-no-reboot`), so a test sees a reboot as QEMU's exit.
    pub fn boot(boot: &Boot<'_>) -> Vm {
        Vm::boot_with(boot, &[] as &[&str])
    }

    /// As [`Vm::boot`], with more QEMU arguments (devices such as a
    /// network card; the machine has none otherwise).
    pub fn boot_with(boot: &Boot<'_>, qemu_args: &[impl AsRef<OsStr>]) -> Vm {
        Vm::start(boot.name, &kernel_args(boot, qemu_args), &Launch::default())
    }

    /// As [`Vm::boot_with`], with QEMU running inside network namespace
    /// `netns` ([`netns::Netns`]), where its `-netdev tap` devices are.
    pub fn boot_in_netns(netns: &str, boot: &Boot<'_>, qemu_args: &[impl AsRef<OsStr>]) -> Vm {
        Vm::start(
            boot.name,
            &kernel_args(boot, qemu_args),
            &Launch {
                netns: Some(netns.to_owned()),
                ..Launch::default()
            },
        )
    }

    /// Boots a disk under UEFI: OVMF's code and a per-test copy of its
    /// variable store on pflash, the disk on virtio. The firmware and
    /// the bootloader on the disk choose the kernel and its command
    /// line, as on a machine.
    pub fn boot_uefi(name: &str, disk: &Path, ovmf: &firmware::Ovmf) -> Vm {
        let mut args = ovmf.args();
        args.extend(drives::virtio("disk", disk, None, false));
        Vm::launch(name, &args)
    }

    /// Starts QEMU with the common machine and console arguments, then
    /// `args` (firmware, disks, devices), logging the console to
    /// `<name>.log`.
    pub fn launch(name: &str, args: &[OsString]) -> Vm {
        Vm::start(name, args, &Launch::default())
    }

    /// As [`Vm::launch`], also printing every console line that starts
    /// with `shown` on stdout as it arrives, for a person watching.
    pub fn launch_showing(name: &str, args: &[OsString], shown: &'static str) -> Vm {
        Vm::start(
            name,
            args,
            &Launch {
                shown: Some(shown),
                ..Launch::default()
            },
        )
    }

    /// Starts QEMU as `launch` says (see [`Launch`]). QEMU is started
    /// through liken-testenv's spawner, so it dies with the test process
    /// even when that is killed, and is killed when the `Vm` is dropped.
    pub fn start(name: &str, args: &[OsString], launch: &Launch) -> Vm {
        std::fs::create_dir_all(log_dir()).unwrap_or_else(|e| panic!("mkdir qemu-logs: {e}"));
        let log = log_dir().join(format!("{name}.log"));
        let monitor =
            std::env::temp_dir().join(format!("liken-qemu-{}-{}.mon", name, std::process::id()));
        let _ = std::fs::remove_file(&monitor);
        let accel = match std::env::var("LIKEN_QEMU_ACCEL").as_deref() {
            Ok("kvm") => "kvm",
            _ => "tcg",
        };
        let memory = launch.memory_mib.to_string();
        let cpus = launch.cpus.max(1).to_string();
        // `ip netns exec` enters the namespace and execs QEMU, so the
        // child is QEMU itself either way.
        let mut cmd = match &launch.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "qemu-system-x86_64"]);
                c
            }
            None => Command::new("qemu-system-x86_64"),
        };
        cmd.args([
            "-machine", "q35", "-accel", accel, "-m", &memory, "-smp", &cpus,
        ])
        .args(["-nodefaults", "-no-user-config", "-display", "none"]);
        if !launch.reboot_in_place {
            cmd.arg("-no-reboot");
        }
        cmd.args(["-serial", "stdio"])
            .arg("-monitor")
            .arg(format!("unix:{},server=on,wait=off", monitor.display()))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut proc = liken_testenv::spawn::spawn("qemu-system-x86_64", cmd).unwrap_or_else(|e| {
            panic!("cannot start qemu-system-x86_64: {e}; scripts/setup.sh installs it")
        });
        let child = proc.child_mut();
        let serial_in = child.stdin.take();
        let (tx, rx) = channel();
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("qemu stdout"));
        let stderr = child.stderr.take().unwrap_or_else(|| panic!("qemu stderr"));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(launch.append_log)
            .truncate(!launch.append_log)
            .open(&log)
            .unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        if launch.append_log {
            let _ = writeln!(file, "==== QEMU started ({}) ====", name);
        }
        let err_tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).split(b'\n').map_while(Result::ok) {
                let _ = err_tx.send(format!("qemu: {}", String::from_utf8_lossy(&line)));
            }
        });
        let drawing = Arc::new(Mutex::new(Vec::new()));
        let partial = Arc::clone(&drawing);
        let shown = launch.shown;
        let timeline = launch.timeline.clone();
        std::thread::spawn(move || {
            let mut emit = |line: &[u8]| {
                let at = Instant::now();
                let text = String::from_utf8_lossy(line)
                    .trim_end_matches('\r')
                    .to_owned();
                if let Some(t) = &timeline
                    && let Ok(mut t) = t.lock()
                {
                    t.push(Stamped {
                        at,
                        text: text.clone(),
                    });
                }
                let _ = writeln!(file, "{text}");
                let _ = file.flush();
                if shown.is_some_and(|p| text.starts_with(p)) {
                    println!("{text}");
                }
                tx.send(text).is_ok()
            };
            // Read what arrives rather than whole lines, so text drawn
            // without a newline is visible to `expect_drawn`.
            let mut stdout = stdout;
            let mut buf = [0u8; 4096];
            let mut line = Vec::new();
            loop {
                let n = match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                for &b in &buf[..n] {
                    if b == b'\n' {
                        if !emit(&line) {
                            return;
                        }
                        line.clear();
                    } else {
                        line.push(b);
                    }
                }
                if let Ok(mut p) = partial.lock() {
                    p.clone_from(&line);
                }
            }
            if !line.is_empty() {
                emit(&line);
            }
        });
        Vm {
            child: proc,
            serial_in,
            lines: rx,
            log,
            monitor,
            started: Instant::now(),
            seen: Vec::new(),
            cursor: 0,
            drawing,
        }
    }

    /// Seconds since QEMU started.
    pub fn wall(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Waits up to `within` for a console line containing `needle` that
    /// comes after the line the previous `expect` matched; returns it,
    /// or fails the test naming the log. Lines an `expect_unordered`
    /// read ahead still count, so checks on init's order are not upset
    /// by another program's lines in between.
    pub fn expect(&mut self, needle: &str, within: Duration) -> String {
        if let Some(offset) = self.seen[self.cursor..]
            .iter()
            .position(|l| l.contains(needle))
        {
            self.cursor += offset + 1;
            return self.seen[self.cursor - 1].clone();
        }
        match self.wait_for(|l| l.contains(needle), within) {
            Some(line) => {
                self.cursor = self.seen.len();
                line
            }
            None => self.fail(needle, within),
        }
    }

    /// Waits for a line containing `needle` anywhere in the console so
    /// far or to come, without moving `expect`'s place: for the output
    /// of another process (the stand-in), whose lines reach the console
    /// through init's output thread and may land among init's own.
    pub fn expect_unordered(&mut self, needle: &str, within: Duration) -> String {
        if let Some(line) = self.seen.iter().find(|l| l.contains(needle)) {
            return line.clone();
        }
        match self.wait_for(|l| l.contains(needle), within) {
            Some(line) => line,
            None => self.fail(needle, within),
        }
    }

    /// Waits up to `within` for a console line, from line number `from`
    /// of [`Vm::seen`] on (seen so far or to come), that satisfies `want`,
    /// without moving `expect`'s place; the last such line seen so far,
    /// else the first to come. For output that changes over a boot (the
    /// stand-in's network snapshots); `what` names it in a failure.
    pub fn expect_where(
        &mut self,
        from: usize,
        what: &str,
        within: Duration,
        want: impl Fn(&str) -> bool,
    ) -> String {
        let from = from.min(self.seen.len());
        if let Some(line) = self.seen[from..].iter().rev().find(|l| want(l)) {
            return line.clone();
        }
        match self.wait_for(want, within) {
            Some(line) => line,
            None => self.fail(what, within),
        }
    }

    /// Waits up to `within` for `needle` in what the console has drawn
    /// since its last newline (a bootloader's menu), or in a line to
    /// come; fails the test naming the log.
    pub fn expect_drawn(&mut self, needle: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let drawn = self
                .drawing
                .lock()
                .map(|d| String::from_utf8_lossy(&d).contains(needle))
                .unwrap_or(false);
            if drawn {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.fail(needle, within);
            }
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                Ok(line) => {
                    let found = line.contains(needle);
                    self.seen.push(line);
                    if found {
                        self.cursor = self.seen.len();
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => self.fail(needle, within),
            }
        }
    }

    fn fail(&self, needle: &str, within: Duration) -> ! {
        panic!(
            "no console line with {needle:?} within {} s; the console is in {}; last lines:\n{}",
            within.as_secs(),
            self.log.display(),
            self.tail(15)
        )
    }

    /// Reads lines until one satisfies `pred`, keeping all in `seen`.
    fn wait_for(&mut self, pred: impl Fn(&str) -> bool, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return Some(line);
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// What the console has drawn since its last newline (a firmware
    /// or bootloader screen, with its escape sequences).
    pub fn drawn(&self) -> String {
        self.drawing
            .lock()
            .map(|d| String::from_utf8_lossy(&d).into_owned())
            .unwrap_or_default()
    }

    /// Moves every console line printed so far into `seen`, without
    /// waiting (a machine left running while a test watches the API).
    pub fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
    }

    /// Waits up to `within` for a line containing `needle` among the
    /// lines from index `from` of `seen` on (a place taken with
    /// `seen.len()`); returns the line, or `None` at the deadline.
    pub fn find_after(&mut self, from: usize, needle: &str, within: Duration) -> Option<String> {
        self.drain();
        if let Some(l) = self.seen.iter().skip(from).find(|l| l.contains(needle)) {
            return Some(l.clone());
        }
        self.wait_for(|l| l.contains(needle), within)
    }

    /// Kills QEMU at once, as pulling a machine's power would.
    pub fn kill(&mut self) {
        self.child.kill();
        self.drain();
    }

    /// Whether QEMU has exited.
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// The last `n` lines seen.
    pub fn tail(&self, n: usize) -> String {
        let start = self.seen.len().saturating_sub(n);
        self.seen[start..].join("\n")
    }

    /// Sends a command to QEMU's human monitor.
    pub fn monitor(&self, command: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut s = loop {
            match UnixStream::connect(&self.monitor) {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => panic!("cannot reach QEMU's monitor: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        writeln!(s, "{command}").unwrap_or_else(|e| panic!("monitor write: {e}"));
        // Give QEMU time to read it before the connection closes.
        std::thread::sleep(Duration::from_millis(300));
    }

    /// Types `text` on the serial console (the guest's /dev/console).
    pub fn send_serial(&mut self, text: &str) {
        let input = self
            .serial_in
            .as_mut()
            .unwrap_or_else(|| panic!("QEMU's serial input is closed"));
        input
            .write_all(text.as_bytes())
            .and_then(|()| input.flush())
            .unwrap_or_else(|e| panic!("cannot type on the serial console: {e}"));
    }

    /// Where in [`Vm::seen`] the next [`Vm::expect`] starts looking: a
    /// mark for checks on what a later part of the console holds.
    pub fn position(&self) -> usize {
        self.cursor
    }

    /// After init said `liken: kexec: ok`: waits for the new kernel's
    /// first line and returns its command line, checking that nothing
    /// but the kexec stood between the two. QEMU runs with `-no-reboot`,
    /// so a reset would have ended the process instead; and no firmware
    /// line may appear between the jump and the kernel (OVMF's boot
    /// manager prints `BdsDxe` on every boot; SeaBIOS and GRUB print
    /// nothing on the serial port, but GRUB puts `BOOT_IMAGE=` at the
    /// head of every command line it passes, which a kexec'd kernel's
    /// lacks). The signals are the firmware's and the kernel's, never
    /// init's own word.
    pub fn expect_kexec_jump(&mut self, within: Duration) -> String {
        self.expect("liken: kexec: ok", within);
        let jumped = self.cursor;
        self.expect("] Linux version ", within);
        let first = self.cursor - 1;
        let between = &self.seen[jumped..first];
        assert!(
            !between.iter().any(|l| l.contains("BdsDxe")),
            "the firmware ran between the kexec and the new kernel: {between:?}; the console is \
             in {}",
            self.log.display()
        );
        assert!(
            !self.has_exited(),
            "QEMU ended after the kexec; the console is in {}",
            self.log.display()
        );
        let cmdline = self.expect("] Command line: ", within);
        assert!(
            !cmdline.contains("BOOT_IMAGE=") && cmdline.contains(" liken.kexec="),
            "the new kernel's command line is not the one init passes to a kexec: {cmdline}"
        );
        cmdline
    }

    /// Presses Ctrl-Alt-Del on the guest's keyboard.
    pub fn ctrl_alt_del(&self) {
        self.monitor("sendkey ctrl-alt-delete");
    }

    /// Presses Ctrl-Alt-Del and waits for init's reboot milestone and
    /// QEMU's clean exit.
    pub fn reboot(&mut self, within: Duration) {
        self.ctrl_alt_del();
        self.expect_exit("liken: reboot: ok", within);
    }

    /// Waits for init's last milestone before the machine goes
    /// (`liken: reboot: ok`, `liken: poweroff: ok`), then for QEMU to
    /// exit, cleanly.
    pub fn expect_exit(&mut self, last: &str, within: Duration) {
        self.expect(last, within);
        let status = self.wait_exit(within);
        assert!(
            status.success(),
            "QEMU ended with {status}; the console is in {}",
            self.log.display()
        );
    }

    /// Waits for QEMU to exit (the guest rebooted or powered off).
    pub fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            // Keep draining the console so its last lines are logged.
            while let Ok(line) = self.lines.try_recv() {
                self.seen.push(line);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.seen.push(line);
                }
                return status;
            }
            if Instant::now() > deadline {
                panic!(
                    "QEMU did not exit within {} s; the console is in {}; last lines:\n{}",
                    within.as_secs(),
                    self.log.display(),
                    self.tail(15)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// QEMU's arguments for a direct kernel boot of `boot`, then `qemu_args`.
fn kernel_args(boot: &Boot<'_>, qemu_args: &[impl AsRef<OsStr>]) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "-kernel".into(),
        images().vmlinux.clone().into(),
        "-initrd".into(),
        boot.initrd.into(),
        "-append".into(),
        format!("console=ttyS0 panic=-1 {}", boot.append).into(),
    ];
    args.extend(qemu_args.iter().map(|a| a.as_ref().to_owned()));
    args
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.child.kill();
        let _ = std::fs::remove_file(&self.monitor);
    }
}

/// The uptime a milestone line reports (`uptime 3.79 s`), if any.
pub fn uptime_in(line: &str) -> Option<f64> {
    let rest = line.split("uptime ").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}
