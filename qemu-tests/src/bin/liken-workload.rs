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
//!
//! `liken-workload facts` instead reports, once, what the node's host
//! gives its kubelet and containerd, as a pod on that node sees it (with
//! the host's PID and network namespaces and the host paths the pod
//! mounts; `qemu_tests::node_facts` writes the pod and judges the
//! report): the host's mounts that hold `/` and this container's
//! snapshot, this container's root, the pod's cgroup as the kubelet made
//! it, the bridge and forwarding sysctls, br_netfilter, the machine-id
//! and a digest of the node password. It writes the report to
//! /dev/termination-log, which the kubelet returns in the pod's status
//! (up to 4096 bytes), so the host reads it from the API without the
//! kubelet's own port; and exits 0.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use qemu_tests::node_facts::{holds, upperdir};

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

/// The mount point of a /proc/<pid>/mountinfo line (its fifth field).
fn mount_point(line: &str) -> Option<&str> {
    line.split(' ').nth(4)
}

/// The report: one `key value` line per fact, an `error` line for each
/// fact that could not be read.
fn facts(pod_uid: &str) -> String {
    let mut out = String::new();
    let mut line = |key: &str, value: Result<String, String>| match value {
        Ok(v) => out.push_str(&format!("{key} {}\n", v.trim())),
        Err(e) => out.push_str(&format!("error {key}: {e}\n")),
    };
    let read = |path: &str| std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"));

    let own = read("/proc/self/mountinfo").unwrap_or_default();
    let root = own.lines().rfind(|l| mount_point(l) == Some("/"));
    line(
        "own-root",
        root.map(str::to_owned)
            .ok_or_else(|| "no / in /proc/self/mountinfo".into()),
    );
    let upper = root.and_then(upperdir).unwrap_or("/");
    // PID 1 is the host's init (the pod shares the host's PID namespace).
    match read("/proc/1/mountinfo") {
        Ok(host) => {
            for l in host
                .lines()
                .filter(|l| mount_point(l).is_some_and(|p| holds(p, upper)))
            {
                line("host-mount", Ok(l.to_owned()));
            }
        }
        Err(e) => line("host-mount", Err(e)),
    }
    let cgroup = "/host/cgroup";
    line(
        "cgroup-subtree-control",
        read(&format!("{cgroup}/cgroup.subtree_control")),
    );
    let pod = format!("{cgroup}/kubepods/pod{pod_uid}");
    line(
        "pod-cgroup-controllers",
        read(&format!("{pod}/cgroup.controllers")),
    );
    line("pod-memory-max", read(&format!("{pod}/memory.max")));
    line("pod-cpu-max", read(&format!("{pod}/cpu.max")));
    for key in ["net.bridge.bridge-nf-call-iptables", "net.ipv4.ip_forward"] {
        line(
            &format!("sysctl {key}"),
            read(&format!("/proc/sys/{}", key.replace('.', "/"))),
        );
    }
    line(
        "module br_netfilter",
        Ok(
            if std::path::Path::new("/sys/module/br_netfilter").exists() {
                "present".into()
            } else {
                "absent".into()
            },
        ),
    );
    line("machine-id", read("/host/machine-id"));
    line(
        "node-password-sha256",
        std::fs::read("/host/node/password")
            .map(|p| liken_api::hash::sha256(&p).to_string())
            .map_err(|e| format!("/host/node/password: {e}")),
    );
    out
}

fn report_facts() -> ! {
    let uid = std::env::var("POD_UID").unwrap_or_default();
    let report = facts(&uid);
    print!("{report}");
    if let Err(e) = std::fs::write("/dev/termination-log", &report) {
        eprintln!("liken-workload: cannot write /dev/termination-log: {e}");
        std::process::exit(1);
    }
    std::process::exit(0)
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("facts") {
        report_facts();
    }
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
    fn finds_its_root_by_the_mount_point() {
        let own = "1200 1100 0:90 / / rw,relatime master:1 - overlay overlay \
                   rw,upperdir=/var/lib/c/snapshots/9/fs,workdir=/var/lib/c/snapshots/9/work";
        assert_eq!(mount_point(own), Some("/"));
        assert_eq!(
            mount_point("22 1 8:5 / /var rw - ext4 /dev/vda5 rw"),
            Some("/var")
        );
        assert_eq!(upperdir(own), Some("/var/lib/c/snapshots/9/fs"));
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
