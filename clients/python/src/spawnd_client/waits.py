"""The bookkeeping of a connection's one `spawn_wait` loop, shared by the
sync and async clients: which handles are waited on, by whom, what the next
`spawn_wait` names, and which waiters an answer ends.

Every `wait()` on a connection joins one loop that keeps a single
`spawn_wait` in flight over all the handles waited on, so however many
callers wait, the daemon holds one of the connection's waits (it bounds
them, docs/daemon.md) and other calls never queue behind them. Nothing here
does I/O or locking; the clients run the loop around it.
"""

from __future__ import annotations

from typing import Any, Dict, Generic, List, Optional, Tuple, TypeVar

from .errors import NotFound, RequestCancelled, SpawndError
from .protocol import MAX_WAIT_HANDLES
from .results import WaitResult

#: How long each `spawn_wait` of the loop asks the daemon to wait; the loop
#: asks again until the handles end.
LOOP_WAIT_MS = 10_000

T = TypeVar("T")

#: A waiter and what ends its wait: None once its handle has ended (it then
#: reads the status), else the error.
Delivery = Tuple[T, Optional[BaseException]]


class WaitSet(Generic[T]):
    """The handles waited on, in the order they joined, each with its
    waiters `T` (an event or a future). A handle whose waiters all left
    stays in the set until the next `batch()`."""

    def __init__(self) -> None:
        self._waiters: Dict[str, List[T]] = {}
        self._order: List[str] = []

    def join(self, handle: str, waiter: T) -> bool:
        """Adds a waiter; True when its handle is new to the set (the loop
        must restart its `spawn_wait`)."""
        self._waiters.setdefault(handle, []).append(waiter)
        if handle in self._order:
            return False
        self._order.append(handle)
        return True

    def leave(self, handle: str, waiter: T) -> bool:
        """Takes a waiter out; True when nobody waits any more (the loop may
        give up its `spawn_wait` and stop)."""
        waiters = self._waiters.get(handle, [])
        if waiter in waiters:
            waiters.remove(waiter)
        if not waiters:
            self._waiters.pop(handle, None)
        return not self._waiters

    def batch(self) -> List[str]:
        """The handles the next `spawn_wait` names: those somebody waits on,
        at most MAX_WAIT_HANDLES (the rest get their turn as others end).
        Empty when nobody waits: the loop stops."""
        self._order = [h for h in self._order if self._waiters.get(h)]
        return self._order[:MAX_WAIT_HANDLES]

    def answered(self, batch: List[str], result: Any, error: Optional[BaseException]) -> List[Delivery[T]]:
        """The waiters a `spawn_wait` over `batch` ends: those of the
        handles that ended, or of a handle not found (-32002 with
        `data.handle`, its waiters alone); any other error ends every wait.
        A timeout (none ended) and a cancelled request end none."""
        if error is None:
            ended = WaitResult.from_json(result if isinstance(result, dict) else {}).ended
            return [d for h in ended if h in batch for d in self._finish(h, None)]
        if isinstance(error, RequestCancelled):
            return []
        if isinstance(error, NotFound) and error.handle in batch:
            assert error.handle is not None
            return self._finish(error.handle, error)
        return self.fail_all(error)

    def fail_all(self, error: BaseException) -> List[Delivery[T]]:
        """Every waiter, ended with `error`; the set is then empty."""
        delivered: List[Delivery[T]] = [(w, error) for ws in self._waiters.values() for w in ws]
        self._waiters.clear()
        self._order.clear()
        return delivered

    def _finish(self, handle: str, error: Optional[SpawndError]) -> List[Delivery[T]]:
        waiters = self._waiters.pop(handle, [])
        if handle in self._order:
            self._order.remove(handle)
        return [(w, error) for w in waiters]

    def __bool__(self) -> bool:
        return bool(self._waiters)


def spawn_wait_params(batch: List[str]) -> Dict[str, Any]:
    """The loop's `spawn_wait` params."""
    return {"handles": list(batch), "wait_ms": LOOP_WAIT_MS}
