//! One spawn, end to end, for every front end (`spawnd run` and the
//! daemon): the gate's decision, the decision record made durable while the
//! sandbox builds its root, the program's start, its supervision, the
//! exit record and the result. The front ends prepare the request
//! ([`Prepared`]) and say where output and [`Notice`]s go; nothing here
//! knows them, and nothing here prints.

mod egress;
mod launching;
pub mod limits;
mod notice;
mod outcome;
mod own_policy;
mod prepared;
mod records;
mod refusals;
mod report;

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

pub use crate::failure::{Failure, FailureKind, Success};
pub use notice::{Notice, OnNotice};
pub use outcome::denial_failure;
pub use prepared::{decide_local, decide_with, Prepared};
pub use records::{load_audit_key, load_previous_audit_keys, open_audit};
pub use refusals::{describe as describe_refusal, Refusal};
pub use report::{conclude, interrupting_signal, network_refusals};

pub use crate::audit::events::{Actor, SpawnFiled};

use egress::{Egress, NetAudit, RelayTerms};
use launching::{choose_identity, Identity, Launching, NotStarted};
use records::{exit_record_lost, SpawnAudit};
use report::{report, Ran};

use crate::audit::{events, Kind, Unsynced};
use crate::egress::learning::Learning;
use crate::kernel_features::LANDLOCK_ABI_REQUIRED;
use crate::manifest::{OnViolation, ScopePath};
use crate::plan::{EnvSource, SpawnPlan};
use crate::policy::{Access, Decision};
use crate::program::ProgramOpener;
use crate::sandbox::launch::StdinSource;
use crate::sandbox::network::Listeners;
use crate::sandbox::order::{Design, Ordered};
use crate::sandbox::spec::SandboxSpec;
use crate::sandbox::trace::{Trace, Tracer};
use crate::shares::Claim;
use crate::spawner::Spawner;
use crate::supervise::{
    supervise_to_report, Leaving, LiveOutput, Outcome, Phases, Supervision, Watched,
};
use crate::vault::{read_secret, Secret};

/// What feeds a stdin pipe.
pub type Pump = Option<Box<dyn std::io::Read + Send>>;

/// One spawn of a prepared request, start to end: the gate, the audit
/// records, the sandbox (made here, or by a spawner) and its supervision.
/// `spawnd run` and the daemon both go through it.
pub struct Execution<'a> {
    /// Config, manifest, caller and request.
    pub prepared: &'a Prepared,
    /// Who may act for which connector.
    pub access: &'a Access,
    /// The child's stdin.
    pub stdin: StdinSource,
    /// What feeds a stdin pipe.
    pub pump: Pump,
    /// A tighter wall time than the manifest's.
    pub timeout_ms: Option<u64>,
    /// Where output goes as it arrives.
    pub live: Option<Box<dyn LiveOutput + Send>>,
    /// Whether the result is for a machine (no text rendering).
    pub json: bool,
    /// Launch through this spawner instead of in this process.
    pub spawner: Option<&'a Spawner>,
    /// Called once the program has started: what its records are filed
    /// under (its audit id, connector, op and label) and a pidfd for its
    /// init.
    pub on_started: Option<OnStarted<'a>>,
    /// SIGINT/SIGTERM/SIGHUP to this process kill the sandbox (`run`, not the daemon).
    pub signals_end_the_run: bool,
    /// Told each [`Notice`] as it arises (a scope left out, before the
    /// sandbox is launched).
    pub on_notice: OnNotice<'a>,
    /// Who ended the program from outside, if anyone did (the daemon's
    /// `spawn_kill`, a closed connection, a shutdown): asked once the
    /// program has ended, for the result's and the exit record's
    /// `interrupted_by` (and the exit record's `interrupted_by_peer`).
    pub ended_by: Option<EndedBy>,
    /// Watch the program's path calls and the calls the filter refuses
    /// ([`crate::sandbox::trace`]): the result's `trace` says what the
    /// sandbox refused, and which layer. In this process only (not through
    /// a spawner).
    pub trace: bool,
    /// `spawnd learn` only: the program's network is learned, not granted
    /// ([`SpawnPlan::network_learning`]). `None` everywhere else.
    pub network_learning: Option<Learning>,
    /// Where the spawn's relayed connections count among every spawn's of
    /// this process: the daemon's pool, by caller. `None`: this process's
    /// single caller has them all ([`crate::relay::process_connections`]).
    pub shared_connections: Option<Claim>,
}

/// Says who ended a program from outside ([`Execution::ended_by`]).
pub type EndedBy = std::sync::Arc<dyn Fn() -> Option<Interruption> + Send + Sync>;

/// Who ended a program from outside: how (the daemon's `spawn_kill`,
/// `spawn_release`, `disconnect`, `lease` or `shutdown`: the result's and
/// the exit record's `interrupted_by`) and, when a peer's request or the
/// closing of its connection did, that peer (`interrupted_by_peer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interruption {
    /// How: the `interrupted_by` of the result and the exit record.
    pub how: &'static str,
    /// The peer that acted, if one did (a lease running out or a shutdown
    /// has none).
    pub peer: Option<Actor>,
}

/// Told what a program's records are filed under and a pidfd for init
/// once it has started.
pub type OnStarted<'a> = Box<dyn FnOnce(&SpawnFiled, Option<OwnedFd>) + Send + 'a>;

/// Runs an [`Execution`] to its result, exit record durable, init reaped.
/// The exit record goes to disk first, while the kernel tears init's
/// namespaces down on another core; waiting for init before the flush would
/// put the two in a row.
pub fn execute(x: Execution<'_>) -> Result<Success, Failure> {
    let on_notice = x.on_notice;
    let Finished {
        mut result,
        exit_record,
        leaving,
    } = execute_until_written(x);
    if let Some(Err(e)) = exit_record.map(Unsynced::commit) {
        let notice = match result.as_mut() {
            Ok(s) => exit_record_lost(s, &e),
            Err(_) => Notice::ExitRecordAlsoLost {
                error: e.to_string(),
            },
        };
        on_notice(notice);
    }
    if let Some(leaving) = leaving {
        reap(leaving);
    }
    result
}

fn reap(leaving: Leaving<'_>) {
    if let Err(e) = leaving.reap() {
        tracing::warn!("reaping the sandbox's init: {e}");
    }
}

/// An [`Execution`] whose program has ended and whose exit record is written.
pub struct Finished<'a> {
    /// What to report (its `audit_id` names the records).
    pub result: Result<Success, Failure>,
    /// The exit record of a program that ran, in the log and chained but not
    /// yet known to be on disk: commit it before relying on the trail. (Every
    /// other exit record — setup failed, sandbox lost — has been flushed
    /// already, and a failure to write or flush it is in `result`.)
    pub exit_record: Option<Unsynced>,
    /// Init, maybe still leaving (the kernel tearing its namespaces down):
    /// the caller reaps it, after handing the result on if it likes.
    pub leaving: Option<Leaving<'a>>,
}

/// Runs an [`Execution`] until its exit record is written (not yet flushed).
pub fn execute_until_written(x: Execution<'_>) -> Finished<'_> {
    let mut leaving = None;
    let mut exit_record = None;
    let result = execute_inner(x, &mut leaving, &mut exit_record);
    Finished {
        result,
        exit_record,
        leaving,
    }
}

/// Init, still leaving once its exit is written, is handed back in
/// `leaving_out` for the caller to reap, and the unflushed exit record of a
/// program that ran in `exit_out`. The pipeline, step by step.
fn execute_inner<'a>(
    x: Execution<'a>,
    leaving_out: &mut Option<Leaving<'a>>,
    exit_out: &mut Option<Unsynced>,
) -> Result<Success, Failure> {
    let started = std::time::Instant::now();
    let prepared = x.prepared;
    let identity = choose_identity(prepared)?;
    let log = open_audit(&prepared.config)?;
    let audit = SpawnAudit {
        log: &log,
        caller: &prepared.caller,
        on_notice: x.on_notice,
    };
    let mut opener = ProgramOpener::default();
    let mut plan = decide(prepared, &audit, &mut opener, x.access, x.timeout_ms)?;
    plan.network_learning = x.network_learning;
    let gated = started.elapsed();
    let sandbox = SandboxRequest {
        identity: &identity,
        trace: x.trace,
        stdin: x.stdin,
    };
    let (ordered, redact) = order_sandbox(prepared, &audit, &plan, sandbox, &mut opener)?;
    if !x.json {
        tell_missing_scopes(ordered.spec(), &plan, x.on_notice);
    }
    let prepared_sandbox = started.elapsed();
    let filter = ordered.filter();
    let spec = ordered.spec().clone();
    let planned = planned_sandbox(&ordered, &identity);
    let (decided, launching) =
        launch_once_decided(&audit, &plan, &planned, ordered, &identity, x.spawner)?;
    let terms = RelayTerms {
        network: &prepared.config.network,
        shared_connections: x.shared_connections,
    };
    let (running, egress, tracer) =
        start_program(&audit, &decided, &plan, terms, launching, x.on_started)?;
    let supervision = Supervision {
        stdout_cap: plan.limits.max_stdout_bytes,
        stderr_cap: plan.limits.max_stderr_bytes,
        wall_time: Duration::from_millis(plan.limits.wall_time_ms),
        live: x.live,
        stdin: x.pump,
        redact,
        signals_end_the_run: x.signals_end_the_run,
    };
    let (
        Supervised {
            outcome,
            network,
            trace,
        },
        leaving,
    ) = supervise_started(&audit, &decided, running, supervision, egress, tracer)?;
    let trace = trace.map(|t| refusals::trace_report(&t, &spec, &|p| p.symlink_metadata().is_ok()));
    let timings = time_spent(&plan, gated, prepared_sandbox, &decided, &outcome.phases);
    let ended_by = x.ended_by.as_ref().and_then(|f| f());
    let ran = Ran {
        ended_by: ended_by.map(|i| i.how),
        plan: &plan,
        spec: &spec,
        id: &identity,
        filter,
        outcome,
        timings,
        network,
        trace,
    };
    // Recorded while the kernel still tears the namespaces down; the caller
    // reaps init (and removes its cgroups) afterwards.
    let reported = report(x.json, ran, x.on_notice).map_err(|f| ("setup_failed", f));
    *leaving_out = leaving;
    let interrupter = ended_by.and_then(|i| i.peer);
    let (result, written) = audit.write_exit(&decided.audit_id, reported, interrupter.as_ref());
    *exit_out = written;
    result
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

/// What the sandbox is asked for besides the plan: who the program runs
/// as, whether its filter is traced, and where its stdin comes from.
struct SandboxRequest<'a> {
    identity: &'a Identity,
    trace: bool,
    stdin: StdinSource,
}

/// The sandbox's order for the plan ([`Design`]), with the credentials
/// read and the program the gate opened taken; and the credential values
/// again, to redact the output. Allowed but unable to start (a missing
/// layer, a bad scope, …), the spawn is still on record: its decision and
/// an exit saying why nothing ran; a credential that cannot be read is a
/// recorded denial.
fn order_sandbox(
    prepared: &Prepared,
    audit: &SpawnAudit<'_>,
    plan: &SpawnPlan,
    sandbox: SandboxRequest<'_>,
    opener: &mut ProgramOpener,
) -> Result<(Ordered, Vec<(String, Secret)>), Failure> {
    let unstarted = |failure: Failure| audit.record_unstarted(plan, failure);
    let required = prepared
        .config
        .sandbox
        .landlock_min_abi
        .max(LANDLOCK_ABI_REQUIRED);
    let system_paths = &prepared.config.sandbox.system_paths;
    let design = Design::new(
        plan,
        system_paths,
        sandbox.identity,
        required,
        sandbox.trace,
    )
    .map_err(|e| unstarted(NotStarted::Design(e).into_failure(plan)))?;
    check_policy_outside_write_scopes(prepared, plan).map_err(unstarted)?;
    let credentials =
        read_credentials(prepared, plan).map_err(|d| audit.record_denial(d, &prepared.request))?;
    let declared = ScopePath::parse_program(&plan.program.declared)
        .map_err(|e| e.to_string())
        .and_then(|p| {
            p.expand(&prepared.caller.anchors(prepared.manifest.dir.as_deref()))
                .ok_or_else(|| "the program's path did not expand".to_string())
        })
        .map_err(|e| unstarted(Failure::internal(e)))?;
    let program = opener
        .take(&declared)
        .ok_or_else(|| unstarted(Failure::internal("the program opened by the gate was lost")))?;
    let ordered = design
        .order(program.file, &credentials, sandbox.stdin)
        .map_err(|e| unstarted(NotStarted::Setup(e).into_failure(plan)))?;
    Ok((ordered, credentials))
}

/// What the decision record says the sandbox will be (its `planned`): the
/// namespaces, Landlock ABI, seccomp filter, how limits apply, the ids, and
/// the read scopes left out.
fn planned_sandbox(ordered: &Ordered, identity: &Identity) -> Value {
    let spec = ordered.spec();
    json!({
        "namespaces": ["user", "mount", "pid", "network", "ipc", "uts", "cgroup"],
        "landlock_abi": ordered.order.landlock_abi,
        "seccomp_filter": ordered.filter().id(),
        "limits_via": identity.limits_via.name(),
        "uid": identity.uid,
        "gid": identity.gid,
        "missing_read_scopes": spec.missing_read_scopes,
        "tmpfs": tmpfs_of(spec),
    })
}

/// The private /tmp and /dev/shm as a spec gives them: sizes, and whether
/// /tmp's files may be executed (`tmp_exec`).
pub(super) fn tmpfs_of(spec: &SandboxSpec) -> crate::spawn_result::Tmpfs {
    crate::spawn_result::Tmpfs {
        tmp_bytes: spec.tmpfs.tmp,
        tmp_exec: spec.tmp_exec,
        dev_shm_bytes: spec.tmpfs.shm,
    }
}

/// Tells which read scopes and granted sockets do not exist (the sandbox
/// leaves them out), before anything is launched.
fn tell_missing_scopes(spec: &SandboxSpec, plan: &SpawnPlan, on_notice: OnNotice<'_>) {
    for missing in &spec.missing_read_scopes {
        on_notice(Notice::LeftOut {
            path: missing.clone(),
            unix_socket: plan.fs.unix_sockets.contains(missing),
        });
    }
}

/// A spawn whose decision record is on disk.
struct Decided {
    audit_id: String,
    /// How long making the record durable took.
    commit_took: std::time::Duration,
}

/// Writes the decision record, then launches the sandbox (a clone here, or
/// an order to the spawner) while the record is made durable: the disk works
/// while the sandbox builds its root, nothing on the host changes before
/// the record is written, and if the record cannot reach the disk the
/// sandbox is dropped (killed) with nothing run.
fn launch_once_decided<'s>(
    audit: &SpawnAudit<'_>,
    plan: &SpawnPlan,
    planned: &serde_json::Value,
    ordered: Ordered,
    identity: &Identity,
    spawner: Option<&'s Spawner>,
) -> Result<(Decided, Launching<'s>), Failure> {
    let written = audit
        .log
        .write(
            Kind::Decision,
            None,
            events::decision(plan, audit.caller, planned),
        )
        .map_err(|e| {
            Failure::audit_unavailable(format!("audit unavailable: {e}; nothing was run"))
        })?;
    // The launch first, the flush right after it: starting the write-back
    // does not hold the launch up.
    let mut launching = Launching::begin(ordered, spawner);
    written.start_flush();
    // Stale cgroups (a `kill -9`'d spawnd's) are swept here, beside the
    // sandbox building its root; the spawner sweeps its own way.
    if spawner.is_none() {
        identity.limits_via.sweep_stale_cgroups();
    }
    launching.open_cgroup_readings();
    let committing = std::time::Instant::now();
    let decided = written.commit().map_err(|e| {
        Failure::audit_unavailable(format!("audit unavailable: {e}; nothing was run"))
    })?;
    let commit_took = committing.elapsed();
    // Another spawn's record (the daemon's threads) failed to flush while
    // this one was gated: a flush error is reported once per open file, so
    // this commit may have succeeded over a hole. Nothing starts (the
    // sandbox is dropped).
    if let Some(why) = crate::audit::group_sync::stopped_by_a_failed_sync() {
        let failure = Failure::audit_unavailable(why);
        return Err(audit.record_failed_exit(&decided.audit_id, "setup_failed", failure));
    }
    tracing::info!(audit_id = %decided.audit_id, connector = %plan.connector, op = %plan.op, sha256 = %plan.program.sha256, "spawn allowed");
    let decided = Decided {
        audit_id: decided.audit_id,
        commit_took,
    };
    Ok((decided, launching))
}

/// Starts the program (its decision is on disk); `on_started` learns its
/// audit id and a pidfd for init. A setup that failed inside the sandbox is
/// recorded as the spawn's exit.
fn start_program<'s>(
    audit: &SpawnAudit<'_>,
    decided: &Decided,
    plan: &SpawnPlan,
    terms: RelayTerms<'_>,
    launching: Launching<'s>,
    on_started: Option<OnStarted<'_>>,
) -> Result<(Watched<'s>, Option<Egress>, Option<Tracer>), Failure> {
    let relay = |listeners: Option<Listeners>| match listeners {
        None if !plan.uses_relay() => Ok(None),
        None => Err(Failure::sandbox_unavailable(
            "the sandbox handed over no listeners for its network grants",
        )),
        Some(listeners) => {
            let records = NetAudit {
                log: audit.log.clone(),
                audit_id: decided.audit_id.clone(),
                connector: plan.connector.clone(),
                op: plan.op.clone(),
            };
            egress::start(plan, &terms, listeners, records).map(Some)
        }
    };
    match launching.start_program(relay) {
        Ok((started, egress)) => {
            // Under `on_violation = "terminate"`, the relay may now kill
            // the sandbox at the first refused egress.
            if let (Some(e), OnViolation::Terminate) = (&egress, plan.on_violation) {
                match started.running.end.killer() {
                    Some(killer) => e.arm(killer),
                    // Never unguarded: a sandbox the relay cannot kill is
                    // killed now (its result says signal 9).
                    None => started
                        .running
                        .end
                        .signal(nix::sys::signal::Signal::SIGKILL),
                }
            }
            if let Some(f) = on_started {
                let filed = SpawnFiled {
                    audit_id: decided.audit_id.clone(),
                    connector: plan.connector.clone(),
                    op: plan.op.clone(),
                    label: audit.caller.label.clone(),
                };
                f(&filed, started.pidfd);
            }
            Ok((started.running, egress, started.tracer))
        }
        Err(not_started) => Err(audit.record_failed_exit(
            &decided.audit_id,
            "setup_failed",
            not_started.into_failure(plan),
        )),
    }
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
    network: Option<crate::spawn_result::NetworkReport>,
    /// What a traced run's tracer saw.
    trace: Option<Trace>,
}

/// No write scope may reach what decides what runs and what records it:
/// the manifest, the config, the audit log's directory (`own_policy`
/// compares them by device and inode, hard links and bind mounts
/// included). A program could otherwise rewrite its own policy for the
/// next run (a manifest carried in the checkout it builds, say), or the
/// trail.
fn check_policy_outside_write_scopes(prepared: &Prepared, plan: &SpawnPlan) -> Result<(), Failure> {
    let mut guarded = vec![(
        "the manifest",
        std::path::PathBuf::from(&prepared.manifest.source),
    )];
    guarded.extend(prepared.config.source.clone().map(|p| ("the config", p)));
    guarded.extend(
        prepared
            .config
            .audit
            .path
            .as_deref()
            .and_then(Path::parent)
            .map(|p| ("the audit log's directory", p.to_path_buf())),
    );
    let (guarded, scopes) = own_policy::policy_facts_on_host(&guarded, &plan.fs.write)
        .map_err(|e| {
            Failure::sandbox_unavailable(format!(
                "cannot tell whether a write scope reaches the manifest, the config or the audit log: {e}; nothing was run"
            ))
        })?;
    match own_policy::policy_exposure(&guarded, &scopes) {
        Some(exposure) => Err(Failure::config(exposure.to_string())),
        None => Ok(()),
    }
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
    }
}

/// The values of the plan's credential keys, from the operator's bindings. A
/// missing or unreadable binding is a denial (`binding_required`,
/// `invalid_credentials`) naming the connector and the key.
fn read_credentials(
    p: &Prepared,
    plan: &SpawnPlan,
) -> Result<Vec<(String, Secret)>, Box<crate::policy::Denial>> {
    use crate::policy::{Denial, Reason};
    let mut out = Vec::new();
    for entry in plan
        .env
        .iter()
        .filter(|e| e.source == EnvSource::Credential)
    {
        let requested = format!("credential:{}", entry.key);
        let binding = p.config.binding_for(&p.manifest.connector.name, &entry.key);
        let Some(binding) = binding else {
            return Err(Denial::new(
                Reason::BindingRequired,
                &plan.connector,
                requested,
                Vec::new(),
                format!(
                    "{} has no credential bound for {}; add a [[credentials]] binding to the operator config",
                    plan.connector, entry.key
                ),
            ));
        };
        let secret = read_secret(&binding.source).map_err(|e| {
            Denial::new(
                Reason::InvalidCredentials,
                &plan.connector,
                requested.clone(),
                // The kind of source only: its path or helper arguments stay
                // with the operator.
                vec![format!(
                    "binding:{}",
                    binding.source.to_string().split(':').next().unwrap_or("")
                )],
                format!("{} key {}: {e}", plan.connector, entry.key),
            )
        })?;
        out.push((entry.key.clone(), secret));
    }
    Ok(out)
}
