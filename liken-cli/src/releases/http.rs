//! The HTTP/1.1 request parser and response heads of `serve`.
//!
//! Everything here is a pure function over bytes, so the fuzz target
//! (`liken-cli/fuzz`) drives exactly the code the server runs, and the
//! tests need no sockets.
//!
//! The parser accepts what RFC 9112 asks a server to accept and refuses
//! the rest with a status: a request line of `method SP target SP
//! HTTP/1.x`, header fields without obsolete line folding, CRLF or bare
//! LF line ends, and empty lines before the request line. Only the fields
//! the server acts on are kept (Host, Connection, Range, Content-Length,
//! Transfer-Encoding); others are checked for shape and dropped. Request
//! bodies are not something a file server reads, so a chunked body is
//! refused (the connection could not be reused safely) and a sized one is
//! discarded by the caller.
//!
//! Range follows RFC 9110 §14: a single `bytes=` range of any of the
//! three forms is served as 206; anything the server does not support
//! (other units, several ranges) or cannot parse is ignored, and the
//! whole file is sent, as the RFC allows.

use std::fmt;

/// The most bytes a request head may take.
pub const MAX_HEAD: usize = 16 << 10;
/// The most header fields a request may carry.
pub const MAX_FIELDS: usize = 100;

/// The request method, as far as serve cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// HEAD.
    Head,
    /// Anything else (answered 405).
    Other(String),
}

/// A parsed request head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// The request target as sent (origin form, or the path of an
    /// absolute-form target).
    pub target: String,
    /// True for HTTP/1.1, false for HTTP/1.0.
    pub http11: bool,
    /// The Range field, when exactly one was sent.
    pub range: Option<String>,
    /// Whether the connection stays open after the response.
    pub keep_alive: bool,
    /// The length of a body that follows the head (to be discarded).
    pub content_length: u64,
}

/// The outcome of parsing a buffer's start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed.
    Partial,
    /// A complete head, and how many bytes of the buffer it used.
    Complete(Request, usize),
}

/// Why a request was refused; [`ParseError::status`] is the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// The head is longer than [`MAX_HEAD`] or has too many fields.
    TooLarge,
    /// The request line is malformed.
    RequestLine,
    /// The protocol is not HTTP/1.0 or HTTP/1.1.
    Version,
    /// A header field is malformed (bad name, control bytes, folding).
    Field,
    /// HTTP/1.1 without exactly one Host.
    Host,
    /// Content-Length is malformed or contradicts itself.
    ContentLength,
    /// Transfer-Encoding was sent.
    TransferEncoding,
}

impl ParseError {
    /// The status code that answers this error.
    pub fn status(&self) -> u16 {
        match self {
            ParseError::TooLarge => 431,
            ParseError::Version => 505,
            ParseError::TransferEncoding => 501,
            _ => 400,
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParseError::TooLarge => "request head too large",
            ParseError::RequestLine => "malformed request line",
            ParseError::Version => "only HTTP/1.0 and HTTP/1.1 are served",
            ParseError::Field => "malformed header field",
            ParseError::Host => "HTTP/1.1 requests carry exactly one Host field",
            ParseError::ContentLength => "malformed Content-Length",
            ParseError::TransferEncoding => {
                "request bodies with Transfer-Encoding are not accepted"
            }
        })
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Where the head ends: the index just past the empty line, if present.
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(off) = buf[i..].iter().position(|&b| b == b'\n') {
        let nl = i + off;
        match buf.get(nl + 1) {
            Some(b'\n') => return Some(nl + 2),
            Some(b'\r') if buf.get(nl + 2) == Some(&b'\n') => return Some(nl + 3),
            _ => i = nl + 1,
        }
    }
    None
}

/// Parses the request head at the start of `buf`.
pub fn parse_request(buf: &[u8]) -> Result<Parsed, ParseError> {
    // Empty lines before the request line are skipped (RFC 9112 §2.2).
    let skip = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let rest = &buf[skip..];
    let Some(end) = head_end(rest) else {
        return if rest.len() > MAX_HEAD {
            Err(ParseError::TooLarge)
        } else {
            Ok(Parsed::Partial)
        };
    };
    if end > MAX_HEAD {
        return Err(ParseError::TooLarge);
    }
    let head = &rest[..end];
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let request_line = lines.next().ok_or(ParseError::RequestLine)?;
    let (method, target, http11) = parse_request_line(request_line)?;

    let mut host = 0;
    let mut range: Option<String> = None;
    let mut ranges = 0;
    let mut close = false;
    let mut keep = false;
    let mut content_length: Option<u64> = None;
    let mut fields = 0;
    for line in lines {
        if line.is_empty() {
            break;
        }
        fields += 1;
        if fields > MAX_FIELDS {
            return Err(ParseError::TooLarge);
        }
        let (name, value) = parse_field(line)?;
        if name.eq_ignore_ascii_case("host") {
            host += 1;
        } else if name.eq_ignore_ascii_case("range") {
            ranges += 1;
            range = Some(value.to_owned());
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                close |= token.eq_ignore_ascii_case("close");
                keep |= token.eq_ignore_ascii_case("keep-alive");
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            for v in value.split(',').map(str::trim) {
                if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(ParseError::ContentLength);
                }
                let n: u64 = v.parse().map_err(|_| ParseError::ContentLength)?;
                match content_length {
                    Some(old) if old != n => return Err(ParseError::ContentLength),
                    _ => content_length = Some(n),
                }
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(ParseError::TransferEncoding);
        }
    }
    if http11 && host != 1 {
        return Err(ParseError::Host);
    }
    let keep_alive = if http11 { !close } else { keep && !close };
    Ok(Parsed::Complete(
        Request {
            method,
            target,
            http11,
            range: if ranges == 1 { range } else { None },
            keep_alive,
            content_length: content_length.unwrap_or(0),
        },
        skip + end,
    ))
}

fn parse_request_line(line: &[u8]) -> Result<(Method, String, bool), ParseError> {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ParseError::RequestLine);
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err(ParseError::RequestLine);
    }
    if target.is_empty() || !target.iter().all(|&b| (0x21..0x7f).contains(&b)) {
        return Err(ParseError::RequestLine);
    }
    let http11 = match version {
        b"HTTP/1.1" => true,
        b"HTTP/1.0" => false,
        v if v.starts_with(b"HTTP/") => return Err(ParseError::Version),
        _ => return Err(ParseError::RequestLine),
    };
    // Every byte was checked to be ASCII above.
    let method = String::from_utf8_lossy(method).into_owned();
    let mut target = String::from_utf8_lossy(target).into_owned();
    // An absolute-form target (a proxy's form) names its path after the
    // authority; the authority itself is ignored, as Host is.
    if let Some(after) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        target = match after.find('/') {
            Some(i) => after[i..].to_owned(),
            None => "/".to_owned(),
        };
    }
    let method = match method.as_str() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        _ => Method::Other(method),
    };
    Ok((method, target, http11))
}

fn parse_field(line: &[u8]) -> Result<(&str, &str), ParseError> {
    // A field line starting with whitespace is obsolete line folding.
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(ParseError::Field)?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(ParseError::Field);
    }
    if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(ParseError::Field);
    }
    let name = std::str::from_utf8(name).map_err(|_| ParseError::Field)?;
    // Field values may carry obs-text (bytes above 0x7f); serve reads no
    // such value, so a lossy view is only ever compared against ASCII.
    let value = std::str::from_utf8(value).unwrap_or_default();
    Ok((name, value.trim_matches([' ', '\t'])))
}

/// What to send for a Range field on a file of `len` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeDecision {
    /// The whole file, 200.
    Full,
    /// Bytes `start..=end`, 206.
    Partial {
        /// The first byte.
        start: u64,
        /// The last byte, inclusive.
        end: u64,
    },
    /// 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// Decides how to answer `range` for a file of `len` bytes.
pub fn decide_range(range: Option<&str>, len: u64) -> RangeDecision {
    let Some(spec) = range else {
        return RangeDecision::Full;
    };
    let spec = spec.trim();
    let Some((unit, set)) = spec.split_once('=') else {
        return RangeDecision::Full;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") || set.contains(',') {
        return RangeDecision::Full;
    }
    let Some((first, last)) = set.trim().split_once('-') else {
        return RangeDecision::Full;
    };
    let (first, last) = (first.trim(), last.trim());
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    // A number too large for u64 is still a number: past any file's end.
    let number = |s: &str| s.parse::<u64>().unwrap_or(u64::MAX);
    match (first.is_empty(), last.is_empty()) {
        (false, _) if !digits(first) || !(last.is_empty() || digits(last)) => RangeDecision::Full,
        (false, false) if number(first) > number(last) => RangeDecision::Full,
        (false, _) => {
            let start = number(first);
            if start >= len {
                return RangeDecision::Unsatisfiable;
            }
            let end = if last.is_empty() {
                len - 1
            } else {
                number(last).min(len - 1)
            };
            RangeDecision::Partial { start, end }
        }
        (true, false) if digits(last) => {
            let suffix = number(last);
            if suffix == 0 || len == 0 {
                return RangeDecision::Unsatisfiable;
            }
            RangeDecision::Partial {
                start: len.saturating_sub(suffix),
                end: len - 1,
            }
        }
        _ => RangeDecision::Full,
    }
}

/// The reason phrase of the statuses serve sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        416 => "Range Not Satisfiable",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// A response head: status line, the given fields, Content-Length, Date,
/// Server and the connection's fate, ending in the empty line.
pub fn response_head(
    status: u16,
    fields: &[(&str, &str)],
    content_length: u64,
    keep_alive: bool,
    date: &str,
) -> Vec<u8> {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(256);
    let _ = write!(s, "HTTP/1.1 {status} {}\r\n", reason(status));
    let _ = write!(s, "Server: liken\r\nDate: {date}\r\n");
    for (name, value) in fields {
        let _ = write!(s, "{name}: {value}\r\n");
    }
    let _ = write!(s, "Content-Length: {content_length}\r\n");
    if !keep_alive {
        s.push_str("Connection: close\r\n");
    }
    s.push_str("\r\n");
    s.into_bytes()
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) for the Date field.
pub fn http_date(t: liken_api::Time) -> String {
    // liken_api::Time prints RFC 3339 in UTC; the fields are in place.
    let rfc = t.to_string();
    let b = rfc.as_bytes();
    if b.len() < 20 {
        return String::new();
    }
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let weekday = DAYS[t.unix().div_euclid(86_400).rem_euclid(7) as usize];
    let month: usize = rfc[5..7].parse().unwrap_or(1);
    format!(
        "{weekday}, {} {} {} {} GMT",
        &rfc[8..10],
        MONTHS[month.clamp(1, 12) - 1],
        &rfc[0..4],
        &rfc[11..19]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Parsed, ParseError> {
        parse_request(text.as_bytes())
    }

    fn complete(text: &str) -> (Request, usize) {
        match parse(text) {
            Ok(Parsed::Complete(r, n)) => (r, n),
            other => panic!("{text:?}: {other:?}"),
        }
    }

    #[test]
    fn parses_gets_heads_and_keep_alive() {
        let text =
            "GET /2026.07.11-001/vmlinuz HTTP/1.1\r\nHost: x\r\nRange: bytes=0-99\r\n\r\nGET";
        let (r, n) = complete(text);
        assert_eq!(n, text.len() - 3);
        assert_eq!(r.method, Method::Get);
        assert_eq!(r.target, "/2026.07.11-001/vmlinuz");
        assert_eq!(r.range.as_deref(), Some("bytes=0-99"));
        assert!(r.keep_alive && r.http11);

        let (r, _) = complete("\r\nHEAD / HTTP/1.0\nConnection: Keep-Alive\n\n");
        assert_eq!(r.method, Method::Head);
        assert!(r.keep_alive && !r.http11);
        let (r, _) = complete("GET / HTTP/1.0\r\n\r\n");
        assert!(!r.keep_alive);
        let (r, _) = complete("GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, close\r\n\r\n");
        assert!(!r.keep_alive);
        let (r, _) =
            complete("DELETE http://h:1/a?b HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\n");
        assert_eq!(r.method, Method::Other("DELETE".into()));
        assert_eq!(r.target, "/a?b");
        assert_eq!(r.content_length, 3);
        let (r, _) =
            complete("GET / HTTP/1.1\r\nHost: x\r\nRange: bytes=1-2\r\nRange: bytes=3-4\r\n\r\n");
        assert_eq!(r.range, None, "two Range fields are ignored");
    }

    #[test]
    fn waits_for_the_whole_head() {
        for text in [
            "",
            "GET / HTTP/1.1\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\n",
            "\r\n\r\n",
        ] {
            assert_eq!(parse(text), Ok(Parsed::Partial), "{text:?}");
        }
        let big = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(MAX_HEAD));
        assert_eq!(parse(&big), Err(ParseError::TooLarge));
        let many = format!(
            "GET / HTTP/1.1\r\nHost: x\r\n{}\r\n",
            "A: b\r\n".repeat(MAX_FIELDS)
        );
        assert_eq!(parse(&many), Err(ParseError::TooLarge));
    }

    #[test]
    fn refuses_malformed_requests_with_their_status() {
        for (text, status) in [
            ("GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400),
            ("GET / HTTP/1.1 extra\r\nHost: x\r\n\r\n", 400),
            ("G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400),
            ("GET /a\x01b HTTP/1.1\r\nHost: x\r\n\r\n", 400),
            ("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
            ("GET / FTP/1.0\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: x\r\nX: a\0b\r\n\r\n", 400),
            (
                "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 2\r\n\r\n",
                400,
            ),
            (
                "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
                400,
            ),
            (
                "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
                501,
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.status(), status, "{text:?}: {e}");
        }
    }

    #[test]
    fn ranges_follow_rfc_9110() {
        use RangeDecision::*;
        let p = |start, end| Partial { start, end };
        for (spec, len, want) in [
            (None, 10, Full),
            (Some("bytes=0-4"), 10, p(0, 4)),
            (Some("bytes=5-"), 10, p(5, 9)),
            (Some("bytes=-3"), 10, p(7, 9)),
            (Some("bytes=-30"), 10, p(0, 9)),
            (Some("bytes=2-200"), 10, p(2, 9)),
            (Some("BYTES = 1-1"), 10, p(1, 1)),
            (Some("bytes=10-"), 10, Unsatisfiable),
            (Some("bytes=10-20"), 10, Unsatisfiable),
            (Some("bytes=-0"), 10, Unsatisfiable),
            (Some("bytes=0-"), 0, Unsatisfiable),
            (Some("bytes=-5"), 0, Unsatisfiable),
            (Some("bytes=99999999999999999999-"), 10, Unsatisfiable),
            (Some("bytes=0-99999999999999999999"), 10, p(0, 9)),
            (Some("bytes=5-2"), 10, Full),
            (Some("bytes=0-1,3-4"), 10, Full),
            (Some("items=0-1"), 10, Full),
            (Some("bytes=a-b"), 10, Full),
            (Some("bytes=-"), 10, Full),
            (Some("bytes=1-2-3"), 10, Full),
            (Some("bytes"), 10, Full),
        ] {
            assert_eq!(decide_range(spec, len), want, "{spec:?} of {len}");
        }
    }

    #[test]
    fn heads_and_dates() {
        let h = response_head(206, &[("Content-Range", "bytes 0-4/10")], 5, false, "D");
        assert_eq!(
            String::from_utf8(h).unwrap(),
            "HTTP/1.1 206 Partial Content\r\nServer: liken\r\nDate: D\r\n\
             Content-Range: bytes 0-4/10\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(
            http_date(liken_api::Time::from_unix(784_111_777)),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
        assert_eq!(
            http_date(liken_api::Time::EPOCH),
            "Thu, 01 Jan 1970 00:00:00 GMT"
        );
    }
}
