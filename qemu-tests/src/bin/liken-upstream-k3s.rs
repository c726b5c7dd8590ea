//! liken-upstream-k3s: the upstream node launcher, a test-only program
//! the QEMU tests put at k3s's path (`make upstream-images`), which runs
//! a real node (containerd, runc, the kubelet, kube-proxy) from the
//! parts k3s is made of, with k3s's paths and defaults. It is not k3s
//! and says so on every line. See `qemu-tests/src/upstream/mod.rs`.
//!
//! - `k3s agent`: the node (`upstream::agent`);
//! - `k3s server`: the control plane, then the node (`upstream::server`);
//! - `k3s kubectl <args>` and `k3s ctr <args>`: the bundled kubectl and
//!   ctr, as k3s's multicall binary runs them (k3s-io/k3s
//!   cmd/k3s/main.go: `externalCLI` / `stageAndRun`; kubectl defaults
//!   `KUBECONFIG` to /etc/rancher/k3s/k3s.yaml when neither it nor
//!   `--kubeconfig` is given, pkg/kubectl/main.go; ctr gets k3s's
//!   containerd socket in `CONTAINERD_ADDRESS`, pkg/ctr/main.go).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

#[path = "../k3s_node.rs"]
mod k3s_node;
#[path = "../upstream/mod.rs"]
mod upstream;

use upstream::console::say;
use upstream::{agent, bundle, children, config, server};

/// The data directory, from config.yaml when it names one.
fn data_dir() -> std::path::PathBuf {
    std::fs::read_to_string(config::CONFIG_PATH)
        .ok()
        .and_then(|t| config::parse(&t).ok())
        .and_then(|c| c.data_dir)
        .unwrap_or_else(|| config::DEFAULT_DATA_DIR.into())
}

/// Runs a bundled CLI in place of this process. Its stdout is the
/// CLI's alone (init reads kubectl's answer from it), so the launcher's
/// own words go to stderr.
fn exec_cli(name: &str, args: &[String]) -> ! {
    let prefix = upstream::console::PREFIX;
    let exe = std::env::current_exe().unwrap_or_else(|e| {
        eprintln!("{prefix} finding myself: {e}");
        std::process::exit(127)
    });
    let bin = match bundle::ensure(&exe, &data_dir()) {
        Ok(bundle::Unpacked::Found(d) | bundle::Unpacked::Now(d, _, _)) => d.join("bin"),
        Err(e) => {
            eprintln!("{prefix} {e}");
            std::process::exit(127)
        }
    };
    let mut cmd = Command::new(bin.join(name));
    cmd.args(args).env("PATH", agent::path_with(&bin));
    if name == "kubectl"
        && std::env::var_os("KUBECONFIG").is_none()
        && !args.iter().any(|a| a.starts_with("--kubeconfig"))
        && Path::new("/etc/rancher/k3s/k3s.yaml").exists()
    {
        cmd.env("KUBECONFIG", "/etc/rancher/k3s/k3s.yaml");
    }
    if name == "ctr" && std::env::var_os("CONTAINERD_ADDRESS").is_none() {
        cmd.env("CONTAINERD_ADDRESS", "/run/k3s/containerd/containerd.sock");
    }
    let e = cmd.exec();
    eprintln!("{prefix} cannot run {}: {e}", bin.join(name).display());
    std::process::exit(127)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (sub, rest) = args
        .split_first()
        .map_or(("", &[][..]), |(s, r)| (s.as_str(), r));
    match sub {
        children::TRAMPOLINE => children::trampoline(rest),
        "agent" => agent::run(),
        "kubectl" | "ctr" => exec_cli(sub, rest),
        "server" => server::run(),
        other => {
            say(&format!(
                "k3s {other:?} is not a command this launcher knows (agent, server, kubectl, ctr)"
            ));
            std::process::exit(2)
        }
    }
}
