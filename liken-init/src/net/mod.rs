//! The machine's network at boot: which interfaces the Machine's
//! network spec names, what to do to each, doing it, and the resolver
//! configuration.
//!
//! [`decide_network`] turns the spec and the interfaces found in
//! /sys/class/net into a list of [`Action`]s, purely; [`apply`] carries
//! them out through [`Netlink`] and a DHCP function, so both are tested
//! without a kernel. [`decide_resolv`] writes resolv.conf's text from
//! the static servers and the leases' servers.
//!
//! IPv4 only: an IPv6 address or route in the spec is reported as not
//! supported rather than silently dropped.

pub mod dhcp;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use liken_api::machine::{InterfaceSpec, NetworkSpec};
use liken_api::validate::{parse_cidr, parse_mac};

use crate::sys::netlink::{Netlink, Request};

/// How long a boot waits for one interface's DHCP lease before going
/// on without it.
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
    /// Bring the link up.
    Up {
        /// Interface name.
        name: String,
        /// Interface index.
        index: u32,
    },
    /// Add a static address.
    Address {
        /// Interface name.
        name: String,
        /// Interface index.
        index: u32,
        /// The address.
        address: Ipv4Addr,
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
        destination: Ipv4Addr,
        /// Destination prefix length.
        prefix: u8,
        /// Gateway.
        gateway: Ipv4Addr,
    },
    /// Take a DHCP lease and configure its address and default route.
    Dhcp {
        /// Interface name.
        name: String,
        /// Interface index.
        index: u32,
        /// Hardware address the client sends.
        mac: [u8; 6],
    },
    /// A spec entry that cannot be carried out.
    Problem(String),
}

fn describe_wanted(name: Option<&str>, mac: Option<&str>) -> String {
    match (name, mac) {
        (Some(n), Some(m)) => format!("{n} with mac {m}"),
        (Some(n), None) => n.to_owned(),
        (None, Some(m)) => format!("mac {m}"),
        (None, None) => "an unnamed interface".to_owned(),
    }
}

fn v4_cidr(text: &str) -> Option<(Ipv4Addr, u8)> {
    match parse_cidr(text)? {
        (IpAddr::V4(a), len) if len <= 32 => Some((a, len)),
        _ => None,
    }
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
/// an interface `spec` names (by a valid name or MAC) is not among
/// `found`, and its driver may be among the modules still loading
/// ([`crate::image_modules`]). An entry that can never match (a bad MAC,
/// neither name nor MAC) is left to [`decide_network`] to report.
pub fn decide_wait_for_drivers(spec: &NetworkSpec, found: &[Found]) -> bool {
    spec.interfaces.iter().any(|iface| {
        let mac = match iface.mac.as_deref().map(parse_mac) {
            Some(None) => return false,
            Some(Some(m)) => Some(m),
            None => None,
        };
        (iface.name.is_some() || mac.is_some()) && find_interface(iface, mac, found).is_none()
    })
}

/// What to do for `spec` on a machine with interfaces `found`: the
/// loopback up first, then per spec entry its link up, its static
/// addresses, its DHCP lease, and its static routes (last, as their
/// gateways are reachable only once an address is on the link).
pub fn decide_network(spec: &NetworkSpec, found: &[Found]) -> Vec<Action> {
    let mut actions = Vec::new();
    if let Some(lo) = found.iter().find(|f| f.name == "lo") {
        actions.push(Action::Up {
            name: lo.name.clone(),
            index: lo.index,
        });
    }
    let mut used = BTreeSet::new();
    for iface in &spec.interfaces {
        let want_mac = iface.mac.as_deref().map(parse_mac);
        let wanted = describe_wanted(iface.name.as_deref(), iface.mac.as_deref());
        if matches!(want_mac, Some(None)) {
            actions.push(Action::Problem(format!(
                "interface {wanted}: the mac is not a MAC address such as 52:54:00:12:34:56"
            )));
            continue;
        }
        let Some(hit) = find_interface(iface, want_mac.flatten(), found) else {
            let have: Vec<&str> = found.iter().map(|f| f.name.as_str()).collect();
            actions.push(Action::Problem(format!(
                "interface {wanted} not found (have: {}); check the Machine document or that the driver is in spec.modules",
                if have.is_empty() {
                    "none".to_owned()
                } else {
                    have.join(", ")
                }
            )));
            continue;
        };
        if !used.insert(hit.index) {
            actions.push(Action::Problem(format!(
                "interface {wanted} is {} again, which an earlier entry configures; merge the entries",
                hit.name
            )));
            continue;
        }
        let (name, index) = (hit.name.clone(), hit.index);
        actions.push(Action::Up {
            name: name.clone(),
            index,
        });
        for a in &iface.addresses {
            match v4_cidr(a) {
                Some((address, prefix)) => actions.push(Action::Address {
                    name: name.clone(),
                    index,
                    address,
                    prefix,
                }),
                None => actions.push(Action::Problem(format!(
                    "{name}: address {a:?} is not an IPv4 address with a prefix length (IPv6 is not supported yet)"
                ))),
            }
        }
        if iface.dhcp {
            match hit.mac {
                Some(mac) => actions.push(Action::Dhcp {
                    name: name.clone(),
                    index,
                    mac,
                }),
                None => actions.push(Action::Problem(format!(
                    "{name}: DHCP needs a hardware address and this interface has none; give it static addresses"
                ))),
            }
        }
        for r in &iface.routes {
            let to = if r.to == "default" {
                Some((Ipv4Addr::UNSPECIFIED, 0))
            } else {
                v4_cidr(&r.to)
            };
            match (to, r.via.parse::<Ipv4Addr>()) {
                (Some((destination, prefix)), Ok(gateway)) => actions.push(Action::Route {
                    name: name.clone(),
                    index,
                    destination,
                    prefix,
                    gateway,
                }),
                _ => actions.push(Action::Problem(format!(
                    "{name}: route to {:?} via {:?} is not an IPv4 route (IPv6 is not supported yet)",
                    r.to, r.via
                ))),
            }
        }
    }
    actions
}

/// What [`apply`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// One short phrase per configured interface (`eth0 10.0.2.15/24
    /// by DHCP`).
    pub done: Vec<String>,
    /// What failed, each a sentence saying what to do.
    pub failed: Vec<String>,
    /// DNS servers the leases gave.
    pub leased_dns: Vec<Ipv4Addr>,
}

/// Takes a DHCP lease on the interface (name, mac), or says why not.
pub type LeaseFn<'a> = dyn FnMut(&str, [u8; 6]) -> Result<dhcp::Lease, String> + 'a;

/// Carries out `actions`; `lease` takes a DHCP lease on an interface
/// (name, mac) that is already up. A failed action is reported and the
/// rest go on, so one bad interface does not cost the others.
pub fn apply(actions: &[Action], netlink: &dyn Netlink, lease: &mut LeaseFn<'_>) -> Report {
    let mut report = Report::default();
    for action in actions {
        match action {
            Action::Up { name, index } => {
                if let Err(e) = netlink.apply(&Request::LinkUp { index: *index }) {
                    report.failed.push(format!("cannot bring {name} up: {e}"));
                }
            }
            Action::Address {
                name,
                index,
                address,
                prefix,
            } => match netlink.apply(&Request::AddAddress {
                index: *index,
                address: *address,
                prefix: *prefix,
            }) {
                Ok(()) => report.done.push(format!("{name} {address}/{prefix}")),
                Err(e) => report
                    .failed
                    .push(format!("cannot add {address}/{prefix} to {name}: {e}")),
            },
            Action::Route {
                name,
                index,
                destination,
                prefix,
                gateway,
            } => {
                if let Err(e) = netlink.apply(&Request::AddRoute {
                    index: *index,
                    destination: *destination,
                    prefix: *prefix,
                    gateway: *gateway,
                }) {
                    report.failed.push(format!(
                        "cannot add the route to {destination}/{prefix} via {gateway} on {name}: {e}; \
                         check that the gateway is inside one of {name}'s subnets"
                    ));
                }
            }
            Action::Dhcp { name, index, mac } => match lease(name, *mac) {
                Ok(l) => apply_lease(name, *index, &l, netlink, &mut report),
                Err(e) => report.failed.push(format!("{name}: {e}")),
            },
            Action::Problem(p) => report.failed.push(p.clone()),
        }
    }
    report
}

fn apply_lease(
    name: &str,
    index: u32,
    lease: &dhcp::Lease,
    netlink: &dyn Netlink,
    report: &mut Report,
) {
    let (address, prefix) = (lease.address, lease.prefix);
    if let Err(e) = netlink.apply(&Request::AddAddress {
        index,
        address,
        prefix,
    }) {
        report.failed.push(format!(
            "{name}: cannot add the leased {address}/{prefix}: {e}"
        ));
        return;
    }
    if let Some(gateway) = lease.router
        && let Err(e) = netlink.apply(&Request::AddRoute {
            index,
            destination: Ipv4Addr::UNSPECIFIED,
            prefix: 0,
            gateway,
        })
    {
        report.failed.push(format!(
            "{name}: cannot add the default route via {gateway} from the lease: {e}"
        ));
    }
    report
        .done
        .push(format!("{name} {address}/{prefix} by DHCP"));
    for d in &lease.dns {
        if !report.leased_dns.contains(d) {
            report.leased_dns.push(*d);
        }
    }
}

/// The whole network step: plan `spec` against the interfaces in
/// `sys`, carry it out, and write resolv.conf at `resolv_conf` when
/// there are servers. `Ok` with a summary when everything was done,
/// `Err` with what failed (and what was done) otherwise.
pub fn configure(
    spec: &NetworkSpec,
    found: &[Found],
    netlink: &dyn Netlink,
    dhcp: &dyn dhcp::DhcpClient,
    resolv_conf: &Path,
) -> Result<String, String> {
    let actions = decide_network(spec, found);
    let mut report = apply(&actions, netlink, &mut |name, mac| dhcp.lease(name, mac));
    let mut done = if report.done.is_empty() {
        vec!["loopback only".to_owned()]
    } else {
        report.done.clone()
    };
    if let Some(text) = decide_resolv(spec, &report.leased_dns) {
        let written = resolv_conf
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| crate::fsutil::write_atomic(resolv_conf, text.as_bytes(), 0o644));
        match written {
            Ok(()) => done.push(format!("DNS in {}", resolv_conf.display())),
            Err(e) => report.failed.push(format!(
                "cannot write {}: {e}; names will not resolve",
                resolv_conf.display()
            )),
        }
    }
    if report.failed.is_empty() {
        Ok(done.join(", "))
    } else {
        Err(format!(
            "{} (done: {})",
            report.failed.join("; "),
            done.join(", ")
        ))
    }
}

/// resolv.conf's text: the spec's static servers first, then the
/// leases', each once, at most three (the C library reads no more).
/// `None` when there is no server at all, so an existing file is left.
pub fn decide_resolv(spec: &NetworkSpec, leased: &[Ipv4Addr]) -> Option<String> {
    let mut servers: Vec<IpAddr> = Vec::new();
    let statics = spec
        .interfaces
        .iter()
        .flat_map(|i| i.dns.iter())
        .filter_map(|d| d.parse::<IpAddr>().ok());
    for s in statics.chain(leased.iter().copied().map(IpAddr::V4)) {
        if !servers.contains(&s) {
            servers.push(s);
        }
    }
    if servers.is_empty() {
        return None;
    }
    let mut text =
        String::from("# Written by liken-init at boot from the Machine document and DHCP.\n");
    for s in servers.iter().take(3) {
        let _ = writeln!(text, "nameserver {s}");
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::netlink::FakeNetlink;
    use liken_api::machine::RouteSpec;

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
                addresses: vec!["192.168.1.10/24".into()],
                routes: vec![
                    RouteSpec {
                        to: "0.0.0.0/0".into(),
                        via: "192.168.1.1".into(),
                    },
                    RouteSpec {
                        to: "10.8.0.0/16".into(),
                        via: "192.168.1.254".into(),
                    },
                ],
                dns: vec!["192.168.1.1".into(), "9.9.9.9".into()],
                ..InterfaceSpec::default()
            }],
            ..NetworkSpec::default()
        }
    }

    #[test]
    fn dhcp_by_mac() {
        assert_eq!(
            decide_network(&dhcp_spec(), &found()),
            vec![
                Action::Up {
                    name: "lo".into(),
                    index: 1
                },
                Action::Up {
                    name: "eth0".into(),
                    index: 2
                },
                Action::Dhcp {
                    name: "eth0".into(),
                    index: 2,
                    mac: MAC
                },
            ]
        );
    }

    #[test]
    fn static_by_name() {
        let actions = decide_network(&static_spec(), &found());
        assert_eq!(
            actions[2..],
            [
                Action::Address {
                    name: "eth0".into(),
                    index: 2,
                    address: Ipv4Addr::new(192, 168, 1, 10),
                    prefix: 24
                },
                Action::Route {
                    name: "eth0".into(),
                    index: 2,
                    destination: Ipv4Addr::UNSPECIFIED,
                    prefix: 0,
                    gateway: Ipv4Addr::new(192, 168, 1, 1)
                },
                Action::Route {
                    name: "eth0".into(),
                    index: 2,
                    destination: Ipv4Addr::new(10, 8, 0, 0),
                    prefix: 16,
                    gateway: Ipv4Addr::new(192, 168, 1, 254)
                },
            ]
        );
    }

    #[test]
    fn problems_are_reported_not_dropped() {
        let mut spec = dhcp_spec();
        spec.interfaces[0].mac = Some("52:54:00:12:34:99".into());
        spec.interfaces.push(InterfaceSpec {
            name: Some("eth0".into()),
            addresses: vec!["fd00::5/64".into()],
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
        assert!(problems[1].contains("IPv6 is not supported"));
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

    #[test]
    fn apply_dhcp_then_routes() {
        let nl = FakeNetlink::default();
        let mut asked = Vec::new();
        let report = apply(
            &decide_network(&dhcp_spec(), &found()),
            &nl,
            &mut |name, mac| {
                asked.push((name.to_owned(), mac));
                Ok(dhcp::Lease {
                    address: Ipv4Addr::new(10, 0, 2, 15),
                    prefix: 24,
                    router: Some(Ipv4Addr::new(10, 0, 2, 2)),
                    dns: vec![Ipv4Addr::new(10, 0, 2, 3)],
                    lease_secs: Some(86400),
                    server: Some(Ipv4Addr::new(10, 0, 2, 2)),
                })
            },
        );
        assert_eq!(asked, vec![("eth0".to_owned(), MAC)]);
        assert_eq!(
            nl.applied(),
            vec![
                Request::LinkUp { index: 1 },
                Request::LinkUp { index: 2 },
                Request::AddAddress {
                    index: 2,
                    address: Ipv4Addr::new(10, 0, 2, 15),
                    prefix: 24
                },
                Request::AddRoute {
                    index: 2,
                    destination: Ipv4Addr::UNSPECIFIED,
                    prefix: 0,
                    gateway: Ipv4Addr::new(10, 0, 2, 2)
                },
            ]
        );
        assert_eq!(report.done, vec!["eth0 10.0.2.15/24 by DHCP"]);
        assert!(report.failed.is_empty());
        assert_eq!(report.leased_dns, vec![Ipv4Addr::new(10, 0, 2, 3)]);
        assert_eq!(
            decide_resolv(&dhcp_spec(), &report.leased_dns).unwrap(),
            "# Written by liken-init at boot from the Machine document and DHCP.\nnameserver 10.0.2.3\n"
        );
    }

    #[test]
    fn apply_goes_on_after_a_failure() {
        let bad = Request::AddAddress {
            index: 2,
            address: Ipv4Addr::new(192, 168, 1, 10),
            prefix: 24,
        };
        let nl = FakeNetlink {
            fail: vec![bad],
            ..FakeNetlink::default()
        };
        let report = apply(
            &decide_network(&static_spec(), &found()),
            &nl,
            &mut |_, _| Err("unused".into()),
        );
        assert_eq!(nl.applied().len(), 5);
        assert_eq!(report.failed.len(), 1);
        assert!(report.failed[0].starts_with("cannot add 192.168.1.10/24 to eth0"));
        assert!(report.done.is_empty());
    }

    #[test]
    fn dhcp_failure_is_reported() {
        let nl = FakeNetlink::default();
        let report = apply(&decide_network(&dhcp_spec(), &found()), &nl, &mut |_, _| {
            Err("no DHCP lease within 20s".into())
        });
        assert_eq!(report.failed, vec!["eth0: no DHCP lease within 20s"]);
        assert_eq!(nl.applied().len(), 2);
    }

    #[test]
    fn resolv_order_and_limit() {
        let text = decide_resolv(
            &static_spec(),
            &[
                Ipv4Addr::new(9, 9, 9, 9),
                Ipv4Addr::new(1, 1, 1, 1),
                Ipv4Addr::new(8, 8, 8, 8),
            ],
        )
        .unwrap();
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(
            lines,
            [
                "nameserver 192.168.1.1",
                "nameserver 9.9.9.9",
                "nameserver 1.1.1.1"
            ]
        );
        assert_eq!(decide_resolv(&dhcp_spec(), &[]), None);
    }

    struct FakeDhcp(Result<dhcp::Lease, String>);

    impl dhcp::DhcpClient for FakeDhcp {
        fn lease(&self, _: &str, _: [u8; 6]) -> Result<dhcp::Lease, String> {
            self.0.clone()
        }
    }

    fn slirp_lease() -> dhcp::Lease {
        dhcp::Lease {
            address: Ipv4Addr::new(10, 0, 2, 15),
            prefix: 24,
            router: Some(Ipv4Addr::new(10, 0, 2, 2)),
            dns: vec![Ipv4Addr::new(10, 0, 2, 3)],
            lease_secs: Some(86400),
            server: Some(Ipv4Addr::new(10, 0, 2, 2)),
        }
    }

    #[test]
    fn configure_writes_resolv_conf() {
        let dir = std::env::temp_dir().join(format!("liken-net-conf-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("etc/resolv.conf");
        let nl = FakeNetlink::default();
        let got = configure(
            &dhcp_spec(),
            &found(),
            &nl,
            &FakeDhcp(Ok(slirp_lease())),
            &path,
        );
        assert_eq!(
            got,
            Ok(format!(
                "eth0 10.0.2.15/24 by DHCP, DNS in {}",
                path.display()
            ))
        );
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .ends_with("\nnameserver 10.0.2.3\n")
        );
        assert_eq!(nl.applied().len(), 4);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn configure_without_spec_brings_loopback_up() {
        let nl = FakeNetlink::default();
        let path = std::env::temp_dir().join("liken-net-never-written/resolv.conf");
        let got = configure(
            &NetworkSpec::default(),
            &found(),
            &nl,
            &FakeDhcp(Err("unused".into())),
            &path,
        );
        assert_eq!(got, Ok("loopback only".to_owned()));
        assert_eq!(nl.applied(), vec![Request::LinkUp { index: 1 }]);
        assert!(!path.exists());
    }

    #[test]
    fn configure_reports_missing_interface() {
        let nl = FakeNetlink::default();
        let path = std::env::temp_dir().join("liken-net-never-written/resolv.conf");
        let lo_only = &found()[..1];
        let got = configure(
            &dhcp_spec(),
            lo_only,
            &nl,
            &FakeDhcp(Ok(slirp_lease())),
            &path,
        );
        let err = got.unwrap_err();
        assert!(
            err.starts_with("interface mac 52:54:00:12:34:56 not found (have: lo)"),
            "{err}"
        );
        assert!(err.ends_with("(done: loopback only)"), "{err}");
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
}
