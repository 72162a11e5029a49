"""A fake scheduler with a hand-driven clock: TTL and expiry tests that never sleep.

It satisfies kanin.core.scheduling.Scheduler. `advance(seconds)` moves time and runs
every timer that falls due, in order, with the call_soon callbacks they schedule.
The wall clock moves with it: `wall_clock_ms` is `wall_start` plus the time advanced.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable
from typing import Any


class FakeTimer:
    def __init__(self, when: float) -> None:
        self.when = when
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeScheduler:
    # 2023-11-14T22:13:20Z: any fixed instant would do, as long as it is not zero.
    WALL_START = 1_700_000_000.0

    def __init__(self, start: float = 1000.0, wall_start: float = WALL_START) -> None:
        self.now = start
        self._wall_offset = wall_start - start
        self._soon: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._timers: list[tuple[float, int, FakeTimer, Callable[..., Any], tuple[Any, ...]]] = []
        self._order = itertools.count()
        self.timers_fired = 0

    def time(self) -> float:
        return self.now

    def wall_clock_ms(self) -> int:
        return int((self.now + self._wall_offset) * 1000)

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> None:
        self._soon.append((callback, args))

    def call_next_turn(self, callback: Callable[..., Any], *args: Any) -> None:
        self._soon.append((callback, args))

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> FakeTimer:
        timer = FakeTimer(self.now + delay)
        heapq.heappush(self._timers, (timer.when, next(self._order), timer, callback, args))
        return timer

    def run_soon(self) -> None:
        """Run call_soon callbacks until none are left (one 'event-loop turn' at a time)."""
        while self._soon:
            callback, args = self._soon.popleft()
            callback(*args)

    def advance(self, seconds: float) -> None:
        target = self.now + seconds
        self.run_soon()
        while self._timers and self._timers[0][0] <= target:
            when, _, timer, callback, args = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self.now = when
            self.timers_fired += 1
            callback(*args)
            self.run_soon()
        self.now = target

    @property
    def pending_timers(self) -> int:
        return sum(1 for entry in self._timers if not entry[2].cancelled)
