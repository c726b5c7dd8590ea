//! `liken bundle`: lay out one release in a channel directory.
//!
//! The inputs (eight required, microcode optional) are copied into
//! `<channel>/<version>/` under the
//! fixed names of [`layout::INPUTS`], each hashed while it is copied, and
//! release.yaml is written beside them naming every file by size and
//! SHA-256. Then channel.yaml's latest moves forward if this release is
//! the newest, fresh for `-channel-days` (signed with `-sign`; an
//! unsigned rewrite removes a signature it leaves stale and says so, see
//! [`super::channel`]).
//!
//! A version is immutable once published: machines pin release.yaml by
//! digest, so rewriting a release under its old name would strand every
//! Cluster that trusts it. The release is therefore assembled in a
//! hidden staging directory (`.<version>.bundle-<pid>`) and moved into
//! place with one no-replace rename, so a crash leaves no half release
//! under the version's name and an existing version is never touched.
//!
//! The system image gets its dm-verity hash tree here (see
//! [`append_verity`]): liken.sqfs in the release is the squashfs,
//! zeros to the next 4096-byte block, then the tree, and release.yaml's
//! `verity` record gives the root hash and where the tree starts. The
//! system artifact's sha256 and size cover that whole file, which is
//! what a slot holds; squashfs ignores the bytes after its own end.
//!
//! With `-secureboot-key` it also makes one signed unified kernel image
//! per slot ([`super::uki`]) from the copies in staging, so the images
//! hold exactly the kernel and initrds the release lists: the slot and
//! the root hash on each image's command line, signed by the fleet's db
//! key, and listed in release.yaml (artifacts `uki-a` and `uki-b`, and
//! the `uki` record of the command line) under the release's own
//! signature.
//!
//! The slot check runs before anything is copied (from the inputs'
//! sizes, the system image's with its tree) and again on the bytes
//! actually copied. [`decide_slot_fit`] holds the rule and explains the
//! headroom.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use liken_api::digest::to_hex;
use liken_api::release::{
    ARTIFACT_BOOT, ARTIFACT_KERNEL, ARTIFACT_MICROCODE, ARTIFACT_SYSTEM, Artifact, Component,
    RELEASE_FILE, Release, Uki, VERITY_ALGORITHM, VERITY_BLOCK_SIZE, Verity,
};
use liken_api::validate::Validate;
use liken_api::verity::VerityArg;
use liken_api::{Digest, FileName, Sha256Hex, Version, decode};
use liken_api::{Slot, bootloader};
use liken_disk::verity::{self, Geometry, VerityError};
use sha2::{Digest as _, Sha256};

use super::channel::{self, ChannelError};
use super::layout::{self, INPUTS};
use super::progress::{Progress, Style};
use super::size::human;
use super::stream::{self, CopyError};
use crate::files;

/// The default slot size, as the usage line shows it.
pub const DEFAULT_SLOT_SIZE: u64 = 1 << 30;

/// The share of a slot kept free, in percent. See [`decide_slot_fit`].
pub const HEADROOM_PERCENT: u64 = 10;

// The tree liken-disk builds is the one format release.yaml's record
// allows; a change to either must be a change to both.
const _: () = assert!(verity::BLOCK_SIZE == VERITY_BLOCK_SIZE);

/// What `bundle` was asked to do, already parsed.
#[derive(Clone, Debug)]
pub struct BundleRequest {
    /// The input files, in [`INPUTS`] order; `None` for an optional
    /// input the release goes without.
    pub inputs: [Option<PathBuf>; 9],
    /// The channel directory (created if missing).
    pub channel: PathBuf,
    /// The new release's version.
    pub version: Version,
    /// The boot slot size in bytes.
    pub slot_size: u64,
    /// The upstream components, as name=version pairs.
    pub components: Vec<Component>,
    /// How to show progress.
    pub progress: Style,
    /// The key that signs release.yaml and channel.yaml, if any.
    pub sign: Option<liken_api::signing::SigningKey>,
    /// How many days a channel.yaml written now stays current.
    pub channel_days: u32,
    /// The signed unified kernel images to make, if any.
    pub uki: Option<UkiSigning>,
}

/// `-secureboot-key <dir>`: what the unified kernel images are built on
/// and signed with.
#[derive(Clone, Debug)]
pub struct UkiSigning {
    /// The fleet's db private key (`<dir>/db.key`), read by sbsign only.
    pub key: PathBuf,
    /// Its certificate (`<dir>/db.crt`).
    pub cert: PathBuf,
    /// The stub ([`super::uki::STUB`]).
    pub stub: PathBuf,
    /// The arguments after the slot and root hash
    /// ([`bootloader::default_uki_args`], or each `-uki-arg`).
    pub args: Vec<String>,
}

/// The signing for `-secureboot-key <dir>`, `-layer-key` and each
/// `-uki-arg`: the key directory `liken keygen -secureboot` wrote, whose
/// db.key must be readable by its owner alone (0600, as keygen makes
/// it). `layer_key` (the release.pub whose key seals the fleet's
/// layers) goes first among the arguments after the slot and root hash,
/// as `liken.layer-key=`, so the signed image names the one key whose
/// seal init accepts a layer under ([`liken_api::layer_seal`]).
pub fn uki_signing<S: AsRef<str>>(
    dir: &Path,
    layer_key: &liken_api::signing::ReleaseKey,
    args: &[S],
) -> Result<UkiSigning, BundleError> {
    use std::os::unix::fs::PermissionsExt;
    let key = dir.join("db.key");
    let cert = dir.join("db.crt");
    for (path, what) in [(&key, "the db private key"), (&cert, "the db certificate")] {
        let meta = fs::metadata(path).map_err(|e| BundleError::Input {
            what,
            path: path.clone(),
            reason: format!(
                "{e}; -secureboot-key names the directory `liken keygen -secureboot` wrote"
            ),
        })?;
        if !meta.is_file() {
            return Err(BundleError::Input {
                what,
                path: path.clone(),
                reason: "not a regular file".to_owned(),
            });
        }
        if path == &key && meta.permissions().mode() & 0o077 != 0 {
            return Err(BundleError::Input {
                what,
                path: path.clone(),
                reason: format!(
                    "its mode is {:o}: others can read the key that decides what every machine \
                     boots; chmod 600 it (and think about who read it)",
                    meta.permissions().mode() & 0o777
                ),
            });
        }
    }
    let given: Vec<String> = if args.is_empty() {
        bootloader::default_uki_args()
    } else {
        args.iter().map(|a| a.as_ref().to_owned()).collect()
    };
    for a in &given {
        if a.is_empty() || a.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
            return Err(BundleError::Invalid(format!(
                "-uki-arg {a:?} is not one kernel argument (printable ASCII, no spaces)"
            )));
        }
        if a.starts_with("liken.slot=")
            || a.starts_with("liken.verity=")
            || a.starts_with(liken_api::layer_seal::ARG)
        {
            return Err(BundleError::Invalid(format!(
                "-uki-arg {a:?}: the slot, root hash and layer key are written by bundle itself \
                 (the layer key from -layer-key)"
            )));
        }
    }
    let args = std::iter::once(liken_api::layer_seal::render_arg(&layer_key.public_key))
        .chain(given)
        .collect();
    Ok(UkiSigning {
        key,
        cert,
        stub: PathBuf::from(super::uki::STUB),
        args,
    })
}

/// Why bundle refused or failed.
#[derive(Debug)]
pub enum BundleError {
    /// A `component=version` argument is malformed.
    Component(String),
    /// A component is named twice.
    DuplicateComponent(String),
    /// An input is missing or not a regular file.
    Input {
        /// What the input is.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Why it cannot be read.
        reason: String,
    },
    /// The slot-bound artifacts do not fit the slot with headroom.
    SlotTooSmall(SlotFit),
    /// The version already exists in the channel.
    Exists {
        /// The release directory that exists.
        dir: PathBuf,
    },
    /// Copying or writing failed.
    Io {
        /// What was being done.
        doing: String,
        /// The error.
        error: io::Error,
    },
    /// The input changed size while it was copied.
    Changed {
        /// The input's path.
        path: PathBuf,
    },
    /// The system image's dm-verity tree could not be built.
    Verity {
        /// The file it was built over.
        path: PathBuf,
        /// Why.
        error: VerityError,
    },
    /// A unified kernel image could not be made.
    Uki {
        /// The slot it was for.
        slot: Slot,
        /// Why.
        error: super::uki::UkiError,
    },
    /// The release document did not pass its own checks.
    Invalid(String),
    /// channel.yaml could not be updated (the release itself is in place).
    Channel(ChannelError),
}

impl fmt::Display for BundleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BundleError::Component(arg) => write!(
                f,
                "component {arg:?} must be name=version, for example linux=6.1.0-28 or k3s=v1.31.4+k3s1"
            ),
            BundleError::DuplicateComponent(name) => {
                write!(
                    f,
                    "component {name:?} is given twice; give each component once"
                )
            }
            BundleError::Input { what, path, reason } => write!(
                f,
                "{what} {}: {reason}; pass the path of the file to bundle",
                path.display()
            ),
            BundleError::SlotTooSmall(fit) => write!(
                f,
                "the slot-bound artifacts (kernel, system, boot, microcode) take {} but a {} slot \
                 holds at most {} once {HEADROOM_PERCENT}% is kept as headroom for later releases; \
                 shrink the system image or pass a larger -slot-size (the install layout's slot \
                 partition size)",
                human(fit.used),
                human(fit.slot_size),
                human(fit.allowed)
            ),
            BundleError::Exists { dir } => write!(
                f,
                "{} already exists: released versions are immutable, because catalogs pin them by \
                 digest; bundle this release under the next serial instead",
                dir.display()
            ),
            BundleError::Io { doing, error } => write!(f, "{doing}: {error}"),
            BundleError::Changed { path } => write!(
                f,
                "{} changed size while it was being copied; wait for whatever writes it to finish \
                 and bundle again",
                path.display()
            ),
            BundleError::Verity { path, error } => write!(
                f,
                "building the dm-verity hash tree of {}: {error}",
                path.display()
            ),
            BundleError::Uki { slot, error } => write!(
                f,
                "making slot {slot}'s signed unified kernel image: {error}"
            ),
            BundleError::Invalid(msg) => write!(f, "{msg}"),
            BundleError::Channel(e) => write!(
                f,
                "the release is in place, but channel.yaml was not updated: {e}"
            ),
        }
    }
}

impl std::error::Error for BundleError {}

/// Reads one `name=version` argument.
pub fn parse_component(arg: &str) -> Result<Component, BundleError> {
    match arg.split_once('=') {
        Some((name, version))
            if !name.is_empty()
                && !version.is_empty()
                && !name.contains(char::is_whitespace)
                && !version.contains(char::is_whitespace) =>
        {
            Ok(Component {
                name: name.to_owned(),
                version: version.to_owned(),
            })
        }
        _ => Err(BundleError::Component(arg.to_owned())),
    }
}

/// Reads all `name=version` arguments, refusing a name given twice.
pub fn parse_components<S: AsRef<str>>(args: &[S]) -> Result<Vec<Component>, BundleError> {
    let mut out: Vec<Component> = Vec::new();
    for arg in args {
        let c = parse_component(arg.as_ref())?;
        if out.iter().any(|o| o.name == c.name) {
            return Err(BundleError::DuplicateComponent(c.name));
        }
        out.push(c);
    }
    Ok(out)
}

/// How the slot-bound artifacts fit their slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotFit {
    /// The slot's size.
    pub slot_size: u64,
    /// The most the artifacts may take.
    pub allowed: u64,
    /// What they take.
    pub used: u64,
}

/// Decides whether artifacts of `sizes` bytes fit a slot of `slot_size`.
///
/// A slot's size is fixed when a machine is installed, and every later
/// release must fit the same partitions: kernels, module trees and k3s
/// grow from release to release. A release that fills its slot to the
/// byte would be the last one those machines can take, discovered only
/// when the next release fails to install. Keeping 10% free at bundle
/// time turns that into an early, visible refusal on the publisher's
/// workstation, and also covers what file sizes do not show: the ESP's
/// FAT allocation and partition alignment.
pub fn decide_slot_fit(slot_size: u64, sizes: &[u64]) -> Result<SlotFit, SlotFit> {
    let used = sizes.iter().fold(0u64, |n, s| n.saturating_add(*s));
    let headroom = u128::from(slot_size) * u128::from(HEADROOM_PERCENT) / 100;
    let allowed = slot_size - headroom as u64;
    let fit = SlotFit {
        slot_size,
        allowed,
        used,
    };
    if used <= allowed { Ok(fit) } else { Err(fit) }
}

/// Removes the staging directory unless the release moved into place.
struct Staging {
    dir: PathBuf,
    keep: bool,
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Runs `liken bundle`.
pub fn run(req: &BundleRequest, out: &mut dyn Write) -> Result<(), BundleError> {
    let io = |doing: String| move |error| BundleError::Io { doing, error };

    // Check every input before anything is created. `sizes` are the
    // artifacts' sizes: the system image's with its padding and tree.
    let mut sizes = [0u64; 9];
    let mut input_sizes = [0u64; 9];
    for (i, (input, path)) in INPUTS.iter().zip(&req.inputs).enumerate() {
        sizes[i] = match path {
            Some(path) => {
                input_sizes[i] = input_size(input.what, path)?;
                if input.name == ARTIFACT_SYSTEM {
                    with_tree(input_sizes[i]).map_err(|error| BundleError::Verity {
                        path: path.clone(),
                        error,
                    })?
                } else {
                    input_sizes[i]
                }
            }
            None if input.flag.is_some() => 0,
            None => {
                return Err(BundleError::Input {
                    what: input.what,
                    path: PathBuf::new(),
                    reason: "not given".to_owned(),
                });
            }
        };
    }
    decide_slot_fit(req.slot_size, &slot_bound(&sizes)).map_err(BundleError::SlotTooSmall)?;

    let final_dir = layout::release_dir(&req.channel, &req.version);
    if fs::symlink_metadata(&final_dir).is_ok() {
        return Err(BundleError::Exists { dir: final_dir });
    }
    fs::create_dir_all(&req.channel).map_err(io(format!(
        "creating the channel {}",
        req.channel.display()
    )))?;

    let staging = Staging {
        dir: req
            .channel
            .join(format!(".{}.bundle-{}", req.version, std::process::id())),
        keep: false,
    };
    let _ = fs::remove_dir_all(&staging.dir);
    fs::create_dir(&staging.dir).map_err(io(format!("creating {}", staging.dir.display())))?;

    let mut artifacts = Vec::with_capacity(INPUTS.len());
    let mut verity = None;
    for (i, (input, path)) in INPUTS.iter().zip(&req.inputs).enumerate() {
        let Some(path) = path else { continue };
        let to = staging.dir.join(input.file);
        let (digest, copied) = copy_input(path, &to, input_sizes[i], req.progress)?;
        let (sha256, size) = if input.name == ARTIFACT_SYSTEM {
            let (record, sha256, size) = append_verity(&to, digest, copied, req.progress)?;
            verity = Some(record);
            (sha256, size)
        } else {
            (Sha256Hex::from_bytes(digest), copied)
        };
        sizes[i] = size;
        artifacts.push(Artifact {
            name: input.name.to_owned(),
            file: FileName::parse(input.file).map_err(|e| BundleError::Invalid(e.to_string()))?,
            sha256,
            size,
        });
    }
    let fit =
        decide_slot_fit(req.slot_size, &slot_bound(&sizes)).map_err(BundleError::SlotTooSmall)?;
    let uki = match (&req.uki, &verity) {
        (Some(signing), Some(record)) => {
            let made = make_ukis(signing, record, &req.version, &staging.dir)?;
            artifacts.extend(made);
            Some(Uki {
                command_line: signing.args.join(" "),
            })
        }
        _ => None,
    };
    for a in &artifacts {
        writeln!(
            out,
            "{} {}: {}, sha256 {}",
            a.name,
            a.file,
            human(a.size),
            a.sha256
        )
        .map_err(|error| BundleError::Io {
            doing: "writing output".to_owned(),
            error,
        })?;
    }
    if let Some(v) = &verity {
        writeln!(
            out,
            "system dm-verity root hash {}: {} data blocks of 4096 bytes, the tree from byte {}",
            v.root_hash, v.data_blocks, v.hash_offset
        )
        .map_err(|error| BundleError::Io {
            doing: "writing output".to_owned(),
            error,
        })?;
    }

    let count = artifacts.len();
    let mut release = Release::new(req.version.clone(), artifacts, req.components.clone());
    release.verity = verity;
    release.uki = uki;
    let problems = release.validate();
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        return Err(BundleError::Invalid(format!(
            "the release document is not valid: {}",
            list.join("; ")
        )));
    }
    let text = decode::to_yaml(&release)
        .map_err(|e| BundleError::Invalid(format!("writing release.yaml: {e}")))?;
    files::replace(
        &staging.dir.join(RELEASE_FILE),
        text.as_bytes(),
        files::PUBLIC,
    )
    .map_err(io("writing release.yaml".to_owned()))?;
    if let Some(key) = &req.sign {
        // Signed in staging, so the release directory appears with its
        // signature or not at all.
        write_signature(key, text.as_bytes(), &staging.dir.join(RELEASE_FILE))?;
    }
    let digest = Digest::from(stream::sha256(text.as_bytes()));

    match files::rename_noreplace(&staging.dir, &final_dir) {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::AlreadyExists | io::ErrorKind::DirectoryNotEmpty
            ) =>
        {
            return Err(BundleError::Exists { dir: final_dir });
        }
        Err(e) => return Err(io(format!("moving the release to {}", final_dir.display()))(e)),
    }
    let mut staging = staging;
    staging.keep = true;
    files::sync_dir(&req.channel).map_err(io(format!("syncing {}", req.channel.display())))?;

    let w = |e| BundleError::Io {
        doing: "writing output".to_owned(),
        error: e,
    };
    let expires = channel::expiry(
        liken_api::Time::from_system(SystemTime::now()),
        req.channel_days,
    );
    // A newer latest is written and signed under the channel's lock; an
    // unsigned rewrite removes the signature it leaves stale.
    let update = channel::advance_latest(&req.channel, &req.version, expires, req.sign.as_ref())
        .map_err(BundleError::Channel)?;
    if let Some(key) = &req.sign
        && !update.wrote()
    {
        // Latest stays: the document is as it was, so signing its bytes
        // again is all -sign asks.
        let channel_file = req.channel.join(liken_api::release::CHANNEL_FILE);
        let bytes =
            fs::read(&channel_file).map_err(io(format!("reading {}", channel_file.display())))?;
        write_signature(key, &bytes, &channel_file)?;
    }
    if let Some(note) = update.stale_note() {
        writeln!(out, "{note}").map_err(w)?;
    }

    let total: u64 = sizes.iter().sum();
    writeln!(
        out,
        "released {} in {}: {} artifacts, {}",
        req.version,
        final_dir.display(),
        count,
        human(total)
    )
    .map_err(w)?;
    writeln!(
        out,
        "slot: {} of {} used ({} allowed with {HEADROOM_PERCENT}% headroom)",
        human(fit.used),
        human(fit.slot_size),
        human(fit.allowed)
    )
    .map_err(w)?;
    writeln!(out, "{}", update.latest.describe(&req.version)).map_err(w)?;
    if let Some(key) = &req.sign {
        writeln!(
            out,
            "signed release.yaml and channel.yaml with key {}: machines and `liken fetch` that \
             trust it take this release",
            key.id
        )
        .map_err(w)?;
    }
    writeln!(
        out,
        "catalog entry for cluster.yaml's spec.releases.catalog:\n  - version: {}\n    digest: {digest}",
        req.version
    )
    .map_err(w)?;
    Ok(())
}

/// The staged file of the artifact `name`.
fn staged(dir: &Path, name: &str) -> PathBuf {
    let file = INPUTS
        .iter()
        .find(|i| i.name == name)
        .map_or(name, |i| i.file);
    dir.join(file)
}

/// Makes and hashes slot A's and slot B's signed images in `dir` (the
/// staging directory, which holds the release's kernel and initrds).
fn make_ukis(
    signing: &UkiSigning,
    record: &Verity,
    version: &Version,
    dir: &Path,
) -> Result<Vec<Artifact>, BundleError> {
    let verity = VerityArg::from_record(record)
        .map_err(|e| BundleError::Invalid(format!("the release's verity record: {e}")))?;
    let kernel = staged(dir, ARTIFACT_KERNEL);
    let microcode = staged(dir, ARTIFACT_MICROCODE);
    let boot = staged(dir, ARTIFACT_BOOT);
    let mut initrds: Vec<&Path> = Vec::new();
    if microcode.exists() {
        initrds.push(&microcode);
    }
    initrds.push(&boot);
    let args = signing.args.join(" ");
    let mut out = Vec::with_capacity(2);
    for slot in Slot::ALL {
        let name = liken_api::release::uki_artifact(slot);
        let file = format!("liken-{}.efi", slot.esp_dir());
        let output = dir.join(&file);
        super::uki::build(&super::uki::Build {
            stub: &signing.stub,
            kernel: &kernel,
            initrds: &initrds,
            osrel: &bootloader::render_osrel(version, slot),
            cmdline: &bootloader::render_uki_cmdline(slot, &verity, &args),
            key: &signing.key,
            cert: &signing.cert,
            output: &output,
            work: dir,
        })
        .map_err(|error| BundleError::Uki { slot, error })?;
        let bytes = fs::read(&output).map_err(|error| BundleError::Io {
            doing: format!("reading {}", output.display()),
            error,
        })?;
        out.push(Artifact {
            name: name.to_owned(),
            file: FileName::parse(&file).map_err(|e| BundleError::Invalid(e.to_string()))?,
            sha256: Sha256Hex::from_bytes(Sha256::digest(&bytes).into()),
            size: bytes.len() as u64,
        });
    }
    Ok(out)
}

/// Writes `<file>.sig`, `key`'s signature over `bytes` (the file's).
fn write_signature(
    key: &liken_api::signing::SigningKey,
    bytes: &[u8],
    file: &Path,
) -> Result<(), BundleError> {
    let sig = key.sign(bytes);
    let text = decode::to_yaml(&sig)
        .map_err(|e| BundleError::Invalid(format!("writing a signature: {e}")))?;
    let path = PathBuf::from(liken_api::signing::signature_name(&file.to_string_lossy()));
    files::replace(&path, text.as_bytes(), files::PUBLIC).map_err(|error| BundleError::Io {
        doing: format!("writing {}", path.display()),
        error,
    })
}

fn slot_bound(sizes: &[u64; 9]) -> Vec<u64> {
    INPUTS
        .iter()
        .zip(sizes)
        .filter(|(i, _)| i.slot_bound)
        .map(|(_, s)| *s)
        .collect()
}

/// The system artifact's size for a squashfs of `len` bytes: padded to
/// whole blocks, then the tree.
fn with_tree(len: u64) -> Result<u64, VerityError> {
    let g = Geometry::for_len(len)?;
    g.data_size()
        .checked_add(g.hash_size())
        .ok_or(VerityError::TooLarge)
}

/// Appends the dm-verity hash tree to the squashfs copied to `file`
/// (`len` bytes, whose SHA-256 is `squashfs`): zeros to the next block,
/// then the tree. Returns release.yaml's record, and the SHA-256 and size
/// of the whole file, the system artifact.
///
/// The salt is the squashfs's SHA-256. Derived rather than random, so
/// bundling the same image twice writes the same artifact and the same
/// record, which keeps bundle reproducible (a rebuilt release can be
/// compared byte for byte). Per image rather than fixed, so no two
/// images share one and a precomputed attack on one tree is worth
/// nothing against another, which is what dm-verity's salt is for. And
/// the copy has already computed it.
///
/// The file is read once more to build the tree (the copy cannot: the
/// salt is only known when it ends), and the same pass hashes it for the
/// artifact's digest. The tree, 1/127 of the image, is held in memory
/// until it is appended.
fn append_verity(
    file: &Path,
    squashfs: [u8; 32],
    len: u64,
    style: Style,
) -> Result<(Verity, Sha256Hex, u64), BundleError> {
    let io = |doing: String| move |error| BundleError::Io { doing, error };
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .map_err(io(format!("opening {}", file.display())))?;
    let mut whole = Sha256::new();
    let mut progress = Progress::new(style, "dm-verity tree", len, 0);
    let mut tree_bytes = Vec::new();
    let built = {
        let mut reader = Hashing {
            inner: (&f).take(len),
            hasher: &mut whole,
            progress: &mut progress,
        };
        verity::build(&mut reader, &squashfs, &mut tree_bytes)
    };
    let tree = match built {
        Ok(t) if t.data_len == len => t,
        Ok(_) => {
            progress.abandon();
            return Err(BundleError::Changed {
                path: file.to_owned(),
            });
        }
        Err(error) => {
            progress.abandon();
            return Err(BundleError::Verity {
                path: file.to_owned(),
                error,
            });
        }
    };
    let padding = vec![0u8; tree.padding() as usize];
    let append = |f: &mut File| -> io::Result<()> {
        f.seek(SeekFrom::Start(len))?;
        f.write_all(&padding)?;
        f.write_all(&tree_bytes)?;
        f.sync_all()
    };
    append(&mut f).map_err(io(format!(
        "appending the dm-verity hash tree to {}",
        file.display()
    )))?;
    whole.update(&padding);
    whole.update(&tree_bytes);
    progress.finish("hashed");

    let size = tree.geometry.data_size() + tree.geometry.hash_size();
    let record = Verity {
        root_hash: Sha256Hex::from_bytes(tree.root_hash),
        salt: to_hex(&squashfs),
        hash_offset: tree.geometry.data_size(),
        data_block_size: verity::BLOCK_SIZE,
        hash_block_size: verity::BLOCK_SIZE,
        algorithm: VERITY_ALGORITHM.to_owned(),
        data_blocks: tree.geometry.data_blocks,
    };
    Ok((record, stream::finish(whole), size))
}

/// A reader that hashes and counts what passes through it: the tree's
/// pass over the image also computes the artifact's digest.
struct Hashing<'a, R> {
    inner: R,
    hasher: &'a mut Sha256,
    progress: &'a mut Progress,
}

impl<R: Read> Read for Hashing<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.progress.advance(n as u64);
        Ok(n)
    }
}

fn input_size(what: &'static str, path: &Path) -> Result<u64, BundleError> {
    let refuse = |reason: String| BundleError::Input {
        what,
        path: path.to_owned(),
        reason,
    };
    let meta = fs::metadata(path).map_err(|e| refuse(e.to_string()))?;
    if !meta.is_file() {
        return Err(refuse("not a regular file".to_owned()));
    }
    Ok(meta.len())
}

/// Copies one input into the staging directory, hashing it on the way,
/// and fsyncs the copy. Returns the copy's SHA-256 (raw: the system
/// image's is its verity salt) and size.
fn copy_input(
    from: &Path,
    to: &Path,
    expected: u64,
    style: Style,
) -> Result<([u8; 32], u64), BundleError> {
    let io = |doing: String| move |error| BundleError::Io { doing, error };
    let mut src = File::open(from).map_err(io(format!("opening {}", from.display())))?;
    let mut dst = File::create(to).map_err(io(format!("creating {}", to.display())))?;
    let label = to
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut progress = Progress::new(style, label, expected, 0);
    let mut hasher = Sha256::default();
    let flusher = stream::Flusher::new(&dst).map_err(io(format!("writing {}", to.display())))?;
    let copied = stream::copy_hashing(
        &mut src,
        &mut dst,
        &mut hasher,
        expected,
        &mut progress,
        Some(&flusher),
    );
    drop(flusher);
    let size = match copied {
        Ok(n) => n,
        Err(CopyError::Read(e)) => {
            progress.abandon();
            return Err(io(format!("reading {}", from.display()))(e));
        }
        Err(CopyError::Write(e)) => {
            progress.abandon();
            return Err(io(format!("writing {}", to.display()))(e));
        }
        Err(CopyError::TooLong { .. }) => {
            progress.abandon();
            return Err(BundleError::Changed {
                path: from.to_owned(),
            });
        }
    };
    if size != expected {
        progress.abandon();
        return Err(BundleError::Changed {
            path: from.to_owned(),
        });
    }
    dst.sync_all()
        .map_err(io(format!("syncing {}", to.display())))?;
    progress.finish("copied");
    Ok((hasher.finalize().into(), size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TestDir;
    use liken_api::Channel;

    #[test]
    fn components_are_name_equals_version() {
        let c = parse_components(&["linux=6.1.0-28", "k3s=v1.31.4+k3s1"]).unwrap();
        assert_eq!(c[1].name, "k3s");
        assert_eq!(c[1].version, "v1.31.4+k3s1");
        for bad in ["linux", "=1", "linux=", "a b=1"] {
            let e = parse_component(bad).unwrap_err().to_string();
            assert!(e.contains("must be name=version"), "{e}");
        }
        let e = parse_components(&["a=1", "a=2"]).unwrap_err().to_string();
        assert!(e.contains("given twice"), "{e}");
    }

    #[test]
    fn slot_fit_keeps_a_tenth_free() {
        let gib = 1u64 << 30;
        let ok = decide_slot_fit(gib, &[100, 200]).unwrap();
        assert_eq!(ok.used, 300);
        assert_eq!(ok.allowed, gib - gib / 10);
        assert!(decide_slot_fit(gib, &[ok.allowed]).is_ok());
        assert!(decide_slot_fit(gib, &[ok.allowed, 1]).is_err());
        assert!(decide_slot_fit(0, &[1]).is_err());
        assert!(decide_slot_fit(gib, &[u64::MAX, u64::MAX]).is_err());
    }

    fn inputs(dir: &Path, big: usize) -> [Option<PathBuf>; 9] {
        std::array::from_fn(|i| {
            let p = dir.join(format!("input-{i}"));
            let len = if i == 1 { big } else { 10 + i };
            fs::write(&p, vec![i as u8; len]).unwrap();
            Some(p)
        })
    }

    fn request(dir: &TestDir, version: &str, big: usize) -> BundleRequest {
        BundleRequest {
            inputs: inputs(dir.path(), big),
            channel: dir.path().join("channel"),
            version: Version::parse(version).unwrap(),
            slot_size: 1 << 20,
            components: parse_components(&["linux=6.1"]).unwrap(),
            progress: Style::Quiet,
            sign: None,
            channel_days: liken_api::release::DEFAULT_CHANNEL_VALIDITY_DAYS,
            uki: None,
        }
    }

    /// A section of a PE file as objcopy copies it out.
    fn section(file: &Path, name: &str, dir: &Path) -> Vec<u8> {
        let out = dir.join(format!("section{name}"));
        let status = std::process::Command::new("objcopy")
            .args(["-O", "binary", "--only-section", name])
            .arg(file)
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success(), "objcopy {name} of {}", file.display());
        fs::read(&out).unwrap()
    }

    #[test]
    fn secureboot_key_makes_a_signed_image_per_slot_that_sbverify_and_objdump_read() {
        let dir = TestDir::new("bundle-uki");
        let keys = dir.path().join("keys");
        let tools = crate::secureboot::Tools::from_env().unwrap();
        crate::secureboot::keygen(
            &keys,
            &tools,
            liken_api::Time::from_system(SystemTime::now()),
        )
        .unwrap();
        let other = dir.path().join("other-keys");
        crate::secureboot::keygen(
            &other,
            &tools,
            liken_api::Time::from_system(SystemTime::now()),
        )
        .unwrap();
        let mut req = request(&dir, "2026.12.07-001", 3 * 4096);
        req.slot_size = 4 << 20;
        let (_, layer_key) = liken_api::signing::key_pair([9; 32]);
        req.uki = Some(uki_signing(&keys, &layer_key, &["console=ttyS0,115200", "quiet"]).unwrap());
        let layer_arg = liken_api::layer_seal::render_arg(&layer_key.public_key);
        run(&req, &mut Vec::new()).unwrap();

        let rel_dir = req.channel.join("2026.12.07-001");
        let text = fs::read_to_string(rel_dir.join(RELEASE_FILE)).unwrap();
        let release = decode::strict::<Release>(&text, "release.yaml").unwrap();
        assert_eq!(
            release.uki.as_ref().unwrap().command_line,
            format!("{layer_arg} console=ttyS0,115200 quiet")
        );
        let verity = VerityArg::from_record(release.verity.as_ref().unwrap()).unwrap();
        let stub = super::super::uki::read_pe(&fs::read(super::super::uki::STUB).unwrap()).unwrap();
        let input = |name: &str| {
            let i = INPUTS.iter().position(|i| i.name == name).unwrap();
            fs::read(req.inputs[i].as_ref().unwrap()).unwrap()
        };
        let kernel = input(ARTIFACT_KERNEL);
        let mut initrd = input(ARTIFACT_MICROCODE);
        initrd.extend(input(ARTIFACT_BOOT));
        for slot in Slot::ALL {
            let a = release
                .artifact(liken_api::release::uki_artifact(slot))
                .unwrap();
            let file = rel_dir.join(a.file.as_str());
            let bytes = fs::read(&file).unwrap();
            assert_eq!(a.size, bytes.len() as u64);
            assert_eq!(
                a.sha256,
                Sha256Hex::from_bytes(Sha256::digest(&bytes).into())
            );
            // The real sbverify: the fleet's db certificate, and no other.
            let verify = |cert: &Path| {
                std::process::Command::new("sbverify")
                    .arg("--cert")
                    .arg(cert)
                    .arg(&file)
                    .output()
                    .unwrap()
            };
            let ok = verify(&keys.join("db.crt"));
            assert!(
                ok.status.success(),
                "{}",
                String::from_utf8_lossy(&ok.stderr)
            );
            assert!(!verify(&other.join("db.crt")).status.success());
            // The sections, read back by binutils.
            assert_eq!(
                String::from_utf8(section(&file, ".cmdline", dir.path())).unwrap(),
                format!(
                    "liken.slot={} {} {layer_arg} console=ttyS0,115200 quiet",
                    slot.esp_dir(),
                    verity.render()
                )
            );
            assert_eq!(
                String::from_utf8(section(&file, ".osrel", dir.path())).unwrap(),
                bootloader::render_osrel(&req.version, slot)
            );
            assert_eq!(section(&file, ".linux", dir.path()), kernel);
            assert_eq!(
                section(&file, ".initrd", dir.path()),
                initrd,
                "microcode first"
            );
            let headers = std::process::Command::new("objdump")
                .arg("-h")
                .arg(&file)
                .output()
                .unwrap();
            let headers = String::from_utf8(headers.stdout).unwrap();
            let sizes: Vec<u64> = [".osrel", ".cmdline", ".linux", ".initrd"]
                .iter()
                .map(|n| section(&file, n, dir.path()).len() as u64)
                .collect();
            let vmas = super::super::uki::decide_layout(&stub, &sizes).unwrap();
            for (name, vma) in super::super::uki::SECTIONS.iter().zip(vmas) {
                let line = headers
                    .lines()
                    .find(|l| l.split_whitespace().nth(1) == Some(name))
                    .unwrap_or_else(|| panic!("no {name} in {headers}"));
                let got = u64::from_str_radix(line.split_whitespace().nth(3).unwrap(), 16).unwrap();
                assert_eq!(got, vma, "{name}: {line}");
            }
        }
        // A key readable by others is refused before anything is made.
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(keys.join("db.key"), fs::Permissions::from_mode(0o640)).unwrap();
        let e = uki_signing(&keys, &layer_key, &[] as &[&str])
            .unwrap_err()
            .to_string();
        assert!(e.contains("chmod 600"), "{e}");
        for arg in ["liken.slot=b", "liken.layer-key=00"] {
            let e = uki_signing(&other, &layer_key, &[arg])
                .unwrap_err()
                .to_string();
            assert!(e.contains("written by bundle itself"), "{e}");
        }
    }

    #[test]
    fn a_signed_bundle_signs_release_and_channel_and_an_unsigned_one_drops_the_stale_channel_signature()
     {
        let dir = TestDir::new("bundle-signed");
        let (key, public) = liken_api::signing::key_pair([5; 32]);
        let trust = liken_api::signing::TrustRoot::new([public]);
        let mut req = request(&dir, "2026.07.11-001", 1000);
        req.sign = Some(key.clone());
        run(&req, &mut Vec::new()).unwrap();
        let sig = |p: PathBuf| {
            let text = fs::read_to_string(p).unwrap();
            decode::strict::<liken_api::signing::DetachedSignature>(&text, "sig").unwrap()
        };
        let rel = req.channel.join("2026.07.11-001");
        let yaml = fs::read(rel.join(RELEASE_FILE)).unwrap();
        assert_eq!(
            trust
                .verify(&yaml, Some(&sig(rel.join("release.yaml.sig"))))
                .unwrap(),
            key.id
        );
        let channel = fs::read(req.channel.join("channel.yaml")).unwrap();
        let channel_sig = req.channel.join("channel.yaml.sig");
        assert_eq!(
            trust
                .verify(&channel, Some(&sig(channel_sig.clone())))
                .unwrap(),
            key.id
        );
        let mut unsigned = request(&dir, "2026.07.11-002", 1000);
        unsigned.channel = req.channel.clone();
        let mut out = Vec::new();
        run(&unsigned, &mut out).unwrap();
        assert!(!channel_sig.exists());
        assert!(String::from_utf8(out).unwrap().contains("removed"));
        assert!(
            !unsigned
                .channel
                .join("2026.07.11-002/release.yaml.sig")
                .exists()
        );
    }

    #[test]
    fn lays_out_a_release_and_refuses_to_redo_it() {
        let dir = TestDir::new("bundle");
        let req = request(&dir, "2026.07.11-002", 1000);
        let mut out = Vec::new();
        run(&req, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains("channel.yaml written: latest is 2026.07.11-002"),
            "{out}"
        );

        let rel_dir = req.channel.join("2026.07.11-002");
        let text = fs::read_to_string(rel_dir.join(RELEASE_FILE)).unwrap();
        assert!(out.contains(&format!(
            "digest: {}",
            Digest::from(stream::sha256(text.as_bytes()))
        )));
        let release: Release = decode::strict(&text, "release.yaml").unwrap();
        assert_eq!(release.artifacts.len(), 9);
        // A 1000-byte image is one block, padded with zeros; a single
        // block's tree is empty and its digest is the root hash.
        let mut system_bytes = vec![1u8; 1000];
        system_bytes.resize(4096, 0);
        let system = release.artifact("system").unwrap();
        assert_eq!(system.size, 4096);
        assert_eq!(system.sha256, stream::sha256(&system_bytes));
        assert_eq!(fs::read(rel_dir.join("liken.sqfs")).unwrap(), system_bytes);
        let salt = Sha256::digest([1u8; 1000]);
        let mut root = Sha256::new_with_prefix(salt);
        root.update(&system_bytes);
        assert_eq!(
            release.verity,
            Some(Verity {
                root_hash: Sha256Hex::from_bytes(root.finalize().into()),
                salt: stream::sha256(&[1u8; 1000]).to_string(),
                hash_offset: 4096,
                data_block_size: 4096,
                hash_block_size: 4096,
                algorithm: "sha256".into(),
                data_blocks: 1,
            })
        );
        assert!(
            out.contains(&format!(
                "system dm-verity root hash {}: 1 data blocks of 4096 bytes, the tree from byte \
                 4096",
                release.verity.as_ref().unwrap().root_hash
            )),
            "{out}"
        );
        assert_eq!(release.components[0].name, "linux");

        let e = run(&req, &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("immutable"), "{e}");

        // An older serial lands but does not become latest.
        let older = request(&dir, "2026.07.11-001", 10);
        let mut out = Vec::new();
        run(&older, &mut out).unwrap();
        assert!(
            String::from_utf8(out)
                .unwrap()
                .contains("latest stays 2026.07.11-002")
        );
        let ch: Channel = decode::strict(
            &fs::read_to_string(req.channel.join("channel.yaml")).unwrap(),
            "channel.yaml",
        )
        .unwrap();
        assert_eq!(ch.latest.as_str(), "2026.07.11-002");
        // No staging directories are left behind.
        let hidden: Vec<_> = fs::read_dir(&req.channel)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(hidden.is_empty());
    }

    /// `veritysetup verify` over a system artifact as its release.yaml
    /// record describes it, data and tree in the one file.
    fn veritysetup_verify(file: &Path, v: &Verity) -> std::process::Output {
        let mut c = liken_testenv::scratch::tool("veritysetup");
        c.args(["verify", "--no-superblock"])
            .arg(format!("--format={}", verity::FORMAT_VERSION))
            .arg(format!("--hash={}", v.algorithm))
            .arg(format!("--data-block-size={}", v.data_block_size))
            .arg(format!("--hash-block-size={}", v.hash_block_size))
            .arg(format!("--data-blocks={}", v.data_blocks))
            .arg(format!("--hash-offset={}", v.hash_offset))
            .arg(format!("--salt={}", v.salt))
            .arg(file)
            .arg(file)
            .arg(v.root_hash.as_str());
        c.output().unwrap()
    }

    #[test]
    fn the_system_artifact_carries_a_tree_veritysetup_verifies_and_rebundling_repeats_it() {
        let dir = TestDir::new("bundle-verity");
        // 129 blocks and 5 bytes: 130 data blocks, a tree of two levels.
        let len = 129 * 4096 + 5;
        let squashfs = liken_testenv::scratch::bytes(len, 24);
        let mut req = request(&dir, "2026.12.06-001", 10);
        fs::write(req.inputs[1].as_ref().unwrap(), &squashfs).unwrap();
        req.slot_size = 4 << 20;
        run(&req, &mut Vec::new()).unwrap();

        let rel_dir = req.channel.join("2026.12.06-001");
        let read = |dir: &Path| {
            let text = fs::read_to_string(dir.join(RELEASE_FILE)).unwrap();
            decode::strict::<Release>(&text, "release.yaml").unwrap()
        };
        let release = read(&rel_dir);
        let v = release.verity.clone().unwrap();
        let system = release.artifact("system").unwrap();
        let file = rel_dir.join("liken.sqfs");
        let bytes = fs::read(&file).unwrap();
        // The squashfs, zeros to the block, then three hash blocks; the
        // digest and size are the whole file's.
        assert_eq!(
            (v.data_blocks, v.hash_offset, system.size),
            (130, 130 * 4096, 133 * 4096)
        );
        assert_eq!(&bytes[..len], &squashfs[..]);
        assert!(bytes[len..130 * 4096].iter().all(|&b| b == 0));
        assert_eq!(bytes.len() as u64, system.size);
        assert_eq!(system.sha256, stream::sha256(&bytes));
        // The salt is the squashfs's own digest.
        assert_eq!(v.salt, stream::sha256(&squashfs).as_str());
        assert_eq!(v.algorithm, verity::ALGORITHM);

        let out = veritysetup_verify(&file, &v);
        assert!(out.status.success(), "{out:?}");
        // One flipped byte of the squashfs, and veritysetup refuses.
        let mut flipped = bytes.clone();
        flipped[len / 2] ^= 0x80;
        fs::write(&file, &flipped).unwrap();
        let out = veritysetup_verify(&file, &v);
        assert!(
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("failed"),
            "{out:?}"
        );

        // The same image bundled again gives the same artifact and record.
        let mut again = request(&dir, "2026.12.06-002", 10);
        again.channel = req.channel.clone();
        again.slot_size = req.slot_size;
        fs::write(again.inputs[1].as_ref().unwrap(), &squashfs).unwrap();
        run(&again, &mut Vec::new()).unwrap();
        let second = read(&req.channel.join("2026.12.06-002"));
        assert_eq!(second.verity, release.verity);
        assert_eq!(second.artifact("system"), release.artifact("system"));
    }

    #[test]
    fn refuses_oversized_slots_and_missing_inputs_before_writing() {
        let dir = TestDir::new("bundle-refuse");
        let req = request(&dir, "2026.07.11-001", 1 << 20);
        let e = run(&req, &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("-slot-size"), "{e}");
        assert!(!req.channel.exists());

        // An image that fits the slot's allowance on its own but not with
        // its padding and tree is refused before anything is copied.
        // Allowed: 1 MiB less 10%, 943719 bytes, of which the kernel,
        // boot and microcode inputs take 35.
        let fits_alone = 943_719 - 35;
        assert!(with_tree(fits_alone as u64).unwrap() > 943_719 - 35);
        let req = request(&dir, "2026.07.11-001", fits_alone);
        assert_eq!(
            decide_slot_fit(req.slot_size, &[fits_alone as u64, 35])
                .unwrap()
                .used,
            943_719
        );
        let e = run(&req, &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("-slot-size"), "{e}");
        assert!(!req.channel.exists());

        // An empty image has no block to protect.
        let req = request(&dir, "2026.07.11-001", 0);
        let e = run(&req, &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("dm-verity") && e.contains("empty"), "{e}");
        assert!(!req.channel.exists());

        let mut req = request(&dir, "2026.07.11-001", 10);
        req.inputs[3] = Some(dir.path().join("nope"));
        let e = run(&req, &mut Vec::new()).unwrap_err().to_string();
        assert!(e.starts_with("the microcode initramfs"), "{e}");
        assert!(!req.channel.exists());

        let mut req = request(&dir, "2026.07.11-001", 10);
        req.inputs[0] = None;
        let e = run(&req, &mut Vec::new()).unwrap_err().to_string();
        assert!(
            e.starts_with("the kernel") && e.contains("not given"),
            "{e}"
        );
        assert!(!req.channel.exists());
    }

    #[test]
    fn microcode_is_optional() {
        let dir = TestDir::new("bundle-no-microcode");
        let mut req = request(&dir, "2026.07.11-001", 100);
        req.inputs[3] = None;
        let mut out = Vec::new();
        run(&req, &mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains(": 8 artifacts"), "{out}");
        let rel_dir = req.channel.join("2026.07.11-001");
        let release: Release = decode::strict(
            &fs::read_to_string(rel_dir.join(RELEASE_FILE)).unwrap(),
            "release.yaml",
        )
        .unwrap();
        assert_eq!(release.artifacts.len(), 8);
        assert!(release.artifact("microcode").is_none());
        assert!(release.artifact("kernel").is_some());
        assert!(!rel_dir.join("microcode.cpio").exists());
    }
}
