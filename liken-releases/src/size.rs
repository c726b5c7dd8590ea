//! Byte sizes as people write them (`1Gi`, `512Mi`, `2G`) and as the
//! commands print them.
//!
//! The suffixes are Kubernetes quantity suffixes, because the people who
//! write `-slot-size` also write resource limits: `Ki`, `Mi`, `Gi`, `Ti`
//! are powers of 1024 and `k`, `M`, `G`, `T` powers of 1000. A bare
//! number is bytes.

use std::fmt;

/// Why a size was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeError(pub String);

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "size {:?} is not a whole number of bytes with an optional suffix \
             Ki, Mi, Gi, Ti (powers of 1024) or k, M, G, T (powers of 1000), for example 1Gi",
            self.0
        )
    }
}

impl std::error::Error for SizeError {}

/// Parses `1Gi`, `1500M`, `4096`.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let err = || SizeError(text.to_owned());
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err(err());
    }
    let n: u64 = digits.parse().map_err(|_| err())?;
    let unit: u64 = match suffix {
        "" => 1,
        "k" => 1000,
        "M" => 1000_u64.pow(2),
        "G" => 1000_u64.pow(3),
        "T" => 1000_u64.pow(4),
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return Err(err()),
    };
    n.checked_mul(unit).ok_or_else(err)
}

/// A size for people: `812 B`, `8.1 MiB`, `1.0 GiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_quantities() {
        for (text, want) in [
            ("0", 0),
            ("4096", 4096),
            ("1Gi", 1 << 30),
            ("512Mi", 512 << 20),
            ("2G", 2_000_000_000),
            ("3k", 3000),
            ("1Ti", 1 << 40),
        ] {
            assert_eq!(parse_size(text), Ok(want), "{text}");
        }
        for bad in [
            "",
            "Gi",
            "1 Gi",
            "1gi",
            "1.5Gi",
            "-1",
            "1GiB",
            "99999999999999999999",
            "20000000Ti",
        ] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.to_string().contains("for example 1Gi"), "{bad}");
        }
    }

    #[test]
    fn prints_sizes() {
        assert_eq!(human(812), "812 B");
        assert_eq!(human(8_500_000), "8.1 MiB");
        assert_eq!(human(1 << 30), "1.0 GiB");
    }
}
