"""Publishing one Spark task's rows, every message confirmed before the task ends.

The sink takes its input as Arrow record batches, as Spark hands them to a Python
worker: each column the sink uses becomes a Python list in one pyarrow call, where
Spark's own row conversion would call a converter per value and build a Row per row,
which cost more than the publishing itself.

Each task opens its own connection (socket_publish.py: a blocking publisher on a plain
socket) and a channel in confirm mode. Rows go out as they come, the frames of FLUSH_EVERY
messages in one send, with up to WINDOW messages waiting for their confirms at once: the
broker always has the next messages to route while earlier ones are confirmed. A nack,
a message returned as unroutable (all are published mandatory) or a lost connection
fails the task, and Spark runs it again; the ids (ids.py) make the second attempt's
copies duplicates a deduplicating exchange drops. When publish_batches returns, the
broker has confirmed every message of the task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

from kanin.spark.columns import ColumnLayout
from kanin.spark.ids import DEDUP_HEADER
from kanin.spark.options import KaninOptions
from kanin.spark.rows import body_bytes
from kanin.spark.socket_publish import SocketPublisher

# Messages waiting for their confirms at most (beyond the ones being sent).
WINDOW = 2000
# Messages whose frames go out in one send: small enough that rows leave the task soon
# after Spark hands them over, big enough that a send carries many.
FLUSH_EVERY = 200
# No confirm for this long while some are due: the broker is stuck or gone.
CONFIRM_TIMEOUT_S = 120.0

# The deduplication ids of a batch's rows, given the batch's idColumn values (None without
# an idColumn), the task's index of the batch's first row and the batch's row count.
MessageIds = Callable[[list[Any] | None, int, int], list[str]]


def publish_batches(
    options: KaninOptions,
    layout: ColumnLayout,
    batches: Iterable[pa.RecordBatch],
    message_ids: MessageIds,
) -> int:
    """Publish every row of every batch and wait for all confirms (blocking); the number
    published."""
    publisher = SocketPublisher(options, CONFIRM_TIMEOUT_S, WINDOW, "sink")
    count = 0
    try:
        publisher.open()
        for batch in batches:
            count += publish_batch(publisher, options, layout, batch, message_ids, count)
        publisher.finish()
    finally:
        publisher.close()
    return count


def publish_batch(
    publisher: SocketPublisher,
    options: KaninOptions,
    layout: ColumnLayout,
    batch: pa.RecordBatch,
    message_ids: MessageIds,
    first: int,
) -> int:
    """One batch's messages, each with its deduplication id in the x-deduplication-header
    header and, unless the row has its own message_id, as the message id."""
    rows: int = batch.num_rows
    bodies = _column(batch, layout.body, rows)
    routing_keys = _column(batch, layout.routing_key, rows)
    header_maps = _column(batch, layout.headers, rows)
    own_ids = _column(batch, layout.message_id, rows)
    correlation_ids = _column(batch, layout.correlation_id, rows)
    keys = None if layout.message_key is None else _column(batch, layout.message_key, rows)
    dedup_ids = message_ids(keys, first, rows)
    default_key = options.publish_routing_key
    for index in range(rows):
        dedup = dedup_ids[index]
        pairs = header_maps[index]
        headers = {key: value for key, value in pairs if value is not None} if pairs else {}
        headers[DEDUP_HEADER] = dedup
        routing_key = routing_keys[index]
        publisher.publish(
            default_key if routing_key is None else routing_key,
            body_bytes(bodies[index]),
            headers,
            own_ids[index] or dedup,
            correlation_ids[index],
        )
        if (first + index + 1) % FLUSH_EVERY == 0:
            publisher.flush()
    return rows


def _column(batch: pa.RecordBatch, index: int | None, rows: int) -> list[Any]:
    """A column as Python values (a map as a list of key-value pairs); all None when the
    DataFrame has no such column."""
    return [None] * rows if index is None else batch.column(index).to_pylist()
