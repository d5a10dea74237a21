//! The pipeline's last step: the started program supervised to its end,
//! its relay's and tracer's reports, where the time went, the result, and
//! the exit record written (made durable by the caller).

use std::time::Duration;

use super::egress::Egress;
use super::gating::Gated;
use super::records::SpawnAudit;
use super::refusals;
use super::report::{report, Ran};
use super::starting::{Decided, Started};
use super::{Concluded, EndedBy, Failure, OnNotice, Pump};
use crate::audit::Unsynced;
use crate::plan::SpawnPlan;
use crate::sandbox::trace::{Trace, Tracer};
use crate::spawn_result::NetworkReport;
use crate::supervise::{
    supervise_to_report, Leaving, LiveOutput, Outcome, Phases, Supervision, Watched,
};

/// What the end of a spawn is asked besides the started program.
pub(super) struct FinishRequest<'a> {
    pub(super) pump: Pump,
    pub(super) live: Option<Box<dyn LiveOutput + Send>>,
    pub(super) signals_end_the_run: bool,
    pub(super) ended_by: Option<EndedBy>,
    pub(super) json: bool,
    pub(super) on_notice: OnNotice<'a>,
}

/// Supervises the started program to its end, reports it, and writes its
/// exit record: init, maybe still leaving, is handed back in `leaving_out`
/// for the caller to reap, and the unflushed exit record in `exit_out`.
pub(super) fn finish<'s>(
    request: FinishRequest<'_>,
    audit: &SpawnAudit<'_>,
    gated: &Gated,
    started: Started<'s>,
    leaving_out: &mut Option<Leaving<'s>>,
    exit_out: &mut Option<Unsynced>,
) -> Result<Concluded, Failure> {
    let plan = &gated.plan;
    let supervision = Supervision {
        stdout_cap: plan.limits.max_stdout_bytes,
        stderr_cap: plan.limits.max_stderr_bytes,
        wall_time: Duration::from_millis(plan.limits.wall_time_ms),
        live: request.live,
        stdin: request.pump,
        redact: started.redact,
        signals_end_the_run: request.signals_end_the_run,
    };
    let (
        Supervised {
            outcome,
            network,
            trace,
        },
        leaving,
    ) = supervise_started(
        audit,
        &started.decided,
        started.running,
        supervision,
        started.egress,
        started.tracer,
    )?;
    let spec = &started.spec;
    let trace = trace.map(|t| refusals::trace_report(&t, spec, &|p| p.symlink_metadata().is_ok()));
    let timings = time_spent(
        plan,
        gated.gated,
        started.prepared_sandbox,
        &started.decided,
        &outcome.phases,
    );
    let ended_by = request.ended_by.as_ref().and_then(|f| f());
    let ran = Ran {
        ended_by: ended_by.map(|i| i.how),
        plan,
        spec,
        id: &gated.identity,
        filter: started.filter,
        outcome,
        timings,
        network,
        trace,
    };
    // Recorded while the kernel still tears the namespaces down; the caller
    // reaps init (and removes its cgroups) afterwards.
    let reported = report(request.json, ran, request.on_notice).map_err(|f| ("setup_failed", f));
    *leaving_out = leaving;
    let interrupter = ended_by.and_then(|i| i.peer);
    let (result, written) =
        audit.write_exit(&started.decided.audit_id, reported, interrupter.as_ref());
    *exit_out = written;
    result
}

/// Supervises the started program until its outcome is known (init
/// maybe still leaving). A sandbox lost meanwhile (its spawner died, say)
/// is gone, and its exit record says so.
fn supervise_started<'s>(
    audit: &SpawnAudit<'_>,
    decided: &Decided,
    running: Watched<'s>,
    supervision: Supervision,
    egress: Option<Egress>,
    tracer: Option<Tracer>,
) -> Result<(Supervised, Option<Leaving<'s>>), Failure> {
    let supervised = supervise_to_report(running, supervision);
    // The relay ends with the sandbox, and its records are durable before
    // the exit record, however the sandbox ended.
    let network = egress.map(|e| e.finish().to_report());
    let trace = tracer.map(Tracer::finish);
    match supervised {
        Ok((outcome, leaving)) => Ok((
            Supervised {
                outcome,
                network,
                trace,
            },
            leaving,
        )),
        Err(e) => {
            let failure = Failure::lost(format!(
                "the sandbox was lost while its program ran: {e}; it was killed"
            ));
            Err(audit.record_failed_exit(&decided.audit_id, "failed", failure))
        }
    }
}

/// A started program's outcome, and its network's, once its sandbox is
/// gone.
struct Supervised {
    outcome: Outcome,
    network: Option<NetworkReport>,
    /// What a traced run's tracer saw.
    trace: Option<Trace>,
}

/// Where the spawn's time went, from the gate to init's teardown: logged
/// at debug level, and returned as the result's `timings`.
fn time_spent(
    plan: &SpawnPlan,
    gated: Duration,
    prepared_sandbox: Duration,
    decided: &Decided,
    phases: &Phases,
) -> crate::spawn_result::Timings {
    tracing::debug!(
        connector = %plan.connector,
        op = %plan.op,
        gate_us = gated.as_micros() as u64,
        clone_us = phases.clone_and_release_us,
        audit_commit_us = decided.commit_took.as_micros() as u64,
        setup_us = phases.sandbox_setup_us,
        init_ready_us = phases.init_ready_us,
        release_wait_us = phases.release_wait_us,
        program_us = phases.program_us,
        teardown_us = phases.teardown_us,
        "sandbox finished"
    );
    crate::spawn_result::Timings {
        gate_us: gated.as_micros() as u64,
        spec_and_filter_us: (prepared_sandbox - gated).as_micros() as u64,
        audit_commit_us: decided.commit_took.as_micros() as u64,
        phases: *phases,
        process_us: None,
    }
}
