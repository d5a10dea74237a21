//! What any command ends in — a spawn, a check, an audit query: a
//! [`Success`] with its data and exit code, or a [`Failure`] with its kind,
//! message and details. The CLI prints them; the daemon turns them into
//! JSON-RPC answers ([`crate::rpc`]). It names no other module of the
//! crate, so every layer may use it.

use serde::Serialize;
use serde_json::Value;

/// Why a command failed: the one fact its exit code
/// ([`FailureKind::exit_code`]) and, over the daemon's socket, its JSON-RPC
/// code (computed by the daemon's protocol module) derive from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The command line or the call is malformed.
    Usage,
    /// The gate refused the request (a denial).
    Denied,
    /// A config or manifest problem.
    Config,
    /// A credential binding is missing or cannot be read.
    Credential,
    /// A kernel layer is missing or the sandbox's setup failed: nothing ran.
    SandboxUnavailable,
    /// The audit log cannot be written: nothing ran (or was recorded).
    AuditUnavailable,
    /// The sandbox was lost while its program ran (its spawner died).
    Lost,
    /// The daemon cannot be reached, is overloaded, or cannot start.
    DaemonUnavailable,
    /// A connector, operation, file or handle that does not exist.
    NotFound,
    /// Something that should not happen.
    Internal,
}

impl FailureKind {
    /// The process exit code (docs/cli.md, "Exit codes").
    pub fn exit_code(self) -> i32 {
        match self {
            FailureKind::Usage => 2,
            FailureKind::Denied => 3,
            FailureKind::Config | FailureKind::Credential => 4,
            FailureKind::SandboxUnavailable
            | FailureKind::AuditUnavailable
            | FailureKind::Lost
            | FailureKind::DaemonUnavailable => 5,
            FailureKind::NotFound => 6,
            FailureKind::Internal => 10,
        }
    }
}

/// A command that failed, with everything needed to report it.
#[derive(Debug)]
pub struct Failure {
    /// Why.
    pub kind: FailureKind,
    /// One line (or a few) for humans.
    pub message: String,
    /// Structured details (the denial object, manifest problems, …).
    pub details: Option<Value>,
}

impl Failure {
    /// A failure of `kind`.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: message.into(),
            details: None,
        }
    }

    /// The process exit code.
    pub fn exit(&self) -> i32 {
        self.kind.exit_code()
    }

    /// Usage error.
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(FailureKind::Usage, message)
    }

    /// Config or manifest problem.
    pub fn config(message: impl Into<String>) -> Failure {
        Failure::new(FailureKind::Config, message)
    }

    /// Not found.
    pub fn not_found(message: impl Into<String>) -> Failure {
        Failure::new(FailureKind::NotFound, message)
    }

    /// A kernel layer missing or the sandbox setup failing.
    pub fn sandbox_unavailable(message: impl Into<String>) -> Failure {
        Failure::new(FailureKind::SandboxUnavailable, message)
    }

    /// The audit log cannot be written.
    pub fn audit_unavailable(message: impl Into<String>) -> Failure {
        Failure::new(FailureKind::AuditUnavailable, message)
    }

    /// The sandbox was lost while its program ran.
    pub fn lost(message: impl Into<String>) -> Failure {
        Failure::new(FailureKind::Lost, message)
    }

    /// Something that should not happen.
    pub fn internal(message: impl Into<String>) -> Failure {
        Failure::new(FailureKind::Internal, message)
    }

    /// Not found when `e` says so, else a failure of `otherwise`.
    pub fn from_io(
        e: &std::io::Error,
        otherwise: FailureKind,
        message: impl Into<String>,
    ) -> Failure {
        let kind = match e.kind() {
            std::io::ErrorKind::NotFound => FailureKind::NotFound,
            _ => otherwise,
        };
        Failure::new(kind, message)
    }

    /// Attaches structured details.
    pub fn with_details(mut self, details: impl Serialize) -> Failure {
        self.details = serde_json::to_value(details).ok();
        self
    }
}

/// What a successful command produced.
#[derive(Debug)]
pub(crate) struct Success {
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
    pub(crate) fn new(data: impl Serialize, human: impl Into<String>) -> Success {
        Success {
            data: serde_json::to_value(data).unwrap_or(Value::Null),
            human: human.into(),
            exit: 0,
            keep_ok: false,
        }
    }
}
