"""The core's Scheduler on top of an asyncio loop: the loop's timers and monotonic clock,
and the one wall-clock read the broker makes (the core has none of its own).

Compiled with mypyc: a stream reads the wall clock for every message appended."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

# The wall clock in UNIX seconds: a module attribute, looked up at each read, so that a
# test can move it (the class is compiled and cannot be patched).
wall_clock_s: Callable[[], float] = time.time


class LoopScheduler:
    """kanin.core.scheduling.Scheduler for a running asyncio loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # The loop's own clock, not a method that calls it: TTL reads it per message.
        self.time: Callable[[], float] = loop.time

    def call_soon(self, callback: Callable[..., Any], *args: Any) -> asyncio.Handle:
        return self.loop.call_soon(callback, *args)

    def call_next_turn(self, callback: Callable[..., Any], *args: Any) -> asyncio.Handle:
        return self.loop.call_soon(callback, *args)

    def call_later(
        self, delay: float, callback: Callable[..., Any], *args: Any
    ) -> asyncio.TimerHandle:
        return self.loop.call_later(delay, callback, *args)

    def wall_clock_ms(self) -> int:
        return int(wall_clock_s() * 1000)
