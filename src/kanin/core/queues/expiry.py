"""Queue timers: message TTL at the head, and x-expires for an unused queue.

Both are one timer each, whatever the queue holds. Time is the scheduler's: loop
time for deadlines, its wall clock for expiry that must survive a restart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from kanin.core.message import Entry
    from kanin.core.scheduling import Cancellable, Scheduler


def ttl_ms(queue_ttl: int | None, message_ttl: int | None) -> int | None:
    """The message's time to live: the shorter of the queue's and its own, if any."""
    if queue_ttl is None:
        return message_ttl
    return queue_ttl if message_ttl is None else min(queue_ttl, message_ttl)


def deadline_of(scheduler: Scheduler, ttl: int | None, limit: WaitLimit | None) -> float | None:
    """When a message enqueued now dies: its TTL (ms) from now, or the queue's wait limit
    (x-confirm-timeout), whichever comes first; None if it has neither."""
    if limit is None:
        return None if ttl is None else scheduler.time() + ttl / 1000
    deadline = limit.deadline()
    if ttl is None:
        return deadline  # shared by the messages of one step: no new float a message
    assert deadline is not None
    return min(deadline, scheduler.time() + ttl / 1000)


class WaitLimit:
    """The longest any message may wait in a queue (x-confirm-timeout), as one deadline the
    messages enqueued within a step share: the clock is read once a step, not once a
    message (a read and a new float a message cost end-to-end confirms some 5% of their
    throughput). Never early: a message dies between `wait_s` and `wait_s` plus a step
    (at most a second, a sixteenth of `wait_s` when that is shorter) after it came."""

    def __init__(self, scheduler: Scheduler, wait_s: float) -> None:
        self._scheduler = scheduler
        self._wait_s = wait_s
        self._step_s = min(1.0, wait_s / 16)
        # The deadline of this step (None: none yet), a float object every message shares.
        # Typed `object`, read back through a cast: compiled (mypyc), a value narrowed to
        # float is unboxed, and boxed again into a new float for each message.
        self._deadline: object = None

    def deadline(self) -> float | None:
        """The deadline of a message enqueued now (never None)."""
        deadline = self._deadline
        if deadline is None:
            fresh: float | None = self._scheduler.time() + self._step_s + self._wait_s
            self._deadline = deadline = fresh
            self._scheduler.call_later(self._step_s, self._next_step)
        return cast("float | None", deadline)

    def _next_step(self) -> None:
        self._deadline = None


class HeadTimer:
    """One timer for the earliest deadline asked for: re-armed only for an earlier one,
    so arming for every new head costs nothing while the head is unchanged."""

    def __init__(self, scheduler: Scheduler, on_due: Callable[[], None]) -> None:
        self._scheduler = scheduler
        self._on_due = on_due
        self._timer: Cancellable | None = None
        self._due = 0.0

    def arm(self, expires_at: float | None) -> None:
        """Call on_due at expires_at (loop time) unless already armed for earlier."""
        if expires_at is None:
            return
        if self._timer is not None:
            if self._due <= expires_at:
                return
            self._timer.cancel()
        delay = max(0.0, expires_at - self._scheduler.time())
        self._due = expires_at
        self._timer = self._scheduler.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._on_due()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class HeadExpiry:
    """Message TTL at a queue's head, as in RabbitMQ: one HeadTimer for the head's deadline
    drops the expired messages at the head (the queue dead-letters them) and re-arms for
    the next head. A message that expired behind a longer-lived one is caught when it
    reaches the head (the queue calls `expire_head` before it hands one out)."""

    def __init__(
        self,
        scheduler: Scheduler,
        peek: Callable[[], Entry | None],
        pop: Callable[[], Entry | None],
        expired: Callable[[list[Entry]], None],
        deleted: Callable[[], bool],
    ) -> None:
        self._scheduler = scheduler
        self._peek, self._pop, self._expired, self._deleted = peek, pop, expired, deleted
        self._timer = HeadTimer(scheduler, self._on_due)

    def arm(self) -> None:
        head = self._peek()
        if head is not None:
            self._timer.arm(head.expires_at)

    def _on_due(self) -> None:
        if not self._deleted():
            self.expire_head()
            self.arm()

    def expire_head(self) -> None:
        head = self._peek()
        if head is None or head.expires_at is None:
            return
        now = self._scheduler.time()
        expired = []
        while head is not None and head.expires_at is not None and head.expires_at <= now:
            popped = self._pop()
            assert popped is head
            expired.append(head)
            head = self._peek()
        if expired:
            self._expired(expired)

    def cancel(self) -> None:
        self._timer.cancel()


class IdleTimer:
    """x-expires: on_idle once the queue has gone its period without use (no period: never).
    Uses only restart the clock; the timer wakes at most once per period to compare."""

    def __init__(
        self,
        scheduler: Scheduler,
        period_ms: int | None,
        in_use: Callable[[], bool],
        on_idle: Callable[[], None],
    ) -> None:
        self._scheduler = scheduler
        self._period_s = None if period_ms is None else period_ms / 1000
        self._in_use = in_use  # a queue with consumers is in use however long it is idle
        self._on_idle = on_idle
        self._timer: Cancellable | None = None
        self._last_used = scheduler.time()

    def set_period(self, period_ms: int | None) -> None:
        """A policy changed x-expires: the new period runs from now, as on RabbitMQ."""
        self.cancel()
        self._period_s = None if period_ms is None else period_ms / 1000
        self.touch()

    def touch(self) -> None:
        """The queue was used: restart the period (nothing to do without one)."""
        if self._period_s is None:
            return
        self._last_used = self._scheduler.time()
        if self._timer is None:
            self._timer = self._scheduler.call_later(self._period_s, self._check)

    def _check(self) -> None:
        self._timer = None
        if self._period_s is None:
            return
        if self._in_use():
            self.touch()
            return
        idle_s = self._scheduler.time() - self._last_used
        if idle_s >= self._period_s:
            self._on_idle()
            return
        self._timer = self._scheduler.call_later(self._period_s - idle_s, self._check)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
