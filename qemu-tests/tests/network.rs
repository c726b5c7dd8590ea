//! The network step on a booted machine, asserted from inside it: the
//! stand-in (`liken.standin=net:<targets>`, qemu-tests/src/standin/net.rs)
//! prints what a program there reads from /proc and /sys and sends
//! datagrams that must arrive, so these tests check the network init
//! made, not init's account of it.
//!
//! - [`dhcp_on_the_user_network`]: QEMU's user network with the stand-in's
//!   default `run`: a hostname, a static route and name server besides
//!   the lease's, and two sysctls, as a service reads them from the
//!   kernel's files, and a datagram the test receives on the host.
//! - [`the_user_network_seen_from_inside`]: QEMU's user network (its own
//!   DHCP and router advertisements): address, routes of both families,
//!   resolv.conf, hostname and sysctls as the kernel has them, and a
//!   datagram to the host.
//! - [`leases_ipv6_vlans_and_bonds_in_a_namespace`]: a network
//!   namespace the test makes, with tap devices, Debian's dnsmasq (DHCPv4
//!   with a 2-minute lease, router advertisements, DHCPv6, DNS) and
//!   chronyd: the lease renewed, moved, expired and recovered, released
//!   at shutdown (dnsmasq's lease file), static IPv4 and IPv6 with routes
//!   and DNS on a second card, a VLAN (its tagged frames read from QEMU's
//!   capture: build machines' kernels may have no 8021q for a far end),
//!   a bond of two cards surviving one
//!   pulled (`set_link off`), MTUs read back from /sys, NTP over IPv6,
//!   and what the kernel refuses reported while the machine answers its
//!   control socket.
//! - [`odd_dhcp_servers_in_a_namespace`]: issue 28's odd server, Debian's
//!   dnsmasq sending T1 and T2 of 0, a zero-length option 121 on one
//!   card and a classless default route through an off-subnet gateway
//!   on the other: both default routes kept at their metrics, the
//!   skipped option named on the console, and no renewal storm (the
//!   DHCPACKs in dnsmasq's log counted over a minute). About 70 s,
//!   60 of them the minute counted.
//! - [`a_network_the_decoder_refuses_still_boots`]: a VLAN on a missing
//!   parent, a bond member named twice and an IPv6 route without an
//!   address, each named on the console, and the machine reboots.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use qemu_tests::netns::{Dnsmasq, Netns, wait_datagram};
use qemu_tests::{Boot, MACHINE, Vm, hand_layer, images, initrd, scratch, standin_cpio};
use serde_json::Value;

/// Deadline for the first milestone: a TCG boot takes 3 to 5 s alone,
/// more when tests share the two cores.
const BOOT: Duration = Duration::from_secs(120);
/// Deadline for what follows a milestone already seen (DHCP included).
const NEXT: Duration = Duration::from_secs(60);

const MAC: &str = "52:54:00:12:34:56";

/// The JSON after `liken-standin-k3s: <kind> ` in a console line.
fn json_of(line: &str, kind: &str) -> Option<Value> {
    let rest = line.split(&format!("liken-standin-k3s: {kind} ")).nth(1)?;
    serde_json::from_str(rest).ok()
}

/// The stand-in's network snapshot in `line`, if it is one.
fn snapshot(line: &str) -> Option<Value> {
    json_of(line, "network")
}

fn link<'a>(snap: &'a Value, name: &str) -> &'a Value {
    snap["links"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["name"] == name))
        .unwrap_or(&Value::Null)
}

fn has(list: &Value, item: &str) -> bool {
    list.as_array()
        .is_some_and(|a| a.iter().any(|v| v.as_str() == Some(item)))
}

fn addresses(snap: &Value, name: &str) -> Vec<String> {
    link(snap, name)["addresses"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn boot_parts(dir: &std::path::Path, machine: &str) -> std::path::PathBuf {
    let parts = [
        images().boot_cpio.clone(),
        hand_layer(dir, machine),
        standin_cpio(dir),
    ];
    initrd(dir, &parts)
}

#[test]
fn dhcp_on_the_user_network() {
    let images = images();
    let dir = scratch("network-dhcp");
    // The test machine: DHCP on the card by its MAC address, a static
    // route and name server besides the lease's, its own hostname, and
    // two sysctls whose values differ from the kernel's defaults.
    let machine = format!(
        "apiVersion: liken.sh/v1alpha1\nkind: Machine\nmetadata:\n  name: node-1\nspec:\n  \
         hostname: web-7\n  \
         sysctls:\n    net.ipv4.ip_forward: \"1\"\n    vm.swappiness: \"13\"\n  \
         network:\n    interfaces:\n    - mac: {MAC}\n      dhcp: true\n      \
         dns: [192.0.2.53]\n      routes:\n      - to: 192.0.2.0/24\n        via: 10.0.2.2\n"
    );
    let parts = [
        images.boot_cpio.clone(),
        hand_layer(&dir, &machine),
        standin_cpio(&dir),
    ];
    let initrd = initrd(&dir, &parts);
    // Where the stand-in's datagram must arrive.
    let host = UdpSocket::bind("127.0.0.1:0").unwrap();
    host.set_read_timeout(Some(NEXT)).unwrap();
    let port = host.local_addr().unwrap().port();
    let append = format!(
        "liken.standin-sysctls=net.ipv4.ip_forward,vm.swappiness \
         liken.standin-send=10.0.2.2:{port}"
    );
    let device = format!("virtio-net-pci,netdev=n0,mac={MAC}");
    let mut vm = Vm::boot_with(
        &Boot {
            name: "network-dhcp",
            initrd: &initrd,
            append: &append,
        },
        &["-netdev", "user,id=n0", "-device", &device],
    );
    vm.expect("liken: mount: ok", BOOT);
    vm.expect("liken: machine: ok (node-1, leader of cluster test)", NEXT);
    vm.expect("liken: sysctls: ok (2 applied)", NEXT);
    vm.expect("liken: hostname: ok (web-7)", NEXT);
    let line = vm.expect("liken: network: ", NEXT);
    assert!(
        line.contains("liken: network: ok (eth0 10.0.2.15/24 by DHCP, DNS in /etc/resolv.conf)"),
        "{line}; the console is in {}",
        vm.log.display()
    );
    vm.expect("liken: supervisor: ok", NEXT);

    // Seen from inside, by the service.
    vm.expect_unordered("liken-standin-k3s: hostname web-7", NEXT);
    for route in [
        "route 0.0.0.0/0 via 10.0.2.2 dev eth0",
        "route 10.0.2.0/24 dev eth0",
        "route 192.0.2.0/24 via 10.0.2.2 dev eth0",
    ] {
        vm.expect_unordered(&format!("liken-standin-k3s: {route}"), NEXT);
    }
    let first = vm.expect_unordered("liken-standin-k3s: resolv.conf: nameserver ", NEXT);
    assert!(
        first.ends_with("resolv.conf: nameserver 192.0.2.53"),
        "the Machine's name server is not first: {first}"
    );
    vm.expect_unordered("liken-standin-k3s: resolv.conf: nameserver 10.0.2.3", NEXT);
    vm.expect_unordered("liken-standin-k3s: sysctl net.ipv4.ip_forward = 1", NEXT);
    vm.expect_unordered("liken-standin-k3s: sysctl vm.swappiness = 13", NEXT);
    vm.expect_unordered("liken-standin-k3s: sent a ", NEXT);
    let mut buf = [0u8; 256];
    let (n, from) = host.recv_from(&mut buf).unwrap_or_else(|e| {
        panic!(
            "no datagram from the guest within {NEXT:?}: {e}; the console is in {}",
            vm.log.display()
        )
    });
    assert_eq!(
        std::str::from_utf8(&buf[..n]),
        Ok("liken-standin-k3s on web-7"),
        "from {from}"
    );
}

#[test]
fn the_user_network_seen_from_inside() {
    let host = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port();
    host.set_read_timeout(Some(NEXT)).unwrap();
    let dir = scratch("network-user");
    let machine = format!(
        "{MACHINE}  sysctls:\n    net.ipv4.ip_forward: \"1\"\n    vm.swappiness: \"17\"\n  \
         network:\n    interfaces:\n    - mac: {MAC}\n      dhcp: true\n"
    );
    let device = format!("virtio-net-pci,netdev=n0,mac={MAC}");
    let mut vm = Vm::boot_with(
        &Boot {
            name: "network-user",
            initrd: &boot_parts(&dir, &machine),
            // QEMU's user network takes the guest's datagrams to
            // 10.0.2.2 to the host's loopback.
            append: &format!("liken.standin=net:10.0.2.2:{port}"),
        },
        &["-netdev", "user,id=n0", "-device", &device],
    );
    vm.expect("liken: supervisor: ok", BOOT);
    // Router advertisements come a moment after the link is up: wait
    // for the snapshot that has the SLAAC address too.
    let line = vm.expect_where(0, "a network snapshot with both families", NEXT, |l| {
        snapshot(l).is_some_and(|s| {
            addresses(&s, "eth0")
                .iter()
                .any(|a| a.starts_with("fec0::5054:ff:fe12:3456/64"))
        })
    });
    let snap = snapshot(&line).unwrap();
    assert_eq!(snap["hostname"], "node-1", "{line}");
    assert_eq!(
        snap["resolvConf"],
        "# Written by liken-init from the Machine document and its DHCP leases.\nnameserver 10.0.2.3\n",
        "{line}"
    );
    let eth0 = link(&snap, "eth0");
    assert_eq!(
        (&eth0["mac"], &eth0["state"], &eth0["mtu"]),
        (&Value::from(MAC), &Value::from("up"), &Value::from("1500")),
        "{line}"
    );
    assert!(has(&eth0["addresses"], "10.0.2.15/24"), "{line}");
    for route in ["0.0.0.0/0 via 10.0.2.2 dev eth0", "10.0.2.0/24 dev eth0"] {
        assert!(has(&snap["routes"], route), "{route} in {line}");
    }
    // The default route from slirp's router advertisement.
    assert!(has(&snap["routes6"], "::/0 via fe80::2 dev eth0"), "{line}");
    assert!(has(&snap["routes6"], "fec0::/64 dev eth0"), "{line}");
    let sysctls = &snap["sysctls"];
    assert_eq!(sysctls["net.ipv4.ip_forward"], "1", "{line}");
    assert_eq!(sysctls["vm.swappiness"], "17", "{line}");
    assert_eq!(sysctls["net.ipv6.conf.eth0.accept_ra"], "2", "{line}");
    assert_eq!(sysctls["net.ipv6.conf.eth0.autoconf"], "1", "{line}");

    // A datagram from the machine, through the user network's NAT.
    let mut buf = [0u8; 256];
    let (n, _) = host
        .recv_from(&mut buf)
        .expect("no datagram from the machine reached the host");
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("liken-standin-k3s node-1 "), "{text}");

    // init's published facts agree with what the kernel shows.
    let facts = vm.expect_where(0, "facts with the lease", NEXT, |l| {
        json_of(l, "facts").is_some_and(|f| f["leases"][0]["state"] == "bound")
    });
    let f = json_of(&facts, "facts").unwrap();
    let lease = &f["leases"][0];
    assert_eq!(
        (
            &lease["interface"],
            &lease["address"],
            &lease["router"],
            &lease["server"]
        ),
        (
            &Value::from("eth0"),
            &Value::from("10.0.2.15/24"),
            &Value::from("10.0.2.2"),
            &Value::from("10.0.2.2")
        ),
        "{facts}"
    );
    let eth0 = f["links"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["name"] == "eth0"))
        .unwrap();
    assert!(
        eth0["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["address"] == "10.0.2.15/24" && a["origin"] == "dhcp"),
        "{facts}"
    );
    assert_eq!(f["dns"], serde_json::json!(["10.0.2.3"]), "{facts}");
}

/// A lease file line's expiry (seconds since the epoch) and address for
/// the machine's MAC, if dnsmasq holds a lease for it.
fn lease_in(file: &std::path::Path) -> Option<(u64, String)> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1) == Some(&MAC)).then(|| (f[0].parse().unwrap_or(0), f[2].to_owned()))
    })
}

/// Whether `cidr` is a 10.77.0.x/24 address with x in `last`.
fn in_range(cidr: &str, last: std::ops::RangeInclusive<u8>) -> bool {
    cidr.strip_prefix("10.77.0.")
        .and_then(|r| r.strip_suffix("/24"))
        .and_then(|o| o.parse().ok())
        .is_some_and(|o| last.contains(&o))
}

/// Whether the pcap file at `path` (QEMU's filter-dump) holds an ARP
/// request in an 802.1Q frame of VLAN `vid`, from `sender` for `target`.
fn tagged_arp(path: &std::path::Path, vid: u16, sender: [u8; 4], target: [u8; 4]) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    let mut at = 24; // the file header
    while let Some(head) = bytes.get(at..at + 16) {
        let len = u32::from_le_bytes(head[8..12].try_into().unwrap()) as usize;
        let Some(frame) = bytes.get(at + 16..at + 16 + len) else {
            break;
        };
        at += 16 + len;
        let be = |i: usize| {
            frame
                .get(i..i + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
        };
        if be(12) == Some(0x8100)
            && be(14).map(|t| t & 0xfff) == Some(vid)
            && be(16) == Some(0x0806)
        {
            let arp = &frame[18..];
            if arp.get(6..8) == Some(&[0, 1])
                && arp.get(14..18) == Some(&sender)
                && arp.get(24..28) == Some(&target)
            {
                return true;
            }
        }
    }
    false
}

fn sock(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// dnsmasq for the namespace test: DHCPv4 on tap0 from `range` for 2
/// minutes with renewal after 10 s, router advertisements and DHCPv6
/// there, DNS on tap0 and tap1 (ntp6.test has only an AAAA record).
fn server(range: &str, authoritative: bool) -> Dnsmasq<'_> {
    Dnsmasq {
        interfaces: &["tap0", "tap1"],
        range,
        t1: 10,
        t2: 15,
        authoritative,
        extra: &[
            "--enable-ra",
            "--local=/test/",
            "--host-record=ntp6.test,fd50::1",
            "--dhcp-range=fd77::100,fd77::1ff,slaac,64,2m",
        ],
    }
}

/// node-1 in the namespace: eth0 by DHCP and SLAAC, eth1 static in both
/// families with routes, DNS and a jumbo MTU, a VLAN on eth1, a bond of
/// eth2 and eth3, NTP by a name that has only an IPv6 address; and, for
/// the kernel to refuse, an interface that is not there with a VLAN on
/// it and a VLAN whose MTU is above its parent's.
const NAMESPACE_MACHINE: &str = "  sysctls:
    net.ipv4.ip_forward: \"1\"
  network:
    interfaces:
    - name: eth0
      mac: 52:54:00:12:34:56
      dhcp: true
    - name: eth1
      mac: 52:54:00:00:01:01
      addresses: [192.168.50.10/24, fd50::10/64]
      routes:
      - to: 10.99.0.0/16
        via: 192.168.50.1
      - to: fd99::/64
        via: fd50::1
      dns: [fd50::1]
      mtu: 9000
    - name: vlan42
      addresses: [192.168.42.10/24]
      mtu: 1400
    - name: vlan43
      addresses: [192.168.43.10/24]
      mtu: 9500
    - name: bond0
      addresses: [192.168.60.10/24]
    - name: eth9
      addresses: [192.168.90.10/24]
    bonds:
    - name: bond0
      members: [eth2, eth3]
      mode: active-backup
      miimon: 100
    vlans:
    - name: vlan42
      parent: eth1
      id: 42
    - name: vlan43
      parent: eth1
      id: 43
    - name: vlan90
      parent: eth9
      id: 90
    ntp: [ntp6.test]
";

#[test]
fn leases_ipv6_vlans_and_bonds_in_a_namespace() {
    let dir = scratch("network-namespace");
    let ns = Netns::new("net");
    ns.tap("tap0", &["10.77.0.1/24", "fd77::1/64"]);
    ns.tap("tap1", &["192.168.50.1/24", "fd50::1/64"]);
    ns.ip(&["link", "set", "tap1", "mtu", "9000"]);
    // The bond's two cards meet on one bridge, as on one switch.
    ns.ip(&["link", "add", "br0", "type", "bridge", "forward_delay", "0"]);
    ns.ip(&["link", "set", "br0", "up"]);
    ns.address("br0", &["192.168.60.1/24"]);
    for tap in ["tap2", "tap3"] {
        ns.tap(tap, &[]);
        ns.ip(&["link", "set", tap, "master", "br0"]);
    }
    // The far ends of the machine's static routes.
    ns.address("lo", &["10.99.0.1/32", "fd99::1/128"]);
    let targets = [
        "10.77.0.1:7001",
        "[fd77::1]:7001",
        "192.168.50.1:7001",
        "[fd50::1]:7001",
        "192.168.42.1:7001",
        "192.168.60.1:7001",
        "10.99.0.1:7001",
        "[fd99::1]:7001",
    ];
    // No listener on the VLAN: build machines' kernels may lack 8021q,
    // so its frames are read from QEMU's own capture of eth1 instead.
    let listening: Vec<SocketAddr> = targets
        .iter()
        .filter(|t| !t.starts_with("192.168.42."))
        .map(|t| sock(t))
        .collect();
    let datagrams = ns.listen(&listening);
    let mut seen = Vec::new();

    let mut dnsmasq = Some(ns.dnsmasq(&dir, &server("10.77.0.50,10.77.0.99", false)));
    let chrony_conf = dir.join("chrony.conf");
    std::fs::write(
        &chrony_conf,
        format!(
            "port 123\ncmdport 0\nbindaddress fd50::1\nallow all\nlocal stratum 1\npidfile {}\n",
            dir.join("chronyd.pid").display()
        ),
    )
    .unwrap();
    let _chronyd = ns.spawn(
        "chronyd",
        &[
            "-d".into(),
            "-x".into(),
            "-u".into(),
            "root".into(),
            "-f".into(),
            chrony_conf.display().to_string(),
        ],
    );

    let machine = format!("{MACHINE}{NAMESPACE_MACHINE}");
    let mut qemu: Vec<String> = Vec::new();
    for (n, mac) in [
        "52:54:00:12:34:56",
        "52:54:00:00:01:01",
        "52:54:00:00:02:02",
        "52:54:00:00:03:03",
    ]
    .iter()
    .enumerate()
    {
        qemu.extend([
            "-netdev".into(),
            // No virtio-net header on the tap: the capture below holds
            // plain Ethernet frames then.
            format!("tap,id=n{n},ifname=tap{n},script=no,downscript=no,vnet_hdr=off"),
            "-device".into(),
            format!("virtio-net-pci,netdev=n{n},mac={mac}"),
        ]);
    }
    // Every frame eth1 sends, tags and all, as QEMU sees it.
    let capture = dir.join("eth1.pcap");
    qemu.extend([
        "-object".into(),
        format!("filter-dump,id=d1,netdev=n1,file={}", capture.display()),
    ]);
    // The guest's clock starts six years behind: only NTP over IPv6
    // (chronyd on fd50::1, found through dnsmasq's AAAA record) can set
    // it right.
    qemu.extend(["-rtc".into(), "base=2020-01-01T00:00:00".into()]);
    let mut vm = Vm::boot_in_netns(
        &ns.name,
        &Boot {
            name: "network-namespace",
            initrd: &boot_parts(&dir, &machine),
            append: &format!("liken.standin=net:{}", targets.join(",")),
        },
        &qemu,
    );
    let network = vm.expect("liken: network: ", BOOT);
    vm.expect("liken: supervisor: ok", NEXT);

    // What the kernel refused is named, and the machine answers its
    // control socket with it.
    for refusal in [
        "interface eth9 not found",
        "VLAN vlan90: its parent eth9 is not found",
        "vlan43: the kernel refused MTU 9500",
    ] {
        assert!(network.contains(refusal), "{refusal} in {network}");
    }
    assert!(
        !network.contains("cannot bring"),
        "a link came up out of order: {network}"
    );
    let status = vm.expect_unordered("liken-standin-k3s: status ", NEXT);
    assert!(
        status.contains(r#""step":"network""#)
            && status.contains("vlan43: the kernel refused MTU 9500"),
        "{status}"
    );

    // The machine as the kernel has it, once SLAAC has run on eth0.
    let line = vm.expect_where(0, "a snapshot with eth0's SLAAC address", NEXT, |l| {
        snapshot(l).is_some_and(|s| {
            addresses(&s, "eth0")
                .iter()
                .any(|a| a == "fd77::5054:ff:fe12:3456/64")
                && has(&s["routes6"], "fd99::/64 via fd50::1 dev eth1")
        })
    });
    let snap = snapshot(&line).unwrap();
    let eth0 = addresses(&snap, "eth0");
    let first = eth0
        .iter()
        .find(|a| a.starts_with("10.77.0."))
        .unwrap_or_else(|| panic!("no lease on eth0: {line}"))
        .clone();
    assert!(
        has(&snap["routes"], "0.0.0.0/0 via 10.77.0.1 dev eth0"),
        "{line}"
    );
    assert!(
        snap["routes6"].as_array().unwrap().iter().any(|r| r
            .as_str()
            .is_some_and(|r| r.starts_with("::/0 via fe80::") && r.ends_with("dev eth0"))),
        "the default route from dnsmasq's router advertisement: {line}"
    );
    let eth1 = link(&snap, "eth1");
    assert_eq!(eth1["mtu"], "9000", "{line}");
    assert!(has(&eth1["addresses"], "192.168.50.10/24"), "{line}");
    assert!(has(&eth1["addresses"], "fd50::10/64"), "{line}");
    assert!(
        has(&snap["routes"], "10.99.0.0/16 via 192.168.50.1 dev eth1"),
        "{line}"
    );
    assert_eq!(
        snap["sysctls"]["net.ipv6.conf.eth1.accept_ra"], "0",
        "{line}"
    );
    assert_eq!(
        snap["sysctls"]["net.ipv6.conf.eth0.accept_ra"], "2",
        "{line}"
    );
    assert_eq!(snap["sysctls"]["net.ipv4.ip_forward"], "1", "{line}");
    assert!(
        snap["resolvConf"]
            .as_str()
            .is_some_and(|r| r.contains("nameserver fd50::1\nnameserver 10.77.0.1\n")),
        "{line}"
    );
    let vlan = link(&snap, "vlan42");
    assert_eq!(vlan["mtu"], "1400", "{line}");
    assert!(has(&vlan["addresses"], "192.168.42.10/24"), "{line}");
    assert!(has(&snap["vlans"], "vlan42 42 eth1"), "{line}");
    let bond = snap["bonds"][0].clone();
    assert_eq!(
        (
            &bond["name"],
            &bond["mode"],
            &bond["miimon"],
            &bond["members"],
            &bond["active"]
        ),
        (
            &Value::from("bond0"),
            &Value::from("active-backup 1"),
            &Value::from("100"),
            &Value::from("eth2 eth3"),
            &Value::from("eth2")
        ),
        "{line}"
    );
    assert!(
        has(&link(&snap, "bond0")["addresses"], "192.168.60.10/24"),
        "{line}"
    );
    assert_eq!(link(&snap, "eth2")["master"], "bond0", "{line}");
    // NTP over IPv6 set the clock that started in 2020.
    let host_now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60;
    let guest_now = snap["clockMinute"].as_u64().unwrap_or(0);
    assert!(
        host_now.abs_diff(guest_now) <= 2,
        "guest clock at minute {guest_now}, host at {host_now}: {line}"
    );

    // A datagram arrives at every far end, from the address the route
    // gives.
    let want_from = [
        ("10.77.0.1:7001", first.trim_end_matches("/24").to_owned()),
        ("[fd77::1]:7001", "fd77::5054:ff:fe12:3456".to_owned()),
        ("192.168.50.1:7001", "192.168.50.10".to_owned()),
        ("[fd50::1]:7001", "fd50::10".to_owned()),
        ("192.168.60.1:7001", "192.168.60.10".to_owned()),
        ("10.99.0.1:7001", "192.168.50.10".to_owned()),
        ("[fd99::1]:7001", "fd50::10".to_owned()),
    ];
    for (to, from) in &want_from {
        let got = wait_datagram(&datagrams, &mut seen, NEXT, |d| {
            d.to == sock(to) && d.from.ip().to_string() == *from
        });
        assert!(
            got.is_some(),
            "no datagram to {to} from {from}; got {seen:?}"
        );
    }

    // The VLAN's frames leave eth1 tagged 42: the machine asks who has
    // 192.168.42.1 (nobody answers: no VLAN on the far side).
    let deadline = Instant::now() + NEXT;
    while !tagged_arp(&capture, 42, [192, 168, 42, 10], [192, 168, 42, 1]) {
        assert!(
            Instant::now() < deadline,
            "no ARP request tagged 42 in {}",
            capture.display()
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // The bond loses eth2's cable and goes on over eth3.
    let mark = vm.seen.len();
    vm.monitor("set_link n2 off");
    let pulled = Instant::now();
    let line = vm.expect_where(mark, "the bond on eth3", NEXT, |l| {
        snapshot(l).is_some_and(|s| s["bonds"][0]["active"] == "eth3")
    });
    let snap = snapshot(&line).unwrap();
    assert_eq!(link(&snap, "eth2")["carrier"], "0", "{line}");
    assert_eq!(link(&snap, "bond0")["state"], "up", "{line}");
    let got = wait_datagram(&datagrams, &mut Vec::new(), NEXT, |d| {
        d.to == sock("192.168.60.1:7001") && d.at > pulled
    });
    assert!(
        got.is_some(),
        "nothing crossed the bond after eth2 was pulled"
    );

    // Renewal: dnsmasq's lease file shows the lease extended.
    let leases = Dnsmasq::leases(&dir);
    let (expiry, address) = lease_in(&leases).expect("dnsmasq has no lease for the machine");
    assert_eq!(format!("{address}/24"), first);
    let deadline = Instant::now() + NEXT;
    while lease_in(&leases).is_some_and(|(e, _)| e <= expiry) {
        assert!(
            Instant::now() < deadline,
            "the lease was not renewed: {:?}",
            lease_in(&leases)
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // A restarted dnsmasq with another range and no memory of the lease
    // refuses the renewal; the machine takes a new address.
    dnsmasq.take().unwrap().stop();
    std::fs::remove_file(&leases).unwrap();
    dnsmasq = Some(ns.dnsmasq(&dir, &server("10.77.0.100,10.77.0.149", true)));
    let mark = vm.seen.len();
    let line = vm.expect_where(mark, "a new address on eth0", NEXT, |l| {
        snapshot(l).is_some_and(|s| addresses(&s, "eth0").iter().any(|a| in_range(a, 100..=149)))
    });
    let moved = addresses(&snapshot(&line).unwrap(), "eth0")
        .into_iter()
        .find(|a| a.starts_with("10.77.0."))
        .unwrap();
    assert_ne!(moved, first, "{line}");
    assert!(
        !addresses(&snapshot(&line).unwrap(), "eth0").contains(&first),
        "the old address stayed: {line}"
    );
    assert_eq!(
        lease_in(&leases).map(|(_, a)| format!("{a}/24")),
        Some(moved.clone())
    );
    vm.expect_unordered(&format!("(was {})", first.trim_end_matches("/24")), NEXT);
    let sent = Instant::now();
    let from = moved.trim_end_matches("/24").to_owned();
    let got = wait_datagram(&datagrams, &mut Vec::new(), NEXT, |d| {
        d.to == sock("10.77.0.1:7001") && d.from.ip().to_string() == from && d.at > sent
    });
    assert!(got.is_some(), "nothing arrived from the new address {from}");

    // No server at all: the lease runs out and its address goes; a
    // server back gives the machine an address again.
    dnsmasq.take().unwrap().stop();
    let mark = vm.seen.len();
    let line = vm.expect_where(
        mark,
        "eth0 without its lease",
        Duration::from_secs(180),
        |l| {
            snapshot(l).is_some_and(|s| {
                !addresses(&s, "eth0")
                    .iter()
                    .any(|a| a.starts_with("10.77.0."))
            })
        },
    );
    assert!(
        !has(
            &snapshot(&line).unwrap()["routes"],
            "0.0.0.0/0 via 10.77.0.1 dev eth0"
        ),
        "{line}"
    );
    vm.expect_unordered("expired without an answer from a DHCP server", NEXT);
    let _dnsmasq = ns.dnsmasq(&dir, &server("10.77.0.100,10.77.0.149", true));
    let mark = vm.seen.len();
    vm.expect_where(mark, "eth0 leased again", NEXT, |l| {
        snapshot(l).is_some_and(|s| {
            addresses(&s, "eth0")
                .iter()
                .any(|a| a.starts_with("10.77.0."))
        })
    });

    // An orderly shutdown gives the lease back: dnsmasq forgets it.
    assert!(lease_in(&leases).is_some());
    vm.ctrl_alt_del();
    vm.expect("liken: leases: ok (given back)", NEXT);
    vm.expect_exit("liken: reboot: ok", NEXT);
    let deadline = Instant::now() + Duration::from_secs(10);
    while lease_in(&leases).is_some() {
        assert!(
            Instant::now() < deadline,
            "dnsmasq still holds the released lease"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_network_the_decoder_refuses_still_boots() {
    let dir = scratch("network-refused");
    let machine = format!(
        "{MACHINE}  network:\n    interfaces:\n    - name: eth1\n      addresses: [192.168.50.10/24]\n      \
         routes:\n      - to: fd99::/64\n        via: fd50::1\n    bonds:\n    - name: bond0\n      \
         members: [eth2, eth3, eth2]\n    vlans:\n    - name: vlan42\n      parent: eth9\n      id: 42\n"
    );
    let mut vm = Vm::boot(&Boot {
        name: "network-refused",
        initrd: &boot_parts(&dir, &machine),
        append: "",
    });
    vm.expect("liken: machine: ", BOOT);
    // Each problem on its own line under the machine line, in the
    // decoder's order.
    for problem in [
        "spec.network.bonds[0].members[2]: \"eth2\" is named twice in this bond",
        "spec.network.vlans[0].parent: \"eth9\" is neither an interface named in spec.network.interfaces nor a bond",
        "spec.network.interfaces[0].routes[0]: an IPv6 route needs an IPv6 address on this interface",
    ] {
        vm.expect(problem, NEXT);
    }
    vm.expect("liken: network: skipped (no valid Machine document)", NEXT);
    vm.expect("liken: supervisor: ok (nothing to supervise", NEXT);
    vm.reboot(NEXT);
}

/// Two DHCP interfaces on an odd server (issue 28), in one boot.
const ODD_MACHINE: &str = "  network:
    interfaces:
    - name: eth0
      mac: 52:54:00:12:34:56
      dhcp: true
    - name: eth1
      mac: 52:54:00:00:01:01
      dhcp: true
";

/// The DHCPACKs dnsmasq's log shows on `tap`.
fn acks(dir: &std::path::Path, tap: &str) -> usize {
    let log = std::fs::read_to_string(Dnsmasq::log(dir)).unwrap_or_default();
    let mark = format!("DHCPACK({tap})");
    log.lines().filter(|l| l.contains(&mark)).count()
}

#[test]
fn odd_dhcp_servers_in_a_namespace() {
    let dir = scratch("network-odd");
    let ns = Netns::new("odd");
    ns.tap("tap0", &["10.78.0.1/24"]);
    ns.tap("tap1", &["10.79.0.1/24"]);
    // The classless route's gateway, on no subnet of the machine's: the
    // namespace answers ARP for it on tap1.
    ns.address("tap1", &["100.64.0.1/32"]);
    let datagrams = ns.listen(&[sock("10.78.0.1:7001"), sock("10.79.0.1:7001")]);
    let _dnsmasq = ns.dnsmasq(
        &dir,
        &Dnsmasq {
            interfaces: &["tap0", "tap1"],
            range: "10.78.0.50,10.78.0.99",
            // T1 and T2 of 0: before the floors, a renewal right after
            // every ACK.
            t1: 0,
            t2: 0,
            authoritative: false,
            extra: &[
                "--dhcp-range=10.79.0.50,10.79.0.99,255.255.255.0,2m",
                // A zero-length option 121 on eth0's network.
                "--dhcp-option-force=tag:tap0,121",
                // A default route through an off-subnet gateway on eth1's.
                "--dhcp-option=tag:tap1,121,0.0.0.0/0,100.64.0.1",
            ],
        },
    );
    let machine = format!("{MACHINE}{ODD_MACHINE}");
    let mut qemu: Vec<String> = Vec::new();
    for (n, mac) in ["52:54:00:12:34:56", "52:54:00:00:01:01"]
        .iter()
        .enumerate()
    {
        qemu.extend([
            "-netdev".into(),
            format!("tap,id=n{n},ifname=tap{n},script=no,downscript=no,vnet_hdr=off"),
            "-device".into(),
            format!("virtio-net-pci,netdev=n{n},mac={mac}"),
        ]);
    }
    let mut vm = Vm::boot_in_netns(
        &ns.name,
        &Boot {
            name: "network-odd",
            initrd: &boot_parts(&dir, &machine),
            append: "liken.standin=net:10.78.0.1:7001,10.79.0.1:7001",
        },
        &qemu,
    );
    vm.expect("liken: network: ", BOOT);
    vm.expect_unordered(
        "dhcp: eth0: skipped the classless static routes (option 121) from server 10.78.0.1",
        NEXT,
    );
    let line = vm.expect_where(0, "both leases with their default routes", NEXT, |l| {
        snapshot(l).is_some_and(|s| {
            has(&s["routes"], "0.0.0.0/0 via 10.78.0.1 dev eth0")
                && has(&s["routes"], "0.0.0.0/0 via 100.64.0.1 dev eth1")
        })
    });
    let snap = snapshot(&line).unwrap();
    // eth1's lease has no route through its router option: the
    // classless routes replace it.
    assert!(
        !has(&snap["routes"], "0.0.0.0/0 via 10.79.0.1 dev eth1"),
        "{line}"
    );
    // Datagrams leave by both leases.
    let mut seen = Vec::new();
    for to in ["10.78.0.1:7001", "10.79.0.1:7001"] {
        let got = wait_datagram(&datagrams, &mut seen, NEXT, |d| d.to == sock(to));
        assert!(got.is_some(), "no datagram to {to}; got {seen:?}");
    }
    // No storm: over a minute, at most a few renewals per lease (T1
    // falls at half the 2-minute lease).
    let before = (acks(&dir, "tap0"), acks(&dir, "tap1"));
    std::thread::sleep(Duration::from_secs(60));
    let after = (acks(&dir, "tap0"), acks(&dir, "tap1"));
    let grew = (after.0 - before.0, after.1 - before.1);
    assert!(
        grew.0 <= 3 && grew.1 <= 3,
        "DHCPACKs in a minute on tap0 and tap1: {grew:?}"
    );
    assert!(
        after.0 >= 1 && after.1 >= 1,
        "no lease was ever acked: {after:?}"
    );
    // Both default routes still there after the renewals.
    let mark = vm.seen.len();
    vm.expect_where(mark, "both default routes after a minute", NEXT, |l| {
        snapshot(l).is_some_and(|s| {
            has(&s["routes"], "0.0.0.0/0 via 10.78.0.1 dev eth0")
                && has(&s["routes"], "0.0.0.0/0 via 100.64.0.1 dev eth1")
        })
    });
}
