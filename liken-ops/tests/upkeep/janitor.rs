//! The feature janitor against a real apiserver, with the garbage
//! collector and kwok running the DaemonSets' pods.

use std::time::Duration;

use liken_kube::request::DAEMON_SETS;
use liken_kube::{Api, DynamicObject};
use liken_ops::cluster::janitor;
use serde_json::json;

use crate::support;

fn daemon_set(name: &str, feature: Option<&str>) -> serde_json::Value {
    let mut ds = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "liken-system"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.example/c:1"}]},
            },
        },
    });
    if let Some(f) = feature {
        ds["metadata"]["annotations"] = json!({"liken.sh/feature": f});
    }
    ds
}

/// A retracted feature's DaemonSet goes (and its pods with it); a
/// declared feature's and an unannotated one stay; a settled namespace
/// costs one LIST.
pub fn scenario() {
    let cp = support::cp();
    let admin = support::admin();
    let operator = support::operator();
    cp.create_node("care-node", &[("kubernetes.io/os", "linux")])
        .unwrap();
    let api = Api::namespaced(DAEMON_SETS, "liken-system");
    for (name, feature) in [
        ("iscsid", Some("iscsi")),
        ("flux-agent", Some("flux")),
        ("plain", None),
    ] {
        admin
            .create::<DynamicObject, _>(&api, &daemon_set(name, feature))
            .unwrap();
    }
    support::wait(Duration::from_secs(60), "iscsid's pods", || {
        !support::pods("liken-system", "app=iscsid").is_empty()
    });
    let cluster = support::cluster("janitored", &[("flux", None)]);

    let mark = cp.audit_mark().unwrap();
    janitor::sweep(&operator, &cluster);
    let requests: Vec<String> = support::operator_requests(mark)
        .iter()
        .map(|e| e.describe())
        .collect();
    let user = support::operator_user();
    // The DaemonSet controller writes iscsid's status while its pods come
    // up, so a delete may meet a newer resourceVersion; the sweep then
    // lists again within the same pass. Whatever the timing, the pass is
    // rounds of one list and one delete, ending in the delete that took.
    let list = format!("list daemonsets liken-system/ -> 200 by {user}");
    let conflict = format!("delete daemonsets liken-system/iscsid -> 409 by {user}");
    let deleted = format!("delete daemonsets liken-system/iscsid -> 200 by {user}");
    let rounds: Vec<&[String]> = requests.chunks(2).collect();
    assert!(
        (1..=janitor::ROUNDS).contains(&rounds.len()) && requests.len().is_multiple_of(2),
        "{requests:#?}"
    );
    for (i, round) in rounds.iter().enumerate() {
        let last = i + 1 == rounds.len();
        let want = [
            list.clone(),
            if last {
                deleted.clone()
            } else {
                conflict.clone()
            },
        ];
        assert_eq!(round, &want, "round {i} of {requests:#?}");
    }
    support::wait_gone(&admin, &api, "iscsid");
    support::wait(
        Duration::from_secs(60),
        "iscsid's pods to be collected",
        || support::pods("liken-system", "app=iscsid").is_empty(),
    );
    for name in ["flux-agent", "plain"] {
        assert!(
            admin
                .get_opt::<DynamicObject>(&api, name)
                .unwrap()
                .is_some(),
            "{name}"
        );
    }

    let mark = cp.audit_mark().unwrap();
    janitor::sweep(&operator, &cluster);
    assert!(support::operator_writes(mark).is_empty());

    for name in ["flux-agent", "plain"] {
        admin.delete(&api, name, &Default::default()).unwrap();
    }
}
