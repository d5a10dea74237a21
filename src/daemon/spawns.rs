//! `spawn` and `spawn_op`, and the handle methods. A request goes through the
//! same [`run_until_written`] as `spawnd run` — the gate, the audit records, the sandbox
//! (always through the spawner), supervision — on a blocking thread; the
//! answer is the handle once the program has started, or the JSON-RPC error
//! (a denial creates no handle). Output lands in the handle's buffers as it
//! arrives; status and reads can wait for change without polling.
//!
//! Before that pipeline, three refusals are decided here and recorded once
//! per window ([`super::refusals`]): a connector or op name no manifest
//! could declare, a connector that is not loaded, and a peer `[[access]]`
//! does not allow to act for the connector.
//!
//! Handles ([`super::handles`]) are 128-bit random strings, owned by the
//! connection that made them (another connection gets "not found"), at most
//! [`MAX_HANDLES_PER_CONNECTION`] per connection; a finished one is kept
//! until `spawn_release` or [`HANDLE_LIFETIME`], and a connection's running
//! sandboxes are killed when it closes.
//!
//! Running spawns and buffered output are bounded across the daemon and
//! shared among callers by uid ([`crate::shares`]): a spawn takes one of
//! `[server] max_running_spawns` and reserves its
//! operation's stdout and stderr caps from `[server] max_buffered_output_bytes`
//! before it starts (else -32003, overloaded, its `data` naming the limit
//! and the caller's use); its relayed connections count against its
//! caller's share of the relay's. The reservation shrinks to the
//! bytes actually kept when it ends, and is returned when the handle goes.
//! The result keeps no second copy of the output: `spawn_status` renders the
//! streams from the buffers.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Map, Value};
use tokio::sync::oneshot;

use super::connection::{Connection, Rendered};
use super::detached::Lease;
use super::handles::{new_handle_name, HandleOptions, HandleSink, HandleState, SpawnAbout};
pub(crate) use super::handles::{Handle, Handles, MAX_WAIT};
use super::refusals::{self, Refusal};
use super::request::{access_caller, caller_of, check_names, request_from, SpawnCall};
use super::stdin::StdinStream;
use super::{Daemon, Loaded, Peer};
use crate::audit::Unsynced;
use crate::manifest::Manifest;
use crate::pipeline::{
    denial_failure, run_until_written, Concluded, Failure, Finished, Notice, Prepared, Spawn,
    SpawnFiled,
};
use crate::policy::{Access, Caller, Decision, GateContext, Request, RequestKind};
use crate::program::ProgramOpener;
use crate::rpc::{self, RpcError};
use crate::sandbox::launch::StdinSource;
use crate::shares::{Claim, Taken};
use crate::spawn_result::{SpawnResult, SpawnStatus};
use crate::spawner::Spawner;
use crate::supervise::Leaving;

/// A failure of the shared pipeline, as a JSON-RPC error (the codes of docs/daemon.md).
pub(super) fn rpc_error(f: Failure) -> RpcError {
    RpcError {
        code: rpc::code_of(f.kind),
        message: f.message,
        data: f.details,
    }
}

/// `spawn` / `spawn_op`: the handle once the program runs (and its lease
/// token, for a detached spawn).
pub(super) async fn spawn(
    conn: &Arc<Connection>,
    method: &'static str,
    call: Result<SpawnCall, Box<Refused>>,
) -> Result<Value, RpcError> {
    let (daemon, peer) = (&conn.daemon, &conn.peer);
    if let Some(why) = daemon.audit_failure() {
        return Err(RpcError::new(rpc::AUDIT_UNAVAILABLE, why));
    }
    let call = match call {
        Ok(call) => call,
        Err(refused) => return Err(refused.recorded(daemon, peer).await),
    };
    let loaded = daemon.loaded();
    let lease = lease_for(peer, &loaded, &call)?;
    let access = Access::Rules {
        rules: loaded.config.access.clone(),
        daemon_uid: nix::unistd::geteuid().as_raw(),
    };
    let manifest = manifest_for_peer(daemon, peer, method, &loaded, &access, &call).await?;
    let caller = caller_for(conn, &loaded, &call)?;
    let slot = HandleSlot::take(conn)?;
    let reservation = reserve_output(daemon, peer, &manifest, &call.request)?;
    let permit = daemon.running.take(peer.uid, 1).map_err(|refusal| {
        super::overloaded(
            &refusal,
            "try later, when some of this daemon's spawns have ended (detached ones count while they run)",
        )
    })?;
    let spawner = daemon
        .spawner()
        .map_err(|e| RpcError::new(rpc::SANDBOX_UNAVAILABLE, format!("{e}; nothing was run")))?;
    let name = new_handle_name()?;
    let (handle, stdin_pipe) = new_handle(&call, lease)?;
    if handle.lease.is_some() {
        daemon.detached.register(&name, &handle);
    }
    handle.with(|s| s.reservation = Some(reservation));
    let (started_tx, started_rx) = oneshot::channel();
    let job = Job {
        loaded,
        manifest,
        caller,
        call,
        stdin_pipe,
        access,
        spawner,
        permit,
        shared_connections: Claim::new(&daemon.relay_connections, peer.uid),
        handle: Arc::clone(&handle),
        started_tx,
    };
    list_as_started(daemon, &handle)?;
    tokio::task::spawn_blocking(move || run_job(job));
    answer_once_started(conn, slot, name, handle, started_rx).await
}

/// The caller a spawn runs for: the peer as the password database knows it
/// (looked up once per connection), the operator's workspace (a caller
/// never names one), and the call's label.
fn caller_for(
    conn: &Connection,
    loaded: &Loaded,
    call: &SpawnCall,
) -> Result<crate::policy::Caller, RpcError> {
    let known = conn.handles().caller.clone();
    let mut caller = match known {
        Some(known) => known,
        None => {
            let looked_up = caller_of(&conn.peer)?;
            conn.handles().caller.insert(looked_up).clone()
        }
    };
    caller.workspace = loaded.config.sandbox.workspace.clone();
    caller.label = call.label.clone();
    Ok(caller)
}

/// A new spawn's handle, and the read end of its stdin stream when the
/// call streams stdin.
fn new_handle(
    call: &SpawnCall,
    lease: Option<Lease>,
) -> Result<(Arc<Handle>, Option<std::fs::File>), RpcError> {
    let (stdin_stream, stdin_pipe) = if call.stdin_stream {
        let (stream, pipe) = StdinStream::open()?;
        (Some(stream), Some(pipe))
    } else {
        (None, None)
    };
    let about = SpawnAbout {
        connector: call.connector.clone(),
        op: match &call.request.kind {
            RequestKind::Op { name, .. } => Some(name.clone()),
            RequestKind::Raw { .. } => None,
        },
        label: call.label.clone(),
    };
    let handle = Handle::new(HandleOptions {
        stdin: stdin_stream,
        notify: call.notify,
        lease,
        about,
    });
    Ok((handle, stdin_pipe))
}

/// Puts a spawn among the started ones before it starts, so a shutdown
/// that comes while it is being set up kills it too (`mark_started`); once
/// the daemon is stopping, nothing starts (checked under the same lock the
/// shutdown's kill reads the list under).
fn list_as_started(daemon: &Daemon, handle: &Arc<Handle>) -> Result<(), RpcError> {
    let mut list = match daemon.started.lock() {
        Ok(l) => l,
        Err(p) => p.into_inner(),
    };
    if daemon.stopping.load(std::sync::atomic::Ordering::Acquire) {
        return Err(RpcError::new(
            rpc::OVERLOADED,
            "the daemon is stopping; nothing was run",
        ));
    }
    list.retain(|w| w.strong_count() > 0);
    list.push(Arc::downgrade(handle));
    Ok(())
}

/// The lease a spawn asked for (`lease_ms`), within `[server] max_lease_ms`.
fn lease_for(peer: &Peer, loaded: &Loaded, call: &SpawnCall) -> Result<Option<Lease>, RpcError> {
    let Some(ms) = call.lease_ms else {
        return Ok(None);
    };
    let max = loaded.config.server.max_lease_ms;
    if max == 0 {
        return Err(RpcError::params(
            "lease_ms: this daemon keeps no detached spawns ([server] max_lease_ms = 0)",
        ));
    }
    if ms > max {
        return Err(RpcError::params(format!(
            "lease_ms {ms} is over this daemon's {max} ([server] max_lease_ms)"
        )));
    }
    Lease::new(peer, &call.connector, Duration::from_millis(ms)).map(Some)
}

/// A place for one more handle on the connection, held while the spawn
/// starts (so concurrent spawns cannot pass the cap) and given back when
/// it fails, or filled by the handle in the same step it is kept.
struct HandleSlot<'a> {
    conn: &'a Connection,
    open: bool,
}

impl<'a> HandleSlot<'a> {
    fn take(conn: &'a Connection) -> Result<HandleSlot<'a>, RpcError> {
        let mut handles = conn.handles();
        handles.make_room()?;
        handles.starting += 1;
        Ok(HandleSlot { conn, open: true })
    }

    /// The handle takes the slot's place (`handles` is the connection's,
    /// already locked).
    fn fill(mut self, handles: &mut Handles) {
        handles.starting -= 1;
        self.open = false;
    }
}

impl Drop for HandleSlot<'_> {
    fn drop(&mut self) {
        if self.open {
            self.conn.handles().starting -= 1;
        }
    }
}

/// A call refused before the gate: the refusal to record, when there is
/// one, and the error that answers it.
pub(super) struct Refused {
    refusal: Option<Refusal>,
    error: RpcError,
}

impl Refused {
    /// The error alone, nothing recorded (`spawn_check`).
    pub(super) fn unrecorded(self) -> RpcError {
        self.error
    }

    /// The error once the refusal is recorded or counted for its window.
    pub(super) async fn recorded(self, daemon: &Arc<Daemon>, peer: &Peer) -> RpcError {
        match self.refusal {
            Some(refusal) => refusals::refuse(daemon, peer, refusal, self.error).await,
            None => self.error,
        }
    }
}

/// `spawn` or `spawn_op`, as the method a request names.
pub(super) fn method_name(method: &str) -> &'static str {
    if method == "spawn_op" {
        "spawn_op"
    } else {
        "spawn"
    }
}

/// The call's connector and request. A connector or op name no manifest
/// could declare is refused before the rest of the call is read.
pub(super) fn read_call(
    method: &'static str,
    params: &Map<String, Value>,
) -> Result<SpawnCall, Box<Refused>> {
    if let Err(bad) = check_names(method, params) {
        let refusal = Refusal::invalid(method, bad.field, bad.connector.clone(), None);
        return Err(Box::new(Refused {
            refusal: Some(refusal),
            error: bad.error(),
        }));
    }
    request_from(method, params).map_err(|error| {
        Box::new(Refused {
            refusal: None,
            error,
        })
    })
}

/// The loaded manifest of the call's connector, recording a refusal.
async fn manifest_for_peer(
    daemon: &Arc<Daemon>,
    peer: &Peer,
    method: &'static str,
    loaded: &Loaded,
    access: &Access,
    call: &SpawnCall,
) -> Result<Arc<Manifest>, RpcError> {
    match peer_manifest(peer, method, loaded, access, call) {
        Ok(m) => Ok(m),
        Err(refused) => Err(refused.recorded(daemon, peer).await),
    }
}

/// The loaded manifest of the call's connector, when the peer may act for
/// it. A connector that is not loaded, or a peer the access rules refuse,
/// gets the gate's denial.
pub(super) fn peer_manifest(
    peer: &Peer,
    method: &'static str,
    loaded: &Loaded,
    access: &Access,
    call: &SpawnCall,
) -> Result<Arc<Manifest>, Box<Refused>> {
    let versions: &[Arc<Manifest>] = loaded
        .manifests
        .get(&call.connector)
        .map_or(&[], |v| v.as_slice());
    let first = versions.first().map(|m| &**m);
    let refused = |denial: Box<crate::policy::Denial>| {
        let op = match &call.request.kind {
            RequestKind::Op { name, .. } => Some(name.clone()),
            RequestKind::Raw { .. } => None,
        };
        Box::new(Refused {
            refusal: Some(Refusal::denied(method, &denial, op)),
            error: rpc_error(denial_failure(&denial)),
        })
    };
    // Every version of a connector has its name, so one access check
    // covers them all, and comes before anything is said of the versions.
    let stranger = first.is_none_or(|m| {
        access
            .allows(&access_caller(peer), &m.connector.name)
            .is_err()
    });
    if stranger {
        return Err(refused(refused_before_the_program(
            &loaded.config,
            first,
            access,
            peer,
            &call.connector,
            &call.request,
        )));
    }
    // The loaded manifest itself, shared: a spawn never copies it.
    crate::policy::select_served(&call.connector, versions, &call.request.pin)
        .map(Arc::clone)
        .map_err(refused)
}

/// Reserves, from `[server] max_buffered_output_bytes` (the caller's
/// share of it, while others are present), the most output this spawn can
/// leave in its handle: its operation's stdout and stderr caps. Past that
/// the daemon is overloaded for this caller and nothing starts.
fn reserve_output(
    daemon: &Daemon,
    peer: &Peer,
    manifest: &Manifest,
    request: &Request,
) -> Result<Taken, RpcError> {
    let caps = manifest.spawn.as_ref().map_or(0, |g| {
        let limits = match &request.kind {
            RequestKind::Op { name, .. } => g.operations.get(name).map_or(g.limits, |op| op.limits),
            RequestKind::Raw { .. } => g.limits,
        };
        limits
            .max_stdout_bytes
            .saturating_add(limits.max_stderr_bytes)
    });
    // And the window of output past each stream's cap, kept for live readers.
    let caps = caps.saturating_add(2 * super::handles::PAST_CAP_WINDOW as u64);
    daemon.buffered.take(peer.uid, caps).map_err(|refusal| {
        super::overloaded(
            &refusal,
            "a spawn reserves its operation's stdout and stderr caps and a window of output past them for live readers; spawn_release finished handles or try later",
        )
    })
}

/// Whether the program started, or the error that came first.
type Started = oneshot::Sender<Result<(), RpcError>>;

/// One admitted spawn, for its blocking thread: the request with the
/// config, manifest and caller it is decided under, the permit and spawner
/// its run holds, the handle its output and result go to, and who waits to
/// hear that it started.
struct Job {
    loaded: Arc<Loaded>,
    manifest: Arc<Manifest>,
    caller: Caller,
    call: SpawnCall,
    /// The read end of a streamed stdin's pipe.
    stdin_pipe: Option<std::fs::File>,
    access: Access,
    spawner: Arc<Spawner>,
    permit: Taken,
    /// The caller's claim on the daemon's relayed connections.
    shared_connections: Claim,
    handle: Arc<Handle>,
    started_tx: Started,
}

/// A spawn on its blocking thread, start to end: the same pipeline as
/// `spawnd run` (always through the spawner) with output into the handle,
/// the result handed on, the handle marked ended, then init reaped and the
/// exit record flushed. The permit is held until then, so a shutdown waits
/// for the flush.
fn run_job(job: Job) {
    let Job {
        loaded,
        manifest,
        caller,
        call,
        stdin_pipe,
        access,
        spawner,
        permit: _permit,
        shared_connections,
        handle,
        started_tx,
    } = job;
    let SpawnCall {
        request,
        stdin,
        timeout_ms,
        ..
    } = call;
    let prepared = Prepared {
        config: Arc::clone(&loaded.config),
        manifest,
        caller,
        request,
    };
    let (source, pump): (StdinSource, crate::pipeline::Pump) = match (stdin, stdin_pipe) {
        (_, Some(pipe)) => (StdinSource::Pipe, Some(Box::new(pipe))),
        (Some(bytes), None) => (
            StdinSource::Pipe,
            Some(Box::new(std::io::Cursor::new(bytes))),
        ),
        (None, None) => (StdinSource::Null, None),
    };
    let started_tx = Mutex::new(Some(started_tx));
    let (started_handle, started_ref) = (Arc::clone(&handle), &started_tx);
    let Finished {
        result,
        exit_record,
        leaving,
    } = {
        let killed = Arc::clone(&handle);
        let ended_by: crate::pipeline::EndedBy = Arc::new(move || killed.with(|s| s.killed_by));
        run_until_written(Spawn {
            prepared: &prepared,
            access: &access,
            stdin: source,
            pump,
            timeout_ms,
            live: Some(Box::new(HandleSink(Arc::clone(&handle)))),
            json: true,
            spawner: Some(&spawner),
            signals_end_the_run: false,
            on_notice: &log_notice,
            trace: false,
            ended_by: Some(ended_by),
            on_started: Some(Box::new(
                move |filed: &SpawnFiled, pidfd: Option<OwnedFd>| {
                    mark_started(&started_handle, started_ref, filed, pidfd)
                },
            )),
            network_learning: None,
            shared_connections: Some(shared_connections),
        })
    };
    let early = started_tx.lock().ok().and_then(|mut g| g.take());
    hand_over(&handle, result, early);
    mark_ended(&handle);
    drop(handle);
    reap_and_flush_exit_record(exit_record, leaving);
}

/// The program has started: its init's pidfd kept for `spawn_kill`, the
/// time and what its records are filed under noted, and the caller
/// answered with the handle.
fn mark_started(
    handle: &Handle,
    started_tx: &Mutex<Option<Started>>,
    filed: &SpawnFiled,
    pidfd: Option<OwnedFd>,
) {
    if let Ok(mut g) = handle.pidfd.lock() {
        *g = pidfd;
    }
    // Killed before it could be (a shutdown during its setup): now it can.
    if handle.with(|s| {
        s.started_at = Some(Instant::now());
        s.filed = Some(filed.clone());
        s.killed_by.is_some()
    }) {
        handle.kill();
    }
    if let Some(tx) = started_tx.lock().ok().and_then(|mut g| g.take()) {
        let _ = tx.send(Ok(()));
    }
}

/// Hands the pipeline's result on. Refused or failed before the program
/// started (`early` still waits), the caller gets the error and no handle;
/// afterwards the result, or the error, is the handle's.
fn hand_over(handle: &Handle, result: Result<Concluded, Failure>, early: Option<Started>) {
    match (result, early) {
        (Err(f), Some(tx)) => {
            let _ = tx.send(Err(rpc_error(f)));
        }
        (Ok(Concluded { mut result, .. }), _) => handle.with(|st| {
            // The streams' bytes live once, in the buffers.
            for stream in [&mut result.stdout, &mut result.stderr] {
                stream.text = None;
                stream.base64 = None;
            }
            st.result = Some(result);
        }),
        (Err(f), None) => handle.with(|st| st.error = Some(f.message)),
    }
}

/// The sandbox is gone: no pidfd is left to kill through, the end is
/// noted, the buffers and the handle's share of the output budget shrink to
/// the bytes kept, and whoever waits on the handle is woken.
fn mark_ended(handle: &Handle) {
    if let Ok(mut g) = handle.pidfd.lock() {
        *g = None;
    }
    handle.with(|s| {
        s.ended_at = Some(Instant::now());
        // The capped bytes, and the window past them still held for a
        // reader catching up.
        let kept = (s.output[0].len() + s.output[1].len()) as u64
            + s.past_cap
                .iter()
                .map(|p| p.bytes.capacity() as u64)
                .sum::<u64>();
        for buf in &mut s.output {
            buf.shrink_to_fit();
        }
        if let Some(r) = s.reservation.as_mut() {
            r.shrink_to(kept);
        }
    });
    // A streamed stdin's pump thread, if still reading, sees end of file.
    if let Some(stdin) = &handle.stdin {
        stdin.close_if_idle();
    }
    handle.changed.notify_waiters();
    handle.end.notify_waiters();
}

/// The caller has its result; init is reaped once it has finished leaving,
/// and the exit record, already in the log and chained, is made durable
/// (docs/audit.md: only decisions and denials must be durable before what
/// they allow). A sync that another spawn's record starts within
/// [`EXIT_RECORD_PATIENCE`] covers it, so back-to-back spawns share one
/// `fdatasync`; past that this thread flushes. A failed flush stops every
/// later spawn (`group_sync` keeps it). The job's permit is held until
/// then, so a shutdown waits for the flush.
fn reap_and_flush_exit_record(exit_record: Option<Unsynced>, leaving: Option<Leaving<'_>>) {
    if let Some(leaving) = leaving {
        if let Err(e) = leaving.reap() {
            tracing::warn!("reaping a sandbox's init: {e}");
        }
    }
    if let Some(Err(e)) = exit_record.map(|r| r.commit_within(EXIT_RECORD_PATIENCE)) {
        tracing::error!("the exit record of a finished spawn: {e}");
    }
}

/// How long a finished spawn's exit record waits for another record's
/// `fdatasync` to cover it before it flushes the disk itself.
const EXIT_RECORD_PATIENCE: Duration = Duration::from_millis(20);

/// The answer to `spawn`: the handle's name once the program has started
/// (the handle kept on the connection, and among the daemon's started
/// spawns for the shutdown's kill), or the error that came first. A
/// connection that closed meanwhile does not keep it: it is ended.
async fn answer_once_started(
    conn: &Connection,
    slot: HandleSlot<'_>,
    name: String,
    handle: Arc<Handle>,
    started: oneshot::Receiver<Result<(), RpcError>>,
) -> Result<Value, RpcError> {
    match started.await {
        Ok(Ok(())) => {
            let answer = match &handle.lease {
                Some(lease) => json!({"handle": name, "token": lease.token()}),
                None => json!({"handle": name}),
            };
            let mut handles = conn.handles();
            slot.fill(&mut handles);
            if handles.closed {
                // No one has the handle's name or token: it cannot be
                // taken up, so it is not parked either.
                drop(handles);
                handle.kill_for("disconnect", Some(&conn.peer));
            } else {
                handles.map.insert(name, handle);
            }
            Ok(answer)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(RpcError::new(-32603, "the spawn ended before it reported")),
    }
}

/// A notice of the pipeline, in the daemon's log (its stderr is the log's,
/// plain or JSON, and nothing else writes there): an exit record lost is an
/// error, anything else a warning.
fn log_notice(notice: Notice) {
    match notice {
        Notice::ExitRecordLost { .. } | Notice::ExitRecordAlsoLost { .. } => {
            tracing::error!("{notice}")
        }
        _ => tracing::warn!("{notice}"),
    }
}

/// The gate's denial of a request that stops at the connector or the caller
/// (no manifest loaded, or a peer the access rules refuse): the same checks
/// in the same order as every request, and none of them looks at the
/// program.
fn refused_before_the_program(
    config: &crate::config::Config,
    manifest: Option<&Manifest>,
    access: &Access,
    peer: &Peer,
    connector: &str,
    request: &Request,
) -> Box<crate::policy::Denial> {
    let bound = manifest
        .map(|m| config.bound_credentials(m))
        .unwrap_or_default();
    let ctx = GateContext {
        connector,
        manifest,
        disabled: manifest.is_some_and(|m| config.is_disabled(&m.connector.name)),
        access,
        bound_credentials: &bound,
        require_program_hash: config.sandbox.require_program_hash,
        network_enabled: config.network.enabled,
    };
    match crate::policy::decide(
        &ctx,
        &access_caller(peer),
        request,
        &mut ProgramOpener::default(),
    ) {
        Decision::Denied(denial) => denial,
        // Not reached: the caller of this function found the connector
        // unloaded or the peer not allowed, and the gate checks both first.
        Decision::Allowed(_) => crate::policy::Denial::new(
            crate::policy::Reason::CallerNotAllowed,
            connector,
            format!("caller:uid={},gid={}", peer.uid, peer.gid),
            vec![],
            "refused: the peer may not act for this connector",
        ),
    }
}

/// `spawn_status`'s answer: the state and, once ended, the result with
/// the streams' bytes, serialized from its type.
pub(super) fn status(h: &Handle) -> Result<Rendered, RpcError> {
    released_first(h)?;
    h.with(|s| {
        let Some(result) = s.result.as_mut() else {
            return serialized(&status_of(s));
        };
        // The streams' bytes go into the result held for this answer only:
        // `spawn_exited` and later answers read it without them.
        for (w, stream) in [&mut result.stdout, &mut result.stderr]
            .into_iter()
            .enumerate()
        {
            match std::str::from_utf8(&s.output[w]) {
                Ok(text) => stream.text = Some(text.to_string()),
                Err(_) => {
                    stream.base64 =
                        Some(base64::engine::general_purpose::STANDARD.encode(&s.output[w]))
                }
            }
        }
        let answer = serialized(&SpawnStatus::ended(&*result));
        for stream in [&mut result.stdout, &mut result.stderr] {
            (stream.text, stream.base64) = (None, None);
        }
        answer
    })
}

/// A status, serialized for the answer.
fn serialized(status: &SpawnStatus<&SpawnResult>) -> Result<Rendered, RpcError> {
    serde_json::value::to_raw_value(status)
        .map(Rendered::Serialized)
        .map_err(|e| RpcError::new(rpc::INTERNAL_ERROR, format!("spawn_status: {e}")))
}

/// A handle released before an answer about it was written: its output is
/// gone, and so is the handle.
fn released_first(h: &Handle) -> Result<(), RpcError> {
    if h.with(|s| s.released) {
        return Err(RpcError::new(
            rpc::NOT_FOUND,
            "the handle was released before this answer was written",
        ));
    }
    Ok(())
}

/// The state and, once ended, the result without the streams' bytes
/// (their sizes, hashes and `truncated` stay): `spawn_exited`'s status.
pub(super) fn status_without_output(h: &Handle) -> Value {
    h.with(|s| status_of(s).to_value())
}

/// A handle's status, its result without the streams' bytes.
fn status_of(s: &HandleState) -> SpawnStatus<&SpawnResult> {
    match (&s.result, &s.error) {
        (Some(result), _) => SpawnStatus::ended(result),
        (None, Some(e)) => SpawnStatus::Failed { error: e.clone() },
        (None, None) => SpawnStatus::Running {
            duration_ms: s.started_at.map_or(0, |t| t.elapsed().as_millis() as u64),
        },
    }
}

/// A handle's state, as `spawn_status` names it.
pub(super) fn state(h: &Handle) -> &'static str {
    h.with(|s| match (&s.result, &s.error) {
        (Some(result), _) => SpawnStatus::<&SpawnResult>::ended_state(result),
        (None, Some(_)) => "failed",
        (None, None) => "running",
    })
}

/// `spawn_wait`: the first of `named` (in their order) that has ended, and
/// all that have, waiting up to `wait` for one to.
pub(super) async fn wait_any(
    named: super::handles::Named,
    wait: Duration,
) -> Result<Value, RpcError> {
    let deadline = tokio::time::Instant::now() + wait.min(MAX_WAIT);
    loop {
        // Registered before the check, so an end between the two is not missed.
        let changes: Vec<_> = named
            .iter()
            .map(|(_, h)| Box::pin(h.end.notified()))
            .collect();
        let ended: Vec<&(String, Arc<Handle>)> =
            named.iter().filter(|(_, h)| h.finished()).collect();
        if let Some((first, h)) = ended.first() {
            return Ok(json!({
                "handle": first,
                "state": state(h),
                "ended": ended.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            }));
        }
        let any = futures_util::future::select_all(changes);
        if tokio::time::timeout_at(deadline, any).await.is_err() {
            return Ok(json!({"handle": null, "state": "running", "ended": []}));
        }
    }
}

fn which(which: Option<u64>) -> Result<usize, RpcError> {
    match which {
        Some(0) => Ok(0),
        Some(1) => Ok(1),
        _ => Err(RpcError::params("which must be 0 (stdout) or 1 (stderr)")),
    }
}

/// `spawn_output_size`.
pub(super) fn output_size(h: &Handle, stream: Option<u64>) -> Result<Value, RpcError> {
    let w = which(stream)?;
    Ok(h.with(|s| {
        let truncated = s
            .result
            .as_ref()
            .is_some_and(|r| [&r.stdout, &r.stderr][w].truncated);
        json!({"bytes": s.output[w].len(), "truncated": truncated})
    }))
}

/// `spawn_output_read`: bytes from `offset`: the capped bytes the result
/// keeps, then output past the cap while the window still holds it
/// (`skipped` counts what left it).
pub(super) struct OutputRead {
    which: usize,
    offset: u64,
    len: usize,
}

impl OutputRead {
    /// A read of stream `stream` from `offset` (0), at most `len` bytes
    /// (64 KiB, at most 1 MiB).
    pub(super) fn new(
        stream: Option<u64>,
        offset: Option<u64>,
        len: Option<u64>,
    ) -> Result<OutputRead, RpcError> {
        Ok(OutputRead {
            which: which(stream)?,
            offset: offset.unwrap_or(0),
            len: len.unwrap_or(64 << 10).min(1 << 20) as usize,
        })
    }

    /// Waits up to `wait` for bytes past the offset, or the end.
    pub(super) async fn wait(&self, h: &Handle, wait: Duration) {
        let (w, offset) = (self.which, self.offset);
        h.wait_change(wait, |s| {
            s.past_cap[w].end(s.output[w].len()) > offset || s.ended_at.is_some()
        })
        .await;
    }

    pub(super) fn answer(&self, h: &Handle) -> Result<Value, RpcError> {
        released_first(h)?;
        let (data, skipped, eof) = h.read_at(self.which, self.offset, self.len);
        Ok(json!({
            "data_b64": base64::engine::general_purpose::STANDARD.encode(&data),
            "skipped": skipped,
            "eof": eof,
        }))
    }
}

/// `spawn_stdin_write`'s bytes: `data` (text) or `data_b64`.
pub(super) fn stdin_bytes(
    data: Option<String>,
    data_b64: Option<String>,
) -> Result<Vec<u8>, RpcError> {
    match (data, data_b64) {
        (Some(t), None) => Ok(t.into_bytes()),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .map_err(|e| RpcError::params(format!("data_b64: {e}"))),
        _ => Err(RpcError::params(
            "give the bytes as data (text) or data_b64 (base64), one of them",
        )),
    }
}

/// `spawn_release` by `peer`: kills a running sandbox and frees the handle
/// at once. A finished one frees its output and gives its reservation back
/// here, not when the last reference goes (the spawn's own thread may still
/// be flushing its exit record or reaping init, and answers about it not
/// yet written hold it: they are told it was released).
pub(crate) fn release(handles: &mut Handles, peer: &Peer, name: &str) -> Result<Value, RpcError> {
    let h = handles.named(name)?;
    if h.finished() {
        let (output, past_cap, reservation) = h.with(|s| {
            s.released = true;
            (
                std::mem::take(&mut s.output),
                std::mem::take(&mut s.past_cap),
                s.reservation.take(),
            )
        });
        drop((output, past_cap, reservation));
    } else {
        h.kill_for("spawn_release", Some(peer));
    }
    handles.map.remove(name);
    Ok(json!({}))
}
