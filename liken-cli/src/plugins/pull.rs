//! Pulling one plugin CLI: the image for this workstation's platform, the
//! program its entrypoint names, installed under its final name only
//! once every byte it came from was verified.
//!
//! The order: the pinned manifest, read by its digest ([`resolve`] turns
//! a tag into one, once, for the record) (an index picks this platform's manifest,
//! which is then read by its digest), the config blob (platform and
//! entrypoint), then each layer bottom first into a temporary file beside
//! the destination, verified, then scanned ([`super::extract`]). The
//! program is written to a second temporary file, 0755, fsynced, and
//! renamed over the final name, so a failure anywhere leaves the name as
//! it was (absent, or the previous CLI) and no temporary behind.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Seek};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use liken_api::Digest;
use sha2::{Digest as _, Sha256};

use super::extract::{self, ExtractError, LayerVerdict};
use super::oci::{self, DocumentKind, ImageConfig, Index, Manifest, Platform};
use super::reference::Reference;
use super::registry::{Registry, RegistryError};

/// Why a CLI image could not be installed.
#[derive(Debug)]
pub enum PullError {
    /// The registry failed or sent something that does not verify.
    Registry(RegistryError),
    /// A manifest, index or config is not the JSON it should be.
    Json {
        /// What was read.
        what: String,
        /// serde's message.
        error: String,
    },
    /// The image has no build for this platform.
    Platform {
        /// The image.
        image: String,
        /// What this workstation is.
        want: String,
        /// What the image has.
        have: Vec<String>,
    },
    /// The image config names no entrypoint.
    NoEntrypoint {
        /// The image.
        image: String,
    },
    /// A layer of a compression this pull does not read.
    Layer {
        /// The image.
        image: String,
        /// The layer's media type.
        media_type: String,
    },
    /// A layer could not be read.
    Extract {
        /// The image.
        image: String,
        /// Why.
        error: ExtractError,
    },
    /// No layer holds the entrypoint.
    Missing {
        /// The image.
        image: String,
        /// The entrypoint.
        path: String,
    },
    /// A local file operation failed.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl fmt::Display for PullError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PullError::Registry(e) => write!(f, "{e}"),
            PullError::Json { what, error } => write!(f, "{what} is not valid: {error}"),
            PullError::Platform { image, want, have } => write!(
                f,
                "{image} has no build for {want} (it has: {}); use a workstation of one of those",
                if have.is_empty() {
                    "none named".to_owned()
                } else {
                    have.join(", ")
                }
            ),
            PullError::NoEntrypoint { image } => write!(
                f,
                "{image} declares no entrypoint, so there is no program to install"
            ),
            PullError::Layer { image, media_type } => write!(
                f,
                "{image} has a layer of type {media_type:?}; liken reads tar layers, plain or \
                 gzip-compressed"
            ),
            PullError::Extract { image, error } => write!(f, "{image}: {error}"),
            PullError::Missing { image, path } => {
                write!(f, "{image} runs /{path}, but none of its layers holds it")
            }
            PullError::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for PullError {}

impl From<RegistryError> for PullError {
    fn from(e: RegistryError) -> PullError {
        PullError::Registry(e)
    }
}

/// A file removed when dropped unless kept.
struct Temp {
    path: PathBuf,
    keep: bool,
}

impl Temp {
    fn create(path: PathBuf, mode: u32) -> Result<(Temp, File), PullError> {
        // A temporary left by a crashed run under a reused pid is ours.
        let _ = std::fs::remove_file(&path);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .map_err(|source| PullError::Io {
                path: path.clone(),
                source,
            })?;
        Ok((Temp { path, keep: false }, file))
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn json<T: serde::de::DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, PullError> {
    serde_json::from_slice(bytes).map_err(|e| PullError::Json {
        what: what.to_owned(),
        error: e.to_string(),
    })
}

/// Resolves `image`'s tag once to the digest of the manifest or index
/// it names now (checked against the registry's Docker-Content-Digest
/// when it sends one).
pub fn resolve(registry: &mut Registry, image: &Reference) -> Result<Digest, PullError> {
    let doc = registry.manifest(image, &image.tag, None)?;
    Digest::parse(&format!("sha256:{:x}", Sha256::digest(&doc.bytes))).map_err(|e| {
        PullError::Json {
            what: format!("the digest of {image}"),
            error: e.to_string(),
        }
    })
}

/// Installs the program `image` runs on `platform` as `dest`, replacing
/// whatever `dest` was only when everything verified. The image is read
/// by `digest` alone, never by its tag: the top manifest or index must
/// hash to it, and everything below it is named by digest too.
pub fn install(
    registry: &mut Registry,
    image: &Reference,
    digest: &Digest,
    platform: &Platform,
    dest: &Path,
) -> Result<(), PullError> {
    let name = format!("{image}@{digest}");
    let top = registry.manifest(image, &digest.to_string(), Some(digest))?;
    let manifest_bytes = match top.kind {
        DocumentKind::Manifest => top.bytes,
        DocumentKind::Index => {
            let index: Index = json(&format!("the index of {name}"), &top.bytes)?;
            let desc =
                oci::decide_manifest(&index, platform).map_err(|have| PullError::Platform {
                    image: name.clone(),
                    want: format!("{}/{}", platform.os, platform.architecture),
                    have,
                })?;
            let doc = registry.manifest(image, &desc.digest.to_string(), Some(&desc.digest))?;
            if doc.kind != DocumentKind::Manifest {
                return Err(PullError::Json {
                    what: format!("the {} manifest of {name}", platform.architecture),
                    error: "it is an index, not an image manifest".to_owned(),
                });
            }
            doc.bytes
        }
    };
    let manifest: Manifest = json(&format!("the manifest of {name}"), &manifest_bytes)?;
    let config_bytes = registry.blob(image, &manifest.config)?;
    let config: ImageConfig = json(&format!("the config of {name}"), &config_bytes)?;
    if config.os != platform.os || config.architecture != platform.architecture {
        return Err(PullError::Platform {
            image: name,
            want: format!("{}/{}", platform.os, platform.architecture),
            have: vec![format!("{}/{}", config.os, config.architecture)],
        });
    }
    let Some(entrypoint) = oci::decide_entrypoint(&config) else {
        return Err(PullError::NoEntrypoint { image: name });
    };

    let dir = crate::files::parent(dest);
    let base = dest.file_name().unwrap_or_default().to_string_lossy();
    let pid = std::process::id();
    let (mut program, mut program_file) =
        Temp::create(dir.join(format!(".{base}.tmp-{pid}")), 0o755)?;
    let mut found = false;
    for layer in &manifest.layers {
        let Some(compression) = oci::decide_compression(&layer.media_type) else {
            return Err(PullError::Layer {
                image: name,
                media_type: layer.media_type.clone(),
            });
        };
        let (blob, mut blob_file) = Temp::create(dir.join(format!(".{base}.layer-{pid}")), 0o600)?;
        registry.blob_to(image, layer, &mut blob_file, &blob.path)?;
        blob_file.rewind().map_err(|source| PullError::Io {
            path: blob.path.clone(),
            source,
        })?;
        let verdict = extract::scan_layer(
            io::BufReader::new(&blob_file),
            compression,
            &entrypoint,
            &mut |r| {
                program_file.set_len(0)?;
                program_file.rewind()?;
                io::copy(r, &mut program_file).map(|_| ())
            },
        )
        .map_err(|error| PullError::Extract {
            image: name.clone(),
            error,
        })?;
        match verdict {
            LayerVerdict::Found => found = true,
            LayerVerdict::Removed => found = false,
            LayerVerdict::Untouched => {}
        }
    }
    if !found {
        return Err(PullError::Missing {
            image: name,
            path: entrypoint,
        });
    }
    let io_at = |path: &Path| {
        let path = path.to_owned();
        move |source| PullError::Io { path, source }
    };
    program_file.sync_all().map_err(io_at(&program.path))?;
    drop(program_file);
    std::fs::rename(&program.path, dest).map_err(io_at(dest))?;
    program.keep = true;
    crate::files::sync_dir(dir).map_err(io_at(dir))?;
    Ok(())
}
