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

Trigger.AvailableNow: when a run starts (Spark asks before any batch, so the reader has
no consumer yet), the reader takes the queue's ready count (the passive
queue.declare-ok message count, on a connection of its own) as how many messages the
run may hand over, then starts its consumer. Batches stop there, so a run ends even
while publishers go on; what arrives during the run is left for the next one. Should a
consumer already be running, the count is what it holds plus the ready count, and
deliveries on their way to it at that instant wait for the next run (never more is
read than was there). Spark ends a run at its first empty batch, so while the run
has messages left to hand over a batch waits (up to RUN_WAIT_S) for their deliveries,
which a consumer started for the run may not have yet. Once the run has handed over its
count and the last batch is acked, the reader closes its connection and waits for the
broker's close-ok: what the consumer prefetched beyond the count is back in the queue
before the run ends, so a run started right after reads it (the runner process Spark
leaves behind a query lives on for a moment, and its consumer would otherwise hold
those messages).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import suppress
from typing import Any

import pyarrow as pa
from pamqp import commands
from pyspark.sql.datasource import SimpleDataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from kanin.spark.arrow import record_batches
from kanin.spark.client import CONNECT_TIMEOUT_S
from kanin.spark.offsets import next_of, offset_dict
from kanin.spark.options import QUEUE_MODE_DEFAULT_BATCH, KaninOptions
from kanin.spark.rows import Row, delivery_row
from kanin.spark.socket_conn import SocketConnection
from kanin.spark.socket_read import Delivery, SocketConsumer

# Trigger.AvailableNow: how long a batch waits for messages the run counted as ready.
RUN_WAIT_S = 5.0


class KaninQueueReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: KaninOptions) -> None:
        self.options = options
        self._consumer: _QueueConsumer | None = None  # made on first use, never pickled
        # Set by prepareForTriggerAvailableNow: how many more this run may hand over.
        self._run_budget: int | None = None

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

    def prepareForTriggerAvailableNow(self) -> None:
        if self._consumer is None or self._consumer.closed:
            # Nothing delivered to this reader yet: the ready count is all there is.
            self._run_budget = ready_count(self.options)
            if self._run_budget:
                self._consumer_now()
            return
        held = self._consumer.waiting  # first: what comes after this may be counted below
        self._run_budget = held + ready_count(self.options)

    def read(self, start: dict[str, Any]) -> tuple[Iterator[pa.RecordBatch], dict[str, int]]:
        begin = next_of(start)
        if self._run_budget == 0 and self._consumer is None:
            return iter(()), offset_dict(begin)  # the run is over: nothing more to hand over
        consumer = self._consumer_now()
        consumer.ack_through(begin)  # batches Spark committed
        most = self.batch_size
        if self._run_budget is not None:
            most = min(most, self._run_budget)
            # Spark ends the run at the first empty batch, and a consumer started for it
            # (a restarted query's: prepareForTriggerAvailableNow started it) may not have
            # its deliveries yet: they were in the queue, so they come.
            consumer.wait_for(most, RUN_WAIT_S)
        rows = consumer.take(begin, most)
        if self._run_budget is not None:
            self._run_budget -= len(rows)
            if self._run_budget == 0 and consumer.all_acked:
                self._consumer = None
                consumer.finish()
        # As Arrow record batches, which PySpark passes on as they are (arrow.py), in a
        # list: PySpark keeps the iterator and copies it, which a generator refuses.
        return iter(list(record_batches(rows))), offset_dict(begin + len(rows))

    def readBetweenOffsets(
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Iterator[pa.RecordBatch]:
        """A replayed batch: a queue cannot give it again; its unacked messages come back
        in later batches instead."""
        return iter(())

    def commit(self, end: dict[str, Any]) -> None:
        if self._consumer is not None:
            self._consumer.ack_through(next_of(end))

    def close(self) -> None:
        """For callers outside Spark: Spark's simple stream reader API has no stop(), so
        under Spark the connection ends with the source process (and the broker
        requeues what was not acked)."""
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    def _consumer_now(self) -> _QueueConsumer:
        """The consumer, started on first use and again if the broker dropped it (what it
        had not acked is redelivered by the broker, so its pending acks are dropped)."""
        if self._consumer is None or self._consumer.closed:
            self._consumer = _QueueConsumer(self.options, self.batch_size)
            self._consumer.start()
        return self._consumer


class _QueueConsumer:
    """One connection and one consumer on a plain socket (socket_read.py), its deliveries
    read by a thread of its own into a buffer until a batch takes them; per batch handed
    over, the delivery to ack it with. Heartbeats are off, so the connection lives while
    the source process sits blocked on the JVM for the length of a micro-batch."""

    def __init__(self, options: KaninOptions, batch_size: int) -> None:
        self.options = options
        self.prefetch = 2 * batch_size
        self._socket = SocketConsumer(options, idle_timeout_s=None, purpose="queue read")
        self._buffer: deque[Delivery] = deque()
        # (end offset of a batch, its last delivery), oldest first, not yet acked.
        self._unacked: deque[tuple[int, Delivery]] = deque()
        self._reading: threading.Thread | None = None
        self.closed = False

    @property
    def waiting(self) -> int:
        return len(self._buffer)  # a deque's length is safe to read from another thread

    def start(self) -> None:
        self._socket.open(self.prefetch, {})
        self._reading = threading.Thread(target=self._read, name="kanin-queue-read", daemon=True)
        self._reading.start()

    def _read(self) -> None:
        try:
            for chunk in self._socket.deliveries():
                self._buffer.extend(chunk)
        except Exception:  # the connection went: the broker requeues what was not acked
            self.closed = True

    def take(self, begin: int, most: int) -> list[Row]:
        """Rows of up to `most` buffered deliveries, the batch [begin, begin + count)."""
        taken = [self._buffer.popleft() for _ in range(min(most, len(self._buffer)))]
        if taken:
            self._unacked.append((begin + len(taken), taken[-1]))
        return [delivery_row(d, d.properties.headers or {}, None) for d in taken]

    def ack_through(self, end: int) -> None:
        """Ack every batch ending at or before `end`, with one multiple ack."""
        last = None
        while self._unacked and self._unacked[0][0] <= end:
            last = self._unacked.popleft()[1]
        if last is not None:
            try:
                self._socket.ack(last)
            except OSError:  # gone: the broker redelivers them, as after a crash
                self.closed = True

    def wait_for(self, count: int, timeout_s: float) -> None:
        """Until `count` deliveries are buffered, the connection is gone or timeout_s has
        passed (another consumer of the queue may have taken some)."""
        deadline = time.monotonic() + timeout_s
        while len(self._buffer) < count and not self.closed and time.monotonic() < deadline:
            time.sleep(0.005)

    @property
    def all_acked(self) -> bool:
        return not self._unacked

    def finish(self) -> None:
        """Close gracefully and wait until the broker has answered (its reader thread ends
        when the broker closes the socket after close-ok): by then the broker has requeued
        what this consumer held."""
        with suppress(OSError, ConnectionError):
            self._socket.send(0, commands.Connection.Close(200, "run done", 0, 0))
            if self._reading is not None:
                self._reading.join(CONNECT_TIMEOUT_S)
        self.close()

    def close(self) -> None:
        self.closed = True
        self._socket.abort()


def ready_count(options: KaninOptions) -> int:
    """The queue's ready messages now (none delivered and unacked), on a short-lived
    connection of its own: the consumer's is busy reading."""
    connection = SocketConnection(options, CONNECT_TIMEOUT_S, "queue count")
    try:
        connection.open_channel()
        declare = commands.Queue.Declare(queue=options.queue or "", passive=True)
        reply = connection.call(declare, commands.Queue.DeclareOk)
        return int(reply.message_count or 0)
    finally:
        connection.close()
