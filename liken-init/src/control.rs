//! The control socket: the thread that accepts connections on
//! /run/liken/init.sock and hands each request to the supervisor loop.
//!
//! Only root may ask: the peer's uid comes from the kernel (SO_PEERCRED),
//! not from anything the peer says, and the socket file is 0600 besides.
//! One connection carries one request (see `liken_api::control`); they
//! are served one at a time, which is plenty for a machine operator and
//! keeps a misbehaving client from starving the loop: reads and writes
//! time out, and the loop's answer is awaited for a bounded time.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

use crossbeam_channel::Sender;
use liken_api::control::{FrameError, Request, Response, read_frame, write_frame};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};

use crate::console;
use crate::events::Event;

const IO_TIMEOUT: Duration = Duration::from_secs(5);
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
                if let Err(e) = serve_one(stream, events) {
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

fn serve_one(mut stream: UnixStream, events: &Sender<Event>) -> Result<(), FrameError> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let uid = getsockopt(&stream, PeerCredentials)
        .map(|c| c.uid())
        .map_err(io::Error::from)?;
    if let Err(message) = decide_peer(uid) {
        return write_frame(&mut stream, &Response::Refused { message });
    }
    let request: Request = match read_frame(&mut stream) {
        Ok(r) => r,
        Err(e @ FrameError::Decode(_)) => {
            return write_frame(
                &mut stream,
                &Response::Refused {
                    message: e.to_string(),
                },
            );
        }
        Err(e) => return Err(e),
    };
    let (reply, answer) = crossbeam_channel::bounded(1);
    let name = request.name();
    let response = if events.send(Event::Control { request, reply }).is_err() {
        Response::Refused {
            message: "init's supervisor loop is gone; reboot the machine".into(),
        }
    } else {
        answer.recv_timeout(ANSWER_TIMEOUT).unwrap_or(Response::Refused {
            message: format!(
                "init did not answer the {name} request within {} s; it may be busy shutting down, so try again",
                ANSWER_TIMEOUT.as_secs()
            ),
        })
    };
    write_frame(&mut stream, &response)
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
                assert_eq!(request, Request::Reboot);
                reply.send(Response::Accepted).unwrap();
            }
            other => panic!("unexpected {other:?}"),
        });
        let mut s = UnixStream::connect(&path).unwrap();
        write_frame(&mut s, &Request::Reboot).unwrap();
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
}
