"""Transactions: tx.select / tx.commit / tx.rollback.

Publishes and acks made inside a transaction take effect at tx.commit only; rollback
discards them. pika and aio-pika check what clients see, the raw pamqp client
(tests/rawamqp.py) checks frame order and the exact close frames. Reply codes and
texts are RabbitMQ 3.10's. tx/confirm mode conflicts are in test_confirms.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aio_pika
import aiormq
import pytest
from pamqp import commands
from pamqp.body import ContentBody
from pamqp.header import ContentHeader
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ChannelClosedByBroker

from helpers import (
    Unique,
    assert_silent,
    channel_close,
    declare_queue,
    drain,
    transactional_channel,
)
from rawamqp import RawClient


def ready(channel: BlockingChannel, queue: str) -> int:
    """Messages ready in the queue (unacked ones are not counted)."""
    return channel.queue_declare(queue, passive=True).method.message_count


def test_select_commit_rollback_and_repeated_commits(conn: BlockingConnection) -> None:
    channel = conn.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    tx = conn.channel()
    tx.tx_select()
    tx.tx_select()  # RabbitMQ 3.10: a second tx.select is answered with select-ok.
    tx.tx_commit()  # nothing pending: still commit-ok
    tx.basic_publish("", queue, b"first")
    tx.tx_commit()
    tx.basic_publish("", queue, b"second")
    tx.basic_publish("", queue, b"third")
    tx.tx_commit()
    tx.tx_rollback()
    tx.tx_commit()
    assert drain(channel, queue) == [b"first", b"second", b"third"]
    assert tx.is_open


def test_publishes_invisible_until_commit(conn: BlockingConnection) -> None:
    observer = conn.channel()
    queue = observer.queue_declare("", exclusive=True).method.queue
    tx = conn.channel()
    tx.tx_select()
    for n in range(3):
        tx.basic_publish("", queue, b"m%d" % n)
    assert ready(observer, queue) == 0
    assert observer.basic_get(queue, auto_ack=True) == (None, None, None)
    tx.tx_commit()
    assert ready(observer, queue) == 3
    assert drain(observer, queue) == [b"m0", b"m1", b"m2"]


async def test_consumer_receives_only_after_commit(broker: Any) -> None:
    connection = await aio_pika.connect(broker.url)
    async with connection:
        consumer_channel = await connection.channel()
        queue = await consumer_channel.declare_queue("", exclusive=True)
        received: asyncio.Queue[bytes] = asyncio.Queue()

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            received.put_nowait(message.body)

        await queue.consume(on_message, no_ack=True)
        tx_channel = await connection.channel(publisher_confirms=False)
        tx = tx_channel.transaction()
        await tx.select()
        await tx_channel.default_exchange.publish(aio_pika.Message(b"held"), queue.name)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(received.get(), timeout=0.5)
        await tx.commit()
        assert await asyncio.wait_for(received.get(), timeout=5) == b"held"


def test_rollback_discards_publishes(conn: BlockingConnection) -> None:
    observer = conn.channel()
    queue = observer.queue_declare("", exclusive=True).method.queue
    tx = conn.channel()
    tx.tx_select()
    tx.basic_publish("", queue, b"discarded-1")
    tx.basic_publish("", queue, b"discarded-2")
    tx.tx_rollback()
    tx.basic_publish("", queue, b"kept")
    tx.tx_commit()
    assert drain(observer, queue) == [b"kept"]


def test_closing_channel_discards_uncommitted_publishes(conn: BlockingConnection) -> None:
    observer = conn.channel()
    queue = observer.queue_declare("", exclusive=True).method.queue
    tx = conn.channel()
    tx.tx_select()
    tx.basic_publish("", queue, b"never")
    tx.close()
    assert ready(observer, queue) == 0


def test_ack_takes_effect_only_at_commit(conn: BlockingConnection) -> None:
    setup = conn.channel()
    queue = setup.queue_declare("", exclusive=True).method.queue
    setup.basic_publish("", queue, b"a")
    setup.basic_publish("", queue, b"b")
    tx = conn.channel()
    tx.tx_select()
    method_a, _, _ = tx.basic_get(queue)
    method_b, _, _ = tx.basic_get(queue)
    assert method_a is not None and method_b is not None
    tx.basic_ack(method_a.delivery_tag)
    tx.tx_commit()
    tx.basic_ack(method_b.delivery_tag)
    tx.close()  # "b"'s ack was never committed: it is requeued with the channel
    method, _, body = setup.basic_get(queue, auto_ack=True)
    assert method is not None
    assert (body, method.redelivered) == (b"b", True)
    assert ready(setup, queue) == 0


def test_rolled_back_ack_leaves_message_unacked(conn: BlockingConnection) -> None:
    setup = conn.channel()
    queue = setup.queue_declare("", exclusive=True).method.queue
    setup.basic_publish("", queue, b"m")
    tx = conn.channel()
    tx.tx_select()
    method, _, _ = tx.basic_get(queue)
    assert method is not None
    tx.basic_ack(method.delivery_tag)
    tx.tx_rollback()
    # RabbitMQ 3.10: the rolled-back ack is forgotten; the message stays unacked, not requeued.
    assert ready(setup, queue) == 0
    tx.basic_ack(method.delivery_tag)  # the same tag may be acked again
    tx.tx_commit()
    tx.close()
    assert ready(setup, queue) == 0


def test_nack_requeue_inside_tx_applies_at_commit(conn: BlockingConnection) -> None:
    setup = conn.channel()
    queue = setup.queue_declare("", exclusive=True).method.queue
    setup.basic_publish("", queue, b"m")
    tx = conn.channel()
    tx.tx_select()
    method, _, _ = tx.basic_get(queue)
    assert method is not None
    tx.basic_nack(method.delivery_tag, requeue=True)
    assert ready(setup, queue) == 0
    tx.tx_commit()
    assert ready(setup, queue) == 1


@pytest.mark.parametrize("method", ["tx_commit", "tx_rollback"])
def test_commit_or_rollback_without_select_is_406(conn: BlockingConnection, method: str) -> None:
    channel = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        getattr(channel, method)()
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - channel is not transactional"
    assert conn.is_open


@pytest.mark.parametrize(
    ("method", "method_id"),
    [(commands.Tx.Commit(), 20), (commands.Tx.Rollback(), 30)],
    ids=["commit", "rollback"],
)
def test_not_transactional_close_frame(raw: RawClient, method: Any, method_id: int) -> None:
    raw.open_channel(1)
    raw.send_method(1, method)
    assert channel_close(raw, 1) == (
        406,
        "PRECONDITION_FAILED - channel is not transactional",
        90,
        method_id,
    )


async def test_aio_pika_transaction_context_and_commit_without_select(broker: Any) -> None:
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel(publisher_confirms=False)
        queue = await channel.declare_queue("", exclusive=True)
        with pytest.raises(RuntimeError, match="abandon"):
            async with channel.transaction():  # an error inside rolls back
                await channel.default_exchange.publish(aio_pika.Message(b"gone"), queue.name)
                raise RuntimeError("abandon")
        async with channel.transaction():
            await channel.default_exchange.publish(aio_pika.Message(b"kept"), queue.name)
        message = await queue.get(no_ack=True, timeout=5)
        assert message.body == b"kept"
        assert await queue.get(no_ack=True, fail=False, timeout=5) is None

        plain = await connection.channel(publisher_confirms=False)
        with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
            await plain.transaction().commit(timeout=5)
        assert info.value.args[0] == "PRECONDITION_FAILED - channel is not transactional"


def test_mandatory_return_is_sent_at_commit_before_commit_ok(
    raw: RawClient, unique: Unique
) -> None:
    transactional_channel(raw, 1)
    key = unique("nowhere")
    raw.publish(1, b"r", routing_key=key, mandatory=True)
    # RabbitMQ 3.10: nothing is routed (so nothing returned) before the commit.
    assert_silent(raw, 0.5)
    raw.send_method(1, commands.Tx.Commit())
    returned = raw.expect(commands.Basic.Return, 1)
    assert (returned.reply_code, returned.reply_text, returned.routing_key) == (
        312,
        "NO_ROUTE",
        key,
    )
    raw.expect(ContentHeader, 1)  # type: ignore[type-var]
    assert raw.expect(ContentBody, 1).value == b"r"  # type: ignore[type-var]
    raw.expect(commands.Tx.CommitOk, 1)


def test_publish_to_missing_exchange_in_tx_fails_at_publish(raw: RawClient, unique: Unique) -> None:
    transactional_channel(raw, 1)
    exchange = unique("missing")
    raw.publish(1, b"x", exchange=exchange, routing_key="k")
    # RabbitMQ 3.10: checked at publish time, not deferred to tx.commit.
    assert channel_close(raw, 1) == (
        404,
        f"NOT_FOUND - no exchange '{exchange}' in vhost '/'",
        60,
        40,
    )


def test_unknown_delivery_tag_in_tx_fails_at_ack(raw: RawClient) -> None:
    transactional_channel(raw, 1)
    raw.send_method(1, commands.Basic.Ack(delivery_tag=7))
    # RabbitMQ 3.10: the tag is checked when the ack arrives, not at tx.commit.
    assert channel_close(raw, 1) == (406, "PRECONDITION_FAILED - unknown delivery tag 7", 60, 80)


def test_double_ack_in_one_tx_is_406(raw: RawClient) -> None:
    raw.open_channel(1)
    queue = declare_queue(raw, 1)
    raw.publish(1, b"m", routing_key=queue)
    raw.send_method(1, commands.Tx.Select())
    raw.expect(commands.Tx.SelectOk, 1)
    raw.send_method(1, commands.Basic.Get(queue=queue))
    tag = raw.expect(commands.Basic.GetOk, 1).delivery_tag
    raw.expect(ContentHeader, 1)  # type: ignore[type-var]
    raw.expect(ContentBody, 1)  # type: ignore[type-var]
    raw.send_method(1, commands.Basic.Ack(delivery_tag=tag))
    raw.send_method(1, commands.Basic.Ack(delivery_tag=tag))
    close = raw.expect(commands.Channel.Close, 1)
    assert (close.reply_code, close.reply_text) == (
        406,
        f"PRECONDITION_FAILED - unknown delivery tag {tag}",
    )
