//! The test control plane itself: it starts, serves liken's CRDs, hands
//! out working credentials, and leaves nothing behind.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use liken_testenv::{Options, start};

#[test]
fn starts_serves_crds_issues_tokens_and_cleans_up() {
    let cp = start(Options::default()).expect("the control plane starts");
    eprintln!("startup took {:.1}s", cp.startup_time().as_secs_f64());

    // The kubeconfig is private.
    let mode = std::fs::metadata(cp.kubeconfig())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // Both CRDs are served.
    for plural in ["machines", "clusters"] {
        let (code, v) = cp
            .request("GET", &format!("/apis/liken.sh/v1alpha1/{plural}"), None)
            .unwrap();
        assert_eq!(code, 200, "{v}");
    }

    // RBAC is on: a fresh ServiceAccount's token authenticates as that
    // account and is refused what it was not granted.
    let token = cp.token_for("testenv-check", "robot").unwrap();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::new_with_certs(&[
                    ureq::tls::Certificate::from_pem(cp.ca_pem().as_bytes()).unwrap(),
                ]))
                .build(),
        )
        .http_status_as_error(false)
        .build()
        .into();
    let review = agent
        .post(format!(
            "{}/apis/authentication.k8s.io/v1/selfsubjectreviews",
            cp.server()
        ))
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .send(r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#)
        .unwrap()
        .into_body()
        .read_to_string()
        .unwrap();
    let review: serde_json::Value = serde_json::from_str(&review).unwrap();
    assert_eq!(
        review["status"]["userInfo"]["username"],
        "system:serviceaccount:testenv-check:robot"
    );
    let denied = agent
        .get(format!(
            "{}/api/v1/namespaces/kube-system/secrets",
            cp.server()
        ))
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .unwrap();
    assert_eq!(denied.status(), 403);

    // etcd answers on its gateway.
    assert!(cp.etcd_revision().unwrap() > 0);
    let rev = cp.compact_etcd().unwrap();
    assert!(rev > 0);

    // Dropping kills every process and removes the directory.
    let pids = cp.pids();
    let dir = cp.dir().to_owned();
    assert_eq!(pids.len(), 2, "{pids:?}");
    drop(cp);
    std::thread::sleep(Duration::from_millis(200));
    for (name, pid) in pids {
        let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
        assert!(
            rustix::process::test_kill_process(pid).is_err(),
            "{name} survived the drop"
        );
    }
    assert!(!dir.exists());
}

#[test]
fn the_controller_manager_runs_when_asked() {
    let cp = start(Options {
        controller_manager: true,
        ..Options::default()
    })
    .expect("the control plane with kube-controller-manager starts");
    eprintln!(
        "startup with kube-controller-manager took {:.1}s",
        cp.startup_time().as_secs_f64()
    );
    assert_eq!(cp.pids().len(), 3);
    // Its serviceaccount controller gives every new namespace a
    // `default` ServiceAccount.
    cp.ensure_namespace("kcm-check").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (code, _) = cp
            .request(
                "GET",
                "/api/v1/namespaces/kcm-check/serviceaccounts/default",
                None,
            )
            .unwrap();
        if code == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no default ServiceAccount"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// kwok, kube-scheduler and kube-controller-manager together: a Node kwok
/// keeps Ready, a pod the scheduler binds to it that kwok runs, a
/// PodDisruptionBudget the disruption controller judges, an eviction the
/// apiserver refuses on it, and the audit log naming each write and its
/// writer.
#[test]
fn kwok_runs_pods_and_the_audit_log_names_every_write() {
    use serde_json::json;
    let cp = start(Options {
        controller_manager: true,
        kwok: true,
        audit: true,
        ..Options::default()
    })
    .expect("the control plane with kwok, the scheduler and the audit log starts");
    eprintln!(
        "startup with kcm, scheduler and kwok took {:.1}s",
        cp.startup_time().as_secs_f64()
    );
    assert_eq!(cp.pids().len(), 5, "{:?}", cp.pids());

    cp.create_node("kwok-0", &[("liken.sh/test", "yes")])
        .expect("kwok makes the node Ready");
    cp.ensure_namespace("kwok-check").unwrap();
    let mark = cp.audit_mark().unwrap();

    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "kwok-check", "labels": {"app": "p"}},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/nothing"}],
                 "nodeSelector": {"liken.sh/test": "yes"}}});
    let (code, v) = cp
        .request("POST", "/api/v1/namespaces/kwok-check/pods", Some(&pod))
        .unwrap();
    assert_eq!(code, 201, "{v}");
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "p", "namespace": "kwok-check"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "p"}}}});
    let (code, v) = cp
        .request(
            "POST",
            "/apis/policy/v1/namespaces/kwok-check/poddisruptionbudgets",
            Some(&pdb),
        )
        .unwrap();
    assert_eq!(code, 201, "{v}");

    // Scheduled onto the kwok node and Running there.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let (_, v) = cp
            .request("GET", "/api/v1/namespaces/kwok-check/pods/p", None)
            .unwrap();
        if v["spec"]["nodeName"] == "kwok-0" && v["status"]["phase"] == "Running" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pod never ran on kwok-0: {v}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // The disruption controller has judged the budget: with the one pod
    // Ready and minAvailable 1, no disruption is allowed, and the
    // Eviction API refuses with 429.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (_, v) = cp
            .request(
                "GET",
                "/apis/policy/v1/namespaces/kwok-check/poddisruptionbudgets/p",
                None,
            )
            .unwrap();
        if v["status"]["currentHealthy"] == 1 && v["status"]["disruptionsAllowed"] == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the disruption controller never judged the budget: {v}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "p", "namespace": "kwok-check"}});
    let (code, v) = cp
        .request(
            "POST",
            "/api/v1/namespaces/kwok-check/pods/p/eviction",
            Some(&eviction),
        )
        .unwrap();
    assert_eq!(code, 429, "the budget must refuse the eviction: {v}");

    // The audit log holds exactly the admin's three writes since the
    // mark, in order, with their answers, and the scheduler's binding.
    let events = cp.audit_since(mark).unwrap();
    let admin: Vec<String> = events
        .iter()
        .filter(|e| e.is_write() && e.user == "liken-testenv-admin")
        .map(|e| e.describe())
        .collect();
    assert_eq!(
        admin,
        [
            "create pods kwok-check/p -> 201 by liken-testenv-admin",
            "create poddisruptionbudgets kwok-check/p -> 201 by liken-testenv-admin",
            "create pods/eviction kwok-check/p -> 429 by liken-testenv-admin",
        ],
        "all events: {events:#?}"
    );
    let scheduler = liken_testenv::audit::service_account_user("kube-system", "testenv-scheduler");
    assert!(
        events.iter().any(|e| e.resource == "pods"
            && e.subresource == "binding"
            && e.user == scheduler
            && e.code == 201),
        "the scheduler's binding is in the log under its own name: {events:#?}"
    );

    // A ServiceAccount kubeconfig authenticates as that account, and its
    // writes are logged under its own name.
    let kc = cp.kubeconfig_for("kwok-check", "robot").unwrap();
    let mode = std::fs::metadata(&kc).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let text = std::fs::read_to_string(&kc).unwrap();
    assert!(text.contains("token: "), "{text}");
    let mark = cp.audit_mark().unwrap();
    let out = cp
        .kubectl_as(&kc)
        .args(["-n", "kwok-check", "delete", "pod", "p"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "RBAC must refuse the robot");
    let writes = cp
        .writes_by(
            &liken_testenv::audit::service_account_user("kwok-check", "robot"),
            mark,
        )
        .unwrap();
    assert_eq!(
        writes.iter().map(|e| e.describe()).collect::<Vec<_>>(),
        ["delete pods kwok-check/p -> 403 by system:serviceaccount:kwok-check:robot"]
    );
}
