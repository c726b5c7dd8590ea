//! liken-workload: the upstream node test's workload, a tiny HTTP
//! server in an image of its own (`liken.sh/liken-upstream-workload`,
//! `make upstream-images`), so a Deployment has real containers for the
//! kubelet to start, probe and stop.
//!
//! It listens on `0.0.0.0:<port>` (the first argument, else 8080) on the
//! pod's own network, where the kubelet's readiness probe reaches it
//! through the pod network the CNI bridge made, and answers every
//! request `200 OK` with the pod's hostname (its name), so a probe that
//! passes proves the container runs in the pod's network namespace and
//! UTS namespace. It stops with status 0 on SIGTERM or SIGINT at once,
//! as the kubelet asks a container to stop, instead of waiting out the
//! grace period: a process that is PID 1 of its namespace gets no
//! default action for a signal it does not handle.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};

/// The port when no argument names one.
const DEFAULT_PORT: u16 = 8080;

/// The port from the first argument, else the default.
fn decide_port(arg: Option<&str>) -> Result<u16, String> {
    match arg {
        None => Ok(DEFAULT_PORT),
        Some(a) => a
            .parse()
            .map_err(|_| format!("{a:?} is not a port number (1-65535)")),
    }
}

/// The whole answer to any request.
fn response(hostname: &str) -> String {
    let body = format!("liken-workload on {hostname}\n");
    format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: \
         close\r\n\r\n{body}",
        body.len()
    )
}

fn serve(mut s: TcpStream, answer: &str) {
    // The request is read only so that the client is not reset by a
    // close with unread bytes; its content does not matter.
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = [0u8; 1024];
    let _ = s.read(&mut buf);
    let _ = s.write_all(answer.as_bytes());
}

fn main() {
    let port = decide_port(std::env::args().nth(1).as_deref()).unwrap_or_else(|e| {
        eprintln!("liken-workload: {e}");
        std::process::exit(2)
    });
    // Blocked before any thread starts, so every thread inherits the
    // mask and the signal stays pending for the one that waits.
    let mut stop = SigSet::empty();
    stop.add(Signal::SIGTERM);
    stop.add(Signal::SIGINT);
    if let Err(e) = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&stop), None) {
        eprintln!("liken-workload: cannot block SIGTERM and SIGINT: {e}");
        std::process::exit(1);
    }
    std::thread::spawn(move || {
        let s = stop.wait();
        eprintln!("liken-workload: stopping on {s:?}");
        std::process::exit(0);
    });
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "an unknown host".into());
    let answer = response(&hostname);
    let listener = TcpListener::bind(("0.0.0.0", port)).unwrap_or_else(|e| {
        eprintln!("liken-workload: cannot listen on 0.0.0.0:{port}: {e}");
        std::process::exit(1)
    });
    eprintln!("liken-workload: {hostname} serving on 0.0.0.0:{port}");
    for s in listener.incoming().flatten() {
        serve(s, &answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_from_the_first_argument() {
        assert_eq!(decide_port(None), Ok(8080));
        assert_eq!(decide_port(Some("9000")), Ok(9000));
        assert!(decide_port(Some("http")).is_err());
        assert!(decide_port(Some("70000")).is_err());
    }

    #[test]
    fn answers_with_its_length() {
        let r = response("web-1");
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.0 200 OK\r\n"));
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        assert_eq!(body, "liken-workload on web-1\n");
    }
}
