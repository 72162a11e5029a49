"""The slice of an event loop the core needs: run soon, run later, read the clocks.

The core reads no clock of its own: loop time (monotonic seconds) for timers and
ages, and wall-clock milliseconds for what must mean the same after a restart
(stored expiry) or to a client (x-death times), both come from here. The server
passes asyncio's loop wrapped in kanin.server.scheduler.LoopScheduler; tests pass
kanin.testing.clock.FakeScheduler, whose clocks move only when told.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def call_soon(self, callback: Callable[..., Any], *args: Any) -> Any: ...

    def call_next_turn(self, callback: Callable[..., Any], *args: Any) -> Any:
        """After what the loop has ready now (other connections' reads and writes): for
        work that goes on and on, such as a deep queue draining to a fast consumer, which
        would otherwise hold everyone else up for as long as it lasts."""
        ...

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Cancellable: ...

    def time(self) -> float:
        """Monotonic seconds: timers, TTL deadlines, idle ages."""
        ...

    def wall_clock_ms(self) -> int:
        """UNIX time in ms: stored expiry and timestamps that outlive the process."""
        ...


class Soon:
    """A scheduler whose call_soon work can also be run early, by `run_pending`.

    Work queued here runs in order, at the latest on the next loop turn. A connection
    calls `run_pending` after each slice of frames it acts on, so the delivery an ack
    makes room for, and the write that carries it, happen in that same turn rather than
    one and two turns later: with a busy publisher every turn is long, and those turns
    were what limited a consumer's rate. Timers and the clock are the wrapped ones.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        # The wrapped clocks themselves, not methods that call them: TTL reads the one per
        # message, a stream the other.
        self.time: Callable[[], float] = scheduler.time
        self.wall_clock_ms: Callable[[], int] = scheduler.wall_clock_ms
        self._pending: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._scheduled = False

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> None:
        self._pending.append((callback, args))
        if not self._scheduled:
            self._scheduled = True
            self._scheduler.call_soon(self._on_turn)

    def call_next_turn(self, callback: Callable[..., Any], *args: Any) -> None:
        self._scheduler.call_soon(callback, *args)  # the loop's: never in this run

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Cancellable:
        return self._scheduler.call_later(delay, callback, *args)

    def _on_turn(self) -> None:
        self._scheduled = False
        self.run_pending()

    def run_pending(self) -> None:
        """Run everything queued, including what it queues. One failure is logged and
        does not stop the rest, as with the event loop's own callbacks."""
        pending = self._pending
        while pending:
            callback, args = pending.popleft()
            try:
                callback(*args)
            except Exception:
                log.exception("error in deferred callback %r", callback)
