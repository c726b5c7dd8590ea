//! The fleet's one Cluster, named by the deployment.
//!
//! A fleet has exactly one Cluster, and its name is fixed by the
//! deployment layer (the cluster.yaml `liken layer` packs, which every
//! machine boots with). Both operators act on that name only. Any other
//! Cluster object is foreign: somebody (a person by mistake, or a
//! machine's stolen credentials on purpose) created it, and following it
//! would roll its source, catalog and version onto the fleet. So neither
//! operator ever picks "the first" Cluster; each names the foreign ones
//! in a Warning Event, and the cluster operator (the only writer of a
//! Cluster's status) marks each with the [`OPERATED`] condition False.
//!
//! Where each operator learns the name: the machine operator from the
//! Cluster document init runs (/run/liken/documents/cluster.yaml, the
//! layer's or a staged copy of the API's); the cluster operator from its
//! mounted copy of the deployment's cluster.yaml (`--cluster-file`,
//! which the leader's init seeds as the ConfigMap liken-system/liken-cluster),
//! from which it also creates the Cluster when the API has none.

use std::sync::Arc;

use liken_api::{Cluster, Condition, ConditionStatus};
use liken_kube::request::CLUSTERS;
use liken_kube::{Api, Client, Error};

/// The Warning Event's reason on a foreign Cluster.
pub const FOREIGN_REASON: &str = "ForeignCluster";
/// The condition the cluster operator sets on a foreign Cluster.
pub const OPERATED: &str = "Operated";

/// The fleet's Cluster and the foreign ones, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chosen {
    /// The Cluster named by the deployment, when the API has it.
    pub ours: Option<Arc<Cluster>>,
    /// Every other Cluster's name, sorted.
    pub foreign: Vec<String>,
}

/// Splits the listed Clusters into the one named `name` and the others.
pub fn decide_cluster(name: &str, clusters: &[Arc<Cluster>]) -> Chosen {
    let mut chosen = Chosen::default();
    for c in clusters {
        if c.metadata.name == name {
            chosen.ours = Some(c.clone());
        } else {
            chosen.foreign.push(c.metadata.name.clone());
        }
    }
    chosen.foreign.sort();
    chosen
}

/// What a foreign Cluster's Event and condition say.
pub fn foreign_note(foreign: &str, ours: &str) -> String {
    format!(
        "Cluster {foreign} is not this fleet's: the deployment names its Cluster {ours}, and \
         the operators act on that one only; delete {foreign} (nothing follows it)"
    )
}

/// The condition a foreign Cluster carries.
pub fn foreign_condition(foreign: &str, ours: &str) -> Condition {
    Condition::new(
        OPERATED,
        ConditionStatus::False,
        FOREIGN_REASON,
        foreign_note(foreign, ours),
    )
}

/// Whether a created Cluster came to be or was there already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seeded {
    /// The Cluster was there already.
    Existed,
    /// This call created it.
    Created,
}

/// Creates the Cluster from the deployment's copy; one already there of
/// its name is success. Only ever creates: from then on the API's copy is
/// the truth a person edits. The caller asks only when its store has no
/// Cluster of that name, so no read is needed (and none is granted).
pub fn seed_cluster(client: &Client, copy: &Cluster) -> Result<Seeded, Error> {
    match client.create::<Cluster, _>(&Api::all(CLUSTERS), &copy.canonical()) {
        Ok(_) => Ok(Seeded::Created),
        Err(Error::AlreadyExists { .. }) => Ok(Seeded::Existed),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str) -> Arc<Cluster> {
        Arc::new(Cluster::new(name, Default::default()))
    }

    #[test]
    fn only_the_named_cluster_is_ours_whatever_sorts_first() {
        let listed = [c("zz-home"), c("aaa-evil"), c("home")];
        let chosen = decide_cluster("zz-home", &listed);
        assert_eq!(chosen.ours.unwrap().metadata.name, "zz-home");
        assert_eq!(chosen.foreign, ["aaa-evil", "home"]);
        let none = decide_cluster("fleet", &listed);
        assert!(none.ours.is_none(), "no fallback to another name");
        assert_eq!(none.foreign.len(), 3);
    }

    #[test]
    fn the_condition_says_whose_and_what_to_do() {
        let cond = foreign_condition("aaa-evil", "home");
        assert_eq!(cond.type_, OPERATED);
        assert_eq!(cond.status, ConditionStatus::False);
        assert!(cond.message.contains("names its Cluster home"));
        assert!(cond.message.contains("delete aaa-evil"));
    }
}
