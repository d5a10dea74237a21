//! The gate's answer: a `SpawnPlan`, or a `Denial` carrying the full denial
//! object of docs/cli.md. Messages name what was refused and how to get it allowed,
//! and never contain a value the caller supplied for a placeholder or env key.

use serde::Serialize;

use super::reason::Reason;
use crate::plan::SpawnPlan;

/// A caller-supplied string as it may appear in a denial (program, cwd, op
/// name, arg or env key — never a placeholder or env value): control
/// characters escaped ([`crate::printable`]), at most 200 characters, so it
/// cannot forge lines in a terminal or a log, nor grow a record.
pub(super) fn shown(text: &str) -> String {
    let head: String = text.chars().take(201).collect();
    let escaped = crate::printable::printable(&head);
    match escaped.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &escaped[..cut]),
        None => escaped.into_owned(),
    }
}

/// Allowed with a plan, or denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The request stays inside the manifest.
    Allowed(Box<SpawnPlan>),
    /// It does not.
    Denied(Box<Denial>),
}

impl Decision {
    /// The denial, if denied.
    pub fn denial(&self) -> Option<&Denial> {
        match self {
            Decision::Denied(d) => Some(d),
            Decision::Allowed(_) => None,
        }
    }

    /// The plan, if allowed.
    pub fn plan(&self) -> Option<&SpawnPlan> {
        match self {
            Decision::Allowed(p) => Some(p),
            Decision::Denied(_) => None,
        }
    }
}

/// The denial object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Denial {
    /// `capability_denied`, or the credential reason itself.
    pub class: &'static str,
    /// Always `sandbox`.
    pub boundary: &'static str,
    /// Which boundary refused (`connector_manifest`, `envelope`, `action`, `vault`, `caller`).
    pub boundary_detail: &'static str,
    /// The precise reason.
    pub reason: Reason,
    /// The connector FQN as requested.
    pub connector: String,
    /// What was asked for.
    pub requested: String,
    /// What the manifest or operator grants instead.
    pub granted: Vec<String>,
    /// The placeholder concerned, as `{name}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<String>,
    /// A sentence for humans: what was refused and how to fix it.
    pub message: String,
    /// The audit record of this denial (absent for `check`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_id: Option<String>,
    /// The program file does not exist (exit code 6 rather than 3).
    #[serde(skip)]
    pub missing_program: bool,
    /// The version of the connector the request was decided under, when
    /// one was chosen (for the audit record, not the wire).
    #[serde(skip)]
    pub connector_version: Option<String>,
    /// That connector's provenance, when it is installed.
    #[serde(skip)]
    pub provenance: Option<crate::plan::Provenance>,
}

impl Denial {
    /// A denial for `reason` with the given request, grant and message.
    pub fn new(
        reason: Reason,
        connector: &str,
        requested: impl Into<String>,
        granted: Vec<String>,
        message: impl Into<String>,
    ) -> Box<Denial> {
        Box::new(Denial {
            class: reason.class(),
            boundary: "sandbox",
            boundary_detail: reason.info().detail,
            reason,
            connector: connector.to_string(),
            requested: requested.into(),
            granted,
            placeholder: None,
            message: message.into(),
            audit_id: None,
            missing_program: false,
            connector_version: None,
            provenance: None,
        })
    }

    /// The same denial naming a placeholder.
    pub fn with_placeholder(mut self: Box<Self>, name: &str) -> Box<Denial> {
        self.placeholder = Some(format!("{{{name}}}"));
        self
    }

    /// The process exit code for this denial (docs/cli.md).
    pub fn exit_code(&self) -> i32 {
        match self.reason {
            Reason::ConnectorUnknown | Reason::OpUnknown => 6,
            Reason::ProgramNotRegular if self.missing_program => 6,
            Reason::BindingRequired
            | Reason::InvalidCredentials
            | Reason::WorkspaceUnset
            | Reason::ConnectorDirUnknown => 4,
            _ => 3,
        }
    }
}
