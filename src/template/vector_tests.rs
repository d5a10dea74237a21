//! The ADR reference vectors that concern templates (B1–B6, H8–H10, R6–R8,
//! R12–R17 of `adr-reference-vectors.md`), as tables, with spawnd's stricter
//! answers where it differs from the reference; plus the promise that no
//! error message ever contains an argument value.

use std::collections::BTreeMap;

use super::error::ValueProblem;
use super::*;

fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn argv(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A template, a raw argv, and what matching it gives.
type MatchCase<'a> = (
    &'a str,
    &'a [&'a str],
    Result<BTreeMap<String, String>, MatchError>,
);

/// A template, its arguments, and what substituting them gives.
type SubstituteCase<'a> = (
    &'a str,
    &'a [(&'a str, &'a str)],
    Result<Vec<String>, ArgError>,
);

fn template(src: &str) -> Template {
    Template::parse_str(src).unwrap()
}

fn rule_with(name: &str, rule: ParamRule) -> Params {
    [(name, rule)].into_iter().collect()
}

#[test]
fn b1_to_b4_raw_argv_matching() {
    let p = Params::new();
    let cases: &[MatchCase] = &[
        ("git status", &["git", "status"], Ok(args(&[]))),
        ("git status", &["git", "log"], Err(MatchError::Shape)),
        ("git status", &["git"], Err(MatchError::Shape)),
        (
            "git log --since={date} --author={who}",
            &["git", "log", "--since=2026-01-01", "--author=alr"],
            Ok(args(&[("date", "2026-01-01"), ("who", "alr")])),
        ),
    ];
    for (src, items, want) in cases {
        let t = template(src);
        assert_eq!(t.check_unambiguous(&p), Ok(()), "{src}");
        assert_eq!(
            &t.match_argv(&argv(items), "/usr/bin/git", &p),
            want,
            "{src} {items:?}"
        );
    }
}

/// The reference treats these as literal text; spawnd refuses them so a
/// typo cannot silently become a literal (docs/manifest.md, template rules).
#[test]
fn b5_b6_malformed_braces_are_errors_in_spawnd() {
    assert_eq!(
        Template::parse_str("git log --since={oops"),
        Err(TemplateError::UnmatchedBrace {
            token: "--since={oops".into()
        })
    );
    assert_eq!(
        Template::parse_str("git --{}-x"),
        Err(TemplateError::BadPlaceholderName {
            token: "--{}-x".into(),
            name: String::new()
        })
    );
    let msg = TemplateError::UnmatchedBrace {
        token: "--since={oops".into(),
    }
    .to_string();
    assert!(
        msg.contains("`--since={oops`") && msg.contains("`{{`"),
        "{msg}"
    );
}

#[test]
fn h8_to_h10_substitution() {
    let p = Params::new();
    let cases: &[SubstituteCase] = &[
        (
            "git log --since={since} --author={author}",
            &[("since", "2026-01-01"), ("author", "alr")],
            Ok(argv(&["git", "log", "--since=2026-01-01", "--author=alr"])),
        ),
        (
            "git log --since={since}",
            &[],
            Err(ArgError::Missing {
                placeholder: "since".into(),
            }),
        ),
        (
            "git status --short",
            &[],
            Ok(argv(&["git", "status", "--short"])),
        ),
    ];
    for (src, pairs, want) in cases {
        assert_eq!(&template(src).substitute(&args(pairs), &p), want, "{src}");
    }
    let h9 = ArgError::Missing {
        placeholder: "since".into(),
    };
    assert!(h9.to_string().contains("{since}"));
}

/// R6: a token-leading value starting with `-` is refused unless allowed,
/// both when substituting and when matching a raw argv.
#[test]
fn r6_option_injection() {
    let t = template("gh view {n}");
    let injection = ArgError::OptionInjection {
        placeholder: "n".into(),
    };
    let p = Params::new();
    assert_eq!(
        t.substitute(&args(&[("n", "--web")]), &p),
        Err(injection.clone())
    );
    assert_eq!(
        t.match_argv(&argv(&["gh", "view", "--web"]), "/usr/bin/gh", &p),
        Err(MatchError::Arg(injection))
    );
    let allow = rule_with(
        "n",
        ParamRule {
            allow_dash: true,
            ..ParamRule::default()
        },
    );
    assert_eq!(
        t.substitute(&args(&[("n", "--web")]), &allow),
        Ok(argv(&["gh", "view", "--web"]))
    );
    assert_eq!(
        t.match_argv(&argv(&["gh", "view", "--web"]), "/usr/bin/gh", &allow),
        Ok(args(&[("n", "--web")]))
    );
    // Not at the start of its token: no injection possible.
    let inner = template("git log --since={since}");
    assert!(inner.substitute(&args(&[("since", "-1")]), &p).is_ok());
}

/// R7: empty values are refused by default; `allow_empty` opts in.
#[test]
fn r7_empty_values() {
    let t = template("git log --since={since}");
    let empty = ArgError::Invalid {
        placeholder: "since".into(),
        problem: ValueProblem::Empty,
    };
    let p = Params::new();
    assert_eq!(
        t.substitute(&args(&[("since", "")]), &p),
        Err(empty.clone())
    );
    assert_eq!(
        t.match_argv(&argv(&["git", "log", "--since="]), "git", &p),
        Err(MatchError::Arg(empty))
    );
    let allow = rule_with(
        "since",
        ParamRule {
            allow_empty: true,
            ..ParamRule::default()
        },
    );
    assert_eq!(
        t.substitute(&args(&[("since", "")]), &allow),
        Ok(argv(&["git", "log", "--since="]))
    );
}

/// R8: a value is never re-split, whatever it contains.
#[test]
fn r8_values_stay_one_element() {
    let t = template("git log --since={since}");
    let p = Params::new();
    let got = t.substitute(&args(&[("since", "a b\nc")]), &p).unwrap();
    assert_eq!(got, argv(&["git", "log", "--since=a b\nc"]));
    assert_eq!(
        t.match_argv(&got, "git", &p),
        Ok(args(&[("since", "a b\nc")]))
    );
}

/// R12: no false negative when the value contains the literal suffix.
#[test]
fn r12_a_suffix_inside_the_value() {
    let t = template("cat {f}.json");
    let p = Params::new();
    assert_eq!(t.check_unambiguous(&p), Ok(()));
    let got = t.substitute(&args(&[("f", "a.json")]), &p).unwrap();
    assert_eq!(got, argv(&["cat", "a.json.json"]));
    assert_eq!(
        t.match_argv(&got, "/bin/cat", &p),
        Ok(args(&[("f", "a.json")]))
    );
}

/// R13–R15: optional groups are left out when empty, refused when partial.
#[test]
fn r13_to_r15_optional_groups() {
    let p = Params::new();
    let one = template("cmd [--x {x}]");
    assert_eq!(one.substitute(&args(&[]), &p), Ok(argv(&["cmd"])));
    assert_eq!(one.match_argv(&argv(&["cmd"]), "cmd", &p), Ok(args(&[])));
    let two = template("cmd [--x={x} --y={y}]");
    let partial = Err(ArgError::PartialGroup {
        missing: "y".into(),
    });
    assert_eq!(two.substitute(&args(&[("x", "1")]), &p), partial);
    assert_eq!(two.substitute(&args(&[("x", "1"), ("y", "")]), &p), partial);
    assert_eq!(
        two.substitute(&args(&[("x", ""), ("y", "")]), &p),
        Ok(argv(&["cmd"]))
    );
    assert_eq!(
        two.match_argv(&argv(&["cmd", "--x=1", "--y="]), "cmd", &p),
        Err(MatchError::Arg(ArgError::Invalid {
            placeholder: "y".into(),
            problem: ValueProblem::Empty
        }))
    );
}

/// R16: a group without a placeholder is refused.
#[test]
fn r16_literal_only_group() {
    let err = Template::parse_str("cmd [--verbose]").unwrap_err();
    assert_eq!(
        err,
        TemplateError::LiteralOnlyGroup {
            group: "[--verbose]".into()
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("drop the brackets or add a placeholder"),
        "{msg}"
    );
}

/// R17: an empty group is a parse error, in both forms.
#[test]
fn r17_empty_group() {
    for src in ["cmd []", "cmd [ ]", "cmd [ ] x"] {
        assert_eq!(
            Template::parse_str(src),
            Err(TemplateError::EmptyGroup { group: "[]".into() }),
            "{src}"
        );
    }
    let array = [TokenSource::Token("cmd".into()), TokenSource::Group(vec![])];
    assert!(matches!(
        Template::parse_tokens(&array),
        Err(TemplateError::EmptyGroup { .. })
    ));
}

#[test]
fn empty_templates_are_errors() {
    assert_eq!(Template::parse_str(""), Err(TemplateError::Empty));
    assert_eq!(Template::parse_str(" \t\n"), Err(TemplateError::Empty));
    assert_eq!(Template::parse_tokens(&[]), Err(TemplateError::Empty));
}

/// Values may be secrets: no error produced from a value ever shows it.
#[test]
fn no_error_message_contains_the_value() {
    const SECRET: &str = "-Sekr3t Value";
    let strict = ParamRule {
        pattern: Some(Pattern::new("[a-z]+").unwrap()),
        max_len: 40,
        ..ParamRule::default()
    };
    let listed = ParamRule {
        values: Some(vec!["a".into()]),
        ..ParamRule::default()
    };
    let short = ParamRule {
        max_len: 3,
        ..ParamRule::default()
    };
    let params: Params = [("p", strict), ("v", listed), ("s", short)]
        .into_iter()
        .collect();
    let t = template("cmd {lead} x={p} y={v} z={s} [--g {g} --h {h}]");
    let bad = format!("a{SECRET}");
    let attempts = [
        args(&[("lead", SECRET), ("p", "a"), ("v", "a"), ("s", "a")]),
        args(&[("lead", "a"), ("p", &bad), ("v", "a"), ("s", "a")]),
        args(&[("lead", "a"), ("p", "a"), ("v", SECRET), ("s", "a")]),
        args(&[("lead", "a"), ("p", "a"), ("v", "a"), ("s", SECRET)]),
        args(&[("lead", "a\0b"), ("p", "a"), ("v", "a"), ("s", "a")]),
        args(&[
            ("lead", "a"),
            ("p", "a"),
            ("v", "a"),
            ("s", "a"),
            ("g", SECRET),
        ]),
    ];
    for attempt in &attempts {
        let err = t.substitute(attempt, &params).unwrap_err();
        let shown = format!("{err} {}", MatchError::Arg(err.clone()));
        assert!(!shown.contains("Sekr3t"), "{shown}");
        assert!(shown.starts_with(char::is_lowercase), "{shown}");
    }
}
