"""Heartbeats both ways for one connection (AMQP 0-9-1 §4.2.7, as RabbitMQ does them).

Every half interval we look at the byte counters: if we sent nothing since the last
look, we send a heartbeat frame; if the peer sent nothing for two whole intervals,
it is dead and the connection is dropped (its unacked deliveries are requeued by the
usual connection-lost path). Any traffic counts, not only heartbeat frames.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from kanin.core.scheduling import Cancellable


class Timers(Protocol):
    """The part of a scheduler a heartbeat uses (kanin.core.scheduling.Scheduler has it)."""

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Cancellable: ...

    def time(self) -> float: ...


class Heartbeat:
    def __init__(
        self,
        timers: Timers,
        interval_s: int,
        counters: Callable[[], tuple[int, int]],
        send_heartbeat: Callable[[], None],
        on_dead_peer: Callable[[], None],
    ) -> None:
        assert interval_s > 0
        self._timers = timers
        self.interval_s = interval_s
        self._counters = counters  # () -> (bytes received, bytes sent) so far
        self._send_heartbeat = send_heartbeat
        self._on_dead_peer = on_dead_peer
        self._timer: Cancellable | None = None
        self._last_heard = timers.time()
        self._seen_in, self._seen_out = counters()

    def start(self) -> None:
        self._timer = self._timers.call_later(self.interval_s / 2, self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        now = self._timers.time()
        bytes_in, bytes_out = self._counters()
        if bytes_in != self._seen_in:
            self._last_heard = now
        if now - self._last_heard >= 2 * self.interval_s:
            self._timer = None
            self._on_dead_peer()
            return
        if bytes_out == self._seen_out:
            self._send_heartbeat()
        self._seen_in, self._seen_out = self._counters()
        self.start()
