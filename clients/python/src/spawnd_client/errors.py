"""The daemon's JSON-RPC errors as typed exceptions, one class per code of
docs/daemon.md's table, and the loss of the connection as its own error.

A refusal by the gate (-32001) or a credential problem (-32005) carries the
denial object of docs/cli.md ("Denial reasons") as `data`; those errors
expose it parsed as `Denial`, and every error keeps `data` as it came.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Type


@dataclass(frozen=True)
class Denial:
    """The gate's refusal: `reason` is the precise reason (`op_unknown`,
    `value_invalid`, `binding_required`, ...), `message` a sentence for
    humans saying what was refused and how to fix it, and `audit_id` the
    record of the refusal (absent for `spawn_check`, which records nothing).
    `raw` keeps the object as the daemon sent it, fields added later
    included."""

    denial_class: str
    boundary: str
    boundary_detail: str
    reason: str
    connector: str
    requested: str
    granted: List[str]
    message: str
    placeholder: Optional[str] = None
    audit_id: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Denial":
        return cls(
            denial_class=str(data.get("class", "")),
            boundary=str(data.get("boundary", "")),
            boundary_detail=str(data.get("boundary_detail", "")),
            reason=str(data.get("reason", "")),
            connector=str(data.get("connector", "")),
            requested=str(data.get("requested", "")),
            granted=[str(g) for g in data.get("granted") or []],
            message=str(data.get("message", "")),
            placeholder=data.get("placeholder"),
            audit_id=data.get("audit_id"),
            raw=dict(data),
        )


class SpawndError(Exception):
    """A JSON-RPC error answered by the daemon: `code`, `message` and
    `data` exactly as sent. Catch a subclass to handle one code."""

    code: int = 0

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        # One line, for logs: the message keeps its line breaks in `message`.
        super().__init__(f"{one_line(message)} ({code})")
        self.code = code
        self.message = message
        self.data = data

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, data={self.data!r})"

    @property
    def denial(self) -> Optional[Denial]:
        """The denial object when `data` is one: always for
        `CapabilityDenied` and `CredentialError`, and for a `NotFound` that
        the gate answered (`connector_unknown`, `op_unknown`, a program
        file that does not exist)."""
        if isinstance(self.data, dict) and "reason" in self.data and "class" in self.data:
            return Denial.from_json(self.data)
        return None

    @property
    def reason(self) -> Optional[str]:
        """The denial's reason, when there is a denial."""
        d = self.denial
        return d.reason if d else None


class ParseError(SpawndError):
    """-32700: the line was not JSON."""

    code = -32700


class InvalidRequest(SpawndError):
    """-32600: JSON, but not a JSON-RPC 2.0 request; also a frame over the
    daemon's `max_frame_bytes` (then `max_frame_bytes` is set)."""

    code = -32600

    @property
    def max_frame_bytes(self) -> Optional[int]:
        """The daemon's frame limit when the frame was too large, else None."""
        if isinstance(self.data, dict) and isinstance(self.data.get("max_frame_bytes"), int):
            return int(self.data["max_frame_bytes"])
        return None


class MethodNotFound(SpawndError):
    """-32601: unknown method."""

    code = -32601


class InvalidParams(SpawndError):
    """-32602: invalid params. For an invalid connector or op name, `data`
    is `{field, bytes, audit_id}`, exposed as properties."""

    code = -32602

    def _datum(self, key: str) -> Any:
        return self.data.get(key) if isinstance(self.data, dict) else None

    @property
    def field(self) -> Optional[str]:
        v = self._datum("field")
        return v if isinstance(v, str) else None

    @property
    def bytes(self) -> Optional[int]:
        v = self._datum("bytes")
        return v if isinstance(v, int) else None

    @property
    def audit_id(self) -> Optional[str]:
        v = self._datum("audit_id")
        return v if isinstance(v, str) else None


class _WithDenial(SpawndError):
    """An error whose `data` is the denial object."""

    @property
    def audit_id(self) -> Optional[str]:
        d = self.denial
        return d.audit_id if d else None


class CapabilityDenied(_WithDenial):
    """-32001: the gate refused; `denial` says why."""

    code = -32001


class NotFound(SpawndError):
    """-32002: handle (also another connection's, or a wrong attach token),
    connector, operation or program not found. When the gate said so
    (`connector_unknown`, `op_unknown`, a missing program file), `denial`
    has the denial object; for a handle, `handle` names it."""

    code = -32002

    @property
    def handle(self) -> Optional[str]:
        """The handle not found (`data.handle`), else None."""
        v = self.data.get("handle") if isinstance(self.data, dict) else None
        return v if isinstance(v, str) else None


class Overloaded(SpawndError):
    """-32003: at a connection, spawn, handle or output limit; try later.
    `data` names the limit that refused, exposed as properties: `limit`
    (a config key of the daemon's pools, such as
    `server.running_spawns_share`, or a per-connection bound:
    `waits_in_progress_per_connection`,
    `probes_in_progress_per_connection`), `max` (its value), `asked` (what
    the request asked for), `caller_uses` (what the caller's uid holds, or
    this connection for a per-connection bound) and `all_use` (what every
    caller holds); each is None when the daemon did not say."""

    code = -32003

    def _number(self, key: str) -> Optional[int]:
        v = self.data.get(key) if isinstance(self.data, dict) else None
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    @property
    def limit(self) -> Optional[str]:
        v = self.data.get("limit") if isinstance(self.data, dict) else None
        return v if isinstance(v, str) else None

    @property
    def max(self) -> Optional[int]:
        return self._number("max")

    @property
    def asked(self) -> Optional[int]:
        return self._number("asked")

    @property
    def caller_uses(self) -> Optional[int]:
        return self._number("caller_uses")

    @property
    def all_use(self) -> Optional[int]:
        return self._number("all_use")


class SandboxUnavailable(SpawndError):
    """-32004: a kernel layer or the sandbox setup failed (`data`: details)."""

    code = -32004


class CredentialError(_WithDenial):
    """-32005: `binding_required` or `invalid_credentials`; `denial` says which."""

    code = -32005


class AuditUnavailable(SpawndError):
    """-32006: the audit trail could not be written; the daemon runs nothing
    more until restarted."""

    code = -32006


class InternalError(SpawndError):
    """-32603: internal error."""

    code = -32603


class RequestCancelled(SpawndError):
    """-32800: a wait or probe ended by `$/cancelRequest` (the clients send
    it for a call their caller gave up on)."""

    code = -32800


ERRORS_BY_CODE: Dict[int, Type[SpawndError]] = {
    cls.code: cls
    for cls in (
        ParseError,
        InvalidRequest,
        MethodNotFound,
        InvalidParams,
        CapabilityDenied,
        NotFound,
        Overloaded,
        SandboxUnavailable,
        CredentialError,
        AuditUnavailable,
        InternalError,
        RequestCancelled,
    )
}


def error_from_json(error: Mapping[str, Any]) -> SpawndError:
    """The typed exception for a JSON-RPC `error` member (a code outside the
    table gives a plain `SpawndError`)."""
    code = error.get("code")
    code = code if isinstance(code, int) else 0
    cls = ERRORS_BY_CODE.get(code, SpawndError)
    return cls(code, str(error.get("message", "")), error.get("data"))


def one_line(text: str) -> str:
    """`text` with each run of white space, line breaks included, made one
    space."""
    return " ".join(text.split())


class ConnectionLost(ConnectionError):
    """The connection to the daemon closed or failed: every call in flight,
    and every later one, gets this. Not a `SpawndError`, since the daemon
    answered nothing; running spawns of the connection are killed by the
    daemon unless they were detached (`lease_ms`). `last` is the last error
    the daemon sent with id null before it closed (a limit refusing the
    connection, an idle timeout), if any: what it said of why."""

    def __init__(
        self, message: str, last: Optional[SpawndError] = None, handles: Sequence[str] = ()
    ) -> None:
        if last is not None:
            message = f"{message} (the daemon said: {one_line(last.message)})"
        if handles:
            message = f"{message}; its {len(handles)} handles were lost with it: {', '.join(handles)}"
        super().__init__(one_line(message))
        self.last = last
        #: The handles the connection held when it was lost: they ended with
        #: it, and the client does not connect again. Empty when it held
        #: none: the next call then connects again.
        self.handles: Tuple[str, ...] = tuple(handles)

    def again(self) -> "ConnectionLost":
        """The same loss, for another call."""
        again = ConnectionLost(str(self))
        again.last = self.last
        again.handles = self.handles
        return again


class ProtocolViolation(Exception):
    """The daemon sent something that is not a JSON-RPC 2.0 answer or
    notification as docs/daemon.md describes (a client or daemon bug)."""
