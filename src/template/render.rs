//! Substitution: arguments in, argv out (`spawn_op`). The steps run in a
//! fixed order so the first failure is the reported one: unknown names,
//! missing values and partly filled groups, value rules, then rendering.
//! A value always lands inside exactly one argv element; nothing is split,
//! quoted or evaluated.

use std::collections::BTreeMap;

use super::error::ArgError;
use super::model::Item;
use super::rules::{check_value, Params};
use super::Template;

impl Template {
    /// Builds the argv for `args` under `params`.
    ///
    /// - A name in `args` that is not a placeholder: [`ArgError::Unknown`]
    ///   (the first in key order).
    /// - A placeholder outside groups with no argument takes its `default`,
    ///   else [`ArgError::Missing`].
    /// - A group is left out when all its placeholders are absent or empty
    ///   (defaults count as present); when only some are,
    ///   [`ArgError::PartialGroup`].
    /// - Every rendered value passes the value rules, else
    ///   [`ArgError::Invalid`] or [`ArgError::OptionInjection`].
    ///
    /// `argv[0]` is the template's first token.
    pub fn substitute(
        &self,
        args: &BTreeMap<String, String>,
        params: &Params,
    ) -> Result<Vec<String>, ArgError> {
        if let Some(name) = args.keys().find(|k| self.slot(k).is_none()) {
            return Err(ArgError::Unknown { name: name.clone() });
        }
        let values = self.resolve(args, params);
        let rendered = self.plan_items(&values)?;
        self.check_rendered_values(&values, &rendered, params)?;
        self.check_rendered_leading_dash(&values, &rendered, params)?;
        Ok(self.render(&values, &rendered))
    }

    /// A token that begins with a placeholder can render an element starting
    /// with `-` even when no single value does: `{scope}-{name}` with an empty
    /// scope renders `-` followed by the caller's name. When such an element
    /// starts with `-` and a caller value is in it, the first non-empty value
    /// is held to the option-injection rule.
    fn check_rendered_leading_dash(
        &self,
        values: &BTreeMap<&str, &str>,
        rendered: &[bool],
        params: &Params,
    ) -> Result<(), ArgError> {
        let tokens = self
            .items
            .iter()
            .zip(rendered)
            .filter(|(_, &on)| on)
            .flat_map(|(item, _)| item.tokens());
        for token in tokens.filter(|t| t.leading_placeholder().is_some()) {
            if !token.render(values).starts_with('-') {
                continue;
            }
            let first_value = token
                .placeholders()
                .find(|p| values.get(p).is_some_and(|v| !v.is_empty()));
            if let Some(name) = first_value.filter(|p| !params.rule(p).allow_dash) {
                return Err(ArgError::OptionInjection {
                    placeholder: name.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Each placeholder's argument, else its default; absent if neither.
    /// In a group an empty argument counts as absent, so the default
    /// applies to it too.
    fn resolve<'a>(
        &'a self,
        args: &'a BTreeMap<String, String>,
        params: &'a Params,
    ) -> BTreeMap<&'a str, &'a str> {
        self.slots
            .iter()
            .filter_map(|slot| {
                let name = slot.name.as_str();
                let given = args
                    .get(name)
                    .filter(|v| slot.group.is_none() || !v.is_empty());
                let value = given.or(params.rule(name).default.as_ref())?;
                Some((name, value.as_str()))
            })
            .collect()
    }

    /// Whether each item is rendered.
    fn plan_items(&self, values: &BTreeMap<&str, &str>) -> Result<Vec<bool>, ArgError> {
        let mut rendered = Vec::with_capacity(self.items.len());
        for item in &self.items {
            match item {
                Item::Fixed(token) => {
                    if let Some(name) = token.placeholders().find(|p| !values.contains_key(p)) {
                        return Err(ArgError::Missing {
                            placeholder: name.to_owned(),
                        });
                    }
                    rendered.push(true);
                }
                Item::Group(tokens) => {
                    let filled = |p: &&str| values.get(p).is_some_and(|v| !v.is_empty());
                    let names: Vec<&str> = tokens.iter().flat_map(|t| t.placeholders()).collect();
                    if !names.iter().any(filled) {
                        rendered.push(false);
                    } else if let Some(missing) = names.iter().find(|p| !filled(p)) {
                        return Err(ArgError::PartialGroup {
                            missing: (*missing).to_owned(),
                        });
                    } else {
                        rendered.push(true);
                    }
                }
            }
        }
        Ok(rendered)
    }

    /// Applies the value rules to every placeholder that will be rendered,
    /// in first-appearance order.
    fn check_rendered_values(
        &self,
        values: &BTreeMap<&str, &str>,
        rendered: &[bool],
        params: &Params,
    ) -> Result<(), ArgError> {
        for slot in &self.slots {
            if slot.group.is_some_and(|g| !rendered[g]) {
                continue;
            }
            if let Some(value) = values.get(slot.name.as_str()) {
                check_value(&slot.name, value, params.rule(&slot.name), slot.position())?;
            }
        }
        Ok(())
    }

    fn render(&self, values: &BTreeMap<&str, &str>, rendered: &[bool]) -> Vec<String> {
        self.items
            .iter()
            .zip(rendered)
            .filter(|(_, &on)| on)
            .flat_map(|(item, _)| item.tokens())
            .map(|token| token.render(values))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::error::ValueProblem;
    use super::super::ParamRule;
    use super::*;

    fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn sub(src: &str, pairs: &[(&str, &str)], params: &Params) -> Result<Vec<String>, ArgError> {
        Template::parse_str(src)
            .unwrap()
            .substitute(&args(pairs), params)
    }

    #[test]
    fn unknown_names_are_reported_first_in_key_order() {
        let got = sub("cmd {a}", &[("z", "1"), ("b", "1")], &Params::new());
        assert_eq!(got, Err(ArgError::Unknown { name: "b".into() }));
    }

    #[test]
    fn missing_is_reported_before_an_earlier_invalid_value() {
        let got = sub("cmd {a} {b}", &[("a", "")], &Params::new());
        assert_eq!(
            got,
            Err(ArgError::Missing {
                placeholder: "b".into()
            })
        );
    }

    #[test]
    fn defaults_fill_absent_placeholders_in_and_out_of_groups() {
        let params: Params = [
            (
                "a",
                ParamRule {
                    default: Some("A".into()),
                    ..ParamRule::default()
                },
            ),
            (
                "y",
                ParamRule {
                    default: Some("Y".into()),
                    ..ParamRule::default()
                },
            ),
        ]
        .into_iter()
        .collect();
        let src = "cmd {a} [-x={x} -y={y}]";
        assert_eq!(
            sub(src, &[("x", "1")], &params).unwrap(),
            ["cmd", "A", "-x=1", "-y=Y"]
        );
        assert_eq!(
            sub(src, &[], &params),
            Err(ArgError::PartialGroup {
                missing: "x".into()
            })
        );
        // Empty means absent in a group, so the default still applies.
        assert_eq!(
            sub(src, &[("x", "1"), ("y", "")], &params).unwrap(),
            ["cmd", "A", "-x=1", "-y=Y"]
        );
        assert_eq!(
            sub(src, &[("a", "b"), ("x", "1"), ("y", "2")], &params).unwrap(),
            ["cmd", "b", "-x=1", "-y=2"]
        );
    }

    #[test]
    fn an_empty_group_value_means_absent() {
        let src = "cmd [--x {x}] end";
        assert_eq!(
            sub(src, &[("x", "")], &Params::new()).unwrap(),
            ["cmd", "end"]
        );
    }

    #[test]
    fn values_in_left_out_groups_are_not_checked() {
        let params: Params = [(
            "x",
            ParamRule {
                max_len: 0,
                ..ParamRule::default()
            },
        )]
        .into_iter()
        .collect();
        assert_eq!(sub("cmd [-x {x}]", &[], &params).unwrap(), ["cmd"]);
        assert_eq!(
            sub("cmd [-x {x}]", &[("x", "1")], &params),
            Err(ArgError::Invalid {
                placeholder: "x".into(),
                problem: ValueProblem::TooLong { len: 1, max: 0 }
            })
        );
    }

    #[test]
    fn a_repeated_placeholder_is_checked_as_beginning_a_token_if_any_use_does() {
        let got = sub("cp x{f} {f}.bak", &[("f", "-r")], &Params::new());
        assert_eq!(
            got,
            Err(ArgError::OptionInjection {
                placeholder: "f".into()
            })
        );
        let ok = sub("cp x{f} y{f}.bak", &[("f", "-r")], &Params::new()).unwrap();
        assert_eq!(ok, ["cp", "x-r", "y-r.bak"]);
    }
}

#[cfg(test)]
mod leading_dash_tests {
    use super::super::{ParamRule, Pattern};
    use super::*;

    /// `{scope}-{name}` with an empty scope renders `-` and
    /// then the caller's name, an option the caller chose.
    #[test]
    fn a_caller_value_in_an_element_that_renders_with_a_leading_dash_is_refused() {
        let scope = ParamRule {
            allow_empty: true,
            pattern: Some(Pattern::new("[a-z]*").unwrap()),
            ..ParamRule::default()
        };
        let params: Params = [("scope", scope)].into_iter().collect();
        let t = Template::parse_str("git show {scope}-{name}").unwrap();
        let args = |s: &str, n: &str| {
            [
                ("scope".to_string(), s.to_string()),
                ("name".to_string(), n.to_string()),
            ]
            .into_iter()
            .collect()
        };
        let injection = Err(ArgError::OptionInjection {
            placeholder: "name".into(),
        });
        assert_eq!(
            t.substitute(&args("", "-output=/tmp/x"), &params),
            injection
        );
        assert_eq!(t.substitute(&args("", "x"), &params), injection);
        assert_eq!(
            t.substitute(&args("a", "-x"), &params).unwrap(),
            ["git", "show", "a--x"]
        );
        let argv: Vec<String> = ["git", "show", "--output=/tmp/x"]
            .map(String::from)
            .to_vec();
        assert!(t.match_argv(&argv, "/usr/bin/git", &params).is_err());
    }
}
