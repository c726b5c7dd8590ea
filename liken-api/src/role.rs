//! Roles: what a machine is in its cluster.
//!
//! A leader runs the control plane (API server, scheduler, datastore); a
//! follower runs workloads. k3s calls these `server` and `agent`; liken
//! uses its own words everywhere and translates in exactly one place, the
//! moment init execs k3s, so this crate deliberately has no k3s mapping.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A machine's role, derived from whether the Cluster lists it as a leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Runs the control plane.
    Leader,
    /// Runs workloads and follows the leaders.
    Follower,
}

impl Role {
    /// Both roles, in the order the CRD enum lists them.
    pub const ALL: [Role; 2] = [Role::Leader, Role::Follower];

    /// The role's name as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
