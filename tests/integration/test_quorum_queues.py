"""Quorum queues (x-queue-type quorum) over AMQP 0-9-1, as RabbitMQ 3.10 has them on one node.

Every rule here was measured on RabbitMQ 3.10.8, and these tests pass against it as well
(KANIN_TEST_AMQP_URL): the refusals and their texts, the delivery count (absent on a
consumer's first delivery, 0 on a first basic.get, one more per return, the publisher's
own header replaced), which returns count (nack or reject with requeue, basic.recover, a
closed channel; not a reject without requeue), x-delivery-limit (N returns allowed, the
next dead-letters with reason delivery_limit; below 0 acts as 0, a non-integer as none),
where a returned message goes (the back of the queue without a limit; ahead of the never
delivered, in return order, with one), and the refusal of global QoS.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from helpers import delete_afterwards, process_events_until

Args = dict[str, Any]
QUORUM: Args = {"x-queue-type": "quorum"}


@pytest.fixture
def doomed(broker: Any) -> Iterator[list[str]]:
    yield from delete_afterwards(broker, lambda channel, name: channel.queue_delete(name))


@pytest.fixture
def quorum(conn: BlockingConnection, unique: Any, doomed: list[str]) -> Any:
    """declare(name_prefix, **arguments) -> the name of a new quorum queue."""

    def declare(prefix: str = "qq", **arguments: Any) -> str:
        name = unique(prefix)
        doomed.append(name)
        conn.channel().queue_declare(name, durable=True, arguments={**QUORUM, **arguments})
        return name

    return declare


def confirming(conn: BlockingConnection) -> BlockingChannel:
    channel = conn.channel()
    channel.confirm_delivery()  # every publish below is on the queue before it returns
    return channel


def refusal(conn: BlockingConnection, name: str, arguments: Args, **flags: Any) -> str:
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().queue_declare(name, arguments=arguments, **flags)
    assert info.value.reply_code == 406
    assert conn.is_open, "a refused declare closes the channel only"
    return str(info.value.reply_text)


def dead_lettered(channel: BlockingChannel, queue: str) -> tuple[Any, bytes]:
    """The next message of `queue`, polled for: RabbitMQ dead-letters asynchronously."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            return properties, body
        time.sleep(0.02)
    raise AssertionError(f"nothing was dead-lettered to {queue}")


def count_of(properties: Any) -> Any:
    return (properties.headers or {}).get("x-delivery-count")


# -- declaring ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        ({"durable": False}, "non-durable"),
        ({"durable": True, "exclusive": True}, "exclusive-owner"),
        ({"durable": True, "auto_delete": True}, "auto-delete"),
        ({"durable": True, "exclusive": True, "auto_delete": True}, "auto-delete"),
        ({"durable": False, "exclusive": True}, "exclusive-owner"),
    ],
)
def test_a_quorum_queue_is_durable_shared_and_kept(
    conn: BlockingConnection, unique: Any, flags: Args, named: str
) -> None:
    name = unique("flags")
    assert refusal(conn, name, QUORUM, **flags) == (
        f"PRECONDITION_FAILED - invalid property '{named}' for queue '{name}' in vhost '/'"
    )


@pytest.mark.parametrize(
    "arguments",
    [
        {"x-max-priority": 3},
        {"x-queue-mode": "lazy"},
        {"x-queue-version": 2},
        {"x-queue-master-locator": "min-masters"},
        {"x-max-age": "1D"},
        {"x-max-priority": 3, "x-queue-mode": "lazy"},  # the first, in the client's order
    ],
)
def test_arguments_of_other_queue_types_are_refused(
    conn: BlockingConnection, unique: Any, arguments: Args
) -> None:
    name = unique("args")
    first = next(iter(arguments))
    assert refusal(conn, name, {**QUORUM, **arguments}, durable=True) == (
        f"PRECONDITION_FAILED - invalid arg '{first}' for queue '{name}' in vhost '/' "
        "of queue type rabbit_quorum_queue"
    )


def test_the_arguments_are_checked_before_the_flags(conn: BlockingConnection, unique: Any) -> None:
    name = unique("order")
    text = refusal(conn, name, {**QUORUM, "x-max-priority": 3}, durable=False)
    assert "invalid arg 'x-max-priority'" in text


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"x-dead-letter-strategy": "bogus"}, "invalid_dlx_strategy"),
        ({"x-quorum-initial-group-size": 0}, "{value_zero,0}"),
        ({"x-quorum-initial-group-size": "x"}, '"expected integer, got longstr"'),
        ({"x-message-ttl": -1}, "{value_negative,-1}"),
        ({"x-overflow": "bogus"}, "invalid_overflow"),
    ],
)
def test_invalid_values_are_refused_in_rabbitmqs_words(
    conn: BlockingConnection, unique: Any, arguments: Args, error: str
) -> None:
    name = unique("value")
    key = next(iter(arguments))
    assert refusal(conn, name, {**QUORUM, **arguments}, durable=True) == (
        f"PRECONDITION_FAILED - invalid arg '{key}' for queue '{name}' in vhost '/': {error}"
    )


@pytest.mark.parametrize(
    "arguments",
    [
        {"x-delivery-limit": 3},
        {"x-delivery-limit": -1},
        {"x-delivery-limit": "x"},
        {"x-overflow": "reject-publish-dlx", "x-max-length": 1},
        {"x-overflow": "drop-head", "x-max-length-bytes": 10},
        {"x-message-ttl": 1000, "x-expires": 60000},
        {"x-single-active-consumer": True},
        {"x-quorum-initial-group-size": 3, "x-queue-leader-locator": "client-local"},
        {"x-max-in-memory-length": 10, "x-max-in-memory-bytes": 1000},
        {"x-dead-letter-strategy": "at-least-once"},
    ],
)
def test_the_arguments_quorum_queues_take(quorum: Any, arguments: Args) -> None:
    quorum("accepted", **arguments)


def test_a_classic_queue_redeclared_as_quorum_is_inequivalent(
    conn: BlockingConnection, unique: Any, doomed: list[str]
) -> None:
    name = unique("classic")
    doomed.append(name)
    conn.channel().queue_declare(name, durable=True)
    assert refusal(conn, name, QUORUM, durable=True) == (
        f"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue '{name}' in vhost "
        "'/': received the value 'quorum' of type 'longstr' but current is none"
    )


# -- counting deliveries --------------------------------------------------------------------


def test_basic_get_says_the_count_from_zero(conn: BlockingConnection, quorum: Any) -> None:
    name = quorum()
    channel = confirming(conn)
    channel.basic_publish("", name, b"m")
    seen = []
    for _ in range(3):
        method, properties, _ = channel.basic_get(name)
        seen.append((count_of(properties), method.redelivered))
        channel.basic_nack(method.delivery_tag, requeue=True)
    assert seen == [(0, False), (1, True), (2, True)]


def test_a_consumer_sees_no_count_first_then_one_two(conn: BlockingConnection, quorum: Any) -> None:
    name = quorum()
    channel = confirming(conn)
    channel.basic_publish("", name, b"m", pika.BasicProperties(headers={"k": 1}))
    seen: list[tuple[Any, bool]] = []

    def on_message(ch: BlockingChannel, method: Any, properties: Any, _body: bytes) -> None:
        seen.append((properties.headers, method.redelivered))
        ch.basic_nack(method.delivery_tag, requeue=len(seen) < 3)

    channel.basic_consume(name, on_message)
    process_events_until(conn, lambda: len(seen) == 3)
    assert seen == [
        ({"k": 1}, False),
        ({"k": 1, "x-delivery-count": 1}, True),
        ({"k": 1, "x-delivery-count": 2}, True),
    ]


def test_the_publishers_own_count_is_replaced(conn: BlockingConnection, quorum: Any) -> None:
    name = quorum()
    channel = confirming(conn)
    channel.basic_publish("", name, b"m", pika.BasicProperties(headers={"x-delivery-count": 7}))
    method, properties, _ = channel.basic_get(name)
    assert count_of(properties) == 0
    channel.basic_nack(method.delivery_tag, requeue=True)
    _, properties, _ = channel.basic_get(name, auto_ack=True)
    assert count_of(properties) == 1


def test_a_closed_channel_and_recover_count_as_returns(
    conn: BlockingConnection, quorum: Any
) -> None:
    name = quorum()
    confirming(conn).basic_publish("", name, b"m")
    first = conn.channel()
    first.basic_get(name)
    first.close()  # unacked: back to the queue, counted
    second = conn.channel()
    _, properties, _ = second.basic_get(name)
    assert count_of(properties) == 1
    second.basic_recover(requeue=True)
    method, properties, _ = second.basic_get(name)
    assert count_of(properties) == 2 and method.redelivered


def test_the_limit_allows_n_returns_then_dead_letters(
    conn: BlockingConnection, quorum: Any, unique: Any, doomed: list[str]
) -> None:
    dead = unique("dead")
    doomed.append(dead)
    conn.channel().queue_declare(dead)
    dlx: Args = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead}
    name = quorum(**{"x-delivery-limit": 2}, **dlx)
    channel = confirming(conn)
    channel.basic_publish("", name, b"poison", pika.BasicProperties(headers={"a": 1}))
    deliveries = 0
    while True:
        method, _, _ = channel.basic_get(name)
        if method is None:
            break
        deliveries += 1
        channel.basic_nack(method.delivery_tag, requeue=True)
    assert deliveries == 3
    properties, body = dead_lettered(channel, dead)
    assert body == b"poison"
    headers = properties.headers
    assert headers["x-first-death-reason"] == "delivery_limit"
    assert headers["x-first-death-queue"] == name
    (death,) = headers["x-death"]
    assert (death["reason"], death["queue"], death["count"]) == ("delivery_limit", name, 1)


@pytest.mark.parametrize(("limit", "deliveries"), [(-1, 1), (0, 1), ("x", 5), (True, 5)])
def test_a_limit_below_zero_acts_as_zero_and_a_non_integer_as_none(
    conn: BlockingConnection, quorum: Any, limit: Any, deliveries: int
) -> None:
    name = quorum(**{"x-delivery-limit": limit})
    channel = confirming(conn)
    channel.basic_publish("", name, b"m")
    seen = 0
    for _ in range(5):
        method, _, _ = channel.basic_get(name)
        if method is None:
            break
        seen += 1
        channel.basic_nack(method.delivery_tag, requeue=True)
    assert seen == deliveries


def test_a_reject_without_requeue_is_not_a_return(
    conn: BlockingConnection, quorum: Any, unique: Any, doomed: list[str]
) -> None:
    dead = unique("dead")
    doomed.append(dead)
    conn.channel().queue_declare(dead)
    name = quorum(
        **{"x-delivery-limit": 0, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead}
    )
    channel = confirming(conn)
    channel.basic_publish("", name, b"m")
    method, _, _ = channel.basic_get(name)
    channel.basic_reject(method.delivery_tag, requeue=False)
    properties, _ = dead_lettered(channel, dead)
    assert properties.headers["x-first-death-reason"] == "rejected"


# -- where returned messages go -------------------------------------------------------------


def bodies_left(channel: BlockingChannel, name: str) -> list[bytes]:
    out = []
    while True:
        method, _, body = channel.basic_get(name, auto_ack=True)
        if method is None:
            return out
        out.append(body)


def test_without_a_limit_a_returned_message_goes_to_the_back(
    conn: BlockingConnection, quorum: Any
) -> None:
    name = quorum()
    channel = confirming(conn)
    for body in (b"a", b"b", b"c"):
        channel.basic_publish("", name, body)
    method, _, _ = channel.basic_get(name)
    channel.basic_nack(method.delivery_tag, requeue=True)
    assert bodies_left(channel, name) == [b"b", b"c", b"a"]


def test_with_a_limit_returned_messages_go_first_in_the_order_they_came_back(
    conn: BlockingConnection, quorum: Any
) -> None:
    name = quorum(**{"x-delivery-limit": 5})
    channel = confirming(conn)
    for body in (b"0", b"1", b"2", b"3"):
        channel.basic_publish("", name, body)
    tags = [channel.basic_get(name)[0].delivery_tag for _ in range(3)]
    channel.basic_nack(tags[2], requeue=True)
    channel.basic_nack(tags[0], requeue=True)
    channel.basic_nack(tags[1], requeue=True)
    assert bodies_left(channel, name) == [b"2", b"0", b"1", b"3"]


# -- consumers ------------------------------------------------------------------------------


def test_a_consumer_under_a_global_prefetch_limit_is_refused(
    conn: BlockingConnection, quorum: Any
) -> None:
    name = quorum()
    channel = conn.channel()
    channel.basic_qos(prefetch_count=5, global_qos=True)
    with pytest.raises(ConnectionClosedByBroker) as info:
        channel.basic_consume(name, lambda *_: None)
    assert (info.value.reply_code, info.value.reply_text) == (
        540,
        f"NOT_IMPLEMENTED - queue '{name}' in vhost '/' does not support global qos",
    )


def test_a_transient_message_keeps_its_delivery_mode(conn: BlockingConnection, quorum: Any) -> None:
    name = quorum()
    channel = confirming(conn)
    channel.basic_publish("", name, b"m", pika.BasicProperties(delivery_mode=1))
    _, properties, _ = channel.basic_get(name, auto_ack=True)
    assert properties.delivery_mode == 1
