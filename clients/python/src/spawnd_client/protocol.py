"""What the sync and async clients share: the request frames, the params
of each method, and the table of requests in flight that matches answers
to callers by `id` (docs/daemon.md, "One connection, many requests").

Nothing here does I/O or locking; the clients do that around it.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from typing import Any, Dict, Generic, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from .errors import ProtocolViolation, SpawndError, error_from_json
from .results import Notification, notification_from_json

#: Where `spawnd serve` listens unless the operator config says otherwise.
DEFAULT_SOCKET = "/run/spawnd/spawnd.sock"


def socket_path_or_default(socket_path: Optional[str]) -> str:
    """`socket_path`, else `$SPAWND_SOCKET`, else `DEFAULT_SOCKET`."""
    return socket_path or os.environ.get("SPAWND_SOCKET") or DEFAULT_SOCKET

#: The daemon's default `[server] max_frame_bytes`.
DEFAULT_MAX_FRAME_BYTES = 1 << 20

#: Bytes per `spawn_stdin_write` by default: base64 makes 4/3 of them, well
#: within the default frame limit. `write_stdin` shrinks it when a smaller
#: limit answers.
DEFAULT_STDIN_CHUNK = 256 * 1024

#: Bytes per `spawn_output_read` by default.
DEFAULT_READ_CHUNK = 64 * 1024

#: The longest `wait_ms` the daemon takes.
MAX_WAIT_MS = 60_000

#: At most this many handles per `spawn_wait`: the daemon's limit of
#: handles per connection.
MAX_WAIT_HANDLES = 64

Params = Dict[str, Any]
Stdin = Union[str, bytes, None]


def encode_frame(request_id: int, method: str, params: Optional[Mapping[str, Any]]) -> bytes:
    """One request line: compact JSON and a newline."""
    request: Dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        request["params"] = dict(params)
    return json.dumps(request, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


#: The notification that ends a wait or probe in progress (as in LSP):
#: the daemon answers that request -32800 and frees its slot.
CANCEL_REQUEST = "$/cancelRequest"

#: Requests `$/cancelRequest` does not end: they run to their end, so a
#: spawn whose caller gave up has its handle released when it is answered.
NOT_CANCELLABLE = frozenset({"spawn", "spawn_op", "spawn_stdin_write", "spawn_stdin_close"})

#: Spawn methods, whose answer names a handle to release when the caller
#: gave up.
SPAWNS = frozenset({"spawn", "spawn_op"})


def encode_cancel(request_id: int) -> bytes:
    """`$/cancelRequest {id}` as a notification (no `id` of its own)."""
    notification = {"jsonrpc": "2.0", "method": CANCEL_REQUEST, "params": {"id": request_id}}
    return json.dumps(notification, separators=(",", ":")).encode() + b"\n"


def stdin_chunk_for(max_frame_bytes: int) -> int:
    """The most raw bytes whose `spawn_stdin_write` frame (base64, and room
    for the rest of the request) stays within `max_frame_bytes`."""
    return max(1, (max_frame_bytes - 512) // 4 * 3)


def _set_stdin(params: Params, stdin: Stdin) -> None:
    if isinstance(stdin, str):
        params["stdin"] = stdin
    elif isinstance(stdin, (bytes, bytearray, memoryview)):
        params["stdin_b64"] = base64.b64encode(bytes(stdin)).decode()


def _set_common(
    params: Params,
    *,
    stdin_stream: bool,
    action: Optional[Sequence[str]],
    mode: Optional[str],
    timeout_ms: Optional[int],
    label: Optional[str],
    notify: bool,
    lease_ms: Optional[int],
) -> Params:
    if stdin_stream:
        params["stdin_stream"] = True
    if action is not None:
        params["action"] = action if isinstance(action, str) else list(action)
    if mode is not None:
        params["mode"] = mode
    if timeout_ms is not None:
        params["timeout_ms"] = timeout_ms
    if label is not None:
        params["label"] = label
    if notify:
        params["notify"] = True
    if lease_ms is not None:
        params["lease_ms"] = lease_ms
    return params


def spawn_op_params(
    connector: str,
    op: str,
    args: Optional[Mapping[str, str]] = None,
    *,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
    stdin: Stdin = None,
    stdin_stream: bool = False,
    action: Optional[Sequence[str]] = None,
    mode: Optional[str] = None,
    timeout_ms: Optional[int] = None,
    label: Optional[str] = None,
    notify: bool = False,
    lease_ms: Optional[int] = None,
) -> Params:
    """`spawn_op`'s (and `spawn_check`'s) params. `stdin` text goes as
    `stdin`, bytes as `stdin_b64`."""
    params: Params = {"connector": connector, "op": op, "args": dict(args or {})}
    if env is not None:
        params["env"] = dict(env)
    if cwd is not None:
        params["cwd"] = cwd
    _set_stdin(params, stdin)
    return _set_common(
        params,
        stdin_stream=stdin_stream,
        action=action,
        mode=mode,
        timeout_ms=timeout_ms,
        label=label,
        notify=notify,
        lease_ms=lease_ms,
    )


@dataclass(frozen=True)
class Envelope:
    """A raw envelope for `spawn`: the program, its whole argv (argv[0]
    included), its env, and optionally its cwd and stdin (text or bytes)."""

    program: str
    argv: Sequence[str]
    env: Optional[Mapping[str, str]] = None
    cwd: Optional[str] = None
    stdin: Stdin = None

    def to_json(self) -> Params:
        e: Params = {"program": self.program, "argv": list(self.argv), "env": dict(self.env or {})}
        if self.cwd is not None:
            e["cwd"] = self.cwd
        _set_stdin(e, self.stdin)
        return e


def spawn_params(
    connector: str,
    envelope: Union[Envelope, Mapping[str, Any]],
    *,
    stdin_stream: bool = False,
    action: Optional[Sequence[str]] = None,
    mode: Optional[str] = None,
    timeout_ms: Optional[int] = None,
    label: Optional[str] = None,
    notify: bool = False,
    lease_ms: Optional[int] = None,
) -> Params:
    """`spawn`'s (and `spawn_check`'s) params."""
    e = envelope.to_json() if isinstance(envelope, Envelope) else dict(envelope)
    return _set_common(
        {"connector": connector, "envelope": e},
        stdin_stream=stdin_stream,
        action=action,
        mode=mode,
        timeout_ms=timeout_ms,
        label=label,
        notify=notify,
        lease_ms=lease_ms,
    )


def with_wait(params: Params, wait_ms: Optional[int]) -> Params:
    if wait_ms is not None:
        params["wait_ms"] = wait_ms
    return params


def kill_params(handle: str, signal: Optional[str]) -> Params:
    """`spawn_kill`'s params: `signal` is sent when given (the daemon's
    default is SIGKILL)."""
    params: Params = {"handle": handle}
    if signal is not None:
        params["signal"] = str(signal)
    return params


def stdin_write_params(handle: str, data: Union[str, bytes]) -> Params:
    """Text goes as `data`, bytes as `data_b64`."""
    if isinstance(data, str):
        return {"handle": handle, "data": data}
    return {"handle": handle, "data_b64": base64.b64encode(bytes(data)).decode()}


def wait_params(handles: Sequence[str], wait_ms: Optional[int]) -> Params:
    if isinstance(handles, str):
        raise TypeError("spawn_wait takes a sequence of handles, not one string")
    return with_wait({"handles": list(handles)}, wait_ms)


# ---------------------------------------------------------------------------
# Answers and notifications


@dataclass(frozen=True)
class Answer:
    """One decoded line from the daemon."""

    request_id: Any  # int for ours, None for an error the daemon could not match
    result: Any = None
    error: Optional[SpawndError] = None
    notification: Optional[Notification] = None


def decode_line(line: bytes) -> Answer:
    """An answer (`id` with `result` or `error`) or a notification
    (`method` without `id`)."""
    try:
        msg = json.loads(line)
    except ValueError as e:
        raise ProtocolViolation(f"the daemon sent a line that is not JSON: {line[:200]!r}") from e
    if not isinstance(msg, dict):
        raise ProtocolViolation(f"the daemon sent a non-object: {line[:200]!r}")
    if "method" in msg and "id" not in msg:
        params = msg.get("params")
        return Answer(
            request_id=None,
            notification=notification_from_json(str(msg["method"]), params if isinstance(params, dict) else {}),
        )
    if "error" in msg:
        err = msg["error"]
        if not isinstance(err, dict):
            raise ProtocolViolation(f"the daemon sent an error that is not an object: {line[:200]!r}")
        return Answer(request_id=msg.get("id"), error=error_from_json(err))
    if "result" in msg and "id" in msg:
        return Answer(request_id=msg["id"], result=msg["result"])
    raise ProtocolViolation(f"the daemon sent neither an answer nor a notification: {line[:200]!r}")


S = TypeVar("S")


class InFlight(Generic[S]):
    """The requests sent and not yet answered, by id, each with the size of
    its frame and the caller's slot `S` (an event or a future).

    An error with id null has no request to go to by id. The one the
    protocol defines, a frame over `max_frame_bytes` (-32600 with
    `data.max_frame_bytes`), goes to the oldest request in flight whose
    frame was that large: the daemon reads frames in order and answers that
    error at once. Any other goes nowhere (`match_null` returns None).
    """

    def __init__(self) -> None:
        self._next_id = 0
        self._slots: Dict[int, Tuple[int, S]] = {}

    def add(self, frame_len: int, slot: S) -> int:
        self._next_id += 1
        self._slots[self._next_id] = (frame_len, slot)
        return self._next_id

    def next_id(self) -> int:
        """The id `add` will give next."""
        return self._next_id + 1

    def pop(self, request_id: Any) -> Optional[S]:
        if not isinstance(request_id, int) or isinstance(request_id, bool):
            return None
        entry = self._slots.pop(request_id, None)
        return entry[1] if entry else None

    def match_null(self, error: SpawndError) -> Optional[int]:
        limit = error.data.get("max_frame_bytes") if isinstance(error.data, dict) else None
        if error.code != -32600 or not isinstance(limit, int):
            return None
        for request_id, (frame_len, _) in sorted(self._slots.items()):
            # The frame without its newline is what the daemon measures;
            # allow for either reading.
            if frame_len - 1 > limit or frame_len > limit:
                return request_id
        return None

    def drain(self) -> List[S]:
        slots = [slot for _, slot in self._slots.values()]
        self._slots.clear()
        return slots

    def __len__(self) -> int:
        return len(self._slots)
