//! A server's side of letting agents join, in place of k3s's supervisor.
//!
//! A k3s server makes the supervisor's `node` user with the agent
//! token's secret as its password (k3s-io/k3s
//! pkg/daemons/control/deps/deps.go, genUsers; pkg/passwd), and an agent
//! that presents it gets its kubelet certificate. This stand-in has no
//! supervisor, so the server registers the same secret where the
//! apiserver itself checks it: a bootstrap token Secret in kube-system
//! whose id and secret are derived from the agent token's secret
//! ([`super::credentials::bootstrap_token`]), allowed to authenticate
//! only. Two ClusterRoleBindings let `system:bootstrappers` send a
//! kubelet's certificate request and have kube-controller-manager
//! approve it (the bootstrap roles the apiserver ships:
//! `system:node-bootstrapper` and the node-client auto-approval), as
//! kubeadm's TLS bootstrap sets them up. Every object carries the
//! stand-in's annotation, so `kubectl get` shows who made it.

use liken_kube::request::Resource;
use liken_kube::{Api, Client, DynamicObject, Error};
use serde_json::{Value, json};

use super::config::Setup;
use super::credentials::{bootstrap_token, parse_token};

/// Core Secrets.
const SECRETS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "secrets",
    kind: "Secret",
    namespaced: true,
};

/// ClusterRoleBindings.
const CLUSTER_ROLE_BINDINGS: Resource = Resource {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    plural: "clusterrolebindings",
    kind: "ClusterRoleBinding",
    namespaced: false,
};

/// The annotation on everything the stand-in makes.
pub const NOT_K3S: &str = "liken-standin-k3s.test/not-k3s";

/// Registers the agent token (see the module docs); idempotent.
pub fn let_agents_join(admin: &Client, setup: &Setup) -> Result<(), String> {
    let file = setup.agent_token_file.as_ref().unwrap_or(&setup.token_file);
    let token =
        std::fs::read_to_string(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let (_, secret) = parse_token(&token)?;
    let (id, token_secret) = bootstrap_token(secret);
    let note = "made by liken-standin-k3s in place of k3s's supervisor: agents holding the \
                agent token may ask for a kubelet certificate";
    let secret_doc = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system",
                     "annotations": {NOT_K3S: note}},
        "stringData": {
            "token-id": id, "token-secret": token_secret,
            "usage-bootstrap-authentication": "true",
            "description": "the agent token's secret, as a bootstrap token",
        },
    });
    create(admin, &Api::namespaced(SECRETS, "kube-system"), &secret_doc)?;
    for (name, role) in [
        (
            "liken-standin:node-bootstrapper",
            "system:node-bootstrapper",
        ),
        (
            "liken-standin:node-autoapprove",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        ),
    ] {
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "annotations": {NOT_K3S: note}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                          "name": "system:bootstrappers"}],
        });
        create(admin, &Api::all(CLUSTER_ROLE_BINDINGS), &binding)?;
    }
    crate::say(&format!(
        "registered the agent token as bootstrap token {id} (system:bootstrap:{id}) and let \
         system:bootstrappers ask for kubelet certificates, in place of k3s's supervisor"
    ));
    Ok(())
}

fn create(client: &Client, api: &Api, body: &Value) -> Result<(), String> {
    match client.create::<DynamicObject, _>(api, body) {
        Ok(_) | Err(Error::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}
