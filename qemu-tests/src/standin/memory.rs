//! The stand-in's watch on init's memory across DHCP renewals, for the
//! lease benchmark (`liken.standin=lease-memory:<n>,<n>,...`,
//! qemu-tests/src/bin/liken-bench-lease.rs).
//!
//! It follows the lease's renewal count in init's published facts
//! (/run/liken/facts/network.json), and prints init's memory as the kernel
//! reports it (/proc/1/status), once as soon as the first lease is bound
//! and once as the count reaches each `<n>`:
//! `liken-standin-k3s: init memory {"renewals":..,"vmRssKb":..,...}`,
//! then `liken-standin-k3s: init memory done`. The figures come from the
//! kernel, not from init: reading /proc/1 makes init do nothing.

use std::time::Duration;

use serde_json::{Value, json};

/// How often the facts are read: well under the shortest T1 a bench
/// gives (seconds), so each figure is taken just after its renewal.
const POLL: Duration = Duration::from_millis(50);

/// The first lease's renewal count and state in network.json.
fn lease() -> Option<(u64, String)> {
    let text = std::fs::read_to_string("/run/liken/facts/network.json").ok()?;
    let facts: Value = serde_json::from_str(&text).ok()?;
    let lease = facts.get("leases")?.get(0)?;
    let state = lease.get("state")?.as_str()?.to_owned();
    Some((lease.get("renewals")?.as_u64()?, state))
}

/// The `<key>: <n> kB` figures of /proc/1/status.
fn status_kb(keys: &[&str]) -> Vec<Option<u64>> {
    let status = std::fs::read_to_string("/proc/1/status").unwrap_or_default();
    keys.iter()
        .map(|k| {
            status.lines().find_map(|l| {
                let rest = l.strip_prefix(k)?.strip_prefix(':')?;
                rest.split_whitespace().next()?.parse().ok()
            })
        })
        .collect()
}

/// init's memory now, with the renewal count and state it follows:
/// the resident set (VmRSS), its anonymous part (RssAnon: the heap,
/// malloc's arenas and thread stacks as far as touched), and the
/// private writable address space (VmData: what the heap and arenas
/// have committed, touched or not).
fn figures(renewals: u64, state: &str) -> Value {
    let kb = status_kb(&["VmRSS", "RssAnon", "VmData", "Threads"]);
    json!({
        "renewals": renewals,
        "state": state,
        "vmRssKb": kb[0],
        "rssAnonKb": kb[1],
        "vmDataKb": kb[2],
        // Threads is a count, read the same way.
        "threads": kb[3],
    })
}

/// Prints init's memory at the first bound lease and at each renewal
/// count in `checkpoints` (comma-separated), then stays up.
pub fn watch(checkpoints: &str, say: &dyn Fn(&str)) -> ! {
    let mut left: Vec<u64> = checkpoints
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    left.sort_unstable();
    left.reverse();
    let mut bound = false;
    loop {
        if let Some((renewals, state)) = lease() {
            let due = !bound && state == "bound" || left.last().is_some_and(|n| renewals >= *n);
            if due {
                say(&format!("init memory {}", figures(renewals, &state)));
                bound = true;
                while left.last().is_some_and(|n| renewals >= *n) {
                    left.pop();
                }
                if left.is_empty() {
                    say("init memory done");
                    loop {
                        std::thread::sleep(Duration::from_secs(3600));
                    }
                }
            }
        }
        std::thread::sleep(POLL);
    }
}
