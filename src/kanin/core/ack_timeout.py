"""Consumer timeout: a delivery left unacknowledged too long closes its channel.

As RabbitMQ's consumer_timeout: every delivery with an ack pending (to a consumer or a
basic.get) must be settled within the timeout, else its channel is closed with 406
PRECONDITION_FAILED and the channel's unacked messages go back to their queues (counted as
returns, so a queue's backoff holds them back). The timeout is the queue's
`x-consumer-timeout` if it has one, else the broker's (`BrokerConfig.consumer_timeout_ms`,
RabbitMQ's default of 30 minutes); none at all when neither is set.

How, without reading the clock per delivery (this runs on every delivery of every
channel). Delivery tags grow with time, so a clock sample is a bound: a delivery whose tag
is below the channel's next tag at time `t` was made before `t`. While the channel has
deliveries pending, a timer samples (time, next tag) every `period`, a twentieth of the
shortest timeout in use (at least 10 ms); a delivery is overdue once a sample that bounds
it is older than its timeout. So a channel closes between its timeout and its timeout plus
one period after the delivery (RabbitMQ: plus up to a minute). Samples no pending delivery
needs are dropped; with one timeout for all, a tick looks at the oldest delivery only.
A channel with nothing pending has no timer: its next delivery starts it (`idle`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError

if TYPE_CHECKING:
    from kanin.core.scheduling import Cancellable, Scheduler
    from kanin.core.unacked import Unacked

MIN_PERIOD_S = 0.01
PERIODS_PER_TIMEOUT = 20


def timed_out(channel_id: int, timeout_ms: int) -> ChannelError:
    """RabbitMQ's words for it."""
    return ChannelError(
        C.PRECONDITION_FAILED,
        f"delivery acknowledgement on channel {channel_id} timed out. Timeout value used: "
        f"{timeout_ms} ms. This timeout value can be configured, see consumers doc guide "
        "to learn more",
    )


class AckDeadlines:
    """One channel's watch over its pending deliveries (see the module docstring)."""

    def __init__(
        self,
        scheduler: Scheduler,
        pending: Callable[[], Iterable[Unacked]],
        next_tag: Callable[[], int],
        timeout_s: Callable[[Unacked], float],
        expired: Callable[[Unacked], None],
    ) -> None:
        self._scheduler = scheduler
        self._pending = pending  # the channel's unacked deliveries, oldest first
        self._next_tag = next_tag
        self._timeout_s = timeout_s  # a delivery's timeout, 0 for none
        self._expired = expired  # the channel closes itself for this one
        self._samples: deque[tuple[float, int]] = deque()  # (time, next tag then)
        self._timer: Cancellable | None = None
        self._shortest_s = 0.0  # the shortest timeout in use on the channel
        self._uniform = True  # one timeout for every delivery so far
        # True while no timer runs: the channel calls `wake` on its next delivery.
        self.idle = True

    def use(self, timeout_s: float) -> None:
        """A consumer (or a basic.get) whose deliveries time out after `timeout_s`."""
        if not timeout_s:
            return
        if self._shortest_s and timeout_s != self._shortest_s:
            self._uniform = False
        if not self._shortest_s or timeout_s < self._shortest_s:
            self._shortest_s = timeout_s
            if self._timer is not None:  # sample at the shorter period from now on
                self._timer.cancel()
                self._arm()

    def wake(self) -> None:
        """A delivery was made while no timer ran: sample from now on."""
        if not self._shortest_s:
            return
        self.idle = False
        self._samples.append((self._scheduler.time(), self._next_tag()))
        self._arm()

    def _arm(self) -> None:
        period = max(self._shortest_s / PERIODS_PER_TIMEOUT, MIN_PERIOD_S)
        self._timer = self._scheduler.call_later(period, self._tick)

    def _tick(self) -> None:
        self._timer = None
        now = self._scheduler.time()
        samples = self._samples
        samples.append((now, self._next_tag()))
        oldest = next(iter(self._pending()), None)
        if oldest is None:
            samples.clear()
            self.idle = True
            return
        while len(samples) > 1 and samples[1][1] <= oldest.tag:
            samples.popleft()  # bounds only deliveries already settled
        for record in self._pending() if not self._uniform else (oldest,):
            if self._overdue(record, now):
                self._expired(record)
                return
        self._arm()

    def _overdue(self, record: Unacked, now: float) -> bool:
        timeout = self._timeout_s(record)
        if not timeout:
            return False
        for sampled_at, next_tag in self._samples:  # the earliest bound is the tightest
            if record.tag < next_tag:
                return now - sampled_at >= timeout
        return False

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._samples.clear()
        self.idle = True
