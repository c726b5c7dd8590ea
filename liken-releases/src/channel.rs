//! channel.yaml: which release a channel calls latest.
//!
//! Both bundle (publishing) and fetch (mirroring) add releases to a
//! channel directory, and both move `latest` the same way: only forward.
//! Publishing an older serial late (a hotfix for last month's release)
//! must not make the channel announce it as the newest. The rule is the
//! pure [`decide_latest`] (and [`decide_mirror`] for a mirrored upstream
//! document); [`advance_latest`], [`mirror_latest`] and [`renew`] read,
//! decide and write under the channel's lock through one private helper.
//!
//! That helper also owns channel.yaml.sig. A signature is over exact
//! bytes, so every rewrite of channel.yaml either writes the new bytes'
//! signature first or removes one that no longer matches them, and says
//! so in its [`Update`]: a stale signature beside new bytes reads as
//! tampering to every reader that checks it. Keeping that rule here
//! rather than in each command means no writer can forget it.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use liken_api::release::{CHANNEL_FILE, DEFAULT_CHANNEL_VALIDITY_DAYS};
use liken_api::signing::{DetachedSignature, SigningKey, signature_name};
use liken_api::{Channel, DecodeError, Time, Version, decode};

use crate::files;

/// The longest validity `-channel-days` accepts: a channel valid for
/// longer would hide a frozen mirror for longer than anyone waits.
pub const MAX_CHANNEL_VALIDITY_DAYS: u32 = 366;

/// What happens to channel.yaml's latest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Latest {
    /// The channel had no channel.yaml; it now names the new version.
    Started,
    /// The new version is newer; latest moves to it.
    Advanced {
        /// The version latest named before.
        from: Version,
    },
    /// Latest stays, but the document is rewritten with a newer serial
    /// and expiry (a re-signed channel, or a mirror taking one).
    Renewed {
        /// The serial of the document written.
        serial: u64,
    },
    /// Latest already names something at least as new; it stays.
    Kept {
        /// The version latest keeps naming.
        latest: Version,
    },
}

/// Decides latest after adding `new` to a channel whose latest is
/// `current`.
pub fn decide_latest(current: Option<&Version>, new: &Version) -> Latest {
    match current {
        None => Latest::Started,
        Some(c) if new > c => Latest::Advanced { from: c.clone() },
        Some(c) => Latest::Kept { latest: c.clone() },
    }
}

/// Decides whether a mirror whose channel.yaml is `current` takes the
/// upstream's `upstream`: a newer latest, as [`decide_latest`]; the
/// same latest only when the upstream's serial is higher (the publisher
/// renewed it), so a mirror keeps passing on a channel that is kept
/// fresh instead of letting its copy expire.
pub fn decide_mirror(current: Option<&Channel>, upstream: &Channel) -> Latest {
    let verdict = decide_latest(current.map(|c| &c.latest), &upstream.latest);
    match (current, upstream.serial, &verdict) {
        (Some(c), Some(serial), Latest::Kept { latest })
            if latest == &upstream.latest && c.serial.is_none_or(|s| serial > s) =>
        {
            Latest::Renewed { serial }
        }
        _ => verdict,
    }
}

/// Whether a signature file's text (`existing`) no longer signs
/// `bytes`: one that does not even decode is stale too, as nobody can
/// check it.
pub fn decide_stale_signature(existing: &[u8], bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(existing);
    match decode::strict::<DetachedSignature>(&text, CHANNEL_FILE) {
        Ok(sig) => sig.sha256 != liken_api::hash::sha256(bytes),
        Err(_) => true,
    }
}

/// Reads `-channel-days`: how many days a channel.yaml written now
/// stays fresh.
pub fn parse_validity_days(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(n) if (1..=MAX_CHANNEL_VALIDITY_DAYS).contains(&n) => Ok(n),
        _ => Err(format!(
            "-channel-days {text:?} must be a whole number of days from 1 to \
             {MAX_CHANNEL_VALIDITY_DAYS} (default {DEFAULT_CHANNEL_VALIDITY_DAYS}): publish or \
             re-sign before it runs out, or readers take the channel as stopped"
        )),
    }
}

/// Why channel.yaml could not be read or written.
#[derive(Debug)]
pub enum ChannelError {
    /// Reading or writing the file failed.
    Io {
        /// channel.yaml's path.
        path: PathBuf,
        /// What failed.
        error: io::Error,
    },
    /// The file is not a valid Channel document.
    Decode(DecodeError),
    /// [`renew`] was asked to renew a channel.yaml that is not there.
    Missing {
        /// The path.
        path: PathBuf,
    },
}

impl fmt::Display for ChannelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChannelError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            ChannelError::Decode(e) => write!(
                f,
                "{e}\n(channel.yaml names the channel's latest version; fix it or remove it \
                 and it is written again from the release being added)"
            ),
            ChannelError::Missing { path } => write!(
                f,
                "{} is gone; `liken bundle` writes a channel.yaml when it publishes a release",
                path.display()
            ),
        }
    }
}

impl std::error::Error for ChannelError {}

/// The channel document at `channel`'s root, if there is one.
pub fn read(channel: &Path) -> Result<Option<Channel>, ChannelError> {
    read_file(&channel.join(CHANNEL_FILE))
}

/// The channel document at `path`, if there is one.
fn read_file(path: &Path) -> Result<Option<Channel>, ChannelError> {
    match std::fs::read_to_string(path) {
        Ok(text) => decode::strict::<Channel>(&text, &path.display().to_string())
            .map(Some)
            .map_err(ChannelError::Decode),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(ChannelError::Io {
            path: path.to_owned(),
            error,
        }),
    }
}

/// When a channel.yaml written at `now` expires: after
/// [`DEFAULT_CHANNEL_VALIDITY_DAYS`], by which time its publisher has
/// published again or re-signed it.
pub fn default_expiry(now: Time) -> Time {
    expiry(now, DEFAULT_CHANNEL_VALIDITY_DAYS)
}

/// When a channel.yaml written at `now` expires, `days` days on.
pub fn expiry(now: Time, days: u32) -> Time {
    now.plus_seconds(i64::from(days).saturating_mul(86_400))
}

/// What writing channel.yaml did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    /// What happened to latest (a kept latest wrote nothing).
    pub latest: Latest,
    /// A channel.yaml.sig removed because it signed the document just
    /// replaced, and nothing signed the new one.
    pub stale_signature: Option<PathBuf>,
}

impl Update {
    /// Whether channel.yaml was rewritten.
    pub fn wrote(&self) -> bool {
        !matches!(self.latest, Latest::Kept { .. })
    }

    /// The line saying a stale signature was removed, if one was.
    pub fn stale_note(&self) -> Option<String> {
        self.stale_signature.as_ref().map(|p| {
            format!(
                "removed {}: it signed the previous channel.yaml; sign this one with `liken \
                 sign -key release.key {}`",
                p.display(),
                files::parent(p).join(CHANNEL_FILE).display()
            )
        })
    }
}

/// channel.yaml's new bytes and, when there is one, their signature.
struct Replacement {
    bytes: Vec<u8>,
    signature: Option<Vec<u8>>,
}

/// Under the lock of `path`'s directory, reads the channel.yaml at
/// `path`, asks `plan` what to do with it, and when `plan` answers with
/// a replacement writes it: the new signature first, or else removes a
/// signature that does not sign the new bytes, then the document. A
/// reader therefore never finds the new document beside the old one's
/// signature (which would read as tampering); it may find the old one
/// briefly unsigned, which reads as what it is.
fn replace_if_newer(
    path: &Path,
    plan: impl FnOnce(Option<&Channel>) -> Result<(Latest, Option<Replacement>), ChannelError>,
) -> Result<Update, ChannelError> {
    let at = |path: &Path| {
        let path = path.to_path_buf();
        move |error| ChannelError::Io { path, error }
    };
    let dir = files::parent(path);
    let sig_path = PathBuf::from(signature_name(&path.to_string_lossy()));
    let _lock = files::DirLock::acquire(dir).map_err(at(path))?;
    let current = read_file(path)?;
    let (latest, replacement) = plan(current.as_ref())?;
    let mut stale_signature = None;
    if let Some(r) = replacement {
        match &r.signature {
            Some(sig) => files::replace(&sig_path, sig, files::PUBLIC).map_err(at(&sig_path))?,
            None => match std::fs::read(&sig_path) {
                Ok(old) if decide_stale_signature(&old, &r.bytes) => {
                    std::fs::remove_file(&sig_path).map_err(at(&sig_path))?;
                    stale_signature = Some(sig_path.clone());
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(at(&sig_path)(e)),
            },
        }
        files::replace(path, &r.bytes, files::PUBLIC).map_err(at(path))?;
    }
    Ok(Update {
        latest,
        stale_signature,
    })
}

/// `channel` written as YAML, and signed by `key` when there is one.
fn replacement(
    path: &Path,
    channel: &Channel,
    key: Option<&SigningKey>,
) -> Result<Replacement, ChannelError> {
    let yaml = |r: Result<String, _>| {
        r.map_err(|e| ChannelError::Io {
            path: path.to_owned(),
            error: io::Error::other(e),
        })
    };
    let bytes = yaml(decode::to_yaml(channel))?.into_bytes();
    let signature = match key {
        Some(k) => Some(yaml(decode::to_yaml(&k.sign(&bytes)))?.into_bytes()),
        None => None,
    };
    Ok(Replacement { bytes, signature })
}

/// Moves the channel's latest to `new` if it is newer, holding the
/// channel's lock so concurrent publishers cannot lose an update. A
/// document written gets the next serial and `expires`, and is signed by
/// `key` when one is given (a channel whose latest stays is left as it
/// is, signature and all).
pub fn advance_latest(
    channel: &Path,
    new: &Version,
    expires: Time,
    key: Option<&SigningKey>,
) -> Result<Update, ChannelError> {
    let path = channel.join(CHANNEL_FILE);
    replace_if_newer(&path, |current| {
        let verdict = decide_latest(current.map(|c| &c.latest), new);
        if matches!(verdict, Latest::Kept { .. }) {
            return Ok((verdict, None));
        }
        let next = Channel::next(current, new.clone(), expires);
        Ok((verdict, Some(replacement(&path, &next, key)?)))
    })
}

/// Moves the channel's latest to the upstream channel's, as `liken fetch
/// latest` mirrors it: when it is newer ([`decide_mirror`]),
/// channel.yaml becomes the upstream's document byte for byte, with its
/// signature (or without a stale one), so the publisher's signature,
/// serial and expiry reach whoever reads the mirror unchanged.
pub fn mirror_latest(
    channel: &Path,
    upstream: &Channel,
    bytes: &[u8],
    signature: Option<&[u8]>,
) -> Result<Update, ChannelError> {
    replace_if_newer(&channel.join(CHANNEL_FILE), |current| {
        let verdict = decide_mirror(current, upstream);
        let write = !matches!(verdict, Latest::Kept { .. });
        Ok((
            verdict,
            write.then(|| Replacement {
                bytes: bytes.to_vec(),
                signature: signature.map(<[u8]>::to_vec),
            }),
        ))
    })
}

/// A renewed channel document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewal {
    /// The document written.
    pub channel: Channel,
    /// Its signature's path.
    pub signature: PathBuf,
}

/// Re-signs the channel.yaml at `path` as `liken sign` does: the same
/// latest, the next serial, fresh until `expires`, signed by `key`. The
/// document always changes, so a publisher who re-signs before it
/// expires keeps a channel that has nothing new from reading as frozen,
/// and readers that remember the serial see it move forward.
pub fn renew(path: &Path, expires: Time, key: &SigningKey) -> Result<Renewal, ChannelError> {
    let mut written = None;
    replace_if_newer(path, |current| {
        let current = current.ok_or_else(|| ChannelError::Missing {
            path: path.to_owned(),
        })?;
        let next = Channel::next(Some(current), current.latest.clone(), expires);
        let r = replacement(path, &next, Some(key))?;
        let serial = next.serial.unwrap_or_default();
        written = Some(next);
        Ok((Latest::Renewed { serial }, Some(r)))
    })?;
    let channel = written.ok_or_else(|| ChannelError::Missing {
        path: path.to_owned(),
    })?;
    Ok(Renewal {
        channel,
        signature: PathBuf::from(signature_name(&path.to_string_lossy())),
    })
}

impl Latest {
    /// A sentence for the command's output.
    pub fn describe(&self, new: &Version) -> String {
        match self {
            Latest::Started => format!("channel.yaml written: latest is {new}"),
            Latest::Advanced { from } => format!("channel.yaml: latest moved from {from} to {new}"),
            Latest::Renewed { serial } => {
                format!("channel.yaml: latest is still {new}, renewed as serial {serial}")
            }
            Latest::Kept { latest } if latest == new => {
                format!("channel.yaml: latest is already {new}")
            }
            Latest::Kept { latest } => {
                format!("channel.yaml: latest stays {latest}, which is newer than {new}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::signing::{TrustRoot, key_pair};
    use liken_testenv::scratch::TempDir as TestDir;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn signature(dir: &Path) -> Option<DetachedSignature> {
        let text = std::fs::read_to_string(dir.join("channel.yaml.sig")).ok()?;
        Some(decode::strict(&text, "sig").unwrap())
    }

    #[test]
    fn latest_only_moves_forward() {
        let a = v("2026.07.11-001");
        let b = v("2026.07.11-002");
        assert_eq!(decide_latest(None, &a), Latest::Started);
        assert_eq!(
            decide_latest(Some(&a), &b),
            Latest::Advanced { from: a.clone() }
        );
        assert_eq!(
            decide_latest(Some(&b), &a),
            Latest::Kept { latest: b.clone() }
        );
        assert_eq!(
            decide_latest(Some(&a), &a),
            Latest::Kept { latest: a.clone() }
        );
    }

    #[test]
    fn a_mirror_takes_a_renewed_upstream_but_never_an_older_one() {
        let t = Time::from_unix(5);
        let (a, b) = (v("2026.07.11-001"), v("2026.07.11-002"));
        let doc = |latest: &Version, serial: Option<u64>| Channel {
            serial,
            ..Channel::next(None, latest.clone(), t)
        };
        let mine = doc(&a, Some(3));
        // (current, upstream, verdict)
        let table = [
            (None, doc(&a, Some(1)), Latest::Started),
            (
                Some(&mine),
                doc(&b, Some(1)),
                Latest::Advanced { from: a.clone() },
            ),
            (Some(&mine), doc(&a, Some(4)), Latest::Renewed { serial: 4 }),
            (
                Some(&mine),
                doc(&a, Some(3)),
                Latest::Kept { latest: a.clone() },
            ),
            (
                Some(&mine),
                doc(&a, Some(2)),
                Latest::Kept { latest: a.clone() },
            ),
            (
                Some(&mine),
                doc(&a, None),
                Latest::Kept { latest: a.clone() },
            ),
        ];
        for (current, upstream, want) in table {
            assert_eq!(decide_mirror(current, &upstream), want, "{upstream:?}");
        }
        let old = Channel::new(a.clone());
        assert_eq!(
            decide_mirror(Some(&old), &doc(&a, Some(1))),
            Latest::Renewed { serial: 1 }
        );
    }

    #[test]
    fn a_signature_is_stale_unless_it_names_the_new_bytes() {
        let (key, _) = key_pair([7; 32]);
        let sig = decode::to_yaml(&key.sign(b"new")).unwrap();
        assert!(!decide_stale_signature(sig.as_bytes(), b"new"));
        assert!(decide_stale_signature(sig.as_bytes(), b"old"));
        assert!(decide_stale_signature(b"not a signature", b"new"));
    }

    #[test]
    fn validity_days_are_bounded() {
        assert_eq!(parse_validity_days("14"), Ok(14));
        assert_eq!(parse_validity_days("366"), Ok(366));
        for bad in ["0", "367", "-1", "two", ""] {
            let e = parse_validity_days(bad).unwrap_err();
            assert!(e.contains("from 1 to 366"), "{e}");
        }
        let t = Time::from_unix(0);
        assert_eq!(expiry(t, 2), Time::from_unix(2 * 86_400));
        assert_eq!(default_expiry(t), expiry(t, DEFAULT_CHANNEL_VALIDITY_DAYS));
    }

    #[test]
    fn writes_a_strict_channel_document() {
        let dir = TestDir::new("channel");
        let (a, b, c) = (
            v("2026.07.11-001"),
            v("2026.08.01-001"),
            v("2026.08.02-001"),
        );
        let t = Time::from_unix(1_800_000_000);
        let latest = |u: Result<Update, ChannelError>| u.unwrap().latest;
        assert_eq!(
            latest(advance_latest(dir.path(), &b, t, None)),
            Latest::Started
        );
        assert_eq!(
            latest(advance_latest(dir.path(), &a, t.plus_seconds(1), None)),
            Latest::Kept { latest: b.clone() }
        );
        // A kept latest leaves the document (and any signature) alone.
        let doc = read(dir.path()).unwrap().unwrap();
        assert_eq!((doc.latest, doc.serial, doc.expires), (b, Some(1), Some(t)));
        assert_eq!(
            latest(advance_latest(dir.path(), &c, t.plus_seconds(2), None)),
            Latest::Advanced {
                from: v("2026.08.01-001")
            }
        );
        let doc = read(dir.path()).unwrap().unwrap();
        assert_eq!(
            (doc.latest, doc.serial, doc.expires),
            (c, Some(2), Some(t.plus_seconds(2)))
        );
        std::fs::write(
            dir.path().join(CHANNEL_FILE),
            "latest: 2026.07.11-001\nextra: 1\n",
        )
        .unwrap();
        let e = advance_latest(dir.path(), &a, t, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("apiVersion"), "{e}");
    }

    #[test]
    fn advancing_signs_with_a_key_and_otherwise_drops_a_stale_signature() {
        let dir = TestDir::new("channel-advance-sig");
        let (key, public) = key_pair([9; 32]);
        let trust = TrustRoot::new([public]);
        let t = Time::from_unix(1_800_000_000);
        let (a, b, c) = (
            v("2026.07.11-001"),
            v("2026.08.01-001"),
            v("2026.09.01-001"),
        );
        let u = advance_latest(dir.path(), &a, t, Some(&key)).unwrap();
        assert_eq!(u.stale_signature, None);
        let bytes = std::fs::read(dir.path().join(CHANNEL_FILE)).unwrap();
        assert_eq!(
            trust.verify(&bytes, signature(dir.path()).as_ref()),
            Ok(key.id.clone())
        );
        // A kept latest keeps the signature, which still signs the bytes.
        let u = advance_latest(dir.path(), &a, t, None).unwrap();
        assert_eq!((u.wrote(), u.stale_signature), (false, None));
        assert!(signature(dir.path()).is_some());

        // Unsigned and newer: the old signature goes, and the update says so.
        let u = advance_latest(dir.path(), &b, t, None).unwrap();
        let sig_path = dir.path().join("channel.yaml.sig");
        assert_eq!(u.stale_signature.as_deref(), Some(sig_path.as_path()));
        assert!(!sig_path.exists());
        let note = u.stale_note().unwrap();
        assert!(
            note.starts_with(&format!("removed {}", sig_path.display()))
                && note.contains("liken sign -key release.key"),
            "{note}"
        );
        // Nothing to remove the next time.
        let u = advance_latest(dir.path(), &c, t, None).unwrap();
        assert_eq!((u.stale_note(), u.stale_signature), (None, None));
    }

    #[test]
    fn a_mirror_takes_the_upstream_document_and_its_signature_as_they_are() {
        let dir = TestDir::new("channel-mirror");
        let t = Time::from_unix(1_800_000_000);
        let (a, b) = (v("2026.07.11-001"), v("2026.08.01-001"));
        advance_latest(dir.path(), &a, t, None).unwrap();
        std::fs::write(dir.path().join("channel.yaml.sig"), "stale").unwrap();

        let up = Channel::next(None, b.clone(), t);
        let bytes = format!("# published\n{}", decode::to_yaml(&up).unwrap());
        let got = mirror_latest(dir.path(), &up, bytes.as_bytes(), Some(b"sig")).unwrap();
        assert_eq!(got.latest, Latest::Advanced { from: a.clone() });
        // Replaced by the upstream's signature, not removed.
        assert_eq!(got.stale_signature, None);
        let on_disk = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
        assert_eq!(on_disk(CHANNEL_FILE), bytes.as_bytes());
        assert_eq!(on_disk("channel.yaml.sig"), b"sig");

        // An older upstream leaves the mirror alone; a newer unsigned one
        // takes the stale signature away, and says so.
        let old = Channel::next(None, a, t);
        let got = mirror_latest(dir.path(), &old, b"ignored", None).unwrap();
        assert_eq!(got.latest, Latest::Kept { latest: b.clone() });
        assert_eq!(on_disk(CHANNEL_FILE), bytes.as_bytes());
        let c = Channel::next(Some(&up), v("2026.09.01-001"), t);
        let text = decode::to_yaml(&c).unwrap();
        let got = mirror_latest(dir.path(), &c, text.as_bytes(), None).unwrap();
        assert!(got.stale_signature.is_some());
        assert!(!dir.path().join("channel.yaml.sig").exists());
        assert_eq!(read(dir.path()).unwrap().unwrap().serial, Some(2));

        // The publisher renews the same latest: the mirror follows.
        let renewed = Channel::next(Some(&c), c.latest.clone(), t.plus_seconds(9));
        let text = decode::to_yaml(&renewed).unwrap();
        let got = mirror_latest(dir.path(), &renewed, text.as_bytes(), Some(b"s3")).unwrap();
        assert_eq!(got.latest, Latest::Renewed { serial: 3 });
        assert_eq!(on_disk("channel.yaml.sig"), b"s3");
    }

    #[test]
    fn renewing_raises_the_serial_and_signs_the_new_bytes() {
        let dir = TestDir::new("channel-renew");
        let (key, public) = key_pair([3; 32]);
        let trust = TrustRoot::new([public]);
        let path = dir.path().join(CHANNEL_FILE);
        let e = renew(&path, Time::from_unix(1), &key).unwrap_err();
        assert!(matches!(e, ChannelError::Missing { .. }), "{e}");

        // A channel from before serials starts at 1; each renewal is
        // strictly newer, whatever the latest.
        std::fs::write(
            &path,
            "apiVersion: liken.sh/v1alpha1\nkind: Channel\nlatest: 2026.07.11-001\n",
        )
        .unwrap();
        for (serial, expires) in [(1, 100), (2, 200), (3, 150)] {
            let r = renew(&path, Time::from_unix(expires), &key).unwrap();
            assert_eq!(r.channel.serial, Some(serial));
            assert_eq!(r.channel.expires, Some(Time::from_unix(expires)));
            assert_eq!(r.channel.latest.as_str(), "2026.07.11-001");
            assert_eq!(r.signature, dir.path().join("channel.yaml.sig"));
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(
                trust.verify(&bytes, signature(dir.path()).as_ref()),
                Ok(key.id.clone())
            );
            assert_eq!(read(dir.path()).unwrap().unwrap(), r.channel);
        }
    }
}
