"""Delayed messages waiting for their time: millions of them, in little memory, on one timer.

The timing wheel (core/timing_wheel.py) holds one entry per due millisecond, not per
message: messages due in the same millisecond share a bucket, a compact array of their
store ids (8 bytes each) plus a list for those kept in memory only. So a million pending
messages due over a few minutes cost a few bytes each here; the store's index of their
records is the rest (store/file_store.py). One scheduler timer is armed for the wheel's
next due time; when it fires, `advance` hands back the buckets due, in due order, and
within a bucket in the order they were added. Nothing ever looks at every pending message.

Time is the scheduler's monotonic clock in ms; callers convert wall-clock due times (what
the store keeps, so they mean the same after a restart) with `due_from_wall`.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from kanin.core.timing_wheel import TimingWheel

if TYPE_CHECKING:
    from kanin.core.scheduling import Cancellable, Scheduler

T = TypeVar("T")


class Bucket(Generic[T]):
    """What is due in one millisecond: store ids and in-memory items, each in order."""

    __slots__ = ("ids", "items")

    def __init__(self) -> None:
        self.ids = array("q")
        self.items: list[T] | None = None


class DelaySchedule(Generic[T]):
    def __init__(self, scheduler: Scheduler, on_due: Callable[[list[Bucket[T]]], None]) -> None:
        self._scheduler = scheduler
        self._on_due = on_due
        self._buckets: dict[int, Bucket[T]] = {}  # due ms -> bucket
        self._wheel: TimingWheel[int] = TimingWheel(now_ms=self.now_ms())
        self._timer: Cancellable | None = None
        self._timer_due = 0
        self.pending = 0  # messages waiting

    def now_ms(self) -> int:
        return round(self._scheduler.time() * 1000)

    def due_from_wall(self, wall_due_ms: int) -> int:
        """A wall-clock due time (UNIX ms) on this schedule's clock."""
        return self.now_ms() + wall_due_ms - self._scheduler.wall_clock_ms()

    def add_id(self, due_ms: int, store_id: int) -> None:
        self._bucket(due_ms).ids.append(store_id)
        self.pending += 1

    def add_item(self, due_ms: int, item: T) -> None:
        bucket = self._bucket(due_ms)
        if bucket.items is None:
            bucket.items = []
        bucket.items.append(item)
        self.pending += 1

    def _bucket(self, due_ms: int) -> Bucket[T]:
        bucket = self._buckets.get(due_ms)
        if bucket is None:
            bucket = self._buckets[due_ms] = Bucket()
            self._wheel.insert(due_ms, due_ms)  # one already past comes back next advance
            now = self.now_ms()
            self._arm(max(due_ms, now), now)
        return bucket

    def _arm(self, due_ms: int, now_ms: int) -> None:
        """One timer, for the earliest bucket."""
        if self._timer is not None:
            if self._timer_due <= due_ms:
                return
            self._timer.cancel()
        self._timer_due = due_ms
        self._timer = self._scheduler.call_later(max(due_ms - now_ms, 0) / 1000, self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = self.now_ms()
        # The wheel hands back those added late (already due) first: sort into due order.
        buckets = [self._buckets.pop(due) for due in sorted(self._wheel.advance(now))]
        self.pending -= sum(len(b.ids) + len(b.items or ()) for b in buckets)
        following = self._wheel.next_due_ms()
        if following is not None:
            self._arm(following, now)
        if buckets:
            self._on_due(buckets)

    def clear(self) -> list[Bucket[T]]:
        """Everything pending, taken out (the exchange is deleted)."""
        buckets = list(self._buckets.values())
        self._buckets.clear()
        self._wheel = TimingWheel(now_ms=self.now_ms())
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.pending = 0
        return buckets
