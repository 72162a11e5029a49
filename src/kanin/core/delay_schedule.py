"""Delayed messages waiting for their time: millions of them, in little memory, on one timer.

The timing wheel (core/timing_wheel.py) holds one entry per bucket, not per message, in two
tiers. Messages due within NEAR_MS share a bucket per due millisecond: a compact array of
their store ids (8 bytes each) plus a list for those kept in memory only. Messages due later
share a bucket per FAR_MS, with their due times beside their ids (16 bytes a message); that
bucket's wheel entry comes up NEAR_MS before its span starts, and its messages move to
their millisecond buckets then (a span short enough that the move, one burst of work on the
loop, stays short at ten thousand messages due a second). So pending messages cost a few
bytes each here, however sparse their due times; the store's index of their records is the
rest (store/file_store.py). One scheduler timer is armed for the wheel's next due time; when it
fires, `advance` hands back what is due, buckets in due order and each in the order its
messages were added. Nothing ever looks at every pending message.

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

NEAR_MS = 2000  # due sooner than this: a millisecond bucket; later: a far bucket
FAR_MS = 100  # the span of a far bucket


class Bucket(Generic[T]):
    """What is due in one millisecond: store ids and in-memory items, each in order."""

    __slots__ = ("due_ms", "ids", "items")

    def __init__(self, due_ms: int) -> None:
        self.due_ms = due_ms
        self.ids = array("q")
        self.items: list[T] | None = None


class FarBucket(Generic[T]):
    """What is due in one FAR_MS span, NEAR_MS or more ahead: ids, their due times, items."""

    __slots__ = ("dues", "ids", "items")

    def __init__(self) -> None:
        self.ids = array("q")
        self.dues = array("q")
        self.items: list[tuple[int, T]] | None = None


class DelaySchedule(Generic[T]):
    """Hands buckets to `on_due` lead_ms before they are due (the caller may want time to
    read their messages back), in due order. With a batch_ms, also those due within
    batch_ms after the first, in the same call (between lead_ms and lead_ms + batch_ms
    early): a caller that reads them back then pays for one read per batch, not one per
    millisecond."""

    def __init__(
        self,
        scheduler: Scheduler,
        on_due: Callable[[list[Bucket[T]]], None],
        lead_ms: int = 0,
        batch_ms: int = 0,
    ) -> None:
        assert min(lead_ms, batch_ms) >= 0 and lead_ms + batch_ms < NEAR_MS
        self._scheduler = scheduler
        self._on_due = on_due
        self._lead_ms = lead_ms
        self._batch_ms = batch_ms
        self._buckets: dict[int, Bucket[T]] = {}  # due ms -> bucket
        self._far: dict[int, FarBucket[T]] = {}  # due ms // FAR_MS -> its far bucket
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
        self.pending += 1
        if due_ms - self.now_ms() >= NEAR_MS:
            far = self._far_bucket(due_ms)
            far.ids.append(store_id)
            far.dues.append(due_ms)
        else:
            self._bucket(due_ms).ids.append(store_id)

    def add_item(self, due_ms: int, item: T) -> None:
        self.pending += 1
        if due_ms - self.now_ms() >= NEAR_MS:
            far = self._far_bucket(due_ms)
            if far.items is None:
                far.items = []
            far.items.append((due_ms, item))
            return
        bucket = self._bucket(due_ms)
        if bucket.items is None:
            bucket.items = []
        bucket.items.append(item)

    def _far_bucket(self, due_ms: int) -> FarBucket[T]:
        span = due_ms // FAR_MS
        far = self._far.get(span)
        if far is None:
            far = self._far[span] = FarBucket()
            # Negative: the wheel's entry names a far bucket, not a due millisecond.
            spread_at = span * FAR_MS - NEAR_MS
            self._wheel.insert(-span, spread_at)
            self._arm(spread_at, self.now_ms())
        return far

    def _spread(self, span: int) -> None:
        """A far bucket is near now: its messages go to their millisecond buckets."""
        far = self._far.pop(span)
        for due_ms, store_id in zip(far.dues, far.ids, strict=True):
            self._bucket(due_ms).ids.append(store_id)
        for due_ms, item in far.items or ():
            bucket = self._bucket(due_ms)
            if bucket.items is None:
                bucket.items = []
            bucket.items.append(item)

    def _bucket(self, due_ms: int) -> Bucket[T]:
        bucket = self._buckets.get(due_ms)
        if bucket is None:
            bucket = self._buckets[due_ms] = Bucket(due_ms)
            handed_at = due_ms - self._lead_ms
            self._wheel.insert(due_ms, handed_at)  # one already past comes back next advance
            now = self.now_ms()
            self._arm(max(handed_at, now), now)
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
        horizon = now + self._batch_ms
        due_keys = self._wheel.advance(horizon)
        spans = [-key for key in due_keys if key < 0]
        if spans:
            for span in spans:
                self._spread(span)
            # Spreading may have made millisecond buckets already due: take those too.
            due_keys = [key for key in (*due_keys, *self._wheel.advance(horizon)) if key >= 0]
        # The wheel hands back those added late (already due) first: sort into due order.
        buckets = [self._buckets.pop(due) for due in sorted(due_keys) if due in self._buckets]
        self.pending -= sum(len(b.ids) + len(b.items or ()) for b in buckets)
        following = self._wheel.next_due_ms()
        if following is not None:
            self._arm(following, now)
        if buckets:
            self._on_due(buckets)

    def clear(self) -> list[Bucket[T]]:
        """Everything pending, taken out (the exchange is deleted)."""
        buckets = list(self._buckets.values())
        for span, far in self._far.items():
            bucket: Bucket[T] = Bucket(span * FAR_MS)
            bucket.ids = far.ids
            bucket.items = [item for _, item in far.items] if far.items else None
            buckets.append(bucket)
        self._buckets.clear()
        self._far.clear()
        self._wheel = TimingWheel(now_ms=self.now_ms())
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.pending = 0
        return buckets
