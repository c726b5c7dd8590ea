use std::net::Ipv4Addr;

use super::*;
use crate::sys::netlink::FakeNetlink;
use crate::sys::sysctl::FakeSysctl;
use liken_api::machine::{BondMode, BondSpec, RouteSpec, VlanSpec};

const MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];

fn found() -> Vec<Found> {
    vec![
        Found {
            name: "lo".into(),
            index: 1,
            mac: None,
        },
        Found {
            name: "eth0".into(),
            index: 2,
            mac: Some(MAC),
        },
    ]
}

fn dhcp_spec() -> NetworkSpec {
    NetworkSpec {
        interfaces: vec![InterfaceSpec {
            mac: Some("52:54:00:12:34:56".into()),
            dhcp: true,
            ..InterfaceSpec::default()
        }],
        ..NetworkSpec::default()
    }
}

fn static_spec() -> NetworkSpec {
    NetworkSpec {
        interfaces: vec![InterfaceSpec {
            name: Some("eth0".into()),
            addresses: vec!["192.168.1.10/24".into(), "fd00:1::10/64".into()],
            routes: vec![
                RouteSpec {
                    to: "0.0.0.0/0".into(),
                    via: "192.168.1.1".into(),
                },
                RouteSpec {
                    to: "fd99::/64".into(),
                    via: "fd00:1::1".into(),
                },
            ],
            dns: vec!["192.168.1.1".into(), "fd00:1::1".into()],
            mtu: Some(9000),
            ..InterfaceSpec::default()
        }],
        ..NetworkSpec::default()
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn sysctl(name: &str, key: &str, value: &'static str) -> Action {
    Action::Sysctl {
        path: PathBuf::from(format!("/proc/sys/net/ipv6/conf/{name}/{key}")),
        value,
    }
}

#[test]
fn dhcp_by_mac_accepts_router_advertisements() {
    assert_eq!(
        decide_network(&dhcp_spec(), &found()),
        vec![
            Action::Up {
                name: "lo".into(),
                index: 1,
                mtu: None
            },
            sysctl("eth0", "accept_ra", "2"),
            sysctl("eth0", "autoconf", "1"),
            Action::Up {
                name: "eth0".into(),
                index: 2,
                mtu: None
            },
            Action::Dhcp(DhcpLink {
                name: "eth0".into(),
                index: 2,
                mac: MAC,
                routes: vec![],
                metric: 100,
                statics: vec![],
            }),
        ]
    );
}

/// Which routes of a DHCP entry wait for its lease: the IPv4 ones,
/// unless a static IPv4 address already gives the link a subnet; IPv6
/// routes never do (their gateways are reached over SLAAC or static
/// addresses).
#[test]
fn ipv4_routes_of_a_dhcp_entry_wait_for_its_lease() {
    let v4 = RouteSpec {
        to: "192.0.2.0/24".into(),
        via: "10.0.2.2".into(),
    };
    let v6 = RouteSpec {
        to: "fd99::/64".into(),
        via: "fd00:1::1".into(),
    };
    let route_v4 = StaticRoute {
        destination: ip("192.0.2.0"),
        prefix: 24,
        gateway: ip("10.0.2.2"),
    };
    let now_v4 = Action::Route {
        name: "eth0".into(),
        index: 2,
        destination: ip("192.0.2.0"),
        prefix: 24,
        gateway: ip("10.0.2.2"),
        metric: 100,
    };
    let now_v6 = Action::Route {
        name: "eth0".into(),
        index: 2,
        destination: ip("fd99::"),
        prefix: 64,
        gateway: ip("fd00:1::1"),
        metric: 100,
    };
    type Row = (&'static [&'static str], Vec<StaticRoute>, Vec<Action>);
    let rows: Vec<Row> = vec![
        (&[], vec![route_v4], vec![now_v6.clone()]),
        (&["fd00:1::10/64"], vec![route_v4], vec![now_v6.clone()]),
        (&["10.0.2.20/24"], vec![], vec![now_v4, now_v6]),
    ];
    for (addresses, after_lease, now) in rows {
        let mut spec = dhcp_spec();
        spec.interfaces[0].addresses = addresses.iter().map(|a| a.to_string()).collect();
        spec.interfaces[0].routes = vec![v4.clone(), v6.clone()];
        let actions = decide_network(&spec, &found());
        let routes: Vec<Action> = actions
            .iter()
            .filter(|a| matches!(a, Action::Route { .. }))
            .cloned()
            .collect();
        assert_eq!(routes, now, "{addresses:?}");
        let Some(Action::Dhcp(link)) = actions.last() else {
            panic!("no DHCP action last: {actions:?}");
        };
        assert_eq!(link.routes, after_lease, "{addresses:?}");
    }
}

#[test]
fn static_by_name_both_families() {
    let actions = decide_network(&static_spec(), &found());
    assert_eq!(
        actions[1..],
        [
            sysctl("eth0", "accept_ra", "0"),
            sysctl("eth0", "autoconf", "0"),
            Action::Up {
                name: "eth0".into(),
                index: 2,
                mtu: Some(9000)
            },
            Action::Address {
                name: "eth0".into(),
                index: 2,
                address: ip("192.168.1.10"),
                prefix: 24
            },
            Action::Address {
                name: "eth0".into(),
                index: 2,
                address: ip("fd00:1::10"),
                prefix: 64
            },
            Action::Route {
                name: "eth0".into(),
                index: 2,
                destination: ip("0.0.0.0"),
                prefix: 0,
                gateway: ip("192.168.1.1"),
                metric: 100,
            },
            Action::Route {
                name: "eth0".into(),
                index: 2,
                destination: ip("fd99::"),
                prefix: 64,
                gateway: ip("fd00:1::1"),
                metric: 100,
            },
        ]
    );
    assert!(decide_wait_for_dad(&static_spec()));
    assert!(!decide_wait_for_dad(&dhcp_spec()));
}

#[test]
fn problems_are_reported_not_dropped() {
    let mut spec = dhcp_spec();
    spec.interfaces[0].mac = Some("52:54:00:12:34:99".into());
    spec.interfaces.push(InterfaceSpec {
        name: Some("eth0".into()),
        routes: vec![RouteSpec {
            to: "fd99::/64".into(),
            via: "10.0.0.1".into(),
        }],
        ..InterfaceSpec::default()
    });
    spec.interfaces.push(InterfaceSpec {
        name: Some("eth0".into()),
        dhcp: true,
        ..InterfaceSpec::default()
    });
    spec.interfaces.push(InterfaceSpec {
        name: Some("lo".into()),
        dhcp: true,
        ..InterfaceSpec::default()
    });
    let actions = decide_network(&spec, &found());
    let problems: Vec<&String> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Problem(p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(problems.len(), 4, "{problems:?}");
    assert!(problems[0].contains("mac 52:54:00:12:34:99 not found (have: lo, eth0)"));
    assert!(problems[1].contains("not a destination and a gateway of one family"));
    assert!(problems[2].contains("an earlier entry configures"));
    assert!(problems[3].contains("lo: DHCP needs a hardware address"));
}

#[test]
fn name_and_mac_must_both_match() {
    let mut spec = dhcp_spec();
    spec.interfaces[0].name = Some("eth1".into());
    let actions = decide_network(&spec, &found());
    assert!(matches!(&actions[1], Action::Problem(p) if p.contains("eth1 with mac")));
}

fn links_spec() -> NetworkSpec {
    NetworkSpec {
        interfaces: vec![
            InterfaceSpec {
                name: Some("vlan42".into()),
                addresses: vec!["192.168.42.10/24".into()],
                mtu: Some(9000),
                ..InterfaceSpec::default()
            },
            InterfaceSpec {
                name: Some("eth1".into()),
                mtu: Some(9000),
                ..InterfaceSpec::default()
            },
        ],
        bonds: vec![BondSpec {
            name: "bond0".into(),
            members: vec!["eth2".into(), "eth3".into(), "eth9".into()],
            mode: BondMode::ActiveBackup,
            miimon: None,
        }],
        vlans: vec![
            VlanSpec {
                name: "vlan42".into(),
                parent: "eth1".into(),
                id: 42,
            },
            VlanSpec {
                name: "vlan7".into(),
                parent: "bond0".into(),
                id: 7,
            },
            VlanSpec {
                name: "vlan8".into(),
                parent: "eth8".into(),
                id: 8,
            },
        ],
        ..NetworkSpec::default()
    }
}

fn machine_links() -> Vec<Found> {
    let mut f = found();
    for (name, index) in [("eth1", 3), ("eth2", 4), ("eth3", 5)] {
        f.push(Found {
            name: name.into(),
            index,
            mac: Some([0x52, 0x54, 0, 0, 0, u8::try_from(index).unwrap()]),
        });
    }
    f
}

#[test]
fn bonds_and_vlans_are_made_with_what_is_there() {
    let spec = links_spec();
    assert_eq!(decide_modules(&spec), ["bonding", "8021q"]);
    let actions = decide_links(&spec, &machine_links());
    assert_eq!(actions.len(), 5, "{actions:?}");
    assert!(matches!(&actions[0], Action::Problem(p)
        if p.starts_with("bond bond0: member eth9 not found (have: lo, eth0, eth1, eth2, eth3)")));
    assert_eq!(
        actions[1],
        Action::Bond {
            name: "bond0".into(),
            mode: 1,
            miimon: 100,
            members: vec!["eth2".into(), "eth3".into()],
        }
    );
    assert_eq!(
        actions[2..4],
        [
            Action::Vlan {
                name: "vlan42".into(),
                parent: "eth1".into(),
                id: 42
            },
            // On the bond made just before.
            Action::Vlan {
                name: "vlan7".into(),
                parent: "bond0".into(),
                id: 7
            },
        ]
    );
    assert!(matches!(&actions[4], Action::Problem(p)
        if p.starts_with("VLAN vlan8: its parent eth8 is not found")));
}

#[test]
fn a_vlan_entry_comes_after_its_parent() {
    let mut f = machine_links();
    f.push(Found {
        name: "vlan42".into(),
        index: 9,
        mac: None,
    });
    let ups: Vec<String> = decide_network(&links_spec(), &f)
        .into_iter()
        .filter_map(|a| match a {
            Action::Up { name, mtu, .. } => Some(format!("{name} {mtu:?}")),
            _ => None,
        })
        .collect();
    assert_eq!(ups, ["lo None", "eth1 Some(9000)", "vlan42 Some(9000)"]);
    // A VLAN without an entry comes up after everything else.
    f.push(Found {
        name: "vlan7".into(),
        index: 10,
        mac: None,
    });
    let last = decide_network(&links_spec(), &f).pop();
    assert_eq!(
        last,
        Some(Action::Up {
            name: "vlan7".into(),
            index: 10,
            mtu: None
        })
    );
}

fn index_of(name: &str) -> Option<u32> {
    match name {
        "bond0" => Some(6),
        "eth2" => Some(4),
        "eth3" => Some(5),
        "eth1" => Some(3),
        "vlan42" => Some(7),
        _ => None,
    }
}

#[test]
fn a_bond_takes_its_members_down_then_in() {
    let nl = FakeNetlink::default();
    let mut report = Report::default();
    let spec = links_spec();
    let actions = decide_links(&spec, &machine_links());
    apply(
        &actions[1..3],
        &nl,
        &FakeSysctl::default(),
        &index_of,
        &mut report,
    );
    let link = |index, up, master| Request::Link {
        index,
        up,
        mtu: None,
        master,
    };
    assert_eq!(
        nl.applied(),
        [
            Request::Bond {
                name: "bond0".into(),
                mode: 1,
                miimon: 100
            },
            link(4, Some(false), None),
            link(4, None, Some(6)),
            link(5, Some(false), None),
            link(5, None, Some(6)),
            Request::up(6),
            Request::Vlan {
                name: "vlan42".into(),
                parent: 3,
                id: 42
            },
        ]
    );
    assert_eq!(
        report.done,
        ["bond bond0 of eth2, eth3", "VLAN vlan42 42 on eth1"]
    );
    assert!(report.failed.is_empty(), "{:?}", report.failed);
}

#[test]
fn apply_goes_on_after_a_failure() {
    let bad = Request::Address {
        op: Op::Add,
        index: 2,
        address: ip("192.168.1.10"),
        prefix: 24,
    };
    let nl = FakeNetlink {
        fail: vec![bad],
        ..FakeNetlink::default()
    };
    let sysctls = FakeSysctl {
        fail: vec![(PathBuf::from("/proc/sys/net/ipv6/conf/eth0/autoconf"), 2)],
        ..FakeSysctl::default()
    };
    let mut report = Report::default();
    apply(
        &decide_network(&static_spec(), &found()),
        &nl,
        &sysctls,
        &|_| None,
        &mut report,
    );
    // lo up, eth0 mtu and up, two addresses, two routes.
    assert_eq!(nl.applied().len(), 7);
    assert_eq!(sysctls.written().len(), 2);
    assert_eq!(report.failed.len(), 2, "{:?}", report.failed);
    assert!(
        report.failed[0].starts_with("cannot write 0 to /proc/sys/net/ipv6/conf/eth0/autoconf")
    );
    assert!(report.failed[1].starts_with("cannot add 192.168.1.10/24 to eth0"));
    assert_eq!(report.done, ["eth0 mtu 9000", "eth0 fd00:1::10/64"]);
}

#[test]
fn dhcp_interfaces_go_to_the_thread() {
    let nl = FakeNetlink::default();
    let mut report = Report::default();
    apply(
        &decide_network(&dhcp_spec(), &found()),
        &nl,
        &FakeSysctl::default(),
        &|_| None,
        &mut report,
    );
    assert_eq!(
        report.dhcp,
        [DhcpLink {
            name: "eth0".into(),
            index: 2,
            mac: MAC,
            routes: vec![],
            metric: 100,
            statics: vec![],
        }]
    );
    assert_eq!(nl.applied(), [Request::up(1), Request::up(2)]);
}

#[test]
fn resolv_order_and_limit() {
    let servers = decide_servers(
        &static_spec(),
        &[
            Ipv4Addr::new(192, 168, 1, 1),
            Ipv4Addr::new(1, 1, 1, 1),
            Ipv4Addr::new(8, 8, 8, 8),
        ],
    );
    assert_eq!(servers, [ip("192.168.1.1"), ip("fd00:1::1"), ip("1.1.1.1")]);
    assert_eq!(
        decide_resolv(&servers),
        "# Written by liken-init from the Machine document and its DHCP leases.\n\
         nameserver 192.168.1.1\nnameserver fd00:1::1\nnameserver 1.1.1.1\n"
    );
    assert!(decide_servers(&dhcp_spec(), &[]).is_empty());
}

#[test]
fn waits_for_drivers_only_for_a_named_interface_not_there_yet() {
    let all = found();
    let lo_only = &all[..1];
    // dhcp_spec names its interface by MAC: missing with lo alone.
    assert!(decide_wait_for_drivers(&dhcp_spec(), lo_only));
    assert!(!decide_wait_for_drivers(&dhcp_spec(), &all));
    let named = |name: Option<&str>, mac: Option<&str>| NetworkSpec {
        interfaces: vec![InterfaceSpec {
            name: name.map(str::to_owned),
            mac: mac.map(str::to_owned),
            ..Default::default()
        }],
        ..Default::default()
    };
    assert!(decide_wait_for_drivers(&named(Some("eth0"), None), lo_only));
    assert!(!decide_wait_for_drivers(&named(Some("eth0"), None), &all));
    // No interfaces, a MAC that is not one, or an entry naming
    // nothing: no driver can help, so nothing to wait for.
    assert!(!decide_wait_for_drivers(&NetworkSpec::default(), lo_only));
    assert!(!decide_wait_for_drivers(
        &named(None, Some("not-a-mac")),
        lo_only
    ));
    assert!(!decide_wait_for_drivers(&named(None, None), lo_only));
    // A bond member not there yet is waited for; the bond and VLAN
    // names, which init makes, are not.
    let mut spec = links_spec();
    spec.bonds[0].members.pop();
    assert!(decide_wait_for_drivers(&spec, &all));
    assert!(!decide_wait_for_drivers(&spec, &machine_links()));
}

#[test]
fn reads_sysfs() {
    let dir = std::env::temp_dir().join(format!("liken-net-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (name, index, addr) in [
        ("eth0", "2", "52:54:00:12:34:56\n"),
        ("lo", "1", "00:00:00:00:00:00\n"),
    ] {
        let d = dir.join("class/net").join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("ifindex"), format!("{index}\n")).unwrap();
        std::fs::write(d.join("address"), addr).unwrap();
    }
    assert_eq!(read_interfaces(&dir), found());
    std::fs::remove_dir_all(&dir).unwrap();
}
