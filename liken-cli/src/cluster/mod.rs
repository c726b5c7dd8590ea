//! The commands that act on a running cluster: `approve-reboot`,
//! `request-reboot` ([`reboot`]) and the kubectl, stern and flux
//! passthrough ([`passthrough`]).
//!
//! They share one positional argument, the deployment directory, and one
//! way of reaching the cluster from it: an admin credential minted on
//! every run from the identity beside it, valid for an hour
//! ([`kubeconfig::SESSION_LIFETIME`]), so it never expires under a person
//! and a copy left behind is worth little: Kubernetes cannot revoke a
//! client certificate. approve-reboot and plugins keep it in memory. The
//! passthrough needs a file for the tool it runs, so it writes
//! `<dir>/identity/passthrough.kubeconfig` ([`PASSTHROUGH_FILE`]), 0600,
//! at a fixed path because the passthrough replaces this process with the
//! tool (exec) and nothing would be left to delete a temporary file. It
//! never touches `identity/kubeconfig`, the longer-lived file a person
//! asked `liken kubeconfig` for. The endpoint is cluster.yaml's
//! `spec.endpoint`, the address the machines join through; `-server`
//! replaces it when the workstation reaches the API server some other way
//! (a forwarded port, a VPN).
//!
//! Every API call goes through liken-kube.

use std::fmt;
use std::path::{Path, PathBuf};

use std::time::Duration;

use liken_kube::{Api, Client, Config, ListParams};

use crate::identity::kubeconfig::{self, KubeconfigError};

pub mod passthrough;
pub mod reboot;

/// Why a cluster command failed.
#[derive(Debug)]
pub enum ClusterError {
    /// The credential could not be written (no identity, no endpoint).
    Kubeconfig(KubeconfigError),
    /// The written kubeconfig could not be used.
    Config(liken_kube::ConfigError),
    /// The API server refused or did not answer.
    Api(liken_kube::Error),
    /// No Machine of that name.
    NoMachine {
        /// The name asked for.
        name: String,
        /// The API server asked.
        server: String,
    },
    /// request-reboot on a machine that reports no boot.
    NoBoot {
        /// The machine.
        machine: String,
    },
    /// `approve-reboot -all` would approve without asking.
    NotATerminal {
        /// How many machines were listed.
        count: usize,
    },
    /// Reading the answer to the question failed.
    Answer(std::io::Error),
    /// The passthrough's tool is not on PATH.
    ToolMissing {
        /// kubectl, stern or flux.
        tool: &'static str,
    },
    /// exec of the tool failed.
    ToolExec {
        /// The tool's path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterError::Kubeconfig(e) => write!(f, "{e}"),
            ClusterError::Config(e) => write!(f, "{e}"),
            ClusterError::Api(e) => write!(f, "{e}"),
            ClusterError::NoMachine { name, server } => write!(
                f,
                "{server} has no Machine named {name:?}; `liken kubectl <deployment-dir> get \
                 machines` lists the machines the cluster knows"
            ),
            ClusterError::NoBoot { machine } => write!(
                f,
                "{machine} reports no boot time, so there is no boot to request a reboot of; \
                 the machine is still starting, or it has never reported"
            ),
            ClusterError::NotATerminal { count } => write!(
                f,
                "approve-reboot -all asks before it approves {count} {}, and standard input is \
                 not a terminal; run it from a terminal, or add -yes to approve without asking",
                if *count == 1 { "machine" } else { "machines" }
            ),
            ClusterError::Answer(e) => write!(f, "reading the answer: {e}"),
            ClusterError::ToolMissing { tool } => write!(
                f,
                "{tool} is not on PATH; install it and run this again ({})",
                passthrough::install_hint(tool)
            ),
            ClusterError::ToolExec { path, source } => write!(
                f,
                "running {}: {source}; check that it is an executable for this machine",
                path.display()
            ),
        }
    }
}

impl std::error::Error for ClusterError {}

impl From<KubeconfigError> for ClusterError {
    fn from(e: KubeconfigError) -> ClusterError {
        ClusterError::Kubeconfig(e)
    }
}

impl From<liken_kube::ConfigError> for ClusterError {
    fn from(e: liken_kube::ConfigError) -> ClusterError {
        ClusterError::Config(e)
    }
}

impl From<liken_kube::Error> for ClusterError {
    fn from(e: liken_kube::Error) -> ClusterError {
        ClusterError::Api(e)
    }
}

/// The passthrough's kubeconfig, below the deployment.
pub const PASSTHROUGH_FILE: &str = "passthrough.kubeconfig";

/// Writes the passthrough's one-hour admin kubeconfig and returns its
/// path.
pub fn credential(dir: &Path, server: Option<&str>) -> Result<PathBuf, ClusterError> {
    let path = dir
        .join(crate::deployment::IDENTITY_DIR)
        .join(PASSTHROUGH_FILE);
    kubeconfig::write_kubeconfig_to(
        &path,
        dir,
        server,
        kubeconfig::SESSION_LIFETIME,
        time::OffsetDateTime::now_utc(),
    )?;
    Ok(path)
}

/// A client for the deployment's cluster, on a one-hour admin
/// credential held in memory.
pub fn connect(dir: &Path, server: Option<&str>) -> Result<Client, ClusterError> {
    let text = kubeconfig::kubeconfig_text(
        dir,
        server,
        kubeconfig::SESSION_LIFETIME,
        time::OffsetDateTime::now_utc(),
    )?;
    let named = dir
        .join(crate::deployment::IDENTITY_DIR)
        .join("(in memory)");
    Ok(client(&Config::from_kubeconfig_text(
        &text, &named, dir, None,
    )?)?)
}

/// A client that names itself `liken` (User-Agent and fieldManager),
/// under whichever name the binary was run.
fn client(config: &Config) -> Result<Client, liken_kube::ConfigError> {
    Ok(Client::new(config)?.identify("liken", liken_api::BUILD_VERSION))
}

/// The Machines API.
pub fn machines() -> Api {
    Api::all(liken_kube::request::MACHINES)
}

/// The names of the cluster's Machines, for shell completion: `None`
/// unless the cluster answers within `timeout`. It reads the deployment's
/// kubeconfig when one is there and no `-server` was typed (the address
/// that last worked from here), else a credential made in memory; it
/// writes no file.
pub fn machine_names(dir: &Path, server: Option<&str>, timeout: Duration) -> Option<Vec<String>> {
    let written = dir.join(crate::deployment::IDENTITY_DIR).join("kubeconfig");
    let config = match server {
        None if written.is_file() => Config::from_kubeconfig(&written, None).ok()?,
        _ => {
            let text = kubeconfig::kubeconfig_text(
                dir,
                server,
                kubeconfig::SESSION_LIFETIME,
                time::OffsetDateTime::now_utc(),
            )
            .ok()?;
            Config::from_kubeconfig_text(&text, &written, dir, None).ok()?
        }
    };
    let client = client(&config).ok()?;
    let req = machines().list(&ListParams::default()).timeout(timeout);
    let list: serde_json::Value = serde_json::from_slice(&client.send(&req).ok()?).ok()?;
    Some(
        list.get("items")?
            .as_array()?
            .iter()
            .filter_map(|m| m.pointer("/metadata/name")?.as_str().map(str::to_owned))
            .collect(),
    )
}
