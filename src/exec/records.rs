//! The audit records of a run: the denial written before a refusal is
//! returned, and the exit record written when the sandbox is gone (or its
//! setup failed, or it was lost); and opening the log itself.

use serde_json::json;

use super::outcome::{denial_failure, Failure, Success};
use crate::audit::{events, AuditError, AuditLog, Kind, Unsynced};
use crate::printable::printable;

/// Records a refusal and returns it as the failure to report (or the audit
/// failure, when the refusal could not be recorded).
pub(super) fn record_denial(
    audit: &AuditLog,
    mut denial: Box<crate::policy::Denial>,
    caller: &crate::policy::Caller,
    request: &crate::policy::Request,
) -> Failure {
    let op = match &request.kind {
        crate::policy::RequestKind::Op { name, .. } => Some(name.as_str()),
        crate::policy::RequestKind::Raw { .. } => None,
    };
    match audit.append(Kind::Denial, None, events::denial(&denial, caller, op)) {
        Ok(recorded) => {
            tracing::info!(audit_id = %recorded.audit_id, connector = %denial.connector, reason = denial.reason.as_str(), "spawn denied");
            denial.audit_id = Some(recorded.audit_id);
            denial_failure(&denial)
        }
        Err(e) => Failure::audit_unavailable(format!("audit unavailable: {e}; the request was refused, and the refusal could not be recorded")),
    }
}

/// The audit log from the config; without one nothing runs.
pub fn open_audit(config: &crate::config::Config) -> Result<AuditLog, Failure> {
    let path = config.audit.path.as_deref().ok_or_else(|| Failure::audit_unavailable("audit unavailable: no audit location (set [audit] path in the config); nothing was run"))?;
    let log = AuditLog::open(path)
        .map_err(|e| {
            Failure::audit_unavailable(format!("audit unavailable: {e}; nothing was run"))
        })?
        .with_rotation(config.audit.rotate_bytes)
        .with_retention(config.audit.keep_rotated);
    Ok(match load_audit_key(config)? {
        Some(key) => log.with_key(key),
        None => log,
    })
}

/// An allowed spawn that could not start (a missing kernel layer, a bad
/// scope, …) is still on record: its decision, and an exit saying why
/// nothing ran. Returns the failure to report.
pub(super) fn record_unstarted(
    audit: &AuditLog,
    plan: &crate::plan::SpawnPlan,
    caller: &crate::policy::Caller,
    failure: Failure,
) -> Failure {
    let planned = json!({ "not_started": failure.message });
    match audit.append(
        Kind::Decision,
        None,
        events::decision(plan, caller, &planned),
    ) {
        Ok(decided) => {
            record_failed_exit(audit, &decided.audit_id, caller, "setup_failed", failure)
        }
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
    audit: &AuditLog,
    audit_id: &str,
    caller: &crate::policy::Caller,
    key: &str,
    failure: Failure,
) -> Failure {
    match record_exit(audit, audit_id, caller, Err((key, failure))) {
        Err(f) => f,
        Ok(_) => Failure::internal("a failed spawn's exit record reported success"),
    }
}

/// Writes the exit record of a run (or of its failed setup), makes it
/// durable and links it to the result.
fn record_exit(
    audit: &AuditLog,
    audit_id: &str,
    caller: &crate::policy::Caller,
    reported: Result<Success, (&str, Failure)>,
) -> Result<Success, Failure> {
    let (result, written) = write_exit(audit, audit_id, caller, reported);
    match (result, written.map(Unsynced::commit)) {
        (Ok(mut s), Some(Err(e))) => {
            exit_record_lost(&mut s, &e);
            Ok(s)
        }
        (Err(f), Some(Err(e))) => {
            eprintln!(
                "spawnd: the exit record could not be written either: {}",
                printable(&e.to_string())
            );
            Err(f)
        }
        (result, _) => result,
    }
}

/// Writes the exit record of a run and links it to the result, without
/// waiting for the disk: the record is in the log, chained, and durable once
/// the returned [`Unsynced`] is committed (`None`: the write itself failed,
/// and the result says so).
pub(super) fn write_exit(
    audit: &AuditLog,
    audit_id: &str,
    caller: &crate::policy::Caller,
    reported: Result<Success, (&str, Failure)>,
) -> (Result<Success, Failure>, Option<Unsynced>) {
    let mut body = match &reported {
        Ok(s) => events::exit(&s.data),
        Err((key, f)) => {
            let mut m = serde_json::Map::new();
            m.insert((*key).to_string(), json!(f.message));
            m
        }
    };
    body.insert(
        "caller".into(),
        json!({"uid": caller.uid, "gid": caller.gid, "pid": caller.pid}),
    );
    tracing::info!(audit_id, exit_code = ?body.get("exit_code"), signal = ?body.get("signal"), "spawn ended");
    let written = audit.write(Kind::Exit, Some(audit_id), body);
    match (reported, written) {
        (Ok(mut s), Ok(w)) => {
            s.data["audit_id"] = json!(audit_id);
            (Ok(s), Some(w))
        }
        (Ok(mut s), Err(e)) => {
            s.data["audit_id"] = json!(audit_id);
            exit_record_lost(&mut s, &e);
            (Ok(s), None)
        }
        (Err((_, f)), Ok(w)) => (Err(f), Some(w)),
        (Err((_, f)), Err(e)) => {
            eprintln!(
                "spawnd: the exit record could not be written either: {}",
                printable(&e.to_string())
            );
            (Err(f), None)
        }
    }
}

/// Marks a result whose exit record could not be written or made durable:
/// exit 5 and `audit_error`, whatever the program did.
pub(super) fn exit_record_lost(s: &mut Success, e: &AuditError) {
    eprintln!(
        "spawnd: the exit record could not be written: {}",
        printable(&e.to_string())
    );
    s.data["audit_error"] = json!(e.to_string());
    s.exit = 5;
    s.keep_ok = false;
}

/// The operator's HMAC key for the audit chain (`[audit] hmac_key_file`), if set:
/// a file owned by spawnd's user and readable by no one else.
pub fn load_audit_key(config: &crate::config::Config) -> Result<Option<Vec<u8>>, Failure> {
    let Some(path) = &config.audit.hmac_key_file else {
        return Ok(None);
    };
    let secret = crate::vault::read_secret(&crate::config::CredentialSource::File(path.clone()))
        .map_err(|e| Failure::audit_unavailable(format!("audit unavailable: the HMAC key: {e}")))?;
    Ok(Some(secret.expose().to_vec()))
}
