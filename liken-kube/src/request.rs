//! Requests as values: method, path, query and body, built without I/O.
//!
//! Every call the client makes is first a [`Request`] that a test can
//! inspect: the exact URL, the content type of a patch, the body of a
//! delete. [`Api`] builds them for one resource (and one namespace, for
//! namespaced kinds). Executing them is the client's job
//! ([`crate::client`]); keeping the two apart is what lets the URL rules
//! be tested without a server.
//!
//! Names and label selectors are percent-encoded here, so a name with a
//! `/` cannot address another path and a selector like `a in (b,c)`
//! arrives intact.
//!
//! Four kinds of write body: JSON for create and replace, a JSON merge
//! patch (RFC 7386), a JSON patch (RFC 6902, [`PatchOp`], whose `test`
//! operations make a patch conditional on what the object holds), and a
//! server-side apply configuration (`application/apply-patch+yaml`, JSON
//! being YAML), which names its field manager and may `force` ownership
//! of fields another manager holds. The client adds its own
//! `fieldManager` to every other create, replace and patch
//! ([`crate::Client::identify`]).

use std::fmt;
use std::time::Duration;

use crate::error::Error;

/// One kind of object on the API server: where it lives and what it is
/// called.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Resource {
    /// The API group; empty for the core group (`/api/v1`).
    pub group: &'static str,
    /// The version within the group.
    pub version: &'static str,
    /// The URL segment, lower-case plural (`machines`).
    pub plural: &'static str,
    /// The `kind` objects of this resource carry.
    pub kind: &'static str,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

impl Resource {
    /// `liken.sh/v1alpha1` or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    fn prefix(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }
}

/// Machines (`machines.liken.sh`, cluster-scoped).
pub const MACHINES: Resource = Resource {
    group: liken_api::meta::GROUP,
    version: liken_api::meta::GROUP_VERSION,
    plural: "machines",
    kind: "Machine",
    namespaced: false,
};

/// Clusters (`clusters.liken.sh`, cluster-scoped).
pub const CLUSTERS: Resource = Resource {
    group: liken_api::meta::GROUP,
    version: liken_api::meta::GROUP_VERSION,
    plural: "clusters",
    kind: "Cluster",
    namespaced: false,
};

/// coordination.k8s.io/v1 Leases, for leader election and heartbeats.
pub const LEASES: Resource = Resource {
    group: "coordination.k8s.io",
    version: "v1",
    plural: "leases",
    kind: "Lease",
    namespaced: true,
};

/// events.k8s.io/v1 Events.
pub const EVENTS: Resource = Resource {
    group: "events.k8s.io",
    version: "v1",
    plural: "events",
    kind: "Event",
    namespaced: true,
};

/// Core ConfigMaps.
pub const CONFIG_MAPS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "configmaps",
    kind: "ConfigMap",
    namespaced: true,
};

/// Core Pods.
pub const PODS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "pods",
    kind: "Pod",
    namespaced: true,
};

/// Core Nodes.
pub const NODES: Resource = Resource {
    group: "",
    version: "v1",
    plural: "nodes",
    kind: "Node",
    namespaced: false,
};

/// policy/v1 PodDisruptionBudgets.
pub const POD_DISRUPTION_BUDGETS: Resource = Resource {
    group: "policy",
    version: "v1",
    plural: "poddisruptionbudgets",
    kind: "PodDisruptionBudget",
    namespaced: true,
};

/// Core Namespaces.
pub const NAMESPACES: Resource = Resource {
    group: "",
    version: "v1",
    plural: "namespaces",
    kind: "Namespace",
    namespaced: false,
};

/// Core Secrets.
pub const SECRETS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "secrets",
    kind: "Secret",
    namespaced: true,
};

/// apps/v1 Deployments.
pub const DEPLOYMENTS: Resource = Resource {
    group: "apps",
    version: "v1",
    plural: "deployments",
    kind: "Deployment",
    namespaced: true,
};

/// apps/v1 DaemonSets.
pub const DAEMON_SETS: Resource = Resource {
    group: "apps",
    version: "v1",
    plural: "daemonsets",
    kind: "DaemonSet",
    namespaced: true,
};

/// HTTP methods the client uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Read.
    Get,
    /// Create.
    Post,
    /// Replace.
    Put,
    /// Merge patch.
    Patch,
    /// Delete.
    Delete,
}

impl Method {
    /// The method's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }

    /// Whether the method changes state on the server, and so must pass
    /// the leader guard.
    pub fn is_write(self) -> bool {
        !matches!(self, Method::Get)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The content type of a JSON merge patch (RFC 7386).
pub const MERGE_PATCH: &str = "application/merge-patch+json";
/// The content type of a JSON patch (RFC 6902).
pub const JSON_PATCH: &str = "application/json-patch+json";
/// The content type of a server-side apply configuration.
pub const APPLY_PATCH: &str = "application/apply-patch+yaml";
/// The content type of every other body.
pub const JSON: &str = "application/json";

/// One request, ready to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The HTTP method.
    pub method: Method,
    /// The path, already percent-encoded.
    pub path: String,
    /// Query parameters in the order they are sent, not yet encoded.
    pub query: Vec<(&'static str, String)>,
    /// The body, if any.
    pub body: Option<Vec<u8>>,
    /// The body's content type.
    pub content_type: Option<&'static str>,
    /// Overrides the client's default timeout for this request.
    pub timeout: Option<Duration>,
}

impl Request {
    fn new(method: Method, path: String) -> Request {
        Request {
            method,
            path,
            query: Vec::new(),
            body: None,
            content_type: None,
            timeout: None,
        }
    }

    fn with_body(mut self, body: Vec<u8>, content_type: &'static str) -> Request {
        self.body = Some(body);
        self.content_type = Some(content_type);
        self
    }

    /// The path and encoded query, as sent after the server address.
    pub fn uri(&self) -> String {
        let mut uri = self.path.clone();
        for (i, (k, v)) in self.query.iter().enumerate() {
            uri.push(if i == 0 { '?' } else { '&' });
            uri.push_str(k);
            uri.push('=');
            uri.push_str(&encode(v));
        }
        uri
    }

    /// `METHOD /path` for messages; the query is left out because it may
    /// carry a continue token.
    pub fn what(&self) -> String {
        format!("{} {}", self.method, self.path)
    }

    /// Sets this request's timeout.
    pub fn timeout(mut self, timeout: Duration) -> Request {
        self.timeout = Some(timeout);
        self
    }

    /// Whether the request takes a `fieldManager`: creates, replaces and
    /// patches do; reads and DELETE (whose options have none) do not.
    pub fn takes_field_manager(&self) -> bool {
        matches!(self.method, Method::Post | Method::Put | Method::Patch)
    }

    /// The same request naming `manager` as its field manager, unless it
    /// names one already (an apply names its own) or takes none.
    pub fn with_field_manager(mut self, manager: &str) -> Request {
        if self.takes_field_manager() && !self.query.iter().any(|(k, _)| *k == "fieldManager") {
            self.query.push(("fieldManager", manager.to_owned()));
        }
        self
    }
}

/// One operation of a JSON patch (RFC 6902). Paths are JSON pointers
/// ([`json_pointer`] builds one from segments). A failing `Test` makes
/// the server refuse the whole patch, which is how a patch is made
/// conditional on a field's value (a finalizer at an index, a
/// resourceVersion).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum PatchOp {
    /// Adds `value` at `path` (`/-` appends to an array).
    Add {
        /// Where.
        path: String,
        /// What.
        value: serde_json::Value,
    },
    /// Removes what is at `path`.
    Remove {
        /// Where.
        path: String,
    },
    /// Replaces what is at `path`, which must exist.
    Replace {
        /// Where.
        path: String,
        /// The new value.
        value: serde_json::Value,
    },
    /// Refuses the whole patch unless `path` holds `value`.
    Test {
        /// Where.
        path: String,
        /// The value it must hold.
        value: serde_json::Value,
    },
}

/// A JSON pointer (RFC 6901) from path segments: `~` and `/` inside a
/// segment are escaped, so `["metadata", "labels", "liken.sh/role"]`
/// addresses that one label.
pub fn json_pointer(segments: &[&str]) -> String {
    let mut out = String::new();
    for s in segments {
        out.push('/');
        out.push_str(&s.replace('~', "~0").replace('/', "~1"));
    }
    out
}

/// How a LIST is narrowed and paged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListParams {
    /// A label selector (`role=leader,zone in (a,b)`).
    pub label_selector: Option<String>,
    /// A field selector (`metadata.name=x`).
    pub field_selector: Option<String>,
    /// The most items one page returns; the server then gives a continue
    /// token.
    pub limit: Option<u32>,
    /// The token from the previous page.
    pub continue_token: Option<String>,
    /// `0` reads from the watch cache; absent reads the newest state.
    pub resource_version: Option<String>,
}

impl ListParams {
    /// Only objects matching the label selector `selector`.
    pub fn labels(selector: impl Into<String>) -> ListParams {
        ListParams {
            label_selector: Some(selector.into()),
            ..ListParams::default()
        }
    }

    /// Only objects matching the field selector `selector`
    /// (`metadata.name=node-1`; `spec.nodeName=node-1` on Pods). Custom
    /// resources answer `metadata.name` and `metadata.namespace` only.
    pub fn fields(selector: impl Into<String>) -> ListParams {
        ListParams {
            field_selector: Some(selector.into()),
            ..ListParams::default()
        }
    }

    /// Pages of at most `limit` objects.
    pub fn limit(mut self, limit: u32) -> ListParams {
        self.limit = Some(limit);
        self
    }
}

/// How a watch is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchParams {
    /// A label selector, as for a LIST.
    pub label_selector: Option<String>,
    /// A field selector.
    pub field_selector: Option<String>,
    /// How long the server keeps the stream open before ending it
    /// cleanly; the watcher then reopens from the last resourceVersion.
    pub timeout_seconds: u32,
    /// The longest one read of the stream may wait. Not sent: the
    /// client's own limit, so a half-open connection is noticed.
    pub read_timeout: Duration,
}

impl Default for WatchParams {
    fn default() -> WatchParams {
        // Under five minutes, as kube-rs does: long enough to be cheap,
        // short enough that a silently dead connection is noticed. The
        // apiserver's watch cache sends a bookmark about once a minute
        // (bookmarkFrequency in staging/src/k8s.io/apiserver/pkg/storage/
        // cacher/cacher.go), so 150 s without a byte is a dead stream.
        WatchParams {
            label_selector: None,
            field_selector: None,
            timeout_seconds: 290,
            read_timeout: Duration::from_secs(150),
        }
    }
}

/// What happens to dependents when an object is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents are deleted first, then the object.
    Foreground,
    /// The object goes now; the garbage collector deletes dependents.
    Background,
    /// Dependents are left without an owner.
    Orphan,
}

impl Propagation {
    fn as_str(self) -> &'static str {
        match self {
            Propagation::Foreground => "Foreground",
            Propagation::Background => "Background",
            Propagation::Orphan => "Orphan",
        }
    }
}

/// Options for a DELETE.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteParams {
    /// The propagation policy; the server's default when absent.
    pub propagation: Option<Propagation>,
    /// Delete only if the object still has this resourceVersion.
    pub precondition_resource_version: Option<String>,
}

impl DeleteParams {
    /// The `DeleteOptions` object these stand for.
    pub fn options(&self) -> serde_json::Value {
        let mut options = serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1"});
        if let Some(p) = self.propagation {
            options["propagationPolicy"] = p.as_str().into();
        }
        if let Some(rv) = &self.precondition_resource_version {
            options["preconditions"] = serde_json::json!({ "resourceVersion": rv });
        }
        options
    }
}

/// Request builder for one resource, in one namespace for namespaced kinds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Api {
    resource: Resource,
    namespace: Option<String>,
}

impl Api {
    /// A cluster-scoped resource, or a namespaced one across all
    /// namespaces (LIST and WATCH only).
    pub fn all(resource: Resource) -> Api {
        Api {
            resource,
            namespace: None,
        }
    }

    /// A namespaced resource in `namespace`.
    pub fn namespaced(resource: Resource, namespace: impl Into<String>) -> Api {
        Api {
            resource,
            namespace: Some(namespace.into()),
        }
    }

    /// The resource this builds requests for.
    pub fn resource(&self) -> Resource {
        self.resource
    }

    /// The namespace, if one was given.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    fn collection(&self) -> String {
        match &self.namespace {
            Some(ns) if self.resource.namespaced => format!(
                "{}/namespaces/{}/{}",
                self.resource.prefix(),
                encode(ns),
                self.resource.plural
            ),
            _ => format!("{}/{}", self.resource.prefix(), self.resource.plural),
        }
    }

    fn item(&self, name: &str) -> Result<String, Error> {
        if self.resource.namespaced && self.namespace.is_none() {
            return Err(Error::InvalidRequest {
                message: format!(
                    "{} are namespaced; build the request with Api::namespaced",
                    self.resource.plural
                ),
            });
        }
        if name.is_empty() || name == "." || name == ".." {
            return Err(Error::InvalidRequest {
                message: format!("{name:?} is not an object name"),
            });
        }
        Ok(format!("{}/{}", self.collection(), encode(name)))
    }

    fn writable_collection(&self) -> Result<String, Error> {
        if self.resource.namespaced && self.namespace.is_none() {
            return Err(Error::InvalidRequest {
                message: format!(
                    "{} are namespaced; build the request with Api::namespaced",
                    self.resource.plural
                ),
            });
        }
        Ok(self.collection())
    }

    /// GET one object.
    pub fn get(&self, name: &str) -> Result<Request, Error> {
        Ok(Request::new(Method::Get, self.item(name)?))
    }

    /// LIST objects, one page.
    pub fn list(&self, params: &ListParams) -> Request {
        let mut r = Request::new(Method::Get, self.collection());
        push_selectors(&mut r, &params.label_selector, &params.field_selector);
        if let Some(limit) = params.limit {
            r.query.push(("limit", limit.to_string()));
        }
        if let Some(token) = &params.continue_token {
            r.query.push(("continue", token.clone()));
        }
        if let Some(rv) = &params.resource_version {
            r.query.push(("resourceVersion", rv.clone()));
        }
        r
    }

    /// POST a new object (`body` is its JSON).
    pub fn create(&self, body: Vec<u8>) -> Result<Request, Error> {
        Ok(Request::new(Method::Post, self.writable_collection()?).with_body(body, JSON))
    }

    /// PUT a whole object; its metadata.resourceVersion makes the write
    /// conditional.
    pub fn replace(&self, name: &str, body: Vec<u8>) -> Result<Request, Error> {
        Ok(Request::new(Method::Put, self.item(name)?).with_body(body, JSON))
    }

    /// PUT the status subresource.
    pub fn replace_status(&self, name: &str, body: Vec<u8>) -> Result<Request, Error> {
        Ok(Request::new(Method::Put, format!("{}/status", self.item(name)?)).with_body(body, JSON))
    }

    /// PATCH with a JSON merge patch.
    pub fn merge_patch(&self, name: &str, patch: Vec<u8>) -> Result<Request, Error> {
        Ok(Request::new(Method::Patch, self.item(name)?).with_body(patch, MERGE_PATCH))
    }

    /// PATCH the status subresource with a JSON merge patch.
    pub fn merge_patch_status(&self, name: &str, patch: Vec<u8>) -> Result<Request, Error> {
        Ok(
            Request::new(Method::Patch, format!("{}/status", self.item(name)?))
                .with_body(patch, MERGE_PATCH),
        )
    }

    /// PATCH with a JSON patch (`ops` serialized as a JSON array).
    pub fn json_patch(&self, name: &str, ops: Vec<u8>) -> Result<Request, Error> {
        Ok(Request::new(Method::Patch, self.item(name)?).with_body(ops, JSON_PATCH))
    }

    /// PATCH the status subresource with a JSON patch.
    pub fn json_patch_status(&self, name: &str, ops: Vec<u8>) -> Result<Request, Error> {
        Ok(
            Request::new(Method::Patch, format!("{}/status", self.item(name)?))
                .with_body(ops, JSON_PATCH),
        )
    }

    /// Server-side apply: PATCH with the apply configuration `body` as
    /// `field_manager`; `force` takes fields other managers own instead of
    /// failing with a Conflict.
    pub fn apply(
        &self,
        name: &str,
        body: Vec<u8>,
        field_manager: &str,
        force: bool,
    ) -> Result<Request, Error> {
        Api::apply_to(self.item(name)?, body, field_manager, force)
    }

    /// Server-side apply on the status subresource.
    pub fn apply_status(
        &self,
        name: &str,
        body: Vec<u8>,
        field_manager: &str,
        force: bool,
    ) -> Result<Request, Error> {
        Api::apply_to(
            format!("{}/status", self.item(name)?),
            body,
            field_manager,
            force,
        )
    }

    fn apply_to(
        path: String,
        body: Vec<u8>,
        field_manager: &str,
        force: bool,
    ) -> Result<Request, Error> {
        if field_manager.is_empty() {
            return Err(Error::InvalidRequest {
                message: "server-side apply needs a field manager".into(),
            });
        }
        let mut r = Request::new(Method::Patch, path).with_body(body, APPLY_PATCH);
        r.query.push(("fieldManager", field_manager.to_owned()));
        if force {
            r.query.push(("force", "true".to_owned()));
        }
        Ok(r)
    }

    /// POST a policy/v1 Eviction of the pod `name` (the `eviction`
    /// subresource of [`PODS`]): the API server deletes the pod only if
    /// every PodDisruptionBudget covering it allows, else answers 429
    /// ([`Error::DisruptionBudget`]). `params` become the Eviction's
    /// deleteOptions.
    pub fn evict(&self, name: &str, params: &DeleteParams) -> Result<Request, Error> {
        if self.resource != PODS {
            return Err(Error::InvalidRequest {
                message: format!(
                    "only pods have an eviction subresource, not {}",
                    self.resource.plural
                ),
            });
        }
        let path = format!("{}/eviction", self.item(name)?);
        let eviction = serde_json::json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": self.namespace.as_deref().unwrap_or_default()},
            "deleteOptions": params.options(),
        });
        let body = serde_json::to_vec(&eviction).expect("a JSON value serializes");
        Ok(Request::new(Method::Post, path).with_body(body, JSON))
    }

    /// DELETE one object, with DeleteOptions in the body.
    pub fn delete(&self, name: &str, params: &DeleteParams) -> Result<Request, Error> {
        let body = serde_json::to_vec(&params.options()).expect("a JSON value serializes");
        Ok(Request::new(Method::Delete, self.item(name)?).with_body(body, JSON))
    }

    /// WATCH from `resource_version`, with bookmarks.
    pub fn watch(&self, params: &WatchParams, resource_version: &str) -> Request {
        let mut r = Request::new(Method::Get, self.collection());
        r.query.push(("watch", "1".to_owned()));
        r.query.push(("allowWatchBookmarks", "true".to_owned()));
        r.query
            .push(("resourceVersion", resource_version.to_owned()));
        r.query
            .push(("timeoutSeconds", params.timeout_seconds.to_string()));
        push_selectors(&mut r, &params.label_selector, &params.field_selector);
        r
    }
}

fn push_selectors(r: &mut Request, labels: &Option<String>, fields: &Option<String>) {
    if let Some(s) = labels {
        r.query.push(("labelSelector", s.clone()));
    }
    if let Some(s) = fields {
        r.query.push(("fieldSelector", s.clone()));
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters, which
/// is right for both a path segment and a query value.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machines() -> Api {
        Api::all(MACHINES)
    }

    #[test]
    fn get_paths() {
        let r = machines().get("node-1").unwrap();
        assert_eq!(r.method, Method::Get);
        assert_eq!(r.uri(), "/apis/liken.sh/v1alpha1/machines/node-1");
        assert_eq!(r.body, None);
        let r = Api::namespaced(LEASES, "liken-system").get("op").unwrap();
        assert_eq!(
            r.uri(),
            "/apis/coordination.k8s.io/v1/namespaces/liken-system/leases/op"
        );
        let r = Api::namespaced(CONFIG_MAPS, "default").get("c").unwrap();
        assert_eq!(r.uri(), "/api/v1/namespaces/default/configmaps/c");
        let r = Api::all(NAMESPACES).get("kube-system").unwrap();
        assert_eq!(r.uri(), "/api/v1/namespaces/kube-system");
        let r = Api::namespaced(SECRETS, "flux-system").get("s").unwrap();
        assert_eq!(r.uri(), "/api/v1/namespaces/flux-system/secrets/s");
        let r = Api::namespaced(DEPLOYMENTS, "flux-system")
            .get("d")
            .unwrap();
        assert_eq!(
            r.uri(),
            "/apis/apps/v1/namespaces/flux-system/deployments/d"
        );
        let r = Api::namespaced(DAEMON_SETS, "liken-system")
            .get("o")
            .unwrap();
        assert_eq!(
            r.uri(),
            "/apis/apps/v1/namespaces/liken-system/daemonsets/o"
        );
    }

    #[test]
    fn names_cannot_escape_their_segment() {
        let r = machines().get("a/../b").unwrap();
        assert_eq!(r.uri(), "/apis/liken.sh/v1alpha1/machines/a%2F..%2Fb");
        assert!(machines().get("").is_err());
        assert!(machines().get("..").is_err());
        // A namespaced kind needs its namespace for item requests.
        assert!(Api::all(LEASES).get("x").is_err());
        assert!(Api::all(LEASES).create(b"{}".to_vec()).is_err());
    }

    #[test]
    fn list_with_selector_and_pages() {
        let r = machines().list(&ListParams {
            label_selector: Some("role in (leader,follower),zone=a".into()),
            field_selector: Some("metadata.name=x".into()),
            limit: Some(500),
            continue_token: Some("eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ==".into()),
            resource_version: None,
        });
        assert_eq!(
            r.uri(),
            "/apis/liken.sh/v1alpha1/machines?labelSelector=role%20in%20%28leader%2Cfollower%29%2Czone%3Da\
             &fieldSelector=metadata.name%3Dx&limit=500&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ%3D%3D"
        );
        let r = Api::all(LEASES).list(&ListParams::default());
        assert_eq!(r.uri(), "/apis/coordination.k8s.io/v1/leases");
        let r = machines().list(&ListParams::labels("a=b").limit(2));
        assert_eq!(
            r.uri(),
            "/apis/liken.sh/v1alpha1/machines?labelSelector=a%3Db&limit=2"
        );
    }

    #[test]
    fn writes() {
        let r = machines().create(b"{}".to_vec()).unwrap();
        assert_eq!(
            (r.method, r.uri().as_str()),
            (Method::Post, "/apis/liken.sh/v1alpha1/machines")
        );
        assert_eq!(r.content_type, Some(JSON));

        let r = machines().replace("n", b"{}".to_vec()).unwrap();
        assert_eq!(
            (r.method, r.uri().as_str()),
            (Method::Put, "/apis/liken.sh/v1alpha1/machines/n")
        );

        let r = machines().replace_status("n", b"{}".to_vec()).unwrap();
        assert_eq!(
            (r.method, r.uri().as_str()),
            (Method::Put, "/apis/liken.sh/v1alpha1/machines/n/status")
        );

        let r = machines().merge_patch("n", br#"{"a":1}"#.to_vec()).unwrap();
        assert_eq!(r.method, Method::Patch);
        assert_eq!(r.content_type, Some("application/merge-patch+json"));
        assert_eq!(r.uri(), "/apis/liken.sh/v1alpha1/machines/n");

        let r = machines().merge_patch_status("n", b"{}".to_vec()).unwrap();
        assert_eq!(r.uri(), "/apis/liken.sh/v1alpha1/machines/n/status");
        assert_eq!(r.content_type, Some(MERGE_PATCH));
    }

    #[test]
    fn delete_carries_options() {
        let r = Api::namespaced(CONFIG_MAPS, "ns")
            .delete(
                "c",
                &DeleteParams {
                    propagation: Some(Propagation::Foreground),
                    precondition_resource_version: Some("42".into()),
                },
            )
            .unwrap();
        assert_eq!(r.method, Method::Delete);
        assert_eq!(r.uri(), "/api/v1/namespaces/ns/configmaps/c");
        let body: serde_json::Value = serde_json::from_slice(r.body.as_ref().unwrap()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "kind": "DeleteOptions", "apiVersion": "v1",
                "propagationPolicy": "Foreground",
                "preconditions": {"resourceVersion": "42"},
            })
        );
        let r = machines().delete("n", &DeleteParams::default()).unwrap();
        let body: serde_json::Value = serde_json::from_slice(r.body.as_ref().unwrap()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1"})
        );
    }

    #[test]
    fn watch_asks_for_bookmarks_from_a_version() {
        let r = machines().watch(&WatchParams::default(), "12345");
        assert_eq!(
            r.uri(),
            "/apis/liken.sh/v1alpha1/machines?watch=1&allowWatchBookmarks=true&resourceVersion=12345&timeoutSeconds=290"
        );
        let r = Api::namespaced(CONFIG_MAPS, "x").watch(
            &WatchParams {
                label_selector: Some("app=a".into()),
                field_selector: None,
                timeout_seconds: 5,
                read_timeout: Duration::from_secs(1),
            },
            "7",
        );
        assert_eq!(
            r.uri(),
            "/api/v1/namespaces/x/configmaps?watch=1&allowWatchBookmarks=true&resourceVersion=7&timeoutSeconds=5&labelSelector=app%3Da"
        );
    }

    #[test]
    fn what_leaves_out_the_query() {
        let r = machines().list(&ListParams::labels("secret-ish"));
        assert_eq!(r.what(), "GET /apis/liken.sh/v1alpha1/machines");
    }

    #[test]
    fn writes_are_guarded_reads_are_not() {
        assert!(!Method::Get.is_write());
        for m in [Method::Post, Method::Put, Method::Patch, Method::Delete] {
            assert!(m.is_write());
        }
    }

    #[test]
    fn field_selectors_on_lists_and_watches() {
        let r = Api::namespaced(PODS, "a").list(&ListParams::fields("spec.nodeName=node-1"));
        assert_eq!(
            r.uri(),
            "/api/v1/namespaces/a/pods?fieldSelector=spec.nodeName%3Dnode-1"
        );
        let r = machines().watch(
            &WatchParams {
                field_selector: Some("metadata.name=node-1".into()),
                ..WatchParams::default()
            },
            "3",
        );
        assert!(
            r.uri().ends_with("&fieldSelector=metadata.name%3Dnode-1"),
            "{}",
            r.uri()
        );
    }

    #[test]
    fn apply_names_its_manager_and_force() {
        let r = machines()
            .apply("n", b"{}".to_vec(), "liken-machine-operator", true)
            .unwrap();
        assert_eq!(r.method, Method::Patch);
        assert_eq!(r.content_type, Some("application/apply-patch+yaml"));
        assert_eq!(
            r.uri(),
            "/apis/liken.sh/v1alpha1/machines/n?fieldManager=liken-machine-operator&force=true"
        );
        let r = machines()
            .apply_status("n", b"{}".to_vec(), "op", false)
            .unwrap();
        assert_eq!(
            r.uri(),
            "/apis/liken.sh/v1alpha1/machines/n/status?fieldManager=op"
        );
        // The client's own manager does not replace the one an apply names.
        assert_eq!(
            r.clone().with_field_manager("other").uri(),
            "/apis/liken.sh/v1alpha1/machines/n/status?fieldManager=op"
        );
        assert!(machines().apply("n", b"{}".to_vec(), "", false).is_err());
    }

    #[test]
    fn writes_but_not_reads_or_deletes_take_a_field_manager() {
        let fm = |r: Request| r.with_field_manager("liken-cli").uri();
        assert_eq!(
            fm(machines().create(b"{}".to_vec()).unwrap()),
            "/apis/liken.sh/v1alpha1/machines?fieldManager=liken-cli"
        );
        assert_eq!(
            fm(machines().merge_patch("n", b"{}".to_vec()).unwrap()),
            "/apis/liken.sh/v1alpha1/machines/n?fieldManager=liken-cli"
        );
        assert_eq!(
            fm(machines().get("n").unwrap()),
            "/apis/liken.sh/v1alpha1/machines/n"
        );
        assert_eq!(
            fm(machines().delete("n", &DeleteParams::default()).unwrap()),
            "/apis/liken.sh/v1alpha1/machines/n"
        );
    }

    #[test]
    fn json_patches_with_test_operations() {
        let ops = [
            PatchOp::Test {
                path: json_pointer(&["metadata", "resourceVersion"]),
                value: "7".into(),
            },
            PatchOp::Add {
                path: json_pointer(&["metadata", "labels", "liken.sh/role"]),
                value: "leader".into(),
            },
            PatchOp::Remove {
                path: "/metadata/finalizers/0".into(),
            },
            PatchOp::Replace {
                path: "/spec/x~y".into(),
                value: 1.into(),
            },
        ];
        let body = serde_json::to_value(ops).unwrap();
        assert_eq!(
            body,
            serde_json::json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                {"op": "add", "path": "/metadata/labels/liken.sh~1role", "value": "leader"},
                {"op": "remove", "path": "/metadata/finalizers/0"},
                {"op": "replace", "path": "/spec/x~y", "value": 1},
            ])
        );
        assert_eq!(json_pointer(&["a~b"]), "/a~0b");
        let r = machines().json_patch("n", b"[]".to_vec()).unwrap();
        assert_eq!(r.content_type, Some("application/json-patch+json"));
        let r = machines().json_patch_status("n", b"[]".to_vec()).unwrap();
        assert_eq!(r.uri(), "/apis/liken.sh/v1alpha1/machines/n/status");
    }

    #[test]
    fn an_eviction_is_a_post_to_the_pod_subresource() {
        let r = Api::namespaced(PODS, "web")
            .evict(
                "web-1",
                &DeleteParams {
                    propagation: None,
                    precondition_resource_version: Some("9".into()),
                },
            )
            .unwrap();
        assert_eq!(r.method, Method::Post);
        assert_eq!(r.uri(), "/api/v1/namespaces/web/pods/web-1/eviction");
        let body: serde_json::Value = serde_json::from_slice(r.body.as_ref().unwrap()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": "web-1", "namespace": "web"},
                "deleteOptions": {"kind": "DeleteOptions", "apiVersion": "v1",
                                  "preconditions": {"resourceVersion": "9"}},
            })
        );
        assert!(machines().evict("n", &DeleteParams::default()).is_err());
        assert!(Api::all(PODS).evict("p", &DeleteParams::default()).is_err());
    }
}
