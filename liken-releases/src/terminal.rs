//! Text from a channel made safe to print.
//!
//! A channel is untrusted until its bytes are hashed, and some of what it
//! says reaches a person's terminal before that or regardless of it: file
//! names from release.yaml, a redirect's Location, the field names a
//! strict decoder reports. A terminal acts on control characters (ESC
//! starts a sequence that can retitle the window, move the cursor over
//! earlier lines or, on some terminals, answer back; C1 controls such as
//! U+009B do the same without ESC) and reorders text around Unicode's
//! bidirectional controls, so a name could hide or fake what is printed
//! next to it. [`escape`] writes each such character as a visible `\u{..}`
//! escape; [`escape_text`] does the same but keeps line breaks and tabs,
//! for messages of several lines.

use std::borrow::Cow;

/// Whether a terminal would act on `c` rather than show it.
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            // Bidirectional marks, embeddings, overrides and isolates.
            '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

fn escape_where(text: &str, unsafe_char: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(&unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// One line of untrusted text (a name, a URL): every control and
/// bidirectional character escaped, line breaks included.
pub fn escape(text: &str) -> Cow<'_, str> {
    escape_where(text, is_unsafe)
}

/// A message that may hold untrusted text: as [`escape`], but line
/// breaks and tabs are kept.
pub fn escape_text(text: &str) -> Cow<'_, str> {
    escape_where(text, |c| c != '\n' && c != '\t' && is_unsafe(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_terminal_would_act_on_is_shown_instead() {
        for (given, want) in [
            ("vmlinuz", "vmlinuz"),
            ("é-ü 名前", "é-ü 名前"),
            ("\x1b]0;owned\x07", "\\u{1b}]0;owned\\u{7}"),
            ("a\rb", "a\\u{d}b"),
            ("csi\u{9b}2J", "csi\\u{9b}2J"),
            ("del\x7f", "del\\u{7f}"),
            ("file\u{202E}fdp.exe", "file\\u{202e}fdp.exe"),
            ("iso\u{2066}late\u{2069}", "iso\\u{2066}late\\u{2069}"),
            ("two\nlines", "two\\u{a}lines"),
        ] {
            assert_eq!(escape(given), want, "{given:?}");
        }
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
        assert_eq!(
            escape_text("line one\n\tline \x1b[2J two\n"),
            "line one\n\tline \\u{1b}[2J two\n"
        );
    }
}
