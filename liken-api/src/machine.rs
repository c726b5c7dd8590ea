//! The Machine: one document per computer.
//!
//! The spec is what a person declares about one machine (its network, its
//! kernel settings, what k3s should label it); the status is what the
//! machine operator observes on that machine and nothing else writes,
//! except the Lost verdict (see [`crate::phase`]). Machines are
//! cluster-scoped: a computer belongs to the fleet, not to a namespace.
//!
//! The role is not in the spec. It follows from the Cluster's leader list,
//! so one edit in one place promotes a machine and no Machine can claim a
//! role the Cluster does not give it.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::boot::BootStatus;
use crate::condition::Condition;
use crate::digest::Sha256Hex;
use crate::hash::document_hash;
use crate::maintenance::{self, MaintenanceSpec};
use crate::meta::{API_VERSION, Kind, ObjectMeta, is_dns_subdomain};
use crate::phase::Phase;
use crate::role::Role;
use crate::validate::{Problem, Problems, Validate, parse_cidr, parse_mac};
use crate::version::Version;

/// The Machine kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    /// Always [`API_VERSION`].
    #[serde(default)]
    pub api_version: String,
    /// Always `Machine`.
    #[serde(default)]
    pub kind: String,
    /// Name and server bookkeeping.
    pub metadata: ObjectMeta,
    /// What the person declares.
    #[serde(default)]
    pub spec: MachineSpec,
    /// What the machine operator observes.
    #[cfg(feature = "status")]
    #[serde(default, skip_serializing_if = "MachineStatus::is_empty")]
    pub status: MachineStatus,
}

/// How a machine takes the reboots its changes need.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RebootPolicy {
    /// Ask the cluster for a reboot turn as soon as a change is staged.
    #[default]
    Auto,
    /// Stage the change and wait for `liken approve-reboot`.
    Manual,
}

impl RebootPolicy {
    /// Both policies, in the order the CRD enum lists them.
    pub const ALL: [RebootPolicy; 2] = [RebootPolicy::Auto, RebootPolicy::Manual];

    /// The policy's name as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            RebootPolicy::Auto => "Auto",
            RebootPolicy::Manual => "Manual",
        }
    }
}

/// A Machine's declared state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// The hostname to set; the Machine's name when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Auto or Manual; Auto when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_policy: Option<RebootPolicy>,
    /// Kernel parameters by their dotted name (`net.ipv4.ip_forward`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctls: BTreeMap<String, String>,
    /// Kernel modules to load at boot, after coldplug.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modules: Vec<String>,
    /// Extra kernel command-line arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_args: Vec<String>,
    /// Interfaces, addresses, routes and time servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkSpec>,
    /// The disk install mode writes (`/dev/vda`, `/dev/disk/by-id/...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_disk: Option<String>,
    /// What k3s registers the node with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k3s: Option<K3sSpec>,
    /// This machine's own maintenance windows, which replace the
    /// Cluster's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceSpec>,
    /// How this machine reboots (`kexec` or `firmware`), in place of
    /// the Cluster's `reboot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot: Option<crate::boot::RebootVia>,
}

/// The machine's network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkSpec {
    /// One entry per configured interface.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceSpec>,
    /// NTP servers (names or addresses); the clock is set from the first
    /// that answers at boot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ntp: Vec<String>,
    /// Bonds: one link over several interfaces. An `interfaces` entry
    /// naming the bond gives it addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bonds: Vec<BondSpec>,
    /// VLANs: a tagged link on a parent interface or bond. An
    /// `interfaces` entry naming the VLAN gives it addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vlans: Vec<VlanSpec>,
}

/// A VLAN interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VlanSpec {
    /// The VLAN interface's name (`eth1.42`, `vlan42`).
    pub name: String,
    /// The interface or bond it is tagged on, by name; an
    /// `interfaces` entry or a bond must name it.
    pub parent: String,
    /// The 802.1Q VLAN id, 1 to 4094.
    pub id: u16,
}

/// How a bond uses its members.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BondMode {
    /// One member carries the traffic; another takes over when its link
    /// fails. Needs nothing from the switch.
    #[default]
    #[serde(rename = "active-backup")]
    ActiveBackup,
    /// IEEE 802.3ad link aggregation (LACP): every member carries
    /// traffic. The switch ports must be configured as one LACP group.
    #[serde(rename = "802.3ad")]
    Lacp,
}

impl BondMode {
    /// Both modes, in the order the CRD enum lists them.
    pub const ALL: [BondMode; 2] = [BondMode::ActiveBackup, BondMode::Lacp];

    /// The mode's name as the API (and the kernel's bonding driver)
    /// writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            BondMode::ActiveBackup => "active-backup",
            BondMode::Lacp => "802.3ad",
        }
    }
}

/// The link monitoring interval a bond gets when the spec names none, in
/// milliseconds.
pub const DEFAULT_MIIMON: u32 = 100;

/// A bond interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BondSpec {
    /// The bond's name (`bond0`).
    pub name: String,
    /// The interfaces it bonds, by kernel name. A member carries no
    /// addresses of its own.
    pub members: Vec<String>,
    /// active-backup (the default) or 802.3ad.
    #[serde(default)]
    pub mode: BondMode,
    /// How often the members' links are checked, in milliseconds;
    /// [`DEFAULT_MIIMON`] when absent, 0 turns the check off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub miimon: Option<u32>,
}

impl BondSpec {
    /// The link monitoring interval in milliseconds.
    pub fn miimon(&self) -> u32 {
        self.miimon.unwrap_or(DEFAULT_MIIMON)
    }
}

/// One interface, found by name or by MAC address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceSpec {
    /// The kernel's interface name (`eth0`, `enp1s0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The hardware address; also how init recognises this machine when
    /// the command line names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// Ask DHCP for an address, routes and DNS servers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dhcp: bool,
    /// Static addresses in CIDR form (`192.168.1.10/24`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// Static routes through this interface.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteSpec>,
    /// DNS servers reached through this interface.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<String>,
    /// The link's MTU in bytes; the driver's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// Accept IPv6 router advertisements: a default route from them and
    /// SLAAC addresses for the prefixes they announce. When absent it
    /// follows `dhcp`, so an interface that asks for automatic addresses
    /// gets them in both families.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slaac: Option<bool>,
    /// The metric of this interface's routes, static and leased (lower
    /// is preferred). When absent, [`default_route_metric`] of the
    /// entry's position: 100 for the first entry, 200 for the second,
    /// and so on, so each interface's default route is its own and the
    /// first entry's is used while it lasts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_metric: Option<u32>,
}

/// The metric step between interfaces' default metrics; an explicit
/// `routeMetric` can sit between two entries'.
pub const ROUTE_METRIC_STEP: u32 = 100;

/// The route metric of the entry at `position` (0 for the first) of
/// `spec.network.interfaces` when it names none.
pub fn default_route_metric(position: usize) -> u32 {
    u32::try_from(position)
        .ok()
        .and_then(|p| p.checked_add(1))
        .and_then(|p| p.checked_mul(ROUTE_METRIC_STEP))
        .unwrap_or(u32::MAX)
}

impl InterfaceSpec {
    /// Whether router advertisements (and SLAAC) are accepted.
    pub fn slaac(&self) -> bool {
        self.slaac.unwrap_or(self.dhcp)
    }

    /// The metric of its routes, for the entry at `position`.
    pub fn route_metric(&self, position: usize) -> u32 {
        self.route_metric
            .unwrap_or_else(|| default_route_metric(position))
    }
}

/// A static route.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteSpec {
    /// The destination in CIDR form; `0.0.0.0/0` is the IPv4 default
    /// route, `::/0` the IPv6 one.
    pub to: String,
    /// The gateway address, of the destination's family.
    pub via: String,
}

/// What k3s registers the node with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct K3sSpec {
    /// Node labels (k3s `--node-label`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    /// Node taints as `key[=value]:Effect` (k3s `--node-taint`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_taints: Vec<String>,
}

/// A Machine's observed state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// The one-word summary of the conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The observations the phase is derived from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Leader or follower, from the Cluster's leader list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// The running boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<BootStatus>,
    /// Which releases run, wait in the other slot, and are wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<ReleaseStatus>,
    /// Staged changes and the disruption each needs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingDisruption>,
    /// The metadata.generation this status judged.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl MachineStatus {
    /// Whether nothing has been observed yet.
    pub fn is_empty(&self) -> bool {
        *self == MachineStatus::default()
    }
}

/// The releases a machine knows about.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseStatus {
    /// The release this boot runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<Version>,
    /// The release written into the inactive slot, waiting for a reboot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<Version>,
    /// The release the Cluster asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Version>,
}

/// The disruption that applies a staged change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DisruptionKind {
    /// A reboot: kernel, system image, modules, kernel arguments,
    /// network, sysctls that need it. One reboot applies every staged
    /// change at once.
    Reboot,
    /// A k3s restart: the k3s configuration alone.
    Restart,
}

impl DisruptionKind {
    /// Both kinds, in the order the CRD enum lists them.
    pub const ALL: [DisruptionKind; 2] = [DisruptionKind::Reboot, DisruptionKind::Restart];

    /// The kind's name as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            DisruptionKind::Reboot => "Reboot",
            DisruptionKind::Restart => "Restart",
        }
    }
}

/// One staged change waiting for its disruption.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingDisruption {
    /// The convergence condition this change will satisfy.
    pub condition: String,
    /// Reboot or Restart.
    pub kind: DisruptionKind,
    /// The staged document's canonical hash; an approval names its first
    /// 12 digits.
    pub hash: Sha256Hex,
    /// What changes, for a person.
    pub summary: String,
}

impl Kind for Machine {
    const KIND: &'static str = "Machine";

    fn api_version(&self) -> &str {
        &self.api_version
    }

    fn kind(&self) -> &str {
        &self.kind
    }
}

impl Machine {
    /// A Machine with the given name and spec and no status.
    pub fn new(name: impl Into<String>, spec: MachineSpec) -> Machine {
        Machine {
            api_version: API_VERSION.to_owned(),
            kind: <Machine as Kind>::KIND.to_owned(),
            metadata: ObjectMeta::named(name),
            spec,
            #[cfg(feature = "status")]
            status: MachineStatus::default(),
        }
    }

    /// The hostname to set: the spec's, else the Machine's name.
    pub fn hostname(&self) -> &str {
        self.spec.hostname.as_deref().unwrap_or(&self.metadata.name)
    }

    /// The reboot policy, Auto when the spec names none.
    pub fn reboot_policy(&self) -> RebootPolicy {
        self.spec.reboot_policy.unwrap_or_default()
    }

    /// The document as staged and hashed: name and spec only, so
    /// annotations and status never change its hash.
    pub fn canonical(&self) -> Machine {
        Machine::new(self.metadata.name.clone(), self.spec.clone())
    }

    /// SHA-256 over the canonical form ([`crate::hash`]).
    pub fn canonical_hash(&self) -> Sha256Hex {
        // A Machine is plain data with string keys; serializing it into
        // a JSON value has no failure path.
        document_hash(&self.canonical()).unwrap_or_else(|_| crate::hash::sha256(b""))
    }

    /// Whether any interface lists this MAC address (case-insensitive).
    pub fn has_mac(&self, mac: [u8; 6]) -> bool {
        self.spec
            .network
            .iter()
            .flat_map(|n| &n.interfaces)
            .any(|i| {
                i.mac
                    .as_deref()
                    .and_then(parse_mac)
                    .is_some_and(|m| m == mac)
            })
    }
}

const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

fn valid_taint(taint: &str) -> bool {
    let Some((key_value, effect)) = taint.rsplit_once(':') else {
        return false;
    };
    let key = key_value.split_once('=').map_or(key_value, |(k, _)| k);
    !key.is_empty() && !key.contains(char::is_whitespace) && TAINT_EFFECTS.contains(&effect)
}

fn valid_sysctl_key(key: &str) -> bool {
    !key.is_empty()
        && !key.starts_with(['.', '/'])
        && !key.contains("..")
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b))
}

fn valid_module(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Validate for Machine {
    fn validate(&self) -> Vec<Problem> {
        let mut p = Problems::default();
        if !is_dns_subdomain(&self.metadata.name) {
            p.add(
                "metadata.name",
                format!(
                    "{:?} is not a valid name: use lower-case letters, digits, '-' and '.'",
                    self.metadata.name
                ),
            );
        }
        if let Some(h) = &self.spec.hostname
            && !is_dns_subdomain(h)
        {
            p.add("spec.hostname", format!("{h:?} is not a valid hostname"));
        }
        for key in self.spec.sysctls.keys() {
            if !valid_sysctl_key(key) {
                p.add(
                    format!("spec.sysctls[{key:?}]"),
                    "a sysctl is named by its dotted path, as net.ipv4.ip_forward",
                );
            }
        }
        for (i, m) in self.spec.modules.iter().enumerate() {
            if !valid_module(m) {
                p.add(
                    format!("spec.modules[{i}]"),
                    format!("{m:?} is not a kernel module name"),
                );
            }
        }
        for (i, a) in self.spec.kernel_args.iter().enumerate() {
            let field = format!("spec.kernelArgs[{i}]");
            if a.is_empty() || a.contains(char::is_whitespace) {
                p.add(field, format!("{a:?} must be one argument with no spaces"));
            } else if a.starts_with("liken.") {
                p.add(
                    field,
                    format!("{a:?}: liken.* arguments are set by liken itself"),
                );
            }
        }
        if let Some(disk) = &self.spec.install_disk
            && (!disk.starts_with("/dev/") || disk.contains("/../"))
        {
            p.add(
                "spec.installDisk",
                format!("{disk:?} must be a device path such as /dev/vda or /dev/disk/by-id/..."),
            );
        }
        if let Some(net) = &self.spec.network {
            validate_network(net, &mut p);
        }
        if let Some(k3s) = &self.spec.k3s {
            for (i, t) in k3s.node_taints.iter().enumerate() {
                if !valid_taint(t) {
                    p.add(
                        format!("spec.k3s.nodeTaints[{i}]"),
                        format!(
                            "{t:?} is not key[=value]:Effect with Effect one of {}",
                            TAINT_EFFECTS.join(", ")
                        ),
                    );
                }
            }
            for key in k3s.node_labels.keys() {
                let name = key.rsplit_once('/').map_or(key.as_str(), |(_, n)| n);
                if name.is_empty() || name.len() > 63 || key.contains(char::is_whitespace) {
                    p.add(
                        format!("spec.k3s.nodeLabels[{key:?}]"),
                        "not a valid label key",
                    );
                }
            }
        }
        p.0.extend(maintenance::validate(
            self.spec.maintenance.as_ref(),
            "spec.maintenance",
        ));
        p.0
    }
}

/// A kernel interface name: 1 to 15 bytes, no `/`, whitespace or `:`.
fn valid_link_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name.contains(['/', ':'])
        && !name.contains(char::is_whitespace)
}

fn check_link_name(p: &mut Problems, field: String, name: &str) {
    if !valid_link_name(name) {
        p.add(
            field,
            format!(
                "{name:?} is not an interface name (1 to 15 characters, no '/', ':' or spaces)"
            ),
        );
    }
}

/// The lowest MTU IPv6 works with (RFC 8200).
const IPV6_MIN_MTU: u32 = 1280;
/// The lowest MTU the kernel takes for IPv4.
const MIN_MTU: u32 = 68;

fn validate_network(net: &NetworkSpec, p: &mut Problems) {
    // Lists, not maps: a machine has a handful of links, and init links
    // this code (a map's sorting is kilobytes of its budget).
    let bond_of = |name: &str| {
        net.bonds
            .iter()
            .find(|b| b.members.iter().any(|m| m == name))
            .map(|b| b.name.as_str())
    };
    let is_bond = |name: &str| net.bonds.iter().any(|b| b.name == name);
    let is_vlan = |name: &str| net.vlans.iter().any(|v| v.name == name);
    let links = net
        .bonds
        .iter()
        .map(|b| ("bonds", &b.name))
        .chain(net.vlans.iter().map(|v| ("vlans", &v.name)));
    for (n, (list, name)) in links.clone().enumerate() {
        let i = if list == "bonds" {
            n
        } else {
            n.saturating_sub(net.bonds.len())
        };
        let at = format!("spec.network.{list}[{i}].name");
        check_link_name(p, at.clone(), name);
        if links.clone().take(n).any(|(_, other)| other == name) {
            p.add(
                at,
                format!("{name:?} names another bond or VLAN too; give each link its own name"),
            );
        }
    }
    for (i, bond) in net.bonds.iter().enumerate() {
        let at = format!("spec.network.bonds[{i}]");
        if bond.members.is_empty() {
            p.add(
                format!("{at}.members"),
                "list the interfaces the bond joins (two, for a link that survives a failure)",
            );
        }
        for (j, member) in bond.members.iter().enumerate() {
            let field = format!("{at}.members[{j}]");
            check_link_name(p, field.clone(), member);
            // The first bond that names it, and where in that bond.
            let first = net
                .bonds
                .iter()
                .enumerate()
                .find_map(|(k, b)| Some((k, b.members.iter().position(|m| m == member)?)));
            if first != Some((i, j)) {
                let where_ = match first {
                    Some((k, _)) if k != i => format!(
                        "in bond {:?} too",
                        net.bonds.get(k).map_or("", |b| b.name.as_str())
                    ),
                    _ => "twice in this bond".to_owned(),
                };
                p.add(
                    field,
                    format!("{member:?} is named {where_}; an interface joins one bond, once"),
                );
            } else if is_bond(member) || is_vlan(member) {
                p.add(
                    field,
                    format!("{member:?} is a bond or VLAN; a bond's members are interfaces"),
                );
            }
        }
    }
    for (i, vlan) in net.vlans.iter().enumerate() {
        let at = format!("spec.network.vlans[{i}]");
        if !(1..=4094).contains(&vlan.id) {
            p.add(
                format!("{at}.id"),
                format!("{} is not a VLAN id (1 to 4094)", vlan.id),
            );
        }
        let parent = vlan.parent.as_str();
        let named = net
            .interfaces
            .iter()
            .any(|f| f.name.as_deref() == Some(parent));
        let problem = if let Some(bond) = bond_of(parent) {
            format!("{parent:?} is a member of bond {bond:?}; put the VLAN on the bond")
        } else if is_vlan(parent) {
            format!("{parent:?} is a VLAN; VLANs inside VLANs are not supported")
        } else if !named && !is_bond(parent) {
            format!(
                "{parent:?} is neither an interface named in spec.network.interfaces nor a bond; \
                 add an interface entry with name: {parent} or correct the name"
            )
        } else {
            continue;
        };
        p.add(format!("{at}.parent"), problem);
    }
    for (i, iface) in net.interfaces.iter().enumerate() {
        let at = format!("spec.network.interfaces[{i}]");
        if iface.name.is_none() && iface.mac.is_none() {
            p.add(
                &at,
                "name the interface (name: eth0) or give its mac address",
            );
        }
        if let Some(name) = &iface.name {
            check_link_name(p, format!("{at}.name"), name);
            let first = net
                .interfaces
                .iter()
                .position(|f| f.name.as_ref() == Some(name));
            if let Some(first) = first.filter(|f| *f != i) {
                p.add(
                    format!("{at}.name"),
                    format!("{name:?} is configured by spec.network.interfaces[{first}] already; merge the entries"),
                );
            }
            if let Some(bond) = bond_of(name) {
                p.add(
                    format!("{at}.name"),
                    format!("{name:?} is a member of bond {bond:?}; configure the bond instead"),
                );
            }
        }
        if let Some(mac) = &iface.mac
            && parse_mac(mac).is_none()
        {
            p.add(
                format!("{at}.mac"),
                format!("{mac:?} is not a MAC address such as 52:54:00:12:34:56"),
            );
        }
        let is_parent = iface
            .name
            .as_deref()
            .is_some_and(|n| net.vlans.iter().any(|v| v.parent == n));
        if !iface.dhcp
            && iface.addresses.is_empty()
            && iface.slaac.is_none()
            && iface.mtu.is_none()
            && !is_parent
        {
            p.add(
                &at,
                "give static addresses, set dhcp: true or slaac: true, or an mtu",
            );
        }
        let (mut v4, mut v6) = (iface.dhcp, iface.slaac());
        for (j, a) in iface.addresses.iter().enumerate() {
            match parse_cidr(a) {
                Some((IpAddr::V4(_), _)) => v4 = true,
                Some((IpAddr::V6(_), _)) => v6 = true,
                // Its family is unknown: no second problem about routes
                // from the first.
                None => {
                    (v4, v6) = (true, true);
                    p.add(
                    format!("{at}.addresses[{j}]"),
                    format!(
                        "{a:?} is not an address with a prefix length, such as 192.168.1.10/24 or fd00::10/64"
                    ),
                    );
                }
            }
        }
        for (j, r) in iface.routes.iter().enumerate() {
            let to = parse_cidr(&r.to);
            let via = r.via.parse::<IpAddr>().ok();
            if to.is_none() {
                p.add(
                    format!("{at}.routes[{j}].to"),
                    format!("{:?} is not a destination such as 0.0.0.0/0 or ::/0", r.to),
                );
            }
            if via.is_none() {
                p.add(
                    format!("{at}.routes[{j}].via"),
                    format!("{:?} is not a gateway address", r.via),
                );
            }
            let (Some((dst, _)), Some(gw)) = (to, via) else {
                continue;
            };
            if dst.is_ipv4() != gw.is_ipv4() {
                p.add(
                    format!("{at}.routes[{j}].via"),
                    format!(
                        "the gateway {gw} is not of the destination {}'s family",
                        r.to
                    ),
                );
            } else if gw.is_ipv6() && !v6 {
                p.add(
                    format!("{at}.routes[{j}]"),
                    "an IPv6 route needs an IPv6 address on this interface: \
                     add one to addresses or set slaac: true",
                );
            } else if gw.is_ipv4() && !v4 {
                p.add(
                    format!("{at}.routes[{j}]"),
                    "an IPv4 route needs an IPv4 address on this interface: \
                     add one to addresses or set dhcp: true",
                );
            }
        }
        for (j, d) in iface.dns.iter().enumerate() {
            if d.parse::<IpAddr>().is_err() {
                p.add(
                    format!("{at}.dns[{j}]"),
                    format!("{d:?} is not a DNS server address"),
                );
            }
        }
        if iface.route_metric == Some(0) {
            p.add(
                format!("{at}.routeMetric"),
                "0 is not a metric the kernel keeps for IPv6 routes (it makes it 1024); \
                 give 1 or more, or leave it out for the default",
            );
        }
        if let Some(mtu) = iface.mtu {
            let min = if v6 { IPV6_MIN_MTU } else { MIN_MTU };
            if !(min..=65535).contains(&mtu) {
                p.add(
                    format!("{at}.mtu"),
                    format!(
                        "{mtu} is not an MTU this interface can use ({min} to 65535{})",
                        if v6 { ", as it carries IPv6" } else { "" }
                    ),
                );
            }
        }
    }
    for (i, server) in net.ntp.iter().enumerate() {
        if server.parse::<IpAddr>().is_err() && !is_dns_subdomain(server) {
            p.add(
                format!("spec.network.ntp[{i}]"),
                format!("{server:?} is neither an address nor a host name"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dhcp_machine() -> Machine {
        Machine::new(
            "node-1",
            MachineSpec {
                network: Some(NetworkSpec {
                    interfaces: vec![InterfaceSpec {
                        name: Some("eth0".into()),
                        mac: Some("52:54:00:12:34:56".into()),
                        dhcp: true,
                        ..InterfaceSpec::default()
                    }],
                    ..NetworkSpec::default()
                }),
                ..MachineSpec::default()
            },
        )
    }

    #[test]
    fn defaults() {
        let m = dhcp_machine();
        assert_eq!(m.hostname(), "node-1");
        assert_eq!(m.reboot_policy(), RebootPolicy::Auto);
        assert!(m.validate().is_empty(), "{:?}", m.validate());
        assert!(m.has_mac([0x52, 0x54, 0, 0x12, 0x34, 0x56]));
        assert!(!m.has_mac([0x52, 0x54, 0, 0x12, 0x34, 0x57]));
    }

    #[test]
    #[cfg(feature = "status")]
    fn canonical_hash_ignores_annotations_and_status() {
        let a = dhcp_machine();
        let mut b = a.clone();
        b.metadata
            .annotations
            .insert("liken.sh/request-reboot".into(), "abc".into());
        b.metadata.resource_version = "42".into();
        b.status.phase = Some(Phase::Ready);
        assert_eq!(a.canonical_hash(), b.canonical_hash());
        b.spec.sysctls.insert("vm.swappiness".into(), "10".into());
        assert_ne!(a.canonical_hash(), b.canonical_hash());
    }

    #[test]
    fn route_metrics_default_per_entry_and_refuse_zero() {
        let mut m = dhcp_machine();
        let net = m.spec.network.as_mut().unwrap();
        net.interfaces.push(InterfaceSpec {
            name: Some("eth1".into()),
            dhcp: true,
            ..InterfaceSpec::default()
        });
        let metrics: Vec<u32> = net
            .interfaces
            .iter()
            .enumerate()
            .map(|(i, f)| f.route_metric(i))
            .collect();
        assert_eq!(metrics, [100, 200]);
        assert_eq!(default_route_metric(usize::MAX), u32::MAX);
        net.interfaces[1].route_metric = Some(50);
        assert_eq!(net.interfaces[1].route_metric(1), 50);
        assert!(m.validate().is_empty(), "{:?}", m.validate());
        m.spec.network.as_mut().unwrap().interfaces[1].route_metric = Some(0);
        let fields: Vec<String> = m.validate().into_iter().map(|p| p.field).collect();
        assert_eq!(fields, ["spec.network.interfaces[1].routeMetric"]);
    }

    #[test]
    fn validation_names_each_field() {
        let mut m = dhcp_machine();
        m.metadata.name = "Node_1".into();
        let net = m.spec.network.as_mut().unwrap();
        net.interfaces.push(InterfaceSpec {
            addresses: vec!["10.0.0.5".into()],
            routes: vec![RouteSpec {
                to: "default".into(),
                via: "10.0.0.1".into(),
            }],
            dns: vec!["dns.example".into()],
            ..InterfaceSpec::default()
        });
        m.spec.kernel_args = vec!["quiet".into(), "liken.machine=x".into(), "a b".into()];
        m.spec.modules = vec!["br_netfilter".into(), "../x".into()];
        m.spec.sysctls.insert("net/../x".into(), "1".into());
        m.spec.k3s = Some(K3sSpec {
            node_labels: BTreeMap::new(),
            node_taints: vec!["gpu=true:NoSchedule".into(), "gpu:Sometimes".into()],
        });
        m.spec.install_disk = Some("vda".into());
        let fields: Vec<String> = m.validate().into_iter().map(|p| p.field).collect();
        assert_eq!(
            fields,
            [
                "metadata.name",
                "spec.sysctls[\"net/../x\"]",
                "spec.modules[1]",
                "spec.kernelArgs[1]",
                "spec.kernelArgs[2]",
                "spec.installDisk",
                "spec.network.interfaces[1]",
                "spec.network.interfaces[1].addresses[0]",
                "spec.network.interfaces[1].routes[0].to",
                "spec.network.interfaces[1].dns[0]",
                "spec.k3s.nodeTaints[1]",
            ]
        );
    }
}
