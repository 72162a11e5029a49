"""Stream queues (x-queue-type stream) over AMQP 0-9-1: declaring, publishing, consuming.

Every rule here was measured on RabbitMQ 3.10.8 and these tests pass against it too
(KANIN_TEST_AMQP_URL), except those marked kanin_only, which say where kanin differs:
- a stream is durable, not exclusive, not auto-delete, not server-named; it takes
  x-max-length-bytes, x-max-age ('1h', '7D': a positive number and one of Y M D h m s),
  x-stream-max-segment-size-bytes (at most 3,000,000,000), x-initial-cluster-size and
  x-queue-leader-locator, and refuses every other argument;
- a consumer needs a per-consumer prefetch (406 without), may not auto-ack (540), nor
  sit under a global prefetch (540); x-priority is refused; exclusive is ignored;
- x-stream-offset: first, last (the start of the newest chunk), next (the default), an
  offset (below the first means the first), an AMQP timestamp, an interval ('30s');
- each delivery carries x-stream-offset; redelivered is false; the prefetch is credit;
- basic.get, basic.nack, basic.reject and queue.purge close the connection with 540. So
  pika's BlockingChannel.basic_cancel, which rejects the deliveries it has not yet
  handed to the callback, costs the connection on RabbitMQ 3.10, and on kanin too.
Where RabbitMQ fails with 541 INTERNAL_ERROR on a malformed x-stream-offset or x-max-age
('abc', 'FIRST', '-1h', a float), kanin closes the channel with 406 naming the argument.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ChannelClosedByBroker

from helpers import STREAM, process_events_until, publish_numbered

Args = dict[str, Any]


def read(
    conn: BlockingConnection, queue: str, want: int, offset: Any = "first", prefetch: int = 100
) -> list[tuple[int, bytes]]:
    """(x-stream-offset, body) of the first `want` deliveries from `offset`, each acked;
    the channel is closed afterwards (so no cancel, which would reject)."""
    channel = conn.channel()
    channel.basic_qos(prefetch_count=prefetch)
    got: list[tuple[int, bytes]] = []

    def on_message(ch: BlockingChannel, method: Any, properties: Any, body: bytes) -> None:
        got.append((properties.headers["x-stream-offset"], body))
        ch.basic_ack(method.delivery_tag)

    arguments = {} if offset is None else {"x-stream-offset": offset}
    channel.basic_consume(queue, on_message, arguments=arguments)
    process_events_until(conn, lambda: len(got) >= want)
    channel.close()
    return got


def refused(conn: BlockingConnection, name: str, arguments: Args, **flags: Any) -> str:
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().queue_declare(name, arguments=arguments, **flags)
    assert info.value.reply_code == 406
    assert conn.is_open, "a refused declare closes the channel only"
    return str(info.value.reply_text)


# -- declaring ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        ({"durable": False}, "non-durable"),
        ({"durable": True, "exclusive": True}, "exclusive-owner"),
        ({"durable": True, "auto_delete": True}, "auto-delete"),
        ({"durable": False, "exclusive": True, "auto_delete": True}, "auto-delete"),
    ],
)
def test_a_stream_is_durable_shared_and_kept(
    conn: BlockingConnection, unique: Any, flags: Args, named: str
) -> None:
    name = unique("flags")
    text = refused(conn, name, STREAM, **flags)
    assert text == (
        f"PRECONDITION_FAILED - invalid property '{named}' for queue '{name}' in vhost '/'"
    )


def test_a_stream_is_never_server_named(conn: BlockingConnection) -> None:
    text = refused(conn, "", STREAM, durable=True)
    assert text == (
        "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_stream_queue"
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("x-max-priority", 10),
        ("x-queue-mode", "lazy"),
        ("x-dead-letter-exchange", "amq.fanout"),
        ("x-message-ttl", 1000),
        ("x-expires", 100000),
        ("x-overflow", "reject-publish"),
        ("x-single-active-consumer", True),
        ("x-delivery-limit", 5),
        ("x-max-length", 10),
        ("x-queue-master-locator", "min-masters"),
        ("x-quorum-initial-group-size", 1),
        ("x-queue-version", 2),
    ],
)
def test_arguments_streams_do_not_take(
    conn: BlockingConnection, unique: Any, key: str, value: Any
) -> None:
    name = unique("args")
    text = refused(conn, name, {**STREAM, key: value}, durable=True)
    assert text == (
        f"PRECONDITION_FAILED - invalid arg '{key}' for queue '{name}' in vhost '/' "
        "of queue type rabbit_stream_queue"
    )


@pytest.mark.parametrize(
    "arguments",
    [
        {"x-max-length-bytes": 1_000_000},
        {"x-max-length-bytes": 0},
        {"x-max-age": "1h"},
        {"x-max-age": "7D"},
        {"x-max-age": "01h"},
        {"x-max-age": "1Y"},
        {"x-stream-max-segment-size-bytes": 0},
        {"x-stream-max-segment-size-bytes": 3_000_000_000},
        {"x-initial-cluster-size": 3},
        {"x-queue-leader-locator": "client-local"},
        {"x-queue-leader-locator": "balanced"},
    ],
)
def test_arguments_streams_take(stream: Any, conn: BlockingConnection, arguments: Args) -> None:
    name = stream(**arguments)
    ok = conn.channel().queue_declare(name, passive=True)
    assert ok.method.message_count == 0


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        ("x-max-age", "0s", "invalid_max_age"),
        ("x-max-age", "10", "invalid_max_age"),
        ("x-max-age", "1H", "invalid_max_age"),
        ("x-max-age", "1.5h", "invalid_max_age"),
        ("x-max-age", "1 h", "invalid_max_age"),
        ("x-max-age", 10, "{unacceptable_type,signedint}"),
        ("x-max-age", b"1h", "{unacceptable_type,binary}"),
        ("x-max-length-bytes", -1, "{value_negative,-1}"),
        ("x-max-length-bytes", "1000", '"expected integer, got longstr"'),
        ("x-stream-max-segment-size-bytes", -1, "{value_negative,-1}"),
        ("x-initial-cluster-size", 0, "{value_zero,0}"),
        ("x-queue-leader-locator", "bogus", "invalid_queue_locator_arg"),
        ("x-queue-leader-locator", 1, "{unacceptable_type,signedint}"),
    ],
)
def test_malformed_stream_arguments(
    conn: BlockingConnection, unique: Any, key: str, value: Any, error: str
) -> None:
    name = unique("bad")
    text = refused(conn, name, {**STREAM, key: value}, durable=True)
    assert text == (
        f"PRECONDITION_FAILED - invalid arg '{key}' for queue '{name}' in vhost '/': {error}"
    )


def test_segment_size_above_three_gigabytes(conn: BlockingConnection, unique: Any) -> None:
    arguments = {**STREAM, "x-stream-max-segment-size-bytes": 3_000_000_001}
    text = refused(conn, unique("big"), arguments, durable=True)
    assert text == "PRECONDITION_FAILED - Exceeded max value for x-stream-max-segment-size-bytes"


@pytest.mark.kanin_only
@pytest.mark.parametrize("age", ["abc", "", "-1h"])
def test_max_age_rabbitmq_crashes_on_is_refused_by_name(
    conn: BlockingConnection, unique: Any, age: str
) -> None:
    """RabbitMQ 3.10 closes the connection with 541 INTERNAL_ERROR for these."""
    name = unique("bad")
    text = refused(conn, name, {**STREAM, "x-max-age": age}, durable=True)
    assert text.endswith(
        f"invalid arg 'x-max-age' for queue '{name}' in vhost '/': invalid_max_age"
    )


def test_redeclared_with_another_max_age(stream: Any, conn: BlockingConnection) -> None:
    name = stream(**{"x-max-age": "1h"})
    text = refused(conn, name, {**STREAM, "x-max-age": "2h"}, durable=True)
    assert text == (
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-age' for queue '{name}' in vhost '/': "
        "received '2h' but current is '1h'"
    )


# -- publishing and consuming -------------------------------------------------------------


def test_every_delivery_carries_its_offset(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    publish_numbered(conn, name, 5)
    assert read(conn, name, 5) == [(n, b"m%d" % n) for n in range(5)]


def test_messages_stay_for_every_reader(stream: Any, conn: BlockingConnection) -> None:
    """An ack removes nothing: a second reader from first gets all of them again."""
    name = stream()
    publish_numbered(conn, name, 20)
    assert [offset for offset, _ in read(conn, name, 20)] == list(range(20))
    assert [offset for offset, _ in read(conn, name, 20)] == list(range(20))


def test_properties_exchange_and_routing_key_are_kept(
    stream: Any, conn: BlockingConnection
) -> None:
    import pika

    name = stream()
    channel = conn.channel()
    channel.queue_bind(name, "amq.topic", "a.*")
    channel.confirm_delivery()
    sent = pika.BasicProperties(
        content_type="application/json", message_id="m-1", headers={"a": "b"}, priority=7
    )
    channel.basic_publish("amq.topic", "a.b", b"body", sent)
    channel.basic_qos(prefetch_count=10)
    got: list[Any] = []
    channel.basic_consume(
        name,
        lambda ch, method, properties, body: got.append((method, properties, body)),
        arguments={"x-stream-offset": "first"},
    )
    process_events_until(conn, lambda: bool(got))
    method, properties, body = got[0]
    assert (method.exchange, method.routing_key, method.redelivered) == ("amq.topic", "a.b", False)
    assert body == b"body"
    assert (properties.content_type, properties.message_id, properties.priority) == (
        "application/json",
        "m-1",
        7,
    )
    assert properties.headers == {"a": "b", "x-stream-offset": 0}


def test_default_offset_is_next(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    publish_numbered(conn, name, 3)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    got: list[int] = []
    channel.basic_consume(
        name, lambda ch, m, p, b: got.append(p.headers["x-stream-offset"]), auto_ack=False
    )
    conn.process_data_events(time_limit=0.3)
    assert got == [], "nothing published before the consumer came"
    publish_numbered(conn, name, 2, start=3)
    process_events_until(conn, lambda: len(got) >= 2)
    assert got == [3, 4]


@pytest.mark.parametrize(
    ("offset", "first"),
    [("first", 0), (0, 0), (7, 7), (-5, 0), ("last", 11), ("next", None)],
)
def test_where_a_consumer_starts(
    stream: Any, conn: BlockingConnection, offset: Any, first: int | None
) -> None:
    """Ten messages one at a time (one chunk each), then two in one burst... the last
    chunk on RabbitMQ is whatever its writer batched, so 'last' is checked after a single
    confirmed publish: it is that message."""
    name = stream()
    publish_numbered(conn, name, 11)
    publish_numbered(conn, name, 1, start=11)
    got = read(conn, name, 1, offset=offset)
    if first is None:
        assert got == []
    else:
        assert got and got[0][0] == first


def test_an_offset_past_the_end_waits_for_it(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    publish_numbered(conn, name, 3)
    channel = conn.channel()
    channel.basic_qos(prefetch_count=10)
    got: list[int] = []
    channel.basic_consume(
        name,
        lambda ch, m, p, b: got.append(p.headers["x-stream-offset"]),
        arguments={"x-stream-offset": 5},
    )
    publish_numbered(conn, name, 4, start=3)
    process_events_until(conn, lambda: len(got) >= 2)
    assert got == [5, 6]


def test_a_timestamp_starts_at_what_came_after(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    publish_numbered(conn, name, 3)
    time.sleep(1.1)  # AMQP timestamps count whole seconds
    since = datetime.datetime.now(tz=datetime.UTC)
    time.sleep(1.1)
    publish_numbered(conn, name, 2, start=3)
    got = read(conn, name, 2, offset=since.replace(tzinfo=None))
    assert [offset for offset, _ in got] == [3, 4]


def test_an_interval_reaches_back_from_now(stream: Any, conn: BlockingConnection) -> None:
    name = stream()
    publish_numbered(conn, name, 4)
    assert [offset for offset, _ in read(conn, name, 4, offset="1h")] == [0, 1, 2, 3]
