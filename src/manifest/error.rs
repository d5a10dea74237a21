//! Load errors that point at the text: file, line, column, the dotted key, what
//! was wrong and how to fix it. Validation collects every problem it can find in
//! one pass, so a manifest author fixes them all at once.

use std::fmt;
use std::ops::Range;

use serde::Serialize;

/// One problem in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// Dotted key path, e.g. `capabilities.spawn.fs_write[0]`.
    pub key: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// Every problem found while loading one manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ManifestError {
    /// The file (or `<input>`).
    pub file: String,
    /// The problems, in file order.
    pub problems: Vec<Problem>,
}

impl ManifestError {
    /// True when any problem's message or key contains `needle` (for tests and callers).
    pub fn mentions(&self, needle: &str) -> bool {
        self.problems.iter().any(|p| {
            p.message.contains(needle)
                || p.key.contains(needle)
                || p.hint.as_deref().is_some_and(|h| h.contains(needle))
        })
    }
}

/// One line per problem: keys and messages may quote the manifest's text,
/// so each part is escaped ([`crate::printable`]) and cannot add a line.
impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::printable::printable;
        let n = self.problems.len();
        let file = printable(&self.file);
        write!(f, "{file} has {n} problem{}", if n == 1 { "" } else { "s" })?;
        for p in &self.problems {
            write!(
                f,
                "\n  {file}:{}:{}: {}: {}",
                p.line,
                p.column,
                printable(&p.key),
                printable(&p.message)
            )?;
            if let Some(hint) = &p.hint {
                write!(f, "\n    hint: {}", printable(hint))?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ManifestError {}

/// Turns byte spans into problems with line and column.
pub(super) struct Collector<'a> {
    text: &'a str,
    problems: Vec<Problem>,
}

impl<'a> Collector<'a> {
    /// A collector over the manifest text.
    pub(super) fn new(text: &'a str) -> Self {
        Collector {
            text,
            problems: Vec::new(),
        }
    }

    /// Records a problem at `span`.
    pub(super) fn push(
        &mut self,
        span: Range<usize>,
        key: &str,
        message: impl Into<String>,
        hint: Option<&str>,
    ) {
        let (line, column) = line_column(self.text, span.start);
        self.problems.push(Problem {
            line,
            column,
            key: key.to_string(),
            message: message.into(),
            hint: hint.map(str::to_string),
        });
    }

    /// The problems found, sorted by position.
    pub(super) fn finish(mut self) -> Vec<Problem> {
        self.problems.sort_by_key(|p| (p.line, p.column));
        self.problems
    }

    /// True when nothing was recorded yet.
    pub(super) fn is_empty(&self) -> bool {
        self.problems.is_empty()
    }
}

/// 1-based line and column of a byte offset.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_one_based_lines_and_columns() {
        let text = "a = 1\nbb = 2\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 6), (2, 1));
        assert_eq!(line_column(text, 8), (2, 3));
        assert_eq!(line_column(text, 999), (3, 1));
    }
}
