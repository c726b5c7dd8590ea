//! CustomResourceDefinitions for machines.liken.sh and clusters.liken.sh,
//! generated from the types.
//!
//! The schemas are written out here by hand, one function per type, next
//! to each other so a reader can hold the whole shape in view; the tests in
//! `tests/crd.rs` keep them honest by serializing a fully populated
//! document and checking that every field it writes is in the schema and
//! every field in the schema is written. The YAML is committed under
//! `images/manifests/crds/` and a test fails when it differs from what
//! this module generates (`make crds` rewrites it).
//!
//! What the API server enforces from here, so a bad write is refused at
//! the source rather than discovered by an operator:
//! - structural schemas with every field typed, so unknown fields are
//!   pruned and wrong types refused;
//! - the version grammar as a pattern wherever a version appears;
//! - enums for phase, role, rebootPolicy, reboot (kexec or firmware),
//!   condition status, slot and disruption kind;
//! - on the Cluster, a CEL rule that refuses a target `spec.version` older
//!   than the oldest release in `spec.releases.catalog`: the catalog is
//!   the set of releases a machine may download and therefore the floor a
//!   rollback can reach, and a target below it could never be fetched.
//!
//! Date validity (2026.02.30) is beyond a pattern; the strict decoder
//! checks it where versions are authored.

use serde_json::{Value, json};

use crate::boot::{RebootVia, Slot};
use crate::cluster::HaltCause;
use crate::condition::ConditionStatus;
use crate::digest::{DIGEST_PATTERN, SHA256_PATTERN};
use crate::machine::{BondMode, DisruptionKind, RebootPolicy};
use crate::maintenance::{DURATION_PATTERN, MAX_WINDOWS, START_PATTERN, Weekday, ZONE_PATTERN};
use crate::meta::{GROUP, GROUP_VERSION};
use crate::phase::Phase;
use crate::role::Role;
use crate::version::VERSION_PATTERN;

/// The largest catalog the CRD accepts. CEL rules are cost-checked
/// against list bounds; a catalog holds the handful of releases a fleet
/// trusts, and 256 is generous.
pub const MAX_CATALOG: u64 = 256;

fn string() -> Value {
    json!({"type": "string"})
}

fn string_array() -> Value {
    json!({"type": "array", "items": string()})
}

fn string_map() -> Value {
    json!({"type": "object", "additionalProperties": string()})
}

fn enum_of<'a>(names: impl IntoIterator<Item = &'a str>) -> Value {
    json!({"type": "string", "enum": names.into_iter().collect::<Vec<_>>()})
}

fn version() -> Value {
    json!({"type": "string", "pattern": VERSION_PATTERN, "maxLength": 14})
}

fn object(properties: Value, required: &[&str]) -> Value {
    let mut o = json!({"type": "object", "properties": properties});
    if !required.is_empty() {
        o["required"] = json!(required);
    }
    o
}

fn time() -> Value {
    json!({"type": "string", "format": "date-time"})
}

fn int64() -> Value {
    json!({"type": "integer", "format": "int64"})
}

/// metav1.Condition's schema.
pub fn condition_schema() -> Value {
    object(
        json!({
            "type": {"type": "string", "minLength": 1, "maxLength": 316},
            "status": enum_of(ConditionStatus::ALL.iter().map(|s| s.as_str())),
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            "lastTransitionTime": time(),
            "reason": {"type": "string", "minLength": 1, "maxLength": 1024},
            "message": {"type": "string", "maxLength": 32768},
        }),
        &["type", "status", "lastTransitionTime", "reason"],
    )
}

fn conditions() -> Value {
    json!({
        "type": "array",
        "items": condition_schema(),
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

/// `spec.maintenance` of both kinds. The patterns keep out what is
/// plainly not a window; the strict decoder and the operators judge the
/// rest (a duration past 168h, overlaps, a zone the tz database lacks).
fn maintenance() -> Value {
    let window = object(
        json!({
            "days": {
                "type": "array",
                "items": enum_of(Weekday::ALL.iter().map(|d| d.as_str())),
                "minItems": 1,
                "maxItems": 7,
            },
            "start": {"type": "string", "pattern": START_PATTERN},
            "duration": {"type": "string", "pattern": DURATION_PATTERN, "minLength": 2, "maxLength": 16},
            "timeZone": {"type": "string", "pattern": ZONE_PATTERN, "maxLength": 255},
        }),
        &["days", "start", "duration", "timeZone"],
    );
    object(
        json!({
            "windows": {"type": "array", "items": window, "minItems": 1, "maxItems": MAX_WINDOWS},
        }),
        &[],
    )
}

fn phase() -> Value {
    enum_of(Phase::ALL.iter().map(|p| p.as_str()))
}

fn reboot_via() -> Value {
    enum_of(RebootVia::ALL.iter().map(|v| v.as_str()))
}

/// A schema with a description for `kubectl explain`. Most fields go
/// without one (docs/api.md describes them); the reboot fields carry
/// theirs because "reboot: firmware" is easy to misread as "whether to
/// reboot", and which document wins is not obvious from the shape.
fn described(mut schema: Value, description: &str) -> Value {
    schema["description"] = json!(description);
    schema
}

/// The Machine's spec schema.
pub fn machine_spec_schema() -> Value {
    let route = object(json!({"to": string(), "via": string()}), &["to", "via"]);
    let interface = object(
        json!({
            "name": string(),
            "mac": {"type": "string", "pattern": "^([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}$"},
            "dhcp": {"type": "boolean"},
            "addresses": string_array(),
            "routes": {"type": "array", "items": route},
            "dns": string_array(),
            "mtu": {"type": "integer", "minimum": 68, "maximum": 65535},
            "slaac": {"type": "boolean"},
            "routeMetric": {"type": "integer", "minimum": 1, "maximum": 4294967295u64},
        }),
        &[],
    );
    let bond = object(
        json!({
            "name": string(),
            "members": string_array(),
            "mode": enum_of(BondMode::ALL.iter().map(|m| m.as_str())),
            "miimon": {"type": "integer", "minimum": 0},
        }),
        &["name", "members"],
    );
    let vlan = object(
        json!({
            "name": string(),
            "parent": string(),
            "id": {"type": "integer", "minimum": 1, "maximum": 4094},
        }),
        &["name", "parent", "id"],
    );
    object(
        json!({
            "hostname": string(),
            "rebootPolicy": enum_of(RebootPolicy::ALL.iter().map(|p| p.as_str())),
            "sysctls": string_map(),
            "modules": string_array(),
            "kernelArgs": string_array(),
            "network": object(json!({
                "interfaces": {"type": "array", "items": interface},
                "ntp": string_array(),
                "bonds": {"type": "array", "items": bond},
                "vlans": {"type": "array", "items": vlan},
            }), &[]),
            "installDisk": string(),
            "k3s": object(json!({
                "nodeLabels": string_map(),
                "nodeTaints": string_array(),
            }), &[]),
            "maintenance": maintenance(),
            "reboot": described(
                reboot_via(),
                "How this machine reboots into a release or on request: kexec (the default: \
                 the running kernel starts the next one, skipping the firmware, with the \
                 bootloader's try counting kept; init falls back to the firmware when kexec \
                 is not possible) or firmware. Set, it replaces the \
                 Cluster's spec.reboot for this machine. A change takes effect at the next \
                 reboot and disrupts nothing by itself.",
            ),
        }),
        &[],
    )
}

/// The Machine's status schema.
pub fn machine_status_schema() -> Value {
    object(
        json!({
            "phase": phase(),
            "conditions": conditions(),
            "role": enum_of(Role::ALL.iter().map(|r| r.as_str())),
            "boot": object(json!({
                "time": time(),
                "slot": enum_of(Slot::ALL.iter().map(|s| s.as_str())),
                "version": version(),
                "via": described(
                    reboot_via(),
                    "How this boot was reached: by kexec from the previous boot, or through \
                     the firmware.",
                ),
                "viaReason": described(
                    string(),
                    "Why the reboot init made into this boot went through the firmware rather \
                     than by kexec (firmware asked for, a trial that failed, or kexec not \
                     possible); absent after a kexec or a power-on.",
                ),
            }), &[]),
            "release": object(json!({
                "running": version(),
                "staged": version(),
                "target": version(),
            }), &[]),
            "pending": {"type": "array", "items": object(json!({
                "condition": string(),
                "kind": enum_of(DisruptionKind::ALL.iter().map(|k| k.as_str())),
                "hash": {"type": "string", "pattern": SHA256_PATTERN},
                "summary": string(),
            }), &["condition", "kind", "hash", "summary"])},
            "observedGeneration": int64(),
        }),
        &[],
    )
}

/// The Cluster's spec schema.
pub fn cluster_spec_schema() -> Value {
    let entry = object(
        json!({
            "version": version(),
            "digest": {"type": "string", "pattern": DIGEST_PATTERN},
        }),
        &["version", "digest"],
    );
    let mut spec = object(
        json!({
            "endpoint": {"type": "string", "pattern": "^https://"},
            "leaders": {"type": "array", "items": string(), "minItems": 1},
            "version": version(),
            "releases": object(json!({
                "source": string(),
                "catalog": {"type": "array", "items": entry, "maxItems": MAX_CATALOG},
            }), &[]),
            "features": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "nullable": true,
                    "x-kubernetes-preserve-unknown-fields": true,
                },
            },
            "disruptionBudget": object(json!({
                "maxUnavailable": {"type": "integer", "format": "int32", "minimum": 1},
            }), &[]),
            "maintenance": maintenance(),
            "reboot": described(
                reboot_via(),
                "How machines reboot into a release or on request: kexec (the default: the \
                 running kernel starts the next one, skipping the firmware, with the \
                 bootloader's try counting kept; init falls back to the firmware when kexec \
                 is not possible) or firmware. A Machine's own spec.reboot \
                 replaces this one for that machine. A change takes effect at each machine's \
                 next reboot and disrupts nothing by itself.",
            ),
        }),
        &["endpoint", "leaders"],
    );
    spec["x-kubernetes-validations"] = json!([{
        "rule": "!has(self.version) || !has(self.releases) || !has(self.releases.catalog) \
                 || size(self.releases.catalog) == 0 \
                 || self.releases.catalog.exists(e, e.version <= self.version)",
        "message": "spec.version is older than every release in spec.releases.catalog; \
                    a rollback reaches no release older than the catalog's oldest, \
                    so pick a listed version",
        "fieldPath": ".version",
    }]);
    spec
}

/// The Cluster's status schema.
pub fn cluster_status_schema() -> Value {
    object(
        json!({
            "machines": object(json!({
                "ready": {"type": "integer", "format": "int32", "minimum": 0},
                "total": {"type": "integer", "format": "int32", "minimum": 0},
                "summary": string(),
            }), &[]),
            "phase": phase(),
            "conditions": conditions(),
            "releases": object(json!({
                "newest": version(),
                "available": version(),
                "channel": object(json!({
                    "source": string(),
                    "serial": int64(),
                    "expires": time(),
                    "keyId": string(),
                }), &["source"]),
            }), &[]),
            "flux": object(json!({"publicKey": string()}), &[]),
            "rebootTurns": {"type": "array", "items": object(json!({
                "machine": string(),
                "machineResourceVersion": string(),
                "since": time(),
                "release": version(),
                "boot": string(),
                "changes": string_array(),
            }), &["machine", "since"])},
            "rolloutHalt": object(json!({
                "release": version(),
                "machine": string(),
                "cause": enum_of(HaltCause::ALL.iter().map(|c| c.as_str())),
                "since": time(),
                "resume": string(),
            }), &["release", "machine", "cause", "since"]),
            "observedGeneration": int64(),
        }),
        &[],
    )
}

fn metadata_and_body(spec: Value, status: Value, spec_required: bool) -> Value {
    let mut root = object(
        json!({
            "apiVersion": string(),
            "kind": string(),
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        }),
        &[],
    );
    if spec_required {
        root["required"] = json!(["spec"]);
    }
    root
}

fn column(name: &str, path: &str, ty: &str, description: &str) -> Value {
    json!({"name": name, "type": ty, "jsonPath": path, "description": description})
}

/// A column `kubectl get -o wide` shows and the plain listing leaves out.
fn wide_column(name: &str, path: &str, ty: &str, description: &str) -> Value {
    let mut c = column(name, path, ty, description);
    c["priority"] = json!(1);
    c
}

struct Names<'a> {
    kind: &'a str,
    plural: &'a str,
    singular: &'a str,
    short: &'a [&'a str],
}

fn crd(names: Names<'_>, schema: Value, columns: Vec<Value>) -> Value {
    let mut crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{GROUP}", names.plural)},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": names.kind,
                "listKind": format!("{}List", names.kind),
                "plural": names.plural,
                "singular": names.singular,
            },
            "versions": [{
                "name": GROUP_VERSION,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": schema},
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
            }],
        },
    });
    if !names.short.is_empty() {
        crd["spec"]["names"]["shortNames"] = json!(names.short);
    }
    crd
}

/// The CustomResourceDefinition of machines.liken.sh.
pub fn machine_crd() -> Value {
    crd(
        Names {
            kind: "Machine",
            plural: "machines",
            singular: "machine",
            short: &["mach"],
        },
        metadata_and_body(machine_spec_schema(), machine_status_schema(), false),
        vec![
            column(
                "Phase",
                ".status.phase",
                "string",
                "The summary of the machine's conditions",
            ),
            column("Role", ".status.role", "string", "leader or follower"),
            column(
                "Version",
                ".status.release.running",
                "string",
                "The release this boot runs",
            ),
            column(
                "Age",
                ".metadata.creationTimestamp",
                "date",
                "Since the Machine was created",
            ),
            wide_column(
                "Booted-Via",
                ".status.boot.via",
                "string",
                "How the running boot was reached: kexec or firmware",
            ),
        ],
    )
}

/// The CustomResourceDefinition of clusters.liken.sh.
pub fn cluster_crd() -> Value {
    crd(
        Names {
            kind: "Cluster",
            plural: "clusters",
            singular: "cluster",
            short: &[],
        },
        metadata_and_body(cluster_spec_schema(), cluster_status_schema(), true),
        vec![
            column(
                "Phase",
                ".status.phase",
                "string",
                "The summary of the fleet's conditions",
            ),
            column(
                "Ready",
                ".status.machines.summary",
                "string",
                "Ready machines out of all machines",
            ),
            column(
                "Version",
                ".spec.version",
                "string",
                "The release the fleet should run",
            ),
            column(
                "Newest",
                ".status.releases.newest",
                "string",
                "The newest release in the catalog",
            ),
            column(
                "Age",
                ".metadata.creationTimestamp",
                "date",
                "Since the Cluster was created",
            ),
        ],
    )
}

/// Every CRD with the file name it is committed under.
pub fn all() -> [(&'static str, Value); 2] {
    [
        ("clusters.liken.sh.yaml", cluster_crd()),
        ("machines.liken.sh.yaml", machine_crd()),
    ]
}

/// A CRD rendered as the YAML committed in the tree.
pub fn render(crd: &Value) -> String {
    let body = serde_yaml::to_string(crd).unwrap_or_default();
    format!(
        "# Generated by liken-api (crd.rs); `make crds` rewrites this file. Do not edit.\n{body}"
    )
}
