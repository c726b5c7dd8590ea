//! Checking a release directory before any of it is written: the one
//! check behind install mode ([`crate::install`]) and the write-release
//! request ([`crate::release_writer`]).
//!
//! [`read_release`] opens release.yaml without following a symlink,
//! reads at most [`MAX_RELEASE_FILE`] bytes of it, compares its SHA-256
//! with the digest the caller trusts (the write-release request names
//! the one the machine operator checked against the catalog; install
//! media have none to compare with) and decodes it with liken-api's
//! strict decoder. [`check_artifacts`] then streams every artifact the
//! caller's [`Rules`] select through SHA-256, checking its size before
//! and after reading, so an artifact that is short, long, changed or a
//! link refuses the whole release before anything is written. The
//! artifacts a caller writes from memory are kept as they are hashed,
//! so what is written is byte for byte what was checked; the others are
//! hashed again (through [`hash_copy`]) while they are copied, the
//! system image by [`crate::slot_image`].
//!
//! Which artifacts a caller needs stays with the caller, as [`Rules`];
//! so does what to do about a refusal: a [`CheckError`] says what is
//! wrong, and the caller's error appends the remedy that fits its media.

use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use liken_api::release::{Artifact, RELEASE_FILE, Release};
use liken_api::verity::VerityArg;
use liken_api::{Sha256Hex, decode};
use sha2::{Digest as _, Sha256};

/// The largest release.yaml read; a real one is a few kilobytes.
pub const MAX_RELEASE_FILE: u64 = 1 << 20;

/// The largest artifact kept in memory (kernel, initrds, bootloader
/// images). An ESP of 512 MiB holds two slots' worth, so anything
/// larger could not be written to one anyway.
pub const MAX_KEPT: u64 = 192 << 20;

/// Bytes per read while streaming.
pub const CHUNK: usize = 1 << 20;

/// Why a release was refused: what is wrong, without the remedy (the
/// caller's error adds what to do, which depends on where the release
/// came from).
#[derive(Debug)]
pub enum CheckError {
    /// release.yaml could not be opened or read, or is too large or
    /// not text.
    ReleaseFile {
        /// Its path.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// release.yaml is not the file the caller trusts.
    ReleaseDigest {
        /// The digest the caller trusts.
        want: Sha256Hex,
        /// The file's.
        got: Sha256Hex,
    },
    /// release.yaml is not a valid Release (the decoder's message, which
    /// names the file).
    Document(String),
    /// release.yaml lists no artifact of a name the caller requires.
    MissingArtifact(&'static str),
    /// An artifact is missing, of the wrong size or digest, a link, or
    /// unreadable.
    Artifact {
        /// Its name in release.yaml.
        name: String,
        /// Its path.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::ReleaseFile { path, why } => {
                write!(f, "cannot read {} ({why})", path.display())
            }
            CheckError::ReleaseDigest { want, got } => write!(
                f,
                "release.yaml has sha256 {got}, not the {want} it was trusted with"
            ),
            CheckError::Document(e) => f.write_str(e),
            CheckError::MissingArtifact(name) => {
                write!(f, "release.yaml lists no {name:?} artifact")
            }
            CheckError::Artifact { name, path, why } => {
                write!(f, "artifact {name} ({}) {why}", path.display())
            }
        }
    }
}

impl std::error::Error for CheckError {}

/// The `liken.verity=` argument for the release's dm-verity record, if
/// it has one: what the slot's new entry carries so init opens the
/// system image through dm-verity. Refused (before anything is written)
/// when the record is not the one format the argument carries, which
/// the strict decoder's checks already rule out.
pub fn verity_arg(release: &Release) -> Result<Option<VerityArg>, CheckError> {
    release
        .verity
        .as_ref()
        .map(VerityArg::from_record)
        .transpose()
        .map_err(|e| CheckError::Document(e.to_string()))
}

/// Which of a release's artifacts a caller checks.
#[derive(Clone, Copy, Debug)]
pub struct Rules<'a> {
    /// Artifacts release.yaml must list.
    pub required: &'a [&'static str],
    /// Artifacts checked when release.yaml lists them.
    pub optional: &'a [&'static str],
    /// Whether every other artifact listed is checked too.
    pub others: bool,
    /// Artifacts whose bytes are kept as they are hashed, each at most
    /// [`MAX_KEPT`] bytes.
    pub keep: &'a [&'static str],
}

impl Rules<'_> {
    fn selects(&self, name: &str) -> bool {
        self.others || self.required.contains(&name) || self.optional.contains(&name)
    }
}

/// One artifact, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    /// What release.yaml says of it.
    pub artifact: Artifact,
    /// Its path in the release directory.
    pub path: PathBuf,
    /// Its bytes when the rules keep it; empty otherwise.
    pub bytes: Vec<u8>,
}

/// A release whose selected artifacts have the size and digest
/// release.yaml gives.
#[derive(Clone, Debug)]
pub struct Verified {
    /// The release document.
    pub release: Release,
    /// The artifacts checked, in release.yaml's order.
    pub artifacts: Vec<Checked>,
}

impl Verified {
    /// Takes the checked artifact `name` out, if it was checked.
    pub fn take(&mut self, name: &str) -> Option<Checked> {
        let i = self
            .artifacts
            .iter()
            .position(|c| c.artifact.name == name)?;
        Some(self.artifacts.swap_remove(i))
    }

    /// As [`Verified::take`], for an artifact of [`Rules::required`].
    pub fn take_required(&mut self, name: &'static str) -> Result<Checked, CheckError> {
        self.take(name).ok_or(CheckError::MissingArtifact(name))
    }
}

/// Opens `path` for reading when it is a regular file: a release's
/// files are plain files in its directory, never links to somewhere
/// else, and a FIFO in their place must not block init (O_NOFOLLOW,
/// O_NONBLOCK; see [`crate::fsutil::open_regular`]).
pub use crate::fsutil::open_regular;

/// Which side of [`hash_copy`] failed.
#[derive(Debug)]
pub enum CopyError {
    /// Reading the source.
    Read(io::Error),
    /// The sink refused a piece.
    Write(io::Error),
}

/// Streams `src` to its end through SHA-256 in [`CHUNK`] pieces, handing
/// each piece to `sink` once it is hashed; returns the digest and the
/// number of bytes.
pub fn hash_copy(
    src: &mut dyn Read,
    sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
) -> Result<(Sha256Hex, u64), CopyError> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut n: u64 = 0;
    loop {
        let got = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(g) => g,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CopyError::Read(e)),
        };
        let chunk = buf.get(..got).unwrap_or_default();
        hasher.update(chunk);
        sink(chunk).map_err(CopyError::Write)?;
        n = n.saturating_add(u64::try_from(got).unwrap_or(u64::MAX));
    }
    Ok((Sha256Hex::from_bytes(hasher.finalize().into()), n))
}

/// Reads and decodes `dir`/release.yaml, refusing it unless its SHA-256
/// is `trusted` (when given).
pub fn read_release(dir: &Path, trusted: Option<&Sha256Hex>) -> Result<Release, CheckError> {
    read_release_text(dir, trusted).map(|(release, _)| release)
}

/// [`read_release`], with the file's exact text (what a signature is
/// checked over).
pub fn read_release_text(
    dir: &Path,
    trusted: Option<&Sha256Hex>,
) -> Result<(Release, String), CheckError> {
    let path = dir.join(RELEASE_FILE);
    let file_err = |why: String| CheckError::ReleaseFile {
        path: path.clone(),
        why,
    };
    let f = open_regular(&path).map_err(|e| file_err(e.to_string()))?;
    let mut bytes = Vec::new();
    f.take(MAX_RELEASE_FILE.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| file_err(e.to_string()))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_RELEASE_FILE {
        return Err(file_err(format!(
            "it is larger than {MAX_RELEASE_FILE} bytes, which no release document is"
        )));
    }
    if let Some(want) = trusted {
        let got = liken_api::hash::sha256(&bytes);
        if &got != want {
            return Err(CheckError::ReleaseDigest {
                want: want.clone(),
                got,
            });
        }
    }
    let text = String::from_utf8(bytes).map_err(|_| file_err("it is not UTF-8 text".into()))?;
    let release = decode::strict(&text, &path.display().to_string())
        .map_err(|e| CheckError::Document(e.to_string()))?;
    Ok((release, text))
}

/// Checks one artifact's size and digest, keeping its bytes when `keep`.
fn check_one(dir: &Path, a: &Artifact, keep: bool) -> Result<Checked, CheckError> {
    let path = dir.join(a.file.as_str());
    let bad = |why: String| CheckError::Artifact {
        name: a.name.clone(),
        path: path.clone(),
        why,
    };
    if keep && a.size > MAX_KEPT {
        return Err(bad(format!(
            "is {} bytes by release.yaml, more than the {MAX_KEPT} an ESP file may have",
            a.size
        )));
    }
    let f = open_regular(&path).map_err(|e| bad(format!("cannot be opened: {e}")))?;
    let len = f
        .metadata()
        .map_err(|e| bad(format!("cannot be read: {e}")))?
        .len();
    if len != a.size {
        return Err(bad(format!(
            "is {len} bytes, but release.yaml says {}",
            a.size
        )));
    }
    let mut bytes = Vec::new();
    if keep {
        bytes
            .try_reserve_exact(usize::try_from(a.size).unwrap_or(usize::MAX))
            .map_err(|_| bad("does not fit in memory".to_owned()))?;
    }
    // One byte more than promised, so a file that grew is noticed.
    let mut limited = f.take(a.size.saturating_add(1));
    let (digest, n) = hash_copy(&mut limited, &mut |chunk| {
        if keep {
            bytes.extend_from_slice(chunk);
        }
        Ok(())
    })
    .map_err(|(CopyError::Read(e) | CopyError::Write(e))| bad(format!("cannot be read: {e}")))?;
    if n != a.size {
        return Err(bad(format!(
            "gave {n} bytes while being read, but release.yaml says {}",
            a.size
        )));
    }
    if digest != a.sha256 {
        return Err(bad(format!(
            "has sha256 {digest}, but release.yaml says {}",
            a.sha256
        )));
    }
    Ok(Checked {
        artifact: a.clone(),
        path,
        bytes,
    })
}

/// Checks the artifacts of `release` (in `dir`) that `rules` select, in
/// release.yaml's order, after making sure every required one is
/// listed. `progress` hears of each artifact once it checks out.
pub fn check_artifacts(
    dir: &Path,
    release: Release,
    rules: &Rules<'_>,
    progress: &mut dyn FnMut(&str),
) -> Result<Verified, CheckError> {
    if let Some(missing) = rules
        .required
        .iter()
        .find(|name| release.artifact(name).is_none())
    {
        return Err(CheckError::MissingArtifact(missing));
    }
    let mut artifacts = Vec::new();
    for a in release.artifacts.iter().filter(|a| rules.selects(&a.name)) {
        let checked = check_one(dir, a, rules.keep.contains(&a.name.as_str()))?;
        progress(&format!(
            "{} checked ({} bytes, sha256 {})",
            a.name,
            a.size,
            a.sha256.short()
        ));
        artifacts.push(checked);
    }
    Ok(Verified { release, artifacts })
}

/// [`read_release`] and then [`check_artifacts`].
pub fn verify(
    dir: &Path,
    trusted: Option<&Sha256Hex>,
    rules: &Rules<'_>,
    progress: &mut dyn FnMut(&str),
) -> Result<Verified, CheckError> {
    let release = read_release(dir, trusted)?;
    check_artifacts(dir, release, rules, progress)
}

/// Writes `bytes` to `dir`/`file` and describes them as release.yaml
/// would: the artifact of every test release.
#[cfg(test)]
pub(crate) fn write_test_artifact(dir: &Path, name: &str, file: &str, bytes: &[u8]) -> Artifact {
    std::fs::write(dir.join(file), bytes).unwrap();
    Artifact {
        name: name.into(),
        file: liken_api::FileName::parse(file).unwrap(),
        sha256: liken_api::hash::sha256(bytes),
        size: bytes.len() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::release::{ARTIFACT_KERNEL, ARTIFACT_MICROCODE, ARTIFACT_SYSTEM};
    use liken_api::{FileName, Version};

    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A release with a kernel, a system image (longer than a chunk,
    /// not a multiple of one) and licenses; returns it and the digest of
    /// its release.yaml.
    fn release(test: &str) -> (Dir, Sha256Hex) {
        let dir =
            std::env::temp_dir().join(format!("liken-init-check-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let system: Vec<u8> = (0..(CHUNK as u32 + 4097))
            .map(|i| (i % 251) as u8)
            .collect();
        let artifacts = vec![
            write_test_artifact(&dir, ARTIFACT_KERNEL, "vmlinuz", b"kernel image"),
            write_test_artifact(&dir, ARTIFACT_SYSTEM, "liken.sqfs", &system),
            write_test_artifact(&dir, "licenses", "licenses.md", b"# licenses"),
        ];
        let release = Release::new(Version::parse("2026.12.02-001").unwrap(), artifacts, vec![]);
        let yaml = decode::to_yaml(&release).unwrap();
        std::fs::write(dir.join(RELEASE_FILE), &yaml).unwrap();
        (Dir(dir), liken_api::hash::sha256(yaml.as_bytes()))
    }

    const RULES: Rules<'static> = Rules {
        required: &[ARTIFACT_KERNEL, ARTIFACT_SYSTEM],
        optional: &[ARTIFACT_MICROCODE],
        others: false,
        keep: &[ARTIFACT_KERNEL],
    };

    fn check(dir: &Dir, trusted: &Sha256Hex) -> Result<Verified, CheckError> {
        verify(&dir.0, Some(trusted), &RULES, &mut |_| {})
    }

    fn artifact_error(e: &CheckError) -> (&str, &str) {
        match e {
            CheckError::Artifact { name, why, .. } => (name, why),
            other => panic!("not an artifact error: {other}"),
        }
    }

    #[test]
    fn checks_what_the_rules_select_and_keeps_what_they_keep() {
        let (dir, sha) = release("ok");
        let mut lines = Vec::new();
        let mut v = verify(&dir.0, Some(&sha), &RULES, &mut |l| {
            lines.push(l.to_owned())
        })
        .unwrap();
        // Licenses are neither required nor optional: not checked.
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("kernel checked (12 bytes, sha256 "),
            "{lines:?}"
        );
        assert_eq!(
            v.take_required(ARTIFACT_KERNEL).unwrap().bytes,
            b"kernel image"
        );
        let system = v.take_required(ARTIFACT_SYSTEM).unwrap();
        assert!(system.bytes.is_empty(), "the system image is not kept");
        assert_eq!(system.path, dir.0.join("liken.sqfs"));
        assert!(v.take(ARTIFACT_MICROCODE).is_none());
        assert!(matches!(
            v.take_required(ARTIFACT_MICROCODE),
            Err(CheckError::MissingArtifact(ARTIFACT_MICROCODE))
        ));

        // With `others`, every artifact listed is checked.
        let all = Rules {
            others: true,
            ..RULES
        };
        let v = verify(&dir.0, None, &all, &mut |_| {}).unwrap();
        assert_eq!(v.artifacts.len(), 3);
    }

    #[test]
    fn refuses_a_tampered_artifact() {
        let (dir, sha) = release("tampered");
        // Same size, other bytes: the digest catches it.
        let sys = dir.0.join("liken.sqfs");
        let mut bytes = std::fs::read(&sys).unwrap();
        bytes[CHUNK + 7] ^= 1;
        std::fs::write(&sys, &bytes).unwrap();
        let e = check(&dir, &sha).unwrap_err();
        let (name, why) = artifact_error(&e);
        assert_eq!(name, ARTIFACT_SYSTEM);
        assert!(why.starts_with("has sha256 "), "{e}");
        assert!(
            e.to_string().contains("(") && e.to_string().contains("liken.sqfs"),
            "{e}"
        );
    }

    #[test]
    fn refuses_a_wrong_size() {
        let (dir, sha) = release("size");
        std::fs::write(dir.0.join("vmlinuz"), b"kernel imag").unwrap();
        let e = check(&dir, &sha).unwrap_err();
        assert_eq!(
            artifact_error(&e),
            (ARTIFACT_KERNEL, "is 11 bytes, but release.yaml says 12")
        );
        std::fs::write(dir.0.join("vmlinuz"), b"kernel images").unwrap();
        let e = check(&dir, &sha).unwrap_err();
        assert!(artifact_error(&e).1.starts_with("is 13 bytes"), "{e}");
    }

    #[test]
    fn refuses_symlinks() {
        let (dir, sha) = release("link");
        let k = dir.0.join("vmlinuz");
        let moved = dir.0.join("vmlinuz.real");
        std::fs::rename(&k, &moved).unwrap();
        std::os::unix::fs::symlink(&moved, &k).unwrap();
        let e = check(&dir, &sha).unwrap_err();
        assert_eq!(
            artifact_error(&e),
            (ARTIFACT_KERNEL, "cannot be opened: it is a symlink")
        );

        let yaml = dir.0.join(RELEASE_FILE);
        let real = dir.0.join("release.real");
        std::fs::rename(&yaml, &real).unwrap();
        std::os::unix::fs::symlink(&real, &yaml).unwrap();
        let e = check(&dir, &sha).unwrap_err();
        assert!(
            matches!(&e, CheckError::ReleaseFile { why, .. } if why == "it is a symlink"),
            "{e}"
        );

        // A directory in an artifact's place is not a regular file.
        std::fs::remove_file(&yaml).unwrap();
        std::fs::rename(&real, &yaml).unwrap();
        std::fs::remove_file(&k).unwrap();
        std::fs::create_dir(&k).unwrap();
        let e = check(&dir, &sha).unwrap_err();
        assert!(artifact_error(&e).1.contains("not a regular file"), "{e}");
    }

    #[test]
    fn refuses_an_oversized_release_file() {
        let (dir, _) = release("large");
        let mut text = std::fs::read_to_string(dir.0.join(RELEASE_FILE)).unwrap();
        text.push_str(&"#".repeat(MAX_RELEASE_FILE as usize));
        std::fs::write(dir.0.join(RELEASE_FILE), &text).unwrap();
        let e = read_release(&dir.0, None).unwrap_err();
        assert!(
            matches!(&e, CheckError::ReleaseFile { why, .. } if why.contains("larger than 1048576")),
            "{e}"
        );
    }

    #[test]
    fn refuses_a_release_file_other_than_the_trusted_one() {
        let (dir, sha) = release("digest");
        let other = liken_api::hash::sha256(b"another release.yaml");
        let e = check(&dir, &other).unwrap_err();
        assert!(
            matches!(&e, CheckError::ReleaseDigest { want, got } if *want == other && *got == sha),
            "{e}"
        );
        // Checked before decoding: a trusted digest of garbage is refused
        // as a document, not as a digest.
        std::fs::write(dir.0.join(RELEASE_FILE), "kind: Release\nversion: x\n").unwrap();
        let garbage = liken_api::hash::sha256(b"kind: Release\nversion: x\n");
        assert!(matches!(
            check(&dir, &garbage),
            Err(CheckError::Document(_))
        ));
        std::fs::write(dir.0.join(RELEASE_FILE), [0xFFu8, 0xFE]).unwrap();
        assert!(matches!(
            read_release(&dir.0, None),
            Err(CheckError::ReleaseFile { why, .. }) if why.contains("UTF-8")
        ));
        std::fs::remove_file(dir.0.join(RELEASE_FILE)).unwrap();
        assert!(matches!(
            read_release(&dir.0, None),
            Err(CheckError::ReleaseFile { .. })
        ));
    }

    #[test]
    fn a_required_artifact_missing_is_refused_before_hashing() {
        let (dir, sha) = release("missing");
        // Broken too, but the missing artifact is reported first.
        std::fs::write(dir.0.join("vmlinuz"), b"x").unwrap();
        let rules = Rules {
            required: &[ARTIFACT_KERNEL, "grub-core"],
            ..RULES
        };
        let e = verify(&dir.0, Some(&sha), &rules, &mut |_| {}).unwrap_err();
        assert!(matches!(e, CheckError::MissingArtifact("grub-core")), "{e}");
        assert_eq!(
            e.to_string(),
            "release.yaml lists no \"grub-core\" artifact"
        );
    }

    #[test]
    fn a_kept_artifact_larger_than_an_esp_file_is_refused_unread() {
        let dir =
            std::env::temp_dir().join(format!("liken-init-check-kept-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dir = Dir(dir);
        let a = Artifact {
            name: ARTIFACT_KERNEL.into(),
            file: FileName::parse("vmlinuz").unwrap(),
            sha256: liken_api::hash::sha256(b""),
            size: MAX_KEPT + 1,
        };
        let e = check_one(&dir.0, &a, true).unwrap_err();
        assert!(artifact_error(&e).1.contains("an ESP file may have"), "{e}");
    }

    #[test]
    fn hashes_while_handing_on() {
        let data: Vec<u8> = (0..(CHUNK as u32 * 2 + 3)).map(|i| i as u8).collect();
        let mut copy = Vec::new();
        let (d, n) = hash_copy(&mut data.as_slice(), &mut |c| {
            copy.extend_from_slice(c);
            Ok(())
        })
        .unwrap();
        assert_eq!(d, liken_api::hash::sha256(&data));
        assert_eq!((n, copy), (data.len() as u64, data));
        let e = hash_copy(&mut &b"x"[..], &mut |_| Err(io::Error::other("full"))).unwrap_err();
        assert!(matches!(e, CopyError::Write(_)), "{e:?}");
    }
}
