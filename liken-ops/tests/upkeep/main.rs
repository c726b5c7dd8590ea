//! The cluster operator's upkeep against real parts: the flux feature
//! (deploy key, engine seed, teardown), the feature janitor and the
//! steward, each on its own and then through the liken-cluster-operator
//! binary's sweep.
//!
//! One control plane serves the binary (kube-apiserver with its audit
//! log, kube-controller-manager for namespace deletion, garbage
//! collection and DaemonSets, kube-scheduler and kwok for pods on fake
//! nodes). The code under test runs under the cluster operator's own
//! ServiceAccount token, bound by the RBAC files the release ships, so a
//! missing verb fails. The scenarios share namespaces the code names
//! (flux-system, liken-system), so they run in order in one test, which then holds the
//! shipped rules to exactly what the scenarios used.

mod binary;
mod engine;
mod janitor;
mod key;
mod steward;
mod support;
mod teardown;

use liken_testenv::audit::{compare_rbac, grants};

use support::{FLUX_FEATURE, UPKEEP_RBAC};

#[test]
fn upkeep_under_exactly_the_shipped_rbac() {
    let cp = support::cp();
    key::without_the_grant();

    let mark = cp.audit_mark().unwrap();
    support::apply(UPKEEP_RBAC);
    key::scenario();
    engine::scenario();
    teardown::scenario();
    janitor::scenario();
    steward::scenario();
    binary::scenario();

    // Every request (the binary's too) is granted by the files the
    // release ships; every rule of the upkeep's own files was used (the
    // cluster operator's own file is held to its sweep by its own tests).
    let used = support::operator_requests(mark);
    let read =
        |file: &str| grants(&std::fs::read_to_string(support::root().join(file)).unwrap()).unwrap();
    let upkeep: Vec<_> = [UPKEEP_RBAC, FLUX_FEATURE]
        .into_iter()
        .flat_map(read)
        .collect();
    let mut shipped = upkeep.clone();
    shipped.extend(binary::OPERATOR_MANIFESTS.into_iter().flat_map(read));
    let rbac = compare_rbac(&shipped, &used);
    assert!(
        rbac.ungranted.is_empty(),
        "used but not granted: {:#?}",
        rbac.ungranted
    );
    let rbac = compare_rbac(&upkeep, &used);
    assert!(
        rbac.unused.is_empty(),
        "granted but never used: {:#?}",
        rbac.unused
    );

    // Last, as its refused requests are no use the rules above must
    // grant: what the operator's token cannot do with them.
    engine::cannot_grant_itself_anything();
}
