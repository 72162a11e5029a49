"""basic.ack / nack / reject, multiple, requeue, and unknown or foreign tags.

Expected values were observed against RabbitMQ 3.10 and hard-coded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aio_pika
import aiormq.exceptions
import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from helpers import (
    Endpoint,
    Unique,
    assert_closed_for_unknown_tag,
    declare,
    drain_redelivered,
    pika_connect,
    publish,
    wait_ready,
)


@pytest.fixture
def conn(broker: Endpoint) -> Iterator[pika.BlockingConnection]:
    with pika_connect(broker.url) as c:
        yield c


def get_tags(ch: BlockingChannel, queue: str, n: int) -> list[int]:
    tags = []
    for _ in range(n):
        method = ch.basic_get(queue)[0]
        assert method is not None
        tags.append(method.delivery_tag)
    return tags


# --- ack / nack / reject with and without multiple ---


@pytest.mark.parametrize(
    ("multiple", "left"),
    [
        # Only 9 was outstanding beyond 8.
        (True, [("m9", True)]),
        (False, [("m5", True), ("m6", True), ("m7", True), ("m9", True)]),
    ],
    ids=[
        "multiple-settles-every-outstanding-tag-up-to-it",
        "without-multiple-settles-only-that-tag",
    ],
)
def test_ack_with_and_without_multiple(
    conn: pika.BlockingConnection, unique: Unique, multiple: bool, left: list[tuple[str, bool]]
) -> None:
    watcher, ch = conn.channel(), conn.channel()
    q = declare(watcher, unique("q"))
    publish(watcher, q, *[f"m{i}" for i in range(1, 10)])
    wait_ready(conn, watcher, q, 9)
    for tag in get_tags(ch, q, 4):
        ch.basic_ack(tag)
    assert get_tags(ch, q, 5) == [5, 6, 7, 8, 9]
    ch.basic_ack(8, multiple=multiple)
    ch.close()
    # What the ack left outstanding comes back, as a marker that the close is handled.
    wait_ready(conn, watcher, q, len(left))
    assert drain_redelivered(watcher, q) == left


async def test_nack_multiple_with_requeue(broker: Endpoint, unique: Unique) -> None:
    conn = await aio_pika.connect(broker.url, timeout=5)
    async with conn:
        ch = await conn.channel()
        q = await ch.declare_queue(unique("q"), exclusive=True)
        for i in range(1, 5):
            await ch.default_exchange.publish(
                aio_pika.Message(f"m{i}".encode()), routing_key=q.name
            )
        got = [await q.get(timeout=5) for _ in range(4)]
        assert [m.delivery_tag for m in got] == [1, 2, 3, 4]
        await got[2].nack(multiple=True, requeue=True)

        again = [await q.get(timeout=5) for _ in range(3)]
        assert [(m.body, m.redelivered, m.message_count) for m in again] == [
            (b"m1", True, 2),
            (b"m2", True, 1),
            (b"m3", True, 0),
        ]
        assert [m.delivery_tag for m in again] == [5, 6, 7]
        # m4 is still unacked on this channel, so the queue is empty.
        assert await q.get(fail=False, timeout=5) is None


def test_reject_requeue_puts_message_back_at_its_original_position(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    q = declare(ch, unique("q"))
    publish(ch, q, *[f"m{i}" for i in range(1, 7)])
    assert get_tags(ch, q, 4) == [1, 2, 3, 4]
    ch.basic_reject(3, requeue=True)  # m3
    ch.basic_reject(1, requeue=True)  # m1
    method, _props, body = ch.basic_get(q, auto_ack=True)
    assert method is not None
    assert (body, method.redelivered, method.message_count) == (b"m1", True, 3)
    # RabbitMQ 3.10: requeued messages regain their publish order, ahead of never-delivered ones.
    assert drain_redelivered(ch, q) == [("m3", True), ("m5", False), ("m6", False)]


async def test_reject_requeue_redelivers_to_the_consumer_first(
    broker: Endpoint, unique: Unique
) -> None:
    conn = await aio_pika.connect(broker.url, timeout=5)
    async with conn:
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=1)
        q = await ch.declare_queue(unique("q"), exclusive=True)
        for body in (b"m1", b"m2"):
            await ch.default_exchange.publish(aio_pika.Message(body), routing_key=q.name)
        inbox: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
        await q.consume(inbox.put)
        first = await asyncio.wait_for(inbox.get(), 5)
        assert (first.body, first.redelivered, first.delivery_tag) == (b"m1", False, 1)
        await first.reject(requeue=True)
        second = await asyncio.wait_for(inbox.get(), 5)
        assert (second.body, second.redelivered, second.delivery_tag) == (b"m1", True, 2)
        await second.ack()
        third = await asyncio.wait_for(inbox.get(), 5)
        assert (third.body, third.redelivered) == (b"m2", False)
        await third.ack()


def test_reject_and_nack_without_requeue_drop_the_message(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    watcher, ch = conn.channel(), conn.channel()
    q = declare(watcher, unique("q"))
    publish(watcher, q, "m1", "m2", "m3", "m4")
    wait_ready(conn, watcher, q, 4)
    assert get_tags(ch, q, 4) == [1, 2, 3, 4]
    ch.basic_reject(1, requeue=False)
    ch.basic_nack(2, requeue=False)
    ch.basic_nack(3, multiple=True, requeue=False)  # only 3 is left at or below 3
    ch.close()
    wait_ready(conn, watcher, q, 1)
    assert drain_redelivered(watcher, q) == [("m4", True)]


# --- errors: unknown, settled and foreign tags ---


@pytest.mark.parametrize("settle_how", ["ack", "nack", "reject"])
def test_settling_an_unknown_tag_closes_the_channel_406(
    conn: pika.BlockingConnection, unique: Unique, settle_how: str
) -> None:
    ch = conn.channel()
    q = declare(ch, unique("q"))
    publish(ch, q, "x")
    assert get_tags(ch, q, 1) == [1]
    getattr(ch, f"basic_{settle_how}")(42)
    assert_closed_for_unknown_tag(ch, q, 42)
    # Only the channel is closed; its unacked delivery is back in the queue.
    other = conn.channel()
    wait_ready(conn, other, q, 1)


@pytest.mark.parametrize(
    "multiple",
    # RabbitMQ 3.10: multiple=true still needs the tag itself to be outstanding.
    [False, True],
    ids=["double-ack-closes-the-channel-406", "ack-multiple-of-an-already-acked-tag-is-unknown"],
)
def test_second_ack_of_a_tag_is_unknown(
    conn: pika.BlockingConnection, unique: Unique, multiple: bool
) -> None:
    ch = conn.channel()
    q = declare(ch, unique("q"))
    publish(ch, q, "x", "y")
    assert get_tags(ch, q, 2) == [1, 2]
    ch.basic_ack(1)
    ch.basic_ack(1, multiple=multiple)
    assert_closed_for_unknown_tag(ch, q, 1)


async def test_ack_on_a_different_channel_is_unknown(broker: Endpoint, unique: Unique) -> None:
    conn = await aio_pika.connect(broker.url, timeout=5)
    async with conn:
        owner, stranger = await conn.channel(), await conn.channel()
        q = await owner.declare_queue(unique("q"), exclusive=True)
        await owner.default_exchange.publish(aio_pika.Message(b"x"), routing_key=q.name)
        msg = await q.get(timeout=5)
        assert msg.delivery_tag == 1
        raw = await stranger.get_underlay_channel()
        await raw.basic_ack(1)
        # aiormq maps reply code 406 to ChannelPreconditionFailed.
        with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as err:
            await stranger.declare_queue(q.name, passive=True)
        assert err.value.args == ("PRECONDITION_FAILED - unknown delivery tag 1",)
        assert stranger.is_closed
        assert not owner.is_closed
        await msg.ack()  # still outstanding on its own channel
        again = await owner.declare_queue(q.name, passive=True)
        assert again.declaration_result.message_count == 0


def test_ack_tag_zero_with_multiple_acks_everything_outstanding(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    watcher, ch = conn.channel(), conn.channel()
    q = declare(watcher, unique("q"))
    publish(watcher, q, "m1", "m2", "m3", "m4")
    wait_ready(conn, watcher, q, 4)
    assert get_tags(ch, q, 3) == [1, 2, 3]
    # RabbitMQ 3.10: tag 0 with multiple=true means "everything outstanding".
    ch.basic_ack(0, multiple=True)
    assert get_tags(ch, q, 1) == [4]
    ch.close()
    wait_ready(conn, watcher, q, 1)
    assert drain_redelivered(watcher, q) == [("m4", True)]


def test_ack_tag_zero_without_multiple_is_unknown(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    q = declare(ch, unique("q"))
    publish(ch, q, "m1")
    assert get_tags(ch, q, 1) == [1]
    ch.basic_ack(0)
    assert_closed_for_unknown_tag(ch, q, 0)


def test_nack_tag_zero_with_multiple_requeues_everything(
    conn: pika.BlockingConnection, unique: Unique
) -> None:
    ch = conn.channel()
    q = declare(ch, unique("q"))
    publish(ch, q, "m1", "m2", "m3")
    assert get_tags(ch, q, 3) == [1, 2, 3]
    ch.basic_nack(0, multiple=True, requeue=True)
    assert drain_redelivered(ch, q) == [("m1", True), ("m2", True), ("m3", True)]
