//! The control socket: the thread that accepts connections on
//! /run/liken/init.sock and hands each request to the supervisor loop.
//!
//! Only root may ask: the peer's uid comes from the kernel (SO_PEERCRED),
//! not from anything the peer says, and the socket file is 0600 besides.
//! One connection carries one request (see `liken_api::control`); they
//! are served one at a time, which is plenty for a machine operator and
//! keeps a misbehaving client from starving the loop: a whole request
//! must arrive within [`MESSAGE_TIMEOUT`] (each read waits only for
//! what is left of it, so a client trickling a byte at a time cannot
//! hold the thread), an answer must leave within it, and the loop's
//! answer is awaited for a bounded time.
//!
//! A release write is answered only when it is done, minutes later, so
//! its connection is handed to a thread of its own that waits for the
//! answer (up to `WRITE_TIMEOUT_SECS`); the control thread goes back to
//! serving status and other requests meanwhile.

use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use liken_api::control::{
    FrameError, Request, Response, WRITE_TIMEOUT_SECS, read_frame, write_frame,
};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};

use crate::console;
use crate::events::Event;

/// How long one whole request may take to arrive, and one whole answer
/// to leave.
pub const MESSAGE_TIMEOUT: Duration = Duration::from_secs(5);

/// What is left of `deadline` at `now`; `None` once it has passed.
pub fn decide_left(deadline: Instant, now: Instant) -> Option<Duration> {
    let left = deadline.saturating_duration_since(now);
    (!left.is_zero()).then_some(left)
}

/// The instant `within` from now (now itself if that overflows, which
/// ends the message at once rather than never).
fn after(within: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(within).unwrap_or(now)
}

/// The stream, each read bounded by what is left of one deadline for
/// the whole message.
struct Bounded<'a> {
    stream: &'a UnixStream,
    deadline: Instant,
}

impl Bounded<'_> {
    fn left(&self) -> io::Result<Duration> {
        decide_left(self.deadline, Instant::now())
            .ok_or_else(|| io::Error::from(io::ErrorKind::TimedOut))
    }
}

impl Read for Bounded<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(Some(self.left()?))?;
        let mut s = self.stream;
        s.read(buf)
    }
}

/// Writes `response` to `stream`; an answer is one small frame, so the
/// write timeout bounds it whole.
fn answer(stream: &UnixStream, response: &Response) -> Result<(), FrameError> {
    stream.set_write_timeout(Some(MESSAGE_TIMEOUT))?;
    write_frame(&mut &*stream, response)
}

const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether a peer with this uid may use the socket.
pub fn decide_peer(uid: u32) -> Result<(), String> {
    if uid == 0 {
        Ok(())
    } else {
        Err(format!(
            "uid {uid} may not use init's control socket; only root may (run the client as root)"
        ))
    }
}

/// Binds the socket (replacing a stale file) and starts its thread.
pub fn spawn(path: &Path, events: Sender<Event>) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || accept_loop(&listener, &events))
        .map(drop)
}

fn accept_loop(listener: &UnixListener, events: &Sender<Event>) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = serve_one(stream, events, MESSAGE_TIMEOUT) {
                    console::line(&format!("control: a request failed: {e}"));
                }
            }
            Err(e) => {
                console::line(&format!("control: accept failed ({e}); retrying"));
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

fn serve_one(
    stream: UnixStream,
    events: &Sender<Event>,
    within: Duration,
) -> Result<(), FrameError> {
    let uid = getsockopt(&stream, PeerCredentials)
        .map(|c| c.uid())
        .map_err(io::Error::from)?;
    if let Err(message) = decide_peer(uid) {
        return answer(&stream, &Response::Refused { message });
    }
    let mut incoming = Bounded {
        stream: &stream,
        deadline: after(within),
    };
    let request: Request = match read_frame(&mut incoming) {
        Ok(r) => r,
        Err(e @ FrameError::Decode(_)) => {
            return answer(
                &stream,
                &Response::Refused {
                    message: e.to_string(),
                },
            );
        }
        Err(e) => return Err(e),
    };
    if matches!(request, Request::WriteRelease(_) | Request::DisarmRelease) {
        let events = events.clone();
        let answered = std::thread::Builder::new()
            .name("control-write".into())
            .spawn(move || {
                let within = Duration::from_secs(WRITE_TIMEOUT_SECS);
                let response = ask_loop(&events, request, within);
                if let Err(e) = answer(&stream, &response) {
                    console::line(&format!("control: a request failed: {e}"));
                }
            });
        return match answered {
            Ok(_) => Ok(()),
            Err(e) => Err(FrameError::Io(e)),
        };
    }
    let response = ask_loop(events, request, ANSWER_TIMEOUT);
    answer(&stream, &response)
}

/// Hands `request` to the supervisor loop and waits up to `within` for
/// its answer.
fn ask_loop(events: &Sender<Event>, request: Request, within: Duration) -> Response {
    let (reply, answer) = crossbeam_channel::bounded(1);
    let name = request.name();
    if events.send(Event::Control { request, reply }).is_err() {
        return Response::Refused {
            message: "init's supervisor loop is gone; reboot the machine".into(),
        };
    }
    answer.recv_timeout(within).unwrap_or(Response::Refused {
        message: format!(
            "init did not answer the {name} request within {} s; it may be busy shutting down, so try again",
            within.as_secs()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_root_may_ask() {
        assert_eq!(decide_peer(0), Ok(()));
        let message = decide_peer(1000).unwrap_err();
        assert!(message.contains("only root"), "{message}");
    }

    #[test]
    fn deadlines_left() {
        let now = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(decide_left(now + s(5), now), Some(s(5)));
        assert_eq!(decide_left(now, now), None);
        assert_eq!(decide_left(now, now + s(1)), None);
    }

    /// A client that sends its request a byte at a time, each byte well
    /// within a per-read timeout, is cut off when the whole message's
    /// deadline passes (before, each byte restarted the 5-second wait).
    #[test]
    fn a_trickling_client_is_cut_off_at_the_message_deadline() {
        use std::io::Write;
        assert!(
            nix::unistd::getuid().is_root(),
            "this test needs root (the control socket reads requests of root peers only)"
        );
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let trickle = std::thread::spawn(move || {
            // A length prefix of 1000, then body bytes, 150 ms apart,
            // for up to 6 s.
            let bytes = [0u8, 0, 3, 232].into_iter().chain(std::iter::repeat(b' '));
            for b in bytes.take(40) {
                if theirs.write_all(&[b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(150));
            }
        });
        let (tx, _rx) = crossbeam_channel::unbounded();
        let started = Instant::now();
        let got = serve_one(ours, &tx, Duration::from_millis(800));
        let took = started.elapsed();
        assert!(got.is_err(), "{got:?}");
        assert!(took < Duration::from_millis(1500), "took {took:?}");
        trickle.join().unwrap();
    }

    #[test]
    fn a_request_travels_to_the_loop_and_back() {
        let dir = std::env::temp_dir().join(format!("liken-init-ctl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("init.sock");
        std::fs::write(&path, "stale").unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        spawn(&path, tx).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let loop_side = std::thread::spawn(move || match rx.recv().unwrap() {
            Event::Control { request, reply } => {
                assert_eq!(
                    request,
                    Request::Reboot {
                        via: liken_api::RebootVia::Kexec
                    }
                );
                reply.send(Response::Accepted).unwrap();
            }
            other => panic!("unexpected {other:?}"),
        });
        let mut s = UnixStream::connect(&path).unwrap();
        write_frame(
            &mut s,
            &Request::Reboot {
                via: liken_api::RebootVia::Kexec,
            },
        )
        .unwrap();
        let r: Response = read_frame(&mut s).unwrap();
        loop_side.join().unwrap();
        // Tests run as root in CI and as a user elsewhere; both answers
        // are the right one for that uid.
        if nix::unistd::getuid().is_root() {
            assert_eq!(r, Response::Accepted);
        } else {
            assert!(matches!(r, Response::Refused { .. }));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_release_write_does_not_hold_up_other_requests() {
        // A user's requests are refused before they reach the loop, so
        // what this test checks happens only for root: fail, never pass
        // unchecked, anywhere else.
        assert!(
            nix::unistd::getuid().is_root(),
            "this test needs root (the control socket answers root peers only); \
             run the tests as root, as CI does"
        );
        let dir = std::env::temp_dir().join(format!("liken-init-ctlw-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("init.sock");
        let (tx, rx) = crossbeam_channel::unbounded();
        spawn(&path, tx).unwrap();
        let write = Request::WriteRelease(liken_api::control::WriteRelease {
            directory: "/var/lib/liken/releases/2026.12.02-001".into(),
            release_sha256: liken_api::hash::sha256(b"release.yaml"),
            signature: None,
            rollback_permit: None,
        });
        let writer = {
            let path = path.clone();
            let write = write.clone();
            std::thread::spawn(move || {
                let mut s = UnixStream::connect(&path).unwrap();
                write_frame(&mut s, &write).unwrap();
                read_frame::<_, Response>(&mut s).unwrap()
            })
        };
        // The loop holds the write's answer back...
        let held = match rx.recv().unwrap() {
            Event::Control { request, reply } => {
                assert_eq!(request, write);
                reply
            }
            other => panic!("unexpected {other:?}"),
        };
        // ...while a status request is served.
        let status = std::thread::spawn(move || match rx.recv().unwrap() {
            Event::Control { request, reply } => {
                assert_eq!(request, Request::Status);
                reply
                    .send(Response::Refused {
                        message: "status".into(),
                    })
                    .unwrap();
            }
            other => panic!("unexpected {other:?}"),
        });
        let mut s = UnixStream::connect(&path).unwrap();
        write_frame(&mut s, &Request::Status).unwrap();
        let r: Response = read_frame(&mut s).unwrap();
        assert_eq!(
            r,
            Response::Refused {
                message: "status".into()
            }
        );
        status.join().unwrap();
        let done = Response::ReleaseWritten(liken_api::control::ReleaseWritten {
            slot: liken_api::Slot::B,
            version: liken_api::Version::parse("2026.12.02-001").unwrap(),
            bytes: 1,
            entry: "liken-b+3.conf".into(),
        });
        held.send(done.clone()).unwrap();
        assert_eq!(writer.join().unwrap(), done);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
