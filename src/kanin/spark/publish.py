"""Publishing one Spark task's rows, every message confirmed before the task ends.

Each task opens its own connection and a channel in confirm mode. Rows are published a
window at a time: the whole window goes out, then the task waits for the broker's
confirms of all of it, so a round trip is paid per window, not per message. A nack, a
message returned as unroutable (all are published mandatory) or a lost connection
fails the task, and Spark runs it again; the ids (ids.py) make the second attempt's
copies duplicates a deduplicating exchange drops. When publish_rows returns, the broker
has confirmed every message of the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

import aio_pika
from aio_pika.abc import AbstractConnection, AbstractExchange

from kanin.spark import loop
from kanin.spark.client import KaninSparkError, close_quietly, connect
from kanin.spark.columns import ColumnLayout
from kanin.spark.ids import DEDUP_HEADER
from kanin.spark.options import EXCHANGE, KaninOptions
from kanin.spark.rows import body_bytes

WINDOW = 1000
# A window's confirms not all in by then: the broker is stuck or gone.
CONFIRM_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Outgoing:
    message: aio_pika.Message
    routing_key: str


def publish_rows(
    options: KaninOptions,
    layout: ColumnLayout,
    rows: Iterator[Any],
    message_id: Callable[[Any, int], str],
) -> int:
    """Publish every row and wait for all confirms (blocking); the number published.
    `message_id(row, index)` gives each row's deduplication id."""
    publisher = _Publisher(options)
    count = 0
    try:
        loop.run(publisher.open(), CONFIRM_TIMEOUT_S)
        numbered = enumerate(rows)
        while window := list(islice(numbered, WINDOW)):
            batch = [to_outgoing(options, layout, row, message_id(row, i)) for i, row in window]
            loop.run(publisher.publish(batch), CONFIRM_TIMEOUT_S)
            count += len(batch)
    finally:
        loop.run(publisher.close(), CONFIRM_TIMEOUT_S)
    return count


def to_outgoing(options: KaninOptions, layout: ColumnLayout, row: Any, dedup_id: str) -> Outgoing:
    """The message for one row: its deduplication id in the x-deduplication-header header
    and, unless the row has its own message_id, as the message id."""
    headers: dict[str, Any] = dict(_column(row, layout.headers) or {})
    headers[DEDUP_HEADER] = dedup_id
    message = aio_pika.Message(
        body_bytes(row[layout.body]),
        headers={key: value for key, value in headers.items() if value is not None},
        message_id=_column(row, layout.message_id) or dedup_id,
        correlation_id=_column(row, layout.correlation_id),
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
    )
    routing_key = _column(row, layout.routing_key)
    return Outgoing(message, options.publish_routing_key if routing_key is None else routing_key)


def _column(row: Any, index: int | None) -> Any:
    return None if index is None else row[index]


class _Publisher:
    """The asyncio half of publish_rows; every method runs on the loop thread."""

    def __init__(self, options: KaninOptions) -> None:
        self.options = options
        self._connection: AbstractConnection | None = None
        self._exchange: AbstractExchange | None = None

    async def open(self) -> None:
        self._connection = await connect(self.options, "sink")
        channel = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
        name = self.options.exchange
        if not name:
            self._exchange = channel.default_exchange
            return
        try:
            self._exchange = await channel.get_exchange(name, ensure=True)
        except aio_pika.exceptions.ChannelNotFoundEntity:
            raise KaninSparkError(
                f"no exchange {name!r} (option {EXCHANGE!r}) at {self.options.safe_uri}"
            ) from None

    async def publish(self, batch: list[Outgoing]) -> None:
        """Send the whole window, then wait for every confirm; the first failure raises."""
        exchange = self._exchange
        assert exchange is not None
        sends = [exchange.publish(out.message, out.routing_key, mandatory=True) for out in batch]
        results = await asyncio.gather(*sends, return_exceptions=True)
        for out, result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                raise _failure(out, result) from result

    async def close(self) -> None:
        await close_quietly(self._connection)


def _failure(out: Outgoing, error: BaseException) -> KaninSparkError:
    if isinstance(error, aio_pika.exceptions.PublishError):
        what = "was returned as unroutable"
    elif isinstance(error, aio_pika.exceptions.DeliveryError):
        what = "was nacked by the broker"
    else:
        what = f"was not confirmed: {error!r}"
    return KaninSparkError(
        f"message {out.message.message_id!r} (routing key {out.routing_key!r}) {what}"
    )
