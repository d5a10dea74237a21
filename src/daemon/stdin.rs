//! Streamed stdin (`stdin_stream: true` on a spawn): the program's stdin is
//! fed from a pipe the daemon holds the write end of, filled by
//! `spawn_stdin_write` and closed by `spawn_stdin_close`.
//!
//! The shared pipeline pumps a reader into the program's stdin on a thread
//! of its own; here that reader is the read end of this pipe, so the kernel's
//! pipe buffer is the only buffer between a write and the program, and a
//! write is answered once its bytes are in it. Writes and the close of one
//! handle take tickets in the order the connection read them and are carried
//! out in that order; at most [`MAX_WAITING_WRITES`] wait at once, and their
//! bytes count in `[server] max_buffered_output_bytes` until they are in
//! the pipe.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;

use super::handles::Handle;
use crate::rpc::{self, RpcError};
use crate::shares::Taken;

/// `spawn_stdin_write`s (and a close) one handle may have waiting.
pub(super) const MAX_WAITING_WRITES: usize = 4;

/// The daemon's end of a spawn's streamed stdin.
pub(super) struct StdinStream {
    /// The write end; `None` once closed (by the caller, or because the
    /// program ended or stopped reading).
    pipe: tokio::sync::Mutex<Option<pipe::Sender>>,
    /// The next ticket to hand out.
    next_ticket: AtomicU64,
    /// The ticket whose turn it is.
    turn: tokio::sync::watch::Sender<u64>,
    /// Tickets handed out and not yet done.
    waiting: AtomicUsize,
    /// A write was refused: the bytes after it would reach the program
    /// with a hole before them, so every later write and the close are
    /// refused too.
    broken: std::sync::atomic::AtomicBool,
}

/// One write's or close's place in the handle's order, and its bytes'
/// share of the daemon's buffered bytes until they are in the pipe.
pub(super) struct Ticket {
    number: u64,
    _reservation: Taken,
}

/// What a ticket is for.
pub(super) enum StdinWork {
    /// Bytes for the program.
    Write(Vec<u8>),
    /// End of file.
    Close,
}

impl StdinStream {
    /// A pipe for a program's stdin: the stream that writes into it, and
    /// the read end the pipeline pumps from.
    pub(super) fn open() -> Result<(StdinStream, std::fs::File), RpcError> {
        let (read, write): (OwnedFd, OwnedFd) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| {
                RpcError::new(
                    rpc::INTERNAL_ERROR,
                    format!("a pipe for the streamed stdin: {e}; nothing was run"),
                )
            })?;
        let sender = pipe::Sender::from_owned_fd(write).map_err(|e| {
            RpcError::new(
                rpc::INTERNAL_ERROR,
                format!("a pipe for the streamed stdin: {e}; nothing was run"),
            )
        })?;
        let stream = StdinStream {
            pipe: tokio::sync::Mutex::new(Some(sender)),
            next_ticket: AtomicU64::new(0),
            turn: tokio::sync::watch::Sender::new(0),
            waiting: AtomicUsize::new(0),
            broken: std::sync::atomic::AtomicBool::new(false),
        };
        Ok((stream, std::fs::File::from(read)))
    }

    /// A place in this handle's order, taken when the request is read.
    pub(super) fn ticket(&self, reservation: Taken) -> Result<Ticket, RpcError> {
        if self.broken.load(Ordering::Acquire) {
            return Err(broken());
        }
        let waiting = self.waiting.fetch_add(1, Ordering::AcqRel);
        if waiting >= MAX_WAITING_WRITES {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(self.refuse(RpcError::new(
                rpc::OVERLOADED,
                format!(
                    "{MAX_WAITING_WRITES} writes to this program's stdin are already waiting for it to read; wait for their answers"
                ),
            )));
        }
        Ok(Ticket {
            number: self.next_ticket.fetch_add(1, Ordering::AcqRel),
            _reservation: reservation,
        })
    }

    /// Refuses a write with `error`: the stream is broken from here on.
    pub(super) fn refuse(&self, error: RpcError) -> RpcError {
        self.broken.store(true, Ordering::Release);
        RpcError::with_data(
            error.code,
            format!("{}; the stream is broken: later writes and the close are refused, kill or release the spawn", error.message),
            json!({"stdin": "broken"}),
        )
    }

    /// Closes the write end now, if no write holds it (the program ended:
    /// the pump thread reading the pipe then sees end of file).
    pub(super) fn close_if_idle(&self) {
        if let Ok(mut pipe) = self.pipe.try_lock() {
            *pipe = None;
        }
    }
}

/// Carries out `work` in its ticket's turn: the write's answer once its
/// bytes are in the pipe, or an error once the stream is closed or the
/// program has ended.
pub(super) async fn carry_out(
    handle: Arc<Handle>,
    ticket: Ticket,
    work: StdinWork,
) -> Result<Value, RpcError> {
    let Some(stream) = handle.stdin.as_ref() else {
        return Err(not_streamed());
    };
    let mut turn = stream.turn.subscribe();
    let _ = turn.wait_for(|t| *t == ticket.number).await;
    let result = in_turn(&handle, stream, work).await;
    stream.waiting.fetch_sub(1, Ordering::AcqRel);
    stream.turn.send_modify(|t| *t += 1);
    result
}

async fn in_turn(
    handle: &Handle,
    stream: &StdinStream,
    work: StdinWork,
) -> Result<Value, RpcError> {
    let mut pipe = stream.pipe.lock().await;
    match work {
        StdinWork::Close => {
            *pipe = None;
            Ok(json!({}))
        }
        StdinWork::Write(bytes) => {
            let Some(sender) = pipe.as_mut() else {
                return Err(closed());
            };
            if handle.finished() {
                *pipe = None;
                return Err(closed());
            }
            let written = tokio::select! {
                r = sender.write_all(&bytes) => r.is_ok(),
                _ = handle.ended() => false,
            };
            if written {
                Ok(json!({"bytes": bytes.len()}))
            } else {
                *pipe = None;
                Err(closed())
            }
        }
    }
}

/// The error for a handle spawned without `stdin_stream`.
pub(super) fn not_streamed() -> RpcError {
    RpcError::params("this spawn's stdin is not streamed: spawn it with stdin_stream: true")
}

fn broken() -> RpcError {
    RpcError::with_data(
        rpc::OVERLOADED,
        "an earlier write to this program's stdin was refused, so the stream is broken (what follows would reach the program with a hole before it); kill or release the spawn",
        json!({"stdin": "broken"}),
    )
}

fn closed() -> RpcError {
    RpcError::with_data(
        rpc::NOT_FOUND,
        "the program's stdin is closed: by spawn_stdin_close, or the program closed it or ended",
        json!({"stdin": "closed"}),
    )
}
