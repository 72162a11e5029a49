"""basic.qos prefetch (per consumer, global, zero, basic.get, ordering with consume).

Expected values were observed against RabbitMQ 3.10 and hard-coded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from functools import partial

import aio_pika
import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

import helpers
from helpers import Endpoint, Got, Unique, collect, pika_connect, settle


@pytest.fixture
def conn(broker: Endpoint) -> Iterator[pika.BlockingConnection]:
    with pika_connect(broker.url) as c:
        yield c


# Every wait in this file is for deliveries, and a timeout says so.
wait_for = partial(helpers.wait_for, message="timed out waiting for deliveries")


def filled_queue(ch: BlockingChannel, name: str, n: int) -> str:
    q = ch.queue_declare(name, exclusive=True).method.queue
    for i in range(1, n + 1):
        ch.basic_publish("", q, f"m{i}".encode())
    return q


def count(got: list[Got], consumer: str) -> int:
    return sum(1 for g in got if g.consumer == consumer)


def test_per_consumer_prefetch_stops_at_the_limit_until_an_ack(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    q = filled_queue(ch, unique("q"), 10)
    ch.basic_qos(prefetch_count=3)
    got: list[Got] = []
    ch.basic_consume(q, collect(got, "c"))
    wait_for(conn, lambda: len(got) == 3)
    settle(conn)
    assert [g.body for g in got] == ["m1", "m2", "m3"]

    ch.basic_ack(1)
    wait_for(conn, lambda: len(got) == 4)
    settle(conn)
    assert len(got) == 4

    ch.basic_ack(4, multiple=True)  # settles 2, 3 and 4: three more may come
    wait_for(conn, lambda: len(got) == 7)
    settle(conn)
    assert [g.body for g in got] == [f"m{i}" for i in range(1, 8)]
    assert ch.queue_declare(q, passive=True).method.message_count == 3


def test_per_consumer_prefetch_counts_each_consumer_separately(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    qa, qb = filled_queue(ch, unique("a"), 5), filled_queue(ch, unique("b"), 5)
    ch.basic_qos(prefetch_count=2)  # global=False is the default
    got: list[Got] = []
    ch.basic_consume(qa, collect(got, "A"))
    ch.basic_consume(qb, collect(got, "B"))
    wait_for(conn, lambda: len(got) == 4)
    settle(conn)
    assert (count(got, "A"), count(got, "B")) == (2, 2)


async def test_set_qos_with_aio_pika(broker: Endpoint, unique: Unique) -> None:
    conn = await aio_pika.connect(broker.url, timeout=5)
    async with conn:
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=2)
        q = await ch.declare_queue(unique("q"), exclusive=True)
        for i in range(1, 6):
            await ch.default_exchange.publish(
                aio_pika.Message(f"m{i}".encode()), routing_key=q.name
            )
        inbox: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
        await q.consume(inbox.put)
        first = [await asyncio.wait_for(inbox.get(), 5) for _ in range(2)]
        await asyncio.sleep(0.3)
        assert inbox.empty()
        assert [(m.body, m.delivery_tag) for m in first] == [(b"m1", 1), (b"m2", 2)]

        await first[0].ack()
        third = await asyncio.wait_for(inbox.get(), 5)
        assert (third.body, third.delivery_tag) == (b"m3", 3)
        await asyncio.sleep(0.3)
        assert inbox.empty()

        await third.reject(requeue=False)  # a dropped delivery frees its slot too
        fourth = await asyncio.wait_for(inbox.get(), 5)
        assert fourth.body == b"m4"


async def test_global_prefetch_limits_the_channel_across_consumers(
    broker: Endpoint, unique: Unique
) -> None:
    conn = await aio_pika.connect(broker.url, timeout=5)
    async with conn:
        ch = await conn.channel()
        # RabbitMQ 3.10: global=true is one limit shared by all consumers on the channel.
        await ch.set_qos(prefetch_count=3, global_=True)
        inbox: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
        for name in ("a", "b"):
            q = await ch.declare_queue(unique(name), exclusive=True)
            for i in range(5):
                await ch.default_exchange.publish(aio_pika.Message(f"{name}{i}".encode()), q.name)
            await q.consume(inbox.put)
        got = [await asyncio.wait_for(inbox.get(), 5) for _ in range(3)]
        await asyncio.sleep(0.3)
        assert inbox.empty()

        await got[0].ack()
        await asyncio.wait_for(inbox.get(), 5)
        await asyncio.sleep(0.3)
        assert inbox.empty()


def consume_four(ch: BlockingChannel, unique: Unique) -> list[Got]:
    queues = [filled_queue(ch, unique(f"q{i}"), 3) for i in range(4)]
    got: list[Got] = []
    for i, q in enumerate(queues):
        ch.basic_consume(q, collect(got, f"c{i}"))
    return got


def test_global_and_per_consumer_limits_apply_together(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1, global_qos=False)
    ch.basic_qos(prefetch_count=3, global_qos=True)
    got = consume_four(ch, unique)
    wait_for(conn, lambda: len(got) == 3)
    settle(conn)
    # Three deliveries for the channel, at most one per consumer.
    assert len(got) == 3
    assert sorted(count(got, f"c{i}") for i in range(4)) == [0, 1, 1, 1]


def test_per_consumer_qos_after_global_qos_lifts_the_channel_limit(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    ch.basic_qos(prefetch_count=3, global_qos=True)
    # RabbitMQ 3.10: basic.qos with global=false also removes the channel-wide limit.
    ch.basic_qos(prefetch_count=1, global_qos=False)
    got = consume_four(ch, unique)
    wait_for(conn, lambda: len(got) == 4)
    settle(conn)
    assert [count(got, f"c{i}") for i in range(4)] == [1, 1, 1, 1]


def test_prefetch_zero_means_no_limit(conn: pika.BlockingConnection, unique: Unique) -> None:
    ch = conn.channel()
    q = filled_queue(ch, unique("q"), 20)
    ch.basic_qos(prefetch_count=1)
    ch.basic_qos(prefetch_count=0)
    got: list[Got] = []
    ch.basic_consume(q, collect(got, "c"))
    wait_for(conn, lambda: len(got) == 20)
    assert [g.tag for g in got] == list(range(1, 21))


def test_latest_qos_before_consume_wins(conn: pika.BlockingConnection, unique: Unique) -> None:
    ch = conn.channel()
    q = filled_queue(ch, unique("q"), 10)
    ch.basic_qos(prefetch_count=5)
    ch.basic_qos(prefetch_count=2)
    got: list[Got] = []
    ch.basic_consume(q, collect(got, "c"))
    wait_for(conn, lambda: len(got) == 2)
    settle(conn)
    assert len(got) == 2


def test_prefetch_does_not_apply_to_basic_get(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    busy, polled = filled_queue(ch, unique("busy"), 3), filled_queue(ch, unique("polled"), 3)
    ch.basic_qos(prefetch_count=1, global_qos=True)
    got: list[Got] = []
    ch.basic_consume(busy, collect(got, "c"))
    wait_for(conn, lambda: len(got) == 1)  # the channel is at its limit now
    bodies = []
    for _ in range(3):
        method, _props, body = ch.basic_get(polled)
        assert method is not None
        bodies.append((body, method.delivery_tag))
    assert bodies == [(b"m1", 2), (b"m2", 3), (b"m3", 4)]
    settle(conn)
    assert len(got) == 1


def test_qos_after_consume_applies_only_to_later_consumers(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    early_q, late_q = filled_queue(ch, unique("early"), 5), filled_queue(ch, unique("late"), 5)
    got: list[Got] = []
    ch.basic_consume(early_q, collect(got, "early"))
    wait_for(conn, lambda: len(got) == 5)
    ch.basic_qos(prefetch_count=2)
    ch.basic_consume(late_q, collect(got, "late"))
    for i in range(6, 9):
        ch.basic_publish("", early_q, f"m{i}".encode())
    wait_for(conn, lambda: len(got) == 10)
    settle(conn)
    # RabbitMQ 3.10: a per-consumer limit is fixed at basic.consume; the early one stays unlimited.
    assert (count(got, "early"), count(got, "late")) == (8, 2)


def test_global_qos_after_consume_limits_existing_consumers(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    q = filled_queue(ch, unique("q"), 6)
    got: list[Got] = []
    ch.basic_consume(q, collect(got, "early"))
    wait_for(conn, lambda: len(got) == 6)
    # RabbitMQ 3.10: a channel-wide limit covers existing consumers and counts what is unacked.
    ch.basic_qos(prefetch_count=2, global_qos=True)
    late_q = filled_queue(ch, unique("late"), 6)
    ch.basic_publish("", q, b"m7")
    ch.basic_consume(late_q, collect(got, "late"))
    settle(conn)
    assert len(got) == 6
    ch.basic_ack(5, multiple=True)  # one left unacked: room for one more
    wait_for(conn, lambda: len(got) == 7)
    settle(conn)
    assert len(got) == 7


def test_no_ack_consumer_ignores_prefetch(conn: pika.BlockingConnection, unique: Unique) -> None:
    ch = conn.channel()
    q = filled_queue(ch, unique("q"), 10)
    ch.basic_qos(prefetch_count=1)
    got: list[Got] = []
    ch.basic_consume(q, collect(got, "c"), auto_ack=True)
    wait_for(conn, lambda: len(got) == 10)
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_requeued_delivery_goes_back_to_the_limited_consumer(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    q = filled_queue(ch, unique("q"), 3)
    ch.basic_qos(prefetch_count=1)
    got: list[Got] = []
    ch.basic_consume(q, collect(got, "c"))
    wait_for(conn, lambda: len(got) == 1)
    ch.basic_nack(1, requeue=True)
    wait_for(conn, lambda: len(got) == 2)
    settle(conn)
    assert [(g.tag, g.body, g.redelivered) for g in got] == [(1, "m1", False), (2, "m1", True)]


def test_prefetch_size_is_540_not_implemented(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    # RabbitMQ 3.10: a byte limit is refused with a connection error.
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
        ch.basic_qos(prefetch_size=1000, prefetch_count=0)
    assert (err.value.reply_code, err.value.reply_text) == (
        540,
        "NOT_IMPLEMENTED - prefetch_size!=0 (1000)",
    )
    assert conn.is_closed
