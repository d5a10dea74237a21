//! The unambiguity lint: refuses templates where two different argument maps
//! could render the same argv, which is what lets the matcher decide every
//! token split and every optional group from what is in front of it. Also
//! checks that the params table fits the template (defaults and `values`
//! pass their own rules; no rules for a name the template does not use).

use super::error::TemplateError;
use super::model::{group_shape, Item, Segment, Token};
use super::rules::{check_value, Params};
use super::split::{strategy, NoSplit};
use super::Template;

impl Template {
    /// Proves that this template, under `params`, renders different
    /// arguments to different argvs (up to defaults and empty group
    /// values), so that [`Template::match_argv`] is exact.
    ///
    /// 1. Inside a token, two placeholders need literal text between them,
    ///    and a placeholder followed by a literal `L` and more segments must
    ///    be unable to contain `L`: its `values` do not, or its `pattern`
    ///    cannot produce some character of `L`.
    /// 2. An optional group's first token begins with a non-empty literal,
    ///    and is disjoint from every token that can come in the group's
    ///    place when it is left out.
    /// 3. Defaults and `values` entries pass their own rules, and every
    ///    params entry names a placeholder of the template.
    pub fn check_unambiguous(&self, params: &Params) -> Result<(), TemplateError> {
        for token in self.items.iter().flat_map(Item::tokens) {
            check_token_split(token, params)?;
        }
        self.check_groups(params)?;
        self.check_param_entries(params)
    }

    fn check_groups(&self, params: &Params) -> Result<(), TemplateError> {
        let groups: Vec<(usize, &[Token])> = self
            .items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| match item {
                Item::Group(tokens) => Some((i, tokens.as_slice())),
                Item::Fixed(_) => None,
            })
            .collect();
        for (_, tokens) in &groups {
            let first = &tokens[0];
            if first.literal_prefix().is_empty() {
                return Err(TemplateError::GroupWithoutLeadingLiteral {
                    group: group_shape(tokens),
                    token: first.shape(),
                });
            }
        }
        for (index, tokens) in &groups {
            let first = &tokens[0];
            if let Some(other) = self
                .stand_ins(*index)
                .find(|other| !disjoint(first, other, params))
            {
                return Err(TemplateError::GroupNotDisjoint {
                    group_token: first.shape(),
                    other_token: other.shape(),
                });
            }
        }
        Ok(())
    }

    /// The tokens that can stand where the group at `index` would start if
    /// it is left out: the next fixed token, and the first token of each
    /// following group up to it (every group may be left out).
    fn stand_ins(&self, index: usize) -> impl Iterator<Item = &Token> {
        let rest = self.items.get(index + 1..).unwrap_or(&[]);
        let end = rest
            .iter()
            .position(|item| matches!(item, Item::Fixed(_)))
            .map_or(rest.len(), |i| i + 1);
        rest[..end].iter().filter_map(|item| item.tokens().first())
    }

    fn check_param_entries(&self, params: &Params) -> Result<(), TemplateError> {
        for (name, rule) in params.iter() {
            let slot = self
                .slot(name)
                .ok_or_else(|| TemplateError::ParamWithoutPlaceholder { name: name.into() })?;
            let at = slot.position();
            if let Some(default) = &rule.default {
                check_value(name, default, rule, at).map_err(|problem| {
                    TemplateError::BadDefault {
                        placeholder: name.into(),
                        problem,
                    }
                })?;
            }
            for (index, value) in rule.values.iter().flatten().enumerate() {
                check_value(name, value, rule, at).map_err(|problem| {
                    TemplateError::BadValuesEntry {
                        placeholder: name.into(),
                        index,
                        problem,
                    }
                })?;
            }
        }
        Ok(())
    }
}

/// Rule 1 for one token.
fn check_token_split(token: &Token, params: &Params) -> Result<(), TemplateError> {
    let segments = &token.segments;
    for (i, segment) in segments.iter().enumerate() {
        let Segment::Placeholder(name) = segment else {
            continue;
        };
        match (segments.get(i + 1), segments.get(i + 2)) {
            (Some(Segment::Placeholder(second)), _) => {
                return Err(TemplateError::AdjacentPlaceholders {
                    token: token.shape(),
                    first: name.clone(),
                    second: second.clone(),
                })
            }
            (Some(Segment::Literal(literal)), Some(_)) => {
                strategy(params.rule(name), literal).map_err(|why| {
                    let (token, placeholder, literal) =
                        (token.shape(), name.clone(), literal.clone());
                    match why {
                        NoSplit::Unrestricted => TemplateError::UnrestrictedPlaceholder {
                            token,
                            placeholder,
                            literal,
                        },
                        NoSplit::AmbiguousValues => TemplateError::AmbiguousValues {
                            token,
                            placeholder,
                            literal,
                        },
                    }
                })?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether no element can both be a valid rendering of `other` and match
/// `first`, the first token of a group, whose literal prefix is `G`.
///
/// - `other` starts with literal `T`: neither of `G`, `T` is a prefix of
///   the other, or both tokens are entirely literal and differ.
/// - `other` starts with placeholder `q`: `G` starts with `-` and `q` may
///   not start with `-` (and cannot be empty with more text behind it), or
///   `other` is just `{q}` and no value of `q` is a prefix of `G` or has
///   `G` as a prefix.
fn disjoint(first: &Token, other: &Token, params: &Params) -> bool {
    let g = first.literal_prefix();
    if let Some(q) = other.leading_placeholder() {
        let rule = params.rule(q);
        let alone = other.segments.len() == 1;
        let dash_free = g.starts_with('-') && !rule.allow_dash && (alone || !rule.allow_empty);
        let by_values = alone
            && rule.values.as_ref().is_some_and(|values| {
                values
                    .iter()
                    .all(|v| !v.starts_with(g) && !g.starts_with(v.as_str()))
            });
        return dash_free || by_values;
    }
    let t = other.literal_prefix();
    let apart = !g.starts_with(t) && !t.starts_with(g);
    let distinct_literals = matches!(
        (first.as_literal(), other.as_literal()),
        (Some(a), Some(b)) if a != b
    );
    apart || distinct_literals
}

#[cfg(test)]
mod tests {
    use super::super::error::ValueProblem;
    use super::super::{ArgError, ParamRule, Pattern};
    use super::*;

    fn lint(src: &str, params: &Params) -> Result<(), TemplateError> {
        Template::parse_str(src).unwrap().check_unambiguous(params)
    }

    fn with(name: &str, rule: ParamRule) -> Params {
        [(name, rule)].into_iter().collect()
    }

    fn pattern(p: &str) -> ParamRule {
        ParamRule {
            pattern: Some(Pattern::new(p).unwrap()),
            ..ParamRule::default()
        }
    }

    fn values(vs: &[&str]) -> ParamRule {
        ParamRule {
            values: Some(vs.iter().map(|v| v.to_string()).collect()),
            ..ParamRule::default()
        }
    }

    #[test]
    fn placeholders_need_a_literal_between_them() {
        assert_eq!(
            lint("cmd {a}{b}", &Params::new()),
            Err(TemplateError::AdjacentPlaceholders {
                token: "{a}{b}".into(),
                first: "a".into(),
                second: "b".into()
            })
        );
    }

    #[test]
    fn a_placeholder_before_a_literal_and_more_must_be_restricted() {
        let refused = Err(TemplateError::UnrestrictedPlaceholder {
            token: "{user}@{host}".into(),
            placeholder: "user".into(),
            literal: "@".into(),
        });
        assert_eq!(lint("ssh {user}@{host}", &Params::new()), refused);
        assert_eq!(
            lint("ssh {user}@{host}", &with("user", pattern(".+"))),
            refused
        );
        assert_eq!(
            lint("ssh {user}@{host}", &with("user", pattern("[a-z]+"))),
            Ok(())
        );
        assert_eq!(
            lint("ssh {user}@{host}", &with("user", pattern("[^@]+"))),
            Ok(())
        );
        assert_eq!(
            lint("ssh {user}@{host}", &with("user", values(&["root", "git"]))),
            Ok(())
        );
        assert_eq!(
            lint("ssh {user}@{host}", &with("user", values(&["a@b"]))),
            refused
        );
        assert!(matches!(
            lint("x {k}aa{v}", &with("k", values(&["x", "xa"]))),
            Err(TemplateError::AmbiguousValues { .. })
        ));
        // A final literal is a suffix: no restriction needed (R12).
        assert_eq!(lint("cmd {f}.json --out={o}.txt", &Params::new()), Ok(()));
    }

    #[test]
    fn a_group_must_begin_with_literal_text() {
        assert_eq!(
            lint("cmd [{x} --y]", &Params::new()),
            Err(TemplateError::GroupWithoutLeadingLiteral {
                group: "[{x} --y]".into(),
                token: "{x}".into()
            })
        );
    }

    #[test]
    fn a_group_must_be_disjoint_from_what_can_replace_it() {
        let not = |g: &str, o: &str| {
            Err(TemplateError::GroupNotDisjoint {
                group_token: g.into(),
                other_token: o.into(),
            })
        };
        let p = Params::new();
        assert_eq!(lint("cmd [--x {x}] --x", &p), not("--x", "--x"));
        assert_eq!(lint("cmd [--x={x}] --x=1", &p), not("--x={x}", "--x=1"));
        assert_eq!(lint("cmd [--x {x}] --xy", &p), Ok(()));
        assert_eq!(
            lint("cmd [--a {a}] [--b {b}] [--a={c}]", &p),
            not("--a", "--a={c}")
        );
        assert_eq!(lint("cmd [--a {a}] [--b {b}] end [--a={c}]", &p), Ok(()));
        assert_eq!(lint("cmd [--a {a}] {path}", &p), Ok(()));
        let dashy = with(
            "path",
            ParamRule {
                allow_dash: true,
                ..ParamRule::default()
            },
        );
        assert_eq!(lint("cmd [--a {a}] {path}", &dashy), not("--a", "{path}"));
        assert_eq!(lint("cmd [x={a}] {path}", &p), not("x={a}", "{path}"));
        assert_eq!(
            lint("cmd [x={a}] {path}", &with("path", values(&["y", "z"]))),
            Ok(())
        );
        assert_eq!(
            lint("cmd [x={a}] {path}", &with("path", values(&["x=1"]))),
            not("x={a}", "{path}")
        );
        assert_eq!(
            lint("cmd [x={a}] {path}", &with("path", values(&["x"]))),
            not("x={a}", "{path}")
        );
    }

    #[test]
    fn an_empty_leading_value_cannot_hide_a_dash_behind_it() {
        let empty = with(
            "q",
            ParamRule {
                allow_empty: true,
                ..ParamRule::default()
            },
        );
        assert_eq!(lint("cmd [--a {a}] {q}", &empty), Ok(()));
        assert!(matches!(
            lint("cmd [--a {a}] {q}--a", &empty),
            Err(TemplateError::GroupNotDisjoint { .. })
        ));
    }

    #[test]
    fn defaults_and_values_must_pass_their_own_rules() {
        let bad_default = ParamRule {
            default: Some("-x".into()),
            ..ParamRule::default()
        };
        assert_eq!(
            lint("cmd {a}", &with("a", bad_default)),
            Err(TemplateError::BadDefault {
                placeholder: "a".into(),
                problem: ArgError::OptionInjection {
                    placeholder: "a".into()
                }
            })
        );
        let bad_value = ParamRule {
            pattern: Some(Pattern::new("[a-z]+").unwrap()),
            values: Some(vec!["ok".into(), "NO".into()]),
            ..ParamRule::default()
        };
        assert_eq!(
            lint("cmd x={a}", &with("a", bad_value)),
            Err(TemplateError::BadValuesEntry {
                placeholder: "a".into(),
                index: 1,
                problem: ArgError::Invalid {
                    placeholder: "a".into(),
                    problem: ValueProblem::PatternMismatch
                }
            })
        );
        let empty_in_group = ParamRule {
            allow_empty: true,
            default: Some(String::new()),
            ..ParamRule::default()
        };
        assert!(matches!(
            lint("cmd [-a {a}]", &with("a", empty_in_group.clone())),
            Err(TemplateError::BadDefault { .. })
        ));
        assert_eq!(lint("cmd x{a}", &with("a", empty_in_group)), Ok(()));
    }

    #[test]
    fn params_for_unknown_placeholders_are_refused() {
        assert_eq!(
            lint("cmd {a}", &with("b", ParamRule::default())),
            Err(TemplateError::ParamWithoutPlaceholder { name: "b".into() })
        );
    }
}
