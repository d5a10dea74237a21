//! Where a placeholder's value ends inside a token, when a literal and then
//! more segments follow it (`{a}:{b}`). One function decides the strategy
//! from the param rule; the lint refuses the template when there is none,
//! and the matcher applies the same strategy, so lint and matcher cannot
//! disagree. Every strategy is a single forward scan: no backtracking.

use super::rules::ParamRule;

/// How to find the end of a value followed by a literal `L`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Split<'r> {
    /// The value is the one allowed value followed by `L` (unique by
    /// [`strategy`]'s checks).
    Values(&'r [String]),
    /// The value cannot contain `stop`, which is at byte `offset` of `L`:
    /// the first `stop` in the rest of the token is at value end + `offset`.
    StopChar {
        /// A character of `L` the value can never contain.
        stop: char,
        /// Its byte offset in `L`.
        offset: usize,
    },
}

/// Why no strategy exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NoSplit {
    /// Nothing stops the value from containing `L`.
    Unrestricted,
    /// Two allowed values could both be followed by `L`.
    AmbiguousValues,
}

/// The strategy for a value under `rule` followed by `literal` (non-empty).
/// `values` is preferred when it alone makes the split unique; else the
/// pattern must be unable to produce some character of `literal`.
pub(super) fn strategy<'r>(rule: &'r ParamRule, literal: &str) -> Result<Split<'r>, NoSplit> {
    let by_values = rule.values.as_deref().map(|vs| values_split(vs, literal));
    if let Some(Ok(split)) = by_values {
        return Ok(split);
    }
    let stop = rule.pattern.as_ref().and_then(|p| {
        literal
            .char_indices()
            .find(|&(_, c)| !p.can_produce(c))
            .map(|(offset, stop)| Split::StopChar { stop, offset })
    });
    match (stop, by_values) {
        (Some(split), _) => Ok(split),
        (None, Some(Err(why))) => Err(why),
        (None, _) => Err(NoSplit::Unrestricted),
    }
}

/// Values split uniquely before `literal` when no value contains it and no
/// value extends another by a `w` with `w + literal` starting with
/// `literal` (otherwise both could be followed by `literal` in one string).
fn values_split<'r>(values: &'r [String], literal: &str) -> Result<Split<'r>, NoSplit> {
    if values.iter().any(|v| v.contains(literal)) {
        return Err(NoSplit::Unrestricted);
    }
    for short in values {
        for long in values {
            let Some(extra) = long.strip_prefix(short.as_str()) else {
                continue;
            };
            if !extra.is_empty() && shifted_literal_fits(extra, literal) {
                return Err(NoSplit::AmbiguousValues);
            }
        }
    }
    Ok(Split::Values(values))
}

/// Whether `extra + literal` starts with `literal`, without allocating.
/// (`extra` never contains `literal` here, so only a shorter `extra` can.)
fn shifted_literal_fits(extra: &str, literal: &str) -> bool {
    match literal.strip_prefix(extra) {
        Some(tail) => literal.starts_with(tail),
        None => false,
    }
}

/// The byte length of the value at the start of `rest`, which continues
/// with `literal`. `None` when `rest` cannot be such a rendering.
pub(super) fn value_len(split: Split<'_>, rest: &str, literal: &str) -> Option<usize> {
    let len = match split {
        Split::Values(values) => {
            let mut fits = values.iter().filter(|v| {
                rest.strip_prefix(v.as_str())
                    .is_some_and(|after| after.starts_with(literal))
            });
            let found = fits.next()?;
            if fits.next().is_some() {
                return None;
            }
            found.len()
        }
        Split::StopChar { stop, offset } => rest.find(stop)?.checked_sub(offset)?,
    };
    rest.get(len..)?.starts_with(literal).then_some(len)
}

#[cfg(test)]
mod tests {
    use super::super::rules::Pattern;
    use super::*;

    fn rule(pattern: Option<&str>, values: Option<&[&str]>) -> ParamRule {
        ParamRule {
            pattern: pattern.map(|p| Pattern::new(p).unwrap()),
            values: values.map(|vs| vs.iter().map(|v| v.to_string()).collect()),
            ..ParamRule::default()
        }
    }

    #[test]
    fn an_unrestricted_placeholder_has_no_split() {
        assert_eq!(strategy(&rule(None, None), ":"), Err(NoSplit::Unrestricted));
        assert_eq!(
            strategy(&rule(Some(".+"), None), ":"),
            Err(NoSplit::Unrestricted)
        );
    }

    #[test]
    fn a_pattern_splits_at_a_character_it_cannot_produce() {
        let r = rule(Some("[a-z]+"), None);
        let split = strategy(&r, "a:b").unwrap();
        assert_eq!(
            split,
            Split::StopChar {
                stop: ':',
                offset: 1
            }
        );
        assert_eq!(value_len(split, "xyza:b-rest", "a:b"), Some(3));
        assert_eq!(value_len(split, "xyz-rest", "a:b"), None);
    }

    #[test]
    fn values_split_at_the_unique_value_followed_by_the_literal() {
        let r = rule(None, Some(&["ab", "abc", "x"]));
        let split = strategy(&r, "=").unwrap();
        assert_eq!(value_len(split, "abc=z", "="), Some(3));
        assert_eq!(value_len(split, "ab=c=z", "="), Some(2));
        assert_eq!(value_len(split, "q=z", "="), None);
    }

    #[test]
    fn values_that_contain_or_overlap_the_literal_are_refused() {
        let contains = rule(None, Some(&["a=b"]));
        assert_eq!(strategy(&contains, "="), Err(NoSplit::Unrestricted));
        let overlap = rule(None, Some(&["x", "xa"]));
        assert_eq!(strategy(&overlap, "aa"), Err(NoSplit::AmbiguousValues));
        assert!(strategy(&overlap, "ab").is_ok());
    }
}
