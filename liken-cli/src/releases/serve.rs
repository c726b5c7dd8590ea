//! `liken serve`: share a channel directory over plain HTTP/1.1.
//!
//! Machines download releases from it, so it serves what a release
//! fetch needs and nothing else: GET and HEAD of regular files, a single
//! byte Range (fetch resumes with `bytes=<n>-`), keep-alive, and an
//! `index.html` for a directory that has one. There are no listings and
//! no writes. Everything is read-only from a directory that may be
//! shared with the world, so no request may name a file outside it:
//! [`super::urlpath`] refuses escaping targets, and files are opened with
//! `openat2(RESOLVE_BENEATH)` relative to the root, so a symlink that
//! points outside answers 404 as well (where the kernel lacks openat2 the
//! canonical path is checked against the root instead).
//!
//! What may be served: only regular files that are world-readable (a
//! file the owner kept private is refused with 403, not shared because
//! the server happens to run as its owner), never a dot-name (404, which
//! covers fetch's `.<name>.partial` downloads and bundle's staging) and
//! never a name ending in `.partial` (a download older fetches left
//! without the dot).
//!
//! Slow clients: a worker is held by one connection at a time, so no
//! client may hold one for long without taking data. A whole request,
//! head and body, must arrive within one [`Config::request_deadline`]
//! from its first byte: every read waits only for what is left of it, so
//! a client trickling a byte at a time is cut off at the deadline (with
//! 408), however many reads it keeps alive. A response body must be taken at
//! [`Config::min_rate`] or faster, measured over every [`Config::window`],
//! and all of it within a deadline of [`Config::grace`] plus its length
//! at that rate ([`decide_pace`]). A client that falls behind is cut off
//! and logged; keep-alive connections idle out after [`Config::idle`].
//!
//! Shape: one acceptor thread hands connections to a fixed pool of
//! worker threads through a bounded crossbeam queue; each worker owns a
//! connection until it closes or idles out. A full queue answers 503 at
//! once rather than letting connections pile up unseen. File bodies go
//! out with sendfile(2), the response head with MSG_MORE so head and
//! first data share a segment. The calling thread writes the access log,
//! fed through a channel, so workers never wait on a slow terminal.

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::http::{self, Method, Parsed, RangeDecision, Request};
use super::urlpath;

/// The address `serve` listens on when none is given.
pub const DEFAULT_ADDRESS: &str = ":8017";

/// How the server is sized.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Worker threads, so also the most connections served at once.
    pub workers: usize,
    /// Accepted connections that may wait for a worker.
    pub queue: usize,
    /// How long a keep-alive connection may sit idle.
    pub idle: Duration,
    /// How long one write to a stalled client may block.
    pub write_timeout: Duration,
    /// The slowest a client may take a response body, in bytes per
    /// second, averaged over each `window`.
    pub min_rate: u64,
    /// The span over which `min_rate` is measured.
    pub window: Duration,
    /// Time a response body gets beyond its length at `min_rate`.
    pub grace: Duration,
    /// The longest a request, head and body, may take to arrive, from
    /// its first byte.
    pub request_deadline: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            workers: 128,
            queue: 1024,
            idle: Duration::from_secs(15),
            write_timeout: Duration::from_secs(60),
            // 256 kbit/s: a slow link still gets a release (a 1 GiB
            // image within nine hours), while a client that stalls or
            // trickles loses its worker within a minute (on loopback the
            // socket buffers take some MiB before the pace shows).
            min_rate: 32 * 1024,
            window: Duration::from_secs(10),
            grace: Duration::from_secs(30),
            // A request is a few hundred bytes (bodies are discarded and
            // capped at 1 MiB): any client sends one within seconds.
            request_deadline: Duration::from_secs(30),
        }
    }
}

/// Whether a response body keeps its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Fast enough so far.
    Continue,
    /// The last full window carried less than the minimum rate.
    TooSlow,
    /// The whole body took longer than its deadline.
    PastDeadline,
}

/// How a transfer stands: bytes and time for the whole body and for the
/// current window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The body's length.
    pub len: u64,
    /// Bytes of it sent so far.
    pub sent: u64,
    /// Time since the body started.
    pub elapsed: Duration,
    /// Bytes sent in the current window.
    pub window_sent: u64,
    /// Time since the current window started.
    pub window_elapsed: Duration,
}

/// Decides whether a transfer may go on: its deadline is `grace` plus its
/// length at `min_rate`; a window that has run its span must have carried
/// `min_rate` bytes for each second of it, or all that was left.
pub fn decide_pace(p: Progress, config: &Config) -> Pace {
    let rate = config.min_rate.max(1);
    let allowed = config.grace + Duration::from_secs(p.len / rate + 1);
    if p.elapsed > allowed {
        return Pace::PastDeadline;
    }
    if p.window_elapsed >= config.window {
        let left = p.len.saturating_sub(p.sent.saturating_sub(p.window_sent));
        let due = ((u128::from(rate) * p.window_elapsed.as_millis()) / 1000).min(u128::from(left));
        if u128::from(p.window_sent) < due {
            return Pace::TooSlow;
        }
    }
    Pace::Continue
}

/// Why serve could not start.
#[derive(Debug)]
pub enum ServeError {
    /// The address does not parse or resolve.
    Address(String),
    /// The directory is not a readable directory.
    Directory {
        /// The directory.
        dir: PathBuf,
        /// Why.
        error: io::Error,
    },
    /// Listening failed.
    Bind {
        /// The address.
        address: String,
        /// Why.
        error: io::Error,
    },
    /// Starting a thread failed.
    Thread(io::Error),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Address(a) => write!(
                f,
                "address {a:?} is not host:port or :port (for example :8017 or 127.0.0.1:8017)"
            ),
            ServeError::Directory { dir, error } => write!(
                f,
                "{}: {error}; serve shares an existing channel directory",
                dir.display()
            ),
            ServeError::Bind { address, error } => write!(
                f,
                "listening on {address}: {error}; pick another address or stop what holds it"
            ),
            ServeError::Thread(e) => write!(f, "starting the server's threads: {e}"),
        }
    }
}

impl std::error::Error for ServeError {}

/// Resolves `:port` (every interface) or `host:port`.
pub fn resolve_address(text: &str) -> Result<SocketAddr, ServeError> {
    let full = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_owned(),
    };
    full.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| ServeError::Address(text.to_owned()))
}

/// The served directory.
struct Root {
    fd: OwnedFd,
    canonical: PathBuf,
}

/// A file chosen to answer a request.
struct Found {
    file: File,
    len: u64,
    modified: Option<SystemTime>,
    content_type: &'static str,
}

fn content_type(name: &[u8]) -> &'static str {
    let ext = name.rsplit(|&b| b == b'.').next().unwrap_or(b"");
    match ext {
        b"html" => "text/html; charset=utf-8",
        b"yaml" | b"yml" => "application/yaml",
        b"md" => "text/markdown; charset=utf-8",
        b"txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

impl Root {
    fn open(dir: &Path) -> io::Result<Root> {
        let fd = rustix::fs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Root {
            fd,
            canonical: std::fs::canonicalize(dir)?,
        })
    }

    /// Opens `rel` for reading without leaving the root.
    fn open_beneath(&self, rel: &Path) -> io::Result<File> {
        // O_NONBLOCK keeps a FIFO someone left in the channel from
        // hanging the worker at open; it changes nothing for files.
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        match rustix::fs::openat2(
            &self.fd,
            rel,
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        ) {
            Ok(fd) => Ok(File::from(fd)),
            Err(rustix::io::Errno::NOSYS) => {
                let canonical = std::fs::canonicalize(self.canonical.join(rel))?;
                if !canonical.starts_with(&self.canonical) {
                    return Err(io::Error::from(io::ErrorKind::NotFound));
                }
                Ok(File::from(rustix::fs::open(
                    &canonical,
                    flags,
                    Mode::empty(),
                )?))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The file that answers the decoded path, or the status to send.
    fn find(&self, segments: &[Vec<u8>]) -> Result<Found, u16> {
        let mut rel = PathBuf::new();
        for s in segments {
            rel.push(std::ffi::OsStr::from_bytes(s));
        }
        // Running out of descriptors is the server's trouble, not a
        // missing file; anything else the path meets is not found.
        let not_found = |e: io::Error| -> u16 {
            match e.raw_os_error().map(rustix::io::Errno::from_raw_os_error) {
                Some(
                    rustix::io::Errno::MFILE | rustix::io::Errno::NFILE | rustix::io::Errno::NOMEM,
                ) => 503,
                _ => 404,
            }
        };
        let mut file = self.open_beneath(&rel).map_err(not_found)?;
        let mut meta = file.metadata().map_err(not_found)?;
        let mut name = segments.last().cloned().unwrap_or_default();
        if meta.is_dir() {
            rel.push("index.html");
            file = self.open_beneath(&rel).map_err(not_found)?;
            meta = file.metadata().map_err(not_found)?;
            name = b"index.html".to_vec();
        }
        if !meta.is_file() || name.ends_with(b".partial") {
            return Err(404);
        }
        if !world_readable(&meta) {
            return Err(403);
        }
        Ok(Found {
            file,
            len: meta.len(),
            modified: meta.modified().ok(),
            content_type: content_type(&name),
        })
    }
}

/// Whether anyone may read the file: serve shares only what its owner
/// made public.
fn world_readable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o004 != 0
}

/// A bound server, not yet serving.
pub struct Server {
    listener: TcpListener,
    root: Arc<Root>,
    config: Config,
}

impl Server {
    /// Opens `dir` and listens on `address`.
    pub fn bind(dir: &Path, address: &str, config: Config) -> Result<Server, ServeError> {
        let root = Root::open(dir).map_err(|error| ServeError::Directory {
            dir: dir.to_owned(),
            error,
        })?;
        let addr = resolve_address(address)?;
        let listener = TcpListener::bind(addr).map_err(|error| ServeError::Bind {
            address: address.to_owned(),
            error,
        })?;
        Ok(Server {
            listener,
            root: Arc::new(root),
            config,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until the process ends, writing the access log to `log`.
    pub fn run(self, log: &mut dyn Write) -> Result<(), ServeError> {
        let (conn_tx, conn_rx) = crossbeam_channel::bounded::<TcpStream>(self.config.queue);
        let (log_tx, log_rx) = crossbeam_channel::bounded::<String>(4096);
        for i in 0..self.config.workers {
            let (rx, root, log_tx) = (conn_rx.clone(), self.root.clone(), log_tx.clone());
            let config = self.config;
            thread::Builder::new()
                .name(format!("serve-{i}"))
                .spawn(move || worker(rx, &root, &log_tx, config))
                .map_err(ServeError::Thread)?;
        }
        let listener = self.listener;
        let accept_log = log_tx.clone();
        thread::Builder::new()
            .name("serve-accept".into())
            .spawn(move || acceptor(listener, conn_tx, accept_log))
            .map_err(ServeError::Thread)?;
        drop(log_tx);
        write_log(log_rx, log);
        Ok(())
    }
}

/// Runs `liken serve <dir> [address]`.
pub fn run(dir: &Path, address: &str, out: &mut dyn Write) -> Result<(), ServeError> {
    let server = Server::bind(dir, address, Config::default())?;
    let bound = server.local_addr().map_err(|error| ServeError::Bind {
        address: address.to_owned(),
        error,
    })?;
    let _ = writeln!(out, "serving {} on http://{bound}/", dir.display());
    let _ = out.flush();
    server.run(out)
}

fn write_log(rx: Receiver<String>, out: &mut dyn Write) {
    // A closed stdout must not stop the server: logging just stops.
    let mut healthy = true;
    while let Ok(line) = rx.recv() {
        if healthy {
            healthy = out.write_all(line.as_bytes()).is_ok();
            // Flush when the burst is over, not once per line.
            if healthy && rx.is_empty() {
                healthy = out.flush().is_ok();
            }
        }
    }
}

fn acceptor(listener: TcpListener, conns: Sender<TcpStream>, log: Sender<String>) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => match conns.try_send(stream) {
                Ok(()) => {}
                Err(TrySendError::Full(mut stream)) => {
                    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                    let body = b"every worker is busy; retry shortly\n";
                    let head = http::response_head(
                        503,
                        &[("Retry-After", "1")],
                        body.len() as u64,
                        false,
                        &now(),
                    );
                    let _ = stream
                        .write_all(&head)
                        .and_then(|()| stream.write_all(body));
                    let _ = log.try_send("queue full: answered 503\n".into());
                }
                Err(TrySendError::Disconnected(_)) => return,
            },
            // Out of descriptors or a connection reset before accept:
            // pause briefly instead of spinning, and keep serving.
            Err(e) => {
                let _ = log.try_send(format!("accept: {e}\n"));
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn now() -> String {
    http::http_date(liken_api::Time::from_system(SystemTime::now()))
}

fn worker(rx: Receiver<TcpStream>, root: &Root, log: &Sender<String>, config: Config) {
    for stream in rx {
        let _ = connection(stream, root, log, config);
    }
}

/// A request body larger than this closes the connection with 413.
const MAX_DISCARD: u64 = 1 << 20;

/// What one read bounded by a request's deadline gave.
enum Got {
    /// Bytes arrived.
    Bytes(usize),
    /// The peer closed.
    Closed,
    /// The request's deadline passed first.
    PastDeadline,
}

/// Reads into `buf`, waiting at most until `deadline` (when a request
/// is under way) or the idle timeout (between requests). The socket's
/// timeout restarts with every read, so each read gets only what is left
/// of the one deadline: that is what makes it a deadline for the whole
/// request rather than for each read.
fn read_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
    idle: Duration,
) -> io::Result<Got> {
    loop {
        let wait = match deadline {
            None => idle,
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => left.min(idle),
                _ => return Ok(Got::PastDeadline),
            },
        };
        stream.set_read_timeout(Some(wait))?;
        match stream.read(buf) {
            Ok(0) => return Ok(Got::Closed),
            Ok(n) => return Ok(Got::Bytes(n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if deadline.is_some_and(|d| Instant::now() >= d)
                    && matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
            {
                return Ok(Got::PastDeadline);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Serves one connection until it closes, idles out or errs.
fn connection(
    mut stream: TcpStream,
    root: &Root,
    log: &Sender<String>,
    config: Config,
) -> io::Result<()> {
    stream.set_read_timeout(Some(config.idle))?;
    stream.set_write_timeout(Some(config.write_timeout))?;
    stream.set_nodelay(true)?;
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "-".into());
    let mut buf = vec![0u8; http::MAX_HEAD + 1];
    let mut filled = 0;
    // Set by the first byte of a request, cleared when it has been read.
    let mut deadline: Option<Instant> = None;
    let too_slow = |stream: &mut TcpStream| {
        let _ = log.try_send(format!(
            "{peer} cut off: the request did not arrive within {}s\n",
            config.request_deadline.as_secs()
        ));
        let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
        error_response(stream, 408, false, false)
    };
    loop {
        match http::parse_request(&buf[..filled]) {
            Ok(Parsed::Partial) => {
                if filled == buf.len() {
                    return refuse(&mut stream, 431, &peer, log);
                }
                match read_by(&mut stream, &mut buf[filled..], deadline, config.idle)? {
                    Got::Closed => return Ok(()),
                    Got::PastDeadline => return too_slow(&mut stream),
                    Got::Bytes(n) => {
                        deadline.get_or_insert_with(|| Instant::now() + config.request_deadline);
                        filled += n;
                    }
                }
            }
            Ok(Parsed::Complete(req, used)) => {
                buf.copy_within(used..filled, 0);
                filled -= used;
                // A body nobody reads still has to be consumed, or its
                // bytes would be taken for the next request; it arrives
                // under the same deadline as the head.
                if req.content_length > MAX_DISCARD {
                    return refuse(&mut stream, 413, &peer, log);
                }
                let mut left = req.content_length;
                let take = (left as usize).min(filled);
                buf.copy_within(take..filled, 0);
                filled -= take;
                left -= take as u64;
                let mut sink = [0u8; 16 << 10];
                while left > 0 {
                    let want = (left as usize).min(sink.len());
                    match read_by(&mut stream, &mut sink[..want], deadline, config.idle)? {
                        Got::Closed => return Ok(()),
                        Got::PastDeadline => return too_slow(&mut stream),
                        Got::Bytes(n) => left -= n as u64,
                    }
                }
                if !respond(&mut stream, &req, root, &peer, log, &config)? {
                    return Ok(());
                }
                // A pipelined request already begun starts its clock now.
                deadline = (filled > 0).then(|| Instant::now() + config.request_deadline);
            }
            Err(e) => {
                return refuse(&mut stream, e.status(), &peer, log);
            }
        }
    }
}

/// Answers a request the server cannot read, and closes.
fn refuse(stream: &mut TcpStream, status: u16, peer: &str, log: &Sender<String>) -> io::Result<()> {
    let _ = log.try_send(format!("{peer} - {status} 0\n"));
    error_response(stream, status, false, false)
}

/// Answers one request; returns whether the connection stays open.
fn respond(
    stream: &mut TcpStream,
    req: &Request,
    root: &Root,
    peer: &str,
    log: &Sender<String>,
    config: &Config,
) -> io::Result<bool> {
    let keep = req.keep_alive;
    let line = |status: u16, bytes: u64| {
        let method = match &req.method {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Other(m) => m.as_str(),
        };
        format!("{peer} \"{method} {}\" {status} {bytes}\n", req.target)
    };
    let head_only = match &req.method {
        Method::Get => false,
        Method::Head => true,
        Method::Other(_) => {
            let _ = log.try_send(line(405, 0));
            error_response(stream, 405, keep, false)?;
            return Ok(keep);
        }
    };
    let segments = match urlpath::decode_target(&req.target) {
        Ok(s) => s,
        Err(e) => {
            let _ = log.try_send(line(e.status(), 0));
            error_response(stream, e.status(), keep, head_only)?;
            return Ok(keep);
        }
    };
    let found = match root.find(&segments) {
        Ok(f) => f,
        Err(status) => {
            let _ = log.try_send(line(status, 0));
            error_response(stream, status, keep, head_only)?;
            return Ok(keep);
        }
    };
    let date = now();
    let modified = found
        .modified
        .map(|m| http::http_date(liken_api::Time::from_system(m)))
        .unwrap_or_default();
    let mut fields: Vec<(&str, &str)> = vec![
        ("Content-Type", found.content_type),
        ("Accept-Ranges", "bytes"),
    ];
    if !modified.is_empty() {
        fields.push(("Last-Modified", &modified));
    }
    if keep && !req.http11 {
        fields.push(("Connection", "keep-alive"));
    }
    let content_range;
    let (status, start, len) = match http::decide_range(req.range.as_deref(), found.len) {
        RangeDecision::Full => (200, 0, found.len),
        RangeDecision::Partial { start, end } => {
            content_range = format!("bytes {start}-{end}/{}", found.len);
            fields.push(("Content-Range", &content_range));
            (206, start, end - start + 1)
        }
        RangeDecision::Unsatisfiable => {
            content_range = format!("bytes */{}", found.len);
            fields.retain(|(n, _)| *n != "Content-Type");
            fields.push(("Content-Range", &content_range));
            (416, 0, 0)
        }
    };
    let head = http::response_head(status, &fields, len, keep, &date);
    if head_only || len == 0 {
        stream.write_all(&head)?;
        let _ = log.try_send(line(status, 0));
        return Ok(keep);
    }
    send_head_more(stream, &head)?;
    let sent = send_file(stream, &found.file, start, len, config);
    let bytes = match &sent {
        Ok(n) => *n,
        Err(Cut { sent, .. }) => *sent,
    };
    let _ = log.try_send(line(status, bytes));
    if let Err(cut) = sent {
        if let Some(pace) = cut.pace {
            let why = match pace {
                Pace::TooSlow => "took less than the minimum rate",
                _ => "passed the request deadline",
            };
            let _ = log.try_send(format!(
                "{peer} cut off after {bytes} of {len} bytes: the client {why}\n"
            ));
        }
        return Err(cut.error);
    }
    stream.set_write_timeout(Some(config.write_timeout))?;
    Ok(keep)
}

fn error_response(
    stream: &mut TcpStream,
    status: u16,
    keep: bool,
    head_only: bool,
) -> io::Result<()> {
    let body = format!("{} {}\n", status, http::reason(status));
    let mut fields = vec![("Content-Type", "text/plain; charset=utf-8")];
    if status == 405 {
        fields.push(("Allow", "GET, HEAD"));
    }
    let mut out = http::response_head(status, &fields, body.len() as u64, keep, &now());
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&out)
}

/// Writes the head with MSG_MORE: the kernel holds it back until the
/// body's first bytes join it in one segment.
fn send_head_more(stream: &TcpStream, mut head: &[u8]) -> io::Result<()> {
    while !head.is_empty() {
        match rustix::net::send(stream, head, rustix::net::SendFlags::MORE) {
            Ok(n) => head = &head[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Why a body was not sent whole.
struct Cut {
    /// Bytes sent before it stopped.
    sent: u64,
    /// The pace verdict, when the client was too slow.
    pace: Option<Pace>,
    /// The error that closes the connection.
    error: io::Error,
}

impl Cut {
    fn io(sent: u64, error: io::Error) -> Cut {
        Cut {
            sent,
            pace: None,
            error,
        }
    }

    fn pace(sent: u64, pace: Pace) -> Cut {
        Cut {
            sent,
            pace: Some(pace),
            error: io::Error::new(io::ErrorKind::TimedOut, "the client is too slow"),
        }
    }
}

/// Keeps a body's pace: the start of the body and of the current window.
struct Pacer<'c> {
    config: &'c Config,
    len: u64,
    sent: u64,
    began: Instant,
    window: Instant,
    window_sent: u64,
}

impl<'c> Pacer<'c> {
    fn new(len: u64, config: &'c Config) -> Pacer<'c> {
        let now = Instant::now();
        Pacer {
            config,
            len,
            sent: 0,
            began: now,
            window: now,
            window_sent: 0,
        }
    }

    /// Counts `bytes` just sent; `Err` when the client must be cut off.
    fn record(&mut self, bytes: u64) -> Result<(), Pace> {
        self.window_sent += bytes;
        self.sent += bytes;
        let progress = Progress {
            len: self.len,
            sent: self.sent,
            elapsed: self.began.elapsed(),
            window_sent: self.window_sent,
            window_elapsed: self.window.elapsed(),
        };
        match decide_pace(progress, self.config) {
            Pace::Continue => {
                if progress.window_elapsed >= self.config.window {
                    self.window = Instant::now();
                    self.window_sent = 0;
                }
                Ok(())
            }
            pace => Err(pace),
        }
    }
}

/// Sends `len` bytes of `file` from `start` with sendfile(2), falling
/// back to read and write where sendfile cannot serve this file.
///
/// The pace is checked between calls, so a call must not last much
/// longer than a window. The socket's send timeout (one window) bounds a
/// call only while nothing moves: sendfile splices the file through in
/// pieces, each with a fresh timeout, so a client draining a few bytes at
/// a time would keep one huge call going for hours. Each call therefore
/// carries at most what the minimum rate moves in a window.
fn send_file(
    stream: &mut TcpStream,
    file: &File,
    start: u64,
    len: u64,
    config: &Config,
) -> Result<u64, Cut> {
    let mut pacer = Pacer::new(len, config);
    stream
        .set_write_timeout(Some(config.window))
        .map_err(|e| Cut::io(0, e))?;
    let chunk = (config
        .min_rate
        .saturating_mul(config.window.as_secs().max(1)))
    .max(64 << 10);
    let end = start + len;
    let mut offset = start;
    while offset < end {
        let before = offset;
        let chunk = (end - offset).min(chunk) as usize;
        match rustix::fs::sendfile(&*stream, file, Some(&mut offset), chunk) {
            // The file shrank under us: the promised length cannot be
            // kept, so the connection must close.
            Ok(0) => {
                let e = io::Error::from(io::ErrorKind::UnexpectedEof);
                return Err(Cut::io(offset - start, e));
            }
            Ok(_) => {}
            // The send timeout ran out with nothing taken: the pace
            // decides.
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) if offset == start => {
                return copy_range(stream, file, start, len, &mut pacer);
            }
            Err(e) => return Err(Cut::io(offset - start, e.into())),
        }
        pacer
            .record(offset - before)
            .map_err(|pace| Cut::pace(offset - start, pace))?;
    }
    Ok(len)
}

fn copy_range(
    stream: &mut TcpStream,
    file: &File,
    start: u64,
    len: u64,
    pacer: &mut Pacer<'_>,
) -> Result<u64, Cut> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0;
    while done < len {
        let want = (len - done).min(buf.len() as u64) as usize;
        let n = match file.read_at(&mut buf[..want], start + done) {
            Ok(0) => return Err(Cut::io(done, io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => n,
            Err(e) => return Err(Cut::io(done, e)),
        };
        let mut part = &buf[..n];
        while !part.is_empty() {
            let wrote = match stream.write(part) {
                Ok(0) => return Err(Cut::io(done, io::ErrorKind::WriteZero.into())),
                Ok(w) => w,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    0
                }
                Err(e) => return Err(Cut::io(done, e)),
            };
            part = &part[wrote..];
            done += wrote as u64;
            pacer
                .record(wrote as u64)
                .map_err(|pace| Cut::pace(done, pace))?;
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(
            resolve_address(":8017").unwrap().to_string(),
            "0.0.0.0:8017"
        );
        assert_eq!(resolve_address("127.0.0.1:0").unwrap().port(), 0);
        assert!(resolve_address("8017").is_err());
        assert!(resolve_address("nohost:").is_err());
    }

    #[test]
    fn the_pace_of_a_body() {
        let config = Config {
            min_rate: 1000,
            window: Duration::from_secs(10),
            grace: Duration::from_secs(30),
            ..Config::default()
        };
        let s = Duration::from_secs;
        let p = |len, sent, elapsed, window_sent, window_elapsed| Progress {
            len,
            sent,
            elapsed: s(elapsed),
            window_sent,
            window_elapsed: s(window_elapsed),
        };
        let mb = 1_000_000;
        for (why, progress, want) in [
            ("just started", p(mb, 0, 0, 0, 0), Pace::Continue),
            ("a window not yet over", p(mb, 0, 9, 0, 9), Pace::Continue),
            (
                "a window at the rate",
                p(mb, 10_000, 10, 10_000, 10),
                Pace::Continue,
            ),
            (
                "a window below it",
                p(mb, 9_999, 10, 9_999, 10),
                Pace::TooSlow,
            ),
            ("a stalled client", p(mb, 50_000, 20, 0, 10), Pace::TooSlow),
            (
                "a long window is due more",
                p(mb, 14_000, 25, 14_000, 15),
                Pace::TooSlow,
            ),
            (
                "the last bytes at any pace",
                p(mb, mb, 900, 500, 10),
                Pace::Continue,
            ),
            (
                "but not short of them",
                p(mb, mb - 1, 900, 499, 10),
                Pace::TooSlow,
            ),
            (
                "within the deadline",
                p(100_000, 90_000, 131, 10_000, 10),
                Pace::Continue,
            ),
            (
                "past the deadline",
                p(100_000, 90_000, 132, 50_000, 1),
                Pace::PastDeadline,
            ),
            (
                "a small body gets the grace",
                p(10, 10, 30, 10, 10),
                Pace::Continue,
            ),
        ] {
            assert_eq!(decide_pace(progress, &config), want, "{why}");
        }
    }

    #[test]
    fn content_types() {
        assert_eq!(content_type(b"index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type(b"release.yaml"), "application/yaml");
        assert_eq!(content_type(b"vmlinuz"), "application/octet-stream");
    }
}
