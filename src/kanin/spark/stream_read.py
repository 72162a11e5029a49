"""Reading one offset range [start, end) of a stream, on an executor.

Each range gets its own connection (socket_read.py: a blocking consumer on a plain
socket, the fast path) and a consumer that starts at `start` (the x-stream-offset
consumer argument). Deliveries say their offset in the x-stream-offset header; rows are
kept only for offsets in the range (RabbitMQ may start a little before the offset asked
for, at the start of the chunk holding it), and reading stops at the first delivery at
or past end - 1. The end was at most the stream's tail when Spark planned the batch, so a
message at end - 1 or later exists (unless retention removed the whole range, and then
the first delivery is past it): the read never waits for the future. The same range read
again gives the same rows, which is what makes a replayed micro-batch exact.

Acks are only credit here (a stream removes nothing on ack): each chunk read acks its
last delivery, with multiple, so the broker keeps up to PREFETCH in flight. At the end
the connection is closed, never the consumer cancelled.
"""

from __future__ import annotations

from collections.abc import Iterator

from kanin.spark.client import not_a_stream
from kanin.spark.offsets import OffsetRange
from kanin.spark.options import KaninOptions
from kanin.spark.rows import Row, delivery_row, stream_offset
from kanin.spark.socket_read import Delivery, SocketConsumer

PREFETCH = 2000
# No delivery for this long while the range is unfinished: the broker is gone or stuck.
IDLE_TIMEOUT_S = 60.0


def read_range(options: KaninOptions, span: OffsetRange) -> Iterator[Row]:
    """The rows of the messages at offsets in `span`, in offset order (blocking)."""
    if span.width <= 0:
        return
    consumer = SocketConsumer(options, IDLE_TIMEOUT_S, "stream read")
    try:
        consumer.open(PREFETCH, {"x-stream-offset": span.start})
        for chunk in consumer.deliveries():
            rows, done = _rows_in_range(options, span, chunk)
            yield from rows
            if done:
                return
            consumer.ack(chunk[-1])  # credit for the next ones
    finally:
        consumer.close()


def _rows_in_range(
    options: KaninOptions, span: OffsetRange, chunk: list[Delivery]
) -> tuple[list[Row], bool]:
    """The chunk's rows in the range, and whether the range is done."""
    rows: list[Row] = []
    for delivery in chunk:
        headers = delivery.properties.headers or {}
        try:
            offset = stream_offset(headers)
        except ValueError:
            raise not_a_stream(options.queue or "") from None
        if offset >= span.end:
            return rows, True
        if offset >= span.start:
            rows.append(delivery_row(delivery, headers, offset))
        if offset >= span.end - 1:
            return rows, True
    return rows, False
