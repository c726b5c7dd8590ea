//! Progress for the long copies of bundle and fetch.
//!
//! On a terminal a one-line bar redraws in place at most ten times a
//! second; anywhere else (a CI log, a pipe) a plain line is printed at
//! each quarter of a large file, so logs stay short and readable (the
//! command's own output says when each file is done). Progress goes to standard error: it is not the
//! command's output, and a script reading standard output never sees it.
//!
//! The drawing is a pure function of the counts ([`render_bar`],
//! [`quarter_crossed`]) so it is tested without a terminal.

use std::fmt;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::size::human;

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// A bar redrawn in place.
    Bar,
    /// Plain lines.
    Lines,
    /// Nothing (tests, benchmarks).
    Quiet,
}

impl Style {
    /// A bar when standard error is a terminal, plain lines otherwise.
    pub fn detect() -> Style {
        if std::io::stderr().is_terminal() {
            Style::Bar
        } else {
            Style::Lines
        }
    }
}

/// Told the bytes of a whole transfer as they arrive, `(done, total)`:
/// how a program with no terminal (the machine operator, which reports
/// progress in a condition) follows a download.
#[derive(Clone)]
pub struct Observer(pub Arc<dyn Fn(u64, u64) + Send + Sync>);

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Observer")
    }
}

/// Files smaller than this get no quarter lines, only the final one.
const QUARTERS_FROM: u64 = 64 << 20;
const REDRAW: Duration = Duration::from_millis(100);

/// The progress of one file.
pub struct Progress {
    style: Style,
    label: String,
    total: u64,
    done: u64,
    started: Instant,
    resumed_at: u64,
    last_draw: Option<Instant>,
    /// The observer, with the bytes before this file and the transfer's
    /// total.
    observer: Option<(Observer, u64, u64)>,
}

impl Progress {
    /// Starts tracking `label` of `total` bytes, `done` of them already
    /// present (a resumed download).
    pub fn new(style: Style, label: impl Into<String>, total: u64, done: u64) -> Progress {
        Progress {
            style,
            label: label.into(),
            total,
            done,
            started: Instant::now(),
            resumed_at: done,
            last_draw: None,
            observer: None,
        }
    }

    /// The same progress, also told to `observer` as part of a transfer
    /// of `total` bytes of which `offset` came before this file.
    pub fn observed(mut self, observer: Option<&Observer>, offset: u64, total: u64) -> Progress {
        if let Some(o) = observer {
            (o.0)(offset.saturating_add(self.done), total);
            self.observer = Some((o.clone(), offset, total));
        }
        self
    }

    /// Counts `n` more bytes.
    pub fn advance(&mut self, n: u64) {
        let before = self.done;
        self.done = self.done.saturating_add(n);
        if let Some((o, offset, total)) = &self.observer {
            (o.0)(offset.saturating_add(self.done), *total);
        }
        match self.style {
            Style::Quiet => {}
            Style::Bar => {
                let now = Instant::now();
                if self
                    .last_draw
                    .is_none_or(|t| now.duration_since(t) >= REDRAW)
                {
                    self.last_draw = Some(now);
                    self.draw_bar();
                }
            }
            Style::Lines => {
                if self.total >= QUARTERS_FROM
                    && let Some(q) = quarter_crossed(before, self.done, self.total)
                    && q < 4
                {
                    eprintln!(
                        "{}: {}% ({} of {})",
                        self.label,
                        q * 25,
                        human(self.done),
                        human(self.total)
                    );
                }
            }
        }
    }

    fn rate(&self) -> f64 {
        let secs = self.started.elapsed().as_secs_f64();
        if secs > 0.0 {
            (self.done - self.resumed_at.min(self.done)) as f64 / secs
        } else {
            0.0
        }
    }

    fn draw_bar(&self) {
        let line = render_bar(&self.label, self.done, self.total, self.rate(), 30);
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{line}\x1b[K");
        let _ = err.flush();
    }

    /// Ends the display with a closing line saying `verdict`.
    pub fn finish(&mut self, verdict: &str) {
        match self.style {
            Style::Quiet => {}
            Style::Bar => {
                self.draw_bar();
                eprintln!(" {verdict}");
            }
            // The command's own output line says the file is done.
            Style::Lines => {}
        }
    }

    /// Ends the bar without a verdict (the error is printed after).
    pub fn abandon(&mut self) {
        if self.style == Style::Bar {
            eprintln!();
        }
    }
}

/// The highest quarter (1..=4) that `done` reached and `before` had not.
pub fn quarter_crossed(before: u64, done: u64, total: u64) -> Option<u64> {
    if total == 0 {
        return None;
    }
    let quarter = |n: u64| (u128::from(n.min(total)) * 4 / u128::from(total)) as u64;
    let (a, b) = (quarter(before), quarter(done));
    (b > a).then_some(b)
}

/// One line of a bar: `label [#####.....]  45%  460.0 MiB/1.0 GiB  380.0 MiB/s`.
pub fn render_bar(label: &str, done: u64, total: u64, rate: f64, width: usize) -> String {
    let fraction = if total == 0 {
        1.0
    } else {
        done.min(total) as f64 / total as f64
    };
    let filled = ((fraction * width as f64) as usize).min(width);
    format!(
        "{label} [{}{}] {:3}% {}/{} {}/s",
        "#".repeat(filled),
        ".".repeat(width - filled),
        (fraction * 100.0) as u32,
        human(done),
        human(total),
        human(rate as u64),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_fill_with_the_count() {
        assert_eq!(
            render_bar("vmlinuz", 0, 100, 0.0, 10),
            "vmlinuz [..........]   0% 0 B/100 B 0 B/s"
        );
        assert_eq!(
            render_bar("vmlinuz", 50, 100, 2048.0, 10),
            "vmlinuz [#####.....]  50% 50 B/100 B 2.0 KiB/s"
        );
        assert_eq!(
            render_bar("x", 200, 100, 0.0, 4),
            "x [####] 100% 200 B/100 B 0 B/s"
        );
        assert!(render_bar("empty", 0, 0, 0.0, 4).contains("100%"));
    }

    #[test]
    fn quarters_are_reported_once() {
        assert_eq!(quarter_crossed(0, 10, 100), None);
        assert_eq!(quarter_crossed(10, 25, 100), Some(1));
        assert_eq!(quarter_crossed(25, 49, 100), None);
        assert_eq!(quarter_crossed(49, 80, 100), Some(3));
        assert_eq!(quarter_crossed(80, 100, 100), Some(4));
        assert_eq!(quarter_crossed(0, 0, 0), None);
        assert_eq!(quarter_crossed(0, u64::MAX, u64::MAX), Some(4));
    }
}
