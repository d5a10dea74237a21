//! Property tests: generated unambiguous templates round-trip through
//! substitution and matching, and no value ever becomes two argv elements,
//! checked against an independent oracle that renders the expected argv by
//! plain concatenation. Also the scale tests: many optional groups and a
//! 4,000-element argv match quickly and correctly.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

/// How one generated token renders: literal text and placeholder names.
#[derive(Debug, Clone)]
enum Part {
    Lit(String),
    Ph(String),
}

/// A generated token: source text, how it renders, its new values.
type GenToken = (String, Vec<Part>, Vec<(String, String)>);

fn lit(s: &str) -> Part {
    Part::Lit(s.to_string())
}

/// A generated template with its params, args and the argv it must give.
#[derive(Debug, Clone)]
struct Case {
    sources: Vec<TokenSource>,
    params: Params,
    args: BTreeMap<String, String>,
    /// Placeholders whose group is rendered (or that are not in a group).
    rendered: Vec<String>,
    expected: Vec<String>,
}

/// The random material a case is built from.
#[derive(Debug, Clone)]
struct Seeds {
    items: Vec<(bool, Vec<u8>)>,
    free: Vec<String>,
    lower: Vec<String>,
    color: Vec<usize>,
    include: Vec<bool>,
    blank: Vec<bool>,
}

const COLORS: [&str; 3] = ["red", "green", "blue"];

/// Builds a case, placeholder by placeholder, from seeds.
struct Builder<'s> {
    seeds: &'s Seeds,
    case: Case,
    next: usize,
    last_free: Option<String>,
}

impl<'s> Builder<'s> {
    fn new(seeds: &'s Seeds) -> Self {
        let mut case = Case {
            sources: vec![TokenSource::Token("prog".into())],
            params: Params::new(),
            args: BTreeMap::new(),
            rendered: Vec::new(),
            expected: vec!["prog".into()],
        };
        case.sources.reserve(seeds.items.len());
        Builder {
            seeds,
            case,
            next: 0,
            last_free: None,
        }
    }

    /// A new placeholder of the given kind (0 free, 1 lower, 2 color).
    fn placeholder(&mut self, kind: u8) -> (String, String) {
        let n = self.next;
        self.next += 1;
        let name = format!("p{n}");
        let value = match kind {
            0 => self.seeds.free[n].clone(),
            1 => self.seeds.lower[n].clone(),
            _ => COLORS[self.seeds.color[n]].to_string(),
        };
        let rule = match kind {
            0 => None,
            1 => Some(ParamRule {
                pattern: Some(Pattern::new("[a-z0-9]+").unwrap()),
                ..ParamRule::default()
            }),
            _ => Some(ParamRule {
                values: Some(COLORS.iter().map(|c| c.to_string()).collect()),
                ..ParamRule::default()
            }),
        };
        if let Some(rule) = rule {
            self.case.params.insert(name.clone(), rule);
        }
        (name, value)
    }

    /// One token of the given form: its source text, parts and values.
    fn token(&mut self, form: u8, in_group: bool) -> GenToken {
        match form {
            0 => {
                let (text, shown) = [
                    ("sub", "sub"),
                    ("--flag", "--flag"),
                    ("a{{b}}", "a{b}"),
                    ("[l]", "[l]"),
                ][self.next % 4];
                (text.into(), vec![lit(shown)], vec![])
            }
            1..=3 => {
                let (name, value) = self.placeholder(0);
                if !in_group {
                    self.last_free = Some(name.clone());
                }
                let (pre, post) = [("", ""), ("--o=", ""), ("", ".json")][usize::from(form - 1)];
                let text = format!("{pre}{{{name}}}{post}");
                let parts = vec![lit(pre), Part::Ph(name.clone()), lit(post)];
                (text, parts, vec![(name, value)])
            }
            4 => self.pair(1, ("r", "@", "")),
            5 => self.pair(2, ("", "-", ".x")),
            _ => match self.last_free.clone().filter(|_| !in_group) {
                Some(name) => {
                    let text = format!("{{{name}}}.bak");
                    (text, vec![Part::Ph(name), lit(".bak")], vec![])
                }
                None => self.token(1, in_group),
            },
        }
    }

    /// `pre{a}mid{b}post`, with `a` of the given (restricted) kind.
    fn pair(&mut self, kind: u8, (pre, mid, post): (&str, &str, &str)) -> GenToken {
        let (a, av) = self.placeholder(kind);
        let (b, bv) = self.placeholder(0);
        let text = format!("{pre}{{{a}}}{mid}{{{b}}}{post}");
        let parts = vec![
            lit(pre),
            Part::Ph(a.clone()),
            lit(mid),
            Part::Ph(b.clone()),
            lit(post),
        ];
        (text, parts, vec![(a, av), (b, bv)])
    }

    fn fixed(&mut self, form: u8) {
        let (text, parts, values) = self.token(form, false);
        self.case.sources.push(TokenSource::Token(text));
        for (name, value) in values {
            self.case.rendered.push(name.clone());
            self.case.args.insert(name, value);
        }
        self.case.expected.push(render(&parts, &self.case.args));
    }

    fn group(&mut self, index: usize, forms: &[u8]) {
        let mut texts = Vec::new();
        let mut parts = Vec::new();
        let mut values = Vec::new();
        let (head, head_value) = self.placeholder(0);
        texts.push(format!("-g{index}-{{{head}}}"));
        parts.push(vec![
            Part::Lit(format!("-g{index}-")),
            Part::Ph(head.clone()),
        ]);
        values.push((head, head_value));
        for &form in forms.iter().take(2) {
            let (text, token_parts, token_values) = self.token(form % 6, true);
            texts.push(text);
            parts.push(token_parts);
            values.extend(token_values);
        }
        self.case.sources.push(TokenSource::Group(texts));
        let include = self.seeds.include[index];
        for (i, (name, value)) in values.into_iter().enumerate() {
            if include {
                self.case.rendered.push(name.clone());
                self.case.args.insert(name, value);
            } else if self.seeds.blank[(self.next + i) % self.seeds.blank.len()] {
                self.case.args.insert(name, String::new());
            }
        }
        if include {
            for token in &parts {
                self.case.expected.push(render(token, &self.case.args));
            }
        }
    }

    fn build(mut self) -> Case {
        for (index, (is_group, forms)) in self.seeds.items.iter().enumerate() {
            if *is_group {
                self.group(index, forms);
            } else {
                for &form in forms {
                    self.fixed(form);
                }
            }
        }
        self.case
    }
}

fn render(parts: &[Part], args: &BTreeMap<String, String>) -> String {
    parts
        .iter()
        .map(|p| match p {
            Part::Lit(s) => s.as_str(),
            Part::Ph(name) => args[name].as_str(),
        })
        .collect()
}

/// Values full of separators and syntax characters, never starting with `-`.
fn free_value() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 \t\n\"'\\[\\]{}:@.=/\\\\é☃][a-zA-Z0-9 \t\n\"'\\[\\]{}:@.=/\\\\é☃-]{0,8}"
}

fn seeds() -> impl Strategy<Value = Seeds> {
    (
        prop::collection::vec((any::<bool>(), prop::collection::vec(0u8..7, 1..4)), 0..8),
        prop::collection::vec(free_value(), 64),
        prop::collection::vec("[a-z0-9]{1,6}", 64),
        prop::collection::vec(0usize..3, 64),
        prop::collection::vec(any::<bool>(), 8),
        prop::collection::vec(any::<bool>(), 5),
    )
        .prop_map(|(items, free, lower, color, include, blank)| Seeds {
            items,
            free,
            lower,
            color,
            include,
            blank,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Property 1: matching the substitution gives back arguments that
    /// substitute to the same argv, equal to the rendered arguments.
    #[test]
    fn substitution_then_matching_round_trips(seeds in seeds()) {
        let case = Builder::new(&seeds).build();
        let t = Template::parse_tokens(&case.sources).unwrap();
        prop_assert_eq!(t.check_unambiguous(&case.params), Ok(()));
        let argv = t.substitute(&case.args, &case.params).unwrap();
        let got = t.match_argv(&argv, "/opt/prog", &case.params).unwrap();
        prop_assert_eq!(&t.substitute(&got, &case.params).unwrap(), &argv);
        let rendered: BTreeMap<String, String> = case
            .rendered
            .iter()
            .map(|name| (name.clone(), case.args[name].clone()))
            .collect();
        prop_assert_eq!(got, rendered);
    }

    /// Property 2: each value lands inside exactly its own element, and the
    /// argv has one element per rendered token.
    #[test]
    fn no_value_ever_becomes_two_elements(seeds in seeds()) {
        let case = Builder::new(&seeds).build();
        let t = Template::parse_tokens(&case.sources).unwrap();
        let argv = t.substitute(&case.args, &case.params).unwrap();
        prop_assert_eq!(argv.len(), case.expected.len());
        prop_assert_eq!(argv, case.expected);
    }

    /// Property 2 with arbitrary strings (anything but NUL) in a fixed
    /// template that allows dashes.
    #[test]
    fn arbitrary_values_stay_inside_their_element(
        a in "[^\\x00]{1,12}",
        b in "[ \t\n\r'\"\\[\\]{}a-z;$`|&*?=-]{1,12}",
        c in proptest::option::of("[^\\x00]{1,12}"),
    ) {
        let dash = ParamRule { allow_dash: true, ..ParamRule::default() };
        let params: Params = [("a", dash.clone()), ("c", dash)].into_iter().collect();
        let t = Template::parse_str("cmd {a} --b={b}.txt [--c {c}]").unwrap();
        prop_assert_eq!(t.check_unambiguous(&params), Ok(()));
        let mut args = BTreeMap::from([("a".to_string(), a.clone()), ("b".to_string(), b.clone())]);
        let mut want = vec!["cmd".to_string(), a, format!("--b={b}.txt")];
        if let Some(c) = c {
            args.insert("c".into(), c.clone());
            want.extend(["--c".to_string(), c]);
        }
        let argv = t.substitute(&args, &params).unwrap();
        prop_assert_eq!(&argv, &want);
        prop_assert_eq!(t.match_argv(&argv, "cmd", &params).unwrap(), args);
    }
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

#[test]
fn thirty_optional_groups_match_in_milliseconds() {
    let mut src = String::from("cmd");
    for i in 0..30 {
        src.push_str(&format!(" [-o{i}- {{v{i}}}]"));
    }
    src.push_str(" {last}");
    let t = Template::parse_str(&src).unwrap();
    let dash = ParamRule {
        allow_dash: true,
        ..ParamRule::default()
    };
    let params: Params = (0..30).map(|i| (format!("v{i}"), dash.clone())).collect();
    assert_eq!(t.check_unambiguous(&params), Ok(()));
    // Every other group present, then a value that could be mistaken for a
    // group's flag by a backtracking matcher.
    let mut argv = vec!["cmd".to_string()];
    let mut want = BTreeMap::new();
    for i in (0..30).step_by(2) {
        argv.extend([format!("-o{i}-"), format!("-o{}-", i + 1)]);
        want.insert(format!("v{i}"), format!("-o{}-", i + 1));
    }
    argv.push("x".repeat(100));
    want.insert("last".into(), "x".repeat(100));
    let (got, took) = timed(|| t.match_argv(&argv, "cmd", &params));
    assert_eq!(got, Ok(want));
    assert!(took < Duration::from_millis(250), "took {took:?}");
    // A near miss fails fast too.
    argv.push("extra".into());
    let (got, took) = timed(|| t.match_argv(&argv, "cmd", &params));
    assert_eq!(got, Err(MatchError::Shape));
    assert!(took < Duration::from_millis(250), "took {took:?}");
}

#[test]
fn a_four_thousand_element_argv_matches_quickly() {
    let mut src = String::from("cmd");
    for i in 0..2000 {
        src.push_str(&format!(" [--k{i}={{a{i}}} {{b{i}}}]"));
    }
    let t = Template::parse_str(&src).unwrap();
    let big = ParamRule {
        max_len: 1 << 21,
        ..ParamRule::default()
    };
    let lower = ParamRule {
        pattern: Some(Pattern::new("[a-z]+").unwrap()),
        ..big.clone()
    };
    let params = Params::new();
    assert_eq!(t.check_unambiguous(&params), Ok(()));
    let mut argv = vec!["cmd".to_string()];
    for i in 0..2000 {
        argv.extend([format!("--k{i}={i}:{i}"), "v".repeat(i % 7 + 1)]);
    }
    let (got, took) = timed(|| t.match_argv(&argv, "cmd", &params));
    let got = got.unwrap();
    assert_eq!(got.len(), 4000);
    assert_eq!(got["a1999"], "1999:1999");
    assert_eq!(t.substitute(&got, &params).unwrap(), argv);
    assert!(took < Duration::from_secs(1), "took {took:?}");
    // One long element split by a restricted placeholder is one scan.
    let long = Template::parse_str("cmd {u}@{h}").unwrap();
    let lp: Params = [("u", lower), ("h", big)].into_iter().collect();
    let element = format!("{}@{}", "a".repeat(1 << 20), "@".repeat(1 << 20));
    let (got, took) = timed(|| long.match_argv(&argv_of(&["cmd", &element]), "cmd", &lp));
    assert_eq!(got.map(|m| m["u"].len()), Ok(1 << 20));
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

fn argv_of(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}
