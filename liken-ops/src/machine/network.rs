//! NetworkConfigured's second half: whether the running network (the
//! facts init publishes in /run/liken/facts/network.json) is what the running
//! Machine declares.
//!
//! A change between the API's Machine and the running one is staged like
//! any other and takes a reboot ([`crate::machine::changes`] summarizes
//! it). With no change, each declared thing is looked for in the facts:
//! every interface (by name, else by MAC) exists and is up, with its MTU,
//! its static addresses, a DHCP lease when it asks for one, and its
//! routes; every VLAN exists on its parent with its id; every bond exists
//! with its mode, its link monitoring and its members enslaved. What init
//! itself could not apply (its `problems`) is reported as it wrote it.
//! Anything missing is NotApplied, one sentence per gap.
//!
//! Addresses compare as addresses, not strings (`FD00::5/64` is
//! `fd00::5/64`), because people and the kernel spell IPv6 differently.

use std::net::IpAddr;

use liken_api::machine::{InterfaceSpec, NetworkSpec};
use liken_api::network::{LeaseState, LinkFacts, LinkKind, NetworkFacts};
use liken_api::validate::parse_cidr;

fn same_cidr(a: &str, b: &str) -> bool {
    match (parse_cidr(a), parse_cidr(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn same_ip(a: &str, b: &str) -> bool {
    match (a.parse::<IpAddr>(), b.parse::<IpAddr>()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// The link an interface entry names: by name, else by MAC.
fn find_link<'a>(facts: &'a NetworkFacts, iface: &InterfaceSpec) -> Option<&'a LinkFacts> {
    if let Some(name) = &iface.name {
        return facts.link(name);
    }
    let mac = iface.mac.as_ref()?.to_ascii_lowercase();
    facts.links.iter().find(|l| {
        l.mac
            .as_deref()
            .is_some_and(|m| m.eq_ignore_ascii_case(&mac))
    })
}

/// Every way the running network falls short of `spec`, one sentence
/// each; empty when it holds.
pub fn decide_network_gaps(spec: &NetworkSpec, facts: &NetworkFacts) -> Vec<String> {
    let mut gaps = Vec::new();
    for iface in &spec.interfaces {
        let label = iface
            .name
            .clone()
            .or_else(|| iface.mac.clone())
            .unwrap_or_default();
        let Some(link) = find_link(facts, iface) else {
            gaps.push(format!("{label} is not on this machine"));
            continue;
        };
        let name = &link.name;
        if !link.up {
            gaps.push(format!("{name} is down"));
        }
        if let Some(mtu) = iface.mtu
            && link.mtu != mtu
        {
            gaps.push(format!("{name} has MTU {}, not {mtu}", link.mtu));
        }
        for a in &iface.addresses {
            if !link.addresses.iter().any(|f| same_cidr(&f.address, a)) {
                gaps.push(format!("{name} lacks {a}"));
            }
        }
        if iface.dhcp {
            let lease = facts.leases.iter().find(|l| &l.interface == name);
            match lease {
                Some(l) if l.state != LeaseState::Requesting && l.address.is_some() => {}
                _ => gaps.push(format!("{name} holds no DHCP lease (init is still asking)")),
            }
        }
        for r in &iface.routes {
            let present = facts.routes.iter().any(|f| {
                same_cidr(&f.to, &r.to) && f.via.as_deref().is_some_and(|v| same_ip(v, &r.via))
            });
            if !present {
                gaps.push(format!("{name} lacks the route {} via {}", r.to, r.via));
            }
        }
    }
    for v in &spec.vlans {
        match facts.link(&v.name) {
            None => gaps.push(format!("VLAN {} is not on this machine", v.name)),
            Some(l) => match (&l.kind, &l.vlan) {
                (LinkKind::Vlan, Some(f)) if f.parent == v.parent && f.id == v.id => {}
                (LinkKind::Vlan, Some(f)) => gaps.push(format!(
                    "VLAN {} is id {} on {}, not id {} on {}",
                    v.name, f.id, f.parent, v.id, v.parent
                )),
                _ => gaps.push(format!("{} is not a VLAN", v.name)),
            },
        }
    }
    for b in &spec.bonds {
        let Some(l) = facts.link(&b.name) else {
            gaps.push(format!("bond {} is not on this machine", b.name));
            continue;
        };
        match (&l.kind, &l.bond) {
            (LinkKind::Bond, Some(f)) => {
                if f.mode != b.mode.as_str() {
                    gaps.push(format!(
                        "bond {} runs {}, not {}",
                        b.name,
                        f.mode,
                        b.mode.as_str()
                    ));
                }
                if f.miimon != b.miimon() {
                    gaps.push(format!(
                        "bond {} checks links every {} ms, not {}",
                        b.name,
                        f.miimon,
                        b.miimon()
                    ));
                }
            }
            _ => gaps.push(format!("{} is not a bond", b.name)),
        }
        for m in &b.members {
            let enslaved = facts
                .link(m)
                .is_some_and(|l| l.master.as_deref() == Some(b.name.as_str()));
            if !enslaved {
                gaps.push(format!("{m} is not a member of bond {}", b.name));
            }
        }
    }
    gaps.extend(facts.problems.iter().cloned());
    gaps
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::machine::{BondMode, BondSpec, RouteSpec, VlanSpec};
    use liken_api::network::{AddressFacts, BondFacts, LeaseFacts, RouteFacts, VlanFacts};

    fn link(name: &str, kind: LinkKind, mtu: u32, addresses: &[&str]) -> LinkFacts {
        LinkFacts {
            name: name.into(),
            kind,
            mac: Some(format!("52:54:00:00:00:{:02x}", name.len())),
            mtu,
            up: true,
            carrier: true,
            addresses: addresses
                .iter()
                .map(|a| AddressFacts {
                    address: (*a).into(),
                    ..AddressFacts::default()
                })
                .collect(),
            ..LinkFacts::default()
        }
    }

    fn spec() -> NetworkSpec {
        NetworkSpec {
            interfaces: vec![
                InterfaceSpec {
                    name: Some("eth0".into()),
                    dhcp: true,
                    ..InterfaceSpec::default()
                },
                InterfaceSpec {
                    name: Some("bond0".into()),
                    addresses: vec!["192.168.60.10/24".into(), "FD00::10/64".into()],
                    routes: vec![RouteSpec {
                        to: "10.1.0.0/16".into(),
                        via: "192.168.60.1".into(),
                    }],
                    mtu: Some(9000),
                    ..InterfaceSpec::default()
                },
            ],
            bonds: vec![BondSpec {
                name: "bond0".into(),
                members: vec!["eth1".into(), "eth2".into()],
                mode: BondMode::ActiveBackup,
                miimon: None,
            }],
            vlans: vec![VlanSpec {
                name: "bond0.42".into(),
                parent: "bond0".into(),
                id: 42,
            }],
            ..NetworkSpec::default()
        }
    }

    fn facts() -> NetworkFacts {
        let mut bond = link(
            "bond0",
            LinkKind::Bond,
            9000,
            &["192.168.60.10/24", "fd00::10/64"],
        );
        bond.bond = Some(BondFacts {
            mode: "active-backup".into(),
            miimon: 100,
            active: Some("eth1".into()),
        });
        let mut vlan = link("bond0.42", LinkKind::Vlan, 9000, &[]);
        vlan.vlan = Some(VlanFacts {
            parent: "bond0".into(),
            id: 42,
        });
        let mut eth1 = link("eth1", LinkKind::Device, 9000, &[]);
        eth1.master = Some("bond0".into());
        let mut eth2 = eth1.clone();
        eth2.name = "eth2".into();
        NetworkFacts {
            links: vec![
                link("eth0", LinkKind::Device, 1500, &["10.0.2.15/24"]),
                eth1,
                eth2,
                bond,
                vlan,
            ],
            routes: vec![RouteFacts {
                to: "10.1.0.0/16".into(),
                via: Some("192.168.60.1".into()),
                dev: Some("bond0".into()),
                ..RouteFacts::default()
            }],
            leases: vec![LeaseFacts {
                interface: "eth0".into(),
                state: LeaseState::Bound,
                address: Some("10.0.2.15/24".into()),
                ..LeaseFacts::default()
            }],
            ..NetworkFacts::default()
        }
    }

    #[test]
    fn a_network_that_holds_has_no_gaps() {
        assert_eq!(decide_network_gaps(&spec(), &facts()), Vec::<String>::new());
    }

    #[test]
    fn each_gap_is_one_sentence() {
        type Breaks = Box<dyn Fn(&mut NetworkFacts)>;
        let cases: Vec<(&str, Breaks)> = vec![
            (
                "bond0 has MTU 1500, not 9000",
                Box::new(|f| f.links[3].mtu = 1500),
            ),
            (
                "bond0 lacks FD00::10/64",
                Box::new(|f| {
                    f.links[3].addresses.pop();
                }),
            ),
            (
                "eth0 holds no DHCP lease (init is still asking)",
                Box::new(|f| f.leases[0].state = LeaseState::Requesting),
            ),
            (
                "bond0 lacks the route 10.1.0.0/16 via 192.168.60.1",
                Box::new(|f| f.routes.clear()),
            ),
            (
                "VLAN bond0.42 is id 43 on bond0, not id 42 on bond0",
                Box::new(|f| {
                    f.links[4].vlan.as_mut().unwrap().id = 43;
                }),
            ),
            (
                "bond bond0 runs 802.3ad, not active-backup",
                Box::new(|f| {
                    f.links[3].bond.as_mut().unwrap().mode = "802.3ad".into();
                }),
            ),
            (
                "eth2 is not a member of bond bond0",
                Box::new(|f| f.links[2].master = None),
            ),
            ("eth0 is down", Box::new(|f| f.links[0].up = false)),
            (
                "bond bond0 is not on this machine",
                Box::new(|f| {
                    f.links.retain(|l| l.name != "bond0");
                }),
            ),
            (
                "the kernel refused MTU 9000 on eth1",
                Box::new(|f| {
                    f.problems
                        .push("the kernel refused MTU 9000 on eth1".into());
                }),
            ),
        ];
        for (want, break_it) in cases {
            let mut f = facts();
            break_it(&mut f);
            let gaps = decide_network_gaps(&spec(), &f);
            assert!(gaps.iter().any(|g| g == want), "{want}: {gaps:?}");
        }
    }

    #[test]
    fn an_interface_named_by_mac_is_found_by_mac() {
        let spec = NetworkSpec {
            interfaces: vec![InterfaceSpec {
                mac: Some("52:54:00:00:00:04".into()),
                addresses: vec!["10.0.2.15/24".into()],
                ..InterfaceSpec::default()
            }],
            ..NetworkSpec::default()
        };
        assert!(decide_network_gaps(&spec, &facts()).is_empty());
        let spec = NetworkSpec {
            interfaces: vec![InterfaceSpec {
                mac: Some("52:54:00:00:00:99".into()),
                ..InterfaceSpec::default()
            }],
            ..NetworkSpec::default()
        };
        assert_eq!(
            decide_network_gaps(&spec, &facts()),
            ["52:54:00:00:00:99 is not on this machine"]
        );
    }
}
