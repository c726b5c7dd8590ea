//! The stand-in's view of the network, for the QEMU tests
//! (`liken.standin=net:<targets>`): what a program on the machine sees,
//! read from the kernel's own files (/proc, /sys) and the C library's
//! getifaddrs, none of which liken-init's code takes part in, so a
//! test that asserts on it checks init's work rather than init's
//! report of it.
//!
//! A snapshot is one JSON line, `liken-standin-k3s: network {...}`:
//! hostname, resolv.conf as written, every link (MTU, operstate,
//! carrier, MAC, bond master, addresses of both families), the IPv4
//! and IPv6 main routes as `ip route` would word them, each bond's
//! mode, interval, active member and members, each VLAN's id and
//! parent, and the sysctls the Machine document names plus each link's
//! IPv6 router advertisement settings, and the clock to the minute. A
//! new line is printed whenever
//! the snapshot changes (polled every half second), so a test sees a
//! renewal move an address or a bond fail over.
//!
//! It also prints init's own account, /run/liken/facts/network.json, as
//! `liken-standin-k3s: facts {...}` whenever that file changes, so a
//! test can hold init's published facts against what the kernel shows.
//!
//! Every second it also sends a UDP datagram to each target
//! (`10.77.0.1:7001`, `[fd77::1]:7001`), carrying the hostname, so a
//! test proves reachability by a packet that arrives, from the source
//! address the kernel chose.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use liken_api::{Machine, decode};
use serde_json::{Value, json};

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|t| t.trim().to_owned())
}

/// An IPv6 address as /proc writes it (32 hex digits), in the usual form.
fn v6(hex: &str) -> String {
    u128::from_str_radix(hex, 16)
        .map(|n| std::net::Ipv6Addr::from(n).to_string())
        .unwrap_or_else(|_| hex.to_owned())
}

/// An IPv4 address as /proc/net/route writes it (little-endian hex).
fn v4(hex: &str) -> String {
    u32::from_str_radix(hex, 16)
        .map(|n| std::net::Ipv4Addr::from(n.to_le_bytes()).to_string())
        .unwrap_or_else(|_| hex.to_owned())
}

fn addresses() -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Ok(ifaddrs) = nix::ifaddrs::getifaddrs() {
        for i in ifaddrs {
            let (Some(a), Some(m)) = (i.address, i.netmask) else {
                continue;
            };
            if let (Some(a), Some(m)) = (a.as_sockaddr_in(), m.as_sockaddr_in()) {
                let prefix = m.ip().to_bits().leading_ones();
                out.entry(i.interface_name)
                    .or_default()
                    .push(format!("{}/{prefix}", a.ip()));
            }
        }
    }
    // /proc/net/if_inet6: address, index, prefix (hex), scope, flags, name.
    for line in read("/proc/net/if_inet6").lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [addr, _, prefix, _, flags, name] = f[..] {
            let prefix = u8::from_str_radix(prefix, 16).unwrap_or(0);
            let tentative = u8::from_str_radix(flags, 16).unwrap_or(0) & 0x40 != 0;
            out.entry(name.to_owned()).or_default().push(format!(
                "{}/{prefix}{}",
                v6(addr),
                if tentative { " tentative" } else { "" }
            ));
        }
    }
    out
}

fn routes4() -> Vec<String> {
    read("/proc/net/route")
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (dev, dst, gw, mask) = (f.first()?, f.get(1)?, f.get(2)?, f.get(7)?);
            let prefix = u32::from_str_radix(mask, 16).ok()?.count_ones();
            let via = if *gw == "00000000" {
                String::new()
            } else {
                format!(" via {}", v4(gw))
            };
            Some(format!("{}/{prefix}{via} dev {dev}", v4(dst)))
        })
        .collect()
}

fn routes6() -> Vec<String> {
    // dst, dst len, src, src len, gateway, metric, refcnt, use, flags, dev.
    read("/proc/net/ipv6_route")
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (dst, len, gw, flags, dev) =
                (f.first()?, f.get(1)?, f.get(4)?, f.get(8)?, f.get(9)?);
            let flags = u32::from_str_radix(flags, 16).ok()?;
            // Skip the local table's entries (RTF_LOCAL), multicast,
            // link-local and what the loopback holds.
            let dst = v6(dst);
            if flags & 0x8000_0000 != 0
                || *dev == "lo"
                || dst.starts_with("ff")
                || dst.starts_with("fe80")
            {
                return None;
            }
            let len = u8::from_str_radix(len, 16).ok()?;
            let via = if gw.chars().all(|c| c == '0') {
                String::new()
            } else {
                format!(" via {}", v6(gw))
            };
            Some(format!("{dst}/{len}{via} dev {dev}"))
        })
        .collect()
}

/// The sysctls the running Machine document names, as /proc/sys has
/// them now.
fn sysctls(links: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let text = read("/run/liken/documents/machine.yaml");
    if let Ok(m) = decode::strict::<Machine>(&text, "machine.yaml") {
        for key in m.spec.sysctls.keys() {
            let path = format!("/proc/sys/{}", key.replace('.', "/"));
            out.insert(key.clone(), trimmed(&path).unwrap_or_else(|| "?".into()));
        }
    }
    for l in links {
        for k in ["accept_ra", "autoconf"] {
            if let Some(v) = trimmed(&format!("/proc/sys/net/ipv6/conf/{l}/{k}")) {
                out.insert(format!("net.ipv6.conf.{l}.{k}"), v);
            }
        }
    }
    out
}

fn snapshot() -> Value {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let mut addrs = addresses();
    let links: Vec<Value> = names
        .iter()
        .map(|n| {
            let sys = format!("/sys/class/net/{n}");
            let master = std::fs::read_link(format!("{sys}/master"))
                .ok()
                .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()));
            json!({
                "name": n,
                "mtu": trimmed(&format!("{sys}/mtu")),
                "state": trimmed(&format!("{sys}/operstate")),
                "carrier": trimmed(&format!("{sys}/carrier")),
                "mac": trimmed(&format!("{sys}/address")),
                "master": master,
                "addresses": addrs.remove(n).unwrap_or_default(),
            })
        })
        .collect();
    let bonds: Vec<Value> = names
        .iter()
        .filter(|n| std::path::Path::new(&format!("/sys/class/net/{n}/bonding")).exists())
        .map(|n| {
            let b = |f: &str| trimmed(&format!("/sys/class/net/{n}/bonding/{f}"));
            json!({
                "name": n,
                "mode": b("mode"),
                "miimon": b("miimon"),
                "active": b("active_slave"),
                "members": b("slaves"),
            })
        })
        .collect();
    // /proc/net/vlan/config: "name | id | parent" after two header lines.
    let vlans: Vec<String> = read("/proc/net/vlan/config")
        .lines()
        .skip(2)
        .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>().join(" "))
        .collect();
    json!({
        "hostname": trimmed("/proc/sys/kernel/hostname"),
        "resolvConf": read("/etc/resolv.conf"),
        "links": links,
        "routes": routes4(),
        "routes6": routes6(),
        "bonds": bonds,
        "vlans": vlans,
        "sysctls": sysctls(&names),
        // Minutes, so the snapshot changes once a minute, not every poll.
        "clockMinute": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() / 60),
    })
}

/// Prints a snapshot whenever it changes and sends a datagram to each
/// target every second; never returns.
pub fn watch(targets: &str, say: &dyn Fn(&str)) -> ! {
    let targets: Vec<SocketAddr> = targets.split(',').filter_map(|t| t.parse().ok()).collect();
    let v4 = UdpSocket::bind("0.0.0.0:0").ok();
    let v6 = UdpSocket::bind("[::]:0").ok();
    let mut last = String::new();
    let mut last_facts = String::new();
    let mut sent = Instant::now()
        .checked_sub(Duration::from_secs(2))
        .unwrap_or_else(Instant::now);
    let mut seq = 0u64;
    loop {
        let now = serde_json::to_string(&snapshot()).unwrap_or_default();
        if now != last {
            say(&format!("network {now}"));
            last = now;
        }
        let facts = read("/run/liken/facts/network.json");
        if facts != last_facts {
            let compact = serde_json::from_str::<Value>(&facts)
                .map(|v| v.to_string())
                .unwrap_or_else(|e| format!("unreadable: {e}"));
            say(&format!("facts {compact}"));
            last_facts = facts;
        }
        if sent.elapsed() >= Duration::from_secs(1) {
            sent = Instant::now();
            seq += 1;
            let host = trimmed("/proc/sys/kernel/hostname").unwrap_or_default();
            let payload = format!("liken-standin-k3s {host} {seq}");
            for t in &targets {
                let socket = if t.is_ipv4() { &v4 } else { &v6 };
                if let Some(s) = socket {
                    let _ = s.send_to(payload.as_bytes(), t);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
