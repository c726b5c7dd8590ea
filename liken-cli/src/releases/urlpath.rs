//! From a request target to a path inside the served directory.
//!
//! This is the pure half of "no path escapes the directory": the target
//! is cut at `?` or `#`, split on `/`, and each segment percent-decoded
//! on its own, so `%2F` cannot manufacture a separator and `%2e%2e` is
//! seen as the `..` it is. A `..` segment, a decoded `/` or `\`, a NUL
//! or a malformed escape is a bad request: no honest client sends one
//! (curl and browsers resolve dot segments before sending). Segments that
//! start with a dot are refused as not found, which keeps dotfiles and
//! the hidden staging and temporary names of bundle and fetch private.
//!
//! The impure half, in `serve`, opens the result relative to the root
//! with `RESOLVE_BENEATH`, so a symlink cannot lead out either.

use std::fmt;

/// Why a target names nothing that may be served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetError {
    /// The target is not an absolute path (`*`, `foo`).
    NotAPath,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// A segment decodes to `..`, or to something holding `/`, `\` or NUL.
    Escape,
    /// A segment starts with a dot: hidden, answered as not found.
    Hidden,
}

impl TargetError {
    /// The status that answers this target.
    pub fn status(&self) -> u16 {
        match self {
            TargetError::Hidden => 404,
            _ => 400,
        }
    }
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TargetError::NotAPath => "the target is not an absolute path",
            TargetError::BadEscape => "malformed percent escape",
            TargetError::Escape => "the path tries to leave the served directory",
            TargetError::Hidden => "hidden names are not served",
        })
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Percent-decodes one segment.
pub fn percent_decode(segment: &str) -> Result<Vec<u8>, TargetError> {
    let b = segment.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let (Some(h), Some(l)) = (
                b.get(i + 1).copied().and_then(hex),
                b.get(i + 2).copied().and_then(hex),
            ) else {
                return Err(TargetError::BadEscape);
            };
            out.push(h << 4 | l);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// The decoded segments of `target` below the served root (empty for
/// the root itself). Empty and `.` segments are dropped.
pub fn decode_target(target: &str) -> Result<Vec<Vec<u8>>, TargetError> {
    let path = target.split(['?', '#']).next().unwrap_or("");
    let Some(path) = path.strip_prefix('/') else {
        return Err(TargetError::NotAPath);
    };
    let mut segments = Vec::new();
    let mut hidden = false;
    for raw in path.split('/') {
        let seg = percent_decode(raw)?;
        if seg.is_empty() || seg == b"." {
            continue;
        }
        if seg == b".." || seg.iter().any(|&c| c == b'/' || c == b'\\' || c == 0) {
            return Err(TargetError::Escape);
        }
        // Keep looking after a hidden segment: an escape attempt later in
        // the path is the more important answer.
        hidden |= seg[0] == b'.';
        segments.push(seg);
    }
    if hidden {
        return Err(TargetError::Hidden);
    }
    Ok(segments)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(t: &str) -> Vec<String> {
        decode_target(t)
            .unwrap()
            .into_iter()
            .map(|s| String::from_utf8(s).unwrap())
            .collect()
    }

    #[test]
    fn decodes_paths() {
        assert!(ok("/").is_empty());
        assert_eq!(ok("/2026.07.11-001/vmlinuz"), ["2026.07.11-001", "vmlinuz"]);
        assert_eq!(ok("//a/./b/?x=../y#z"), ["a", "b"]);
        assert_eq!(ok("/a%20b/%41"), ["a b", "A"]);
        assert_eq!(decode_target("/..hidden"), Err(TargetError::Hidden));
        assert_eq!(ok("/a..b/c."), ["a..b", "c."]);
    }

    #[test]
    fn refuses_escapes() {
        use TargetError::*;
        for (t, want) in [
            ("*", NotAPath),
            ("a/b", NotAPath),
            ("/../etc/passwd", Escape),
            ("/a/../../b", Escape),
            ("/%2e%2e/x", Escape),
            ("/%2E%2E", Escape),
            ("/a%2fb", Escape),
            ("/a%5cb", Escape),
            ("/a%00b", Escape),
            ("/a%zz", BadEscape),
            ("/a%4", BadEscape),
            ("/.git/config", Hidden),
            ("/.v.bundle-1/x", Hidden),
            ("/.x/../y", Escape),
        ] {
            assert_eq!(decode_target(t), Err(want.clone()), "{t}");
        }
        assert_eq!(Hidden.status(), 404);
        assert_eq!(Escape.status(), 400);
    }
}
