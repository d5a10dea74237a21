"""The daemon's results as typed values. Each keeps the object it was made
from in `raw`, so fields the daemon adds later are never lost."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

STDOUT = 0
STDERR = 1


class State(str, Enum):
    """A spawn's state, as `spawn_status`, `spawn_wait`, `spawn_attach` and
    `spawn_list` say it; every one but `RUNNING` means it has ended. A
    state this version does not name is kept as a member of its own
    (`State("paused").value == "paused"`). Members are strings: they
    compare equal to the daemon's words and print as them."""

    RUNNING = "running"
    EXITED = "exited"
    SIGNALED = "signaled"
    TIMED_OUT = "timed_out"
    #: The spawn ended without a result (its spawner died); `error` says why.
    FAILED = "failed"

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @property
    def ended(self) -> bool:
        return self is not State.RUNNING and self.value != ""

    @classmethod
    def _missing_(cls, value: object) -> Optional["State"]:
        if not isinstance(value, str):
            return None
        member = str.__new__(cls, value)
        member._name_ = value.upper()
        member._value_ = value
        return member


#: The state of a spawn that runs (`State.RUNNING`).
RUNNING = State.RUNNING


def _state(value: Any) -> State:
    return State(str(value if value is not None else ""))


@dataclass(frozen=True)
class Exit:
    """How a program ended: `code` when it exited, `signal` (its name, such
    as `SIGKILL`, and `signal_number`) when a signal killed it, neither
    while it runs or for a spawn that failed without a result."""

    code: Optional[int] = None
    signal: Optional[str] = None
    signal_number: Optional[int] = None

    @property
    def exited(self) -> bool:
        return self.code is not None

    @property
    def signalled(self) -> bool:
        return self.code is None and (self.signal is not None or self.signal_number is not None)

    def __str__(self) -> str:
        if self.code is not None:
            return f"exit code {self.code}"
        if self.signalled:
            return f"signal {self.signal or self.signal_number}"
        return "no exit"


class Signal(str, Enum):
    """The signals `spawn_kill` sends: `SIGKILL` (the daemon's default)
    kills the sandbox; any other goes to the program."""

    SIGTERM = "SIGTERM"
    SIGKILL = "SIGKILL"
    SIGINT = "SIGINT"
    SIGHUP = "SIGHUP"
    SIGQUIT = "SIGQUIT"
    SIGUSR1 = "SIGUSR1"
    SIGUSR2 = "SIGUSR2"

    def __str__(self) -> str:
        return str(self.value)


def _b64(text: Any) -> bytes:
    return base64.b64decode(text) if isinstance(text, str) else b""


@dataclass(frozen=True)
class Spawned:
    """A spawn's answer: its `handle`, and the `token` (shown once) that
    `spawn_attach` needs when the spawn was detached with `lease_ms`."""

    handle: str
    token: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, r: Mapping[str, Any]) -> "Spawned":
        return cls(handle=str(r["handle"]), token=r.get("token"), raw=dict(r))


@dataclass(frozen=True)
class StreamResult:
    """One stream of a run result (`stdout` or `stderr`): the bytes the
    result keeps (`data`, None in a `spawn_exited` notification, which
    carries the sizes and hashes only), `bytes` and `sha256` over them,
    `total_bytes` the program wrote, and `truncated` when the cap cut it."""

    data: Optional[bytes]
    bytes: int
    total_bytes: int
    truncated: bool
    sha256: Optional[str]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def text(self) -> Optional[str]:
        """The kept bytes as text when they are UTF-8 (as the daemon sent them)."""
        t = self.raw.get("text")
        return t if isinstance(t, str) else None

    @classmethod
    def from_json(cls, s: Mapping[str, Any]) -> "StreamResult":
        if isinstance(s.get("text"), str):
            data: Optional[bytes] = s["text"].encode()
        elif isinstance(s.get("base64"), str):
            data = _b64(s["base64"])
        else:
            data = None
        return cls(
            data=data,
            bytes=int(s.get("bytes") or 0),
            total_bytes=int(s.get("total_bytes") or 0),
            truncated=bool(s.get("truncated")),
            sha256=s.get("sha256"),
            raw=dict(s),
        )


@dataclass(frozen=True)
class SpawnStatus:
    """`spawn_status`'s answer: `state` (`running`, `exited`, `signaled`,
    `timed_out`, or `failed` with `error` when the sandbox was lost after the
    program started) and, once
    ended, the run result of docs/cli.md ("The run result"). The common
    fields are attributes; every other one (`isolation`, `network`,
    `timings`, ...) is in `raw`."""

    state: State
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    signal_name: Optional[str] = None
    timed_out: bool = False
    interrupted_by: Optional[str] = None
    audit_id: Optional[str] = None
    duration_ms: Optional[int] = None
    stdout: Optional[StreamResult] = None
    stderr: Optional[StreamResult] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ended(self) -> bool:
        return self.state.ended

    @property
    def exit(self) -> Exit:
        """The exit code or the signal that killed the program."""
        return Exit(code=self.exit_code, signal=self.signal_name, signal_number=self.signal)

    @property
    def isolation(self) -> Optional["Isolation"]:
        """What confined the program; None while it runs."""
        i = self.raw.get("isolation")
        return Isolation.from_json(i) if isinstance(i, dict) else None

    @property
    def network(self) -> Optional["Network"]:
        """What the relay saw and refused, for a spawn with network grants
        or learning; None for one without."""
        n = self.raw.get("network")
        return Network.from_json(n) if isinstance(n, dict) else None

    @property
    def error(self) -> Optional[str]:
        """Why a `failed` spawn failed."""
        e = self.raw.get("error")
        return e if isinstance(e, str) else None

    @property
    def ok(self) -> bool:
        """The program exited 0."""
        return self.state == "exited" and self.exit_code == 0

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    @classmethod
    def from_json(cls, r: Mapping[str, Any]) -> "SpawnStatus":
        def stream(key: str) -> Optional[StreamResult]:
            s = r.get(key)
            return StreamResult.from_json(s) if isinstance(s, dict) else None

        return cls(
            state=_state(r.get("state")),
            exit_code=r.get("exit_code"),
            signal=r.get("signal"),
            signal_name=r.get("signal_name"),
            timed_out=bool(r.get("timed_out")),
            interrupted_by=r.get("interrupted_by"),
            audit_id=r.get("audit_id"),
            duration_ms=r.get("duration_ms"),
            stdout=stream("stdout"),
            stderr=stream("stderr"),
            raw=dict(r),
        )


@dataclass(frozen=True)
class WaitResult:
    """`spawn_wait`'s answer: `handle` the first of the handles asked about,
    in their order, that has ended (None when none had by `wait_ms`),
    `state` its state (`running` when none), and `ended` every one of them
    that has ended."""

    handle: Optional[str]
    state: State
    ended: List[str]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, r: Mapping[str, Any]) -> "WaitResult":
        # `ended` lists handles (docs/daemon.md); objects with a `handle`
        # are read too, should the daemon ever send {handle, state}.
        ended: List[str] = []
        for e in r.get("ended") or []:
            if isinstance(e, str):
                ended.append(e)
            elif isinstance(e, dict) and isinstance(e.get("handle"), str):
                ended.append(e["handle"])
        return cls(handle=r.get("handle"), state=_state(r.get("state")), ended=ended, raw=dict(r))


@dataclass(frozen=True)
class OutputSize:
    """`spawn_output_size`'s answer."""

    bytes: int
    truncated: bool

    @classmethod
    def from_json(cls, r: Mapping[str, Any]) -> "OutputSize":
        return cls(bytes=int(r["bytes"]), truncated=bool(r.get("truncated")))


@dataclass(frozen=True)
class OutputChunk:
    """`spawn_output_read`'s answer, decoded: `data`, `eof`, and `skipped`,
    the bytes that had left the daemon's window before this read; `offset`
    is the offset asked for, so `next_offset` is where the next read goes."""

    offset: int
    data: bytes
    eof: bool
    skipped: int = 0

    @property
    def next_offset(self) -> int:
        return self.offset + self.skipped + len(self.data)

    @classmethod
    def from_json(cls, offset: int, r: Mapping[str, Any]) -> "OutputChunk":
        return cls(
            offset=offset,
            data=_b64(r.get("data_b64")),
            eof=bool(r.get("eof")),
            skipped=int(r.get("skipped") or 0),
        )


@dataclass(frozen=True)
class Output:
    """A whole stream read by `read_output`: the bytes, and how many were
    skipped because they left the daemon's window before they were read."""

    data: bytes
    skipped: int = 0


@dataclass(frozen=True)
class Attached:
    """`spawn_attach`'s answer: `state` is `spawn_status`'s state
    (`running`, or how the spawn ended while detached); its result is
    `spawn_status`'s."""

    handle: str
    state: State

    @property
    def ended(self) -> bool:
        return self.state.ended

    @classmethod
    def from_json(cls, r: Mapping[str, Any]) -> "Attached":
        return cls(handle=str(r["handle"]), state=_state(r.get("state")))


@dataclass(frozen=True)
class Pong:
    """`ping`'s answer: spawnd's version, as `spawnd --version` prints it."""

    version: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, r: Mapping[str, Any]) -> "Pong":
        return cls(version=str(r.get("version", "")), raw=dict(r))


@dataclass(frozen=True)
class SpawnListEntry:
    """One of the caller's spawns in `spawn_list`: `attached` when this
    connection holds it, `detached` when made with `lease_ms`; `token`
    (detached spawns of the same uid) takes an orphan up with
    `spawn_attach`; `lease_ms_left` is the lease left of a detached spawn no
    connection holds."""

    handle: str
    state: State
    connector: str
    label: Optional[str]
    op: Optional[str]
    detached: bool
    attached: bool
    lease_ms_left: Optional[int]
    token: Optional[str]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, r: Mapping[str, Any]) -> "SpawnListEntry":
        return cls(
            handle=str(r["handle"]),
            state=_state(r.get("state")),
            connector=str(r.get("connector", "")),
            label=r.get("label"),
            op=r.get("op"),
            detached=bool(r.get("detached")),
            attached=bool(r.get("attached")),
            lease_ms_left=r.get("lease_ms_left"),
            token=r.get("token"),
            raw=dict(r),
        )


def spawn_list_from_json(r: Mapping[str, Any]) -> List[SpawnListEntry]:
    """`spawn_list`'s `spawns`, in the order they started."""
    return [SpawnListEntry.from_json(e) for e in r.get("spawns") or [] if isinstance(e, dict)]


@dataclass(frozen=True)
class Isolation:
    """What confined the program (docs/sandbox.md); `raw` has the rest
    (`landlock`, `seccomp`, `limits`, `tmpfs`, the scopes)."""

    namespaces: List[str]
    root: str
    network_namespace: str
    no_new_privs: bool
    capabilities: str
    uid: int
    gid: int
    limits_via: str
    cwd: str
    fresh_cwd: bool
    landlock: Optional[Dict[str, Any]]
    seccomp: Dict[str, Any]
    limits: Dict[str, Any]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, r: Mapping[str, Any]) -> "Isolation":
        landlock = r.get("landlock")
        return cls(
            namespaces=[str(n) for n in r.get("namespaces") or []],
            root=str(r.get("root", "")),
            network_namespace=str(r.get("network_namespace", "")),
            no_new_privs=bool(r.get("no_new_privs")),
            capabilities=str(r.get("capabilities", "")),
            uid=int(r.get("uid") or 0),
            gid=int(r.get("gid") or 0),
            limits_via=str(r.get("limits_via", "")),
            cwd=str(r.get("cwd", "")),
            fresh_cwd=bool(r.get("fresh_cwd")),
            landlock=dict(landlock) if isinstance(landlock, dict) else None,
            seccomp=dict(r.get("seccomp") or {}),
            limits=dict(r.get("limits") or {}),
            raw=dict(r),
        )


@dataclass(frozen=True)
class Refusal:
    """One kind of refused egress and how often it happened."""

    host: str
    port: int
    protocol: str
    reason: str
    count: int

    @classmethod
    def from_json(cls, r: Mapping[str, Any]) -> "Refusal":
        return cls(
            host=str(r.get("host", "")),
            port=int(r.get("port") or 0),
            protocol=str(r.get("protocol", "")),
            reason=str(r.get("reason", "")),
            count=int(r.get("count") or 0),
        )


@dataclass(frozen=True)
class Network:
    """The result's network section (docs/network.md, "What is recorded"):
    totals, the refusals by kind, the DNS names refused as (name, type),
    and for a learning spawn its mode and what it contacted; `raw` has the
    connections one by one (`listed`) and the rest."""

    connections: int
    refused: int
    bytes_up: int
    bytes_down: int
    refusals: List[Refusal]
    dns_refused: List[Tuple[str, str]]
    learning: Optional[str] = None
    contacted: List[str] = field(default_factory=list)
    error: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def listed(self) -> List[Dict[str, Any]]:
        return [dict(c) for c in self.raw.get("listed") or []]

    @classmethod
    def from_json(cls, r: Mapping[str, Any]) -> "Network":
        return cls(
            connections=int(r.get("connections") or 0),
            refused=int(r.get("refused") or 0),
            bytes_up=int(r.get("bytes_up") or 0),
            bytes_down=int(r.get("bytes_down") or 0),
            refusals=[Refusal.from_json(x) for x in r.get("refusals") or [] if isinstance(x, dict)],
            dns_refused=[
                (str(x.get("name", "")), str(x.get("type", ""))) for x in r.get("dns_refused") or [] if isinstance(x, dict)
            ],
            learning=r.get("learning"),
            contacted=[str(c) for c in r.get("contacted") or []],
            error=r.get("error"),
            raw=dict(r),
        )


@dataclass(frozen=True)
class Param:
    """One parameter of an operation, in argv order."""

    name: str
    kind: str
    required: bool
    default: Optional[str] = None
    values: Optional[List[str]] = None
    pattern: Optional[str] = None
    allow_dash: bool = False
    allow_empty: bool = False
    max_len: Optional[int] = None
    description: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, p: Mapping[str, Any]) -> "Param":
        return cls(
            name=str(p["name"]),
            kind=str(p.get("kind", "string")),
            required=bool(p.get("required")),
            default=p.get("default"),
            values=p.get("values"),
            pattern=p.get("pattern"),
            allow_dash=bool(p.get("allow_dash")),
            allow_empty=bool(p.get("allow_empty")),
            max_len=p.get("max_len"),
            description=p.get("description"),
            raw=dict(p),
        )


@dataclass(frozen=True)
class Operation:
    """One operation of a connector."""

    name: str
    description: str
    mode: str
    params: List[Param]
    network: List[str] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> "Operation":
        return cls(
            name=str(o["name"]),
            description=str(o.get("description") or ""),
            mode=str(o.get("mode") or ""),
            params=[Param.from_json(p) for p in o.get("params") or []],
            network=list(o.get("network") or []),
            raw=dict(o),
        )


@dataclass(frozen=True)
class Connector:
    """One connector the peer may act for: its `status` (`connected`,
    `not_configured`, `invalid_credentials`, `disabled_by_admin`) and, unless
    disabled, its operations and network grants. A `disabled_by_admin`
    connector must be neither offered nor mentioned to an agent."""

    name: str
    status: str
    operations: List[Operation]
    network: List[str] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def disabled(self) -> bool:
        return self.status == "disabled_by_admin"

    def operation(self, name: str) -> Optional[Operation]:
        return next((o for o in self.operations if o.name == name), None)

    @classmethod
    def from_json(cls, name: str, c: Mapping[str, Any]) -> "Connector":
        return cls(
            name=name,
            status=str(c.get("status", "")),
            operations=[Operation.from_json(o) for o in c.get("operations") or []],
            network=list(c.get("network") or []),
            raw=dict(c),
        )


@dataclass(frozen=True)
class ConnectorsStatus:
    """`connectors_status`'s answer: the connectors by FQN, when it was
    taken, and `block`, the `<connector_status>` text for a prompt."""

    captured_at: str
    connectors: Dict[str, Connector]
    block: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, r: Mapping[str, Any]) -> "ConnectorsStatus":
        raw_connectors = r.get("connectors") or {}
        if isinstance(raw_connectors, list):  # a list of objects with `name`
            items = [(str(c.get("name", "")), c) for c in raw_connectors]
        else:
            items = list(raw_connectors.items())
        return cls(
            captured_at=str(r.get("captured_at", "")),
            connectors={name: Connector.from_json(name, c) for name, c in items},
            block=str(r.get("block", "")),
            raw=dict(r),
        )


@dataclass(frozen=True)
class SpawnOutputNote:
    """A `spawn_output` notification: new output of `handle`'s stream
    `which`; `data` starts at `offset` in the stream, and `skipped` bytes
    just before it left the daemon's window unsent (this connection missed
    them)."""

    handle: str
    which: int
    offset: int
    data: bytes
    skipped: int = 0

    @property
    def next_offset(self) -> int:
        """Where the next notification's data should start."""
        return self.offset + len(self.data)


@dataclass(frozen=True)
class SpawnExitedNote:
    """A `spawn_exited` notification: the spawn's status without the
    streams' bytes (their sizes, hashes and `truncated` stay)."""

    handle: str
    status: SpawnStatus


@dataclass(frozen=True)
class OtherNote:
    """A notification this client does not know (kept as sent)."""

    method: str
    params: Dict[str, Any]

    @property
    def handle(self) -> Optional[str]:
        h = self.params.get("handle")
        return h if isinstance(h, str) else None


Notification = Union[SpawnOutputNote, SpawnExitedNote, OtherNote]


def notification_from_json(method: str, params: Mapping[str, Any]) -> Notification:
    if method == "spawn_output":
        return SpawnOutputNote(
            handle=str(params.get("handle")),
            which=int(params.get("which") or 0),
            offset=int(params.get("offset") or 0),
            data=_b64(params.get("data_b64")),
            skipped=int(params.get("skipped") or 0),
        )
    if method == "spawn_exited":
        status = params.get("status")
        return SpawnExitedNote(
            handle=str(params.get("handle")),
            status=SpawnStatus.from_json(status if isinstance(status, dict) else {}),
        )
    return OtherNote(method=method, params=dict(params))
