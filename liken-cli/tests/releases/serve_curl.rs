//! `liken serve` as curl sees it: ranges, lengths, keep-alive, and no
//! way out of the served directory.

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
    assert!(answer.ends_with("latest: 2026.07.11-001\n"), "{answer}");
}
