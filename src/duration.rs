//! The one parser of durations written by people: `--since` and `--until`
//! of `audit query`/`export` ([`parse`]), and `--timeout` of `run`, `check`
//! and `learn` ([`parse_or_seconds`]). A duration is a whole number of
//! ASCII digits and a unit: `ms`, `s`, `m`, `h` or `d`; nothing else (no
//! sign, fraction, space or compound like `1h30m`), so a typo is an error
//! and never a different length of time.

use std::time::Duration;

/// Why text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DurationError {
    /// Not digits followed by a unit.
    #[error("`{0}` is not a duration like 500ms, 10s, 2m, 1h or 3d")]
    NotADuration(String),
    /// Digits followed by something other than a known unit.
    #[error("`{text}`: unknown unit `{unit}`; use ms, s, m, h or d")]
    UnknownUnit {
        /// The whole text.
        text: String,
        /// What followed the digits.
        unit: String,
    },
    /// More than a `Duration` holds.
    #[error("`{0}` is too long a duration")]
    TooLong(String),
}

/// Parses a whole number followed by `ms`, `s`, `m`, `h` or `d`.
pub(crate) fn parse(text: &str) -> Result<Duration, DurationError> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() || unit.is_empty() {
        return Err(DurationError::NotADuration(text.to_string()));
    }
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(DurationError::UnknownUnit {
                text: text.to_string(),
                unit: unit.to_string(),
            })
        }
    };
    let too_long = || DurationError::TooLong(text.to_string());
    // Only digits: the one way to fail is overflow.
    let n: u64 = digits.parse().map_err(|_| too_long())?;
    if millis_per_unit == 1 {
        return Ok(Duration::from_millis(n));
    }
    let seconds = n
        .checked_mul(millis_per_unit / 1_000)
        .ok_or_else(too_long)?;
    Ok(Duration::from_secs(seconds))
}

/// [`parse`], or a bare whole number of seconds (`30`).
pub(crate) fn parse_or_seconds(text: &str) -> Result<Duration, DurationError> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let seconds = text
            .parse()
            .map_err(|_| DurationError::TooLong(text.to_string()))?;
        return Ok(Duration::from_secs(seconds));
    }
    parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_unit_parses() {
        for (text, expected) in [
            ("500ms", Duration::from_millis(500)),
            ("0ms", Duration::ZERO),
            ("10s", Duration::from_secs(10)),
            ("90s", Duration::from_secs(90)),
            ("0s", Duration::ZERO),
            ("2m", Duration::from_secs(120)),
            ("15m", Duration::from_secs(900)),
            ("1h", Duration::from_secs(3_600)),
            ("2h", Duration::from_secs(7_200)),
            ("3d", Duration::from_secs(3 * 86_400)),
            ("007s", Duration::from_secs(7)),
        ] {
            assert_eq!(parse(text), Ok(expected), "{text}");
            assert_eq!(parse_or_seconds(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn a_bare_number_is_seconds_only_where_asked_for() {
        assert_eq!(parse_or_seconds("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_or_seconds("0"), Ok(Duration::ZERO));
        assert_eq!(parse("3"), Err(DurationError::NotADuration("3".into())));
    }

    #[test]
    fn anything_else_is_refused() {
        for text in ["", "s", "m", "-15m", "+15m", " 15m", "١٥m", "garbage"] {
            assert_eq!(
                parse(text),
                Err(DurationError::NotADuration(text.into())),
                "{text:?}"
            );
            assert!(parse_or_seconds(text).is_err(), "{text:?}");
        }
        for (text, unit) in [
            ("15M", "M"),
            ("1h30m", "h30m"),
            ("5 weeks", " weeks"),
            ("15x", "x"),
            ("1.5h", ".5h"),
            ("15 m", " m"),
            ("2026-11-26", "-11-26"),
        ] {
            assert_eq!(
                parse(text),
                Err(DurationError::UnknownUnit {
                    text: text.into(),
                    unit: unit.into()
                }),
                "{text:?}"
            );
        }
    }

    #[test]
    fn overflow_is_too_long() {
        for text in [
            "99999999999999999999d",
            "99999999999999999999ms",
            "18446744073709551615d",
        ] {
            assert_eq!(
                parse(text),
                Err(DurationError::TooLong(text.into())),
                "{text}"
            );
        }
        assert_eq!(
            parse_or_seconds("99999999999999999999"),
            Err(DurationError::TooLong("99999999999999999999".into()))
        );
        assert_eq!(
            parse("18446744073709551615s"),
            Ok(Duration::from_secs(u64::MAX))
        );
    }
}
