//! ReleaseCurrent: whether the machine runs the Cluster's target
//! release, and what to do about it when it does not.
//!
//! The way to a new release: download it from the channel on the
//! download worker (phase Downloading, progress in the message), verify
//! it against the catalog digest and release.yaml, ask init to write it
//! into the inactive slot, then stage a Reboot that boots it. Each step
//! is read back from the worker ([`Worker`]) and from what this boot
//! already wrote ([`Written`]), so the decision here is pure.
//!
//! What stops it is Blocked, with the reason and what to change: a
//! target missing from the catalog, no channel, a boot that has no slot
//! or no known version, a digest that does not match, a full disk, a
//! write init refused, or a written release that failed to boot (the
//! machine fell back). The running slot is never touched on the way:
//! init writes only the other one.
//!
//! init refuses to write the other slot while the booted entry is still
//! on trial (not blessed), because until then the other slot is the only
//! one known to boot. A verified release waits for the blessing, and the
//! message says so.

use liken_api::coordination::reason;
use liken_api::machine::{DisruptionKind, PendingDisruption};
use liken_api::{BootRecord, Cluster, ConditionStatus, Sha256Hex, Version};

use crate::machine::facts::Written;

/// What the download worker reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Worker {
    /// Nothing under way.
    #[default]
    Idle,
    /// Downloading; `total` is known once release.yaml is read.
    Downloading {
        /// The release.
        version: Version,
        /// Bytes so far.
        done: u64,
        /// Bytes in all.
        total: Option<u64>,
    },
    /// Downloaded and verified, under its final name.
    Verified {
        /// The release.
        version: Version,
        /// Its release.yaml's SHA-256.
        release_sha256: Sha256Hex,
    },
    /// init is writing it into the other slot.
    Writing {
        /// The release.
        version: Version,
    },
    /// The last attempt failed.
    Failed {
        /// The release.
        version: Version,
        /// Why, and what to do.
        message: String,
        /// Whether time fixes it (a network error) or an edit does (a bad
        /// digest, a full disk, a refused write).
        blocked: bool,
    },
}

/// What the pass asks of the worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Intent {
    /// Nothing.
    None,
    /// Download and verify this release.
    Download {
        /// The release.
        version: Version,
    },
    /// Ask init to write this verified release into the other slot.
    Write {
        /// The release.
        version: Version,
        /// Its release.yaml's SHA-256, as verified.
        release_sha256: Sha256Hex,
    },
}

/// The ReleaseCurrent verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseVerdict {
    /// True or False.
    pub status: ConditionStatus,
    /// One of the [`reason`]s.
    pub reason: &'static str,
    /// For a person.
    pub message: String,
    /// The Reboot that boots a written release.
    pub pending: Option<PendingDisruption>,
    /// What the worker should do.
    pub intent: Intent,
    /// Whether to ask init to disarm the release this boot wrote: its
    /// rollout halted, so no boot, not even one after a power cut, may
    /// start it.
    pub disarm: bool,
}

fn verdict(status: ConditionStatus, reason: &'static str, message: String) -> ReleaseVerdict {
    ReleaseVerdict {
        status,
        reason,
        message,
        pending: None,
        intent: Intent::None,
        disarm: false,
    }
}

fn blocked(message: String) -> ReleaseVerdict {
    verdict(ConditionStatus::False, reason::BLOCKED, message)
}

fn downloading(message: String, intent: Intent) -> ReleaseVerdict {
    ReleaseVerdict {
        intent,
        ..verdict(ConditionStatus::False, reason::DOWNLOADING, message)
    }
}

/// Bytes in MiB, for messages.
fn mib(bytes: u64) -> u64 {
    bytes / (1024 * 1024)
}

/// A progress message that changes in 5 % steps, so a download writes
/// the status about twenty times rather than once per read.
pub fn progress(version: &Version, done: u64, total: Option<u64>) -> String {
    match total {
        Some(t) if t > 0 => {
            let pct = done.saturating_mul(100) / t;
            let step = pct - pct % 5;
            format!("downloading {version}: {step}% of {} MiB", mib(t))
        }
        _ => format!("downloading {version}: reading its release.yaml"),
    }
}

/// Whether this boot is on trial: counted by the bootloader and not
/// blessed by init yet.
fn on_trial(record: &BootRecord) -> bool {
    record
        .assessment
        .as_ref()
        .is_some_and(|a| a.counted && !a.blessed)
}

/// Decides ReleaseCurrent. `staged` is the status's last word on what the
/// other slot holds (kept across boots), `written` what this boot wrote.
pub fn decide_release(
    cluster: Option<&Cluster>,
    record: &BootRecord,
    staged: Option<&Version>,
    written: Option<&Written>,
    worker: &Worker,
) -> ReleaseVerdict {
    let Some((cluster, target)) = cluster.and_then(|c| Some((c, c.spec.version.as_ref()?))) else {
        let running = record.version.as_ref().map_or_else(
            || "an unversioned build".to_owned(),
            |v| format!("release {v}"),
        );
        return verdict(
            ConditionStatus::True,
            reason::CONVERGED,
            format!("the Cluster names no target release; this machine runs {running}"),
        );
    };
    let Some(running) = record.version.as_ref() else {
        return blocked(format!(
            "this boot does not know its own release (a development build of init); \
             it cannot tell whether it runs {target}: install a released build"
        ));
    };
    if running == target && on_trial(record) {
        // Not converged yet: a trial that fails falls back, so the
        // machine may still go down for this release, and the turn that
        // rebooted it stays in use (coordination::using_turn).
        let slot = record
            .slot
            .map_or_else(|| "this slot".to_owned(), |s| format!("slot {s}"));
        return verdict(
            ConditionStatus::False,
            reason::ON_TRIAL,
            format!(
                "runs {target} from {slot} on trial: init blesses the boot once k3s is healthy; \
                 until then the reboot turn stays in use, and a trial that fails boots the \
                 other slot again"
            ),
        );
    }
    if running == target {
        return verdict(
            ConditionStatus::True,
            reason::CONVERGED,
            format!("runs {target}, the Cluster's target"),
        );
    }
    let Some(slot) = record.slot else {
        return blocked(format!(
            "this boot came from install media or netboot, with no slot to write {target} into; \
             install the machine (liken stick or liken media) to upgrade it"
        ));
    };
    let Some(entry) = cluster.catalog_entry(target) else {
        return blocked(format!(
            "spec.version {target} is not in the Cluster's spec.releases.catalog; \
             add it with its digest, or set spec.version to a release listed there"
        ));
    };
    let source_empty = cluster
        .spec
        .releases
        .as_ref()
        .is_none_or(|r| r.source.is_empty());
    if source_empty {
        return blocked(format!(
            "the Cluster's spec.releases.source is empty, so there is no channel to download \
             {target} from; set it to the channel's URL"
        ));
    }
    let other = slot.other();
    let fell_back = record.assessment.as_ref().is_some_and(|a| a.other_slot_bad);
    if fell_back && staged == Some(target) {
        return blocked(format!(
            "{target} was written into slot {other} and did not come up healthy: the machine \
             fell back to slot {slot}, which runs {running}; set spec.version to another release \
             (a newer one, or {running} to stay)"
        ));
    }
    // A halted release is neither written nor left armed: a machine that
    // wrote it before the halt takes it out of the bootloaders' reach.
    if cluster.active_halt().is_some() {
        let armed = written.is_some_and(|w| w.version.as_ref() == Some(target));
        let what = if armed {
            format!(
                "{target} was written into slot {other} before the halt; asking init to disarm it, so the next boot is {running} again"
            )
        } else {
            format!("{target} is not written into slot {other} while the halt lasts")
        };
        return ReleaseVerdict {
            disarm: armed,
            ..verdict(
                ConditionStatus::False,
                reason::ROLLOUT_HALTED,
                format!(
                    "the rollout of {target} is halted (it failed on another machine; see the \
                     Cluster's Progressing condition); {what}"
                ),
            )
        };
    }
    if let Some(w) = written.filter(|w| w.version.as_ref() == Some(target)) {
        return ReleaseVerdict {
            pending: Some(PendingDisruption {
                condition: liken_api::coordination::RELEASE_CURRENT.to_owned(),
                kind: DisruptionKind::Reboot,
                hash: w.release_sha256.clone(),
                summary: format!("release {running} → {target}"),
            }),
            ..verdict(
                ConditionStatus::False,
                reason::AWAITING_TURN,
                format!("{target} is written into slot {other}; a reboot boots it"),
            )
        };
    }
    let download = Intent::Download {
        version: target.clone(),
    };
    match worker {
        Worker::Downloading {
            version,
            done,
            total,
        } if version == target => downloading(progress(version, *done, *total), Intent::None),
        Worker::Verified {
            version,
            release_sha256,
        } if version == target => {
            if release_sha256 != entry.digest.hex() {
                return blocked(format!(
                    "the downloaded release.yaml of {target} hashes to {release_sha256}, \
                     not the catalog's {}",
                    entry.digest
                ));
            }
            if on_trial(record) {
                return downloading(
                    format!(
                        "{target} is downloaded and verified; waiting for init to bless this boot \
                         before writing slot {other}, because until then slot {other} is the only \
                         one known to boot"
                    ),
                    Intent::None,
                );
            }
            downloading(
                format!(
                    "{target} is downloaded and verified; asking init to write it into slot {other}"
                ),
                Intent::Write {
                    version: version.clone(),
                    release_sha256: release_sha256.clone(),
                },
            )
        }
        Worker::Writing { version } if version == target => downloading(
            format!("init is writing {target} into slot {other}"),
            Intent::None,
        ),
        Worker::Failed {
            version,
            message,
            blocked: true,
        } if version == target => blocked(message.clone()),
        // The worker waits out its own backoff before it tries again.
        Worker::Failed {
            version,
            message,
            blocked: false,
        } if version == target => downloading(
            format!("downloading {target} failed ({message}); trying again"),
            download,
        ),
        _ => downloading(format!("starting the download of {target}"), download),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::cluster::{CatalogEntry, ReleasesSpec};
    use liken_api::hash::sha256;
    use liken_api::{BootAssessment, ClusterSpec, Digest, Slot, Time};

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn cluster(target: Option<&str>, catalog: &[&str], source: &str) -> Cluster {
        Cluster::new(
            "home",
            ClusterSpec {
                endpoint: "https://10.0.0.10:6443".into(),
                leaders: vec!["a".into()],
                version: target.map(v),
                releases: Some(ReleasesSpec {
                    source: source.into(),
                    catalog: catalog
                        .iter()
                        .map(|c| CatalogEntry {
                            version: v(c),
                            digest: Digest::parse(&format!("sha256:{}", sha256(c.as_bytes())))
                                .unwrap(),
                        })
                        .collect(),
                }),
                ..ClusterSpec::default()
            },
        )
    }

    fn record(
        version: Option<&str>,
        slot: Option<Slot>,
        assessment: Option<BootAssessment>,
    ) -> BootRecord {
        BootRecord {
            time: Time::from_unix(1_780_000_000),
            slot,
            version: version.map(v),
            documents: Default::default(),
            assessment,
            via: None,
            via_reason: None,
            root_verity: None,
        }
    }

    const OLD: &str = "2026.11.01-001";
    const NEW: &str = "2026.12.02-001";

    #[test]
    fn each_way_a_release_can_stand() {
        let good = cluster(Some(NEW), &[OLD, NEW], "https://releases.example/stable");
        let booted = record(Some(OLD), Some(Slot::A), None);
        let blessed = BootAssessment {
            counted: true,
            blessed: true,
            other_slot_bad: false,
        };
        let on_trial = BootAssessment {
            blessed: false,
            ..blessed.clone()
        };
        let fell_back = BootAssessment {
            other_slot_bad: true,
            ..blessed.clone()
        };
        let new_sha = sha256(NEW.as_bytes());
        let written = Written {
            boot: sha256(b"boot"),
            version: Some(v(NEW)),
            release_sha256: new_sha.clone(),
        };
        let verified = Worker::Verified {
            version: v(NEW),
            release_sha256: new_sha.clone(),
        };
        let download = Intent::Download { version: v(NEW) };
        let write = Intent::Write {
            version: v(NEW),
            release_sha256: new_sha.clone(),
        };
        struct Case<'a> {
            cluster: Cluster,
            record: BootRecord,
            staged: Option<Version>,
            written: Option<&'a Written>,
            worker: Worker,
            reason: &'static str,
            says: &'static str,
            intent: Intent,
        }
        let cases = vec![
            Case {
                cluster: cluster(None, &[OLD], ""),
                record: booted.clone(),
                staged: None,
                written: None,
                worker: Worker::Idle,
                reason: reason::CONVERGED,
                says: "names no target",
                intent: Intent::None,
            },
            Case {
                cluster: cluster(Some(OLD), &[OLD], ""),
                record: booted.clone(),
                staged: None,
                written: None,
                worker: Worker::Idle,
                reason: reason::CONVERGED,
                says: "runs 2026.11.01-001",
                intent: Intent::None,
            },
            // Back on the target release, on trial: not converged until
            // init blesses the boot, so the turn stays in use.
            Case {
                cluster: good.clone(),
                record: record(Some(NEW), Some(Slot::B), Some(on_trial.clone())),
                staged: Some(v(NEW)),
                written: None,
                worker: Worker::Idle,
                reason: reason::ON_TRIAL,
                says: "runs 2026.12.02-001 from slot B on trial",
                intent: Intent::None,
            },
            Case {
                cluster: good.clone(),
                record: record(Some(NEW), Some(Slot::B), Some(blessed.clone())),
                staged: Some(v(NEW)),
                written: None,
                worker: Worker::Idle,
                reason: reason::CONVERGED,
                says: "runs 2026.12.02-001, the Cluster's target",
                intent: Intent::None,
            },
            Case {
                cluster: good.clone(),
                record: record(None, Some(Slot::A), None),
                staged: None,
                written: None,
                worker: Worker::Idle,
                reason: reason::BLOCKED,
                says: "does not know its own release",
                intent: Intent::None,
            },
            Case {
                cluster: good.clone(),
                record: record(Some(OLD), None, None),
                staged: None,
                written: None,
                worker: Worker::Idle,
                reason: reason::BLOCKED,
                says: "no slot",
                intent: Intent::None,
            },
            Case {
                cluster: cluster(Some(NEW), &[OLD], "https://r"),
                record: booted.clone(),
                staged: None,
                written: None,
                worker: Worker::Idle,
                reason: reason::BLOCKED,
                says: "not in the Cluster's spec.releases.catalog",
                intent: Intent::None,
            },
            Case {
                cluster: cluster(Some(NEW), &[NEW], ""),
                record: booted.clone(),
                staged: None,
                written: None,
                worker: Worker::Idle,
                reason: reason::BLOCKED,
                says: "spec.releases.source is empty",
                intent: Intent::None,
            },
            Case {
                cluster: good.clone(),
                record: booted.clone(),
                staged: None,
                written: None,
                worker: Worker::Idle,
                reason: reason::DOWNLOADING,
                says: "starting the download",
                intent: download.clone(),
            },
            Case {
                cluster: good.clone(),
                record: booted.clone(),
                staged: None,
                written: None,
                worker: Worker::Downloading {
                    version: v(NEW),
                    done: 512 << 20,
                    total: Some(1000 << 20),
                },
                reason: reason::DOWNLOADING,
                says: "downloading 2026.12.02-001: 50% of 1000 MiB",
                intent: Intent::None,
            },
            Case {
                cluster: good.clone(),
                record: booted.clone(),
                staged: None,
                written: None,
                worker: Worker::Downloading {
                    version: v(OLD),
                    done: 1,
                    total: None,
                },
                reason: reason::DOWNLOADING,
                says: "starting the download",
                intent: download.clone(),
            },
            Case {
                cluster: good.clone(),
                record: record(Some(OLD), Some(Slot::A), Some(on_trial)),
                staged: None,
                written: None,
                worker: verified.clone(),
                reason: reason::DOWNLOADING,
                says: "waiting for init to bless this boot",
                intent: Intent::None,
            },
            Case {
                cluster: good.clone(),
                record: record(Some(OLD), Some(Slot::A), Some(blessed.clone())),
                staged: None,
                written: None,
                worker: verified.clone(),
                reason: reason::DOWNLOADING,
                says: "asking init to write it into slot B",
                intent: write.clone(),
            },
            Case {
                cluster: good.clone(),
                record: booted.clone(),
                staged: None,
                written: None,
                worker: Worker::Verified {
                    version: v(NEW),
                    release_sha256: sha256(b"tampered"),
                },
                reason: reason::BLOCKED,
                says: "not the catalog's sha256:",
                intent: Intent::None,
            },
            Case {
                cluster: good.clone(),
                record: booted.clone(),
                staged: None,
                written: None,
                worker: Worker::Writing { version: v(NEW) },
                reason: reason::DOWNLOADING,
                says: "init is writing",
                intent: Intent::None,
            },
            Case {
                cluster: good.clone(),
                record: booted.clone(),
                staged: None,
                written: None,
                worker: Worker::Failed {
                    version: v(NEW),
                    message: "no space left on device".into(),
                    blocked: true,
                },
                reason: reason::BLOCKED,
                says: "no space left",
                intent: Intent::None,
            },
            Case {
                cluster: good.clone(),
                record: booted.clone(),
                staged: None,
                written: None,
                worker: Worker::Failed {
                    version: v(NEW),
                    message: "connection refused".into(),
                    blocked: false,
                },
                reason: reason::DOWNLOADING,
                says: "failed (connection refused); trying again",
                intent: download.clone(),
            },
            Case {
                cluster: good.clone(),
                record: booted.clone(),
                staged: None,
                written: Some(&written),
                worker: Worker::Idle,
                reason: reason::AWAITING_TURN,
                says: "written into slot B",
                intent: Intent::None,
            },
            Case {
                cluster: good.clone(),
                record: record(Some(OLD), Some(Slot::A), Some(fell_back.clone())),
                staged: Some(v(NEW)),
                written: None,
                worker: Worker::Idle,
                reason: reason::BLOCKED,
                says: "did not come up healthy",
                intent: Intent::None,
            },
            // A fallback from some other release does not block this one.
            Case {
                cluster: good.clone(),
                record: record(Some(OLD), Some(Slot::A), Some(fell_back)),
                staged: Some(v("2026.11.15-001")),
                written: None,
                worker: Worker::Idle,
                reason: reason::DOWNLOADING,
                says: "starting the download",
                intent: download.clone(),
            },
        ];
        for c in cases {
            let got = decide_release(
                Some(&c.cluster),
                &c.record,
                c.staged.as_ref(),
                c.written,
                &c.worker,
            );
            assert_eq!(got.reason, c.reason, "{}: {got:?}", c.says);
            assert!(got.message.contains(c.says), "{}: {}", c.says, got.message);
            assert_eq!(got.intent, c.intent, "{}", c.says);
            assert_eq!(
                got.pending.is_some(),
                c.reason == reason::AWAITING_TURN,
                "{}",
                c.says
            );
        }
        let staged = decide_release(Some(&good), &booted, None, Some(&written), &Worker::Idle);
        let p = staged.pending.unwrap();
        assert_eq!(p.summary, "release 2026.11.01-001 → 2026.12.02-001");
        assert_eq!(p.hash, new_sha);
        assert_eq!(p.kind, DisruptionKind::Reboot);
        assert!(
            decide_release(None, &booted, None, None, &Worker::Idle).status
                == ConditionStatus::True
        );
    }

    #[test]
    fn a_halted_release_is_not_written_and_is_disarmed_where_it_was() {
        let mut halted = cluster(Some(NEW), &[OLD, NEW], "https://releases.example/stable");
        halted.status.rollout_halt = Some(liken_api::cluster::RolloutHalt {
            release: v(NEW),
            machine: "other".into(),
            cause: liken_api::cluster::HaltCause::FellBack,
            since: Time::EPOCH,
            resume: String::new(),
        });
        let booted = record(Some(OLD), Some(Slot::A), None);
        let new_sha = sha256(NEW.as_bytes());
        let written = Written {
            boot: sha256(b"boot"),
            version: Some(v(NEW)),
            release_sha256: new_sha.clone(),
        };
        let verified = Worker::Verified {
            version: v(NEW),
            release_sha256: new_sha.clone(),
        };
        // Verified and ready to write: not written while halted.
        let got = decide_release(Some(&halted), &booted, None, None, &verified);
        assert_eq!(got.reason, reason::ROLLOUT_HALTED);
        assert_eq!(got.intent, Intent::None);
        assert!(!got.disarm && got.pending.is_none());
        // Written before the halt: disarmed, and no reboot asked for it.
        let got = decide_release(Some(&halted), &booted, None, Some(&written), &verified);
        assert!(got.disarm, "{got:?}");
        assert!(got.pending.is_none());
        assert!(got.message.contains("disarm"), "{}", got.message);
        // A new resume value lifts the halt: written again.
        halted
            .metadata
            .annotations
            .insert(liken_api::annotations::RESUME_ROLLOUT.into(), "1".into());
        let got = decide_release(Some(&halted), &booted, None, None, &verified);
        assert!(matches!(got.intent, Intent::Write { .. }), "{got:?}");
    }

    #[test]
    fn progress_moves_in_five_percent_steps() {
        let v = v(NEW);
        assert_eq!(
            progress(&v, 0, Some(200 << 20)),
            "downloading 2026.12.02-001: 0% of 200 MiB"
        );
        assert_eq!(
            progress(&v, 99 << 20, Some(200 << 20)),
            "downloading 2026.12.02-001: 45% of 200 MiB"
        );
        assert_eq!(
            progress(&v, 200 << 20, Some(200 << 20)),
            "downloading 2026.12.02-001: 100% of 200 MiB"
        );
        assert!(progress(&v, 5, None).contains("release.yaml"));
    }
}
