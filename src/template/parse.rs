//! Parsing templates: the string form (split on ASCII whitespace, `[`/`]`
//! at token edges mark optional groups) into the array form, and the array
//! form into a [`Template`]. Also owns the structural rules that need no
//! param rules: the program comes first as plain text, braces are well
//! formed, groups are non-empty and hold a placeholder, and a placeholder is
//! not shared between a group and anything else.

use std::collections::BTreeMap;

use super::error::TemplateError;
use super::model::{group_shape, Item, Segment, Slot, Token, TokenSource};
use super::Template;

/// Splits the string form into tokens and groups.
pub(super) fn split_string(src: &str) -> Result<Vec<TokenSource>, TemplateError> {
    let mut out = Vec::new();
    // The open group's tokens and the raw token that opened it.
    let mut open: Option<(Vec<String>, &str)> = None;
    for raw in src.split_ascii_whitespace() {
        let mut body = raw;
        if let Some(rest) = body.strip_prefix('[') {
            if open.is_some() || rest.starts_with('[') {
                return Err(TemplateError::NestedGroup { token: raw.into() });
            }
            open = Some((Vec::new(), raw));
            body = rest;
        }
        let closes = body.ends_with(']');
        if closes {
            body = &body[..body.len() - 1];
            if open.is_none() || body.ends_with(']') {
                return Err(TemplateError::UnopenedGroup { token: raw.into() });
            }
        }
        match (&mut open, body.is_empty()) {
            (Some((tokens, _)), false) => tokens.push(body.to_owned()),
            (None, _) => out.push(TokenSource::Token(body.to_owned())),
            (Some(_), true) => {}
        }
        if closes {
            if let Some((tokens, _)) = open.take() {
                out.push(TokenSource::Group(tokens));
            }
        }
    }
    match open {
        Some((_, opener)) => Err(TemplateError::UnclosedGroup {
            token: opener.into(),
        }),
        None => Ok(out),
    }
}

/// Builds a template from the array form.
pub(super) fn build(sources: &[TokenSource]) -> Result<Template, TemplateError> {
    let (first, rest) = sources.split_first().ok_or(TemplateError::Empty)?;
    let program = match first {
        TokenSource::Token(text) => parse_token(text)?,
        TokenSource::Group(tokens) => {
            return Err(TemplateError::ProgramNotLiteral {
                token: format!("[{}]", tokens.join(" ")),
            })
        }
    };
    if program.as_literal().is_none_or(str::is_empty) {
        return Err(TemplateError::ProgramNotLiteral {
            token: source_text(first),
        });
    }
    let mut items = vec![Item::Fixed(program)];
    for source in rest {
        items.push(parse_item(source)?);
    }
    let slots = collect_slots(&items)?;
    Ok(Template::from_parts(items, slots))
}

fn source_text(source: &TokenSource) -> String {
    match source {
        TokenSource::Token(text) => text.clone(),
        TokenSource::Group(tokens) => format!("[{}]", tokens.join(" ")),
    }
}

fn parse_item(source: &TokenSource) -> Result<Item, TemplateError> {
    match source {
        TokenSource::Token(text) => Ok(Item::Fixed(parse_token(text)?)),
        TokenSource::Group(texts) => {
            if texts.is_empty() {
                return Err(TemplateError::EmptyGroup {
                    group: source_text(source),
                });
            }
            let tokens = texts
                .iter()
                .map(|t| parse_token(t))
                .collect::<Result<Vec<_>, _>>()?;
            if tokens.iter().all(|t| t.placeholders().next().is_none()) {
                return Err(TemplateError::LiteralOnlyGroup {
                    group: group_shape(&tokens),
                });
            }
            Ok(Item::Group(tokens))
        }
    }
}

/// Splits one token into literal and placeholder segments.
pub(super) fn parse_token(text: &str) -> Result<Token, TemplateError> {
    let mut segments = Vec::new();
    let mut literal = String::new();
    let mut pos = 0;
    while let Some(c) = text[pos..].chars().next() {
        let after = &text[pos + c.len_utf8()..];
        match c {
            '{' | '}' if after.starts_with(c) => {
                literal.push(c);
                pos += 2;
            }
            '{' => {
                let name = placeholder_name(text, after)?;
                if !literal.is_empty() {
                    segments.push(Segment::Literal(std::mem::take(&mut literal)));
                }
                segments.push(Segment::Placeholder(name.to_owned()));
                pos += name.len() + 2;
            }
            '}' => return Err(TemplateError::UnmatchedBrace { token: text.into() }),
            _ => {
                literal.push(c);
                pos += c.len_utf8();
            }
        }
    }
    if !literal.is_empty() {
        segments.push(Segment::Literal(literal));
    }
    Ok(Token { segments })
}

/// The name of the placeholder whose `{` precedes `after`.
fn placeholder_name<'a>(token: &str, after: &'a str) -> Result<&'a str, TemplateError> {
    let close = after.find(['{', '}']);
    match close {
        Some(end) if after[end..].starts_with('}') => {
            let name = &after[..end];
            if is_placeholder_name(name) {
                Ok(name)
            } else {
                Err(TemplateError::BadPlaceholderName {
                    token: token.into(),
                    name: name.into(),
                })
            }
        }
        _ => Err(TemplateError::UnmatchedBrace {
            token: token.into(),
        }),
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`.
fn is_placeholder_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// One slot per placeholder name, in first-appearance order.
fn collect_slots(items: &[Item]) -> Result<Vec<Slot>, TemplateError> {
    let mut slots: Vec<Slot> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for (item_index, item) in items.iter().enumerate() {
        let group = matches!(item, Item::Group(_)).then_some(item_index);
        for token in item.tokens() {
            let leading = token.leading_placeholder();
            for (n, name) in token.placeholders().enumerate() {
                let begins = n == 0 && leading.is_some();
                match index.get(name) {
                    Some(&at) => merge_slot(&mut slots[at], group, begins)?,
                    None => {
                        index.insert(name.to_owned(), slots.len());
                        slots.push(Slot {
                            name: name.to_owned(),
                            group,
                            begins_token: begins,
                        });
                    }
                }
            }
        }
    }
    Ok(slots)
}

fn merge_slot(slot: &mut Slot, group: Option<usize>, begins: bool) -> Result<(), TemplateError> {
    match (slot.group, group) {
        (Some(a), Some(b)) if a != b => Err(TemplateError::PlaceholderInTwoGroups {
            placeholder: slot.name.clone(),
        }),
        (Some(_), None) | (None, Some(_)) => Err(TemplateError::PlaceholderInGroupAndOutside {
            placeholder: slot.name.clone(),
        }),
        _ => {
            slot.begins_token |= begins;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> Segment {
        Segment::Literal(s.into())
    }

    fn ph(s: &str) -> Segment {
        Segment::Placeholder(s.into())
    }

    fn tok(s: &str) -> TokenSource {
        TokenSource::Token(s.into())
    }

    fn group(ts: &[&str]) -> TokenSource {
        TokenSource::Group(ts.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn tokens_split_into_literals_and_placeholders() {
        let cases: &[(&str, Vec<Segment>)] = &[
            ("--since={since}", vec![lit("--since="), ph("since")]),
            ("{f}.json", vec![ph("f"), lit(".json")]),
            ("{a}:{b}", vec![ph("a"), lit(":"), ph("b")]),
            ("{{x}}", vec![lit("{x}")]),
            ("{{{x}}}", vec![lit("{"), ph("x"), lit("}")]),
            ("a[0]b", vec![lit("a[0]b")]),
            ("_{_A9}", vec![lit("_"), ph("_A9")]),
            ("", vec![]),
        ];
        for (text, want) in cases {
            assert_eq!(&parse_token(text).unwrap().segments, want, "{text}");
        }
    }

    #[test]
    fn malformed_braces_are_refused_with_the_token_quoted() {
        let unmatched = ["--since={oops", "a}b", "x{y{z}", "{{x}", "}"];
        for text in unmatched {
            assert_eq!(
                parse_token(text),
                Err(TemplateError::UnmatchedBrace { token: text.into() }),
                "{text}"
            );
        }
        for (text, name) in [("--{}-x", ""), ("{bad-name}", "bad-name"), ("{1x}", "1x")] {
            assert_eq!(
                parse_token(text),
                Err(TemplateError::BadPlaceholderName {
                    token: text.into(),
                    name: name.into()
                })
            );
        }
    }

    #[test]
    fn the_string_form_splits_groups_at_token_edges() {
        let cases: &[(&str, Vec<TokenSource>)] = &[
            ("cmd [--x {x}]", vec![tok("cmd"), group(&["--x", "{x}"])]),
            ("cmd [--v={v}]", vec![tok("cmd"), group(&["--v={v}"])]),
            (
                "cmd [ --x {x} ] y",
                vec![tok("cmd"), group(&["--x", "{x}"]), tok("y")],
            ),
            ("cmd\ta[0]b  c", vec![tok("cmd"), tok("a[0]b"), tok("c")]),
            ("cmd []", vec![tok("cmd"), group(&[])]),
            ("cmd [ ]", vec![tok("cmd"), group(&[])]),
        ];
        for (src, want) in cases {
            assert_eq!(&split_string(src).unwrap(), want, "{src}");
        }
    }

    #[test]
    fn unbalanced_or_nested_brackets_are_refused() {
        let cases = [
            (
                "cmd [--x {x}",
                TemplateError::UnclosedGroup {
                    token: "[--x".into(),
                },
            ),
            (
                "cmd {x}]",
                TemplateError::UnopenedGroup {
                    token: "{x}]".into(),
                },
            ),
            (
                "cmd [{x}]]",
                TemplateError::UnopenedGroup {
                    token: "[{x}]]".into(),
                },
            ),
            (
                "cmd [a [b {x}]",
                TemplateError::NestedGroup { token: "[b".into() },
            ),
            (
                "cmd [[{x}]",
                TemplateError::NestedGroup {
                    token: "[[{x}]".into(),
                },
            ),
        ];
        for (src, want) in cases {
            assert_eq!(split_string(src), Err(want), "{src}");
        }
    }

    #[test]
    fn the_program_must_come_first_as_plain_text() {
        for sources in [
            vec![tok("{prog}"), tok("x")],
            vec![tok(""), tok("x")],
            vec![tok("git{x}")],
            vec![group(&["--x", "{x}"])],
        ] {
            assert!(matches!(
                build(&sources),
                Err(TemplateError::ProgramNotLiteral { .. })
            ));
        }
        assert_eq!(build(&[]), Err(TemplateError::Empty));
    }

    #[test]
    fn a_placeholder_is_not_shared_across_groups() {
        let outside = [tok("cmd"), tok("{f}"), group(&["--x", "{f}"])];
        assert_eq!(
            build(&outside),
            Err(TemplateError::PlaceholderInGroupAndOutside {
                placeholder: "f".into()
            })
        );
        let two = [tok("cmd"), group(&["-a", "{f}"]), group(&["-b", "{f}"])];
        assert_eq!(
            build(&two),
            Err(TemplateError::PlaceholderInTwoGroups {
                placeholder: "f".into()
            })
        );
        let same_group = [tok("cmd"), group(&["-a={f}", "{f}.bak"])];
        assert!(build(&same_group).is_ok());
        let fixed_twice = [tok("cp"), tok("{f}"), tok("{f}.bak")];
        assert!(build(&fixed_twice).is_ok());
    }

    #[test]
    fn slots_record_group_membership_and_token_starts() {
        let t = build(&[tok("cmd"), tok("x{a}"), tok("{a}"), group(&["-g={b}"])]).unwrap();
        let a = t.slot("a").unwrap();
        assert!(a.begins_token && a.group.is_none());
        let b = t.slot("b").unwrap();
        assert!(!b.begins_token && b.group == Some(3));
    }
}
