//! Every watch event of the Machines, the Cluster and the Nodes for a
//! whole test, recorded as it arrives, so a test judges the rollout from
//! what the apiserver said happened rather than from samples.
//!
//! Three watchers (liken-kube's, listing first, resuming and relisting
//! as any watcher does) feed one log of [`Record`]s, each with the time
//! it arrived and the object as the apiserver sent it. The Machines
//! arrive on one stream, in resourceVersion order, so per-machine states
//! replayed from it are the order the apiserver stored them.
//!
//! A judgment from a history with a hole in it proves nothing, so each
//! watcher's LISTs are logged ([`WatchLog`]): one, the first, is the
//! whole history's start; a second means its watch lost its place (410
//! Gone, or a failed LIST) and what changed in between is unknown
//! ([`decide_complete`]).
//!
//! The Nodes are what the downtime judge ([`super::downtime`]) reads
//! besides the consoles: `status.nodeInfo.bootID`, posted by the node's
//! kubelet (here the stand-in) and written by no liken operator, and
//! `spec.unschedulable`, whose cordons a turn must lift
//! ([`decide_cordons`]).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use liken_kube::request::{CLUSTERS, MACHINES, NODES};
use liken_kube::{Api, Client, DynamicObject, Event, StopHandle, Watcher};
use serde_json::Value;

use super::downtime::Sign;

/// One event.
#[derive(Clone, Debug)]
pub struct Record {
    /// When it arrived.
    pub at: Instant,
    /// `Machine`, `Cluster` or `Node`.
    pub kind: &'static str,
    /// `ADDED`/`MODIFIED` (applied), `DELETED`, or `LISTED` (a relist's
    /// item).
    pub event: &'static str,
    /// The object.
    pub object: Value,
}

/// One watcher's LISTs and what it could not read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchLog {
    /// The kind it watches.
    pub kind: &'static str,
    /// When each of its LISTs arrived (the first included).
    pub lists: Vec<Instant>,
    /// Objects it could not decode.
    pub unreadable: u32,
}

/// Why the history is not whole, one line per watcher at fault; empty
/// when every watcher listed exactly once (its start) and read every
/// object since.
pub fn decide_complete(logs: &[WatchLog]) -> Vec<String> {
    let mut out = Vec::new();
    for w in logs {
        match w.lists.len() {
            1 => {}
            0 => out.push(format!("the {} watch never listed", w.kind)),
            n => out.push(format!(
                "the {} watch listed {n} times (at {}): it lost its place {} time(s), and what \
                 changed in between is not in the history",
                w.kind,
                w.lists
                    .iter()
                    .map(|t| super::progress::clock(*t))
                    .collect::<Vec<_>>()
                    .join(", "),
                n - 1
            )),
        }
        if w.unreadable > 0 {
            out.push(format!(
                "the {} watch could not read {} object(s)",
                w.kind, w.unreadable
            ));
        }
    }
    out
}

/// The recorder.
pub struct History {
    records: Arc<Mutex<Vec<Record>>>,
    watches: Arc<Mutex<Vec<WatchLog>>>,
    stops: Vec<StopHandle>,
}

impl History {
    /// Starts watching Machines, Clusters and Nodes as `client`.
    pub fn start(client: &Client) -> History {
        let records = Arc::new(Mutex::new(Vec::new()));
        let kinds = [
            ("Machine", MACHINES),
            ("Cluster", CLUSTERS),
            ("Node", NODES),
        ];
        let watches = Arc::new(Mutex::new(
            kinds
                .iter()
                .map(|(kind, _)| WatchLog {
                    kind,
                    ..WatchLog::default()
                })
                .collect::<Vec<_>>(),
        ));
        let mut stops = Vec::new();
        for (i, (kind, resource)) in kinds.into_iter().enumerate() {
            let mut watcher = Watcher::<DynamicObject>::new(client.clone(), Api::all(resource));
            stops.push(watcher.stopper());
            let records = Arc::clone(&records);
            let watches = Arc::clone(&watches);
            std::thread::spawn(move || {
                watcher.run(&mut |e| {
                    let at = Instant::now();
                    let log = |f: &dyn Fn(&mut WatchLog)| {
                        if let Ok(mut w) = watches.lock()
                            && let Some(w) = w.get_mut(i)
                        {
                            f(w);
                        }
                    };
                    let push = |event: &'static str, o: DynamicObject| {
                        if let Ok(mut r) = records.lock() {
                            r.push(Record {
                                at,
                                kind,
                                event,
                                object: o.0,
                            });
                        }
                    };
                    match e {
                        Event::Restarted(all) => {
                            log(&|w| w.lists.push(at));
                            for o in all {
                                push("LISTED", o);
                            }
                        }
                        Event::Applied(o) => push("APPLIED", o),
                        Event::Deleted(o) => push("DELETED", o),
                        Event::Unreadable(_) => log(&|w| w.unreadable += 1),
                    }
                });
            });
        }
        History {
            records,
            watches,
            stops,
        }
    }

    /// Each watcher's LISTs so far.
    pub fn watches(&self) -> Vec<WatchLog> {
        self.watches.lock().map(|w| w.clone()).unwrap_or_default()
    }

    /// Every record so far.
    pub fn records(&self) -> Vec<Record> {
        self.records.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// How many records so far (a mark for [`History::since`]).
    pub fn len(&self) -> usize {
        self.records.lock().map(|r| r.len()).unwrap_or(0)
    }

    /// Whether nothing was recorded yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records from `mark` on.
    pub fn since(&self, mark: usize) -> Vec<Record> {
        self.records
            .lock()
            .map(|r| r.iter().skip(mark).cloned().collect())
            .unwrap_or_default()
    }
}

impl Drop for History {
    fn drop(&mut self) {
        for s in &self.stops {
            s.stop();
        }
    }
}

/// When `machine` was first granted a reboot turn within `[from, to]`:
/// the first record there showing RebootApproved True after one that
/// did not (or as its first record), so a grant held since before the
/// window is not a new one.
pub fn granted_at(
    records: &[Record],
    machine: &str,
    from: Instant,
    to: Instant,
) -> Option<Instant> {
    let mut held = false;
    for r in records
        .iter()
        .filter(|r| r.kind == "Machine" && r.at <= to)
        .filter(|r| r.object["metadata"]["name"] == machine)
    {
        let now = r.event != "DELETED"
            && r.object["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["type"] == liken_api::coordination::REBOOT_APPROVED && c["status"] == "True"
                });
        if now && !held && r.at >= from {
            return Some(r.at);
        }
        held = now;
    }
    None
}

/// Node `name`'s bootID and readiness at each of its records, as signs
/// for the downtime judge (records without a bootID are left out).
pub fn node_signs(records: &[Record], name: &str) -> Vec<(Instant, Sign)> {
    records
        .iter()
        .filter(|r| r.kind == "Node" && r.event != "DELETED")
        .filter(|r| r.object["metadata"]["name"] == name)
        .filter_map(|r| {
            let s = &r.object["status"];
            let boot_id = s["nodeInfo"]["bootID"].as_str().filter(|b| !b.is_empty())?;
            let ready = s["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            Some((
                r.at,
                Sign::Node {
                    boot_id: boot_id.to_owned(),
                    ready,
                },
            ))
        })
        .collect()
}

/// The Nodes' cordons in a history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cordons {
    /// How many times each Node was cordoned (went unschedulable).
    pub cordoned: std::collections::BTreeMap<String, u32>,
    /// The Nodes unschedulable in their last record.
    pub still: Vec<String>,
}

/// Replays the Node records: how often each was cordoned, and which are
/// cordoned still.
pub fn decide_cordons(records: &[Record]) -> Cordons {
    let mut now: std::collections::BTreeMap<String, bool> = Default::default();
    let mut out = Cordons::default();
    for r in records.iter().filter(|r| r.kind == "Node") {
        let Some(name) = r.object["metadata"]["name"].as_str() else {
            continue;
        };
        let cordoned = r.event != "DELETED" && r.object["spec"]["unschedulable"] == true;
        let was = now.insert(name.to_owned(), cordoned).unwrap_or(false);
        if cordoned && !was {
            *out.cordoned.entry(name.to_owned()).or_default() += 1;
        }
    }
    out.still = now
        .into_iter()
        .filter(|(_, c)| *c)
        .map(|(n, _)| n)
        .collect();
    out
}

/// Whether a Machine (its JSON) is disrupted by a reboot turn: it holds
/// a grant (RebootApproved True), uses one (a convergence condition
/// Draining, DrainBlocked, Rebooting, Restarting or OnTrial), or its phase is one
/// the budget counts as unavailable (Updating, Booting, Lost).
pub fn disrupted(machine: &Value) -> Option<String> {
    use liken_api::coordination::{self, reason};
    let phase = machine["status"]["phase"].as_str().unwrap_or("");
    if matches!(phase, "Updating" | "Booting" | "Lost") {
        return Some(format!("phase {phase}"));
    }
    for c in machine["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let (kind, status, why) = (
            c["type"].as_str().unwrap_or(""),
            c["status"].as_str().unwrap_or(""),
            c["reason"].as_str().unwrap_or(""),
        );
        if kind == coordination::REBOOT_APPROVED && status == "True" {
            return Some("holds a reboot turn".into());
        }
        if [
            reason::DRAINING,
            reason::DRAIN_BLOCKED,
            reason::REBOOTING,
            reason::RESTARTING,
            reason::ON_TRIAL,
        ]
        .contains(&why)
        {
            return Some(format!("{kind} {why}"));
        }
    }
    None
}

/// Replays the Machine records in order and returns every moment two
/// or more machines were disrupted at once ([`disrupted`]): the
/// machines and why, one line per moment.
pub fn overlapping_disruptions(records: &[Record]) -> Vec<String> {
    let mut now: std::collections::BTreeMap<String, String> = Default::default();
    let mut out = Vec::new();
    for r in records.iter().filter(|r| r.kind == "Machine") {
        let name = r.object["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let rv = r.object["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("");
        match (r.event, disrupted(&r.object)) {
            ("DELETED", _) | (_, None) => {
                now.remove(&name);
            }
            (_, Some(why)) => {
                now.insert(name, why);
            }
        }
        if now.len() > 1 {
            out.push(format!(
                "at resourceVersion {rv}: {}",
                now.iter()
                    .map(|(m, w)| format!("{m} ({w})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rec(name: &str, rv: u32, phase: &str, conditions: Value) -> Record {
        Record {
            at: Instant::now(),
            kind: "Machine",
            event: "APPLIED",
            object: json!({"metadata": {"name": name, "resourceVersion": rv.to_string()},
                           "status": {"phase": phase, "conditions": conditions}}),
        }
    }

    #[test]
    fn overlaps_are_found_in_order() {
        let granted = json!([{"type": "RebootApproved", "status": "True"}]);
        let draining = json!([{"type": "ReleaseCurrent", "status": "False", "reason": "Draining"}]);
        let none = json!([]);
        let one_at_a_time = [
            rec("a", 1, "Ready", granted.clone()),
            rec("a", 2, "Updating", draining.clone()),
            rec("a", 3, "Ready", none.clone()),
            rec("b", 4, "Ready", granted.clone()),
            rec("b", 5, "Ready", none.clone()),
        ];
        assert!(overlapping_disruptions(&one_at_a_time).is_empty());
        let two = [
            rec("a", 1, "Updating", none.clone()),
            rec("b", 2, "Ready", granted),
            rec("a", 3, "Ready", none.clone()),
        ];
        let found = overlapping_disruptions(&two);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("a (phase Updating)") && found[0].contains("b (holds a reboot turn)")
        );
        assert!(
            overlapping_disruptions(&[
                rec("a", 1, "Lost", none.clone()),
                rec("b", 2, "Booting", none)
            ])
            .len()
                == 1
        );
    }

    fn node(at: Instant, name: &str, boot: &str, ready: &str, unschedulable: bool) -> Record {
        Record {
            at,
            kind: "Node",
            event: "APPLIED",
            object: json!({"metadata": {"name": name},
                "spec": {"unschedulable": unschedulable},
                "status": {"nodeInfo": {"bootID": boot},
                           "conditions": [{"type": "Ready", "status": ready}]}}),
        }
    }

    #[test]
    fn node_records_give_boot_ids_and_cordons() {
        let t0 = Instant::now();
        let s = |x: u64| t0 + std::time::Duration::from_secs(x);
        let records = [
            node(s(1), "a", "b1", "True", false),
            node(s(2), "b", "c1", "True", false),
            node(s(3), "a", "b1", "True", true),
            node(s(4), "a", "b2", "Unknown", true),
            node(s(5), "a", "", "True", true),
            node(s(6), "a", "b2", "True", false),
            node(s(7), "b", "c1", "True", true),
            node(s(8), "b", "c1", "True", false),
            node(s(9), "b", "c1", "True", true),
        ];
        let signs = node_signs(&records, "a");
        assert_eq!(
            signs
                .iter()
                .map(|(at, s)| (at.duration_since(t0).as_secs(), s.clone()))
                .collect::<Vec<_>>(),
            [
                (
                    1,
                    Sign::Node {
                        boot_id: "b1".into(),
                        ready: true
                    }
                ),
                (
                    3,
                    Sign::Node {
                        boot_id: "b1".into(),
                        ready: true
                    }
                ),
                (
                    4,
                    Sign::Node {
                        boot_id: "b2".into(),
                        ready: false
                    }
                ),
                (
                    6,
                    Sign::Node {
                        boot_id: "b2".into(),
                        ready: true
                    }
                ),
            ]
        );
        let c = decide_cordons(&records);
        assert_eq!(c.cordoned.get("a"), Some(&1));
        assert_eq!(c.cordoned.get("b"), Some(&2));
        assert_eq!(c.still, ["b"]);
    }

    #[test]
    fn grants_are_found_by_machine_and_window() {
        let t0 = Instant::now();
        let s = |x: u64| t0 + std::time::Duration::from_secs(x);
        let granted = json!([{"type": "RebootApproved", "status": "True"}]);
        let free = json!([{"type": "RebootApproved", "status": "False"}]);
        let mut records = vec![
            rec("a", 1, "Ready", granted.clone()),
            rec("b", 2, "Ready", granted.clone()),
            rec("a", 3, "Ready", granted.clone()),
            rec("a", 4, "Ready", free.clone()),
            rec("a", 5, "Ready", granted.clone()),
        ];
        for (r, at) in records.iter_mut().zip([s(10), s(20), s(25), s(30), s(50)]) {
            r.at = at;
        }
        assert_eq!(granted_at(&records, "a", s(0), s(60)), Some(s(10)));
        // Held since before the window: not a new grant; the next one is.
        assert_eq!(granted_at(&records, "a", s(11), s(40)), None);
        assert_eq!(granted_at(&records, "a", s(11), s(60)), Some(s(50)));
        assert_eq!(granted_at(&records, "b", s(0), s(40)), Some(s(20)));
        assert_eq!(granted_at(&records, "c", s(0), s(40)), None);
    }

    #[test]
    fn a_history_is_whole_with_one_list_per_watcher_and_nothing_unreadable() {
        let t0 = Instant::now();
        let log = |kind, lists: usize, unreadable| WatchLog {
            kind,
            lists: vec![t0; lists],
            unreadable,
        };
        assert!(decide_complete(&[log("Machine", 1, 0), log("Node", 1, 0)]).is_empty());
        let holes = decide_complete(&[
            log("Machine", 2, 0),
            log("Cluster", 0, 0),
            log("Node", 1, 3),
        ]);
        assert_eq!(holes.len(), 3, "{holes:?}");
        assert!(
            holes[0].contains("the Machine watch listed 2 times"),
            "{}",
            holes[0]
        );
        assert!(
            holes[1].contains("the Cluster watch never listed"),
            "{}",
            holes[1]
        );
        assert!(
            holes[2].contains("could not read 3 object(s)"),
            "{}",
            holes[2]
        );
    }
}
