//! What the node stand-in reads to know which node it is and where its
//! cluster is: k3s's own config.yaml (which liken-init renders), the
//! Cluster document init runs, and the layer init keeps in /run.
//!
//! k3s reads `/etc/rancher/k3s/config.yaml` for the flags it was not
//! given (k3s-io/k3s pkg/configfilearg): the keys are the flags' names.
//! The stand-in reads the ones a node needs: `node-name`, `data-dir`,
//! `token-file`, `agent-token-file` (leaders), `server` (followers, and
//! leaders joining a first one), `node-label` and `node-taint`. Other
//! keys (`cluster-init`, `tls-san`, ...) are a server's business, and
//! this server's control plane is the test's, on the host.

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use crate::k3s_node::{CONFIG_PATH, DEFAULT_DATA_DIR, FOLLOWER_SERVER_CA};
/// The Cluster document init runs this boot.
pub const CLUSTER_DOCUMENT: &str = "/run/liken/documents/cluster.yaml";

/// config.yaml, the keys the stand-in uses.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub struct K3sConfig {
    /// The node's name (else the hostname).
    #[serde(default)]
    pub node_name: Option<String>,
    /// k3s's data directory.
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// The join token's file.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// The agent token's file (servers).
    #[serde(default)]
    pub agent_token_file: Option<PathBuf>,
    /// The server to join.
    #[serde(default)]
    pub server: Option<String>,
    /// `key=value` labels for the Node.
    #[serde(default)]
    pub node_label: Vec<String>,
    /// `key=value:Effect` taints for the Node.
    #[serde(default)]
    pub node_taint: Vec<String>,
}

/// Reads config.yaml's text.
pub fn parse(text: &str) -> Result<K3sConfig, String> {
    serde_yaml::from_str(text).map_err(|e| format!("{CONFIG_PATH}: {e}"))
}

/// Whether k3s runs as a server (a leader) or an agent (a follower).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `k3s server`.
    Server,
    /// `k3s agent`.
    Agent,
}

/// Everything the node stand-in needs to know about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setup {
    /// Server or agent.
    pub role: Role,
    /// The Node's name.
    pub node: String,
    /// The apiserver's URL.
    pub endpoint: String,
    /// k3s's data directory.
    pub data_dir: PathBuf,
    /// The join token's file.
    pub token_file: PathBuf,
    /// The agent token's file, on servers.
    pub agent_token_file: Option<PathBuf>,
    /// `key=value` labels.
    pub labels: Vec<(String, String)>,
    /// Taints: key, value, effect.
    pub taints: Vec<(String, String, String)>,
}

impl Setup {
    /// `<data-dir>/<rel>`.
    pub fn data(&self, rel: &str) -> PathBuf {
        self.data_dir.join(rel)
    }

    /// Where the server CA certificate is: a server's own copy in its
    /// data directory, a follower's in the layer init keeps.
    pub fn server_ca_path(&self) -> PathBuf {
        match self.role {
            Role::Server => self.data("server/tls/server-ca.crt"),
            Role::Agent => PathBuf::from(FOLLOWER_SERVER_CA),
        }
    }
}

/// Decides the setup from the subcommand k3s was started with, its
/// config.yaml, the Cluster's `spec.endpoint` and the hostname.
///
/// A server's control plane runs on the test's host, not here, so a
/// server reaches it where the Cluster says the API answers (its
/// `spec.endpoint`), as its own agent would reach a k3s server's
/// apiserver; an agent joins `server`, as k3s's agent does.
pub fn decide_setup(
    subcommand: &str,
    config: &K3sConfig,
    cluster_endpoint: Option<&str>,
    hostname: &str,
) -> Result<Setup, String> {
    let role = match subcommand {
        "server" => Role::Server,
        "agent" => Role::Agent,
        other => {
            return Err(format!(
                "k3s {other} is not a node's command (server or agent)"
            ));
        }
    };
    let endpoint = match role {
        Role::Agent => config
            .server
            .clone()
            .ok_or_else(|| format!("{CONFIG_PATH} names no server for an agent to join"))?,
        Role::Server => cluster_endpoint
            .map(str::to_owned)
            .ok_or_else(|| format!("{CLUSTER_DOCUMENT} has no spec.endpoint"))?,
    };
    if !endpoint.starts_with("https://") {
        return Err(format!("the API endpoint {endpoint} is not an https URL"));
    }
    let node = config
        .node_name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| hostname.to_owned());
    if node.is_empty() {
        return Err(
            "the node has no name: config.yaml has no node-name and the hostname is empty".into(),
        );
    }
    let token_file = config
        .token_file
        .clone()
        .ok_or_else(|| format!("{CONFIG_PATH} names no token-file"))?;
    let mut labels = Vec::new();
    for l in &config.node_label {
        let (k, v) = l
            .split_once('=')
            .ok_or_else(|| format!("node-label {l:?} is not key=value"))?;
        labels.push((k.to_owned(), v.to_owned()));
    }
    let mut taints = Vec::new();
    for t in &config.node_taint {
        let (kv, effect) = t
            .rsplit_once(':')
            .ok_or_else(|| format!("node-taint {t:?} is not key=value:Effect"))?;
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        taints.push((k.to_owned(), v.to_owned(), effect.to_owned()));
    }
    Ok(Setup {
        role,
        node,
        endpoint,
        data_dir: config
            .data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR)),
        token_file,
        agent_token_file: config.agent_token_file.clone(),
        labels,
        taints,
    })
}

/// `spec.endpoint` of the Cluster document at `path`, if it has one.
pub fn cluster_endpoint(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).ok()?;
    doc.get("spec")?
        .get("endpoint")?
        .as_str()
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FOLLOWER: &str = "node-name: \"node-2\"\ndata-dir: \"/var/lib/rancher/k3s\"\n\
        token-file: \"/var/lib/liken/k3s-token\"\nserver: \"https://10.0.2.2:6443\"\n\
        node-label:\n  - \"zone=a\"\nnode-taint:\n  - \"gpu=yes:NoSchedule\"\n";

    #[test]
    fn an_agent_joins_its_server() {
        let c = parse(FOLLOWER).unwrap();
        let s = decide_setup("agent", &c, None, "ignored").unwrap();
        assert_eq!(s.role, Role::Agent);
        assert_eq!(s.node, "node-2");
        assert_eq!(s.endpoint, "https://10.0.2.2:6443");
        assert_eq!(s.labels, vec![("zone".to_owned(), "a".to_owned())]);
        assert_eq!(
            s.taints,
            vec![("gpu".to_owned(), "yes".to_owned(), "NoSchedule".to_owned())]
        );
        assert_eq!(s.server_ca_path(), PathBuf::from(FOLLOWER_SERVER_CA));
    }

    #[test]
    fn a_server_reaches_the_clusters_endpoint() {
        let c = parse(
            "data-dir: \"/d\"\ntoken-file: \"/d/server/token\"\ncluster-init: true\ntls-san:\n  - x\n",
        )
        .unwrap();
        let s = decide_setup("server", &c, Some("https://10.0.2.2:1"), "node-1").unwrap();
        assert_eq!(
            (s.node.as_str(), s.endpoint.as_str()),
            ("node-1", "https://10.0.2.2:1")
        );
        assert_eq!(
            s.server_ca_path(),
            PathBuf::from("/d/server/tls/server-ca.crt")
        );
        assert!(decide_setup("server", &c, None, "node-1").is_err());
        assert!(decide_setup("etcd-snapshot", &c, Some("https://x"), "n").is_err());
        assert!(decide_setup("server", &c, Some("http://x"), "n").is_err());
    }
}
