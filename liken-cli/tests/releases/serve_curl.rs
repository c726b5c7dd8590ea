//! `liken serve` as curl sees it: ranges, lengths, keep-alive, and no
//! way out of the served directory; and as slow socket clients see it:
//! a client that stalls or trickles below the minimum rate is cut off,
//! and the worker serves others.

use std::io::{Read, Write};
use std::net::TcpStream;

use crate::support::*;

const V: &str = "2026.07.11-001";

fn channel() -> (TempDir, std::path::PathBuf, Vec<u8>) {
    let root = TempDir::new("releases-serve");
    let channel = bundle(root.path(), V, 100_000);
    let system = std::fs::read(channel.join(V).join("liken.sqfs")).unwrap();
    (root, channel, system)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[test]
fn ranges_heads_and_lengths() {
    let (_root, channel, system) = channel();
    let s = Served::start(&channel);
    let url = format!("{}/{V}/liken.sqfs", s.url);
    let len = system.len();

    let (body, _) = curl(&[&url]);
    assert_eq!(body, system, "a GET returns the file");

    let (head, _) = curl(&["-D", "-", "-o", "/dev/null", "-r", "100-199", &url]);
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 206"), "{head}");
    assert_eq!(
        header(&head, "content-range"),
        Some(format!("bytes 100-199/{len}").as_str())
    );
    assert_eq!(header(&head, "content-length"), Some("100"));
    let (body, _) = curl(&["-r", "100-199", &url]);
    assert_eq!(body, &system[100..200]);

    let (body, _) = curl(&["-r", "-10", &url]);
    assert_eq!(body, &system[len - 10..], "suffix range");
    let (body, _) = curl(&["-r", &format!("{}-", len - 5), &url]);
    assert_eq!(body, &system[len - 5..], "open-ended range");
    let (body, _) = curl(&["-r", &format!("{}-{}", len - 3, len + 1000), &url]);
    assert_eq!(body, &system[len - 3..], "an end past the file is clamped");

    let (head, _) = curl(&["-D", "-", "-o", "/dev/null", "-r", &format!("{len}-"), &url]);
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 416"), "{head}");
    assert_eq!(
        header(&head, "content-range"),
        Some(format!("bytes */{len}").as_str())
    );
    assert_eq!(
        status(&["-r", "0-0,5-9", &url]),
        "200",
        "several ranges get the whole file"
    );

    // HEAD: the lengths a GET would have, and no body.
    let (head, _) = curl(&["-I", &url]);
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(
        header(&head, "content-length"),
        Some(len.to_string().as_str())
    );
    assert_eq!(header(&head, "accept-ranges"), Some("bytes"));
    let (head, _) = curl(&["-I", "-r", "0-99", &url]);
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 206"), "{head}");
    assert_eq!(header(&head, "content-length"), Some("100"));

    let doc = format!("{}/{V}/release.yaml", s.url);
    let (head, _) = curl(&["-I", &doc]);
    assert_eq!(
        header(&String::from_utf8(head).unwrap(), "content-type"),
        Some("application/yaml")
    );
    s.wait_log(|l| l.contains(&format!("\"GET /{V}/liken.sqfs\" 206 100")));
}

#[test]
fn keep_alive_reuses_one_connection() {
    let (_root, channel, _) = channel();
    let s = Served::start(&channel);
    let a = format!("{}/{V}/vmlinuz", s.url);
    let b = format!("{}/channel.yaml", s.url);
    let (_, err) = curl(&["-v", "-o", "/dev/null", "-o", "/dev/null", &a, &b]);
    assert!(err.contains("Re-using existing connection"), "{err}");
}

#[test]
fn nothing_outside_the_directory_is_served() {
    let (root, channel, _) = channel();
    let secret = root.path().join("secret.txt");
    std::fs::write(&secret, "outside").unwrap();
    std::os::unix::fs::symlink(&secret, channel.join("out-link")).unwrap();
    std::os::unix::fs::symlink("../secret.txt", channel.join("relative-out")).unwrap();
    std::os::unix::fs::symlink(root.path(), channel.join("dir-out")).unwrap();
    std::os::unix::fs::symlink(format!("{V}/vmlinuz"), channel.join("in-link")).unwrap();
    std::fs::create_dir(channel.join(".hidden")).unwrap();
    std::fs::write(channel.join(".hidden/x"), "x").unwrap();
    let s = Served::start(&channel);
    let u = |p: &str| format!("{}{p}", s.url);

    for (path, want) in [
        ("/../secret.txt", "400"),
        ("/a/../../secret.txt", "400"),
        ("/%2e%2e/secret.txt", "400"),
        ("/%2E%2E/%2e%2e/etc/passwd", "400"),
        ("/..%2fsecret.txt", "400"),
        ("/x%00y", "400"),
        ("/x%zz", "400"),
        ("/out-link", "404"),
        ("/relative-out", "404"),
        ("/dir-out/secret.txt", "404"),
        ("/.hidden/x", "404"),
        ("/missing", "404"),
        ("/in-link", "200"),
    ] {
        assert_eq!(status(&["--path-as-is", &u(path)]), want, "{path}");
    }
    let (body, _) = curl(&["--path-as-is", &u("/in-link")]);
    assert_eq!(
        body,
        std::fs::read(channel.join(V).join("vmlinuz")).unwrap()
    );
    let (body, _) = curl(&["--path-as-is", &u("/../secret.txt")]);
    assert!(!String::from_utf8_lossy(&body).contains("outside"));
}

#[test]
fn directories_are_never_listed() {
    let (_root, channel, _) = channel();
    let s = Served::start(&channel);
    assert_eq!(status(&[&format!("{}/", s.url)]), "404");
    assert_eq!(status(&[&format!("{}/{V}/", s.url)]), "404");
    assert_eq!(status(&[&format!("{}/{V}", s.url)]), "404");
    std::fs::write(channel.join(V).join("index.html"), "<p>release page</p>").unwrap();
    let (body, _) = curl(&[&format!("{}/{V}/", s.url)]);
    assert_eq!(body, b"<p>release page</p>");
    let (head, _) = curl(&["-I", &format!("{}/{V}/", s.url)]);
    assert!(String::from_utf8(head).unwrap().contains("text/html"));
}

fn raw(addr: &str, request: &[u8]) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    c.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn methods_and_malformed_requests() {
    let (_root, channel, _) = channel();
    let s = Served::start(&channel);
    assert_eq!(
        status(&["-X", "POST", &format!("{}/channel.yaml", s.url)]),
        "405"
    );
    assert_eq!(
        status(&["-X", "DELETE", &format!("{}/channel.yaml", s.url)]),
        "405"
    );
    for (req, want) in [
        (&b"garbage\r\n\r\n"[..], "HTTP/1.1 400"),
        (b"GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 400"),
        (
            b"GET /channel.yaml HTTP/2.0\r\nHost: x\r\n\r\n",
            "HTTP/1.1 505",
        ),
        (
            b"GET /channel.yaml HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 501",
        ),
        (
            b"GET /ch\x00annel.yaml HTTP/1.1\r\nHost: x\r\n\r\n",
            "HTTP/1.1 400",
        ),
    ] {
        let answer = raw(&s.addr, req);
        assert!(
            answer.starts_with(want),
            "{:?} -> {answer:?}",
            String::from_utf8_lossy(req)
        );
    }
    // Two pipelined requests on one connection, the second closing it.
    let answer = raw(
        &s.addr,
        b"HEAD /channel.yaml HTTP/1.1\r\nHost: x\r\n\r\nGET /channel.yaml HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(answer.matches("HTTP/1.1 200 OK").count(), 2, "{answer}");
    // The GET's body, whole, after the HEAD's headers: channel.yaml ends
    // with its serial and expiry.
    assert!(
        answer.contains("\nlatest: 2026.07.11-001\nserial: 1\nexpires: ") && answer.ends_with('\n'),
        "{answer}"
    );
}

/// Files their owner kept private are refused; downloads in progress
/// (fetch's `.<name>.partial`, or `<name>.partial` from older fetches)
/// are never served.
#[test]
fn only_world_readable_finished_files_are_served() {
    use std::os::unix::fs::PermissionsExt;
    let (_root, channel, system) = channel();
    let s = Served::start(&channel);
    let dir = channel.join(V);
    let url = format!("{}/{V}/liken.sqfs", s.url);
    assert_eq!(status(&[&url]), "200");
    let private = std::fs::Permissions::from_mode(0o600);
    std::fs::set_permissions(dir.join("liken.sqfs"), private.clone()).unwrap();
    assert_eq!(status(&[&url]), "403");
    assert_eq!(status(&["-I", &url]), "403");
    s.wait_log(|l| l.contains(&format!("\"GET /{V}/liken.sqfs\" 403 0")));
    std::fs::set_permissions(
        dir.join("liken.sqfs"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    assert_eq!(status(&[&url]), "403", "group-readable is not enough");
    std::fs::set_permissions(
        dir.join("liken.sqfs"),
        std::fs::Permissions::from_mode(0o444),
    )
    .unwrap();
    assert_eq!(curl(&[&url]).0, system, "world-readable again");

    // A directory's index.html follows the same rule.
    std::fs::write(dir.join("index.html"), "<p>release</p>").unwrap();
    std::fs::set_permissions(dir.join("index.html"), private).unwrap();
    assert_eq!(status(&[&format!("{}/{V}/", s.url)]), "403");

    for name in ["vmlinuz.partial", ".vmlinuz.partial"] {
        std::fs::write(dir.join(name), b"half a kernel").unwrap();
        assert_eq!(status(&[&format!("{}/{V}/{name}", s.url)]), "404", "{name}");
    }
}

/// A client that stops reading, and one that reads 10 KiB/s (below the
/// 32 KiB/s minimum), each hold a worker only until the pace check's
/// windows show it: both are cut off, said so in the log, and see their
/// connection end well short of the file; a fast client meanwhile gets
/// the whole file.
#[test]
fn slow_clients_are_cut_off() {
    use std::time::{Duration, Instant};
    let root = TempDir::new("releases-serve-slow");
    // Far larger than the loopback socket buffers, so the server must
    // wait for the client.
    let channel = bundle(root.path(), V, 32 << 20);
    // The artifact is the image with its dm-verity tree appended.
    let size = std::fs::metadata(channel.join(V).join("liken.sqfs"))
        .unwrap()
        .len() as usize;
    let s = Served::start(&channel);
    let request = format!("GET /{V}/liken.sqfs HTTP/1.1\r\nHost: x\r\n\r\n");
    let began = Instant::now();
    let open = |what: &str| {
        let mut c = TcpStream::connect(&s.addr).unwrap();
        c.write_all(request.as_bytes()).unwrap();
        eprintln!("{what} client connected");
        c
    };
    let stalled = open("stalled");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickle = std::thread::spawn({
        let mut c = open("trickling");
        let done = done.clone();
        move || {
            // 2 KiB every 200 ms until the server has cut it off, then
            // the rest at once (what was in flight, then the end).
            c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let mut buf = [0u8; 2048];
            let mut got = 0usize;
            loop {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => return got,
                    Ok(n) => got += n,
                }
                if !done.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    });
    // A fast client is served meanwhile.
    let (body, err) = curl(&["--max-time", "60", &format!("{}/{V}/liken.sqfs", s.url)]);
    assert_eq!(body.len(), size, "{err}");

    let cut = |l: &str| l.contains("cut off after") && l.contains(&format!("of {size} bytes"));
    // Data still fits the socket buffers (several MiB on loopback) for a
    // window or two after the client slows, then each window must show
    // the rate: about 40 s here, with room for a loaded machine.
    let within = Duration::from_secs(120);
    s.wait_log_within(within, |l| cut(l) && l.contains("minimum rate"));
    let deadline = Instant::now() + within;
    while s.log().iter().filter(|l| cut(l)).count() < 2 {
        assert!(Instant::now() < deadline, "{:?}", s.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = began.elapsed();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(took < Duration::from_secs(120), "cut off after {took:?}");

    // What the stalled client finds when it reads at last: the bytes that
    // were in flight, then the end.
    let mut stalled = stalled;
    stalled
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut rest = Vec::new();
    let _ = stalled.read_to_end(&mut rest);
    assert!(
        rest.len() < size / 2,
        "the stalled client got {} bytes",
        rest.len()
    );
    let got = trickle.join().unwrap();
    assert!(got < size / 2, "the trickling client got {got} bytes");
    for l in s.log().iter().filter(|l| cut(l)) {
        assert!(
            l.contains("the client took less than the minimum rate"),
            "{l}"
        );
    }
}

/// A log that the server, running on its own thread, writes into and
/// the test reads.
#[derive(Clone, Default)]
struct SharedLog(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Write for SharedLog {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sends `first` at once, then `request` a byte a second until the
/// server closes; returns what the server answered and when it closed,
/// from the first byte.
fn trickle(
    addr: std::net::SocketAddr,
    first: &[u8],
    request: &[u8],
) -> (String, std::time::Duration) {
    use std::time::{Duration, Instant};
    let mut c = TcpStream::connect(addr).unwrap();
    // The read is the pause between bytes, and notices the close.
    c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let began = Instant::now();
    c.write_all(first).unwrap();
    let mut answer = Vec::new();
    let mut sent = 0;
    while began.elapsed() < Duration::from_secs(60) {
        if sent < request.len() && c.write_all(&request[sent..=sent]).is_ok() {
            sent += 1;
        }
        let mut buf = [0u8; 512];
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break,
        }
    }
    (
        String::from_utf8_lossy(&answer).into_owned(),
        began.elapsed(),
    )
}

/// One deadline bounds a whole request, head and body, however many
/// reads it takes: a client sending its head a byte a second, and one
/// sending a short head and then its body a byte a second, are each
/// answered 408 and closed at the deadline (3 s here), while a third
/// client is served at once throughout. Real sockets against the
/// server the `serve` command runs, with its deadline shortened.
#[test]
fn a_request_trickled_a_byte_a_second_is_cut_off_at_its_deadline() {
    use liken_cli::releases::serve::{Config, Server};
    use std::time::{Duration, Instant};
    let (_root, channel, _) = channel();
    let deadline = Duration::from_secs(3);
    let config = Config {
        workers: 3,
        request_deadline: deadline,
        ..Config::default()
    };
    let server = Server::bind(&channel, "127.0.0.1:0", config).unwrap();
    let addr = server.local_addr().unwrap();
    let log = SharedLog::default();
    let mut server_log = log.clone();
    std::thread::spawn(move || server.run(&mut server_log));

    let head = std::thread::spawn(move || {
        trickle(
            addr,
            b"",
            b"GET /channel.yaml HTTP/1.1\r\nHost: x\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n",
        )
    });
    // The head whole at once, then the body trickles.
    let body = std::thread::spawn(move || {
        trickle(
            addr,
            b"GET /channel.yaml HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
            &[b'x'; 100],
        )
    });
    // While both hold a worker, another client is served promptly, again
    // and again.
    let began = Instant::now();
    while began.elapsed() < deadline + Duration::from_secs(1) {
        let asked = Instant::now();
        let answer = raw(
            &addr.to_string(),
            b"GET /channel.yaml HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(
            asked.elapsed() < Duration::from_secs(1),
            "{:?}",
            asked.elapsed()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    for (what, t) in [("head", head), ("body", body)] {
        let (answer, took) = t.join().unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 408 Request Timeout"),
            "{what}: {answer:?}"
        );
        assert!(
            took >= deadline - Duration::from_millis(200)
                && took < deadline + Duration::from_secs(3),
            "the {what} trickle was closed after {took:?}, the deadline is {deadline:?}"
        );
    }
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert_eq!(
        text.matches("cut off: the request did not arrive within 3s")
            .count(),
        2,
        "{text}"
    );
}
