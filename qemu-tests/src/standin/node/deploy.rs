//! A server's auto-deploy directory, applied as k3s's deploy controller
//! applies it.
//!
//! k3s watches `<data-dir>/server/manifests` and applies every `.yaml`,
//! `.yml` and `.json` file in it to the cluster, again whenever a file
//! changes (k3s-io/k3s pkg/deploy/controller.go); liken-init seeds the
//! release's manifests there on leaders, which is how the operators'
//! RBAC, DaemonSet and Deployment reach the cluster, and how a new
//! release's manifests replace the old ones when a leader boots it. The
//! stand-in does the same with server-side apply (k3s uses its own
//! apply with ownership labels and an Addon object per file; neither
//! matters to liken), as `system:admin`, with the field manager
//! `liken-standin-k3s-deploy`. A resource's path comes from the
//! apiserver's discovery, so any kind the cluster serves can be applied;
//! an object that fails (a kind not served yet, a namespace not made
//! yet) is tried again on the next pass.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use liken_kube::request::{APPLY_PATCH, JSON, Method, Request};
use liken_kube::{Client, Error};
use serde_json::Value;

/// The field manager of the stand-in's applies.
pub const FIELD_MANAGER: &str = "liken-standin-k3s-deploy";

/// Where a kind's objects live: the URL prefix and whether they are
/// namespaced.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Route {
    /// `/api/v1/nodes`-style collection path without the namespace part.
    prefix: String,
    plural: String,
    namespaced: bool,
}

/// Applies the directory, remembering what it applied so a pass applies
/// only files that changed or had failures.
pub struct Deployer {
    dir: PathBuf,
    admin: Client,
    routes: HashMap<(String, String), Route>,
    applied: BTreeMap<PathBuf, liken_api::Sha256Hex>,
}

impl Deployer {
    /// A deployer of `<data-dir>/server/manifests`.
    pub fn new(dir: PathBuf, admin: Client) -> Deployer {
        Deployer {
            dir,
            admin,
            routes: HashMap::new(),
            applied: BTreeMap::new(),
        }
    }

    /// One pass: applies each file that changed since it last applied
    /// cleanly. Returns whether everything is applied.
    pub fn pass(&mut self) -> bool {
        let mut files: Vec<PathBuf> = match std::fs::read_dir(&self.dir) {
            Ok(d) => d
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.extension()
                        .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
                })
                .collect(),
            Err(e) => {
                crate::say(&format!("deploy: cannot read {}: {e}", self.dir.display()));
                return false;
            }
        };
        files.sort();
        let mut clean = true;
        for file in files {
            let Ok(bytes) = std::fs::read(&file) else {
                clean = false;
                continue;
            };
            let hash = liken_api::hash::sha256(&bytes);
            if self.applied.get(&file) == Some(&hash) {
                continue;
            }
            match self.apply_file(&file, &bytes) {
                Ok(n) => {
                    crate::say(&format!(
                        "deploy: applied {} ({n} objects), as k3s's deploy controller would",
                        file.display()
                    ));
                    self.applied.insert(file, hash);
                }
                Err(e) => {
                    crate::say(&format!(
                        "deploy: {}: {e}; trying again on the next pass",
                        file.display()
                    ));
                    clean = false;
                }
            }
        }
        clean
    }

    fn apply_file(&mut self, file: &Path, bytes: &[u8]) -> Result<usize, String> {
        let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
        let mut docs = Vec::new();
        for doc in serde_yaml::Deserializer::from_str(text) {
            let v = Value::deserialize(doc).map_err(|e| e.to_string())?;
            if v.is_object() {
                docs.push(v);
            }
        }
        // Namespaces and definitions first, as a person's kubectl apply
        // of the directory would need them.
        docs.sort_by_key(|d| kind_order(d["kind"].as_str().unwrap_or("")));
        let mut failed = Vec::new();
        for d in &docs {
            if let Err(e) = self.apply_one(d) {
                failed.push(format!(
                    "{} {}: {e}",
                    d["kind"].as_str().unwrap_or("?"),
                    d["metadata"]["name"].as_str().unwrap_or("?")
                ));
            }
        }
        let _ = file;
        if failed.is_empty() {
            Ok(docs.len())
        } else {
            Err(failed.join("; "))
        }
    }

    fn apply_one(&mut self, doc: &Value) -> Result<(), String> {
        let api_version = doc["apiVersion"].as_str().ok_or("no apiVersion")?;
        let kind = doc["kind"].as_str().ok_or("no kind")?;
        let name = doc["metadata"]["name"].as_str().ok_or("no metadata.name")?;
        let route = self.route(api_version, kind)?;
        let mut doc = doc.clone();
        let path = if route.namespaced {
            let ns = doc["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned();
            doc["metadata"]["namespace"] = Value::from(ns.clone());
            format!("{}/namespaces/{ns}/{}/{name}", route.prefix, route.plural)
        } else {
            format!("{}/{}/{name}", route.prefix, route.plural)
        };
        let req = Request {
            method: Method::Patch,
            path,
            query: vec![
                ("fieldManager", FIELD_MANAGER.to_owned()),
                ("force", "true".to_owned()),
            ],
            body: Some(serde_json::to_vec(&doc).map_err(|e| e.to_string())?),
            content_type: Some(APPLY_PATCH),
            timeout: None,
        };
        self.admin.send(&req).map(|_| ()).map_err(|e| e.to_string())
    }

    /// The route of `kind` in `api_version`, from discovery (cached).
    fn route(&mut self, api_version: &str, kind: &str) -> Result<Route, String> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(r) = self.routes.get(&key) {
            return Ok(r.clone());
        }
        let prefix = if api_version.contains('/') {
            format!("/apis/{api_version}")
        } else {
            format!("/api/{api_version}")
        };
        let req = Request {
            method: Method::Get,
            path: prefix.clone(),
            query: Vec::new(),
            body: None,
            content_type: Some(JSON),
            timeout: None,
        };
        let list: Value = match self.admin.send(&req) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| e.to_string())?,
            Err(Error::NotFound { .. }) => {
                return Err(format!("the cluster serves no {api_version}"));
            }
            Err(e) => return Err(e.to_string()),
        };
        for r in list["resources"].as_array().into_iter().flatten() {
            let (Some(k), Some(plural)) = (r["kind"].as_str(), r["name"].as_str()) else {
                continue;
            };
            if plural.contains('/') {
                continue;
            }
            self.routes.insert(
                (api_version.to_owned(), k.to_owned()),
                Route {
                    prefix: prefix.clone(),
                    plural: plural.to_owned(),
                    namespaced: r["namespaced"].as_bool().unwrap_or(false),
                },
            );
        }
        self.routes
            .get(&key)
            .cloned()
            .ok_or_else(|| format!("{api_version} serves no kind {kind}"))
    }
}

use serde::Deserialize;

/// The order kinds are applied in within a file.
fn kind_order(kind: &str) -> u8 {
    match kind {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        "ServiceAccount" | "ClusterRole" | "Role" | "PriorityClass" => 2,
        "ClusterRoleBinding" | "RoleBinding" => 3,
        _ => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_and_definitions_go_first() {
        let mut kinds = vec![
            "DaemonSet",
            "RoleBinding",
            "Namespace",
            "Role",
            "CustomResourceDefinition",
        ];
        kinds.sort_by_key(|k| kind_order(k));
        assert_eq!(
            kinds,
            [
                "Namespace",
                "CustomResourceDefinition",
                "Role",
                "RoleBinding",
                "DaemonSet"
            ]
        );
    }
}
