"""The stream queue on a fake clock over a real log (files in tmp_path, a real event loop
for the log's commit rounds): retention by age and size, where consumers start by time,
'last' as the newest commit round, and confirms settled by the log's rounds."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pamqp import commands

from kanin.amqp.tables import encode_header
from kanin.core.confirms import ConfirmLedger, ConfirmTicket
from kanin.core.message import Message
from kanin.core.queue_args import parse_queue_args
from kanin.core.queues.stream import StreamQueue
from kanin.core.stream_args import StartAt
from kanin.store.stream_logs import FileStreamLogs
from kanin.testing.clock import FakeScheduler

HOUR_MS = 3_600_000


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def message(body: bytes) -> Message:
    properties = commands.Basic.Properties()
    return Message("", "s", encode_header(len(body), properties), body, properties)


class Stream:
    """A stream queue, its fake clock, and a way to let its log's rounds end."""

    def __init__(self, tmp_path: Path, loop: asyncio.AbstractEventLoop, **arguments: Any):
        self.loop, self.clock = loop, FakeScheduler()
        self.logs = FileStreamLogs(tmp_path / "streams", loop)
        arguments = {"x-queue-type": "stream", **arguments}
        args = parse_queue_args(arguments, "s", "/")
        log = self.logs.open("/", "s", args.stream.segment_bytes)
        self.queue = StreamQueue(
            "s", "/", self.clock, log=log, logs=self.logs, arguments=arguments, args=args
        )

    def publish(self, *bodies: bytes) -> None:
        """Publish, then let the log commit them (one round)."""
        for body in bodies:
            self.queue.publish(message(body))
        self.settle()

    def settle(self) -> None:
        done = self.loop.create_future()
        self.queue.log.after_commit(lambda ok: done.set_result(ok))
        assert self.loop.run_until_complete(asyncio.wait_for(done, 5))

    def close(self) -> None:
        self.loop.run_until_complete(self.logs.close())


@pytest.fixture
def make(tmp_path: Path, loop: asyncio.AbstractEventLoop) -> Iterator[Any]:
    made: list[Stream] = []

    def factory(**arguments: Any) -> Stream:
        made.append(Stream(tmp_path, loop, **arguments))
        return made[-1]

    yield factory
    for stream in made:
        stream.close()


def test_max_age_drops_the_segments_older_than_it(make: Any) -> None:
    stream = make(**{"x-max-age": "1h", "x-stream-max-segment-size-bytes": 200})
    for _ in range(5):
        stream.publish(b"x" * 150)  # one segment each
    assert stream.queue.first_offset == 0
    stream.clock.advance(3600 - 10)
    stream.publish(b"young")
    assert stream.queue.first_offset == 0, "nothing older than an hour yet"
    stream.clock.advance(20)
    stream.publish(b"younger")
    assert stream.queue.first_offset == 5, "the five old segments went, the young one stayed"
    assert stream.queue.message_count == 2


def test_max_length_bytes_keeps_the_newest_whole_segments(make: Any) -> None:
    stream = make(**{"x-max-length-bytes": 1000, "x-stream-max-segment-size-bytes": 300})
    for _ in range(20):
        stream.publish(b"y" * 100)
    queue = stream.queue
    assert queue.first_offset > 0
    assert queue.log.size_bytes() <= 1000 + 300
    assert queue.message_count == 20 - queue.first_offset


def test_without_retention_nothing_goes(make: Any) -> None:
    stream = make(**{"x-stream-max-segment-size-bytes": 200})
    for _ in range(10):
        stream.publish(b"z" * 150)
    stream.clock.advance(10 * 365 * 24 * 3600)
    stream.publish(b"later")
    assert (stream.queue.first_offset, stream.queue.message_count) == (0, 11)


def test_a_consumer_starts_by_time(make: Any) -> None:
    stream = make()
    stream.publish(b"a", b"b")
    start_ms = stream.clock.wall_clock_ms()
    stream.clock.advance(60)
    stream.publish(b"c", b"d")
    queue = stream.queue
    assert queue.start_offset(StartAt("timestamp", start_ms + 1000)) == 2
    assert queue.start_offset(StartAt("timestamp", start_ms)) == 0
    assert queue.start_offset(StartAt("interval", 30_000)) == 2, "the last 30 seconds"
    assert queue.start_offset(StartAt("interval", HOUR_MS)) == 0


def test_last_is_the_newest_commit_round(make: Any) -> None:
    stream = make()
    stream.publish(b"1")
    stream.publish(b"2", b"3", b"4")
    queue = stream.queue
    assert queue.start_offset(StartAt("last")) == 1
    assert queue.start_offset(StartAt("next")) == 4
    assert queue.start_offset(StartAt("first")) == 0
    assert queue.start_offset(StartAt("offset", 99)) == 99, "past the end: waits for it"


def test_a_confirm_waits_for_the_logs_round(make: Any) -> None:
    stream = make()
    ledger = ConfirmLedger()
    seq = ledger.next_seq()
    ledger.hold(seq, (stream.queue,))
    stream.queue.publish_with_ticket(message(b"m"), ConfirmTicket(ledger, seq))
    assert not ledger.has_output(), "not before the log's round has ended"
    stream.settle()
    assert ledger.drain() == ([], [(seq, False)])
