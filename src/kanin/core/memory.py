"""What the broker holds in memory, and the memory alarm built on it.

Two measures, one watermark (RabbitMQ's vm_memory_high_watermark,
https://www.rabbitmq.com/memory.html):
- counted bytes: what a fast publisher controls, counted exactly as it comes and goes:
  each message a queue holds at `entry_cost` (in memory: body, encoded header and a
  fixed overhead; paged out: its index) and the bodies being assembled from body
  frames (amqp/assembler.py). Deterministic, so tests can drive the alarm with a small
  watermark.
- the process's resident set size (RSS), sampled on a short timer and after every
  RSS_SAMPLE_EVERY_BYTES read from clients: it catches what is not counted (socket
  buffers, the interpreter, fragmentation) and a flood outrunning the count.

The alarm is raised when either is above the watermark, and publishing connections are
blocked (core/alarms.py). It clears when the counted bytes are back at or below the
watermark and so is the RSS. Python's allocator keeps much of the memory it frees
for reuse rather than handing it back to the system, so after a flood has drained the
RSS may never come back down: once the counted bytes are at or below half the
watermark, the alarm clears whatever the RSS says, and the RSS is only held against
the level it had then plus a quarter of the watermark (RSS_REGROWTH_FRACTION): new
messages reuse the retained memory first, they are counted, and growth beyond that
allowance is new memory again. The allowance ends as soon as the RSS is seen below the
watermark. There is no other hysteresis, as in RabbitMQ: a publisher blocked at the
watermark is released as soon as consumers take it below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

# Read the RSS again after this many bytes have come in from clients, whatever the timer:
# at a few hundred MB/s a flood would otherwise outrun a 100 ms timer by tens of MB.
# A read of /proc/self/statm costs microseconds, so this is far below 1% of the work.
RSS_SAMPLE_EVERY_BYTES: Final = 4 * 1024 * 1024
# After a clear with the RSS still above the watermark (memory retained by the allocator),
# how far the RSS may grow past that level, as a fraction of the watermark, before it
# raises the alarm again.
RSS_REGROWTH_FRACTION: Final = 0.25

RssReader = Callable[[], int | None]


class MemoryMonitor:
    def __init__(self, high_watermark_bytes: int, read_rss: RssReader | None = None) -> None:
        self.high_watermark_bytes = high_watermark_bytes
        self.held_bytes = 0  # counted bytes
        self.rss_bytes = 0  # the last RSS sample (0 when none is taken)
        self.alarm = False
        self.on_alarm_change: Callable[[bool], None] | None = None
        self._read_rss = read_rss
        self._rss_limit = high_watermark_bytes
        self._unsampled_bytes = 0

    # -- counted bytes (the hot path: additions and comparisons only) -----------------------

    def add(self, size: int) -> None:
        self.held_bytes += size
        if not self.alarm and self.held_bytes > self.high_watermark_bytes:
            self._set(True)

    def release(self, size: int) -> None:
        self.held_bytes -= size
        assert self.held_bytes >= 0, "released more message bytes than were held"
        if self.alarm and self._may_clear():
            self._set(False)

    # -- RSS ---------------------------------------------------------------------------------

    def note_read(self, size: int) -> None:
        """`size` bytes came in from a client: sample the RSS every RSS_SAMPLE_EVERY_BYTES."""
        self._unsampled_bytes += size
        if self._unsampled_bytes >= RSS_SAMPLE_EVERY_BYTES:
            self.sample_rss()

    def sample_rss(self) -> None:
        """Read the RSS (when a reader was given) and raise or clear the alarm on it."""
        self._unsampled_bytes = 0
        if self._read_rss is None:
            return
        rss = self._read_rss()
        if rss is None:
            return
        self.rss_bytes = rss
        if rss <= self.high_watermark_bytes:
            self._rss_limit = self.high_watermark_bytes
        if self.alarm:
            if self._may_clear():
                self._set(False)
        elif rss > self._rss_limit:
            self._set(True)

    # -- the alarm ---------------------------------------------------------------------------

    def _may_clear(self) -> bool:
        """The alarm may clear: see the module docstring for the rule."""
        watermark = self.high_watermark_bytes
        if self.held_bytes > watermark:
            return False
        if self.rss_bytes <= self._rss_limit:
            return True
        if self.held_bytes * 2 > watermark:
            return False
        # Drained, but the allocator kept the memory: allow the RSS that is left, plus some.
        self._rss_limit = self.rss_bytes + int(watermark * RSS_REGROWTH_FRACTION)
        return True

    def _set(self, alarm: bool) -> None:
        self.alarm = alarm
        if self.on_alarm_change is not None:
            self.on_alarm_change(alarm)
