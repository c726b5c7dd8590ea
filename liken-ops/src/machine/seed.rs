//! Seeding: the Machine created in the API from the document init
//! booted with, the first time this machine's operator starts. The
//! Cluster is not this operator's to create (a machine must not be able
//! to name the fleet's Cluster): the cluster operator creates it from
//! the leader's copy (crate::fleet_cluster).
//!
//! Seeding only ever creates. An object that exists is never written
//! over, because from then on the API's copy is the truth a person edits,
//! and the documents on the machine follow it through staging. Two
//! operators seeding the same Machine at once is harmless: one create
//! lands, the other meets AlreadyExists, which is success.

use liken_api::Machine;
use liken_kube::request::MACHINES;
use liken_kube::{Api, Client, Error};

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
