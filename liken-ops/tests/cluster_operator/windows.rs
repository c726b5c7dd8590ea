//! Maintenance windows against the real apiserver: the cluster operator,
//! as its own binary under its shipped ServiceAccount, grants no turn
//! while the Cluster's window is closed (for several sweeps, with the
//! machine asking all along, and Progressing naming the next opening in
//! the window's zone), and grants one once the window is edited to be
//! open now. The grants are judged from the history a separate watch
//! records, not from the operator's own account.

use std::time::{SystemTime, UNIX_EPOCH};

use liken_api::maintenance::Weekday;

use super::*;

/// A merge patch giving the Cluster one window, in UTC, opening on the
/// day and minute that holds `at` (seconds since the epoch).
fn window_at(env: &Env, at: u64, duration: &str) {
    let day = Weekday::of_day((at / 86_400) as i64);
    let minute = at % 86_400 / 60;
    let start = format!("{:02}:{:02}", minute / 60, minute % 60);
    env.admin
        .merge_patch::<DynamicObject>(
            &Api::all(CLUSTERS),
            "home",
            &json!({"spec": {"maintenance": {"windows": [{
                "days": [day.as_str()], "start": start, "duration": duration,
                "timeZone": "UTC"}]}}}),
        )
        .unwrap();
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn grants_wait_for_the_maintenance_window() {
    let env = Env::start();
    let op = env.operator(
        "copy-w",
        &[
            "--lease-duration=15s",
            "--renew-deadline=10s",
            "--retry-period=2s",
        ],
    );
    env.daemon_set(NEW);
    env.create_cluster("home", &["a"], NEW, 1);
    // Closed: the only window opens three hours from now.
    window_at(&env, now_secs() + 3 * 3600, "1h");
    let history = History::record(&env);
    let player = Player::start(&env, sims(&[("a", asking(NEW))]));

    env.wait_cluster(
        "home",
        "Progressing names the machine and the next opening",
        Duration::from_secs(60),
        |c| {
            progressing_says(c, "a: outside the maintenance windows; the next opens ")
                && progressing_says(c, " UTC (UTC)")
        },
    );
    // Several sweeps with the machine asking and the window closed: no
    // grant, no reboot.
    let first = sweeps(&op);
    let end = deadline(Duration::from_secs(90));
    while sweeps(&op) < first + 3.0 {
        assert!(Instant::now() < end, "the operator stopped sweeping");
        std::thread::sleep(Duration::from_millis(200));
    }
    let a = env.machine("a");
    assert!(coordination::wants_turn(&a.status.conditions));
    assert!(!coordination::holds_grant(&a.status.conditions));
    assert!(!all_run(&env, &["a"], NEW));
    let granted_while_closed = granted_ever(&history.machines.lock().unwrap());
    assert!(
        granted_while_closed.is_empty(),
        "granted outside the window: {granted_while_closed:?}"
    );

    // Open: the window began a minute ago.
    window_at(&env, now_secs() - 60, "2h");
    wait_all_run(&env, &["a"], NEW, Duration::from_secs(60), &op);
    drop(player);
    let (machines, _) = history.stop();
    assert_eq!(granted_ever(&machines), BTreeSet::from(["a".into()]));
    assert!(!env.events("a", "RebootTurnGranted").is_empty());
}
