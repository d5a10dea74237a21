//! The audit records of a run: the denial written before a refusal is
//! returned, and the exit record written when the sandbox is gone (or its
//! setup failed, or it was lost); and opening the log itself. An exit record
//! that cannot be written is a [`Notice`] as well as part of the result.

use serde_json::json;

use super::notice::{Notice, OnNotice};
use super::outcome::denial_failure;
use super::report::Concluded;
use crate::audit::events::{self, Actor};
use crate::audit::{AuditError, AuditLog, Kind, Unsynced};
use crate::failure::Failure;
use crate::policy::Caller;

/// One spawn's audit trail: the log, the caller every record names, and who
/// is told when an exit record cannot be written (the result or failure is
/// returned all the same).
pub(super) struct SpawnAudit<'r> {
    pub(super) log: &'r AuditLog,
    pub(super) caller: &'r Caller,
    pub(super) on_notice: OnNotice<'r>,
}

impl SpawnAudit<'_> {
    /// Records a refusal and returns it as the failure to report (or the audit
    /// failure, when the refusal could not be recorded).
    pub(super) fn record_denial(
        &self,
        mut denial: Box<crate::policy::Denial>,
        request: &crate::policy::Request,
    ) -> Failure {
        let op = match &request.kind {
            crate::policy::RequestKind::Op { name, .. } => Some(name.as_str()),
            crate::policy::RequestKind::Raw { .. } => None,
        };
        crate::metrics::denied(denial.reason.as_str());
        let event = events::denial(&denial, self.caller, op);
        match self.log.append(Kind::Denial, None, event) {
            Ok(recorded) => {
                tracing::info!(audit_id = %recorded.audit_id, connector = %denial.connector, reason = denial.reason.as_str(), "spawn denied");
                denial.audit_id = Some(recorded.audit_id);
                denial_failure(&denial)
            }
            Err(e) => Failure::audit_unavailable(format!("audit unavailable: {e}; the request was refused, and the refusal could not be recorded")),
        }
    }

    /// An allowed spawn that could not start (a missing kernel layer, a bad
    /// scope, …) is still on record: its decision, and an exit saying why
    /// nothing ran. Returns the failure to report.
    pub(super) fn record_unstarted(
        &self,
        plan: &crate::plan::SpawnPlan,
        failure: Failure,
    ) -> Failure {
        let planned = json!({ "not_started": failure.message });
        match self.log.append(
            Kind::Decision,
            None,
            events::decision(plan, self.caller, planned),
        ) {
            Ok(decided) => self.record_failed_exit(&decided.audit_id, "setup_failed", failure),
            Err(e) => Failure::audit_unavailable(format!(
                "audit unavailable: {e}; and nothing was run: {}",
                failure.message
            )),
        }
    }

    /// The exit record of a spawn that failed (`key`: `setup_failed`, or
    /// `failed` for a sandbox lost while its program ran), durable; returns the
    /// failure to report.
    pub(super) fn record_failed_exit(
        &self,
        audit_id: &str,
        key: &str,
        failure: Failure,
    ) -> Failure {
        match self.record_exit(audit_id, Err((key, failure))) {
            Err(f) => f,
            Ok(_) => Failure::internal("a failed spawn's exit record reported success"),
        }
    }

    /// Writes the exit record of a run (or of its failed setup), makes it
    /// durable and links it to the result.
    fn record_exit(
        &self,
        audit_id: &str,
        reported: Result<Concluded, (&str, Failure)>,
    ) -> Result<Concluded, Failure> {
        let (result, written) = self.write_exit(audit_id, reported, None);
        match (result, written.map(Unsynced::commit)) {
            (Ok(mut s), Some(Err(e))) => {
                (self.on_notice)(exit_record_lost(&mut s, &e));
                Ok(s)
            }
            (Err(f), Some(Err(e))) => {
                (self.on_notice)(Notice::ExitRecordAlsoLost {
                    error: e.to_string(),
                });
                Err(f)
            }
            (result, _) => result,
        }
    }

    /// Writes the exit record of a run and links it to the result, without
    /// waiting for the disk: the record is in the log, chained, and durable once
    /// the returned [`Unsynced`] is committed (`None`: the write itself failed,
    /// and the result says so). It names the spawn's caller (with its label)
    /// and `interrupter`, the daemon peer that ended the program, if one did.
    pub(super) fn write_exit(
        &self,
        audit_id: &str,
        reported: Result<Concluded, (&str, Failure)>,
        interrupter: Option<&Actor>,
    ) -> (Result<Concluded, Failure>, Option<Unsynced>) {
        let mut body = match &reported {
            Ok(c) => events::exit(&c.result),
            Err((key, f)) => {
                let mut m = serde_json::Map::new();
                m.insert((*key).to_string(), json!(f.message));
                m
            }
        };
        events::ended_by(&mut body, self.caller, interrupter);
        tracing::info!(audit_id, exit_code = ?body.get("exit_code"), signal = ?body.get("signal"), "spawn ended");
        let written = self.log.write(Kind::Exit, Some(audit_id), body);
        match (reported, written) {
            (Ok(mut c), Ok(w)) => {
                c.result.audit_id = Some(audit_id.to_string());
                (Ok(c), Some(w))
            }
            (Ok(mut c), Err(e)) => {
                c.result.audit_id = Some(audit_id.to_string());
                (self.on_notice)(exit_record_lost(&mut c, &e));
                (Ok(c), None)
            }
            (Err((_, f)), Ok(w)) => (Err(f), Some(w)),
            (Err((_, f)), Err(e)) => {
                (self.on_notice)(Notice::ExitRecordAlsoLost {
                    error: e.to_string(),
                });
                (Err(f), None)
            }
        }
    }
}

/// Marks a result whose exit record could not be written or made durable:
/// exit 5 and `audit_error`, whatever the program did. Returns the notice
/// that says so.
pub(super) fn exit_record_lost(c: &mut Concluded, e: &AuditError) -> Notice {
    c.result.audit_error = Some(e.to_string());
    c.exit = 5;
    c.keep_ok = false;
    Notice::ExitRecordLost {
        error: e.to_string(),
    }
}

/// The audit log from the config; without one nothing runs.
pub(crate) fn open_audit(config: &crate::config::Config) -> Result<AuditLog, Failure> {
    let path = config.audit.path.as_deref().ok_or_else(|| Failure::audit_unavailable("audit unavailable: no audit location (set [audit] path in the config); nothing was run"))?;
    let log = AuditLog::open(path)
        .map_err(|e| {
            Failure::audit_unavailable(format!("audit unavailable: {e}; nothing was run (point `[audit] path` in the config, SPAWND_CONFIG or --config, or XDG_STATE_HOME, at a directory this user can write)"))
        })?
        .with_rotation(config.audit.rotate_bytes)
        .with_retention(config.audit.keep_rotated);
    let log = match &config.audit.forward {
        Some(service) => log.with_forward(crate::audit::forward::Forwarder::new(
            *service,
            config.audit.forward_socket.as_deref(),
        )),
        None => log,
    };
    let log = log.with_previous_keys(load_previous_audit_keys(config)?);
    Ok(match load_audit_key(config)? {
        Some(key) => log.with_key(key),
        None => log,
    })
}

/// The retired HMAC keys (`[audit] previous_hmac_key_files`), each a file
/// owned by spawnd's user and readable by no one else. They only verify
/// records sealed before a rotation and seal the rotation note, so any
/// length is taken (keys made before the 32-byte minimum included).
pub(crate) fn load_previous_audit_keys(
    config: &crate::config::Config,
) -> Result<Vec<Vec<u8>>, Failure> {
    config
        .audit
        .previous_hmac_key_files
        .iter()
        .map(|path| {
            crate::vault::read_secret(&crate::config::CredentialSource::File(path.clone()))
                .map(|secret| secret.expose().to_vec())
                .map_err(|e| {
                    Failure::audit_unavailable(format!(
                        "audit unavailable: the retired HMAC key in [audit] previous_hmac_key_files: {e}"
                    ))
                })
        })
        .collect()
}

/// The operator's HMAC key for the audit chain (`[audit] hmac_key_file`), if set:
/// a file owned by spawnd's user and readable by no one else.
pub(crate) fn load_audit_key(config: &crate::config::Config) -> Result<Option<Vec<u8>>, Failure> {
    let Some(path) = &config.audit.hmac_key_file else {
        return Ok(None);
    };
    let secret = crate::vault::read_secret(&crate::config::CredentialSource::File(path.clone()))
        .map_err(|e| Failure::audit_unavailable(format!("audit unavailable: the HMAC key: {e}")))?;
    let key = secret.expose();
    if key.len() < MIN_AUDIT_KEY_BYTES {
        return Err(Failure::audit_unavailable(format!(
            "audit unavailable: the HMAC key in {} is {} bytes, fewer than the {MIN_AUDIT_KEY_BYTES} a key needs; make one with `spawnd audit keygen {}`",
            path.display(),
            key.len(),
            path.display()
        )));
    }
    Ok(Some(key.to_vec()))
}

/// The shortest HMAC key spawnd takes (`spawnd audit keygen` writes 64
/// hex digits: 256 bits).
pub(super) const MIN_AUDIT_KEY_BYTES: usize = 32;
