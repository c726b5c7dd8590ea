//! Annotation names: the one-shot requests a person or tool makes of an
//! operator.
//!
//! A spec says what should hold; a request ("reboot this boot", "poll the
//! channel now") asks for one action. Kubernetes carries such requests in
//! annotations (kubectl's restartedAt is the same idea), and liken
//! follows. Each request names the thing it is about, which makes it
//! one-shot without any cleanup: a grant that names a staged document's
//! hash means nothing once that document has been applied, and a reboot
//! request that names a boot means nothing once that boot is over.

/// Approves the Manual disruption of one staged change: the value is the
/// first 12 hex digits of the staged document's hash (status.pending[].hash).
pub const APPROVE_DISRUPTION: &str = "liken.sh/approve-disruption";

/// Asks for a reboot with nothing staged: the value is the first 12 hex
/// digits of the running boot's id ([`crate::boot::BootStatus::boot_id`]).
pub const REQUEST_REBOOT: &str = "liken.sh/request-reboot";

/// On the Cluster: any new value makes the cluster operator poll the
/// release channel now instead of at its next interval.
pub const CHECK_RELEASES: &str = "liken.sh/check-releases";

/// On the Cluster: lifts a halted rollout. While a release is halted
/// (Progressing=False, reason ReleaseFailed, `status.rolloutHalt`), any
/// value different from the one the annotation had when the halt began
/// lets the cluster operator grant turns for that release again, for
/// example `kubectl annotate cluster home liken.sh/resume-rollout="$(date +%s)" --overwrite`.
/// Changing the Cluster's `spec.version` also lifts the halt.
pub const RESUME_ROLLOUT: &str = "liken.sh/resume-rollout";

/// On a workload: the feature (a key of the Cluster's spec.features) it
/// belongs to, so the feature janitor can remove it when the feature is
/// no longer declared.
pub const FEATURE: &str = "liken.sh/feature";

/// Length of the short hex form the request annotations carry.
pub const SHORT_HEX_LEN: usize = 12;

/// A label (not an annotation: the CLI selects by it) on the Deployment,
/// DaemonSet or StatefulSet of an operator that ships a workstation CLI;
/// its value is the CLI's domain, so `liken plugins sync` installs
/// `kubectl-liken-<domain>` from the image beside the operator's
/// (`<repository>-cli`, same tag).
pub const PLUGIN_LABEL: &str = "cli.liken.sh/plugin";
