//! liken-bench (`make bench`): liken-init's costs, each beside a
//! reference measured in the same run.
//!
//! - Size: the stripped static liken-init, against the 2 MB target.
//! - Memory: init's resident set once it supervises (the stand-in
//!   reads /proc/1/status), against the 4 MB target.
//! - Boot time: the guest uptime at which liken-init prints its
//!   supervisor milestone, beside the uptime at which a bare static
//!   hello-world PID 1 prints, both booted from the same kernel under
//!   the same accelerator, alternating, several rounds; the difference
//!   of the medians is what liken-init adds (target: at most 1.5 s).
//!
//! Not measured yet: booting an installed disk through systemd-boot
//! (that path is not built).

use std::time::Duration;

use qemu_tests::{Boot, Vm, cpio, images, initrd, scratch, standin_cpio, uptime_in};

const ROUNDS: usize = 3;
const DEADLINE: Duration = Duration::from_secs(120);

const LAYER: [(&str, &str); 2] = [
    (
        "etc/liken/cluster.yaml",
        "apiVersion: liken.sh/v1alpha1\nkind: Cluster\nmetadata:\n  name: bench\nspec:\n  endpoint: https://10.0.2.15:6443\n  leaders: [node-1]\n",
    ),
    (
        "etc/liken/machines/node-1.yaml",
        "apiVersion: liken.sh/v1alpha1\nkind: Machine\nmetadata:\n  name: node-1\n",
    ),
];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let images = images();
    let dir = scratch("bench");
    let hello_bin = std::fs::read(&images.hello).unwrap_or_default();
    let hello = cpio(&dir, "hello", &[("init", &hello_bin, 0o755)], &[]);
    let files: Vec<(&str, &[u8], u32)> = LAYER
        .iter()
        .map(|(p, c)| (*p, c.as_bytes(), 0o644))
        .collect();
    let layer = cpio(&dir, "layer", &files, &[]);
    let standin = standin_cpio(&dir);
    let liken = initrd(&dir, &[&images.boot_cpio, &layer, &standin]);

    let size = std::fs::metadata(&images.init)
        .map(|m| m.len())
        .unwrap_or(0);
    let (mut hello_up, mut init_up, mut rss_kb) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let mut vm = Vm::boot(&Boot {
            name: &format!("bench-hello-{round}"),
            initrd: &hello,
            append: "quiet",
        });
        let line = vm.expect("hello-pid1: uptime ", DEADLINE);
        hello_up.push(uptime_in(&line).unwrap_or(f64::NAN));
        drop(vm);

        let mut vm = Vm::boot(&Boot {
            name: &format!("bench-init-{round}"),
            initrd: &liken,
            append: "quiet",
        });
        let line = vm.expect("liken: supervisor: ok", DEADLINE);
        init_up.push(uptime_in(&line).unwrap_or(f64::NAN));
        let rss = vm.expect("liken-standin-k3s: init VmRSS:", DEADLINE);
        let kb: f64 = rss
            .split_whitespace()
            .rev()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(f64::NAN);
        rss_kb.push(kb);
    }
    let (h, i) = (median(hello_up.clone()), median(init_up.clone()));
    let rss = median(rss_kb) / 1024.0;
    let mb = size as f64 / 1e6;
    println!(
        "liken-init binary: {mb:.2} MB stripped static (target < 2 MB: {:.2}x of it)",
        mb / 2.0
    );
    println!(
        "liken-init RSS after boot: {rss:.2} MB (target < 4 MB: {:.2}x of it)",
        rss / 4.0
    );
    println!(
        "guest uptime at first line, median of {ROUNDS}: hello-world PID 1 {h:.2} s, liken-init supervisor {i:.2} s"
    );
    println!(
        "initramfs boot: liken-init adds {:.2} s over hello-world ({:.2}x its uptime; target <= 1.5 s more)",
        i - h,
        i / h
    );
    println!("rounds: hello {hello_up:.2?} s, liken-init {init_up:.2?} s");
}
