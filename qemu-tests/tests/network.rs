//! The network step under QEMU's user network: a virtio-net card, a
//! Machine that asks for DHCP on it by MAC address, and the lease QEMU's
//! built-in DHCP server hands out (10.0.2.15/24, gateway 10.0.2.2, DNS
//! 10.0.2.3) configured by init over netlink.

use std::time::Duration;

use qemu_tests::{Boot, MACHINE, Vm, hand_layer, images, initrd, scratch};

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
    // The test machine, asking for DHCP on the card by its MAC address.
    let machine =
        format!("{MACHINE}  network:\n    interfaces:\n    - mac: {MAC}\n      dhcp: true\n");
    let parts = [images.boot_cpio.clone(), hand_layer(&dir, &machine)];
    let initrd = initrd(&dir, &parts);
    let device = format!("virtio-net-pci,netdev=n0,mac={MAC}");
    let mut vm = Vm::boot_with(
        &Boot {
            name: "network-dhcp",
            initrd: &initrd,
            append: "",
        },
        &["-netdev", "user,id=n0", "-device", &device],
    );
    vm.expect("liken: mount: ok", BOOT);
    vm.expect("liken: machine: ok (node-1, leader of cluster test)", NEXT);
    let line = vm.expect("liken: network: ", NEXT);
    assert!(
        line.contains("liken: network: ok (eth0 10.0.2.15/24 by DHCP, DNS in /etc/resolv.conf)"),
        "{line}; the console is in {}",
        vm.log.display()
    );
    vm.expect("liken: supervisor: ok", NEXT);
}
