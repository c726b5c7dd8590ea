//! Every watch event of the Machines and the Cluster for a whole test,
//! recorded as it arrives, so a test judges the rollout from what the
//! apiserver said happened rather than from samples.
//!
//! Two watchers (liken-kube's, listing first, resuming and relisting as
//! any watcher does) feed one log of [`Record`]s, each with the time it
//! arrived and the object as the apiserver sent it. The Machines arrive
//! on one stream, in resourceVersion order, so per-machine states
//! replayed from it are the order the apiserver stored them.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use liken_kube::request::{CLUSTERS, MACHINES};
use liken_kube::{Api, Client, DynamicObject, Event, StopHandle, Watcher};
use serde_json::Value;

/// One event.
#[derive(Clone, Debug)]
pub struct Record {
    /// When it arrived.
    pub at: Instant,
    /// `Machine` or `Cluster`.
    pub kind: &'static str,
    /// `ADDED`/`MODIFIED` (applied), `DELETED`, or `LISTED` (a relist's
    /// item).
    pub event: &'static str,
    /// The object.
    pub object: Value,
}

/// The recorder.
pub struct History {
    records: Arc<Mutex<Vec<Record>>>,
    stops: Vec<StopHandle>,
}

impl History {
    /// Starts watching Machines and Clusters as `client`.
    pub fn start(client: &Client) -> History {
        let records = Arc::new(Mutex::new(Vec::new()));
        let mut stops = Vec::new();
        for (kind, resource) in [("Machine", MACHINES), ("Cluster", CLUSTERS)] {
            let mut watcher = Watcher::<DynamicObject>::new(client.clone(), Api::all(resource));
            stops.push(watcher.stopper());
            let records = Arc::clone(&records);
            std::thread::spawn(move || {
                watcher.run(&mut |e| {
                    let at = Instant::now();
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
                            for o in all {
                                push("LISTED", o);
                            }
                        }
                        Event::Applied(o) => push("APPLIED", o),
                        Event::Deleted(o) => push("DELETED", o),
                        Event::Unreadable(_) => {}
                    }
                });
            });
        }
        History { records, stops }
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

/// Whether a Machine (its JSON) is disrupted by a reboot turn: it holds
/// a grant (RebootApproved True), uses one (a convergence condition
/// Draining, DrainBlocked, Rebooting or Restarting), or its phase is one
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
}
