"""Queue mode: reading a classic or quorum queue as a stream, at-least-once.

A queue cannot re-read a range, so there is nothing for executors to replay: PySpark's
simple stream reader runs in the driver-side source process, holds one consumer, and
hands each micro-batch's rows to Spark itself. Offsets {"next": N} only count the
messages handed over, so batches advance.

No message is acked before Spark has committed the batch holding it, so no crash loses
one: the broker redelivers whatever was unacked when the connection died (with
redelivered set). Spark calls commit(end) one batch late and never for the last batch
of an idle or stopped query, so acking only there would leave each run's last batch to
be delivered again; the reader also acks, when asked for the batch after one, every
batch ending at or before where that batch starts. That relies on Spark's micro-batch
engine asking for the next batch only after logging the previous one as committed,
which it does unless asynchronous progress tracking is on (do not use that with queue
mode). The prefetch is twice the batch size, so a full batch can be taken while the
previous one waits for its ack.

A batch Spark runs again after a restart comes back empty (readBetweenOffsets has
nothing to give: its messages were never acked and come again, redelivered, in later
batches). So this is at-least-once: a crash between a sink's commit and the ack sends
that batch again. Every row has message_id and redelivered, so a sink can drop copies.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from typing import Any

from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage
from pyspark.sql.datasource import SimpleDataSourceStreamReader

from kanin.spark import loop
from kanin.spark.client import close_quietly, connect, find_queue
from kanin.spark.offsets import next_of, offset_dict
from kanin.spark.options import QUEUE_MODE_DEFAULT_BATCH, KaninOptions
from kanin.spark.rows import Row, message_row

CALL_TIMEOUT_S = 60.0


class KaninQueueReader(SimpleDataSourceStreamReader):
    def __init__(self, options: KaninOptions) -> None:
        self.options = options
        self._consumer: _QueueConsumer | None = None  # made on first use, never pickled

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_consumer": None}

    @property
    def batch_size(self) -> int:
        return self.options.max_records_per_batch or QUEUE_MODE_DEFAULT_BATCH

    @property
    def waiting(self) -> int:
        """Deliveries received and not yet handed to a batch (none before the first read)."""
        return 0 if self._consumer is None else self._consumer.waiting

    def initialOffset(self) -> dict[str, int]:
        """Offsets count handed-over messages from 0. Called when a query first starts (a
        restart takes its offset from the checkpoint): the consumer starts here, so the
        first deliveries are on their way before the first batch is asked for."""
        self._consumer_now()
        return offset_dict(0)

    def read(self, start: dict[str, Any]) -> tuple[Iterator[Row], dict[str, int]]:
        begin = next_of(start)
        consumer = self._consumer_now()
        loop.run(consumer.ack_through(begin), CALL_TIMEOUT_S)  # batches Spark committed
        rows = loop.run(consumer.take(begin, self.batch_size), CALL_TIMEOUT_S)
        return iter(rows), offset_dict(begin + len(rows))

    def readBetweenOffsets(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[Row]:
        """A replayed batch: a queue cannot give it again; its unacked messages come back
        in later batches instead."""
        return iter(())

    def commit(self, end: dict[str, Any]) -> None:
        if self._consumer is not None:
            loop.run(self._consumer.ack_through(next_of(end)), CALL_TIMEOUT_S)

    def close(self) -> None:
        """For callers outside Spark: Spark's simple stream reader API has no stop(), so
        under Spark the connection ends with the source process (and the broker
        requeues what was not acked)."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            loop.run(consumer.close(), CALL_TIMEOUT_S)

    def _consumer_now(self) -> _QueueConsumer:
        """The consumer, started on first use and again if the broker dropped it (what it
        had not acked is redelivered by the broker, so its pending acks are dropped)."""
        if self._consumer is None or self._consumer.closed:
            self._consumer = _QueueConsumer(self.options, self.batch_size)
            loop.run(self._consumer.start(), CALL_TIMEOUT_S)
        return self._consumer


class _QueueConsumer:
    """The asyncio half: one connection, one consumer, deliveries buffered until a batch
    takes them, and per batch handed over, the delivery to ack it with."""

    def __init__(self, options: KaninOptions, batch_size: int) -> None:
        self.options = options
        self.prefetch = 2 * batch_size
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._buffer: deque[AbstractIncomingMessage] = deque()
        # (end offset of a batch, its last delivery), oldest first, not yet acked.
        self._unacked: deque[tuple[int, AbstractIncomingMessage]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._buffer)  # a deque's length is safe to read from another thread

    @property
    def closed(self) -> bool:
        channel = self._channel
        return channel is None or channel.is_closed

    async def start(self) -> None:
        self._connection = await connect(self.options, "queue read")
        self._channel = await self._connection.channel()
        await self._channel.set_qos(prefetch_count=self.prefetch)
        queue = await find_queue(self._channel, self.options)
        await queue.consume(self._on_message)

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        self._buffer.append(message)

    async def take(self, begin: int, most: int) -> list[Row]:
        """Rows of up to `most` buffered deliveries, the batch [begin, begin + count)."""
        await asyncio.sleep(0)  # let deliveries already read from the socket land
        taken = [self._buffer.popleft() for _ in range(min(most, len(self._buffer)))]
        if taken:
            self._unacked.append((begin + len(taken), taken[-1]))
        return [message_row(message, None) for message in taken]

    async def ack_through(self, end: int) -> None:
        """Ack every batch ending at or before `end`, with one multiple ack."""
        last = None
        while self._unacked and self._unacked[0][0] <= end:
            last = self._unacked.popleft()[1]
        if last is not None:
            await last.ack(multiple=True)

    async def close(self) -> None:
        await close_quietly(self._connection)
