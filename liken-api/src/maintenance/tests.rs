//! Table tests of the window decisions against the host's tz database,
//! including the nights daylight saving begins and ends.

use super::*;

fn zone(name: &str) -> Zone {
    let path = format!("/usr/share/zoneinfo/{name}");
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}; install Debian's tzdata package"));
    crate::tzif::parse(&bytes).unwrap()
}

fn t(s: &str) -> Time {
    s.parse().unwrap()
}

fn window(days: &[Weekday], start: &str, duration: &str, tz: &str) -> MaintenanceWindow {
    MaintenanceWindow {
        days: days.to_vec(),
        start: start.into(),
        duration: duration.into(),
        time_zone: tz.into(),
    }
}

use Weekday::*;

/// What a row expects.
enum Want {
    Open(&'static str),
    Closed(&'static str, &'static str),
}

#[test]
fn windows_across_daylight_saving() {
    let rows: &[(&str, MaintenanceWindow, &str, Want)] = &[
        // Berlin springs forward on 2026-03-29: 02:00 CET becomes 03:00
        // CEST at 01:00Z. A 02:30 start is in the skipped hour and opens
        // at 03:30 CEST, as long after the jump as it was meant to be.
        (
            "skipped hour, before",
            window(&[Sun], "02:30", "1h", "Europe/Berlin"),
            "2026-03-29T01:15:00Z",
            Want::Closed(
                "2026-03-29T01:30:00Z",
                "Sun 2026-03-29 03:30 CEST (Europe/Berlin)",
            ),
        ),
        (
            "skipped hour, inside",
            window(&[Sun], "02:30", "1h", "Europe/Berlin"),
            "2026-03-29T01:30:00Z",
            Want::Open("2026-03-29T02:30:00Z"),
        ),
        (
            "skipped hour, after: next Sunday at 02:30 CEST",
            window(&[Sun], "02:30", "1h", "Europe/Berlin"),
            "2026-03-29T02:30:00Z",
            Want::Closed(
                "2026-04-05T00:30:00Z",
                "Sun 2026-04-05 02:30 CEST (Europe/Berlin)",
            ),
        ),
        // A window from 01:30 for 2h elapsed spans the night Berlin falls
        // back (2026-10-25, 03:00 CEST becomes 02:00 CET at 01:00Z): it
        // ends at 02:30 CET by the wall clock, after both 02:xx hours.
        (
            "spanning the repeated hour, first pass",
            window(&[Sun], "01:30", "2h", "Europe/Berlin"),
            "2026-10-25T00:45:00Z",
            Want::Open("2026-10-25T01:30:00Z"),
        ),
        (
            "spanning the repeated hour, second pass",
            window(&[Sun], "01:30", "2h", "Europe/Berlin"),
            "2026-10-25T01:15:00Z",
            Want::Open("2026-10-25T01:30:00Z"),
        ),
        (
            "spanning the repeated hour, after",
            window(&[Sun], "01:30", "2h", "Europe/Berlin"),
            "2026-10-25T01:30:00Z",
            Want::Closed(
                "2026-11-01T00:30:00Z",
                "Sun 2026-11-01 01:30 CET (Europe/Berlin)",
            ),
        ),
        // A start inside the repeated hour is its first occurrence.
        (
            "start in the repeated hour",
            window(&[Sun], "02:30", "1h", "Europe/Berlin"),
            "2026-10-25T00:29:00Z",
            Want::Closed(
                "2026-10-25T00:30:00Z",
                "Sun 2026-10-25 02:30 CEST (Europe/Berlin)",
            ),
        ),
        (
            "start in the repeated hour, during its second pass",
            window(&[Sun], "02:30", "1h", "Europe/Berlin"),
            "2026-10-25T01:29:00Z",
            Want::Open("2026-10-25T01:30:00Z"),
        ),
        // New York springs forward on 2026-03-08 at 07:00Z; a 02:00
        // start is the jump itself and 4h elapsed ends 07:00 EDT.
        (
            "New York spring forward",
            window(&[Sun], "02:00", "4h", "America/New_York"),
            "2026-03-08T06:00:00Z",
            Want::Closed(
                "2026-03-08T07:00:00Z",
                "Sun 2026-03-08 03:00 EDT (America/New_York)",
            ),
        ),
        (
            "New York spring forward, inside",
            window(&[Sun], "02:00", "4h", "America/New_York"),
            "2026-03-08T10:59:59Z",
            Want::Open("2026-03-08T11:00:00Z"),
        ),
        // Lord Howe moves by half an hour (02:00 +1030 to 02:30 +11 on
        // 2026-10-04, at 15:30Z the day before).
        (
            "Lord Howe's half-hour jump",
            window(&[Sun], "02:15", "1h", "Australia/Lord_Howe"),
            "2026-10-03T15:00:00Z",
            Want::Closed(
                "2026-10-03T15:45:00Z",
                "Sun 2026-10-04 02:45 +11 (Australia/Lord_Howe)",
            ),
        ),
        // Weekdays at night in UTC: Monday's window is still open early
        // on Tuesday, Friday's early on Saturday.
        (
            "weeknights, Tuesday early",
            window(&[Mon, Tue, Wed, Thu, Fri], "22:00", "6h", "UTC"),
            "2026-12-08T03:00:00Z",
            Want::Open("2026-12-08T04:00:00Z"),
        ),
        (
            "weeknights, Saturday after Friday's closed",
            window(&[Mon, Tue, Wed, Thu, Fri], "22:00", "6h", "UTC"),
            "2026-12-12T05:00:00Z",
            Want::Closed("2026-12-14T22:00:00Z", "Mon 2026-12-14 22:00 UTC (UTC)"),
        ),
    ];
    for (name, w, now, want) in rows {
        let z = zone(&w.time_zone);
        let got = decide_window(&[(w, &z)], t(now));
        match want {
            Want::Open(until) => {
                assert_eq!(got, WindowVerdict::Open { until: t(until) }, "{name}");
                assert!(got.allows(), "{name}");
            }
            Want::Closed(next, local) => {
                let WindowVerdict::Closed { next: Some(o) } = &got else {
                    panic!("{name}: {got:?}");
                };
                assert_eq!((o.start, o.local.as_str()), (t(next), *local), "{name}");
                assert!(!got.allows(), "{name}");
            }
        }
    }
}

#[test]
fn several_windows_open_at_the_soonest_and_close_at_the_latest() {
    let berlin = zone("Europe/Berlin");
    let utc = zone("UTC");
    let a = window(&[Sat], "02:00", "4h", "Europe/Berlin");
    let b = window(&[Sat], "03:00", "4h", "UTC");
    let both = [(&a, &berlin), (&b, &utc)];
    // Saturday 2026-12-05: a opens 01:00Z to 05:00Z, b 03:00Z to 07:00Z.
    assert_eq!(
        decide_window(&both, t("2026-12-05T03:30:00Z")),
        WindowVerdict::Open {
            until: t("2026-12-05T07:00:00Z")
        }
    );
    let WindowVerdict::Closed { next: Some(o) } = decide_window(&both, t("2026-12-04T12:00:00Z"))
    else {
        panic!("closed");
    };
    assert_eq!(o.start, t("2026-12-05T01:00:00Z"));
    assert_eq!(o.end, t("2026-12-05T05:00:00Z"));
    assert_eq!(
        decide_window(&[], t("2026-12-04T12:00:00Z")),
        WindowVerdict::Always
    );
}

#[test]
fn a_machines_windows_replace_the_clusters() {
    let fleet = MaintenanceSpec {
        windows: Some(vec![window(&[Sun], "02:00", "4h", "UTC")]),
    };
    let own = MaintenanceSpec {
        windows: Some(vec![window(&[Wed], "12:00", "1h", "Asia/Tokyo")]),
    };
    assert_eq!(effective(Some(&fleet), None)[0].days, [Sun]);
    assert_eq!(effective(Some(&fleet), Some(&own))[0].days, [Wed]);
    assert_eq!(
        effective(Some(&fleet), Some(&MaintenanceSpec::default()))[0].days,
        [Sun]
    );
    assert!(effective(None, None).is_empty());
}

#[test]
fn parses_starts_and_durations_strictly() {
    assert_eq!(parse_start("00:00"), Some(0));
    assert_eq!(parse_start("23:59"), Some(1439));
    for bad in ["24:00", "2:00", "02:60", "0200", "02:00:00", "", "ab:cd"] {
        assert_eq!(parse_start(bad), None, "{bad}");
    }
    assert_eq!(parse_duration("4h"), Some(240));
    assert_eq!(parse_duration("90m"), Some(90));
    assert_eq!(parse_duration("1h30m"), Some(90));
    assert_eq!(parse_duration("168h"), Some(MAX_DURATION_MINUTES));
    for bad in [
        "", "0h", "0m", "169h", "4", "4 h", "30m1h", "1h1h", "h", "-1h", "1.5h", "4H",
    ] {
        assert_eq!(parse_duration(bad), None, "{bad}");
    }
    for good in [
        "UTC",
        "Europe/Berlin",
        "America/Argentina/Buenos_Aires",
        "Etc/GMT+5",
    ] {
        assert!(valid_zone_name(good), "{good}");
    }
    for bad in [
        "",
        "Europe Berlin",
        "../etc/passwd",
        "/etc/localtime",
        "Europe//Berlin",
        "Europe/.x",
    ] {
        assert!(!valid_zone_name(bad), "{bad}");
    }
}

#[test]
fn validation_names_each_problem() {
    let spec = |windows| MaintenanceSpec {
        windows: Some(windows),
    };
    let problems = |s: MaintenanceSpec| -> Vec<String> {
        validate(Some(&s), "spec.maintenance")
            .into_iter()
            .map(|p| p.to_string())
            .collect()
    };
    let empty = problems(spec(vec![]));
    assert!(
        empty[0].starts_with("spec.maintenance.windows: an empty list"),
        "{empty:?}"
    );
    let bad = problems(spec(vec![window(&[], "25:00", "0h", "Europe Berlin")]));
    let fields: Vec<&str> = bad.iter().map(|p| p.split(':').next().unwrap()).collect();
    assert_eq!(
        fields,
        [
            "spec.maintenance.windows[0].days",
            "spec.maintenance.windows[0].start",
            "spec.maintenance.windows[0].duration",
            "spec.maintenance.windows[0].timeZone"
        ]
    );
    let twice = problems(spec(vec![window(&[Sat, Sat], "02:00", "1h", "UTC")]));
    assert_eq!(
        twice,
        ["spec.maintenance.windows[0].days[1]: Sat is listed twice"]
    );
    // Saturday 22:00 for 6h runs into Sunday 02:00.
    let overlap = problems(spec(vec![
        window(&[Sat], "22:00", "6h", "Europe/Berlin"),
        window(&[Sun], "02:00", "2h", "Europe/Berlin"),
    ]));
    assert_eq!(
        overlap,
        [
            "spec.maintenance.windows[1]: overlaps windows[0] (Sat 22:00 and Sun 02:00); merge them into one window"
        ]
    );
    // Sunday night into Monday morning, across the week's end.
    let wrap = problems(spec(vec![
        window(&[Sun], "23:00", "2h", "UTC"),
        window(&[Mon], "00:30", "1h", "UTC"),
    ]));
    assert_eq!(wrap.len(), 1, "{wrap:?}");
    let itself = problems(spec(vec![window(&[Mon, Tue], "12:00", "25h", "UTC")]));
    assert!(itself[0].contains("overlaps itself"), "{itself:?}");
    // The same hours in different zones are not compared.
    let apart = problems(spec(vec![
        window(&[Sat], "02:00", "4h", "Europe/Berlin"),
        window(&[Sat], "02:00", "4h", "America/New_York"),
    ]));
    assert!(apart.is_empty(), "{apart:?}");
    assert!(validate(None, "spec.maintenance").is_empty());
}
