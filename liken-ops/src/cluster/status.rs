//! The Cluster's status: one verdict, written only when it changed.
//!
//! The sweep is the only writer of the Cluster's status, so it derives
//! every field on every pass: the tally and phase and MachinesReady from
//! the fleet verdict, Progressing, the ledger and the halt from the
//! rollout, FluxTeardown while the flux janitor has a refusal to report,
//! ReleaseChannel while the Cluster names a channel, the catalog's newest
//! release, the channel's last answer and the document it came from, the deploy
//! key's public half, and the generation judged. The result is compared
//! with what the Cluster holds, and a settled fleet writes nothing.
//!
//! Each condition that transitions (new, or a different status or
//! reason) posts one Event with the condition's reason, after the write
//! lands: a refused write posts nothing and the next sweep finds the same
//! transition again.

use liken_api::cluster::{ChannelTaken, ClusterFluxStatus, ClusterReleasesStatus, ClusterStatus};
use liken_api::condition::{self, Condition};
use liken_api::release::{CHANNEL_REPLAYED, CHANNEL_STALE};
use liken_api::{Cluster, ConditionStatus, Time, Version};

use super::channel;
use super::fleet::{FleetSweep, MACHINES_DEGRADED};
use super::rollout::{RELEASE_FAILED, ROLLOUT_STALLED, Rollout};

/// The FluxTeardown condition type: present only while the flux janitor
/// declines a teardown.
pub const FLUX_TEARDOWN: &str = "FluxTeardown";

/// FluxTeardown's reason: liken did not plant the Flux it found.
pub const NOT_PLANTED_BY_LIKEN: &str = "NotPlantedByLiken";

/// What the sweep's other parts contribute to the status.
#[derive(Clone, Debug, Default)]
pub struct Extras {
    /// The flux janitor's refusal, if it has one.
    pub flux_teardown: Option<Condition>,
    /// The channel's last answer.
    pub available: Option<Version>,
    /// The channel document that answer came from, and why the last one
    /// served was refused (reason, message).
    pub channel: (Option<ChannelTaken>, Option<(String, String)>),
    /// The deploy key's public half, when this pass read it; `None` keeps
    /// the published one while the feature is declared.
    pub public_key: Option<String>,
}

/// The status the Cluster should hold after this sweep.
pub fn compose_status(
    cluster: &Cluster,
    fleet: &FleetSweep,
    rollout: &Rollout,
    extras: &Extras,
    now: Time,
) -> ClusterStatus {
    let generation = cluster.metadata.generation;
    let held = &cluster.status;
    let mut conditions = held.conditions.clone();
    condition::set(
        &mut conditions,
        fleet.condition.clone().with_generation(generation),
        now,
    );
    condition::set(
        &mut conditions,
        rollout.progressing.clone().with_generation(generation),
        now,
    );
    let source = cluster
        .spec
        .releases
        .as_ref()
        .map_or("", |r| r.source.as_str());
    let (taken, refusal) = &extras.channel;
    match channel::decide_condition(source, taken.as_ref(), refusal.as_ref(), now) {
        Some(c) => {
            condition::set(&mut conditions, c.with_generation(generation), now);
        }
        None => {
            condition::remove(&mut conditions, channel::RELEASE_CHANNEL);
        }
    }
    match &extras.flux_teardown {
        Some(c) => {
            condition::set(&mut conditions, c.clone().with_generation(generation), now);
        }
        None => {
            condition::remove(&mut conditions, FLUX_TEARDOWN);
        }
    }
    // The public key: a retracted feature clears it (the Secret keeps the
    // key for a re-enable, but the status does not advertise a feature
    // the spec no longer declares); a pass that could not read the
    // Secret keeps the published one.
    let flux = if !cluster.feature_enabled(liken_api::cluster::FEATURE_FLUX) {
        ClusterFluxStatus::default()
    } else {
        match &extras.public_key {
            Some(k) => ClusterFluxStatus {
                public_key: k.clone(),
            },
            None => held.flux.clone(),
        }
    };
    ClusterStatus {
        machines: fleet.tally.clone(),
        phase: Some(fleet.phase),
        conditions,
        releases: ClusterReleasesStatus {
            newest: cluster.newest_release().cloned(),
            available: extras.available.clone(),
            channel: taken.clone(),
        },
        flux,
        reboot_turns: rollout.turns.clone(),
        rollout_halt: rollout.halt.clone(),
        observed_generation: generation,
    }
}

/// The status to write, or `None` when the Cluster already holds it.
pub fn decide_status_write(cluster: &Cluster, composed: ClusterStatus) -> Option<ClusterStatus> {
    (cluster.status != composed).then_some(composed)
}

/// Whether a Cluster condition's transition needs a person: its Event is
/// a Warning. A fleet mid-rollout is MachinesReady False too, and that
/// needs no one.
pub fn needs_a_person(c: &Condition) -> bool {
    c.status != ConditionStatus::True
        && matches!(
            c.reason.as_str(),
            MACHINES_DEGRADED
                | ROLLOUT_STALLED
                | RELEASE_FAILED
                | NOT_PLANTED_BY_LIKEN
                | channel::CHANNEL_UNVERIFIED
                | CHANNEL_STALE
                | CHANNEL_REPLAYED
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::fleet::{
        Judged, decide_fleet_sweep,
        tests::{FRESH, STALE, machine},
    };
    use crate::cluster::rollout::{RolloutInput, Template, decide_rollout};
    use liken_api::cluster::{CatalogEntry, ClusterSpec, ReleasesSpec};
    use liken_api::{Digest, Phase};
    use std::collections::BTreeSet;
    use std::time::Duration;

    fn cluster() -> Cluster {
        let v = |s: &str| Version::parse(s).unwrap();
        let digest = Digest::parse(&format!("sha256:{}", "a".repeat(64))).unwrap();
        let mut c = Cluster::new(
            "home",
            ClusterSpec {
                endpoint: "https://10.0.0.1:6443".into(),
                leaders: vec!["a".into()],
                releases: Some(ReleasesSpec {
                    source: String::new(),
                    catalog: vec![
                        CatalogEntry {
                            version: v("2026.07.01-001"),
                            digest: digest.clone(),
                        },
                        CatalogEntry {
                            version: v("2026.08.01-001"),
                            digest,
                        },
                    ],
                }),
                ..ClusterSpec::default()
            },
        );
        c.metadata.generation = 3;
        c
    }

    fn sweep(c: &Cluster, stale: bool, extras: &Extras, now: i64) -> ClusterStatus {
        let a = machine("a", Some(Phase::Ready));
        let judged = [Judged::new(&a, if stale { STALE } else { FRESH })];
        let fleet = decide_fleet_sweep(&judged);
        let rollout = decide_rollout(&RolloutInput {
            cluster: c,
            machines: &judged,
            unreadable: &BTreeSet::new(),
            template: &Template::Unlabelled,
            watched_for: Duration::from_secs(3600),
            stale_after: Duration::from_secs(40),
            stall_after: Duration::from_secs(1800),
            now: Time::from_unix(now),
            windows: &crate::cluster::windows::Gate::open(),
        });
        compose_status(c, &fleet, &rollout, extras, Time::from_unix(now))
    }

    #[test]
    fn a_settled_fleet_writes_nothing_and_a_change_writes_once() {
        let mut c = cluster();
        let first = decide_status_write(&c, sweep(&c, false, &Extras::default(), 100)).unwrap();
        assert_eq!(first.machines.summary, "1/1");
        assert_eq!(first.phase, Some(Phase::Ready));
        assert_eq!(first.observed_generation, 3);
        assert_eq!(
            first.releases.newest.as_ref().unwrap().as_str(),
            "2026.08.01-001"
        );
        let types: Vec<&str> = first.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["MachinesReady", "Progressing"]);
        assert!(first.conditions.iter().all(|c| c.observed_generation == 3));
        c.status = first.clone();
        // Later sweeps with nothing new write nothing.
        assert_eq!(
            decide_status_write(&c, sweep(&c, false, &Extras::default(), 200)),
            None
        );

        // The machine goes silent: one write, one transition to post.
        let lost = decide_status_write(&c, sweep(&c, true, &Extras::default(), 300)).unwrap();
        let moved = condition::transitions(&c.status.conditions, &lost.conditions);
        assert_eq!(moved.len(), 1);
        assert_eq!(moved[0].reason, MACHINES_DEGRADED);
        assert!(needs_a_person(moved[0]));
        assert_eq!(moved[0].last_transition_time, Time::from_unix(300));
        c.status = lost;
        assert_eq!(
            decide_status_write(&c, sweep(&c, true, &Extras::default(), 400)),
            None
        );
    }

    #[test]
    fn flux_key_teardown_and_channel_fields() {
        let mut c = cluster();
        c.status = sweep(&c, false, &Extras::default(), 100);
        let refusal = Condition::new(
            FLUX_TEARDOWN,
            ConditionStatus::False,
            NOT_PLANTED_BY_LIKEN,
            "x",
        );
        let extras = Extras {
            flux_teardown: Some(refusal),
            available: Some(Version::parse("2026.09.01-001").unwrap()),
            public_key: Some("ssh-ed25519 AAAA liken:home".into()),
            channel: (
                Some(ChannelTaken {
                    source: "https://releases.example.com/stable".into(),
                    serial: Some(4),
                    expires: Some(Time::from_unix(1_900_000_000)),
                    key_id: Some("0123456789ab".into()),
                }),
                None,
            ),
        };
        let s = sweep(&c, false, &extras, 200);
        assert!(condition::find(&s.conditions, FLUX_TEARDOWN).is_some());
        assert_eq!(
            s.releases.available.as_ref().unwrap().as_str(),
            "2026.09.01-001"
        );
        // The document is kept; with no source the Cluster names no
        // channel, so no ReleaseChannel condition.
        assert_eq!(s.releases.channel, extras.channel.0);
        assert!(condition::find(&s.conditions, channel::RELEASE_CHANNEL).is_none());
        let mut named = c.clone();
        if let Some(r) = named.spec.releases.as_mut() {
            r.source = "https://releases.example.com/stable".into();
        }
        let s = sweep(&named, false, &extras, 200);
        let current = condition::find(&s.conditions, channel::RELEASE_CHANNEL).unwrap();
        assert_eq!(current.reason, channel::CHANNEL_CURRENT);
        // The feature is not declared: no key in the status.
        assert_eq!(s.flux, ClusterFluxStatus::default());
        c.spec.features.insert("flux".into(), None);
        let s = sweep(&c, false, &extras, 200);
        assert_eq!(s.flux.public_key, "ssh-ed25519 AAAA liken:home");
        // A pass that could not read the Secret keeps what was published,
        // and no refusal removes the condition.
        c.status = s;
        let s = sweep(&c, false, &Extras::default(), 300);
        assert_eq!(s.flux.public_key, "ssh-ed25519 AAAA liken:home");
        assert!(condition::find(&s.conditions, FLUX_TEARDOWN).is_none());
    }
}
