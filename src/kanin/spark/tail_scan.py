"""Where a stream starts and ends on a broker that is not kanin (RabbitMQ 3.10), found by
reading the stream itself.

RabbitMQ's queue.declare-ok message count of a stream lags by seconds, so it cannot say
where the stream ends. A consumer from "last" can: RabbitMQ starts it at the first
message of the stream's last chunk (https://www.rabbitmq.com/streams.html#consuming), so
the scan reads on from there, each delivery saying its offset in the x-stream-offset
header, until none has come for QUIET_S. The tail is one past the highest offset seen.
The first offset is the first delivery to a consumer from "first".

What it costs: per look at the tail, a connection, the last chunk's messages and QUIET_S
of waiting (a chunk holds what the broker wrote at once: one message for a publisher
that waits for each confirm, up to thousands for a busy one). Its limit: the tail found
is where the stream ended when the scan went quiet, or after SCAN_LIMIT_S while messages
keep coming, so a micro-batch can end a little behind the true tail; the next one goes
on from there. Nothing is lost or read twice: a batch is an exact range of offsets, and
every offset below the tail found exists (or retention removed it), so a read of the
range never waits for a message that was not written.
"""

from __future__ import annotations

import asyncio
import time

from kanin.spark.client import CONNECT_TIMEOUT_S, not_a_stream
from kanin.spark.offsets import StreamExtent
from kanin.spark.options import KaninOptions
from kanin.spark.rows import stream_offset
from kanin.spark.socket_read import Delivery, SocketConsumer

# No delivery for this long: the scan has read to the tail.
QUIET_S = 0.3
# No first delivery for this long to a consumer from "first": the stream is empty.
FIRST_WAIT_S = 1.0
# Stop scanning after this long even while messages keep coming.
SCAN_LIMIT_S = 2.0
# Deliveries in flight during a scan (credit, acked as they are read).
SCAN_PREFETCH = 2000
# Read the first offset again at least this often (it moves only when retention runs).
FIRST_REFRESH_S = 5.0


class TailScanProbe:
    """One stream's extent, by scanning; the same interface as extent.ExtentProbe."""

    def __init__(self, options: KaninOptions) -> None:
        self.options = options
        self._first: int | None = None
        self._first_read_at = -FIRST_REFRESH_S
        self._highest_tail = 0

    async def extent(self) -> StreamExtent | None:
        """Offsets [first, tail) the stream holds now, or None while it holds nothing."""
        return await asyncio.to_thread(self.scan)

    def scan(self) -> StreamExtent | None:
        if self._first is None or time.monotonic() - self._first_read_at >= FIRST_REFRESH_S:
            first = read_first(self.options)
            if first is None:
                return None
            self._first, self._first_read_at = first, time.monotonic()
        # The tail is read after the first offset: a first read later could be above it.
        tail = scan_tail(self.options)
        self._highest_tail = max(self._highest_tail, tail or 0, self._first + 1)
        return StreamExtent(self._first, self._highest_tail)


def read_first(options: KaninOptions) -> int | None:
    """The offset of the first message the stream holds, None if it sends none."""
    offsets = _offsets_from(options, "first", FIRST_WAIT_S, stop_at_first=True)
    return offsets[0] if offsets else None


def scan_tail(options: KaninOptions) -> int | None:
    """One past the highest offset a consumer from "last" gets before it goes quiet."""
    offsets = _offsets_from(options, "last", QUIET_S, stop_at_first=False)
    return max(offsets) + 1 if offsets else None


def _offsets_from(
    options: KaninOptions, start: str, quiet_s: float, stop_at_first: bool
) -> list[int]:
    """The offsets delivered to a consumer from `start` until `quiet_s` passes with none (or
    SCAN_LIMIT_S in all), checked to be a stream's before anything is acked: an ack on a
    queue that is not a stream would remove the message."""
    consumer = SocketConsumer(options, CONNECT_TIMEOUT_S, f"stream scan from {start}")
    seen: list[int] = []
    deadline = time.monotonic() + SCAN_LIMIT_S
    try:
        consumer.open(1 if stop_at_first else SCAN_PREFETCH, {"x-stream-offset": start})
        consumer.set_idle_timeout(quiet_s)
        for chunk in consumer.deliveries():
            seen += [_offset(options, delivery) for delivery in chunk]
            if stop_at_first or time.monotonic() > deadline:
                break
            consumer.ack(chunk[-1])  # credit for the next ones
    except TimeoutError:
        pass  # quiet: nothing more to read
    finally:
        consumer.close()
    return seen


def _offset(options: KaninOptions, delivery: Delivery) -> int:
    try:
        return stream_offset(delivery.properties.headers or {})
    except ValueError:
        raise not_a_stream(options.queue or "") from None
