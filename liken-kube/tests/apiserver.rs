//! liken-kube against a real kube-apiserver (liken-testenv): config,
//! requests, typed errors, what the CRDs refuse, generation and
//! resourceVersion rules, watch and store, Events.
//!
//! One control plane serves every test in this binary; Machines and
//! Clusters are cluster-scoped, so each test uses names and labels of
//! its own.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use liken_api::machine::ReleaseStatus;
use liken_api::{Cluster, Machine, MachineSpec, Phase, Version};
use liken_kube::events::{EventType, ObjectReference, Recorder, RecorderConfig};
use liken_kube::request::{CLUSTERS, CONFIG_MAPS};
use liken_kube::{
    Api, Auth, Client, Config, DeleteParams, DynamicObject, Error, Informer, ListParams,
    Propagation, Watcher, wake_channel,
};
use serde_json::json;

mod support;
use support::{admin, machine_json, machines};

#[test]
fn crds_are_served_and_listed_through_liken_kube() {
    let c = admin();
    let list = c
        .list::<Machine>(&machines(), &ListParams::default())
        .unwrap();
    assert!(!list.resource_version.is_empty());
    let list = c
        .list::<Cluster>(&Api::all(CLUSTERS), &ListParams::default())
        .unwrap();
    assert!(!list.resource_version.is_empty());
    // The CRDs themselves are Established (through the raw request API).
    for name in ["machines.liken.sh", "clusters.liken.sh"] {
        let req = liken_kube::Request {
            method: liken_kube::request::Method::Get,
            path: format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"),
            query: vec![],
            body: None,
            content_type: None,
            timeout: None,
        };
        let crd: serde_json::Value = serde_json::from_slice(&c.send(&req).unwrap()).unwrap();
        let established = crd["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        assert!(established, "{name} is not Established");
    }
}

#[test]
fn crud_round_trip_with_typed_errors() {
    let c = admin();
    let api = machines();
    let name = "crud-1";
    let created: Machine = c.create(&api, &machine_json(name, json!({}))).unwrap();
    assert_eq!(created.metadata.name, name);
    assert!(!created.metadata.uid.is_empty());
    assert_eq!(created.metadata.generation, 1);

    // Creating it again: AlreadyExists, with the server's message.
    let e = c
        .create::<Machine, _>(&api, &machine_json(name, json!({})))
        .unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e:?}");
    assert!(e.message().contains("already exists"), "{e}");

    let got: Machine = c.get(&api, name).unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);

    // Merge patch on spec.
    let patched: Machine = c
        .merge_patch(&api, name, &json!({"spec": {"rebootPolicy": "Manual"}}))
        .unwrap();
    assert_eq!(patched.reboot_policy(), liken_api::RebootPolicy::Manual);

    // Merge patch on status.
    let patched: Machine = c
        .merge_patch_status(&api, name, &json!({"status": {"phase": "Booting"}}))
        .unwrap();
    assert_eq!(patched.status.phase, Some(Phase::Booting));

    // DELETE with a propagation policy, then NotFound.
    c.delete(
        &api,
        name,
        &DeleteParams {
            propagation: Some(Propagation::Background),
            precondition_resource_version: None,
        },
    )
    .unwrap();
    let e = c.get::<Machine>(&api, name).unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
    assert!(c.get_opt::<Machine>(&api, name).unwrap().is_none());
    let e = c.delete(&api, name, &DeleteParams::default()).unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
}

#[test]
fn delete_with_foreground_propagation_and_a_precondition() {
    let c = admin();
    let api = machines();
    let m: Machine = c.create(&api, &machine_json("del-fg", json!({}))).unwrap();
    // A precondition naming an old resourceVersion is a Conflict.
    let e = c
        .delete(
            &api,
            "del-fg",
            &DeleteParams {
                propagation: Some(Propagation::Foreground),
                precondition_resource_version: Some("1".into()),
            },
        )
        .unwrap_err();
    assert!(e.is_conflict(), "{e:?}");
    c.delete(
        &api,
        "del-fg",
        &DeleteParams {
            propagation: Some(Propagation::Foreground),
            precondition_resource_version: Some(m.metadata.resource_version.clone()),
        },
    )
    .unwrap();
    // Foreground deletion sets the foregroundDeletion finalizer; with no
    // dependents and no garbage collector running, the object lingers
    // with a deletionTimestamp, which is what Foreground means.
    let o: DynamicObject = c.get(&api, "del-fg").unwrap();
    assert!(o.0["metadata"]["deletionTimestamp"].is_string(), "{o:?}");
    assert_eq!(o.0["metadata"]["finalizers"], json!(["foregroundDeletion"]));
    c.merge_patch::<DynamicObject>(&api, "del-fg", &json!({"metadata": {"finalizers": null}}))
        .unwrap();
    assert!(c.get_opt::<Machine>(&api, "del-fg").unwrap().is_none());
}

#[test]
fn list_by_label_with_pages() {
    let c = admin();
    let api = machines();
    for i in 0..7 {
        let labels =
            json!({"liken-test": "pages", "parity": if i % 2 == 0 { "even" } else { "odd" }});
        c.create::<Machine, _>(&api, &machine_json(&format!("page-{i}"), labels))
            .unwrap();
    }
    let first = c
        .list::<Machine>(&api, &ListParams::labels("liken-test=pages").limit(3))
        .unwrap();
    assert_eq!(first.items.len(), 3);
    assert!(first.continue_token.is_some());
    let all = c
        .list_all::<Machine>(&api, &ListParams::labels("liken-test=pages").limit(3))
        .unwrap();
    let names: BTreeSet<String> = all.items.iter().map(|m| m.metadata.name.clone()).collect();
    assert_eq!(names.len(), 7);
    let even = c
        .list_all::<Machine>(
            &api,
            &ListParams::labels("liken-test=pages,parity in (even)"),
        )
        .unwrap();
    assert_eq!(even.items.len(), 4);
    let none = c
        .list::<Machine>(&api, &ListParams::labels("liken-test=nothing-has-this"))
        .unwrap();
    assert!(none.items.is_empty());
}

#[test]
fn the_apiserver_refuses_malformed_machines() {
    let c = admin();
    let api = machines();
    let m: Machine = c
        .create(&api, &machine_json("malformed", json!({})))
        .unwrap();
    let status_put = |status: serde_json::Value| {
        let body = json!({
            "apiVersion": "liken.sh/v1alpha1", "kind": "Machine",
            "metadata": {"name": "malformed", "resourceVersion": m.metadata.resource_version},
            "spec": {"hostname": "malformed"},
            "status": status,
        });
        // The raw request API: liken's own types could not even hold
        // these values.
        let req = api
            .replace_status("malformed", serde_json::to_vec(&body).unwrap())
            .unwrap();
        c.send(&req).unwrap_err()
    };
    let e = status_put(json!({"release": {"running": "2026.7.1"}}));
    match &e {
        Error::Other {
            code: 422,
            reason,
            message,
            ..
        } => {
            assert_eq!(reason, "Invalid");
            assert!(message.contains("status.release.running"), "{message}");
        }
        other => panic!("expected 422 Invalid, got {other:?}"),
    }
    let e = status_put(json!({"phase": "Sleeping"}));
    match &e {
        Error::Other {
            code: 422, message, ..
        } => {
            assert!(message.contains("status.phase"), "{message}");
            assert!(message.contains("Unsupported value"), "{message}");
        }
        other => panic!("expected 422 Invalid, got {other:?}"),
    }
    // An unknown enum value in spec is refused on create.
    let mut bad = machine_json("malformed-spec", json!({}));
    bad["spec"]["rebootPolicy"] = json!("Sometimes");
    let e = c
        .send(&api.create(serde_json::to_vec(&bad).unwrap()).unwrap())
        .unwrap_err();
    assert_eq!(e.code(), Some(422), "{e:?}");
    assert!(e.message().contains("spec.rebootPolicy"), "{e}");
    // The network's bonds and VLANs: a whole one is taken, a VLAN id
    // past 4094 and an unknown bond mode are refused.
    let network = json!({
        "interfaces": [
            {"name": "eth1", "addresses": ["192.168.50.10/24", "fd50::10/64"], "mtu": 9000, "slaac": false,
             "routes": [{"to": "::/0", "via": "fd50::1"}]},
            {"name": "bond0", "addresses": ["192.168.60.10/24"]},
        ],
        "bonds": [{"name": "bond0", "members": ["eth2", "eth3"], "mode": "802.3ad", "miimon": 50}],
        "vlans": [{"name": "vlan42", "parent": "eth1", "id": 42}],
    });
    let mut good = machine_json("networked", json!({}));
    good["spec"]["network"] = network.clone();
    let made: Machine = c.create(&api, &good).unwrap();
    let net = made.spec.network.unwrap();
    assert_eq!((net.bonds[0].miimon, net.vlans[0].id), (Some(50), 42));
    for (field, value, path) in [
        (
            "vlans",
            json!([{"name": "vlan9", "parent": "eth1", "id": 5000}]),
            "spec.network.vlans[0].id",
        ),
        (
            "bonds",
            json!([{"name": "bond0", "members": ["eth2"], "mode": "balance-rr"}]),
            "spec.network.bonds[0].mode",
        ),
    ] {
        let mut bad = machine_json("malformed-network", json!({}));
        bad["spec"]["network"] = network.clone();
        bad["spec"]["network"][field] = value;
        let e = c
            .send(&api.create(serde_json::to_vec(&bad).unwrap()).unwrap())
            .unwrap_err();
        assert_eq!(e.code(), Some(422), "{e:?}");
        assert!(e.message().contains(path), "{e}");
    }
}

fn cluster_json(name: &str, version: &str, catalog: &[&str]) -> serde_json::Value {
    let digest = format!("sha256:{}", "a".repeat(64));
    let catalog: Vec<serde_json::Value> = catalog
        .iter()
        .map(|v| json!({"version": v, "digest": digest}))
        .collect();
    json!({
        "apiVersion": "liken.sh/v1alpha1", "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {
            "endpoint": "https://10.0.0.10:6443",
            "leaders": ["node-1"],
            "version": version,
            "releases": {"source": "https://releases.example/stable", "catalog": catalog}
        }
    })
}

#[test]
fn the_cluster_cel_rule_refuses_a_version_older_than_the_catalog() {
    let c = admin();
    let api = Api::all(CLUSTERS);
    let e = c
        .send(
            &api.create(
                serde_json::to_vec(&cluster_json(
                    "cel-old",
                    "2026.01.01-001",
                    &["2026.02.01-001", "2026.03.01-001"],
                ))
                .unwrap(),
            )
            .unwrap(),
        )
        .unwrap_err();
    assert_eq!(e.code(), Some(422), "{e:?}");
    assert!(
        e.message()
            .contains("spec.version is older than every release in spec.releases.catalog"),
        "{e}"
    );
    // The oldest itself, and newer, are accepted.
    let ok: Cluster = c
        .create(
            &api,
            &cluster_json(
                "cel-ok",
                "2026.02.01-001",
                &["2026.02.01-001", "2026.03.01-001"],
            ),
        )
        .unwrap();
    assert_eq!(
        ok.spec.version,
        Some("2026.02.01-001".parse::<Version>().unwrap())
    );
    c.delete(&api, "cel-ok", &DeleteParams::default()).unwrap();
}

#[test]
fn status_writes_keep_generation_spec_writes_bump_it_and_stale_writes_conflict() {
    let c = admin();
    let api = machines();
    let m: Machine = c
        .create(&api, &machine_json("generation", json!({})))
        .unwrap();
    assert_eq!(m.metadata.generation, 1);

    // PUT /status with liken's own types.
    let mut s = m.clone();
    s.status.phase = Some(Phase::Ready);
    s.status.release = Some(ReleaseStatus {
        running: Some("2026.07.01-001".parse().unwrap()),
        ..ReleaseStatus::default()
    });
    s.status.observed_generation = 1;
    let after_status: Machine = c.replace_status(&api, "generation", &s).unwrap();
    assert_eq!(
        after_status.metadata.generation, 1,
        "a status write keeps generation"
    );
    assert_eq!(after_status.status.phase, Some(Phase::Ready));
    assert_ne!(
        after_status.metadata.resource_version,
        m.metadata.resource_version
    );

    // PUT of the object with a changed spec bumps it.
    let mut spec = after_status.clone();
    spec.spec = MachineSpec {
        hostname: Some("renamed".into()),
        ..after_status.spec.clone()
    };
    let after_spec: Machine = c.replace(&api, "generation", &spec).unwrap();
    assert_eq!(
        after_spec.metadata.generation, 2,
        "a spec write bumps generation"
    );
    // ...and the status rode along untouched (the main resource ignores it).
    assert_eq!(after_spec.status.phase, Some(Phase::Ready));

    // Writing with the resourceVersion from before is refused.
    let e = c
        .replace::<Machine, _>(&api, "generation", &spec)
        .unwrap_err();
    assert!(e.is_conflict(), "{e:?}");
    assert!(e.to_string().contains("read it again"), "{e}");
    let e = c
        .replace_status::<Machine, _>(&api, "generation", &s)
        .unwrap_err();
    assert!(e.is_conflict(), "{e:?}");
}

#[test]
fn credentials_tokens_and_refusals() {
    let cp = liken_testenv::shared();
    let admin = Config::from_kubeconfig(cp.kubeconfig(), None).unwrap();
    // A ServiceAccount's token authenticates but RBAC grants it nothing.
    let token = cp.token_for("liken-kube-test", "nobody").unwrap();
    let config = Config {
        auth: Auth::Token(token),
        ..admin.clone()
    };
    let sa = Client::new(&config).unwrap();
    let e = sa
        .list::<Machine>(&machines(), &ListParams::default())
        .unwrap_err();
    assert!(matches!(e, Error::Forbidden { .. }), "{e:?}");
    assert!(
        e.message()
            .contains("system:serviceaccount:liken-kube-test:nobody"),
        "{e}"
    );

    // A made-up token is Unauthorized.
    let config = Config {
        auth: Auth::Token("not-a-token".into()),
        ..admin.clone()
    };
    let e = Client::new(&config)
        .unwrap()
        .list::<Machine>(&machines(), &ListParams::default())
        .unwrap_err();
    assert!(matches!(e, Error::Unauthorized { .. }), "{e:?}");

    // A token read from a file, as in a pod.
    let dir = std::env::temp_dir().join(format!("liken-kube-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("token"),
        cp.token_for("liken-kube-test", "nobody").unwrap(),
    )
    .unwrap();
    let config = Config {
        auth: Auth::TokenFile(dir.join("token")),
        ..admin.clone()
    };
    let e = Client::new(&config)
        .unwrap()
        .get::<DynamicObject>(&Api::namespaced(CONFIG_MAPS, "default"), "x")
        .unwrap_err();
    assert!(matches!(e, Error::Forbidden { .. }), "{e:?}");
    std::fs::remove_dir_all(&dir).unwrap();

    // A CA that did not sign the server's certificate: Transport.
    let other = rcgen_free_ca();
    let config = Config {
        ca_pem: Some(other.into_bytes()),
        ..admin
    };
    let e = Client::new(&config)
        .unwrap()
        .list::<Machine>(&machines(), &ListParams::default())
        .unwrap_err();
    assert!(matches!(e, Error::Transport { .. }), "{e:?}");
}

/// A CA certificate that is valid PEM but signed nothing here: the
/// testenv's own CA from a second, unrelated mint.
fn rcgen_free_ca() -> String {
    liken_testenv::pki::Pki::mint().unwrap().ca.cert_pem
}

#[test]
fn a_rotated_token_file_is_read_again_after_a_401() {
    let cp = liken_testenv::shared();
    let admin_config = Config::from_kubeconfig(cp.kubeconfig(), None).unwrap();
    let dir = liken_testenv::scratch::TempDir::new("kube-token-rotation");
    let file = dir.path().join("token");
    let cms = Api::namespaced(CONFIG_MAPS, "default");
    let who = |e: &Error| -> String {
        assert!(matches!(e, Error::Forbidden { .. }), "{e:?}");
        e.message().to_owned()
    };
    // A file with no valid token: 401, and nothing else to read.
    std::fs::write(&file, "not-a-token").unwrap();
    let c = Client::new(&Config {
        auth: Auth::TokenFile(file.clone()),
        ..admin_config
    })
    .unwrap();
    let e = c.get::<DynamicObject>(&cms, "x").unwrap_err();
    assert!(matches!(e, Error::Unauthorized { .. }), "{e:?}");
    // The kubelet writes a good one: the 401 made the client re-read
    // at once instead of a minute later.
    std::fs::write(
        &file,
        cp.token_for("liken-kube-test", "rotation-a").unwrap(),
    )
    .unwrap();
    let e = c.get::<DynamicObject>(&cms, "x").unwrap_err();
    assert!(who(&e).contains("rotation-a"), "{e}");

    // The token in hand dies (its ServiceAccount is deleted) while the
    // file already holds the next one: the 401 is answered by reading the
    // file and sending the request again, within the same call.
    std::fs::write(
        &file,
        cp.token_for("liken-kube-test", "rotation-b").unwrap(),
    )
    .unwrap();
    let (code, _) = cp
        .request(
            "DELETE",
            "/api/v1/namespaces/liken-kube-test/serviceaccounts/rotation-a",
            None,
        )
        .unwrap();
    assert_eq!(code, 200);
    // The apiserver caches a token's success for 10 s.
    std::thread::sleep(Duration::from_secs(11));
    let e = c.get::<DynamicObject>(&cms, "x").unwrap_err();
    assert!(who(&e).contains("rotation-b"), "{e}");
}

#[test]
fn per_request_timeouts_apply() {
    let c = admin();
    let req = machines()
        .list(&ListParams::default())
        .timeout(Duration::from_micros(1));
    let e = c.send(&req).unwrap_err();
    assert!(matches!(e, Error::Transport { .. }), "{e:?}");
    assert!(e.message().to_lowercase().contains("timeout"), "{e}");
}

#[test]
fn a_store_follows_the_server_and_a_burst_wakes_once() {
    let c = admin();
    let api = machines();
    let (wake_tx, wake_rx) = wake_channel();
    let watcher = Watcher::<Machine>::new(c.clone(), api.clone()).labels("liken-test=informer");
    let informer = Informer::spawn(watcher, wake_tx);
    let store = informer.store();
    assert!(store.wait_synced(Duration::from_secs(30)));
    assert!(store.is_empty());
    while wake_rx.try_recv().is_ok() {}

    // A burst of creates.
    const N: usize = 40;
    for i in 0..N {
        c.create::<Machine, _>(
            &api,
            &machine_json(&format!("informer-{i}"), json!({"liken-test": "informer"})),
        )
        .unwrap();
    }
    // Unlabelled machines are not in this store.
    c.create::<Machine, _>(&api, &machine_json("informer-other", json!({})))
        .unwrap();
    // Nobody takes a wake while the burst lands: the loop is busy.
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.len() < N && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(store.len(), N);
    assert!(store.get("informer-other").is_none());
    // Wakes coalesce: with the store full, exactly one wake is pending
    // for the N events (none would mean a lost change, more a loop that
    // runs once per event).
    std::thread::sleep(Duration::from_millis(300));
    let mut pending = 0;
    while wake_rx.try_recv().is_ok() {
        pending += 1;
    }
    assert_eq!(pending, 1, "{pending} wakes pending after {N} events");

    // Changes and deletes arrive.
    c.merge_patch_status::<Machine>(
        &api,
        "informer-3",
        &json!({"status": {"phase": "Degraded"}}),
    )
    .unwrap();
    c.delete(&api, "informer-4", &DeleteParams::default())
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let patched = store
            .get("informer-3")
            .is_some_and(|m| m.status.phase == Some(Phase::Degraded));
        if patched && store.get("informer-4").is_none() {
            break;
        }
        let _ = wake_rx.recv_timeout(Duration::from_millis(200));
    }
    assert_eq!(
        store.get("informer-3").unwrap().status.phase,
        Some(Phase::Degraded)
    );
    assert!(store.get("informer-4").is_none());
    let stats = informer.stats();
    assert_eq!(stats.lists(), 1);
    assert_eq!(stats.restarts(), 0);
    assert!(stats.events() >= N as u64 + 2);
}

#[test]
fn a_seeded_informer_is_synced_at_once_and_watches_from_its_version() {
    let c = admin();
    let api = machines();
    for i in 0..3 {
        c.create::<Machine, _>(
            &api,
            &machine_json(&format!("seeded-{i}"), json!({"liken-test": "seeded"})),
        )
        .unwrap();
    }
    // What a restarted operator kept: a LIST and its resourceVersion.
    let kept = c
        .list_all::<Machine>(&api, &ListParams::labels("liken-test=seeded"))
        .unwrap();
    // Changes after that version reach the store through the watch.
    c.create::<Machine, _>(
        &api,
        &machine_json("seeded-late", json!({"liken-test": "seeded"})),
    )
    .unwrap();
    c.delete(&api, "seeded-0", &DeleteParams::default())
        .unwrap();
    let (wake_tx, wake_rx) = wake_channel();
    let watcher = Watcher::<Machine>::new(c.clone(), api.clone()).labels("liken-test=seeded");
    let informer = Informer::spawn_seeded(watcher, kept.items, &kept.resource_version, wake_tx);
    let store = informer.store();
    assert!(store.is_synced(), "a seeded store is synced from the start");
    let deadline = Instant::now() + Duration::from_secs(20);
    while (store.get("seeded-late").is_none() || store.get("seeded-0").is_some())
        && Instant::now() < deadline
    {
        let _ = wake_rx.recv_timeout(Duration::from_millis(200));
    }
    let mut names: Vec<String> = store
        .list()
        .iter()
        .map(|m| m.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["seeded-1", "seeded-2", "seeded-late"]);
    assert_eq!(store.take_removed(), ["seeded-0"]);
    assert_eq!(informer.stats().lists(), 0, "resumed, never listed");
    informer.stop();
}

#[test]
fn a_watch_reopens_cleanly_after_its_timeout() {
    let c = admin();
    let api = machines();
    let (wake_tx, wake_rx) = wake_channel();
    // The server ends each stream after one second; the watcher resumes
    // from the last resourceVersion without listing again.
    let watcher = Watcher::<Machine>::new(c.clone(), api.clone())
        .labels("liken-test=reopen")
        .watch_timeout(1);
    let informer = Informer::spawn(watcher, wake_tx);
    let store = informer.store();
    assert!(store.wait_synced(Duration::from_secs(30)));
    for i in 0..3 {
        std::thread::sleep(Duration::from_millis(1500));
        c.create::<Machine, _>(
            &api,
            &machine_json(&format!("reopen-{i}"), json!({"liken-test": "reopen"})),
        )
        .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.len() < 3 && Instant::now() < deadline {
        let _ = wake_rx.recv_timeout(Duration::from_millis(200));
    }
    assert_eq!(store.len(), 3);
    let stats = informer.stats();
    assert_eq!(stats.lists(), 1, "clean stream ends do not relist");
    assert_eq!(stats.restarts(), 0, "nor count as restarts");
}

struct NeverLeads;
impl liken_kube::WriteGuard for NeverLeads {
    fn may_write(&self) -> bool {
        false
    }
}

#[test]
fn events_show_in_kubectl_and_repeats_become_a_series() {
    let cp = liken_testenv::shared();
    // A standby: its guard refuses every write, yet its Events go out.
    let c = admin().with_write_guard(std::sync::Arc::new(NeverLeads));
    let m: Machine = admin()
        .create(&machines(), &machine_json("eventful", json!({})))
        .unwrap();
    let recorder = Recorder::start(
        c.clone(),
        RecorderConfig::new("liken.sh/test-operator", "test-pod"),
    )
    .unwrap();
    for _ in 0..5 {
        assert!(recorder.event(
            ObjectReference::machine(&m),
            EventType::Warning,
            "MachineLost",
            "Sweep",
            "no heartbeat from eventful for 5m0s",
        ));
    }
    assert!(recorder.event(
        ObjectReference::machine(&m),
        EventType::Normal,
        "RebootTurnGranted",
        "Grant",
        "eventful may reboot",
    ));
    // Refused before it reaches the server: the apiserver's 128 limit.
    assert!(!recorder.event(
        ObjectReference::machine(&m),
        EventType::Normal,
        &"R".repeat(129),
        "Grant",
        "too long a reason",
    ));
    let report = recorder.shutdown(Duration::from_secs(20));
    assert_eq!(
        (
            report.posted,
            report.patched,
            report.failed,
            report.invalid,
            report.abandoned
        ),
        (2, 4, 0, 1, 0),
        "{report:?}"
    );

    // events.k8s.io/v1: one MachineLost Event, its series at 5.
    let events = c
        .list_all::<DynamicObject>(
            &Api::namespaced(liken_kube::request::EVENTS, "default"),
            &ListParams::default(),
        )
        .unwrap();
    let lost: Vec<&DynamicObject> = events
        .items
        .iter()
        .filter(|e| e.0["regarding"]["name"] == "eventful" && e.0["reason"] == "MachineLost")
        .collect();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].0["series"]["count"], 5, "{:?}", lost[0]);
    assert!(lost[0].0["series"]["lastObservedTime"].is_string());

    let out = cp
        .kubectl()
        .args(["get", "events", "-n", "default", "-o", "json"])
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mine: Vec<&serde_json::Value> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["involvedObject"]["name"] == "eventful")
        .collect();
    let reasons: BTreeSet<&str> = mine.iter().filter_map(|e| e["reason"].as_str()).collect();
    assert_eq!(
        reasons,
        BTreeSet::from(["MachineLost", "RebootTurnGranted"])
    );
    let lost = mine.iter().find(|e| e["reason"] == "MachineLost").unwrap();
    assert_eq!(lost["type"], "Warning");
    assert_eq!(lost["message"], "no heartbeat from eventful for 5m0s");
    assert_eq!(lost["involvedObject"]["kind"], "Machine");
    assert_eq!(lost["involvedObject"]["uid"], m.metadata.uid.as_str());
    assert_eq!(
        lost["series"]["count"], 5,
        "core/v1 shows the series: {lost}"
    );

    // And in the table a person reads.
    let out = cp
        .kubectl()
        .args([
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            "involvedObject.name=eventful",
        ])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("MachineLost") && table.contains("machine/eventful"),
        "{table}"
    );
}

/// A loopback port in front of the apiserver that answers nothing on
/// its first `silent` connections (they are held open, unread past the
/// kernel's buffer) and passes every later one through byte for byte:
/// an apiserver that is, for a moment, too slow to answer.
struct SilentFirst {
    addr: std::net::SocketAddr,
    held: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl SilentFirst {
    fn start(upstream: String, silent: usize) -> SilentFirst {
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = held.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let mut kept = keep.lock().unwrap();
                if kept.len() < silent {
                    kept.push(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    });
                }
            }
        });
        SilentFirst { addr, held }
    }

    fn held(&self) -> usize {
        self.held.lock().unwrap().len()
    }
}

#[test]
fn an_event_whose_post_gets_no_answer_is_posted_on_the_next_try() {
    let cp = liken_testenv::shared();
    let mut config = Config::from_kubeconfig(cp.kubeconfig(), None).unwrap();
    let upstream = config.server.trim_start_matches("https://").to_owned();
    let proxy = SilentFirst::start(upstream, 1);
    // The apiserver's certificate names 127.0.0.1, whatever the port.
    config.server = format!("https://{}", proxy.addr);
    let c = Client::new(&config).unwrap();
    let m: Machine = admin()
        .create(&machines(), &machine_json("answerless", json!({})))
        .unwrap();
    let mut rc = RecorderConfig::new("liken.sh/test-operator", "test-pod");
    rc.request_timeout = Duration::from_secs(2);
    rc.retry_waits = vec![Duration::from_millis(100); 4];
    let recorder = Recorder::start(c, rc).unwrap();
    assert!(recorder.event(
        ObjectReference::machine(&m),
        EventType::Normal,
        "DisruptionApproved",
        "Reconcile",
        "said once, when it happens",
    ));
    let report = recorder.shutdown(Duration::from_secs(30));
    assert_eq!(proxy.held(), 1, "the first try met the silent connection");
    assert_eq!((report.posted, report.failed), (1, 0), "{report:?}");
    let events = admin()
        .list_all::<DynamicObject>(
            &Api::namespaced(liken_kube::request::EVENTS, "default"),
            &ListParams::default(),
        )
        .unwrap();
    let mine: Vec<&DynamicObject> = events
        .items
        .iter()
        .filter(|e| e.0["regarding"]["name"] == "answerless")
        .collect();
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(mine[0].0["reason"], "DisruptionApproved");

    // A try that landed without its answer: the next try of the same
    // name is refused as AlreadyExists, which the recorder counts as
    // posted (decide_retry's Landed).
    let name = mine[0].0["metadata"]["name"].as_str().unwrap();
    let mut again = mine[0].0.clone();
    for k in [
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "managedFields",
    ] {
        again["metadata"].as_object_mut().unwrap().remove(k);
    }
    let e = admin()
        .create::<DynamicObject, _>(
            &Api::namespaced(liken_kube::request::EVENTS, "default"),
            &again,
        )
        .unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{name}: {e:?}");
    assert_eq!(
        liken_kube::events::decide_retry(&e, true, true),
        liken_kube::events::Retry::Landed
    );
}

#[test]
fn an_event_about_a_long_named_object_is_accepted() {
    let c = admin();
    // 253 characters, the longest name a Machine can have.
    let name = format!(
        "{}.{}.{}.{}",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61)
    );
    assert_eq!(name.len(), 253);
    let m: Machine = c
        .create(&machines(), &machine_json(&name, json!({})))
        .unwrap();
    let recorder =
        Recorder::start(c, RecorderConfig::new("liken.sh/test-operator", "test-pod")).unwrap();
    let note = "é".repeat(700);
    assert!(recorder.event(
        ObjectReference::machine(&m),
        EventType::Normal,
        "Named",
        "Name",
        &note,
    ));
    let report = recorder.shutdown(Duration::from_secs(10));
    assert_eq!((report.posted, report.failed), (1, 0), "{report:?}");
}
