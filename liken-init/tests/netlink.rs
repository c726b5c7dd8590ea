//! The rtnetlink requests against the real kernel, in a network
//! namespace of their own so the host's network is never touched.
//!
//! Runs without the test harness (Cargo.toml: harness = false) because
//! unshare(2) with CLONE_NEWUSER refuses a process with more than one
//! thread, and the harness starts threads. As root it takes a new
//! network namespace alone; otherwise it takes a user namespace too,
//! which grants CAP_NET_ADMIN over the new network namespace. Where
//! neither is allowed (a locked-down container) it says so and fails.

use std::net::Ipv4Addr;

use liken_init::sys::netlink::{Netlink, RealNetlink, Request};
use nix::sched::{CloneFlags, unshare};

fn main() {
    if unshare(CloneFlags::CLONE_NEWNET).is_err() {
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET).expect(
            "cannot make a network namespace (unshare); run as root or allow user namespaces",
        );
    }
    let checks: [(&str, fn()); 1] = [("requests_change_the_kernel", requests_change_the_kernel)];
    // A failed check panics, which ends the run with its message.
    let mut ran = 0;
    for (name, check) in checks {
        check();
        ran += 1;
        println!("test {name} ... ok");
    }
    println!("{ran} passed, 0 failed");
}

/// The main table's routes from /proc/self/net/route: (destination,
/// mask, gateway, interface).
fn routes() -> Vec<(Ipv4Addr, Ipv4Addr, Ipv4Addr, String)> {
    let text = std::fs::read_to_string("/proc/self/net/route").unwrap();
    let hex = |s: &str| Ipv4Addr::from(u32::from_str_radix(s, 16).unwrap().to_le_bytes());
    text.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (hex(f[1]), hex(f[7]), hex(f[2]), f[0].to_owned())
        })
        .collect()
}

/// Whether the local routing table holds `addr` as one of this
/// namespace's own addresses (/proc/self/net/fib_trie lists it as
/// "|-- addr" followed by "/32 host LOCAL").
fn is_local(addr: Ipv4Addr) -> bool {
    let text = std::fs::read_to_string("/proc/self/net/fib_trie").unwrap();
    let mut lines = text.lines();
    let leaf = format!("|-- {addr}");
    while let Some(l) = lines.next() {
        if l.trim() == leaf && lines.next().is_some_and(|n| n.contains("/32 host LOCAL")) {
            return true;
        }
    }
    false
}

fn requests_change_the_kernel() {
    let nl = RealNetlink::new();
    // In a fresh namespace the loopback is index 1 and down.
    let lo = 1;
    let addr = Ipv4Addr::new(10, 9, 8, 7);
    assert!(!is_local(addr), "the address is there before it was added");
    nl.apply(&Request::LinkUp { index: lo }).unwrap();
    let add = Request::AddAddress {
        index: lo,
        address: addr,
        prefix: 8,
    };
    nl.apply(&add).unwrap();
    assert!(is_local(addr), "the added address is not there");
    // Adding it again is the state asked for, not an error.
    nl.apply(&add).unwrap();

    let route = Request::AddRoute {
        index: lo,
        destination: Ipv4Addr::new(172, 20, 0, 0),
        prefix: 16,
        gateway: Ipv4Addr::new(10, 9, 8, 1),
    };
    nl.apply(&route).unwrap();
    nl.apply(&Request::AddRoute {
        index: lo,
        destination: Ipv4Addr::UNSPECIFIED,
        prefix: 0,
        gateway: Ipv4Addr::new(10, 9, 8, 2),
    })
    .unwrap();
    let got = routes();
    assert!(
        got.contains(&(
            Ipv4Addr::new(172, 20, 0, 0),
            Ipv4Addr::new(255, 255, 0, 0),
            Ipv4Addr::new(10, 9, 8, 1),
            "lo".to_owned()
        )),
        "{got:?}"
    );
    assert!(
        got.contains(&(
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::new(10, 9, 8, 2),
            "lo".to_owned()
        )),
        "{got:?}"
    );
    // Replacing a route is allowed too.
    nl.apply(&route).unwrap();

    // The kernel's refusal comes back as its errno.
    let err = nl
        .apply(&Request::LinkUp { index: 999 })
        .expect_err("a missing link was brought up");
    assert_eq!(err.raw_os_error(), Some(nix::libc::ENODEV), "{err}");
    let err = nl
        .apply(&Request::AddRoute {
            index: lo,
            destination: Ipv4Addr::new(172, 30, 0, 0),
            prefix: 16,
            gateway: Ipv4Addr::new(192, 0, 2, 1),
        })
        .expect_err("a route through an unreachable gateway was added");
    assert_eq!(err.raw_os_error(), Some(nix::libc::ENETUNREACH), "{err}");
}
