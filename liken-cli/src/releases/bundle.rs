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
//! The slot check runs before anything is copied (from the inputs'
//! sizes) and again on the bytes actually copied. [`decide_slot_fit`]
//! holds the rule and explains the headroom.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use liken_api::release::{Artifact, Component, RELEASE_FILE, Release};
use liken_api::validate::Validate;
use liken_api::{Digest, FileName, Version, decode};
use sha2::Sha256;

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

    // Check every input before anything is created.
    let mut sizes = [0u64; 9];
    for (i, (input, path)) in INPUTS.iter().zip(&req.inputs).enumerate() {
        sizes[i] = match path {
            Some(path) => input_size(input.what, path)?,
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
    for (i, (input, path)) in INPUTS.iter().zip(&req.inputs).enumerate() {
        let Some(path) = path else { continue };
        let (sha256, size) =
            copy_input(path, &staging.dir.join(input.file), sizes[i], req.progress)?;
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

    let count = artifacts.len();
    let release = Release::new(req.version.clone(), artifacts, req.components.clone());
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
/// and fsyncs the copy.
fn copy_input(
    from: &Path,
    to: &Path,
    expected: u64,
    style: Style,
) -> Result<(liken_api::Sha256Hex, u64), BundleError> {
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
    let sha = stream::finish(hasher);
    progress.finish("copied");
    Ok((sha, size))
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
        let system = release.artifact("system").unwrap();
        assert_eq!(system.size, 1000);
        assert_eq!(system.sha256, stream::sha256(&[1u8; 1000]));
        assert_eq!(
            fs::read(rel_dir.join("liken.sqfs")).unwrap(),
            vec![1u8; 1000]
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

    #[test]
    fn refuses_oversized_slots_and_missing_inputs_before_writing() {
        let dir = TestDir::new("bundle-refuse");
        let req = request(&dir, "2026.07.11-001", 1 << 20);
        let e = run(&req, &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("-slot-size"), "{e}");
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
