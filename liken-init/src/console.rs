//! The console: the one place init writes what it does.
//!
//! Every boot and shutdown step prints exactly one milestone line,
//! `liken: <step>: ok` (maybe with a detail in parentheses) or
//! `liken: <step>: <what went wrong and what to do>`. People read them on
//! a serial console; the QEMU tests wait for them. Each line goes out in
//! one write under a lock, so k3s's output (which shares the console)
//! can never split a milestone in two.
//!
//! Writing must never fail init: a console that is gone (no /dev/console
//! in the initramfs) loses the message and nothing else.

use std::io::Write;
use std::sync::Mutex;

static CONSOLE: Mutex<()> = Mutex::new(());

/// Writes `liken: <text>` as one line.
pub fn line(text: &str) {
    let mut buf = String::with_capacity(text.len().saturating_add(8));
    buf.push_str("liken: ");
    buf.push_str(text);
    buf.push('\n');
    let _guard = CONSOLE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(buf.as_bytes());
    let _ = out.flush();
}

/// Writes a line of another program's output as it is, under the same
/// lock, so it never splits a milestone.
pub fn raw_line(text: &[u8]) {
    let mut buf = Vec::with_capacity(text.len().saturating_add(1));
    buf.extend_from_slice(text);
    buf.push(b'\n');
    let _guard = CONSOLE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&buf);
    let _ = out.flush();
}

/// How a step ended, as its milestone reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It did its job; the detail (if any) is for people.
    Ok(Option<String>),
    /// It did not; the message says what went wrong and what to do.
    Failed(String),
    /// It could not run because an earlier step failed; the reason
    /// names what is missing.
    Skipped(String),
}

impl Outcome {
    /// Success with a detail.
    pub fn ok_with(detail: impl Into<String>) -> Outcome {
        Outcome::Ok(Some(detail.into()))
    }
}

/// The milestone text for a step, without the `liken: ` prefix.
pub fn milestone_text(step: &str, outcome: &Outcome) -> String {
    match outcome {
        Outcome::Ok(None) => format!("{step}: ok"),
        Outcome::Ok(Some(detail)) => format!("{step}: ok ({detail})"),
        Outcome::Failed(message) => format!("{step}: {message}"),
        Outcome::Skipped(why) => format!("{step}: skipped ({why})"),
    }
}

/// Prints a step's milestone.
pub fn milestone(step: &str, outcome: &Outcome) {
    line(&milestone_text(step, outcome));
}

/// Seconds since the kernel started, from /proc/uptime, for the
/// milestones that benchmarks read. `None` before /proc is mounted.
pub fn uptime() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/uptime").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milestones_have_one_shape() {
        assert_eq!(milestone_text("mount", &Outcome::Ok(None)), "mount: ok");
        assert_eq!(
            milestone_text("modules", &Outcome::ok_with("3 loaded")),
            "modules: ok (3 loaded)"
        );
        assert_eq!(
            milestone_text("machine", &Outcome::Failed("no document; add one".into())),
            "machine: no document; add one"
        );
        assert_eq!(
            milestone_text("hostname", &Outcome::Skipped("no Machine".into())),
            "hostname: skipped (no Machine)"
        );
    }
}
