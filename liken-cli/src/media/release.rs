//! The release a stick or netboot image carries, verified before any
//! output exists.
//!
//! A release directory is what `liken bundle` or `liken fetch` leaves:
//! `release.yaml` and every artifact it names (file names from
//! [`crate::releases::layout`]). release.yaml is decoded strictly and
//! validated, each artifact file must stay inside the directory, and
//! every file is hashed and sized against it. Only then does a command
//! create its output, so a tampered or half-downloaded release never
//! reaches a stick. The text of release.yaml is kept byte for byte: the
//! stick carries it for the installer, and catalogs pin exactly those
//! bytes by digest.

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

use liken_api::release::{
    ARTIFACT_BOOT, ARTIFACT_GRUB_BOOT, ARTIFACT_GRUB_CORE, ARTIFACT_KERNEL, ARTIFACT_MICROCODE,
    ARTIFACT_SYSTEMD_BOOT, Artifact, RELEASE_FILE, Release,
};
use liken_api::validate::Validate;
use liken_api::{Digest, decode};
use sha2::Sha256;

use crate::releases::layout;
use crate::releases::progress::{Progress, Style};
use crate::releases::stream;

/// release.yaml is a few KiB; more is not a release document.
const MAX_RELEASE_YAML: u64 = 1 << 20;

/// Why a release directory cannot be used.
#[derive(Debug)]
pub enum ReleaseError {
    /// release.yaml or an artifact could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        error: std::io::Error,
    },
    /// release.yaml is not a valid release document.
    Invalid {
        /// release.yaml's path.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The release lacks an artifact the command needs.
    Missing {
        /// The release directory.
        dir: PathBuf,
        /// The artifact name.
        name: &'static str,
    },
    /// An artifact's size differs from release.yaml's.
    Size {
        /// The file.
        path: PathBuf,
        /// release.yaml's size.
        want: u64,
        /// The file's size.
        have: u64,
    },
    /// An artifact's SHA-256 differs from release.yaml's.
    Digest {
        /// The file.
        path: PathBuf,
        /// release.yaml's digest.
        want: String,
        /// The file's digest.
        have: String,
    },
}

impl fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReleaseError::Read { path, error } => write!(
                f,
                "reading {}: {error}; pass a release directory (<channel>/<version>) that \
                 `liken fetch` or `liken bundle` wrote",
                path.display()
            ),
            ReleaseError::Invalid { path, why } => {
                write!(f, "{} is not a valid release: {why}", path.display())
            }
            ReleaseError::Missing { dir, name } => write!(
                f,
                "the release in {} has no {name:?} artifact, which install media need; use a \
                 release built with it",
                dir.display()
            ),
            ReleaseError::Size { path, want, have } => write!(
                f,
                "{} is {have} bytes but release.yaml says {want}: the release is incomplete or \
                 altered; fetch it again (`liken fetch`) and retry",
                path.display()
            ),
            ReleaseError::Digest { path, want, have } => write!(
                f,
                "{} has sha256 {have} but release.yaml says {want}: the file is damaged or \
                 altered; fetch the release again (`liken fetch`) and retry",
                path.display()
            ),
        }
    }
}

impl std::error::Error for ReleaseError {}

/// A release whose every artifact matched release.yaml when read.
#[derive(Debug, Clone)]
pub struct VerifiedRelease {
    /// The release directory.
    pub dir: PathBuf,
    /// release.yaml exactly as read.
    pub text: String,
    /// Its digest (what a catalog pins).
    pub digest: Digest,
    /// The document.
    pub release: Release,
}

impl VerifiedRelease {
    /// The path of an artifact's file (checked to be inside the
    /// directory when verified).
    pub fn path_of(&self, a: &Artifact) -> PathBuf {
        self.dir.join(a.file.as_str())
    }

    /// The artifact of this name, which [`verify`] made sure exists when
    /// the name is one install media need.
    pub fn artifact(&self, name: &'static str) -> Result<&Artifact, ReleaseError> {
        self.release
            .artifact(name)
            .ok_or_else(|| ReleaseError::Missing {
                dir: self.dir.clone(),
                name,
            })
    }

    /// Whether the release carries early microcode.
    pub fn has_microcode(&self) -> bool {
        self.release.artifact(ARTIFACT_MICROCODE).is_some()
    }
}

/// What install media cannot do without; microcode is optional.
pub const REQUIRED: [&str; 5] = [
    ARTIFACT_KERNEL,
    ARTIFACT_BOOT,
    ARTIFACT_SYSTEMD_BOOT,
    ARTIFACT_GRUB_BOOT,
    ARTIFACT_GRUB_CORE,
];

/// Reads release.yaml in `dir` and checks every artifact it names, and
/// that each of `required` is among them.
pub fn verify(
    dir: &Path,
    required: &[&'static str],
    style: Style,
) -> Result<VerifiedRelease, ReleaseError> {
    let path = dir.join(RELEASE_FILE);
    let read = |error| ReleaseError::Read {
        path: path.clone(),
        error,
    };
    let invalid = |why: String| ReleaseError::Invalid {
        path: path.clone(),
        why,
    };
    let meta = std::fs::metadata(&path).map_err(read)?;
    if meta.len() > MAX_RELEASE_YAML {
        return Err(invalid(format!("{} bytes is too large", meta.len())));
    }
    let text = std::fs::read_to_string(&path).map_err(read)?;
    let release: Release =
        decode::strict(&text, &path.display().to_string()).map_err(|e| invalid(e.to_string()))?;
    let problems = release.validate();
    if !problems.is_empty() {
        let list: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        return Err(invalid(list.join("; ")));
    }
    for name in required {
        if release.artifact(name).is_none() {
            return Err(ReleaseError::Missing {
                dir: dir.to_owned(),
                name,
            });
        }
    }
    for a in &release.artifacts {
        let Some(file) = layout::artifact_path(dir, &a.file) else {
            return Err(invalid(format!(
                "artifact file {:?} would leave the release directory",
                a.file.as_str()
            )));
        };
        check_artifact(&file, a, style)?;
    }
    let digest = Digest::from(stream::sha256(text.as_bytes()));
    Ok(VerifiedRelease {
        dir: dir.to_owned(),
        text,
        digest,
        release,
    })
}

fn check_artifact(path: &Path, a: &Artifact, style: Style) -> Result<(), ReleaseError> {
    let read = |error| ReleaseError::Read {
        path: path.to_owned(),
        error,
    };
    let mut f = File::open(path).map_err(read)?;
    let have = f.metadata().map_err(read)?.len();
    if have != a.size {
        return Err(ReleaseError::Size {
            path: path.to_owned(),
            want: a.size,
            have,
        });
    }
    let mut progress = Progress::new(style, format!("checking {}", a.file), a.size, 0);
    let mut hasher = Sha256::default();
    let n = stream::copy_hashing(
        &mut f,
        &mut std::io::sink(),
        &mut hasher,
        a.size,
        &mut progress,
        None,
    )
    .map_err(|e| match e {
        stream::CopyError::Read(error) => read(error),
        stream::CopyError::Write(error) => read(error),
        stream::CopyError::TooLong { .. } => ReleaseError::Size {
            path: path.to_owned(),
            want: a.size,
            have: a.size.saturating_add(1),
        },
    })?;
    if n != a.size {
        progress.abandon();
        return Err(ReleaseError::Size {
            path: path.to_owned(),
            want: a.size,
            have: n,
        });
    }
    let sha = stream::finish(hasher);
    if sha != a.sha256 {
        progress.abandon();
        return Err(ReleaseError::Digest {
            path: path.to_owned(),
            want: a.sha256.to_string(),
            have: sha.to_string(),
        });
    }
    progress.finish("ok");
    Ok(())
}
