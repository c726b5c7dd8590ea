//! What differs between the documents this boot runs and the ones the
//! API holds, one kind of change at a time, each with a summary a person
//! reads in `kubectl describe` ("sysctls: vm.swappiness 60 → 10").
//!
//! A kind of change is one convergence condition and one disruption: the
//! kernel's settings (sysctls, modules, kernel arguments) and the network
//! apply at boot, so they take a Reboot; the Cluster's endpoint, leaders
//! and features reach k3s through the configuration init seeds at boot,
//! so they take a Reboot too. The machine's own k3s labels and taints are
//! judged against the Node instead ([`crate::machine::node`]) and take a
//! Restart.
//!
//! The rest of each document is settings, and a change to them alone
//! disrupts nothing: the reboot policy, the maintenance windows and the
//! way a reboot is made (`spec.reboot`) are read from the API as the
//! operators go; the install disk matters only to an install; the
//! Cluster's target release, catalog and budget drive the rollout, not
//! what this boot runs. The document is still staged, so the next boot
//! runs what the API holds, but no condition asks for a turn.
//! `spec.reboot` in particular is read from the live Machine and Cluster
//! when init is asked to reboot, so it applies at the very next reboot; a
//! reboot made only to apply it would be the disruption it exists to
//! shorten.
//!
//! Everything here is pure: the pass hands in two documents and gets the
//! differences back, and the tests are tables of pairs.

use std::collections::{BTreeMap, BTreeSet};

use liken_api::coordination::{
    K3S_CONFIGURED, KERNEL_ARGS_APPLIED, MODULES_LOADED, NETWORK_CONFIGURED, SYSCTLS_APPLIED,
};
use liken_api::machine::{DisruptionKind, InterfaceSpec, MachineSpec, NetworkSpec, RouteSpec};
use liken_api::{Cluster, RebootVia};

/// How many differences a summary names before it counts the rest.
const SUMMARY_ITEMS: usize = 4;

/// One kind of change between the running documents and the API's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The convergence condition it belongs to.
    pub condition: &'static str,
    /// What applies it.
    pub kind: DisruptionKind,
    /// What changes, for a person, on one line.
    pub summary: String,
}

/// The document-level changes of a Machine: sysctls, modules, kernel
/// arguments and network, in condition order.
pub fn machine_changes(running: &MachineSpec, desired: &MachineSpec) -> Vec<Change> {
    let reboot = |condition, summary| Change {
        condition,
        kind: DisruptionKind::Reboot,
        summary,
    };
    let mut out = Vec::new();
    let sysctls = map_diff(&running.sysctls, &desired.sysctls);
    if !sysctls.is_empty() {
        out.push(reboot(SYSCTLS_APPLIED, summarize("sysctls", sysctls)));
    }
    let modules = list_diff(&running.modules, &desired.modules);
    if !modules.is_empty() {
        out.push(reboot(MODULES_LOADED, summarize("modules", modules)));
    }
    let args = list_diff(&running.kernel_args, &desired.kernel_args);
    if !args.is_empty() {
        out.push(reboot(KERNEL_ARGS_APPLIED, summarize("kernel args", args)));
    }
    let empty = NetworkSpec::default();
    let mut network = Vec::new();
    if running.hostname != desired.hostname {
        network.push(format!(
            "hostname {} → {}",
            running.hostname.as_deref().unwrap_or("unset"),
            desired.hostname.as_deref().unwrap_or("unset")
        ));
    }
    network.extend(network_diff(
        running.network.as_ref().unwrap_or(&empty),
        desired.network.as_ref().unwrap_or(&empty),
    ));
    if !network.is_empty() {
        out.push(reboot(NETWORK_CONFIGURED, summarize("network", network)));
    }
    out
}

/// The Cluster's changes that reach this machine's k3s through the
/// configuration init seeds at boot: endpoint, leaders and features. The
/// target version, the catalog and the budget change nothing on disk.
pub fn cluster_change(running: &Cluster, desired: &Cluster) -> Option<Change> {
    let (r, d) = (&running.spec, &desired.spec);
    let mut items = Vec::new();
    if r.endpoint != d.endpoint {
        items.push(format!("endpoint {} → {}", r.endpoint, d.endpoint));
    }
    if r.leaders != d.leaders {
        items.push(format!(
            "leaders {} → {}",
            or_none(&r.leaders.join(", ")),
            or_none(&d.leaders.join(", "))
        ));
    }
    let slugs: BTreeSet<&String> = r.features.keys().chain(d.features.keys()).collect();
    for slug in slugs {
        match (r.features.get(slug), d.features.get(slug)) {
            (Some(_), None) => items.push(format!("-feature {slug}")),
            (None, Some(_)) => items.push(format!("+feature {slug}")),
            (Some(a), Some(b)) if a != b => items.push(format!("feature {slug} settings")),
            _ => {}
        }
    }
    (!items.is_empty()).then(|| Change {
        condition: K3S_CONFIGURED,
        kind: DisruptionKind::Reboot,
        summary: summarize("cluster", items),
    })
}

/// The Machine's settings that differ ([module docs](self)), for the
/// staging Event: none of them is a [`Change`].
pub fn machine_settings(running: &MachineSpec, desired: &MachineSpec) -> Vec<String> {
    let mut out = Vec::new();
    if running.reboot_policy != desired.reboot_policy {
        out.push(format!(
            "rebootPolicy {} → {}",
            running.reboot_policy.map_or("unset", |p| p.as_str()),
            desired.reboot_policy.map_or("unset", |p| p.as_str())
        ));
    }
    if running.install_disk != desired.install_disk {
        out.push(format!(
            "installDisk {} → {}",
            running.install_disk.as_deref().unwrap_or("unset"),
            desired.install_disk.as_deref().unwrap_or("unset")
        ));
    }
    if running.maintenance != desired.maintenance {
        out.push("maintenance windows".to_owned());
    }
    if let Some(r) = reboot_via_diff(running.reboot, desired.reboot) {
        out.push(r);
    }
    out
}

/// The Cluster's settings that differ ([module docs](self)), for the
/// staging Event: none of them is a [`Change`].
pub fn cluster_settings(running: &Cluster, desired: &Cluster) -> Vec<String> {
    let (r, d) = (&running.spec, &desired.spec);
    let mut out = Vec::new();
    if r.version != d.version {
        out.push(format!(
            "version {} → {}",
            r.version.as_ref().map_or("unset", |v| v.as_str()),
            d.version.as_ref().map_or("unset", |v| v.as_str())
        ));
    }
    if r.releases != d.releases {
        out.push("releases".to_owned());
    }
    if r.disruption_budget != d.disruption_budget {
        out.push("disruptionBudget".to_owned());
    }
    if r.maintenance != d.maintenance {
        out.push("maintenance windows".to_owned());
    }
    if let Some(x) = reboot_via_diff(r.reboot, d.reboot) {
        out.push(x);
    }
    out
}

/// `reboot unset → firmware (from the next reboot)`.
fn reboot_via_diff(old: Option<RebootVia>, new: Option<RebootVia>) -> Option<String> {
    (old != new).then(|| {
        format!(
            "reboot {} → {} (from the next reboot)",
            old.map_or("unset", RebootVia::as_str),
            new.map_or("unset", RebootVia::as_str)
        )
    })
}

/// `label: a, b, c and 2 more`.
pub fn summarize(label: &str, items: Vec<String>) -> String {
    let total = items.len();
    let mut shown: Vec<String> = items.into_iter().take(SUMMARY_ITEMS).collect();
    if total > SUMMARY_ITEMS {
        let rest = total - SUMMARY_ITEMS;
        let last = shown.pop().unwrap_or_default();
        shown.push(format!("{last} and {rest} more"));
    }
    format!("{label}: {}", shown.join(", "))
}

fn or_none(text: &str) -> &str {
    if text.is_empty() { "none" } else { text }
}

/// `key old → new` for each key whose value differs, `unset` standing for
/// an absent side, in key order.
pub fn map_diff(old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> Vec<String> {
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    keys.into_iter()
        .filter_map(|k| {
            let (a, b) = (old.get(k), new.get(k));
            (a != b).then(|| {
                format!(
                    "{k} {} → {}",
                    a.map_or("unset", String::as_str),
                    b.map_or("unset", String::as_str)
                )
            })
        })
        .collect()
}

/// `+item` for what `new` adds, `-item` for what it drops, and
/// `order a b → b a` when only the order changed (modules load, and
/// kernel arguments are read, in order).
pub fn list_diff(old: &[String], new: &[String]) -> Vec<String> {
    let mut out: Vec<String> = new
        .iter()
        .filter(|x| !old.contains(x))
        .map(|x| format!("+{x}"))
        .collect();
    out.extend(
        old.iter()
            .filter(|x| !new.contains(x))
            .map(|x| format!("-{x}")),
    );
    if out.is_empty() && old != new {
        out.push(format!("order {} → {}", old.join(" "), new.join(" ")));
    }
    out
}

/// How a summary names an interface: its name, else its MAC.
fn interface_key(i: &InterfaceSpec) -> String {
    i.name
        .clone()
        .or_else(|| i.mac.as_ref().map(|m| m.to_ascii_lowercase()))
        .unwrap_or_default()
}

fn route_text(r: &RouteSpec) -> String {
    format!("route {} via {}", r.to, r.via)
}

fn describe_interface(i: &InterfaceSpec) -> String {
    let mut parts = Vec::new();
    if i.dhcp {
        parts.push("dhcp".to_owned());
    }
    parts.extend(i.addresses.iter().cloned());
    parts.extend(i.routes.iter().map(route_text));
    if parts.is_empty() {
        interface_key(i)
    } else {
        format!("{} ({})", interface_key(i), parts.join(" "))
    }
}

/// The network's differences, interface by interface.
pub fn network_diff(old: &NetworkSpec, new: &NetworkSpec) -> Vec<String> {
    let mut out = Vec::new();
    for n in &new.interfaces {
        let key = interface_key(n);
        let Some(o) = old.interfaces.iter().find(|o| interface_key(o) == key) else {
            out.push(format!("+{}", describe_interface(n)));
            continue;
        };
        if o.mac != n.mac {
            out.push(format!(
                "{key} mac {} → {}",
                o.mac.as_deref().unwrap_or("unset"),
                n.mac.as_deref().unwrap_or("unset")
            ));
        }
        if o.dhcp != n.dhcp {
            let word = |d: bool| if d { "dhcp" } else { "static" };
            out.push(format!("{key} {} → {}", word(o.dhcp), word(n.dhcp)));
        }
        out.extend(
            list_diff(&o.addresses, &n.addresses)
                .into_iter()
                .map(|d| format!("{key} {d}")),
        );
        let (or, nr): (Vec<String>, Vec<String>) = (
            o.routes.iter().map(route_text).collect(),
            n.routes.iter().map(route_text).collect(),
        );
        out.extend(
            list_diff(&or, &nr)
                .into_iter()
                .map(|d| format!("{key} {d}")),
        );
        if o.mtu != n.mtu {
            let word = |m: Option<u32>| m.map_or_else(|| "default".to_owned(), |m| m.to_string());
            out.push(format!("{key} mtu {} → {}", word(o.mtu), word(n.mtu)));
        }
        if o.slaac() != n.slaac() {
            let word = |s: bool| if s { "on" } else { "off" };
            out.push(format!(
                "{key} slaac {} → {}",
                word(o.slaac()),
                word(n.slaac())
            ));
        }
        if o.dns != n.dns {
            out.push(format!(
                "{key} dns {} → {}",
                or_none(&o.dns.join(" ")),
                or_none(&n.dns.join(" "))
            ));
        }
    }
    for o in &old.interfaces {
        let key = interface_key(o);
        if !new.interfaces.iter().any(|n| interface_key(n) == key) {
            out.push(format!("-{key}"));
        }
    }
    for n in &new.vlans {
        match old.vlans.iter().find(|o| o.name == n.name) {
            None => out.push(format!("+vlan {} (id {} on {})", n.name, n.id, n.parent)),
            Some(o) if o != n => out.push(format!(
                "vlan {} id {} on {} → id {} on {}",
                n.name, o.id, o.parent, n.id, n.parent
            )),
            Some(_) => {}
        }
    }
    for o in &old.vlans {
        if !new.vlans.iter().any(|n| n.name == o.name) {
            out.push(format!("-vlan {}", o.name));
        }
    }
    for n in &new.bonds {
        let describe = |b: &liken_api::machine::BondSpec| {
            format!(
                "{} of {}, miimon {}",
                b.mode.as_str(),
                b.members.join("+"),
                b.miimon()
            )
        };
        match old.bonds.iter().find(|o| o.name == n.name) {
            None => out.push(format!("+bond {} ({})", n.name, describe(n))),
            Some(o) if describe(o) != describe(n) => {
                out.push(format!("bond {} {} → {}", n.name, describe(o), describe(n)));
            }
            Some(_) => {}
        }
    }
    for o in &old.bonds {
        if !new.bonds.iter().any(|n| n.name == o.name) {
            out.push(format!("-bond {}", o.name));
        }
    }
    if old.ntp != new.ntp {
        out.push(format!(
            "ntp {} → {}",
            or_none(&old.ntp.join(" ")),
            or_none(&new.ntp.join(" "))
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::ClusterSpec;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn sysctl_summaries_read_old_to_new() {
        for (old, new, want) in [
            (
                &[("vm.swappiness", "60")][..],
                &[("vm.swappiness", "10")][..],
                "sysctls: vm.swappiness 60 → 10",
            ),
            (
                &[][..],
                &[("net.ipv4.ip_forward", "1")][..],
                "sysctls: net.ipv4.ip_forward unset → 1",
            ),
            (
                &[("a.b", "1"), ("c.d", "2")][..],
                &[("c.d", "2")][..],
                "sysctls: a.b 1 → unset",
            ),
            (
                &[
                    ("a", "1"),
                    ("b", "1"),
                    ("c", "1"),
                    ("d", "1"),
                    ("e", "1"),
                    ("f", "1"),
                ][..],
                &[][..],
                "sysctls: a 1 → unset, b 1 → unset, c 1 → unset, d 1 → unset and 2 more",
            ),
        ] {
            let running = MachineSpec {
                sysctls: map(old),
                ..MachineSpec::default()
            };
            let desired = MachineSpec {
                sysctls: map(new),
                ..MachineSpec::default()
            };
            let changes = machine_changes(&running, &desired);
            assert_eq!(changes.len(), 1, "{want}");
            assert_eq!(changes[0].summary, want);
            assert_eq!(changes[0].condition, SYSCTLS_APPLIED);
            assert_eq!(changes[0].kind, DisruptionKind::Reboot);
        }
    }

    #[test]
    fn lists_say_what_is_added_removed_or_reordered() {
        for (old, new, want) in [
            (&["a"][..], &["a", "b"][..], &["+b"][..]),
            (&["a", "b"][..], &["b"][..], &["-a"][..]),
            (&["a", "b"][..], &["b", "c"][..], &["+c", "-a"][..]),
            (&["a", "b"][..], &["b", "a"][..], &["order a b → b a"][..]),
            (&["a"][..], &["a"][..], &[][..]),
        ] {
            assert_eq!(
                list_diff(&strings(old), &strings(new)),
                strings(want),
                "{old:?} {new:?}"
            );
        }
        let running = MachineSpec {
            modules: strings(&["br_netfilter"]),
            kernel_args: strings(&["quiet"]),
            ..MachineSpec::default()
        };
        let desired = MachineSpec {
            modules: strings(&["br_netfilter", "wireguard"]),
            kernel_args: strings(&[]),
            ..MachineSpec::default()
        };
        let got: Vec<(&str, String)> = machine_changes(&running, &desired)
            .into_iter()
            .map(|c| (c.condition, c.summary))
            .collect();
        assert_eq!(
            got,
            [
                (MODULES_LOADED, "modules: +wireguard".to_owned()),
                (KERNEL_ARGS_APPLIED, "kernel args: -quiet".to_owned()),
            ]
        );
    }

    fn iface(name: &str, dhcp: bool, addresses: &[&str]) -> InterfaceSpec {
        InterfaceSpec {
            name: Some(name.into()),
            dhcp,
            addresses: strings(addresses),
            ..InterfaceSpec::default()
        }
    }

    #[test]
    fn network_summaries_name_the_interface() {
        let old = NetworkSpec {
            interfaces: vec![
                iface("eth0", true, &[]),
                iface("eth1", false, &["10.0.0.5/24"]),
            ],
            ntp: strings(&["pool.ntp.org"]),
            ..NetworkSpec::default()
        };
        let mut new = old.clone();
        new.interfaces[1].addresses = strings(&["10.0.0.6/24"]);
        new.interfaces[1].routes = vec![RouteSpec {
            to: "10.1.0.0/16".into(),
            via: "10.0.0.1".into(),
        }];
        new.interfaces[0].dhcp = false;
        new.interfaces[0].addresses = strings(&["192.168.1.2/24"]);
        new.interfaces.push(iface("eth2", true, &[]));
        new.ntp.clear();
        assert_eq!(
            network_diff(&old, &new),
            strings(&[
                "eth0 dhcp → static",
                "eth0 +192.168.1.2/24",
                // slaac follows dhcp when the spec does not set it.
                "eth0 slaac on → off",
                "eth1 +10.0.0.6/24",
                "eth1 -10.0.0.5/24",
                "eth1 +route 10.1.0.0/16 via 10.0.0.1",
                "+eth2 (dhcp)",
                "ntp pool.ntp.org → none",
            ])
        );
        let mut gone = old.clone();
        gone.interfaces.remove(1);
        assert_eq!(network_diff(&old, &gone), strings(&["-eth1"]));
        assert!(network_diff(&old, &old).is_empty());

        let running = MachineSpec {
            network: Some(old),
            ..MachineSpec::default()
        };
        let change = &machine_changes(&running, &MachineSpec::default())[0];
        assert_eq!(change.condition, NETWORK_CONFIGURED);
        assert_eq!(
            change.summary,
            "network: -eth0, -eth1, ntp pool.ntp.org → none"
        );
    }

    #[test]
    fn vlans_bonds_and_mtu_read_as_a_person_would_say_them() {
        use liken_api::machine::{BondMode, BondSpec, VlanSpec};
        let old = NetworkSpec {
            interfaces: vec![iface("eth0", true, &[])],
            bonds: vec![BondSpec {
                name: "bond0".into(),
                members: strings(&["eth1", "eth2"]),
                mode: BondMode::ActiveBackup,
                miimon: None,
            }],
            ..NetworkSpec::default()
        };
        let mut new = old.clone();
        new.interfaces[0].mtu = Some(9000);
        new.bonds[0].mode = BondMode::Lacp;
        new.vlans.push(VlanSpec {
            name: "bond0.42".into(),
            parent: "bond0".into(),
            id: 42,
        });
        assert_eq!(
            network_diff(&old, &new),
            strings(&[
                "eth0 mtu default → 9000",
                "+vlan bond0.42 (id 42 on bond0)",
                "bond bond0 active-backup of eth1+eth2, miimon 100 → 802.3ad of eth1+eth2, miimon 100",
            ])
        );
        new.bonds.clear();
        assert!(network_diff(&old, &new).contains(&"-bond bond0".to_owned()));
    }

    #[test]
    fn cluster_changes_that_reach_k3s_and_those_that_do_not() {
        let spec = ClusterSpec {
            endpoint: "https://10.0.0.10:6443".into(),
            leaders: strings(&["a"]),
            ..ClusterSpec::default()
        };
        let running = Cluster::new("home", spec);
        let mut desired = running.clone();
        desired.spec.version = Some(liken_api::Version::parse("2026.12.02-001").unwrap());
        desired.spec.disruption_budget = Some(Default::default());
        assert_eq!(cluster_change(&running, &desired), None);

        desired.spec.leaders.push("b".into());
        desired.spec.features.insert("flux".into(), None);
        let change = cluster_change(&running, &desired).unwrap();
        assert_eq!(change.condition, K3S_CONFIGURED);
        assert_eq!(change.kind, DisruptionKind::Reboot);
        assert_eq!(change.summary, "cluster: leaders a → a, b, +feature flux");
    }

    #[test]
    fn the_way_a_reboot_is_made_is_a_setting_never_a_disruption() {
        use liken_api::RebootPolicy;
        use liken_api::RebootVia::{Firmware, Kexec};

        // The Machine: spec.reboot alone (set, switched, unset) is no
        // change of any kind, only a setting the staging Event names.
        for (old, new, want) in [
            (
                None,
                Some(Firmware),
                "reboot unset → firmware (from the next reboot)",
            ),
            (
                Some(Firmware),
                Some(Kexec),
                "reboot firmware → kexec (from the next reboot)",
            ),
            (
                Some(Kexec),
                None,
                "reboot kexec → unset (from the next reboot)",
            ),
        ] {
            let running = MachineSpec {
                reboot: old,
                ..MachineSpec::default()
            };
            let desired = MachineSpec {
                reboot: new,
                ..MachineSpec::default()
            };
            assert_eq!(machine_changes(&running, &desired), [], "{want}");
            assert_eq!(machine_settings(&running, &desired), [want]);
        }
        // Beside a real change it stays a setting: the change alone is
        // the disruption.
        let running = MachineSpec::default();
        let desired = MachineSpec {
            reboot: Some(Firmware),
            reboot_policy: Some(RebootPolicy::Manual),
            sysctls: map(&[("vm.swappiness", "10")]),
            ..MachineSpec::default()
        };
        let changes = machine_changes(&running, &desired);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].condition, SYSCTLS_APPLIED);
        assert_eq!(
            machine_settings(&running, &desired),
            [
                "rebootPolicy unset → Manual",
                "reboot unset → firmware (from the next reboot)"
            ]
        );
        assert!(machine_settings(&desired, &desired).is_empty());

        // The Cluster: the same.
        let running = Cluster::new(
            "home",
            ClusterSpec {
                endpoint: "https://10.0.0.10:6443".into(),
                leaders: strings(&["a"]),
                ..ClusterSpec::default()
            },
        );
        let mut desired = running.clone();
        desired.spec.reboot = Some(Firmware);
        assert_eq!(cluster_change(&running, &desired), None);
        assert_eq!(
            cluster_settings(&running, &desired),
            ["reboot unset → firmware (from the next reboot)"]
        );
        desired.spec.version = Some(liken_api::Version::parse("2026.12.02-001").unwrap());
        assert_eq!(
            cluster_settings(&running, &desired),
            [
                "version unset → 2026.12.02-001",
                "reboot unset → firmware (from the next reboot)"
            ]
        );
        assert!(cluster_settings(&running, &running).is_empty());
    }
}
