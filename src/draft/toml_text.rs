//! TOML text as the draft writes it: strings quoted and escaped, paths in
//! comments shown so a file name cannot end a comment line.

use std::fmt::Write as _;
use std::path::Path;

/// A path as a comment or message may show it: control characters and
/// quotes escaped, so a file name cannot end a comment line.
pub(super) fn shown(p: &Path) -> String {
    escape(&p.display().to_string())
}

pub(super) fn escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

pub(super) fn quote(s: &str) -> String {
    format!("\"{}\"", escape(s))
}

pub(super) fn join_quoted<'a>(items: impl Iterator<Item = &'a str>) -> String {
    items.map(quote).collect::<Vec<_>>().join(", ")
}
