//! Time zones from the tz database's compiled files (TZif, RFC 8536).
//!
//! Maintenance windows are declared in a place's wall-clock time
//! ("Sunday 02:00 in Europe/Berlin"), and the offsets that turn wall time
//! into an instant change by law, not by formula. So liken never carries
//! an offset table of its own: the operators read the zone's file from
//! the tz database their image carries (`/usr/share/zoneinfo/<name>`),
//! and this module turns those bytes into offsets. It does no I/O, so the
//! API crate, the operators and a fuzzer share one parser: hand it bytes,
//! get a [`Zone`] or a [`TzifError`] saying what is wrong, never a panic.
//!
//! What is read, per RFC 8536: the version 1 block (32-bit times) when it
//! is all there is, otherwise the version 2+ block (64-bit times) and its
//! footer, a POSIX TZ string (`CET-1CEST,M3.5.0,M10.5.0/3`) that gives
//! the rule for every instant after the last transition (version 3 allows
//! rule times beyond 24 hours, which [`PosixTz`] accepts). Files with
//! leap-second records (the `right/` zones) are refused: their transition
//! times count leap seconds, which the Kubernetes clock does not.

use std::fmt;

/// Why zone bytes could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TzifError {
    /// The bytes do not begin with the `TZif` magic.
    NotTzif,
    /// The version byte is not one RFC 8536 defines (0, '2', '3', '4').
    Version(u8),
    /// The file ends before the data its header announces.
    Truncated,
    /// A field holds a value the format forbids; the text says which.
    Malformed(&'static str),
    /// The file has leap-second records (a `right/` zone).
    LeapSeconds,
    /// The footer's POSIX TZ string cannot be read.
    Footer(String),
}

impl fmt::Display for TzifError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TzifError::NotTzif => write!(f, "not a TZif file (no TZif magic)"),
            TzifError::Version(v) => write!(f, "TZif version byte {v:#04x} is not 0, 2, 3 or 4"),
            TzifError::Truncated => write!(f, "the TZif file ends before its data"),
            TzifError::Malformed(what) => write!(f, "malformed TZif file: {what}"),
            TzifError::LeapSeconds => write!(
                f,
                "the zone counts leap seconds (a right/ zone); use the zone of the same name \
                 outside right/"
            ),
            TzifError::Footer(why) => write!(f, "the TZif footer's TZ string: {why}"),
        }
    }
}

impl std::error::Error for TzifError {}

/// One local time type: an offset from UTC and its abbreviation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalType {
    /// Seconds east of UTC.
    pub offset: i32,
    /// Whether this is daylight-saving time.
    pub is_dst: bool,
    /// The abbreviation (`CET`, `EDT`, `+1030`).
    pub abbr: String,
}

/// A parsed zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zone {
    /// Transition instants, strictly ascending.
    transitions: Vec<i64>,
    /// The local type index taking effect at each transition.
    indices: Vec<u8>,
    /// The local types.
    types: Vec<LocalType>,
    /// The rule after the last transition, from the footer.
    footer: Option<PosixTz>,
}

/// A cursor over the file's bytes that cannot read past the end.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], TzifError> {
        if n > self.bytes.len() {
            return Err(TzifError::Truncated);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, TzifError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

struct Header {
    version: u8,
    isutcnt: usize,
    isstdcnt: usize,
    leapcnt: usize,
    timecnt: usize,
    typecnt: usize,
    charcnt: usize,
}

impl Header {
    fn read(r: &mut Reader<'_>) -> Result<Header, TzifError> {
        if r.take(4).map_err(|_| TzifError::NotTzif)? != b"TZif" {
            return Err(TzifError::NotTzif);
        }
        let version = r.take(1)?[0];
        if !matches!(version, 0 | b'2' | b'3' | b'4') {
            return Err(TzifError::Version(version));
        }
        r.take(15)?;
        let mut count = || r.u32().map(|n| n as usize);
        Ok(Header {
            version,
            isutcnt: count()?,
            isstdcnt: count()?,
            leapcnt: count()?,
            timecnt: count()?,
            typecnt: count()?,
            charcnt: count()?,
        })
    }

    /// The data block's length with `time` bytes per time value, or None
    /// on overflow (which no real file reaches).
    fn block_len(&self, time: usize) -> Option<usize> {
        let parts = [
            self.timecnt.checked_mul(time)?,
            self.timecnt,
            self.typecnt.checked_mul(6)?,
            self.charcnt,
            self.leapcnt.checked_mul(time + 4)?,
            self.isstdcnt,
            self.isutcnt,
        ];
        parts.iter().try_fold(0usize, |a, &b| a.checked_add(b))
    }
}

/// Parses a TZif file.
pub fn parse(bytes: &[u8]) -> Result<Zone, TzifError> {
    let mut r = Reader { bytes };
    let v1 = Header::read(&mut r)?;
    if v1.version == 0 {
        return block(&mut r, &v1, 4).map(|(transitions, indices, types)| Zone {
            transitions,
            indices,
            types,
            footer: None,
        });
    }
    // Version 2+: skip the 32-bit block, read the 64-bit one and the
    // footer.
    let skip = v1.block_len(4).ok_or(TzifError::Truncated)?;
    r.take(skip)?;
    let v2 = Header::read(&mut r)?;
    let (transitions, indices, types) = block(&mut r, &v2, 8)?;
    if r.take(1)? != b"\n" {
        return Err(TzifError::Malformed(
            "the footer does not begin with a newline",
        ));
    }
    let end = r
        .bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or(TzifError::Malformed(
            "the footer does not end with a newline",
        ))?;
    let text = std::str::from_utf8(r.take(end)?)
        .map_err(|_| TzifError::Malformed("the footer is not ASCII"))?;
    let footer = if text.is_empty() {
        None
    } else {
        Some(PosixTz::parse(text).map_err(TzifError::Footer)?)
    };
    Ok(Zone {
        transitions,
        indices,
        types,
        footer,
    })
}

type Block = (Vec<i64>, Vec<u8>, Vec<LocalType>);

fn block(r: &mut Reader<'_>, h: &Header, time: usize) -> Result<Block, TzifError> {
    // Every count is checked against the bytes that are there before
    // anything is allocated, so a forged header cannot ask for gigabytes.
    let len = h.block_len(time).ok_or(TzifError::Truncated)?;
    if len > r.bytes.len() {
        return Err(TzifError::Truncated);
    }
    if h.typecnt == 0 {
        return Err(TzifError::Malformed("no local time types"));
    }
    if h.typecnt > 256 {
        return Err(TzifError::Malformed("more than 256 local time types"));
    }
    if h.charcnt == 0 {
        return Err(TzifError::Malformed("no abbreviation characters"));
    }
    if h.leapcnt != 0 {
        return Err(TzifError::LeapSeconds);
    }
    if (h.isstdcnt != 0 && h.isstdcnt != h.typecnt) || (h.isutcnt != 0 && h.isutcnt != h.typecnt) {
        return Err(TzifError::Malformed(
            "standard/wall or UT/local indicator count differs from the type count",
        ));
    }
    let times = r.take(h.timecnt * time)?;
    let transitions: Vec<i64> = times
        .chunks_exact(time)
        .map(|c| match *c {
            [a, b, c, d] => i64::from(i32::from_be_bytes([a, b, c, d])),
            [a, b, c, d, e, f, g, h] => i64::from_be_bytes([a, b, c, d, e, f, g, h]),
            _ => 0,
        })
        .collect();
    if transitions.windows(2).any(|w| w[0] >= w[1]) {
        return Err(TzifError::Malformed(
            "transition times are not strictly ascending",
        ));
    }
    let indices = r.take(h.timecnt)?.to_vec();
    if indices.iter().any(|&i| usize::from(i) >= h.typecnt) {
        return Err(TzifError::Malformed(
            "a transition names a local time type that does not exist",
        ));
    }
    let raw_types = r.take(h.typecnt * 6)?;
    let chars = r.take(h.charcnt)?;
    if chars.last() != Some(&0) {
        return Err(TzifError::Malformed(
            "the abbreviations do not end with NUL",
        ));
    }
    let mut types = Vec::with_capacity(h.typecnt);
    for t in raw_types.chunks_exact(6) {
        let offset = i32::from_be_bytes([t[0], t[1], t[2], t[3]]);
        if offset == i32::MIN || !(-25 * 3600..=26 * 3600).contains(&offset) {
            return Err(TzifError::Malformed(
                "a UT offset is outside -25 to +26 hours",
            ));
        }
        let is_dst = match t[4] {
            0 => false,
            1 => true,
            _ => return Err(TzifError::Malformed("a DST flag is neither 0 nor 1")),
        };
        let start = usize::from(t[5]);
        let rest = chars.get(start..).ok_or(TzifError::Malformed(
            "an abbreviation index is past the abbreviations",
        ))?;
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        let abbr = String::from_utf8_lossy(&rest[..end]).into_owned();
        types.push(LocalType {
            offset,
            is_dst,
            abbr,
        });
    }
    // The indicators only matter for POSIX-style rules without a footer;
    // they are checked for range and otherwise skipped.
    let indicators = r.take(h.isstdcnt + h.isutcnt)?;
    if indicators.iter().any(|&b| b > 1) {
        return Err(TzifError::Malformed("an indicator is neither 0 nor 1"));
    }
    Ok((transitions, indices, types))
}

impl Zone {
    /// UTC as a zone (no transitions, offset 0), for tests and defaults.
    pub fn utc() -> Zone {
        Zone {
            transitions: Vec::new(),
            indices: Vec::new(),
            types: vec![LocalType {
                offset: 0,
                is_dst: false,
                abbr: "UTC".into(),
            }],
            footer: None,
        }
    }

    /// The local time type in effect at `t` (seconds since the epoch).
    pub fn local_type(&self, t: i64) -> LocalType {
        // Before the first transition: type 0 (RFC 8536 section 3.2).
        let after = self.transitions.partition_point(|&x| x <= t);
        if after == 0 {
            return self.types[0].clone();
        }
        if after == self.transitions.len()
            && let Some(rule) = &self.footer
        {
            return rule.local_type(t);
        }
        self.types[usize::from(self.indices[after - 1])].clone()
    }

    /// Seconds east of UTC at `t`.
    pub fn offset_at(&self, t: i64) -> i32 {
        self.local_type(t).offset
    }

    /// The instant at which the wall clock shows `local` (wall seconds
    /// counted as if UTC). A wall time that happens twice (the repeated
    /// hour when clocks go back) gives its first occurrence; one that is
    /// skipped (clocks go forward) is read with the offset in effect
    /// before the jump, so it lands as far after the jump as it was
    /// meant to be after the hour began (02:30 on the night clocks go
    /// from 02:00 to 03:00 is 03:30).
    pub fn instant_of(&self, local: i64) -> i64 {
        // Offsets change at most once in any stretch of a day in real
        // zones; the offsets a day either side bracket the answer.
        let local = local.clamp(-MILLION_YEARS, MILLION_YEARS);
        let before = self.offset_at(local - 86_400);
        let candidates = [
            before,
            self.offset_at(local),
            self.offset_at(local + 86_400),
        ];
        candidates
            .iter()
            .map(|&o| local - i64::from(o))
            .filter(|&t| i64::from(self.offset_at(t)) == local - t)
            .min()
            .unwrap_or(local - i64::from(before))
    }
}

const MILLION_YEARS: i64 = 1_000_000 * 366 * 86_400;

/// A POSIX TZ string: a standard time and, optionally, a daylight time
/// with the rules for when each begins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PosixTz {
    std: LocalType,
    dst: Option<(LocalType, Rule, Rule)>,
}

/// The day and time a change happens, in the local time then in effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rule {
    day: RuleDay,
    /// Seconds after local midnight; version 3 allows -167h to +167h.
    time: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RuleDay {
    /// `Jn`: day 1 to 365, February 29 never counted.
    Julian1(u16),
    /// `n`: day 0 to 365, February 29 counted in leap years.
    Julian0(u16),
    /// `Mm.w.d`: day d (0 Sunday) of week w (5 the last) of month m.
    Month(u8, u8, u8),
}

struct Text<'a> {
    s: &'a [u8],
}

impl Text<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.first().copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.s = &self.s[1..];
            true
        } else {
            false
        }
    }

    fn number(&mut self, max: i64) -> Result<i64, String> {
        let n = self.s.iter().take_while(|b| b.is_ascii_digit()).count();
        if n == 0 || n > 3 {
            return Err("expected a number".into());
        }
        let mut v = 0i64;
        for &b in &self.s[..n] {
            v = v * 10 + i64::from(b - b'0');
        }
        self.s = &self.s[n..];
        if v > max {
            return Err(format!("{v} is larger than {max}"));
        }
        Ok(v)
    }

    fn name(&mut self) -> Result<String, String> {
        let bytes = if self.eat(b'<') {
            let n = self
                .s
                .iter()
                .position(|&b| b == b'>')
                .ok_or("a <name> is not closed")?;
            let name = &self.s[..n];
            self.s = &self.s[n + 1..];
            if !name
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'-')
            {
                return Err(
                    "a <name> holds a character other than letters, digits, + and -".into(),
                );
            }
            name
        } else {
            let n = self
                .s
                .iter()
                .take_while(|b| b.is_ascii_alphabetic())
                .count();
            let name = &self.s[..n];
            self.s = &self.s[n..];
            name
        };
        if bytes.len() < 3 {
            return Err("a zone name is shorter than three characters".into());
        }
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    /// `[+-]hh[:mm[:ss]]`, hours up to `max_hours`.
    fn hms(&mut self, max_hours: i64) -> Result<i64, String> {
        let sign = if self.eat(b'-') {
            -1
        } else {
            self.eat(b'+');
            1
        };
        let mut secs = self.number(max_hours)? * 3600;
        if self.eat(b':') {
            secs += self.number(59)? * 60;
            if self.eat(b':') {
                secs += self.number(59)?;
            }
        }
        Ok(sign * secs)
    }

    fn rule(&mut self) -> Result<Rule, String> {
        let day = if self.eat(b'J') {
            let n = self.number(365)?;
            if n == 0 {
                return Err("J0 is not a day (Jn counts from 1)".into());
            }
            RuleDay::Julian1(n as u16)
        } else if self.eat(b'M') {
            let m = self.number(12)?;
            let w = if self.eat(b'.') {
                self.number(5)?
            } else {
                return Err("Mm.w.d lacks its week".into());
            };
            let d = if self.eat(b'.') {
                self.number(6)?
            } else {
                return Err("Mm.w.d lacks its weekday".into());
            };
            if m == 0 || w == 0 {
                return Err("Mm.w.d counts months and weeks from 1".into());
            }
            RuleDay::Month(m as u8, w as u8, d as u8)
        } else {
            RuleDay::Julian0(self.number(365)? as u16)
        };
        let time = if self.eat(b'/') { self.hms(167)? } else { 7200 };
        Ok(Rule { day, time })
    }
}

impl PosixTz {
    /// Parses a TZ string as TZif footers carry it.
    pub fn parse(text: &str) -> Result<PosixTz, String> {
        let mut t = Text { s: text.as_bytes() };
        let std_name = t.name()?;
        // POSIX offsets count west; liken's count east.
        let std_offset = -t.hms(24)?;
        let std = LocalType {
            offset: std_offset as i32,
            is_dst: false,
            abbr: std_name,
        };
        if t.s.is_empty() {
            return Ok(PosixTz { std, dst: None });
        }
        let dst_name = t.name()?;
        let dst_offset = if matches!(t.peek(), Some(b',') | None) {
            std_offset + 3600
        } else {
            -t.hms(24)?
        };
        if !t.eat(b',') {
            return Err(format!(
                "{text:?} has a daylight time but no rule for when it begins"
            ));
        }
        let start = t.rule()?;
        if !t.eat(b',') {
            return Err(format!("{text:?} has no rule for when daylight time ends"));
        }
        let end = t.rule()?;
        if !t.s.is_empty() {
            return Err(format!(
                "{text:?} continues after its rules: {:?}",
                String::from_utf8_lossy(t.s)
            ));
        }
        let dst = LocalType {
            offset: dst_offset as i32,
            is_dst: true,
            abbr: dst_name,
        };
        Ok(PosixTz {
            std,
            dst: Some((dst, start, end)),
        })
    }

    /// The local time type at `t`.
    pub fn local_type(&self, t: i64) -> LocalType {
        let Some((dst, start, end)) = &self.dst else {
            return self.std.clone();
        };
        // Clamped to a million years either way so the calendar
        // arithmetic cannot overflow on a forged transition time.
        let t = t.clamp(-MILLION_YEARS, MILLION_YEARS);
        let year = crate::time::year_of(t + i64::from(self.std.offset));
        // The rule of the year in question, and of the years either side,
        // so a rule whose change falls across New Year (or whose time is
        // beyond a day) is still seen.
        let mut in_dst = false;
        let mut latest = i64::MIN;
        for y in [year - 1, year, year + 1] {
            // DST begins at its rule's time in standard time, and ends at
            // its rule's time in daylight time.
            let begins = start.instant(y) - i64::from(self.std.offset);
            let ends = end.instant(y) - i64::from(dst.offset);
            // A begin at the very instant of an end is daylight time all
            // year (RFC 8536 section 3.3.1): the begin wins the tie.
            for (at, is_dst) in [(begins, true), (ends, false)] {
                if at <= t && (at > latest || (at == latest && is_dst)) {
                    latest = at;
                    in_dst = is_dst;
                }
            }
        }
        if in_dst {
            dst.clone()
        } else {
            self.std.clone()
        }
    }
}

impl Rule {
    /// The wall seconds (as if UTC) of this rule's change in `year`.
    fn instant(self, year: i64) -> i64 {
        let jan1 = crate::time::days_from_civil(year, 1, 1);
        let leap = crate::time::is_leap(year);
        let day = match self.day {
            RuleDay::Julian1(n) => {
                let n = i64::from(n);
                // February 29 is never counted: from March on, skip it.
                jan1 + n - 1 + i64::from(leap && n >= 60)
            }
            RuleDay::Julian0(n) => jan1 + i64::from(n),
            RuleDay::Month(m, w, d) => {
                let m = u32::from(m);
                let first = crate::time::days_from_civil(year, m, 1);
                // 1970-01-01 was a Thursday (weekday 4).
                let first_wd = (first + 4).rem_euclid(7);
                let mut day = first + (i64::from(d) - first_wd).rem_euclid(7);
                day += 7 * (i64::from(w) - 1);
                let len = i64::from(crate::time::days_in_month(year, m));
                while day >= first + len {
                    day -= 7;
                }
                day
            }
        };
        day * 86_400 + self.time
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version 1 file built by hand: one transition at t=1000 from
    /// type 0 (+1h, "AAA") to type 1 (+2h, DST, "BBB").
    fn v1_file() -> Vec<u8> {
        let mut b = b"TZif\0".to_vec();
        b.extend([0u8; 15]);
        for n in [0u32, 0, 0, 1, 2, 8] {
            b.extend(n.to_be_bytes());
        }
        b.extend(1000i32.to_be_bytes());
        b.push(1);
        b.extend(3600i32.to_be_bytes());
        b.extend([0, 0]);
        b.extend(7200i32.to_be_bytes());
        b.extend([1, 4]);
        b.extend(b"AAA\0BBB\0");
        b
    }

    #[test]
    fn reads_a_version_one_file() {
        let z = parse(&v1_file()).unwrap();
        assert_eq!(z.offset_at(999), 3600);
        assert_eq!(z.local_type(1000).abbr, "BBB");
        assert!(z.local_type(5000).is_dst);
        assert_eq!(z.offset_at(i64::MAX), 7200);
    }

    #[test]
    fn refuses_what_is_not_tzif_without_panicking() {
        assert_eq!(parse(b""), Err(TzifError::NotTzif));
        assert_eq!(parse(b"TZXf2"), Err(TzifError::NotTzif));
        assert_eq!(parse(b"TZif9"), Err(TzifError::Version(b'9')));
        let file = v1_file();
        for n in 0..file.len() {
            assert!(parse(&file[..n]).is_err(), "{n}");
        }
        let mut bad = file.clone();
        // The transition names type 7 of 2.
        bad[44 + 4] = 7;
        assert!(matches!(parse(&bad), Err(TzifError::Malformed(_))));
        let mut huge = file;
        huge[32..36].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(parse(&huge), Err(TzifError::Truncated));
    }

    #[test]
    fn reads_posix_tz_strings() {
        let berlin = PosixTz::parse("CET-1CEST,M3.5.0,M10.5.0/3").unwrap();
        // 2026-03-29T01:00:00Z is when Berlin springs forward.
        assert_eq!(berlin.local_type(1_774_745_999).offset, 3600);
        assert_eq!(berlin.local_type(1_774_746_000).offset, 7200);
        // 2026-10-25T01:00:00Z is when it falls back.
        assert_eq!(berlin.local_type(1_792_889_999).offset, 7200);
        assert_eq!(berlin.local_type(1_792_890_000).offset, 3600);
        let howe = PosixTz::parse("<+1030>-10:30<+11>-11,M10.1.0,M4.1.0").unwrap();
        assert_eq!(howe.local_type(1_780_000_000).abbr, "+1030");
        assert_eq!(howe.local_type(1_780_000_000).offset, 37_800);
        assert_eq!(PosixTz::parse("<-03>3").unwrap().std.offset, -10_800);
        // Version 3: all-year daylight time with a time beyond 24 hours.
        let v3 = PosixTz::parse("EST5EDT,0/0,J365/25").unwrap();
        assert!(v3.local_type(1_780_000_000).is_dst);
        for bad in [
            "",
            "C1",
            "CET",
            "CET-1CEST",
            "CET-1CEST,M3.5.0",
            "CET-1CEST,M13.5.0,M10.5.0",
            "CET-1CEST,M3.5.0,M10.5.0/3x",
            "<+1030-10:30",
            "CET-1CEST,J0,J5",
        ] {
            assert!(PosixTz::parse(bad).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_give_a_zone_or_an_error(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = parse(&bytes);
        }

        #[test]
        fn a_mangled_real_file_gives_a_zone_or_an_error(at in 0usize..2298, byte in proptest::num::u8::ANY) {
            if let Ok(mut file) = std::fs::read("/usr/share/zoneinfo/Europe/Berlin") {
                if at < file.len() {
                    file[at] = byte;
                }
                if let Ok(z) = parse(&file) {
                    let _ = z.instant_of(1_780_000_000);
                }
            }
        }
    }
}
