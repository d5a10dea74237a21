//! From the plan to the program's start: the sandbox's order (the
//! credentials read, the program the gate opened), the decision record made
//! durable while the sandbox builds its root, and the start, with the relay
//! of its network grants.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::egress::{self, Egress, NetAudit, RelayTerms};
use super::gating::Gated;
use super::launching::{Identity, Launching, NotStarted};
use super::records::SpawnAudit;
use super::{own_policy, Failure, Notice, OnNotice, OnStarted, Prepared, SpawnFiled};
use crate::audit::{events, Kind};
use crate::kernel_features::LANDLOCK_ABI_REQUIRED;
use crate::manifest::{OnViolation, ScopePath};
use crate::plan::{EnvSource, SpawnPlan};
use crate::program::ProgramOpener;
use crate::sandbox::launch::StdinSource;
use crate::sandbox::network::Listeners;
use crate::sandbox::order::{Design, Ordered};
use crate::sandbox::seccomp::Filter;
use crate::sandbox::spec::SandboxSpec;
use crate::sandbox::trace::Tracer;
use crate::shares::Claim;
use crate::spawner::Spawner;
use crate::supervise::Watched;
use crate::vault::{read_secret, Secret};

/// What starting is asked besides the gate's plan.
pub(super) struct StartRequest<'a> {
    pub(super) prepared: &'a Prepared,
    /// Watch the program's calls ([`crate::sandbox::trace`]).
    pub(super) trace: bool,
    pub(super) stdin: StdinSource,
    /// Whether the result is for a machine (no notices of missing scopes).
    pub(super) json: bool,
    pub(super) on_notice: OnNotice<'a>,
    pub(super) spawner: Option<&'a Spawner>,
    pub(super) shared_connections: Option<Claim>,
    pub(super) on_started: Option<OnStarted<'a>>,
}

/// A started program, and what its supervision and report take.
pub(super) struct Started<'s> {
    pub(super) decided: Decided,
    pub(super) running: Watched<'s>,
    pub(super) egress: Option<Egress>,
    pub(super) tracer: Option<Tracer>,
    pub(super) spec: std::sync::Arc<SandboxSpec>,
    pub(super) filter: &'static Filter,
    /// The credential values, to redact from the output.
    pub(super) redact: Vec<(String, Secret)>,
    /// From the pipeline's start to the sandbox's order.
    pub(super) prepared_sandbox: Duration,
}

/// Orders the sandbox, records the decision, launches and starts the
/// program. What fails on the way is recorded: a credential that cannot
/// be read as a denial, the rest as a spawn that did not start.
pub(super) fn start<'s>(
    request: StartRequest<'s>,
    audit: &SpawnAudit<'_>,
    gated: &mut Gated,
    began: Instant,
) -> Result<Started<'s>, Failure> {
    let prepared = request.prepared;
    let sandbox = SandboxRequest {
        identity: &gated.identity,
        trace: request.trace,
        stdin: request.stdin,
    };
    let (ordered, redact) =
        order_sandbox(prepared, audit, &gated.plan, sandbox, &mut gated.opener)?;
    if !request.json {
        tell_missing_scopes(ordered.spec(), &gated.plan, request.on_notice);
    }
    let prepared_sandbox = began.elapsed();
    let filter = ordered.filter();
    let spec = ordered.shared_spec();
    let planned = planned_sandbox(&ordered, &gated.identity);
    let (decided, launching) = launch_once_decided(
        audit,
        &gated.plan,
        planned,
        ordered,
        &gated.identity,
        request.spawner,
    )?;
    let terms = RelayTerms {
        network: &prepared.config.network,
        shared_connections: request.shared_connections,
    };
    let (running, egress, tracer) = start_program(
        audit,
        &decided,
        &gated.plan,
        terms,
        launching,
        request.on_started,
    )?;
    Ok(Started {
        decided,
        running,
        egress,
        tracer,
        spec,
        filter,
        redact,
        prepared_sandbox,
    })
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
pub(super) struct Decided {
    pub(super) audit_id: String,
    /// How long making the record durable took.
    pub(super) commit_took: std::time::Duration,
}

/// Writes the decision record, then launches the sandbox (a clone here, or
/// an order to the spawner) while the record is made durable: the disk works
/// while the sandbox builds its root, nothing on the host changes before
/// the record is written, and if the record cannot reach the disk the
/// sandbox is dropped (killed) with nothing run.
fn launch_once_decided<'s>(
    audit: &SpawnAudit<'_>,
    plan: &SpawnPlan,
    planned: serde_json::Value,
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
