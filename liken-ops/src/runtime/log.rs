//! Structured logs: one line per event on stderr, in logfmt.
//!
//! ```text
//! time=2026-12-03T08:14:02.120Z level=info component=liken-cluster-operator msg="marked Lost" machine=node-2 renewed=2026-12-03T08:13:20Z
//! ```
//!
//! logfmt because both people (`kubectl logs`) and log pipelines (Loki,
//! Vector, Fluent Bit) read it without configuration, and a line is
//! always one line: values with spaces, quotes or `=` are quoted, and
//! newlines and other control characters are escaped, so a message that
//! carries a server's error text can never forge a second log line.
//!
//! Never pass a secret to these functions: nothing here can tell a token
//! from a name.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::OnceLock;
use std::time::SystemTime;

static COMPONENT: OnceLock<&'static str> = OnceLock::new();

/// Names the program in every line (call once, first thing in `main`).
pub fn init(component: &'static str) {
    let _ = COMPONENT.set(component);
}

/// How much a line matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Something a person may act on: a failed write, a refused input.
    Warn,
    /// What the program did or decided.
    Info,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Warn => "warn",
            Level::Info => "info",
        }
    }
}

/// Writes one line at `Info`.
pub fn info(msg: &str, fields: &[(&str, &dyn std::fmt::Display)]) {
    emit(Level::Info, msg, fields);
}

/// Writes one line at `Warn`.
pub fn warn(msg: &str, fields: &[(&str, &dyn std::fmt::Display)]) {
    emit(Level::Warn, msg, fields);
}

/// Writes one line. A full or closed stderr loses the line rather than
/// stopping the program.
pub fn emit(level: Level, msg: &str, fields: &[(&str, &dyn std::fmt::Display)]) {
    let line = render(
        SystemTime::now(),
        level,
        COMPONENT.get().copied().unwrap_or("liken-ops"),
        msg,
        fields,
    );
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// The line for one event, newline included.
pub fn render(
    at: SystemTime,
    level: Level,
    component: &str,
    msg: &str,
    fields: &[(&str, &dyn std::fmt::Display)],
) -> String {
    let mut line = String::with_capacity(128);
    let _ = write!(
        line,
        "time={} level={} component={}",
        liken_kube::microtime::format(at),
        level.as_str(),
        value(component)
    );
    let _ = write!(line, " msg={}", value(msg));
    for (key, v) in fields {
        let _ = write!(line, " {}={}", key_of(key), value(&v.to_string()));
    }
    line.push('\n');
    line
}

/// A key is kept to `[A-Za-z0-9_.-]`; anything else becomes `_`.
fn key_of(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A value bare when it can be, else double-quoted with `"`, `\` and
/// control characters escaped.
fn value(text: &str) -> String {
    let bare = !text.is_empty()
        && text
            .chars()
            .all(|c| !c.is_control() && c != ' ' && c != '"' && c != '=' && c != '\\');
    if bare {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn a_line_is_logfmt_with_quoted_values_where_needed() {
        let at = UNIX_EPOCH + Duration::from_millis(1_796_285_642_120);
        let line = render(
            at,
            Level::Info,
            "liken-cluster-operator",
            "marked Lost",
            &[("machine", &"node-2"), ("count", &3)],
        );
        assert_eq!(
            line,
            "time=2026-12-03T08:14:02.120000Z level=info component=liken-cluster-operator \
             msg=\"marked Lost\" machine=node-2 count=3\n"
        );
    }

    #[test]
    fn a_value_can_never_start_a_second_line_or_a_field() {
        let line = render(
            UNIX_EPOCH,
            Level::Warn,
            "c",
            "x",
            &[
                ("err", &"boom\nlevel=info msg=\"forged\""),
                ("bad key", &""),
            ],
        );
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(
            line.ends_with(" err=\"boom\\nlevel=info msg=\\\"forged\\\"\" bad_key=\"\"\n"),
            "{line}"
        );
    }
}
