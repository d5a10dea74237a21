//! What one spawn (or any command) ends in: a [`Success`] with its data and
//! exit code, or a [`Failure`] with its exit code, message and details. The
//! CLI prints them (`crate::cli::output`); the daemon turns them into
//! JSON-RPC answers.

use serde::Serialize;
use serde_json::Value;

/// A command that failed, with everything needed to report it.
#[derive(Debug)]
pub struct Failure {
    /// Process exit code (SPEC §10).
    pub exit: i32,
    /// One line (or a few) for humans.
    pub message: String,
    /// Structured details (the denial object, manifest problems, …).
    pub details: Option<Value>,
}

impl Failure {
    /// A failure with exit code `exit`.
    pub fn new(exit: i32, message: impl Into<String>) -> Failure {
        Failure {
            exit,
            message: message.into(),
            details: None,
        }
    }

    /// Usage error (2).
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(2, message)
    }

    /// Config, manifest or credential problem (4).
    pub fn config(message: impl Into<String>) -> Failure {
        Failure::new(4, message)
    }

    /// Not found (6).
    pub fn not_found(message: impl Into<String>) -> Failure {
        Failure::new(6, message)
    }

    /// Attaches structured details.
    pub fn with_details(mut self, details: impl Serialize) -> Failure {
        self.details = serde_json::to_value(details).ok();
        self
    }
}

/// What a successful command produced.
#[derive(Debug)]
pub struct Success {
    /// The envelope's `data`.
    pub data: Value,
    /// What a human reads on stdout.
    pub human: String,
    /// Exit code (0 unless the command reports a state, like `health`).
    pub exit: i32,
    /// `ok: true` even with a non-zero exit (`run`: the child ran, whatever its code).
    pub keep_ok: bool,
}

impl Success {
    /// Exit 0 with data and text.
    pub fn new(data: impl Serialize, human: impl Into<String>) -> Success {
        Success {
            data: serde_json::to_value(data).unwrap_or(Value::Null),
            human: human.into(),
            exit: 0,
            keep_ok: false,
        }
    }
}

/// A denial as a failure: exit code, a message naming the reason, the denial object as details.
pub fn denial_failure(denial: &crate::policy::Denial) -> Failure {
    let mut message = format!("denied ({}): {}", denial.reason.as_str(), denial.message);
    message.push_str(&format!("\n  requested: {}", denial.requested));
    if !denial.granted.is_empty() {
        message.push_str(&format!("\n  granted:   {}", denial.granted.join(", ")));
    }
    Failure::new(denial.exit_code(), message).with_details(denial)
}
