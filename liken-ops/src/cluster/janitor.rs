//! The feature janitor: removing the workloads of retracted features.
//!
//! A feature's workload manifests ship in the system image, and init
//! places them in k3s's auto-deploy directory only while the Cluster
//! declares the feature (liken-init/src/seed.rs). Retracting the feature
//! removes the file, and that deletes nothing: k3s's deploy controller
//! applies the files that exist and never reconciles an addon against a
//! file that is gone (it deletes an addon's objects only for a component
//! on its own `--disable` list, which a liken feature never is). So the
//! janitor is the only thing that removes a retracted feature's
//! workloads, on every path.
//!
//! The contract is one annotation: every workload a feature ships carries
//! `liken.sh/feature: <slug>`, and each sweep deletes the liken-system
//! workloads whose annotation names a feature the Cluster no longer
//! declares. Whether the feature is declared is the only question; the
//! janitor does not wait for the retraction to reach every machine,
//! because once the Cluster stops claiming a feature the fleet needs its
//! workloads nowhere. An object without the annotation is never touched:
//! the operators' own DaemonSet and Deployment live in the same
//! namespace, and no feature owns them.
//!
//! Deletion is by name with background propagation (the garbage
//! collector removes the pods), conditioned on the resourceVersion the
//! janitor judged, so an object re-annotated in between is judged again
//! rather than deleted on an old reading. A DaemonSet's resourceVersion
//! also moves with every status write its controller makes while pods
//! come and go, so a conflict is common and says nothing about the
//! annotation: the sweep lists again at once and judges the fresh copy,
//! up to [`ROUNDS`] times, rather than leaving a busy DaemonSet running
//! until some later sweep happens to catch it between status writes.
//!
//! The swept kinds are [`SWEPT`]: features ship DaemonSets today. A
//! feature that ships another kind adds it there, with its list and
//! delete in images/manifests/cluster-operator-upkeep.yaml, in the same
//! change. (The flux feature lives in its own namespace and has its own
//! ordered teardown: [`crate::cluster::flux::teardown`].)

use liken_api::Cluster;
use liken_api::annotations::FEATURE;
use liken_api::coordination::HEARTBEAT_NAMESPACE;
use liken_kube::request::{DAEMON_SETS, Resource};
use liken_kube::{Api, Client, DeleteParams, DynamicObject, ListParams, Object, Propagation};

use crate::runtime::log;

/// The kinds the janitor sweeps in liken-system.
pub const SWEPT: &[Resource] = &[DAEMON_SETS];

/// A workload, by what the janitor judges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// Its name.
    pub name: String,
    /// The resourceVersion judged.
    pub resource_version: String,
    /// The feature its annotation names, if any.
    pub feature: Option<String>,
}

impl Workload {
    /// Reads a workload object.
    pub fn of(o: &DynamicObject) -> Workload {
        let pointer = format!("/metadata/annotations/{}", FEATURE.replace('/', "~1"));
        Workload {
            name: o.name().to_owned(),
            resource_version: o.resource_version().to_owned(),
            feature: o
                .pointer(&pointer)
                .and_then(|v| v.as_str())
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        }
    }
}

/// The workloads whose feature the Cluster no longer declares.
pub fn decide_retractions<'a>(cluster: &Cluster, workloads: &'a [Workload]) -> Vec<&'a Workload> {
    workloads
        .iter()
        .filter(|w| {
            w.feature
                .as_deref()
                .is_some_and(|slug| !cluster.feature_enabled(slug))
        })
        .collect()
}

/// How many times one sweep lists a kind while deletes keep meeting
/// newer resourceVersions.
pub const ROUNDS: usize = 3;

/// One pass: list each swept kind in liken-system and delete the
/// workloads of retracted features.
pub fn sweep(client: &Client, cluster: &Cluster) {
    for resource in SWEPT {
        let api = Api::namespaced(*resource, HEARTBEAT_NAMESPACE);
        for _ in 0..ROUNDS {
            if sweep_once(client, cluster, resource, &api) == Round::Settled {
                break;
            }
        }
    }
}

/// What one list-and-delete round of a kind left behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Round {
    /// Every retraction judged was carried out, or failed for a reason
    /// another round in this sweep would not change.
    Settled,
    /// A delete met a newer resourceVersion: judge a fresh listing.
    Changed,
}

fn sweep_once(client: &Client, cluster: &Cluster, resource: &Resource, api: &Api) -> Round {
    let listed = match client.list::<DynamicObject>(api, &ListParams::default()) {
        Ok(list) => list.items,
        Err(e) => {
            log::warn(
                "listing workloads for the feature janitor",
                &[("kind", &resource.kind), ("error", &e)],
            );
            return Round::Settled;
        }
    };
    let workloads: Vec<Workload> = listed.iter().map(Workload::of).collect();
    let mut round = Round::Settled;
    for w in decide_retractions(cluster, &workloads) {
        let feature = w.feature.as_deref().unwrap_or_default();
        let params = DeleteParams {
            propagation: Some(Propagation::Background),
            precondition_resource_version: Some(w.resource_version.clone()),
        };
        match client.delete(api, &w.name, &params) {
            Ok(()) => log::info(
                "the Cluster no longer declares this workload's feature; deleted it",
                &[
                    ("kind", &resource.kind),
                    ("name", &w.name),
                    ("feature", &feature),
                ],
            ),
            Err(e) if e.is_not_found() => {}
            Err(e) if e.is_conflict() => round = Round::Changed,
            Err(e) => log::warn(
                "deleting the workload of a retracted feature",
                &[
                    ("kind", &resource.kind),
                    ("name", &w.name),
                    ("feature", &feature),
                    ("error", &e),
                ],
            ),
        }
    }
    round
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::cluster::ClusterSpec;
    use serde_json::json;

    fn workload(name: &str, feature: Option<&str>) -> Workload {
        Workload {
            name: name.into(),
            resource_version: "1".into(),
            feature: feature.map(str::to_owned),
        }
    }

    #[test]
    fn decide_retractions_table() {
        let mut cluster = Cluster::new("home", ClusterSpec::default());
        cluster.spec.features.insert("flux".into(), None);
        cluster.spec.features.insert("iscsi".into(), None);
        let workloads = [
            workload("liken-machine-operator", None),
            workload("iscsid", Some("iscsi")),
            workload("flux-helper", Some("flux")),
            workload("nfs-client", Some("nfs")),
            workload("old-gpu", Some("gpu")),
        ];
        let cases: [(&str, &[&str], &[&str]); 3] = [
            (
                "both declared",
                &["flux", "iscsi"],
                &["nfs-client", "old-gpu"],
            ),
            (
                "iscsi retracted",
                &["flux"],
                &["iscsid", "nfs-client", "old-gpu"],
            ),
            (
                "nothing declared: every annotated workload, never the rest",
                &[],
                &["iscsid", "flux-helper", "nfs-client", "old-gpu"],
            ),
        ];
        for (name, declared, want) in cases {
            cluster.spec.features = declared.iter().map(|s| ((*s).into(), None)).collect();
            let got: Vec<&str> = decide_retractions(&cluster, &workloads)
                .iter()
                .map(|w| w.name.as_str())
                .collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn an_empty_annotation_is_no_claim() {
        let o = DynamicObject(json!({"metadata": {
            "name": "x", "resourceVersion": "7",
            "annotations": {"liken.sh/feature": ""}}}));
        assert_eq!(Workload::of(&o), workload("x", None).with_rv("7"));
        let o = DynamicObject(json!({"metadata": {
            "name": "y", "resourceVersion": "8",
            "annotations": {"liken.sh/feature": "iscsi"}}}));
        assert_eq!(Workload::of(&o), workload("y", Some("iscsi")).with_rv("8"));
    }

    impl Workload {
        fn with_rv(mut self, rv: &str) -> Workload {
            self.resource_version = rv.into();
            self
        }
    }
}
