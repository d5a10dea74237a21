//! The parsed form of a template: tokens made of literal and placeholder
//! segments, fixed tokens and optional groups, and the per-placeholder facts
//! (where it sits) that value checks need. Pure data plus small queries;
//! parsing, rendering and matching live in their own files.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::rules::Position;

/// One element of the array form of an `argv` template.
///
/// Deserializes from a string (one token, which may contain spaces; brackets
/// are literal) or an array of strings (an optional group).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TokenSource {
    /// One argv element.
    Token(String),
    /// An optional group of argv elements.
    Group(Vec<String>),
}

/// A piece of a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Segment {
    /// Text copied as is (braces already unescaped).
    Literal(String),
    /// A `{name}` placeholder.
    Placeholder(String),
}

/// One argv element of the template. Adjacent literals are merged, so
/// literal and placeholder segments alternate unless two placeholders touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Token {
    pub(super) segments: Vec<Segment>,
}

impl Token {
    /// The literal text the token starts with ("" if it starts with a
    /// placeholder or is empty).
    pub(super) fn literal_prefix(&self) -> &str {
        match self.segments.first() {
            Some(Segment::Literal(text)) => text,
            _ => "",
        }
    }

    /// The whole text, if the token has no placeholder.
    pub(super) fn as_literal(&self) -> Option<&str> {
        match self.segments.as_slice() {
            [] => Some(""),
            [Segment::Literal(text)] => Some(text),
            _ => None,
        }
    }

    /// The placeholder the token starts with, if any.
    pub(super) fn leading_placeholder(&self) -> Option<&str> {
        match self.segments.first() {
            Some(Segment::Placeholder(name)) => Some(name),
            _ => None,
        }
    }

    /// The placeholder names in order, repeats included.
    pub(super) fn placeholders(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Placeholder(name) => Some(name.as_str()),
            Segment::Literal(_) => None,
        })
    }

    /// The token with every placeholder replaced by its value. The caller
    /// guarantees that every placeholder has one.
    pub(super) fn render(&self, values: &BTreeMap<&str, &str>) -> String {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Literal(text) => out.push_str(text),
                Segment::Placeholder(name) => {
                    out.push_str(values.get(name.as_str()).unwrap_or(&""))
                }
            }
        }
        out
    }

    /// The token in template syntax: `{name}` for placeholders, literal
    /// braces doubled.
    pub(super) fn shape(&self) -> String {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Literal(text) => {
                    out.push_str(&text.replace('{', "{{").replace('}', "}}"));
                }
                Segment::Placeholder(name) => {
                    out.push('{');
                    out.push_str(name);
                    out.push('}');
                }
            }
        }
        out
    }
}

/// A top-level element of the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Item {
    /// Always rendered.
    Fixed(Token),
    /// Rendered when its placeholders have values, left out when none has.
    Group(Vec<Token>),
}

impl Item {
    /// The tokens, fixed or grouped.
    pub(super) fn tokens(&self) -> &[Token] {
        match self {
            Item::Fixed(token) => std::slice::from_ref(token),
            Item::Group(tokens) => tokens,
        }
    }
}

/// `[a b]` in template syntax.
pub(super) fn group_shape(tokens: &[Token]) -> String {
    let inner: Vec<String> = tokens.iter().map(Token::shape).collect();
    format!("[{}]", inner.join(" "))
}

/// What the template says about one placeholder name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Slot {
    /// The placeholder name.
    pub(super) name: String,
    /// Index in `items` of the group holding it, if it is in a group.
    pub(super) group: Option<usize>,
    /// Whether some occurrence begins its token.
    pub(super) begins_token: bool,
}

impl Slot {
    /// The position used for value checks.
    pub(super) fn position(&self) -> Position {
        Position {
            begins_token: self.begins_token,
            in_group: self.group.is_some(),
        }
    }
}
