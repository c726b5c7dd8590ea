//! Seeding: the Machine (and the fleet's Cluster) created in the API
//! from the documents init booted with, the first time this machine's
//! operator starts.
//!
//! Seeding only ever creates. An object that exists is never written
//! over, because from then on the API's copy is the truth a person edits,
//! and the documents on the machine follow it through staging. Two
//! machines seeding the same Cluster at once is harmless: one create
//! lands, the other meets AlreadyExists, which is success.

use liken_api::{Cluster, Machine};
use liken_kube::request::{CLUSTERS, MACHINES};
use liken_kube::{Api, Client, Error, ListParams};

/// What seeding did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seeded {
    /// The object was there already.
    Existed,
    /// This call created it.
    Created,
}

fn create_once<T: liken_kube::Object, B: serde::Serialize>(
    client: &Client,
    api: &Api,
    body: &B,
) -> Result<Seeded, Error> {
    match client.create::<T, B>(api, body) {
        Ok(_) => Ok(Seeded::Created),
        Err(Error::AlreadyExists { .. }) => Ok(Seeded::Existed),
        Err(e) => Err(e),
    }
}

/// Creates the Machine from the document this boot runs, unless the API
/// has it.
pub fn seed_machine(client: &Client, running: &Machine) -> Result<Seeded, Error> {
    let api = Api::all(MACHINES);
    if client
        .get_opt::<Machine>(&api, &running.metadata.name)?
        .is_some()
    {
        return Ok(Seeded::Existed);
    }
    create_once::<Machine, _>(client, &api, &running.canonical())
}

/// Creates the Cluster from the document this boot runs, unless the API
/// has one (a fleet has exactly one, whatever its name).
pub fn seed_cluster(client: &Client, running: &Cluster) -> Result<Seeded, Error> {
    let api = Api::all(CLUSTERS);
    let existing = client.list::<Cluster>(&api, &ListParams::default().limit(1))?;
    if !existing.items.is_empty() {
        return Ok(Seeded::Existed);
    }
    create_once::<Cluster, _>(client, &api, &running.canonical())
}
