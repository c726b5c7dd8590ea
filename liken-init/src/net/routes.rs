//! Which routes a DHCP lease puts on its interface, decided purely so
//! that the network thread adds exactly these and later removes exactly
//! these, and nothing of another interface's or of the Machine's.
//!
//! Every route goes in at the interface's own metric
//! ([`liken_api::machine::InterfaceSpec::route_metric`]) and is added
//! beside, never over, another route to the same destination (the
//! netlink request carries no NLM_F_REPLACE): two interfaces' default
//! routes are two routes, and losing one lease leaves the other's.
//!
//! The routes are the lease's classless static routes (options 121 and
//! 249, RFC 3442) when it has any, which then stand in for the router
//! option as that RFC asks; else a default route through the first
//! router. A gateway outside the leased subnet (the /32 leases some
//! clouds hand out, whose gateway is on no subnet of the machine's) is
//! reached through an on-link host route to it, added first, as the
//! kernel refuses a route through a gateway it cannot reach. A route
//! to a destination the Machine routes statically on the interface is
//! not added: the Machine's route is the one the administrator wrote.

use std::net::{IpAddr, Ipv4Addr};

use super::dhcp::Lease;

/// One route of a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseRoute {
    /// Destination network.
    pub destination: Ipv4Addr,
    /// Its prefix length.
    pub prefix: u8,
    /// The gateway; `None`: on the link.
    pub gateway: Option<Ipv4Addr>,
}

/// Whether `address` is inside `network/prefix`.
pub fn contains(network: Ipv4Addr, prefix: u8, address: Ipv4Addr) -> bool {
    let host_bits = 32u32.saturating_sub(u32::from(prefix.min(32)));
    let mask = u32::MAX.checked_shl(host_bits).unwrap_or(0);
    u32::from(network) & mask == u32::from(address) & mask
}

/// The routes `lease` puts on its interface, in the order to add them,
/// and a sentence for each route left out; `statics` are the
/// destinations the Machine routes on the interface itself.
pub fn decide_lease_routes(
    lease: &Lease,
    statics: &[(IpAddr, u8)],
) -> (Vec<LeaseRoute>, Vec<String>) {
    let wanted: Vec<(Ipv4Addr, u8, Ipv4Addr)> = if lease.classless.is_empty() {
        lease
            .router
            .map(|r| (Ipv4Addr::UNSPECIFIED, 0, r))
            .into_iter()
            .collect()
    } else {
        lease.classless.clone()
    };
    let mut routes: Vec<LeaseRoute> = Vec::new();
    let mut skipped = Vec::new();
    let push = |r: LeaseRoute, routes: &mut Vec<LeaseRoute>| {
        if !routes.contains(&r) {
            routes.push(r);
        }
    };
    for (destination, prefix, gateway) in wanted {
        if statics.contains(&(IpAddr::V4(destination), prefix)) {
            skipped.push(format!(
                "the Machine's route to {destination}/{prefix} is kept, not the lease's"
            ));
            continue;
        }
        if gateway.is_unspecified() {
            push(
                LeaseRoute {
                    destination,
                    prefix,
                    gateway: None,
                },
                &mut routes,
            );
            continue;
        }
        if !contains(lease.address, lease.prefix, gateway) {
            push(
                LeaseRoute {
                    destination: gateway,
                    prefix: 32,
                    gateway: None,
                },
                &mut routes,
            );
        }
        push(
            LeaseRoute {
                destination,
                prefix,
                gateway: Some(gateway),
            },
            &mut routes,
        );
    }
    (routes, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn lease(address: &str, prefix: u8, router: Option<&str>) -> Lease {
        Lease {
            address: a(address),
            prefix,
            router: router.map(a),
            dns: Vec::new(),
            lease_secs: Some(3600),
            server: None,
            t1: None,
            t2: None,
            classless: Vec::new(),
        }
    }

    fn shown(routes: &[LeaseRoute]) -> Vec<String> {
        routes
            .iter()
            .map(|r| match r.gateway {
                Some(g) => format!("{}/{} via {g}", r.destination, r.prefix),
                None => format!("{}/{} on-link", r.destination, r.prefix),
            })
            .collect()
    }

    #[test]
    fn routes_of_a_lease() {
        type Row = (
            Lease,
            Vec<(&'static str, u8, &'static str)>,
            &'static [&'static str],
        );
        let rows: Vec<Row> = vec![
            // The plain lease: a default route through its router.
            (
                lease("10.0.2.15", 24, Some("10.0.2.2")),
                vec![],
                &["0.0.0.0/0 via 10.0.2.2"],
            ),
            (lease("10.0.2.15", 24, None), vec![], &[]),
            // A /32 lease whose router is on no subnet: on-link first.
            (
                lease("203.0.113.7", 32, Some("169.254.1.1")),
                vec![],
                &["169.254.1.1/32 on-link", "0.0.0.0/0 via 169.254.1.1"],
            ),
            // Classless routes stand in for the router option.
            (
                lease("10.0.2.15", 24, Some("10.0.2.2")),
                vec![("0.0.0.0", 0, "10.0.2.1"), ("192.0.2.0", 24, "10.0.2.3")],
                &["0.0.0.0/0 via 10.0.2.1", "192.0.2.0/24 via 10.0.2.3"],
            ),
            // The cloud's /32 lease: one on-link route to the gateway
            // for all the routes through it; 0.0.0.0 is on-link.
            (
                lease("203.0.113.7", 32, None),
                vec![
                    ("10.10.0.0", 16, "0.0.0.0"),
                    ("0.0.0.0", 0, "100.64.0.1"),
                    ("198.51.100.0", 24, "100.64.0.1"),
                ],
                &[
                    "10.10.0.0/16 on-link",
                    "100.64.0.1/32 on-link",
                    "0.0.0.0/0 via 100.64.0.1",
                    "198.51.100.0/24 via 100.64.0.1",
                ],
            ),
        ];
        for (mut l, classless, want) in rows {
            l.classless = classless.iter().map(|(d, p, g)| (a(d), *p, a(g))).collect();
            let (routes, skipped) = decide_lease_routes(&l, &[]);
            assert_eq!(shown(&routes), want, "{l:?}");
            assert!(skipped.is_empty());
        }
    }

    #[test]
    fn a_static_route_is_never_taken_by_a_lease() {
        let l = lease("10.0.2.15", 24, Some("10.0.2.2"));
        let statics = [(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)];
        let (routes, skipped) = decide_lease_routes(&l, &statics);
        assert!(routes.is_empty(), "{routes:?}");
        assert_eq!(
            skipped,
            ["the Machine's route to 0.0.0.0/0 is kept, not the lease's"]
        );
        // Another destination does not stand in the way.
        let statics = [(IpAddr::V4(a("192.0.2.0")), 24)];
        assert_eq!(decide_lease_routes(&l, &statics).0.len(), 1);
    }

    #[test]
    fn subnets_contain() {
        assert!(contains(a("10.0.2.0"), 24, a("10.0.2.200")));
        assert!(!contains(a("10.0.2.0"), 24, a("10.0.3.1")));
        assert!(contains(a("1.2.3.4"), 0, a("9.9.9.9")));
        assert!(!contains(a("1.2.3.4"), 32, a("1.2.3.5")));
    }
}
