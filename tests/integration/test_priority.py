"""Priority queues (x-max-priority), as RabbitMQ 3.10 orders them (observed on 3.10.8).

Higher priority first, FIFO within a priority; a priority above the queue's maximum counts as
the maximum (but is delivered unchanged); no priority property means priority 0. A queue
without x-max-priority ignores priorities. Messages already delivered are not reordered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import aio_pika
import pytest
from pika.spec import BasicProperties

from helpers import AmqpSession, open_session

Unique = Callable[[str], str]
Args = dict[str, Any]
Item = tuple[str, int | None]  # (body, priority property)


class Amqp(AmqpSession):
    """The shared session plus this file's own publish and read helpers."""

    def publish(self, queue: str, items: list[Item]) -> None:
        for body, priority in items:
            props = BasicProperties(priority=priority)
            self.ch.basic_publish("", queue, body.encode(), props)

    def drain(self, queue: str) -> list[Item]:
        """basic.get (auto-ack) until get-empty: (body, priority property) in delivery order."""
        got: list[Item] = []
        while True:
            method, props, body = self.ch.basic_get(queue, auto_ack=True)
            if method is None:
                return got
            got.append((body.decode(), props.priority))


@pytest.fixture
def amqp(broker: Any) -> Iterator[Amqp]:
    yield from open_session(Amqp, broker)


MIXED: list[Item] = [("a", 1), ("b", 5), ("c", None), ("d", 10), ("e", 5), ("f", 0), ("g", 255)]


def test_higher_priority_first_and_fifo_within_a_priority(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("prio"), {"x-max-priority": 10})
    amqp.publish(queue, MIXED)
    # g (255) counts as 10 and came after d; c (none) counts as 0 and came before f.
    assert amqp.drain(queue) == [
        ("d", 10),
        ("g", 255),
        ("b", 5),
        ("e", 5),
        ("a", 1),
        ("c", None),
        ("f", 0),
    ]


def test_priorities_above_the_maximum_count_as_the_maximum(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("prio"), {"x-max-priority": 5})
    amqp.publish(queue, [("p3", 3), ("p9", 9), ("p5", 5), ("p7", 7), ("p4", 4)])
    assert amqp.drain(queue) == [("p9", 9), ("p5", 5), ("p7", 7), ("p4", 4), ("p3", 3)]


def test_no_priority_is_priority_zero(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("prio"), {"x-max-priority": 3})
    amqp.publish(queue, [("n1", None), ("z1", 0), ("n2", None), ("one", 1), ("z2", 0)])
    assert [body for body, _ in amqp.drain(queue)] == ["one", "n1", "z1", "n2", "z2"]


def test_full_range_up_to_255(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("prio"), {"x-max-priority": 255})
    amqp.publish(queue, [("p0", 0), ("p254", 254), ("p1", 1), ("p255", 255), ("p128", 128)])
    assert [body for body, _ in amqp.drain(queue)] == ["p255", "p254", "p128", "p1", "p0"]


@pytest.mark.parametrize("arguments", [None, {"x-max-priority": 0}])
def test_without_priorities_the_queue_is_fifo(
    amqp: Amqp, unique: Unique, arguments: Args | None
) -> None:
    # RabbitMQ 3.10 accepts x-max-priority 0: every priority then counts as 0.
    queue = amqp.queue(unique("fifo"), arguments)
    amqp.publish(queue, MIXED)
    assert amqp.drain(queue) == MIXED


def test_message_count_covers_all_priorities(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("prio"), {"x-max-priority": 3})
    amqp.publish(queue, MIXED)
    ok = amqp.ch.queue_declare(queue, passive=True).method
    assert ok.message_count == len(MIXED)
    assert amqp.ch.queue_purge(queue).method.message_count == len(MIXED)
    assert amqp.drain(queue) == []


def test_requeued_messages_go_back_to_the_front_of_their_priority(
    amqp: Amqp, unique: Unique
) -> None:
    queue = amqp.queue(unique("prio"), {"x-max-priority": 10})
    amqp.publish(queue, [("l1", 1), ("h1", 9), ("l2", 1), ("h2", 9)])
    tags = []
    for expected in ("h1", "h2", "l1"):
        method, _, body = amqp.ch.basic_get(queue)
        assert method is not None and body.decode() == expected
        tags.append(method.delivery_tag)
    amqp.ch.basic_nack(tags[-1], multiple=True, requeue=True)
    amqp.wait_count(queue, 4)
    got = []
    while True:
        method, _, body = amqp.ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        got.append((body.decode(), method.redelivered))
    assert got == [("h1", True), ("h2", True), ("l1", True), ("l2", False)]


def test_a_consumer_with_prefetch_gets_the_next_highest_after_each_ack(
    amqp: Amqp, unique: Unique
) -> None:
    queue = amqp.queue(unique("prio"), {"x-max-priority": 10})
    amqp.publish(queue, [("x1", 1), ("x2", 1), ("x3", 1)])
    consumer = amqp.conn.channel()
    consumer.basic_qos(prefetch_count=1)
    got: list[str] = []
    consumer.basic_consume(queue, lambda _c, _m, _p, body: got.append(body.decode()))
    amqp.conn.sleep(0.1)
    assert got == ["x1"]
    amqp.publish(queue, [("hi", 9)])  # arrives while x1 is in flight: it overtakes x2 and x3
    amqp.conn.sleep(0.1)
    assert got == ["x1"]
    for expected in (["x1", "hi"], ["x1", "hi", "x2"], ["x1", "hi", "x2", "x3"]):
        consumer.basic_ack(0, multiple=True)
        amqp.conn.sleep(0.1)
        assert got == expected


def test_a_consumer_with_room_gets_messages_as_they_arrive(amqp: Amqp, unique: Unique) -> None:
    # Priority only orders messages that wait in the queue; with room in the prefetch window
    # each message is delivered as soon as it is published, whatever its priority.
    queue = amqp.queue(unique("prio"), {"x-max-priority": 10})
    consumer = amqp.conn.channel()
    consumer.basic_qos(prefetch_count=10)
    got: list[str] = []
    consumer.basic_consume(queue, lambda _c, _m, _p, body: got.append(body.decode()))
    amqp.publish(queue, [("low", 1), ("high", 9), ("none", None)])
    amqp.conn.sleep(0.2)
    assert got == ["low", "high", "none"]


async def test_aio_pika_backlog_is_consumed_in_priority_order(amqp: Amqp, unique: Unique) -> None:
    name = amqp.queue(unique("prio"), {"x-max-priority": 10})
    amqp.publish(name, MIXED)
    received: list[Item] = []
    done = asyncio.Event()
    connection = await aio_pika.connect(amqp.url)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=2)
        queue = await channel.declare_queue(name, passive=True)

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            received.append((message.body.decode(), message.priority))
            await message.ack()
            if len(received) == len(MIXED):
                done.set()

        await queue.consume(on_message)
        await asyncio.wait_for(done.wait(), timeout=5)
    bodies = [body for body, _ in received]
    assert bodies == ["d", "g", "b", "e", "a", "c", "f"]
    # aio-pika reports a missing priority as None or 0 depending on version; pika is exact.
    assert received[1] == ("g", 255)


def test_drop_head_drops_the_next_message_to_deliver(amqp: Amqp, unique: Unique) -> None:
    # RabbitMQ 3.10: in a priority queue the "head" drop-head drops is the message that would
    # be delivered next, i.e. the oldest of the highest priority, not the oldest overall.
    queue = amqp.queue(unique("prio"), {"x-max-priority": 10, "x-max-length": 2})
    amqp.publish(queue, [("l1", 1), ("h1", 9), ("l2", 1), ("h2", 9)])
    assert amqp.drain(queue) == [("l1", 1), ("l2", 1)]


def test_expired_messages_are_skipped_in_every_priority(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("prio"), {"x-max-priority": 10})
    for body, priority, expiration in [
        ("hi-expired", 9, "50"),
        ("lo", 1, None),
        ("lo-expired", 1, "50"),
        ("lo2", 1, None),
    ]:
        props = BasicProperties(priority=priority, expiration=expiration)
        amqp.ch.basic_publish("", queue, body.encode(), props)
    amqp.conn.sleep(0.2)
    assert amqp.drain(queue) == [("lo", 1), ("lo2", 1)]
