//! Handles: a spawn's shared state (its output buffers, result, share of
//! the daemon's output budget, a pidfd for `spawn_kill`), the per-connection
//! map of them, and their names — 128 random bits, owned by the connection
//! that made them, at most [`MAX_HANDLES_PER_CONNECTION`] per connection, a
//! finished one kept until `spawn_release` or [`HANDLE_LIFETIME`]. The
//! methods that use them are in [`super::spawns`].

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::Notify;

use crate::pipeline::{Interruption, SpawnFiled};
use crate::policy::Caller;
use crate::rpc::{self, RpcError};
use crate::supervise::LiveOutput;

/// Handles one connection may hold at once.
pub(crate) const MAX_HANDLES_PER_CONNECTION: usize = 64;
/// How long a finished handle is kept without `spawn_release`.
pub(crate) const HANDLE_LIFETIME: Duration = Duration::from_secs(600);
/// The longest `wait_ms` honoured.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(60);

/// One spawn's shared state.
pub(crate) struct Handle {
    state: Mutex<HandleState>,
    /// Woken on every change (output, the end).
    pub(super) changed: Notify,
    /// Woken once, when the sandbox is gone: waits for the end are not
    /// woken by every chunk of output.
    pub(super) end: Notify,
    /// A pidfd for the sandbox's init (for `spawn_kill`).
    pub(super) pidfd: Mutex<Option<OwnedFd>>,
    /// The caller's end of a streamed stdin (`stdin_stream`).
    pub(super) stdin: Option<super::stdin::StdinStream>,
    /// Whether the connection holding the handle is sent its output and
    /// exit as notifications (`notify`).
    pub(super) notify: bool,
    /// What lets the handle outlive its connection (`lease_ms`).
    pub(super) lease: Option<super::detached::Lease>,
    /// What the spawn runs, as `spawn_list` names it.
    pub(super) about: SpawnAbout,
}

/// What a spawn runs, as the call named it: its connector, operation and
/// label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct SpawnAbout {
    pub(super) connector: String,
    /// The operation of a `spawn_op` (a `spawn` has none).
    pub(super) op: Option<String>,
    pub(super) label: Option<String>,
}

/// What a spawn asked for its handle beyond the defaults.
#[derive(Default)]
pub(super) struct HandleOptions {
    pub(super) stdin: Option<super::stdin::StdinStream>,
    pub(super) notify: bool,
    pub(super) lease: Option<super::detached::Lease>,
    pub(super) about: SpawnAbout,
}

/// Output past a stream's cap, for live readers only (the result keeps
/// the capped bytes): the latest [`PAST_CAP_WINDOW`] bytes, at their
/// offsets in the stream, so a reader that keeps up sees everything and
/// one that falls behind is told how much it missed.
#[derive(Default)]
pub(super) struct PastCap {
    /// The stream offset of `bytes[0]`.
    pub(super) start: u64,
    pub(super) bytes: std::collections::VecDeque<u8>,
}

/// The bytes of output past the cap a handle holds per stream.
pub(super) const PAST_CAP_WINDOW: usize = 256 << 10;

impl PastCap {
    /// Where the stream ends: past the window, or at the capped bytes.
    pub(super) fn end(&self, kept: usize) -> u64 {
        (kept as u64).max(self.start + self.bytes.len() as u64)
    }

    /// Appends `more`, dropping the oldest bytes past the window first, so
    /// the buffer never holds (or allocates) more than the window.
    fn push(&mut self, kept: usize, more: &[u8]) {
        if self.start == 0 && self.bytes.is_empty() {
            self.start = kept as u64;
            self.bytes = std::collections::VecDeque::with_capacity(PAST_CAP_WINDOW);
        }
        // What `more` itself loses to the window is never stored.
        let lost = more.len().saturating_sub(PAST_CAP_WINDOW);
        let more = &more[lost..];
        let excess = (self.bytes.len() + more.len()).saturating_sub(PAST_CAP_WINDOW);
        let dropped = excess.min(self.bytes.len());
        self.bytes.drain(..dropped);
        self.start += (dropped + lost) as u64;
        self.bytes.extend(more);
    }
}

#[derive(Default)]
pub(super) struct HandleState {
    pub(super) output: [Vec<u8>; 2],
    /// Output past each stream's cap, for live readers.
    pub(super) past_cap: [PastCap; 2],
    /// This handle's share of the output budget.
    pub(super) reservation: Option<crate::shares::Taken>,
    /// The run's result (without the streams' bytes, which are
    /// `output`), once the sandbox is gone.
    pub(super) result: Option<crate::spawn_result::SpawnResult>,
    /// An error after the program started (supervision or audit failure).
    pub(super) error: Option<String>,
    pub(super) ended_at: Option<Instant>,
    pub(super) started_at: Option<Instant>,
    /// Who ended the program from outside, first one only: `spawn_kill`,
    /// `spawn_release`, `disconnect`, `lease`, `shutdown` (the result's and
    /// the exit record's `interrupted_by`), with the peer that did it, if
    /// one did (the exit record's `interrupted_by_peer`).
    pub(super) killed_by: Option<Interruption>,
    /// What the spawn's records are filed under, once it has started: a
    /// `spawn_attach` record names the same.
    pub(super) filed: Option<SpawnFiled>,
    /// `spawn_release` freed the output of the finished spawn.
    pub(super) released: bool,
    /// The spawn's answer reached the outbox: its name (and a lease's
    /// token) may be known to the peer.
    pub(super) announced: bool,
}

impl Handle {
    pub(super) fn new(options: HandleOptions) -> Arc<Handle> {
        Arc::new(Handle {
            state: Mutex::new(HandleState::default()),
            changed: Notify::new(),
            end: Notify::new(),
            pidfd: Mutex::new(None),
            stdin: options.stdin,
            notify: options.notify,
            lease: options.lease,
            about: options.about,
        })
    }

    pub(super) fn with<T>(&self, f: impl FnOnce(&mut HandleState) -> T) -> T {
        let mut guard = match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    pub(super) fn finished(&self) -> bool {
        self.with(|s| s.ended_at.is_some())
    }

    /// Waits until the state changes or `wait` passes (no polling).
    pub(super) async fn wait_change(&self, wait: Duration, done: impl Fn(&HandleState) -> bool) {
        let deadline = tokio::time::Instant::now() + wait.min(MAX_WAIT);
        loop {
            let notified = self.changed.notified();
            if self.with(|s| done(s)) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }

    /// Returns once the sandbox is gone.
    pub(super) async fn ended(&self) {
        loop {
            let notified = self.end.notified();
            if self.finished() {
                return;
            }
            notified.await;
        }
    }

    /// Where stream `w` ends now: past the window, or at the capped bytes.
    pub(super) fn stream_end(&self, w: usize) -> u64 {
        self.with(|s| s.past_cap[w].end(s.output[w].len()))
    }

    /// Up to `len` bytes of stream `w` from `offset`: the capped bytes the
    /// result keeps, then output past the cap while the window still holds
    /// it. Also how many bytes left the window before this read
    /// (`skipped`), and whether the stream is over and read to its end.
    pub(super) fn read_at(&self, w: usize, offset: u64, len: usize) -> (Vec<u8>, u64, bool) {
        self.with(|s| {
            let buf = &s.output[w];
            let past = &s.past_cap[w];
            let stream_end = past.end(buf.len());
            let (data, skipped): (Vec<u8>, u64) = match usize::try_from(offset) {
                Ok(at) if at < buf.len() => {
                    let end = at.saturating_add(len).min(buf.len());
                    (buf[at..end].to_vec(), 0)
                }
                _ => {
                    let from = offset.max(past.start);
                    let at = usize::try_from(from - past.start).unwrap_or(usize::MAX);
                    let data = past.bytes.iter().skip(at).take(len).copied().collect();
                    (data, from.saturating_sub(offset))
                }
            };
            let next = offset + skipped + data.len() as u64;
            (data, skipped, s.ended_at.is_some() && next >= stream_end)
        })
    }

    /// Kills the sandbox for `how` ([`HandleState::killed_by`]), by `peer`
    /// when a peer's request or closed connection does it, if it still
    /// runs.
    pub(crate) fn kill_for(&self, how: &'static str, peer: Option<&super::Peer>) {
        let interruption = Interruption {
            how,
            peer: peer.map(super::Peer::actor),
        };
        self.with(|s| {
            if s.ended_at.is_none() {
                s.killed_by.get_or_insert(interruption);
            }
        });
        self.kill();
    }

    /// Kills the sandbox (SIGKILL to its init, through a pidfd).
    pub(crate) fn kill(&self) {
        self.send_to_init(libc::SIGKILL);
    }

    /// `spawn_kill` with `signal`, by `peer`: SIGKILL kills the sandbox;
    /// another signal goes to its init, which forwards it to the program
    /// (the program decides what follows: one that traps it may exit as it
    /// likes). Either way the peer is on record as what interrupted the
    /// program, if it still runs.
    pub(crate) fn signal_for(&self, signal: i32, peer: &super::Peer) {
        if signal == libc::SIGKILL {
            return self.kill_for("spawn_kill", Some(peer));
        }
        let interruption = Interruption {
            how: "spawn_kill",
            peer: Some(peer.actor()),
        };
        self.with(|s| {
            if s.ended_at.is_none() {
                s.killed_by.get_or_insert(interruption);
            }
        });
        self.send_to_init(signal);
    }

    /// Sends `signal` to the sandbox's init through its pidfd (nothing once
    /// the sandbox is gone).
    fn send_to_init(&self, signal: i32) {
        if let Ok(guard) = self.pidfd.lock() {
            if let Some(fd) = guard.as_ref() {
                let _ = crate::sys::pidfd_send_signal(fd.as_fd(), signal);
            }
        }
    }
}

/// Output into a handle's buffers, waking whoever waits.
pub(super) struct HandleSink(pub(super) Arc<Handle>);

impl LiveOutput for HandleSink {
    fn chunk(&mut self, which: u8, kept: &[u8]) {
        self.0
            .with(|s| s.output[usize::from(which.min(1))].extend_from_slice(kept));
        self.0.changed.notify_waiters();
    }

    fn past_cap(&mut self, which: u8, bytes: &[u8]) {
        let w = usize::from(which.min(1));
        self.0.with(|s| {
            let kept = s.output[w].len();
            s.past_cap[w].push(kept, bytes);
        });
        self.0.changed.notify_waiters();
    }
}

/// Handles with their names, in a caller's order.
pub(super) type Named = Vec<(String, Arc<Handle>)>;

/// A connection's handles, and the caller its peer stands for.
#[derive(Default)]
pub(crate) struct Handles {
    pub(super) map: HashMap<String, Arc<Handle>>,
    /// Looked up in the password database on the connection's first spawn
    /// (the peer's credentials are fixed at connect): not once per request.
    pub(super) caller: Option<Caller>,
    /// Spawns admitted and not yet answered: they count against the cap.
    pub(super) starting: usize,
    /// The connection has closed: a spawn that starts now is not kept here.
    pub(super) closed: bool,
}

impl Handles {
    /// The handle `name` of this connection.
    pub(super) fn named(&self, name: &str) -> Result<Arc<Handle>, RpcError> {
        self.map.get(name).cloned().ok_or_else(|| {
            RpcError::with_data(
                rpc::NOT_FOUND,
                "no such handle on this connection",
                json!({"handle": rpc::at_most(name, 64)}),
            )
        })
    }

    /// Whether the connection holds no handle and starts none.
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty() && self.starting == 0
    }

    /// Drops finished handles past their lifetime.
    pub(crate) fn expire(&mut self) {
        self.map
            .retain(|_, h| h.with(|s| s.ended_at.is_none_or(|t| t.elapsed() < HANDLE_LIFETIME)));
    }

    /// Room for one more handle: finished handles past their lifetime go
    /// first; then a connection at [`MAX_HANDLES_PER_CONNECTION`] (counting
    /// the spawns still starting) is refused.
    pub(super) fn make_room(&mut self) -> Result<(), RpcError> {
        self.expire();
        let held = self.map.len() + self.starting;
        if held >= MAX_HANDLES_PER_CONNECTION {
            return Err(RpcError::with_data(
                rpc::OVERLOADED,
                format!(
                    "this connection holds {MAX_HANDLES_PER_CONNECTION} handles; spawn_release some"
                ),
                json!({"limit": "handles_per_connection", "max": MAX_HANDLES_PER_CONNECTION, "caller_uses": held}),
            ));
        }
        Ok(())
    }

    /// The connection closed: every handle leaves it, to be parked or ended.
    pub(crate) fn close(&mut self) -> Vec<(String, Arc<Handle>)> {
        self.closed = true;
        self.map.drain().collect()
    }
}

/// A fresh, unguessable handle name: 128 bits from the kernel's CSPRNG
/// (`getrandom(2)`; no descriptor, so it works when the daemon is out of
/// them). Without randomness, no handle (and no spawn).
pub(super) fn new_handle_name() -> Result<String, RpcError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        RpcError::new(
            -32603,
            format!("no randomness for a handle name (getrandom: {e}); nothing was run"),
        )
    })?;
    Ok(format!("h-{}", hex::encode(bytes)))
}

#[cfg(test)]
mod past_cap_tests {
    use super::*;

    #[test]
    fn the_window_follows_the_capped_bytes_and_keeps_the_latest() {
        let mut p = PastCap::default();
        p.push(10, b"abc");
        assert_eq!((p.start, p.end(10)), (10, 13));
        p.push(10, &vec![b'x'; PAST_CAP_WINDOW]);
        assert_eq!(p.bytes.len(), PAST_CAP_WINDOW);
        assert_eq!(p.start, 13);
        assert_eq!(p.end(10), 13 + PAST_CAP_WINDOW as u64);
        // More than the window at once: only its last window is kept, and
        // the buffer never grows past the window.
        p.push(10, &vec![b'y'; PAST_CAP_WINDOW + 5]);
        assert_eq!(p.end(10), 13 + 2 * PAST_CAP_WINDOW as u64 + 5);
        assert_eq!(p.start, p.end(10) - PAST_CAP_WINDOW as u64);
        assert!(p.bytes.iter().all(|&b| b == b'y'));
        assert!(p.bytes.capacity() < 2 * PAST_CAP_WINDOW);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn handle_names_are_128_random_bits_and_do_not_repeat() {
        let names: std::collections::HashSet<String> = (0..1000)
            .map(|_| super::new_handle_name().expect("getrandom"))
            .collect();
        assert_eq!(names.len(), 1000);
        for n in &names {
            let hex = n.strip_prefix("h-").expect("prefix");
            assert_eq!(hex.len(), 32, "{n}");
            assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{n}");
        }
    }
}
