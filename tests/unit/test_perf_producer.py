"""kanin perf's confirm window, without sockets: a producer against a connection that
only records what it is given to write."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import cast

from kanin.perf.client import Connection
from kanin.perf.histogram import Histogram
from kanin.perf.options import ConfirmMode, Endpoint, PerfOptions
from kanin.perf.producer import SPAN_WINDOWS, Producer
from kanin.perf.tally import Counters


class RecordingConnection:
    frame_max = 131072
    writable = True
    error: str | None = None

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def fail(self, reason: str) -> None:
        self.error = reason


def producer(window: int) -> Producer:
    options = PerfOptions(
        endpoint=Endpoint("127.0.0.1", 5672, "guest", "guest", "/"),
        size=16,
        confirm=ConfirmMode("window", window),
    )
    conn = cast(Connection, RecordingConnection())
    return Producer(conn, 1, 0, "q", options, 1, Counters(), Histogram())


async def settle(producer: Producer) -> int:
    """Let the producer publish until its window stops it; how many it has sent."""
    for _ in range(5):
        await asyncio.sleep(0)
    return producer.sent


def run_with(window: int, steps: Callable[[Producer], Awaitable[None]]) -> None:
    async def main() -> None:
        one = producer(window)
        task = asyncio.create_task(one.run(0))
        try:
            await steps(one)
        finally:
            one.stop()
            await task

    asyncio.run(main())


def test_a_later_confirm_frees_room_while_an_earlier_message_waits() -> None:
    async def steps(one: Producer) -> None:
        assert await settle(one) == 4
        one.on_ack(2, False)  # out of order: 1 still waits
        assert await settle(one) == 5
        assert (one.in_flight, one.low) == (4, 1)
        one.on_ack(5, True)  # 1, 3, 4 and 5: all in flight confirmed
        assert await settle(one) == 9
        assert (one.in_flight, one.low) == (4, 6)
        assert one.counters.confirmed == 5

    run_with(4, steps)


def test_the_span_past_the_oldest_unconfirmed_is_held_to_the_ring() -> None:
    ring = 2 * SPAN_WINDOWS

    async def steps(one: Producer) -> None:
        assert await settle(one) == 2
        while True:  # confirm each newest message at once; message 1 never
            sent = one.sent
            one.on_ack(sent, False)
            if await settle(one) == sent:
                break
        assert (one.sent, one.in_flight, one.low) == (ring, 1, 1)
        one.on_ack(1, False)
        assert await settle(one) == ring + 2

    run_with(2, steps)


def test_a_nack_frees_room_as_an_ack_does() -> None:
    async def steps(one: Producer) -> None:
        assert await settle(one) == 3
        one.on_nack(3, False)
        assert await settle(one) == 4
        assert (one.in_flight, one.counters.nacked) == (3, 1)

    run_with(3, steps)
