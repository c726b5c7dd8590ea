//! Install mode (SPEC.md step 12): a boot with `liken.install` on its
//! command line writes liken onto the machine's disk instead of running
//! it.
//!
//! The `install` step runs once the Machine is chosen (it names the disk
//! and the machine the installed entries boot as). It:
//! 1. finds the release ([`source`]): in init's own initramfs (`liken
//!    media`), else on the install stick, whose FAT partition it mounts
//!    read-only at /run/liken/stick;
//! 2. chooses the disk to erase ([`target`]): never the stick, never a
//!    disk in use, and refuses to guess between two;
//! 3. verifies every artifact against release.yaml, and only then
//! 4. writes the disk ([`write`](mod@write)) stage by stage, each fsynced, with a
//!    console line per stage.
//!
//! After that it asks the person to remove the media and press Enter,
//! and a waiter thread sees the stick's disk leave /sys/block and a line
//! arrive on the console, then sends the supervisor loop the same
//! power-off event a signal would, so the machine goes down through the
//! orderly shutdown. Any failure is the step's milestone, saying what
//! failed and what to do; nothing more is written, and the machine stays
//! in the supervisor loop answering the control socket, so it reboots
//! and powers off on request.

pub mod source;
pub mod target;
pub mod write;

#[cfg(test)]
pub(crate) mod testutil;

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Sender;
use liken_api::Version;

use crate::console::{self, Outcome};
use crate::context::Boot;
use crate::events::Event;
use crate::modload;
use crate::slot_image::SlotDevice as _;
use crate::sys::block;
use crate::sys::mount::{MountRequest, MsFlags};
use crate::sys::power::PowerAction;

use self::source::{Origin, SourceError, Stick};
use self::target::TargetError;
use self::write::{EntryArgs, WriteError};

/// The step's milestone name, and the prefix of its progress lines.
pub const MILESTONE: &str = "install";

/// How long init waits for an install stick's partition to appear: USB
/// storage is probed after its host controller, and usb-storage waits a
/// second before it scans a new device.
pub const STICK_WAIT: Duration = Duration::from_secs(30);

/// Modules that reading an install stick needs, loaded by name because
/// a USB disk appears only after coldplug has run: host controllers,
/// USB storage, SCSI disks, and FAT with its code pages.
pub const STICK_MODULES: &[&str] = &[
    "xhci_pci",
    "ehci_pci",
    "usb_storage",
    "uas",
    "sd_mod",
    "vfat",
    "nls_cp437",
    "nls_ascii",
];

/// Where install mode looks. [`InstallPaths::real`] for a machine;
/// tests point these into a temporary tree.
#[derive(Clone, Debug)]
pub struct InstallPaths {
    /// The initramfs's root, where `liken media` puts the release.
    pub root: PathBuf,
    /// /sys.
    pub sys: PathBuf,
    /// /dev.
    pub dev: PathBuf,
    /// /proc.
    pub proc: PathBuf,
    /// Where the stick is mounted.
    pub stick_mount: PathBuf,
    /// The console a person presses Enter on.
    pub console: PathBuf,
    /// The layer as the initramfs unpacked it (/etc/liken), which the
    /// per-role layer is packed from.
    pub etc_liken: PathBuf,
}

impl InstallPaths {
    /// The machine's own.
    pub fn real(boot: &Boot) -> InstallPaths {
        InstallPaths {
            root: "/".into(),
            sys: boot.paths.sys.clone(),
            dev: "/dev".into(),
            proc: boot.paths.proc.clone(),
            stick_mount: boot.paths.run_liken.join("stick"),
            console: "/dev/console".into(),
            etc_liken: boot.paths.etc_liken.clone(),
        }
    }
}

/// Why nothing (or not everything) was installed.
#[derive(Debug)]
pub enum InstallError {
    /// No valid Machine document was chosen.
    NoMachine,
    /// The layer's Cluster document is not valid, so the machine's role
    /// (and what of the identity its disk may hold) is unknown.
    NoCluster,
    /// The per-role layer could not be packed.
    Layer(String),
    /// The release could not be found or was refused.
    Source(SourceError),
    /// No disk to erase.
    Target(TargetError),
    /// The target disk is in use.
    InUse {
        /// The disk.
        device: PathBuf,
        /// What of it is mounted or swapped on.
        by: Vec<String>,
    },
    /// The target could not be opened or measured.
    Open {
        /// The disk.
        device: PathBuf,
        /// Why.
        error: String,
    },
    /// Writing failed.
    Write(WriteError),
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InstallError::NoCluster => f.write_str(
                "the layer's Cluster document is not valid (see the machine line), so this \
                 machine's role, and what of the cluster's identity its disk may hold, is \
                 unknown; fix cluster.yaml, write the stick again with `liken stick` and boot it",
            ),
            InstallError::Layer(why) => write!(
                f,
                "cannot pack this machine's layer for its ESP: {why}; write the stick again \
                 with `liken stick`"
            ),
            InstallError::NoMachine => write!(
                f,
                "no valid Machine document was chosen (see the machine line), so there is no \
                 machine to install; fix the layer, write the stick again with `liken stick` \
                 and boot it"
            ),
            InstallError::Source(e) => e.fmt(f),
            InstallError::Target(e) => write!(f, "{e}; nothing was written"),
            InstallError::InUse { device, by } => write!(
                f,
                "{} is in use ({} mounted or swapped on); nothing was written: boot the \
                 install media on its own, without anything mounted from the disk",
                device.display(),
                by.join(", ")
            ),
            InstallError::Open { device, error } => write!(
                f,
                "cannot open {} for writing ({error}); nothing was written: check that the \
                 disk is not in use or write-protected, then boot the install media again",
                device.display()
            ),
            InstallError::Write(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for InstallError {}

fn say(text: &str) {
    console::line(&format!("{MILESTONE}: {text}"));
}

/// What was installed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installed {
    /// The release's version.
    pub version: Version,
    /// The disk written.
    pub device: PathBuf,
    /// Its size.
    pub size: u64,
}

/// Verifies the release in `release_dir` and, only if every artifact
/// checks out, writes it with `layer` (the per-role layer's bytes) onto
/// `device`: the part of install
/// mode that needs no sysfs, no mounts and no console, so tests run it
/// on an image file.
pub fn install_release(
    release_dir: &Path,
    layer: &[u8],
    device: &Path,
    args: &EntryArgs,
    keys: Option<&source::EnrolKeys>,
    say: &mut dyn FnMut(&str),
) -> Result<Installed, InstallError> {
    let verified = source::verify(release_dir, say).map_err(InstallError::Source)?;
    say(&format!(
        "release {} verified ({} artifacts)",
        verified.release.version,
        verified.release.artifacts.len()
    ));
    let open_err = |e: std::io::Error| InstallError::Open {
        device: device.to_owned(),
        error: e.to_string(),
    };
    let mut disk = write::open_target(device).map_err(open_err)?;
    let size = disk.capacity().map_err(open_err)?;
    let esp = write::decide_esp(&verified, layer, args, keys).map_err(InstallError::Write)?;
    let guids = write::random_guids().map_err(open_err)?;
    let volume_id = write::random_volume_id().map_err(open_err)?;
    let options = write::esp_options(volume_id, write::fat_time(SystemTime::now()));
    let plan =
        write::decide_plan(size, guids, esp, options, &verified).map_err(InstallError::Write)?;
    write::write_disk(&mut disk, &plan, say).map_err(InstallError::Write)?;
    Ok(Installed {
        version: verified.release.version.clone(),
        device: device.to_owned(),
        size,
    })
}

/// The install stick partitions sysfs shows now.
pub fn find_sticks(sys: &Path) -> Vec<Stick> {
    block::labelled_partitions(sys)
        .into_iter()
        .filter(|p| p.label == source::STICK_LABEL)
        .map(|p| {
            let disk = p
                .device
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| target::disk_of_partition(sys, n));
            Stick {
                device: p.device,
                disk,
            }
        })
        .collect()
}

/// Finds the release's origin, waiting up to `wait` for a stick.
fn find_origin(paths: &InstallPaths, wait: Duration) -> Result<Origin, SourceError> {
    let release = paths.root.join(source::RELEASE_DIR);
    let media_release = release.join(liken_api::release::RELEASE_FILE).is_file();
    let media_layer = paths.root.join(source::LAYER_FILE).is_file();
    let t0 = Instant::now();
    let mut told = false;
    loop {
        let sticks = find_sticks(&paths.sys);
        let waited = t0.elapsed();
        match source::decide_source(media_release, media_layer, &sticks, waited.as_secs()) {
            Err(SourceError::NoSource { .. }) if waited < wait => {
                if !told {
                    say(&format!(
                        "waiting up to {} s for the install stick (a partition named {})",
                        wait.as_secs(),
                        source::STICK_LABEL
                    ));
                    told = true;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
            other => return other,
        }
    }
}

/// The step: runs install mode when the command line asks for it.
pub fn step(boot: &mut Boot) -> Outcome {
    if !boot.cmdline.install {
        return Outcome::Skipped("not install mode".to_owned());
    }
    // Whatever happens below, this boot runs no k3s.
    boot.no_service = Some("install mode".to_owned());
    let paths = InstallPaths::real(boot);
    match run(boot, &paths) {
        Ok((installed, stick_disk)) => {
            say("done; remove the install media and press Enter to power off");
            spawn_waiter(stick_disk, paths, boot.events.clone());
            Outcome::ok_with(format!(
                "release {} on {} ({})",
                installed.version,
                installed.device.display(),
                target::human_size(installed.size)
            ))
        }
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

fn run(boot: &mut Boot, paths: &InstallPaths) -> Result<(Installed, Option<String>), InstallError> {
    let Some(machine) = boot.machine.clone() else {
        return Err(InstallError::NoMachine);
    };
    let Some(cluster) = &boot.cluster else {
        return Err(InstallError::NoCluster);
    };
    let role = if cluster.is_leader(&machine.metadata.name) {
        liken_api::Role::Leader
    } else {
        liken_api::Role::Follower
    };
    if let Some(report) = boot.load_modules(STICK_MODULES)
        && let Err(text) = modload::describe(&report, 0.0)
    {
        say(&format!("loading the modules for a stick: {text}"));
    }
    let origin = find_origin(paths, STICK_WAIT).map_err(InstallError::Source)?;
    let (root, stick_disk) = match &origin {
        Origin::Media => {
            say("installing from this initramfs (liken media)");
            (paths.root.clone(), None)
        }
        Origin::Stick(stick) => {
            // Without its disk's name the stick could not be kept out of
            // the choice of the disk to erase.
            if stick.disk.is_none() {
                return Err(InstallError::Source(SourceError::StickDisk(
                    stick.device.clone(),
                )));
            }
            mount_stick(boot, paths, stick)?;
            say(&format!(
                "installing from the stick {} (mounted read-only at {})",
                stick.device.display(),
                paths.stick_mount.display()
            ));
            (paths.stick_mount.clone(), stick.disk.clone())
        }
    };
    let result = install_from(paths, &machine, role, &root, stick_disk.as_deref());
    if let Origin::Stick(_) = origin {
        // Unmounted whatever happened, so the stick can be pulled.
        if let Err(e) = boot.sys.mount.unmount(&paths.stick_mount, false) {
            let _ = boot.sys.mount.unmount(&paths.stick_mount, true);
            say(&format!(
                "unmounting the stick: {e}; detached it instead, it is safe to remove"
            ));
        }
    }
    result.map(|i| (i, stick_disk))
}

fn mount_stick(boot: &Boot, paths: &InstallPaths, stick: &Stick) -> Result<(), InstallError> {
    let mount_err = |error: String| {
        InstallError::Source(SourceError::Mount {
            device: stick.device.clone(),
            error,
        })
    };
    std::fs::create_dir_all(&paths.stick_mount).map_err(|e| mount_err(e.to_string()))?;
    boot.sys
        .mount
        .mount(&MountRequest {
            source: stick.device.display().to_string(),
            target: paths.stick_mount.clone(),
            fstype: "vfat".to_owned(),
            flags: MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            data: None,
        })
        .map_err(|e| mount_err(e.to_string()))
}

fn install_from(
    paths: &InstallPaths,
    machine: &liken_api::Machine,
    role: liken_api::Role,
    root: &Path,
    stick_disk: Option<&str>,
) -> Result<Installed, InstallError> {
    let layer = root.join(source::LAYER_FILE);
    if !layer.is_file() {
        return Err(InstallError::Source(if stick_disk.is_some() {
            SourceError::StickWithoutLayer(layer.clone())
        } else {
            SourceError::MediaWithoutLayer
        }));
    }
    let need = write::minimum_size().map_err(|e| {
        InstallError::Write(WriteError::Plan(format!("the layout: {e} (a bug in init)")))
    })?;
    let disks = target::read_disks(&paths.sys, &paths.dev);
    let chosen = target::decide_target(
        machine.spec.install_disk.as_deref(),
        &disks,
        stick_disk,
        need,
    )
    .map_err(InstallError::Target)?;
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let in_use = target::decide_in_use(
        &chosen.name,
        &read(&paths.proc.join("mounts")),
        &read(&paths.proc.join("swaps")),
    );
    if !in_use.is_empty() {
        return Err(InstallError::InUse {
            device: chosen.device,
            by: in_use,
        });
    }
    say(&format!(
        "target {} ({}); checking the release before writing",
        chosen.device.display(),
        target::human_size(chosen.size)
    ));
    let cmdline = read(&paths.proc.join("cmdline"));
    let args =
        write::decide_entry_args(&cmdline, &machine.metadata.name, &machine.spec.kernel_args);
    // The media keep the whole layer (they install every machine); this
    // disk gets only what its role needs (crate::role_layer).
    let packed = crate::role_layer::pack(&paths.etc_liken, role).map_err(InstallError::Layer)?;
    say(&match role {
        liken_api::Role::Leader => {
            "the ESP gets the whole layer: a leader keeps the cluster's identity".to_owned()
        }
        liken_api::Role::Follower => "the ESP gets a follower's layer: the documents, the agent \
                                     token and the server CA certificate, no private key"
            .to_owned(),
    });
    let keys = source::read_enrol_keys(root).map_err(InstallError::Source)?;
    if keys.is_some() {
        say(&format!(
            "the ESP gets the media's Secure Boot keys ({}: PK, KEK and db), which \
             systemd-boot enrols if the firmware is in setup mode",
            liken_api::bootloader::SECURE_BOOT_KEYS_DIR
        ));
    }
    let t0 = Instant::now();
    let installed = install_release(
        &root.join(source::RELEASE_DIR),
        &packed,
        &chosen.device,
        &args,
        keys.as_ref(),
        &mut |l| say(l),
    )?;
    say(&format!(
        "{} written in {:.0} s",
        installed.device.display(),
        t0.elapsed().as_secs_f64()
    ));
    Ok(installed)
}

/// Waits for the stick's disk to leave `sys`/block (when installing from
/// one) and then for a line on the console; then asks the loop to power
/// off.
fn spawn_waiter(stick_disk: Option<String>, paths: InstallPaths, events: Sender<Event>) {
    let spawned = std::thread::Builder::new()
        .name("install-wait".into())
        .spawn(move || {
            if let Some(disk) = stick_disk {
                let node = paths.sys.join("block").join(&disk);
                while node.exists() {
                    std::thread::sleep(Duration::from_millis(250));
                }
                say(&format!(
                    "the install stick ({disk}) is gone; press Enter to power off"
                ));
            }
            if let Err(e) = wait_for_line(&paths.console) {
                say(&format!(
                    "cannot read a key from {} ({e}); power off with the power button or a \
                     poweroff request on the control socket",
                    paths.console.display()
                ));
                return;
            }
            say("powering off");
            let _ = events.send(Event::Signal(PowerAction::Poweroff));
        });
    if let Err(e) = spawned {
        say(&format!(
            "cannot start the thread that waits for Enter ({e}); power off with the power \
             button or a poweroff request on the control socket"
        ));
    }
}

/// Blocks until a line (Enter) arrives on `console`.
pub fn wait_for_line(console: &Path) -> std::io::Result<()> {
    let mut f = std::fs::File::open(console)?;
    let mut byte = [0u8; 1];
    loop {
        match f.read(&mut byte) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the console has no input",
                ));
            }
            Ok(_) if byte == [b'\n'] || byte == [b'\r'] => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests;
