"""Stream queues: what a consumer may do, credit, refusals, retention, many readers.

Measured on RabbitMQ 3.10.8; these pass against it too (KANIN_TEST_AMQP_URL) except
those marked kanin_only, each of which says why. test_stream_queues.py has the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import aio_pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from helpers import STREAM, delete_afterwards, process_events_until, publish_numbered


@pytest.fixture
def doomed(broker: Any) -> Iterator[list[str]]:
    yield from delete_afterwards(broker, lambda channel, name: channel.queue_delete(name))


def consume(channel: BlockingChannel, queue: str, into: list[Any], offset: Any = "first") -> str:
    """A consumer that keeps (offset, delivery tag) and acks nothing."""
    return str(
        channel.basic_consume(
            queue,
            lambda ch, m, p, b: into.append((p.headers["x-stream-offset"], m.delivery_tag)),
            arguments={"x-stream-offset": offset},
        )
    )


def closes_connection(conn: BlockingConnection, action: Any) -> tuple[int, str]:
    with pytest.raises(ConnectionClosedByBroker) as info:
        action()
        process_events_until(conn, lambda: not conn.is_open, timeout=2)
        conn.channel()
    return info.value.reply_code, str(info.value.reply_text)


# -- who may consume ------------------------------------------------------------------------


def test_a_consumer_needs_a_prefetch(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().basic_consume(name, lambda *a: None)
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - consumer prefetch count is not set for "
        f"'queue '{name}' in vhost '/''"
    )
    assert conn.is_open


def test_auto_ack_is_refused(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    code, text = closes_connection(
        conn, lambda: channel.basic_consume(name, lambda *a: None, auto_ack=True)
    )
    assert (code, text) == (
        540,
        f"NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queues "
        f"queue '{name}' in vhost '/'",
    )


def test_a_global_prefetch_is_refused(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    channel.basic_qos(prefetch_count=10, global_qos=True)
    code, text = closes_connection(conn, lambda: channel.basic_consume(name, lambda *a: None))
    assert (code, text) == (
        540,
        f"NOT_IMPLEMENTED - queue '{name}' in vhost '/' does not support global qos",
    )


def test_consumer_priority_is_refused(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.basic_consume(name, lambda *a: None, arguments={"x-priority": 5})
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-priority' for queue '{name}' in vhost '/' "
        "of queue type rabbit_stream_queue"
    )


def test_exclusive_consumers_do_not_exclude(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    publish_numbered(conn, name, 2)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    first: list[Any] = []
    second: list[Any] = []
    channel.basic_consume(
        name,
        lambda ch, m, p, b: first.append(p.headers["x-stream-offset"]),
        exclusive=True,
        arguments={"x-stream-offset": "first"},
    )
    channel.basic_consume(
        name,
        lambda ch, m, p, b: second.append(p.headers["x-stream-offset"]),
        arguments={"x-stream-offset": "first"},
    )
    process_events_until(conn, lambda: len(first) >= 2 and len(second) >= 2)
    assert first == second == [0, 1]


@pytest.mark.parametrize("offset", ["1x", "10", "0s", "1h "])
def test_a_malformed_offset(stream: Any, conn: BlockingConnection, offset: str) -> None:
    name = stream()
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.basic_consume(name, lambda *a: None, arguments={"x-stream-offset": offset})
    assert info.value.reply_text == (
        f"PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue '{name}' in vhost "
        f"'/': {{invalid_stream_offset_arg,{{longstr,<<\"{offset}\">>}}}}"
    )
    assert conn.is_open


@pytest.mark.kanin_only
@pytest.mark.parametrize("offset", ["abc", "FIRST", "-1h", Decimal("1.5"), True, {"a": 1}])
def test_offsets_rabbitmq_crashes_on_are_refused(
    stream: Any, conn: BlockingConnection, offset: Any
) -> None:
    """RabbitMQ 3.10 closes the connection with 541 INTERNAL_ERROR for each of these."""
    name = stream()
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.basic_consume(name, lambda *a: None, arguments={"x-stream-offset": offset})
    assert info.value.reply_code == 406
    assert "invalid arg 'x-stream-offset'" in info.value.reply_text
    assert conn.is_open


# -- acks are credit ------------------------------------------------------------------------


def test_the_prefetch_is_credit(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    publish_numbered(conn, name, 30)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    got: list[Any] = []
    consume(channel, name, got)
    process_events_until(conn, lambda: len(got) >= 10)
    conn.process_data_events(time_limit=0.3)
    assert [offset for offset, _ in got] == list(range(10)), "no more than the prefetch"
    channel.basic_ack(got[4][1], multiple=True)  # five acked: five more
    process_events_until(conn, lambda: len(got) >= 15)
    conn.process_data_events(time_limit=0.3)
    assert [offset for offset, _ in got] == list(range(15))


def test_basic_get_is_refused(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    channel = conn.channel()
    code, text = closes_connection(conn, lambda: channel.basic_get(name))
    assert (code, text) == (
        540,
        f"NOT_IMPLEMENTED - basic.get not supported by stream queues queue '{name}' in vhost '/'",
    )


@pytest.mark.parametrize(
    "settle",
    [
        lambda ch, tag: ch.basic_nack(tag, requeue=True),
        lambda ch, tag: ch.basic_nack(tag, requeue=False),
        lambda ch, tag: ch.basic_reject(tag, requeue=True),
        lambda ch, tag: ch.basic_reject(tag, requeue=False),
    ],
    ids=["nack-requeue", "nack", "reject-requeue", "reject"],
)
def test_nack_and_reject_are_refused(stream: Any, conn: BlockingConnection, settle: Any) -> None:
    name = stream()
    publish_numbered(conn, name, 1)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    got: list[Any] = []
    consume(channel, name, got)
    process_events_until(conn, lambda: bool(got))
    code, text = closes_connection(conn, lambda: settle(channel, got[0][1]))
    assert (code, text) == (
        540,
        "NOT_IMPLEMENTED - basic.nack and basic.reject not supported by stream queues "
        f"queue '{name}' in vhost '/'",
    )


def test_pika_cancel_with_undispatched_deliveries_costs_the_connection(
    stream: Any, conn: BlockingConnection
) -> None:
    """pika's BlockingChannel cancel rejects (with requeue) what it received and has not yet
    handed over; RabbitMQ 3.10 answers that with 540 and closes the connection, and so does
    kanin. To stop a stream consumer with pika, ack what it got, then close its channel
    once nothing more is on the way (or use a prefetch the consumer takes whole)."""
    name = stream()
    publish_numbered(conn, name, 20)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    messages = channel.consume(name, arguments={"x-stream-offset": "first"})
    method, _, _ = next(messages)  # the other nine are buffered, not yet handed over
    channel.basic_ack(method.delivery_tag)
    code, _ = closes_connection(conn, channel.cancel)
    assert code == 540


def test_closing_the_channel_keeps_the_connection(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    publish_numbered(conn, name, 20)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    got: list[Any] = []
    consume(channel, name, got)
    process_events_until(conn, lambda: len(got) >= 10)
    channel.close()  # ten unacked: nothing is redelivered, nothing is refused
    assert conn.is_open
    conn.channel().queue_declare(name, passive=True)


def test_purge_is_refused(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    code, text = closes_connection(conn, lambda: conn.channel().queue_purge(name))
    assert (code, text) == (
        540,
        f"NOT_IMPLEMENTED - queue.purge not supported by stream queues queue '{name}' in vhost '/'",
    )


def test_deleted_and_declared_again_it_starts_empty(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    publish_numbered(conn, name, 5)
    channel = conn.channel()
    channel.queue_delete(name)
    channel.queue_declare(name, durable=True, arguments=STREAM)
    publish_numbered(conn, name, 1)
    got: list[Any] = []
    reader = conn.channel()
    reader.basic_qos(prefetch_count=10)
    consume(reader, name, got)
    process_events_until(conn, lambda: bool(got))
    conn.process_data_events(time_limit=0.2)
    assert [offset for offset, _ in got] == [0]


@pytest.mark.kanin_only
def test_dead_letters_can_go_to_a_stream(
    stream: Any, conn: BlockingConnection, unique: Any, doomed: list[str]
) -> None:
    """RabbitMQ 3.10 drops a message dead-lettered to a stream, silently; kanin appends it."""
    target = stream()
    source = unique("dlx-src")
    doomed.append(source)
    channel = conn.channel()
    channel.queue_declare(
        source,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": target},
    )
    channel.basic_publish("", source, b"dead")
    method = None
    while method is None:
        method, _, _ = channel.basic_get(source)
    channel.basic_reject(method.delivery_tag, requeue=False)
    got: list[Any] = []
    reader = conn.channel()
    reader.basic_qos(prefetch_count=10)
    consume(reader, target, got)
    process_events_until(conn, lambda: bool(got))
    assert [offset for offset, _ in got] == [0]


# -- many readers, and the count ------------------------------------------------------------


def test_many_readers_at_different_offsets(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    publish_numbered(conn, name, 200)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=50)
    readers: dict[int, list[int]] = {start: [] for start in (0, 50, 120, 199)}
    for start, got in readers.items():
        channel.basic_consume(
            name,
            lambda ch, m, p, b, got=got: (
                got.append(p.headers["x-stream-offset"]),
                ch.basic_ack(m.delivery_tag),
            ),
            arguments={"x-stream-offset": start},
        )
    process_events_until(conn, lambda: all(len(got) >= 200 - s for s, got in readers.items()))
    for start, got in readers.items():
        assert got == list(range(start, 200))


@pytest.mark.kanin_only
def test_declare_ok_counts_exactly(stream: Any, conn: BlockingConnection) -> None:
    """RabbitMQ 3.10's count lags by seconds (its statistics tick) and its consumer count
    is always 0; kanin's message count is every committed message, at once."""
    name = stream()
    publish_numbered(conn, name, 25)
    assert conn.channel().queue_declare(name, passive=True).method.message_count == 25


@pytest.mark.kanin_only
def test_retention_by_size_drops_whole_segments_oldest_first(
    stream: Any, conn: BlockingConnection
) -> None:
    """With 1,000-byte segments and at most 5,000 bytes kept, the first offset moves up as
    segments fill (RabbitMQ 3.10 does the same, at its own chunk boundaries)."""
    name = stream(**{"x-max-length-bytes": 5000, "x-stream-max-segment-size-bytes": 1000})
    publish_numbered(conn, name, 200, size=100)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=300)
    got: list[Any] = []
    consume(channel, name, got)
    process_events_until(conn, lambda: bool(got) and got[-1][0] == 199)
    offsets = [offset for offset, _ in got]
    assert offsets[0] > 0, "the oldest segments are gone"
    assert offsets == list(range(offsets[0], 200)), "what is kept is whole and in order"
    assert len(offsets) * 100 < 5000 + 2 * 1000, "no more than the limit and a segment"


async def _aio_read(url: str, queue: str, want: int) -> list[int]:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=10)
        stream_queue = await channel.get_queue(queue, ensure=False)
        got: list[int] = []
        async with stream_queue.iterator(arguments={"x-stream-offset": 2}) as messages:
            async for message in messages:
                got.append(message.headers["x-stream-offset"])  # type: ignore[arg-type]
                await message.ack()
                if len(got) >= want:
                    break
        return got


def test_aio_pika_reads_from_an_offset(stream: Any, conn: BlockingConnection, broker: Any) -> None:
    """aio-pika's iterator cancels its consumer on leaving; what it received and had not
    yielded it nacks... so stop at a delivery it has yielded: the last one read."""
    name = stream()
    publish_numbered(conn, name, 5)
    assert asyncio.run(_aio_read(broker.url, name, 3)) == [2, 3, 4]


def test_deleting_a_stream_cancels_its_consumers(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    cancelled: list[Any] = []
    channel.add_on_cancel_callback(cancelled.append)
    consume(channel, name, [])
    conn.channel().queue_delete(name)
    process_events_until(conn, lambda: bool(cancelled))
    assert cancelled, "basic.cancel from the broker"
    assert channel.is_open and conn.is_open
