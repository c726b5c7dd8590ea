//! Reading what an operator serves on /metrics: one scrape over plain
//! HTTP, one series' value, and Debian's promtool as the judge of the
//! exposition's format. The operators' and liken-kube's tests each had a
//! copy of these.

use std::io::{Read, Write};
use std::process::Stdio;

/// GET /metrics from `addr` (host:port): the exposition's body.
pub fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr)
        .unwrap_or_else(|e| panic!("connecting to the metrics address {addr}: {e}"));
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap_or_else(|e| panic!("asking {addr} for /metrics: {e}"));
    let mut text = String::new();
    s.read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("reading /metrics from {addr}: {e}"));
    match text.split_once("\r\n\r\n") {
        Some((_, body)) => body.to_owned(),
        None => text,
    }
}

/// The value of one series (`name{labels}` exactly as exposed) in an
/// exposition; fails the test when it is absent.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// Checks a Prometheus exposition with Debian's `promtool check
/// metrics` (package prometheus, from scripts/setup.sh), failing the test
/// with what promtool said and the exposition itself.
pub fn promtool_check(exposition: &str) {
    let mut c = crate::scratch::tool("promtool");
    let mut child = c
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run promtool: {e}"));
    // promtool reads all of its input before it answers.
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(exposition.as_bytes())
            .unwrap_or_else(|e| panic!("writing to promtool: {e}"));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("waiting for promtool: {e}"));
    assert!(
        out.status.success(),
        "promtool check metrics refused the exposition ({}):\n{}{}\n--- exposition ---\n{exposition}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
