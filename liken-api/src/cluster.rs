//! The Cluster: exactly one per fleet.
//!
//! The spec is the fleet-wide declaration: where the API server answers,
//! which machines lead, which release the fleet should run and where
//! releases come from, which features are on, and how many machines may
//! be down at once for planned reboots. The status is the cluster
//! operator's verdict over the whole fleet, including the reboot-turn
//! ledger that the rollout writes before it grants any turn.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::condition::Condition;
use crate::digest::{Digest, Sha256Hex};
use crate::hash::document_hash;
use crate::maintenance::{self, MaintenanceSpec};
use crate::meta::{API_VERSION, Kind, ObjectMeta, is_dns_label, is_dns_subdomain};
use crate::phase::Phase;
use crate::time::Time;
use crate::validate::{Problem, Problems, Validate};
use crate::version::Version;

/// The slug of the GitOps feature (Flux).
pub const FEATURE_FLUX: &str = "flux";

/// The budget when the spec sets none: one machine at a time.
pub const DEFAULT_MAX_UNAVAILABLE: u32 = 1;

/// The Cluster kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cluster {
    /// Always [`API_VERSION`].
    #[serde(default)]
    pub api_version: String,
    /// Always `Cluster`.
    #[serde(default)]
    pub kind: String,
    /// Name and server bookkeeping.
    pub metadata: ObjectMeta,
    /// What the person declares.
    pub spec: ClusterSpec,
    /// The cluster operator's verdict.
    #[cfg(feature = "status")]
    #[serde(default, skip_serializing_if = "ClusterStatus::is_empty")]
    pub status: ClusterStatus,
}

/// The fleet's declared state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// The API server's URL as machines and workstations reach it
    /// (`https://10.0.0.10:6443`).
    pub endpoint: String,
    /// The names of the Machines that run the control plane.
    #[serde(default)]
    pub leaders: Vec<String>,
    /// The release the fleet should run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<Version>,
    /// Where releases come from and which ones are trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub releases: Option<ReleasesSpec>,
    /// Optional features by slug, each with its own configuration
    /// (`flux: {url: ..., branch: main}`); a key with no value turns the
    /// feature on with its defaults.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub features: BTreeMap<String, Option<FeatureConfig>>,
    /// How many machines planned reboots may take down at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption_budget: Option<DisruptionBudget>,
    /// When reboot turns may be granted: the fleet's weekly windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceSpec>,
    /// How machines reboot into a release or on request: `kexec` (the
    /// default: the firmware is skipped, the try counting kept) or
    /// `firmware`. A Machine may choose for itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot: Option<crate::boot::RebootVia>,
}

/// A feature's configuration, free-form: each feature reads its own keys.
pub type FeatureConfig = BTreeMap<String, serde_json::Value>;

/// The release channel and the catalog of releases the fleet may run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleasesSpec {
    /// The channel's base URL; `<source>/channel.yaml` names its latest.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// The releases this fleet trusts, each pinned by the digest of its
    /// release.yaml. A machine downloads only a release listed here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub catalog: Vec<CatalogEntry>,
}

/// One trusted release.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogEntry {
    /// The release's version.
    pub version: Version,
    /// `sha256:<hex>` of its release.yaml.
    pub digest: Digest,
}

/// The planned-disruption budget.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionBudget {
    /// Machines that may be rebooting at once; 1 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<u32>,
}

/// The Flux feature's configuration, read from `features.flux`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FluxConfig {
    /// The git repository's SSH URL.
    #[serde(default)]
    pub url: String,
    /// The branch to follow; `main` when empty.
    #[serde(default)]
    pub branch: String,
    /// The directory in the repository to apply; the root when empty.
    #[serde(default)]
    pub path: String,
    /// The forge's SSH host keys, in known_hosts form.
    #[serde(default)]
    pub known_hosts: String,
}

/// The fleet's observed state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// The headcount.
    #[serde(default)]
    pub machines: MachineTally,
    /// The one-word summary of the conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// MachinesReady, Progressing and, while it has a refusal to report,
    /// FluxTeardown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The newest release in the catalog and the newest the channel offers.
    #[serde(default)]
    pub releases: ClusterReleasesStatus,
    /// The Flux deploy key's public half, while the feature is declared.
    #[serde(default)]
    pub flux: ClusterFluxStatus,
    /// The reboot-turn ledger: the machines that hold a turn now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reboot_turns: Vec<RebootTurn>,
    /// A release whose rollout stopped because a machine failed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_halt: Option<RolloutHalt>,
    /// The metadata.generation this status judged.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl ClusterStatus {
    /// Whether nothing has been observed yet.
    pub fn is_empty(&self) -> bool {
        *self == ClusterStatus::default()
    }
}

/// Ready machines out of all machines.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineTally {
    /// Machines whose phase is Ready and whose heartbeat is fresh.
    #[serde(default)]
    pub ready: u32,
    /// All Machines.
    #[serde(default)]
    pub total: u32,
    /// `ready/total`, for the READY printer column.
    #[serde(default)]
    pub summary: String,
}

impl MachineTally {
    /// A tally with its summary filled in.
    pub fn new(ready: u32, total: u32) -> MachineTally {
        MachineTally {
            ready,
            total,
            summary: format!("{ready}/{total}"),
        }
    }
}

/// What the fleet knows about releases.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterReleasesStatus {
    /// The newest version in spec.releases.catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest: Option<Version>,
    /// The latest version the channel announced at its last poll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available: Option<Version>,
    /// The channel document that answer came from. Kept here, not only in
    /// the operator's memory, so a new leader still refuses an older
    /// document served again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<ChannelTaken>,
}

/// The channel document the cluster operator last took as the channel's
/// answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelTaken {
    /// The spec.releases.source it was read from: a serial is only
    /// compared with serials of the same source.
    pub source: String,
    /// Its serial; a later document below it is a replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<u64>,
    /// When it stops being news: past it the channel has stopped moving.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Time>,
    /// The key that signed it; absent when the deployment carries no
    /// trust root (packed with `liken layer -unsigned`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
}

/// The Flux feature's public state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterFluxStatus {
    /// The deploy key to register at the forge (OpenSSH public key line).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub public_key: String,
}

/// One entry of the reboot-turn ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RebootTurn {
    /// The Machine holding the turn.
    pub machine: String,
    /// The Machine's resourceVersion when the turn was granted, so a
    /// reclaim can tell whether the machine has written since.
    #[serde(default)]
    pub machine_resource_version: String,
    /// When the turn was granted.
    pub since: Time,
    /// The release the machine reboots into on this turn (its staged
    /// release), when the turn is for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<Version>,
    /// The first 12 hex digits of the boot id the machine ran when the
    /// turn was granted, so the sweep can tell when it has rebooted.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub boot: String,
    /// The first 12 hex digits of each staged change the turn applies
    /// (the Machine's `status.pending` when it was granted), sorted: with
    /// `boot` and `release`, what the grant allows
    /// ([`crate::coordination::TurnPurpose`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
}

impl RebootTurn {
    /// What this turn's grant allows.
    pub fn purpose(&self) -> crate::coordination::TurnPurpose {
        crate::coordination::TurnPurpose {
            boot: self.boot.clone(),
            release: self.release.clone(),
            changes: self.changes.clone(),
        }
    }
}

/// A halted rollout: a machine given a turn for `release` came back
/// running an older release, or reported the release Blocked. The cluster
/// operator grants no further turn for that release until the Cluster's
/// target changes or the `liken.sh/resume-rollout` annotation takes a
/// value other than [`RolloutHalt::resume`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutHalt {
    /// The release that failed.
    pub release: Version,
    /// The machine it failed on.
    pub machine: String,
    /// What the machine reported.
    pub cause: HaltCause,
    /// When the cluster operator saw it.
    pub since: Time,
    /// The value `liken.sh/resume-rollout` had when the halt began (empty
    /// when unset); any other value lifts the halt.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resume: String,
}

/// Why a release's rollout halted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HaltCause {
    /// The machine rebooted and runs an older release: its boot of the
    /// new one failed and the boot loader fell back to the other slot.
    FellBack,
    /// The machine reported the release Blocked (a refused download, a
    /// bad digest, a slot write that failed).
    Blocked,
}

impl HaltCause {
    /// Both causes, in the order the CRD enum lists them.
    pub const ALL: [HaltCause; 2] = [HaltCause::FellBack, HaltCause::Blocked];

    /// The cause as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            HaltCause::FellBack => "FellBack",
            HaltCause::Blocked => "Blocked",
        }
    }
}

impl Kind for Cluster {
    const KIND: &'static str = "Cluster";

    fn api_version(&self) -> &str {
        &self.api_version
    }

    fn kind(&self) -> &str {
        &self.kind
    }
}

/// Why a feature's configuration could not be read.
#[derive(Debug)]
pub struct FeatureConfigError {
    slug: String,
    source: serde_json::Error,
}

impl std::fmt::Display for FeatureConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "spec.features.{}: {}", self.slug, self.source)
    }
}

impl std::error::Error for FeatureConfigError {}

impl Cluster {
    /// A Cluster with the given name and spec and no status.
    pub fn new(name: impl Into<String>, spec: ClusterSpec) -> Cluster {
        Cluster {
            api_version: API_VERSION.to_owned(),
            kind: <Cluster as Kind>::KIND.to_owned(),
            metadata: ObjectMeta::named(name),
            spec,
            #[cfg(feature = "status")]
            status: ClusterStatus::default(),
        }
    }

    /// Whether the spec declares the feature.
    pub fn feature_enabled(&self, slug: &str) -> bool {
        self.spec.features.contains_key(slug)
    }

    /// The Flux configuration, when the feature is declared; an error
    /// names the unknown or mistyped key.
    pub fn flux_config(&self) -> Result<Option<FluxConfig>, FeatureConfigError> {
        match self.spec.features.get(FEATURE_FLUX) {
            None => Ok(None),
            Some(None) => Ok(Some(FluxConfig::default())),
            Some(Some(cfg)) => {
                // Inserted one by one: collecting a map sorts, and each
                // sorted type is its own copy of std's sort in
                // liken-init, which has a size budget.
                let mut map = serde_json::Map::new();
                for (k, v) in cfg {
                    map.insert(k.clone(), v.clone());
                }
                let value = serde_json::Value::Object(map);
                serde_json::from_value(value)
                    .map(Some)
                    .map_err(|source| FeatureConfigError {
                        slug: FEATURE_FLUX.to_owned(),
                        source,
                    })
            }
        }
    }

    /// The rollout halt in force: the stored one, while `spec.version`
    /// still names its release and the `liken.sh/resume-rollout`
    /// annotation still has the value it had when the halt began. Both
    /// operators judge a halt by this one rule: the cluster operator
    /// grants no turn for the release, and no machine writes it into its
    /// inactive slot or keeps it armed there.
    #[cfg(feature = "status")]
    pub fn active_halt(&self) -> Option<&RolloutHalt> {
        let resume = self
            .metadata
            .annotation(crate::annotations::RESUME_ROLLOUT)
            .unwrap_or_default();
        self.status
            .rollout_halt
            .as_ref()
            .filter(|h| Some(&h.release) == self.spec.version.as_ref() && h.resume == resume)
    }

    /// The budget, [`DEFAULT_MAX_UNAVAILABLE`] when the spec sets none.
    pub fn max_unavailable(&self) -> u32 {
        self.spec
            .disruption_budget
            .as_ref()
            .and_then(|b| b.max_unavailable)
            .unwrap_or(DEFAULT_MAX_UNAVAILABLE)
    }

    /// Whether the named machine is a leader.
    pub fn is_leader(&self, machine: &str) -> bool {
        self.spec.leaders.iter().any(|l| l == machine)
    }

    /// The newest version in the catalog.
    pub fn newest_release(&self) -> Option<&Version> {
        newest_version(self.spec.releases.as_ref().map_or(&[], |r| &r.catalog))
    }

    /// The catalog entry for a version.
    pub fn catalog_entry(&self, version: &Version) -> Option<&CatalogEntry> {
        self.spec
            .releases
            .as_ref()?
            .catalog
            .iter()
            .find(|e| &e.version == version)
    }

    /// The document as staged and hashed: name and spec only.
    pub fn canonical(&self) -> Cluster {
        Cluster::new(self.metadata.name.clone(), self.spec.clone())
    }

    /// SHA-256 over the canonical form ([`crate::hash`]).
    pub fn canonical_hash(&self) -> Sha256Hex {
        // Feature configurations are JSON values already; nothing in a
        // Cluster can fail to serialize.
        document_hash(&self.canonical()).unwrap_or_else(|_| crate::hash::sha256(b""))
    }
}

/// The newest version in a catalog.
pub fn newest_version(catalog: &[CatalogEntry]) -> Option<&Version> {
    crate::version::newest(catalog.iter().map(|e| &e.version))
}

fn valid_endpoint(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("https://") else {
        return false;
    };
    let host_port = rest.strip_suffix('/').unwrap_or(rest);
    !host_port.is_empty() && !host_port.contains(['/', '?', '#', ' ', '@'])
}

impl Validate for Cluster {
    fn validate(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        let spec = &self.spec;
        if !is_dns_subdomain(&self.metadata.name) {
            p.add(
                "metadata.name",
                format!(
                    "{:?} is not a valid name: use lower-case letters, digits, '-' and '.'",
                    self.metadata.name
                ),
            );
        }
        if !valid_endpoint(&spec.endpoint) {
            p.add(
                "spec.endpoint",
                format!(
                    "{:?} is not an https URL such as https://10.0.0.10:6443",
                    spec.endpoint
                ),
            );
        }
        if spec.leaders.is_empty() {
            p.add(
                "spec.leaders",
                "name at least one machine to run the control plane",
            );
        }
        for (i, l) in spec.leaders.iter().enumerate() {
            if !is_dns_subdomain(l) {
                p.add(
                    format!("spec.leaders[{i}]"),
                    format!("{l:?} is not a machine name"),
                );
            } else if spec.leaders[..i].contains(l) {
                p.add(
                    format!("spec.leaders[{i}]"),
                    format!("{l:?} is listed twice"),
                );
            }
        }
        if let Some(r) = &spec.releases {
            let http = r.source.starts_with("https://") || r.source.starts_with("http://");
            if !r.source.is_empty() && !http {
                p.add(
                    "spec.releases.source",
                    format!("{:?} is not an http(s) URL", r.source),
                );
            }
            for (i, e) in r.catalog.iter().enumerate() {
                if r.catalog[..i].iter().any(|o| o.version == e.version) {
                    p.add(
                        format!("spec.releases.catalog[{i}]"),
                        format!("version {} is listed twice", e.version),
                    );
                }
            }
        }
        if let Some(v) = &spec.version {
            let catalog = spec.releases.as_ref().map_or(&[][..], |r| &r.catalog);
            if !catalog.is_empty() && !catalog.iter().any(|e| &e.version == v) {
                p.add(
                    "spec.version",
                    format!("{v} is not in spec.releases.catalog; add it with its digest"),
                );
            }
        }
        for slug in spec.features.keys() {
            if !is_dns_label(slug) {
                p.add(
                    format!("spec.features.{slug}"),
                    "a feature slug is a lower-case DNS label",
                );
            }
        }
        if let Err(e) = self.flux_config() {
            p.add(
                format!("spec.features.{FEATURE_FLUX}"),
                e.source.to_string(),
            );
        }
        if self
            .spec
            .disruption_budget
            .as_ref()
            .and_then(|b| b.max_unavailable)
            == Some(0)
        {
            p.add(
                "spec.disruptionBudget.maxUnavailable",
                "0 would let no machine ever reboot for an update; use 1 or more",
            );
        }
        p.0.extend(maintenance::validate(
            spec.maintenance.as_ref(),
            "spec.maintenance",
        ));
        p.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn digest() -> Digest {
        Digest::parse(&format!("sha256:{}", "a".repeat(64))).unwrap()
    }

    fn cluster() -> Cluster {
        Cluster::new(
            "home",
            ClusterSpec {
                endpoint: "https://10.0.0.10:6443".into(),
                leaders: vec!["node-1".into()],
                version: Some(v("2026.07.11-001")),
                releases: Some(ReleasesSpec {
                    source: "https://releases.example/stable".into(),
                    catalog: vec![
                        CatalogEntry {
                            version: v("2026.07.11-001"),
                            digest: digest(),
                        },
                        CatalogEntry {
                            version: v("2026.08.01-002"),
                            digest: digest(),
                        },
                    ],
                }),
                ..ClusterSpec::default()
            },
        )
    }

    #[test]
    fn defaults_and_lookups() {
        let c = cluster();
        assert!(c.validate().is_empty(), "{:?}", c.validate());
        assert_eq!(c.max_unavailable(), 1);
        assert_eq!(c.newest_release(), Some(&v("2026.08.01-002")));
        assert!(c.is_leader("node-1"));
        assert!(!c.is_leader("node-2"));
        assert!(c.catalog_entry(&v("2026.07.11-001")).is_some());
        assert!(!c.feature_enabled(FEATURE_FLUX));
        assert_eq!(MachineTally::new(2, 3).summary, "2/3");
    }

    #[test]
    fn flux_config_is_read_strictly() {
        let mut c = cluster();
        c.spec.features.insert(FEATURE_FLUX.into(), None);
        assert_eq!(c.flux_config().unwrap(), Some(FluxConfig::default()));
        let cfg: FeatureConfig = serde_json::from_str(
            r#"{"url":"ssh://git@forge/x.git","knownHosts":"forge ssh-ed25519 AAAA"}"#,
        )
        .unwrap();
        c.spec.features.insert(FEATURE_FLUX.into(), Some(cfg));
        assert_eq!(
            c.flux_config().unwrap().unwrap().url,
            "ssh://git@forge/x.git"
        );
        let bad: FeatureConfig = serde_json::from_str(r#"{"repo":"x"}"#).unwrap();
        c.spec.features.insert(FEATURE_FLUX.into(), Some(bad));
        let err = c.flux_config().unwrap_err().to_string();
        assert!(
            err.contains("spec.features.flux") && err.contains("unknown field `repo`"),
            "{err}"
        );
    }

    #[test]
    fn validation() {
        let mut c = cluster();
        c.spec.endpoint = "10.0.0.10:6443".into();
        c.spec.leaders = vec!["node-1".into(), "node-1".into()];
        c.spec.version = Some(v("2026.09.01-001"));
        c.spec.disruption_budget = Some(DisruptionBudget {
            max_unavailable: Some(0),
        });
        let fields: Vec<String> = c.validate().into_iter().map(|p| p.field).collect();
        assert_eq!(
            fields,
            [
                "spec.endpoint",
                "spec.leaders[1]",
                "spec.version",
                "spec.disruptionBudget.maxUnavailable"
            ]
        );
    }

    #[test]
    #[cfg(feature = "status")]
    fn canonical_hash_ignores_status() {
        let a = cluster();
        let mut b = a.clone();
        b.status.machines = MachineTally::new(1, 1);
        b.metadata
            .annotations
            .insert("liken.sh/check-releases".into(), "now".into());
        assert_eq!(a.canonical_hash(), b.canonical_hash());
    }
}
