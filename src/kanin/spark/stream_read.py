"""Reading one offset range [start, end) of a stream, on an executor.

Each range gets its own connection and a consumer that starts at `start` (the
x-stream-offset consumer argument). Deliveries say their offset in the x-stream-offset
header; rows are kept only for offsets in the range (RabbitMQ may start a little before
the offset asked for, at the start of the chunk holding it), and reading stops at the
first delivery at or past end - 1. The end was at most the stream's tail when Spark
planned the batch, so a message at end - 1 or later exists (unless retention removed
the whole range, and then the first delivery is past it): the read never waits for the
future. The same range read again gives the same rows, which is what makes a replayed
micro-batch exact.

Acks are only credit here (a stream removes nothing on ack): each drained chunk acks
its last delivery, with multiple, so the broker keeps up to PREFETCH in flight. At the
end the connection is closed, never the consumer cancelled: some clients reject the
deliveries they hold when cancelling, and a stream answers a reject by closing the
connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from aio_pika.abc import AbstractConnection, AbstractIncomingMessage
from aiormq.abc import FieldTable

from kanin.spark import loop
from kanin.spark.client import close_quietly, connect, find_queue, not_a_stream
from kanin.spark.offsets import OffsetRange
from kanin.spark.options import KaninOptions
from kanin.spark.rows import Row, message_row, stream_offset

PREFETCH = 2000
# No delivery for this long while the range is unfinished: the broker is gone or stuck.
IDLE_TIMEOUT_S = 60.0
LOOP_TIMEOUT_S = IDLE_TIMEOUT_S + 30.0


def read_range(options: KaninOptions, span: OffsetRange) -> Iterator[Row]:
    """The rows of the messages at offsets in `span`, in offset order (blocking)."""
    if span.width <= 0:
        return
    reader = _RangeReader(options, span)
    try:
        loop.run(reader.open(), LOOP_TIMEOUT_S)
        while not reader.done:
            yield from loop.run(reader.next_rows(), LOOP_TIMEOUT_S)
    finally:
        loop.run(reader.close(), LOOP_TIMEOUT_S)


class _RangeReader:
    """The asyncio half of read_range; every method runs on the loop thread."""

    def __init__(self, options: KaninOptions, span: OffsetRange) -> None:
        self.options = options
        self.span = span
        self.done = False
        self._connection: AbstractConnection | None = None
        self._inbox: asyncio.Queue[AbstractIncomingMessage | BaseException] = asyncio.Queue()

    async def open(self) -> None:
        self._connection = connection = await connect(self.options, "stream read")
        connection.close_callbacks.add(self._on_close)
        channel = await connection.channel()
        channel.close_callbacks.add(self._on_close)
        await channel.set_qos(prefetch_count=PREFETCH)
        queue = await find_queue(channel, self.options)
        arguments: FieldTable = {"x-stream-offset": self.span.start}
        await queue.consume(self._inbox.put, arguments=arguments)

    def _on_close(self, _sender: Any, error: BaseException | None = None) -> None:
        if not self.done:
            reason = error or ConnectionError("closed")
            self._inbox.put_nowait(ConnectionError(f"stream read cut off: {reason!r}"))

    async def next_rows(self) -> list[Row]:
        """The rows of the deliveries that have come (waiting for at least one)."""
        rows: list[Row] = []
        last = None
        for message in await self._drain():
            offset = self._offset(message)
            if offset >= self.span.end:
                self.done = True
                break
            last = message
            if offset >= self.span.start:
                rows.append(message_row(message, offset))
            if offset >= self.span.end - 1:
                self.done = True
                break
        if last is not None and not self.done:
            await last.ack(multiple=True)  # credit for the next ones
        return rows

    def _offset(self, message: AbstractIncomingMessage) -> int:
        try:
            return stream_offset(message.headers)
        except ValueError:
            assert self.options.queue is not None
            raise not_a_stream(self.options.queue) from None

    async def _drain(self) -> list[AbstractIncomingMessage]:
        try:
            first = await asyncio.wait_for(self._inbox.get(), IDLE_TIMEOUT_S)
        except TimeoutError:
            raise TimeoutError(
                f"no delivery from stream {self.options.queue!r} for {IDLE_TIMEOUT_S:.0f} s "
                f"while reading offsets [{self.span.start}, {self.span.end})"
            ) from None
        got = [first]
        while not self._inbox.empty():
            got.append(self._inbox.get_nowait())
        messages = []
        for item in got:
            if isinstance(item, BaseException):
                raise item
            messages.append(item)
        return messages

    async def close(self) -> None:
        self.done = True
        await close_quietly(self._connection)
