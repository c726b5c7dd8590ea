//! A network namespace a test makes for a machine's network cards:
//! tap devices QEMU attaches to (`-netdev tap`), the addresses, bridges
//! and VLANs on the other side of them, Debian's dnsmasq and chronyd
//! serving there, and UDP listeners that record the datagrams the
//! machine sends.
//!
//! Everything is made with iproute2 inside the namespace, so the host's
//! own network is never touched; the namespace and what runs in it go
//! when the value is dropped. It needs root (CAP_NET_ADMIN and
//! /dev/net/tun), which `make test` has.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use crate::check;

/// A network namespace, deleted on drop.
pub struct Netns {
    /// Its name (`ip netns list`).
    pub name: String,
}

impl Netns {
    /// A fresh namespace for `test`, with its loopback up.
    pub fn new(test: &str) -> Netns {
        let name = format!("liken-{test}-{}", std::process::id());
        // A namespace left by a killed run of this same process id.
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        check(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// Runs `ip <args>` in the namespace, failing the test if it fails.
    pub fn ip(&self, args: &[&str]) {
        check(Command::new("ip").arg("-n").arg(&self.name).args(args));
    }

    /// A command that runs `program` in the namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// A tap device for QEMU (`-netdev tap,ifname=<name>`), up, with
    /// `addresses` (IPv6 ones without duplicate address detection, so a
    /// listener can bind them at once).
    pub fn tap(&self, name: &str, addresses: &[&str]) {
        self.ip(&["tuntap", "add", "dev", name, "mode", "tap"]);
        self.ip(&["link", "set", name, "up"]);
        self.address(name, addresses);
    }

    /// Adds `addresses` to `dev`.
    pub fn address(&self, dev: &str, addresses: &[&str]) {
        for a in addresses {
            let mut args = vec!["addr", "add", a, "dev", dev];
            if a.contains(':') {
                args.push("nodad");
            }
            self.ip(&args);
        }
    }

    /// A path inside the namespace's mount of /run/netns.
    fn handle(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.name)
    }

    /// Listens on each of `addresses` (UDP) inside the namespace; every
    /// datagram arrives on the receiver as a [`Datagram`].
    pub fn listen(&self, addresses: &[SocketAddr]) -> Receiver<Datagram> {
        let (tx, rx) = channel();
        for &at in addresses {
            let tx: Sender<Datagram> = tx.clone();
            let handle = self.handle();
            let (ready_tx, ready_rx) = channel();
            std::thread::spawn(move || {
                // A thread's network namespace is its own: entering it
                // here leaves the test's other threads where they are.
                let ns = std::fs::File::open(&handle)
                    .unwrap_or_else(|e| panic!("open {}: {e}", handle.display()));
                nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                    .unwrap_or_else(|e| panic!("setns {}: {e}", handle.display()));
                let socket = std::net::UdpSocket::bind(at)
                    .unwrap_or_else(|e| panic!("cannot listen on {at} in the namespace: {e}"));
                let _ = ready_tx.send(());
                let mut buf = [0u8; 1500];
                while let Ok((n, from)) = socket.recv_from(&mut buf) {
                    let d = Datagram {
                        to: at,
                        from,
                        text: String::from_utf8_lossy(&buf[..n]).into_owned(),
                        at: Instant::now(),
                    };
                    if tx.send(d).is_err() {
                        return;
                    }
                }
            });
            ready_rx
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("the listener on {at} did not start"));
        }
        rx
    }

    /// Starts Debian's dnsmasq in the namespace as `server` says, its
    /// lease file, log and pid file in `dir` ([`Dnsmasq::leases`],
    /// [`Dnsmasq::log`]).
    pub fn dnsmasq(&self, dir: &Path, server: &Dnsmasq<'_>) -> Daemon {
        self.spawn("dnsmasq", &server.args(dir))
    }

    /// Starts `program` with `args` in the namespace, killed when the
    /// returned value is dropped.
    pub fn spawn(&self, program: &str, args: &[String]) -> Daemon {
        let child = self
            .command(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {program}: {e}; scripts/setup.sh installs it")
            });
        Daemon(child)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// How dnsmasq serves the namespace: DHCPv4 with its shortest lease,
/// 2 minutes (`man dnsmasq`), and the server's own T1 and T2 (options 58
/// and 59), which is how a test makes the machine renew every few
/// seconds without a lease shorter than dnsmasq grants; DNS on every
/// interface it binds.
pub struct Dnsmasq<'a> {
    /// The interfaces it binds (`--interface`, with `--bind-interfaces`).
    pub interfaces: &'a [&'a str],
    /// The DHCPv4 range, `<first>,<last>` in a /24.
    pub range: &'a str,
    /// T1 and T2, seconds after a grant.
    pub t1: u32,
    /// See `t1`.
    pub t2: u32,
    /// `--dhcp-authoritative`: a REQUEST for a lease it does not hold is
    /// refused at once rather than ignored.
    pub authoritative: bool,
    /// Further arguments (router advertisements, DHCPv6, names).
    pub extra: &'a [&'a str],
}

impl Dnsmasq<'_> {
    /// Its lease file in `dir`: one line per lease, the expiry first.
    pub fn leases(dir: &Path) -> PathBuf {
        dir.join("leases")
    }

    /// Its log in `dir`, each DHCP exchange in it (`--log-dhcp`).
    pub fn log(dir: &Path) -> PathBuf {
        dir.join("dnsmasq.log")
    }

    /// Its command line, its files in `dir`.
    fn args(&self, dir: &Path) -> Vec<String> {
        let mut args: Vec<String> = [
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--user=root",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--log-dhcp",
        ]
        .iter()
        .chain(self.extra)
        .map(|s| s.to_string())
        .collect();
        args.extend(self.interfaces.iter().map(|i| format!("--interface={i}")));
        args.push(format!("--dhcp-option=option:T1,{}", self.t1));
        args.push(format!("--dhcp-option=option:T2,{}", self.t2));
        args.push(format!("--dhcp-range={},255.255.255.0,2m", self.range));
        args.push(format!("--dhcp-leasefile={}", Self::leases(dir).display()));
        args.push(format!("--pid-file={}", dir.join("dnsmasq.pid").display()));
        args.push(format!("--log-facility={}", Self::log(dir).display()));
        if self.authoritative {
            args.push("--dhcp-authoritative".into());
        }
        args
    }
}

/// A process running in a namespace, killed on drop.
pub struct Daemon(pub Child);

impl Daemon {
    /// Kills it now and waits for it.
    pub fn stop(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One datagram a listener received.
#[derive(Clone, Debug)]
pub struct Datagram {
    /// The listening address it was sent to.
    pub to: SocketAddr,
    /// Its source address, as the machine's kernel chose it.
    pub from: SocketAddr,
    /// Its payload.
    pub text: String,
    /// When it arrived.
    pub at: Instant,
}

/// Waits up to `within` for a datagram that satisfies `want`, keeping
/// the others in `seen`; `None` when none came.
pub fn wait_datagram(
    rx: &Receiver<Datagram>,
    seen: &mut Vec<Datagram>,
    within: Duration,
    want: impl Fn(&Datagram) -> bool,
) -> Option<Datagram> {
    if let Some(d) = seen.iter().find(|d| want(d)) {
        return Some(d.clone());
    }
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(d) => {
                seen.push(d.clone());
                if want(&d) {
                    return Some(d);
                }
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
        }
    }
}
