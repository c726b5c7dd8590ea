//! Phases: one word that summarizes a document's conditions.
//!
//! A phase is never a fact of its own. The machine operator derives it
//! from the conditions on every pass through one table, and the cluster
//! operator derives the fleet's phase the same way, so the two speak the
//! same words. The one exception is [`Phase::Lost`]: a machine that has
//! gone silent cannot say so, so the cluster operator writes it.
//!
//! The variants are declared from most to least severe, and `Ord`
//! follows declaration order, so `phases.iter().min()` is the worst.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The state of a machine or of the fleet, most severe first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Phase {
    /// The facts cannot be read, so no judgement can be made.
    Unknown,
    /// init has not yet published this boot's record.
    Booting,
    /// The heartbeat stopped; written by the cluster operator.
    Lost,
    /// Drift exists that cannot be staged; it needs a different edit.
    Blocked,
    /// A reboot or restart is under way to apply a staged change.
    Updating,
    /// A change is staged and waits for a Manual approval.
    UpdatePending,
    /// Something is wrong that none of the states above names.
    Degraded,
    /// A release downloads for the inactive slot while workloads run.
    Downloading,
    /// Every condition holds.
    Ready,
}

impl Phase {
    /// Every phase, most severe first.
    pub const ALL: [Phase; 9] = [
        Phase::Unknown,
        Phase::Booting,
        Phase::Lost,
        Phase::Blocked,
        Phase::Updating,
        Phase::UpdatePending,
        Phase::Degraded,
        Phase::Downloading,
        Phase::Ready,
    ];

    /// The phase's name as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Unknown => "Unknown",
            Phase::Booting => "Booting",
            Phase::Lost => "Lost",
            Phase::Blocked => "Blocked",
            Phase::Updating => "Updating",
            Phase::UpdatePending => "UpdatePending",
            Phase::Degraded => "Degraded",
            Phase::Downloading => "Downloading",
            Phase::Ready => "Ready",
        }
    }

    /// The more severe of two phases.
    pub fn worst(self, other: Phase) -> Phase {
        self.min(other)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A phase name that is not one of [`Phase::ALL`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownPhase(pub String);

impl fmt::Display for UnknownPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
        write!(f, "phase {:?} is not one of {}", self.0, names.join(", "))
    }
}

impl std::error::Error for UnknownPhase {}

impl FromStr for Phase {
    type Err = UnknownPhase;

    fn from_str(s: &str) -> Result<Phase, UnknownPhase> {
        Phase::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownPhase(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severity_follows_the_declared_order() {
        assert!(Phase::Unknown < Phase::Lost);
        assert!(Phase::Lost < Phase::Degraded);
        assert!(Phase::Downloading < Phase::Ready);
        assert_eq!(Phase::Ready.worst(Phase::Blocked), Phase::Blocked);
        let mut sorted = Phase::ALL;
        sorted.sort();
        assert_eq!(sorted, Phase::ALL);
    }

    #[test]
    fn names_round_trip() {
        for p in Phase::ALL {
            assert_eq!(p.as_str().parse::<Phase>().unwrap(), p);
            assert_eq!(serde_json::to_string(&p).unwrap(), format!("\"{p}\""));
        }
        let err = "ready".parse::<Phase>().unwrap_err();
        assert!(err.to_string().contains("is not one of Unknown, Booting"));
    }
}
