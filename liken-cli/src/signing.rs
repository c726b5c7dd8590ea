//! `liken keygen`, `liken trust` and `liken sign`: release-signing keys,
//! the fleet's trust root, and detached signatures (the documents are
//! liken_api::signing's; this module reads and writes their files).
//!
//! A person never types a key or a signature: keygen writes the key pair
//! and prints its id, trust writes trust.yaml from public key files, sign
//! writes `<file>.sig` (and, with `-allow-rollback`, the permit it signs).
//! Signing a channel.yaml renews it first (the next serial, a new
//! expiry; [`liken_releases::channel::renew`]), so a channel re-signed
//! with nothing new to publish still reads as current and never as a
//! replay.
//! The private key is written 0600 and read only to sign; nothing here
//! prints it.
//!
//! The commands take the words the dispatcher read (lib.rs) as plain
//! values and answer with [`SigningError`], so this module imports
//! nothing of the crate's command layer (scripts/import-layers.py).

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use liken_api::decode::{self, DecodeError};
use liken_api::meta::Kind;
use liken_api::release::{Channel, Release};
use liken_api::signing::{
    self, DetachedSignature, RELEASE_KEY_FILE, ReleaseKey, RollbackPermit, SIGNING_KEY_FILE,
    SigningKey, TrustRoot,
};
use liken_api::{Time, Version};
use liken_releases::channel::{self, ChannelError};
use liken_releases::files;

/// How long a rollback permit lasts unless `-expires` says otherwise.
pub const DEFAULT_PERMIT_HOURS: i64 = 24;

/// Why a key, trust root or signature was not written.
#[derive(Debug)]
pub enum SigningError {
    /// Reading or writing a file failed.
    Io {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// A file is not the document expected.
    Decode(DecodeError),
    /// keygen would overwrite a key.
    KeyExists(PathBuf),
    /// The system's random source failed.
    Random,
    /// The file to sign is not a liken document that is signed.
    NotSignable {
        /// The file.
        path: PathBuf,
    },
    /// A flag's value is wrong.
    Invalid(String),
    /// A channel.yaml could not be renewed.
    Channel(ChannelError),
    /// Writing the command's output failed.
    Output(std::io::Error),
}

impl fmt::Display for SigningError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SigningError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            SigningError::Decode(e) => write!(f, "{e}"),
            SigningError::KeyExists(p) => write!(
                f,
                "{} already exists; a new key is written only into a directory without one \
                 (a lost key cannot be recovered, so it is never overwritten)",
                p.display()
            ),
            SigningError::Random => f.write_str(
                "the system's random source failed; a key cannot be made safely without it",
            ),
            SigningError::NotSignable { path } => write!(
                f,
                "{} is not a release.yaml, channel.yaml, trust.yaml or rollback permit; \
                 only those are signed",
                path.display()
            ),
            SigningError::Invalid(m) => f.write_str(m),
            SigningError::Channel(e) => write!(f, "nothing was signed: {e}"),
            SigningError::Output(e) => write!(f, "writing output: {e}"),
        }
    }
}

impl std::error::Error for SigningError {}

impl From<std::io::Error> for SigningError {
    fn from(e: std::io::Error) -> SigningError {
        SigningError::Output(e)
    }
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> SigningError + '_ {
    move |source| SigningError::Io {
        path: path.to_owned(),
        source,
    }
}

fn read_text(path: &Path) -> Result<String, SigningError> {
    std::fs::read_to_string(path).map_err(io_at(path))
}

/// Reads a private key file.
pub fn read_signing_key(path: &Path) -> Result<SigningKey, SigningError> {
    let text = read_text(path)?;
    decode::strict(&text, &path.display().to_string()).map_err(SigningError::Decode)
}

/// Reads a public key file (`release.pub`).
pub fn read_release_key(path: &Path) -> Result<ReleaseKey, SigningError> {
    let text = read_text(path)?;
    decode::strict(&text, &path.display().to_string()).map_err(SigningError::Decode)
}

/// Reads a trust root.
pub fn read_trust(path: &Path) -> Result<TrustRoot, SigningError> {
    let text = read_text(path)?;
    decode::strict(&text, &path.display().to_string()).map_err(SigningError::Decode)
}

/// Reads a detached signature, if the file exists.
pub fn read_signature(path: &Path) -> Result<Option<DetachedSignature>, SigningError> {
    match std::fs::read_to_string(path) {
        Ok(text) => decode::strict(&text, &path.display().to_string())
            .map(Some)
            .map_err(SigningError::Decode),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_at(path)(e)),
    }
}

/// Signs `file`'s exact bytes into `<file>.sig`; returns the signature's
/// path.
pub fn sign_file(key: &SigningKey, file: &Path) -> Result<PathBuf, SigningError> {
    let bytes = std::fs::read(file).map_err(io_at(file))?;
    let sig = key.sign(&bytes);
    let text = decode::to_yaml(&sig).map_err(|e| SigningError::Invalid(e.to_string()))?;
    let mut name = file.as_os_str().to_owned();
    name.push(signing::SIGNATURE_SUFFIX);
    let out = PathBuf::from(name);
    files::replace(&out, text.as_bytes(), files::PUBLIC).map_err(io_at(&out))?;
    Ok(out)
}

/// `liken keygen <dir>`.
pub fn keygen_command(dir: &Path, out: &mut dyn Write) -> Result<(), SigningError> {
    let (private, public) = keygen(dir)?;
    writeln!(
        out,
        "key {id}: private key {} (0600: keep it off machines, offline if you can), public key {}\n\
         trust it: liken trust <deployment-dir>/trust.yaml {}",
        private.display(),
        public.display(),
        public.display(),
        id = read_signing_key(&private)?.id
    )?;
    Ok(())
}

/// Writes a new key pair into `dir`; returns the private and public
/// files.
pub fn keygen(dir: &Path) -> Result<(PathBuf, PathBuf), SigningError> {
    let private = dir.join(SIGNING_KEY_FILE);
    let public = dir.join(RELEASE_KEY_FILE);
    for p in [&private, &public] {
        if std::fs::symlink_metadata(p).is_ok() {
            return Err(SigningError::KeyExists(p.clone()));
        }
    }
    std::fs::create_dir_all(dir).map_err(io_at(dir))?;
    let mut seed = [0u8; 32];
    {
        use ring::rand::SecureRandom;
        ring::rand::SystemRandom::new()
            .fill(&mut seed)
            .map_err(|_| SigningError::Random)?;
    }
    let (key, release_key) = signing::key_pair(seed);
    let yaml =
        |r: Result<String, serde_yaml::Error>| r.map_err(|e| SigningError::Invalid(e.to_string()));
    let private_text = yaml(decode::to_yaml(&key))?;
    let public_text = yaml(decode::to_yaml(&release_key))?;
    files::replace(&private, private_text.as_bytes(), files::PRIVATE).map_err(io_at(&private))?;
    files::replace(&public, public_text.as_bytes(), files::PUBLIC).map_err(io_at(&public))?;
    Ok((private, public))
}

/// `liken trust [-sign release.key] <trust.yaml> <release.pub>...`:
/// writes `out` from the public key files `keys`, signed with `sign`.
pub fn trust_command(
    out: &Path,
    keys: &[PathBuf],
    sign: Option<&Path>,
    w: &mut dyn Write,
) -> Result<(), SigningError> {
    let mut public = Vec::new();
    for path in keys {
        public.push(read_release_key(path)?);
    }
    let trust = TrustRoot::new(public);
    let problems = liken_api::validate::Validate::validate(&trust);
    if let Some(p) = problems.first() {
        return Err(SigningError::Invalid(format!(
            "the trust root is not valid: {p}"
        )));
    }
    let text = decode::to_yaml(&trust).map_err(|e| SigningError::Invalid(e.to_string()))?;
    files::replace(out, text.as_bytes(), files::PUBLIC).map_err(io_at(out))?;
    writeln!(
        w,
        "wrote {}: trusts {}",
        out.display(),
        trust.ids().join(", ")
    )?;
    if let Some(k) = sign {
        let key = read_signing_key(k)?;
        let sig = sign_file(&key, out)?;
        writeln!(
            w,
            "signed it with key {} ({}): machines that trust that key accept this trust root",
            key.id,
            sig.display()
        )?;
    }
    Ok(())
}

/// What a file to be signed holds.
fn signable_kind(path: &Path, text: &str) -> Result<&'static str, SigningError> {
    let origin = path.display().to_string();
    if decode::strict::<Release>(text, &origin).is_ok() {
        return Ok(<Release as Kind>::KIND);
    }
    if decode::strict::<Channel>(text, &origin).is_ok() {
        return Ok(<Channel as Kind>::KIND);
    }
    if decode::strict::<TrustRoot>(text, &origin).is_ok() {
        return Ok(<TrustRoot as Kind>::KIND);
    }
    if decode::strict::<RollbackPermit>(text, &origin).is_ok() {
        return Ok(<RollbackPermit as Kind>::KIND);
    }
    Err(SigningError::NotSignable {
        path: path.to_owned(),
    })
}

/// `-allow-rollback`'s words: the version and the flags that go with it.
#[derive(Debug, Default)]
pub struct PermitWords<'a> {
    /// `-allow-rollback`.
    pub version: &'a str,
    /// `-cluster`.
    pub cluster: Option<&'a str>,
    /// Each `-machine`.
    pub machines: Vec<&'a str>,
    /// `-expires`.
    pub expires: Option<&'a str>,
}

/// Reads `-channel-days`.
pub fn channel_days(text: &str) -> Result<u32, SigningError> {
    channel::parse_validity_days(text).map_err(SigningError::Invalid)
}

/// `liken sign -key release.key [-channel-days N] [-allow-rollback V
/// -cluster C -machine M... [-expires T]] <file>`: signs `file` with the
/// key at `key` (renewing it first when it is a channel.yaml, fresh for
/// `channel_days` or the default), or with `rollback` writes the permit
/// into `file` and signs that.
pub fn sign_command(
    file: &Path,
    key: &Path,
    rollback: Option<PermitWords<'_>>,
    channel_days: Option<u32>,
    w: &mut dyn Write,
) -> Result<(), SigningError> {
    let key = read_signing_key(key)?;
    if rollback.is_some() && channel_days.is_some() {
        return Err(SigningError::Invalid(
            "-channel-days renews a channel.yaml; a rollback permit's lifetime is -expires".into(),
        ));
    }
    if let Some(words) = rollback {
        let permit = permit(&words, Time::from_system(std::time::SystemTime::now()))?;
        let text = decode::to_yaml(&permit).map_err(|e| SigningError::Invalid(e.to_string()))?;
        files::replace(file, text.as_bytes(), files::PUBLIC).map_err(io_at(file))?;
        let sig = sign_file(&key, file)?;
        writeln!(
            w,
            "wrote rollback permit {} and {}: machines {} of cluster {} may take release {} \
             below their floor until {}",
            file.display(),
            sig.display(),
            permit.machines.join(", "),
            permit.cluster,
            permit.version,
            permit.expires
        )?;
        return Ok(());
    }
    let text = read_text(file)?;
    let kind = signable_kind(file, &text)?;
    if kind == <Channel as Kind>::KIND {
        let now = Time::from_system(std::time::SystemTime::now());
        let days = channel_days.unwrap_or(liken_api::release::DEFAULT_CHANNEL_VALIDITY_DAYS);
        let renewal = channel::renew(file, channel::expiry(now, days), &key)
            .map_err(SigningError::Channel)?;
        writeln!(
            w,
            "signed {} ({kind}) with key {}: {}\nrenewed it: serial {}, current until {} \
             (latest is still {}); sign it again before then, or readers take the channel as \
             stopped",
            file.display(),
            key.id,
            renewal.signature.display(),
            renewal
                .channel
                .serial
                .map_or_else(String::new, |s| s.to_string()),
            renewal
                .channel
                .expires
                .map_or_else(String::new, |t| t.to_string()),
            renewal.channel.latest,
        )?;
        return Ok(());
    }
    if channel_days.is_some() {
        return Err(SigningError::Invalid(format!(
            "-channel-days renews a channel.yaml, and {} is a {kind}; sign it without the flag",
            file.display()
        )));
    }
    let sig = sign_file(&key, file)?;
    writeln!(
        w,
        "signed {} ({kind}) with key {}: {}",
        file.display(),
        key.id,
        sig.display()
    )?;
    Ok(())
}

/// The permit `-allow-rollback` describes, from the flags.
fn permit(words: &PermitWords<'_>, now: Time) -> Result<RollbackPermit, SigningError> {
    let version = Version::parse(words.version)
        .map_err(|e| SigningError::Invalid(format!("-allow-rollback: {e}")))?;
    let cluster = words.cluster.ok_or_else(|| {
        SigningError::Invalid(
            "-allow-rollback needs -cluster <name>: a permit names the Cluster it is for".into(),
        )
    })?;
    let machines: Vec<String> = words.machines.iter().map(|m| (*m).to_owned()).collect();
    if machines.is_empty() {
        return Err(SigningError::Invalid(
            "-allow-rollback needs at least one -machine <name>: a permit names the machines \
             that may go back"
                .into(),
        ));
    }
    let expires = match words.expires {
        None => now.plus_seconds(DEFAULT_PERMIT_HOURS * 3600),
        Some(t) => t.parse::<Time>().map_err(|e| {
            SigningError::Invalid(format!(
                "-expires: {e} (an RFC 3339 time, 2026-12-05T12:00:00Z)"
            ))
        })?,
    };
    if expires <= now {
        return Err(SigningError::Invalid(format!(
            "-expires {expires} is already past; a permit must expire in the future"
        )));
    }
    let permit = RollbackPermit::new(cluster.to_owned(), machines, version, expires);
    if let Some(p) = liken_api::validate::Validate::validate(&permit).first() {
        return Err(SigningError::Invalid(format!(
            "the permit is not valid: {p}"
        )));
    }
    Ok(permit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    #[test]
    fn keygen_writes_a_private_key_0600_and_never_overwrites() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = TestDir::new("keygen");
        let (private, public) = keygen(tmp.path()).unwrap();
        let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let key = read_signing_key(&private).unwrap();
        let text = std::fs::read_to_string(&public).unwrap();
        let release_key: ReleaseKey = decode::strict(&text, "pub").unwrap();
        assert_eq!(release_key, key.public());
        assert!(!text.contains(&key.seed.to_hex()));
        let e = keygen(tmp.path()).unwrap_err();
        assert!(matches!(e, SigningError::KeyExists(_)), "{e}");
        assert_eq!(read_signing_key(&private).unwrap(), key);
    }

    #[test]
    fn a_signed_file_verifies_and_only_documents_are_signed() {
        let tmp = TestDir::new("sign");
        let (private, _) = keygen(tmp.path()).unwrap();
        let key = read_signing_key(&private).unwrap();
        let release = tmp.path().join("release.yaml");
        let text = "apiVersion: liken.sh/v1alpha1\nkind: Channel\nlatest: 2026.12.01-001\n";
        std::fs::write(&release, text).unwrap();
        assert_eq!(signable_kind(&release, text).unwrap(), "Channel");
        let sig = sign_file(&key, &release).unwrap();
        assert!(sig.ends_with("release.yaml.sig"));
        let sig = read_signature(&sig).unwrap().unwrap();
        let trust = TrustRoot::new([key.public()]);
        assert_eq!(trust.verify(text.as_bytes(), Some(&sig)).unwrap(), key.id);
        assert!(matches!(
            signable_kind(&release, "hello: world\n"),
            Err(SigningError::NotSignable { .. })
        ));
        assert_eq!(read_signature(&tmp.path().join("none.sig")).unwrap(), None);
    }

    #[test]
    fn signing_a_channel_renews_it_and_signs_the_new_bytes() {
        let tmp = TestDir::new("sign-channel");
        let (private, _) = keygen(tmp.path()).unwrap();
        let key = read_signing_key(&private).unwrap();
        let trust = TrustRoot::new([key.public()]);
        let channel = tmp.path().join("channel.yaml");
        std::fs::write(
            &channel,
            "apiVersion: liken.sh/v1alpha1\nkind: Channel\nlatest: 2026.12.01-001\nserial: 4\n",
        )
        .unwrap();
        let read_channel = || {
            let text = std::fs::read_to_string(&channel).unwrap();
            decode::strict::<Channel>(&text, "channel.yaml").unwrap()
        };
        let mut out = Vec::new();
        sign_command(&channel, &private, None, Some(2), &mut out).unwrap();
        let doc = read_channel();
        assert_eq!(
            (doc.serial, doc.latest.as_str()),
            (Some(5), "2026.12.01-001")
        );
        let expires = doc.expires.unwrap();
        let now = Time::from_system(std::time::SystemTime::now());
        let days = expires.seconds_since(now);
        assert!((2 * 86_400 - 60..=2 * 86_400).contains(&days), "{days}");
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.contains("renewed it: serial 5, current until")
                && out.contains(&expires.to_string())
                && out.contains(key.id.as_str()),
            "{out}"
        );
        assert!(!out.contains(&key.seed.to_hex()));
        let sig = read_signature(&tmp.path().join("channel.yaml.sig"))
            .unwrap()
            .unwrap();
        let bytes = std::fs::read(&channel).unwrap();
        assert_eq!(trust.verify(&bytes, Some(&sig)).unwrap(), key.id);

        // Again with nothing new: a strictly newer document, the default
        // validity.
        sign_command(&channel, &private, None, None, &mut Vec::new()).unwrap();
        let again = read_channel();
        assert_eq!(again.serial, Some(6));
        assert!(again.expires.unwrap().seconds_since(now) >= 13 * 86_400);
        let sig = read_signature(&tmp.path().join("channel.yaml.sig"))
            .unwrap()
            .unwrap();
        let bytes = std::fs::read(&channel).unwrap();
        assert_eq!(trust.verify(&bytes, Some(&sig)).unwrap(), key.id);
    }

    #[test]
    fn channel_days_is_only_for_a_channel() {
        let tmp = TestDir::new("sign-days");
        let (private, public) = keygen(tmp.path()).unwrap();
        let trust = tmp.path().join("trust.yaml");
        trust_command(&trust, &[public], None, &mut Vec::new()).unwrap();
        let e = sign_command(&trust, &private, None, Some(3), &mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("is a TrustRoot"), "{e}");
        assert!(!tmp.path().join("trust.yaml.sig").exists());
        let words = PermitWords {
            version: "2026.12.01-001",
            cluster: Some("home"),
            machines: vec!["node-1"],
            expires: None,
        };
        let permit = tmp.path().join("permit.yaml");
        let e = sign_command(&permit, &private, Some(words), Some(3), &mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("-expires"), "{e}");
        assert!(!permit.exists());
        assert!(channel_days("0").is_err());
        assert_eq!(channel_days("30").unwrap(), 30);
    }
}
