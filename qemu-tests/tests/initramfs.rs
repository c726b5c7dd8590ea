//! Boots from the initramfs alone (boot.cpio, a deployment layer and,
//! where a service is needed, the stand-in in place of k3s) and checks
//! what init prints on the serial console.
//!
//! How a test asks a machine to reboot: either the stand-in asks over
//! the control socket, as the machine operator will, or the test
//! presses Ctrl-Alt-Del through QEMU's monitor, which the kernel turns
//! into SIGINT for init (init switches the keystroke to a signal at
//! boot). The second works on a machine with nothing running, which is
//! the state an invalid Machine document leaves.

use std::time::Duration;

use liken_api::decode;
use liken_api::{BootRecord, Machine};
use qemu_tests::{
    Boot, MACHINE, Vm, cli_layer, hand_layer, images, initrd, scratch, standin_cpio, uptime_in,
};

/// Deadline for milestones up to the supervisor: a TCG boot takes
/// 3 to 5 s alone, more when tests share the two cores.
const BOOT: Duration = Duration::from_secs(90);
/// Deadline for what follows a milestone already seen.
const NEXT: Duration = Duration::from_secs(30);

/// Boots boot.cpio, a hand-packed layer with `machine` as node-1's
/// document, and the stand-in, with `append` on the kernel command line.
fn boot_hand_layer(name: &str, machine: &str, append: &str) -> Vm {
    let dir = scratch(name);
    let parts = [
        images().boot_cpio.clone(),
        hand_layer(&dir, machine),
        standin_cpio(&dir),
    ];
    Vm::boot(&Boot {
        name,
        initrd: &initrd(&dir, &parts),
        append,
    })
}

#[test]
fn boots_from_the_initramfs_to_the_supervisor_with_the_boot_record() {
    let images = images();
    let dir = scratch("initramfs-boot");
    // The layer a person would make, with the real CLI.
    let (deployment, layer) = cli_layer(&dir, "test", "node-1");
    let parts = [images.boot_cpio.clone(), layer, standin_cpio(&dir)];
    let mut vm = Vm::boot(&Boot {
        name: "initramfs-boot",
        initrd: &initrd(&dir, &parts),
        append: "",
    });
    vm.expect("liken: mount: ok", BOOT);
    vm.expect("liken: control: ok", NEXT);
    vm.expect("liken: modules: ok", NEXT);
    vm.expect("liken: machine: ok (node-1, leader of cluster test)", NEXT);
    vm.expect(
        "liken: root: ok (no LIKEN-A or LIKEN-B partition; running from the initramfs)",
        NEXT,
    );
    vm.expect("liken: hostname: ok (node-1)", NEXT);
    let record_line = vm.expect(
        "liken: boot-record: ok (/run/liken/facts/boot.json, boot ",
        NEXT,
    );
    vm.expect(
        "liken: k3s: ok (k3s server (LimitNOFILE=1048576, LimitNPROC and LimitCORE infinity))",
        NEXT,
    );
    let sup = vm.expect("liken: supervisor: ok (k3s server pid ", NEXT);
    let uptime = uptime_in(&sup).expect("the supervisor line reports the uptime");
    eprintln!(
        "supervisor started at guest uptime {uptime:.2} s, {:.1} s of QEMU wall time",
        vm.wall()
    );
    vm.expect_unordered("liken-standin-k3s: started as k3s server", NEXT);

    // The record the stand-in read from /run/liken/facts/boot.json is the
    // one the milestone named, and names the Machine this boot runs.
    let rec = vm.expect_unordered("liken-standin-k3s: boot record ", NEXT);
    let json = rec.split("boot record ").nth(1).unwrap();
    let record: BootRecord = serde_json::from_str(json).unwrap();
    assert!(
        record_line.contains(record.boot_id().short()),
        "{record_line} vs {json}"
    );
    let text = std::fs::read_to_string(deployment.join("machines/node-1.yaml")).unwrap();
    let machine: Machine = decode::strict(&text, "node-1.yaml").unwrap();
    assert_eq!(
        record.documents.get("machine"),
        Some(&machine.canonical_hash())
    );
    assert!(record.documents.contains_key("cluster"));
    assert_eq!(record.slot, None, "an initramfs boot has no slot");
}

#[test]
fn an_invalid_machine_document_is_reported_and_the_machine_still_reboots() {
    let broken = MACHINE.replace("hostname: node-1", "hostnme: node-1");
    let mut vm = boot_hand_layer("invalid-machine", &broken, "");
    let line = vm.expect("liken: machine: ", BOOT);
    assert!(
        line.contains("the Machine document for \"node-1\" is not valid")
            && line.contains("spec.hostnme")
            && line.contains("fix it, rebuild the layer"),
        "{line}"
    );
    vm.expect("liken: hostname: skipped (no valid Machine document)", NEXT);
    vm.expect("liken: boot-record: ok", NEXT);
    vm.expect("liken: k3s: skipped", NEXT);
    vm.expect("liken: supervisor: ok (nothing to supervise", NEXT);
    assert!(
        !vm.seen.iter().any(|l| l.contains("liken-standin-k3s")),
        "nothing may run from a broken Machine document"
    );

    vm.ctrl_alt_del();
    vm.expect("liken: shutdown: ok (reboot requested)", NEXT);
    vm.expect("liken: stop-k3s: ok (k3s was not running)", NEXT);
    vm.expect("liken: sync: ok", NEXT);
    vm.expect("liken: unmount: ok", NEXT);
    vm.expect_exit("liken: reboot: ok", NEXT);
}

#[test]
fn a_reboot_asked_over_the_control_socket_stops_k3s_first() {
    let mut vm = boot_hand_layer("control-reboot", MACHINE, "liken.standin=reboot");
    vm.expect("liken: supervisor: ok (k3s server pid ", BOOT);
    let status = vm.expect_unordered("liken-standin-k3s: status ", NEXT);
    assert!(
        status.contains(r#""machine":"node-1""#) && status.contains(r#""state":"running""#),
        "{status}"
    );
    // The stand-in's lines reach the console through init's output
    // thread, so they may land among init's own; only init's are
    // checked in order, the stand-in's at the end.
    vm.expect("liken: control: reboot requested", NEXT);
    vm.expect("liken: shutdown: ok (reboot requested)", NEXT);
    let stopped = vm.expect("liken: stop-k3s: ok (", NEXT);
    assert!(
        stopped.contains("stopped in"),
        "k3s must stop on SIGTERM: {stopped}"
    );
    vm.expect("liken: unmount: ok", NEXT);
    vm.expect_exit("liken: reboot: ok", NEXT);
    assert!(
        vm.seen
            .iter()
            .any(|l| l.contains("liken-standin-k3s: asking for reboot")),
        "the request came from the stand-in"
    );
}

#[test]
fn a_failing_k3s_is_restarted_with_growing_backoff() {
    let mut vm = boot_hand_layer("k3s-backoff", MACHINE, "liken.standin=exit:3");
    vm.expect("liken: supervisor: ok (k3s server pid ", BOOT);
    let first = vm.expect("liken: k3s: exited with status 3 after", NEXT);
    assert!(first.ends_with("restarting in 1 s"), "{first}");
    vm.expect("liken: k3s: restarted, pid ", NEXT);
    let second = vm.expect("liken: k3s: exited with status 3 after", NEXT);
    assert!(second.ends_with("restarting in 2 s"), "{second}");
    vm.expect("liken: k3s: restarted, pid ", NEXT);
    let third = vm.expect("liken: k3s: exited with status 3 after", NEXT);
    assert!(third.ends_with("restarting in 4 s"), "{third}");
}
