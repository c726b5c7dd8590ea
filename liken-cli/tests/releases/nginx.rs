//! `liken fetch` from Debian's nginx, a static web server liken did not
//! write, over plain http and over https, so fetch is not proven only
//! against `liken serve`'s own reading of HTTP.
//!
//! The test mints a CA and a server certificate for 127.0.0.1 with
//! openssl and starts nginx on two loopback ports (http and https) with
//! a generated configuration serving a bundled channel. Over https,
//! fetch trusts the server through `-ca` and nothing else: without it
//! (the built-in public roots) and with another CA it refuses, and
//! leaves no release behind. A partial download resumes from nginx with
//! a Range request, which nginx's access log shows as a 206 of the rest.
//! nginx's own redirects on one host are followed from http up to https
//! and refused from https down to plain http, before any plain request
//! is made (the access log records the scheme of each request).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use liken_testenv::scratch::{ok, tool};

use crate::support::*;

const V: &str = "2026.07.11-001";

/// A CA and a server certificate for 127.0.0.1 signed by it, minted
/// with openssl into `dir`: (ca.crt, server.crt, server.key).
fn mint(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let p = |f: &str| dir.join(format!("{name}-{f}"));
    let (ca_key, ca_crt, key, csr, crt, ext) = (
        p("ca.key"),
        p("ca.crt"),
        p("server.key"),
        p("server.csr"),
        p("server.crt"),
        p("server.ext"),
    );
    let s = |p: &Path| p.display().to_string();
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-days",
        "2",
        "-subj",
        &format!("/CN={name} test CA"),
        "-keyout",
        &s(&ca_key),
        "-out",
        &s(&ca_crt),
    ]);
    openssl(&[
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        &s(&key),
        "-out",
        &s(&csr),
    ]);
    std::fs::write(
        &ext,
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n\
         extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        &s(&csr),
        "-CA",
        &s(&ca_crt),
        "-CAkey",
        &s(&ca_key),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &s(&ext),
        "-out",
        &s(&crt),
    ]);
    (ca_crt, crt, key)
}

/// Runs openssl with `args`, failing the test unless it succeeds.
fn openssl(args: &[&str]) {
    let mut c = tool("openssl");
    c.args(args);
    ok(c);
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// nginx serving `root` on a plain and a TLS loopback port; stopped
/// (the process group's master) when dropped.
struct Nginx {
    child: Child,
    http: String,
    https: String,
    access_log: PathBuf,
}

impl Nginx {
    fn start(work: &Path, root: &Path, crt: &Path, key: &Path) -> Nginx {
        let dir = work.join("nginx");
        std::fs::create_dir_all(&dir).unwrap();
        let (http, https) = (free_port(), free_port());
        let d = |f: &str| dir.join(f).display().to_string();
        let conf = format!(
            "daemon off;\nmaster_process on;\nworker_processes 1;\npid {pid};\n\
             error_log {err};\nevents {{ worker_connections 64; }}\n\
             http {{\n  default_type application/octet-stream;\n\
             log_format scheme '$scheme \"$request\" $status $body_bytes_sent';\n\
             access_log {acc} scheme;\n\
             client_body_temp_path {t}/body;\n  proxy_temp_path {t}/proxy;\n\
             fastcgi_temp_path {t}/fastcgi;\n  uwsgi_temp_path {t}/uwsgi;\n\
             scgi_temp_path {t}/scgi;\n\
             server {{\n    listen 127.0.0.1:{http};\n\
             listen 127.0.0.1:{https} ssl;\n    ssl_certificate {crt};\n\
             ssl_certificate_key {key};\n    root {root};\n\
             location /to-http/ {{ rewrite ^/to-http/(.*)$ http://127.0.0.1:{http}/$1 redirect; }}\n\
             location /to-https/ {{ rewrite ^/to-https/(.*)$ https://127.0.0.1:{https}/$1 permanent; }}\n\
             }}\n}}\n",
            pid = d("nginx.pid"),
            err = d("error.log"),
            acc = d("access.log"),
            t = dir.display(),
            crt = crt.display(),
            key = key.display(),
            root = root.display(),
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        // nginx's workers drop root for an unprivileged user, who must be
        // able to read the channel and the key.
        for p in [work, root] {
            chmod_tree(p);
        }
        let child = tool("nginx")
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-p")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start nginx: {e}; scripts/setup.sh installs it"));
        let n = Nginx {
            child,
            http: format!("http://127.0.0.1:{http}"),
            https: format!("https://127.0.0.1:{https}"),
            access_log: dir.join("access.log"),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", https)).is_err()
            || std::net::TcpStream::connect(("127.0.0.1", http)).is_err()
        {
            assert!(
                Instant::now() < deadline,
                "nginx did not listen within 20 s; see {}",
                dir.join("error.log").display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        n
    }

    fn access_log(&self) -> String {
        std::fs::read_to_string(&self.access_log).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM to the master stops its workers too (fast shutdown).
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

/// Makes a tree world-readable (directories searchable).
fn chmod_tree(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(p).unwrap();
    let mode = if meta.is_dir() { 0o755 } else { 0o644 };
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    if meta.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            chmod_tree(&e.unwrap().path());
        }
    }
}

fn fetch(source: &str, dest: &Path, ca: Option<&Path>) -> (bool, String, String) {
    let dest = dest.display().to_string();
    let ca = ca.map(|p| p.display().to_string());
    let mut args = vec!["fetch"];
    if let Some(ca) = &ca {
        args.extend(["-ca", ca]);
    }
    args.extend([source, "latest", &dest]);
    run(&args)
}

fn same_tree(a: &Path, b: &Path) {
    assert_eq!(tree(a), tree(b));
    for f in tree(a) {
        assert!(
            std::fs::read(a.join(&f)).unwrap() == std::fs::read(b.join(&f)).unwrap(),
            "{f} differs"
        );
    }
}

#[test]
fn fetch_from_nginx_over_http_and_https_with_an_explicit_ca() {
    let work = TempDir::new("releases-nginx");
    let channel = bundle(work.path(), V, 700_000);
    let (ca, crt, key) = mint(work.path(), "nginx");
    let (other_ca, _, _) = mint(work.path(), "other");
    let nginx = Nginx::start(work.path(), &channel, &crt, &key);

    // Plain http: byte for byte.
    let dest = work.path().join("over-http");
    let (ok, out, err) = fetch(&nginx.http, &dest, None);
    assert!(ok, "{out}{err}");
    same_tree(&channel, &dest);

    // https without -ca: the built-in roots do not know this CA.
    let dest = work.path().join("no-ca");
    let (ok, out, err) = fetch(&nginx.https, &dest, None);
    assert!(!ok, "fetch trusted a certificate no root signed: {out}");
    assert!(err.starts_with("liken: "), "{err}");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    assert!(!dest.join(V).join("release.yaml").exists());
    // Nor with another CA.
    let (ok, out, err) = fetch(&nginx.https, &dest, Some(&other_ca));
    assert!(!ok, "fetch trusted a certificate another CA signed: {out}");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    assert!(!dest.join(V).join("release.yaml").exists());
    // A -ca file that holds no certificate is a clear error.
    let (ok, _, err) = fetch(&nginx.https, &dest, Some(&key));
    assert!(!ok);
    assert!(err.contains("-ca ") && err.contains("certificate"), "{err}");

    // With the CA that signed it: byte for byte.
    let dest = work.path().join("over-https");
    let (ok, out, err) = fetch(&nginx.https, &dest, Some(&ca));
    assert!(ok, "{out}{err}");
    same_tree(&channel, &dest);

    // A resume from nginx over https asks for the rest only.
    let full = std::fs::read(channel.join(V).join("liken.sqfs")).unwrap();
    let dest = work.path().join("resumed");
    std::fs::create_dir_all(dest.join(V)).unwrap();
    let prefix = 250_000;
    std::fs::write(dest.join(V).join(".liken.sqfs.partial"), &full[..prefix]).unwrap();
    let (ok, out, err) = fetch(&nginx.https, &dest, Some(&ca));
    assert!(ok, "{out}{err}");
    same_tree(&channel, &dest);
    let log = nginx.access_log();
    let line = log
        .lines()
        .rfind(|l| l.contains(&format!("GET /{V}/liken.sqfs ")))
        .unwrap_or_else(|| panic!("nginx logged no GET of liken.sqfs:\n{log}"));
    assert!(
        line.starts_with("https ") && line.ends_with(&format!("\" 206 {}", full.len() - prefix)),
        "the resume was not a range of the rest over https: {line}"
    );

    // nginx sends plain http up to https on the same host: followed,
    // for channel.yaml and every file, byte for byte.
    let dest = work.path().join("upgraded");
    let (ok, out, err) = fetch(&format!("{}/to-https", nginx.http), &dest, Some(&ca));
    assert!(ok, "{out}{err}");
    same_tree(&channel, &dest);

    // nginx sends https down to plain http on the same host: refused
    // before the plain request is made, and nothing is written.
    let before = nginx.access_log().lines().count();
    let dest = work.path().join("downgraded");
    let (ok, out, err) = fetch(&format!("{}/to-http", nginx.https), &dest, Some(&ca));
    assert!(!ok, "fetch followed https down to http: {out}");
    assert!(
        err.contains(&format!(
            "the server redirects to {}/channel.yaml, which liken does not follow",
            nginx.http
        )) && err.contains("it leaves https for plain http"),
        "{err}"
    );
    assert!(!dest.exists(), "something was written: {:?}", tree(&dest));
    let log = nginx.access_log();
    let after: Vec<&str> = log.lines().skip(before).collect();
    assert!(
        after.len() == 1
            && after[0].starts_with("https \"GET /to-http/channel.yaml HTTP/1.1\" 302 "),
        "nginx saw other requests than the one redirected: {after:?}"
    );
}
