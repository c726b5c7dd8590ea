//! The cluster operator's own binary for the machine tests that need the
//! whole fleet: fast intervals, its ServiceAccount's token, the
//! deployment's copy of the Cluster mounted as a file. The tests that
//! start it kill it and start another in its place, so each start names
//! its own identity, as a new pod would.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use liken_api::coordination::HEARTBEAT_NAMESPACE;

use crate::support::{apply_manifest, cluster_doc, cp};

/// A running cluster operator.
pub struct ClusterOperator {
    child: Child,
    log: PathBuf,
}

impl ClusterOperator {
    /// Applies its manifests and starts it as `cluster-operator-0`.
    pub fn start() -> ClusterOperator {
        ClusterOperator::start_as("cluster-operator-0")
    }

    /// Starts it under the election identity `identity`; its log is kept
    /// apart per identity.
    pub fn start_as(identity: &str) -> ClusterOperator {
        for file in ["liken-system.yaml", "cluster-operator.yaml"] {
            apply_manifest(cp(), file);
        }
        let kc = cp()
            .kubeconfig_for(HEARTBEAT_NAMESPACE, "liken-cluster-operator")
            .unwrap();
        let log = cp().dir().join(format!("{identity}.log"));
        // The deployment's copy of the Cluster, as the Deployment mounts it.
        let copy = cp().dir().join("fleet-cluster.yaml");
        std::fs::write(
            &copy,
            serde_json::to_string(&cluster_doc(&["lead-1"]).canonical()).unwrap(),
        )
        .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_liken-cluster-operator"))
            .arg(format!("--kubeconfig={}", kc.display()))
            .arg(format!("--cluster-file={}", copy.display()))
            .args([
                "--metrics-address=127.0.0.1:0",
                &format!("--identity={identity}"),
                "--sweep-interval=1s",
                "--heartbeat-stale-after=8s",
                "--lease-duration=3s",
                "--renew-deadline=2s",
                "--retry-period=500ms",
            ])
            .env_remove("KUBECONFIG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        ClusterOperator { child, log }
    }

    /// Ends it with SIGKILL, mid-whatever, as a node losing power would:
    /// no step-down, no last status write.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// What it logged.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ClusterOperator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
