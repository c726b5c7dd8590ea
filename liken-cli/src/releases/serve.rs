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
}

impl Default for Config {
    fn default() -> Config {
        Config {
            workers: 128,
            queue: 1024,
            idle: Duration::from_secs(15),
            write_timeout: Duration::from_secs(60),
        }
    }
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
        if !meta.is_file() {
            return Err(404);
        }
        Ok(Found {
            file,
            len: meta.len(),
            modified: meta.modified().ok(),
            content_type: content_type(&name),
        })
    }
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

/// The longest a request head may take to arrive. The idle timeout
/// restarts with every read, so without this a client trickling a byte
/// at a time could hold a worker forever.
const HEAD_DEADLINE: Duration = Duration::from_secs(30);

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
    let mut head_started = Instant::now();
    loop {
        match http::parse_request(&buf[..filled]) {
            Ok(Parsed::Partial) => {
                if filled == buf.len() {
                    return refuse(&mut stream, 431, &peer, log);
                }
                if filled > 0 && head_started.elapsed() > HEAD_DEADLINE {
                    return Ok(());
                }
                match stream.read(&mut buf[filled..]) {
                    Ok(0) => return Ok(()),
                    Ok(n) => {
                        if filled == 0 {
                            head_started = Instant::now();
                        }
                        filled += n;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(Parsed::Complete(req, used)) => {
                head_started = Instant::now();
                buf.copy_within(used..filled, 0);
                filled -= used;
                // A body nobody reads still has to be consumed, or its
                // bytes would be taken for the next request.
                if req.content_length > MAX_DISCARD {
                    return refuse(&mut stream, 413, &peer, log);
                }
                let mut left = req.content_length;
                let take = (left as usize).min(filled);
                buf.copy_within(take..filled, 0);
                filled -= take;
                left -= take as u64;
                if left > 0 {
                    io::copy(&mut (&mut stream).take(left), &mut io::sink())?;
                }
                if !respond(&mut stream, &req, root, &peer, log)? {
                    return Ok(());
                }
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
    let sent = send_file(stream, &found.file, start, len);
    let _ = log.try_send(line(status, *sent.as_ref().unwrap_or(&0)));
    sent?;
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

/// Sends `len` bytes of `file` from `start` with sendfile(2), falling
/// back to read and write where sendfile cannot serve this file.
fn send_file(stream: &mut TcpStream, file: &File, start: u64, len: u64) -> io::Result<u64> {
    let end = start + len;
    let mut offset = start;
    while offset < end {
        let chunk = (end - offset).min(1 << 30) as usize;
        match rustix::fs::sendfile(&*stream, file, Some(&mut offset), chunk) {
            // The file shrank under us: the promised length cannot be
            // kept, so the connection must close.
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) if offset == start => {
                return copy_range(stream, file, start, len);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(len)
}

fn copy_range(stream: &mut TcpStream, file: &File, start: u64, len: u64) -> io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0;
    while done < len {
        let want = (len - done).min(buf.len() as u64) as usize;
        let n = file.read_at(&mut buf[..want], start + done)?;
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        stream.write_all(&buf[..n])?;
        done += n as u64;
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
    fn content_types() {
        assert_eq!(content_type(b"index.html"), "text/html; charset=utf-8");
        assert_eq!(content_type(b"release.yaml"), "application/yaml");
        assert_eq!(content_type(b"vmlinuz"), "application/octet-stream");
    }
}
