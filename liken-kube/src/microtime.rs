//! `metav1.MicroTime`: RFC 3339 with microseconds, as Leases and
//! events.k8s.io Events carry (`2026-01-02T15:04:05.000000Z`).

use std::time::{SystemTime, UNIX_EPOCH};

use liken_api::Time;

/// Formats `t` as a MicroTime.
pub fn format(t: SystemTime) -> String {
    let micros = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_micros())
        .unwrap_or(0);
    let seconds = Time::from_system(t).to_string();
    // Time prints `...:SSZ`; the fraction goes before the zone.
    format!("{}.{micros:06}Z", seconds.trim_end_matches('Z'))
}

/// The current time as a MicroTime.
pub fn now() -> String {
    format(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn micro_precision() {
        let t = std::time::UNIX_EPOCH + Duration::from_micros(1_767_225_600_000_042);
        assert_eq!(super::format(t), "2026-01-01T00:00:00.000042Z");
    }
}
