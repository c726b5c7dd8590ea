//! What the operators build on, against a real kube-apiserver
//! (liken-testenv): server-side apply with field managers and force, JSON
//! patches with `test`, finalizers guarded by resourceVersion, cordon,
//! field selectors on LISTs and watches, the client's fieldManager on
//! every write, client-go's request metrics, an informer that stops at
//! once, and the metrics exposition they serve, read by Prometheus's own
//! promtool.
//!
//! One control plane serves every test in this binary; each test uses
//! names and labels of its own.

use std::time::{Duration, Instant};

use liken_api::{Machine, Phase};
use liken_kube::request::{NAMESPACES, NODES, PODS};
use liken_kube::{
    Api, Client, Config, DeleteParams, DynamicObject, Error, Informer, ListParams, PatchOp,
    Watcher, json_pointer, wake_channel,
};
use serde_json::json;

mod support;
use support::{admin, machine_json, machines};

/// The managers named in an object's managedFields, with their operation.
fn managers(o: &DynamicObject) -> Vec<(String, String)> {
    o.0["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| {
                    (
                        m["manager"].as_str().unwrap_or_default().to_owned(),
                        m["operation"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn server_side_apply_owns_fields_and_force_takes_them() {
    let c = admin();
    let op = c.identify("liken-test-operator", "1");
    let person = c.identify("liken-test-person", "1");
    let api = machines();
    let config = |policy: &str| {
        json!({"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
               "metadata": {"name": "ssa-1", "labels": {"liken-test": "ssa"}},
               "spec": {"rebootPolicy": policy}})
    };
    // An apply creates the object, owned by the operator.
    let m: Machine = op.apply(&api, "ssa-1", &config("Auto"), false).unwrap();
    assert_eq!(m.reboot_policy(), liken_api::RebootPolicy::Auto);
    let o: DynamicObject = c.get(&api, "ssa-1").unwrap();
    assert_eq!(
        managers(&o),
        [("liken-test-operator".to_owned(), "Apply".to_owned())]
    );
    // Applying the same again is a no-op, not a conflict.
    op.apply::<Machine, _>(&api, "ssa-1", &config("Auto"), false)
        .unwrap();

    // Another manager setting the same field to another value: Conflict,
    // with the server naming the owner.
    let e = person
        .apply::<Machine, _>(&api, "ssa-1", &config("Manual"), false)
        .unwrap_err();
    assert!(e.is_conflict(), "{e:?}");
    assert!(e.message().contains("liken-test-operator"), "{e}");
    // With force, the field changes hands.
    let m: Machine = person
        .apply(&api, "ssa-1", &config("Manual"), true)
        .unwrap();
    assert_eq!(m.reboot_policy(), liken_api::RebootPolicy::Manual);
    let o: DynamicObject = c.get(&api, "ssa-1").unwrap();
    let owners = managers(&o);
    assert!(
        owners.contains(&("liken-test-person".to_owned(), "Apply".to_owned())),
        "{owners:?}"
    );

    // Apply on the status subresource.
    let status = json!({"apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
                        "metadata": {"name": "ssa-1"},
                        "status": {"phase": "Booting"}});
    let m: Machine = op.apply_status(&api, "ssa-1", &status, false).unwrap();
    assert_eq!(m.status.phase, Some(Phase::Booting));
    c.delete(&api, "ssa-1", &DeleteParams::default()).unwrap();
}

#[test]
fn every_write_names_the_clients_field_manager() {
    let c = admin().identify("liken-test-writer", "2026.07.01-001");
    let api = machines();
    let m: DynamicObject = c.create(&api, &machine_json("fm-1", json!({}))).unwrap();
    assert_eq!(
        managers(&m),
        [("liken-test-writer".to_owned(), "Update".to_owned())]
    );
    let m: DynamicObject = c
        .merge_patch(&api, "fm-1", &json!({"metadata": {"labels": {"a": "b"}}}))
        .unwrap();
    assert_eq!(
        managers(&m),
        [("liken-test-writer".to_owned(), "Update".to_owned())]
    );
    // The default manager is the executable's name (this test binary).
    let d: DynamicObject = admin()
        .merge_patch(&api, "fm-1", &json!({"metadata": {"labels": {"c": "d"}}}))
        .unwrap();
    let name = admin().field_manager().to_owned();
    assert!(name.starts_with("operators"), "{name}");
    assert!(
        managers(&d).contains(&(name.clone(), "Update".to_owned())),
        "{:?}",
        managers(&d)
    );
    c.delete(&api, "fm-1", &DeleteParams::default()).unwrap();
}

#[test]
fn json_patch_test_operations_make_a_write_conditional() {
    let c = admin();
    let api = machines();
    let m: Machine = c
        .create(&api, &machine_json("jp-1", json!({"stage": "one"})))
        .unwrap();
    let label = json_pointer(&["metadata", "labels", "stage"]);
    let ops = |expect: &str, next: &str| {
        vec![
            PatchOp::Test {
                path: label.clone(),
                value: expect.into(),
            },
            PatchOp::Replace {
                path: label.clone(),
                value: next.into(),
            },
        ]
    };
    let after: DynamicObject = c.json_patch(&api, "jp-1", &ops("one", "two")).unwrap();
    assert_eq!(after.0["metadata"]["labels"]["stage"], "two");
    // The test no longer holds: the whole patch is refused (the
    // apiserver says only 422 Invalid, without naming the operation).
    let e = c
        .json_patch::<DynamicObject>(&api, "jp-1", &ops("one", "three"))
        .unwrap_err();
    assert!(
        matches!(&e, Error::Other { code: 422, reason, .. } if reason == "Invalid"),
        "{e:?}"
    );
    let now: DynamicObject = c.get(&api, "jp-1").unwrap();
    assert_eq!(now.0["metadata"]["labels"]["stage"], "two");
    // A test on the resourceVersion read is a compare-and-swap.
    let stale = vec![
        PatchOp::Test {
            path: "/metadata/resourceVersion".into(),
            value: m.metadata.resource_version.clone().into(),
        },
        PatchOp::Add {
            path: json_pointer(&["metadata", "labels", "late"]),
            value: "yes".into(),
        },
    ];
    let e = c
        .json_patch::<DynamicObject>(&api, "jp-1", &stale)
        .unwrap_err();
    assert_eq!(e.code(), Some(422), "{e:?}");
    // And on the status subresource.
    let m: Machine = c
        .json_patch_status(
            &api,
            "jp-1",
            &[PatchOp::Add {
                path: "/status".into(),
                value: json!({"phase": "Ready"}),
            }],
        )
        .unwrap();
    assert_eq!(m.status.phase, Some(Phase::Ready));
    c.delete(&api, "jp-1", &DeleteParams::default()).unwrap();
}

#[test]
fn finalizers_are_added_and_removed_under_the_resource_version() {
    let c = admin();
    let api = machines();
    c.create::<Machine, _>(&api, &machine_json("fin-1", json!({})))
        .unwrap();
    assert!(c.add_finalizer(&api, "fin-1", "liken.sh/drain").unwrap());
    assert!(!c.add_finalizer(&api, "fin-1", "liken.sh/drain").unwrap());
    assert!(c.add_finalizer(&api, "fin-1", "liken.sh/other").unwrap());
    let o: DynamicObject = c.get(&api, "fin-1").unwrap();
    assert_eq!(o.finalizers(), ["liken.sh/drain", "liken.sh/other"]);

    // A write from a stale read is refused.
    let stale = o.0["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    c.merge_patch::<DynamicObject>(&api, "fin-1", &json!({"metadata": {"labels": {"x": "y"}}}))
        .unwrap();
    let e = c.set_finalizers(&api, "fin-1", &stale, &[]).unwrap_err();
    assert!(e.is_conflict(), "{e:?}");
    assert_eq!(
        c.get::<DynamicObject>(&api, "fin-1").unwrap().finalizers(),
        ["liken.sh/drain", "liken.sh/other"]
    );

    // Deleting waits on the finalizers; removing them lets it go.
    c.delete(&api, "fin-1", &DeleteParams::default()).unwrap();
    let o: DynamicObject = c.get(&api, "fin-1").unwrap();
    assert!(o.0["metadata"]["deletionTimestamp"].is_string());
    assert!(c.remove_finalizer(&api, "fin-1", "liken.sh/other").unwrap());
    assert!(!c.remove_finalizer(&api, "fin-1", "liken.sh/other").unwrap());
    assert!(c.remove_finalizer(&api, "fin-1", "liken.sh/drain").unwrap());
    assert!(c.get_opt::<DynamicObject>(&api, "fin-1").unwrap().is_none());
    // Gone: removing again is not an error, adding is.
    assert!(!c.remove_finalizer(&api, "fin-1", "liken.sh/drain").unwrap());
    assert!(
        c.add_finalizer(&api, "fin-1", "liken.sh/drain")
            .unwrap_err()
            .is_not_found()
    );
}

#[test]
fn cordon_and_uncordon_a_node() {
    let c = admin();
    let nodes = Api::all(NODES);
    c.create::<DynamicObject, _>(
        &nodes,
        &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cordon-1"}}),
    )
    .unwrap();
    let n = c.cordon("cordon-1").unwrap();
    assert_eq!(n.pointer("/spec/unschedulable"), Some(&json!(true)));
    let n: DynamicObject = c.get(&nodes, "cordon-1").unwrap();
    assert_eq!(n.pointer("/spec/unschedulable"), Some(&json!(true)));
    let n = c.uncordon("cordon-1").unwrap();
    assert_eq!(n.pointer("/spec/unschedulable"), None);
    assert!(c.cordon("no-such-node").unwrap_err().is_not_found());
    c.delete(&nodes, "cordon-1", &DeleteParams::default())
        .unwrap();
}

#[test]
fn field_selectors_narrow_lists_and_watches() {
    let cp = liken_testenv::shared();
    let c = admin();
    // Pods by spec.nodeName. The namespace needs its default
    // ServiceAccount for pods to be admitted (no controller-manager here).
    let ns = "liken-fields";
    cp.token_for(ns, "default").unwrap();
    let pods = Api::namespaced(PODS, ns);
    for (name, node) in [("p-1", "node-a"), ("p-2", "node-b"), ("p-3", "node-a")] {
        c.create::<DynamicObject, _>(
            &pods,
            &json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name},
                    "spec": {"nodeName": node,
                             "containers": [{"name": "c", "image": "registry.invalid/none"}]}}),
        )
        .unwrap();
    }
    let on_a = c
        .list_all::<DynamicObject>(&pods, &ListParams::fields("spec.nodeName=node-a"))
        .unwrap();
    let mut names: Vec<&str> = on_a
        .items
        .iter()
        .map(|p| p.0["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["p-1", "p-3"]);

    // A watch of one Machine by metadata.name sees that one only.
    let api = machines();
    let (wake_tx, wake_rx) = wake_channel();
    let watcher = Watcher::<Machine>::new(c.clone(), api.clone()).fields("metadata.name=fsel-2");
    let informer = Informer::spawn(watcher, wake_tx);
    let store = informer.store();
    assert!(store.wait_synced(Duration::from_secs(30)));
    for i in 1..=3 {
        c.create::<Machine, _>(&api, &machine_json(&format!("fsel-{i}"), json!({})))
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.get("fsel-2").is_none() && Instant::now() < deadline {
        let _ = wake_rx.recv_timeout(Duration::from_millis(200));
    }
    // The others were created around it; give them time to (not) arrive.
    std::thread::sleep(Duration::from_millis(500));
    let names: Vec<String> = store
        .list()
        .iter()
        .map(|m| m.metadata.name.clone())
        .collect();
    assert_eq!(names, ["fsel-2"]);
    // Namespaces are cluster-scoped core objects: metadata.name works there too.
    let one = c
        .list::<DynamicObject>(
            &Api::all(NAMESPACES),
            &ListParams::fields(format!("metadata.name={ns}")),
        )
        .unwrap();
    assert_eq!(one.items.len(), 1);
    informer.stop();
}

#[test]
fn stopping_an_informer_interrupts_its_blocked_read() {
    let c = admin();
    // The server would keep this stream open for 290 s.
    let watcher = Watcher::<Machine>::new(c, machines())
        .labels("liken-test=never-written")
        .watch_timeout(290);
    let (wake_tx, _wake_rx) = wake_channel();
    let informer = Informer::spawn(watcher, wake_tx);
    assert!(informer.store().wait_synced(Duration::from_secs(30)));
    // Let the watch open and block on its first read.
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    informer.stop();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "stop took {took:?}");
}

#[test]
fn requests_are_counted_and_timed_like_client_go() {
    let registry = liken_kube::metrics::Registry::new();
    let c = admin().with_metrics(&registry);
    let api = machines();
    c.list::<Machine>(&api, &ListParams::default()).unwrap();
    c.create::<Machine, _>(&api, &machine_json("metrics-1", json!({})))
        .unwrap();
    assert!(
        c.get::<Machine>(&api, "metrics-none")
            .unwrap_err()
            .is_not_found()
    );
    let host = c.server().trim_start_matches("https://").to_owned();
    let out = registry.render();
    for line in [
        format!("rest_client_requests_total{{code=\"200\",host=\"{host}\",method=\"GET\"}} 1"),
        format!("rest_client_requests_total{{code=\"201\",host=\"{host}\",method=\"POST\"}} 1"),
        format!("rest_client_requests_total{{code=\"404\",host=\"{host}\",method=\"GET\"}} 1"),
        format!("rest_client_request_duration_seconds_count{{host=\"{host}\",verb=\"GET\"}} 2"),
        format!("rest_client_request_duration_seconds_count{{host=\"{host}\",verb=\"POST\"}} 1"),
    ] {
        assert!(out.lines().any(|l| l == line), "no {line:?} in\n{out}");
    }
    // A request that gets no answer is counted as client-go counts it.
    let dead = Client::new(&Config {
        server: "https://127.0.0.1:9".into(),
        timeout: Duration::from_secs(2),
        ..Config::from_kubeconfig(liken_testenv::shared().kubeconfig(), None).unwrap()
    })
    .unwrap()
    .with_metrics(&registry);
    assert!(matches!(
        dead.get::<Machine>(&api, "x").unwrap_err(),
        Error::Transport { .. }
    ));
    assert!(
        registry.render().lines().any(|l| l
            == "rest_client_requests_total{code=\"<error>\",host=\"127.0.0.1:9\",method=\"GET\"} 1"),
        "{}",
        registry.render()
    );
    c.delete(&api, "metrics-1", &DeleteParams::default())
        .unwrap();
}

#[test]
fn promtool_accepts_every_exposition_liken_kube_serves() {
    use liken_kube::election::{Callbacks, ElectionConfig, Elector, Timings};
    use liken_kube::metrics::{self, Registry};
    use std::io::{Read, Write};

    let registry = Registry::new();
    // Everything liken-kube registers: process and reconcile metrics...
    let standard = metrics::standard(&registry);
    standard.reconcile_duration.observe(0.3);
    standard.reconcile_errors.inc();
    // ...client-go's request families, with answers of several codes...
    let c = admin().with_metrics(&registry);
    let api = machines();
    c.list::<Machine>(&api, &ListParams::default()).unwrap();
    assert!(c.get::<Machine>(&api, "promtool-none").is_err());
    // ...two watchers of one resource, which must stay one series...
    let (wake_tx, _wake_rx) = wake_channel();
    let informers: Vec<Informer<Machine>> = (0..2)
        .map(|_| {
            let i = Informer::spawn(Watcher::new(c.clone(), api.clone()), wake_tx.clone());
            i.stats().register(&registry, "machines");
            i
        })
        .collect();
    for i in &informers {
        assert!(i.store().wait_synced(Duration::from_secs(30)));
    }
    // ...the leader gauge and its health check...
    let elector = Elector::start(
        c.clone(),
        ElectionConfig {
            namespace: "default".into(),
            name: "liken-test-promtool".into(),
            identity: "promtool".into(),
            timings: Timings::default(),
            labels: Default::default(),
        },
        Callbacks::default(),
    )
    .unwrap();
    assert!(elector.wait_leading(Duration::from_secs(10)));
    elector.register(&registry, Duration::from_secs(20));
    // ...and an operator's own gauge with text that needs escaping.
    registry
        .gauge(
            "liken_test_escapes",
            "A help text with a backslash \\ and a\nnewline.",
            &[("path", "C:\\dir \"quoted\"\nnext")],
        )
        .set(1.5);

    let server = metrics::serve("127.0.0.1:0", registry).unwrap();
    let get = |path: &str| {
        let mut s = std::net::TcpStream::connect(server.local_addr()).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    let response = get("/metrics");
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    for family in [
        "process_resident_memory_bytes",
        "liken_reconcile_duration_seconds",
        "liken_reconcile_errors_total",
        "rest_client_requests_total",
        "rest_client_request_duration_seconds",
        "liken_watch_restarts_total",
        "liken_watch_lists_total",
        "liken_watch_events_total",
        "liken_watch_unreadable_objects_total",
        "leader_election_master_status",
        "liken_test_escapes",
    ] {
        assert!(
            body.contains(&format!("# TYPE {family} ")),
            "{family} missing from\n{body}"
        );
    }
    let lists: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("liken_watch_lists_total{"))
        .collect();
    assert_eq!(lists, ["liken_watch_lists_total{resource=\"machines\"} 2"]);

    liken_testenv::exposition::promtool_check(body);
    assert!(get("/healthz").starts_with("HTTP/1.1 200 OK"));
    elector.shutdown();
    for i in informers {
        i.stop();
    }
}
