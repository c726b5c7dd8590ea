//! The operator's side of init's control socket (`liken_api::control`).
//!
//! One connection carries one request and one answer. Every call has a
//! deadline: a status or a reboot is answered at once, a release write
//! when the slot is written (up to `WRITE_TIMEOUT_SECS`). A missing
//! socket, a refused connection, a peer that closes early and an answer
//! that is not the one the request calls for are all errors that say
//! which, so the pass reports Unknown rather than guessing; none of them
//! is a panic.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use liken_api::control::{
    InitStatus, ReleaseWritten, Request, Response, WRITE_TIMEOUT_SECS, WriteRelease, read_frame,
    write_frame,
};

/// How long a quick request may take.
const QUICK: Duration = Duration::from_secs(10);

/// Why init did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitError {
    /// The socket cannot be reached or the exchange failed.
    Unreachable(String),
    /// init answered something this request does not call for.
    Malformed(String),
    /// init refused, with its reason.
    Refused(String),
}

impl std::fmt::Display for InitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InitError::Unreachable(e) => f.write_str(e),
            InitError::Malformed(e) => f.write_str(e),
            InitError::Refused(e) => write!(f, "init refused: {e}"),
        }
    }
}

impl std::error::Error for InitError {}

/// A client of init's control socket.
#[derive(Clone, Debug)]
pub struct InitClient {
    path: PathBuf,
}

impl InitClient {
    /// A client of the socket at `path`.
    pub fn new(path: &Path) -> InitClient {
        InitClient {
            path: path.to_owned(),
        }
    }

    fn exchange(&self, request: &Request, timeout: Duration) -> Result<Response, InitError> {
        let at = self.path.display();
        let unreachable = |what: &str, e: &dyn std::fmt::Display| {
            InitError::Unreachable(format!(
                "init's control socket {at}: {what}: {e}; init is down or this pod lacks the \
                 host's /run/liken"
            ))
        };
        let mut stream =
            UnixStream::connect(&self.path).map_err(|e| unreachable("connecting", &e))?;
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| stream.set_write_timeout(Some(QUICK)))
            .map_err(|e| unreachable("setting timeouts", &e))?;
        write_frame(&mut stream, request).map_err(|e| unreachable("sending", &e))?;
        read_frame::<_, Response>(&mut stream).map_err(|e| match e {
            liken_api::control::FrameError::Decode(_)
            | liken_api::control::FrameError::TooLarge { .. } => InitError::Malformed(format!(
                "init's answer to {} on {at} is malformed: {e}",
                request.name()
            )),
            other => unreachable(
                &format!("waiting for the answer to {}", request.name()),
                &other,
            ),
        })
    }

    fn unexpected(&self, request: &Request, got: &Response) -> InitError {
        let name = match got {
            Response::Accepted => "accepted",
            Response::Status(_) => "status",
            Response::ReleaseWritten(_) => "releaseWritten",
            Response::Refused { .. } => "refused",
        };
        InitError::Malformed(format!(
            "init answered {} with {name}, which that request does not call for",
            request.name()
        ))
    }

    /// init's state.
    pub fn status(&self) -> Result<InitStatus, InitError> {
        let request = Request::Status;
        match self.exchange(&request, QUICK)? {
            Response::Status(s) => Ok(s),
            Response::Refused { message } => Err(InitError::Refused(message)),
            other => Err(self.unexpected(&request, &other)),
        }
    }

    /// Asks for a reboot or a k3s restart; init answers before it acts.
    pub fn disrupt(&self, request: Request) -> Result<(), InitError> {
        match self.exchange(&request, QUICK)? {
            Response::Accepted => Ok(()),
            Response::Refused { message } => Err(InitError::Refused(message)),
            other => Err(self.unexpected(&request, &other)),
        }
    }

    /// Asks init to take the inactive slot out of the bootloaders' reach
    /// (a written release whose rollout halted); answered when done.
    pub fn disarm_release(&self) -> Result<(), InitError> {
        let request = Request::DisarmRelease;
        match self.exchange(&request, Duration::from_secs(WRITE_TIMEOUT_SECS))? {
            Response::Accepted => Ok(()),
            Response::Refused { message } => Err(InitError::Refused(message)),
            other => Err(self.unexpected(&request, &other)),
        }
    }

    /// Asks init to write a verified release into the inactive slot;
    /// answered when done.
    pub fn write_release(&self, write: WriteRelease) -> Result<ReleaseWritten, InitError> {
        let request = Request::WriteRelease(write);
        match self.exchange(&request, Duration::from_secs(WRITE_TIMEOUT_SECS))? {
            Response::ReleaseWritten(w) => Ok(w),
            Response::Refused { message } => Err(InitError::Refused(message)),
            other => Err(self.unexpected(&request, &other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixListener;

    fn socket(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("liken-initc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("init.sock")
    }

    /// Serves one connection with raw bytes.
    fn serve_once(path: &Path, answer: Vec<u8>) -> std::thread::JoinHandle<Request> {
        let listener = UnixListener::bind(path).unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let req: Request = read_frame(&mut s).unwrap();
            s.write_all(&answer).unwrap();
            req
        })
    }

    fn frame(r: &Response) -> Vec<u8> {
        let mut b = Vec::new();
        write_frame(&mut b, r).unwrap();
        b
    }

    #[test]
    fn answers_map_to_results() {
        let path = socket("ok");
        let t = serve_once(&path, frame(&Response::Status(InitStatus::default())));
        assert_eq!(
            InitClient::new(&path).status().unwrap(),
            InitStatus::default()
        );
        assert_eq!(t.join().unwrap(), Request::Status);

        let path = socket("refused");
        let t = serve_once(
            &path,
            frame(&Response::Refused {
                message: "a release is being written".into(),
            }),
        );
        let e = InitClient::new(&path)
            .disrupt(Request::Reboot {
                via: liken_api::RebootVia::Kexec,
            })
            .unwrap_err();
        assert_eq!(e, InitError::Refused("a release is being written".into()));
        assert_eq!(
            t.join().unwrap(),
            Request::Reboot {
                via: liken_api::RebootVia::Kexec
            }
        );
    }

    #[test]
    fn a_missing_socket_a_wrong_answer_and_garbage_are_errors_not_panics() {
        let path = socket("missing");
        let e = InitClient::new(&path).status().unwrap_err();
        assert!(matches!(e, InitError::Unreachable(_)), "{e}");
        assert!(e.to_string().contains("init.sock"), "{e}");

        let path = socket("wrong");
        let t = serve_once(&path, frame(&Response::Accepted));
        let e = InitClient::new(&path).status().unwrap_err();
        assert!(matches!(e, InitError::Malformed(_)), "{e}");
        t.join().unwrap();

        let path = socket("garbage");
        let mut junk = 5u32.to_be_bytes().to_vec();
        junk.extend_from_slice(b"hello");
        let t = serve_once(&path, junk);
        let e = InitClient::new(&path).status().unwrap_err();
        assert!(matches!(e, InitError::Malformed(_)), "{e}");
        t.join().unwrap();

        let path = socket("closed");
        let t = serve_once(&path, Vec::new());
        let e = InitClient::new(&path).status().unwrap_err();
        assert!(matches!(e, InitError::Unreachable(_)), "{e}");
        t.join().unwrap();
    }
}
