//! The control socket's protocol: what may be asked of init, what it
//! answers, and how one message is framed on the stream.
//!
//! init listens on [`SOCKET_PATH`] and is the only process that writes
//! boot partitions or reboots the machine; the machine operator (and the
//! QEMU tests' stand-in service) ask it to. Both sides link this module,
//! so the protocol is defined once and cannot drift between them.
//!
//! Framing: every message is a 4-byte big-endian length followed by that
//! many bytes of JSON. A length prefix rather than newline-delimited JSON
//! means a reader knows how much to read before parsing and can refuse an
//! oversized message ([`MAX_FRAME`]) without buffering it. One connection
//! carries one request and one response; a client connects again for the
//! next. The framing is written over `std::io::Read`/`Write` only, so it
//! stays free of any socket or runtime crate and is tested on byte
//! buffers.
//!
//! Requests that change the machine (reboot, poweroff, restart k3s) are
//! answered [`Response::Accepted`] before init acts, because a reboot
//! ends the connection with no chance to answer afterwards.
//!
//! [`Request::WriteRelease`] is the exception: writing a slot takes
//! minutes, and its client (the machine operator) must know whether the
//! slot is now a boot target before it stages a reboot. So init answers
//! it only when the write is done, with [`Response::ReleaseWritten`] or
//! [`Response::Refused`]; its client waits up to [`WRITE_TIMEOUT_SECS`].
//! The request names a release directory under [`RELEASES_DIR`] and the
//! SHA-256 of its release.yaml that the client checked against the
//! Cluster's catalog, so init writes only the release the operator
//! trusted, whatever changed on disk since.

use std::fmt;
use std::io::{self, Read, Write};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::boot::{BootRecord, RebootVia, Slot};
use crate::digest::Sha256Hex;
use crate::version::Version;

/// Where init listens.
pub const SOCKET_PATH: &str = "/run/liken/init.sock";

/// The largest message either side accepts, in bytes. Requests and
/// responses are small documents; anything bigger is a confused or
/// hostile peer.
pub const MAX_FRAME: u32 = 1024 * 1024;

/// Where the machine operator keeps downloaded releases, one directory
/// per version ([`crate::ondisk::VAR_LIKEN`] and
/// [`crate::ondisk::RELEASES_DIR`]; a test there holds the two equal).
/// [`Request::WriteRelease`] names a directory directly below it; init
/// refuses any other.
pub const RELEASES_DIR: &str = "/var/lib/liken/releases";

/// How long a client waits for the answer to [`Request::WriteRelease`]:
/// a 1 GiB slot written and read back on a slow disk, with room to spare.
pub const WRITE_TIMEOUT_SECS: u64 = 3600;

/// init's answer to a release write (or disarm) while another one runs:
/// busy, not refused. A client asks again after a backoff; it says
/// nothing about the release.
pub const WRITE_BUSY: &str =
    "another release is being written; wait for its answer, then ask again";

/// What a client asks init to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "camelCase")]
pub enum Request {
    /// Report init's state ([`InitStatus`]).
    Status,
    /// Stop k3s and every other process, unmount, and reboot: by kexec
    /// into the entry the bootloader would pick when `via` says so and
    /// init can, else through the firmware. A request without `via`
    /// (from a client older than kexec) means kexec.
    Reboot {
        /// The way the machine's documents choose ([`RebootVia::decide`]).
        #[serde(default)]
        via: RebootVia,
    },
    /// As [`Request::Reboot`], then power off.
    Poweroff,
    /// Stop k3s and start it again (a k3s configuration change).
    RestartK3s,
    /// Verify a downloaded release again and write it into the inactive
    /// slot, the new loader entry last. Answered when done.
    WriteRelease(WriteRelease),
    /// Take the inactive slot out of the bootloaders' reach again (its
    /// loader entries and kernel removed, GRUB pointed at the booted
    /// slot), so the next boot, whatever causes it, is the running
    /// release: what a machine does with a written release whose rollout
    /// halted. Answered with [`Response::Accepted`] once done and synced.
    DisarmRelease,
}

/// Which release to write, and the release.yaml the client trusted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WriteRelease {
    /// The release directory, `<RELEASES_DIR>/<version>`, holding
    /// release.yaml and every artifact it names.
    pub directory: String,
    /// The SHA-256 of that directory's release.yaml as the client
    /// verified it against the Cluster's catalog.
    pub release_sha256: Sha256Hex,
    /// The text of release.yaml's detached signature
    /// (`release.yaml.sig`), which init checks against its trust root
    /// before writing anything. Absent for an unsigned release, which
    /// only a machine whose layer was packed `-unsigned` writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// A rollback permit and its signature, for a release older than
    /// the newest one this machine ever blessed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_permit: Option<SignedDocument>,
}

/// A small signed document carried in a request: its exact text and
/// the text of its detached signature.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignedDocument {
    /// The document, byte for byte as signed.
    pub document: String,
    /// Its `.sig` file's text.
    pub signature: String,
}

/// What a finished [`Request::WriteRelease`] did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseWritten {
    /// The slot written: the one that did not boot.
    pub slot: Slot,
    /// The release now in it.
    pub version: Version,
    /// Bytes written: the system image into the slot, plus the kernel and
    /// initrds onto the ESP.
    pub bytes: u64,
    /// The new loader entry's file name (`liken-<slot>+3.conf`).
    pub entry: String,
}

impl Request {
    /// The request's name as the protocol writes it, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::Reboot { .. } => "reboot",
            Request::Poweroff => "poweroff",
            Request::RestartK3s => "restartK3s",
            Request::WriteRelease(_) => "writeRelease",
            Request::DisarmRelease => "disarmRelease",
        }
    }
}

/// What init answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "response", rename_all = "camelCase")]
pub enum Response {
    /// The request was taken and init is carrying it out.
    Accepted,
    /// The answer to [`Request::Status`].
    Status(InitStatus),
    /// The answer to [`Request::WriteRelease`] once the slot, the ESP
    /// files and the new entry are written and synced.
    ReleaseWritten(ReleaseWritten),
    /// The request was not carried out; the message says why and what to
    /// do.
    Refused {
        /// For a person.
        message: String,
    },
}

/// init's state, as a client sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitStatus {
    /// The boot record, once published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<BootRecord>,
    /// The Machine document this boot runs, when one was chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// Boot steps that failed, each with its console message. Empty on a
    /// healthy boot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<StepProblem>,
    /// The supervised service (k3s).
    pub k3s: ServiceStatus,
}

/// A boot step that did not succeed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepProblem {
    /// The step's name, as its console milestone prints it.
    pub step: String,
    /// What went wrong and what to do.
    pub message: String,
}

/// Where the supervised service stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ServiceState {
    /// Not started this boot: nothing to run, or a boot step failed.
    #[default]
    NotStarted,
    /// Running.
    Running,
    /// Exited; waiting out the restart backoff.
    Backoff,
    /// Stopped on purpose (shutdown or restart in progress).
    Stopped,
}

/// The supervised service's state and history this boot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    /// Its state.
    pub state: ServiceState,
    /// Its pid while running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// How many times it was started after exiting.
    pub restarts: u32,
}

/// Why a message could not be read or written.
#[derive(Debug)]
pub enum FrameError {
    /// The peer closed the connection before sending a message.
    Closed,
    /// The stream failed, or ended inside a message.
    Io(io::Error),
    /// The length prefix is larger than [`MAX_FRAME`].
    TooLarge {
        /// The length the peer announced.
        length: u32,
    },
    /// The message is not the JSON this side expects.
    Decode(serde_json::Error),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Closed => f.write_str(
                "the control socket closed before a message arrived; \
                 the peer gave up or crashed, so try the request again",
            ),
            FrameError::Io(e) => write!(f, "control socket: {e}"),
            FrameError::TooLarge { length } => write!(
                f,
                "control socket: a message of {length} bytes is over the {MAX_FRAME}-byte limit; \
                 the peer does not speak this protocol"
            ),
            FrameError::Decode(e) => write!(
                f,
                "control socket: the message is not a request or response this version knows ({e}); \
                 check that init and its client come from the same release"
            ),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> FrameError {
        FrameError::Io(e)
    }
}

/// Writes one message: its length, then its JSON, in a single write so a
/// reader never sees a prefix without its body from a partial flush.
pub fn write_frame<W: Write, T: Serialize>(w: &mut W, message: &T) -> Result<(), FrameError> {
    let body = serde_json::to_vec(message).map_err(FrameError::Decode)?;
    let length = u32::try_from(body.len())
        .ok()
        .filter(|n| *n <= MAX_FRAME)
        .ok_or(FrameError::TooLarge {
            length: u32::try_from(body.len()).unwrap_or(u32::MAX),
        })?;
    let mut frame = Vec::with_capacity(body.len().saturating_add(4));
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// Reads one message.
pub fn read_frame<R: Read, T: DeserializeOwned>(r: &mut R) -> Result<T, FrameError> {
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < prefix.len() {
        let Some(rest) = prefix.get_mut(got..) else {
            break;
        };
        match r.read(rest) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(FrameError::Io(io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => got = got.saturating_add(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    let length = u32::from_be_bytes(prefix);
    if length > MAX_FRAME {
        return Err(FrameError::TooLarge { length });
    }
    let mut body = vec![0u8; length as usize];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(FrameError::Decode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Time;

    fn write_request() -> WriteRelease {
        WriteRelease {
            directory: format!("{RELEASES_DIR}/2026.12.02-001"),
            release_sha256: Sha256Hex::parse(&"ab".repeat(32)).unwrap(),
            signature: None,
            rollback_permit: None,
        }
    }

    fn round_trip<T: Serialize + DeserializeOwned + PartialEq + fmt::Debug>(m: &T) {
        let mut buf = Vec::new();
        write_frame(&mut buf, m).unwrap();
        let n = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
        assert_eq!(n, buf.len() - 4);
        let back: T = read_frame(&mut buf.as_slice()).unwrap();
        assert_eq!(&back, m);
    }

    #[test]
    fn a_reboot_request_without_via_means_kexec() {
        let r: Request = serde_json::from_str(r#"{"request":"reboot"}"#).unwrap();
        assert_eq!(
            r,
            Request::Reboot {
                via: RebootVia::Kexec
            }
        );
        let json = serde_json::to_string(&Request::Reboot {
            via: RebootVia::Firmware,
        })
        .unwrap();
        assert_eq!(json, r#"{"request":"reboot","via":"firmware"}"#);
    }

    #[test]
    fn requests_and_responses_round_trip() {
        for r in [
            Request::Status,
            Request::Reboot {
                via: RebootVia::Kexec,
            },
            Request::Reboot {
                via: RebootVia::Firmware,
            },
            Request::Poweroff,
            Request::RestartK3s,
            Request::WriteRelease(write_request()),
            Request::WriteRelease(WriteRelease {
                signature: Some("kind: Signature".into()),
                rollback_permit: Some(SignedDocument {
                    document: "kind: RollbackPermit".into(),
                    signature: "kind: Signature".into(),
                }),
                ..write_request()
            }),
        ] {
            round_trip(&r);
        }
        round_trip(&Response::Accepted);
        round_trip(&Response::ReleaseWritten(ReleaseWritten {
            slot: Slot::B,
            version: Version::parse("2026.12.02-001").unwrap(),
            bytes: 123_456_789,
            entry: "liken-b+3.conf".into(),
        }));
        round_trip(&Response::Refused {
            message: "no".into(),
        });
        round_trip(&Response::Status(InitStatus {
            boot: Some(BootRecord {
                time: Time::from_unix(1_780_000_000),
                slot: Some(Slot::A),
                version: None,
                documents: Default::default(),
                assessment: None,
                via: None,
                via_reason: None,
                root_verity: None,
            }),
            machine: Some("m1".into()),
            problems: vec![StepProblem {
                step: "machine".into(),
                message: "bad".into(),
            }],
            k3s: ServiceStatus {
                state: ServiceState::Backoff,
                pid: None,
                restarts: 2,
            },
        }));
    }

    #[test]
    fn the_wire_form_is_tagged_json() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &Request::RestartK3s).unwrap();
        assert_eq!(&buf[4..], br#"{"request":"restartK3s"}"#);
        assert_eq!(Request::RestartK3s.name(), "restartK3s");
    }

    #[test]
    fn write_release_on_the_wire() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &Request::WriteRelease(write_request())).unwrap();
        let want = format!(
            r#"{{"request":"writeRelease","directory":"/var/lib/liken/releases/2026.12.02-001","releaseSha256":"{}"}}"#,
            "ab".repeat(32)
        );
        assert_eq!(&buf[4..], want.as_bytes());
        assert_eq!(
            Request::WriteRelease(write_request()).name(),
            "writeRelease"
        );
        let mut buf = Vec::new();
        write_frame(
            &mut buf,
            &Response::ReleaseWritten(ReleaseWritten {
                slot: Slot::A,
                version: Version::parse("2026.12.02-002").unwrap(),
                bytes: 7,
                entry: "liken-a+3.conf".into(),
            }),
        )
        .unwrap();
        assert_eq!(
            &buf[4..],
            br#"{"response":"releaseWritten","slot":"A","version":"2026.12.02-002","bytes":7,"entry":"liken-a+3.conf"}"#
        );
    }

    #[test]
    fn a_write_request_with_a_bad_digest_or_an_unknown_field_is_refused() {
        let frame = |json: &str| {
            let mut b = u32::try_from(json.len()).unwrap().to_be_bytes().to_vec();
            b.extend_from_slice(json.as_bytes());
            b
        };
        let short = frame(r#"{"request":"writeRelease","directory":"/x","releaseSha256":"abc"}"#);
        assert!(matches!(
            read_frame::<_, Request>(&mut short.as_slice()),
            Err(FrameError::Decode(_))
        ));
        let extra = frame(&format!(
            r#"{{"request":"writeRelease","directory":"/x","releaseSha256":"{}","slot":"A"}}"#,
            "0".repeat(64)
        ));
        assert!(matches!(
            read_frame::<_, Request>(&mut extra.as_slice()),
            Err(FrameError::Decode(_))
        ));
        let missing = frame(r#"{"request":"writeRelease","directory":"/x"}"#);
        assert!(matches!(
            read_frame::<_, Request>(&mut missing.as_slice()),
            Err(FrameError::Decode(_))
        ));
    }

    #[test]
    fn a_closed_stream_an_oversized_frame_and_garbage_are_errors() {
        let empty: &[u8] = &[];
        assert!(matches!(
            read_frame::<_, Request>(&mut { empty }),
            Err(FrameError::Closed)
        ));
        let short: &[u8] = &[0, 0];
        assert!(matches!(
            read_frame::<_, Request>(&mut { short }),
            Err(FrameError::Io(_))
        ));
        let huge = (MAX_FRAME + 1).to_be_bytes();
        assert!(matches!(
            read_frame::<_, Request>(&mut huge.as_slice()),
            Err(FrameError::TooLarge { .. })
        ));
        let mut garbage = 5u32.to_be_bytes().to_vec();
        garbage.extend_from_slice(b"hello");
        let e = read_frame::<_, Request>(&mut garbage.as_slice()).unwrap_err();
        assert!(e.to_string().contains("same release"), "{e}");
        let mut truncated = 10u32.to_be_bytes().to_vec();
        truncated.extend_from_slice(b"{}");
        assert!(matches!(
            read_frame::<_, Request>(&mut truncated.as_slice()),
            Err(FrameError::Io(_))
        ));
    }
}
