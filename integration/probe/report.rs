//! The probe's verdict: what one attack concluded, how its notes add up when
//! it tries several things, and how command-line arguments are read.
//!
//! Classification is deliberately fail-closed. A step counts as refused only
//! when the kernel said no in one of the ways the attack lists (EPERM, EACCES,
//! ENOENT for a path that must be invisible, ENOSYS from seccomp, ...). Any
//! other failure is "inconclusive" and reported as `escaped`, so the escape
//! suite fails loudly and a person looks, instead of passing by accident.

use std::fmt;
use std::str::FromStr;

use crate::sys::Errno;

/// The two answers the escape suite understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The attack did not work.
    Blocked,
    /// The attack worked, or could not be judged (fail closed).
    Escaped,
}

impl Outcome {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Blocked => "blocked",
            Outcome::Escaped => "escaped",
        }
    }

    /// The process exit code: 0 when blocked, 1 when escaped.
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Blocked => 0,
            Outcome::Escaped => 1,
        }
    }
}

/// What one attack concluded.
pub struct Verdict {
    /// Blocked or escaped.
    pub outcome: Outcome,
    /// Which calls returned what.
    pub detail: String,
    /// Something to do after the report is printed (core-dump crashes here).
    pub then: Option<fn()>,
}

impl Verdict {
    /// The attack was refused.
    pub fn blocked(detail: impl Into<String>) -> Self {
        Verdict {
            outcome: Outcome::Blocked,
            detail: detail.into(),
            then: None,
        }
    }

    /// The attack worked.
    pub fn escaped(detail: impl Into<String>) -> Self {
        Verdict {
            outcome: Outcome::Escaped,
            detail: detail.into(),
            then: None,
        }
    }

    /// The attack failed for a reason that is not a kernel refusal.
    pub fn unclear(detail: impl fmt::Display) -> Self {
        Verdict::escaped(format!("inconclusive (not a kernel refusal): {detail}"))
    }

    /// Runs `then` after the report has been printed.
    pub fn and_then(mut self, then: fn()) -> Self {
        self.then = Some(then);
        self
    }
}

/// Notes from an attack that tries several things; it escaped if any one did.
#[derive(Default)]
pub struct Findings {
    notes: Vec<String>,
    escaped: bool,
    unclear: bool,
}

impl Findings {
    /// No notes yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// One attempt was refused.
    pub fn refused(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// Information that does not change the verdict.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// One attempt worked.
    pub fn escaped(&mut self, note: impl Into<String>) {
        self.escaped = true;
        self.notes.push(note.into());
    }

    /// One attempt failed for a reason that is not a refusal.
    pub fn unclear(&mut self, note: impl fmt::Display) {
        self.unclear = true;
        self.notes.push(format!("{note} (not a refusal)"));
    }

    /// Records `what` = success text, or `what`: errno, refused when the errno
    /// is one of `refusals`.
    pub fn check(&mut self, what: &str, result: Result<String, Errno>, refusals: &[i32]) {
        match result {
            Ok(text) => self.escaped(format!("{what} = {text}")),
            Err(e) if e.is_one_of(refusals) => self.refused(format!("{what}: {e}")),
            Err(e) => self.unclear(format!("{what}: {e}")),
        }
    }

    /// Whether nothing has been noted yet.
    pub fn is_empty(&self) -> bool {
        self.notes.is_empty()
    }

    /// Whether anything escaped so far.
    pub fn any_escaped(&self) -> bool {
        self.escaped
    }

    /// The combined verdict.
    pub fn verdict(self) -> Verdict {
        let detail = self.notes.join("; ");
        if self.escaped {
            Verdict::escaped(detail)
        } else if self.unclear {
            Verdict::escaped(format!("inconclusive: {detail}"))
        } else {
            Verdict::blocked(detail)
        }
    }
}

/// Judges a single call: success escapes, a listed errno is a refusal.
pub fn judge(what: &str, result: Result<String, Errno>, refusals: &[i32]) -> Verdict {
    let mut findings = Findings::new();
    findings.check(what, result, refusals);
    findings.verdict()
}

/// A bad command line (exit 2).
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The arguments after the attack name.
pub struct Args<'a> {
    items: &'a [String],
}

impl<'a> Args<'a> {
    /// Wraps the arguments.
    pub fn new(items: &'a [String]) -> Self {
        Args { items }
    }

    /// Argument `index`, which must be present.
    pub fn required(&self, index: usize, what: &str) -> Result<&'a str, UsageError> {
        self.optional(index)
            .ok_or_else(|| UsageError(format!("missing argument {} ({what})", index + 1)))
    }

    /// Argument `index`, if given.
    pub fn optional(&self, index: usize) -> Option<&'a str> {
        self.items.get(index).map(String::as_str)
    }

    /// Argument `index` parsed as `T`, or `default` when absent.
    pub fn parsed_or<T: FromStr>(
        &self,
        index: usize,
        what: &str,
        default: T,
    ) -> Result<T, UsageError> {
        match self.optional(index) {
            None => Ok(default),
            Some(text) => parse(text, what),
        }
    }

    /// Argument `index` parsed as `T`, which must be present.
    pub fn parsed<T: FromStr>(&self, index: usize, what: &str) -> Result<T, UsageError> {
        parse(self.required(index, what)?, what)
    }

    /// Every argument from `index` on.
    pub fn rest(&self, index: usize) -> &'a [String] {
        self.items.get(index..).unwrap_or(&[])
    }

    /// Refuses more than `max` arguments.
    pub fn at_most(&self, max: usize) -> Result<(), UsageError> {
        if self.items.len() > max {
            return Err(UsageError(format!(
                "too many arguments: expected at most {max}, got {}",
                self.items.len()
            )));
        }
        Ok(())
    }
}

fn parse<T: FromStr>(text: &str, what: &str) -> Result<T, UsageError> {
    text.parse()
        .map_err(|_| UsageError(format!("invalid {what}: {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_errno_is_a_refusal_and_blocks() {
        let verdict = judge("open(/x)", Err(Errno(libc::EACCES)), &[libc::EACCES]);
        assert_eq!(verdict.outcome, Outcome::Blocked);
        assert_eq!(verdict.detail, "open(/x): EACCES");
    }

    #[test]
    fn an_unlisted_errno_is_inconclusive_and_fails_closed() {
        let verdict = judge("open(/x)", Err(Errno(libc::EIO)), &[libc::EACCES]);
        assert_eq!(verdict.outcome, Outcome::Escaped);
        assert!(
            verdict.detail.starts_with("inconclusive"),
            "{}",
            verdict.detail
        );
    }

    #[test]
    fn one_escape_among_refusals_escapes() {
        let mut findings = Findings::new();
        findings.check("a", Err(Errno(libc::EPERM)), &[libc::EPERM]);
        findings.check("b", Ok("fd 3".into()), &[libc::EPERM]);
        let verdict = findings.verdict();
        assert_eq!(verdict.outcome, Outcome::Escaped);
        assert_eq!(verdict.detail, "a: EPERM; b = fd 3");
    }

    #[test]
    fn notes_alone_do_not_escape() {
        let mut findings = Findings::new();
        findings.note("getpgrp() = 7");
        assert_eq!(findings.verdict().outcome, Outcome::Blocked);
    }

    #[test]
    fn arguments_are_checked() {
        let items = vec!["12".to_string(), "x".to_string()];
        let args = Args::new(&items);
        assert_eq!(args.parsed::<u32>(0, "PID").ok(), Some(12));
        assert!(args.parsed::<u32>(1, "PID").is_err());
        assert!(args.required(2, "PATH").is_err());
        assert_eq!(args.parsed_or(2, "N", 5u32).ok(), Some(5));
        assert!(args.at_most(1).is_err());
    }
}
