//! A watch survives etcd compaction: the server answers 410 Gone, the
//! watcher lists again, and the store stays right.
//!
//! This binary runs its own control plane with the apiserver's watch
//! cache off, so watches are served by etcd and a compaction reaches
//! them. (With the cache on, as in production, the cache keeps its own
//! window and a 410 comes after an apiserver restart instead; the
//! watcher's answer is the same.) etcd is compacted through its gRPC
//! gateway at the current revision after unrelated writes (ConfigMaps),
//! so the watcher's last resourceVersion falls below the compacted one
//! while its stream is between the server's timeouts.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use liken_api::Machine;
use liken_kube::backoff::Backoff;
use liken_kube::request::{CONFIG_MAPS, MACHINES};
use liken_kube::{Api, Client, Config, Informer, Watcher, wake_channel};
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

    // A watcher told to resume from the old version (as after a
    // restart) gets 410 and lists.
    let (wake_tx, _wake_rx) = wake_channel();
    let watcher = Watcher::<Machine>::new(c.clone(), api)
        .labels("liken-test=resume")
        .backoff(fast_backoff())
        .report(Arc::new(|_| {}))
        .resume_from(&old);
    let informer = Informer::spawn(watcher, wake_tx);
    let store = informer.store();
    assert!(store.wait_synced(Duration::from_secs(30)), "never listed");
    assert_eq!(store.len(), 4);
    let stats = informer.stats();
    assert_eq!(stats.lists(), 1);
    assert_eq!(stats.restarts(), 1, "the 410 counts as one restart");
}
