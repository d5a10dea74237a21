//! The times `audit query` and `audit export` filter records by (`--since`,
//! `--until`): an RFC 3339 instant, or a duration back from now. Parsing
//! reads no clock: a bound is resolved against the `now` the caller passes
//! in, and records are compared with it as instants (their `ts`), never as
//! strings, so offsets and precision do not matter.

use time::format_description::well_known::Rfc3339;
use time::{Date, Duration, OffsetDateTime, Time};

use crate::duration::DurationError;

/// The forms a bound may take, as error messages and the docs say them.
pub(crate) const FORMS: &str = "an RFC 3339 time (2026-11-26T10:00:00Z, or with an offset: \
     2026-11-26T11:00:00+01:00) or a duration back from now (90s, 15m, 2h, 3d; also 500ms)";

/// A time a filter compares records against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeBound {
    /// An instant, as given.
    At(OffsetDateTime),
    /// This long before now.
    Ago(Duration),
}

/// Why a bound was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TimeBoundError {
    /// Neither an RFC 3339 time nor a duration.
    #[error("not a time: give {FORMS}")]
    Unrecognized,
    /// A duration beyond what a time can be counted back by.
    #[error("the duration is too long: give {FORMS}")]
    TooLong,
}

impl TimeBound {
    /// Parses `text`: an RFC 3339 time with `Z` or an offset, or a whole
    /// number followed by `ms`, `s`, `m`, `h` or `d`.
    pub(crate) fn parse(text: &str) -> Result<TimeBound, TimeBoundError> {
        if let Ok(at) = OffsetDateTime::parse(text, &Rfc3339) {
            return Ok(TimeBound::At(at));
        }
        parse_duration(text).map(TimeBound::Ago)
    }

    /// The instant this bound names, with `now` for a duration. A duration
    /// reaching before the earliest representable date gives that date.
    pub(crate) fn instant(self, now: OffsetDateTime) -> OffsetDateTime {
        match self {
            TimeBound::At(at) => at,
            TimeBound::Ago(d) => now
                .checked_sub(d)
                .unwrap_or_else(|| Date::MIN.with_time(Time::MIDNIGHT).assume_utc()),
        }
    }
}

/// A record's `ts` as an instant (None when it is not RFC 3339).
pub(crate) fn record_instant(ts: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(ts, &Rfc3339).ok()
}

/// A duration of [`crate::duration::parse`] (a unit is required: `2026`
/// alone is not read as seconds).
fn parse_duration(text: &str) -> Result<Duration, TimeBoundError> {
    let duration = crate::duration::parse(text).map_err(|e| match e {
        DurationError::TooLong(_) => TimeBoundError::TooLong,
        DurationError::NotADuration(_) | DurationError::UnknownUnit { .. } => {
            TimeBoundError::Unrecognized
        }
    })?;
    Duration::try_from(duration).map_err(|_| TimeBoundError::TooLong)
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn rfc3339_times_parse_to_the_same_instant_whatever_the_offset() {
        let utc = TimeBound::parse("2026-11-26T10:00:00Z").unwrap();
        let plus = TimeBound::parse("2026-11-26T11:00:00+01:00").unwrap();
        let minus = TimeBound::parse("2026-11-26T04:30:00.000-05:30").unwrap();
        let now = datetime!(2030-01-01 0:00 UTC);
        for bound in [utc, plus, minus] {
            assert_eq!(bound.instant(now), datetime!(2026-11-26 10:00 UTC));
        }
    }

    #[test]
    fn durations_count_back_from_the_now_given() {
        let now = datetime!(2026-11-26 10:00 UTC);
        for (text, at) in [
            ("90s", datetime!(2026-11-26 9:58:30 UTC)),
            ("15m", datetime!(2026-11-26 9:45 UTC)),
            ("2h", datetime!(2026-11-26 8:00 UTC)),
            ("3d", datetime!(2026-11-23 10:00 UTC)),
            ("0s", now),
            ("1500ms", datetime!(2026-11-26 9:59:58.5 UTC)),
        ] {
            assert_eq!(TimeBound::parse(text).unwrap().instant(now), at, "{text}");
        }
    }

    #[test]
    fn anything_else_is_refused() {
        for text in [
            "",
            "garbage",
            "15",
            "m",
            "15x",
            "15 m",
            "-15m",
            "+15m",
            "1.5h",
            "15M",
            "1h30m",
            "2026-11-26",
            "2026-11-26T10:00:00",
            "yesterday",
            "١٥m",
        ] {
            assert_eq!(
                TimeBound::parse(text),
                Err(TimeBoundError::Unrecognized),
                "{text:?}"
            );
        }
        for text in ["99999999999999999999d", "9223372036854775807d"] {
            assert_eq!(
                TimeBound::parse(text),
                Err(TimeBoundError::TooLong),
                "{text}"
            );
        }
    }

    #[test]
    fn a_duration_reaching_before_the_earliest_date_gives_that_date() {
        let bound = TimeBound::parse("9223372036854775807s").unwrap();
        let now = datetime!(2026-11-26 10:00 UTC);
        assert_eq!(
            bound.instant(now),
            Date::MIN.with_time(Time::MIDNIGHT).assume_utc()
        );
    }

    #[test]
    fn record_times_are_read_as_instants() {
        assert_eq!(
            record_instant("2026-11-26T10:00:00.000Z"),
            Some(datetime!(2026-11-26 10:00 UTC))
        );
        assert_eq!(record_instant("2026-11-26T10:00:00.000Z\r"), None);
    }
}
