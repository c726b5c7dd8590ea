//! Debian's nginx serving a directory on a loopback port: the static web
//! server a release channel is published on, for the tests of the
//! programs that read channels (the cluster operator's poller, the
//! machine operator's downloads).
//!
//! It runs in the foreground as a child of the test ([`crate::spawn`]),
//! its configuration, pid file, logs and temporary directories in a
//! directory of the test's, and stops when dropped.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::spawn::{Proc, spawn};

/// A running nginx.
pub struct Nginx {
    /// `http://127.0.0.1:<port>`: the root's URL.
    pub url: String,
    proc: Option<Proc>,
}

impl Nginx {
    /// Serves `root`, keeping nginx's own files in `dir`.
    pub fn start(dir: &Path, root: &Path) -> Nginx {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("no free loopback port for nginx: {e}"));
        let work = dir.join("nginx");
        std::fs::create_dir_all(&work)
            .unwrap_or_else(|e| panic!("creating {}: {e}", work.display()));
        let w = work.display();
        let conf = format!(
            "daemon off;\nworker_processes 1;\npid {w}/nginx.pid;\nerror_log {w}/error.log;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  default_type application/octet-stream;\n  access_log {w}/access.log;\n\
             client_body_temp_path {w}/body;\n  proxy_temp_path {w}/proxy;\n\
             fastcgi_temp_path {w}/fastcgi;\n  uwsgi_temp_path {w}/uwsgi;\n  scgi_temp_path {w}/scgi;\n\
             server {{ listen 127.0.0.1:{port}; root {}; }}\n}}\n",
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
        let end = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < end,
                "nginx did not listen on {port}: {}",
                std::fs::read_to_string(work.join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Nginx {
            url: format!("http://127.0.0.1:{port}"),
            proc: Some(proc),
        }
    }

    /// Stops the server (what it served becomes unreachable).
    pub fn stop(&mut self) {
        self.proc.take();
    }
}
