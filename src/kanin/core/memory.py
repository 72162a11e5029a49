"""How many message bytes the broker holds, and the memory alarm built on it.

RabbitMQ watches the VM's total memory; kanin counts what dominates it and what
a fast publisher controls: the bodies of messages in queues, ready or unacked.
The count is exact and deterministic, so the alarm can be tested. When it
crosses the high watermark, publishing connections are blocked, as in RabbitMQ
(https://www.rabbitmq.com/memory.html).
"""

from __future__ import annotations

from collections.abc import Callable


class MemoryMonitor:
    def __init__(self, high_watermark_bytes: int) -> None:
        self.high_watermark_bytes = high_watermark_bytes
        self.held_bytes = 0
        self.alarm = False
        self.on_alarm_change: Callable[[bool], None] | None = None

    def add(self, size: int) -> None:
        self.held_bytes += size
        if not self.alarm and self.held_bytes > self.high_watermark_bytes:
            self._set(True)

    def release(self, size: int) -> None:
        self.held_bytes -= size
        assert self.held_bytes >= 0, "released more message bytes than were held"
        if self.alarm and self.held_bytes <= self.high_watermark_bytes:
            self._set(False)

    def _set(self, alarm: bool) -> None:
        self.alarm = alarm
        if self.on_alarm_change is not None:
            self.on_alarm_change(alarm)
