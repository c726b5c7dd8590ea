//! Timestamps as the Kubernetes API writes them.
//!
//! `metav1.Time` travels as RFC 3339 in UTC with whole seconds
//! (`2026-12-02T11:18:43Z`). liken-api needs exactly that and a calendar
//! check for the version grammar, so it carries its own small civil-date
//! arithmetic instead of a date crate: init links this crate, and every
//! dependency it pulls in lands on the initramfs.
//!
//! A [`Time`] is whole seconds since the Unix epoch. Parsing accepts what
//! other writers send (fractional seconds, a numeric offset) and drops the
//! fraction, so a value read from the server and written back compares
//! equal to the one the server stored.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time with one-second resolution, in UTC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(i64);

/// Why a timestamp could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimeError {
    text: String,
}

impl fmt::Display for TimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "time {:?} is not RFC 3339 (for example 2026-07-11T09:30:00Z)",
            self.text
        )
    }
}

impl std::error::Error for TimeError {}

impl Time {
    /// The Unix epoch, which the API treats as "no time".
    pub const EPOCH: Time = Time(0);

    /// A time from whole seconds since the Unix epoch.
    pub const fn from_unix(seconds: i64) -> Time {
        Time(seconds)
    }

    /// Whole seconds since the Unix epoch.
    pub const fn unix(self) -> i64 {
        self.0
    }

    /// Converts a system clock reading, truncating to the second. Times
    /// before the epoch clamp to it: no liken clock reads 1969.
    pub fn from_system(t: SystemTime) -> Time {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Time(i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
            Err(_) => Time::EPOCH,
        }
    }

    /// The same instant as a system clock value.
    pub fn to_system(self) -> SystemTime {
        if self.0 >= 0 {
            UNIX_EPOCH + Duration::from_secs(self.0.unsigned_abs())
        } else {
            UNIX_EPOCH - Duration::from_secs(self.0.unsigned_abs())
        }
    }

    /// This time moved by a signed number of seconds, saturating.
    pub fn plus_seconds(self, seconds: i64) -> Time {
        Time(self.0.saturating_add(seconds))
    }

    /// Seconds from `earlier` to `self` (negative when `earlier` is later).
    pub fn seconds_since(self, earlier: Time) -> i64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// Whether `year-month-day` names a day of the proleptic Gregorian
/// calendar.
pub fn is_real_date(year: i64, month: u32, day: u32) -> bool {
    (1..=12).contains(&month) && day >= 1 && day <= days_in_month(year, month)
}

pub(crate) fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

pub(crate) fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        2 => 28,
        _ => 0,
    }
}

// Howard Hinnant's days-from-civil and civil-from-days: exact for the
// whole i64 range we can reach from four-digit years, with no tables.
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The proleptic Gregorian year of the day holding `seconds` (counted
/// from the epoch in whatever clock the caller means).
pub(crate) fn year_of(seconds: i64) -> i64 {
    civil_from_days(seconds.div_euclid(86_400)).0
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days = self.0.div_euclid(86_400);
        let secs = self.0.rem_euclid(86_400);
        let (y, mo, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
    }
}

/// Reads exactly `n` ASCII digits from the front of `s`.
fn digits(s: &[u8], n: usize) -> Option<(u32, &[u8])> {
    let head = s.get(..n)?;
    let mut value = 0u32;
    for &b in head {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u32::from(b - b'0');
    }
    Some((value, s.get(n..)?))
}

fn expect(s: &[u8], byte: u8) -> Option<&[u8]> {
    match s.split_first() {
        Some((&b, rest)) if b == byte || b.eq_ignore_ascii_case(&byte) => Some(rest),
        _ => None,
    }
}

fn parse_rfc3339(text: &str) -> Option<Time> {
    let s = text.as_bytes();
    let (year, s) = digits(s, 4)?;
    let (month, s) = digits(expect(s, b'-')?, 2)?;
    let (day, s) = digits(expect(s, b'-')?, 2)?;
    let (hour, s) = digits(expect(s, b'T')?, 2)?;
    let (minute, s) = digits(expect(s, b':')?, 2)?;
    let (second, mut s) = digits(expect(s, b':')?, 2)?;
    let year = i64::from(year);
    if !is_real_date(year, month, day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    // Fractional seconds are accepted and dropped (see the module doc).
    if let Some(rest) = expect(s, b'.') {
        let n = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        s = rest.get(n..)?;
    }
    let offset = match s.split_first() {
        Some((b'Z' | b'z', [])) => 0,
        Some((&sign @ (b'+' | b'-'), rest)) => {
            let (oh, rest) = digits(rest, 2)?;
            let (om, rest) = digits(expect(rest, b':')?, 2)?;
            if !rest.is_empty() || oh > 23 || om > 59 {
                return None;
            }
            let magnitude = i64::from(oh * 3600 + om * 60);
            if sign == b'+' { magnitude } else { -magnitude }
        }
        _ => return None,
    };
    // A leap second (:60) folds onto the next second, as Go's parser does.
    let local =
        days_from_civil(year, month, day) * 86_400 + i64::from(hour * 3600 + minute * 60 + second);
    Some(Time(local - offset))
}

impl FromStr for Time {
    type Err = TimeError;

    fn from_str(s: &str) -> Result<Time, TimeError> {
        parse_rfc3339(s).ok_or_else(|| TimeError { text: s.to_owned() })
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Time, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(Time::EPOCH.to_string(), "1970-01-01T00:00:00Z");
        assert_eq!(
            Time::from_unix(1_780_000_000).to_string(),
            "2026-05-28T20:26:40Z"
        );
        assert_eq!(
            Time::from_unix(951_782_400).to_string(),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(Time::from_unix(-1).to_string(), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn parses_what_it_formats_and_what_others_write() {
        let t: Time = "2026-05-28T20:26:40Z".parse().unwrap();
        assert_eq!(t.unix(), 1_780_000_000);
        let micro: Time = "2026-05-28T20:26:40.123456Z".parse().unwrap();
        assert_eq!(micro, t);
        let offset: Time = "2026-05-28T22:26:40+02:00".parse().unwrap();
        assert_eq!(offset, t);
        let west: Time = "2026-05-28T15:26:40-05:00".parse().unwrap();
        assert_eq!(west, t);
    }

    #[test]
    fn refuses_malformed_and_impossible_times() {
        for bad in [
            "",
            "2026-05-28",
            "2026-05-28 20:26:40Z",
            "2026-02-30T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-05-28T24:00:00Z",
            "2026-05-28T20:26:40",
            "2026-05-28T20:26:40.Z",
            "2026-05-28T20:26:40+0200",
            "2026-05-28T20:26:40Zjunk",
        ] {
            let err = bad.parse::<Time>().unwrap_err();
            assert!(err.to_string().contains("RFC 3339"), "{bad}: {err}");
        }
    }

    #[test]
    fn knows_the_calendar() {
        assert!(is_real_date(2024, 2, 29));
        assert!(!is_real_date(2026, 2, 29));
        assert!(is_real_date(2000, 2, 29));
        assert!(!is_real_date(1900, 2, 29));
        assert!(!is_real_date(2026, 4, 31));
        assert!(!is_real_date(2026, 0, 1));
        assert!(!is_real_date(2026, 1, 0));
    }

    proptest::proptest! {
        #[test]
        fn display_and_parse_round_trip(secs in -62_135_596_800i64..253_402_300_799) {
            let t = Time::from_unix(secs);
            proptest::prop_assert_eq!(t.to_string().parse::<Time>().unwrap(), t);
        }

        #[test]
        fn civil_conversion_is_a_bijection(days in -1_000_000i64..1_000_000) {
            let (y, m, d) = civil_from_days(days);
            proptest::prop_assert!(is_real_date(y, m, d));
            proptest::prop_assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
