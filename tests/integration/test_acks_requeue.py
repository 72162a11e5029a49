"""basic.recover, and requeueing of unacked deliveries when a channel or connection goes.

Expected values were observed against RabbitMQ 3.10 and hard-coded.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator

import amqp
import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from helpers import (
    Endpoint,
    Got,
    Unique,
    amqp_connect,
    assert_closed_for_unknown_tag,
    collect,
    declare,
    drain_redelivered,
    pika_connect,
    publish,
    settle,
    wait_for,
    wait_ready,
)


@pytest.fixture
def conn(broker: Endpoint) -> Iterator[pika.BlockingConnection]:
    with pika_connect(broker.url) as c:
        yield c


@pytest.fixture
def shared_queue(broker: Endpoint, unique: Unique) -> Iterator[str]:
    """A plain queue that several connections can use; deleted afterwards."""
    name = unique("shared")
    c = pika_connect(broker.url)
    try:
        c.channel().queue_declare(name)
        yield name
    finally:
        if not c.is_open:
            c = pika_connect(broker.url)
        c.channel().queue_delete(name)
        c.close()


# --- basic.recover ---


def test_recover_with_requeue_redelivers_unacked(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    q = declare(ch, unique("q"))
    publish(ch, q, "m1", "m2", "m3")
    got: list[Got] = []
    ch.basic_consume(q, collect(got, "c"))
    wait_for(conn, lambda: len(got) == 3)
    ch.basic_ack(2)
    ch.basic_recover(requeue=True)
    wait_for(conn, lambda: len(got) == 5)
    assert [(g.tag, g.body, g.redelivered) for g in got] == [
        (1, "m1", False),
        (2, "m2", False),
        (3, "m3", False),
        (4, "m1", True),
        (5, "m3", True),
    ]


def consume_two(ch: BlockingChannel, q: str, got: list[Got]) -> None:
    """Consumers "ctag-b" then "ctag-a" on q: registration order is the reverse of tag order."""
    for tag in ("ctag-b", "ctag-a"):
        ch.basic_consume(q, collect(got, tag), consumer_tag=tag)


def bodies_of(got: list[Got]) -> list[tuple[str, str, bool]]:
    return [(g.consumer, g.body, g.redelivered) for g in got]


def test_recover_requeues_one_consumer_at_a_time(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    q = declare(ch, unique("q"))
    ch.basic_qos(prefetch_count=2)
    publish(ch, q, *(f"m{n}" for n in range(8)))
    got: list[Got] = []
    consume_two(ch, q, got)
    wait_for(conn, lambda: len(got) == 4)
    assert bodies_of(got) == [
        ("ctag-b", "m0", False),
        ("ctag-b", "m1", False),
        ("ctag-a", "m2", False),
        ("ctag-a", "m3", False),
    ]
    got.clear()
    ch.basic_recover(requeue=True)
    wait_for(conn, lambda: len(got) == 4)
    # RabbitMQ 3.10 requeues per consumer, in consumer tag order, and the queue dispatches
    # after each: ctag-a alone has room when its own messages come back, so it gets them
    # again (ahead of m0 and m1, still held by ctag-b), then ctag-b gets its own; m4-m7 wait.
    assert bodies_of(got) == [
        ("ctag-a", "m2", True),
        ("ctag-a", "m3", True),
        ("ctag-b", "m0", True),
        ("ctag-b", "m1", True),
    ]


def test_nack_multiple_requeues_one_consumer_at_a_time(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    q = declare(ch, unique("q"))
    ch.basic_qos(prefetch_count=3)
    got: list[Got] = []
    consume_two(ch, q, got)
    publish(ch, q, *(f"m{n}" for n in range(9)))
    wait_for(conn, lambda: len(got) == 6)
    assert [(g.consumer, g.body) for g in got] == [
        ("ctag-b", "m0"),
        ("ctag-a", "m1"),
        ("ctag-b", "m2"),
        ("ctag-a", "m3"),
        ("ctag-b", "m4"),
        ("ctag-a", "m5"),
    ]
    got.clear()
    ch.basic_nack(0, multiple=True, requeue=True)
    wait_for(conn, lambda: len(got) == 6)
    # As basic.recover: not round-robin over the returned messages, one consumer's at a time.
    assert bodies_of(got) == [
        ("ctag-a", "m1", True),
        ("ctag-a", "m3", True),
        ("ctag-a", "m5", True),
        ("ctag-b", "m0", True),
        ("ctag-b", "m2", True),
        ("ctag-b", "m4", True),
    ]


def test_recover_offers_each_group_to_every_consumer_with_room(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch, other = conn.channel(), conn.channel()
    q = declare(ch, unique("q"))
    ch.basic_qos(prefetch_count=2)
    got: list[Got] = []
    consume_two(ch, q, got)
    publish(ch, q, "m0", "m1", "m2", "m3")
    wait_for(conn, lambda: len(got) == 4)
    other.basic_consume(q, collect(got, "other"), consumer_tag="ctag-o")
    got.clear()
    ch.basic_recover(requeue=True)
    wait_for(conn, lambda: len(got) == 4)
    # ctag-a's m1, m3 come back first and go to ctag-a and ctag-o in turn; then ctag-b's m0,
    # m2 go to the consumers ahead of ctag-b in the turns, ctag-a and ctag-o again. (Only
    # per consumer: the client library does not keep the order across channels.)
    by_consumer = {
        tag: [g.body for g in got if g.consumer == tag] for tag in ("ctag-a", "ctag-b", "other")
    }
    assert by_consumer == {"ctag-a": ["m1", "m0"], "ctag-b": [], "other": ["m3", "m2"]}
    assert all(g.redelivered for g in got)


def test_recover_without_requeue_is_540_not_implemented(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    declare(ch, unique("q"))
    # RabbitMQ 3.10: requeue=false is refused with a connection error.
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
        ch.basic_recover(requeue=False)
    assert (err.value.reply_code, err.value.reply_text) == (540, "NOT_IMPLEMENTED - requeue=false")
    assert conn.is_closed


def drain_amqp(conn: amqp.Connection, cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting"
        with contextlib.suppress(TimeoutError):
            conn.drain_events(timeout=0.05)


def test_recover_async(broker: Endpoint, unique: Unique) -> None:
    conn = amqp_connect(broker.url)
    ch = conn.channel()
    q = ch.queue_declare(unique("q"), exclusive=True).queue
    for body in ("m1", "m2"):
        ch.basic_publish(amqp.Message(body), routing_key=q)
    got: list[tuple[int, str, bool]] = []

    def on_message(m: amqp.Message) -> None:
        got.append((m.delivery_info["delivery_tag"], m.body, m.delivery_info["redelivered"]))

    ch.basic_consume(q, callback=on_message)
    drain_amqp(conn, lambda: len(got) == 2)
    ch.basic_recover_async(requeue=True)  # no reply method exists for recover-async
    drain_amqp(conn, lambda: len(got) == 4)
    assert got == [(1, "m1", False), (2, "m2", False), (3, "m1", True), (4, "m2", True)]
    ch.basic_recover_async(requeue=False)
    with pytest.raises(amqp.exceptions.AMQPNotImplementedError) as err:
        drain_amqp(conn, lambda: False)
    assert (err.value.reply_code, err.value.reply_text) == (540, "NOT_IMPLEMENTED - requeue=false")


# --- requeue of unacked deliveries when their channel or connection goes away ---


@pytest.mark.parametrize("how", ["channel_close", "connection_close", "channel_error"])
def test_unacked_deliveries_are_requeued_to_another_consumer(
    broker: Endpoint, shared_queue: str, how: str
) -> None:
    victim = pika_connect(broker.url)
    survivor = pika_connect(broker.url)
    try:
        vch = victim.channel()
        publish(vch, shared_queue, "m1", "m2", "m3")
        first: list[Got] = []
        vch.basic_consume(shared_queue, collect(first, "victim"))
        wait_for(victim, lambda: len(first) == 3)
        assert [(g.body, g.redelivered) for g in first] == [
            ("m1", False),
            ("m2", False),
            ("m3", False),
        ]
        vch.basic_ack(2)

        later: list[Got] = []
        survivor.channel().basic_consume(shared_queue, collect(later, "survivor"))
        settle(survivor, 0.2)
        assert later == []

        if how == "channel_close":
            vch.close()
        elif how == "connection_close":
            victim.close()
        else:
            vch.basic_ack(99)
            assert_closed_for_unknown_tag(vch, shared_queue, 99)

        wait_for(survivor, lambda: len(later) == 2)
        assert [(g.body, g.redelivered) for g in later] == [("m1", True), ("m3", True)]
    finally:
        for c in (victim, survivor):
            if c.is_open:
                c.close()


def test_unacked_deliveries_are_requeued_when_the_tcp_connection_drops(
    broker: Endpoint, shared_queue: str, conn: pika.BlockingConnection
) -> None:
    victim = amqp_connect(broker.url)
    vch = victim.channel()
    for body in ("m1", "m2"):
        vch.basic_publish(amqp.Message(body), routing_key=shared_queue)
    tags: list[int] = []
    vch.basic_consume(shared_queue, callback=lambda m: tags.append(m.delivery_tag))
    drain_amqp(victim, lambda: len(tags) == 2)
    # No connection.close: the socket just goes away.
    victim.transport.sock.shutdown(socket.SHUT_RDWR)
    victim.transport.sock.close()

    later: list[Got] = []
    conn.channel().basic_consume(shared_queue, collect(later, "survivor"))
    wait_for(conn, lambda: len(later) == 2)
    assert [(g.body, g.redelivered) for g in later] == [("m1", True), ("m2", True)]


def test_no_ack_deliveries_are_not_requeued_on_close(
    broker: Endpoint, shared_queue: str, conn: pika.BlockingConnection
) -> None:
    victim = pika_connect(broker.url)
    try:
        vch, manual = victim.channel(), victim.channel()
        publish(manual, shared_queue, "manual", "auto1", "auto2")
        method, _props, body = manual.basic_get(shared_queue)
        assert (method.delivery_tag, body) == (1, b"manual")
        auto: list[Got] = []
        vch.basic_consume(shared_queue, collect(auto, "auto"), auto_ack=True)
        wait_for(victim, lambda: len(auto) == 2)
        assert [g.body for g in auto] == ["auto1", "auto2"]
    finally:
        victim.close()
    watcher = conn.channel()
    # RabbitMQ 3.10: only the manually acknowledged delivery comes back.
    wait_ready(conn, watcher, shared_queue, 1)
    settle(conn, 0.2)
    assert drain_redelivered(watcher, shared_queue) == [("manual", True)]
