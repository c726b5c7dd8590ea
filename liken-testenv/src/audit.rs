//! The apiserver's audit log, read back by tests.
//!
//! The developer guide asks tests to count a program's writes where they
//! land, at the apiserver, and never from the program's own counters: a
//! counter in the program only proves what the program believes it did.
//! With `Options { audit: true, .. }` kube-apiserver writes every request
//! it completes as one JSON line (level Metadata: who, which verb, which
//! object, which status code; no bodies, so no secret reaches the log).
//!
//! The log backend runs in blocking mode: a request's event is written in
//! the request's own goroutine before the apiserver finishes answering, so
//! once a client has its answer the event is in the file. A test takes an
//! [`AuditMark`] before the window it judges and reads what came after it
//! with [`ControlPlane::audit_since`].

use std::io::{Read, Seek, SeekFrom};

use serde_json::Value;

use crate::{ControlPlane, Error, audit_log_path as log_path};

/// A position in the audit log: what was written before it is not read
/// by [`ControlPlane::audit_since`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuditMark(u64);

/// One completed request, as the apiserver recorded it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditEvent {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`.
    pub verb: String,
    /// The authenticated user name (`system:serviceaccount:<ns>:<name>`
    /// for a ServiceAccount token).
    pub user: String,
    /// The User-Agent header the client sent.
    pub user_agent: String,
    /// The request URI, with its query.
    pub uri: String,
    /// The API group of the object ("" for the core group).
    pub api_group: String,
    /// The resource (`machines`, `leases`, `pods`, ...).
    pub resource: String,
    /// The subresource (`status`, `eviction`, ...), or "".
    pub subresource: String,
    /// The object's namespace, or "".
    pub namespace: String,
    /// The object's name, or "" for a collection.
    pub name: String,
    /// The HTTP status the apiserver answered.
    pub code: u16,
}

impl AuditEvent {
    /// Whether the request asked to change something (whatever the
    /// answer was: a refused write is still a write the program sent).
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }

    /// `verb resource[/subresource] [namespace/]name -> code`, for
    /// assertion messages.
    pub fn describe(&self) -> String {
        let mut what = self.resource.clone();
        if !self.subresource.is_empty() {
            what = format!("{what}/{}", self.subresource);
        }
        let object = match (self.namespace.as_str(), self.name.as_str()) {
            ("", n) => n.to_owned(),
            (ns, n) => format!("{ns}/{n}"),
        };
        format!(
            "{} {what} {object} -> {} by {}",
            self.verb, self.code, self.user
        )
    }

    fn from_json(v: &Value) -> Option<AuditEvent> {
        let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let stage = v["stage"].as_str()?;
        if stage != "ResponseComplete" && stage != "Panic" {
            return None;
        }
        let obj = &v["objectRef"];
        Some(AuditEvent {
            verb: s(&v["verb"]),
            user: s(&v["user"]["username"]),
            user_agent: s(&v["userAgent"]),
            uri: s(&v["requestURI"]),
            api_group: s(&obj["apiGroup"]),
            resource: s(&obj["resource"]),
            subresource: s(&obj["subresource"]),
            namespace: s(&obj["namespace"]),
            name: s(&obj["name"]),
            code: v["responseStatus"]["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(0),
        })
    }
}

/// Parses audit log text; a line that is not an event (a torn last line
/// while the apiserver writes) is left out.
pub fn parse(text: &str) -> Vec<AuditEvent> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| AuditEvent::from_json(&v))
        .collect()
}

impl ControlPlane {
    fn audit_file(&self) -> Result<std::fs::File, Error> {
        let path = log_path(self.dir());
        std::fs::File::open(&path).map_err(|e| {
            Error(format!(
                "reading the audit log {}: {e} (start the control plane with audit: true)",
                path.display()
            ))
        })
    }

    /// The current end of the audit log.
    pub fn audit_mark(&self) -> Result<AuditMark, Error> {
        let f = self.audit_file()?;
        let len = f
            .metadata()
            .map_err(|e| Error(format!("audit log: {e}")))?
            .len();
        Ok(AuditMark(len))
    }

    /// Every request completed after `mark`, oldest first.
    pub fn audit_since(&self, mark: AuditMark) -> Result<Vec<AuditEvent>, Error> {
        let mut f = self.audit_file()?;
        f.seek(SeekFrom::Start(mark.0))
            .map_err(|e| Error(format!("audit log: {e}")))?;
        let mut text = String::new();
        f.read_to_string(&mut text)
            .map_err(|e| Error(format!("audit log: {e}")))?;
        // A mark taken in the middle of a line (it never is: the log is
        // written a whole line at a time) would only cost that line.
        Ok(parse(&text))
    }

    /// The writes `user` made after `mark` (see [`AuditEvent::is_write`]).
    pub fn writes_by(&self, user: &str, mark: AuditMark) -> Result<Vec<AuditEvent>, Error> {
        Ok(self
            .audit_since(mark)?
            .into_iter()
            .filter(|e| e.user == user && e.is_write())
            .collect())
    }
}

/// One permission a Role or ClusterRole grants, unrolled: the namespace
/// ("" for a ClusterRole, which grants in every namespace), the API group,
/// the resource (`pods/eviction` for a subresource), the object name ("*"
/// when the rule names none) and the verb.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// The Role's namespace, or "" for a ClusterRole.
    pub namespace: String,
    /// The API group.
    pub group: String,
    /// The resource, with `/subresource`.
    pub resource: String,
    /// The object name, or "*".
    pub name: String,
    /// The verb.
    pub verb: String,
}

impl Grant {
    /// Whether this grant allows the request `e`.
    pub fn allows(&self, e: &AuditEvent) -> bool {
        let resource = if e.subresource.is_empty() {
            e.resource.clone()
        } else {
            format!("{}/{}", e.resource, e.subresource)
        };
        (self.namespace.is_empty() || self.namespace == e.namespace)
            && self.group == e.api_group
            && self.resource == resource
            && (self.name == "*" || self.name == e.name)
            && self.verb == e.verb
    }
}

/// Every grant of the Roles and ClusterRoles in a manifest (YAML, several
/// documents), unrolled one per (group, resource, name, verb).
pub fn grants(manifest: &str) -> Result<Vec<Grant>, Error> {
    use serde::Deserialize as _;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(manifest) {
        let v = Value::deserialize(doc).map_err(|e| Error(format!("reading RBAC: {e}")))?;
        let kind = v["kind"].as_str().unwrap_or_default();
        if kind != "Role" && kind != "ClusterRole" {
            continue;
        }
        let namespace = v["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        for rule in v["rules"].as_array().into_iter().flatten() {
            let mut names = strings(&rule["resourceNames"]);
            if names.is_empty() {
                names.push("*".into());
            }
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        for name in &names {
                            out.push(Grant {
                                namespace: namespace.clone(),
                                group: group.clone(),
                                resource: resource.clone(),
                                name: name.clone(),
                                verb: verb.clone(),
                            });
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

/// How a program's requests compare with the RBAC it ships.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RbacUse {
    /// Requests no grant allows (or that RBAC refused), described.
    pub ungranted: Vec<String>,
    /// Grants no request used.
    pub unused: Vec<Grant>,
}

/// Compares the requests `used` (one program's, from the audit log) with
/// `grants`: a least-privilege RBAC is one where both lists are empty.
pub fn compare_rbac(grants: &[Grant], used: &[AuditEvent]) -> RbacUse {
    RbacUse {
        ungranted: used
            .iter()
            .filter(|e| e.code == 403 || !grants.iter().any(|g| g.allows(e)))
            .map(AuditEvent::describe)
            .collect(),
        unused: grants
            .iter()
            .filter(|g| !used.iter().any(|e| g.allows(e)))
            .cloned()
            .collect(),
    }
}

/// The user name kube-apiserver gives ServiceAccount `namespace/name`.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rbac_grants_and_their_use() {
        let manifest = "kind: ClusterRole\nmetadata: {name: c}\nrules:\n- apiGroups: [\"\"]\n  resources: [namespaces]\n  resourceNames: [a]\n  verbs: [get, delete]\n---\nkind: Role\nmetadata: {name: r, namespace: s}\nrules:\n- apiGroups: [\"\"]\n  resources: [pods/eviction]\n  verbs: [create]\n---\nkind: RoleBinding\nmetadata: {name: b}\n";
        let g = grants(manifest).unwrap();
        assert_eq!(g.len(), 3);
        let event =
            |verb: &str, resource: &str, sub: &str, ns: &str, name: &str, code| AuditEvent {
                verb: verb.into(),
                resource: resource.into(),
                subresource: sub.into(),
                namespace: ns.into(),
                name: name.into(),
                code,
                ..AuditEvent::default()
            };
        let used = [
            event("get", "namespaces", "", "a", "a", 200),
            event("create", "pods", "eviction", "s", "p", 201),
            event("create", "pods", "eviction", "t", "p", 201),
            event("delete", "namespaces", "", "b", "b", 403),
        ];
        let r = compare_rbac(&g, &used);
        assert_eq!(r.ungranted.len(), 2, "{r:?}");
        assert_eq!(r.unused.len(), 1);
        assert_eq!(r.unused[0].verb, "delete");
    }

    #[test]
    fn parses_complete_events_and_skips_the_rest() {
        let text = r#"{"kind":"Event","level":"Metadata","stage":"ResponseComplete","requestURI":"/apis/liken.sh/v1alpha1/machines/m1/status","verb":"update","user":{"username":"system:serviceaccount:liken-system:op"},"userAgent":"liken-machine-operator/0.1","objectRef":{"resource":"machines","name":"m1","apiGroup":"liken.sh","apiVersion":"v1alpha1","subresource":"status"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","level":"Metadata","stage":"RequestReceived","verb":"get"}
{"kind":"Event","level":"Metadata","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/pods","verb":"list","user":{"username":"admin"},"objectRef":{"resource":"pods","namespace":"default","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Ev"#;
        let events = parse(text);
        assert_eq!(events.len(), 2);
        assert!(events[0].is_write());
        assert_eq!(
            events[0].describe(),
            "update machines/status m1 -> 200 by system:serviceaccount:liken-system:op"
        );
        assert_eq!(events[0].api_group, "liken.sh");
        assert!(!events[1].is_write());
        assert_eq!(events[1].namespace, "default");
    }
}
