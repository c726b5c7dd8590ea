//! The pod network's CNI configuration.
//!
//! k3s runs flannel in-process: it waits for the Node's `spec.podCIDR`
//! (kube-controller-manager allocates it from `--cluster-cidr`,
//! 10.42.0.0/16 by default) and writes
//! `agent/etc/cni/net.d/10-flannel.conflist` (k3s-io/k3s
//! pkg/agent/flannel/setup.go: network `cbr0`, the flannel plugin,
//! delegating to `bridge` on `cni0` with hairpin mode, forced address and
//! default gateway, then `portmap`). flannel is not among the parts
//! built here, so the launcher writes what flannel delegates to for a
//! single node's subnet: `bridge` on `cni0` with `host-local` addresses
//! from the Node's podCIDR, then `portmap`. Pods on different machines
//! do not reach each other through it (no VXLAN); containerd's CRI
//! reports the network ready once the file is there, as it does for
//! flannel's.

/// The file's name (not flannel's: this is not flannel's network).
pub const FILE: &str = "10-liken-upstream-bridge.conflist";

/// The conflist for a node whose Node has `pod_cidr`.
pub fn render(pod_cidr: &str) -> String {
    serde_json::json!({
        "name": "cbr0",
        "cniVersion": "1.0.0",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isDefaultGateway": true,
                "hairpinMode": true,
                "forceAddress": true,
                "ipMasq": true,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr}]]},
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
        ],
    })
    .to_string()
}

/// Whether `text` is a CIDR the conflist can take (an IPv4 subnet).
pub fn decide_cidr(text: &str) -> Option<String> {
    let t = text.trim();
    let (ip, len) = t.split_once('/')?;
    ip.parse::<std::net::Ipv4Addr>().ok()?;
    (len.parse::<u8>().ok()? <= 32).then(|| t.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bridge_on_the_nodes_subnet() {
        let v: serde_json::Value = serde_json::from_str(&render("10.42.1.0/24")).unwrap();
        assert_eq!(v["name"], "cbr0");
        assert_eq!(v["plugins"][0]["bridge"], "cni0");
        assert_eq!(
            v["plugins"][0]["ipam"]["ranges"][0][0]["subnet"],
            "10.42.1.0/24"
        );
        assert_eq!(v["plugins"][1]["type"], "portmap");
    }

    #[test]
    fn cidrs() {
        assert_eq!(
            decide_cidr("10.42.0.0/24\n").as_deref(),
            Some("10.42.0.0/24")
        );
        assert_eq!(decide_cidr(""), None);
        assert_eq!(decide_cidr("10.42.0.0"), None);
        assert_eq!(decide_cidr("fd00::/64"), None);
    }
}
