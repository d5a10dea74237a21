//! What the pipeline has to say about a spawn besides its result: a scope
//! left out, output cut at its cap, a limit that ended the program, an exit
//! record that could not be written. Nothing here prints: each [`Notice`] is
//! handed to the front end as it arises (the `on_notice` of an
//! [`super::Spawn`], or the callback given to [`super::conclude`]), which
//! shows it to a person or logs it.

use std::fmt;
use std::path::PathBuf;

use serde_json::Value;

use crate::printable::printable;

/// Told each [`Notice`] as it arises.
pub(crate) type OnNotice<'a> = &'a dyn Fn(Notice);

/// One thing the pipeline tells its front end. Its [`fmt::Display`] is the
/// sentence for a person, outside text escaped for a terminal.
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// A read scope, or a unix socket the manifest grants, does not exist on
    /// the host: the sandbox is built without it.
    LeftOut {
        /// The path, as the spec expanded it.
        path: PathBuf,
        /// Whether the path is one of the plan's unix sockets.
        unix_socket: bool,
    },
    /// A stream went past its cap: only the first bytes were kept.
    Truncated {
        /// `stdout` or `stderr`.
        stream: &'static str,
        /// The bytes kept, as the result's `data` gives them.
        kept: Value,
        /// The bytes the program wrote, as the result's `data` gives them.
        total: Value,
    },
    /// The wall time ran out and the sandbox was killed.
    TimedOut {
        /// The wall time in ms, as the result's `data` gives it.
        wall_time_ms: Value,
    },
    /// The memory limit was reached and the kernel killed the program.
    OutOfMemory {
        /// The limit in bytes, as the result's `data` gives it.
        max_memory_bytes: Value,
    },
    /// The program ran, and its exit record could not be written or made
    /// durable (the result says so: `audit_error`, exit 5).
    ExitRecordLost {
        /// Why.
        error: String,
    },
    /// The spawn failed, and the exit record saying so could not be written
    /// either.
    ExitRecordAlsoLost {
        /// Why.
        error: String,
    },
    /// The program failed saying an allocation was refused, under a memory
    /// limit the rlimits enforce (they refuse allocations rather than kill).
    MemoryRefused {
        /// The limit in bytes, as the result's `data` gives it.
        max_memory_bytes: Value,
    },
    /// The program failed with what reads like a wall of the sandbox
    /// (a missing file, a refused permission), and the run was not traced.
    TryTrace,
    /// spawnd refused the program's network egress to one destination
    /// (its relay, or its DNS stub), this many times.
    NetworkRefused {
        /// `host:port`, or a DNS name.
        what: String,
        /// How many attempts.
        count: u64,
        /// The refusal's reason (docs/network.md).
        reason: String,
        /// What would grant it.
        grant: String,
    },
    /// Under `on_violation = "terminate"`, a refused egress ended the
    /// sandbox.
    NetworkViolation {
        /// What was requested (`network:HOST:PORT`, `network:NAME`).
        requested: String,
        /// The refusal's reason.
        reason: String,
    },
    /// A traced run's program met a wall: the layer, the call and path,
    /// what would move it ([`super::describe_refusal`]).
    Refused {
        /// The sentence.
        line: String,
    },
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::LeftOut { path, unix_socket } => {
                let what = match unix_socket {
                    true => "unix socket",
                    false => "fs_read scope",
                };
                let path = path.display().to_string();
                write!(f, "{what} {} does not exist; left out", printable(&path))
            }
            Notice::Truncated {
                stream,
                kept,
                total,
            } => write!(
                f,
                "{stream} truncated: kept {kept} of {total} bytes (cap from the manifest)"
            ),
            Notice::TimedOut { wall_time_ms } => write!(
                f,
                "wall time of {wall_time_ms} ms exceeded; the sandbox was killed"
            ),
            Notice::OutOfMemory { max_memory_bytes } => write!(
                f,
                "the memory limit of {max_memory_bytes} bytes was reached; the kernel killed the program"
            ),
            Notice::ExitRecordLost { error } => write!(
                f,
                "the exit record could not be written: {}",
                printable(error)
            ),
            Notice::ExitRecordAlsoLost { error } => write!(
                f,
                "the exit record could not be written either: {}",
                printable(error)
            ),
            Notice::Refused { line } => write!(f, "{}", printable(line)),
            Notice::NetworkViolation { requested, reason } => write!(
                f,
                "denied ({}): {} is not granted, and the manifest says on_violation = \"terminate\": the sandbox was killed",
                printable(reason),
                printable(requested)
            ),
            Notice::NetworkRefused {
                what,
                count,
                reason,
                grant,
            } => write!(
                f,
                "network: {} refused \u{d7}{count} ({}; {})",
                printable(what),
                printable(reason),
                printable(grant)
            ),
            Notice::MemoryRefused { max_memory_bytes } => write!(
                f,
                "the program reports an allocation refused: the memory limit is {max_memory_bytes} bytes (max_memory_bytes in the manifest's limits, up to the operator's ceiling)"
            ),
            Notice::TryTrace => write!(
                f,
                "if the sandbox refused something the program needed, `spawnd run --trace` (in-process) names each refusal, its layer and the manifest key that grants it"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_notice_reads_as_the_sentence_spawnd_run_prints() {
        let cases = [
            (
                Notice::LeftOut {
                    path: "/srv/gone".into(),
                    unix_socket: false,
                },
                "fs_read scope /srv/gone does not exist; left out",
            ),
            (
                Notice::LeftOut {
                    path: "/run/x.sock".into(),
                    unix_socket: true,
                },
                "unix socket /run/x.sock does not exist; left out",
            ),
            (
                Notice::Truncated {
                    stream: "stderr",
                    kept: json!(10),
                    total: json!(25),
                },
                "stderr truncated: kept 10 of 25 bytes (cap from the manifest)",
            ),
            (
                Notice::TimedOut {
                    wall_time_ms: json!(500),
                },
                "wall time of 500 ms exceeded; the sandbox was killed",
            ),
            (
                Notice::OutOfMemory {
                    max_memory_bytes: json!(1024),
                },
                "the memory limit of 1024 bytes was reached; the kernel killed the program",
            ),
            (
                Notice::ExitRecordLost {
                    error: "No space left".into(),
                },
                "the exit record could not be written: No space left",
            ),
            (
                Notice::ExitRecordAlsoLost {
                    error: "No space left".into(),
                },
                "the exit record could not be written either: No space left",
            ),
            (
                Notice::NetworkRefused {
                    what: "evil.example.org:443".into(),
                    count: 3,
                    reason: "not_granted".into(),
                    grant: "grant \"evil.example.org:443\" in the manifest's network".into(),
                },
                "network: evil.example.org:443 refused \u{d7}3 (not_granted; grant \"evil.example.org:443\" in the manifest's network)",
            ),
        ];
        for (notice, text) in cases {
            assert_eq!(notice.to_string(), text);
        }
    }

    #[test]
    fn outside_text_in_a_notice_cannot_add_lines_or_escapes() {
        let notice = Notice::ExitRecordLost {
            error: "x\n\u{1b}[2Jspawnd: fine".into(),
        };
        let text = notice.to_string();
        assert!(!text.chars().any(char::is_control), "{text}");
    }
}
