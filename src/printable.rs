//! Text from outside (a caller's request, a manifest, an audit record) made
//! safe to print to a terminal: control characters are written as escapes,
//! so such text can neither move the cursor, recolour or retitle a terminal,
//! nor start a line of its own that a reader would take for spawnd's.
//!
//! [`printable`] is for one field; [`printable_lines`] keeps the line breaks
//! of a block spawnd composed itself and escapes everything else. JSON output
//! needs neither: its encoder escapes control characters already.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` must not reach a terminal as it is: C0 and C1 controls, DEL,
/// and the Unicode marks that reorder text (which can make a line read
/// differently from its bytes).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every control character escaped: `\n`, `\r` and `\t` as
/// such, anything else as `\u{…}` (ESC becomes `\u{1b}`). Text without one
/// is returned as it is.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A block of lines: each line passed through [`printable`], the line
/// breaks kept.
pub(crate) fn printable_lines(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c != '\n' && needs_escape(c)) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.split('\n')
            .map(printable)
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_escapes_and_plain_text_is_untouched() {
        let table = [
            ("local://acme/git", "local://acme/git"),
            ("a\nb", "a\\nb"),
            ("a\r\tb", "a\\r\\tb"),
            ("\u{1b}[31mred\u{1b}[0m", "\\u{1b}[31mred\\u{1b}[0m"),
            ("bell\u{7} del\u{7f}", "bell\\u{7} del\\u{7f}"),
            ("csi\u{9b}2J", "csi\\u{9b}2J"),
            ("\u{202e}txt.exe", "\\u{202e}txt.exe"),
            ("naïve — ok", "naïve — ok"),
        ];
        for (input, expected) in table {
            assert_eq!(printable(input), expected, "{input:?}");
        }
        assert!(matches!(printable("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_block_keeps_its_lines_and_escapes_the_rest() {
        assert_eq!(
            printable_lines("one\ntwo \u{1b}[2J\r\nthree"),
            "one\ntwo \\u{1b}[2J\\r\nthree"
        );
        assert!(matches!(printable_lines("a\nb"), Cow::Borrowed(_)));
    }
}
