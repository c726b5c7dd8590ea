//! The running network read back from the kernel, as the facts init
//! publishes (`liken_api::network`).
//!
//! Three rtnetlink dumps (links, addresses, routes) are decoded by pure
//! functions over the messages' bytes, so they are tested on hand-laid
//! messages; [`read`] asks the kernel through [`Netlink`]. What cannot
//! be read from the kernel comes from the network thread: the leases
//! it holds, the changes they made, the nameservers it wrote into
//! resolv.conf and what could not be applied.
//!
//! Left out as noise for the operator: routes of other tables than
//! main, routes that are not unicast (the kernel's local, broadcast and
//! multicast entries) and the kernel's own IPv6 link-local routes.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use liken_api::network::{
    AddressFacts, AddressOrigin, BondFacts, LinkFacts, LinkKind, NetworkFacts, RouteFacts,
    RouteOrigin, VlanFacts,
};

use crate::sys::netlink::{
    Dump, IFF_LOOPBACK, IFF_LOWER_UP, IFF_UP, Netlink, attributes, bond_mode_name, ifa, ifla,
    read_u16, read_u32, rta,
};

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const IFINFO_LEN: usize = 16;
const IFADDR_LEN: usize = 8;
const RTMSG_LEN: usize = 12;

/// One link as the kernel describes it, with the indexes that still
/// need names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// Its index.
    pub index: u32,
    /// The facts, names of other links still missing.
    pub facts: LinkFacts,
    /// A VLAN's parent.
    pub parent: Option<u32>,
    /// A member's bond.
    pub master: Option<u32>,
    /// A bond's active member.
    pub active: Option<u32>,
}

/// One address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    /// The link's index.
    pub index: u32,
    /// The address.
    pub address: IpAddr,
    /// Its prefix length.
    pub prefix: u8,
    /// IFA_F_* flags.
    pub flags: u32,
}

/// One route of the main table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Destination and prefix length.
    pub to: (IpAddr, u8),
    /// The gateway.
    pub via: Option<IpAddr>,
    /// The outgoing link's index.
    pub oif: Option<u32>,
    /// RTPROT_*.
    pub protocol: u8,
}

fn ip(family: u8, data: &[u8]) -> Option<IpAddr> {
    match family {
        AF_INET => Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(data).ok()?))),
        AF_INET6 => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(data).ok()?))),
        _ => None,
    }
}

fn text(data: &[u8]) -> String {
    let end = data.iter().position(|b| *b == 0).unwrap_or(data.len());
    String::from_utf8_lossy(data.get(..end).unwrap_or(data)).into_owned()
}

fn mac_text(mac: &[u8]) -> String {
    let parts: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    parts.join(":")
}

/// A link from an RTM_NEWLINK message's payload.
pub fn decode_link(payload: &[u8]) -> Option<Link> {
    let index = read_u32(payload, 4)?;
    let flags = read_u32(payload, 8)?;
    let mut link = Link {
        index,
        ..Link::default()
    };
    let f = &mut link.facts;
    f.up = flags & IFF_UP != 0;
    f.carrier = flags & IFF_LOWER_UP != 0;
    if flags & IFF_LOOPBACK != 0 {
        f.kind = LinkKind::Loopback;
    }
    let mut info: &[u8] = &[];
    for (kind, data) in attributes(payload.get(IFINFO_LEN..)?) {
        match kind {
            ifla::IFNAME => f.name = text(data),
            ifla::ADDRESS if data.len() == 6 && data.iter().any(|b| *b != 0) => {
                f.mac = Some(mac_text(data));
            }
            ifla::MTU => f.mtu = read_u32(data, 0).unwrap_or(0),
            ifla::LINK => link.parent = read_u32(data, 0),
            ifla::MASTER => link.master = read_u32(data, 0),
            ifla::LINKINFO => info = data,
            _ => {}
        }
    }
    let mut kind_name = String::new();
    let mut data: &[u8] = &[];
    for (k, d) in attributes(info) {
        match k {
            ifla::INFO_KIND => kind_name = text(d),
            ifla::INFO_DATA => data = d,
            _ => {}
        }
    }
    match kind_name.as_str() {
        "" => {}
        "vlan" => {
            f.kind = LinkKind::Vlan;
            let id = attributes(data)
                .find(|(k, _)| *k == ifla::VLAN_ID)
                .and_then(|(_, d)| read_u16(d, 0))
                .unwrap_or(0);
            f.vlan = Some(VlanFacts {
                parent: String::new(),
                id,
            });
        }
        "bond" => {
            f.kind = LinkKind::Bond;
            let mut bond = BondFacts::default();
            for (k, d) in attributes(data) {
                match k {
                    ifla::BOND_MODE => {
                        bond.mode = bond_mode_name(d.first().copied().unwrap_or(u8::MAX)).into();
                    }
                    ifla::BOND_MIIMON => bond.miimon = read_u32(d, 0).unwrap_or(0),
                    ifla::BOND_ACTIVE_SLAVE => link.active = read_u32(d, 0),
                    _ => {}
                }
            }
            f.bond = Some(bond);
        }
        _ => f.kind = LinkKind::Other,
    }
    // A VLAN's IFLA_LINK is its parent; other links' is themselves or
    // nothing of interest.
    if f.kind != LinkKind::Vlan {
        link.parent = None;
    }
    Some(link)
}

/// An address from an RTM_NEWADDR message's payload.
pub fn decode_address(payload: &[u8]) -> Option<Address> {
    let family = *payload.first()?;
    let prefix = *payload.get(1)?;
    let mut flags = u32::from(*payload.get(2)?);
    let index = read_u32(payload, 4)?;
    let (mut local, mut address) = (None, None);
    for (kind, data) in attributes(payload.get(IFADDR_LEN..)?) {
        match kind {
            ifa::LOCAL => local = ip(family, data),
            ifa::ADDRESS => address = ip(family, data),
            ifa::FLAGS => flags = read_u32(data, 0).unwrap_or(flags),
            _ => {}
        }
    }
    Some(Address {
        index,
        // IFA_LOCAL is the machine's own address where both are given
        // (they differ only on point-to-point links).
        address: local.or(address)?,
        prefix,
        flags,
    })
}

/// A main-table unicast route from an RTM_NEWROUTE message's payload;
/// `None` for everything else.
pub fn decode_route(payload: &[u8]) -> Option<Route> {
    let family = *payload.first()?;
    let dst_len = *payload.get(1)?;
    let mut table = u32::from(*payload.get(4)?);
    let protocol = *payload.get(5)?;
    let kind = *payload.get(7)?;
    let unspecified = match family {
        AF_INET => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        AF_INET6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        _ => return None,
    };
    let mut route = Route {
        to: (unspecified, dst_len),
        via: None,
        oif: None,
        protocol,
    };
    for (k, data) in attributes(payload.get(RTMSG_LEN..)?) {
        match k {
            rta::DST => route.to.0 = ip(family, data)?,
            rta::GATEWAY => route.via = ip(family, data),
            rta::OIF => route.oif = read_u32(data, 0),
            rta::TABLE => table = read_u32(data, 0).unwrap_or(table),
            _ => {}
        }
    }
    let link_local = matches!(route.to.0, IpAddr::V6(a) if a.segments().first() == Some(&0xfe80));
    (table == u32::from(rta::TABLE_MAIN) && kind == rta::UNICAST && !link_local).then_some(route)
}

/// What the kernel has, decoded.
#[derive(Clone, Debug, Default)]
pub struct Kernel {
    /// Links, in the kernel's order (by index).
    pub links: Vec<Link>,
    /// Addresses.
    pub addresses: Vec<Address>,
    /// Main-table unicast routes.
    pub routes: Vec<Route>,
}

/// Reads links, addresses and routes from the kernel.
pub fn read(nl: &dyn Netlink) -> io::Result<Kernel> {
    Ok(Kernel {
        links: nl
            .dump(Dump::Links)?
            .iter()
            .filter_map(|m| decode_link(m))
            .collect(),
        addresses: nl
            .dump(Dump::Addresses)?
            .iter()
            .filter_map(|m| decode_address(m))
            .collect(),
        routes: nl
            .dump(Dump::Routes)?
            .iter()
            .filter_map(|m| decode_route(m))
            .collect(),
    })
}

fn is_link_local(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => a.segments().first().is_some_and(|s| s & 0xffc0 == 0xfe80),
    }
}

/// The facts from what the kernel has and the leased addresses (so
/// their origin says DHCP); the caller adds the leases, changes, DNS
/// servers and problems it keeps.
pub fn decide_facts(kernel: &Kernel, leased: &[IpAddr]) -> NetworkFacts {
    let name = |i: Option<u32>| {
        let i = i?;
        let link = kernel.links.iter().find(|l| l.index == i)?;
        Some(link.facts.name.clone())
    };
    let mut facts = NetworkFacts::default();
    for l in &kernel.links {
        let mut f = l.facts.clone();
        f.master = name(l.master);
        if let Some(v) = &mut f.vlan {
            v.parent = name(l.parent).unwrap_or_default();
        }
        if let Some(b) = &mut f.bond {
            b.active = name(l.active);
        }
        for a in kernel.addresses.iter().filter(|a| a.index == l.index) {
            let origin = if is_link_local(a.address) {
                AddressOrigin::LinkLocal
            } else if leased.contains(&a.address) {
                AddressOrigin::Dhcp
            } else if a.address.is_ipv6() && a.flags & ifa::F_PERMANENT == 0 {
                AddressOrigin::Slaac
            } else {
                AddressOrigin::Static
            };
            let failed = a.flags & ifa::F_DADFAILED != 0;
            let address = format!("{}/{}", a.address, a.prefix);
            if failed {
                // The kernel leaves the tentative flag on a failed
                // address too: it is not waiting, it is unusable.
                facts.problems.push(decide_dad_failed(&f.name, &address));
            }
            f.addresses.push(AddressFacts {
                address,
                origin,
                tentative: a.flags & ifa::F_TENTATIVE != 0 && !failed,
            });
        }
        facts.links.push(f);
    }
    for r in &kernel.routes {
        facts.routes.push(RouteFacts {
            to: format!("{}/{}", r.to.0, r.to.1),
            via: r.via.map(|v| v.to_string()),
            dev: name(r.oif),
            origin: match r.protocol {
                rta::PROTO_KERNEL => RouteOrigin::Kernel,
                rta::PROTO_BOOT => RouteOrigin::Static,
                rta::PROTO_DHCP => RouteOrigin::Dhcp,
                rta::PROTO_RA => RouteOrigin::Ra,
                _ => RouteOrigin::Other,
            },
        });
    }
    facts
}

/// The problem an address whose duplicate address detection failed
/// (IFA_F_DADFAILED) is: another host on the link answers for it.
pub fn decide_dad_failed(link: &str, address: &str) -> String {
    format!("{link}: {address} failed duplicate address detection: another host uses it")
}

/// Whether any address is still in duplicate address detection (one
/// whose detection failed is done with it).
pub fn any_tentative(kernel: &Kernel) -> bool {
    kernel
        .addresses
        .iter()
        .any(|a| a.flags & ifa::F_TENTATIVE != 0 && a.flags & ifa::F_DADFAILED == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&u16::try_from(4 + data.len()).unwrap().to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(data);
        while b.len() % 4 != 0 {
            b.push(0);
        }
        b
    }

    fn link_msg(index: u32, flags: u32, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut b = vec![0, 0, 1, 0];
        b.extend_from_slice(&index.to_ne_bytes());
        b.extend_from_slice(&flags.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        for a in attrs {
            b.extend_from_slice(a);
        }
        b
    }

    fn info(kind: &str, data: &[Vec<u8>]) -> Vec<u8> {
        let inner: Vec<u8> = data.concat();
        attr(
            ifla::LINKINFO,
            &[
                attr(ifla::INFO_KIND, kind.as_bytes()),
                attr(ifla::INFO_DATA, &inner),
            ]
            .concat(),
        )
    }

    fn addr_msg(family: u8, prefix: u8, index: u32, address: &[u8], flags: u32) -> Vec<u8> {
        let mut b = vec![family, prefix, 0, 0];
        b.extend_from_slice(&index.to_ne_bytes());
        b.extend(attr(ifa::ADDRESS, address));
        b.extend(attr(ifa::FLAGS, &flags.to_ne_bytes()));
        b
    }

    fn route_msg(
        family: u8,
        dst_len: u8,
        table: u8,
        proto: u8,
        kind: u8,
        attrs: &[Vec<u8>],
    ) -> Vec<u8> {
        let mut b = vec![family, dst_len, 0, 0, table, proto, 0, kind];
        b.extend_from_slice(&0u32.to_ne_bytes());
        for a in attrs {
            b.extend_from_slice(a);
        }
        b
    }

    fn kernel() -> Kernel {
        let up = IFF_UP | IFF_LOWER_UP;
        let links = [
            link_msg(
                1,
                up | IFF_LOOPBACK,
                &[
                    attr(ifla::IFNAME, b"lo\0"),
                    attr(ifla::MTU, &65536u32.to_ne_bytes()),
                ],
            ),
            link_msg(
                2,
                up,
                &[
                    attr(ifla::IFNAME, b"eth1\0"),
                    attr(ifla::ADDRESS, &[0x52, 0x54, 0, 0, 0, 1]),
                    attr(ifla::MTU, &9000u32.to_ne_bytes()),
                ],
            ),
            link_msg(
                3,
                IFF_UP,
                &[
                    attr(ifla::IFNAME, b"eth2\0"),
                    attr(ifla::MASTER, &5u32.to_ne_bytes()),
                ],
            ),
            link_msg(
                4,
                up,
                &[
                    attr(ifla::IFNAME, b"vlan42\0"),
                    attr(ifla::LINK, &2u32.to_ne_bytes()),
                    info("vlan", &[attr(ifla::VLAN_ID, &42u16.to_ne_bytes())]),
                ],
            ),
            link_msg(
                5,
                up,
                &[
                    attr(ifla::IFNAME, b"bond0\0"),
                    info(
                        "bond",
                        &[
                            attr(ifla::BOND_MODE, &[1]),
                            attr(ifla::BOND_ACTIVE_SLAVE, &3u32.to_ne_bytes()),
                            attr(ifla::BOND_MIIMON, &100u32.to_ne_bytes()),
                        ],
                    ),
                ],
            ),
        ];
        let v6 = |s: &str| s.parse::<Ipv6Addr>().unwrap().octets().to_vec();
        let addresses = [
            addr_msg(AF_INET, 24, 2, &[192, 168, 50, 10], ifa::F_PERMANENT),
            addr_msg(AF_INET, 24, 2, &[10, 77, 0, 53], ifa::F_PERMANENT),
            addr_msg(
                AF_INET6,
                64,
                2,
                &v6("fd50::10"),
                ifa::F_PERMANENT | ifa::F_TENTATIVE,
            ),
            addr_msg(
                AF_INET6,
                64,
                2,
                &v6("fd77::5054:ff:fe00:1"),
                ifa::F_TENTATIVE | ifa::F_DADFAILED,
            ),
            addr_msg(
                AF_INET6,
                64,
                2,
                &v6("fe80::5054:ff:fe00:1"),
                ifa::F_PERMANENT,
            ),
        ];
        let routes = [
            route_msg(
                AF_INET,
                0,
                254,
                rta::PROTO_DHCP,
                1,
                &[
                    attr(rta::GATEWAY, &[10, 77, 0, 1]),
                    attr(rta::OIF, &2u32.to_ne_bytes()),
                ],
            ),
            route_msg(
                AF_INET,
                16,
                254,
                rta::PROTO_BOOT,
                1,
                &[
                    attr(rta::DST, &[10, 99, 0, 0]),
                    attr(rta::GATEWAY, &[192, 168, 50, 1]),
                    attr(rta::OIF, &2u32.to_ne_bytes()),
                ],
            ),
            route_msg(
                AF_INET6,
                0,
                254,
                rta::PROTO_RA,
                1,
                &[
                    attr(rta::GATEWAY, &v6("fe80::1")),
                    attr(rta::OIF, &2u32.to_ne_bytes()),
                ],
            ),
            // Left out: the kernel's link-local route, the local table,
            // a multicast route.
            route_msg(
                AF_INET6,
                64,
                254,
                rta::PROTO_KERNEL,
                1,
                &[
                    attr(rta::DST, &v6("fe80::")),
                    attr(rta::OIF, &2u32.to_ne_bytes()),
                ],
            ),
            route_msg(
                AF_INET,
                32,
                255,
                rta::PROTO_KERNEL,
                2,
                &[attr(rta::DST, &[127, 0, 0, 1])],
            ),
            route_msg(
                AF_INET6,
                8,
                254,
                rta::PROTO_KERNEL,
                5,
                &[attr(rta::DST, &v6("ff00::"))],
            ),
        ];
        Kernel {
            links: links.iter().filter_map(|m| decode_link(m)).collect(),
            addresses: addresses.iter().filter_map(|m| decode_address(m)).collect(),
            routes: routes.iter().filter_map(|m| decode_route(m)).collect(),
        }
    }

    #[test]
    fn dumps_become_the_facts_the_operator_reads() {
        let k = kernel();
        assert_eq!(
            (k.links.len(), k.addresses.len(), k.routes.len()),
            (5, 5, 3)
        );
        assert!(any_tentative(&k));
        let facts = decide_facts(&k, &["10.77.0.53".parse().unwrap()]);
        let lo = facts.link("lo").unwrap();
        assert_eq!(
            (lo.kind, lo.mtu, lo.mac.as_deref()),
            (LinkKind::Loopback, 65536, None)
        );
        let eth1 = facts.link("eth1").unwrap();
        assert_eq!(eth1.mac.as_deref(), Some("52:54:00:00:00:01"));
        assert!(eth1.up && eth1.carrier && eth1.mtu == 9000);
        let addrs: Vec<(&str, AddressOrigin, bool)> = eth1
            .addresses
            .iter()
            .map(|a| (a.address.as_str(), a.origin, a.tentative))
            .collect();
        assert_eq!(
            addrs,
            [
                ("192.168.50.10/24", AddressOrigin::Static, false),
                ("10.77.0.53/24", AddressOrigin::Dhcp, false),
                ("fd50::10/64", AddressOrigin::Static, true),
                ("fd77::5054:ff:fe00:1/64", AddressOrigin::Slaac, false),
                ("fe80::5054:ff:fe00:1/64", AddressOrigin::LinkLocal, false),
            ]
        );
        // The failed one is a problem, not tentative for ever.
        assert_eq!(
            facts.problems,
            [decide_dad_failed("eth1", "fd77::5054:ff:fe00:1/64")]
        );
        let eth2 = facts.link("eth2").unwrap();
        assert_eq!(eth2.master.as_deref(), Some("bond0"));
        assert!(eth2.up && !eth2.carrier);
        assert_eq!(
            facts.link("vlan42").unwrap().vlan,
            Some(VlanFacts {
                parent: "eth1".into(),
                id: 42
            })
        );
        assert_eq!(
            facts.link("bond0").unwrap().bond,
            Some(BondFacts {
                mode: "active-backup".into(),
                miimon: 100,
                active: Some("eth2".into())
            })
        );
        let routes: Vec<(&str, Option<&str>, Option<&str>, RouteOrigin)> = facts
            .routes
            .iter()
            .map(|r| (r.to.as_str(), r.via.as_deref(), r.dev.as_deref(), r.origin))
            .collect();
        assert_eq!(
            routes,
            [
                (
                    "0.0.0.0/0",
                    Some("10.77.0.1"),
                    Some("eth1"),
                    RouteOrigin::Dhcp
                ),
                (
                    "10.99.0.0/16",
                    Some("192.168.50.1"),
                    Some("eth1"),
                    RouteOrigin::Static
                ),
                ("::/0", Some("fe80::1"), Some("eth1"), RouteOrigin::Ra),
            ]
        );
    }

    #[test]
    fn short_or_strange_messages_are_skipped() {
        assert_eq!(decode_link(&[0; 8]), None);
        assert_eq!(decode_address(&[2, 24, 0]), None);
        // An address message without an address.
        assert_eq!(decode_address(&[2, 24, 0, 0, 1, 0, 0, 0]), None);
        // A family that is neither IPv4 nor IPv6.
        assert_eq!(decode_route(&route_msg(7, 0, 254, 3, 1, &[])), None);
        // An IPv4 destination of the wrong length.
        assert_eq!(
            decode_route(&route_msg(
                AF_INET,
                8,
                254,
                3,
                1,
                &[attr(rta::DST, &[10, 0])]
            )),
            None
        );
    }
}
