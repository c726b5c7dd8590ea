//! The cluster operator's side of the one Cluster (crate::fleet_cluster):
//! the deployment's copy it was started with (`--cluster-file`, the
//! ConfigMap liken-system/liken-cluster that the leader's init seeds from
//! its layer), the Cluster created from that copy when the API has none
//! of its name, and each foreign Cluster reported once: a Warning Event
//! and the condition `Operated=False` on its status.

use std::collections::BTreeSet;
use std::path::Path;

use liken_api::signing::{MAX_SMALL_DOCUMENT, TrustRoot};
use liken_api::{Cluster, Time, condition, decode};
use liken_kube::events::{EventType, ObjectReference, Recorder};
use liken_kube::request::CLUSTERS;
use liken_kube::{Api, Client, Store};

use crate::fleet_cluster::{
    FOREIGN_REASON, Seeded, decide_cluster, foreign_condition, foreign_note, seed_cluster,
};
use crate::runtime::log;

/// The largest cluster.yaml read.
const MAX_FILE: u64 = 1024 * 1024;

/// Reads the deployment's Cluster document (strictly, as init does).
pub fn read_copy(path: &Path) -> Result<Cluster, String> {
    let file = std::fs::File::open(path).map_err(|e| {
        format!(
            "cannot read the deployment's Cluster at {}: {e}; the cluster operator acts only on \
             the Cluster its deployment names (the Deployment mounts it from the ConfigMap \
             liken-system/liken-cluster, which a leader's init seeds)",
            path.display()
        )
    })?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_FILE), &mut text)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    decode::strict::<Cluster>(&text, &path.display().to_string()).map_err(|e| e.to_string())
}

/// Reads the deployment's trust root (`--trust-file`, the ConfigMap's
/// `trust.yaml` key beside cluster.yaml). A file that does not exist is a
/// deployment packed with `liken layer -unsigned`: init seeds the key only
/// when the layer carries a trust root. Anything else that goes wrong is
/// an error, so a damaged trust root never reads as "unsigned".
pub fn read_trust(path: &Path) -> Result<Option<TrustRoot>, String> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!(
                "cannot read the deployment's trust root at {}: {e}",
                path.display()
            ));
        }
    };
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(file, MAX_SMALL_DOCUMENT),
        &mut text,
    )
    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    decode::strict::<TrustRoot>(&text, &path.display().to_string())
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The deployment's Cluster and what has been said about the others.
pub struct Deployment {
    copy: Cluster,
    reported: BTreeSet<String>,
    seeded_logged: bool,
}

impl Deployment {
    /// From the deployment's copy.
    pub fn new(copy: Cluster) -> Deployment {
        Deployment {
            copy,
            reported: BTreeSet::new(),
            seeded_logged: false,
        }
    }

    /// The Cluster's name.
    pub fn name(&self) -> &str {
        &self.copy.metadata.name
    }

    /// The fleet's Cluster from the store, creating it from the copy when
    /// the API has none of its name; each foreign Cluster reported once.
    pub fn pick(
        &mut self,
        client: &Client,
        recorder: &Recorder,
        clusters: &Store<Cluster>,
    ) -> Option<Cluster> {
        let chosen = decide_cluster(self.name(), &clusters.list());
        self.reported.retain(|r| chosen.foreign.contains(r));
        for foreign in &chosen.foreign {
            if self.reported.contains(foreign) {
                continue;
            }
            let Some(c) = clusters.get(foreign) else {
                continue;
            };
            if self.report(client, recorder, &c) {
                self.reported.insert(foreign.clone());
            }
        }
        if chosen.ours.is_none() {
            match seed_cluster(client, &self.copy) {
                Ok(Seeded::Created) => log::info(
                    "created the Cluster from the deployment's copy",
                    &[("cluster", &self.copy.metadata.name)],
                ),
                Ok(Seeded::Existed) => {}
                Err(e) if !self.seeded_logged => {
                    self.seeded_logged = true;
                    log::warn(
                        "creating the Cluster from the deployment's copy failed; the next \
                         sweep tries again",
                        &[("cluster", &self.copy.metadata.name), ("err", &e)],
                    );
                }
                Err(_) => {}
            }
        }
        chosen.ours.map(|c| (*c).clone())
    }

    /// The Warning Event and the condition on a foreign Cluster; answers
    /// whether the condition is in place.
    fn report(&self, client: &Client, recorder: &Recorder, c: &Cluster) -> bool {
        let name = &c.metadata.name;
        let note = foreign_note(name, self.name());
        log::warn(
            "ignoring a Cluster the deployment does not name",
            &[("cluster", name), ("fleet", &self.name())],
        );
        recorder.event(
            ObjectReference::cluster(c),
            EventType::Warning,
            FOREIGN_REASON,
            "Ignore",
            &note,
        );
        let mut marked = c.clone();
        let now = Time::from_system(std::time::SystemTime::now());
        let cond = foreign_condition(name, self.name()).with_generation(c.metadata.generation);
        if !condition::set(&mut marked.status.conditions, cond, now) {
            return true;
        }
        match client.replace_status::<Cluster, _>(&Api::all(CLUSTERS), name, &marked) {
            Ok(_) => true,
            Err(e) => {
                log::warn(
                    "marking a foreign Cluster failed; the next sweep tries again",
                    &[("cluster", name), ("err", &e)],
                );
                false
            }
        }
    }
}
