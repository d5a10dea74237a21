//! One connection: request lines read in order, each answered as it
//! completes (docs/daemon.md, "One connection, many requests").
//!
//! The reading loop takes a line, parses it and starts its method. A method
//! that cannot wait (a kill, a release, a read or status without `wait_ms`,
//! an attach, a cancel) is carried out and answered there and then, so those
//! take effect in the order they were sent. One that may wait (a spawn, a
//! wait, a stdin write) or that probes (`health`, `connectors_status`,
//! `spawn_check`) becomes a task of its own and answers when it is done.
//!
//! Each class has its own bound ([`InProgress`]), so nothing waits behind
//! another class: with every wait slot held, a kill or `health` is still
//! read and answered. Past the bound of waits or probes, the request is
//! refused at once (-32003, its `data` naming the bound); past the bound of
//! immediate answers (a peer that does not read them), the loop reads no
//! more until one is written. A wait or probe in progress ends early when
//! the peer cancels it (`$/cancelRequest {id}`, as in LSP): it is answered
//! -32800 and its slot is free.
//!
//! Answers and notifications go through one writer task, in a bounded queue.
//! Each is rendered only when its turn to enter the queue comes (one at a
//! time per connection), so however many requests wait, the connection
//! holds at most the queue's few rendered lines in memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

mod reading;

use super::detached::Registry;
use super::handles::{Handle, Handles, Named, MAX_HANDLES_PER_CONNECTION, MAX_WAIT};
use super::params::method_label;
use super::params::{
    self, AttachParams, CancelParams, HandleParams, KillParams, NoParams, OutputReadParams,
    OutputSizeParams, StatusParams, StdinWriteParams, WaitParams,
};
use super::peer::{peer_of, Accepted};
use super::results::{
    AttachResult, EmptyResult, MetricsResult, PingResult, SpawnListEntry, SpawnListResult,
};
use super::stdin::{StdinWork, Ticket};
use super::{check, detached, notifications, refusals, request, spawns, Daemon, Peer};
use crate::rpc::{self, Call, RpcError};
use reading::Reader;

/// Waits (a spawn, `wait_ms`, `spawn_wait`, a stdin write) one connection
/// may have in progress.
pub(super) const MAX_WAITS_IN_PROGRESS: usize = 64;
/// Probes (`health`, `connectors_status`, `spawn_check`) one connection may
/// have in progress; they run one at a time.
pub(super) const MAX_PROBES_IN_PROGRESS: usize = 4;
/// Immediate answers one connection may have waiting to be written.
pub(super) const MAX_IMMEDIATE_IN_PROGRESS: usize = 64;
/// Rendered lines waiting for the writer.
const OUTBOX_LINES: usize = 1;
/// How long an answer may take to be written: a peer that stops reading is
/// disconnected rather than holding the answer in memory.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Handles one `spawn_wait` may name.
const MAX_WAIT_HANDLES: usize = MAX_HANDLES_PER_CONNECTION;

/// A connection's state, shared by its reading loop and its tasks.
pub(super) struct Connection {
    pub(super) daemon: Arc<Daemon>,
    pub(super) peer: Peer,
    pub(super) handles: Mutex<Handles>,
    /// Lines for the writer task.
    outbox: mpsc::Sender<String>,
    /// The turn to render a line and put it in the outbox.
    turn: tokio::sync::Mutex<()>,
    /// Permits for requests in progress, by class.
    in_progress: InProgress,
    /// The waits and probes in progress that `$/cancelRequest` can end, by
    /// their id's JSON text.
    cancellable: Mutex<HashMap<String, Cancel>>,
    /// Set once the connection has closed: waits and notifications stop.
    closed: watch::Sender<bool>,
    /// One `health`, `connectors_status` or `spawn_check` at a time per
    /// connection in the daemon's queue for that work.
    side_turn: tokio::sync::Mutex<()>,
}

/// An answer, rendered only in its turn to enter the outbox: however many
/// requests are in progress, the connection holds few rendered answers.
pub(super) type Render = Box<dyn FnOnce() -> Result<Rendered, RpcError> + Send>;

/// A method's result: a tree, or already serialized from its type (a large
/// answer, `spawn_status`'s, written without a tree of its own).
pub(super) enum Rendered {
    /// A JSON tree.
    Tree(Value),
    /// The result's JSON text.
    Serialized(Box<serde_json::value::RawValue>),
}

/// A method's wait, ending with its answer.
type Work = std::pin::Pin<Box<dyn std::future::Future<Output = Render> + Send>>;

/// What starting a method gave.
enum Started {
    /// It was carried out: its answer.
    Now(Render),
    /// A wait that ends with its answer; dropped if the connection closes.
    Later(Work),
    /// A task that must run to its end even if the connection closes (a
    /// spawn keeps or ends its handle; a stdin ticket keeps the order).
    LaterToTheEnd(Work),
}

/// An answer already known.
fn ready(result: Result<Value, RpcError>) -> Render {
    Box::new(move || result.map(Rendered::Tree))
}

/// A wait whose result is the answer (small values, rendered as they are).
fn later<F>(work: F) -> Work
where
    F: std::future::Future<Output = Result<Value, RpcError>> + Send + 'static,
{
    Box::pin(async move { ready(work.await) })
}

/// What a request in progress holds until it is answered: its place among
/// its class's ([`InProgress`]), and its line's bytes from the
/// connection's input budget ([`input_budget`]).
type Held = (OwnedSemaphorePermit, OwnedSemaphorePermit);

/// The classes of requests, each bounded on its own so that none waits
/// behind another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// Carried out and answered at once.
    Immediate,
    /// May wait without bound of its own (a spawn, `wait_ms`,
    /// `spawn_wait`, a stdin write).
    Wait,
    /// Probes the host or programs (`health`, `connectors_status`,
    /// `spawn_check`): bounded work, one at a time per connection.
    Probe,
}

impl Class {
    /// The class of `call`: by its method, and for a status, read or wait
    /// by whether it asks to wait.
    fn of(call: &Call) -> Class {
        let waits = || wait_of(params::peek_wait_ms(&call.params)).is_some();
        match call.method.as_str() {
            "spawn" | "spawn_op" | "spawn_stdin_write" | "spawn_stdin_close" => Class::Wait,
            "spawn_status" | "spawn_output_read" | "spawn_wait" if waits() => Class::Wait,
            "health" | "connectors_status" | "spawn_check" => Class::Probe,
            _ => Class::Immediate,
        }
    }
}

/// A connection's permits for requests in progress, by [`Class`].
struct InProgress {
    immediate: Arc<Semaphore>,
    waits: Arc<Semaphore>,
    probes: Arc<Semaphore>,
}

impl InProgress {
    fn new() -> InProgress {
        InProgress {
            immediate: Arc::new(Semaphore::new(MAX_IMMEDIATE_IN_PROGRESS)),
            waits: Arc::new(Semaphore::new(MAX_WAITS_IN_PROGRESS)),
            probes: Arc::new(Semaphore::new(MAX_PROBES_IN_PROGRESS)),
        }
    }

    /// Whether no request is in progress.
    fn none(&self) -> bool {
        self.immediate.available_permits() == MAX_IMMEDIATE_IN_PROGRESS
            && self.waits.available_permits() == MAX_WAITS_IN_PROGRESS
            && self.probes.available_permits() == MAX_PROBES_IN_PROGRESS
    }

    /// Returns once every request in progress has been answered.
    async fn all_answered(&self) {
        let _ = self.waits.acquire_many(MAX_WAITS_IN_PROGRESS as u32).await;
        let _ = self
            .probes
            .acquire_many(MAX_PROBES_IN_PROGRESS as u32)
            .await;
        let _ = self
            .immediate
            .acquire_many(MAX_IMMEDIATE_IN_PROGRESS as u32)
            .await;
    }

    /// A wait's or probe's place, or why there is none: -32003 naming the
    /// bound and what this connection has in progress.
    fn try_take(&self, class: Class) -> Result<OwnedSemaphorePermit, RpcError> {
        let (permits, max, limit, what) = match class {
            Class::Probe => (
                &self.probes,
                MAX_PROBES_IN_PROGRESS,
                "probes_in_progress_per_connection",
                "health, connectors_status and spawn_check requests",
            ),
            _ => (
                &self.waits,
                MAX_WAITS_IN_PROGRESS,
                "waits_in_progress_per_connection",
                "waiting requests (spawns, wait_ms, spawn_wait, stdin writes)",
            ),
        };
        Arc::clone(permits).try_acquire_owned().map_err(|_| {
            RpcError::with_data(
                rpc::OVERLOADED,
                format!(
                    "this connection has {max} {what} in progress; wait for their answers, cancel some ($/cancelRequest), or wait on many handles with one spawn_wait"
                ),
                json!({"limit": limit, "max": max, "caller_uses": max}),
            )
        })
    }
}

/// How a cancellable request in progress is ended early; requests that
/// share an id share it.
struct Cancel {
    token: CancellationToken,
    /// Requests in progress with this id.
    requests: usize,
}

/// The bytes of request lines one connection may have in progress: two
/// frames' worth. Past that, the next line waits to be taken until earlier
/// ones are answered, so what requests keep of their lines (a spawn's
/// arguments, a stdin write's bytes) stays bounded per connection.
fn input_budget(max_frame_bytes: usize) -> usize {
    max_frame_bytes
        .saturating_mul(2)
        .clamp(1, Semaphore::MAX_PERMITS)
}

/// The handle an answer names (a spawn's, an attach's), read without
/// the rest of it.
#[derive(serde::Deserialize)]
struct NamesAHandle {
    #[serde(default)]
    handle: Option<String>,
}

/// What became of an answer.
struct Answered {
    /// It reached the outbox.
    sent: bool,
    /// The handle a successful spawn or attach answer names.
    handle: Option<String>,
}

impl Connection {
    /// The handles, locked (never held across an await).
    pub(super) fn handles(&self) -> std::sync::MutexGuard<'_, Handles> {
        match self.handles.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Whether the connection has closed.
    pub(super) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Returns once the connection has closed.
    pub(super) async fn until_closed(&self) {
        let mut closed = self.closed.subscribe();
        let _ = closed.wait_for(|c| *c).await;
    }

    /// Renders a line in its turn and queues it for the writer. False once
    /// the writer is gone.
    pub(super) async fn send(&self, render: impl FnOnce() -> String) -> bool {
        let _turn = self.turn.lock().await;
        let Ok(slot) = self.outbox.reserve().await else {
            return false;
        };
        slot.send(render());
        true
    }

    /// Renders the answer to request `id` in its turn and queues it (a
    /// request without an id, a JSON-RPC notification, gets none).
    async fn answer(&self, id: Option<Value>, render: Render) -> Answered {
        let Some(id) = id else {
            return Answered {
                sent: false,
                handle: None,
            };
        };
        let mut handle = None;
        let sent = self
            .send(|| match render() {
                Ok(Rendered::Serialized(text)) => rpc::success_serialized(&id, &text),
                Ok(Rendered::Tree(v)) => {
                    handle = NamesAHandle::deserialize(&v).ok().and_then(|n| n.handle);
                    // The line is sure to be queued now: from here the peer
                    // may know the handle (and a lease's token).
                    if let Some(h) = handle.as_deref().and_then(|n| self.handles().named(n).ok()) {
                        h.with(|s| s.announced = true);
                    }
                    rpc::success(&id, v)
                }
                Err(e) => rpc::failure(&id, &e),
            })
            .await;
        Answered { sent, handle }
    }

    /// Takes one parsed request: carries out what cannot wait at once, in
    /// order, and leaves the answer (and any wait) to a task holding the
    /// request's permit, so the reading loop never waits on the peer.
    fn take(self: &Arc<Self>, call: Call, permit: Held) {
        let arrived = std::time::Instant::now();
        let (id, method) = (call.id.clone(), call.method.clone());
        let started = self.start(call);
        // Cancellable from here, in the reading loop: a `$/cancelRequest`
        // read next finds it, whenever its task first runs.
        let cancel = match &started {
            Started::Later(_) => Some(self.cancellable(id.as_ref())),
            _ => None,
        };
        let conn = Arc::clone(self);
        tokio::spawn(async move {
            let render = match (started, cancel) {
                (Started::Now(render), _) => render,
                (Started::Later(work), cancel) => {
                    let cancel = cancel.unwrap_or_default();
                    let render = tokio::select! {
                        render = work => render,
                        () = cancel.cancelled() => ready(Err(cancelled())),
                        _ = conn.until_closed() => return,
                    };
                    conn.no_longer_cancellable(id.as_ref(), &cancel);
                    render
                }
                (Started::LaterToTheEnd(work), _) => work.await,
            };
            let answered = conn.answer(id, render).await;
            crate::metrics::answered(method_label(&method), arrived.elapsed());
            conn.follow_up(&method, answered);
            drop(permit);
        });
    }

    /// Answers a request that was not started: its error, from a task
    /// holding `permit` like any answer.
    fn refuse(self: &Arc<Self>, id: Option<Value>, e: RpcError, permit: Held) {
        let conn = Arc::clone(self);
        tokio::spawn(async move {
            conn.answer(id, ready(Err(e))).await;
            drop(permit);
        });
    }

    /// A stdin write or close refused before it took its turn breaks its
    /// handle's stream, as one the stream refuses does: a later write
    /// would reach the program with a hole before it.
    fn breaks_stdin(&self, call: &Call, e: RpcError) -> RpcError {
        if !matches!(
            call.method.as_str(),
            "spawn_stdin_write" | "spawn_stdin_close"
        ) {
            return e;
        }
        let handle = match call.params.get("handle") {
            Some(Value::String(name)) => self.handles().named(name).ok(),
            _ => None,
        };
        match handle.as_ref().and_then(|h| h.stdin.as_ref()) {
            Some(stream) => stream.refuse(e),
            None => e,
        }
    }

    /// The token that ends the request with `id` early (a request without
    /// an id cannot be named, so its token is never cancelled).
    fn cancellable(&self, id: Option<&Value>) -> CancellationToken {
        let Some(id) = id else {
            return CancellationToken::new();
        };
        let mut cancellable = lock(&self.cancellable);
        let entry = cancellable.entry(id.to_string()).or_insert_with(|| Cancel {
            token: CancellationToken::new(),
            requests: 0,
        });
        entry.requests += 1;
        entry.token.clone()
    }

    /// The request with `id`, holding `token`, has ended. A cancelled
    /// token's entry is gone already (a later request may have reused the
    /// id since, under an entry of its own).
    fn no_longer_cancellable(&self, id: Option<&Value>, token: &CancellationToken) {
        let Some(id) = id else { return };
        if token.is_cancelled() {
            return;
        }
        let mut cancellable = lock(&self.cancellable);
        let key = id.to_string();
        if let Some(entry) = cancellable.get_mut(&key) {
            entry.requests -= 1;
            if entry.requests == 0 {
                cancellable.remove(&key);
            }
        }
    }

    /// `$/cancelRequest {id}`: ends the waits and probes in progress with
    /// that id (each is answered -32800). Spawns and stdin writes run to
    /// their end and answer as usual. How many were ended.
    fn cancel(&self, params: &Map<String, Value>) -> Result<Value, RpcError> {
        let CancelParams { id } = params::parse(params).map_err(|e| {
            RpcError::params(format!(
                "$/cancelRequest needs the id (a string or number) of a request in progress: {}",
                e.message
            ))
        })?;
        let cancelled = match lock(&self.cancellable).remove(&id.to_value().to_string()) {
            Some(entry) => {
                entry.token.cancel();
                entry.requests
            }
            None => 0,
        };
        Ok(json!({ "cancelled": cancelled }))
    }

    /// After a spawn's or an attach's answer: the handle's notifications
    /// start, if it asked for them. A spawn whose answer never reached the
    /// peer (its handle and token unknown to anyone) is ended.
    fn follow_up(self: &Arc<Self>, method: &str, answered: Answered) {
        if !matches!(method, "spawn" | "spawn_op" | "spawn_attach") {
            return;
        }
        let Some(name) = answered.handle else { return };
        if !answered.sent && method != "spawn_attach" {
            if let Some(handle) = self.handles().map.remove(&name) {
                handle.kill_for("disconnect", Some(&self.peer));
            }
            return;
        }
        let Ok(handle) = self.handles().named(&name) else {
            return;
        };
        self.notify_about(method, name, handle);
    }

    /// Starts the notifications of a handle just answered, if it asked:
    /// a new spawn's from its first byte, an attached one's from the next.
    fn notify_about(self: &Arc<Self>, method: &str, name: String, handle: Arc<Handle>) {
        if !handle.notify {
            return;
        }
        let from = if method == "spawn_attach" {
            [handle.stream_end(0), handle.stream_end(1)]
        } else {
            [0, 0]
        };
        tokio::spawn(notifications::forward(Arc::clone(self), name, handle, from));
    }

    fn start(self: &Arc<Self>, call: Call) -> Started {
        let Call { method, params, .. } = call;
        match method.as_str() {
            "health" | "connectors_status" | "ping" | "spawn_list" | "metrics" => {
                self.start_about_the_daemon(&method, &params)
            }
            "spawn" | "spawn_op" | "spawn_check" => self.start_spawn(&method, &params),
            "$/cancelRequest" => Started::Now(ready(self.cancel(&params))),
            _ => self.start_about_a_handle(&method, &params),
        }
    }

    /// A request about the daemon itself: its health, its connectors, a
    /// ping, the caller's spawns, its metrics.
    fn start_about_the_daemon(
        self: &Arc<Self>,
        method: &str,
        params: &Map<String, Value>,
    ) -> Started {
        let conn = Arc::clone(self);
        match method {
            "health" => self.with_params(params, |NoParams {}| {
                Ok(Started::Later(later(async move {
                    conn.may_ask("health").await?;
                    let _turn = conn.side_turn.lock().await;
                    conn.health().await
                })))
            }),
            "connectors_status" => self.with_params(params, |NoParams {}| {
                Ok(Started::Later(later(async move {
                    conn.may_ask("connectors_status").await?;
                    let _turn = conn.side_turn.lock().await;
                    conn.connectors_status().await
                })))
            }),
            "ping" => self.with_params(params, |NoParams {}| {
                Ok(Started::Now(ready(to_value(PingResult {
                    version: env!("CARGO_PKG_VERSION").to_string(),
                }))))
            }),
            "spawn_list" => self.with_params(params, |NoParams {}| {
                Ok(Started::Now(ready(to_value(self.spawn_list()))))
            }),
            "metrics" => self.with_params(params, |NoParams {}| {
                Ok(Started::Later(later(async move {
                    conn.may_ask("metrics").await?;
                    to_value(MetricsResult {
                        text: crate::metrics::render(),
                    })
                })))
            }),
            other => unknown_method(other),
        }
    }

    /// A spawn, or the gate's answer to one (`spawn_check`).
    fn start_spawn(self: &Arc<Self>, method: &str, params: &Map<String, Value>) -> Started {
        let conn = Arc::clone(self);
        match method {
            "spawn" | "spawn_op" => {
                let method = spawns::method_name(method);
                let call = spawns::read_call(method, params);
                Started::LaterToTheEnd(later(
                    async move { spawns::spawn(&conn, method, call).await },
                ))
            }
            "spawn_check" => match check::read(params) {
                Ok((method, call)) => Started::Later(later(async move {
                    let _turn = conn.side_turn.lock().await;
                    check::check(&conn.daemon, &conn.peer, method, call).await
                })),
                Err(e) => Started::Now(ready(Err(e))),
            },
            other => unknown_method(other),
        }
    }

    /// A request about one of the connection's handles (or one to take
    /// up, `spawn_attach`).
    fn start_about_a_handle(
        self: &Arc<Self>,
        method: &str,
        params: &Map<String, Value>,
    ) -> Started {
        match method {
            "spawn_status" => self.with_params(params, |p: StatusParams| {
                let h = self.handles().named(&p.handle)?;
                let wait = wait_of(p.wait_ms);
                Ok(Started::Later(Box::pin(async move {
                    if let Some(wait) = wait {
                        let _ = tokio::time::timeout(wait, h.ended()).await;
                    }
                    Box::new(move || spawns::status(&h)) as Render
                })))
            }),
            "spawn_wait" => self.with_params(params, |p: WaitParams| {
                let (named, wait) = self.handles_to_wait_for(p)?;
                Ok(Started::Later(later(spawns::wait_any(named, wait))))
            }),
            "spawn_output_size" => self.with_params(params, |p: OutputSizeParams| {
                let h = self.handles().named(&p.handle)?;
                Ok(Started::Now(ready(spawns::output_size(&h, p.which))))
            }),
            "spawn_output_read" => self.with_params(params, |p: OutputReadParams| {
                let h = self.handles().named(&p.handle)?;
                let read = spawns::OutputRead::new(p.which, p.offset, p.len)?;
                let wait = wait_of(p.wait_ms);
                Ok(Started::Later(Box::pin(async move {
                    if let Some(wait) = wait {
                        read.wait(&h, wait).await;
                    }
                    Box::new(move || read.answer(&h).map(Rendered::Tree)) as Render
                })))
            }),
            "spawn_kill" => self.with_params(params, |p: KillParams| {
                let h = self.handles().named(&p.handle)?;
                let signal = p.signal.map_or(libc::SIGKILL, params::KillSignal::number);
                h.signal_for(signal, &self.peer);
                Ok(Started::Now(ready(to_value(EmptyResult {}))))
            }),
            "spawn_release" => self.with_params(params, |p: HandleParams| {
                Ok(Started::Now(ready(spawns::release(
                    &mut self.handles(),
                    &self.peer,
                    &p.handle,
                ))))
            }),
            "spawn_stdin_write" => self.with_params(params, |p: StdinWriteParams| {
                let h = self.handles().named(&p.handle)?;
                let bytes = spawns::stdin_bytes(p.data, p.data_b64)?;
                let ticket = self.stdin_ticket(&h, bytes.len())?;
                Ok(to_the_end(h, ticket, StdinWork::Write(bytes)))
            }),
            "spawn_stdin_close" => self.with_params(params, |p: HandleParams| {
                let h = self.handles().named(&p.handle)?;
                let ticket = self.stdin_ticket(&h, 0)?;
                Ok(to_the_end(h, ticket, StdinWork::Close))
            }),
            "spawn_attach" => self.with_params(params, |p: AttachParams| Ok(self.attach(p))),
            other => unknown_method(other),
        }
    }

    /// A handle's next stdin ticket, its bytes counted in the daemon's
    /// buffered output budget until they are in the program's pipe.
    fn stdin_ticket(&self, handle: &Handle, bytes: usize) -> Result<Ticket, RpcError> {
        let Some(stream) = handle.stdin.as_ref() else {
            return Err(super::stdin::not_streamed());
        };
        let reservation = self
            .daemon
            .buffered
            .take(self.peer.uid, bytes as u64)
            .map_err(|refusal| {
                stream.refuse(super::overloaded(
                    &refusal,
                    "stdin waiting for its program counts in the buffered bytes; wait for earlier writes' answers",
                ))
            })?;
        stream.ticket(reservation)
    }

    /// Starts a method with its params read as its type `P`
    /// ([`params::parse`]); an error in them is the answer.
    fn with_params<P: serde::de::DeserializeOwned>(
        &self,
        params: &Map<String, Value>,
        start: impl FnOnce(P) -> Result<Started, RpcError>,
    ) -> Started {
        match params::parse(params).and_then(start) {
            Ok(started) => started,
            Err(e) => Started::Now(ready(Err(e))),
        }
    }

    /// `spawn_wait`'s handles, by name, in the order given, and its wait.
    fn handles_to_wait_for(&self, p: WaitParams) -> Result<(Named, Duration), RpcError> {
        if p.handles.is_empty() || p.handles.len() > MAX_WAIT_HANDLES {
            return Err(RpcError::params(format!(
                "handles must name 1 to {MAX_WAIT_HANDLES} handles"
            )));
        }
        let handles = self.handles();
        let named = p
            .handles
            .into_iter()
            .map(|name| {
                let handle = handles.named(&name)?;
                Ok((name, handle))
            })
            .collect::<Result<Vec<_>, RpcError>>()?;
        Ok((named, wait_of(p.wait_ms).unwrap_or(Duration::ZERO)))
    }

    /// `spawn_attach`: a parked handle joins this connection at once, and
    /// its `attach` record is in the log before the next request is read;
    /// the answer waits until the record is durable. A record that cannot
    /// be written or flushed puts the handle back (-32006).
    fn attach(self: &Arc<Self>, params: AttachParams) -> Started {
        let (name, handle, answer) = match self.take_up(&params) {
            Ok(taken) => taken,
            Err(e) => return Started::Now(ready(Err(e))),
        };
        let written = tokio::task::block_in_place(|| {
            detached::write_attach_record(&self.daemon, &self.peer, &handle, &answer.state)
        });
        let conn = Arc::clone(self);
        Started::LaterToTheEnd(later(async move {
            let recorded = match written {
                Ok(written) => detached::commit_attach_record(written).await,
                Err(why) => Err(why),
            };
            match recorded {
                Ok(()) => to_value(answer),
                Err(why) => {
                    conn.park_again(name, &handle);
                    Err(RpcError::new(
                        rpc::AUDIT_UNAVAILABLE,
                        format!("{why}; the attach could not be recorded, and the handle stays detached"),
                    ))
                }
            }
        }))
    }

    /// A handle taken up whose `attach` record was lost leaves this
    /// connection again, parked as if it had closed (unless a later
    /// request released it meanwhile).
    fn park_again(&self, name: String, handle: &Arc<Handle>) {
        let held = self.handles().map.remove(&name);
        if held.is_some_and(|h| Arc::ptr_eq(&h, handle)) {
            let max_lease = Duration::from_millis(self.daemon.loaded().config.server.max_lease_ms);
            self.daemon
                .detached
                .park_or_end(name, Arc::clone(handle), max_lease, &self.peer);
        }
    }

    /// The parked handle `spawn_attach` names, taken up by this connection:
    /// its name, the handle and the answer.
    fn take_up(
        &self,
        params: &AttachParams,
    ) -> Result<(String, Arc<Handle>, AttachResult), RpcError> {
        let (name, token) = (params.handle.as_str(), params.token.as_str());
        let mut handles = self.handles();
        handles.make_room()?;
        let access = self.access();
        let caller = request::access_caller(&self.peer);
        let may_act_for = |connector: &str| {
            crate::manifest::Fqn::parse(connector)
                .is_ok_and(|fqn| access.allows(&caller, &fqn).is_ok())
        };
        let handle = self
            .daemon
            .detached
            .take(&self.peer, name, token, may_act_for)?;
        let answer = Registry::attached(name, &handle);
        handles.map.insert(name.to_string(), Arc::clone(&handle));
        Ok((name.to_string(), handle, answer))
    }

    /// `spawn_list`: every handle this connection holds, and every detached
    /// spawn started by this peer's uid for a connector the peer may act
    /// for now (held elsewhere or parked), by start time. Tokens go with
    /// the detached ones only.
    fn spawn_list(&self) -> SpawnListResult {
        let held: Vec<(String, Arc<Handle>)> = self
            .handles()
            .map
            .iter()
            .map(|(name, h)| (name.clone(), Arc::clone(h)))
            .collect();
        let access = self.access();
        let caller = request::access_caller(&self.peer);
        let may_act_for = |connector: &str| {
            crate::manifest::Fqn::parse(connector)
                .is_ok_and(|fqn| access.allows(&caller, &fqn).is_ok())
        };
        let mut listed: Vec<(Option<std::time::Instant>, SpawnListEntry)> = Vec::new();
        for (name, handle) in &held {
            listed.push(list_entry(name, handle, true, None));
        }
        for d in self.daemon.detached.listed_for(self.peer.uid) {
            if held.iter().any(|(name, _)| *name == d.name)
                || !may_act_for(&d.handle.about.connector)
            {
                continue;
            }
            listed.push(list_entry(&d.name, &d.handle, false, d.lease_left));
        }
        listed.sort_by_key(|(started, _)| *started);
        SpawnListResult {
            spawns: listed.into_iter().map(|(_, entry)| entry).collect(),
        }
    }

    /// The access rules in force.
    fn access(&self) -> crate::policy::Access {
        crate::policy::Access::Rules {
            rules: self.daemon.loaded().config.access.clone(),
            daemon_uid: nix::unistd::geteuid().as_raw(),
        }
    }

    /// Refuses (`caller_not_allowed`, recorded once per window) a peer that
    /// may act for no connector.
    async fn may_ask(&self, method: &'static str) -> Result<(), RpcError> {
        if self
            .access()
            .allows_some(&request::access_caller(&self.peer))
        {
            return Ok(());
        }
        let denial = crate::policy::Denial::new(
            crate::policy::Reason::CallerNotAllowed,
            "",
            format!("method:{method}"),
            vec![],
            format!(
                "uid {} (gid {}) may not use this daemon: no [[access]] rule names it; the operator grants it with an [[access]] entry",
                self.peer.uid, self.peer.gid
            ),
        );
        let error = RpcError::with_data(
            rpc::CAPABILITY_DENIED,
            crate::pipeline::denial_failure(&denial).message,
            serde_json::to_value(&denial).unwrap_or_default(),
        );
        let refusal = refusals::Refusal::denied(method, &denial, None);
        Err(refusals::refuse(&self.daemon, &self.peer, refusal, error).await)
    }

    async fn connectors_status(&self) -> Result<Value, RpcError> {
        let _turn = self.daemon.side_work.acquire().await;
        let daemon = Arc::clone(&self.daemon);
        let home = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(self.peer.uid))
            .ok()
            .flatten()
            .map(|u| u.dir)
            .unwrap_or_else(|| std::path::PathBuf::from("/nonexistent"));
        let access = self.access();
        let caller = request::access_caller(&self.peer);
        tokio::task::spawn_blocking(move || {
            let loaded = daemon.loaded();
            let may_act_for =
                |m: &crate::manifest::Manifest| access.allows(&caller, &m.connector.name).is_ok();
            crate::connectors::status(&loaded.config, &loaded.manifests, &home, &may_act_for)
        })
        .await
        .map_err(|e| RpcError::new(-32603, format!("connectors_status: {e}")))
        .and_then(|status| {
            serde_json::to_value(status)
                .map_err(|e| RpcError::new(-32603, format!("connectors_status: {e}")))
        })
    }

    async fn health(&self) -> Result<Value, RpcError> {
        let _turn = self.daemon.side_work.acquire().await;
        let daemon = Arc::clone(&self.daemon);
        let report = tokio::task::spawn_blocking(move || {
            let config = &daemon.loaded().config;
            let limits = crate::pipeline::limits::finding(config.sandbox.limits);
            crate::kernel_features::probe(&daemon.exe, config.audit.path.as_deref(), limits)
        })
        .await
        .map_err(|e| RpcError::new(-32603, format!("health probe: {e}")))?;
        let mut report = report;
        if let Some(why) = self.daemon.audit_failure() {
            report.audit_lost(why);
        }
        let refused = self.daemon.refused_reload();
        if let Some(r) = &refused {
            report.degrade(format!(
                "stale manifests: the reload at {} was refused ({}); the previous config and manifests stay in force until a reload succeeds",
                r.at, r.error
            ));
        }
        let mut v = serde_json::to_value(&report).unwrap_or_default();
        v["stale_manifests"] = match refused {
            Some(r) => json!({"refused_at": r.at, "error": r.error}),
            None => Value::Null,
        };
        v["protocol_version"] = json!(super::PROTOCOL_VERSION);
        v["peer"] = json!({"uid": self.peer.uid, "gid": self.peer.gid, "pid": self.peer.pid, "other_user_namespace": self.peer.other_user_namespace});
        Ok(v)
    }

    /// The connection is over: its handles are parked (leased) or ended,
    /// and its waits and notifications stop.
    fn close(&self) {
        let _ = self.closed.send(true);
        let handles = self.handles().close();
        let max_lease = Duration::from_millis(self.daemon.loaded().config.server.max_lease_ms);
        for (name, handle) in handles {
            self.daemon
                .detached
                .park_or_end(name, handle, max_lease, &self.peer);
        }
    }
}

/// A handle as `spawn_list` lists it, with its start time to order by.
fn list_entry(
    name: &str,
    handle: &Handle,
    attached: bool,
    lease_left: Option<Duration>,
) -> (Option<std::time::Instant>, SpawnListEntry) {
    let state = spawns::state(handle).to_string();
    let entry = SpawnListEntry {
        handle: name.to_string(),
        state,
        label: handle.about.label.clone(),
        connector: handle.about.connector.clone(),
        op: handle.about.op.clone(),
        detached: handle.lease.is_some(),
        attached,
        lease_ms_left: lease_left.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        token: handle.lease.as_ref().map(|l| l.token().to_string()),
    };
    (handle.with(|s| s.started_at), entry)
}

/// A result as the answer's JSON.
fn to_value<T: serde::Serialize>(result: T) -> Result<Value, RpcError> {
    serde_json::to_value(result)
        .map_err(|e| RpcError::new(rpc::INTERNAL_ERROR, format!("the result: {e}")))
}

/// A mutex's guard, even if a holder panicked.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// The answer to a request ended by `$/cancelRequest`.
fn cancelled() -> RpcError {
    RpcError::new(rpc::REQUEST_CANCELLED, "cancelled by $/cancelRequest")
}

/// A method the daemon does not know.
fn unknown_method(method: &str) -> Started {
    Started::Now(ready(Err(RpcError::new(
        rpc::METHOD_NOT_FOUND,
        format!("unknown method {method:?}"),
    ))))
}

/// A stdin write or close, carried out in its turn even if the connection
/// closes meanwhile.
fn to_the_end(handle: Arc<Handle>, ticket: Ticket, work: StdinWork) -> Started {
    Started::LaterToTheEnd(later(super::stdin::carry_out(handle, ticket, work)))
}

/// A request's wait, when its `wait_ms` asks for one (0 does not).
fn wait_of(wait_ms: Option<u64>) -> Option<Duration> {
    wait_ms
        .filter(|ms| *ms > 0)
        .map(|ms| Duration::from_millis(ms).min(MAX_WAIT))
}

/// Serves one connection until the peer closes it, the daemon stops, or an
/// answer cannot be written.
pub(super) async fn serve_connection(
    daemon: Arc<Daemon>,
    stream: UnixStream,
    accepted: Accepted,
    mut arrival: crate::shares::Arrival,
    mut stop: watch::Receiver<bool>,
) {
    // Reading the peer may hash its executable (once per file): off the
    // async workers' hands.
    let Some(peer) = tokio::task::block_in_place(|| peer_of(&stream, accepted)) else {
        return;
    };
    // A peer the access rules let act for some connector is present: its
    // shares are kept for it while it is connected (a stranger's are not).
    let access = crate::policy::Access::Rules {
        rules: daemon.loaded().config.access.clone(),
        daemon_uid: nix::unistd::geteuid().as_raw(),
    };
    if access.allows_some(&request::access_caller(&peer)) {
        arrival.vouch();
    }
    let (read, write) = stream.into_split();
    let mut reader = Reader::new(&daemon.loaded().config.server, read);
    let (outbox, lines_out) = mpsc::channel(OUTBOX_LINES);
    let (gone_tx, mut gone) = watch::channel(false);
    let writer = tokio::spawn(write_lines(write, lines_out, gone_tx));
    let conn = Arc::new(Connection {
        daemon,
        peer,
        handles: Mutex::new(Handles::default()),
        outbox,
        turn: tokio::sync::Mutex::new(()),
        in_progress: InProgress::new(),
        cancellable: Mutex::new(HashMap::new()),
        closed: watch::Sender::new(false),
        side_turn: tokio::sync::Mutex::new(()),
    });
    let ended = reader.serve(&conn, &mut stop, &mut gone).await;
    reader.answer_before_closing(&conn, ended, &mut gone).await;
    close(conn, writer).await;
}

/// Closes a connection: its waits and notifications stop, and the writer
/// is given until [`WRITE_TIMEOUT`] to write what is left.
async fn close(conn: Arc<Connection>, mut writer: tokio::task::JoinHandle<()>) {
    conn.close();
    let (daemon, peer) = (Arc::clone(&conn.daemon), conn.peer.clone());
    drop(conn);
    // The writer ends once every task holding the connection is done with
    // it; one still waiting (a stdin write the program never reads) does
    // not hold the writer past the write timeout.
    if tokio::time::timeout(WRITE_TIMEOUT, &mut writer)
        .await
        .is_err()
    {
        writer.abort();
    }
    refusals::connection_closed(&daemon, &peer).await;
}

/// Writes queued lines, each with its newline in one write (the peer is
/// woken once), until the queue closes or a write fails; then tells the
/// reading loop the peer is gone.
async fn write_lines(
    mut write: tokio::net::unix::OwnedWriteHalf,
    mut lines: mpsc::Receiver<String>,
    gone: watch::Sender<bool>,
) {
    while let Some(mut line) = lines.recv().await {
        line.push('\n');
        let written = tokio::time::timeout(WRITE_TIMEOUT, write.write_all(line.as_bytes())).await;
        if !matches!(written, Ok(Ok(()))) {
            break;
        }
    }
    let _ = gone.send(true);
}
