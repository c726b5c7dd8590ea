//! HTML for the channel index: escaping and the page frame.
//!
//! Every value that reaches a page (versions, file names, component
//! versions, the source URL) comes from a channel that someone else may
//! control, so all text and attribute values pass through [`escape`];
//! pages are built from a fixed frame and escaped pieces only. The pages
//! carry their CSS inline and no scripts, so they work from any static
//! host and from `liken serve`.

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes a path segment for an href (then escaped as an
/// attribute value by the caller), so any file name links to itself.
pub fn href_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A whole page: `title` is plain text, `body` already-built HTML.
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n",
        escape(title)
    )
}

const STYLE: &str = "body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 0.3rem 0.6rem; border-bottom: 1px solid #ddd; vertical-align: top; }
code, pre { font-family: ui-monospace, monospace; }
td code { word-break: break-all; }
pre { background: #f4f4f4; padding: 0.8rem; overflow-x: auto; }
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_everything_markup_could_hide_in() {
        assert_eq!(
            escape("<a href=\"x\" onclick='y'>&</a>"),
            "&lt;a href=&quot;x&quot; onclick=&#39;y&#39;&gt;&amp;&lt;/a&gt;"
        );
        assert_eq!(href_segment("a b/\"c"), "a%20b%2F%22c");
        assert_eq!(href_segment("2026.07.11-001"), "2026.07.11-001");
        assert!(page("<t>", "").contains("<title>&lt;t&gt;</title>"));
    }
}
