//! The halt of a failed release on the machine side, against a real
//! control plane of its own (a target release and a halt are fleet-wide,
//! so this test shares its Cluster with no other), a channel served by
//! Debian's nginx, and init's control-socket double.

#[path = "machine/support.rs"]
mod support;

use std::time::Duration;

use liken_api::BootAssessment;
use liken_api::control::Request;
use liken_api::coordination::{RELEASE_CURRENT, reason};
use liken_testenv::nginx::Nginx;
use liken_testenv::scratch::TempDir;
use serde_json::json;
use support::*;

const NEW: &str = "2026.12.02-001";

/// A halt stops the release everywhere (issue 21): a machine that wrote
/// the release before the rollout halted asks init to disarm it, stops
/// asking for the reboot that boots it, and a reboot after that (a power
/// cut) comes back on the running release; while the halt lasts nothing
/// is written again. Before, the written release stayed armed and the
/// machine kept asking for a turn to boot it.
#[test]
fn a_halted_release_is_disarmed_and_a_power_cut_boots_the_running_one() {
    let channel = TempDir::new("machine-op-halt-channel");
    let good = write_release(channel.path(), NEW, 1, false);
    let www = TempDir::new("machine-op-halt-nginx");
    let nginx = Nginx::start(www.path(), channel.path());
    let m = machine_doc("halt-1");
    let c = cluster_doc(&["halt-1"]);
    let (host, op) = start_machine("halt-1", &m, &c, &[]);
    host.assess(BootAssessment {
        counted: true,
        blessed: true,
        other_slot_bad: false,
    });
    // init is busy writing (another client, a disarm): that is not a
    // failure of the release, and the write is asked again after a
    // backoff, not on every pass. Before, the machine reported the
    // release Blocked.
    host.state.lock().unwrap().refuse_write = Some(liken_api::control::WRITE_BUSY.into());
    target(&nginx.url, NEW, &[(NEW, &good)]);
    wait_for("init to be asked to write", Duration::from_secs(60), || {
        let asked = host.asked();
        (!asked.is_empty())
            .then_some(())
            .ok_or_else(|| op.log_text())
    });
    std::thread::sleep(Duration::from_secs(3));
    let busy = machine("halt-1").unwrap();
    assert!(
        has_reason(&busy, RELEASE_CURRENT, reason::DOWNLOADING),
        "{:#?}",
        busy.status.conditions
    );
    assert_eq!(host.asked().len(), 1, "asked again within the backoff");
    host.state.lock().unwrap().refuse_write = None;
    release_reason(
        "halt-1",
        &op,
        reason::AWAITING_TURN,
        &format!("release {OLD} → {NEW}"),
    );
    let writes = host.asked().len();
    assert!(matches!(
        host.asked().last(),
        Some(Request::WriteRelease(_))
    ));

    // The cluster operator halts NEW (it failed on another machine).
    let path = "/apis/liken.sh/v1alpha1/clusters/home/status";
    wait_for("the halt to be stored", Duration::from_secs(10), || {
        let mut v = get("/apis/liken.sh/v1alpha1/clusters/home").unwrap();
        v["status"]["rolloutHalt"] = json!({
            "release": NEW, "machine": "elsewhere", "cause": "FellBack",
            "since": "2026-12-04T10:00:00Z",
        });
        match cp().request("PUT", path, Some(&v)).unwrap() {
            (200, _) => Ok(()),
            (code, body) => Err(format!("{code} {body}")),
        }
    });
    let halted = release_reason("halt-1", &op, reason::ROLLOUT_HALTED, "is not written");
    assert!(
        halted.status.pending.is_empty(),
        "{:?}",
        halted.status.pending
    );
    assert_eq!(halted.status.release.as_ref().unwrap().staged, None);
    assert!(!liken_api::coordination::wants_turn(
        &halted.status.conditions
    ));
    assert!(has_event("halt-1", "ReleaseDisarmed", NEW));
    let asked = host.asked();
    assert_eq!(
        &asked[writes..],
        [Request::DisarmRelease],
        "disarmed once, nothing written again: {asked:?}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(host.asked().len(), writes + 1, "{:?}", host.asked());

    // A power cut: the machine comes back on the running release.
    op.stop();
    host.reboot(&m, &c);
    assert_eq!(host.record().version.unwrap().as_str(), OLD);
}
