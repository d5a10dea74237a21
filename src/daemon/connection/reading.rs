//! The reading side of a connection: request lines as they arrive, the
//! timers that close a silent or trickling peer, and each request's place
//! (its line's bytes and its class's permit) before it is started.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::net::unix::OwnedReadHalf;
use tokio::net::UnixStream;
use tokio::sync::{watch, Semaphore};
use tokio_util::codec::FramedRead;

use super::super::frames::{Frame, RequestLines};
use super::{input_budget, ready, Class, Connection, Held, MAX_WAIT, WRITE_TIMEOUT};
use crate::config::ServerConfig;
use crate::rpc::{self, Call, RpcError};

/// A request line read, as the loop goes on with it.
enum Next {
    /// A blank line: no request, and nothing that keeps a connection open.
    Skip,
    /// The stream failed: the connection ends.
    Stop,
    /// A request (or why it is not one), and its line's length.
    Request(usize, Result<Call, (Value, RpcError)>),
}

/// One connection's request lines and the state of their timers.
pub(super) struct Reader {
    lines: FramedRead<OwnedReadHalf, RequestLines>,
    /// The bytes of request lines in progress ([`input_budget`]).
    input: Arc<Semaphore>,
    max_frame_bytes: usize,
    frame_timeout: Duration,
    idle_timeout: Duration,
    /// When the bytes of an unfinished request line were first seen (or
    /// the rest of an oversized one began to be dropped): a peer that
    /// trickles them is cut off after `frame_timeout`.
    partial_since: Option<Instant>,
    /// A connection that holds no handle, has nothing in progress and says
    /// nothing is closed after `idle_timeout`, so silent peers cannot hold
    /// every slot.
    last_request: Instant,
}

impl Reader {
    pub(super) fn new(server: &ServerConfig, read: OwnedReadHalf) -> Reader {
        let max_frame_bytes = server.max_frame_bytes as usize;
        Reader {
            lines: FramedRead::new(read, RequestLines::new(max_frame_bytes)),
            input: Arc::new(Semaphore::new(input_budget(max_frame_bytes))),
            max_frame_bytes,
            frame_timeout: Duration::from_millis(server.frame_timeout_ms),
            idle_timeout: Duration::from_millis(server.idle_timeout_ms),
            partial_since: None,
            last_request: Instant::now(),
        }
    }

    /// Reads requests and starts each in its place until the connection
    /// ends. Returns whether the peer closed its writing side (it may still
    /// read the answers in progress).
    pub(super) async fn serve(
        &mut self,
        conn: &Arc<Connection>,
        stop: &mut watch::Receiver<bool>,
        gone: &mut watch::Receiver<bool>,
    ) -> bool {
        loop {
            let now = Instant::now();
            if let Some(why) = self.closing(conn, now) {
                let e = RpcError::new(rpc::INVALID_REQUEST, why);
                conn.answer(Some(Value::Null), ready(Err(e))).await;
                return false;
            }
            let recheck = self.recheck(now);
            let frame = tokio::select! {
                frame = self.lines.next() => frame,
                _ = stop.changed() => return false,
                _ = gone.changed() => return false,
                _ = tokio::time::sleep(recheck) => continue,
            };
            let Some(frame) = frame else {
                return true;
            };
            // A whole line arrived: its timer ends here, and time spent
            // answering it never counts against the next one.
            self.partial_since = None;
            let (bytes, parsed) = match self.request_of(frame) {
                Next::Skip => continue,
                Next::Stop => return false,
                Next::Request(bytes, parsed) => (bytes, parsed),
            };
            // A `ping` tests the connection; it keeps no idle one open.
            let activity = !matches!(&parsed, Ok(call) if call.method == "ping");
            if !activity && self.idle(conn) {
                let e = RpcError::new(rpc::INVALID_REQUEST, idle_closing(self.idle_timeout));
                conn.answer(Some(Value::Null), ready(Err(e))).await;
                return false;
            }
            if !self.start(conn, bytes, parsed, stop, gone).await {
                return false;
            }
            if activity {
                self.last_request = Instant::now();
            }
        }
    }

    /// Why the connection closes now, if it does: idle past
    /// `idle_timeout`, or a request line unfinished past `frame_timeout`.
    fn closing(&mut self, conn: &Connection, now: Instant) -> Option<String> {
        let idle = {
            let mut handles = conn.handles();
            handles.expire();
            handles.is_empty() && conn.in_progress.none()
        };
        if self.lines.read_buffer().is_empty() && !self.lines.decoder().discarding() {
            self.partial_since = None;
            return (idle && now.duration_since(self.last_request) >= self.idle_timeout)
                .then(|| idle_closing(self.idle_timeout));
        }
        let since = *self.partial_since.get_or_insert(now);
        (now.duration_since(since) >= self.frame_timeout).then(|| {
            format!(
                "no complete request line within {} ms ([server] frame_timeout_ms); closing",
                self.frame_timeout.as_millis()
            )
        })
    }

    /// How long to wait for a line before the timers are looked at again.
    fn recheck(&self, now: Instant) -> Duration {
        let wait = match self.partial_since {
            Some(t) => self.frame_timeout.saturating_sub(now.duration_since(t)),
            None => (self.frame_timeout / 4).min(self.idle_timeout / 4),
        };
        wait.max(Duration::from_millis(5))
    }

    /// Whether the connection has been idle for `idle_timeout`: it holds
    /// nothing and has nothing in progress. A `ping` that comes then finds
    /// the connection closing.
    fn idle(&self, conn: &Connection) -> bool {
        self.last_request.elapsed() >= self.idle_timeout
            && conn.handles().is_empty()
            && conn.in_progress.none()
    }

    /// The request a frame holds.
    fn request_of(&mut self, frame: Result<Frame, std::io::Error>) -> Next {
        let max = self.max_frame_bytes;
        match frame {
            Ok(Frame::Line(line)) if line.trim().is_empty() => Next::Skip,
            Ok(Frame::Line(line)) => Next::Request(line.len(), rpc::parse(&line)),
            Ok(Frame::NotUtf8) => Next::Request(
                1,
                Err((
                    Value::Null,
                    RpcError::new(rpc::PARSE_ERROR, "the line is not UTF-8"),
                )),
            ),
            Ok(Frame::TooLong) => {
                // The rest of the line is read and dropped, so a peer still
                // writing it can finish and read this.
                self.partial_since = Some(Instant::now());
                Next::Request(1, Err((Value::Null, RpcError::with_data(
                    rpc::INVALID_REQUEST,
                    format!("frame over {max} bytes ([server] max_frame_bytes); the rest of this line is dropped; send large stdin with stdin_stream and spawn_stdin_write"),
                    json!({"max_frame_bytes": max}),
                ))))
            }
            Err(_) => Next::Stop,
        }
    }

    /// Takes the request's place (its line's bytes, then its class's
    /// place) and starts it, or refuses it from there. While the place is
    /// awaited the peer is still watched: one that hangs up is noticed, and
    /// its programs ended, without a line to read. False: the connection
    /// ends.
    async fn start(
        &self,
        conn: &Arc<Connection>,
        bytes: usize,
        parsed: Result<Call, (Value, RpcError)>,
        stop: &mut watch::Receiver<bool>,
        gone: &mut watch::Receiver<bool>,
    ) -> bool {
        let class = match &parsed {
            Ok(call) => Class::of(call),
            Err(_) => Class::Immediate,
        };
        let bytes = bytes.clamp(1, input_budget(self.max_frame_bytes));
        let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
        let placed = tokio::select! {
            placed = place(conn, &self.input, bytes, class) => match placed {
                Some(placed) => placed,
                None => return false,
            },
            _ = stop.changed() => return false,
            _ = gone.changed() => return false,
            _ = until_hung_up(self.stream()) => return false,
        };
        match (parsed, placed) {
            (Ok(call), Placed::Taken(held)) => conn.take(call, held),
            (Ok(call), Placed::Refused(e, held)) => {
                let e = conn.breaks_stdin(&call, e);
                conn.refuse(call.id, e, held)
            }
            (Err((id, e)), Placed::Taken(held) | Placed::Refused(_, held)) => {
                conn.refuse(Some(id), e, held)
            }
        }
        true
    }

    /// A peer that only shut down its writing side (`peer_closed`) still
    /// reads: it gets the answers in progress (each bounded by its own
    /// wait) first.
    pub(super) async fn answer_before_closing(
        &self,
        conn: &Connection,
        peer_closed: bool,
        gone: &mut watch::Receiver<bool>,
    ) {
        if !peer_closed || peer_hung_up(self.stream()) {
            return;
        }
        tokio::select! {
            () = conn.in_progress.all_answered() => {}
            _ = gone.changed() => {}
            _ = until_hung_up(self.stream()) => {}
            _ = tokio::time::sleep(MAX_WAIT + WRITE_TIMEOUT) => {}
        }
    }

    fn stream(&self) -> &UnixStream {
        self.lines.get_ref().as_ref()
    }
}

/// Why an idle connection is closed.
fn idle_closing(idle_timeout: Duration) -> String {
    format!(
        "idle for {} ms with no handle ([server] idle_timeout_ms); closing",
        idle_timeout.as_millis()
    )
}

/// A request's place: its line's bytes and its class's permit, or, for a
/// wait or probe past its class's bound, why not (answered at once, from
/// an immediate answer's place).
enum Placed {
    Taken(Held),
    Refused(RpcError, Held),
}

/// Takes a request's place: the line's `bytes` from the input budget, then
/// a permit of its `class` (an immediate answer waits for one; a wait or
/// probe past its bound is refused). `None`: the connection is closing.
async fn place(
    conn: &Connection,
    input: &Arc<Semaphore>,
    bytes: u32,
    class: Class,
) -> Option<Placed> {
    let held = Arc::clone(input).acquire_many_owned(bytes).await.ok()?;
    let immediate = Arc::clone(&conn.in_progress.immediate);
    if class == Class::Immediate {
        return Some(Placed::Taken((immediate.acquire_owned().await.ok()?, held)));
    }
    Some(match conn.in_progress.try_take(class) {
        Ok(permit) => Placed::Taken((permit, held)),
        Err(e) => Placed::Refused(e, (immediate.acquire_owned().await.ok()?, held)),
    })
}

/// Returns once the peer has hung up (looked at every second).
async fn until_hung_up(stream: &UnixStream) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if peer_hung_up(stream) {
            return;
        }
    }
}

/// Whether the peer has closed the connection both ways (not only shut
/// down its writing side): the socket then reports a hang-up.
fn peer_hung_up(stream: &UnixStream) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(stream.as_fd(), PollFlags::POLLOUT)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR)),
        Err(_) => true,
    }
}
