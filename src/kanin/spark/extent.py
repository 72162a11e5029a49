"""Where a stream starts and ends, asked often and cheaply: the driver side asks before
every micro-batch, and many times a second while a query waits for news.

On kanin the passive queue.declare-ok's message count of a stream is exact at once: the
tail minus the first offset still held (holes that failed writes left included). The
first offset is the first delivery to a consumer from "first". So tail = first + count.

Reading the first offset costs a consumer (and a read from the oldest segment), a count
costs one round trip, and the first offset moves only when retention removes a segment.
So the first offset is remembered and read again only now and then, or when the count
shows that retention ran. A remembered first offset is never above the real one (it only
grows), so first + count never overshoots the tail: a batch planned from it never waits
for messages that do not exist; at worst it stops short and the next batch goes on.
The first offset is always read before the count that goes with it, for the same reason.

RabbitMQ 3.10's count lags by seconds, so on any broker that is not kanin the extent is
found by reading the stream instead (tail_scan.py).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import suppress

from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage

from kanin.spark.client import KaninSparkError, find_queue, is_kanin, not_a_stream
from kanin.spark.offsets import StreamExtent
from kanin.spark.options import KaninOptions
from kanin.spark.rows import stream_offset
from kanin.spark.tail_scan import TailScanProbe

# Read the first offset again at least this often: it bounds how long a coincidence
# (retention dropping as many messages as publishers added) can hold back the tail found.
FIRST_REFRESH_S = 5.0
# How long to wait for a stream's first message once the broker said it holds some.
FIRST_DELIVERY_TIMEOUT_S = 30.0


def extent_probe(
    connection: AbstractConnection, options: KaninOptions
) -> ExtentProbe | TailScanProbe:
    """Counting on kanin; scanning elsewhere, where the count is not to be trusted."""
    if is_kanin(connection):
        return ExtentProbe(connection, options)
    return TailScanProbe(options)


class ExtentProbe:
    """One stream's extent on kanin, over a connection the caller owns; runs on the loop
    thread."""

    def __init__(self, connection: AbstractConnection, options: KaninOptions) -> None:
        self.connection = connection
        self.options = options
        self._channel: AbstractChannel | None = None
        self._first: int | None = None
        self._first_read_at = -FIRST_REFRESH_S
        self._highest_tail = 0

    async def extent(self) -> StreamExtent | None:
        """Offsets [first, tail) the stream holds now, or None while it holds nothing."""
        count = await self._count()
        if count == 0:
            return None
        tail = None if self._first is None else self._first + count
        stale = time.monotonic() - self._first_read_at >= FIRST_REFRESH_S
        if self._first is None or tail is None or stale or tail < self._highest_tail:
            # (a tail below one found before: retention moved the first offset)
            self._first = await self._read_first()
            self._first_read_at = time.monotonic()
            count = await self._count()
            tail = self._first + count
        self._highest_tail = max(self._highest_tail, tail)
        return StreamExtent(self._first, tail)

    async def _count(self) -> int:
        if self._channel is None or self._channel.is_closed:
            self._channel = await self.connection.channel()
        queue = await find_queue(self._channel, self.options)
        result = queue.declaration_result
        return int(result.message_count or 0) if result is not None else 0

    async def _read_first(self) -> int:
        """The first delivery's offset to a consumer from "first" with credit for one, on a
        channel of its own that is closed after it: never acked, never rejected (a stream
        answers a reject by closing the connection)."""
        channel = await self.connection.channel()
        got: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def on_message(message: AbstractIncomingMessage) -> None:
            if got.done():
                return
            try:
                got.set_result(stream_offset(message.headers))
            except ValueError:
                got.set_exception(not_a_stream(self.options.queue or ""))

        try:
            await channel.set_qos(prefetch_count=1)
            queue = await find_queue(channel, self.options)
            await queue.consume(on_message, arguments={"x-stream-offset": "first"})
            return await asyncio.wait_for(got, FIRST_DELIVERY_TIMEOUT_S)
        except TimeoutError:
            raise KaninSparkError(
                f"stream {self.options.queue!r} holds messages but sent none to a reader "
                f"from its first within {FIRST_DELIVERY_TIMEOUT_S:.0f} s"
            ) from None
        finally:
            with suppress(Exception):
                await channel.close()
