//! Debian's nginx serving a directory on loopback ports: the static web
//! server a release channel is published on, for the tests of the
//! programs that read channels (the cluster operator's poller, the
//! machine operator's downloads, `liken fetch`).
//!
//! [`Nginx::start`] serves plain http. [`Nginx::start_https`] also
//! serves https on a second port with a serving certificate for
//! 127.0.0.1 and localhost ([`crate::pki::mint_serving`] mints one with
//! its CA), and on the one host answers `/to-https/<path>` with a
//! redirect up to `https://…/<path>` and `/to-http/<path>` with one
//! down to `http://…/<path>`, for tests of how a client follows them.
//!
//! It runs in the foreground as a child of the test ([`crate::spawn`]),
//! its configuration, pid file, logs and temporary directories in a
//! directory of the test's, and stops when dropped. The access log
//! records each request's scheme first (`https "GET /x HTTP/1.1" 206
//! 1234`), so a test can tell which port a client used. nginx's workers
//! drop root for an unprivileged user: the served tree must be readable
//! by others, which [`Nginx::start`] makes it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::pki::Pair;
use crate::spawn::{Proc, spawn};

/// A running nginx.
pub struct Nginx {
    /// `http://127.0.0.1:<port>`: the root's URL.
    pub url: String,
    /// `https://127.0.0.1:<port>`, when started with a certificate.
    pub https: Option<String>,
    access_log: PathBuf,
    proc: Option<Proc>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free loopback port for nginx: {e}"))
}

/// Makes `p` and everything below it readable (directories searchable)
/// by nginx's unprivileged workers.
fn readable_by_workers(p: &Path) {
    let meta = std::fs::metadata(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
    let mode = if meta.is_dir() { 0o755 } else { 0o644 };
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("making {} readable: {e}", p.display()));
    if meta.is_dir() {
        for e in std::fs::read_dir(p).unwrap_or_else(|e| panic!("listing {}: {e}", p.display())) {
            readable_by_workers(&e.unwrap_or_else(|e| panic!("listing: {e}")).path());
        }
    }
}

impl Nginx {
    /// Serves `root` over http, keeping nginx's own files in `dir`.
    pub fn start(dir: &Path, root: &Path) -> Nginx {
        Nginx::launch(dir, root, None)
    }

    /// Serves `root` over http and over https with `tls` (a serving
    /// certificate for 127.0.0.1), keeping nginx's own files in `dir`.
    pub fn start_https(dir: &Path, root: &Path, tls: &Pair) -> Nginx {
        Nginx::launch(dir, root, Some(tls))
    }

    fn launch(dir: &Path, root: &Path, tls: Option<&Pair>) -> Nginx {
        let work = dir.join("nginx");
        std::fs::create_dir_all(&work)
            .unwrap_or_else(|e| panic!("creating {}: {e}", work.display()));
        readable_by_workers(root);
        let w = work.display();
        let http = free_port();
        let https = tls.map(|pair| {
            // The master reads the key before it drops root: 0600 is enough.
            for (name, pem) in [
                ("server.crt", &pair.cert_pem),
                ("server.key", &pair.key_pem),
            ] {
                std::fs::write(work.join(name), pem)
                    .unwrap_or_else(|e| panic!("writing {name}: {e}"));
            }
            std::fs::set_permissions(work.join("server.key"), PermissionsExt::from_mode(0o600))
                .unwrap_or_else(|e| panic!("server.key: {e}"));
            free_port()
        });
        let tls_lines = match https {
            Some(s) => format!(
                "    listen 127.0.0.1:{s} ssl;\n    ssl_certificate {w}/server.crt;\n\
                 ssl_certificate_key {w}/server.key;\n\
                 location /to-http/ {{ rewrite ^/to-http/(.*)$ http://127.0.0.1:{http}/$1 redirect; }}\n\
                 location /to-https/ {{ rewrite ^/to-https/(.*)$ https://127.0.0.1:{s}/$1 permanent; }}\n"
            ),
            None => String::new(),
        };
        let conf = format!(
            "daemon off;\nworker_processes 1;\npid {w}/nginx.pid;\nerror_log {w}/error.log;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  default_type application/octet-stream;\n\
             log_format scheme '$scheme \"$request\" $status $body_bytes_sent';\n\
             access_log {w}/access.log scheme;\n\
             client_body_temp_path {w}/body;\n  proxy_temp_path {w}/proxy;\n\
             fastcgi_temp_path {w}/fastcgi;\n  uwsgi_temp_path {w}/uwsgi;\n  scgi_temp_path {w}/scgi;\n\
             server {{\n    listen 127.0.0.1:{http};\n    root {};\n{tls_lines}  }}\n}}\n",
            root.display()
        );
        std::fs::write(work.join("nginx.conf"), conf)
            .unwrap_or_else(|e| panic!("writing nginx.conf: {e}"));
        let mut cmd = Command::new("nginx");
        cmd.arg("-c")
            .arg(work.join("nginx.conf"))
            .arg("-p")
            .arg(&work)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let proc = spawn("nginx", cmd)
            .expect("nginx is missing: run scripts/setup.sh (it installs Debian's nginx)");
        let end = Instant::now() + Duration::from_secs(20);
        for port in std::iter::once(http).chain(https) {
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    Instant::now() < end,
                    "nginx did not listen on {port}: {}",
                    std::fs::read_to_string(work.join("error.log")).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Nginx {
            url: format!("http://127.0.0.1:{http}"),
            https: https.map(|s| format!("https://127.0.0.1:{s}")),
            access_log: work.join("access.log"),
            proc: Some(proc),
        }
    }

    /// The access log so far, a request a line, its scheme first.
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(&self.access_log).unwrap_or_default()
    }

    /// Stops the server (what it served becomes unreachable).
    pub fn stop(&mut self) {
        self.proc.take();
    }
}
