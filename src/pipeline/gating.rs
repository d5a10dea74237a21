//! The pipeline's first step: who the program will run as, the audit log
//! it is recorded in, and the gate's decision (a denial recorded).

use std::time::{Duration, Instant};

use super::launching::{choose_identity, Identity};
use super::records::{open_audit, SpawnAudit};
use super::{decide_with, Failure, OnNotice, Prepared};
use crate::audit::AuditLog;
use crate::egress::learning::Learning;
use crate::plan::SpawnPlan;
use crate::policy::{Access, Decision};
use crate::program::ProgramOpener;

/// What the gate allowed, and what the next steps take from it.
pub(super) struct Gated {
    /// Who the program runs as, and how its limits apply.
    pub(super) identity: Identity,
    /// The gate's plan.
    pub(super) plan: SpawnPlan,
    /// The program the gate opened (and hashed), for the sandbox to run.
    pub(super) opener: ProgramOpener,
    /// From the pipeline's start to the decision.
    pub(super) gated: Duration,
}

/// What the gate is asked besides the request.
pub(super) struct GateRequest<'a> {
    pub(super) prepared: &'a Prepared,
    pub(super) access: &'a Access,
    pub(super) timeout_ms: Option<u64>,
    pub(super) network_learning: Option<Learning>,
    pub(super) on_notice: OnNotice<'a>,
}

/// The audit log the spawn's records go to, and what the gate allowed; a
/// denial is recorded and returned as the failure.
pub(super) fn gate(request: GateRequest<'_>, began: Instant) -> Result<(AuditLog, Gated), Failure> {
    let prepared = request.prepared;
    let identity = choose_identity(prepared)?;
    let log = open_audit(&prepared.config)?;
    let audit = SpawnAudit {
        log: &log,
        caller: &prepared.caller,
        on_notice: request.on_notice,
    };
    let mut opener = ProgramOpener::default();
    let mut plan = decide(
        prepared,
        &audit,
        &mut opener,
        request.access,
        request.timeout_ms,
    )?;
    plan.network_learning = request.network_learning;
    let gated = Gated {
        identity,
        plan,
        opener,
        gated: began.elapsed(),
    };
    Ok((log, gated))
}

/// The gate's plan for the request (a `timeout_ms` tightens its wall time),
/// or its denial, recorded.
fn decide(
    prepared: &Prepared,
    audit: &SpawnAudit<'_>,
    opener: &mut ProgramOpener,
    access: &Access,
    timeout_ms: Option<u64>,
) -> Result<SpawnPlan, Failure> {
    match decide_with(prepared, opener, access) {
        Decision::Allowed(mut plan) => {
            if let Some(t) = timeout_ms {
                plan.limits.wall_time_ms = plan.limits.wall_time_ms.min(t);
            }
            Ok(*plan)
        }
        Decision::Denied(denial) => Err(audit.record_denial(denial, &prepared.request)),
    }
}
