//! The one table of denial reasons (docs/cli.md): each reason's wire name, its
//! `boundary_detail`, its error class and when it is given. The reason table of
//! docs/cli.md mirrors this one (tests/docs_in_sync.rs keeps the two in step),
//! and `spawnd capabilities --json` prints it.

use serde::Serialize;

/// Why the gate refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// No manifest with this FQN is loaded.
    ConnectorUnknown,
    /// The operator disabled the connector (`[[disable]]`).
    ConnectorDisabled,
    /// The peer may not act for this connector (`[[access]]`).
    CallerNotAllowed,
    /// Several versions of the connector are served and the request pins
    /// none.
    ConnectorVersionRequired,
    /// No served version of the connector has the version or content hash
    /// the request pins.
    ConnectorPinMismatch,
    /// The installed connector's stored bytes no longer have the content
    /// hash it was installed and loaded with.
    ConnectorHashMismatch,
    /// The action's capability subset does not permit this spawn.
    ActionDenied,
    /// The operation's tier is above the invocation's `--mode`.
    ModeInsufficient,
    /// No such operation.
    OpUnknown,
    /// A placeholder has no value (or an optional group is half filled).
    PlaceholderMissing,
    /// An arg names no placeholder of the operation.
    ArgUnknown,
    /// A value is empty, has a NUL, is too long, or fails `pattern`/`values`/path rules.
    ValueInvalid,
    /// A value that begins a token starts with `-`.
    OptionInjection,
    /// A raw envelope names a program the manifest does not declare.
    ProgramNotDeclared,
    /// A raw envelope's argv matches no operation of its program.
    ArgvNotDeclared,
    /// The program is missing or not a regular file.
    ProgramNotRegular,
    /// The program is setuid, setgid or carries file capabilities.
    ProgramSetuid,
    /// The program's bytes do not match the pinned hash (or none is pinned and one is required).
    ProgramHashMismatch,
    /// An env key outside `env_passthrough`.
    EnvNotDeclared,
    /// A credential, fixed or loader key supplied by the caller.
    EnvReserved,
    /// The cwd lies outside the allowed scopes.
    CwdOutsideScope,
    /// A credential key has no operator binding.
    BindingRequired,
    /// The bound credential could not be read.
    InvalidCredentials,
    /// The operation has network grants and the operator disabled them.
    NetworkDisabled,
    /// The manifest's scopes or cwd are anchored at `{workspace}` and no
    /// workspace was named.
    WorkspaceUnset,
    /// The manifest names a path at `{connector}` and was not loaded from a
    /// file whose directory spawnd knows.
    ConnectorDirUnknown,
}

/// One row of the reason table.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ReasonInfo {
    /// The reason.
    pub reason: Reason,
    /// Its `boundary_detail`.
    pub detail: &'static str,
    /// When it is given.
    pub when: &'static str,
}

use Reason::*;

/// Every reason, in gate order.
pub const REASONS: &[ReasonInfo] = &[
    ReasonInfo { reason: ConnectorUnknown, detail: "connector_manifest", when: "no manifest with this FQN is loaded" },
    ReasonInfo { reason: ConnectorDisabled, detail: "connector_manifest", when: "the operator disabled it with [[disable]]" },
    ReasonInfo { reason: CallerNotAllowed, detail: "caller", when: "the peer's uid/gid is not in [[access]] for this connector" },
    ReasonInfo { reason: ConnectorVersionRequired, detail: "action", when: "several versions of the connector are served and the request pins neither `version` nor `hash`" },
    ReasonInfo { reason: ConnectorPinMismatch, detail: "action", when: "no served version of the connector has the `version` and `hash` the request pins" },
    ReasonInfo { reason: ConnectorHashMismatch, detail: "connector_manifest", when: "an installed connector's stored files (manifest or shipped program) no longer hash to its content hash" },
    ReasonInfo { reason: ActionDenied, detail: "action", when: "the action subset permits neither `spawn` nor `spawn:<op>`" },
    ReasonInfo { reason: OpUnknown, detail: "connector_manifest", when: "no operation of that name" },
    ReasonInfo { reason: ModeInsufficient, detail: "action", when: "the operation's tier is above the invocation's --mode" },
    ReasonInfo { reason: ArgUnknown, detail: "envelope", when: "an arg names no placeholder of the operation" },
    ReasonInfo { reason: PlaceholderMissing, detail: "envelope", when: "a placeholder has no value and no default, or an optional group is partly filled" },
    ReasonInfo { reason: ValueInvalid, detail: "envelope", when: "a value is empty, holds a NUL, is too long, fails `pattern`/`values`, or a path value has `..` or lies outside the scopes; also an empty program or argv" },
    ReasonInfo { reason: OptionInjection, detail: "envelope", when: "a value that begins a token starts with `-` and the param has no allow_dash" },
    ReasonInfo { reason: ProgramNotDeclared, detail: "connector_manifest", when: "a raw envelope's program is not in `programs`" },
    ReasonInfo { reason: ArgvNotDeclared, detail: "connector_manifest", when: "a raw envelope's argv matches no operation bound to its program" },
    ReasonInfo { reason: ProgramNotRegular, detail: "connector_manifest", when: "the program file is missing or not a regular file" },
    ReasonInfo { reason: ProgramSetuid, detail: "connector_manifest", when: "the program is setuid, setgid or has file capabilities" },
    ReasonInfo { reason: ProgramHashMismatch, detail: "connector_manifest", when: "the program's sha256 differs from the pinned hash, or the operator requires a pin and there is none" },
    ReasonInfo { reason: EnvNotDeclared, detail: "connector_manifest", when: "an env key outside env_passthrough" },
    ReasonInfo { reason: EnvReserved, detail: "envelope", when: "the caller supplied a credential key, a key fixed by env_set, or a loader/interpreter key" },
    ReasonInfo { reason: CwdOutsideScope, detail: "connector_manifest", when: "the cwd is relative, has `..`, or lies outside fs_read/fs_write (or outside the manifest's cwd)" },
    ReasonInfo { reason: BindingRequired, detail: "vault", when: "a credential_env_key has no [[credentials]] binding" },
    ReasonInfo { reason: InvalidCredentials, detail: "vault", when: "the bound credential could not be read" },
    ReasonInfo { reason: NetworkDisabled, detail: "operator_config", when: "the operation has network grants (those the action subset leaves it) and the operator set [network] enabled = false" },
    ReasonInfo { reason: WorkspaceUnset, detail: "operator_config", when: "a scope or the cwd starts with {workspace}/ and neither spawnd run --workspace nor [sandbox] workspace names one" },
    ReasonInfo { reason: ConnectorDirUnknown, detail: "operator_config", when: "a program, an also_runs file, a scope or the cwd starts with {connector}/ and the manifest was not loaded from a file named by its absolute path" },
];

impl Reason {
    /// The table row for this reason.
    pub fn info(self) -> &'static ReasonInfo {
        REASONS
            .iter()
            .find(|r| r.reason == self)
            .unwrap_or(&REASONS[0])
    }

    /// The wire name, e.g. `option_injection`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectorUnknown => "connector_unknown",
            ConnectorDisabled => "connector_disabled",
            CallerNotAllowed => "caller_not_allowed",
            ConnectorVersionRequired => "connector_version_required",
            ConnectorPinMismatch => "connector_pin_mismatch",
            ConnectorHashMismatch => "connector_hash_mismatch",
            ActionDenied => "action_denied",
            ModeInsufficient => "mode_insufficient",
            OpUnknown => "op_unknown",
            PlaceholderMissing => "placeholder_missing",
            ArgUnknown => "arg_unknown",
            ValueInvalid => "value_invalid",
            OptionInjection => "option_injection",
            ProgramNotDeclared => "program_not_declared",
            ArgvNotDeclared => "argv_not_declared",
            ProgramNotRegular => "program_not_regular",
            ProgramSetuid => "program_setuid",
            ProgramHashMismatch => "program_hash_mismatch",
            EnvNotDeclared => "env_not_declared",
            EnvReserved => "env_reserved",
            CwdOutsideScope => "cwd_outside_scope",
            BindingRequired => "binding_required",
            InvalidCredentials => "invalid_credentials",
            NetworkDisabled => "network_disabled",
            WorkspaceUnset => "workspace_unset",
            ConnectorDirUnknown => "connector_dir_unknown",
        }
    }

    /// The error class: the reason itself for credential problems, else `capability_denied`.
    pub fn class(self) -> &'static str {
        match self {
            BindingRequired | InvalidCredentials => self.as_str(),
            _ => "capability_denied",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_exactly_one_row_and_its_serde_name_is_its_wire_name() {
        for row in REASONS {
            assert_eq!(REASONS.iter().filter(|r| r.reason == row.reason).count(), 1);
            let json = serde_json::to_string(&row.reason).unwrap();
            assert_eq!(json, format!("\"{}\"", row.reason.as_str()));
        }
        assert_eq!(REASONS.len(), 26);
    }

    #[test]
    fn credential_reasons_are_their_own_class() {
        assert_eq!(BindingRequired.class(), "binding_required");
        assert_eq!(OptionInjection.class(), "capability_denied");
    }
}
