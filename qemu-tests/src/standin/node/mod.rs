//! The node stand-in (instruction `node`): what k3s and its kubelet
//! would do for liken on this machine, done by a test program that says
//! so on every line, against a control plane the test runs on its host.
//!
//! Started as `k3s server` (a leader) or `k3s agent` (a follower), it:
//!
//! 1. reads k3s's config.yaml and the Cluster document init runs
//!    ([`config`]);
//! 2. gets the kubelet's credentials as k3s would: a server mints them
//!    from the client CA it holds, an agent exchanges its join token for
//!    a certificate ([`credentials`]; a server also lets agents do that,
//!    [`supervisor`]);
//! 3. on a server, applies the auto-deploy manifests init seeded, as
//!    k3s's deploy controller does ([`deploy`]);
//! 4. registers the Node, reports its status and renews its Lease
//!    ([`kubelet`]);
//! 5. imports the operator images from k3s's airgap directory
//!    ([`images`]) and runs the DaemonSet pods bound to this node from
//!    them, in namespaces of their own ([`pods`], [`runtime`],
//!    [`container`]);
//!
//! and as `k3s kubectl get node <name>` it answers liken-init's health
//! question from the real Node ([`kubectl`]).

mod config;
pub mod container;
mod credentials;
mod deploy;
mod images;
mod jsonpath;
pub mod kubectl;
mod kubelet;
mod pods;
mod runtime;
mod supervisor;

use std::path::Path;
use std::time::Duration;

use crate::k3s_node::until_ok;
use config::{Role, Setup};

/// Where the stand-in unpacks images, below k3s's data directory on
/// /var, as containerd keeps its image store there across boots.
const IMAGE_STORE: &str = "agent/liken-standin-images";

fn read_setup(subcommand: &str) -> Result<Setup, String> {
    let text = std::fs::read_to_string(config::CONFIG_PATH)
        .map_err(|e| format!("reading {}: {e}", config::CONFIG_PATH))?;
    let cfg = config::parse(&text)?;
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    config::decide_setup(
        subcommand,
        &cfg,
        config::cluster_endpoint(Path::new(config::CLUSTER_DOCUMENT)).as_deref(),
        hostname.trim(),
    )
}

/// `k3s server` or `k3s agent` in node mode; never returns.
pub fn run(subcommand: &str) -> ! {
    let setup = until_ok("reading the node's configuration", crate::say, || {
        read_setup(subcommand)
    });
    crate::say(&format!(
        "node stand-in for {} as k3s {subcommand} (not k3s): the control plane is at {}",
        setup.node, setup.endpoint
    ));
    let creds = until_ok("getting the kubelet's credentials", crate::say, || {
        credentials::obtain(&setup)
    });
    if setup.role == Role::Server
        && let Some(admin) = creds.admin.clone()
    {
        until_ok("letting agents join", crate::say, || {
            supervisor::let_agents_join(&admin, &setup)
        });
        let dir = setup.data("server/manifests");
        std::thread::spawn(move || {
            let mut deployer = deploy::Deployer::new(dir, admin);
            loop {
                deployer.pass();
                std::thread::sleep(Duration::from_secs(10));
            }
        });
    }
    let kubelet = kubelet::Kubelet::new(creds.kubelet.clone(), setup.clone());
    until_ok("registering the Node", crate::say, || kubelet.register());
    std::thread::spawn(move || kubelet.heartbeat());

    let dir = setup.data("agent/images");
    let store = setup.data(IMAGE_STORE);
    let (mut images, problems) = images::import_dir(&dir, &store);
    for p in &problems {
        crate::say(&format!("images: {p}; not imported"));
    }
    for old in images::kept(&store) {
        if !images.iter().any(|i| i.name == old.name) {
            crate::say(&format!(
                "image {} ({}) kept from an earlier boot's import",
                old.name, old.digest
            ));
            images.push(old);
        }
    }
    crate::say(&format!(
        "imported {} images from {}, as k3s's airgap import would: {}",
        images.len(),
        dir.display(),
        images
            .iter()
            .map(|i| format!("{} ({})", i.name, i.digest))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let ip = kubelet::Facts::read(&setup.endpoint).address;
    pods::Pods::new(creds.kubelet, setup, images, ip).run()
}
