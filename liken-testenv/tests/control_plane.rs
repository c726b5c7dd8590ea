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
