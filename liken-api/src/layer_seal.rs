//! The deployment layer's seal: the list of every file a layer was packed
//! with, signed by the fleet's release key, and the kernel argument that
//! names the key a signed boot image accepts it from.
//!
//! A signed unified kernel image is the same for every machine of a
//! fleet, so it cannot carry a machine's layer, and the layer reaches
//! the boot as a file on the ESP that anyone with the disk can rewrite.
//! The layer decides what the machine believes about its fleet (the
//! Cluster and Machine documents, the trust root for releases, a
//! leader's identity), so under Secure Boot it has to be vouched for by
//! something the firmware checked. The image's command line carries
//! `liken.layer-key=<hex>`, the public half of the release key that
//! sealed the fleet's layers (`liken bundle -layer-key`), and every
//! layer carries `seal.yaml` (this module's [`LayerSeal`]) with its
//! detached signature `seal.yaml.sig`:
//!
//! - the seal lists each file of the layer as packed (`liken layer
//!   -seal-key`): its path below /etc/liken, its permission bits and
//!   its SHA-256;
//! - init accepts the layer when the signature is the named key's over
//!   the seal's exact bytes, and every file it finds is listed with the
//!   same digest and mode ([`decide_sealed`]).
//!
//! A file the seal lists may be missing: a follower's installed layer is
//! the fleet's layer without the private keys and the server token
//! (liken-init's `role_layer`), and it keeps the seal packed for the
//! whole layer. Leaving a file out only takes something away, and
//! the files whose absence a boot cannot do without (cluster.yaml) are
//! required by [`decide_sealed`] itself; the rest are checked by the
//! boot steps that read them (a missing trust root refuses releases, a
//! missing Machine stops the boot).
//!
//! What a seal does not stop is said in docs/init.md: a layer sealed for
//! another machine of the same fleet, or an older sealed layer, is
//! accepted, as both were signed by the fleet's owner.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::digest::Sha256Hex;
use crate::meta::{API_VERSION, Kind};
use crate::signing::PublicKey;
use crate::validate::{Problem, Problems, Validate};

/// The kernel argument naming the key that seals this fleet's layers.
pub const ARG: &str = "liken.layer-key";

/// The seal's file name below /etc/liken (its signature is
/// `seal.yaml.sig`, [`crate::signing::signature_name`]).
pub const SEAL_FILE: &str = "seal.yaml";

/// The file no sealed layer may lack: without the Cluster, a boot has
/// nothing to do, and a layer stripped down to its seal must not pass
/// as a sealed one.
pub const REQUIRED: &str = "cluster.yaml";

/// The most files a seal lists (a layer is a few documents and keys).
pub const MAX_FILES: usize = 4096;

/// `seal.yaml`: every file of a layer, as packed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LayerSeal {
    /// Always [`API_VERSION`].
    #[serde(default)]
    pub api_version: String,
    /// Always `LayerSeal`.
    #[serde(default)]
    pub kind: String,
    /// The files, sorted by path.
    pub files: Vec<SealedFile>,
}

/// One file of a sealed layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SealedFile {
    /// Its path below /etc/liken (`machines/node-1.yaml`).
    pub path: String,
    /// Its permission bits, as octal text (`0644`, `0600`).
    pub mode: String,
    /// The SHA-256 of its bytes.
    pub sha256: Sha256Hex,
}

impl Kind for LayerSeal {
    const KIND: &'static str = "LayerSeal";
    fn api_version(&self) -> &str {
        &self.api_version
    }
    fn kind(&self) -> &str {
        &self.kind
    }
}

/// A file as found in a layer: path below /etc/liken, permission bits,
/// digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Its path below /etc/liken.
    pub path: String,
    /// Its permission bits (`0o7777` at most).
    pub perm: u32,
    /// The SHA-256 of its bytes.
    pub sha256: Sha256Hex,
}

/// The octal text of permission bits.
pub fn render_mode(perm: u32) -> String {
    format!("{:04o}", perm & 0o7777)
}

/// Whether `path` is one of the seal's own two files, which the seal
/// cannot list.
pub fn is_seal_file(path: &str) -> bool {
    path == SEAL_FILE || path == crate::signing::signature_name(SEAL_FILE)
}

impl LayerSeal {
    /// The seal of `files` (the seal's own files left out), sorted by
    /// path.
    pub fn of(files: impl IntoIterator<Item = Found>) -> LayerSeal {
        let mut files: Vec<SealedFile> = files
            .into_iter()
            .filter(|f| !is_seal_file(&f.path))
            .map(|f| SealedFile {
                path: f.path,
                mode: render_mode(f.perm),
                sha256: f.sha256,
            })
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        LayerSeal {
            api_version: API_VERSION.to_owned(),
            kind: <LayerSeal as Kind>::KIND.to_owned(),
            files,
        }
    }

    /// The YAML text that is signed and packed.
    pub fn render(&self) -> Result<String, serde_yaml::Error> {
        crate::decode::to_yaml(self)
    }
}

fn plain_path(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

impl Validate for LayerSeal {
    fn validate(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        if self.files.len() > MAX_FILES {
            p.add(
                "files",
                format!(
                    "a seal lists at most {MAX_FILES} files, not {}",
                    self.files.len()
                ),
            );
        }
        for (i, f) in self.files.iter().enumerate() {
            if !plain_path(&f.path) || is_seal_file(&f.path) {
                p.add(
                    format!("files[{i}].path"),
                    format!("{:?} is not a plain relative path of a layer file", f.path),
                );
            }
            if f.mode.len() != 4 || !f.mode.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
                p.add(
                    format!("files[{i}].mode"),
                    format!("{:?} is not four octal digits (0644)", f.mode),
                );
            }
            if self.files.iter().take(i).any(|o| o.path == f.path) {
                p.add(
                    format!("files[{i}].path"),
                    format!("{} is listed twice", f.path),
                );
            }
        }
        if !self.files.iter().any(|f| f.path == REQUIRED) {
            p.add("files", format!("a layer's seal lists its {REQUIRED}"));
        }
        p.0
    }
}

/// Why a layer does not match its seal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SealError {
    /// A file the seal does not list.
    Unlisted {
        /// Its path below /etc/liken.
        path: String,
    },
    /// A file whose bytes are not the ones sealed.
    Changed {
        /// Its path below /etc/liken.
        path: String,
    },
    /// A file whose permission bits are not the ones sealed.
    Mode {
        /// Its path below /etc/liken.
        path: String,
        /// The sealed bits.
        sealed: String,
        /// The bits found.
        found: String,
    },
    /// The file every layer needs is not there.
    Missing {
        /// Its path below /etc/liken.
        path: String,
    },
}

impl fmt::Display for SealError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SealError::Unlisted { path } => write!(
                f,
                "{path} is not in the layer's seal: it was added after `liken layer -seal-key` \
                 packed the layer"
            ),
            SealError::Changed { path } => write!(
                f,
                "{path} is not the file the layer's seal lists: it was changed after `liken layer \
                 -seal-key` packed the layer"
            ),
            SealError::Mode {
                path,
                sealed,
                found,
            } => write!(f, "{path} has mode {found}, the seal says {sealed}"),
            SealError::Missing { path } => write!(f, "the layer has no {path}"),
        }
    }
}

/// Decides whether the files found in a layer are the ones `seal` lists:
/// each found file listed with the same digest and mode, and the
/// required file there. Files the seal lists may be missing (a
/// follower's layer). The seal's own files are not checked here (the
/// signature covers the seal; nothing covers its signature file).
pub fn decide_sealed(seal: &LayerSeal, found: &[Found]) -> Result<(), SealError> {
    let listed: BTreeMap<&str, &SealedFile> =
        seal.files.iter().map(|f| (f.path.as_str(), f)).collect();
    for f in found.iter().filter(|f| !is_seal_file(&f.path)) {
        let Some(sealed) = listed.get(f.path.as_str()) else {
            return Err(SealError::Unlisted {
                path: f.path.clone(),
            });
        };
        if sealed.sha256 != f.sha256 {
            return Err(SealError::Changed {
                path: f.path.clone(),
            });
        }
        let mode = render_mode(f.perm);
        if sealed.mode != mode {
            return Err(SealError::Mode {
                path: f.path.clone(),
                sealed: sealed.mode.clone(),
                found: mode,
            });
        }
    }
    if !found.iter().any(|f| f.path == REQUIRED) {
        return Err(SealError::Missing {
            path: REQUIRED.to_owned(),
        });
    }
    Ok(())
}

/// Why a `liken.layer-key=` value was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayerKeyError {
    /// Not 64 lower-case hex digits.
    Hex(String),
    /// The argument appears twice.
    Twice,
}

impl fmt::Display for LayerKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayerKeyError::Hex(v) => write!(
                f,
                "{ARG}={v:?} is not an ed25519 public key (64 lower-case hex digits); bundle the \
                 release again with `liken bundle -layer-key release.pub`"
            ),
            LayerKeyError::Twice => write!(
                f,
                "{ARG}= is given twice; a signed image names one key (bundle it again)"
            ),
        }
    }
}

/// Parses the argument's value strictly.
pub fn parse_arg(value: &str) -> Result<PublicKey, LayerKeyError> {
    PublicKey::parse(value).map_err(|_| LayerKeyError::Hex(value.to_owned()))
}

/// The argument for `key`.
pub fn render_arg(key: &PublicKey) -> String {
    format!("{ARG}={}", key.to_hex())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::sha256;

    fn found(path: &str, perm: u32, bytes: &[u8]) -> Found {
        Found {
            path: path.into(),
            perm,
            sha256: sha256(bytes),
        }
    }

    fn layer() -> Vec<Found> {
        vec![
            found("cluster.yaml", 0o644, b"kind: Cluster\n"),
            found("machines/node-1.yaml", 0o644, b"kind: Machine\n"),
            found("identity/server/token", 0o600, b"K10secret\n"),
        ]
    }

    #[test]
    fn a_layer_matches_its_own_seal_and_a_part_of_it_does_too() {
        let seal = LayerSeal::of(layer());
        assert_eq!(
            seal.files
                .iter()
                .map(|f| f.path.as_str())
                .collect::<Vec<_>>(),
            [
                "cluster.yaml",
                "identity/server/token",
                "machines/node-1.yaml"
            ]
        );
        assert_eq!(seal.files[1].mode, "0600");
        assert_eq!(decide_sealed(&seal, &layer()), Ok(()));
        // A follower's: the token left out.
        assert_eq!(decide_sealed(&seal, &layer()[..2]), Ok(()));
        // The seal's own files are never listed nor refused.
        let mut with_seal = layer();
        with_seal.push(found("seal.yaml", 0o644, b"x"));
        with_seal.push(found("seal.yaml.sig", 0o644, b"y"));
        assert_eq!(LayerSeal::of(with_seal.clone()), seal);
        assert_eq!(decide_sealed(&seal, &with_seal), Ok(()));
    }

    #[test]
    fn a_changed_added_remoded_or_stripped_layer_is_refused_by_name() {
        let seal = LayerSeal::of(layer());
        let mut changed = layer();
        changed[1] = found("machines/node-1.yaml", 0o644, b"kind: Machine\n# evil\n");
        assert_eq!(
            decide_sealed(&seal, &changed),
            Err(SealError::Changed {
                path: "machines/node-1.yaml".into()
            })
        );
        let mut added = layer();
        added.push(found("unsigned", 0o644, b"accept anything\n"));
        assert_eq!(
            decide_sealed(&seal, &added),
            Err(SealError::Unlisted {
                path: "unsigned".into()
            })
        );
        let mut remoded = layer();
        remoded[2].perm = 0o644;
        assert_eq!(
            decide_sealed(&seal, &remoded),
            Err(SealError::Mode {
                path: "identity/server/token".into(),
                sealed: "0600".into(),
                found: "0644".into()
            })
        );
        assert_eq!(
            decide_sealed(&seal, &layer()[1..]),
            Err(SealError::Missing {
                path: "cluster.yaml".into()
            })
        );
        assert!(
            SealError::Changed {
                path: "cluster.yaml".into()
            }
            .to_string()
            .contains("changed after `liken layer -seal-key`")
        );
    }

    #[test]
    fn a_seal_round_trips_through_the_strict_decoder_and_odd_ones_are_refused() {
        let seal = LayerSeal::of(layer());
        let text = seal.render().unwrap();
        let back: LayerSeal = crate::decode::strict(&text, "seal.yaml").unwrap();
        assert_eq!(back, seal);
        for (from, to) in [
            ("path: cluster.yaml", "path: ../cluster.yaml"),
            ("mode: '0600'", "mode: '600'"),
            ("path: machines/node-1.yaml", "path: cluster.yaml"),
            ("path: cluster.yaml", "path: seal.yaml"),
        ] {
            let odd = text.replacen(from, to, 1);
            assert_ne!(odd, text, "{from}");
            assert!(
                crate::decode::strict::<LayerSeal>(&odd, "seal.yaml").is_err(),
                "{odd}"
            );
        }
        let extra = text.replacen("files:", "extra: 1\nfiles:", 1);
        assert!(crate::decode::strict::<LayerSeal>(&extra, "seal.yaml").is_err());
    }

    #[test]
    fn the_key_argument_is_read_strictly() {
        let key = PublicKey([0xab; 32]);
        let arg = render_arg(&key);
        assert_eq!(arg, format!("liken.layer-key={}", "ab".repeat(32)));
        let value = arg.split_once('=').unwrap().1;
        assert_eq!(parse_arg(value), Ok(key));
        for odd in [
            "",
            "AB",
            &"AB".repeat(32),
            &"ab".repeat(31),
            &"ab".repeat(33),
        ] {
            assert_eq!(parse_arg(odd), Err(LayerKeyError::Hex(odd.to_owned())));
        }
    }
}
