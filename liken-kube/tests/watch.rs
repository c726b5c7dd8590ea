//! Watches that meet trouble, against a control plane of this binary's
//! own: etcd compaction (the server answers 410 Gone, the watcher lists
//! again, the store stays right), a resume, and objects this build cannot
//! read (one bad Machine never stops the others), and an observer that
//! sees every event and chooses which wake the loop.
//!
//! The control plane runs with the apiserver's watch cache off, so
//! watches are served by etcd and a compaction reaches them. (With the cache on, as in production, the cache keeps its own
//! window and a 410 comes after an apiserver restart instead; the
//! watcher's answer is the same.) etcd is compacted through its gRPC
//! gateway at the current revision after unrelated writes (ConfigMaps),
//! so the watcher's last resourceVersion falls below the compacted one
//! while its stream is between the server's timeouts.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use liken_api::{Machine, Phase};
use liken_kube::backoff::Backoff;
use liken_kube::request::{CONFIG_MAPS, MACHINES};
use liken_kube::{
    Api, Client, Config, DeleteParams, DynamicObject, Event, Informer, ListParams, Object, Watcher,
    wake_channel,
};
use liken_testenv::{ControlPlane, Options};
use serde_json::json;

fn control_plane() -> &'static ControlPlane {
    static CP: std::sync::OnceLock<ControlPlane> = std::sync::OnceLock::new();
    CP.get_or_init(|| {
        liken_testenv::start(Options {
            no_watch_cache: true,
            ..Options::default()
        })
        .unwrap_or_else(|e| panic!("liken-testenv: the test control plane is not available: {e}"))
    })
}

/// The tests take turns: a compaction reaches every watch on this control
/// plane, and the unreadable-object test counts its relists exactly.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

fn client(cp: &ControlPlane) -> Client {
    Client::new(&Config::from_kubeconfig(cp.kubeconfig(), None).unwrap()).unwrap()
}

fn machine(name: &str, label: &str) -> serde_json::Value {
    json!({"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
           "metadata": {"name": name, "labels": {"liken-test": label}}, "spec": {}})
}

/// Writes ConfigMaps so etcd's revision moves past every Machine's.
fn unrelated_writes(c: &Client, round: usize) {
    let api = Api::namespaced(CONFIG_MAPS, "default");
    for i in 0..10 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("churn-{round}-{i}")}, "data": {"i": i.to_string()}});
        c.create::<liken_kube::DynamicObject, _>(&api, &cm).unwrap();
    }
}

fn fast_backoff() -> Backoff {
    Backoff::new(
        Duration::from_millis(50),
        Duration::from_millis(500),
        Duration::from_secs(120),
    )
}

#[test]
fn a_live_watch_relists_after_compaction() {
    let _turn = one_at_a_time();
    let cp = control_plane();
    let c = client(cp);
    let api = Api::all(MACHINES);
    for i in 0..5 {
        c.create::<Machine, _>(&api, &machine(&format!("compact-{i}"), "compact"))
            .unwrap();
    }
    let reports = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = reports.clone();
    let (wake_tx, wake_rx) = wake_channel();
    let watcher = Watcher::<Machine>::new(c.clone(), api.clone())
        .labels("liken-test=compact")
        .watch_timeout(1)
        .backoff(fast_backoff())
        .report(Arc::new(move |line| {
            sink.lock().unwrap().push(line.to_owned())
        }));
    let informer = Informer::spawn(watcher, wake_tx);
    let store = informer.store();
    assert!(store.wait_synced(Duration::from_secs(30)));
    assert_eq!(store.len(), 5);
    let stats = informer.stats();
    assert_eq!(stats.lists(), 1);

    // Move etcd on and compact, until a reopened stream meets the
    // compacted revision (a stream open during the compaction is not
    // affected, so this may take a round or two).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut round = 0;
    while stats.lists() < 2 && Instant::now() < deadline {
        unrelated_writes(&c, round);
        let rev = cp.compact_etcd().unwrap();
        eprintln!("round {round}: compacted etcd at revision {rev}");
        round += 1;
        let wait = Instant::now() + Duration::from_secs(3);
        while stats.lists() < 2 && Instant::now() < wait {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert!(stats.lists() >= 2, "no relist after {round} compactions");
    assert!(stats.restarts() >= 1);
    let lines = reports.lock().unwrap().clone();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("no longer kept") && l.contains("listing again")),
        "the 410 was not reported: {lines:?}"
    );
    eprintln!(
        "after {round} rounds: lists {}, restarts {}",
        stats.lists(),
        stats.restarts()
    );

    // The store is whole, and the watch goes on after the relist.
    assert_eq!(store.len(), 5);
    c.create::<Machine, _>(&api, &machine("compact-new", "compact"))
        .unwrap();
    c.delete(&api, "compact-0", &Default::default()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while (store.get("compact-new").is_none() || store.get("compact-0").is_some())
        && Instant::now() < deadline
    {
        let _ = wake_rx.recv_timeout(Duration::from_millis(200));
    }
    assert!(store.get("compact-new").is_some());
    assert!(store.get("compact-0").is_none());
    assert_eq!(store.len(), 5);
}

#[test]
fn resuming_from_a_compacted_version_lists_again() {
    let _turn = one_at_a_time();
    let cp = control_plane();
    let c = client(cp);
    let api = Api::all(MACHINES);
    let first: Machine = c.create(&api, &machine("resume-0", "resume")).unwrap();
    let old = first.metadata.resource_version.clone();
    for i in 1..4 {
        c.create::<Machine, _>(&api, &machine(&format!("resume-{i}"), "resume"))
            .unwrap();
    }
    unrelated_writes(&c, 1000);
    cp.compact_etcd().unwrap();

    // An informer resuming from the old version (as after a restart,
    // seeded with what it knew then) gets 410 and lists.
    let (wake_tx, _wake_rx) = wake_channel();
    let watcher = Watcher::<Machine>::new(c.clone(), api)
        .labels("liken-test=resume")
        .backoff(fast_backoff())
        .report(Arc::new(|_| {}));
    let informer = Informer::spawn_seeded(watcher, vec![first], &old, wake_tx);
    let store = informer.store();
    let stats = informer.stats();
    let deadline = Instant::now() + Duration::from_secs(30);
    while stats.lists() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(stats.lists(), 1, "never listed");
    assert_eq!(store.len(), 4);
    assert_eq!(stats.restarts(), 1, "the 410 counts as one restart");
}

/// Replaces the Machine CRD's schema with one that admits values this
/// build cannot read (any phase, any running version), as a newer
/// release's CRD might. Only this binary's control plane sees it.
fn loosen_machine_crd(c: &Client) {
    let crds = Api::all(liken_kube::Resource {
        group: "apiextensions.k8s.io",
        version: "v1",
        plural: "customresourcedefinitions",
        kind: "CustomResourceDefinition",
        namespaced: false,
    });
    let mut crd: DynamicObject = c.get(&crds, "machines.liken.sh").unwrap();
    let status = crd
        .0
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/status/properties")
        .expect("the Machine CRD has a status schema");
    let phase = status["phase"].as_object_mut().unwrap();
    assert!(phase.remove("enum").is_some(), "status.phase had no enum");
    c.replace::<DynamicObject, _>(&crds, "machines.liken.sh", &crd)
        .unwrap();
}

#[test]
fn one_unreadable_machine_never_stops_the_others() {
    let _turn = one_at_a_time();
    let cp = control_plane();
    let c = client(cp);
    let api = Api::all(MACHINES);
    loosen_machine_crd(&c);
    for i in 0..3 {
        c.create::<Machine, _>(&api, &machine(&format!("readable-{i}"), "unreadable"))
            .unwrap();
    }
    c.create::<Machine, _>(&api, &machine("hibernating", "unreadable"))
        .unwrap();
    // The CRD change takes a moment to reach the handler.
    let hibernate = |name: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match c.merge_patch_status::<DynamicObject>(
                &api,
                name,
                &json!({"status": {"phase": "Hibernating"}}),
            ) {
                Ok(_) => return,
                Err(e) if Instant::now() < deadline && e.code() == Some(422) => {
                    std::thread::sleep(Duration::from_millis(200))
                }
                Err(e) => panic!("the loosened CRD refused phase Hibernating: {e}"),
            }
        }
    };
    hibernate("hibernating");

    // A LIST names what it skipped, with the field.
    let list = c
        .list::<Machine>(&api, &ListParams::labels("liken-test=unreadable"))
        .unwrap();
    assert_eq!(list.items.len(), 3);
    assert_eq!(list.skipped.len(), 1);
    assert_eq!(list.skipped[0].key, "hibernating");
    assert!(
        list.skipped[0].message.starts_with("status.phase: "),
        "{:?}",
        list.skipped
    );

    // A watcher hands its consumer the skipped item after the list.
    let mut watcher = Watcher::<Machine>::new(c.clone(), api.clone())
        .labels("liken-test=unreadable")
        .report(Arc::new(|_| {}));
    let mut seen = Vec::new();
    watcher.step(&mut |e| {
        seen.push(match e {
            Event::Restarted(items) => format!("restarted {}", items.len()),
            Event::Unreadable(u) => format!("unreadable {} {}", u.key, u.message),
            other => format!("{other:?}"),
        })
    });
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0], "restarted 3");
    assert!(
        seen[1].starts_with("unreadable hibernating status.phase: "),
        "{seen:?}"
    );

    // An informer syncs the others and says which one it skipped.
    let reports = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = reports.clone();
    let (wake_tx, wake_rx) = wake_channel();
    let watcher = Watcher::<Machine>::new(c.clone(), api.clone())
        .labels("liken-test=unreadable")
        .backoff(fast_backoff())
        .report(Arc::new(move |l| sink.lock().unwrap().push(l.to_owned())));
    let informer = Informer::spawn(watcher, wake_tx);
    let store = informer.store();
    assert!(store.wait_synced(Duration::from_secs(30)));
    assert_eq!(store.len(), 3);
    let stats = informer.stats();
    assert_eq!(stats.unreadable(), 1);
    let named = |name: &str| {
        reports
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(&format!("skipped {name} ")) && l.contains("status.phase"))
    };
    assert!(named("hibernating"), "{:?}", reports.lock().unwrap());

    // A watched object turning unreadable leaves the store (and is handed
    // over as removed); the watch goes on and takes it back once readable.
    hibernate("readable-1");
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.get("readable-1").is_some() && Instant::now() < deadline {
        let _ = wake_rx.recv_timeout(Duration::from_millis(200));
    }
    assert!(store.get("readable-1").is_none());
    assert_eq!(store.take_removed(), ["readable-1"]);
    assert!(named("readable-1"), "{:?}", reports.lock().unwrap());
    c.merge_patch_status::<Machine>(&api, "readable-1", &json!({"status": {"phase": "Ready"}}))
        .unwrap();
    c.delete(&api, "hibernating", &DeleteParams::default())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.get("readable-1").is_none() && Instant::now() < deadline {
        let _ = wake_rx.recv_timeout(Duration::from_millis(200));
    }
    assert_eq!(
        store.get("readable-1").unwrap().status.phase,
        Some(Phase::Ready)
    );
    // The deletion of hibernating follows readable-1's patch; wait for it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while stats.unreadable() < 3 && Instant::now() < deadline {
        let _ = wake_rx.recv_timeout(Duration::from_millis(200));
    }
    assert_eq!(stats.lists(), 1, "no relist: the stream never broke");
    assert_eq!(stats.restarts(), 0);
    assert_eq!(
        stats.unreadable(),
        3,
        "hibernating listed, readable-1 and hibernating deleted"
    );
    informer.stop();
}

#[test]
fn an_observer_sees_every_event_and_chooses_the_wakes() {
    let _turn = one_at_a_time();
    let cp = control_plane();
    let c = client(cp);
    let api = Api::namespaced(CONFIG_MAPS, "default");
    let cm = |name: &str, v: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "labels": {"liken-test": "observed"}},
               "data": {"v": v}})
    };
    c.create::<DynamicObject, _>(&api, &cm("observed-a", "1"))
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = seen.clone();
    let (wake_tx, wake_rx) = wake_channel();
    let watcher = Watcher::<DynamicObject>::new(c.clone(), api.clone())
        .labels("liken-test=observed")
        .backoff(fast_backoff());
    // Only additions of a new name and deletions wake; changes do not.
    let informer = Informer::spawn_observed(watcher, wake_tx, move |e| {
        let (what, wakes) = match e {
            Event::Restarted(items) => (format!("restarted {}", items.len()), true),
            Event::Applied(o) => (format!("applied {}", o.name()), false),
            Event::Deleted(o) => (format!("deleted {}", o.name()), true),
            Event::Unreadable(u) => (format!("unreadable {}", u.key), true),
        };
        log.lock().unwrap().push(what);
        wakes
    });
    let store = informer.store();
    assert!(store.wait_synced(Duration::from_secs(30)));
    assert!(wake_rx.recv_timeout(Duration::from_secs(5)).is_ok());
    c.merge_patch::<DynamicObject>(&api, "observed-a", &json!({"data": {"v": "2"}}))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.lock().unwrap().len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The store took the change, and nobody was woken for it.
    assert_eq!(store.get("default/observed-a").unwrap().0["data"]["v"], "2");
    assert!(wake_rx.try_recv().is_err());
    c.delete(&api, "observed-a", &DeleteParams::default())
        .unwrap();
    assert!(wake_rx.recv_timeout(Duration::from_secs(20)).is_ok());
    assert_eq!(
        *seen.lock().unwrap(),
        ["restarted 1", "applied observed-a", "deleted observed-a"]
    );
    assert!(store.is_empty());
    informer.stop();
}
