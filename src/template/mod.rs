//! Operation templates: the `argv` of a manifest operation, with `{name}`
//! placeholders and `[ … ]` optional groups (docs/manifest.md). This module parses a
//! template, proves it unambiguous for a set of [`Params`], substitutes
//! arguments into an argv (for `spawn_op`) and matches a raw argv back to
//! arguments (for a raw `spawn`), applying the same value rules both ways.
//! It is pure: no I/O, no clock, no global state.
//!
//! The flow a caller follows:
//!
//! 1. [`Template::parse_str`] or [`Template::parse_tokens`] at manifest load;
//! 2. [`Template::check_unambiguous`] with the operation's params, refusing
//!    the manifest on error;
//! 3. [`Template::substitute`] for `spawn_op`, or [`Template::match_argv`]
//!    for a raw `spawn` (only meaningful for a template that passed step 2
//!    with the same params; on any other template it may miss a match, but
//!    it never accepts an argv that `substitute` would not produce).
//!
//! Errors never contain argument values, which may be secrets.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod charset;
mod error;
mod lint;
mod matcher;
mod model;
mod parse;
mod render;
mod rules;
mod split;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod vector_tests;

use std::collections::BTreeMap;

pub(crate) use error::{ArgError, MatchError, TemplateError};
pub(crate) use model::TokenSource;
pub(crate) use rules::{ParamRule, Params, Pattern, DEFAULT_MAX_LEN};

use model::{group_shape, Item, Segment, Slot};

/// A parsed operation template. See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// `items[0]` is the program: a fixed, non-empty literal token.
    items: Vec<Item>,
    /// One entry per placeholder name, in first-appearance order.
    slots: Vec<Slot>,
    /// Placeholder name to index in `slots`.
    slot_index: BTreeMap<String, usize>,
}

impl Template {
    /// Parses the string form: tokens split on ASCII whitespace with no
    /// quoting; a token starting with `[` opens an optional group and one
    /// ending with `]` closes it.
    pub fn parse_str(src: &str) -> Result<Template, TemplateError> {
        parse::build(&parse::split_string(src)?)
    }

    /// Parses the array form: each [`TokenSource::Token`] is one argv
    /// element (spaces and brackets are literal), each
    /// [`TokenSource::Group`] an optional group.
    pub fn parse_tokens(tokens: &[TokenSource]) -> Result<Template, TemplateError> {
        parse::build(tokens)
    }

    /// The first token: the program's name or path as written.
    pub fn program_token(&self) -> &str {
        match self.items.first() {
            Some(Item::Fixed(token)) => token.as_literal().unwrap_or(""),
            _ => "",
        }
    }

    /// The placeholder names, each once, in order of first appearance.
    pub fn placeholders(&self) -> Vec<&str> {
        self.slots.iter().map(|s| s.name.as_str()).collect()
    }

    /// Whether placeholder `name` sits in an optional group (so the caller
    /// may leave it out even without a default); `false` for an unknown name.
    pub fn is_in_group(&self, name: &str) -> bool {
        self.slot(name).is_some_and(|s| s.group.is_some())
    }

    /// The template in canonical string syntax, safe to log: placeholders
    /// as `{name}`, groups as `[--x {x}]`, literal braces doubled, tokens
    /// joined by one space. E.g. `git log --since={since}`.
    pub fn shape(&self) -> String {
        let parts: Vec<String> = self
            .items
            .iter()
            .map(|item| match item {
                Item::Fixed(token) => token.shape(),
                Item::Group(tokens) => group_shape(tokens),
            })
            .collect();
        parts.join(" ")
    }

    /// The placeholders whose argv element follows a literal element in
    /// `flags` (`{script}` in `bash -c {script}`), or that begin the
    /// element glued to one of them (`-c{script}`), in order.
    pub fn placeholders_after(&self, flags: &[&str]) -> Vec<&str> {
        let tokens: Vec<_> = self.items.iter().flat_map(|item| item.tokens()).collect();
        let mut out = Vec::new();
        for (i, token) in tokens.iter().enumerate() {
            let after_flag = i > 0
                && tokens[i - 1]
                    .as_literal()
                    .is_some_and(|t| flags.contains(&t));
            let glued = flags
                .iter()
                .any(|f| token.literal_prefix() == *f && token.placeholders().next().is_some());
            let name = if after_flag {
                token.leading_placeholder()
            } else if glued {
                token.placeholders().next()
            } else {
                None
            };
            if let Some(name) = name.filter(|n| !out.contains(n)) {
                out.push(name);
            }
        }
        out
    }

    /// For each use of placeholder `name`, the literal text before it in its
    /// argv element (`--file=` for `--file={f}`, empty when it begins the element).
    pub fn literals_before(&self, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        for token in self.items.iter().flat_map(|item| item.tokens()) {
            let mut before = String::new();
            for segment in &token.segments {
                match segment {
                    Segment::Placeholder(p) if p == name => out.push(before.clone()),
                    Segment::Placeholder(p) => before.push_str(&format!("{{{p}}}")),
                    Segment::Literal(text) => before.push_str(text),
                }
            }
        }
        out
    }

    fn from_parts(items: Vec<Item>, slots: Vec<Slot>) -> Template {
        let slot_index = slots
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i))
            .collect();
        Template {
            items,
            slots,
            slot_index,
        }
    }

    fn slot(&self, name: &str) -> Option<&Slot> {
        self.slot_index.get(name).map(|&i| &self.slots[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accessors_report_program_placeholders_and_shape() {
        let t = Template::parse_str("git  log\t{ref} [--since={since} {{lit}}] {ref}.bak").unwrap();
        assert_eq!(t.program_token(), "git");
        assert_eq!(t.placeholders(), vec!["ref", "since"]);
        assert!(!t.is_in_group("ref") && t.is_in_group("since") && !t.is_in_group("nope"));
        assert_eq!(
            t.shape(),
            "git log {ref} [--since={since} {{lit}}] {ref}.bak"
        );
    }

    #[test]
    fn the_shape_parses_back_to_the_same_template() {
        for src in [
            "git log --since={since}",
            "cmd [--x {x}] [-v={v}] {{a}}b{c}",
            "/usr/bin/tool a[0]b {f}.json",
        ] {
            let t = Template::parse_str(src).unwrap();
            assert_eq!(Template::parse_str(&t.shape()).unwrap(), t, "{src}");
        }
    }

    #[test]
    fn the_array_form_keeps_spaces_and_brackets_literal() {
        let t = Template::parse_tokens(&[
            TokenSource::Token("my tool".into()),
            TokenSource::Token("[a b]".into()),
            TokenSource::Group(vec!["--name".into(), "{n}".into()]),
        ])
        .unwrap();
        assert_eq!(t.program_token(), "my tool");
        let argv = t.substitute(&BTreeMap::new(), &Params::new()).unwrap();
        assert_eq!(argv, vec!["my tool", "[a b]"]);
    }

    #[test]
    fn token_sources_deserialize_from_strings_and_arrays() {
        use serde::de::value::{Error as DeError, SeqDeserializer, StringDeserializer};
        use serde::Deserialize;
        let token: TokenSource =
            TokenSource::deserialize(StringDeserializer::<DeError>::new("a b".into())).unwrap();
        assert_eq!(token, TokenSource::Token("a b".into()));
        let seq = SeqDeserializer::<_, DeError>::new(
            vec!["--x".to_string(), "{x}".to_string()].into_iter(),
        );
        let group = TokenSource::deserialize(seq).unwrap();
        assert_eq!(group, TokenSource::Group(vec!["--x".into(), "{x}".into()]));
    }
}
