"""Consumers, delivery tags, basic.get, cancel, exclusivity, round robin, priorities.

Expected values were observed against RabbitMQ 3.10 and hard-coded.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import aio_pika
import amqp
import pika
import pika.exceptions
import pytest
from pamqp.commands import Basic

import helpers
from helpers import (
    Endpoint,
    Got,
    Unique,
    amqp_connect,
    collect,
    declare,
    pika_connect,
    publish,
    settle,
)


@pytest.fixture
def conn(broker: Endpoint) -> Iterator[pika.BlockingConnection]:
    with pika_connect(broker.url) as c:
        yield c


# Every wait in this file is for deliveries, and a timeout says so.
wait_for = partial(helpers.wait_for, message="timed out waiting for deliveries")


def test_delivery_tags_start_at_one_and_count_across_consumers_and_get(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    qa, qb = declare(ch, unique("a")), declare(ch, unique("b"))
    publish(ch, qa, "a1", "a2")
    publish(ch, qb, "b1", "b2")
    got: list[Got] = []

    first = ch.basic_get(qa)[0]
    assert first.delivery_tag == 1
    assert first.redelivered is False
    ch.basic_consume(qb, collect(got, "B"))
    wait_for(conn, lambda: len(got) == 2)
    assert ch.basic_get(qa)[0].delivery_tag == 4
    ch.basic_consume(qa, collect(got, "A"))
    publish(ch, qa, "a3")
    wait_for(conn, lambda: len(got) == 3)
    assert [(g.consumer, g.tag, g.body) for g in got] == [
        ("B", 2, "b1"),
        ("B", 3, "b2"),
        ("A", 5, "a3"),
    ]
    assert not any(g.redelivered for g in got)


def test_two_channels_have_independent_delivery_tags(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch1, ch2 = conn.channel(), conn.channel()
    q = declare(ch1, unique("q"))
    publish(ch1, q, *[f"m{i}" for i in range(5)])
    tags = [
        ch1.basic_get(q)[0].delivery_tag,
        ch2.basic_get(q)[0].delivery_tag,
        ch2.basic_get(q)[0].delivery_tag,
        ch1.basic_get(q)[0].delivery_tag,
        ch2.basic_get(q)[0].delivery_tag,
    ]
    assert tags == [1, 1, 2, 2, 3]
    # Each channel settles its own tag 2; neither is unknown on its channel.
    ch1.basic_ack(2, multiple=True)
    ch2.basic_ack(3, multiple=True)
    assert ch1.queue_declare(q, passive=True).method.message_count == 0


def test_empty_consumer_tag_gets_server_generated_ctag(broker: Endpoint, unique: Unique) -> None:
    conn = amqp_connect(broker.url)
    try:
        ch = conn.channel()
        q = ch.queue_declare(unique("q"), exclusive=True).queue
        seen: list[str] = []
        tag = ch.basic_consume(
            q, consumer_tag="", callback=lambda m: seen.append(m.delivery_info["consumer_tag"])
        )
        # RabbitMQ 3.10: 'amq.ctag-' followed by 22 url-safe base64 characters.
        assert tag.startswith("amq.ctag-")
        assert len(tag) > len("amq.ctag-")
        ch.basic_publish(amqp.Message("x"), routing_key=q)
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                conn.drain_events(timeout=0.2)
        assert seen == [tag]
    finally:
        if conn.connected:
            conn.close()


def test_duplicate_consumer_tag_on_channel_is_530_not_allowed(
    broker: Endpoint, unique: Unique
) -> None:
    conn = amqp_connect(broker.url)
    ch = conn.channel()
    q = ch.queue_declare(unique("q"), exclusive=True).queue
    ch.basic_consume(q, consumer_tag="dup", callback=lambda m: None)
    with pytest.raises(amqp.exceptions.NotAllowed) as err:
        ch.basic_consume(q, consumer_tag="dup", callback=lambda m: None)
    assert err.value.reply_code == 530
    assert err.value.reply_text == "NOT_ALLOWED - attempt to reuse consumer tag 'dup'"
    # RabbitMQ 3.10: this is a connection error; the whole connection is closed.
    with pytest.raises(amqp.exceptions.RecoverableConnectionError):
        conn.channel()


def test_same_consumer_tag_on_two_channels_is_allowed(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch1, ch2 = conn.channel(), conn.channel()
    q = declare(ch1, unique("q"))
    got: list[Got] = []
    ch1.basic_consume(q, collect(got, "one"), consumer_tag="same")
    ch2.basic_consume(q, collect(got, "two"), consumer_tag="same")
    publish(ch1, q, "a", "b")
    wait_for(conn, lambda: len(got) == 2)
    assert sorted(g.consumer for g in got) == ["one", "two"]
    assert ch1.queue_declare(q, passive=True).method.consumer_count == 2


def exclusive_use(queue: str) -> str:
    return f"ACCESS_REFUSED - queue '{queue}' in vhost '/' in exclusive use"


def test_second_consumer_on_exclusively_consumed_queue_is_refused(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    owner, other = conn.channel(), conn.channel()
    q = declare(owner, unique("q"))
    owner.basic_consume(q, lambda *a: None, exclusive=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        other.basic_consume(q, lambda *a: None)
    assert (err.value.reply_code, err.value.reply_text) == (403, exclusive_use(q))
    assert owner.is_open
    assert owner.queue_declare(q, passive=True).method.consumer_count == 1


def test_exclusive_consume_on_queue_with_a_consumer_is_refused(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    first, second = conn.channel(), conn.channel()
    q = declare(first, unique("q"))
    first.basic_consume(q, lambda *a: None)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
        second.basic_consume(q, lambda *a: None, exclusive=True)
    # RabbitMQ 3.10: same 403 text as the opposite case.
    assert (err.value.reply_code, err.value.reply_text) == (403, exclusive_use(q))


def test_cancelled_exclusive_consumer_frees_the_queue(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    owner, other = conn.channel(), conn.channel()
    q = declare(owner, unique("q"))
    owner.basic_consume(q, lambda *a: None, exclusive=True, consumer_tag="excl")
    owner.basic_cancel("excl")
    got: list[Got] = []
    other.basic_consume(q, collect(got, "other"))
    publish(owner, q, "after")
    wait_for(conn, lambda: len(got) == 1)
    assert got[0].body == "after"


async def test_cancel_returns_cancel_ok_and_stops_deliveries(
    broker: Endpoint, unique: Unique
) -> None:
    conn = await aio_pika.connect(broker.url, timeout=5)
    async with conn:
        ch = await conn.channel()
        q = await ch.declare_queue(unique("q"), exclusive=True)
        inbox: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
        tag = await q.consume(inbox.put, no_ack=True)
        await ch.default_exchange.publish(aio_pika.Message(b"before"), routing_key=q.name)
        assert (await asyncio.wait_for(inbox.get(), 5)).body == b"before"

        ok = await q.cancel(tag)
        assert isinstance(ok, Basic.CancelOk)
        assert ok.consumer_tag == tag
        await ch.default_exchange.publish(aio_pika.Message(b"after"), routing_key=q.name)
        await asyncio.sleep(0.3)
        assert inbox.empty()
        again = await ch.declare_queue(q.name, passive=True)
        assert again.declaration_result.message_count == 1
        assert again.declaration_result.consumer_count == 0


async def test_cancel_of_unknown_consumer_tag_is_ok(broker: Endpoint, unique: Unique) -> None:
    conn = await aio_pika.connect(broker.url, timeout=5)
    async with conn:
        ch = await conn.channel()
        q = await ch.declare_queue(unique("q"), exclusive=True)
        ok = await q.cancel("no-such-consumer")
        # RabbitMQ 3.10: cancel-ok echoing the unknown tag; the channel stays open.
        assert ok.consumer_tag == "no-such-consumer"
        assert not ch.is_closed
        await ch.default_exchange.publish(aio_pika.Message(b"x"), routing_key=q.name)
        msg = await q.get(no_ack=True, timeout=5)
        assert msg.body == b"x"


def test_basic_get_reports_remaining_count_then_get_empty(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    q = declare(ch, unique("q"))
    publish(ch, q, "m1", "m2", "m3")
    seen = []
    for _ in range(3):
        method, _props, body = ch.basic_get(q, auto_ack=True)
        assert method is not None
        seen.append((body, method.message_count, method.delivery_tag, method.redelivered))
    assert seen == [(b"m1", 2, 1, False), (b"m2", 1, 2, False), (b"m3", 0, 3, False)]
    # pika returns (None, None, None) only for basic.get-empty.
    assert ch.basic_get(q) == (None, None, None)


async def test_basic_get_with_aio_pika(broker: Endpoint, unique: Unique) -> None:
    conn = await aio_pika.connect(broker.url, timeout=5)
    async with conn:
        ch = await conn.channel()
        q = await ch.declare_queue(unique("q"), exclusive=True)
        for body in (b"one", b"two"):
            await ch.default_exchange.publish(aio_pika.Message(body), routing_key=q.name)
        msg = await q.get(timeout=5)
        assert (msg.body, msg.message_count, msg.delivery_tag) == (b"one", 1, 1)
        await msg.ack()
        msg = await q.get(timeout=5)
        assert (msg.body, msg.message_count, msg.delivery_tag) == (b"two", 0, 2)
        assert await q.get(fail=False, timeout=5) is None
        await msg.ack()


def test_no_ack_consumer_leaves_nothing_to_requeue(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    watcher = conn.channel()
    q = declare(watcher, unique("q"))
    publish(watcher, q, "m1", "m2", "m3")
    ch = conn.channel()
    got: list[Got] = []
    ch.basic_consume(q, collect(got, "auto"), auto_ack=True)
    wait_for(conn, lambda: len(got) == 3)
    assert [g.body for g in got] == ["m1", "m2", "m3"]
    assert watcher.queue_declare(q, passive=True).method.message_count == 0
    ch.close()
    # RabbitMQ 3.10: automatically acknowledged deliveries are gone when the channel closes.
    later: list[Got] = []
    watcher.basic_consume(q, collect(later, "later"))
    settle(conn)
    assert later == []
    assert watcher.queue_declare(q, passive=True).method.message_count == 0


def test_round_robin_between_two_consumers(conn: pika.BlockingConnection, unique: Unique) -> None:
    ch = conn.channel()
    q = declare(ch, unique("q"))
    got: list[Got] = []
    ch.basic_consume(q, collect(got, "A"))
    ch.basic_consume(q, collect(got, "B"))
    publish(ch, q, *[f"m{i}" for i in range(1, 7)])
    wait_for(conn, lambda: len(got) == 6)
    # RabbitMQ 3.10: strict alternation in the order the consumers registered.
    assert [(g.consumer, g.body) for g in got] == [
        ("A", "m1"),
        ("B", "m2"),
        ("A", "m3"),
        ("B", "m4"),
        ("A", "m5"),
        ("B", "m6"),
    ]
    assert [g.tag for g in got] == [1, 2, 3, 4, 5, 6]


def test_higher_priority_consumer_gets_everything_without_prefetch(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    low, high = conn.channel(), conn.channel()
    q = declare(low, unique("q"))
    got: list[Got] = []
    low.basic_consume(q, collect(got, "low"))
    high.basic_consume(q, collect(got, "high"), arguments={"x-priority": 10})
    publish(low, q, *[f"m{i}" for i in range(1, 7)])
    wait_for(conn, lambda: len(got) == 6)
    settle(conn, 0.2)
    assert [g.consumer for g in got] == ["high"] * 6


def test_priority_consumer_spills_to_lower_at_prefetch_limit(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    low, high = conn.channel(), conn.channel()
    q = declare(low, unique("q"))
    high.basic_qos(prefetch_count=2)
    got: list[Got] = []
    high.basic_consume(q, collect(got, "high"), arguments={"x-priority": 10})
    low.basic_consume(q, collect(got, "low"))
    publish(low, q, *[f"m{i}" for i in range(1, 7)])
    wait_for(conn, lambda: len(got) == 6)
    by = {name: [g.body for g in got if g.consumer == name] for name in ("high", "low")}
    assert by == {"high": ["m1", "m2"], "low": ["m3", "m4", "m5", "m6"]}

    # Once the high-priority consumer has capacity again it is preferred again.
    got.clear()
    high.basic_ack(2, multiple=True)
    high.queue_declare(q, passive=True)  # a round trip: the ack has been handled
    publish(high, q, "m7", "m8", "m9")
    wait_for(conn, lambda: len(got) == 3)
    by = {name: [g.body for g in got if g.consumer == name] for name in ("high", "low")}
    assert by == {"high": ["m7", "m8"], "low": ["m9"]}


def test_queue_deletion_cancels_consumer_from_server(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch, admin = conn.channel(), conn.channel()
    q = declare(ch, unique("q"))
    cancels: list[Any] = []
    ch.add_on_cancel_callback(cancels.append)
    ch.basic_consume(q, lambda *a: None, consumer_tag="doomed")
    admin.queue_delete(q)
    wait_for(conn, lambda: len(cancels) == 1)
    method = cancels[0].method
    assert isinstance(method, pika.spec.Basic.Cancel)
    # RabbitMQ 3.10: the server's basic.cancel carries nowait=true.
    assert (method.consumer_tag, method.nowait) == ("doomed", True)
    assert ch.is_open
    assert ch.consumer_tags == []
