//! What the machine operators and the cluster operator say to each other.
//!
//! The two programs never call each other. They meet in three places,
//! and every name they meet by is declared here, once, so neither side
//! can spell it differently:
//!
//! - **A Machine's conditions.** Each machine's operator writes one
//!   convergence condition per kind of change ([`CONVERGENCE`]) and the
//!   [`READY`] roll-up. The reason says where the change stands
//!   ([`reason`]): a machine that wants a reboot turn says
//!   [`reason::AWAITING_TURN`] on the condition that needs it; one that
//!   waits for a person says [`reason::REBOOT_PENDING`] or
//!   [`reason::RESTART_PENDING`]; one that is using a turn says
//!   [`reason::DRAINING`], [`reason::DRAIN_BLOCKED`],
//!   [`reason::REBOOTING`] or [`reason::RESTARTING`], and, once it has
//!   rebooted into the target release, [`reason::ON_TRIAL`] until init
//!   blesses that boot: the turn ends when the machine is known to stay
//!   up, not when it first comes back.
//! - **The grant.** The cluster operator gives a machine its turn by
//!   setting [`REBOOT_APPROVED`] (True, [`GRANT_REASON`]) on that
//!   Machine's status, after it has stored the turn in the Cluster's
//!   ledger, and takes the turn back by removing the condition (a grant
//!   is never set False). It is the one condition type on a Machine that
//!   the machine's own operator does not write: its status writes carry
//!   the condition along unchanged ([`carry_foreign`]), and it acts on it
//!   only while it wants a turn ([`wants_turn`]). The cluster operator
//!   reclaims a grant once the machine neither wants a turn nor is using
//!   one ([`using_turn`]) and has written its status since the grant.
//! - **What a grant is for.** A grant names its purpose
//!   ([`TurnPurpose`]): the boot it was issued in, the release the
//!   machine's reboot would boot, and the staged changes it applies. The
//!   cluster operator records the purpose in its ledger entry and at the
//!   end of the grant's message; the machine's operator cordons, drains
//!   and asks init only while the grant it holds names exactly what it is
//!   about to apply ([`grant_for`]). A grant for a sysctl change therefore
//!   never boots a release written after it, and a grant from an earlier
//!   boot never reboots this one.
//! - **The heartbeat.** Each machine's operator renews the Lease
//!   [`HEARTBEAT_NAMESPACE`]/`<machine>` every [`HEARTBEAT_RENEW_SECS`],
//!   owned by its Machine and labelled [`HEARTBEAT_LABEL`]; the cluster
//!   operator judges a Lease stale [`HEARTBEAT_STALE_SECS`] after it last
//!   saw the renewTime change, on its own clock.
//!
//! A restart-class change (the k3s configuration alone) takes a turn the
//! same way a reboot does, because it drains the node first.

use crate::Version;
use crate::condition::{Condition, ConditionStatus, find};

/// The roll-up: True when every convergence condition holds.
pub const READY: &str = "Ready";
/// The reason of [`READY`] (Unknown) in the Lost verdict the cluster
/// operator writes onto a machine whose heartbeat went stale.
pub const HEARTBEAT_STALE: &str = "HeartbeatStale";
/// The machine's sysctls are the spec's and hold in the kernel.
pub const SYSCTLS_APPLIED: &str = "SysctlsApplied";
/// The spec's kernel modules are loaded.
pub const MODULES_LOADED: &str = "ModulesLoaded";
/// The spec's extra kernel arguments are on the running command line.
pub const KERNEL_ARGS_APPLIED: &str = "KernelArgsApplied";
/// Links, addresses, routes, VLANs, bonds and MTUs are the spec's.
pub const NETWORK_CONFIGURED: &str = "NetworkConfigured";
/// k3s runs with the spec's node labels and taints and the Cluster's
/// endpoint, leaders and features.
pub const K3S_CONFIGURED: &str = "K3sConfigured";
/// The machine runs the Cluster's target release.
pub const RELEASE_CURRENT: &str = "ReleaseCurrent";
/// No reboot requested through `liken.sh/request-reboot` is
/// outstanding.
pub const REBOOT_REQUEST_HONORED: &str = "RebootRequestHonored";

/// The convergence conditions, in the order a status lists them.
pub const CONVERGENCE: [&str; 7] = [
    SYSCTLS_APPLIED,
    MODULES_LOADED,
    KERNEL_ARGS_APPLIED,
    NETWORK_CONFIGURED,
    K3S_CONFIGURED,
    RELEASE_CURRENT,
    REBOOT_REQUEST_HONORED,
];

/// The grant of a reboot turn, written onto a Machine by the cluster
/// operator alone.
pub const REBOOT_APPROVED: &str = "RebootApproved";
/// The reason of every grant.
pub const GRANT_REASON: &str = "DisruptionBudgetAllows";

/// The reasons convergence conditions carry, and what each means for the
/// phase (see the machine operator's phase table).
pub mod reason {
    /// True: the spec holds.
    pub const CONVERGED: &str = "Converged";
    /// A reboot-class change is staged and waits for a person
    /// (`rebootPolicy: Manual`, no approval yet).
    pub const REBOOT_PENDING: &str = "RebootPending";
    /// A restart-class change is staged and waits for a person.
    pub const RESTART_PENDING: &str = "RestartPending";
    /// A change is staged (and approved, on Manual) and the machine asks
    /// the cluster for a turn.
    pub const AWAITING_TURN: &str = "AwaitingTurn";
    /// The turn is granted: the node is cordoned and its pods are being
    /// evicted.
    pub const DRAINING: &str = "Draining";
    /// The drain ran past its timeout; the message names the pod and the
    /// PodDisruptionBudget that hold it. The machine keeps its turn and
    /// keeps asking.
    pub const DRAIN_BLOCKED: &str = "DrainBlocked";
    /// init was asked to reboot.
    pub const REBOOTING: &str = "Rebooting";
    /// init was asked to restart k3s.
    pub const RESTARTING: &str = "Restarting";
    /// The target release is downloading (or waits to be written).
    pub const DOWNLOADING: &str = "Downloading";
    /// The change cannot be staged or applied; the message says what to
    /// edit. Time does not fix it.
    pub const BLOCKED: &str = "Blocked";
    /// The running documents match the spec but the kernel or the Node
    /// does not (a sysctl init could not write, a module that did not
    /// load).
    pub const NOT_APPLIED: &str = "NotApplied";
    /// The operator cannot read what it judges by (init does not answer,
    /// the boot record is malformed).
    pub const FACTS_UNREADABLE: &str = "FactsUnreadable";
    /// init has not published this boot's record yet.
    pub const BOOTING: &str = "Booting";
    /// The machine booted the target release and init has not blessed
    /// the boot yet (k3s has not proven healthy on it). A trial that
    /// fails reboots into the other slot, so the machine is still in
    /// the middle of its turn: a grant it holds is not spent until the
    /// blessing.
    pub const ON_TRIAL: &str = "OnTrial";
    /// The target release's rollout is halted (the Cluster's
    /// `status.rolloutHalt`): it is not written into the inactive slot,
    /// and a copy written before the halt is disarmed.
    pub const ROLLOUT_HALTED: &str = "RolloutHalted";
}

/// The namespace of the heartbeat Leases (and of the operators).
pub const HEARTBEAT_NAMESPACE: &str = "liken-system";
/// The ConfigMap in [`HEARTBEAT_NAMESPACE`] that a leader's init seeds
/// from its layer: the deployment's `cluster.yaml` and, when the layer
/// carries one, its `trust.yaml`.
pub const DEPLOYMENT_CONFIG_MAP: &str = "liken-cluster";
/// How often a machine's operator renews its heartbeat Lease.
pub const HEARTBEAT_RENEW_SECS: u64 = 10;
/// How long after a renewTime last changed the cluster operator judges a
/// heartbeat stale.
pub const HEARTBEAT_STALE_SECS: u64 = 40;
/// The label every heartbeat Lease carries (value `"true"`), so the
/// cluster operator can watch heartbeats apart from its election Lease.
pub const HEARTBEAT_LABEL: &str = "liken.sh/heartbeat";

/// The machine operator's DaemonSet and ServiceAccount, in
/// [`HEARTBEAT_NAMESPACE`].
pub const MACHINE_OPERATOR: &str = "liken-machine-operator";
/// The cluster operator's Deployment, ServiceAccount and election Lease.
pub const CLUSTER_OPERATOR: &str = "liken-cluster-operator";
/// The label on the machine operator's pod template naming the release
/// the template comes from, which the cluster operator compares with the
/// fleet's target.
pub const VERSION_LABEL: &str = "liken.sh/version";

/// Whether any convergence condition asks the cluster for a turn.
pub fn wants_turn(conditions: &[Condition]) -> bool {
    conditions
        .iter()
        .any(|c| c.status != ConditionStatus::True && c.reason == reason::AWAITING_TURN)
}

/// Whether any convergence condition waits for a person's approval.
pub fn awaits_approval(conditions: &[Condition]) -> bool {
    conditions.iter().any(|c| {
        c.status != ConditionStatus::True
            && (c.reason == reason::REBOOT_PENDING || c.reason == reason::RESTART_PENDING)
    })
}

/// Whether the machine is in the middle of its turn (draining, init was
/// asked to reboot or restart k3s, or the release it rebooted into is
/// still on trial): a grant it holds is not spent.
pub fn using_turn(conditions: &[Condition]) -> bool {
    conditions.iter().any(|c| {
        c.status != ConditionStatus::True
            && matches!(
                c.reason.as_str(),
                reason::DRAINING
                    | reason::DRAIN_BLOCKED
                    | reason::REBOOTING
                    | reason::RESTARTING
                    | reason::ON_TRIAL
            )
    })
}

/// Whether the cluster operator has granted a turn.
pub fn holds_grant(conditions: &[Condition]) -> bool {
    find(conditions, REBOOT_APPROVED).is_some_and(Condition::is_true)
}

/// What a grant lets a machine apply: the first 12 hex digits of the boot
/// id it was issued in, the release its reboot boots (the staged one,
/// when it differs from the running one), and the first 12 hex digits of
/// each staged change's hash (`status.pending`), sorted, without repeats.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TurnPurpose {
    /// The boot the grant was issued in.
    pub boot: String,
    /// The release the turn boots, if any.
    pub release: Option<Version>,
    /// The staged changes the turn applies.
    pub changes: Vec<String>,
}

/// Where a grant's message starts naming its purpose.
const PURPOSE_MARK: &str = "; applies: ";

impl TurnPurpose {
    /// A purpose from its parts; the change hashes are shortened, sorted
    /// and deduplicated, so both operators compare the same form.
    pub fn new<'a>(
        boot: &str,
        release: Option<Version>,
        changes: impl IntoIterator<Item = &'a str>,
    ) -> TurnPurpose {
        let short = |h: &str| h.get(..12).unwrap_or(h).to_owned();
        let mut changes: Vec<String> = changes.into_iter().map(short).collect();
        changes.sort_unstable();
        changes.dedup();
        TurnPurpose {
            boot: short(boot),
            release,
            changes,
        }
    }

    /// The purpose as the grant's message ends with it: `boot=<12 hex>
    /// release=<version or -> changes=<12 hex>,... (or -)`.
    pub fn describe(&self) -> String {
        let or_dash = |s: String| if s.is_empty() { "-".to_owned() } else { s };
        format!(
            "boot={} release={} changes={}",
            or_dash(self.boot.clone()),
            or_dash(
                self.release
                    .as_ref()
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            ),
            or_dash(self.changes.join(","))
        )
    }

    /// Reads [`TurnPurpose::describe`]'s form back; `None` for anything
    /// else (a grant written by an older cluster operator names no
    /// purpose, and allows nothing).
    pub fn parse(text: &str) -> Option<TurnPurpose> {
        let mut parts = text.split(' ');
        let mut field = |key: &str| {
            let v = parts.next()?.strip_prefix(key)?.strip_prefix('=')?;
            Some((v != "-").then(|| v.to_owned()))
        };
        let boot = field("boot")??;
        let release = match field("release")? {
            Some(v) => Some(Version::parse(&v).ok()?),
            None => None,
        };
        let changes = field("changes")?
            .map(|c| c.split(',').map(str::to_owned).collect())
            .unwrap_or_default();
        if parts.next().is_some() {
            return None;
        }
        Some(TurnPurpose {
            boot,
            release,
            changes,
        })
    }

    /// Whether this purpose lets a machine apply nothing beyond `wanted`:
    /// the same boot, the same release (or none), the same changes.
    pub fn allows(&self, wanted: &TurnPurpose) -> bool {
        self == wanted
    }
}

/// The message of a grant: why it was given, then its purpose.
pub fn grant_message(why: &str, purpose: &TurnPurpose) -> String {
    format!("{why}{PURPOSE_MARK}{}", purpose.describe())
}

/// What the grant a machine holds is for: `None` when it holds none, or
/// holds one that names no readable purpose.
pub fn grant_purpose(conditions: &[Condition]) -> Option<TurnPurpose> {
    let grant = find(conditions, REBOOT_APPROVED).filter(|c| c.is_true())?;
    let (_, tail) = grant.message.rsplit_once(PURPOSE_MARK)?;
    TurnPurpose::parse(tail)
}

/// The grant a machine holds, judged against what it is about to apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrantFor {
    /// No grant.
    None,
    /// A grant for exactly what the machine is about to apply.
    This,
    /// A grant for something else (another boot, another release, other
    /// changes), or one naming no purpose: it allows nothing.
    Other(Option<TurnPurpose>),
}

/// Judges the grant in `conditions` against `wanted`.
pub fn grant_for(conditions: &[Condition], wanted: &TurnPurpose) -> GrantFor {
    if !holds_grant(conditions) {
        return GrantFor::None;
    }
    match grant_purpose(conditions) {
        Some(p) if p.allows(wanted) => GrantFor::This,
        other => GrantFor::Other(other),
    }
}

/// Whether a condition type is one the machine's own operator writes.
pub fn machine_owned(type_: &str) -> bool {
    type_ == READY || CONVERGENCE.contains(&type_)
}

/// The conditions of `stored` that the machine's operator does not write
/// (the grant, and any type a newer program added), to be carried along
/// unchanged in the next status it writes.
pub fn carry_foreign(stored: &[Condition]) -> impl Iterator<Item = &Condition> {
    stored.iter().filter(|c| !machine_owned(&c.type_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::condition::ConditionStatus::{False, True};

    fn c(type_: &str, status: ConditionStatus, reason: &str) -> Condition {
        Condition::new(type_, status, reason, "")
    }

    #[test]
    fn each_question_reads_the_reasons() {
        let asking = [
            c(SYSCTLS_APPLIED, True, reason::CONVERGED),
            c(NETWORK_CONFIGURED, False, reason::AWAITING_TURN),
        ];
        assert!(wants_turn(&asking));
        assert!(!awaits_approval(&asking));
        assert!(!using_turn(&asking));
        assert!(!holds_grant(&asking));

        let waiting = [c(K3S_CONFIGURED, False, reason::RESTART_PENDING)];
        assert!(awaits_approval(&waiting));
        assert!(!wants_turn(&waiting));

        for r in [
            reason::DRAINING,
            reason::DRAIN_BLOCKED,
            reason::REBOOTING,
            reason::RESTARTING,
            reason::ON_TRIAL,
        ] {
            let mid = [
                c(REBOOT_APPROVED, True, GRANT_REASON),
                c(RELEASE_CURRENT, False, r),
            ];
            assert!(using_turn(&mid), "{r}");
            assert!(holds_grant(&mid), "{r}");
            assert!(!wants_turn(&mid), "{r}");
        }
    }

    #[test]
    fn a_grant_allows_exactly_the_purpose_it_names() {
        let v = |s: &str| Version::parse(s).unwrap();
        let sysctl = TurnPurpose::new(
            "0123456789abcdef",
            None,
            ["bbbbbbbbbbbbffff", "aaaaaaaaaaaa"],
        );
        assert_eq!(sysctl.boot, "0123456789ab");
        assert_eq!(sysctl.changes, ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]);
        let with_release = TurnPurpose {
            release: Some(v("2026.12.01-001")),
            ..sysctl.clone()
        };
        let grant = |p: &TurnPurpose| {
            vec![Condition::new(
                REBOOT_APPROVED,
                ConditionStatus::True,
                GRANT_REASON,
                grant_message("granted (maxUnavailable 1)", p),
            )]
        };
        for p in [
            &sysctl,
            &with_release,
            &TurnPurpose::new("0123456789ab", None, []),
        ] {
            assert_eq!(TurnPurpose::parse(&p.describe()).as_ref(), Some(p), "{p:?}");
            assert_eq!(grant_for(&grant(p), p), GrantFor::This, "{p:?}");
        }
        // A grant for a sysctl change never boots a release written since.
        assert_eq!(
            grant_for(&grant(&sysctl), &with_release),
            GrantFor::Other(Some(sysctl.clone()))
        );
        // Another boot, another change, no grant, a grant naming nothing.
        let next_boot = TurnPurpose {
            boot: "ffffffffffff".into(),
            ..sysctl.clone()
        };
        assert!(matches!(
            grant_for(&grant(&sysctl), &next_boot),
            GrantFor::Other(_)
        ));
        let more = TurnPurpose::new("0123456789ab", None, ["aaaaaaaaaaaa", "cccccccccccc"]);
        assert!(matches!(
            grant_for(&grant(&sysctl), &more),
            GrantFor::Other(_)
        ));
        assert_eq!(grant_for(&[], &sysctl), GrantFor::None);
        let old = [c(REBOOT_APPROVED, ConditionStatus::True, GRANT_REASON)];
        assert_eq!(grant_for(&old, &sysctl), GrantFor::Other(None));
        for bad in [
            "",
            "boot=x",
            "boot=x release=- changes=- extra",
            "release=- boot=x changes=-",
        ] {
            assert_eq!(TurnPurpose::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_true_condition_asks_for_nothing_whatever_its_reason() {
        let odd = [c(SYSCTLS_APPLIED, True, reason::AWAITING_TURN)];
        assert!(!wants_turn(&odd));
        let odd = [c(SYSCTLS_APPLIED, True, reason::REBOOTING)];
        assert!(!using_turn(&odd));
    }

    #[test]
    fn the_grant_and_unknown_types_are_carried_the_rest_rewritten() {
        let stored = [
            c(READY, True, reason::CONVERGED),
            c(REBOOT_APPROVED, True, GRANT_REASON),
            c(SYSCTLS_APPLIED, True, reason::CONVERGED),
            c("SomethingNewer", False, "Why"),
        ];
        let carried: Vec<&str> = carry_foreign(&stored).map(|c| c.type_.as_str()).collect();
        assert_eq!(carried, [REBOOT_APPROVED, "SomethingNewer"]);
        for t in CONVERGENCE {
            assert!(machine_owned(t), "{t}");
        }
        assert!(!machine_owned(REBOOT_APPROVED));
    }
}
