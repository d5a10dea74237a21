//! The one place that turns a command's outcome into output and an exit code:
//! human text, or the `{ok, tool, command, data | error, meta}` envelope of the
//! connector CLI contract (docs/cli.md). Human text reaches the terminal with
//! its control characters escaped, line by line ([`printable_lines`]); a
//! command that puts outside text into one line escapes it there
//! ([`crate::printable::printable`]), so that it cannot add lines either.

use serde_json::{json, Value};

pub(crate) use crate::failure::{Failure, Success};

use crate::pipeline::Notice;
use crate::printable::printable_lines;
use crate::spawn_result::SpawnResult;

/// Writes one line to stdout; a closed reader (`spawnd … | head`) is not an error.
pub(crate) fn print_line(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

/// Shows a notice of the spawn pipeline to the person running spawnd: a line
/// on stderr behind `spawnd:`, told apart from the child's streamed output.
pub(crate) fn print_notice(notice: Notice) {
    eprintln!("spawnd: {notice}");
}

/// The error code for an exit code.
pub(crate) fn error_code(exit: i32) -> &'static str {
    match exit {
        2 => "INVALID_USAGE",
        3 => "PERMISSION_DENIED",
        4 => "CONFIG_ERROR",
        5 => "BACKEND_UNAVAILABLE",
        6 => "NOT_FOUND",
        _ => "INTERNAL_ERROR",
    }
}

/// Context every envelope carries.
pub(crate) struct Meta<'a> {
    /// Subcommand path, e.g. `manifest.lint`.
    pub command: &'a str,
    /// The invocation's tier.
    pub mode: &'a str,
    /// When the command started.
    pub started: std::time::Instant,
}

fn meta_json(meta: &Meta) -> Value {
    let timestamp = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    json!({
        "mode": meta.mode,
        "duration_ms": meta.started.elapsed().as_millis() as u64,
        "timestamp": timestamp,
        "version": env!("CARGO_PKG_VERSION"),
    })
}

/// Prints the outcome and returns the exit code.
pub(crate) fn emit(result: Result<Success, Failure>, json_mode: bool, meta: &Meta) -> i32 {
    match result {
        Ok(s) if json_mode => {
            let ok = s.exit == 0 || s.keep_ok;
            let mut envelope = json!({"ok": ok, "tool": "spawnd", "command": meta.command, "data": s.data, "meta": meta_json(meta)});
            if !ok {
                let violation = SpawnResult::from_value(&s.data)
                    .ok()
                    .and_then(|r| r.violation().cloned());
                let message = match &violation {
                    Some(v) => format!("denied ({}): {} is not granted; on_violation = \"terminate\" killed the sandbox", v.reason, v.requested),
                    None => s.human.lines().next().unwrap_or("see data").to_string(),
                };
                let details = violation_details(&s.data);
                envelope["error"] =
                    json!({"code": error_code(s.exit), "message": message, "details": details});
            }
            print_line(&envelope.to_string());
            s.exit
        }
        Ok(s) => {
            if !s.human.is_empty() {
                print_line(&printable_lines(s.human.trim_end()));
            }
            if meta.command == "run" {
                if let Some(why) = run_ended_by_spawnd(&s.data) {
                    eprintln!("{}", own_exit_line(s.exit, why));
                }
            }
            s.exit
        }
        Err(f) if json_mode => {
            let envelope = json!({
                "ok": false,
                "tool": "spawnd",
                "command": meta.command,
                "error": {"code": error_code(f.exit()), "message": f.message, "details": f.details},
                "meta": meta_json(meta),
            });
            print_line(&envelope.to_string());
            f.exit()
        }
        Err(f) => {
            eprintln!("spawnd: {}", printable_lines(f.message.trim_end()));
            if meta.command == "run" {
                eprintln!(
                    "{}",
                    own_exit_line(f.exit(), &error_code(f.exit()).to_ascii_lowercase())
                );
            }
            f.exit()
        }
    }
}

/// Why spawnd, not the program, chose a finished run's exit code: the
/// wall time, or an interruption of spawnd; `None` when the code is the
/// program's own (its exit code, or 128+N after its signal N), or `data` is
/// not a run's result.
fn run_ended_by_spawnd(data: &Value) -> Option<&'static str> {
    let result = SpawnResult::from_value(data).ok()?;
    if result.violation().is_some() {
        Some("permission_denied")
    } else if result.failed_on_refusal == Some(true) {
        Some("network egress refused; --fail-on-refusal")
    } else if result.timed_out {
        Some("timed_out")
    } else if crate::pipeline::interrupting_signal(&result).is_some() {
        Some("interrupted")
    } else if result.interrupted_by.is_some() {
        Some("killed")
    } else {
        None
    }
}

/// A run killed at its first refused egress (`on_violation =
/// "terminate"`): the `capability_denied` the ADR describes, with what was
/// requested and granted and the audit id; null for any other result.
fn violation_details(data: &Value) -> Value {
    let Some(result) = SpawnResult::from_value(data).ok() else {
        return Value::Null;
    };
    let Some(violation) = result.violation() else {
        return Value::Null;
    };
    json!({
        "class": "capability_denied",
        "connector": result.connector,
        "reason": violation.reason,
        "requested": violation.requested,
        "granted": violation.granted,
        "audit_id": result.audit_id,
    })
}

/// The last line of `spawnd run` when the exit code is spawnd's own, not
/// the program's: `spawnd: exit N (why)`, one stable form a CI step can
/// match (docs/cli.md, "Exit codes").
fn own_exit_line(exit: i32, why: &str) -> String {
    format!("spawnd: exit {exit} ({why})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_follow_exit_codes() {
        let table = [
            (2, "INVALID_USAGE"),
            (3, "PERMISSION_DENIED"),
            (4, "CONFIG_ERROR"),
            (5, "BACKEND_UNAVAILABLE"),
            (6, "NOT_FOUND"),
            (10, "INTERNAL_ERROR"),
        ];
        for (exit, code) in table {
            assert_eq!(error_code(exit), code);
        }
    }
}
