"""The asyncio client: one connection, one reader task, a future per
request in flight. Any number of tasks may await calls at once; answers
are matched by `id`, and notifications go to per-handle queues (or to the
`on_notification` callback).

`wait()` joins the connection's one waiter task, which keeps a single
`spawn_wait` in flight over every handle waited on (waits.py). A call whose
task is cancelled (`asyncio.wait_for`, `Task.cancel`) while in progress at
the daemon sends `$/cancelRequest` for it, so the daemon frees its place.

A client made with `connect` whose connection the daemon closed while it
held no handles (an idle timeout) connects again on its next call, as
`Client` does; one closed while it held handles raises the
`ConnectionLost` that names them.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import (
    IO,
    Any,
    AsyncIterator,
    Callable,
    Deque,
    Dict,
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
from .client import check_params, pieces
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

#: The longest line the reader accepts: answers carry run results with
#: their streams' bytes (up to the manifest's caps), base64 and all.
MAX_LINE = 1 << 28


class _Lost:
    pass


_LOST = _Lost()


class AsyncClient:
    """A connection to `spawnd serve` for asyncio. Create it with
    `await AsyncClient.connect(path)` (default: `$SPAWND_SOCKET`, else
    /run/spawnd/spawnd.sock), close it with `await close()` or use it in
    `async with`."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        on_notification: Optional[Callable[[Notification], None]] = None,
        on_unmatched_error: Optional[Callable[[SpawndError], None]] = None,
        socket_path: Optional[str] = None,
    ) -> None:
        #: Where the client connects again after the daemon closed a
        #: connection that held no handles (None: it does not).
        self.socket_path = socket_path
        self._closing = False
        # The handles this connection holds, each with whether
        # notifications may come for it.
        self._held: Dict[str, bool] = {}
        # Spawns in flight, by request id, with whether they notify: the
        # reader holds each handle as its answer comes, before it reads on
        # (a loss read right after the answer then names the handle).
        self._spawning: Dict[int, bool] = {}
        self._reader = reader
        self._writer = writer
        self._on_notification = on_notification
        self._on_unmatched_error = on_unmatched_error
        self.unmatched_errors: Deque[SpawndError] = collections.deque(maxlen=64)
        self._in_flight: p.InFlight["asyncio.Future[Any]"] = p.InFlight()
        self._send_lock = asyncio.Lock()
        self._notes: Dict[str, "asyncio.Queue[Union[Notification, _Lost]]"] = {}
        self._lost: Optional[ConnectionLost] = None
        # The last error the daemon sent with id null (for `ConnectionLost.last`).
        self._last_null: Optional[SpawndError] = None
        self.max_frame_bytes: Optional[int] = None
        # Spawns whose caller gave up: their handles are released when answered.
        self._abandoned_spawns: Set[int] = set()
        # The waiter task's set, and what wakes it (a handle joined, nobody waits).
        self._waits: waits.WaitSet["asyncio.Future[None]"] = waits.WaitSet()
        self._wake = asyncio.Event()
        self._wait_task: "Optional[asyncio.Future[None]]" = None
        self._task = asyncio.ensure_future(self._read_loop(reader))

    @classmethod
    async def connect(
        cls,
        socket_path: Optional[str] = None,
        *,
        on_notification: Optional[Callable[[Notification], None]] = None,
        on_unmatched_error: Optional[Callable[[SpawndError], None]] = None,
    ) -> "AsyncClient":
        socket_path = p.socket_path_or_default(socket_path)
        try:
            reader, writer = await asyncio.open_unix_connection(socket_path, limit=MAX_LINE)
        except OSError as e:
            raise ConnectionLost(f"cannot connect to spawnd at {socket_path}: {e}") from e
        return cls(
            reader,
            writer,
            on_notification=on_notification,
            on_unmatched_error=on_unmatched_error,
            socket_path=socket_path,
        )

    async def _reconnect(self, socket_path: str) -> None:
        """Replaces a connection the daemon closed while it held no handles
        (called under _send_lock)."""
        try:
            reader, writer = await asyncio.open_unix_connection(socket_path, limit=MAX_LINE)
        except OSError as e:
            raise ConnectionLost(f"cannot connect to spawnd at {socket_path}: {e}") from e
        if self._closing:
            writer.close()
            raise ConnectionLost("the client closed the connection")
        self._writer.close()
        self._reader, self._writer = reader, writer
        self._lost = None
        self._last_null = None
        self._notes = {}
        self._task = asyncio.ensure_future(self._read_loop(reader))

    @property
    def handles(self) -> List[str]:
        """The handles this connection holds (spawned or attached here, not
        released), sorted."""
        return sorted(self._held)

    def _hold(self, handle: str, notifies: bool) -> None:
        if self._lost is None:
            self._held[handle] = notifies

    async def close(self, timeout: float = 5.0) -> None:
        """Closes the connection as `Client.close` does: stops sending,
        waits up to `timeout` seconds for the daemon to close its side (its
        answers in flight delivered, this connection's spawns ended or
        parked for their lease), then closes; calls still in flight get
        `ConnectionLost`."""
        self._closing = True
        if not self._task.done() and not self._writer.is_closing():
            try:
                if self._writer.can_write_eof():
                    self._writer.write_eof()
            except OSError:
                pass
            await asyncio.wait({self._task}, timeout=timeout)
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except OSError:
            pass
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self._lose(ConnectionLost("the client closed the connection"))
        if self._wait_task is not None:
            # It ends once it sees the loss.
            await asyncio.wait({self._wait_task}, timeout=timeout)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._lost is not None

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        reason = "the daemon closed the connection"
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                self._dispatch(p.decode_line(line))
        except (OSError, ValueError) as e:  # ValueError: a line over MAX_LINE
            reason = f"the connection failed: {e}"
        except ProtocolViolation as e:
            reason = str(e)
        if reader is self._reader:
            self._lose(ConnectionLost(reason, self._last_null, () if self._closing else sorted(self._held)))

    def _lose(self, lost: ConnectionLost) -> None:
        if self._lost is None:
            self._lost = lost
            self._held = {}
            self._spawning = {}
        for fut in self._in_flight.drain():
            if not fut.done():
                fut.set_exception(lost)
        self._settle(self._waits.fail_all(lost))
        for q in self._notes.values():
            q.put_nowait(_LOST)

    def _dispatch(self, answer: p.Answer) -> None:
        if answer.notification is not None:
            if self._on_notification is not None:
                try:
                    self._on_notification(answer.notification)
                except Exception:  # the connection outlives a failing callback
                    log.exception("on_notification failed")
            else:
                self._queue(answer.notification.handle or "").put_nowait(answer.notification)
            return
        request_id = answer.request_id
        # Only an error the daemon sent just before it closed says why.
        self._last_null = None
        if request_id is None and answer.error is not None:
            request_id = self._in_flight.match_null(answer.error)
            if request_id is None:
                self._last_null = answer.error
        fut = self._in_flight.pop(request_id)
        notifies = self._spawning.pop(request_id, None) if isinstance(request_id, int) else None
        if notifies is not None and answer.error is None and isinstance(answer.result, dict):
            handle = answer.result.get("handle")
            if isinstance(handle, str):
                self._hold(handle, notifies)
        if fut is None and request_id in self._abandoned_spawns:
            self._abandoned_spawns.discard(request_id)
            handle = answer.result.get("handle") if isinstance(answer.result, dict) else None
            if isinstance(handle, str):
                asyncio.ensure_future(self._release_quietly(handle))
            return
        if fut is None:
            if answer.error is not None:
                self.unmatched_errors.append(answer.error)
                if self._on_unmatched_error:
                    self._on_unmatched_error(answer.error)
            return
        if fut.done():  # the caller was cancelled
            return
        if answer.error is not None:
            fut.set_exception(answer.error)
        else:
            fut.set_result(answer.result)

    def _queue(self, handle: str) -> "asyncio.Queue[Union[Notification, _Lost]]":
        q = self._notes.get(handle)
        if q is None:
            q = self._notes[handle] = asyncio.Queue()
            if self._lost is not None:
                q.put_nowait(_LOST)
        return q

    def _lost_on_send(self, e: OSError) -> ConnectionLost:
        """Why a send failed: the connection's loss when the reader has seen
        it already (with what the daemon said before closing). A failed
        write closes the transport's reading side too, so a line the daemon
        sent just before closing is not read after it."""
        if self._lost is not None:
            return self._lost.again()
        return ConnectionLost(f"cannot send to spawnd: {e}")

    # -- calls -------------------------------------------------------------

    async def call(self, method: str, params: Optional[Mapping[str, Any]] = None) -> Any:
        """Sends one request and returns its `result`, or raises the typed
        error the daemon answered, or `ConnectionLost`. A caller cancelled
        while the request is in progress tells the daemon
        (`$/cancelRequest`), which frees its place; a spawn is not
        cancelled, and its handle is released when its answer comes."""
        fut: "asyncio.Future[Any]" = asyncio.get_running_loop().create_future()
        request_id = await self._send(method, params, fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                # Answered just as the caller was cancelled.
                if method in p.SPAWNS and isinstance(fut.result(), dict):
                    handle = fut.result().get("handle")
                    if isinstance(handle, str):
                        asyncio.ensure_future(self._release_quietly(handle))
            else:
                self._give_up(request_id, method)
            raise
        except InvalidRequest as e:
            if e.max_frame_bytes:
                self.max_frame_bytes = e.max_frame_bytes
            raise
        finally:
            self._in_flight.pop(request_id)

    async def _send(self, method: str, params: Optional[Mapping[str, Any]], fut: "asyncio.Future[Any]") -> int:
        """Writes one request whose answer goes to `fut`; its id."""
        async with self._send_lock:
            lost = self._lost
            if lost is not None and not lost.handles and not self._closing and self.socket_path is not None:
                await self._reconnect(self.socket_path)
            if self._lost is not None:
                raise self._lost.again()
            frame = p.encode_frame(self._in_flight.next_id(), method, params)
            request_id = self._in_flight.add(len(frame), fut)
            if method in p.SPAWNS:
                self._spawning[request_id] = bool(params and params.get("notify"))
            try:
                self._writer.write(frame)
                await self._writer.drain()
            except OSError as e:
                self._in_flight.pop(request_id)
                raise self._lost_on_send(e) from e
            except asyncio.CancelledError:
                # The line is written whole (write does not wait): the
                # request is on its way.
                self._give_up(request_id, method)
                raise
        return request_id

    def _give_up(self, request_id: int, method: str) -> None:
        """Stops waiting for a request. One still in progress is cancelled
        at the daemon (a wait or probe), or has its handle released when
        its answer comes (a spawn). The notification is written at once:
        a whole line, never inside another."""
        if self._in_flight.pop(request_id) is None:
            return  # answered already
        if method in p.SPAWNS:
            self._abandoned_spawns.add(request_id)
        if method in p.NOT_CANCELLABLE or self._writer.is_closing():
            return
        try:
            self._writer.write(p.encode_cancel(request_id))
        except OSError:
            pass  # the connection is gone, and the request with it

    async def _release_quietly(self, handle: str) -> None:
        try:
            await self.spawn_release(handle)
        except (SpawndError, ConnectionLost):
            pass

    async def ping(self) -> Pong:
        """Tests the connection: the daemon answers at once with its version."""
        return Pong.from_json(await self.call("ping"))

    async def metrics(self) -> str:
        """The daemon's counters and histograms in Prometheus's text format."""
        return str((await self.call("metrics")).get("text", ""))

    async def spawn_list(self) -> List[SpawnListEntry]:
        """The caller's own spawns, by start time (`Client.spawn_list`)."""
        return spawn_list_from_json(await self.call("spawn_list"))

    async def health(self) -> Dict[str, Any]:
        result: Dict[str, Any] = await self.call("health")
        return result

    async def connectors_status(self) -> ConnectorsStatus:
        return ConnectorsStatus.from_json(await self.call("connectors_status"))

    async def spawn_op(
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
        params = p.spawn_op_params(
            connector, op, args, env=env, cwd=cwd, stdin=stdin, stdin_stream=stdin_stream,
            action=action, mode=mode, timeout_ms=timeout_ms, label=label, notify=notify,
            lease_ms=lease_ms,
        )
        return Spawned.from_json(await self.call("spawn_op", params))

    async def spawn(
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
        params = p.spawn_params(
            connector, envelope, stdin_stream=stdin_stream, action=action, mode=mode,
            timeout_ms=timeout_ms, label=label, notify=notify, lease_ms=lease_ms,
        )
        return Spawned.from_json(await self.call("spawn", params))

    async def spawn_check(
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
        params = check_params(connector, op, args, envelope, env, cwd, action, mode, timeout_ms)
        result: Dict[str, Any] = await self.call("spawn_check", params)
        return result

    async def spawn_status(self, handle: str, wait_ms: Optional[int] = None) -> SpawnStatus:
        return SpawnStatus.from_json(await self.call("spawn_status", p.with_wait({"handle": handle}, wait_ms)))

    async def spawn_wait(self, handles: Sequence[str], wait_ms: Optional[int] = None) -> WaitResult:
        return WaitResult.from_json(await self.call("spawn_wait", p.wait_params(handles, wait_ms)))

    async def spawn_output_size(self, handle: str, which: int = STDOUT) -> OutputSize:
        return OutputSize.from_json(await self.call("spawn_output_size", {"handle": handle, "which": which}))

    async def spawn_output_read(
        self,
        handle: str,
        which: int = STDOUT,
        offset: int = 0,
        length: int = p.DEFAULT_READ_CHUNK,
        wait_ms: Optional[int] = None,
    ) -> OutputChunk:
        params = p.with_wait({"handle": handle, "which": which, "offset": offset, "len": length}, wait_ms)
        return OutputChunk.from_json(offset, await self.call("spawn_output_read", params))

    async def spawn_kill(self, handle: str, signal: Union[Signal, str, None] = None) -> None:
        """Sends `signal` to the program; None is SIGKILL (`Client.spawn_kill`)."""
        await self.call("spawn_kill", p.kill_params(handle, signal))

    async def spawn_release(self, handle: str) -> None:
        try:
            await self.call("spawn_release", {"handle": handle})
        except NotFound:
            self._held.pop(handle, None)
            raise
        self._notes.pop(handle, None)
        self._held.pop(handle, None)

    async def spawn_stdin_write(self, handle: str, data: Union[str, bytes]) -> int:
        result = await self.call("spawn_stdin_write", p.stdin_write_params(handle, data))
        return int(result["bytes"])

    async def spawn_stdin_close(self, handle: str) -> None:
        await self.call("spawn_stdin_close", {"handle": handle})

    async def spawn_attach(self, handle: str, token: str) -> Attached:
        attached = Attached.from_json(await self.call("spawn_attach", {"handle": handle, "token": token}))
        self._hold(handle, True)
        return attached

    # -- conveniences --------------------------------------------------------

    async def wait(self, handle: str) -> SpawnStatus:
        """Waits until the spawn has ended and returns its result (bound it
        with `asyncio.wait_for`). Every `wait` on the connection joins one
        waiter task that keeps a single `spawn_wait` in flight over all the
        handles waited on; once the handle has ended, its status is read
        with `spawn_status` (without a wait). A handle not found raises
        `NotFound` in its own waits only."""
        while True:
            if self._lost is not None:
                raise self._lost.again()
            ended: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
            if self._waits.join(handle, ended):
                self._wake.set()
            if self._wait_task is None:
                self._wait_task = asyncio.ensure_future(self._wait_loop())
            try:
                await ended
            except asyncio.CancelledError:
                if self._waits.leave(handle, ended):
                    self._wake.set()
                raise
            status = await self.spawn_status(handle)
            if status.ended:
                return status

    def _settle(self, delivered: "List[waits.Delivery[asyncio.Future[None]]]") -> None:
        for ended, error in delivered:
            if ended.done():
                continue
            if error is None:
                ended.set_result(None)
            else:
                ended.set_exception(error)

    async def _wait_loop(self) -> None:
        """The waiter task: one `spawn_wait` in flight over the handles
        waited on, restarted (the one before cancelled) when the set
        changes, until nobody waits."""
        current: "Optional[Tuple[int, asyncio.Future[Any], List[str]]]" = None
        try:
            while True:
                self._wake.clear()
                batch = self._waits.batch()
                if not batch:
                    return
                if current is None or current[2] != batch:
                    if current is not None:
                        self._give_up(current[0], "spawn_wait")
                    fut: "asyncio.Future[Any]" = asyncio.get_running_loop().create_future()
                    try:
                        current = (await self._send("spawn_wait", waits.spawn_wait_params(batch), fut), fut, batch)
                    except ConnectionLost as e:
                        current = None
                        self._settle(self._waits.fail_all(e))
                        continue
                _, answer, asked = current
                if not answer.done():
                    woken = asyncio.ensure_future(self._wake.wait())
                    await asyncio.wait({answer, woken}, return_when=asyncio.FIRST_COMPLETED)
                    woken.cancel()
                if answer.done():
                    current = None
                    error = answer.exception()
                    self._settle(self._waits.answered(asked, None if error else answer.result(), error))
        finally:
            self._wait_task = None
            if current is not None and not current[1].done():
                self._give_up(current[0], "spawn_wait")

    async def iter_output(
        self,
        handle: str,
        which: int = STDOUT,
        *,
        offset: int = 0,
        chunk: int = p.DEFAULT_READ_CHUNK,
        wait_ms: int = 1000,
    ) -> AsyncIterator[OutputChunk]:
        while True:
            c = await self.spawn_output_read(handle, which, offset, chunk, wait_ms=wait_ms)
            if c.data or c.skipped:
                yield c
            if c.eof:
                return
            offset = c.next_offset

    async def read_output(self, handle: str, which: int = STDOUT, *, chunk: int = p.DEFAULT_READ_CHUNK) -> Output:
        data, skipped = bytearray(), 0
        async for c in self.iter_output(handle, which, chunk=chunk):
            data += c.data
            skipped += c.skipped
        return Output(bytes(data), skipped)

    async def write_stdin(
        self,
        handle: str,
        data: Union[bytes, str, IO[bytes]],
        *,
        chunk: Optional[int] = None,
        close: bool = True,
    ) -> int:
        """As `Client.write_stdin` (a file is read with blocking reads)."""
        size = chunk or self._stdin_chunk()
        total = 0
        for piece in pieces(data, size):
            total += await self._write_fitting(handle, piece)
        if close:
            await self.spawn_stdin_close(handle)
        return total

    def _stdin_chunk(self) -> int:
        if self.max_frame_bytes:
            return min(p.DEFAULT_STDIN_CHUNK, p.stdin_chunk_for(self.max_frame_bytes))
        return p.DEFAULT_STDIN_CHUNK

    async def _write_fitting(self, handle: str, piece: bytes) -> int:
        try:
            return await self.spawn_stdin_write(handle, piece)
        except InvalidRequest as e:
            if not e.max_frame_bytes or len(piece) <= 1:
                raise
            size = min(len(piece) // 2, p.stdin_chunk_for(e.max_frame_bytes))
            total = 0
            for i in range(0, len(piece), size):
                total += await self._write_fitting(handle, piece[i : i + size])
            return total

    async def next_notification(self, handle: str) -> Notification:
        """The next notification about `handle` (wrap in
        `asyncio.wait_for` to bound the wait); `LookupError` at once for a
        handle this connection spawned without `notify`, for which none
        come."""
        if self._on_notification is not None:
            raise RuntimeError("this client hands notifications to its on_notification callback")
        if self._held.get(handle) is False:
            raise LookupError(f"{handle} was spawned without notify: no notifications come for it")
        item = await self._queue(handle).get()
        if isinstance(item, _Lost):
            self._queue(handle).put_nowait(_LOST)
            raise self._lost.again() if self._lost else ConnectionLost("the connection is gone")
        return item

    async def notifications(self, handle: str) -> AsyncIterator[Notification]:
        """The notifications about `handle`, ending with its `spawn_exited`."""
        while True:
            note = await self.next_notification(handle)
            yield note
            if isinstance(note, SpawnExitedNote):
                return
