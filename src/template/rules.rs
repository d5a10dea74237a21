//! Value rules for placeholders: [`ParamRule`], its whole-value [`Pattern`],
//! the per-template table [`Params`], and the one function that checks a value
//! against a rule. Substitution, matching and the lint all call that function,
//! so a raw argv can never carry a value that `spawn_op` would refuse.

use std::collections::BTreeMap;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::charset::CharSet;
use super::error::{ArgError, TemplateError, ValueProblem};

/// The default `max_len` of a value, in bytes.
pub(crate) const DEFAULT_MAX_LEN: usize = 4096;

/// The rule a placeholder without an entry in [`Params`] gets.
static DEFAULT_RULE: ParamRule = ParamRule {
    pattern: None,
    values: None,
    max_len: DEFAULT_MAX_LEN,
    allow_dash: false,
    allow_empty: false,
    default: None,
};

/// A regular expression that must match a whole value.
///
/// Compiled as `^(?:src)$`; the source must also parse on its own, so a
/// source such as `a)|(b` cannot escape the anchors. Equality compares the
/// source text.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Pattern {
    source: String,
    regex: Regex,
    chars: CharSet,
}

impl Pattern {
    /// Compiles `src` as a whole-value pattern.
    pub fn new(src: &str) -> Result<Pattern, TemplateError> {
        let bad = |detail: String| TemplateError::BadPattern {
            pattern: src.to_owned(),
            detail,
        };
        regex_syntax::Parser::new()
            .parse(src)
            .map_err(|e| bad(syntax_problem(&e)))?;
        let anchored = format!("^(?:{src})$");
        let hir = regex_syntax::Parser::new()
            .parse(&anchored)
            .map_err(|e| bad(syntax_problem(&e)))?;
        let regex = Regex::new(&anchored).map_err(|e| bad(e.to_string()))?;
        Ok(Pattern {
            source: src.to_owned(),
            regex,
            chars: CharSet::of_hir(&hir),
        })
    }

    /// The source text, as written in the manifest.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the pattern matches the whole of `v`.
    pub fn is_match(&self, v: &str) -> bool {
        self.regex.is_match(v)
    }

    /// Whether some value matching this pattern could contain `c`.
    pub(super) fn can_produce(&self, c: char) -> bool {
        self.chars.contains(c)
    }
}

/// The parser's complaint on one line (its `Display` draws a caret
/// diagram over several lines).
fn syntax_problem(e: &regex_syntax::Error) -> String {
    match e {
        regex_syntax::Error::Parse(e) => {
            format!("{} at byte {}", e.kind(), e.span().start.offset)
        }
        regex_syntax::Error::Translate(e) => {
            format!("{} at byte {}", e.kind(), e.span().start.offset)
        }
        other => other.to_string(),
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for Pattern {}

impl TryFrom<String> for Pattern {
    type Error = TemplateError;

    fn try_from(src: String) -> Result<Self, Self::Error> {
        Pattern::new(&src)
    }
}

impl From<Pattern> for String {
    fn from(p: Pattern) -> String {
        p.source
    }
}

/// What values a placeholder accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ParamRule {
    /// Must match the whole value.
    pub pattern: Option<Pattern>,
    /// The allowed values, when enumerated.
    pub values: Option<Vec<String>>,
    /// The longest accepted value, in bytes.
    pub max_len: usize,
    /// Accept a leading `-` where the value begins an argv element.
    pub allow_dash: bool,
    /// Accept the empty string (outside optional groups).
    pub allow_empty: bool,
    /// The value used when the argument is absent.
    pub default: Option<String>,
}

impl Default for ParamRule {
    fn default() -> Self {
        DEFAULT_RULE.clone()
    }
}

/// The rules of one template's placeholders, by name. A placeholder
/// without an entry gets [`ParamRule::default`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Params(BTreeMap<String, ParamRule>);

impl Params {
    /// No entries: every placeholder gets the default rule.
    pub fn new() -> Self {
        Params(BTreeMap::new())
    }

    /// Sets the rule of `name`, returning the previous one.
    pub fn insert(&mut self, name: impl Into<String>, rule: ParamRule) -> Option<ParamRule> {
        self.0.insert(name.into(), rule)
    }

    /// The entry for `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<&ParamRule> {
        self.0.get(name)
    }

    /// The rule that applies to `name`: its entry, else the default rule.
    pub fn rule(&self, name: &str) -> &ParamRule {
        self.0.get(name).unwrap_or(&DEFAULT_RULE)
    }

    /// The entries, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ParamRule)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<BTreeMap<String, ParamRule>> for Params {
    fn from(map: BTreeMap<String, ParamRule>) -> Self {
        Params(map)
    }
}

impl<K: Into<String>> FromIterator<(K, ParamRule)> for Params {
    fn from_iter<I: IntoIterator<Item = (K, ParamRule)>>(iter: I) -> Self {
        Params(iter.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }
}

/// Where a placeholder sits, which changes how its value is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Position {
    /// Some occurrence is the first segment of its token.
    pub(super) begins_token: bool,
    /// The placeholder is inside an optional group, where empty means absent,
    /// so a rendered group never holds an empty value.
    pub(super) in_group: bool,
}

/// Checks `value` for placeholder `name` in the fixed order: NUL, empty,
/// length, option injection, `values`, `pattern`. The first failure wins.
pub(super) fn check_value(
    name: &str,
    value: &str,
    rule: &ParamRule,
    at: Position,
) -> Result<(), ArgError> {
    let invalid = |problem| ArgError::Invalid {
        placeholder: name.to_owned(),
        problem,
    };
    if value.contains('\0') {
        return Err(invalid(ValueProblem::Nul));
    }
    if value.is_empty() && (at.in_group || !rule.allow_empty) {
        return Err(invalid(ValueProblem::Empty));
    }
    if value.len() > rule.max_len {
        return Err(invalid(ValueProblem::TooLong {
            len: value.len(),
            max: rule.max_len,
        }));
    }
    if at.begins_token && value.starts_with('-') && !rule.allow_dash {
        return Err(ArgError::OptionInjection {
            placeholder: name.to_owned(),
        });
    }
    if let Some(values) = &rule.values {
        if !values.iter().any(|v| v == value) {
            return Err(invalid(ValueProblem::NotInValues));
        }
    }
    if let Some(pattern) = &rule.pattern {
        if !pattern.is_match(value) {
            return Err(invalid(ValueProblem::PatternMismatch));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(value: &str, rule: &ParamRule, at: Position) -> Result<(), ArgError> {
        check_value("v", value, rule, at)
    }

    fn invalid(problem: ValueProblem) -> Result<(), ArgError> {
        Err(ArgError::Invalid {
            placeholder: "v".into(),
            problem,
        })
    }

    #[test]
    fn checks_run_in_the_documented_order() {
        let lead = Position {
            begins_token: true,
            in_group: false,
        };
        let rule = ParamRule {
            pattern: Some(Pattern::new("[a-z]+").unwrap()),
            values: Some(vec!["abc".into()]),
            max_len: 3,
            ..ParamRule::default()
        };
        assert_eq!(problem("-\0", &rule, lead), invalid(ValueProblem::Nul));
        assert_eq!(problem("", &rule, lead), invalid(ValueProblem::Empty));
        assert_eq!(
            problem("-abcd", &rule, lead),
            invalid(ValueProblem::TooLong { len: 5, max: 3 })
        );
        assert_eq!(
            problem("-ab", &rule, lead),
            Err(ArgError::OptionInjection {
                placeholder: "v".into()
            })
        );
        assert_eq!(
            problem("abd", &rule, lead),
            invalid(ValueProblem::NotInValues)
        );
        assert_eq!(problem("abc", &rule, lead), Ok(()));
        let pat_only = ParamRule {
            values: None,
            ..rule
        };
        assert_eq!(
            problem("ab1", &pat_only, lead),
            invalid(ValueProblem::PatternMismatch)
        );
    }

    #[test]
    fn a_dash_is_fine_where_the_value_does_not_begin_the_token() {
        let rule = ParamRule::default();
        assert_eq!(problem("-x", &rule, Position::default()), Ok(()));
    }

    #[test]
    fn allow_empty_does_not_apply_inside_a_rendered_group() {
        let rule = ParamRule {
            allow_empty: true,
            ..ParamRule::default()
        };
        assert_eq!(problem("", &rule, Position::default()), Ok(()));
        let in_group = Position {
            begins_token: false,
            in_group: true,
        };
        assert_eq!(problem("", &rule, in_group), invalid(ValueProblem::Empty));
    }

    #[test]
    fn a_pattern_must_match_the_whole_value() {
        let p = Pattern::new("[0-9]{4}").unwrap();
        assert!(p.is_match("2026"));
        assert!(!p.is_match("x2026"));
        assert!(!p.is_match("20267"));
        assert!(!p.is_match("2026\n"));
        assert_eq!(p.as_str(), "[0-9]{4}");
    }

    #[test]
    fn a_pattern_cannot_escape_its_anchors() {
        assert_eq!(
            Pattern::new("a)|(b"),
            Err(TemplateError::BadPattern {
                pattern: "a)|(b".into(),
                detail: "unopened group at byte 1".into()
            })
        );
        assert!(matches!(
            Pattern::new("(?x)a#"),
            Err(TemplateError::BadPattern { .. })
        ));
        let alt = Pattern::new("a|b").unwrap();
        assert!(!alt.is_match("ax"));
        assert!(!alt.is_match("xb"));
    }

    #[test]
    fn params_fall_back_to_the_default_rule() {
        let params: Params = [(
            "n",
            ParamRule {
                max_len: 2,
                ..ParamRule::default()
            },
        )]
        .into_iter()
        .collect();
        assert_eq!(params.rule("n").max_len, 2);
        assert_eq!(params.rule("other"), &ParamRule::default());
        assert_eq!(ParamRule::default().max_len, DEFAULT_MAX_LEN);
    }

    #[test]
    fn rules_deserialize_strictly_with_defaults() {
        use serde::de::value::{Error as DeError, MapDeserializer, StrDeserializer};
        use serde::de::IntoDeserializer;
        let map = |entries: Vec<(&'static str, bool)>| {
            MapDeserializer::<_, DeError>::new(
                entries.into_iter().map(|(k, v)| (k, v.into_deserializer())),
            )
        };
        let rule = ParamRule::deserialize(map(vec![("allow_dash", true)])).unwrap();
        assert!(rule.allow_dash);
        assert_eq!(rule.max_len, DEFAULT_MAX_LEN);
        assert!(ParamRule::deserialize(map(vec![("allow_dashes", true)])).is_err());

        let pattern = Pattern::deserialize(StrDeserializer::<DeError>::new("[a-z]+")).unwrap();
        assert_eq!(pattern.as_str(), "[a-z]+");
        assert!(Pattern::deserialize(StrDeserializer::<DeError>::new("(")).is_err());
    }
}
