"""Consumer timeout: a delivery left unacknowledged too long closes its channel.

As RabbitMQ's consumer_timeout: every delivery with an ack pending (to a consumer or a
basic.get) must be settled within the timeout, else its channel is closed with 406
PRECONDITION_FAILED and the channel's unacked messages go back to their queues (counted as
returns, so a queue's backoff holds them back). The timeout is the queue's
`x-consumer-timeout` if it has one, else the broker's (`BrokerConfig.consumer_timeout_ms`,
RabbitMQ's default of 30 minutes); none at all when neither is set.

One timer per channel, armed for the earliest deadline it was told of. When it fires it
looks at the channel's unacked deliveries: one past its deadline closes the channel, else
the timer is armed for the earliest deadline still pending. RabbitMQ checks once a minute;
this checks at the deadline. The look is one pass over what is unacked, and it happens
once per timeout period at most, so its cost is spread over the deliveries it covers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError

if TYPE_CHECKING:
    from kanin.core.scheduling import Cancellable, Scheduler
    from kanin.core.unacked import Unacked


def timed_out(channel_id: int, timeout_ms: int) -> ChannelError:
    """RabbitMQ's words for it."""
    return ChannelError(
        C.PRECONDITION_FAILED,
        f"delivery acknowledgement on channel {channel_id} timed out. Timeout value used: "
        f"{timeout_ms} ms. This timeout value can be configured, see consumers doc guide "
        "to learn more",
    )


class AckDeadlines:
    """One channel's timer over the deadlines of its unacked deliveries."""

    def __init__(
        self,
        scheduler: Scheduler,
        unacked: Callable[[], Iterable[Unacked]],
        expired: Callable[[Unacked], None],
    ) -> None:
        self._scheduler = scheduler
        self._unacked = unacked  # the channel's outstanding deliveries
        self._expired = expired  # the channel closes itself for this one
        self._timer: Cancellable | None = None
        # When the timer fires (infinity when it is not armed). Deliveries come in time
        # order, so once it is armed a new deadline is later: the caller compares with
        # this and calls `watch` only when it is earlier, which is rarely.
        self.due = math.inf
        self.time = scheduler.time  # the clock deadlines are read on

    def deadline(self, timeout_ms: int) -> float:
        """The deadline of a delivery made now (scheduler time); the timer covers it."""
        deadline = self.time() + timeout_ms / 1000
        if deadline < self.due:
            self.watch(deadline)
        return deadline

    def watch(self, due: float) -> None:
        """Arm the timer for this earlier deadline."""
        self.cancel()
        self.due = due
        self._timer = self._scheduler.call_later(
            max(0.0, due - self._scheduler.time()), self._check
        )

    def _check(self) -> None:
        self._timer = None
        self.due = math.inf
        now = self._scheduler.time()
        earliest = None
        for record in self._unacked():
            if not record.deadline:
                continue
            if record.deadline <= now:
                self._expired(record)
                return
            if earliest is None or record.deadline < earliest:
                earliest = record.deadline
        if earliest is not None:
            self.watch(earliest)

    def cancel(self) -> None:
        self.due = math.inf
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
