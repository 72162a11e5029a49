"""Message rates, as RabbitMQ's management plugin reports them in `rates_mode` "basic"
(https://www.rabbitmq.com/management.html#stats-rates): every 5 seconds the broker's
running totals (core/counters.py), each queue's and exchange's (their `msg_*` counters)
and the queue lengths are sampled into a bounded history. A figure's `*_details` has the
`rate` per second between the last two samples; asked with `msg_rates_age` and
`msg_rates_incr` (message counters) or `lengths_age` and `lengths_incr` (queue lengths),
it also has `samples` at `incr`-second steps over the last `age` seconds, newest first,
with their `avg` and `avg_rate`, as RabbitMQ answers.

Sampling reads plain integers, so the publish and delivery paths pay only for their
increments; the history is kept here, never on the hot path.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kanin.core.queues import StreamQueue
from kanin.mgmt.errors import bad_request

if TYPE_CHECKING:
    from kanin.core.broker import Broker
    from kanin.core.counters import BrokerCounters
    from kanin.core.exchanges import Exchange
    from kanin.core.queues import Queue
    from kanin.mgmt.context import MgmtContext

log = logging.getLogger(__name__)

INTERVAL_S = 5  # RabbitMQ's collect_statistics_interval
BROKER_KEEP = 121  # ten minutes of the broker's own samples
OBJECT_KEEP = 13  # one minute of each queue's and exchange's (they may be many)
MAX_POINTS = 1000  # samples asked for in one figure: more is refused, not computed

BROKER_STATS: tuple[tuple[str, Callable[[BrokerCounters], int]], ...] = (
    ("publish", lambda c: c.published),
    ("confirm", lambda c: c.confirmed),
    ("deliver", lambda c: c.delivered_manual_ack),
    ("deliver_no_ack", lambda c: c.delivered_auto_ack),
    ("get", lambda c: c.got_manual_ack),
    ("get_no_ack", lambda c: c.got_auto_ack),
    ("get_empty", lambda c: c.got_empty),
    (
        "deliver_get",
        lambda c: c.delivered_manual_ack + c.delivered_auto_ack + c.got_manual_ack + c.got_auto_ack,
    ),
    ("ack", lambda c: c.acked),
    ("redeliver", lambda c: c.redelivered),
    ("return_unroutable", lambda c: c.returned_unroutable),
    ("drop_unroutable", lambda c: c.dropped_unroutable),
)
QUEUE_STATS: tuple[tuple[str, Callable[[Queue], int]], ...] = (
    ("publish", lambda q: q.msg_published),
    ("deliver", lambda q: q.msg_delivered),
    ("deliver_no_ack", lambda q: q.msg_delivered_no_ack),
    ("get", lambda q: q.msg_got),
    ("get_no_ack", lambda q: q.msg_got_no_ack),
    (
        "deliver_get",
        lambda q: q.msg_delivered + q.msg_delivered_no_ack + q.msg_got + q.msg_got_no_ack,
    ),
    ("ack", lambda q: q.msg_acked),
    ("redeliver", lambda q: q.msg_redelivered),
)
EXCHANGE_STATS: tuple[tuple[str, Callable[[Exchange], int]], ...] = (
    ("publish_in", lambda x: x.msg_published_in),
    ("publish_out", lambda x: x.msg_published_out),
)
LENGTHS = ("messages", "messages_ready", "messages_unacknowledged")


@dataclass(frozen=True)
class Window:
    """What a request asks of a figure's history: `age` seconds back in `incr` steps."""

    age_s: int
    incr_s: int
    now_ms: int


def window_from(query: Mapping[str, str], prefix: str) -> Window | None:
    """`msg_rates_age` and `msg_rates_incr` (prefix "msg_rates"), or `lengths_*`; None
    when the request does not ask for samples."""
    age, incr = query.get(f"{prefix}_age"), query.get(f"{prefix}_incr")
    if age is None or incr is None:
        return None
    try:
        age_s, incr_s = int(age), int(incr)
    except ValueError:
        raise bad_request(f"{prefix}_age and {prefix}_incr must be integers") from None
    if age_s < 0 or incr_s <= 0 or age_s // incr_s >= MAX_POINTS:
        raise bad_request(
            f"{prefix}_age must be at least 0 and {prefix}_incr above 0, "
            f"with at most {MAX_POINTS} samples between them"
        )
    return Window(age_s, incr_s, int(time.time() * 1000))


class History:
    """Samples of a fixed set of figures, oldest first, at most `keep` of them."""

    def __init__(self, keep: int) -> None:
        self.times: deque[int] = deque(maxlen=keep)
        self.values: deque[tuple[int, ...]] = deque(maxlen=keep)

    def add(self, at_ms: int, values: tuple[int, ...]) -> None:
        if self.times and at_ms <= self.times[-1]:
            return  # a second sample in the same instant would divide by zero
        self.times.append(at_ms)
        self.values.append(values)

    def rate(self, index: int) -> float:
        """Per second, between the last two samples (0.0 until there are two)."""
        if len(self.times) < 2:
            return 0.0
        seconds = (self.times[-1] - self.times[-2]) / 1000
        return (self.values[-1][index] - self.values[-2][index]) / seconds

    def value_at(self, index: int, at_ms: int) -> int:
        """The figure as the newest sample taken at or before `at_ms` had it; before the
        first sample, the first sample's (0 with none)."""
        if not self.times:
            return 0
        position = bisect.bisect_right(self.times, at_ms) - 1
        return self.values[max(position, 0)][index]

    def details(self, index: int, window: Window | None) -> dict[str, Any]:
        shape: dict[str, Any] = {"rate": round(self.rate(index), 2)}
        if window is None:
            return shape
        step = window.incr_s * 1000
        newest = window.now_ms // step * step
        points = [newest - k * step for k in range(window.age_s // window.incr_s + 1)]
        values = [self.value_at(index, point) for point in points]
        shape["samples"] = [
            {"sample": value, "timestamp": point}
            for value, point in zip(values, points, strict=True)
        ]
        shape["avg_rate"] = (values[0] - values[-1]) / window.age_s if window.age_s else 0.0
        shape["avg"] = sum(values) / len(values)
        return shape


def figures(
    names: tuple[str, ...], now: tuple[int, ...], history: History | None, window: Window | None
) -> dict[str, Any]:
    """`name: count, name_details: {...}` for each figure, the counts as they are now."""
    shape: dict[str, Any] = {}
    for index, name in enumerate(names):
        shape[name] = now[index]
        shape[f"{name}_details"] = (
            history.details(index, window) if history is not None else {"rate": 0.0}
        )
    return shape


def queue_lengths(queue: Queue, unacked: int) -> tuple[int, int, int]:
    """messages, messages_ready, messages_unacknowledged (a stream keeps what it sent)."""
    ready = queue.message_count
    held = 0 if isinstance(queue, StreamQueue) else unacked
    return ready + held, ready, held


Readings = tuple[tuple[str, Callable[[Any], int]], ...]


def _stat_values(readings: Readings, of: Any) -> tuple[int, ...]:
    return tuple(read(of) for _, read in readings)


class RateStore:
    """The broker's history and each live queue's and exchange's, by object."""

    def __init__(self) -> None:
        self.broker = History(BROKER_KEEP)
        # id(object) -> (the object, its history): the object itself is kept to tell a new
        # object apart from a deleted one whose id Python reused.
        self._objects: dict[int, tuple[object, History]] = {}

    def sample(self, broker: Broker, unacked: Counter[int], at_ms: int | None = None) -> None:
        at_ms = int(time.time() * 1000) if at_ms is None else at_ms
        totals = [0, 0, 0]
        seen: dict[int, tuple[object, History]] = {}
        for vhost in list(broker.vhosts.values()):
            for queue in list(vhost.queues.values()):
                lengths = queue_lengths(queue, unacked[id(queue)])
                totals = [a + b for a, b in zip(totals, lengths, strict=True)]
                values = _stat_values(QUEUE_STATS, queue) + lengths
                self._history_of(queue, seen).add(at_ms, values)
            for exchange in list(vhost.exchanges.values()):
                self._history_of(exchange, seen).add(at_ms, _stat_values(EXCHANGE_STATS, exchange))
        self._objects = seen  # deleted objects' histories go
        self.broker.add(at_ms, _stat_values(BROKER_STATS, broker.counters) + tuple(totals))

    def _history_of(self, thing: object, seen: dict[int, tuple[object, History]]) -> History:
        known = self._objects.get(id(thing))
        history = known[1] if known is not None and known[0] is thing else History(OBJECT_KEEP)
        seen[id(thing)] = (thing, history)
        return history

    def history(self, thing: object) -> History | None:
        known = self._objects.get(id(thing))
        return known[1] if known is not None and known[0] is thing else None

    def overview_stats(self, counters: BrokerCounters, window: Window | None) -> dict[str, Any]:
        names = tuple(name for name, _ in BROKER_STATS)
        return figures(names, _stat_values(BROKER_STATS, counters), self.broker, window)

    def totals_details(self, window: Window | None) -> dict[str, Any]:
        offset = len(BROKER_STATS)
        return {
            f"{name}_details": self.broker.details(offset + index, window)
            for index, name in enumerate(LENGTHS)
        }

    def queue_fields(
        self, queue: Queue, window: Window | None, lengths_window: Window | None
    ) -> dict[str, Any]:
        """message_stats and the `messages*_details` of one queue's shape."""
        history = self.history(queue)
        fields: dict[str, Any] = {}
        now = _stat_values(QUEUE_STATS, queue)
        if any(now):  # as on RabbitMQ: no message_stats until a message has passed
            names = tuple(name for name, _ in QUEUE_STATS)
            fields["message_stats"] = figures(names, now, history, window)
        for index, name in enumerate(LENGTHS, start=len(QUEUE_STATS)):
            fields[f"{name}_details"] = (
                history.details(index, lengths_window) if history is not None else {"rate": 0.0}
            )
        return fields

    def exchange_fields(self, exchange: Exchange, window: Window | None) -> dict[str, Any]:
        now = _stat_values(EXCHANGE_STATS, exchange)
        if not any(now):
            return {}
        names = tuple(name for name, _ in EXCHANGE_STATS)
        return {"message_stats": figures(names, now, self.history(exchange), window)}


async def keep_sampling(ctx: MgmtContext) -> None:
    """Sample now (the baseline the first rates are measured from), then at every
    multiple of INTERVAL_S on the wall clock, as RabbitMQ's samples fall, until cancelled
    (the management API stopping)."""
    step_ms = INTERVAL_S * 1000
    ctx.rates.sample(ctx.broker, ctx.unacked_by_queue())
    while True:
        now_ms = time.time() * 1000
        due_ms = (now_ms // step_ms + 1) * step_ms
        await asyncio.sleep((due_ms - now_ms) / 1000)
        try:
            ctx.rates.sample(ctx.broker, ctx.unacked_by_queue(), int(due_ms))
        except Exception:  # a bug here must not end the rates for the broker's lifetime
            log.exception("management API: sampling message rates failed")
