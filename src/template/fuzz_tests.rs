//! Adversarial fuzzing of the lint: random templates over a tiny alphabet
//! (so literals, values and patterns collide as often as possible), random
//! rules and random arguments. Whenever the lint accepts a template and
//! substitution accepts the arguments, the matcher must find arguments that
//! substitute to exactly that argv; a miss means the lint let an ambiguity
//! through. Also: the matcher never accepts a mutated argv that substitution
//! would not produce.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];

/// Token shapes; `A` and `B` become placeholder names.
const SHAPES: [&str; 12] = [
    "-x",
    "x",
    "{A}",
    "-x{A}",
    "{A}x",
    "x{A}",
    "-{A}",
    "{A}-x",
    "{A}:{B}",
    "-x={A}:{B}",
    "{A}x{B}",
    ":",
];

const VALUES: [&str; 10] = ["", "a", "ab", "-a", "x", "a:x", "-x", ":", "xa", "a-x"];

/// The rule palette the `template` fuzz target uses too (choices 0–9 here).
fn rule(choice: u8) -> Option<ParamRule> {
    crate::fuzzing::rule(choice)
}

fn token_text(shape: u8, a: u8, b: u8) -> String {
    SHAPES[usize::from(shape) % SHAPES.len()]
        .replace('A', NAMES[usize::from(a) % NAMES.len()])
        .replace('B', NAMES[usize::from(b) % NAMES.len()])
}

type Spec = (Vec<(bool, Vec<(u8, u8, u8)>)>, [u8; 5], [Option<u8>; 5]);

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::collection::vec(
            (
                any::<bool>(),
                prop::collection::vec((0u8..12, 0u8..5, 0u8..5), 1..3),
            ),
            1..6,
        ),
        [0u8..10, 0u8..10, 0u8..10, 0u8..10, 0u8..10],
        [
            proptest::option::of(0u8..10),
            proptest::option::of(0u8..10),
            proptest::option::of(0u8..10),
            proptest::option::of(0u8..10),
            proptest::option::of(0u8..10),
        ],
    )
}

fn build(spec: &Spec) -> (Vec<TokenSource>, Params) {
    let (items, rules, _) = spec;
    let mut sources = vec![TokenSource::Token("p".into())];
    for (is_group, tokens) in items {
        let texts: Vec<String> = tokens
            .iter()
            .map(|&(s, a, b)| token_text(s, a, b))
            .collect();
        if *is_group {
            sources.push(TokenSource::Group(texts));
        } else {
            sources.extend(texts.into_iter().map(TokenSource::Token));
        }
    }
    let params = NAMES
        .iter()
        .zip(rules)
        .filter_map(|(name, &choice)| Some((*name, rule(choice)?)))
        .collect();
    (sources, params)
}

/// For each chosen name, the first value from `VALUES` (rotated by the
/// choice) that passes its rule where it sits, so most cases substitute.
fn pick_args(t: &Template, params: &Params, choices: &[Option<u8>; 5]) -> BTreeMap<String, String> {
    let mut args = BTreeMap::new();
    for (name, choice) in NAMES.iter().zip(choices) {
        let (Some(slot), Some(choice)) = (t.slot(name), choice) else {
            continue;
        };
        let start = usize::from(*choice);
        let fits =
            |v: &&&str| rules::check_value(name, v, params.rule(name), slot.position()).is_ok();
        let rotated = VALUES.iter().cycle().skip(start).take(VALUES.len());
        let value = rotated.clone().find(fits).unwrap_or(&VALUES[start]);
        args.insert(name.to_string(), value.to_string());
    }
    args
}

/// Drops params for names the template does not use, so the lint judges
/// only the template's ambiguity.
fn used_params(t: &Template, params: &Params) -> Params {
    params
        .iter()
        .filter(|(name, _)| t.placeholders().contains(name))
        .map(|(name, rule)| (name, rule.clone()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn whatever_the_lint_accepts_the_matcher_finds(spec in spec()) {
        let (sources, params) = build(&spec);
        let Ok(t) = Template::parse_tokens(&sources) else { return Ok(()) };
        let params = used_params(&t, &params);
        if t.check_unambiguous(&params).is_err() {
            return Ok(());
        }
        let args = pick_args(&t, &params, &spec.2);
        let Ok(argv) = t.substitute(&args, &params) else { return Ok(()) };
        let got = t.match_argv(&argv, "p", &params);
        prop_assert!(got.is_ok(), "{} {argv:?} {args:?}: {got:?}", t.shape());
        prop_assert_eq!(t.substitute(&got.unwrap(), &params).unwrap(), argv);
    }

    #[test]
    fn the_matcher_never_accepts_what_substitution_would_not_produce(
        spec in spec(),
        cut in 0usize..8,
        edit in 0usize..8,
        letter in prop::sample::select(vec!['a', 'x', '-', ':']),
    ) {
        let (sources, params) = build(&spec);
        let Ok(t) = Template::parse_tokens(&sources) else { return Ok(()) };
        let args = pick_args(&t, &params, &spec.2);
        let Ok(mut argv) = t.substitute(&args, &params) else { return Ok(()) };
        if cut < argv.len() && cut.is_multiple_of(2) {
            argv.remove(cut);
        } else if let Some(element) = argv.get_mut(edit.max(1)) {
            element.insert(0, letter);
        }
        if let Ok(found) = t.match_argv(&argv, "p", &params) {
            prop_assert_eq!(t.substitute(&found, &params).unwrap(), argv);
        }
    }
}
