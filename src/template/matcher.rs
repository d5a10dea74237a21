//! Matching a raw argv back to arguments (a raw `spawn` envelope). One
//! left-to-right pass, linear in the argv's bytes: an optional group is
//! taken iff the current element matches its first token (the lint proves
//! that whatever could stand in the group's place cannot), and a token is
//! split by the strategies in `split`. The extracted values then go through
//! the same value rules as substitution, and finally the arguments are
//! substituted again and must give back exactly the argv: the matcher
//! proposes, substitution decides, so a raw argv can never do what
//! `spawn_op` could not.

use std::collections::BTreeMap;

use super::error::MatchError;
use super::model::{Item, Segment, Token};
use super::rules::{check_value, Params};
use super::split::{strategy, value_len};
use super::Template;

impl Template {
    /// The arguments that make [`Template::substitute`] produce `argv`.
    ///
    /// `argv[0]` must be the template's first token or `program_path`.
    /// [`MatchError::Shape`] when the argv does not have the template's
    /// shape; [`MatchError::Arg`] when it does but a value breaks its rules
    /// (e.g. option injection, or an empty value in a rendered group).
    /// Every rendered placeholder is returned, including values equal to a
    /// default. Meant for templates that passed
    /// [`Template::check_unambiguous`] with the same `params`.
    pub fn match_argv(
        &self,
        argv: &[String],
        program_path: &str,
        params: &Params,
    ) -> Result<BTreeMap<String, String>, MatchError> {
        let (program, rest) = argv.split_first().ok_or(MatchError::Shape)?;
        if program != self.program_token() && program != program_path {
            return Err(MatchError::Shape);
        }
        let found = self.extract(rest, params)?;
        for slot in &self.slots {
            if let Some(value) = found.get(&slot.name) {
                check_value(&slot.name, value, params.rule(&slot.name), slot.position())?;
            }
        }
        let rendered = self.substitute(&found, params)?;
        if rendered.get(1..) != Some(rest) {
            return Err(MatchError::Shape);
        }
        Ok(found)
    }

    /// Walks the items once, deciding each group from one element.
    fn extract(
        &self,
        rest: &[String],
        params: &Params,
    ) -> Result<BTreeMap<String, String>, MatchError> {
        let mut found = BTreeMap::new();
        let mut pos = 0;
        for item in self.items.iter().skip(1) {
            let mut tokens = item.tokens();
            if let (Item::Group(_), Some((first, others))) = (item, tokens.split_first()) {
                let opened = rest.get(pos).and_then(|e| split_token(first, e, params));
                let Some(parts) = opened else { continue };
                record(&mut found, parts)?;
                pos += 1;
                tokens = others;
            }
            for token in tokens {
                let element = rest.get(pos).ok_or(MatchError::Shape)?;
                let parts = split_token(token, element, params).ok_or(MatchError::Shape)?;
                record(&mut found, parts)?;
                pos += 1;
            }
        }
        if pos == rest.len() {
            Ok(found)
        } else {
            Err(MatchError::Shape)
        }
    }
}

/// Adds extracted values; a repeated placeholder must repeat its value.
fn record(
    found: &mut BTreeMap<String, String>,
    parts: Vec<(&str, &str)>,
) -> Result<(), MatchError> {
    for (name, value) in parts {
        match found.get(name) {
            Some(seen) if seen != value => return Err(MatchError::Shape),
            Some(_) => {}
            None => {
                found.insert(name.to_owned(), value.to_owned());
            }
        }
    }
    Ok(())
}

/// Splits `element` along `token`'s segments: `(placeholder, value)` pairs,
/// or `None` if the literals do not fit.
///
/// A value that ends the token takes the rest; one followed only by a final
/// literal ends where that suffix starts (so `{f}.json` matches
/// `a.json.json` with `f = a.json`); one followed by a literal and more
/// segments ends where its split strategy says. For a template the lint
/// refused, the fallback is the first occurrence of the literal, and two
/// touching placeholders never match.
fn split_token<'t, 'e>(
    token: &'t Token,
    element: &'e str,
    params: &Params,
) -> Option<Vec<(&'t str, &'e str)>> {
    let segments = &token.segments;
    let mut rest = element;
    let mut out = Vec::new();
    for (i, segment) in segments.iter().enumerate() {
        match segment {
            Segment::Literal(text) => rest = rest.strip_prefix(text.as_str())?,
            Segment::Placeholder(name) => {
                let len = match segments.get(i + 1) {
                    None => rest.len(),
                    Some(Segment::Literal(next)) if i + 2 == segments.len() => {
                        rest.strip_suffix(next.as_str())?.len()
                    }
                    Some(Segment::Literal(next)) => match strategy(params.rule(name), next) {
                        Ok(split) => value_len(split, rest, next)?,
                        Err(_) => rest.find(next.as_str())?,
                    },
                    Some(Segment::Placeholder(_)) => return None,
                };
                let (value, after) = rest.split_at_checked(len)?;
                out.push((name.as_str(), value));
                rest = after;
            }
        }
    }
    rest.is_empty().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::super::error::ValueProblem;
    use super::super::{ArgError, ParamRule, Pattern};
    use super::*;

    fn argv(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn matched(
        src: &str,
        items: &[&str],
        params: &Params,
    ) -> Result<Vec<(String, String)>, MatchError> {
        let t = Template::parse_str(src).unwrap();
        t.match_argv(&argv(items), "/usr/bin/cmd", params)
            .map(|m| m.into_iter().collect())
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn argv0_may_be_the_first_token_or_the_program_path() {
        let p = Params::new();
        assert_eq!(matched("cmd x", &["cmd", "x"], &p), Ok(vec![]));
        assert_eq!(matched("cmd x", &["/usr/bin/cmd", "x"], &p), Ok(vec![]));
        assert_eq!(
            matched("cmd x", &["/bin/cmd", "x"], &p),
            Err(MatchError::Shape)
        );
        assert_eq!(matched("cmd x", &[], &p), Err(MatchError::Shape));
    }

    #[test]
    fn a_group_is_taken_when_its_first_token_matches() {
        let p = Params::new();
        let src = "cmd [--n {n}] [--since={s}] {path}";
        assert_eq!(
            matched(src, &["cmd", "--since=x", "p"], &p),
            Ok(pairs(&[("path", "p"), ("s", "x")]))
        );
        assert_eq!(
            matched(src, &["cmd", "--n", "3", "p"], &p),
            Ok(pairs(&[("n", "3"), ("path", "p")]))
        );
        assert_eq!(matched(src, &["cmd", "--n"], &p), Err(MatchError::Shape));
        assert_eq!(matched(src, &["cmd", "p", "q"], &p), Err(MatchError::Shape));
    }

    #[test]
    fn value_errors_are_told_apart_from_shape_errors() {
        let p = Params::new();
        let src = "cmd [--n {n}] {path}";
        assert_eq!(
            matched(src, &["cmd", "-rf"], &p),
            Err(MatchError::Arg(ArgError::OptionInjection {
                placeholder: "path".into()
            }))
        );
        assert_eq!(
            matched(src, &["cmd", "--n", "", "p"], &p),
            Err(MatchError::Arg(ArgError::Invalid {
                placeholder: "n".into(),
                problem: ValueProblem::Empty
            }))
        );
        assert_eq!(
            matched("cmd [--n={n}]", &["cmd", "--n="], &p),
            Err(MatchError::Arg(ArgError::Invalid {
                placeholder: "n".into(),
                problem: ValueProblem::Empty
            }))
        );
    }

    #[test]
    fn a_repeated_placeholder_must_repeat_its_value() {
        let p = Params::new();
        assert_eq!(
            matched("cp {f} {f}.bak", &["cp", "a", "a.bak"], &p),
            Ok(pairs(&[("f", "a")]))
        );
        assert_eq!(
            matched("cp {f} {f}.bak", &["cp", "a", "b.bak"], &p),
            Err(MatchError::Shape)
        );
    }

    #[test]
    fn tokens_with_several_placeholders_split_by_their_rules() {
        let p: Params = [
            (
                "user",
                ParamRule {
                    pattern: Some(Pattern::new("[a-z]+").unwrap()),
                    ..ParamRule::default()
                },
            ),
            (
                "kind",
                ParamRule {
                    values: Some(vec!["a".into(), "ab".into()]),
                    ..ParamRule::default()
                },
            ),
        ]
        .into_iter()
        .collect();
        // {host} is unrestricted, so the lint refuses this template; the
        // matcher still answers deterministically (first `:`) and verifies.
        assert_eq!(
            matched("cmd {user}@{host}:{path}", &["cmd", "me@h:1:/x"], &p),
            Ok(pairs(&[("host", "h"), ("path", "1:/x"), ("user", "me")]))
        );
        assert_eq!(
            matched("cmd {user}@{host}", &["cmd", "me@h@x"], &p),
            Ok(pairs(&[("host", "h@x"), ("user", "me")]))
        );
        assert_eq!(
            matched("cmd {kind}-{rest}", &["cmd", "ab-c-d"], &p),
            Ok(pairs(&[("kind", "ab"), ("rest", "c-d")]))
        );
    }

    #[test]
    fn a_default_only_group_cannot_be_left_out_of_a_raw_argv() {
        let p: Params = [(
            "n",
            ParamRule {
                default: Some("5".into()),
                ..ParamRule::default()
            },
        )]
        .into_iter()
        .collect();
        assert_eq!(
            matched("cmd [--n {n}]", &["cmd"], &p),
            Err(MatchError::Shape)
        );
        assert_eq!(
            matched("cmd [--n {n}]", &["cmd", "--n", "5"], &p),
            Ok(pairs(&[("n", "5")]))
        );
        // Found by fuzzing: an empty argument in a group is absent, so the
        // default renders, and the raw argv matches back.
        let t = Template::parse_str("cmd [-x{n}]").unwrap();
        let empty = BTreeMap::from([("n".to_string(), String::new())]);
        let argv = t.substitute(&empty, &p).unwrap();
        assert_eq!(argv, ["cmd", "-x5"]);
        assert_eq!(
            t.match_argv(&argv, "cmd", &p),
            Ok(BTreeMap::from([("n".to_string(), "5".to_string())]))
        );
    }
}
