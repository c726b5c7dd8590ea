//! `liken fetch` from `liken serve`: round trips, resumes, and every
//! way a download can be wrong, each leaving nothing under a final name;
//! unpinned releases said so, redirects kept on their host, downloads in
//! progress dot-named and never opened through a planted link or FIFO,
//! and a channel's names escaped before they reach a terminal.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;

use crate::support::*;

const V: &str = "2026.07.11-001";

/// Fetches without checking signatures: these tests are about the
/// transfer; signed.rs is about signatures.
fn fetch(source: &str, version: &str, dest: &Path, digest: Option<&str>) -> (bool, String, String) {
    let dest = dest.display().to_string();
    let mut args = vec!["fetch", "-unsigned"];
    if let Some(d) = digest {
        args.extend(["-digest", d]);
    }
    args.extend([source, version, dest.as_str()]);
    run(&args)
}

fn digest_of(channel: &Path) -> String {
    format!(
        "sha256:{}",
        sha256_hex(&std::fs::read(channel.join(V).join("release.yaml")).unwrap())
    )
}

#[test]
fn round_trip_is_byte_identical() {
    let root = TempDir::new("releases-fetch-rt");
    let channel = bundle(root.path(), V, 300_000);
    let s = Served::start(&channel);
    let dest = root.path().join("mirror");

    let (ok, out, err) = fetch(&s.url, "latest", &dest, None);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains(&format!("digest: {}", digest_of(&channel))),
        "{out}"
    );
    // Without -digest the release is unpinned, and fetch says so before
    // the first artifact and beside the catalog entry.
    let warned = out.find("warning: this release is unpinned").expect(&out);
    assert!(warned < out.find("\nfetching ").unwrap(), "{out}");
    assert!(out.contains(&digest_of(&channel)[..20]), "{out}");
    assert!(
        out.contains("(unpinned: compare it with a catalog you trust)"),
        "{out}"
    );
    assert_eq!(tree(&dest), tree(&channel));
    for f in tree(&channel) {
        assert_eq!(
            std::fs::read(channel.join(&f)).unwrap(),
            std::fs::read(dest.join(&f)).unwrap(),
            "{f}"
        );
    }

    // Pinned by the right digest, again: everything is already there.
    let (ok, out, err) = fetch(&s.url, V, &dest, Some(&digest_of(&channel)));
    assert!(ok, "{out}{err}");
    assert_eq!(out.matches("already present, verified").count(), 9, "{out}");
    assert!(!out.contains("unpinned"), "{out}");

    // The mirror is a channel itself: serve it and fetch from it.
    let s2 = Served::start(&dest);
    let again = root.path().join("second");
    let (ok, out, err) = fetch(
        &format!("{}/", s2.url),
        V,
        &again,
        Some(&digest_of(&channel)),
    );
    assert!(ok, "{out}{err}");
    assert_eq!(tree(&again), tree(&channel));
}

#[test]
fn a_flipped_byte_in_any_artifact_fails_and_leaves_nothing() {
    let root = TempDir::new("releases-fetch-flip");
    let channel = bundle(root.path(), V, 50_000);
    let s = Served::start(&channel);
    for (i, file) in FILES.iter().enumerate() {
        let path = channel.join(V).join(file);
        let good = std::fs::read(&path).unwrap();
        let mut bad = good.clone();
        bad[good.len() / 2] ^= 0x01;
        std::fs::write(&path, &bad).unwrap();

        let dest = root.path().join(format!("dest-{i}"));
        let (ok, out, err) = fetch(&s.url, V, &dest, None);
        std::fs::write(&path, &good).unwrap();
        assert!(!ok, "{file}: {out}");
        assert!(
            err.contains(&format!("{V}/{file} has sha256"))
                && err.contains("release.yaml says")
                && err.contains("was deleted"),
            "{file}: {err}"
        );
        let rel = dest.join(V);
        assert!(!rel.join(file).exists(), "{file} under its final name");
        assert!(
            !rel.join(format!(".{file}.partial")).exists(),
            ".{file}.partial kept"
        );
        assert!(
            !rel.join("release.yaml").exists(),
            "release.yaml written for a failed fetch"
        );
        assert!(!dest.join("channel.yaml").exists());
        // Artifacts before the bad one were verified and kept; none after.
        for later in &FILES[i + 1..] {
            assert!(!rel.join(later).exists());
        }
    }
}

#[test]
fn a_wrong_digest_writes_nothing() {
    let root = TempDir::new("releases-fetch-digest");
    let channel = bundle(root.path(), V, 10_000);
    let s = Served::start(&channel);
    let dest = root.path().join("dest");
    let wrong = format!("sha256:{}", "0".repeat(64));
    let (ok, _, err) = fetch(&s.url, V, &dest, Some(&wrong));
    assert!(!ok);
    assert!(err.contains(&format!("but -digest pins {wrong}")), "{err}");
    assert!(err.contains("nothing was written"), "{err}");
    assert!(!dest.exists());

    let (ok, _, err) = fetch(&s.url, V, &dest, Some("sha256:abc"));
    assert!(!ok && err.contains("64 lower-case hex digits"), "{err}");
    let (ok, _, err) = fetch(&s.url, "2026.13.01-001", &dest, None);
    assert!(!ok && err.contains("or \"latest\""), "{err}");
    let (ok, _, err) = fetch(&s.url, "2026.07.11-002", &dest, None);
    assert!(!ok && err.contains("404 Not Found"), "{err}");
    assert!(!dest.exists());
}

/// Reads one request's head from `conn`; returns its first line.
fn request_line(conn: &std::net::TcpStream) -> Option<String> {
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
            return Some(line);
        }
    }
}

/// A server that answers every request from `dir` but sends only half of
/// `cut`'s bytes (with the full Content-Length) and then closes.
fn truncating_server(dir: std::path::PathBuf, cut: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let Some(line) = request_line(&conn) else {
                continue;
            };
            let path = line
                .split(' ')
                .nth(1)
                .unwrap_or("/")
                .trim_start_matches('/');
            match std::fs::read(dir.join(path)) {
                Ok(body) => {
                    let send = if path.ends_with(cut) {
                        &body[..body.len() / 2]
                    } else {
                        &body[..]
                    };
                    let _ = write!(
                        conn,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(send);
                }
                Err(_) => {
                    let _ = conn.write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                }
            }
        }
    });
    format!("http://{addr}")
}

#[test]
fn a_truncated_download_keeps_only_the_partial_and_resumes() {
    let root = TempDir::new("releases-fetch-trunc");
    let channel = bundle(root.path(), V, 200_000);
    let source = truncating_server(channel.clone(), "liken.sqfs");
    let dest = root.path().join("dest");
    let (ok, out, err) = fetch(&source, V, &dest, None);
    assert!(!ok, "{out}");
    assert!(err.contains("liken.sqfs stopped after"), "{err}");
    assert!(
        err.contains("running the same command again resumes it"),
        "{err}"
    );
    let rel = dest.join(V);
    assert!(!rel.join("liken.sqfs").exists());
    assert!(!rel.join("release.yaml").exists());
    let partial = std::fs::read(rel.join(".liken.sqfs.partial")).unwrap();
    let full = std::fs::read(channel.join(V).join("liken.sqfs")).unwrap();
    assert_eq!(partial, &full[..partial.len()]);

    // The same command against an honest server finishes the job.
    let s = Served::start(&channel);
    let (ok, out, err) = fetch(&s.url, V, &dest, None);
    assert!(ok, "{out}{err}");
    assert_eq!(std::fs::read(rel.join("liken.sqfs")).unwrap(), full);
    assert!(out.contains("resumed after"), "{out}");
}

#[test]
fn a_release_listing_more_bytes_than_the_file_fails_cleanly() {
    let root = TempDir::new("releases-fetch-short");
    let channel = bundle(root.path(), V, 10_000);
    let doc = channel.join(V).join("release.yaml");
    let text = std::fs::read_to_string(&doc).unwrap();
    let real = std::fs::metadata(channel.join(V).join("vmlinuz"))
        .unwrap()
        .len();
    let text = text.replacen(
        &format!("size: {real}\n"),
        &format!("size: {}\n", real + 100),
        1,
    );
    std::fs::write(&doc, text).unwrap();
    let s = Served::start(&channel);
    let dest = root.path().join("dest");
    let (ok, _, err) = fetch(&s.url, V, &dest, None);
    assert!(!ok);
    assert!(
        err.contains(&format!("stopped after {real} of {} bytes", real + 100)),
        "{err}"
    );
    assert!(!dest.join(V).join("vmlinuz").exists());
}

#[test]
fn a_path_escaping_artifact_name_is_refused() {
    let root = TempDir::new("releases-fetch-escape");
    let channel = root.path().join("channel");
    std::fs::create_dir_all(channel.join(V)).unwrap();
    std::fs::write(root.path().join("escape"), "x").unwrap();
    for file in ["../escape", "/etc/passwd", "a/b", ".."] {
        std::fs::write(
            channel.join(V).join("release.yaml"),
            format!(
                "apiVersion: liken.sh/v1alpha1\nkind: Release\nversion: {V}\nartifacts:\n\
                 - name: kernel\n  file: {file:?}\n  sha256: {}\n  size: 1\n",
                "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
            ),
        )
        .unwrap();
        let s = Served::start(&channel);
        let dest = root.path().join("dest");
        let (ok, _, err) = fetch(&s.url, V, &dest, None);
        assert!(!ok);
        assert!(
            err.contains("must be a plain name in the release directory"),
            "{file}: {err}"
        );
        assert!(!dest.exists(), "{file}: something was written");
    }
}

#[test]
fn a_resume_asks_only_for_the_rest() {
    let root = TempDir::new("releases-fetch-resume");
    let channel = bundle(root.path(), V, 1 << 20);
    let full = std::fs::read(channel.join(V).join("liken.sqfs")).unwrap();
    let dest = root.path().join("dest");
    std::fs::create_dir_all(dest.join(V)).unwrap();
    let prefix = 300_000;
    std::fs::write(dest.join(V).join(".liken.sqfs.partial"), &full[..prefix]).unwrap();

    let s = Served::start(&channel);
    let (ok, out, err) = fetch(&s.url, V, &dest, None);
    assert!(ok, "{out}{err}");
    assert_eq!(
        std::fs::read(dest.join(V).join("liken.sqfs")).unwrap(),
        full
    );
    assert!(!dest.join(V).join(".liken.sqfs.partial").exists());
    let line = s.wait_log(|l| l.contains(&format!("/{V}/liken.sqfs\"")));
    assert!(
        line.ends_with(&format!("\" 206 {}", full.len() - prefix)),
        "only the rest is served: {line}"
    );
    assert_eq!(
        s.log().iter().filter(|l| l.contains("liken.sqfs")).count(),
        1,
        "{:?}",
        s.log()
    );

    // A corrupt prefix is caught by the whole-file digest and deleted.
    let dest2 = root.path().join("dest2");
    std::fs::create_dir_all(dest2.join(V)).unwrap();
    let mut bad = full[..prefix].to_vec();
    bad[10] ^= 0xff;
    std::fs::write(dest2.join(V).join(".liken.sqfs.partial"), &bad).unwrap();
    let (ok, _, err) = fetch(&s.url, V, &dest2, None);
    assert!(!ok && err.contains("liken.sqfs has sha256"), "{err}");
    assert!(!dest2.join(V).join("liken.sqfs").exists());
    assert!(!dest2.join(V).join(".liken.sqfs.partial").exists());
}

#[test]
fn a_terminal_gets_a_progress_bar_and_a_pipe_does_not() {
    let root = TempDir::new("releases-fetch-tty");
    let channel = bundle(root.path(), V, 2 << 20);
    let s = Served::start(&channel);
    let dest = root.path().join("dest");
    // script(1) (bsdutils, essential in Debian) gives the command a pty.
    let command = format!(
        "{} fetch -unsigned {} {V} {}",
        env!("CARGO_BIN_EXE_liken"),
        s.url,
        dest.display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("liken.sqfs [") && shown.contains("] 100%"),
        "{shown}"
    );
    assert!(shown.contains('\r'), "the bar redraws in place: {shown}");

    let (ok, _, err) = fetch(&s.url, V, &root.path().join("piped"), None);
    assert!(ok);
    assert!(
        !err.contains('\r') && !err.contains("%]"),
        "no bar in a pipe: {err}"
    );
}

/// A server that answers every request with `status` and a Location of
/// `to` followed by the request's path.
fn redirecting_server(status: u16, to: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let Some(line) = request_line(&conn) else {
                continue;
            };
            let path = line.split(' ').nth(1).unwrap_or("/");
            let _ = write!(
                conn,
                "HTTP/1.1 {status} Moved\r\nLocation: {to}{path}\r\nContent-Length: 0\r\n\
                 Connection: close\r\n\r\n"
            );
        }
    });
    format!("http://{addr}")
}

#[test]
fn redirects_are_followed_only_on_the_same_host() {
    let root = TempDir::new("releases-fetch-redirect");
    let channel = bundle(root.path(), V, 20_000);
    let s = Served::start(&channel);
    let port = s.addr.rsplit(':').next().unwrap().to_owned();

    // Same host (another port): followed, for documents and artifacts.
    let dest = root.path().join("same-host");
    let source = redirecting_server(301, format!("http://127.0.0.1:{port}"));
    let (ok, out, err) = fetch(&source, V, &dest, Some(&digest_of(&channel)));
    assert!(ok, "{out}{err}");
    assert_eq!(tree(&dest), tree(&channel));

    // Another host name for the same machine: refused before anything
    // is written, and a redirect loop ends.
    for (status, to, why) in [
        (302, format!("http://localhost:{port}"), "another host"),
        (307, format!("https://127.0.0.2:{port}"), "another host"),
    ] {
        let dest = root.path().join(format!("refused-{status}"));
        let source = redirecting_server(status, to.clone());
        let (ok, out, err) = fetch(&source, V, &dest, None);
        assert!(!ok, "{out}");
        assert!(
            err.contains(&format!("the server redirects to {to}/{V}/release.yaml"))
                && err.contains("which liken does not follow")
                && err.contains(why),
            "{err}"
        );
        assert!(!dest.exists(), "{to}: something was written");
    }
    let looping = redirecting_server(302, String::new());
    let (ok, _, err) = fetch(&looping, V, &root.path().join("loop"), None);
    assert!(!ok && err.contains("more than 5 redirects"), "{err}");
}

#[test]
fn a_planted_link_or_fifo_is_never_written_through() {
    let root = TempDir::new("releases-fetch-nofollow");
    let channel = bundle(root.path(), V, 20_000);
    let s = Served::start(&channel);
    let dest = root.path().join("dest");
    let rel = dest.join(V);
    std::fs::create_dir_all(&rel).unwrap();
    let victim = root.path().join("victim");
    std::fs::write(&victim, b"keep me").unwrap();
    std::os::unix::fs::symlink(&victim, rel.join(".vmlinuz.partial")).unwrap();
    let (ok, out, err) = fetch(&s.url, V, &dest, None);
    assert!(!ok, "{out}");
    assert!(
        err.contains("opening") && err.contains(".vmlinuz.partial"),
        "{err}"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");

    std::fs::remove_file(rel.join(".vmlinuz.partial")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        rel.join(".vmlinuz.partial"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let (ok, out, err) = fetch(&s.url, V, &dest, None);
    assert!(!ok, "{out}");
    assert!(err.contains("not a regular file"), "{err}");
    assert!(!rel.join("vmlinuz").exists());

    std::fs::remove_file(rel.join(".vmlinuz.partial")).unwrap();
    let (ok, out, err) = fetch(&s.url, V, &dest, None);
    assert!(ok, "{out}{err}");
    assert!(
        std::fs::read_dir(&rel).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".partial")),
        "no download left in progress"
    );
}

#[test]
fn a_channels_names_reach_the_terminal_escaped() {
    let root = TempDir::new("releases-fetch-names");
    let channel = bundle(root.path(), V, 10_000);
    let dir = channel.join(V);
    // A file name that would reverse the text after it, and a C1 CSI.
    let odd = "vmlinuz\u{202e}zip.exe\u{9b}2J";
    std::fs::rename(dir.join("vmlinuz"), dir.join(odd)).unwrap();
    let doc = dir.join("release.yaml");
    let text = std::fs::read_to_string(&doc).unwrap();
    // YAML takes the C1 control only as an escape.
    let yaml_name = r#""vmlinuz\u202Ezip.exe\x9B2J""#;
    std::fs::write(
        &doc,
        text.replacen("file: vmlinuz\n", &format!("file: {yaml_name}\n"), 1),
    )
    .unwrap();
    let s = Served::start(&channel);
    let dest = root.path().join("dest");
    let (ok, out, err) = fetch(&s.url, V, &dest, None);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("kernel vmlinuz\\u{202e}zip.exe\\u{9b}2J:"),
        "{out}"
    );
    for text in [&out, &err] {
        assert!(
            !text.contains('\u{202e}') && !text.contains('\u{9b}'),
            "{text:?}"
        );
    }
    assert!(
        dest.join(V).join(odd).exists(),
        "the file keeps its real name"
    );

    // An error quoting the document: an unknown field with an escape
    // sequence in its name.
    std::fs::write(
        &doc,
        std::fs::read_to_string(&doc).unwrap() + "\"\\e]0;owned\\a\": 1\n",
    )
    .unwrap();
    let (ok, _, err) = fetch(&s.url, V, &root.path().join("dest2"), None);
    assert!(!ok);
    assert!(err.contains("\\u{1b}]0;owned\\u{7}"), "{err:?}");
    assert!(!err.contains('\x1b') && !err.contains('\x07'), "{err:?}");
}
