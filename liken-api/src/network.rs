//! The running network, as init publishes it beside the boot record
//! (`/run/liken/facts/network.json`, [`crate::ondisk::NETWORK_FACTS`]) for the
//! machine operator.
//!
//! The Machine's spec says what the network should be; these facts say
//! what the kernel has now: every link with its kind, MTU, state,
//! addresses and bond or VLAN details, the main routing table, the
//! nameservers in resolv.conf, the DHCP leases init holds, the address
//! changes those leases made during this boot, and whatever init could
//! not apply. The operator's NetworkConfigured condition compares the
//! two.
//!
//! Why a file of its own rather than a field of [`crate::BootRecord`]:
//! the boot record is written once a boot (and again when it is
//! blessed), while the network changes under a running machine (a lease
//! renews or moves, a bond member fails, SLAAC adds an address), and
//! init rewrites these facts each time from its network thread, apart
//! from the writers of the boot record.
//!
//! Addresses are written in CIDR form (`10.0.2.15/24`, `fd00::5/64`),
//! as the spec writes them, so the operator compares strings.

use serde::{Deserialize, Serialize};

use crate::time::Time;

/// How many address changes the facts keep (the most recent).
pub const MAX_CHANGES: usize = 16;

/// What init publishes about the running network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkFacts {
    /// When init read the kernel's state for these facts.
    pub time: Time,
    /// Every link the kernel has, loopback included, by index.
    #[serde(default)]
    pub links: Vec<LinkFacts>,
    /// The main routing table's unicast routes, both families (the
    /// kernel's own IPv6 link-local routes left out).
    #[serde(default)]
    pub routes: Vec<RouteFacts>,
    /// The nameservers resolv.conf lists, in order.
    #[serde(default)]
    pub dns: Vec<String>,
    /// One entry per interface that asks for DHCP, bound or not.
    #[serde(default)]
    pub leases: Vec<LeaseFacts>,
    /// Addresses a lease added, replaced or removed during this boot,
    /// oldest first, at most [`MAX_CHANGES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<AddressChange>,
    /// What init could not apply (a link the kernel refused to create,
    /// an MTU it refused, an interface that is missing), each a sentence
    /// saying what to do.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// What kind of link the kernel says a link is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LinkKind {
    /// A network card, or any link whose driver names no kind.
    #[default]
    Device,
    /// The loopback.
    Loopback,
    /// An 802.1Q VLAN.
    Vlan,
    /// A bond.
    Bond,
    /// A kind liken does not create (bridge, veth, wireguard...), made
    /// by something else on the machine (k3s's CNI).
    Other,
}

/// One link.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkFacts {
    /// The kernel's name (`eth0`, `bond0`, `vlan42`).
    pub name: String,
    /// What it is.
    #[serde(default)]
    pub kind: LinkKind,
    /// Its hardware address, lower-case, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// Its MTU in bytes.
    pub mtu: u32,
    /// Administratively up (IFF_UP).
    pub up: bool,
    /// Carrier: the link layer works (IFF_LOWER_UP).
    pub carrier: bool,
    /// The bond this link is a member of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
    /// A VLAN's parent link and id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan: Option<VlanFacts>,
    /// A bond's mode, monitoring interval and active member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bond: Option<BondFacts>,
    /// Its addresses, both families, in the kernel's order.
    #[serde(default)]
    pub addresses: Vec<AddressFacts>,
}

/// A VLAN's tagging.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VlanFacts {
    /// The link it is tagged on.
    pub parent: String,
    /// The VLAN id.
    pub id: u16,
}

/// A bond's settings as the kernel has them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BondFacts {
    /// The mode as the bonding driver names it (`active-backup`,
    /// `802.3ad`, or another the spec cannot ask for).
    pub mode: String,
    /// The link monitoring interval, milliseconds.
    pub miimon: u32,
    /// The member carrying the traffic (active-backup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<String>,
}

/// Where an address came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AddressOrigin {
    /// Permanent: the spec's static addresses (or anything else added
    /// without a lifetime).
    #[default]
    Static,
    /// A DHCP lease init holds.
    Dhcp,
    /// IPv6 stateless autoconfiguration from a router advertisement.
    Slaac,
    /// A link-local address the kernel made.
    LinkLocal,
}

/// One address on a link.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressFacts {
    /// The address with its prefix length.
    pub address: String,
    /// Where it came from.
    #[serde(default)]
    pub origin: AddressOrigin,
    /// IPv6 duplicate address detection has not finished: the address
    /// cannot be used yet.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tentative: bool,
}

/// Where a route came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RouteOrigin {
    /// The spec's static routes (init adds them as "boot" routes).
    #[default]
    Static,
    /// A DHCP lease's default route.
    Dhcp,
    /// A router advertisement.
    Ra,
    /// The kernel's own: a subnet on a link with an address in it.
    Kernel,
    /// Something else on the machine added it (k3s's CNI).
    Other,
}

/// One route of the main table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteFacts {
    /// The destination in CIDR form (`0.0.0.0/0`, `::/0` for default).
    pub to: String,
    /// The gateway, when the route has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// The link it leaves by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// Where it came from.
    #[serde(default)]
    pub origin: RouteOrigin,
}

/// Where a DHCP lease stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LeaseState {
    /// No lease: asking servers for one (at boot, or after an expiry
    /// or a refusal).
    #[default]
    Requesting,
    /// Holding a lease, not due for renewal yet.
    Bound,
    /// Past T1: asking the server that granted it to extend it.
    Renewing,
    /// Past T2: asking any server to extend it.
    Rebinding,
}

/// A DHCPv4 lease init holds (or is looking for) on one interface.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseFacts {
    /// The interface.
    pub interface: String,
    /// Where the lease stands.
    pub state: LeaseState,
    /// The leased address with its prefix length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The lease's router, the default route's gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<String>,
    /// The server that granted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The DNS servers it gave.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<String>,
    /// When the server last granted or extended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted: Option<Time>,
    /// When init asks the granting server to extend it (T1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_at: Option<Time>,
    /// When init asks any server (T2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rebind_at: Option<Time>,
    /// When it runs out; absent for a lease with no end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,
    /// How many times it was extended this boot.
    #[serde(default)]
    pub renewals: u32,
}

/// An address a lease changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressChange {
    /// When.
    pub time: Time,
    /// The interface.
    pub interface: String,
    /// The address before (absent: there was none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The address after (absent: removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Why, for a person (`the lease expired`, `the server refused the
    /// renewal`).
    pub reason: String,
}

impl NetworkFacts {
    /// The link named `name`.
    pub fn link(&self, name: &str) -> Option<&LinkFacts> {
        self.links.iter().find(|l| l.name == name)
    }

    /// Records an address change, keeping the last [`MAX_CHANGES`].
    pub fn push_change(&mut self, change: AddressChange) {
        self.changes.push(change);
        let extra = self.changes.len().saturating_sub(MAX_CHANGES);
        self.changes.drain(..extra);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_facts_read_back_as_the_operator_sees_them() {
        let facts = NetworkFacts {
            time: Time::from_unix(1_780_000_000),
            links: vec![LinkFacts {
                name: "bond0".into(),
                kind: LinkKind::Bond,
                mac: Some("52:54:00:00:00:02".into()),
                mtu: 9000,
                up: true,
                carrier: true,
                bond: Some(BondFacts {
                    mode: "active-backup".into(),
                    miimon: 100,
                    active: Some("eth2".into()),
                }),
                addresses: vec![AddressFacts {
                    address: "192.168.60.10/24".into(),
                    origin: AddressOrigin::Static,
                    tentative: false,
                }],
                ..LinkFacts::default()
            }],
            routes: vec![RouteFacts {
                to: "0.0.0.0/0".into(),
                via: Some("10.0.2.2".into()),
                dev: Some("eth0".into()),
                origin: RouteOrigin::Dhcp,
            }],
            leases: vec![LeaseFacts {
                interface: "eth0".into(),
                state: LeaseState::Renewing,
                address: Some("10.0.2.15/24".into()),
                renewals: 3,
                ..LeaseFacts::default()
            }],
            ..NetworkFacts::default()
        };
        let json = serde_json::to_string(&facts).unwrap();
        for want in [
            r#""kind":"bond""#,
            r#""bond":{"mode":"active-backup","miimon":100,"active":"eth2"}"#,
            r#""origin":"dhcp""#,
            r#""state":"renewing""#,
        ] {
            assert!(json.contains(want), "{want} in {json}");
        }
        assert!(!json.contains("changes") && !json.contains("problems"));
        assert_eq!(serde_json::from_str::<NetworkFacts>(&json).unwrap(), facts);
        assert_eq!(facts.link("bond0").map(|l| l.mtu), Some(9000));
    }

    #[test]
    fn only_the_last_changes_are_kept() {
        let mut facts = NetworkFacts::default();
        for n in 0..20 {
            facts.push_change(AddressChange {
                interface: format!("eth{n}"),
                ..AddressChange::default()
            });
        }
        assert_eq!(facts.changes.len(), MAX_CHANGES);
        assert_eq!(facts.changes[0].interface, "eth4");
    }
}
