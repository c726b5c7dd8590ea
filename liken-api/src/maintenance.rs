//! Maintenance windows: the weekly hours in which reboot turns may be
//! granted.
//!
//! A window is a set of weekdays, a wall-clock start, a duration and an
//! IANA time zone: "Sat and Sun, 02:00, 4h, Europe/Berlin" (kured's
//! `--reboot-days`/`--start-time`/`--end-time`, Flatcar locksmith's
//! `REBOOT_WINDOW_START`/`REBOOT_WINDOW_LENGTH`, Bottlerocket's update
//! window say the same). The Cluster declares the fleet's windows in
//! `spec.maintenance.windows`; a Machine that declares its own
//! (`spec.maintenance.windows` on the Machine) uses those instead. With
//! none declared, turns may be granted at any time.
//!
//! A window gates grants only: the cluster operator grants a turn only
//! inside one, and a turn granted inside may finish after it closes
//! (draining and rebooting are not cut short).
//!
//! How wall time meets daylight saving, decided once here:
//! - the duration is elapsed time, so a window spanning the night the
//!   clocks go back ends an hour earlier by the wall clock, and one
//!   spanning the night they go forward an hour later;
//! - a start inside the repeated hour (clocks go back) is its first
//!   occurrence;
//! - a start inside the skipped hour (clocks go forward) is read with the
//!   offset before the jump, so 02:30 on the night 02:00 becomes 03:00
//!   starts at 03:30, as long after the jump as it was meant to be after
//!   02:00 ([`crate::tzif::Zone::instant_of`]).
//!
//! The checks here need no zone data (days, start, duration, zone name
//! syntax, overlaps between windows of the same zone); whether the zone
//! exists is judged by the operators, which read the tz database
//! ([`crate::tzif`]).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::time::{Time, civil_from_days};
use crate::tzif::Zone;
use crate::validate::Problem;

/// The most windows one list may hold.
pub const MAX_WINDOWS: usize = 32;
/// The longest window: a week.
pub const MAX_DURATION_MINUTES: u32 = 7 * 24 * 60;

/// When reboot turns may be granted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceSpec {
    /// The weekly windows; turns are granted only inside one. Absent:
    /// at any time (or, on a Machine, as the Cluster says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows: Option<Vec<MaintenanceWindow>>,
}

/// One weekly window.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// The days it opens on, in its time zone.
    pub days: Vec<Weekday>,
    /// The wall-clock time it opens, `HH:MM` (24-hour).
    pub start: String,
    /// How long it stays open: `4h`, `90m`, `1h30m`; at most `168h`.
    pub duration: String,
    /// The IANA time zone of `days` and `start` (`Europe/Berlin`, `UTC`).
    pub time_zone: String,
}

/// A day of the week.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Weekday {
    /// Monday.
    Mon,
    /// Tuesday.
    Tue,
    /// Wednesday.
    Wed,
    /// Thursday.
    Thu,
    /// Friday.
    Fri,
    /// Saturday.
    Sat,
    /// Sunday.
    Sun,
}

impl Weekday {
    /// Every day, Monday first, in the order the CRD enum lists them.
    pub const ALL: [Weekday; 7] = [
        Weekday::Mon,
        Weekday::Tue,
        Weekday::Wed,
        Weekday::Thu,
        Weekday::Fri,
        Weekday::Sat,
        Weekday::Sun,
    ];

    /// The day as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Weekday::Mon => "Mon",
            Weekday::Tue => "Tue",
            Weekday::Wed => "Wed",
            Weekday::Thu => "Thu",
            Weekday::Fri => "Fri",
            Weekday::Sat => "Sat",
            Weekday::Sun => "Sun",
        }
    }

    /// The day of a civil day number (days since 1970-01-01, a Thursday).
    pub fn of_day(day: i64) -> Weekday {
        Weekday::ALL[(day + 3).rem_euclid(7) as usize]
    }

    fn index(self) -> i64 {
        self as i64
    }
}

impl fmt::Display for Weekday {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `HH:MM` as minutes after midnight.
pub fn parse_start(text: &str) -> Option<u32> {
    let b = text.as_bytes();
    if b.len() != 5 || b[2] != b':' || ![0, 1, 3, 4].iter().all(|&i| b[i].is_ascii_digit()) {
        return None;
    }
    let d = |i: usize| u32::from(b[i] - b'0');
    let (h, m) = (d(0) * 10 + d(1), d(3) * 10 + d(4));
    (h < 24 && m < 60).then_some(h * 60 + m)
}

/// `4h`, `90m`, `1h30m` as minutes; None unless positive and at most
/// [`MAX_DURATION_MINUTES`].
pub fn parse_duration(text: &str) -> Option<u32> {
    let mut rest = text;
    let mut total: u32 = 0;
    let mut seen = Vec::new();
    while !rest.is_empty() {
        let n = rest.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 || n > 5 {
            return None;
        }
        let value: u32 = rest[..n].parse().ok()?;
        let unit = rest.as_bytes().get(n).copied()?;
        let per = match unit {
            b'h' if seen.is_empty() => 60,
            b'm' if !seen.contains(&b'm') => 1,
            _ => return None,
        };
        seen.push(unit);
        total = total.checked_add(value.checked_mul(per)?)?;
        rest = &rest[n + 1..];
    }
    (total > 0 && total <= MAX_DURATION_MINUTES).then_some(total)
}

/// Whether `name` is written as an IANA zone name (`Europe/Berlin`,
/// `America/Argentina/Buenos_Aires`, `UTC`, `Etc/GMT+5`): components of
/// letters, digits, `_`, `-`, `+` and `.`, none starting with a dot, so a
/// name can never leave the tz database's directory.
pub fn valid_zone_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name.split('/').all(|c| {
            !c.is_empty()
                && !c.starts_with('.')
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+' | b'.'))
        })
}

/// The pattern the CRD gives time zone names ([`valid_zone_name`]).
pub const ZONE_PATTERN: &str =
    r"^[A-Za-z0-9_+-][A-Za-z0-9_.+-]*(/[A-Za-z0-9_+-][A-Za-z0-9_.+-]*)*$";
/// The pattern the CRD gives `start`.
pub const START_PATTERN: &str = "^([01][0-9]|2[0-3]):[0-5][0-9]$";
/// The pattern the CRD gives `duration` (the bound is checked by liken).
pub const DURATION_PATTERN: &str = "^([0-9]+h)?([0-9]+m)?$";

/// Every problem with a list of windows, under `field`
/// (`spec.maintenance`).
pub fn validate(spec: Option<&MaintenanceSpec>, field: &str) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut add = |f: String, m: String| {
        out.push(Problem {
            field: f,
            message: m,
        })
    };
    let Some(windows) = spec.and_then(|s| s.windows.as_ref()) else {
        return out;
    };
    if windows.is_empty() {
        add(
            format!("{field}.windows"),
            "an empty list would allow no reboot ever; list at least one window, or remove \
             the windows to allow reboots at any time"
                .into(),
        );
    }
    if windows.len() > MAX_WINDOWS {
        add(
            format!("{field}.windows"),
            format!("{} windows is more than {MAX_WINDOWS}", windows.len()),
        );
    }
    for (i, w) in windows.iter().enumerate() {
        let at = format!("{field}.windows[{i}]");
        if w.days.is_empty() {
            add(
                format!("{at}.days"),
                "name at least one day: Mon, Tue, Wed, Thu, Fri, Sat or Sun".into(),
            );
        }
        for (j, d) in w.days.iter().enumerate() {
            if w.days[..j].contains(d) {
                add(format!("{at}.days[{j}]"), format!("{d} is listed twice"));
            }
        }
        if parse_start(&w.start).is_none() {
            add(
                format!("{at}.start"),
                format!(
                    "{:?} is not a time of day: write HH:MM, 24-hour, from 00:00 to 23:59",
                    w.start
                ),
            );
        }
        if parse_duration(&w.duration).is_none() {
            add(
                format!("{at}.duration"),
                format!(
                    "{:?} is not a duration: write hours and minutes such as 4h, 90m or 1h30m, \
                     more than 0 and at most 168h",
                    w.duration
                ),
            );
        }
        if !valid_zone_name(&w.time_zone) {
            add(
                format!("{at}.timeZone"),
                format!(
                    "{:?} is not an IANA time zone name such as Europe/Berlin, \
                     America/New_York or UTC",
                    w.time_zone
                ),
            );
        }
    }
    for (a, b, why) in overlaps(windows) {
        add(
            format!("{field}.windows[{b}]"),
            if a == b {
                format!(
                    "its days are closer together than its duration, so it overlaps itself ({why}); shorten it or merge the days"
                )
            } else {
                format!("overlaps windows[{a}] ({why}); merge them into one window")
            },
        );
    }
    out
}

const WEEK: i64 = 7 * 24 * 60;

/// Pairs of windows (by index, the earlier first; a window with itself
/// when two of its own days overlap) whose wall-clock hours overlap in
/// the same time zone, with the days that do. Windows in different zones
/// are not compared: their overlap moves with daylight saving, and an
/// overlap only means a turn may be granted in either.
fn overlaps(windows: &[MaintenanceWindow]) -> Vec<(usize, usize, String)> {
    let mut spans = Vec::new();
    for (i, w) in windows.iter().enumerate() {
        let (Some(start), Some(len)) = (parse_start(&w.start), parse_duration(&w.duration)) else {
            continue;
        };
        // A day listed twice is reported as such, not as an overlap.
        for (k, d) in w.days.iter().enumerate() {
            if w.days[..k].contains(d) {
                continue;
            }
            let s = d.index() * 24 * 60 + i64::from(start);
            spans.push((i, *d, s, s + i64::from(len)));
        }
    }
    let mut out: Vec<(usize, usize, String)> = Vec::new();
    for (x, &(i, di, si, ei)) in spans.iter().enumerate() {
        for &(j, dj, sj, ej) in &spans[x + 1..] {
            if windows[i].time_zone != windows[j].time_zone
                || out.iter().any(|o| (o.0, o.1) == (i, j))
            {
                continue;
            }
            let hit = [-WEEK, 0, WEEK]
                .iter()
                .any(|shift| si < ej + shift && sj + shift < ei);
            if hit {
                out.push((
                    i,
                    j,
                    format!("{di} {} and {dj} {}", windows[i].start, windows[j].start),
                ));
            }
        }
    }
    out
}

/// The windows that apply to a machine: its own when its spec declares
/// any, else the Cluster's; none means any time.
pub fn effective<'a>(
    cluster: Option<&'a MaintenanceSpec>,
    machine: Option<&'a MaintenanceSpec>,
) -> &'a [MaintenanceWindow] {
    machine
        .and_then(|m| m.windows.as_deref())
        .or_else(|| cluster.and_then(|c| c.windows.as_deref()))
        .unwrap_or(&[])
}

/// A window's instance: when it opens and closes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opening {
    /// When it opens.
    pub start: Time,
    /// When it closes.
    pub end: Time,
    /// The start as the window's own zone writes it:
    /// `Sun 2026-12-06 02:00 CET (Europe/Berlin)`.
    pub local: String,
}

/// Whether turns may be granted now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WindowVerdict {
    /// No window is declared: any time.
    Always,
    /// Inside a window, open until `until` (the latest close among the
    /// windows open now).
    Open {
        /// When the last open window closes.
        until: Time,
    },
    /// Outside every window; the next opening, if any opens within a
    /// week.
    Closed {
        /// The soonest opening.
        next: Option<Opening>,
    },
}

impl WindowVerdict {
    /// Whether a turn may be granted.
    pub fn allows(&self) -> bool {
        !matches!(self, WindowVerdict::Closed { .. })
    }
}

/// Decides whether `now` is inside one of `windows` (each given with its
/// zone, read by the caller) and, when it is not, when the next opens.
pub fn decide_window(windows: &[(&MaintenanceWindow, &Zone)], now: Time) -> WindowVerdict {
    if windows.is_empty() {
        return WindowVerdict::Always;
    }
    let now_s = now.unix();
    let mut until: Option<i64> = None;
    let mut next: Option<(i64, &MaintenanceWindow, &Zone)> = None;
    for &(w, zone) in windows {
        let (Some(start), Some(len)) = (parse_start(&w.start), parse_duration(&w.duration)) else {
            continue;
        };
        let today = (now_s + i64::from(zone.offset_at(now_s))).div_euclid(86_400);
        // A window opened up to a week ago may still be open; the next
        // opening is at most a week ahead.
        for day in today - 8..=today + 8 {
            if !w.days.contains(&Weekday::of_day(day)) {
                continue;
            }
            let opens = zone.instant_of(day * 86_400 + i64::from(start) * 60);
            let closes = opens + i64::from(len) * 60;
            if opens <= now_s && now_s < closes {
                until = Some(until.map_or(closes, |u| u.max(closes)));
            } else if opens > now_s && next.is_none_or(|(n, _, _)| opens < n) {
                next = Some((opens, w, zone));
            }
        }
    }
    if let Some(u) = until {
        return WindowVerdict::Open {
            until: Time::from_unix(u),
        };
    }
    WindowVerdict::Closed {
        next: next.map(|(at, w, zone)| Opening {
            start: Time::from_unix(at),
            end: Time::from_unix(at + parse_duration(&w.duration).map_or(0, i64::from) * 60),
            local: local_text(at, zone, &w.time_zone),
        }),
    }
}

/// `Sun 2026-12-06 02:00 CET (Europe/Berlin)`.
pub fn local_text(at: i64, zone: &Zone, name: &str) -> String {
    let t = zone.local_type(at);
    let local = at + i64::from(t.offset);
    let day = local.div_euclid(86_400);
    let secs = local.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(day);
    format!(
        "{} {y:04}-{m:02}-{d:02} {:02}:{:02} {} ({name})",
        Weekday::of_day(day),
        secs / 3600,
        secs / 60 % 60,
        t.abbr
    )
}

#[cfg(test)]
mod tests;
