//! The engine seed: Flux's controllers, planted when they are gone.
//!
//! Once running, Flux keeps itself: its applier (kustomize-controller)
//! applies the repository, and a repository made by `flux bootstrap`
//! carries the engine's own manifests, so git owns the engine from then
//! on, whatever its state. What git cannot heal is an engine with no
//! applier. So liken answers for exactly one thing, absence: when the
//! kustomize-controller Deployment is gone while the feature is
//! declared, the sweep plants the seed ([`ENGINE_SEED`], Flux's
//! `gotk-components.yaml` for source-controller and kustomize-controller,
//! generated from pinned upstream sources by `seed/update.sh`).
//!
//! Each object is a plain create, and a create that finds the name taken
//! leaves that object exactly as it is: the seed only fills absence,
//! and an engine that is present but broken stays the repository's to
//! fix. A planting posts [`FLUX_ENGINE_SEEDED`] on the Cluster with how
//! many objects it created, found, and failed to create.
//!
//! The probe is one GET of that Deployment at most once a
//! [`PROBE_INTERVAL`]: this program watches no Deployments, so nothing
//! announces a deletion, and probing on every sweep (every ten seconds,
//! and on every Machine change) would make it the most frequent request
//! the operator sends for an answer that almost never changes. An engine
//! that heals within a minute is far faster than the only other repair,
//! the operator's next start. A planting counts as the ask, so a plant
//! that only partly landed is retried by the next probe, a minute on.
//!
//! liken's client has no discovery, and needs none: the seed's
//! vocabulary is small and known ([`SEED_KINDS`]). A kind the table does
//! not map is a loud error naming what to add, which happens exactly when
//! a new Flux release grows a new kind; a unit test resolves every object
//! of the embedded seed, so that happens at `cargo test`, not in a fleet.
//!
//! The rights to create all this arrive with the feature, not in the
//! operator's standing manifest: the flux feature's manifests grant the
//! planter (ClusterRole `liken-engine-planter` and the Role in
//! flux-system) while the feature is declared. The seed holds no RBAC:
//! the engine's ClusterRoles and bindings, one of which makes
//! kustomize-controller cluster-admin, are the feature's
//! `flux-engine-rbac.yaml`, which k3s applies with its own authority
//! (`seed/update.sh` splits them off). Planting them would take `bind`
//! and `escalate`, and an operator holding those could grant itself
//! anything; [`resolve`] refuses every RBAC kind, so a seed that grows
//! one fails its unit test instead.

use std::fmt;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use liken_api::Cluster;
use liken_kube::events::{EventType, ObjectReference, Recorder};
use liken_kube::request::{DEPLOYMENTS, NAMESPACES, Resource};
use liken_kube::{Api, Client, DynamicObject, Error};

use super::names::FLUX_NAMESPACE;
use crate::runtime::log;

/// Flux's engine for source-controller and kustomize-controller, as
/// `flux install` renders it (see `seed/update.sh` and
/// `seed/versions.env` for the pinned versions).
pub const ENGINE_SEED: &str = include_str!("seed/gotk-components.yaml");

/// The Deployment whose absence means the engine is gone.
pub const ENGINE_PROBE: &str = "kustomize-controller";

/// The least time between two probes.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(60);

/// The Event reason of a planting.
pub const FLUX_ENGINE_SEEDED: &str = "FluxEngineSeeded";
/// The Event action of a planting.
pub const ACTION_PLANT: &str = "PlantEngine";

const fn kind(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> Resource {
    Resource {
        group,
        version,
        plural,
        kind,
        namespaced,
    }
}

/// apiextensions.k8s.io/v1 CustomResourceDefinitions.
pub const CUSTOM_RESOURCE_DEFINITIONS: Resource = kind(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    false,
);
/// rbac.authorization.k8s.io/v1 ClusterRoles.
pub const CLUSTER_ROLES: Resource = kind(
    "rbac.authorization.k8s.io",
    "v1",
    "clusterroles",
    "ClusterRole",
    false,
);
/// rbac.authorization.k8s.io/v1 ClusterRoleBindings.
pub const CLUSTER_ROLE_BINDINGS: Resource = kind(
    "rbac.authorization.k8s.io",
    "v1",
    "clusterrolebindings",
    "ClusterRoleBinding",
    false,
);

/// Every kind the seed may hold, by apiVersion and kind.
pub const SEED_KINDS: &[Resource] = &[
    NAMESPACES,
    kind("", "v1", "resourcequotas", "ResourceQuota", true),
    kind(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        true,
    ),
    CUSTOM_RESOURCE_DEFINITIONS,
    kind("", "v1", "serviceaccounts", "ServiceAccount", true),
    kind("", "v1", "services", "Service", true),
    DEPLOYMENTS,
];

/// One object of the seed, ready to create.
#[derive(Clone, Debug, PartialEq)]
pub struct SeedObject {
    /// Its apiVersion.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// metadata.name.
    pub name: String,
    /// metadata.namespace (empty for cluster-scoped kinds).
    pub namespace: String,
    /// The whole object, as sent.
    pub body: serde_json::Value,
}

/// Why the seed, or one of its objects, cannot be planted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SeedError {
    /// A document is not YAML this reader takes.
    Yaml {
        /// Its position in the seed, from 1.
        document: usize,
        /// The parser's message.
        message: String,
    },
    /// A document lacks apiVersion, kind or metadata.name.
    Incomplete {
        /// Its position in the seed, from 1.
        document: usize,
    },
    /// A kind [`SEED_KINDS`] does not map.
    UnknownKind {
        /// The object's apiVersion.
        api_version: String,
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
    },
    /// An RBAC object, which the planter may not write (see the module
    /// doc): it belongs in the feature's flux-engine-rbac.yaml.
    Rbac {
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
    },
    /// A namespaced object without a namespace.
    NoNamespace {
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
    },
}

impl fmt::Display for SeedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SeedError::Yaml { document, message } => write!(
                f,
                "liken: the flux engine seed's document {document} is not readable YAML ({message}); \
                 regenerate it with liken-ops/src/cluster/flux/seed/update.sh"
            ),
            SeedError::Incomplete { document } => write!(
                f,
                "liken: the flux engine seed's document {document} lacks apiVersion, kind or \
                 metadata.name; regenerate it with liken-ops/src/cluster/flux/seed/update.sh"
            ),
            SeedError::UnknownKind {
                api_version,
                kind,
                name,
            } => write!(
                f,
                "liken: the flux engine seed holds a {kind} ({api_version}) named {name}, a kind \
                 the planter does not map; add it to SEED_KINDS in \
                 liken-ops/src/cluster/flux/engine.rs and grant its create to the planter in \
                 images/features/flux/manifests/"
            ),
            SeedError::Rbac { kind, name } => write!(
                f,
                "liken: the flux engine seed holds the {kind} {name}, and the planter writes no \
                 RBAC; regenerate the seed with liken-ops/src/cluster/flux/seed/update.sh, which \
                 moves RBAC to images/features/flux/manifests/flux-engine-rbac.yaml"
            ),
            SeedError::NoNamespace { kind, name } => write!(
                f,
                "liken: the flux engine seed's {kind} {name} is namespaced but names no \
                 namespace; regenerate the seed with liken-ops/src/cluster/flux/seed/update.sh"
            ),
        }
    }
}

impl std::error::Error for SeedError {}

/// Splits the seed into its objects. Documents that hold only comments
/// are skipped.
pub fn parse_seed(text: &str) -> Result<Vec<SeedObject>, SeedError> {
    use serde::Deserialize as _;
    let mut objects = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let document = i + 1;
        let value = serde_yaml::Value::deserialize(doc).map_err(|e| SeedError::Yaml {
            document,
            message: e.to_string(),
        })?;
        if value.is_null() {
            continue;
        }
        let body = serde_json::to_value(&value).map_err(|e| SeedError::Yaml {
            document,
            message: e.to_string(),
        })?;
        let field = |pointer: &str| {
            body.pointer(pointer)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        let object = SeedObject {
            api_version: field("/apiVersion"),
            kind: field("/kind"),
            name: field("/metadata/name"),
            namespace: field("/metadata/namespace"),
            body: body.clone(),
        };
        if object.api_version.is_empty() || object.kind.is_empty() || object.name.is_empty() {
            return Err(SeedError::Incomplete { document });
        }
        objects.push(object);
    }
    Ok(objects)
}

/// Where an object is created: its resource, and the namespace for
/// namespaced kinds.
pub fn resolve(object: &SeedObject) -> Result<Api, SeedError> {
    if object.api_version.starts_with("rbac.authorization.k8s.io/") {
        return Err(SeedError::Rbac {
            kind: object.kind.clone(),
            name: object.name.clone(),
        });
    }
    let resource = SEED_KINDS
        .iter()
        .find(|r| r.kind == object.kind && r.api_version() == object.api_version)
        .ok_or_else(|| SeedError::UnknownKind {
            api_version: object.api_version.clone(),
            kind: object.kind.clone(),
            name: object.name.clone(),
        })?;
    if !resource.namespaced {
        return Ok(Api::all(*resource));
    }
    if object.namespace.is_empty() {
        return Err(SeedError::NoNamespace {
            kind: object.kind.clone(),
            name: object.name.clone(),
        });
    }
    Ok(Api::namespaced(*resource, object.namespace.clone()))
}

/// The embedded seed, parsed once.
pub fn embedded_seed() -> &'static Result<Vec<SeedObject>, SeedError> {
    static SEED: OnceLock<Result<Vec<SeedObject>, SeedError>> = OnceLock::new();
    SEED.get_or_init(|| parse_seed(ENGINE_SEED))
}

/// When the sweep last asked whether the engine is there. It outlives
/// the passes (the sweep itself keeps nothing), and needs no lock: the
/// probe runs inline on the sweep's one thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineProbe {
    asked: Option<Instant>,
}

impl EngineProbe {
    /// Whether this pass may probe; records the ask when it may. The
    /// first pass may. A feature that is off does not reach here, so it
    /// spends no interval.
    pub fn try_ask(&mut self, now: Instant) -> bool {
        let due = self
            .asked
            .is_none_or(|asked| now.saturating_duration_since(asked) >= PROBE_INTERVAL);
        if due {
            self.asked = Some(now);
        }
        due
    }
}

/// How a planting went, object by object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlantTally {
    /// Objects created.
    pub created: usize,
    /// Objects that already existed and were left as they are.
    pub present: usize,
    /// Objects that could not be created.
    pub failed: usize,
}

impl PlantTally {
    /// The Event that reports the planting: a Warning when anything
    /// failed, because then the engine is not whole and a person should
    /// read the operator's log.
    pub fn event(&self) -> (EventType, String) {
        let note = format!(
            "the flux engine was absent; planted its seed: {} objects created, {} present already, {} failed",
            self.created, self.present, self.failed
        );
        if self.failed == 0 {
            (EventType::Normal, note)
        } else {
            (
                EventType::Warning,
                format!(
                    "{note}; the operator's log names each failure, and the next probe plants again"
                ),
            )
        }
    }
}

/// Plants the seed when the engine is gone: at most one probe a
/// [`PROBE_INTERVAL`], and only for a Cluster that declares flux.
pub fn ensure_engine(
    client: &Client,
    recorder: &Recorder,
    cluster: &Cluster,
    probe: &mut EngineProbe,
    now: Instant,
) {
    if !probe.try_ask(now) {
        return;
    }
    match client
        .get_opt::<DynamicObject>(&Api::namespaced(DEPLOYMENTS, FLUX_NAMESPACE), ENGINE_PROBE)
    {
        Ok(Some(_)) => return,
        Ok(None) => {}
        Err(e) => {
            log::warn(
                "probing for the flux engine",
                &[("deployment", &ENGINE_PROBE), ("error", &e)],
            );
            return;
        }
    }
    let objects = match embedded_seed() {
        Ok(objects) => objects,
        Err(e) => {
            log::warn(
                "the flux engine is absent and its seed cannot be read",
                &[("error", e)],
            );
            return;
        }
    };
    log::info(
        "the flux engine is absent; planting its seed",
        &[("objects", &objects.len())],
    );
    let tally = plant(client, objects);
    let (kind, note) = tally.event();
    recorder.event(
        ObjectReference::cluster(cluster),
        kind,
        FLUX_ENGINE_SEEDED,
        ACTION_PLANT,
        &note,
    );
}

/// Creates each object in order; a taken name leaves that object as it is.
pub fn plant(client: &Client, objects: &[SeedObject]) -> PlantTally {
    let mut tally = PlantTally::default();
    for object in objects {
        let api = match resolve(object) {
            Ok(api) => api,
            Err(e) => {
                log::warn("planting the flux engine seed", &[("error", &e)]);
                tally.failed += 1;
                continue;
            }
        };
        match client.create::<DynamicObject, _>(&api, &object.body) {
            Ok(_) => tally.created += 1,
            Err(Error::AlreadyExists { .. }) => tally.present += 1,
            Err(e) => {
                log::warn(
                    "planting an object of the flux engine seed",
                    &[
                        ("kind", &object.kind),
                        ("name", &object.name),
                        ("error", &e),
                    ],
                );
                tally.failed += 1;
            }
        }
    }
    tally
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_object_of_the_embedded_seed_resolves() {
        let objects = embedded_seed().as_ref().unwrap();
        assert!(objects.len() >= 15, "{}", objects.len());
        for o in objects {
            resolve(o).unwrap_or_else(|e| panic!("{e}"));
        }
        // The probe names an object the seed plants.
        assert!(
            objects
                .iter()
                .any(|o| o.kind == "Deployment" && o.name == ENGINE_PROBE)
        );
        // The seed's Namespace carries the ownership mark.
        let ns = objects.iter().find(|o| o.kind == "Namespace").unwrap();
        assert_eq!(ns.name, FLUX_NAMESPACE);
        assert_eq!(
            ns.body["metadata"]["annotations"][liken_api::annotations::FEATURE],
            "flux"
        );
    }

    #[test]
    fn resolve_table() {
        let object = |api_version: &str, kind: &str, namespace: &str| SeedObject {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "x".into(),
            namespace: namespace.into(),
            body: serde_json::Value::Null,
        };
        let cases: &[(SeedObject, Result<&str, &str>)] = &[
            (
                object("apps/v1", "Deployment", "flux-system"),
                Ok("/apis/apps/v1/namespaces/flux-system/deployments"),
            ),
            (object("v1", "Namespace", ""), Ok("/api/v1/namespaces")),
            (
                object("apiextensions.k8s.io/v1", "CustomResourceDefinition", ""),
                Ok("/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),
            ),
            (
                object("v1", "ServiceAccount", "flux-system"),
                Ok("/api/v1/namespaces/flux-system/serviceaccounts"),
            ),
            (
                object("networking.k8s.io/v1", "NetworkPolicy", "flux-system"),
                Ok("/apis/networking.k8s.io/v1/namespaces/flux-system/networkpolicies"),
            ),
            (
                object("v1", "ConfigMap", "flux-system"),
                Err(
                    "a ConfigMap (v1) named x, a kind the planter does not map; add it to SEED_KINDS",
                ),
            ),
            (
                object("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", ""),
                Err("holds the ClusterRoleBinding x, and the planter writes no RBAC"),
            ),
            (
                object("rbac.authorization.k8s.io/v1", "Role", "flux-system"),
                Err("holds the Role x, and the planter writes no RBAC"),
            ),
            (
                object("apps/v1beta1", "Deployment", "flux-system"),
                Err("a Deployment (apps/v1beta1) named x"),
            ),
            (
                object("v1", "Service", ""),
                Err("Service x is namespaced but names no namespace"),
            ),
        ];
        for (o, want) in cases {
            match (resolve(o), want) {
                (Ok(api), Ok(path)) => {
                    assert_eq!(&api.create(b"{}".to_vec()).unwrap().path, path)
                }
                (Err(e), Err(msg)) => {
                    let text = e.to_string();
                    assert!(text.contains(msg), "{text}");
                    assert!(text.starts_with("liken: "), "{text}");
                }
                (got, _) => panic!("{} {}: {got:?}", o.api_version, o.kind),
            }
        }
    }

    #[test]
    fn parse_seed_skips_comments_and_refuses_incomplete_documents() {
        let text = "# header\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\n# only a comment\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: s\n  namespace: a\n";
        let objects = parse_seed(text).unwrap();
        let names: Vec<(&str, &str)> = objects
            .iter()
            .map(|o| (o.kind.as_str(), o.name.as_str()))
            .collect();
        assert_eq!(names, [("Namespace", "a"), ("Service", "s")]);
        assert_eq!(objects[1].namespace, "a");
        assert_eq!(
            parse_seed("apiVersion: v1\nkind: Namespace\n"),
            Err(SeedError::Incomplete { document: 1 })
        );
        assert!(matches!(
            parse_seed("a: [\n"),
            Err(SeedError::Yaml { document: 1, .. })
        ));
    }

    #[test]
    fn the_probe_asks_at_most_once_a_minute() {
        let t0 = Instant::now();
        let mut probe = EngineProbe::default();
        let steps: &[(u64, bool)] = &[
            (0, true),   // the first pass asks
            (10, false), // ten seconds on: not yet
            (59, false),
            (60, true), // a minute after the ask
            (61, false),
            (119, false),
            (125, true),
        ];
        for (secs, want) in steps {
            assert_eq!(
                probe.try_ask(t0 + Duration::from_secs(*secs)),
                *want,
                "at {secs}s"
            );
        }
    }

    #[test]
    fn the_tally_event() {
        let clean = PlantTally {
            created: 20,
            present: 2,
            failed: 0,
        };
        assert_eq!(
            clean.event(),
            (
                EventType::Normal,
                "the flux engine was absent; planted its seed: 20 objects created, 2 present already, 0 failed".into()
            )
        );
        let partial = PlantTally {
            created: 1,
            present: 0,
            failed: 3,
        };
        let (kind, note) = partial.event();
        assert_eq!(kind, EventType::Warning);
        assert!(note.contains("3 failed") && note.contains("log"), "{note}");
    }
}
