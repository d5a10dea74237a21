"""The blocking client: one connection, one reader thread, any number of
caller threads.

Each call writes its request line and waits for the answer with its `id`;
the reader thread reads every line the daemon sends and hands answers to
their callers and notifications to per-handle queues (or to the
`on_notification` callback). So a thread blocked in `spawn_status(h,
wait_ms=...)` holds up no other thread's call on the same connection.

`wait()` joins the connection's one waiter thread, which keeps a single
`spawn_wait` in flight over every handle waited on (waits.py). A call
given a `timeout` that passes sends `$/cancelRequest` for it, so the
daemon frees its place.

The daemon closes a connection idle for long (120 s by default). A call on
a client whose connection the daemon closed while it held no handles
connects again and goes on the new connection; one closed while it held
handles does not, and every call raises the `ConnectionLost` that names
them (they ended with the connection).
"""

from __future__ import annotations

import collections
import logging
import queue
import socket
import threading
import time
from typing import (
    IO,
    Any,
    Callable,
    Deque,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

from . import protocol as p
from . import waits
from .errors import ConnectionLost, InvalidRequest, NotFound, ProtocolViolation, SpawndError
from .results import (
    STDOUT,
    Attached,
    ConnectorsStatus,
    Notification,
    Output,
    OutputChunk,
    OutputSize,
    Pong,
    Signal,
    SpawnExitedNote,
    Spawned,
    SpawnListEntry,
    SpawnStatus,
    WaitResult,
    spawn_list_from_json,
)

log = logging.getLogger("spawnd_client")

NotificationCallback = Callable[[Notification], None]
ErrorCallback = Callable[[SpawndError], None]


class _Slot:
    """Where the reader thread leaves one answer for its caller: `answered`
    is set before `event` (which the waiter thread shares with its other
    wake-ups)."""

    __slots__ = ("event", "result", "error", "answered")

    def __init__(self, event: Optional[threading.Event] = None) -> None:
        self.event = event or threading.Event()
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.answered = False


class _Ticket:
    """One `wait()`'s place in the waiter thread's set: `event` is set once
    its handle has ended (`error` None) or will never be seen to."""

    __slots__ = ("event", "error")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.error: Optional[BaseException] = None


class _Lost:
    """Put in the notification queues when the connection is lost."""


_LOST = _Lost()


class Client:
    """A connection to `spawnd serve` at `socket_path` (default:
    `$SPAWND_SOCKET`, else /run/spawnd/spawnd.sock). Thread-safe; use as a
    context manager or call `close()`.

    `on_notification`, when given, gets every notification on the reader
    thread (it must not block, nor call the client and wait); otherwise
    notifications queue per handle for `notifications()` and
    `next_notification()`. `on_unmatched_error` gets errors the daemon sent
    with id null that match no request (they are also kept in
    `unmatched_errors`).
    """

    def __init__(
        self,
        socket_path: Optional[str] = None,
        *,
        connect_timeout: Optional[float] = 10.0,
        on_notification: Optional[NotificationCallback] = None,
        on_unmatched_error: Optional[ErrorCallback] = None,
    ) -> None:
        socket_path = p.socket_path_or_default(socket_path)
        self.socket_path = socket_path
        self._on_notification = on_notification
        self._on_unmatched_error = on_unmatched_error
        self.unmatched_errors: Deque[SpawndError] = collections.deque(maxlen=64)
        self._connect_timeout = connect_timeout
        self._sock = self._connect()
        # Set by close(): the connection is not made again.
        self._closing = False
        # The handles this connection holds (spawned or attached here, not
        # released), each with whether notifications may come for it.
        self._held: Dict[str, bool] = {}
        # Spawns in flight, by request id, with whether they notify: the
        # reader holds each handle as its answer comes, before it reads on
        # (a loss read right after the answer then names the handle).
        self._spawning: Dict[int, bool] = {}
        self._send_lock = threading.Lock()
        self._table_lock = threading.Lock()
        self._in_flight: p.InFlight[_Slot] = p.InFlight()
        self._notes: Dict[str, "queue.Queue[Union[Notification, _Lost]]"] = {}
        self._lost: Optional[ConnectionLost] = None
        # The last error the daemon sent with id null (for `ConnectionLost.last`).
        self._last_null: Optional[SpawndError] = None
        self.max_frame_bytes: Optional[int] = None
        # Spawns whose caller gave up: their handles are released when answered.
        self._abandoned_spawns: Set[int] = set()
        # The waiter thread's set, and what wakes it (a handle joined, nobody
        # waits, its spawn_wait was answered); both under _table_lock.
        self._waits: waits.WaitSet[_Ticket] = waits.WaitSet()
        self._wake = threading.Event()
        self._waiting = False
        self._reader = self._start_reader(self._sock)

    # -- connection --------------------------------------------------------

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self._connect_timeout)
        try:
            sock.connect(self.socket_path)
        except OSError as e:
            sock.close()
            raise ConnectionLost(f"cannot connect to spawnd at {self.socket_path}: {e}") from e
        sock.settimeout(None)
        return sock

    def _start_reader(self, sock: socket.socket) -> threading.Thread:
        reader = threading.Thread(target=self._read_loop, args=(sock,), name="spawnd-client-reader", daemon=True)
        reader.start()
        return reader

    def _reconnect(self) -> None:
        """Replaces a connection the daemon closed while it held no handles
        (called under _send_lock)."""
        sock = self._connect()
        with self._table_lock:
            if self._closing:
                sock.close()
                raise ConnectionLost("the client closed the connection")
            old, self._sock = self._sock, sock
            self._lost = None
            self._last_null = None
            self._notes = {}
        old.close()
        self._reader = self._start_reader(sock)

    @property
    def handles(self) -> List[str]:
        """The handles this connection holds (spawned or attached here, not
        released), sorted."""
        with self._table_lock:
            return sorted(self._held)

    def _hold(self, handle: str, notifies: bool) -> None:
        with self._table_lock:
            if self._lost is None:
                self._held[handle] = notifies

    def _hold_spawned(self, request_id: Any, answer: p.Answer) -> None:
        """Holds the handle a spawn's answer names (under _table_lock)."""
        notifies = self._spawning.pop(request_id, None) if isinstance(request_id, int) else None
        result = answer.result
        if notifies is not None and answer.error is None and isinstance(result, dict):
            handle = result.get("handle")
            if isinstance(handle, str):
                self._held[handle] = notifies

    def close(self, timeout: float = 5.0) -> None:
        """Closes the connection. It first stops sending and waits up to
        `timeout` seconds for the daemon to close its side: by then the
        daemon has answered the calls in flight and ended this connection's
        spawns (killed, or parked for their lease when detached, ready for
        `spawn_attach` elsewhere). Calls still in flight after that get
        `ConnectionLost`."""
        self._closing = True
        with self._send_lock:
            pass  # a reconnect under way has finished
        on_reader = self._reader is threading.current_thread()
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        if not on_reader:
            self._reader.join(timeout=timeout)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if not on_reader:
            self._reader.join(timeout=5)
        self._sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._lost is not None

    def _read_loop(self, sock: socket.socket) -> None:
        reason = "the daemon closed the connection"
        try:
            with sock.makefile("rb") as f:
                for line in f:
                    self._dispatch(p.decode_line(line))
        except (OSError, ValueError) as e:
            reason = f"the connection failed: {e}"
        except ProtocolViolation as e:
            reason = str(e)
        self._lose(sock, reason)

    def _lose(self, sock: socket.socket, reason: str) -> None:
        with self._table_lock:
            if sock is not self._sock or self._lost is not None:
                return
            lost = ConnectionLost(reason, self._last_null, () if self._closing else sorted(self._held))
            self._held = {}
            self._spawning = {}
            self._lost = lost
            slots = self._in_flight.drain()
            queues = list(self._notes.values())
            self._settle(self._waits.fail_all(lost))
        for slot in slots:
            slot.error = lost
            slot.answered = True
            slot.event.set()
        for q in queues:
            q.put(_LOST)

    def _dispatch(self, answer: p.Answer) -> None:
        if answer.notification is not None:
            self._deliver(answer.notification)
            return
        with self._table_lock:
            request_id = answer.request_id
            # Only an error the daemon sent just before it closed says why.
            self._last_null = None
            if request_id is None and answer.error is not None:
                request_id = self._in_flight.match_null(answer.error)
                if request_id is None:
                    self._last_null = answer.error
            slot = self._in_flight.pop(request_id)
            self._hold_spawned(request_id, answer)
            abandoned_spawn = slot is None and request_id in self._abandoned_spawns
            self._abandoned_spawns.discard(request_id)
        if abandoned_spawn:
            self._release_abandoned(answer.result)
            return
        if slot is None:
            if answer.error is not None:
                self.unmatched_errors.append(answer.error)
                if self._on_unmatched_error:
                    self._on_unmatched_error(answer.error)
            return
        slot.result, slot.error = answer.result, answer.error
        slot.answered = True
        slot.event.set()

    def _deliver(self, note: Notification) -> None:
        if self._on_notification is not None:
            try:
                self._on_notification(note)
            except Exception:  # the connection outlives a failing callback
                log.exception("on_notification failed")
            return
        handle = note.handle or ""
        self._queue(handle).put(note)

    def _queue(self, handle: str) -> "queue.Queue[Union[Notification, _Lost]]":
        with self._table_lock:
            q = self._notes.get(handle)
            if q is None:
                q = self._notes[handle] = queue.Queue()
                if self._lost is not None:
                    q.put(_LOST)
            return q

    # -- calls -------------------------------------------------------------

    def call(self, method: str, params: Optional[Mapping[str, Any]] = None, *, timeout: Optional[float] = None) -> Any:
        """Sends one request and returns its `result`, or raises the typed
        error the daemon answered (`SpawndError` subclasses), or
        `ConnectionLost`. Any thread may call; answers are matched by id.

        With `timeout` (seconds), a call still unanswered then raises
        `TimeoutError`, and the daemon is told (`$/cancelRequest`) so that
        it frees the request's place; a spawn is not cancelled, and its
        handle is released when its answer comes."""
        slot = _Slot()
        request_id = self._send(method, params, slot)
        if not slot.event.wait(timeout) and self._give_up(request_id, method):
            raise TimeoutError(f"spawnd {method}: no answer within {timeout} s")
        slot.event.wait()
        if slot.error is not None:
            if isinstance(slot.error, InvalidRequest) and slot.error.max_frame_bytes:
                self.max_frame_bytes = slot.error.max_frame_bytes
            raise slot.error
        return slot.result

    def _send(self, method: str, params: Optional[Mapping[str, Any]], slot: _Slot) -> int:
        """Writes one request whose answer goes to `slot`; its id."""
        with self._send_lock:
            with self._table_lock:
                lost = self._lost
            if lost is not None and not lost.handles and not self._closing:
                self._reconnect()
            with self._table_lock:
                if self._lost is not None:
                    raise self._lost.again()
                frame = p.encode_frame(self._in_flight.next_id(), method, params)
                request_id = self._in_flight.add(len(frame), slot)
                if method in p.SPAWNS:
                    self._spawning[request_id] = bool(params and params.get("notify"))
            try:
                self._sock.sendall(frame)
                send_error: Optional[OSError] = None
            except OSError as e:
                with self._table_lock:
                    self._in_flight.pop(request_id)
                send_error = e
        if send_error is not None:
            # Outside the send lock: the reader may run a callback that sends.
            raise self._lost_on_send(send_error) from send_error
        return request_id

    def _give_up(self, request_id: int, method: str) -> bool:
        """Stops waiting for a request; False when its answer came first.
        A wait or probe still in progress is cancelled at the daemon; a
        spawn's handle is released when its answer comes."""
        with self._table_lock:
            if self._in_flight.pop(request_id) is None:
                return False
            if method in p.SPAWNS:
                self._abandoned_spawns.add(request_id)
        if method not in p.NOT_CANCELLABLE:
            try:
                with self._send_lock:
                    self._sock.sendall(p.encode_cancel(request_id))
            except OSError:
                pass  # the connection is gone, and the request with it
        return True

    def _release_abandoned(self, result: Any) -> None:
        """Releases the handle of a spawn whose caller gave up, from a
        thread of its own (the reader must go on reading its answer)."""
        handle = result.get("handle") if isinstance(result, dict) else None
        if not isinstance(handle, str):
            return
        name: str = handle

        def release() -> None:
            try:
                self.spawn_release(name)
            except (SpawndError, ConnectionLost):
                pass

        threading.Thread(target=release, name="spawnd-client-release", daemon=True).start()

    def _lost_on_send(self, e: OSError) -> ConnectionLost:
        """Why a send failed: a daemon that closed the connection may have
        said why first (a limit refusing the connection), so what the
        reader gets to read within a second is told rather than the bare
        write error."""
        if self._reader is not threading.current_thread():
            self._reader.join(timeout=1.0)
        lost = self._lost
        if lost is not None:
            return lost.again()
        return ConnectionLost(f"cannot send to spawnd: {e}")

    def ping(self) -> Pong:
        """Tests the connection: the daemon answers at once with its version."""
        return Pong.from_json(self.call("ping"))

    def metrics(self) -> str:
        """The daemon's counters and histograms in Prometheus's text format."""
        return str((self.call("metrics")).get("text", ""))

    def spawn_list(self) -> List[SpawnListEntry]:
        """The caller's own spawns, by start time: every handle this
        connection holds, and every detached spawn started by a peer of the
        same uid, attached elsewhere or not (with its `token`)."""
        return spawn_list_from_json(self.call("spawn_list"))

    def health(self) -> Dict[str, Any]:
        """The layers, the audit location, `protocol_version` and `stale_manifests`."""
        result: Dict[str, Any] = self.call("health")
        return result

    def connectors_status(self) -> ConnectorsStatus:
        return ConnectorsStatus.from_json(self.call("connectors_status"))

    def spawn_op(
        self,
        connector: str,
        op: str,
        args: Optional[Mapping[str, str]] = None,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: p.Stdin = None,
        stdin_stream: bool = False,
        action: Optional[Sequence[str]] = None,
        mode: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        label: Optional[str] = None,
        notify: bool = False,
        lease_ms: Optional[int] = None,
    ) -> Spawned:
        """Runs operation `op` of `connector` with `args`; answered once the
        program runs. `stdin` is text or bytes; `stdin_stream=True` gives a
        pipe to fill with `spawn_stdin_write`/`write_stdin`."""
        params = p.spawn_op_params(
            connector, op, args, env=env, cwd=cwd, stdin=stdin, stdin_stream=stdin_stream,
            action=action, mode=mode, timeout_ms=timeout_ms, label=label, notify=notify,
            lease_ms=lease_ms,
        )
        return Spawned.from_json(self.call("spawn_op", params))

    def spawn(
        self,
        connector: str,
        envelope: Union[p.Envelope, Mapping[str, Any]],
        *,
        stdin_stream: bool = False,
        action: Optional[Sequence[str]] = None,
        mode: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        label: Optional[str] = None,
        notify: bool = False,
        lease_ms: Optional[int] = None,
    ) -> Spawned:
        """Runs a raw envelope (`Envelope` or its JSON form)."""
        params = p.spawn_params(
            connector, envelope, stdin_stream=stdin_stream, action=action, mode=mode,
            timeout_ms=timeout_ms, label=label, notify=notify, lease_ms=lease_ms,
        )
        return Spawned.from_json(self.call("spawn", params))

    def spawn_check(
        self,
        connector: str,
        op: Optional[str] = None,
        args: Optional[Mapping[str, str]] = None,
        *,
        envelope: Union[p.Envelope, Mapping[str, Any], None] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        action: Optional[Sequence[str]] = None,
        mode: Optional[str] = None,
        timeout_ms: Optional[int] = None,
    ) -> Dict[str, Any]:
        """The gate alone for an operation (`op`) or a raw `envelope`:
        the plan (`decision: "allowed"`, `argv`, ...), or the denial raised
        as `CapabilityDenied` (without `audit_id`: nothing is recorded)."""
        params = _check_params(connector, op, args, envelope, env, cwd, action, mode, timeout_ms)
        result: Dict[str, Any] = self.call("spawn_check", params)
        return result

    def spawn_status(self, handle: str, wait_ms: Optional[int] = None) -> SpawnStatus:
        """The state, and the run result once ended; `wait_ms` blocks until
        the end or that long."""
        return SpawnStatus.from_json(self.call("spawn_status", p.with_wait({"handle": handle}, wait_ms)))

    def spawn_wait(self, handles: Sequence[str], wait_ms: Optional[int] = None) -> WaitResult:
        """The first of `handles` (1 to 64) that has ended, and every one
        that has; `handle` is None when none had by `wait_ms`."""
        return WaitResult.from_json(self.call("spawn_wait", p.wait_params(handles, wait_ms)))

    def spawn_output_size(self, handle: str, which: int = STDOUT) -> OutputSize:
        return OutputSize.from_json(self.call("spawn_output_size", {"handle": handle, "which": which}))

    def spawn_output_read(
        self,
        handle: str,
        which: int = STDOUT,
        offset: int = 0,
        length: int = p.DEFAULT_READ_CHUNK,
        wait_ms: Optional[int] = None,
    ) -> OutputChunk:
        """Up to `length` bytes of stream `which` (0 stdout, 1 stderr) from
        `offset`; the next read goes at the chunk's `next_offset`."""
        params = p.with_wait({"handle": handle, "which": which, "offset": offset, "len": length}, wait_ms)
        return OutputChunk.from_json(offset, self.call("spawn_output_read", params))

    def spawn_kill(self, handle: str, signal: Union[Signal, str, None] = None) -> None:
        """Sends `signal` (a `Signal` or its name) to the program; None is
        the daemon's default, SIGKILL, which kills the sandbox."""
        self.call("spawn_kill", p.kill_params(handle, signal))

    def spawn_release(self, handle: str) -> None:
        """Kills the program if it runs and frees the handle at once."""
        try:
            self.call("spawn_release", {"handle": handle})
        except NotFound:
            with self._table_lock:
                self._held.pop(handle, None)
            raise
        with self._table_lock:
            self._notes.pop(handle, None)
            self._held.pop(handle, None)

    def spawn_stdin_write(self, handle: str, data: Union[str, bytes]) -> int:
        """Writes one frame's worth into a streamed stdin (`stdin_stream`);
        answered once the bytes are in the pipe. Returns the bytes written."""
        result = self.call("spawn_stdin_write", p.stdin_write_params(handle, data))
        return int(result["bytes"])

    def spawn_stdin_close(self, handle: str) -> None:
        self.call("spawn_stdin_close", {"handle": handle})

    def spawn_attach(self, handle: str, token: str) -> Attached:
        """Takes up a detached spawn (`lease_ms`) on this connection."""
        attached = Attached.from_json(self.call("spawn_attach", {"handle": handle, "token": token}))
        self._hold(handle, True)
        return attached

    # -- conveniences --------------------------------------------------------

    def wait(self, handle: str, timeout: Optional[float] = None) -> SpawnStatus:
        """Blocks until the spawn has ended and returns its result; raises
        `TimeoutError` after `timeout` seconds. Every `wait` on the
        connection joins one waiter thread that keeps a single `spawn_wait`
        in flight over all the handles waited on; once the handle has
        ended, its status is read with `spawn_status` (without a wait). A
        handle not found raises `NotFound` in its own waits only."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            ticket = self._join_waits(handle)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not ticket.event.wait(left):
                with self._table_lock:
                    if self._waits.leave(handle, ticket):
                        self._wake.set()
                    if not ticket.event.is_set():
                        raise TimeoutError(f"spawnd wait: {handle} did not end within {timeout} s")
            if ticket.error is not None:
                raise ticket.error
            status = self.spawn_status(handle)
            if status.ended:
                return status

    def _join_waits(self, handle: str) -> _Ticket:
        ticket = _Ticket()
        with self._table_lock:
            if self._lost is not None:
                raise self._lost.again()
            if self._waits.join(handle, ticket):
                self._wake.set()
            if not self._waiting:
                self._waiting = True
                threading.Thread(target=self._wait_loop, name="spawnd-client-waiter", daemon=True).start()
        return ticket

    def _settle(self, delivered: "List[waits.Delivery[_Ticket]]") -> None:
        """Ends waits (under _table_lock, so a wait that times out sees
        whether it was ended first)."""
        for ticket, error in delivered:
            ticket.error = error
            ticket.event.set()

    def _wait_loop(self) -> None:
        """The waiter thread: one `spawn_wait` in flight over the handles
        waited on, restarted (the one before cancelled) when the set
        changes, until nobody waits."""
        current: Optional[Tuple[int, _Slot, List[str]]] = None
        try:
            while True:
                with self._table_lock:
                    self._wake.clear()
                    batch = self._waits.batch()
                    if not batch:
                        self._waiting = False
                        return
                if current is None or current[2] != batch:
                    if current is not None:
                        self._give_up(current[0], "spawn_wait")
                    slot = _Slot(self._wake)
                    try:
                        current = (self._send("spawn_wait", waits.spawn_wait_params(batch), slot), slot, batch)
                    except ConnectionLost as e:
                        current = None
                        with self._table_lock:
                            self._settle(self._waits.fail_all(e))
                        continue
                request_id, slot, asked = current
                if not slot.answered:
                    self._wake.wait()
                if slot.answered:
                    current = None
                    with self._table_lock:
                        self._settle(self._waits.answered(asked, slot.result, slot.error))
        finally:
            if current is not None and not current[1].answered:
                self._give_up(current[0], "spawn_wait")

    def iter_output(
        self,
        handle: str,
        which: int = STDOUT,
        *,
        offset: int = 0,
        chunk: int = p.DEFAULT_READ_CHUNK,
        wait_ms: int = 1000,
    ) -> Iterator[OutputChunk]:
        """Follows stream `which` from `offset` to its end, live while the
        program runs: yields each non-empty chunk (mind `skipped`)."""
        while True:
            c = self.spawn_output_read(handle, which, offset, chunk, wait_ms=wait_ms)
            if c.data or c.skipped:
                yield c
            if c.eof:
                return
            offset = c.next_offset

    def read_output(self, handle: str, which: int = STDOUT, *, chunk: int = p.DEFAULT_READ_CHUNK) -> Output:
        """The whole of stream `which` (waiting for its end), and the bytes
        skipped when the daemon's window had moved past them."""
        data, skipped = bytearray(), 0
        for c in self.iter_output(handle, which, chunk=chunk):
            data += c.data
            skipped += c.skipped
        return Output(bytes(data), skipped)

    def write_stdin(
        self,
        handle: str,
        data: Union[bytes, str, IO[bytes]],
        *,
        chunk: Optional[int] = None,
        close: bool = True,
    ) -> int:
        """Writes `data` (bytes, text, or a binary file read to its end) into
        a streamed stdin, one `spawn_stdin_write` at a time, each within the
        frame limit (learned from the daemon when its limit is smaller than
        this client's chunks); then closes it unless `close=False`. Returns
        the bytes written."""
        size = chunk or self._stdin_chunk()
        total = 0
        for piece in _pieces(data, size):
            total += self._write_fitting(handle, piece)
        if close:
            self.spawn_stdin_close(handle)
        return total

    def _stdin_chunk(self) -> int:
        if self.max_frame_bytes:
            return min(p.DEFAULT_STDIN_CHUNK, p.stdin_chunk_for(self.max_frame_bytes))
        return p.DEFAULT_STDIN_CHUNK

    def _write_fitting(self, handle: str, piece: bytes) -> int:
        try:
            return self.spawn_stdin_write(handle, piece)
        except InvalidRequest as e:
            # The frame was dropped unread: nothing reached the program, so
            # the same bytes go again in frames that fit.
            if not e.max_frame_bytes or len(piece) <= 1:
                raise
            size = min(len(piece) // 2, p.stdin_chunk_for(e.max_frame_bytes))
            return sum(self._write_fitting(handle, piece[i : i + size]) for i in range(0, len(piece), size))

    def next_notification(self, handle: str, timeout: Optional[float] = None) -> Notification:
        """The next notification about `handle` (spawned with `notify=True`);
        raises `queue.Empty` after `timeout` seconds, `ConnectionLost` when
        the connection is gone, and `LookupError` at once for a handle this
        connection spawned without `notify`, for which none come."""
        if self._on_notification is not None:
            raise RuntimeError("this client hands notifications to its on_notification callback")
        with self._table_lock:
            quiet = self._held.get(handle) is False
        if quiet:
            raise LookupError(f"{handle} was spawned without notify: no notifications come for it")
        item = self._queue(handle).get(timeout=timeout)
        if isinstance(item, _Lost):
            self._queue(handle).put(_LOST)
            raise self._lost.again() if self._lost else ConnectionLost("the connection is gone")
        return item

    def notifications(self, handle: str, timeout: Optional[float] = None) -> Iterator[Notification]:
        """The notifications about `handle` as they come, ending with its
        `spawn_exited`; `timeout` bounds the wait for each one."""
        while True:
            note = self.next_notification(handle, timeout)
            yield note
            if isinstance(note, SpawnExitedNote):
                return


def _check_params(
    connector: str,
    op: Optional[str],
    args: Optional[Mapping[str, str]],
    envelope: Union[p.Envelope, Mapping[str, Any], None],
    env: Optional[Mapping[str, str]],
    cwd: Optional[str],
    action: Optional[Sequence[str]],
    mode: Optional[str],
    timeout_ms: Optional[int],
) -> p.Params:
    if (op is None) == (envelope is None):
        raise TypeError("spawn_check takes either op (with args) or envelope")
    if op is not None:
        return p.spawn_op_params(connector, op, args, env=env, cwd=cwd, action=action, mode=mode, timeout_ms=timeout_ms)
    assert envelope is not None
    return p.spawn_params(connector, envelope, action=action, mode=mode, timeout_ms=timeout_ms)


def _pieces(data: Union[bytes, str, IO[bytes]], size: int) -> Iterator[bytes]:
    if isinstance(data, str):
        data = data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data)
        for i in range(0, len(view), size):
            yield bytes(view[i : i + size])
        return
    while True:
        piece = data.read(size)
        if not piece:
            return
        yield piece


# Shared with the async client.
check_params = _check_params
pieces = _pieces
