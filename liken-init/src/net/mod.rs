//! The machine's network: which links and interfaces the Machine's
//! network spec names, what to do to each, doing it, and the thread
//! that keeps it (leases, resolv.conf, the published facts).
//!
//! A boot configures in two passes, because a bond or a VLAN must exist
//! before an interface entry can name it:
//! 1. [`decide_links`]: the bonds (created, their members enslaved, up)
//!    and the VLANs (created on their parents);
//! 2. [`decide_network`], over the interfaces found after the first
//!    pass: per `interfaces` entry its MTU, its IPv6 router
//!    advertisement settings, the link up, its static addresses (both
//!    families), its static routes (after the addresses, as their
//!    gateways are reachable only once an address is on the link), DHCP.
//!    The IPv4 routes of a DHCP entry with no static IPv4 address wait
//!    for the lease: the network thread adds them with it. Entries that
//!    name a VLAN come after the others, so a parent is up and has its
//!    MTU before its VLAN (the kernel refuses to bring up a VLAN whose
//!    parent is down, or to give it a larger MTU); a VLAN no entry names
//!    is brought up last.
//!
//! Both return a list of [`Action`]s, purely; [`apply`] carries them out
//! through [`Netlink`] and [`SysctlWriter`], going on past failures so
//! that one refused field costs nothing else. What could not be done is
//! a console line and a problem in the published facts, never a halted
//! boot. DHCP leases are kept by the network thread ([`daemon`]), which
//! also writes resolv.conf ([`decide_resolv`]) and the facts.
//!
//! IPv6: static addresses and routes, and router advertisements (a
//! default route, and SLAAC addresses for their prefixes) where an
//! entry's `slaac` asks for them. The kernel does that work; init sets
//! `accept_ra` to 2 (accepted even once k3s turns forwarding on) and
//! `autoconf` to 1, or both to 0 where `slaac` is off, before the link
//! comes up. There is no DHCPv6 client: see the README for why.

pub mod daemon;
pub mod dhcp;
pub mod facts;
pub mod lease;
pub mod routes;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use liken_api::machine::{InterfaceSpec, NetworkSpec};
use liken_api::validate::{parse_cidr, parse_mac};

use crate::sys::netlink::{Netlink, Op, Request, bond_mode_number, rta};
use crate::sys::sysctl::SysctlWriter;

/// How long a boot waits for the DHCP leases before going on without
/// them (the network thread keeps asking).
pub const DHCP_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

/// An interface the kernel has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Its name (`eth0`).
    pub name: String,
    /// Its index.
    pub index: u32,
    /// Its hardware address, when it has one.
    pub mac: Option<[u8; 6]>,
}

/// The interfaces in `<sys>/class/net`, sorted by index.
pub fn read_interfaces(sys: &Path) -> Vec<Found> {
    let Ok(entries) = std::fs::read_dir(sys.join("class/net")) else {
        return Vec::new();
    };
    let mut found: Vec<Found> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let dir = e.path();
            let index = std::fs::read_to_string(dir.join("ifindex"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            let mac = std::fs::read_to_string(dir.join("address"))
                .ok()
                .and_then(|t| parse_mac(t.trim()))
                .filter(|m| *m != [0; 6]);
            Some(Found {
                name: e.file_name().to_string_lossy().into_owned(),
                index,
                mac,
            })
        })
        .collect();
    crate::order::by_key(&mut found, |f| f.index.to_be_bytes().to_vec());
    found
}

/// One thing to do to the network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create (or set up) a bond and enslave its members (found by name
    /// when the action runs, as they are re-read after creation).
    Bond {
        /// Its name.
        name: String,
        /// The bonding driver's mode number.
        mode: u8,
        /// Link monitoring interval, milliseconds.
        miimon: u32,
        /// The members' names.
        members: Vec<String>,
    },
    /// Create a VLAN on its parent (found by name when the action runs:
    /// it may be a bond created just before).
    Vlan {
        /// Its name.
        name: String,
        /// The parent's name.
        parent: String,
        /// The VLAN id.
        id: u16,
    },
    /// Write an IPv6 setting of the interface under /proc/sys.
    Sysctl {
        /// The parameter's file.
        path: PathBuf,
        /// Its value.
        value: &'static str,
    },
    /// Set the link's MTU and bring it up.
    Up {
        /// Interface name.
        name: String,
        /// Interface index.
        index: u32,
        /// The MTU to set first, if the spec names one.
        mtu: Option<u32>,
    },
    /// Add a static address.
    Address {
        /// Interface name.
        name: String,
        /// Interface index.
        index: u32,
        /// The address, either family.
        address: IpAddr,
        /// Its prefix length.
        prefix: u8,
    },
    /// Add a static route.
    Route {
        /// Interface name.
        name: String,
        /// Interface index.
        index: u32,
        /// Destination network.
        destination: IpAddr,
        /// Destination prefix length.
        prefix: u8,
        /// Gateway, of the destination's family.
        gateway: IpAddr,
        /// The interface's route metric.
        metric: u32,
    },
    /// Keep a DHCP lease on the interface (the network thread does).
    Dhcp(DhcpLink),
    /// A spec entry that cannot be carried out.
    Problem(String),
}

/// An interface whose DHCPv4 lease the network thread keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DhcpLink {
    /// Interface name.
    pub name: String,
    /// Interface index.
    pub index: u32,
    /// Hardware address the client sends.
    pub mac: [u8; 6],
    /// The entry's static IPv4 routes when it has no static IPv4
    /// address: their gateways are reachable only through the lease's
    /// subnet, so the thread adds them once a lease is on the link, and
    /// again after each new one (the kernel drops a route with the
    /// address that made its gateway reachable).
    pub routes: Vec<StaticRoute>,
    /// The metric of its routes, leased and static.
    pub metric: u32,
    /// The destinations the entry routes statically (either family):
    /// a lease's route to one of them is left out, so a static route
    /// is never replaced by a leased one.
    pub statics: Vec<(IpAddr, u8)>,
}

/// A static route of a [`DhcpLink`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticRoute {
    /// Destination network.
    pub destination: IpAddr,
    /// Destination prefix length.
    pub prefix: u8,
    /// Gateway.
    pub gateway: IpAddr,
}

fn describe_wanted(name: Option<&str>, mac: Option<&str>) -> String {
    match (name, mac) {
        (Some(n), Some(m)) => format!("{n} with mac {m}"),
        (Some(n), None) => n.to_owned(),
        (None, Some(m)) => format!("mac {m}"),
        (None, None) => "an unnamed interface".to_owned(),
    }
}

fn have(found: &[Found]) -> String {
    if found.is_empty() {
        return "none".to_owned();
    }
    let names: Vec<&str> = found.iter().map(|f| f.name.as_str()).collect();
    names.join(", ")
}

/// The interface a spec entry names by `name`, by its parsed `mac`, or
/// both; none when it names neither.
fn find_interface<'a>(
    iface: &InterfaceSpec,
    mac: Option<[u8; 6]>,
    found: &'a [Found],
) -> Option<&'a Found> {
    if iface.name.is_none() && mac.is_none() {
        return None;
    }
    found.iter().find(|f| {
        iface.name.as_ref().is_none_or(|n| *n == f.name) && mac.is_none_or(|m| f.mac == Some(m))
    })
}

/// Whether to wait for the system image's drivers before configuring:
/// an interface `spec` names (an entry by a valid name or MAC, a bond
/// member) is not among `found`, and its driver may be among the
/// modules still loading ([`crate::image_modules`]). Bonds and VLANs
/// are made by init, so their names are not waited for; an entry that
/// can never match (a bad MAC, neither name nor MAC) is left to
/// [`decide_network`] to report.
pub fn decide_wait_for_drivers(spec: &NetworkSpec, found: &[Found]) -> bool {
    let made: BTreeSet<&str> = spec
        .bonds
        .iter()
        .map(|b| b.name.as_str())
        .chain(spec.vlans.iter().map(|v| v.name.as_str()))
        .collect();
    let entry_missing = spec.interfaces.iter().any(|iface| {
        if iface.name.as_deref().is_some_and(|n| made.contains(n)) {
            return false;
        }
        let mac = match iface.mac.as_deref().map(parse_mac) {
            Some(None) => return false,
            Some(Some(m)) => Some(m),
            None => None,
        };
        (iface.name.is_some() || mac.is_some()) && find_interface(iface, mac, found).is_none()
    });
    let member_missing = spec
        .bonds
        .iter()
        .flat_map(|b| &b.members)
        .any(|m| !found.iter().any(|f| f.name == *m));
    entry_missing || member_missing
}

/// The kernel modules the links of `spec` need (the kernel cannot load
/// them itself: there is no modprobe for it to call).
pub fn decide_modules(spec: &NetworkSpec) -> Vec<&'static str> {
    let mut modules = Vec::new();
    if !spec.bonds.is_empty() {
        modules.push("bonding");
    }
    if !spec.vlans.is_empty() {
        modules.push("8021q");
    }
    modules
}

/// The first pass: bonds with their members, then VLANs, for a machine
/// with interfaces `found`. A member or parent that is missing is a
/// problem; the link is made anyway where it can be, so the rest of the
/// spec still applies.
pub fn decide_links(spec: &NetworkSpec, found: &[Found]) -> Vec<Action> {
    let mut actions = Vec::new();
    let exists = |name: &str| found.iter().any(|f| f.name == name);
    for bond in &spec.bonds {
        let (present, missing): (Vec<&String>, Vec<&String>) =
            bond.members.iter().partition(|m| exists(m));
        for m in missing {
            actions.push(Action::Problem(format!(
                "bond {}: member {m} not found (have: {}); check the name, or that its driver is in spec.modules",
                bond.name,
                have(found)
            )));
        }
        actions.push(Action::Bond {
            name: bond.name.clone(),
            mode: bond_mode_number(bond.mode),
            miimon: bond.miimon(),
            members: present.into_iter().cloned().collect(),
        });
    }
    for vlan in &spec.vlans {
        if exists(&vlan.parent) || spec.bonds.iter().any(|b| b.name == vlan.parent) {
            actions.push(Action::Vlan {
                name: vlan.name.clone(),
                parent: vlan.parent.clone(),
                id: vlan.id,
            });
        } else {
            actions.push(Action::Problem(format!(
                "VLAN {}: its parent {} is not found (have: {}); check the name, or that its driver is in spec.modules",
                vlan.name,
                vlan.parent,
                have(found)
            )));
        }
    }
    actions
}

fn ipv6_conf(name: &str, key: &str) -> PathBuf {
    Path::new(crate::sysctls::PROC_SYS)
        .join("net/ipv6/conf")
        .join(name)
        .join(key)
}

/// The second pass: what to do for each `interfaces` entry of `spec` on
/// a machine with interfaces `found` (read after [`decide_links`]'s
/// links were made), the loopback up first.
pub fn decide_network(spec: &NetworkSpec, found: &[Found]) -> Vec<Action> {
    let mut actions = Vec::new();
    if let Some(lo) = found.iter().find(|f| f.name == "lo") {
        actions.push(Action::Up {
            name: lo.name.clone(),
            index: lo.index,
            mtu: None,
        });
    }
    let is_vlan = |(_, i): &(usize, &InterfaceSpec)| {
        i.name
            .as_ref()
            .is_some_and(|n| spec.vlans.iter().any(|v| v.name == *n))
    };
    type Entries<'a> = Vec<(usize, &'a InterfaceSpec)>;
    let (vlans, others): (Entries, Entries) = spec.interfaces.iter().enumerate().partition(is_vlan);
    let mut used = BTreeSet::new();
    for (position, iface) in others.into_iter().chain(vlans) {
        let metric = iface.route_metric(position);
        decide_interface(iface, metric, found, &mut used, &mut actions);
    }
    // A VLAN no entry names still comes up, once its parent is.
    for vlan in &spec.vlans {
        if let Some(f) = found.iter().find(|f| f.name == vlan.name)
            && !used.contains(&f.index)
        {
            actions.push(Action::Up {
                name: f.name.clone(),
                index: f.index,
                mtu: None,
            });
        }
    }
    actions
}

fn decide_interface(
    iface: &InterfaceSpec,
    metric: u32,
    found: &[Found],
    used: &mut BTreeSet<u32>,
    actions: &mut Vec<Action>,
) {
    let want_mac = iface.mac.as_deref().map(parse_mac);
    let wanted = describe_wanted(iface.name.as_deref(), iface.mac.as_deref());
    if matches!(want_mac, Some(None)) {
        actions.push(Action::Problem(format!(
            "interface {wanted}: the mac is not a MAC address such as 52:54:00:12:34:56"
        )));
        return;
    }
    let Some(hit) = find_interface(iface, want_mac.flatten(), found) else {
        actions.push(Action::Problem(format!(
            "interface {wanted} not found (have: {}); check the Machine document or that the driver is in spec.modules",
            have(found)
        )));
        return;
    };
    if !used.insert(hit.index) {
        actions.push(Action::Problem(format!(
            "interface {wanted} is {} again, which an earlier entry configures; merge the entries",
            hit.name
        )));
        return;
    }
    let (name, index) = (hit.name.clone(), hit.index);
    let ra = if iface.slaac() { "2" } else { "0" };
    let autoconf = if iface.slaac() { "1" } else { "0" };
    for (key, value) in [("accept_ra", ra), ("autoconf", autoconf)] {
        actions.push(Action::Sysctl {
            path: ipv6_conf(&name, key),
            value,
        });
    }
    actions.push(Action::Up {
        name: name.clone(),
        index,
        mtu: iface.mtu,
    });
    for a in &iface.addresses {
        match parse_cidr(a) {
            Some((address, prefix)) => actions.push(Action::Address {
                name: name.clone(),
                index,
                address,
                prefix,
            }),
            None => actions.push(Action::Problem(format!(
                "{name}: address {a:?} is not an address with a prefix length"
            ))),
        }
    }
    // IPv4 routes wait for the lease when only it gives the link an
    // IPv4 subnet.
    let after_lease = iface.dhcp
        && hit.mac.is_some()
        && !iface
            .addresses
            .iter()
            .any(|a| parse_cidr(a).is_some_and(|(a, _)| a.is_ipv4()));
    let mut leased_routes = Vec::new();
    for r in &iface.routes {
        match (parse_cidr(&r.to), r.via.parse::<IpAddr>()) {
            (Some((destination, prefix)), Ok(gateway))
                if destination.is_ipv4() == gateway.is_ipv4() =>
            {
                let route = StaticRoute {
                    destination,
                    prefix,
                    gateway,
                };
                if after_lease && destination.is_ipv4() {
                    leased_routes.push(route);
                } else {
                    actions.push(Action::Route {
                        name: name.clone(),
                        index,
                        destination,
                        prefix,
                        gateway,
                        metric,
                    })
                }
            }
            _ => actions.push(Action::Problem(format!(
                "{name}: route to {:?} via {:?} is not a destination and a gateway of one family",
                r.to, r.via
            ))),
        }
    }
    if iface.dhcp {
        match hit.mac {
            Some(mac) => actions.push(Action::Dhcp(DhcpLink {
                name,
                index,
                mac,
                routes: leased_routes,
                metric,
                statics: iface
                    .routes
                    .iter()
                    .filter_map(|r| parse_cidr(&r.to))
                    .collect(),
            })),
            None => actions.push(Action::Problem(format!(
                "{name}: DHCP needs a hardware address and this interface has none; give it static addresses"
            ))),
        }
    }
}

/// What [`apply`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// One short phrase per thing done (`eth0 10.0.2.15/24`, `bond
    /// bond0 of eth2, eth3`).
    pub done: Vec<String>,
    /// What failed, each a sentence saying what to do.
    pub failed: Vec<String>,
    /// The interfaces whose DHCP leases the network thread keeps.
    pub dhcp: Vec<DhcpLink>,
}

/// Carries out `actions` in order; `index_of` finds a link's index by
/// name at the time (links this pass made are not in any earlier list).
/// A failed action is reported and the rest go on, so one bad field
/// does not cost the others.
pub fn apply(
    actions: &[Action],
    netlink: &dyn Netlink,
    sysctl: &dyn SysctlWriter,
    index_of: &dyn Fn(&str) -> Option<u32>,
    report: &mut Report,
) {
    let request = |r: Request, what: &dyn Fn() -> String, report: &mut Report| {
        netlink
            .apply(&r)
            .map_err(|e| report.failed.push(format!("{}: {e}", what())))
            .is_ok()
    };
    for action in actions {
        match action {
            Action::Bond {
                name,
                mode,
                miimon,
                members,
            } => {
                let made = request(
                    Request::Bond {
                        name: name.clone(),
                        mode: *mode,
                        miimon: *miimon,
                    },
                    &|| format!("cannot create bond {name}"),
                    report,
                );
                let Some(bond) = index_of(name).filter(|_| made) else {
                    continue;
                };
                let mut joined = Vec::new();
                for m in members {
                    let Some(member) = index_of(m) else {
                        report
                            .failed
                            .push(format!("bond {name}: member {m} vanished"));
                        continue;
                    };
                    // A link joins a bond only while it is down; the
                    // bonding driver brings it up again.
                    let what = || format!("cannot add {m} to bond {name}; is it up and in use?");
                    let down = Request::Link {
                        index: member,
                        up: Some(false),
                        mtu: None,
                        master: None,
                    };
                    let join = Request::Link {
                        index: member,
                        up: None,
                        mtu: None,
                        master: Some(bond),
                    };
                    if request(down, &what, report) && request(join, &what, report) {
                        joined.push(m.as_str());
                    }
                }
                if request(
                    Request::up(bond),
                    &|| format!("cannot bring {name} up"),
                    report,
                ) {
                    report
                        .done
                        .push(format!("bond {name} of {}", joined.join(", ")));
                }
            }
            Action::Vlan { name, parent, id } => {
                let Some(parent_index) = index_of(parent) else {
                    report.failed.push(format!(
                        "VLAN {name}: its parent {parent} is not there (was the bond made?)"
                    ));
                    continue;
                };
                let made = request(
                    Request::Vlan {
                        name: name.clone(),
                        parent: parent_index,
                        id: *id,
                    },
                    &|| format!("cannot create VLAN {name} (id {id} on {parent})"),
                    report,
                );
                // It comes up in the second pass, after its parent.
                if made {
                    report.done.push(format!("VLAN {name} {id} on {parent}"));
                }
            }
            Action::Sysctl { path, value } => {
                if let Err(e) = sysctl.write(path, value) {
                    report
                        .failed
                        .push(format!("cannot write {value} to {}: {e}", path.display()));
                }
            }
            Action::Up { name, index, mtu } => {
                if let Some(mtu) = mtu {
                    let set = Request::Link {
                        index: *index,
                        up: None,
                        mtu: Some(*mtu),
                        master: None,
                    };
                    if request(
                        set,
                        &|| {
                            format!(
                                "{name}: the kernel refused MTU {mtu} (the card's limit, or above its parent's)"
                            )
                        },
                        report,
                    ) {
                        report.done.push(format!("{name} mtu {mtu}"));
                    }
                }
                request(
                    Request::up(*index),
                    &|| format!("cannot bring {name} up"),
                    report,
                );
            }
            Action::Address {
                name,
                index,
                address,
                prefix,
            } => {
                let add = Request::Address {
                    op: Op::Add,
                    index: *index,
                    address: *address,
                    prefix: *prefix,
                };
                if request(
                    add,
                    &|| format!("cannot add {address}/{prefix} to {name}"),
                    report,
                ) {
                    report.done.push(format!("{name} {address}/{prefix}"));
                }
            }
            Action::Route {
                name,
                index,
                destination,
                prefix,
                gateway,
                metric,
            } => {
                let add = Request::Route {
                    op: Op::Add,
                    index: *index,
                    destination: *destination,
                    prefix: *prefix,
                    gateway: Some(*gateway),
                    metric: *metric,
                    protocol: rta::PROTO_BOOT,
                };
                request(
                    add,
                    &|| {
                        format!(
                            "cannot add the route to {destination}/{prefix} via {gateway} on {name}; \
                             check that the gateway is inside one of {name}'s subnets"
                        )
                    },
                    report,
                );
            }
            Action::Dhcp(link) => report.dhcp.push(link.clone()),
            Action::Problem(p) => report.failed.push(p.clone()),
        }
    }
}

/// Whether the boot waits for IPv6 duplicate address detection before
/// going on: the spec has static IPv6 addresses, which the NTP step and
/// k3s use at once, and a tentative address cannot be used yet.
pub fn decide_wait_for_dad(spec: &NetworkSpec) -> bool {
    spec.interfaces
        .iter()
        .flat_map(|i| &i.addresses)
        .any(|a| parse_cidr(a).is_some_and(|(a, _)| a.is_ipv6()))
}

/// Waits until no address is tentative, or `within` has passed (a
/// duplicate is then the kernel's to report: the address stays
/// unusable, and the facts show it).
pub fn wait_for_dad(nl: &dyn Netlink, within: std::time::Duration) {
    let started = std::time::Instant::now();
    while started.elapsed() < within {
        match facts::read(nl) {
            Ok(k) if facts::any_tentative(&k) => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            _ => return,
        }
    }
}

/// The DNS servers for resolv.conf: the spec's static servers first,
/// then the leases', each once, at most three (the C library reads no
/// more).
pub fn decide_servers(spec: &NetworkSpec, leased: &[std::net::Ipv4Addr]) -> Vec<IpAddr> {
    let mut servers: Vec<IpAddr> = Vec::new();
    let statics = spec
        .interfaces
        .iter()
        .flat_map(|i| i.dns.iter())
        .filter_map(|d| d.parse::<IpAddr>().ok());
    for s in statics.chain(leased.iter().copied().map(IpAddr::V4)) {
        if !servers.contains(&s) && servers.len() < crate::dns::MAX_NAMESERVERS {
            servers.push(s);
        }
    }
    servers
}

/// resolv.conf's text for `servers`.
pub fn decide_resolv(servers: &[IpAddr]) -> String {
    let mut text =
        String::from("# Written by liken-init from the Machine document and its DHCP leases.\n");
    for s in servers {
        let _ = writeln!(text, "nameserver {s}");
    }
    text
}

#[cfg(test)]
mod tests;
