"""Message TTL (x-message-ttl, per-message expiration) and queue TTL (x-expires).

Behaviour and texts are RabbitMQ 3.10's, observed on 3.10.8. TTLs are short (50-400 ms), so
every wait is bounded. Dead-lettering of expired messages (x-death) is in test_dead_letter.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import aio_pika
import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from helpers import AmqpSession, open_session

Unique = Callable[[str], str]
Args = dict[str, Any]


class Amqp(AmqpSession):
    """The shared session plus this file's own publish and read helpers."""

    def publish(self, queue: str, body: bytes, expiration: str | None = None) -> None:
        self.ch.basic_publish("", queue, body, pika.BasicProperties(expiration=expiration))

    def exists(self, queue: str) -> bool:
        """Passive declare on a fresh channel. RabbitMQ 3.10: this renews an x-expires lease."""
        channel = self.conn.channel()
        try:
            channel.queue_declare(queue, passive=True)
        except ChannelClosedByBroker as error:
            assert (error.reply_code, error.reply_text) == (
                404,
                f"NOT_FOUND - no queue '{queue}' in vhost '/'",
            )
            return False
        channel.close()
        return True


@pytest.fixture
def amqp(broker: Any) -> Iterator[Amqp]:
    yield from open_session(Amqp, broker)


# --- x-message-ttl and expiration: an expired message is never delivered -------------------


def test_queue_ttl_message_is_not_returned_by_basic_get(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("ttl"), {"x-message-ttl": 100})
    amqp.publish(queue, b"old")
    time.sleep(0.3)
    assert amqp.count(queue) == 0
    assert amqp.bodies(queue) == []


def test_queue_ttl_head_expires_while_a_younger_message_waits(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("ttl"), {"x-message-ttl": 300})
    amqp.publish(queue, b"first")
    time.sleep(0.15)
    amqp.publish(queue, b"second")
    deadline = time.monotonic() + 1.0
    while amqp.count(queue) == 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    # The head is gone at ~300 ms; "second" has ~150 ms to live.
    assert amqp.bodies(queue) == [b"second"]


def test_per_message_expiration_at_head_is_skipped(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("ttl"))
    amqp.publish(queue, b"short", expiration="50")
    amqp.publish(queue, b"forever")
    time.sleep(0.2)
    assert amqp.bodies(queue) == [b"forever"]


def test_per_message_expiration_behind_the_head_is_never_delivered(
    amqp: Amqp, unique: Unique
) -> None:
    # RabbitMQ 3.10: an expired message behind a live head is only discarded when it reaches
    # the head, so message_count may still include it; it is never delivered though.
    queue = amqp.queue(unique("ttl"))
    amqp.publish(queue, b"forever")
    amqp.publish(queue, b"short", expiration="50")
    amqp.publish(queue, b"also-forever")
    time.sleep(0.2)
    assert amqp.bodies(queue) == [b"forever", b"also-forever"]
    assert amqp.count(queue) == 0


def test_expired_messages_are_not_delivered_to_a_late_consumer(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("ttl"))
    amqp.publish(queue, b"a", expiration="50")
    amqp.publish(queue, b"b", expiration="60000")
    amqp.publish(queue, b"c", expiration="80")
    time.sleep(0.25)
    got: list[tuple[bytes, str | None]] = []
    amqp.ch.basic_consume(
        queue, lambda _c, _m, props, body: got.append((body, props.expiration)), auto_ack=True
    )
    amqp.conn.sleep(0.3)
    # The per-message expiration property is delivered unchanged.
    assert got == [(b"b", "60000")]


def test_queue_ttl_does_not_set_the_expiration_property(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("ttl"), {"x-message-ttl": 60000})
    amqp.publish(queue, b"x")
    method, props, body = amqp.ch.basic_get(queue, auto_ack=True)
    assert method is not None and body == b"x"
    assert props.expiration is None


async def test_waiting_messages_expire_while_the_consumer_prefetch_is_full(
    amqp: Amqp, unique: Unique
) -> None:
    queue_name = amqp.queue(unique("ttl"), {"x-message-ttl": 200})
    connection = await aio_pika.connect(amqp.url)
    try:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=1)
        queue = await channel.declare_queue(queue_name, passive=True)
        received: list[aio_pika.abc.AbstractIncomingMessage] = []

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            received.append(message)

        await queue.consume(on_message)
        for body in (b"a", b"b", b"c"):
            await channel.default_exchange.publish(aio_pika.Message(body), routing_key=queue_name)
        await asyncio.sleep(0.45)  # b and c wait behind the prefetch limit and expire
        assert [m.body for m in received] == [b"a"]
        await received[0].ack()  # a was delivered in time: it does not expire while unacked
        await asyncio.sleep(0.3)
        assert [m.body for m in received] == [b"a"]
    finally:
        await connection.close()
    assert amqp.count(queue_name) == 0


# --- TTL 0 ----------------------------------------------------------------------------------


def test_ttl_zero_drops_a_message_nobody_is_waiting_for(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("ttl0"), {"x-message-ttl": 0})
    amqp.publish(queue, b"now-or-never")
    assert amqp.count(queue) == 0
    assert amqp.bodies(queue) == []


def test_ttl_zero_delivers_only_what_a_consumer_can_take_now(amqp: Amqp, unique: Unique) -> None:
    # RabbitMQ 3.10: with x-message-ttl 0 a message goes straight to a consumer that has room
    # (prefetch 1 here); the rest expire at once instead of waiting for the ack.
    queue = amqp.queue(unique("ttl0"), {"x-message-ttl": 0})
    consumer = amqp.conn.channel()
    consumer.basic_qos(prefetch_count=1)
    got: list[bytes] = []
    consumer.basic_consume(queue, lambda _c, _m, _p, body: got.append(body))
    for body in (b"y1", b"y2", b"y3"):
        amqp.publish(queue, body)
    amqp.conn.sleep(0.2)
    assert got == [b"y1"]
    consumer.basic_ack(0, multiple=True)
    amqp.conn.sleep(0.2)
    assert got == [b"y1"]
    assert amqp.count(queue) == 0


def test_expiration_zero_is_delivered_to_a_waiting_consumer_only(
    amqp: Amqp, unique: Unique
) -> None:
    queue = amqp.queue(unique("exp0"))
    amqp.publish(queue, b"dropped", expiration="0")
    assert amqp.bodies(queue) == []
    got: list[bytes] = []
    amqp.conn.channel().basic_consume(
        queue, lambda _c, _m, _p, body: got.append(body), auto_ack=True
    )
    amqp.publish(queue, b"delivered", expiration="0")
    amqp.conn.sleep(0.2)
    assert got == [b"delivered"]


# --- the smaller of queue TTL and per-message expiration wins -------------------------------


def test_per_message_expiration_shorter_than_queue_ttl_wins(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("ttl"), {"x-message-ttl": 60000})
    amqp.publish(queue, b"short", expiration="50")
    amqp.publish(queue, b"queue-ttl")
    time.sleep(0.2)
    assert amqp.bodies(queue) == [b"queue-ttl"]


def test_queue_ttl_shorter_than_per_message_expiration_wins(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("ttl"), {"x-message-ttl": 100})
    amqp.publish(queue, b"long", expiration="60000")
    time.sleep(0.3)
    assert amqp.count(queue) == 0
    assert amqp.bodies(queue) == []


# --- unacked messages and requeue -----------------------------------------------------------


def test_unacked_message_is_not_expired_and_can_be_acked(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("ttl"), {"x-message-ttl": 100})
    amqp.publish(queue, b"held")
    method, _, _ = amqp.ch.basic_get(queue)
    assert method is not None
    time.sleep(0.25)
    amqp.ch.basic_ack(method.delivery_tag)
    assert amqp.count(queue) == 0  # a round trip: the ack was accepted, the channel is open
    assert amqp.ch.is_open


@pytest.mark.parametrize("how", ["reject", "nack", "close", "reject-per-message"])
def test_message_requeued_after_its_ttl_is_dropped(amqp: Amqp, unique: Unique, how: str) -> None:
    per_message = how.endswith("per-message")
    queue = amqp.queue(unique("ttl"), None if per_message else {"x-message-ttl": 100})
    amqp.publish(queue, b"late", expiration="100" if per_message else None)
    channel = amqp.conn.channel()
    method, _, _ = channel.basic_get(queue)
    assert method is not None
    time.sleep(0.25)
    if how.startswith("reject"):
        channel.basic_reject(method.delivery_tag, requeue=True)
    elif how == "nack":
        channel.basic_nack(method.delivery_tag, requeue=True)
    else:
        channel.close()
    time.sleep(0.05)
    assert amqp.bodies(queue) == []


def test_requeue_before_ttl_redelivers(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("ttl"), {"x-message-ttl": 5000})
    amqp.publish(queue, b"again")
    method, _, _ = amqp.ch.basic_get(queue)
    assert method is not None
    amqp.ch.basic_reject(method.delivery_tag, requeue=True)
    amqp.wait_count(queue, 1)
    method, _, body = amqp.ch.basic_get(queue, auto_ack=True)
    assert method is not None and method.redelivered and body == b"again"


def test_requeue_does_not_restart_the_ttl(amqp: Amqp, unique: Unique) -> None:
    # RabbitMQ 3.10: the TTL counts from when the message entered the queue, not from requeue.
    queue = amqp.queue(unique("ttl"), {"x-message-ttl": 400})
    amqp.publish(queue, b"x")
    time.sleep(0.25)
    method, _, _ = amqp.ch.basic_get(queue)
    assert method is not None
    amqp.ch.basic_reject(method.delivery_tag, requeue=True)
    time.sleep(0.25)
    assert amqp.bodies(queue) == []


# --- invalid per-message expiration ---------------------------------------------------------


@pytest.mark.parametrize(
    ("expiration", "detail"),
    [
        ("abc", "no_integer"),
        ("", "no_integer"),
        (" 10", "no_integer"),
        ("-1", "{value_negative,-1}"),
        ("1.5", '{leftover_string,".5"}'),
        ("0x10", '{leftover_string,"x10"}'),
        ("315360000001", "{value_too_large,315360000001}"),
    ],
)
def test_invalid_expiration_closes_the_channel(
    amqp: Amqp, unique: Unique, expiration: str, detail: str
) -> None:
    queue = amqp.queue(unique("badexp"))
    channel = amqp.conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.basic_publish("", queue, b"x", pika.BasicProperties(expiration=expiration))
        channel.queue_declare(queue, passive=True)  # a round trip to receive the close
    assert (info.value.reply_code, info.value.reply_text) == (
        406,
        f"PRECONDITION_FAILED - invalid expiration '{expiration}': {detail}",
    )
    assert amqp.conn.is_open
    assert amqp.bodies(queue) == []


@pytest.mark.parametrize("expiration", ["315360000000", "00100", "+5"])
def test_unusual_but_valid_expirations_are_accepted(
    amqp: Amqp, unique: Unique, expiration: str
) -> None:
    # RabbitMQ 3.10 parses with string:to_integer: leading zeros and '+' are fine; the maximum
    # is 315360000000 ms (ten years), as for x-message-ttl.
    queue = amqp.queue(unique("okexp"))
    amqp.publish(queue, b"x", expiration=expiration)
    method, props, _ = amqp.ch.basic_get(queue, auto_ack=True)
    assert method is not None
    assert props.expiration == expiration


# --- x-expires ------------------------------------------------------------------------------


def test_unused_queue_is_deleted_after_x_expires(amqp: Amqp, unique: Unique) -> None:
    dead_letters = amqp.queue(unique("expires-dlq"))
    queue = amqp.queue(
        unique("expires"),
        {"x-expires": 200, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead_letters},
    )
    amqp.publish(queue, b"lost")  # messages do not keep a queue alive
    time.sleep(0.5)
    assert not amqp.exists(queue)
    # RabbitMQ 3.10: the messages of an expired queue are not dead-lettered.
    assert amqp.bodies(dead_letters) == []


def test_a_consumer_keeps_the_queue_alive_until_cancelled(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("expires"), {"x-expires": 200})
    consumer = amqp.conn.channel()
    tag = consumer.basic_consume(queue, lambda *_: None)
    amqp.conn.sleep(0.5)
    consumer.basic_cancel(tag)
    time.sleep(0.05)
    assert amqp.exists(queue)  # this renews the lease too
    time.sleep(0.5)
    assert not amqp.exists(queue)


@pytest.mark.parametrize("use", ["passive-declare", "redeclare", "basic-get"])
def test_declare_and_get_renew_the_x_expires_lease(amqp: Amqp, unique: Unique, use: str) -> None:
    # RabbitMQ 3.10: a passive declare, a redeclare and basic.get (even get-empty) each restart
    # the x-expires timer.
    queue = amqp.queue(unique("expires"), {"x-expires": 200})
    for _ in range(4):
        time.sleep(0.1)
        if use == "passive-declare":
            amqp.ch.queue_declare(queue, passive=True)
        elif use == "redeclare":
            amqp.ch.queue_declare(queue, arguments={"x-expires": 200})
        else:
            amqp.ch.basic_get(queue)
    time.sleep(0.1)
    assert amqp.exists(queue)  # 500 ms after the declare
    time.sleep(0.45)
    assert not amqp.exists(queue)


@pytest.mark.parametrize("use", ["publish", "bind", "purge"])
def test_publish_bind_and_purge_do_not_renew_the_lease(
    amqp: Amqp, unique: Unique, use: str
) -> None:
    queue = amqp.queue(unique("expires"), {"x-expires": 300})
    for _ in range(2):
        time.sleep(0.1)
        if use == "publish":
            amqp.publish(queue, b"x")
        elif use == "bind":
            amqp.ch.queue_bind(queue, "amq.direct", queue)
        else:
            amqp.ch.queue_purge(queue)
    time.sleep(0.3)  # 500 ms after the declare, 300 ms after the last use
    assert not amqp.exists(queue)
