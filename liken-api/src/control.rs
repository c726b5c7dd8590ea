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
//! Not here yet: the request that writes a verified release into the
//! inactive slot arrives with init's slot writer.

use std::fmt;
use std::io::{self, Read, Write};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::boot::BootRecord;

/// Where init listens.
pub const SOCKET_PATH: &str = "/run/liken/init.sock";

/// The largest message either side accepts, in bytes. Requests and
/// responses are small documents; anything bigger is a confused or
/// hostile peer.
pub const MAX_FRAME: u32 = 1024 * 1024;

/// What a client asks init to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "camelCase")]
pub enum Request {
    /// Report init's state ([`InitStatus`]).
    Status,
    /// Stop k3s and every other process, unmount, and reboot.
    Reboot,
    /// As [`Request::Reboot`], then power off.
    Poweroff,
    /// Stop k3s and start it again (a k3s configuration change).
    RestartK3s,
}

impl Request {
    /// The request's name as the protocol writes it, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::Reboot => "reboot",
            Request::Poweroff => "poweroff",
            Request::RestartK3s => "restartK3s",
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
    use crate::boot::Slot;
    use crate::time::Time;

    fn round_trip<T: Serialize + DeserializeOwned + PartialEq + fmt::Debug>(m: &T) {
        let mut buf = Vec::new();
        write_frame(&mut buf, m).unwrap();
        let n = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
        assert_eq!(n, buf.len() - 4);
        let back: T = read_frame(&mut buf.as_slice()).unwrap();
        assert_eq!(&back, m);
    }

    #[test]
    fn requests_and_responses_round_trip() {
        for r in [
            Request::Status,
            Request::Reboot,
            Request::Poweroff,
            Request::RestartK3s,
        ] {
            round_trip(&r);
        }
        round_trip(&Response::Accepted);
        round_trip(&Response::Refused {
            message: "no".into(),
        });
        round_trip(&Response::Status(InitStatus {
            boot: Some(BootRecord {
                time: Time::from_unix(1_780_000_000),
                slot: Some(Slot::A),
                version: None,
                documents: Default::default(),
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
