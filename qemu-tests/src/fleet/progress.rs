//! Progress lines for the long steps of the fleet tests and the demo:
//! what is building, booting, or being waited for, with the time since
//! the run began. They go to standard error through its handle, which
//! the test harness does not capture, so `cargo test` shows them as they
//! happen.

use std::io::Write;
use std::sync::OnceLock;
use std::time::Instant;

fn began() -> Instant {
    static BEGAN: OnceLock<Instant> = OnceLock::new();
    *BEGAN.get_or_init(Instant::now)
}

/// Seconds since the first progress line.
pub fn elapsed() -> f64 {
    began().elapsed().as_secs_f64()
}

/// Prints `[mm:ss] <what>` on standard error.
pub fn step(what: &str) {
    let t = elapsed() as u64;
    let _ = writeln!(std::io::stderr(), "[{:02}:{:02}] {what}", t / 60, t % 60);
}
