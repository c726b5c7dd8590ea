//! Install media: `liken stick` (a bootable disk image) and `liken
//! media` (a netboot initramfs), each carrying one release and one
//! deployment's layer to the computers that install it.
//!
//! Both commands do their checking before any output exists: the
//! release directory is verified artifact by artifact against
//! release.yaml ([`release`]), the deployment's manifests and identity
//! are checked and packed as `liken layer` packs them, and the kernel
//! arguments are checked ([`menu`]). Only then is the output created,
//! under a temporary name beside its final one ([`output`]).
//!
//! A stick, and netboot media made without `-role`, carry the whole
//! deployment layer, and so every secret of the cluster (CA keys, the
//! service-account key, the server and agent tokens): one medium must be
//! able to install any machine, leader or follower. Each command says so
//! once, on standard error, before it writes anything ([`warn_secrets`]);
//! what an installed machine keeps of it depends on its role, which the
//! installer decides. `liken media -role follower` packs only what a
//! follower keeps ([`crate::layer::build_for`]: the manifests, the agent
//! token and the server CA certificate, no private key and not the
//! server token), so the image that a network boot hands to followers,
//! which anyone on that network can fetch, cannot make a leader or sign
//! anything; `-role leader` is the whole layer, for leaders only. `liken
//! stick -role` does the same for a stick and lists only that role's
//! machines on its menu.
//!
//! Module map:
//! - [`release`]: reading and verifying a release directory.
//! - [`menu`]: the install menu for systemd-boot and GRUB (pure text).
//! - [`stick`]: the disk image, through liken-disk (GPT, FAT32, GRUB).
//! - [`initramfs`]: the netboot image (cpio concatenation).
//! - [`output`]: temporary file, fsync, rename, `-force`.

pub mod initramfs;
pub mod menu;
pub mod output;
pub mod release;
pub mod stick;

use std::fmt;
use std::path::{Path, PathBuf};

use crate::Io;
use crate::args::Parsed;
use crate::deployment::IDENTITY_DIR;
use crate::layer::{self, LayerError};
use crate::releases::progress::{Progress, Style};
use crate::releases::size::human;
use crate::secureboot::EnrolKeys;
use liken_api::Role;
use output::Output;
use release::{ReleaseError, VerifiedRelease};

/// Why no stick or netboot image was written.
#[derive(Debug)]
pub enum MediaError {
    /// The release directory failed verification.
    Release(ReleaseError),
    /// The deployment could not be packed.
    Layer(LayerError),
    /// A kernel argument or machine name cannot go on the menu.
    Args(menu::ArgError),
    /// The output exists and `-force` was not given.
    Exists(PathBuf),
    /// `-role` is neither leader nor follower.
    BadRole(String),
    /// The deployment has no machine of the role asked for.
    NoMachine(Role),
    /// The output exists and is not a regular file.
    NotAFile(PathBuf),
    /// The image could not be laid out.
    Disk(String),
    /// An artifact changed after it was verified.
    Changed(PathBuf),
    /// The `-secureboot` keys could not be read.
    SecureBoot(crate::secureboot::SecureBootError),
    /// Reading or writing failed.
    Io {
        /// What was being done.
        doing: String,
        /// The system's reason.
        error: std::io::Error,
    },
}

impl fmt::Display for MediaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MediaError::Release(e) => write!(f, "{e}"),
            MediaError::Layer(e) => write!(f, "the deployment: {e}"),
            MediaError::Args(e) => write!(f, "{e}"),
            MediaError::Exists(p) => write!(
                f,
                "{} exists; pass -force to replace it, or choose another -output",
                p.display()
            ),
            MediaError::BadRole(r) => write!(
                f,
                "-role {r:?} is not a role: give leader or follower (or leave -role out for \
                 media that install every machine)"
            ),
            MediaError::NoMachine(r) => write!(
                f,
                "the deployment has no {r} machine, so there is nothing for these media to \
                 install"
            ),
            MediaError::NotAFile(p) => write!(
                f,
                "{} is not a regular file; write the image to a file, then copy it onto the \
                 device (dd if=<file> of=/dev/sdX bs=4M conv=fsync)",
                p.display()
            ),
            MediaError::Disk(why) => write!(f, "{why}"),
            MediaError::Changed(p) => write!(
                f,
                "{} changed after it was verified; make sure nothing writes the release \
                 directory and run again",
                p.display()
            ),
            MediaError::SecureBoot(e) => write!(f, "-secureboot: {e}"),
            MediaError::Io { doing, error } => write!(f, "{doing}: {error}"),
        }
    }
}

impl std::error::Error for MediaError {}

impl From<liken_disk::fat::FatError> for MediaError {
    fn from(e: liken_disk::fat::FatError) -> MediaError {
        match e {
            liken_disk::fat::FatError::Changed(p) => MediaError::Changed(p),
            e => MediaError::Disk(format!("the stick's FAT partition: {e}")),
        }
    }
}

impl From<liken_disk::gpt::GptError> for MediaError {
    fn from(e: liken_disk::gpt::GptError) -> MediaError {
        MediaError::Disk(format!("the stick's partition table: {e}"))
    }
}

impl From<liken_disk::grub::GrubError> for MediaError {
    fn from(e: liken_disk::grub::GrubError) -> MediaError {
        MediaError::Disk(format!("the stick's BIOS boot code: {e}"))
    }
}

impl From<menu::ArgError> for MediaError {
    fn from(e: menu::ArgError) -> MediaError {
        MediaError::Args(e)
    }
}

/// What both commands read, checked.
struct Checked {
    /// The role the medium is for; `None`: every machine.
    role: Option<Role>,
    release: VerifiedRelease,
    layer: Vec<u8>,
    cluster: String,
    machines: Vec<String>,
    output: PathBuf,
    force: bool,
}

fn check(parsed: &Parsed, style: Style, role: Option<Role>) -> Result<Checked, crate::Error> {
    let [release_dir, deployment] = parsed.paths()?;
    let output = PathBuf::from(parsed.value("output").ok_or_else(|| parsed.usage())?);
    let force = parsed.switch("force");
    // Refuse an existing output before spending time on hashing.
    if !force && std::fs::symlink_metadata(&output).is_ok() {
        return Err(MediaError::Exists(output).into());
    }
    let release =
        release::verify(&release_dir, &release::REQUIRED, style).map_err(MediaError::Release)?;
    let seal = layer::seal_key(parsed)?;
    let (layer, manifests) = layer::build_for(
        &deployment,
        &deployment.join(IDENTITY_DIR),
        parsed.switch("unsigned"),
        role,
        seal.as_ref(),
    )
    .map_err(MediaError::Layer)?;
    let cluster = &manifests.cluster.doc;
    let machines: Vec<String> = manifests
        .machines
        .iter()
        .map(|m| m.doc.metadata.name.clone())
        .filter(|name| role.is_none_or(|r| (r == Role::Leader) == cluster.is_leader(name)))
        .collect();
    if machines.is_empty() {
        return Err(MediaError::NoMachine(role.unwrap_or(Role::Follower)).into());
    }
    for m in &machines {
        menu::check_machine(m).map_err(MediaError::Args)?;
    }
    Ok(Checked {
        role,
        release,
        layer,
        cluster: manifests.cluster.doc.metadata.name.clone(),
        machines,
        output,
        force,
    })
}

/// The medium a command writes, for [`warn_secrets`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Medium {
    Stick,
    Netboot,
}

/// Says, once, that the medium will hold the cluster's secrets and how
/// to keep them.
fn warn_secrets(
    err: &mut dyn std::io::Write,
    medium: Medium,
    output: &Path,
    cluster: &str,
    role: Option<Role>,
) -> std::io::Result<()> {
    match role {
        Some(Role::Follower) => {
            let keep = match medium {
                Medium::Stick => {
                    "keep the stick private and wipe it once the followers are installed"
                }
                Medium::Netboot => "serve it only to the followers being installed",
            };
            return writeln!(
                err,
                "liken: note: {} holds cluster {cluster}'s agent token, which joins a machine \
                 as a follower, and no private key or server token; {keep}",
                output.display()
            );
        }
        Some(Role::Leader) => {
            return writeln!(
                err,
                "liken: warning: {} will hold the secrets of cluster {cluster} (its CA keys, \
                 service-account key, server token and agent token), so that it can install \
                 its leaders; whoever reads the image can take the cluster over: {}",
                output.display(),
                match medium {
                    Medium::Stick =>
                        "keep it private and wipe the stick once the leaders are installed",
                    Medium::Netboot =>
                        "serve it only to the leaders being installed, on a network \
                                        you trust, and stop serving it afterwards",
                }
            );
        }
        None => {}
    }
    let keep = match medium {
        Medium::Stick => {
            "whoever reads the image or the stick can take the cluster over: keep both as \
             private as the identity, and wipe the stick once the machines are installed"
        }
        Medium::Netboot => {
            "whoever reads the image can take the cluster over: serve it only to the machines \
             being installed, on a network you trust, and stop serving it afterwards"
        }
    };
    writeln!(
        err,
        "liken: warning: {} will hold the secrets of cluster {cluster} (its CA keys, \
         service-account key, server token and agent token), so that it can install any of its \
         machines; {keep}",
        output.display()
    )
}

fn label(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Reads `-role`: `None` (media for every machine), leader or follower.
fn parse_role(parsed: &Parsed) -> Result<Option<Role>, MediaError> {
    match parsed.value("role") {
        None => Ok(None),
        Some("leader") => Ok(Some(Role::Leader)),
        Some("follower") => Ok(Some(Role::Follower)),
        Some(other) => Err(MediaError::BadRole(other.to_owned())),
    }
}

/// The release's boot files (systemd-boot, the kernel) that carry no
/// signature holding the fleet's db certificate: once the keys are
/// enrolled the firmware refuses them.
fn unsigned_for(release: &VerifiedRelease, keys: &EnrolKeys) -> Result<Vec<String>, MediaError> {
    let mut unsigned = Vec::new();
    for name in [
        liken_api::release::ARTIFACT_SYSTEMD_BOOT,
        liken_api::release::ARTIFACT_KERNEL,
    ] {
        let a = release.artifact(name).map_err(MediaError::Release)?;
        let path = release.path_of(a);
        let bytes = std::fs::read(&path).map_err(|error| MediaError::Io {
            doing: format!("reading {}", path.display()),
            error,
        })?;
        if !crate::secureboot::efi::signed_with(&bytes, &keys.db_cert) {
            unsigned.push(a.file.to_string());
        }
    }
    Ok(unsigned)
}

/// Runs `liken stick`.
pub fn stick_command(parsed: Parsed, io: &mut Io) -> Result<(), crate::Error> {
    let role = parse_role(&parsed)?;
    let consoles = parsed.values("console");
    let extra = parsed.values("kernel-arg");
    let kernel_args = menu::decide_kernel_args(&consoles, &extra).map_err(MediaError::Args)?;
    let keys = match parsed.value("secureboot") {
        Some(dir) => Some(
            crate::secureboot::read_enrol_keys(Path::new(dir)).map_err(MediaError::SecureBoot)?,
        ),
        None => None,
    };
    let style = Style::detect();
    let c = check(&parsed, style, role)?;
    let m = menu::InstallMenu {
        version: c.release.release.version.clone(),
        machines: c.machines.clone(),
        microcode: c.release.has_microcode(),
        kernel_args,
        enroll_keys: keys.is_some(),
    };
    let inputs = stick::StickInputs {
        release: &c.release,
        layer: &c.layer,
        menu: &m,
        keys: keys.as_ref(),
    };
    let total = stick::build_tree(&inputs)?.content_bytes();
    warn_secrets(io.err, Medium::Stick, &c.output, &c.cluster, c.role)?;
    if let Some(k) = &keys {
        let unsigned = unsigned_for(&c.release, k)?;
        if !unsigned.is_empty() {
            writeln!(
                io.err,
                "liken: warning: release {}'s {} {} no signature by the fleet's db key: \
                 once systemd-boot has enrolled the keys, the firmware refuses to start them, \
                 so this stick and the disks it installs boot again only after the platform \
                 keys are cleared in the firmware setup; sign them with db.key (sbsign) and \
                 bundle the release again",
                c.release.release.version,
                unsigned.join(" and "),
                if unsigned.len() == 1 {
                    "carries"
                } else {
                    "carry"
                }
            )?;
        }
    }
    let mut out = Output::create(&c.output, c.force)?;
    let mut progress = Progress::new(style, label(&c.output), total, 0);
    let summary = match stick::write(out.file(), &inputs, &mut progress) {
        Ok(s) => s,
        Err(e) => {
            progress.abandon();
            return Err(e.into());
        }
    };
    progress.finish("written");
    out.commit()?;
    writeln!(
        io.out,
        "wrote {} ({}): release {}, install entries for {} (UEFI and BIOS)",
        c.output.display(),
        human(summary.disk_size),
        c.release.release.version,
        c.machines.join(", ")
    )?;
    if let Some(k) = &keys {
        writeln!(
            io.out,
            "Secure Boot: {} holds the fleet's PK, KEK and db (owner {}; the public halves, \
             no private key) and loader.conf says {}: systemd-boot enrols them on a machine \
             whose firmware is in setup mode, then resets it; install mode copies them to \
             the disk",
            liken_api::bootloader::SECURE_BOOT_KEYS_DIR,
            k.owner.to_string().to_lowercase(),
            liken_api::bootloader::SECURE_BOOT_ENROLL
        )?;
    }
    writeln!(
        io.out,
        "copy it onto a USB stick with: dd if={} of=/dev/sdX bs=4M conv=fsync",
        c.output.display()
    )?;
    Ok(())
}

/// Runs `liken media`.
pub fn media_command(parsed: Parsed, io: &mut Io) -> Result<(), crate::Error> {
    let role = parse_role(&parsed)?;
    let style = Style::detect();
    let c = check(&parsed, style, role)?;
    warn_secrets(io.err, Medium::Netboot, &c.output, &c.cluster, c.role)?;
    let mut out = Output::create(&c.output, c.force)?;
    let total = initramfs::content_bytes(&c.release, &c.layer);
    let mut progress = Progress::new(style, label(&c.output), total, 0);
    let result = {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, out.file());
        initramfs::write(&mut w, &c.release, &c.layer, &mut progress)
    };
    if let Err(e) = result {
        progress.abandon();
        return Err(e.into());
    }
    progress.finish("written");
    out.commit()?;
    let size = std::fs::metadata(&c.output).map(|m| m.len()).unwrap_or(0);
    let kernel = c
        .release
        .artifact(liken_api::release::ARTIFACT_KERNEL)
        .map(|a| c.release.path_of(a))
        .map_err(MediaError::Release)?;
    let whose = match c.role {
        Some(Role::Follower) => "the followers' layer (no private key) for",
        Some(Role::Leader) => "the leaders' layer for",
        None => "the layer for",
    };
    writeln!(
        io.out,
        "wrote {} ({}): release {} with {whose} {}",
        c.output.display(),
        human(size),
        c.release.release.version,
        c.machines.join(", ")
    )?;
    writeln!(
        io.out,
        "netboot it as the initrd of {} with the kernel arguments: liken.install=1 \
         liken.machine=<name> console=<your console>",
        kernel.display()
    )?;
    Ok(())
}
