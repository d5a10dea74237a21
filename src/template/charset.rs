//! The set of characters a regular expression can ever put into a match,
//! computed once from its `regex_syntax` HIR. The lint uses it to prove that a
//! placeholder cannot contain a character of the literal that follows it,
//! which is what lets the matcher split a token at that character without
//! backtracking. The set over-approximates: it is never missing a character
//! some match could contain.

use regex_syntax::hir::{Class, Hir, HirKind};

/// Characters that can appear in some match.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct CharSet {
    /// Any character at all (e.g. a byte class reaching beyond ASCII).
    any: bool,
    /// Inclusive ranges, unsorted and possibly overlapping.
    ranges: Vec<(char, char)>,
}

impl CharSet {
    /// The characters any match of `hir` can contain.
    ///
    /// Classes are taken exactly as the parser resolved them, so `[^/]+`
    /// cannot produce `/` and `.` cannot produce `\n`. Look-arounds add
    /// nothing; repetitions, captures, concatenations and alternations add
    /// their parts (even a `{0}` repetition: over-approximating is safe).
    pub(super) fn of_hir(hir: &Hir) -> CharSet {
        let mut set = CharSet::default();
        let mut stack = vec![hir];
        while let Some(node) = stack.pop() {
            match node.kind() {
                HirKind::Literal(lit) => set.add_literal(&lit.0),
                HirKind::Class(Class::Unicode(class)) => {
                    set.ranges
                        .extend(class.ranges().iter().map(|r| (r.start(), r.end())));
                }
                HirKind::Class(Class::Bytes(class)) => {
                    for r in class.ranges() {
                        set.add_byte_range(r.start(), r.end());
                    }
                }
                _ => stack.extend(node.kind().subs()),
            }
        }
        set
    }

    /// Whether some match can contain `c`.
    pub(super) fn contains(&self, c: char) -> bool {
        self.any || self.ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi)
    }

    fn add_literal(&mut self, bytes: &[u8]) {
        match std::str::from_utf8(bytes) {
            Ok(text) => self.ranges.extend(text.chars().map(|c| (c, c))),
            Err(_) => self.any = true,
        }
    }

    fn add_byte_range(&mut self, lo: u8, hi: u8) {
        if hi.is_ascii() {
            self.ranges.push((char::from(lo), char::from(hi)));
        } else {
            self.any = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(src: &str) -> CharSet {
        CharSet::of_hir(&regex_syntax::Parser::new().parse(src).unwrap())
    }

    #[test]
    fn literals_and_classes_contribute_exactly_their_characters() {
        let s = set("^(?:ab|[0-9]+)$");
        for c in ['a', 'b', '0', '9'] {
            assert!(s.contains(c), "{c}");
        }
        for c in ['c', ':', '-', '/'] {
            assert!(!s.contains(c), "{c}");
        }
    }

    #[test]
    fn negated_and_dot_classes_exclude_only_what_they_exclude() {
        let s = set("[^/]+");
        assert!(s.contains('a') && s.contains(':'));
        assert!(!s.contains('/'));
        let dot = set(".*");
        assert!(dot.contains('/'));
        assert!(!dot.contains('\n'));
        assert!(set("(?s).*").contains('\n'));
    }

    #[test]
    fn case_insensitive_literals_include_both_cases() {
        let s = set("(?i)abc");
        assert!(s.contains('A') && s.contains('a'));
    }

    #[test]
    fn byte_classes_beyond_ascii_count_as_any() {
        let ascii = set("(?-u:[a-c])");
        assert!(ascii.contains('b') && !ascii.contains('d'));
        let mut wide = CharSet::default();
        wide.add_byte_range(0x20, 0xff);
        assert!(wide.contains('\u{1F600}'));
    }

    #[test]
    fn look_arounds_add_nothing() {
        let s = set(r"^\ba$");
        assert!(s.contains('a'));
        assert!(!s.contains('b'));
    }
}
