//! What the launcher reads to know which node it is and where it joins:
//! k3s's config.yaml, which liken-init renders, and the server CA a
//! follower keeps of the layer.
//!
//! k3s reads `/etc/rancher/k3s/config.yaml` for every flag it was not
//! given (k3s-io/k3s pkg/configfilearg): the keys are the flags' names.
//! The agent needs `server`, `token-file`, `node-name` (else the
//! hostname, pkg/agent/config/config.go), `node-ip` (else the address of
//! the interface the default route leaves by, as k3s's
//! util.GetHostnameAndIPs finds it), `data-dir` (default
//! /var/lib/rancher/k3s, pkg/daemons/config), `node-label`,
//! `node-taint` and `pause-image` (k3s's `--pause-image`,
//! pkg/cli/cmds/agent.go `PauseImageFlag`, whose default is
//! `DefaultPauseImage` of pkg/cli/cmds/const_linux.go,
//! `rancher/mirrored-pause:3.10`; the launcher's default is the pause
//! image its own release ships, [`DEFAULT_PAUSE_IMAGE`]). Keys a server reads (`cluster-init`, `tls-san`,
//! `agent-token-file`) are ignored here.

use std::path::PathBuf;

use serde::{Deserialize, Deserializer};

pub use crate::k3s_node::{CONFIG_PATH, DEFAULT_DATA_DIR, FOLLOWER_SERVER_CA};
/// The pod sandbox image when config.yaml names none: the one `make
/// upstream-images` builds from `liken-pause` and puts in the release's
/// airgap images. k3s's default names Rancher's image on Docker Hub,
/// which no archive here carries and nothing here may pull; the
/// Makefile's `UPSTREAM_PAUSE` must be this same name.
pub const DEFAULT_PAUSE_IMAGE: &str = "liken.sh/liken-upstream-pause:1";

/// config.yaml, the keys the agent uses.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub struct K3sConfig {
    /// The node's name.
    #[serde(default)]
    pub node_name: Option<String>,
    /// The node's address(es), the primary first.
    #[serde(default, deserialize_with = "one_or_many")]
    pub node_ip: Vec<String>,
    /// k3s's data directory.
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// The join token's file.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The server to join.
    #[serde(default)]
    pub server: Option<String>,
    /// `key=value` labels.
    #[serde(default, deserialize_with = "one_or_many")]
    pub node_label: Vec<String>,
    /// `key=value:Effect` taints.
    #[serde(default, deserialize_with = "one_or_many")]
    pub node_taint: Vec<String>,
    /// The pod sandbox image.
    #[serde(default)]
    pub pause_image: Option<String>,
}

/// A slice flag's value in config.yaml, as k3s reads it: its
/// configfilearg turns a YAML sequence into one `--key=item` per item and
/// a scalar into one `--key=value` (k3s-io/k3s pkg/configfilearg/parser.go,
/// readConfigFile), so `node-ip: 10.0.0.1` and `node-ip: [10.0.0.1]` are
/// the same list. liken-init writes the sequence form.
pub fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

/// The items of a slice flag that k3s also splits at commas
/// (`util.SplitStringSlice`, which k3s applies to `node-ip` and
/// `tls-san`), trimmed, empty ones dropped.
pub fn split_commas(values: &[String]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Reads config.yaml's text.
pub fn parse(text: &str) -> Result<K3sConfig, String> {
    serde_yaml::from_str(text).map_err(|e| format!("{CONFIG_PATH}: {e}"))
}

/// Everything the agent needs to know about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Agent {
    /// The Node's name.
    pub node: String,
    /// The node's IPv4 address.
    pub node_ip: String,
    /// The apiserver (`https://host:port`).
    pub server: String,
    /// k3s's data directory.
    pub data_dir: PathBuf,
    /// The join token's file.
    pub token_file: PathBuf,
    /// `key=value` labels.
    pub labels: Vec<String>,
    /// `key=value:Effect` taints.
    pub taints: Vec<String>,
    /// The pod sandbox image containerd pins.
    pub pause_image: String,
}

impl Agent {
    /// `<data-dir>/<rel>`.
    pub fn data(&self, rel: &str) -> PathBuf {
        self.data_dir.join(rel)
    }
}

/// Decides the agent's setup from config.yaml, the hostname and the
/// default route's address.
pub fn decide_agent(
    config: &K3sConfig,
    hostname: &str,
    route_ip: Option<&str>,
) -> Result<Agent, String> {
    let server = config
        .server
        .clone()
        .ok_or_else(|| format!("{CONFIG_PATH} names no server for the agent to join"))?;
    if !server.starts_with("https://") {
        return Err(format!("the server {server} is not an https URL"));
    }
    let node = config
        .node_name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| hostname.to_owned());
    if node.is_empty() {
        return Err(
            "the node has no name: config.yaml has no node-name and the hostname is \
                    empty"
                .into(),
        );
    }
    // k3s takes the first of node-ip's addresses as the primary.
    let node_ips = split_commas(&config.node_ip);
    let node_ip = node_ips
        .first()
        .map(String::as_str)
        .or(route_ip)
        .ok_or_else(|| {
            "no node-ip in config.yaml and no default route to take the address of; the \
             network step must bring an interface up first"
                .to_owned()
        })?
        .to_owned();
    let token_file = config
        .token_file
        .clone()
        .ok_or_else(|| format!("{CONFIG_PATH} names no token-file"))?;
    Ok(Agent {
        node,
        node_ip,
        server,
        data_dir: config
            .data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR)),
        token_file,
        labels: config.node_label.clone(),
        taints: config.node_taint.clone(),
        pause_image: config
            .pause_image
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| DEFAULT_PAUSE_IMAGE.to_owned()),
    })
}

/// The interface the IPv4 default route leaves by, from
/// /proc/net/route's text.
pub fn decide_route_dev(table: &str) -> Option<String> {
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            [dev, "00000000", _, _, _, _, _, "00000000", ..] => Some((*dev).to_owned()),
            _ => None,
        }
    })
}

/// The IPv4 address of the interface the default route leaves by.
pub fn route_ip() -> Option<String> {
    let table = std::fs::read_to_string("/proc/net/route").ok()?;
    let dev = decide_route_dev(&table)?;
    nix::ifaddrs::getifaddrs().ok()?.find_map(|a| {
        let v4 = a.address.as_ref()?.as_sockaddr_in()?.ip();
        (a.interface_name == dev).then(|| v4.to_string())
    })
}

/// Reads config.yaml and decides the agent's setup.
pub fn read_agent() -> Result<Agent, String> {
    let text =
        std::fs::read_to_string(CONFIG_PATH).map_err(|e| format!("reading {CONFIG_PATH}: {e}"))?;
    let cfg = parse(&text)?;
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    decide_agent(&cfg, hostname.trim(), route_ip().as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_from_inits_config() {
        let cfg = parse(
            "node-name: node-2\ndata-dir: /var/lib/rancher/k3s\ntoken-file: \
             /var/lib/liken/k3s-token\nserver: https://10.0.2.2:6443\nnode-label:\n- a=b\n",
        )
        .unwrap();
        let a = decide_agent(&cfg, "ignored", Some("10.0.2.15")).unwrap();
        assert_eq!(a.node, "node-2");
        assert_eq!(a.node_ip, "10.0.2.15");
        assert_eq!(a.server, "https://10.0.2.2:6443");
        assert_eq!(a.labels, ["a=b"]);
        assert_eq!(a.data("agent"), PathBuf::from("/var/lib/rancher/k3s/agent"));
        assert_eq!(a.pause_image, DEFAULT_PAUSE_IMAGE);
        let cfg =
            parse("server: https://s:6443\ntoken-file: /t\npause-image: r.example/p:3\n").unwrap();
        let a = decide_agent(&cfg, "host", Some("10.0.2.15")).unwrap();
        assert_eq!(a.pause_image, "r.example/p:3");
    }

    /// What liken-init writes is what the launcher reads: init's own
    /// rendering for a leader and a follower with static addresses
    /// (node-ip, tls-san and the labels as YAML sequences) gives the
    /// first static address as the node's, the endpoint's host as a SAN.
    #[test]
    fn inits_rendering_is_read_with_its_sequences() {
        use liken_api::machine::{InterfaceSpec, NetworkSpec};
        use liken_api::{Cluster, ClusterSpec, Machine, MachineSpec};
        use liken_init::seed::render_k3s_config;
        let cluster = Cluster::new(
            "fleet",
            ClusterSpec {
                endpoint: "https://192.168.77.1:6443".into(),
                leaders: vec!["node-1".into()],
                ..ClusterSpec::default()
            },
        );
        let machine = |name: &str, address: &str| {
            Machine::new(
                name,
                MachineSpec {
                    network: Some(NetworkSpec {
                        interfaces: vec![
                            InterfaceSpec {
                                mac: Some("52:54:00:00:00:01".into()),
                                dhcp: true,
                                ..InterfaceSpec::default()
                            },
                            InterfaceSpec {
                                mac: Some("52:54:00:00:77:01".into()),
                                addresses: vec![address.into(), "fd00::1/64".into()],
                                ..InterfaceSpec::default()
                            },
                        ],
                        ..NetworkSpec::default()
                    }),
                    ..MachineSpec::default()
                },
            )
        };
        let leader = render_k3s_config(
            &machine("node-1", "192.168.77.1/24"),
            &cluster,
            liken_api::Role::Leader,
            true,
        );
        let cfg = parse(&leader).unwrap_or_else(|e| panic!("{e}\n{leader}"));
        assert_eq!(cfg.node_ip, ["192.168.77.1", "fd00::1"], "{leader}");
        let a = decide_agent(
            &K3sConfig {
                server: Some("https://127.0.0.1:6443".into()),
                ..cfg
            },
            "host",
            Some("10.0.2.15"),
        )
        .unwrap();
        assert_eq!(
            (a.node.as_str(), a.node_ip.as_str()),
            ("node-1", "192.168.77.1")
        );
        let server: crate::upstream::server::ServerConfig = serde_yaml::from_str(&leader).unwrap();
        assert_eq!(server.tls_san, ["192.168.77.1"]);
        assert!(
            server.cluster_init && !server.kube_apiserver_arg.is_empty(),
            "{leader}"
        );
        // init's leader-election timings reach both controllers' flags,
        // after k3s's own, where the last of a repeated flag wins.
        let parsed = crate::upstream::server::decide_server(&leader, "node-1", None).unwrap();
        for args in [&parsed.controller_args, &parsed.scheduler_args] {
            assert_eq!(args, &liken_init::seed::LEADER_ELECTION_ARGS, "{leader}");
        }
        let flags = crate::upstream::control::controller_manager(
            std::path::Path::new("/var/lib/rancher/k3s/server"),
            &parsed.controller_args,
        );
        assert!(
            flags.ends_with(&[
                "--leader-elect-lease-duration=60s".to_owned(),
                "--leader-elect-renew-deadline=40s".to_owned()
            ]),
            "{flags:?}"
        );

        let follower = render_k3s_config(
            &machine("node-2", "192.168.77.2/24"),
            &cluster,
            liken_api::Role::Follower,
            false,
        );
        let cfg = parse(&follower).unwrap_or_else(|e| panic!("{e}\n{follower}"));
        let a = decide_agent(&cfg, "host", Some("10.0.2.15")).unwrap();
        assert_eq!(a.node_ip, "192.168.77.2");
        assert_eq!(a.server, "https://192.168.77.1:6443");
    }

    /// k3s reads a slice flag's scalar and its sequence alike, and splits
    /// node-ip at commas.
    #[test]
    fn a_slice_flag_is_a_scalar_or_a_sequence() {
        let one = parse("node-ip: 10.1.1.1,fd00::1\nnode-label: a=b\n").unwrap();
        let many = parse("node-ip:\n  - 10.1.1.1\n  - fd00::1\nnode-label: [a=b]\n").unwrap();
        assert_eq!(split_commas(&one.node_ip), split_commas(&many.node_ip));
        assert_eq!(one.node_label, many.node_label);
        assert!(parse("node-ip: {a: b}\n").is_err());
    }

    /// The Makefile images the sandbox under the name the launcher pins
    /// (upstream-images, `UPSTREAM_PAUSE`); another name would leave
    /// every pod without a sandbox and containerd trying to pull one.
    #[test]
    fn the_makefile_builds_the_pinned_pause_image() {
        let makefile = concat!(env!("CARGO_MANIFEST_DIR"), "/../Makefile");
        let text = std::fs::read_to_string(makefile).unwrap();
        assert!(
            text.lines()
                .any(|l| l == format!("UPSTREAM_PAUSE := {DEFAULT_PAUSE_IMAGE}")),
            "{makefile} does not set UPSTREAM_PAUSE := {DEFAULT_PAUSE_IMAGE}"
        );
    }

    #[test]
    fn node_ip_and_name_fall_back_as_k3s_does() {
        let cfg =
            parse("server: https://s:6443\ntoken-file: /t\nnode-ip: 10.1.1.1,fd00::1\n").unwrap();
        let a = decide_agent(&cfg, "host", Some("10.0.2.15")).unwrap();
        assert_eq!((a.node.as_str(), a.node_ip.as_str()), ("host", "10.1.1.1"));
        let cfg = parse("server: https://s:6443\ntoken-file: /t\n").unwrap();
        assert!(decide_agent(&cfg, "host", None).is_err());
        let cfg = parse("token-file: /t\n").unwrap();
        assert!(decide_agent(&cfg, "host", Some("1.2.3.4")).is_err());
    }

    #[test]
    fn the_default_routes_interface() {
        let table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                     eth0\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
                     eth0\t00000000\t0202000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
        assert_eq!(decide_route_dev(table).as_deref(), Some("eth0"));
        assert_eq!(decide_route_dev("Iface\n"), None);
    }
}
