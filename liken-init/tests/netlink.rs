//! The rtnetlink requests and dumps against the real kernel, in a
//! network namespace of their own so the host's network is never
//! touched.
//!
//! Runs without the test harness (Cargo.toml: harness = false) because
//! unshare(2) with CLONE_NEWUSER refuses a process with more than one
//! thread, and the harness starts threads. As root it takes a new
//! network namespace alone; otherwise it takes a user namespace too,
//! which grants CAP_NET_ADMIN over the new network namespace. Where
//! neither is allowed (a locked-down container) it says so and fails.
//!
//! What the requests did is read back from /proc and /sys, which
//! init's encoders and decoders have no part in; the dumps init decodes
//! are compared with them. Bonds and VLANs need the bonding and 8021q
//! modules, which a build machine's kernel may lack: the QEMU tests
//! (qemu-tests/tests/network.rs) make those on Debian's kernel.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;

use liken_api::network::{AddressOrigin, RouteOrigin};
use liken_init::net::daemon::{decide_carriers, remove_routes, route_request};
use liken_init::net::dhcp::Lease;
use liken_init::net::facts;
use liken_init::net::routes::decide_lease_routes;
use liken_init::sys::netlink::{self, Netlink, Op, RealNetlink, Request, rta};
use nix::sched::{CloneFlags, unshare};

fn main() {
    if unshare(CloneFlags::CLONE_NEWNET).is_err() {
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET).expect(
            "cannot make a network namespace (unshare); run as root or allow user namespaces",
        );
    }
    let checks: [(&str, fn()); 4] = [
        (
            "ipv4_requests_change_the_kernel",
            ipv4_requests_change_the_kernel,
        ),
        ("ipv6_mtu_and_removals", ipv6_mtu_and_removals),
        (
            "dumps_and_notifications_show_the_changes",
            dumps_and_notifications_show_the_changes,
        ),
        (
            "two_leases_keep_their_own_default_routes",
            two_leases_keep_their_own_default_routes,
        ),
    ];
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

/// The IPv6 routes from /proc/self/net/ipv6_route: (destination/len,
/// gateway, interface), addresses as the kernel's 32 hex digits.
fn routes6() -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string("/proc/self/net/ipv6_route").unwrap();
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                format!("{}/{}", f[0], f[1]),
                f[4].to_owned(),
                f[9].to_owned(),
            )
        })
        .collect()
}

/// The IPv6 addresses from /proc/self/net/if_inet6: (address as 32 hex
/// digits, prefix length in hex, interface).
fn addresses6() -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string("/proc/self/net/if_inet6").unwrap();
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_owned(), f[2].to_owned(), f[5].to_owned())
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

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn index(name: &str) -> u32 {
    nix::net::if_::if_nametoindex(name).unwrap()
}

/// `ip -o link show dev <name>`: the namespace's /sys still shows the
/// host's links, as it was mounted there.
fn ip_link(name: &str) -> String {
    let out = Command::new("ip")
        .args(["-o", "link", "show", "dev", name])
        .output()
        .expect("cannot run ip (iproute2); scripts/setup.sh installs it");
    assert!(
        out.status.success(),
        "ip link show: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A veth pair made with iproute2, so the test has a link with a
/// carrier and an MTU to change (a fresh namespace has only lo).
fn veth() -> u32 {
    let out = Command::new("ip")
        .args(["link", "add", "ve0", "type", "veth", "peer", "name", "ve1"])
        .output()
        .expect("cannot run ip (iproute2); scripts/setup.sh installs it");
    assert!(
        out.status.success(),
        "ip link add: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    index("ve0")
}

fn address(op: Op, index: u32, a: &str, prefix: u8) -> Request {
    Request::Address {
        op,
        index,
        address: ip(a),
        prefix,
    }
}

fn route(op: Op, index: u32, to: &str, prefix: u8, via: &str) -> Request {
    Request::Route {
        op,
        index,
        destination: ip(to),
        prefix,
        gateway: Some(ip(via)),
        metric: 0,
        protocol: rta::PROTO_BOOT,
    }
}

fn ipv4_requests_change_the_kernel() {
    let nl = RealNetlink::new();
    // In a fresh namespace the loopback is index 1 and down.
    let lo = 1;
    let addr = Ipv4Addr::new(10, 9, 8, 7);
    assert!(!is_local(addr), "the address is there before it was added");
    nl.apply(&Request::up(lo)).unwrap();
    let add = address(Op::Add, lo, "10.9.8.7", 8);
    nl.apply(&add).unwrap();
    assert!(is_local(addr), "the added address is not there");
    // Adding it again is the state asked for, not an error.
    nl.apply(&add).unwrap();

    let net = route(Op::Add, lo, "172.20.0.0", 16, "10.9.8.1");
    nl.apply(&net).unwrap();
    nl.apply(&route(Op::Add, lo, "0.0.0.0", 0, "10.9.8.2"))
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
    nl.apply(&net).unwrap();
    // Removing it, and removing it again (already so).
    let gone = route(Op::Remove, lo, "172.20.0.0", 16, "10.9.8.1");
    nl.apply(&gone).unwrap();
    nl.apply(&gone).unwrap();
    assert!(
        !routes().iter().any(|r| r.0 == Ipv4Addr::new(172, 20, 0, 0)),
        "{:?}",
        routes()
    );

    // The kernel's refusal comes back as its errno.
    let err = nl
        .apply(&Request::up(999))
        .expect_err("a missing link was brought up");
    assert_eq!(err.raw_os_error(), Some(nix::libc::ENODEV), "{err}");
    let err = nl
        .apply(&route(Op::Add, lo, "172.30.0.0", 16, "192.0.2.1"))
        .expect_err("a route through an unreachable gateway was added");
    assert_eq!(err.raw_os_error(), Some(nix::libc::ENETUNREACH), "{err}");
}

fn ipv6_mtu_and_removals() {
    let nl = RealNetlink::new();
    let ve0 = veth();
    let ve1 = index("ve1");
    nl.apply(&Request::Link {
        index: ve0,
        up: Some(true),
        mtu: Some(9000),
        master: None,
    })
    .unwrap();
    nl.apply(&Request::up(ve1)).unwrap();
    assert!(ip_link("ve0").contains(" mtu 9000 "), "{}", ip_link("ve0"));
    let err = nl
        .apply(&Request::Link {
            index: ve0,
            up: None,
            mtu: Some(70_000),
            master: None,
        })
        .expect_err("an MTU past the veth's limit was taken");
    assert_eq!(err.raw_os_error(), Some(nix::libc::EINVAL), "{err}");

    nl.apply(&address(Op::Add, ve0, "fd50::10", 64)).unwrap();
    let want = (
        "fd500000000000000000000000000010".to_owned(),
        "40".to_owned(),
        "ve0".to_owned(),
    );
    assert!(addresses6().contains(&want), "{:?}", addresses6());
    nl.apply(&route(Op::Add, ve0, "fd99::", 64, "fd50::1"))
        .unwrap();
    let r = (
        "fd990000000000000000000000000000/40".to_owned(),
        "fd500000000000000000000000000001".to_owned(),
        "ve0".to_owned(),
    );
    assert!(routes6().contains(&r), "{:?}", routes6());
    nl.apply(&route(Op::Remove, ve0, "fd99::", 64, "fd50::1"))
        .unwrap();
    assert!(!routes6().contains(&r), "{:?}", routes6());
    nl.apply(&address(Op::Remove, ve0, "fd50::10", 64)).unwrap();
    nl.apply(&address(Op::Remove, ve0, "fd50::10", 64)).unwrap();
    assert!(!addresses6().contains(&want), "{:?}", addresses6());
}

fn dumps_and_notifications_show_the_changes() {
    let nl = RealNetlink::new();
    let ve0 = index("ve0");
    let monitor = netlink::open(netlink::MONITOR_GROUPS).unwrap();
    nl.apply(&address(Op::Add, ve0, "192.168.50.10", 24))
        .unwrap();
    nl.apply(&address(Op::Add, ve0, "fd50::10", 64)).unwrap();
    nl.apply(&route(Op::Add, ve0, "10.99.0.0", 16, "192.168.50.1"))
        .unwrap();
    // The address change was announced to the subscriber.
    let mut buf = [0u8; 8192];
    let n = nix::sys::socket::recv(
        std::os::fd::AsRawFd::as_raw_fd(&monitor),
        &mut buf,
        nix::sys::socket::MsgFlags::MSG_DONTWAIT,
    )
    .expect("no notification of the new address");
    assert!(netlink::messages(&buf[..n]).count() >= 1);

    let kernel = facts::read(&nl).unwrap();
    let f = facts::decide_facts(&kernel, &[]);
    let lo = f.link("lo").unwrap();
    assert!(lo.up, "{lo:?}");
    assert!(
        lo.addresses.iter().any(|a| a.address == "10.9.8.7/8"),
        "{lo:?}"
    );
    let ve = f.link("ve0").unwrap();
    let shown = ip_link("ve0");
    let mac = shown
        .split("link/ether ")
        .nth(1)
        .and_then(|r| r.split(' ').next());
    assert_eq!(ve.mac.as_deref(), mac, "{shown}");
    assert_eq!(ve.mtu, 9000);
    let static_: Vec<&str> = ve
        .addresses
        .iter()
        .filter(|a| a.origin == AddressOrigin::Static)
        .map(|a| a.address.as_str())
        .collect();
    assert_eq!(static_, ["192.168.50.10/24", "fd50::10/64"], "{ve:?}");
    assert!(
        ve.addresses
            .iter()
            .any(|a| a.origin == AddressOrigin::LinkLocal && a.address.starts_with("fe80::")),
        "{ve:?}"
    );
    let r = f
        .routes
        .iter()
        .find(|r| r.to == "10.99.0.0/16")
        .unwrap_or_else(|| panic!("{:?}", f.routes));
    assert_eq!(
        (r.via.as_deref(), r.dev.as_deref(), r.origin),
        (Some("192.168.50.1"), Some("ve0"), RouteOrigin::Static)
    );
    assert!(
        f.routes
            .iter()
            .any(|r| r.to == "192.168.50.0/24" && r.origin == RouteOrigin::Kernel),
        "{:?}",
        f.routes
    );
    // No local-table or link-local routes.
    assert!(
        !f.routes
            .iter()
            .any(|r| r.to.starts_with("fe80") || r.to == "10.9.8.7/32")
    );
}

/// The main table's IPv4 default routes: (gateway, interface, metric).
fn default_routes() -> Vec<(Ipv4Addr, String, u32)> {
    let text = std::fs::read_to_string("/proc/self/net/route").unwrap();
    let hex = |s: &str| Ipv4Addr::from(u32::from_str_radix(s, 16).unwrap().to_le_bytes());
    let mut got: Vec<(Ipv4Addr, String, u32)> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<&str>>())
        .filter(|f| f[1] == "00000000" && f[7] == "00000000")
        .map(|f| (hex(f[2]), f[0].to_owned(), f[6].parse().unwrap()))
        .collect();
    got.sort();
    got
}

/// A veth pair `<name>0`/`<name>1`, both ends up, and `addr` on the
/// first; its index.
fn link_with(name: &str, addr: &str, prefix: u8) -> u32 {
    let (a, b) = (format!("{name}0"), format!("{name}1"));
    let out = Command::new("ip")
        .args(["link", "add", &a, "type", "veth", "peer", "name", &b])
        .output()
        .expect("cannot run ip (iproute2)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nl = RealNetlink::new();
    let i = index(&a);
    nl.apply(&Request::up(i)).unwrap();
    nl.apply(&Request::up(index(&b))).unwrap();
    nl.apply(&address(Op::Add, i, addr, prefix)).unwrap();
    i
}

fn lease(address: &str, prefix: u8, router: &str) -> Lease {
    Lease {
        address: address.parse().unwrap(),
        prefix,
        router: Some(router.parse().unwrap()),
        dns: Vec::new(),
        lease_secs: Some(120),
        server: None,
        t1: None,
        t2: None,
        classless: Vec::new(),
    }
}

/// Puts a lease's routes on, as the network thread does.
fn put_on(nl: &RealNetlink, index: u32, metric: u32, l: &Lease, statics: &[(IpAddr, u8)]) {
    let (routes, _) = decide_lease_routes(l, statics);
    for r in &routes {
        nl.apply(&route_request(Op::Add, index, metric, r))
            .unwrap_or_else(|e| panic!("{r:?}: {e}"));
    }
}

/// Issue 28: two interfaces with leases each keep a default route,
/// and losing one lease leaves the other's (before, the second lease's
/// route replaced the first's, and the first's loss left none). A
/// static default route is not replaced by a lease's, and a /32 lease
/// with a gateway off its subnet gets its default route.
fn two_leases_keep_their_own_default_routes() {
    let nl = RealNetlink::new();
    let flush = || {
        let out = Command::new("ip")
            .args(["route", "flush", "exact", "0.0.0.0/0"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    flush();
    let a = link_with("la", "10.61.0.10", 24);
    let b = link_with("lb", "10.62.0.10", 24);
    let lease_a = lease("10.61.0.10", 24, "10.61.0.1");
    let lease_b = lease("10.62.0.10", 24, "10.62.0.1");
    put_on(&nl, a, 100, &lease_a, &[]);
    put_on(&nl, b, 200, &lease_b, &[]);
    // Both at once, even at one metric (a Machine may give two entries
    // the same routeMetric).
    let c = link_with("lc", "10.63.0.10", 24);
    let lease_c = lease("10.63.0.10", 24, "10.63.0.1");
    put_on(&nl, c, 200, &lease_c, &[]);
    let ga = Ipv4Addr::new(10, 61, 0, 1);
    let gb = Ipv4Addr::new(10, 62, 0, 1);
    let gc = Ipv4Addr::new(10, 63, 0, 1);
    assert_eq!(
        default_routes(),
        [
            (ga, "la0".to_owned(), 100),
            (gb, "lb0".to_owned(), 200),
            (gc, "lc0".to_owned(), 200),
        ]
    );
    // A renewal puts the same routes on again: still one each.
    put_on(&nl, a, 100, &lease_a, &[]);
    assert_eq!(default_routes().len(), 3, "{:?}", default_routes());
    // Lease a is lost: its route goes, the others stay.
    let (routes_a, _) = decide_lease_routes(&lease_a, &[]);
    remove_routes(&nl, a, 100, &routes_a);
    assert_eq!(
        default_routes(),
        [(gb, "lb0".to_owned(), 200), (gc, "lc0".to_owned(), 200)]
    );
    let (routes_c, _) = decide_lease_routes(&lease_c, &[]);
    remove_routes(&nl, c, 200, &routes_c);
    assert_eq!(default_routes(), [(gb, "lb0".to_owned(), 200)]);

    // A static default route on a, then a lease on a: the static one
    // stays, the lease's is left out.
    let static_gw = "10.61.0.254";
    nl.apply(&Request::Route {
        op: Op::Add,
        index: a,
        destination: ip("0.0.0.0"),
        prefix: 0,
        gateway: Some(ip(static_gw)),
        metric: 100,
        protocol: rta::PROTO_BOOT,
    })
    .unwrap();
    let statics = [(ip("0.0.0.0"), 0)];
    put_on(&nl, a, 100, &lease_a, &statics);
    assert_eq!(
        default_routes(),
        [
            (Ipv4Addr::new(10, 61, 0, 254), "la0".to_owned(), 100),
            (gb, "lb0".to_owned(), 200),
        ]
    );

    // The cloud's /32 lease whose gateway is on no subnet of ours: the
    // kernel takes the default route once the on-link route is there.
    flush();
    let d = link_with("ld", "203.0.113.7", 32);
    let mut cloud = lease("203.0.113.7", 32, "100.64.0.1");
    cloud.classless = vec![(Ipv4Addr::UNSPECIFIED, 0, Ipv4Addr::new(100, 64, 0, 1))];
    put_on(&nl, d, 300, &cloud, &[]);
    assert_eq!(
        default_routes(),
        [(Ipv4Addr::new(100, 64, 0, 1), "ld0".to_owned(), 300)]
    );
    let (routes_d, _) = decide_lease_routes(&cloud, &[]);
    remove_routes(&nl, d, 300, &routes_d);
    assert!(default_routes().is_empty(), "{:?}", default_routes());
    assert!(
        !routes().iter().any(|r| r.0 == Ipv4Addr::new(100, 64, 0, 1)),
        "the on-link route to the gateway stayed: {:?}",
        routes()
    );

    // The network thread hears a link lose and regain its carrier
    // (the peer end going down and up) in the kernel's notifications.
    let monitor = netlink::open(netlink::MONITOR_GROUPS).unwrap();
    let peer = index("lb1");
    let mut heard = Vec::new();
    for up in [false, true] {
        nl.apply(&Request::Link {
            index: peer,
            up: Some(up),
            mtu: None,
            master: None,
        })
        .unwrap();
        let started = std::time::Instant::now();
        while !heard.contains(&(b, up)) && started.elapsed() < std::time::Duration::from_secs(5) {
            let mut buf = [0u8; 16384];
            if let Ok(n) = nix::sys::socket::recv(
                std::os::fd::AsRawFd::as_raw_fd(&monitor),
                &mut buf,
                nix::sys::socket::MsgFlags::MSG_DONTWAIT,
            ) {
                heard.extend(decide_carriers(&buf[..n]));
            } else {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
    let of_b: Vec<bool> = heard
        .iter()
        .filter(|(i, _)| *i == b)
        .map(|(_, u)| *u)
        .collect();
    let down = of_b.iter().position(|u| !u).expect("no carrier loss heard");
    assert!(
        of_b[down..].contains(&true),
        "no carrier back heard: {of_b:?}"
    );
}
