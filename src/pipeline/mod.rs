//! One spawn, end to end, for every front end (`spawnd run` and the
//! daemon): the gate's decision, the decision record made durable while the
//! sandbox builds its root, the program's start, its supervision, the
//! exit record and the result. The front ends prepare the request
//! ([`Prepared`]) and say where output and [`Notice`]s go; nothing here
//! knows them, and nothing here prints.

mod egress;
mod finishing;
mod gating;
mod launching;
pub(crate) mod limits;
mod notice;
mod outcome;
mod own_policy;
pub(crate) mod prepared;
mod records;
mod refusals;
mod report;
mod starting;

use std::os::fd::OwnedFd;

pub(crate) use crate::failure::Failure;
pub(crate) use notice::{Notice, OnNotice};
pub(crate) use outcome::denial_failure;
pub(crate) use prepared::{decide_local, decide_with, Prepared};
pub(crate) use records::{load_audit_key, load_previous_audit_keys, open_audit};
pub(crate) use refusals::describe as describe_refusal;
pub(crate) use report::{conclude, interrupting_signal, network_refusals, Concluded};

pub(crate) use crate::audit::events::{Actor, SpawnFiled};

use finishing::{finish, FinishRequest};
use gating::{gate, GateRequest};
use records::{exit_record_lost, SpawnAudit};
use starting::{start, StartRequest};

use crate::audit::Unsynced;
use crate::egress::learning::Learning;
use crate::policy::Access;
use crate::sandbox::launch::StdinSource;
use crate::shares::Claim;
use crate::spawner::Spawner;
use crate::supervise::{Leaving, LiveOutput};

/// What feeds a stdin pipe.
pub(crate) type Pump = Option<Box<dyn std::io::Read + Send>>;

/// One spawn of a prepared request, start to end: the gate, the audit
/// records, the sandbox (made here, or by a spawner) and its supervision.
/// `spawnd run` and the daemon both go through it.
pub struct Spawn<'a> {
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

impl<'a> Spawn<'a> {
    /// What each step of the pipeline is asked: the gate, the start, the end.
    fn into_requests(self) -> (GateRequest<'a>, StartRequest<'a>, FinishRequest<'a>) {
        let gate = GateRequest {
            prepared: self.prepared,
            access: self.access,
            timeout_ms: self.timeout_ms,
            network_learning: self.network_learning,
            on_notice: self.on_notice,
        };
        let start = StartRequest {
            prepared: self.prepared,
            trace: self.trace,
            stdin: self.stdin,
            json: self.json,
            on_notice: self.on_notice,
            spawner: self.spawner,
            shared_connections: self.shared_connections,
            on_started: self.on_started,
        };
        let finish = FinishRequest {
            pump: self.pump,
            live: self.live,
            signals_end_the_run: self.signals_end_the_run,
            ended_by: self.ended_by,
            json: self.json,
            on_notice: self.on_notice,
        };
        (gate, start, finish)
    }
}

/// Says who ended a program from outside ([`Spawn::ended_by`]).
pub(crate) type EndedBy = std::sync::Arc<dyn Fn() -> Option<Interruption> + Send + Sync>;

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
pub(crate) type OnStarted<'a> = Box<dyn FnOnce(&SpawnFiled, Option<OwnedFd>) + Send + 'a>;

/// Runs an [`Spawn`] to its result, exit record durable, init reaped.
/// The exit record goes to disk first, while the kernel tears init's
/// namespaces down on another core; waiting for init before the flush would
/// put the two in a row.
pub fn run(x: Spawn<'_>) -> Result<Concluded, Failure> {
    let on_notice = x.on_notice;
    let Finished {
        mut result,
        exit_record,
        leaving,
    } = run_until_written(x);
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

/// An [`Spawn`] whose program has ended and whose exit record is written.
pub(crate) struct Finished<'a> {
    /// What to report (its `audit_id` names the records).
    pub result: Result<Concluded, Failure>,
    /// The exit record of a program that ran, in the log and chained but not
    /// yet known to be on disk: commit it before relying on the trail. (Every
    /// other exit record — setup failed, sandbox lost — has been flushed
    /// already, and a failure to write or flush it is in `result`.)
    pub exit_record: Option<Unsynced>,
    /// Init, maybe still leaving (the kernel tearing its namespaces down):
    /// the caller reaps it, after handing the result on if it likes.
    pub leaving: Option<Leaving<'a>>,
}

/// Runs an [`Spawn`] until its exit record is written (not yet flushed).
pub(crate) fn run_until_written(x: Spawn<'_>) -> Finished<'_> {
    let mut leaving = None;
    let mut exit_record = None;
    let result = run_inner(x, &mut leaving, &mut exit_record);
    Finished {
        result,
        exit_record,
        leaving,
    }
}

/// Init, still leaving once its exit is written, is handed back in
/// `leaving_out` for the caller to reap, and the unflushed exit record of a
/// program that ran in `exit_out`. The pipeline, step by step: the gate,
/// the program's start, its end.
fn run_inner<'a>(
    x: Spawn<'a>,
    leaving_out: &mut Option<Leaving<'a>>,
    exit_out: &mut Option<Unsynced>,
) -> Result<Concluded, Failure> {
    let began = std::time::Instant::now();
    let (gate_request, start_request, finish_request) = x.into_requests();
    let (log, mut gated) = gate(gate_request, began)?;
    let audit = SpawnAudit {
        log: &log,
        caller: &start_request.prepared.caller,
        on_notice: start_request.on_notice,
    };
    let started = start(start_request, &audit, &mut gated, began)?;
    finish(
        finish_request,
        &audit,
        &gated,
        started,
        leaving_out,
        exit_out,
    )
}
