//! `k3s agent`: the node's half of k3s, in k3s's order (k3s-io/k3s
//! pkg/agent/run.go): the bundled programs unpacked, the join prepared,
//! the host's modules and sysctls set up, containerd started and
//! answering, the airgap images imported, the kubelet started, then
//! kube-proxy once the kubelet holds its client
//! certificate; the pod network's configuration once the Node has its
//! podCIDR (flannel's moment, see `cni`).
//!
//! Each milestone is printed with the seconds since the launcher started
//! and the guest's uptime, and once the Node is Ready one `start times`
//! line sums them up (issue 25: what each component costs under TCG).
//!
//! Once containerd answers, the launcher also prints containerd's own
//! list of the CRI's containers whenever it changes (`k3s ctr -n k8s.io
//! containers list -q`, with the bundled ctr; [`CONTAINERS_LINE`]): the
//! machine has no shell, and a test judges a pod's containers from the
//! kubelet's report and this list, which the real ctr reads from
//! containerd, not from the kubelet.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::children::{self, Component, Output};
use super::config::{self, Agent};
use super::console::say;
use super::{airgap, bundle, cni, containerd, join, kubelet, syssetup};
use crate::k3s_node::{until_ok, write_private};

/// How long containerd may take to answer on its socket.
const CONTAINERD_WAIT: Duration = Duration::from_secs(300);
/// What starts the line listing containerd's containers.
pub const CONTAINERS_LINE: &str = "containerd's k8s.io containers (ctr containers list):";
/// How often containerd's containers are listed (each ctr run costs a
/// fraction of a second under TCG).
const CONTAINERS_EVERY: Duration = Duration::from_secs(5);

/// Exits with a message naming the `role` (`agent`, `server`) init
/// starts again; init restarts the launcher with backoff.
pub fn exit_for_restart(role: &str, what: &str) -> ! {
    say(&format!("{what}; exiting so init starts the {role} again"));
    std::process::exit(1)
}

fn fail(what: &str) -> ! {
    exit_for_restart("agent", what)
}

/// A milestone's line: seconds since `t0` and the guest's uptime.
pub fn mark(t0: Instant, text: &str) -> f64 {
    let s = t0.elapsed().as_secs_f64();
    say(&format!(
        "{text} [{s:.1} s after start, uptime {:.1} s]",
        children::uptime()
    ));
    s
}

/// Unpacks (or finds) the bundled programs; returns their bin directory.
pub fn programs(data_dir: &Path, t0: Instant) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| fail(&format!("finding myself: {e}")));
    match bundle::ensure(&exe, data_dir) {
        Ok(bundle::Unpacked::Found(d)) => {
            mark(
                t0,
                &format!("the node's programs are unpacked in {}", d.display()),
            );
            d.join("bin")
        }
        Ok(bundle::Unpacked::Now(d, files, bytes)) => {
            mark(
                t0,
                &format!(
                    "unpacked {files} programs ({:.1} MB, digest checked) into {}, as k3s \
                     unpacks its bundled binaries",
                    bytes as f64 / 1e6,
                    d.display()
                ),
            );
            d.join("bin")
        }
        Err(e) => fail(&e.to_string()),
    }
}

/// PATH with the bundled programs first (k3s's `stageAndRun`).
pub fn path_with(bin: &Path) -> String {
    let rest = std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    format!("{}:{rest}", bin.display())
}

/// `k3s agent`; never returns.
pub fn run() -> ! {
    let t0 = Instant::now();
    say(
        "the upstream node launcher, started as k3s agent: containerd, the kubelet and \
         kube-proxy from their own projects, with k3s's paths and defaults; this is not k3s",
    );
    let agent = until_ok("reading the node's configuration", say, config::read_agent);
    run_joined(agent, Path::new(config::FOLLOWER_SERVER_CA), Vec::new(), t0)
}

/// The agent's start from its join on: `agent` joins its server with
/// the agent token, trusting the CA file `server_ca` (a follower's copy
/// of the layer's; a server's own `server/tls/server-ca.crt`), beside
/// the components already `running` (a server's control plane), which
/// the launcher watches with its own. Never returns.
pub fn run_joined(agent: Agent, server_ca: &Path, mut running: Vec<Component>, t0: Instant) -> ! {
    say(&format!(
        "node {} at {} joins {} with the agent token in {}",
        agent.node,
        agent.node_ip,
        agent.server,
        agent.token_file.display()
    ));
    // Timed on its own: on a server, t0 is before the control plane.
    let t = Instant::now();
    let bin = programs(&agent.data_dir, t0);
    let t_unpacked = t.elapsed().as_secs_f64();
    let path = path_with(&bin);

    let id = until_ok("preparing the join", say, || {
        join::prepare(&agent, server_ca)
    });
    say(&format!(
        "the server CA matches the agent token's hash; the kubelet will ask for its \
         certificate as system:bootstrap:{id} (Kubernetes' TLS bootstrap, in place of k3s's \
         supervisor)"
    ));

    match join::ensure_node_password(Path::new(join::NODE_PASSWORD)) {
        Ok(true) => say(&format!(
            "made the node password in {}",
            join::NODE_PASSWORD
        )),
        Ok(false) => say(&format!(
            "kept the node password in {}",
            join::NODE_PASSWORD
        )),
        Err(e) => fail(&format!("the node password: {e}")),
    }

    syssetup::configure(&path);

    let layout = containerd::layout(&agent.data_dir, &bin, &agent.pause_image);
    containerd::prepare(&layout).unwrap_or_else(|e| fail(&e));
    running.push(
        children::start(
            "containerd",
            &bin.join("containerd"),
            &containerd::args(&layout),
            &path,
            Output::File(&layout.log),
        )
        .unwrap_or_else(|e| fail(&e)),
    );
    let t = Instant::now();
    if children::wait_until(CONTAINERD_WAIT, || {
        children::socket_answers(&layout.address)
    })
    .is_none()
    {
        fail(&format!(
            "containerd did not answer on {} within {} s (its log: {})",
            layout.address.display(),
            CONTAINERD_WAIT.as_secs(),
            layout.log.display()
        ));
    }
    let containerd_s = t.elapsed().as_secs_f64();
    mark(t0, &format!("containerd answers after {containerd_s:.1} s"));

    {
        let (bin, sock) = (bin.clone(), layout.address.clone());
        std::thread::spawn(move || relay_containers(&bin, &sock));
    }
    let t = Instant::now();
    import_images(&agent, &bin, &layout.address, &path);
    let images_s = t.elapsed().as_secs_f64();

    write_kubelet_config(&agent, &layout.address).unwrap_or_else(|e| fail(&e));
    running.push(
        children::start(
            "kubelet",
            &bin.join("kubelet"),
            &kubelet::args(&agent, &agent.data(join::BOOTSTRAP_KUBECONFIG)),
            &path,
            Output::Console("kubelet"),
        )
        .unwrap_or_else(|e| fail(&e)),
    );
    let kubelet_started = Instant::now();
    {
        let (agent, bin, layout) = (agent.clone(), bin.clone(), layout.clone());
        let so_far = Startup {
            unpack: t_unpacked,
            containerd: containerd_s,
            images: images_s,
        };
        std::thread::spawn(move || watch(&agent, &bin, &layout, t0, kubelet_started, so_far));
    }

    // The main thread starts every child (see `children`) and ends the
    // launcher when one of them ends.
    let mut proxy_started = false;
    loop {
        for c in &mut running {
            if let Ok(Some(status)) = c.child.try_wait() {
                fail(&format!(
                    "{} ended ({status}) after {:.0} s",
                    c.name,
                    c.started.elapsed().as_secs_f64()
                ));
            }
        }
        if !proxy_started && Path::new(kubelet::KUBELET_CLIENT_PEM).exists() {
            proxy_started = true;
            match start_proxy(&agent, &bin, &path) {
                Ok(c) => running.push(c),
                Err(e) => fail(&e),
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The container IDs of `ctr containers list -q`'s output, sorted.
pub fn decide_containers(text: &str) -> Vec<String> {
    let mut ids: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric()))
        .map(str::to_owned)
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Prints containerd's containers in the `k8s.io` namespace each time
/// the list changes, for the launcher's life.
fn relay_containers(bin: &Path, sock: &Path) {
    let mut last: Option<Vec<String>> = None;
    loop {
        let out = Command::new(bin.join("ctr"))
            .arg("--address")
            .arg(sock)
            .args(["-n", "k8s.io", "containers", "list", "-q"])
            .output();
        if let Ok(o) = out
            && o.status.success()
        {
            let ids = decide_containers(&String::from_utf8_lossy(&o.stdout));
            if last.as_ref() != Some(&ids) {
                say(&format!("{CONTAINERS_LINE} {}", ids.join(" ")));
                last = Some(ids);
            }
        }
        std::thread::sleep(CONTAINERS_EVERY);
    }
}

/// The figures before the kubelet starts.
struct Startup {
    unpack: f64,
    containerd: f64,
    images: f64,
}

fn import_images(agent: &Agent, bin: &Path, sock: &Path, path: &str) {
    let dir = agent.data("agent/images");
    let survey = airgap::survey(&dir);
    if survey.is_empty() {
        say(&format!("no airgap images in {}", dir.display()));
    }
    for (file, verdict) in survey {
        match verdict {
            airgap::Verdict::Import => {
                let t = Instant::now();
                let out = Command::new(bin.join("ctr"))
                    .env("PATH", path)
                    .arg("--address")
                    .arg(sock)
                    .args(["-n", "k8s.io", "images", "import", "--all-platforms"])
                    .arg(&file)
                    .output();
                match out {
                    Ok(o) if o.status.success() => say(&format!(
                        "imported {} into containerd's k8s.io namespace in {:.1} s: {}",
                        file.display(),
                        t.elapsed().as_secs_f64(),
                        String::from_utf8_lossy(&o.stdout)
                            .split_whitespace()
                            .collect::<Vec<_>>()
                            .join(" ")
                    )),
                    Ok(o) => say(&format!(
                        "ctr could not import {} ({}): {}",
                        file.display(),
                        o.status,
                        String::from_utf8_lossy(&o.stderr).trim()
                    )),
                    Err(e) => say(&format!("cannot run ctr: {e}")),
                }
            }
            airgap::Verdict::NotHere(why) => {
                say(&format!("{} not imported: {why}", file.display()));
            }
            airgap::Verdict::Ignore => {}
        }
    }
}

fn write_kubelet_config(agent: &Agent, sock: &Path) -> Result<(), String> {
    let dir = agent.data("agent/etc/kubelet.conf.d");
    std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let manifests = agent.data("agent/pod-manifests");
    std::fs::create_dir_all(&manifests)
        .map_err(|e| format!("mkdir {}: {e}", manifests.display()))?;
    let file = dir.join("00-k3s-defaults.conf");
    let text =
        serde_json::to_string_pretty(&kubelet::config(agent, sock)).map_err(|e| e.to_string())?;
    write_private(&file, text.as_bytes())
}

fn start_proxy(agent: &Agent, bin: &Path, path: &str) -> Result<Component, String> {
    let kc = agent.data("agent/kubeproxy.kubeconfig");
    write_private(
        &kc,
        join::kubeconfig(
            &agent.server,
            &agent.data("agent/server-ca.crt"),
            &join::cert_user(Path::new(kubelet::KUBELET_CLIENT_PEM)),
        )
        .as_bytes(),
    )?;
    children::start(
        "kube-proxy",
        &bin.join("kube-proxy"),
        &kubelet::proxy_args(agent),
        path,
        Output::Console("kube-proxy"),
    )
}

/// `kubectl get node <node> -o jsonpath=<template>` with the kubelet's
/// own credentials.
fn node_field(agent: &Agent, bin: &Path, template: &str) -> Option<String> {
    let out = Command::new(bin.join("kubectl"))
        .arg("--kubeconfig")
        .arg(agent.data("agent/kubelet.kubeconfig"))
        .args(["get", "node", &agent.node, "-o"])
        .arg(format!("jsonpath={template}"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// What `kubectl get node` printed for `<podCIDR>|<bootID>|<Ready>`: the
/// podCIDR when it has one, and whether the Node is Ready as this boot's
/// kubelet reported it. A Node outlives its machine's reboots, Ready
/// from the boot before until the node controller notices, so only a
/// Ready posted with this boot's ID (the kubelet posts both in one
/// status) counts.
pub fn decide_node(fields: &str, boot_id: &str) -> (Option<String>, bool) {
    let mut parts = fields.split('|');
    let cidr = parts.next().and_then(cni::decide_cidr);
    let node_boot = parts.next().unwrap_or_default().trim();
    let ready = parts.next().unwrap_or_default().trim() == "True";
    let boot_id = boot_id.trim();
    (cidr, ready && !boot_id.is_empty() && node_boot == boot_id)
}

/// `MemTotal - MemAvailable` of /proc/meminfo, in MB, beside MemTotal.
pub fn memory_in_use() -> String {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kb = |key: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(key))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    match (kb("MemTotal:"), kb("MemAvailable:")) {
        (Some(t), Some(a)) => format!("{} MB of {} MB", t.saturating_sub(a) / 1024, t / 1024),
        _ => "unknown (no /proc/meminfo)".into(),
    }
}

/// Watches the kubelet come up: its certificate, its health, kube-proxy's,
/// the Node's podCIDR (then the CNI configuration) and Ready; prints
/// each with its time and, at Ready, the `start times` line.
fn watch(
    agent: &Agent,
    bin: &Path,
    layout: &containerd::Layout,
    t0: Instant,
    kubelet_started: Instant,
    so_far: Startup,
) {
    let since = |t: Instant| t.elapsed().as_secs_f64();
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let (mut cert, mut health, mut proxy, mut registered, mut cidr, mut ready) =
        (None, None, None, None, None, None);
    loop {
        if cert.is_none() && Path::new(kubelet::KUBELET_CLIENT_PEM).exists() {
            cert = Some(since(kubelet_started));
            mark(
                t0,
                "the kubelet holds its client certificate (TLS bootstrap done)",
            );
        }
        if health.is_none() && children::healthz(kubelet::HEALTHZ, "/healthz") {
            health = Some(since(kubelet_started));
            mark(t0, "the kubelet's healthz answers ok");
        }
        if proxy.is_none() && children::healthz(kubelet::PROXY_HEALTHZ, "/healthz") {
            proxy = Some(since(kubelet_started));
            mark(t0, "kube-proxy's healthz answers ok");
        }
        if cert.is_some()
            && (registered.is_none() || cidr.is_none() || ready.is_none())
            && let Some(fields) = node_field(
                agent,
                bin,
                "{.spec.podCIDR}|{.status.nodeInfo.bootID}|{.status.conditions[?(@.type==\"Ready\")].status}",
            )
        {
            if registered.is_none() {
                registered = Some(since(kubelet_started));
                mark(t0, &format!("Node {} is registered", agent.node));
            }
            let (c, ready_now) = decide_node(&fields, &boot_id);
            if cidr.is_none()
                && let Some(c) = c
            {
                let file = layout.cni_conf.join(cni::FILE);
                match std::fs::write(&file, cni::render(&c)) {
                    Ok(()) => {
                        cidr = Some(since(kubelet_started));
                        mark(
                            t0,
                            &format!(
                                "Node {} has podCIDR {c}: wrote {} (a bridge on cni0, in \
                                     place of flannel)",
                                agent.node,
                                file.display()
                            ),
                        );
                    }
                    Err(e) => say(&format!("writing {}: {e}", file.display())),
                }
            }
            if ready.is_none() && ready_now {
                ready = Some(since(kubelet_started));
                let total = mark(t0, &format!("Node {} is Ready", agent.node));
                let f = |v: Option<f64>| v.map_or("-".to_owned(), |s| format!("{s:.1}"));
                say(&format!(
                    "start times: unpack {:.1} s, containerd {:.1} s, images {:.1} s; from \
                         the kubelet's start: certificate {} s, healthz {} s, registered {} s, \
                         podCIDR {} s, Ready {} s, kube-proxy healthz {} s; start to Ready \
                         {total:.1} s; memory in use {}",
                    so_far.unpack,
                    so_far.containerd,
                    so_far.images,
                    f(cert),
                    f(health),
                    f(registered),
                    f(cidr),
                    f(ready),
                    f(proxy),
                    memory_in_use()
                ));
            }
        }
        if ready.is_some() && proxy.is_some() {
            return;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_from_ctrs_quiet_list() {
        assert_eq!(
            decide_containers("b2c3\na1f0\n\nb2c3\nnot an id\n"),
            ["a1f0", "b2c3"]
        );
        assert!(decide_containers("").is_empty());
    }

    #[test]
    fn only_this_boots_ready_counts() {
        let boot = "0c6b0ecc-7fde-4b1a-9d1e-2f3a4b5c6d7e\n";
        assert_eq!(
            decide_node(
                "10.42.0.0/24|0c6b0ecc-7fde-4b1a-9d1e-2f3a4b5c6d7e|True",
                boot
            ),
            (Some("10.42.0.0/24".into()), true)
        );
        assert_eq!(
            decide_node("10.42.0.0/24|an-older-boot|True", boot),
            (Some("10.42.0.0/24".into()), false)
        );
        assert_eq!(
            decide_node("|0c6b0ecc-7fde-4b1a-9d1e-2f3a4b5c6d7e|False", boot),
            (None, false)
        );
        assert_eq!(decide_node("||", ""), (None, false));
    }
}
