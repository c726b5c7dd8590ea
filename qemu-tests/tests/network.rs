//! The network step under QEMU's user network: a virtio-net card, a
//! Machine that asks for DHCP on it by MAC address, and the lease QEMU's
//! built-in DHCP server hands out (10.0.2.15/24, gateway 10.0.2.2, DNS
//! 10.0.2.3) configured by init over netlink.

use std::time::Duration;

use qemu_tests::{Boot, Vm, cpio, images, initrd, scratch};

/// Deadline for the first milestone: a TCG boot takes 3 to 5 s alone,
/// more when tests share the two cores.
const BOOT: Duration = Duration::from_secs(90);
/// Deadline for what follows a milestone already seen (DHCP included).
const NEXT: Duration = Duration::from_secs(45);

const MAC: &str = "52:54:00:12:34:56";

const CLUSTER: &str = "apiVersion: liken.sh/v1alpha1
kind: Cluster
metadata:
  name: test
spec:
  endpoint: https://10.0.2.15:6443
  leaders: [node-1]
";

const MACHINE: &str = "apiVersion: liken.sh/v1alpha1
kind: Machine
metadata:
  name: node-1
spec:
  hostname: node-1
  network:
    interfaces:
    - mac: 52:54:00:12:34:56
      dhcp: true
";

#[test]
fn dhcp_on_the_user_network() {
    let images = images();
    let dir = scratch("network-dhcp");
    let layer = cpio(
        &dir,
        "layer",
        &[
            ("etc/liken/cluster.yaml", CLUSTER.as_bytes(), 0o644),
            ("etc/liken/machines/node-1.yaml", MACHINE.as_bytes(), 0o644),
        ],
        &[],
    );
    let parts = [images.boot_cpio.clone(), layer];
    let initrd = initrd(&dir, &parts.iter().map(|p| p.as_path()).collect::<Vec<_>>());
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
