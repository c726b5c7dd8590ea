//! The machine operator's releases, against a real control plane (its own:
//! a target release is fleet-wide, so these tests do not share a Cluster
//! with the others), a channel served by Debian's nginx, the deployment's
//! trust root in the ConfigMap init renders, and init's own verification
//! of what the operator asks it to write.

#[path = "machine/support.rs"]
mod support;

use std::time::Duration;

use liken_api::control::Request;
use liken_api::coordination::reason;
use liken_api::{BootAssessment, Phase};
use liken_testenv::nginx::Nginx;
use liken_testenv::scratch::TempDir;
use serde_json::json;
use support::*;

const NEW: &str = "2026.12.02-001";
const TAMPERED: &str = "2026.12.03-001";
const UNTRUSTED: &str = "2026.12.04-001";
const UNSIGNED: &str = "2026.12.05-001";
const FOREIGN: &str = "2026.12.06-001";

#[test]
fn a_target_release_is_verified_waits_for_the_blessing_is_written_and_booted() {
    let channel = TempDir::new("machine-op-channel");
    let good = write_release(channel.path(), NEW, 1, false);
    let tampered = write_release(channel.path(), TAMPERED, 2, true);
    let _ = write_release(channel.path(), UNTRUSTED, 3, false);
    let untrusted_pin = liken_api::Digest::from(liken_api::hash::sha256(b"another release.yaml"));
    let unsigned = write_release(channel.path(), UNSIGNED, 4, false);
    let foreign = write_release(channel.path(), FOREIGN, 5, false);
    // The deployment trusts key A; B is a stranger's.
    let (a, _) = liken_api::signing::key_pair([11; 32]);
    let (b, _) = liken_api::signing::key_pair([12; 32]);
    for v in [NEW, TAMPERED, UNTRUSTED] {
        sign_release(channel.path(), v, &a);
    }
    sign_release(channel.path(), FOREIGN, &b);
    let www = TempDir::new("machine-op-nginx");
    let nginx = Nginx::start(www.path(), channel.path());

    let m = machine_doc("rel-1");
    let c = cluster_doc(&["rel-1"]);
    seed_trust(&c, &[&a]);
    let (host, op) = start_machine("rel-1", &m, &c, &[]);
    let releases = host.path("var/lib/liken/releases");

    // Signed by no one, or by a key the deployment does not trust: Blocked
    // with the reason (and the key), before a single artifact is fetched
    // (nginx's own log says what was asked for).
    target(&nginx.url, UNSIGNED, &[(UNSIGNED, &unsigned)]);
    release_reason(
        "rel-1",
        &op,
        reason::BLOCKED,
        &format!("release {UNSIGNED} was refused before download (unsigned)"),
    );
    target(&nginx.url, FOREIGN, &[(FOREIGN, &foreign)]);
    let refused = release_reason(
        "rel-1",
        &op,
        reason::BLOCKED,
        &format!("release {FOREIGN} was refused before download (unknown-key)"),
    );
    let (_, _, message) = condition(&refused, liken_api::coordination::RELEASE_CURRENT).unwrap();
    assert!(message.contains(b.public().id.as_str()), "{message}");
    assert!(message.contains(a.public().id.as_str()), "{message}");
    let log = nginx.access_log();
    for v in [UNSIGNED, FOREIGN] {
        assert!(log.contains(&format!("/{v}/release.yaml")), "{log}");
        for artifact in ["vmlinuz", "boot.cpio", "liken.sqfs"] {
            assert!(
                !log.contains(&format!("/{v}/{artifact}")),
                "{artifact} of {v} was fetched:\n{log}"
            );
        }
        assert!(!releases.join(v).exists());
    }
    assert!(host.asked().is_empty());

    // An artifact that does not match release.yaml: Blocked, nothing
    // written, nothing under the release's final name.
    target(&nginx.url, TAMPERED, &[(TAMPERED, &tampered)]);
    let m1 = release_reason("rel-1", &op, reason::BLOCKED, "release.yaml says");
    assert_eq!(m1.status.phase, Some(Phase::Blocked));
    assert!(
        !releases.join(TAMPERED).exists(),
        "a bad download never takes the final name"
    );
    assert!(
        host.asked().is_empty(),
        "the running slot is untouched: {:?}",
        host.asked()
    );

    // A release.yaml the catalog does not pin: Blocked.
    target(&nginx.url, UNTRUSTED, &[(UNTRUSTED, &untrusted_pin)]);
    release_reason(
        "rel-1",
        &op,
        reason::BLOCKED,
        "not the release the catalog trusts",
    );
    assert!(!releases.join(UNTRUSTED).exists());
    assert!(host.asked().is_empty());

    // The good one, while this boot is still on trial: downloaded and
    // verified, then it waits for the blessing.
    host.assess(BootAssessment {
        counted: true,
        blessed: false,
        other_slot_bad: false,
    });
    target(&nginx.url, NEW, &[(NEW, &good)]);
    let waiting = release_reason(
        "rel-1",
        &op,
        reason::DOWNLOADING,
        "waiting for init to bless this boot",
    );
    assert_eq!(waiting.status.phase, Some(Phase::Downloading));
    assert!(releases.join(NEW).join("release.yaml").is_file());
    assert!(host.asked().is_empty());
    // The first Blocked verdict posted the Event; the later ones are the
    // same series (the note is not part of a series' key, as in
    // client-go), so its note names the unsigned release.
    assert!(
        events_about("rel-1")
            .iter()
            .any(|(r, n)| r == reason::BLOCKED && n.contains(UNSIGNED))
    );

    // Blessed, but init refuses the write: Blocked with init's reason,
    // nothing staged, and no reboot asked for.
    host.state.lock().unwrap().refuse_write = Some("slot B's partition is missing".into());
    host.assess(BootAssessment {
        counted: true,
        blessed: true,
        other_slot_bad: false,
    });
    let refused = release_reason(
        "rel-1",
        &op,
        reason::BLOCKED,
        &format!(
            "init refused to write {NEW} into the inactive slot: slot B's partition is missing"
        ),
    );
    assert_eq!(refused.status.phase, Some(Phase::Blocked));
    assert!(refused.status.pending.is_empty());
    assert!(
        matches!(&host.asked()[..], [Request::WriteRelease(_)]),
        "{:?}",
        host.asked()
    );

    // Fixed, and the target set again (a refusal waits for a new
    // target): init is asked to write it (and checks it with its own
    // code), and the machine asks for the reboot that boots it.
    host.state.lock().unwrap().refuse_write = None;
    target(&nginx.url, UNTRUSTED, &[(UNTRUSTED, &untrusted_pin)]);
    release_reason(
        "rel-1",
        &op,
        reason::BLOCKED,
        "not the release the catalog trusts",
    );
    target(&nginx.url, NEW, &[(NEW, &good)]);
    let staged = release_reason(
        "rel-1",
        &op,
        reason::AWAITING_TURN,
        &format!("release {OLD} → {NEW}"),
    );
    let asked = host.asked();
    let [Request::WriteRelease(_), Request::WriteRelease(w)] = &asked[..] else {
        panic!("{asked:?}")
    };
    assert_eq!(w.directory, releases.join(NEW).display().to_string());
    assert_eq!(&w.release_sha256, good.hex());
    assert_eq!(
        staged
            .status
            .release
            .as_ref()
            .unwrap()
            .staged
            .as_ref()
            .map(|v| v.as_str()),
        Some(NEW)
    );
    let p = &staged.status.pending[0];
    assert_eq!(p.summary, format!("release {OLD} → {NEW}"));
    assert_eq!(&p.hash, good.hex());

    grant("rel-1");
    wait_for(
        "init to be asked to reboot",
        Duration::from_secs(30),
        || {
            host.asked()
                .contains(&Request::Reboot {
                    via: liken_api::RebootVia::Kexec,
                })
                .then_some(())
                .ok_or_else(|| op.log_text())
        },
    );
    op.stop();
    host.reboot(&m, &c);
    assert_eq!(host.record().version.unwrap().as_str(), NEW);
    let op = restart(&host, &[]);
    let back = wait_machine(
        "rel-1",
        "Ready on the new release",
        &op,
        Duration::from_secs(60),
        |m| m.status.phase == Some(Phase::Ready),
    );
    let release = back.status.release.unwrap();
    assert_eq!(release.running.unwrap().as_str(), NEW);
    assert_eq!(release.staged, None);
    reclaim("rel-1");

    // A Cluster change that reaches k3s (the leaders) stages cluster.yaml
    // for init and takes a reboot.
    patch(
        &["cluster", "home"],
        &json!({"spec": {"leaders": ["rel-1", "rel-2"]}}),
    );
    let asking = wait_machine(
        "rel-1",
        "the leaders change to ask for a turn",
        &op,
        Duration::from_secs(30),
        |m| {
            has_reason(
                m,
                liken_api::coordination::K3S_CONFIGURED,
                reason::AWAITING_TURN,
            )
        },
    );
    assert_eq!(
        asking.status.pending[0].summary,
        "cluster: leaders rel-1 → rel-1, rel-2"
    );
    assert!(host.path("var/lib/liken/staged/cluster.yaml").exists());
    grant("rel-1");
    wait_for(
        "init to be asked to reboot",
        Duration::from_secs(30),
        || {
            (host
                .asked()
                .iter()
                .filter(|r| {
                    **r == Request::Reboot {
                        via: liken_api::RebootVia::Kexec,
                    }
                })
                .count()
                == 2)
                .then_some(())
                .ok_or_else(|| op.log_text())
        },
    );
    op.stop();
    let (_, cluster) = host.reboot(&m, &c);
    assert_eq!(
        cluster.spec.leaders,
        ["rel-1", "rel-2"],
        "init promoted the staged Cluster"
    );
    let op = restart(&host, &[]);
    wait_machine(
        "rel-1",
        "Ready on the new Cluster",
        &op,
        Duration::from_secs(60),
        |m| m.status.phase == Some(Phase::Ready),
    );
    reclaim("rel-1");
    op.stop();
}
