//! The kernel modules and sysctls k3s's agent sets up before it starts
//! containerd (k3s-io/k3s pkg/agent/syssetup/setup.go, `Configure`,
//! called from pkg/agent/run.go).
//!
//! Modules: overlay, nf_conntrack, br_netfilter, iptable_nat,
//! iptable_filter and the nftables pieces iptables-nft needs
//! (`nft-expr-counter`, `nfnetlink-subsys-11`, `nft-chain-2-nat`), each
//! through `modprobe` unless /sys/module already lists it; a failure is
//! a warning, as in k3s. Sysctls (`kernelSysctls`): IPv4 forwarding on
//! `all` and `default`, and `bridge-nf-call-iptables`, which kube-proxy
//! and the pod bridge need; the IPv6 ones only for an IPv6 node, and no
//! conntrack limits, since k3s passes kube-proxy none
//! (`--conntrack-max-per-core=0` and zero timeouts).

use std::path::Path;
use std::process::Command;

use super::console::say;

/// The modules k3s loads, in its order.
pub const MODULES: &[&str] = &[
    "overlay",
    "nf_conntrack",
    "br_netfilter",
    "iptable_nat",
    "iptable_filter",
    "nft-expr-counter",
    "nfnetlink-subsys-11",
    "nft-chain-2-nat",
];

/// The sysctls k3s sets for an IPv4 node, below /proc/sys.
pub const SYSCTLS: &[(&str, &str)] = &[
    ("net/ipv4/conf/all/forwarding", "1"),
    ("net/ipv4/conf/default/forwarding", "1"),
    ("net/bridge/bridge-nf-call-iptables", "1"),
];

/// The sysctls to write: those whose current value (`read`) differs.
pub fn decide_sysctls(read: impl Fn(&str) -> Option<String>) -> Vec<(&'static str, &'static str)> {
    SYSCTLS
        .iter()
        .filter(|(k, v)| read(k).as_deref().map(str::trim) != Some(*v))
        .copied()
        .collect()
}

/// Loads the modules and sets the sysctls (see the module docs); says
/// what it did and what failed, and goes on either way.
pub fn configure(path: &str) {
    let mut loaded = Vec::new();
    for m in MODULES {
        if Path::new("/sys/module").join(m).exists() {
            continue;
        }
        match Command::new("modprobe")
            .env("PATH", path)
            .args(["--", m])
            .output()
        {
            Ok(o) if o.status.success() => loaded.push(*m),
            Ok(o) => say(&format!(
                "warning: modprobe {m} failed ({}): {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => say(&format!("warning: cannot run modprobe for {m}: {e}")),
        }
    }
    let proc_sys = Path::new("/proc/sys");
    let writes = decide_sysctls(|k| std::fs::read_to_string(proc_sys.join(k)).ok());
    let mut set = Vec::new();
    for (k, v) in &writes {
        match std::fs::write(proc_sys.join(k), v) {
            Ok(()) => set.push(format!("{}={v}", k.replace('/', "."))),
            Err(e) => say(&format!("warning: cannot set sysctl {k} to {v}: {e}")),
        }
    }
    say(&format!(
        "k3s's host setup: modules loaded now: {}; sysctls set now: {}",
        if loaded.is_empty() {
            "none (all there)".to_owned()
        } else {
            loaded.join(", ")
        },
        if set.is_empty() {
            "none (all set)".to_owned()
        } else {
            set.join(", ")
        }
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_differs_is_written() {
        let all = decide_sysctls(|_| None);
        assert_eq!(all.len(), 3);
        let none = decide_sysctls(|_| Some("1\n".into()));
        assert!(none.is_empty());
        let some = decide_sysctls(|k| (k == "net/ipv4/conf/all/forwarding").then(|| "1".into()));
        assert_eq!(
            some,
            [
                ("net/ipv4/conf/default/forwarding", "1"),
                ("net/bridge/bridge-nf-call-iptables", "1")
            ]
        );
    }
}
