//! The network step under QEMU's user network: a virtio-net card, a
//! Machine that asks for DHCP on it by MAC address, and the lease QEMU's
//! built-in DHCP server hands out (10.0.2.15/24, gateway 10.0.2.2, DNS
//! 10.0.2.3) configured by init over netlink.
//!
//! Init's own report is not taken as proof: the stand-in k3s, started
//! by init as k3s would be, prints what a service sees from the kernel's
//! files (the route table from /proc/net/route, /etc/resolv.conf, the
//! hostname and the Machine's sysctls from /proc/sys), and sends a UDP
//! datagram to a socket this test holds on the host, through QEMU's
//! user network (10.0.2.2 is the host), which the test must receive.

use std::net::UdpSocket;
use std::time::Duration;

use qemu_tests::{Boot, Vm, hand_layer, images, initrd, scratch, standin_cpio};

/// Deadline for the first milestone: a TCG boot takes 3 to 5 s alone,
/// more when tests share the two cores.
const BOOT: Duration = Duration::from_secs(90);
/// Deadline for what follows a milestone already seen (DHCP included).
const NEXT: Duration = Duration::from_secs(45);

const MAC: &str = "52:54:00:12:34:56";

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
