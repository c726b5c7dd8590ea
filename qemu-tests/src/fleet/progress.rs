//! Progress lines for the long steps of the fleet tests and the demo:
//! what is building, booting, or being waited for, with the time since
//! the run began. They go to standard error through its handle, which
//! the test harness does not capture, so `cargo test` shows them as they
//! happen.

use std::io::Write;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

/// The moment of the first progress line (or of the first call), on the
/// monotonic clock and the wall clock, read together.
fn anchor() -> (Instant, SystemTime) {
    static BEGAN: OnceLock<(Instant, SystemTime)> = OnceLock::new();
    *BEGAN.get_or_init(|| (Instant::now(), SystemTime::now()))
}

/// When the run began: `[mm:ss]` counts from here.
pub fn began() -> Instant {
    anchor().0
}

/// The wall-clock time of monotonic instant `at`, by the anchor taken at
/// the start (so a wall-clock step during the run does not move it):
/// for comparing a host-side moment with a time a machine reported.
pub fn wall(at: Instant) -> SystemTime {
    let (mono, wall) = anchor();
    match at.checked_duration_since(mono) {
        Some(after) => wall + after,
        None => wall - mono.saturating_duration_since(at),
    }
}

/// `[mm:ss]` of `at`, counted from [`began`].
pub fn clock(at: Instant) -> String {
    let t = at.saturating_duration_since(began()).as_secs();
    format!("[{:02}:{:02}]", t / 60, t % 60)
}

/// Seconds of `d`, rounded, for a line a person reads.
pub fn secs(d: Duration) -> String {
    format!("{:.0} s", d.as_secs_f64())
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

/// How often a wait says it is still waiting.
pub const SAY_EVERY: Duration = Duration::from_secs(30);

/// Asks `check` every `every` until it gives a value, printing what it
/// waits for, every [`SAY_EVERY`] what it still waits for (with the
/// last reason `check` gave), and how long it took. After `within`,
/// returns `<what>: not within <n> s; last: <reason>` for the caller to
/// fail with, adding what it knows (a machine's console).
pub fn poll<T>(
    what: &str,
    within: Duration,
    every: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let began = Instant::now();
    let mut said = Instant::now();
    step(&format!("waiting for {what}"));
    loop {
        match check() {
            Ok(v) => {
                step(&format!(
                    "{what}: done in {:.0} s",
                    began.elapsed().as_secs_f64()
                ));
                return Ok(v);
            }
            Err(why) => {
                if began.elapsed() > within {
                    return Err(format!(
                        "{what}: not within {} s; last: {why}",
                        within.as_secs()
                    ));
                }
                if said.elapsed() > SAY_EVERY {
                    step(&format!(
                        "still waiting for {what} ({:.0} s): {why}",
                        began.elapsed().as_secs_f64()
                    ));
                    said = Instant::now();
                }
            }
        }
        std::thread::sleep(every);
    }
}
