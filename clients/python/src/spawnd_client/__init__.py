"""The official Python client of `spawnd serve`, the spawnd daemon
(JSON-RPC 2.0 over a Unix socket, one JSON object per line; the protocol is
docs/daemon.md in the spawnd repository).

`Client` blocks and is thread-safe; `AsyncClient` is for asyncio. Both
cover every method of the protocol, raise the daemon's errors as typed
exceptions (`SpawndError` and one subclass per code; `CapabilityDenied` and
`CredentialError` carry a `Denial`), and raise `ConnectionLost` when the
connection goes. Standard library only.
"""

from .aio import AsyncClient
from .client import Client
from .errors import (
    AuditUnavailable,
    CapabilityDenied,
    ConnectionLost,
    CredentialError,
    Denial,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    NotFound,
    Overloaded,
    ParseError,
    ProtocolViolation,
    RequestCancelled,
    SandboxUnavailable,
    SpawndError,
)
from .protocol import DEFAULT_SOCKET, Envelope
from .results import (
    STDERR,
    STDOUT,
    Attached,
    Connector,
    ConnectorsStatus,
    Exit,
    Isolation,
    Network,
    Notification,
    Operation,
    OtherNote,
    Output,
    OutputChunk,
    OutputSize,
    Param,
    Pong,
    Refusal,
    Signal,
    SpawnExitedNote,
    Spawned,
    SpawnListEntry,
    SpawnOutputNote,
    SpawnStatus,
    State,
    StreamResult,
    WaitResult,
)

__version__ = "0.1.0"

__all__ = [
    "Exit",
    "Isolation",
    "Network",
    "Pong",
    "Refusal",
    "Signal",
    "SpawnListEntry",
    "State",
    "AsyncClient",
    "Attached",
    "AuditUnavailable",
    "CapabilityDenied",
    "Client",
    "ConnectionLost",
    "Connector",
    "ConnectorsStatus",
    "CredentialError",
    "DEFAULT_SOCKET",
    "Denial",
    "Envelope",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "MethodNotFound",
    "Notification",
    "NotFound",
    "Operation",
    "OtherNote",
    "Output",
    "OutputChunk",
    "OutputSize",
    "Overloaded",
    "Param",
    "ParseError",
    "ProtocolViolation",
    "RequestCancelled",
    "STDERR",
    "STDOUT",
    "SandboxUnavailable",
    "SpawnExitedNote",
    "SpawnOutputNote",
    "SpawnStatus",
    "Spawned",
    "SpawndError",
    "StreamResult",
    "WaitResult",
]
