//! channel.yaml: which release a channel calls latest.
//!
//! Both bundle (publishing) and fetch (mirroring) add releases to a
//! channel directory, and both move `latest` the same way: only forward.
//! Publishing an older serial late (a hotfix for last month's release)
//! must not make the channel announce it as the newest. The rule is the
//! pure [`decide_latest`]; [`advance_latest`] reads, decides and writes
//! atomically under the channel's lock.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use liken_api::release::{CHANNEL_FILE, DEFAULT_CHANNEL_VALIDITY_DAYS};
use liken_api::signing::signature_name;
use liken_api::{Channel, DecodeError, Time, Version, decode};

use crate::files;

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
        }
    }
}

impl std::error::Error for ChannelError {}

/// The channel document at `channel`'s root, if there is one.
pub fn read(channel: &Path) -> Result<Option<Channel>, ChannelError> {
    let path = channel.join(CHANNEL_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => decode::strict::<Channel>(&text, &path.display().to_string())
            .map(Some)
            .map_err(ChannelError::Decode),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(ChannelError::Io { path, error }),
    }
}

/// When a channel.yaml written at `now` expires: after
/// [`DEFAULT_CHANNEL_VALIDITY_DAYS`], by which time its publisher has
/// published again or re-signed it.
pub fn default_expiry(now: Time) -> Time {
    now.plus_seconds(i64::from(DEFAULT_CHANNEL_VALIDITY_DAYS) * 86_400)
}

/// Moves the channel's latest to `new` if it is newer, holding the
/// channel's lock so concurrent publishers cannot lose an update. A
/// document written gets the next serial and `expires` (a channel whose
/// latest stays is left as it is).
pub fn advance_latest(
    channel: &Path,
    new: &Version,
    expires: Time,
) -> Result<Latest, ChannelError> {
    let path = channel.join(CHANNEL_FILE);
    let io_err = |error| ChannelError::Io {
        path: path.clone(),
        error,
    };
    let _lock = files::DirLock::acquire(channel).map_err(io_err)?;
    let current = read(channel)?;
    let verdict = decide_latest(current.as_ref().map(|c| &c.latest), new);
    if !matches!(verdict, Latest::Kept { .. }) {
        let next = Channel::next(current.as_ref(), new.clone(), expires);
        let text = decode::to_yaml(&next).map_err(|e| ChannelError::Io {
            path: path.clone(),
            error: io::Error::other(e),
        })?;
        files::replace(&path, text.as_bytes(), files::PUBLIC).map_err(io_err)?;
    }
    Ok(verdict)
}

/// Moves the channel's latest to the upstream channel's, as `liken fetch
/// latest` mirrors it: when it is newer, channel.yaml becomes the
/// upstream's document byte for byte, with its signature (or without a
/// stale one), so the publisher's signature, serial and expiry reach
/// whoever reads the mirror unchanged.
pub fn mirror_latest(
    channel: &Path,
    upstream: &Channel,
    bytes: &[u8],
    signature: Option<&[u8]>,
) -> Result<Latest, ChannelError> {
    let path = channel.join(CHANNEL_FILE);
    let sig_path = channel.join(signature_name(CHANNEL_FILE));
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |error| ChannelError::Io { path, error }
    };
    let _lock = files::DirLock::acquire(channel).map_err(io_err(&path))?;
    let current = read(channel)?;
    let verdict = decide_latest(current.as_ref().map(|c| &c.latest), &upstream.latest);
    if !matches!(verdict, Latest::Kept { .. }) {
        // The signature first: a reader never finds the new document
        // beside the old one's signature (which would read as tampering).
        match signature {
            Some(sig) => {
                files::replace(&sig_path, sig, files::PUBLIC).map_err(io_err(&sig_path))?
            }
            None => match std::fs::remove_file(&sig_path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(io_err(&sig_path)(e));
                }
                _ => {}
            },
        }
        files::replace(&path, bytes, files::PUBLIC).map_err(io_err(&path))?;
    }
    Ok(verdict)
}

impl Latest {
    /// A sentence for the command's output.
    pub fn describe(&self, new: &Version) -> String {
        match self {
            Latest::Started => format!("channel.yaml written: latest is {new}"),
            Latest::Advanced { from } => format!("channel.yaml: latest moved from {from} to {new}"),
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
    use liken_testenv::scratch::TempDir as TestDir;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
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
    fn writes_a_strict_channel_document() {
        let dir = TestDir::new("channel");
        let (a, b, c) = (
            v("2026.07.11-001"),
            v("2026.08.01-001"),
            v("2026.08.02-001"),
        );
        let t = Time::from_unix(1_800_000_000);
        assert_eq!(advance_latest(dir.path(), &b, t).unwrap(), Latest::Started);
        assert_eq!(
            advance_latest(dir.path(), &a, t.plus_seconds(1)).unwrap(),
            Latest::Kept { latest: b.clone() }
        );
        // A kept latest leaves the document (and any signature) alone.
        let doc = read(dir.path()).unwrap().unwrap();
        assert_eq!((doc.latest, doc.serial, doc.expires), (b, Some(1), Some(t)));
        assert_eq!(
            advance_latest(dir.path(), &c, t.plus_seconds(2)).unwrap(),
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
        let e = advance_latest(dir.path(), &a, t).unwrap_err().to_string();
        assert!(e.contains("apiVersion"), "{e}");
    }

    #[test]
    fn a_mirror_takes_the_upstream_document_and_its_signature_as_they_are() {
        let dir = TestDir::new("channel-mirror");
        let t = Time::from_unix(1_800_000_000);
        let (a, b) = (v("2026.07.11-001"), v("2026.08.01-001"));
        advance_latest(dir.path(), &a, t).unwrap();
        std::fs::write(dir.path().join("channel.yaml.sig"), "stale").unwrap();

        let up = Channel::next(None, b.clone(), t);
        let bytes = format!("# published\n{}", decode::to_yaml(&up).unwrap());
        let got = mirror_latest(dir.path(), &up, bytes.as_bytes(), Some(b"sig")).unwrap();
        assert_eq!(got, Latest::Advanced { from: a.clone() });
        let on_disk = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
        assert_eq!(on_disk(CHANNEL_FILE), bytes.as_bytes());
        assert_eq!(on_disk("channel.yaml.sig"), b"sig");

        // An older upstream leaves the mirror alone; a newer unsigned one
        // takes the stale signature away.
        let old = Channel::next(None, a, t);
        let got = mirror_latest(dir.path(), &old, b"ignored", None).unwrap();
        assert_eq!(got, Latest::Kept { latest: b.clone() });
        assert_eq!(on_disk(CHANNEL_FILE), bytes.as_bytes());
        let c = Channel::next(Some(&up), v("2026.09.01-001"), t);
        let text = decode::to_yaml(&c).unwrap();
        mirror_latest(dir.path(), &c, text.as_bytes(), None).unwrap();
        assert!(!dir.path().join("channel.yaml.sig").exists());
        assert_eq!(read(dir.path()).unwrap().unwrap().serial, Some(2));
    }
}
