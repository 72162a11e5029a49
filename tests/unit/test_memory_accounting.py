"""Memory accounting (core/memory.py, core/message.py, amqp/assembler.py): what a message
costs while a queue holds it, the alarm on counted bytes and on resident memory (RSS, from
an injected reader), and the bound on unfinished bodies per connection."""

from __future__ import annotations

import pytest
from pamqp import commands

from kanin.amqp import constants as C
from kanin.amqp.assembler import AssemblyLimit, ContentAssembler
from kanin.amqp.errors import ConnectionError_
from kanin.amqp.frames import BodyFrame, HeaderFrame
from kanin.amqp.tables import encode_header
from kanin.core import memory
from kanin.core.memory import MemoryMonitor
from kanin.core.message import (
    MESSAGE_OVERHEAD_BYTES,
    PAGED_OUT_BYTES,
    STORED_OVERHEAD_BYTES,
    Entry,
    Message,
    entry_cost,
    message_cost,
)
from kanin.core.queue_args import parse_queue_args
from kanin.core.queues import ClassicQueue
from kanin.testing.clock import FakeScheduler

MiB = 1024 * 1024


def message(body: bytes = b"", **headers: object) -> Message:
    properties = commands.Basic.Properties(headers=headers or None)
    return Message("", "q", encode_header(len(body), properties), body, properties)


# -- what a message costs -----------------------------------------------------------------


def test_a_message_costs_its_body_its_encoded_header_and_the_overhead() -> None:
    small, big = message(b"abc"), message(b"abc", h="x" * 120_000)
    assert message_cost(small) == 3 + len(small.header_payload) + MESSAGE_OVERHEAD_BYTES
    # A big header table is counted at its encoded size, even with an empty body.
    assert message_cost(message(b"", h="x" * 120_000)) > 120_000
    assert message_cost(big) - message_cost(small) == len(big.header_payload) - len(
        small.header_payload
    )


def test_an_entry_costs_its_message_in_memory_and_its_index_when_paged_out() -> None:
    entry = Entry(message(b"hello"), 1)
    assert entry_cost(entry) == message_cost(message(b"hello"))
    entry.stored_id = 7
    assert entry_cost(entry) == message_cost(message(b"hello")) + STORED_OVERHEAD_BYTES
    assert entry_cost(Entry(None, 2, size=10_000)) == PAGED_OUT_BYTES


def test_routing_drops_the_decoded_properties_and_they_decode_again_on_demand() -> None:
    routed = message(b"", h="x" * 1000)
    routed.shed_properties()
    assert routed.headers == {"h": "x" * 1000}  # decoded from the header bytes again


# -- a queue counts what it holds, and releases it when the message leaves ---------------------


def make_queue(watermark: int = 2**40, **arguments: object) -> tuple[ClassicQueue, MemoryMonitor]:
    monitor = MemoryMonitor(watermark)
    args = parse_queue_args(dict(arguments), "q", "/")
    return ClassicQueue(
        "q", "/", FakeScheduler(), monitor, arguments=dict(arguments), args=args
    ), monitor


def test_a_queue_counts_each_message_and_releases_it_on_ack() -> None:
    queue, monitor = make_queue()
    sent = [message(b"x" * i, n=i) for i in range(5)]
    for each in sent:
        queue.publish(each)
    assert monitor.held_bytes == sum(message_cost(m) for m in sent)
    taken = queue.take()  # delivered, not yet acked: still held
    assert taken is not None
    assert monitor.held_bytes == sum(message_cost(m) for m in sent)
    queue.forget(taken)  # the ack
    assert monitor.held_bytes == sum(message_cost(m) for m in sent[1:])
    queue.forget(taken)  # a second release of the same entry releases nothing
    assert monitor.held_bytes == sum(message_cost(m) for m in sent[1:])


def test_purge_expiry_and_overflow_release_exactly_what_was_counted() -> None:
    queue, monitor = make_queue(**{"x-max-length": 2})
    for i in range(5):
        queue.publish(message(b"x" * 100, n=i))  # three dropped from the head
    assert monitor.held_bytes == 2 * message_cost(message(b"x" * 100, n=0))
    assert queue.purge() == 2
    assert monitor.held_bytes == 0
    ttl_queue, ttl_monitor = make_queue(**{"x-message-ttl": 0})
    ttl_queue.publish(message(b"gone"))
    assert ttl_monitor.held_bytes == 0


def test_empty_messages_raise_the_alarm_on_their_overhead_alone() -> None:
    queue, monitor = make_queue(watermark=100 * MESSAGE_OVERHEAD_BYTES)
    for _ in range(100):
        queue.publish(message())
    assert monitor.alarm
    while (entry := queue.take()) is not None:
        queue.forget(entry)
    assert not monitor.alarm and monitor.held_bytes == 0


# -- the alarm on counted bytes and resident memory ----------------------------------------


class FakeRss:
    def __init__(self, value: int) -> None:
        self.value = value
        self.reads = 0

    def __call__(self) -> int | None:
        self.reads += 1
        return self.value


def watched(watermark: int, rss: int) -> tuple[MemoryMonitor, FakeRss, list[bool]]:
    reader = FakeRss(rss)
    monitor = MemoryMonitor(watermark, reader)
    changes: list[bool] = []
    monitor.on_alarm_change = changes.append
    return monitor, reader, changes


def test_counted_bytes_raise_and_clear_the_alarm_at_the_watermark() -> None:
    monitor, _, changes = watched(1000, rss=0)
    monitor.add(1000)
    assert changes == []  # at the watermark is not above it
    monitor.add(1)
    monitor.add(500)
    monitor.release(501)
    assert changes == [True, False]


def test_resident_memory_above_the_watermark_raises_the_alarm_and_below_clears_it() -> None:
    monitor, rss, changes = watched(100 * MiB, rss=50 * MiB)
    monitor.sample_rss()
    assert changes == []
    rss.value = 101 * MiB
    monitor.sample_rss()
    assert changes == [True]
    monitor.add(60 * MiB)  # counted bytes above half the watermark: the RSS must come down
    rss.value = 120 * MiB
    monitor.sample_rss()
    assert changes == [True]
    rss.value = 90 * MiB
    monitor.sample_rss()
    assert changes == [True, False]


def test_memory_the_allocator_keeps_does_not_block_publishers_once_drained() -> None:
    monitor, rss, changes = watched(100 * MiB, rss=50 * MiB)
    monitor.add(101 * MiB)  # a flood of messages
    rss.value = 180 * MiB
    monitor.sample_rss()
    monitor.release(40 * MiB)  # consumers drain it: below the watermark, RSS still high
    assert changes == [True]
    monitor.release(11 * MiB)  # drained to half the watermark: cleared, RSS or not
    assert changes == [True, False]
    # The RSS that was left is not new growth; a quarter of the watermark more would be.
    monitor.sample_rss()
    rss.value = 180 * MiB + int(100 * MiB * memory.RSS_REGROWTH_FRACTION) - 1
    monitor.sample_rss()
    assert changes == [True, False]
    rss.value += 2
    monitor.sample_rss()
    assert changes == [True, False, True]
    # Once the RSS is seen below the watermark, the watermark alone applies again.
    rss.value = 90 * MiB
    monitor.sample_rss()
    rss.value = 101 * MiB
    monitor.sample_rss()
    assert changes == [True, False, True, False, True]


def test_resident_memory_is_sampled_after_every_few_megabytes_read() -> None:
    monitor, rss, changes = watched(100 * MiB, rss=200 * MiB)
    monitor.note_read(memory.RSS_SAMPLE_EVERY_BYTES - 1)
    assert rss.reads == 0 and changes == []
    monitor.note_read(1)
    assert rss.reads == 1 and changes == [True]


def test_without_an_rss_reader_only_counted_bytes_matter() -> None:
    monitor = MemoryMonitor(100)
    monitor.sample_rss()
    monitor.note_read(10 * memory.RSS_SAMPLE_EVERY_BYTES)
    assert not monitor.alarm and monitor.rss_bytes == 0


# -- unfinished bodies: bounded per connection, counted towards the alarm -----------------------


def start(assembler: ContentAssembler, channel: int, body_size: int) -> None:
    assembler.start(commands.Basic.Publish(routing_key="q"))
    payload = encode_header(body_size, commands.Basic.Properties())
    assert assembler.on_header(HeaderFrame(channel, C.BASIC_CLASS_ID, body_size, payload)) is None


def test_unfinished_bodies_across_channels_share_one_bound_and_count_towards_memory() -> None:
    monitor = MemoryMonitor(2**40)

    def count(delta: int) -> None:
        monitor.add(delta) if delta > 0 else monitor.release(-delta)

    limit = AssemblyLimit(3000, count)
    first, second = ContentAssembler(2000, limit), ContentAssembler(2000, limit)
    start(first, 1, 2000)
    start(second, 2, 2000)
    assert first.on_body(BodyFrame(1, b"a" * 1500)) is None
    assert second.on_body(BodyFrame(2, b"b" * 1500)) is None
    assert limit.held_bytes == monitor.held_bytes == 3000
    done = first.on_body(BodyFrame(1, b"a" * 500))  # complete: no longer unfinished
    assert done is not None and done.body == b"a" * 2000
    assert limit.held_bytes == monitor.held_bytes == 1500
    start(first, 1, 2000)
    assert first.on_body(BodyFrame(1, b"c" * 1500)) is None
    with pytest.raises(ConnectionError_) as refused:
        second.on_body(BodyFrame(2, b"b" * 1))  # one byte over the connection's bound
    assert refused.value.reply_code == C.RESOURCE_ERROR
    assert "limit of 3000" in refused.value.reply_text
    first.abandon()  # the channels close: everything is given back
    second.abandon()
    assert limit.held_bytes == monitor.held_bytes == 0
