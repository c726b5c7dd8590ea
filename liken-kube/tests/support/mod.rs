//! What the test binaries that share one control plane have in common:
//! an admin client and a Machine to create. Each binary uses some of it.
#![allow(dead_code)]

use liken_kube::request::MACHINES;
use liken_kube::{Api, Client, Config};
use serde_json::json;

/// A client with the testenv's admin kubeconfig (system:masters).
pub fn admin() -> Client {
    let cp = liken_testenv::shared();
    let config =
        Config::from_kubeconfig(cp.kubeconfig(), None).expect("the testenv kubeconfig reads");
    Client::new(&config).expect("a client for the testenv")
}

/// A Machine named `name` with `labels`.
pub fn machine_json(name: &str, labels: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "labels": labels},
        "spec": {"hostname": name, "rebootPolicy": "Auto"}
    })
}

/// Machines (cluster-scoped).
pub fn machines() -> Api {
    Api::all(MACHINES)
}
