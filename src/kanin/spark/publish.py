"""Publishing one Spark task's rows, every message confirmed before the task ends.

Each task opens its own connection (socket_publish.py: a blocking publisher on a plain
socket) and a channel in confirm mode. Rows go out as they come, the frames of FLUSH_EVERY
messages in one send, with up to WINDOW messages waiting for their confirms at once: the
broker always has the next messages to route while earlier ones are confirmed. A nack,
a message returned as unroutable (all are published mandatory) or a lost connection
fails the task, and Spark runs it again; the ids (ids.py) make the second attempt's
copies duplicates a deduplicating exchange drops. When publish_rows returns, the broker
has confirmed every message of the task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

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


def publish_rows(
    options: KaninOptions,
    layout: ColumnLayout,
    rows: Iterator[Any],
    message_id: Callable[[Any, int], str],
) -> int:
    """Publish every row and wait for all confirms (blocking); the number published.
    `message_id(row, index)` gives each row's deduplication id."""
    publisher = SocketPublisher(options, CONFIRM_TIMEOUT_S, WINDOW, "sink")
    count = 0
    try:
        publisher.open()
        for count, row in enumerate(rows, 1):
            publish_row(publisher, options, layout, row, message_id(row, count - 1))
            if count % FLUSH_EVERY == 0:
                publisher.flush()
        publisher.finish()
    finally:
        publisher.close()
    return count


def publish_row(
    publisher: SocketPublisher, options: KaninOptions, layout: ColumnLayout, row: Any, dedup: str
) -> None:
    """One row's message: its deduplication id in the x-deduplication-header header and,
    unless the row has its own message_id, as the message id."""
    headers = {
        key: value
        for key, value in (_column(row, layout.headers) or {}).items()
        if value is not None
    }
    headers[DEDUP_HEADER] = dedup
    routing_key = _column(row, layout.routing_key)
    publisher.publish(
        options.publish_routing_key if routing_key is None else routing_key,
        body_bytes(row[layout.body]),
        headers,
        _column(row, layout.message_id) or dedup,
        _column(row, layout.correlation_id),
    )


def _column(row: Any, index: int | None) -> Any:
    return None if index is None else row[index]
