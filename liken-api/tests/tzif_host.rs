//! The TZif reader against the host's tz database and glibc's reading of
//! it: for each zone, many instants (every few days over two centuries,
//! and a second either side of every transition the host's own `date`
//! reports), the offset and abbreviation liken computes must be the ones
//! `TZ=<zone> date -f` prints. Instants past 2037 exercise the footer's
//! POSIX TZ string, which both sides evaluate on their own.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

use liken_api::tzif;

const ZONEINFO: &str = "/usr/share/zoneinfo";

/// Zones chosen for what they make hard: a 30-minute DST (Lord_Howe), a
/// southern-hemisphere rule across New Year, a negative DST (Dublin's
/// winter time), quarter hours (Chatham, Kathmandu), half hours without
/// DST (Kolkata), and no transitions at all (UTC).
const ZONES: &[&str] = &[
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "UTC",
    "Europe/Dublin",
    "Pacific/Chatham",
    "Asia/Kathmandu",
    "Asia/Kolkata",
    "America/Sao_Paulo",
    "America/St_Johns",
    "Africa/Casablanca",
];

/// What glibc says at each instant: (offset seconds east, abbreviation).
fn glibc(zone: &str, instants: &[i64]) -> Vec<(i32, String)> {
    let mut child = Command::new("date")
        .env("TZ", format!(":{ZONEINFO}/{zone}"))
        .args(["-f", "-", "+%::z %Z"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("date (coreutils) runs");
    let mut input = String::new();
    for t in instants {
        input.push_str(&format!("@{t}\n"));
    }
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success(), "date failed for {zone}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (z, abbr) = l.split_once(' ').unwrap();
            // +hh:mm:ss
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let h: i32 = z[1..3].parse().unwrap();
            let m: i32 = z[4..6].parse().unwrap();
            let s: i32 = z[7..9].parse().unwrap();
            (sign * (h * 3600 + m * 60 + s), abbr.to_owned())
        })
        .collect()
}

#[test]
fn offsets_match_glibc_over_two_centuries_and_every_transition() {
    if !std::path::Path::new(ZONEINFO)
        .join("Europe/Berlin")
        .exists()
    {
        panic!("{ZONEINFO} has no Europe/Berlin: install Debian's tzdata package");
    }
    for zone in ZONES {
        let bytes = std::fs::read(format!("{ZONEINFO}/{zone}")).unwrap();
        let z = tzif::parse(&bytes).unwrap_or_else(|e| panic!("{zone}: {e}"));
        // 1902 to 2100, every 3 days and 7 hours.
        let mut instants: BTreeSet<i64> = (-2_145_916_800i64..4_102_444_800)
            .step_by(3 * 86_400 + 7 * 3600)
            .collect();
        // Twice a day from 1970 to 2100, and around every change of
        // offset among those: the exact second liken puts it at, found by
        // bisection, and the seconds and half hours either side. glibc
        // judges every one, so a transition liken misplaces or misses
        // (one lasting more than half a day) fails.
        let mut previous: Option<(i64, i32)> = None;
        for t in (0i64..4_102_444_800).step_by(12 * 3600) {
            instants.insert(t);
            let offset = z.offset_at(t);
            if let Some((before, was)) = previous
                && was != offset
            {
                let (mut lo, mut hi) = (before, t);
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    if z.offset_at(mid) == was {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                for d in [-3601, -1800, -1, 0, 1, 1800, 3601] {
                    instants.insert(hi + d);
                }
            }
            previous = Some((t, offset));
        }
        let instants: Vec<i64> = instants.into_iter().collect();
        let expected = glibc(zone, &instants);
        let mut checked = 0;
        for (t, (offset, abbr)) in instants.iter().zip(&expected) {
            let ours = z.local_type(*t);
            assert_eq!(
                (ours.offset, ours.abbr.as_str()),
                (*offset, abbr.as_str()),
                "{zone} at {t}"
            );
            checked += 1;
        }
        assert!(checked > 100_000, "{zone}: only {checked} instants");
    }
}

#[test]
fn wall_times_map_back_to_their_instants() {
    for zone in ZONES {
        let bytes = std::fs::read(format!("{ZONEINFO}/{zone}")).unwrap();
        let z = tzif::parse(&bytes).unwrap();
        for t in (946_684_800i64..4_102_444_800).step_by(86_400 + 1800) {
            let local = t + i64::from(z.offset_at(t));
            let back = z.instant_of(local);
            // A wall time in the repeated hour maps to its first
            // occurrence, which may be earlier than t.
            assert!(back <= t, "{zone}: {t} -> {local} -> {back}");
            assert_eq!(back + i64::from(z.offset_at(back)), local, "{zone} at {t}");
        }
    }
}
