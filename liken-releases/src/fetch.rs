//! `liken fetch`: copy one release from a channel into a local channel
//! directory, verifying everything on the way.
//!
//! The chain of trust is the catalog's: `-digest` pins release.yaml's
//! SHA-256 (checked before the document is even parsed), and
//! release.yaml pins every artifact's size and SHA-256. Without `-digest`
//! the release is unpinned, and the report says so before anything is
//! downloaded. Each artifact is hashed while it streams to
//! `.<file>.partial` (a dot-name, which `serve` never shares, opened
//! without following a link planted there), and renamed to its final name
//! only after its size and digest match, so a final name always holds
//! verified bytes. release.yaml itself is written last, byte for
//! byte as downloaded, so its digest locally equals the catalog's and its
//! presence means the whole release is here.
//!
//! Signatures come before any of that ([`Signatures`]). With a trust
//! root (`-key release.pub` or `-trust trust.yaml`), release.yaml must
//! carry a detached signature by one of its keys over its exact bytes,
//! and for `latest` so must channel.yaml, which must also not be past its
//! expiry (a frozen channel's latest is not the latest). Every check runs
//! on the documents alone, before an artifact is requested or anything is
//! written into the channel directory, so a refused release leaves no
//! trace. Without a trust root the caller must say so
//! ([`Signatures::Unchecked`]); the CLI then prints [`UNSIGNED_WARNING`].
//!
//! Failures divide in two. An interrupted transfer (a reset, a timeout,
//! a server that closes early) keeps the `.partial`: running the command
//! again hashes the prefix already on disk and asks only for the rest
//! with `Range: bytes=<n>-`. A verification failure (wrong digest, more
//! bytes than promised) deletes the `.partial`, because those bytes are
//! known bad and must not seed a resume.
//!
//! Names and URLs from the channel pass through [`crate::terminal`]
//! before they are printed, in the report and in every error.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use liken_api::release::{Artifact, CHANNEL_FILE, RELEASE_FILE, Release};
use liken_api::signing::{FileError, KeyId, TrustRoot, VerifyError, signature_name};
use liken_api::{Channel, DecodeError, Digest, Sha256Hex, Time, Version, decode};
use sha2::Sha256;

use crate::channel::{self, ChannelError};
use crate::client::{self, ClientError};
use crate::files;
use crate::layout;
use crate::progress::{Observer, Progress, Style};
use crate::size::human;
use crate::stream::{self, CopyError};
use crate::terminal::{escape, escape_text};

/// Which release to fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// Whatever the channel's channel.yaml names.
    Latest,
    /// This version.
    Version(Version),
}

impl Wanted {
    /// Reads `latest` or a version.
    pub fn parse(text: &str) -> Result<Wanted, FetchError> {
        if text == "latest" {
            return Ok(Wanted::Latest);
        }
        Version::parse(text)
            .map(Wanted::Version)
            .map_err(|e| FetchError::Usage(format!("{e}, or \"latest\"")))
    }
}

/// Whose signatures fetch accepts.
#[derive(Clone, Debug)]
pub enum Signatures {
    /// Only documents a key of this trust root signed: release.yaml, and
    /// for `latest` channel.yaml too.
    Verify(TrustRoot),
    /// No check: `liken fetch -unsigned`, and the machine operator of a
    /// deployment with no trust root, whose init decides what it writes.
    /// A signature the channel publishes is still kept beside its
    /// document.
    Unchecked,
}

/// What `liken fetch -unsigned` prints first, every time.
pub const UNSIGNED_WARNING: &str = "WARNING: fetching without checking signatures (-unsigned): \
whatever the source serves is taken as published, so whoever controls the source or the network \
path to it chooses what lands in the channel directory (only -digest still pins release.yaml); \
give -key <release.pub> or -trust <trust.yaml> to take only what a trusted key signed";

/// What `fetch` was asked to do, already parsed.
#[derive(Clone, Debug)]
pub struct FetchRequest {
    /// The channel's base URL.
    pub source: String,
    /// The release.
    pub wanted: Wanted,
    /// The catalog digest release.yaml must have, if pinned.
    pub digest: Option<Digest>,
    /// The local channel directory.
    pub channel: PathBuf,
    /// A PEM file of the CA certificates an https source is checked
    /// against, in place of the built-in roots.
    pub ca: Option<PathBuf>,
    /// How to show progress.
    pub progress: Style,
    /// Told the bytes of the whole release as they arrive.
    pub observer: Option<Observer>,
    /// Whose signatures are accepted.
    pub signatures: Signatures,
}

/// Why fetch failed.
#[derive(Debug)]
pub enum FetchError {
    /// An argument is wrong.
    Usage(String),
    /// A request failed.
    Client(ClientError),
    /// channel.yaml or release.yaml is not a valid document.
    Document(DecodeError),
    /// release.yaml's digest is not the pinned one.
    DocumentDigest {
        /// The URL.
        url: String,
        /// The pin.
        want: Digest,
        /// What arrived.
        got: Digest,
    },
    /// A document's signature does not pass the trust root.
    Signature {
        /// The document's URL.
        url: String,
        /// Why.
        error: VerifyError,
    },
    /// A document's signature file is not a signature.
    UnreadableSignature {
        /// The signature's URL.
        url: String,
        /// What the decoder said.
        error: DecodeError,
    },
    /// A signed channel.yaml is past its expiry, or names none.
    ChannelStale {
        /// channel.yaml's URL.
        url: String,
        /// Its expiry, if it has one.
        expired: Option<Time>,
    },
    /// release.yaml describes another version than its URL.
    WrongVersion {
        /// The URL.
        url: String,
        /// What the document says.
        found: Version,
    },
    /// release.yaml's artifacts would collide on disk or leave the
    /// release directory.
    Unsafe(String),
    /// The local channel already holds a different release.yaml for this
    /// version.
    LocalDiffers {
        /// The local document.
        path: PathBuf,
    },
    /// A file already under an artifact's final name does not match.
    LocalMismatch {
        /// The file.
        path: PathBuf,
    },
    /// An artifact's bytes do not match release.yaml.
    ArtifactDigest {
        /// The artifact's URL.
        url: String,
        /// release.yaml's digest.
        want: Sha256Hex,
        /// The digest of what arrived.
        got: Sha256Hex,
    },
    /// The server sent more bytes than release.yaml lists.
    TooLong {
        /// The URL.
        url: String,
        /// release.yaml's size.
        size: u64,
    },
    /// The transfer stopped early; the partial file is kept.
    Interrupted {
        /// The URL.
        url: String,
        /// Bytes now on disk.
        have: u64,
        /// Bytes the artifact has.
        size: u64,
        /// Why it stopped, when known.
        reason: String,
    },
    /// The server's answer to a Range request makes no sense.
    BadRange {
        /// The URL.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// Local file I/O failed.
    Io {
        /// What was being done.
        doing: String,
        /// The error.
        error: io::Error,
    },
    /// channel.yaml could not be updated (the release itself is in place).
    Channel(ChannelError),
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names, URLs and decoder messages may carry a channel's text.
        let text = self.message();
        f.write_str(&escape_text(&text))
    }
}

impl FetchError {
    /// The message, before escaping.
    fn message(&self) -> String {
        use fmt::Write;
        let mut out = String::new();
        let f = &mut out;
        let _ = match self {
            FetchError::Usage(m) => write!(f, "{m}"),
            FetchError::Client(e) => write!(f, "{e}"),
            FetchError::Document(e) => write!(f, "{e}"),
            FetchError::DocumentDigest { url, want, got } => write!(
                f,
                "{url} has digest {got}, but -digest pins {want}: this is not the release the \
                 catalog trusts; nothing was written (check the catalog entry and the source)"
            ),
            FetchError::Signature { url, error } => {
                write!(f, "{url} is refused: {error}; nothing was written")
            }
            FetchError::UnreadableSignature { url, error } => write!(
                f,
                "{url} is not a signature ({error}); nothing was written: the channel's copy is \
                 damaged, ask its publisher to sign again"
            ),
            FetchError::ChannelStale { url, expired } => {
                let when = match expired {
                    Some(t) => format!("expired at {t}"),
                    None => "names no expiry".to_owned(),
                };
                write!(
                    f,
                    "{url} {when}: the channel may have stopped moving (a frozen mirror, or a publisher who \
                     has not published or re-signed since), so its latest may not be the latest; \
                     nothing was written. Fetch a version by name to take it anyway, or ask the \
                     publisher to re-sign channel.yaml (`liken sign`)"
                )
            }
            FetchError::WrongVersion { url, found } => write!(
                f,
                "{url} describes release {found}, not the version in its URL; the channel is \
                 inconsistent, so nothing was written"
            ),
            FetchError::Unsafe(m) => write!(f, "{m}; nothing was written"),
            FetchError::LocalDiffers { path } => write!(
                f,
                "{} already holds a different release.yaml for this version; versions are \
                 immutable, so one of the two channels is wrong: move the local release aside \
                 and fetch again",
                path.display()
            ),
            FetchError::LocalMismatch { path } => write!(
                f,
                "{} exists but does not match release.yaml (corrupt, or from another release); \
                 remove it and fetch again",
                path.display()
            ),
            FetchError::ArtifactDigest { url, want, got } => write!(
                f,
                "{url} has sha256 {got}, but release.yaml says {want}: the download is corrupt \
                 or was tampered with, and was deleted; fetch again, and if it repeats the \
                 channel's copy is damaged"
            ),
            FetchError::TooLong { url, size } => write!(
                f,
                "{url} is longer than the {size} bytes release.yaml lists; the download was \
                 deleted (the channel's copy does not match its release.yaml)"
            ),
            FetchError::Interrupted {
                url,
                have,
                size,
                reason,
            } => write!(
                f,
                "the download of {url} stopped after {have} of {size} bytes ({reason}); the \
                 partial file is kept, so running the same command again resumes it"
            ),
            FetchError::BadRange { url, reason } => write!(
                f,
                "GET {url}: the server's answer to a resume does not fit: {reason}; remove the \
                 .partial file to start over"
            ),
            FetchError::Io { doing, error } => write!(f, "{doing}: {error}"),
            FetchError::Channel(e) => write!(
                f,
                "the release is in place, but channel.yaml was not updated: {e}"
            ),
        };
        out
    }
}

impl std::error::Error for FetchError {}

impl From<ClientError> for FetchError {
    fn from(e: ClientError) -> FetchError {
        FetchError::Client(e)
    }
}

/// Checks that no two artifacts meet on disk, counting the
/// `.<file>.partial` name each one downloads under.
pub fn check_names(release: &Release) -> Result<(), FetchError> {
    for a in &release.artifacts {
        let partial = layout::partial_name(a.file.as_str());
        if let Some(b) = release
            .artifacts
            .iter()
            .find(|b| b.file.as_str() == partial)
        {
            return Err(FetchError::Unsafe(format!(
                "release.yaml lists {} and {}, which collide with the download's temporary name",
                a.file, b.file
            )));
        }
        if layout::artifact_path(Path::new("/r"), &a.file).is_none() {
            return Err(FetchError::Unsafe(format!(
                "artifact file {:?} would leave the release directory",
                a.file.as_str()
            )));
        }
    }
    Ok(())
}

/// What to do with the answer to an artifact request, given that `have`
/// bytes are on disk and the artifact has `size`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Append the body to what is on disk.
    Append,
    /// The body is the whole file: drop what is on disk first.
    Restart,
    /// The server has less than the partial file: start over without a
    /// Range.
    Retry,
    /// Give up.
    Fail(String),
}

/// Decides how to use a response of `status` with `content_range`.
pub fn decide_answer(status: u16, content_range: Option<&str>, have: u64, size: u64) -> Answer {
    match status {
        200 if have == 0 => Answer::Append,
        200 => Answer::Restart,
        206 => {
            let Some(cr) = content_range else {
                return Answer::Fail("206 without Content-Range".into());
            };
            match parse_content_range(cr) {
                Some((start, end, total))
                    if start == have && end + 1 == size && total.is_none_or(|t| t == size) =>
                {
                    Answer::Append
                }
                Some((_, _, Some(total))) if total != size => Answer::Fail(format!(
                    "the server's file has {total} bytes, release.yaml lists {size}"
                )),
                _ => Answer::Fail(format!(
                    "Content-Range {cr:?} is not bytes {have}-{}/{size}",
                    size - 1
                )),
            }
        }
        416 if have > 0 => Answer::Retry,
        other => Answer::Fail(format!("the server answered {other}")),
    }
}

/// Parses `bytes a-b/total` (total may be `*`).
pub fn parse_content_range(text: &str) -> Option<(u64, u64, Option<u64>)> {
    let rest = text.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    (a <= b).then_some((a, b, total))
}

/// Asks the channel at `source` (an http(s) base URL, as
/// [`client::normalize_source`] answers it) which release its
/// channel.yaml calls latest. `liken fetch latest` and the cluster
/// operator's channel poller both ask through here.
pub fn latest(agent: &ureq::Agent, source: &str) -> Result<Version, FetchError> {
    Ok(channel_document(agent, source)?.0.latest)
}

/// channel.yaml as a channel serves it.
#[derive(Clone, Debug)]
pub struct ChannelDocument {
    /// The document, decoded.
    pub channel: Channel,
    /// Its exact bytes, as signed.
    pub bytes: Vec<u8>,
    /// channel.yaml.sig's bytes, when the channel publishes one.
    pub signature: Option<Vec<u8>>,
}

/// The channel's channel.yaml and its signature, as served. The caller
/// judges the signature and the document's freshness (the cluster
/// operator against the deployment's trust root).
pub fn latest_document(agent: &ureq::Agent, source: &str) -> Result<ChannelDocument, FetchError> {
    let (channel, bytes) = channel_document(agent, source)?;
    let url = format!("{source}/{}", liken_api::release::CHANNEL_FILE);
    let signature = signature_of(agent, &url)?;
    Ok(ChannelDocument {
        channel,
        bytes,
        signature,
    })
}

/// The channel's channel.yaml, decoded, with its exact bytes.
fn channel_document(agent: &ureq::Agent, source: &str) -> Result<(Channel, Vec<u8>), FetchError> {
    let url = format!("{source}/{}", liken_api::release::CHANNEL_FILE);
    let bytes = client::get_document(agent, &url)?;
    let text = String::from_utf8_lossy(&bytes);
    let channel: Channel = decode::strict(&text, &url).map_err(FetchError::Document)?;
    Ok((channel, bytes))
}

/// A detached signature at `url` + `.sig`, if the channel publishes one
/// (a channel without one answers 404).
fn signature_of(agent: &ureq::Agent, url: &str) -> Result<Option<Vec<u8>>, FetchError> {
    match client::get_document(agent, &format!("{url}.sig")) {
        Ok(b) => Ok(Some(b)),
        Err(client::ClientError::Status { status: 404, .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Decides whether the document at `url` (its `bytes`, and the bytes of
/// `url.sig` when the channel publishes one) may be taken: under
/// [`Signatures::Verify`], only when a trusted key signed exactly these
/// bytes, answering that key's id; unchecked, always, answering none.
pub fn decide_signature(
    signatures: &Signatures,
    url: &str,
    bytes: &[u8],
    signature: Option<&[u8]>,
) -> Result<Option<KeyId>, FetchError> {
    let Signatures::Verify(trust) = signatures else {
        return Ok(None);
    };
    let sig_url = signature_name(url);
    match trust.verify_file(bytes, signature, &sig_url) {
        Ok(key) => Ok(Some(key)),
        Err(FileError::Unreadable(error)) => Err(FetchError::UnreadableSignature {
            url: sig_url,
            error,
        }),
        Err(FileError::Verify(error)) => Err(FetchError::Signature {
            url: url.to_owned(),
            error,
        }),
    }
}

/// Decides whether a verified channel.yaml is current enough for its
/// latest to be taken as the latest: not past its expiry. (Whether its
/// serial went backwards needs a memory of serials seen, which the
/// cluster operator keeps and a one-off fetch has not; a mirror's
/// channel.yaml still never moves back, [`channel::decide_mirror`].)
pub fn decide_channel_fresh(channel: &Channel, url: &str, now: Time) -> Result<(), FetchError> {
    liken_api::release::decide_channel_freshness(channel, None, now).map_err(|refusal| {
        let expired = match refusal {
            liken_api::release::ChannelRefusal::Stale { expired } => expired,
            liken_api::release::ChannelRefusal::Replayed { .. } => channel.expires,
        };
        FetchError::ChannelStale {
            url: url.to_owned(),
            expired,
        }
    })
}

/// Runs `liken fetch`.
pub fn run(req: &FetchRequest, out: &mut dyn Write) -> Result<(), FetchError> {
    let source = client::normalize_source(&req.source).ok_or_else(|| {
        FetchError::Usage(format!(
            "source {:?} must be the http:// or https:// URL of a channel",
            req.source
        ))
    })?;
    let agent = match &req.ca {
        None => client::agent(),
        Some(path) => {
            let ca = |why: String| FetchError::Usage(format!("-ca {}: {why}", path.display()));
            let pem = std::fs::read(path).map_err(|e| ca(format!("cannot be read: {e}")))?;
            client::agent_with_ca(&pem).map_err(ca)?
        }
    };
    let w = |error| FetchError::Io {
        doing: "writing output".into(),
        error,
    };
    let mut notes = Vec::new();
    if matches!(req.signatures, Signatures::Unchecked) {
        writeln!(out, "{UNSIGNED_WARNING}").map_err(w)?;
    }
    // `latest` mirrors the upstream's channel.yaml (and its signature)
    // as published; a named version moves the mirror's own. Either way
    // every document is checked here, before anything is written.
    let (version, upstream) = match &req.wanted {
        Wanted::Version(v) => (v.clone(), None),
        Wanted::Latest => {
            let (channel, bytes) = channel_document(&agent, source)?;
            let url = format!("{source}/{CHANNEL_FILE}");
            let signature = signature_of(&agent, &url)?;
            if let Some(key) =
                decide_signature(&req.signatures, &url, &bytes, signature.as_deref())?
            {
                decide_channel_fresh(&channel, &url, Time::from_system(SystemTime::now()))?;
                notes.push(format!(
                    "{CHANNEL_FILE} is signed by trusted key {key}: serial {}, current until {}",
                    channel
                        .serial
                        .map_or_else(|| "none".to_owned(), |s| s.to_string()),
                    channel
                        .expires
                        .map_or_else(|| "never".to_owned(), |t| t.to_string()),
                ));
            }
            (channel.latest.clone(), Some((channel, bytes, signature)))
        }
    };
    let url = format!("{source}/{version}/{RELEASE_FILE}");
    let bytes = client::get_document(&agent, &url)?;
    let digest = Digest::from(stream::sha256(&bytes));
    if let Some(want) = &req.digest
        && want != &digest
    {
        return Err(FetchError::DocumentDigest {
            url,
            want: want.clone(),
            got: digest,
        });
    }
    let text = String::from_utf8(bytes.clone()).map_err(|_| {
        FetchError::Document(DecodeError::Syntax {
            origin: url.clone(),
            message: "the document is not UTF-8 text".into(),
        })
    })?;
    let release: Release = decode::strict(&text, &url).map_err(FetchError::Document)?;
    if release.version != version {
        return Err(FetchError::WrongVersion {
            url,
            found: release.version,
        });
    }
    check_names(&release)?;
    // The detached signature, when the channel publishes one: checked
    // here against the trust root when there is one, and kept beside
    // release.yaml either way so the machine operator can hand it to
    // init, which checks it against its own. A channel without one
    // answers 404.
    let signature = signature_of(&agent, &url)?;
    if let Some(key) = decide_signature(&req.signatures, &url, &bytes, signature.as_deref())? {
        notes.push(format!("{RELEASE_FILE} is signed by trusted key {key}"));
    }

    let dir = layout::release_dir(&req.channel, &version);
    let local_doc = dir.join(RELEASE_FILE);
    match fs::read(&local_doc) {
        Ok(local) if local != bytes => return Err(FetchError::LocalDiffers { path: local_doc }),
        _ => {}
    }
    fs::create_dir_all(&dir).map_err(|error| FetchError::Io {
        doing: format!("creating {}", dir.display()),
        error,
    })?;
    for note in &notes {
        writeln!(out, "{note}").map_err(w)?;
    }
    if req.digest.is_none() {
        writeln!(out, "{}", unpinned_note(&digest)).map_err(w)?;
    }
    writeln!(
        out,
        "fetching {version} from {}: {} artifacts, {}",
        escape(source),
        release.artifacts.len(),
        human(release.total_size())
    )
    .map_err(w)?;
    let total = release.total_size();
    let mut before = 0u64;
    for a in &release.artifacts {
        let url = format!(
            "{source}/{version}/{}",
            layout::url_segment(a.file.as_str())
        );
        let observe = (req.observer.as_ref(), before, total);
        let how = fetch_artifact(&agent, &url, &dir, a, req.progress, observe)?;
        before = before.saturating_add(a.size);
        writeln!(out, "{} {}: {how}", a.name, escape(a.file.as_str())).map_err(w)?;
    }
    if let Some(sig) = &signature {
        let path = dir.join(signature_name(RELEASE_FILE));
        files::replace(&path, sig, files::PUBLIC).map_err(|error| FetchError::Io {
            doing: format!("writing {}", path.display()),
            error,
        })?;
    }
    files::replace(&local_doc, &bytes, files::PUBLIC).map_err(|error| FetchError::Io {
        doing: format!("writing {}", local_doc.display()),
        error,
    })?;
    files::sync_dir(&req.channel).map_err(|error| FetchError::Io {
        doing: format!("syncing {}", req.channel.display()),
        error,
    })?;
    let update = match &upstream {
        Some((channel, bytes, signature)) => {
            channel::mirror_latest(&req.channel, channel, bytes, signature.as_deref())
        }
        // A version fetched by name: the mirror's channel.yaml is its own,
        // fresh for the default time from this fetch, and no publisher's
        // signature covers it (a mirrored one is removed, and said so).
        None => channel::advance_latest(
            &req.channel,
            &version,
            channel::default_expiry(Time::from_system(SystemTime::now())),
            None,
        ),
    }
    .map_err(FetchError::Channel)?;
    writeln!(out, "fetched {version} into {}", dir.display()).map_err(w)?;
    writeln!(out, "{}", update.latest.describe(&version)).map_err(w)?;
    if let Some(note) = update.stale_note() {
        writeln!(out, "{note}").map_err(w)?;
    }
    writeln!(
        out,
        "catalog entry:\n  - version: {version}\n    digest: {digest}{}",
        if req.digest.is_some() {
            "  (matches -digest)"
        } else {
            "  (unpinned: compare it with a catalog you trust)"
        }
    )
    .map_err(w)?;
    Ok(())
}

/// What fetch says when no `-digest` pins release.yaml.
pub fn unpinned_note(digest: &Digest) -> String {
    format!(
        "warning: this release is unpinned: without -digest, fetch trusts whatever the source \
         serves as release.yaml (here {digest}); pass the catalog's digest with -digest to \
         refuse any other"
    )
}

/// Opens (or creates) a download in progress for reading and appending:
/// without following a symbolic link someone left under its name, and
/// only if it is a regular file.
fn open_partial(partial: &Path) -> Result<File, FetchError> {
    use std::os::unix::fs::OpenOptionsExt;
    let doing = || format!("opening {}", partial.display());
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        // O_NONBLOCK: a FIFO planted here must not hang the open.
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(partial)
        .map_err(|error| FetchError::Io {
            doing: doing(),
            error,
        })?;
    let meta = file.metadata().map_err(|error| FetchError::Io {
        doing: doing(),
        error,
    })?;
    if !meta.is_file() {
        return Err(FetchError::Io {
            doing: doing(),
            error: io::Error::other("it is not a regular file; remove it and fetch again"),
        });
    }
    // O_NONBLOCK changes nothing for a regular file, so it can stay.
    Ok(file)
}

/// Downloads (or resumes, or re-verifies) one artifact; returns how.
fn fetch_artifact(
    agent: &ureq::Agent,
    url: &str,
    dir: &Path,
    a: &Artifact,
    style: Style,
    observe: (Option<&Observer>, u64, u64),
) -> Result<String, FetchError> {
    let (observer, offset, total) = observe;
    let io = |doing: String| move |error| FetchError::Io { doing, error };
    let final_path = layout::artifact_path(dir, &a.file).ok_or_else(|| {
        FetchError::Unsafe(format!(
            "artifact file {:?} would leave the release directory",
            a.file.as_str()
        ))
    })?;
    if fs::symlink_metadata(&final_path).is_ok() {
        let mut h = Sha256::default();
        let mut f =
            File::open(&final_path).map_err(io(format!("opening {}", final_path.display())))?;
        let n = stream::hash_all(&mut f, &mut h)
            .map_err(io(format!("reading {}", final_path.display())))?;
        if n == a.size && stream::finish(h) == a.sha256 {
            return Ok("already present, verified".into());
        }
        return Err(FetchError::LocalMismatch { path: final_path });
    }
    let partial = layout::partial_path(&final_path);
    let mut file = open_partial(&partial)?;
    let mut have = file
        .metadata()
        .map_err(io(format!("reading {}", partial.display())))?
        .len();
    let mut hasher = Sha256::default();
    if have > a.size {
        file.set_len(0)
            .map_err(io(format!("truncating {}", partial.display())))?;
        have = 0;
    }
    let resumed_from = have;
    if have > 0 {
        // The prefix is trusted only as far as the final digest: it is
        // hashed here so one pass over the network completes the hash.
        file.seek(SeekFrom::Start(0))
            .map_err(io(format!("reading {}", partial.display())))?;
        let n = stream::hash_all(&mut io::Read::take(&file, have), &mut hasher)
            .map_err(io(format!("reading {}", partial.display())))?;
        have = n;
    }
    let label = escape(a.file.as_str()).into_owned();
    let mut progress =
        Progress::new(style, label.clone(), a.size, have).observed(observer, offset, total);
    let mut attempts = 0;
    while have < a.size {
        attempts += 1;
        let range = if have > 0 {
            vec![("Range", format!("bytes={have}-"))]
        } else {
            Vec::new()
        };
        let (resp, _) = client::get(agent, url, &range).map_err(|e| {
            progress.abandon();
            match e {
                ClientError::Transport { error, .. } => FetchError::Interrupted {
                    url: url.to_owned(),
                    have,
                    size: a.size,
                    reason: error.to_string(),
                },
                other => FetchError::Client(other),
            }
        })?;
        let status = resp.status().as_u16();
        let content_range = resp
            .headers()
            .get("content-range")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match decide_answer(status, content_range.as_deref(), have, a.size) {
            Answer::Append => {}
            Answer::Restart => {
                file.set_len(0)
                    .map_err(io(format!("truncating {}", partial.display())))?;
                hasher = Sha256::default();
                have = 0;
                progress = Progress::new(style, label.clone(), a.size, 0)
                    .observed(observer, offset, total);
            }
            Answer::Retry if attempts == 1 => {
                file.set_len(0)
                    .map_err(io(format!("truncating {}", partial.display())))?;
                hasher = Sha256::default();
                have = 0;
                progress = Progress::new(style, label.clone(), a.size, 0)
                    .observed(observer, offset, total);
                continue;
            }
            // Not an answer to a resume at all: say what the server said.
            Answer::Retry | Answer::Fail(_) if status == 404 || (have == 0 && status != 206) => {
                progress.abandon();
                let _ = fs::remove_file(&partial);
                return Err(FetchError::Client(ClientError::Status {
                    url: url.to_owned(),
                    status,
                }));
            }
            Answer::Retry | Answer::Fail(_) => {
                progress.abandon();
                let reason = match decide_answer(status, content_range.as_deref(), have, a.size) {
                    Answer::Fail(r) => r,
                    _ => format!("the server answered {status} twice"),
                };
                return Err(FetchError::BadRange {
                    url: url.to_owned(),
                    reason,
                });
            }
        }
        file.seek(SeekFrom::Start(have))
            .map_err(io(format!("writing {}", partial.display())))?;
        let mut body = resp.into_body().into_reader();
        let flusher =
            stream::Flusher::new(&file).map_err(io(format!("writing {}", partial.display())))?;
        let copied = stream::copy_hashing(
            &mut body,
            &mut file,
            &mut hasher,
            a.size - have,
            &mut progress,
            Some(&flusher),
        );
        drop(flusher);
        match copied {
            Ok(n) => have += n,
            Err(CopyError::Read(e)) => {
                progress.abandon();
                return Err(FetchError::Interrupted {
                    url: url.to_owned(),
                    have: file.stream_position().unwrap_or(have),
                    size: a.size,
                    reason: e.to_string(),
                });
            }
            Err(CopyError::Write(e)) => {
                progress.abandon();
                return Err(io(format!("writing {}", partial.display()))(e));
            }
            Err(CopyError::TooLong { .. }) => {
                progress.abandon();
                drop(file);
                let _ = fs::remove_file(&partial);
                return Err(FetchError::TooLong {
                    url: url.to_owned(),
                    size: a.size,
                });
            }
        }
        if have < a.size {
            progress.abandon();
            return Err(FetchError::Interrupted {
                url: url.to_owned(),
                have,
                size: a.size,
                reason: "the server closed the response early".into(),
            });
        }
    }
    let got = stream::finish(hasher);
    if got != a.sha256 {
        progress.abandon();
        drop(file);
        let _ = fs::remove_file(&partial);
        return Err(FetchError::ArtifactDigest {
            url: url.to_owned(),
            want: a.sha256.clone(),
            got,
        });
    }
    file.sync_all()
        .map_err(io(format!("syncing {}", partial.display())))?;
    drop(file);
    fs::rename(&partial, &final_path).map_err(io(format!("renaming {}", partial.display())))?;
    files::sync_dir(dir).map_err(io(format!("syncing {}", dir.display())))?;
    progress.finish("verified");
    Ok(if resumed_from > 0 {
        format!(
            "{}, resumed after {}, verified",
            human(a.size),
            human(resumed_from)
        )
    } else {
        format!("{}, verified", human(a.size))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wanted_is_latest_or_a_version() {
        assert_eq!(Wanted::parse("latest").unwrap(), Wanted::Latest);
        assert!(matches!(
            Wanted::parse("2026.07.11-001").unwrap(),
            Wanted::Version(_)
        ));
        let e = Wanted::parse("newest").unwrap_err().to_string();
        assert!(e.contains("or \"latest\""), "{e}");
    }

    #[test]
    fn a_document_is_taken_only_when_a_trusted_key_signed_its_bytes() {
        use liken_api::signing::key_pair;
        let (a, a_pub) = key_pair([1; 32]);
        let (b, _) = key_pair([2; 32]);
        let verify = Signatures::Verify(TrustRoot::new([a_pub]));
        let url = "http://h/2026.07.11-001/release.yaml";
        let bytes = b"kind: Release\n";
        let sig = |k: &liken_api::signing::SigningKey, b: &[u8]| {
            decode::to_yaml(&k.sign(b)).unwrap().into_bytes()
        };
        assert_eq!(
            decide_signature(&verify, url, bytes, Some(&sig(&a, bytes))).unwrap(),
            Some(a.id.clone())
        );
        // Unchecked takes anything, a signature or not, and names no key.
        for s in [None, Some(&b"junk"[..])] {
            assert_eq!(
                decide_signature(&Signatures::Unchecked, url, bytes, s).unwrap(),
                None
            );
        }
        // (signature, reason): each refusal names the URL and VerifyError's reason.
        let refused = [
            (None, "unsigned"),
            (Some(sig(&b, bytes)), "unknown-key"),
            (Some(sig(&a, b"kind: Other\n")), "changed"),
        ];
        for (s, reason) in refused {
            let e = decide_signature(&verify, url, bytes, s.as_deref()).unwrap_err();
            match &e {
                FetchError::Signature { error, .. } => assert_eq!(error.reason(), reason),
                other => panic!("{other}"),
            }
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("{url} is refused: "))
                    && text.ends_with("nothing was written"),
                "{text}"
            );
        }
        let e = decide_signature(&verify, url, bytes, Some(b"hello: 1\n")).unwrap_err();
        assert!(
            matches!(&e, FetchError::UnreadableSignature { url: u, .. } if u.ends_with("release.yaml.sig")),
            "{e}"
        );
    }

    #[test]
    fn a_verified_channel_must_be_current() {
        let v = Version::parse("2026.07.11-001").unwrap();
        let now = Time::from_unix(1_000);
        let url = "http://h/channel.yaml";
        let fresh = Channel::next(None, v.clone(), Time::from_unix(1_001));
        decide_channel_fresh(&fresh, url, now).unwrap();
        let e = decide_channel_fresh(&Channel::next(None, v.clone(), now), url, now).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("{url} expired at {now}"))
                && text.contains("Fetch a version by name"),
            "{text}"
        );
        let e = decide_channel_fresh(&Channel::new(v), url, now).unwrap_err();
        assert!(e.to_string().contains("names no expiry"), "{e}");
    }

    #[test]
    fn answers_to_resumes() {
        use Answer::*;
        assert_eq!(decide_answer(200, None, 0, 10), Append);
        assert_eq!(decide_answer(200, None, 4, 10), Restart);
        assert_eq!(decide_answer(206, Some("bytes 4-9/10"), 4, 10), Append);
        assert_eq!(decide_answer(206, Some("bytes 4-9/*"), 4, 10), Append);
        assert!(matches!(
            decide_answer(206, Some("bytes 0-9/10"), 4, 10),
            Fail(_)
        ));
        assert!(
            matches!(decide_answer(206, Some("bytes 4-19/20"), 4, 10), Fail(m) if m.contains("20 bytes"))
        );
        assert!(matches!(decide_answer(206, None, 4, 10), Fail(_)));
        assert_eq!(decide_answer(416, Some("bytes */3"), 4, 10), Retry);
        assert!(matches!(decide_answer(404, None, 0, 10), Fail(_)));
        assert_eq!(parse_content_range("bytes 0-0/1"), Some((0, 0, Some(1))));
        assert_eq!(parse_content_range("bytes 5-4/9"), None);
        assert_eq!(parse_content_range("items 0-1/2"), None);
    }

    #[test]
    fn names_may_not_collide_with_partials() {
        let art = |name: &str, file: &str| Artifact {
            name: name.into(),
            file: liken_api::FileName::parse(file).unwrap(),
            sha256: Sha256Hex::parse(&"0".repeat(64)).unwrap(),
            size: 1,
        };
        let v = Version::parse("2026.07.11-001").unwrap();
        let ok = Release::new(v.clone(), vec![art("a", "x"), art("b", "y")], vec![]);
        check_names(&ok).unwrap();
        // An older fetch's `x.partial` is just another name now.
        let old = Release::new(
            v.clone(),
            vec![art("a", "x"), art("b", "x.partial")],
            vec![],
        );
        check_names(&old).unwrap();
        let bad = Release::new(v, vec![art("a", "x"), art("b", ".x.partial")], vec![]);
        assert!(
            check_names(&bad)
                .unwrap_err()
                .to_string()
                .contains("collide")
        );
    }
}
