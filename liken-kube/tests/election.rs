//! Leader election against a real apiserver: two candidates on one Lease
//! never both may write, across many handovers, including holders killed
//! mid-term (their renew thread stopped with no release, their guard left
//! to lapse by the clock).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use liken_kube::election::{Callbacks, ElectionConfig, Elector, LeaderGuard, Lease, Timings};
use liken_kube::request::{CONFIG_MAPS, LEASES};
use liken_kube::{Api, Client, DynamicObject, Error, WriteGuard};
use serde_json::json;

mod support;
use support::admin;

fn quiet() -> Callbacks {
    Callbacks::default().report(Arc::new(|line| eprintln!("election: {line}")))
}

fn elect(c: &Client, lease: &str, id: &str, timings: Timings) -> Elector {
    Elector::start(
        c.clone(),
        ElectionConfig {
            namespace: "default".into(),
            name: lease.into(),
            identity: id.into(),
            timings,
            labels: Default::default(),
        },
        quiet(),
    )
    .unwrap()
}

#[test]
fn client_go_timings_release_on_shutdown_and_guard_writes() {
    let c = admin();
    let a = elect(&c, "liken-test-basic", "a", Timings::default());
    assert!(
        a.wait_leading(Duration::from_secs(10)),
        "a never led an unheld Lease"
    );
    let b = elect(&c, "liken-test-basic", "b", Timings::default());

    let leases = Api::namespaced(LEASES, "default");
    let lease: Lease = c.get(&leases, "liken-test-basic").unwrap();
    assert_eq!(lease.spec.holder_identity.as_deref(), Some("a"));
    assert_eq!(lease.spec.lease_duration_seconds, Some(15));

    // Writes through each candidate's guarded client.
    let cms = Api::namespaced(CONFIG_MAPS, "default");
    let cm = |n: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}});
    let as_a = c.with_write_guard(Arc::new(a.guard()));
    let as_b = c.with_write_guard(Arc::new(b.guard()));
    as_a.create::<DynamicObject, _>(&cms, &cm("written-by-a"))
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(!b.may_write());
    let e = as_b
        .create::<DynamicObject, _>(&cms, &cm("written-by-b"))
        .unwrap_err();
    assert!(matches!(e, Error::NotLeader { .. }), "{e:?}");
    // Reads are never guarded.
    as_b.get::<DynamicObject>(&cms, "written-by-a").unwrap();

    // a shuts down: it stops writing, releases, and b takes over within a
    // retry period or two instead of waiting out 15 s.
    let released = Instant::now();
    a.shutdown();
    assert!(!as_a.may_write());
    assert!(
        b.wait_leading(Duration::from_secs(8)),
        "b did not take the released Lease"
    );
    eprintln!(
        "handover after release: {:.1}s",
        released.elapsed().as_secs_f64()
    );
    let lease: Lease = c.get(&leases, "liken-test-basic").unwrap();
    assert_eq!(lease.spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(lease.spec.lease_transitions, Some(1));
    as_b.create::<DynamicObject, _>(&cms, &cm("written-by-b"))
        .unwrap();
    b.shutdown();
    let lease: Lease = c.get(&leases, "liken-test-basic").unwrap();
    assert_eq!(lease.spec.holder_identity, None);
    assert_eq!(lease.spec.lease_duration_seconds, Some(1));
}

#[test]
fn two_candidates_never_both_may_write() {
    let c = admin();
    // client-go's ratios, scaled down so many handovers fit in a test:
    // a 1 s margin between the holder's deadline and a rival's takeover.
    let timings = Timings {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(400),
    };
    let lease = "liken-test-rounds";
    let guards: Arc<Mutex<Vec<(String, LeaderGuard)>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let both = Arc::new(AtomicU64::new(0));
    let samples = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (guards, done, both, samples) =
            (guards.clone(), done.clone(), both.clone(), samples.clone());
        std::thread::spawn(move || {
            let mut offenders = Vec::new();
            while !done.load(Ordering::SeqCst) {
                let gs = guards.lock().unwrap().clone();
                let writers: Vec<&String> = gs
                    .iter()
                    .filter(|(_, g)| g.may_write())
                    .map(|(n, _)| n)
                    .collect();
                if writers.len() > 1 {
                    both.fetch_add(1, Ordering::SeqCst);
                    offenders.push(format!("{writers:?}"));
                }
                samples.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
            offenders
        })
    };

    let mut next_id = 0;
    let mut spawn = |guards: &Mutex<Vec<(String, LeaderGuard)>>| {
        next_id += 1;
        let id = format!("candidate-{next_id}");
        let e = elect(&c, lease, &id, timings);
        guards.lock().unwrap().push((id.clone(), e.guard()));
        (id, e)
    };
    let mut slots = vec![spawn(&guards), spawn(&guards)];
    let leases = Api::namespaced(LEASES, "default");
    let mut transitions_seen: Vec<i32> = Vec::new();
    let mut leaders = Vec::new();
    let mut still_writable_after_kill = 0;
    const ROUNDS: usize = 8;
    let mut rng = 0x9E37_79B9u64;
    for round in 0..ROUNDS {
        // Wait for a leader among the live candidates.
        let deadline = Instant::now() + timings.lease_duration * 4;
        let holder = loop {
            if let Some(i) = slots.iter().position(|(_, e)| e.may_write()) {
                break i;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: nobody took the Lease"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        // The server agrees: the Lease names the candidate whose guard is
        // open, and its transitions counted one more handover.
        let on_server: Lease = c.get(&leases, lease).unwrap();
        assert_eq!(
            on_server.spec.holder_identity.as_deref(),
            Some(slots[holder].0.as_str()),
            "round {round}: the guard is open but the Lease names another holder"
        );
        let transitions = on_server.spec.lease_transitions.unwrap_or(0);
        if let Some(before) = transitions_seen.last() {
            assert!(
                transitions > *before,
                "round {round}: leaseTransitions {transitions} after {before}"
            );
        }
        transitions_seen.push(transitions);
        leaders.push(slots[holder].0.clone());
        // Let it hold for part of its term, then end it.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(rng % 1200));
        let (id, elector) = slots.remove(holder);
        if round % 4 == 3 {
            elector.shutdown();
            eprintln!("round {round}: {id} shut down and released");
        } else {
            elector.abandon();
            if guards
                .lock()
                .unwrap()
                .iter()
                .any(|(n, g)| *n == id && g.may_write())
            {
                still_writable_after_kill += 1;
            }
            eprintln!("round {round}: {id} killed mid-term");
        }
        slots.push(spawn(&guards));
    }
    // Wait out the last killed holder's deadline, then stop.
    std::thread::sleep(timings.lease_duration);
    for (_, e) in slots {
        e.shutdown();
    }
    done.store(true, Ordering::SeqCst);
    let offenders = sampler.join().unwrap();
    eprintln!(
        "{} samples, leaders {leaders:?}, guards still open right after a kill: {still_writable_after_kill}",
        samples.load(Ordering::Relaxed)
    );
    assert_eq!(
        both.load(Ordering::SeqCst),
        0,
        "two writers at once: {offenders:?}"
    );
    assert_eq!(leaders.len(), ROUNDS);
    // The kills were real: a killed holder's guard outlived its thread,
    // and the rival still waited.
    assert!(still_writable_after_kill > 0);
    assert!(samples.load(Ordering::Relaxed) > 1000);
}

#[test]
fn callbacks_gauge_and_liveness() {
    use liken_kube::metrics::Registry;
    let c = admin();
    let timings = Timings {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(400),
    };
    let lease = "liken-test-callbacks";
    let (tx, rx) = crossbeam_channel::unbounded::<String>();
    let callbacks = |id: &str| {
        let (a, b, n) = (tx.clone(), tx.clone(), tx.clone());
        let (ia, ib, i_n) = (id.to_owned(), id.to_owned(), id.to_owned());
        quiet()
            .on_started_leading(move || a.send(format!("{ia} started")).unwrap())
            .on_stopped_leading(move || b.send(format!("{ib} stopped")).unwrap())
            .on_new_leader(move |l| n.send(format!("{i_n} sees {l}")).unwrap())
    };
    let start = |id: &str| {
        Elector::start(
            c.clone(),
            ElectionConfig {
                namespace: "default".into(),
                name: lease.into(),
                identity: id.into(),
                timings,
                labels: Default::default(),
            },
            callbacks(id),
        )
        .unwrap()
    };
    let next = || {
        rx.recv_timeout(Duration::from_secs(15))
            .expect("a callback within 15 s")
    };
    let registry = Registry::new();
    let a = start("a");
    a.register(&registry, Duration::from_secs(1));
    assert_eq!(next(), "a sees a");
    assert_eq!(next(), "a started");
    let gauge = "leader_election_master_status{name=\"default/liken-test-callbacks\"}";
    assert!(
        registry.render().lines().any(|l| l == format!("{gauge} 1")),
        "{}",
        registry.render()
    );
    assert_eq!(a.leader().as_deref(), Some("a"));
    let b = start("b");
    assert_eq!(next(), "b sees a");
    assert_eq!(b.leader().as_deref(), Some("a"));

    // a shuts down: it stops leading (its gauge drops), b takes over.
    a.shutdown();
    assert_eq!(next(), "a stopped");
    assert!(registry.render().lines().any(|l| l == format!("{gauge} 0")));
    assert_eq!(next(), "b sees b");
    assert_eq!(next(), "b started");
    assert!(registry.check_health().is_empty());

    // b's election thread dies without a word (abandon): b still believes
    // it leads, and after the lease duration plus the tolerance its
    // liveness check says it is stuck.
    b.register(&registry, Duration::from_secs(1));
    let shared_check = {
        let r = registry.clone();
        move || r.check_health()
    };
    b.abandon();
    assert!(shared_check().is_empty(), "not stuck yet");
    std::thread::sleep(timings.lease_duration + Duration::from_secs(2));
    let failures = shared_check();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].starts_with("leader-election: the leader has not renewed"),
        "{failures:?}"
    );
    assert!(rx.try_recv().is_err(), "abandon runs no callbacks");
}

#[test]
fn renewals_keep_what_the_lease_carries() {
    let c = admin();
    let cms = Api::namespaced(CONFIG_MAPS, "default");
    let owner: DynamicObject = c
        .create(
            &cms,
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "lease-owner"}}),
        )
        .unwrap();
    let leases = Api::namespaced(LEASES, "default");
    c.create::<DynamicObject, _>(
        &leases,
        &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "liken-test-keep",
                             "labels": {"app.kubernetes.io/part-of": "liken"},
                             "annotations": {"liken.sh/note": "kept"},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                  "name": "lease-owner",
                                                  "uid": owner.0["metadata"]["uid"]}]},
                "spec": {}}),
    )
    .unwrap();
    let timings = Timings {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(400),
    };
    let e = elect(&c, "liken-test-keep", "keeper", timings);
    assert!(e.wait_leading(Duration::from_secs(10)));
    let taken: DynamicObject = c.get(&leases, "liken-test-keep").unwrap();
    // Several renewals (every 0.4 s).
    std::thread::sleep(Duration::from_secs(2));
    let check = |when: &str| {
        let l: DynamicObject = c.get(&leases, "liken-test-keep").unwrap();
        let m = &l.0["metadata"];
        assert_eq!(
            m["labels"]["app.kubernetes.io/part-of"], "liken",
            "{when}: {l:?}"
        );
        assert_eq!(m["annotations"]["liken.sh/note"], "kept", "{when}: {l:?}");
        assert_eq!(
            m["ownerReferences"][0]["name"], "lease-owner",
            "{when}: {l:?}"
        );
        l
    };
    let l = check("after renewals");
    assert_eq!(l.0["spec"]["holderIdentity"], "keeper");
    assert_ne!(
        l.0["metadata"]["resourceVersion"], taken.0["metadata"]["resourceVersion"],
        "no renewal was written"
    );
    e.shutdown();
    let l = check("after release");
    assert!(l.0["spec"]["holderIdentity"].is_null(), "{l:?}");
}

/// The labels a candidate is configured with are on the Lease it creates,
/// come back after anyone removes them (the next renewal restores them),
/// and leave every other label alone; the guard reports the renewals.
#[test]
fn the_lease_keeps_its_labels_across_renewals() {
    let c = admin();
    let timings = Timings {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(300),
    };
    let e = Elector::start(
        c.clone(),
        ElectionConfig {
            namespace: "default".into(),
            name: "liken-test-labels".into(),
            identity: "a".into(),
            timings,
            labels: [("liken.sh/heartbeat".to_owned(), "election".to_owned())].into(),
        },
        quiet(),
    )
    .unwrap();
    assert!(e.wait_leading(Duration::from_secs(10)));
    let leases = Api::namespaced(LEASES, "default");
    let label = |l: &Lease, key: &str| l.metadata.other["labels"][key].as_str().map(str::to_owned);
    let lease: Lease = c.get(&leases, "liken-test-labels").unwrap();
    assert_eq!(
        label(&lease, "liken.sh/heartbeat").as_deref(),
        Some("election")
    );

    // A person drops the label and adds one of their own.
    c.merge_patch::<Lease>(
        &leases,
        "liken-test-labels",
        &json!({"metadata": {"labels": {"liken.sh/heartbeat": null, "team": "ops"}}}),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let restored = loop {
        let lease: Lease = c.get(&leases, "liken-test-labels").unwrap();
        if label(&lease, "liken.sh/heartbeat").is_some() || Instant::now() > deadline {
            break lease;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        label(&restored, "liken.sh/heartbeat").as_deref(),
        Some("election"),
        "the renewal did not put the label back"
    );
    assert_eq!(label(&restored, "team").as_deref(), Some("ops"));

    let guard = e.guard();
    let first = guard.renewed_at().expect("a leader has renewed");
    std::thread::sleep(Duration::from_secs(1));
    assert!(guard.renewed_at().unwrap() > first, "renewals go on");
    e.shutdown();
    assert_eq!(
        guard.renewed_at(),
        None,
        "no renewal claimed after shutdown"
    );
}
