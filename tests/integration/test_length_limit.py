"""Queue length limits: x-max-length, x-max-length-bytes and x-overflow.

RabbitMQ 3.10 (observed on 3.10.8): only ready messages count, unacknowledged ones do not;
x-max-length-bytes counts message bodies only. drop-head (the default) drops, and dead-letters
with reason maxlen, the oldest ready messages; reject-publish refuses the new message (basic.nack
in confirm mode, silently dropped otherwise); reject-publish-dlx also dead-letters it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import aio_pika
import aiormq
import pytest
from pamqp import commands
from pika.exceptions import NackError
from pika.spec import BasicProperties

from helpers import AmqpSession, open_session

Unique = Callable[[str], str]
Args = dict[str, Any]


class Amqp(AmqpSession):
    """The shared session plus this file's own publish and read helpers."""

    def publish(self, queue: str, *bodies: bytes, exchange: str = "", **props: Any) -> None:
        for body in bodies:
            self.ch.basic_publish(exchange, queue, body, BasicProperties(**props))

    def dead_letters(self, queue: str) -> list[tuple[bytes, list[tuple[str, str, int]]]]:
        """Drain queue: each body with its x-death (reason, queue, count) entries."""
        time.sleep(0.05)  # dead-lettering is asynchronous
        got = []
        while True:
            method, props, body = self.ch.basic_get(queue, auto_ack=True)
            if method is None:
                return got
            entries = (props.headers or {}).get("x-death", [])
            got.append((body, [(e["reason"], e["queue"], e["count"]) for e in entries]))


@pytest.fixture
def amqp(broker: Any) -> Iterator[Amqp]:
    yield from open_session(Amqp, broker)


def limited(dlq: str | None = None, **limits: Any) -> Args:
    """Queue arguments: x-<limit> from the keyword names, plus a DLX into dlq if given."""
    args = {f"x-{key.replace('_', '-')}": value for key, value in limits.items()}
    if dlq is not None:
        args.update({"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    return args


# --- drop-head ------------------------------------------------------------------------------


def test_drop_head_keeps_the_newest_messages(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("maxlen"), limited(max_length=2))
    amqp.publish(queue, b"m0", b"m1", b"m2", b"m3")
    assert amqp.count(queue) == 2
    assert amqp.bodies(queue) == [b"m2", b"m3"]


def test_drop_head_dead_letters_the_oldest_as_maxlen(amqp: Amqp, unique: Unique) -> None:
    dlq = amqp.queue(unique("dlq"))
    queue = amqp.queue(unique("maxlen"), limited(dlq, max_length=2, overflow="drop-head"))
    amqp.publish(queue, b"m0", b"m1", b"m2", b"m3")
    assert amqp.dead_letters(dlq) == [
        (b"m0", [("maxlen", queue, 1)]),
        (b"m1", [("maxlen", queue, 1)]),
    ]
    assert amqp.bodies(queue) == [b"m2", b"m3"]


def test_drop_head_x_death_is_exact(amqp: Amqp, unique: Unique) -> None:
    dlq = amqp.queue(unique("dlq"))
    queue = amqp.queue(unique("maxlen"), limited(dlq, max_length=1))
    amqp.publish(queue, b"old", expiration="60000")
    amqp.publish(queue, b"new")
    time.sleep(0.05)
    method, props, body = amqp.ch.basic_get(dlq, auto_ack=True)
    assert method is not None and body == b"old"
    assert (method.exchange, method.routing_key) == ("", dlq)
    assert props.expiration is None
    headers = dict(props.headers)
    (entry,) = headers.pop("x-death")
    assert isinstance(entry.pop("time"), datetime)
    assert entry == {
        "count": 1,
        "reason": "maxlen",
        "queue": queue,
        "exchange": "",
        "routing-keys": [queue],
        "original-expiration": "60000",
    }
    assert headers == {
        "x-first-death-exchange": "",
        "x-first-death-queue": queue,
        "x-first-death-reason": "maxlen",
    }


def test_only_ready_messages_count_and_requeue_into_a_full_queue_drops(
    amqp: Amqp, unique: Unique
) -> None:
    dlq = amqp.queue(unique("dlq"))
    queue = amqp.queue(unique("maxlen"), limited(dlq, max_length=2))
    amqp.publish(queue, b"m0", b"m1")
    method, _, body = amqp.ch.basic_get(queue)  # m0 is now unacked: no longer counted
    assert method is not None and body == b"m0"
    amqp.publish(queue, b"m2")
    assert amqp.count(queue) == 2
    assert amqp.dead_letters(dlq) == []
    amqp.publish(queue, b"m3")  # m1 is dropped
    # RabbitMQ 3.10: the requeued m0 goes back to the head of a full queue, and that head is
    # what drop-head drops.
    amqp.ch.basic_reject(method.delivery_tag, requeue=True)
    amqp.wait_count(dlq, 2)
    assert amqp.dead_letters(dlq) == [
        (b"m1", [("maxlen", queue, 1)]),
        (b"m0", [("maxlen", queue, 1)]),
    ]
    assert amqp.bodies(queue) == [b"m2", b"m3"]


def test_drop_head_max_length_zero(amqp: Amqp, unique: Unique) -> None:
    dlq = amqp.queue(unique("dlq"))
    queue = amqp.queue(unique("maxlen0"), limited(dlq, max_length=0))
    amqp.publish(queue, b"nobody-waits")
    assert amqp.dead_letters(dlq) == [(b"nobody-waits", [("maxlen", queue, 1)])]
    got: list[bytes] = []
    consumer = amqp.conn.channel()
    consumer.basic_consume(queue, lambda _c, _m, _p, body: got.append(body), auto_ack=True)
    amqp.publish(queue, b"handed-over")  # a waiting consumer takes it without queueing
    amqp.conn.sleep(0.2)
    assert got == [b"handed-over"]
    assert amqp.dead_letters(dlq) == []


# --- reject-publish and reject-publish-dlx --------------------------------------------------


def test_reject_publish_nacks_and_keeps_the_queue(amqp: Amqp, unique: Unique) -> None:
    dlq = amqp.queue(unique("dlq"))
    queue = amqp.queue(unique("reject"), limited(dlq, max_length=1, overflow="reject-publish"))
    amqp.publish(queue, b"kept")
    with pytest.raises(NackError):
        amqp.publish(queue, b"refused")
    with pytest.raises(NackError):  # mandatory does not matter: the message was routed
        amqp.ch.basic_publish("", queue, b"refused-too", mandatory=True)
    assert amqp.ch.is_open
    assert amqp.dead_letters(dlq) == []  # plain reject-publish never dead-letters
    assert amqp.bodies(queue) == [b"kept"]


def test_reject_publish_without_confirms_drops_silently(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("reject"), limited(max_length=1, overflow="reject-publish"))
    plain = amqp.conn.channel()
    for body in (b"kept", b"dropped", b"dropped-too"):
        plain.basic_publish("", queue, body)
    deadline = time.monotonic() + 2  # without confirms nothing says when the queue has them
    while amqp.count(queue) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert plain.is_open
    assert amqp.bodies(queue) == [b"kept"]


def test_reject_publish_counts_ready_only(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("reject"), limited(max_length=1, overflow="reject-publish"))
    amqp.publish(queue, b"m0")
    method, _, _ = amqp.ch.basic_get(queue)
    assert method is not None
    amqp.publish(queue, b"m1")  # accepted: m0 is unacked, the queue has no ready message
    # A requeue is not a publish: it is never refused, even past the limit.
    amqp.ch.basic_reject(method.delivery_tag, requeue=True)
    amqp.wait_count(queue, 2)
    with pytest.raises(NackError):
        amqp.publish(queue, b"m2")
    assert amqp.bodies(queue) == [b"m0", b"m1"]


def test_reject_publish_nack_does_not_stop_other_queues(amqp: Amqp, unique: Unique) -> None:
    fanout = unique("fan")
    amqp.ch.exchange_declare(fanout, "fanout")
    amqp.exchanges.append(fanout)
    full = amqp.queue(unique("full"), limited(max_length=1, overflow="reject-publish"))
    free = amqp.queue(unique("free"))
    amqp.ch.queue_bind(full, fanout)
    amqp.ch.queue_bind(free, fanout)
    amqp.publish("", b"f0", exchange=fanout)
    with pytest.raises(NackError):  # one refusing queue is enough for a nack
        amqp.publish("", b"f1", exchange=fanout)
    assert amqp.bodies(full) == [b"f0"]
    assert amqp.bodies(free) == [b"f0", b"f1"]


def test_reject_publish_dlx_nacks_and_dead_letters(amqp: Amqp, unique: Unique) -> None:
    dlq = amqp.queue(unique("dlq"))
    args = limited(dlq, max_length=1, overflow="reject-publish-dlx")
    queue = amqp.queue(unique("rdlx"), args)
    amqp.publish(queue, b"kept")
    with pytest.raises(NackError):
        amqp.publish(queue, b"refused", expiration="60000")
    time.sleep(0.05)
    method, props, body = amqp.ch.basic_get(dlq, auto_ack=True)
    assert method is not None and body == b"refused"
    assert props.expiration is None
    assert [
        {k: v for k, v in entry.items() if k != "time"} for entry in props.headers["x-death"]
    ] == [
        {
            "count": 1,
            "reason": "maxlen",
            "queue": queue,
            "exchange": "",
            "routing-keys": [queue],
            "original-expiration": "60000",
        }
    ]
    assert props.headers["x-first-death-reason"] == "maxlen"
    assert amqp.bodies(queue) == [b"kept"]


def test_reject_publish_dlx_without_a_dlx_only_nacks(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("rdlx"), limited(max_length=1, overflow="reject-publish-dlx"))
    amqp.publish(queue, b"kept")
    with pytest.raises(NackError):
        amqp.publish(queue, b"refused")
    assert amqp.bodies(queue) == [b"kept"]


def test_reject_publish_max_length_zero_nacks_even_with_a_consumer(
    amqp: Amqp, unique: Unique
) -> None:
    queue = amqp.queue(unique("reject0"), limited(max_length=0, overflow="reject-publish"))
    got: list[bytes] = []
    consumer = amqp.conn.channel()
    consumer.basic_consume(queue, lambda _c, _m, _p, body: got.append(body), auto_ack=True)
    with pytest.raises(NackError):
        amqp.publish(queue, b"z")
    amqp.conn.sleep(0.1)
    assert got == []


async def test_aio_pika_publisher_sees_the_nack(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("reject"), limited(max_length=1, overflow="reject-publish"))
    connection = await aio_pika.connect(amqp.url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        await channel.default_exchange.publish(aio_pika.Message(b"kept"), routing_key=queue)
        with pytest.raises(aiormq.exceptions.DeliveryError) as info:
            await channel.default_exchange.publish(aio_pika.Message(b"no"), routing_key=queue)
        assert isinstance(info.value.frame, commands.Basic.Nack)
    assert amqp.bodies(queue) == [b"kept"]


# --- x-max-length-bytes ---------------------------------------------------------------------


def test_max_length_bytes_counts_bodies_only(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("maxbytes"), limited(max_length_bytes=25))
    big_headers = {"padding": "x" * 500}  # properties do not count
    for n in range(4):
        amqp.publish(queue, f"body-{n:05d}".encode(), headers=big_headers)  # 10 bytes each
    assert amqp.bodies(queue) == [b"body-00002", b"body-00003"]


def test_max_length_bytes_reject_publish(amqp: Amqp, unique: Unique) -> None:
    args = limited(max_length_bytes=10, overflow="reject-publish")
    queue = amqp.queue(unique("maxbytes"), args)
    amqp.publish(queue, b"12345", b"67890")  # exactly at the limit is fine
    with pytest.raises(NackError):
        amqp.publish(queue, b"!")
    amqp.publish(queue, b"")  # an empty body adds nothing
    assert amqp.bodies(queue) == [b"12345", b"67890", b""]


@pytest.mark.parametrize("overflow", ["drop-head", "reject-publish", "reject-publish-dlx"])
def test_a_body_larger_than_the_byte_limit(amqp: Amqp, unique: Unique, overflow: str) -> None:
    dlq = amqp.queue(unique("dlq"))
    queue = amqp.queue(unique("maxbytes"), limited(dlq, max_length_bytes=10, overflow=overflow))
    if overflow == "drop-head":
        amqp.publish(queue, b"12345678901")
    else:
        with pytest.raises(NackError):
            amqp.publish(queue, b"12345678901")
    assert amqp.count(queue) == 0
    expected = [] if overflow == "reject-publish" else [(b"12345678901", [("maxlen", queue, 1)])]
    assert amqp.dead_letters(dlq) == expected


def test_both_limits_apply_whichever_is_reached_first(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("both"), limited(max_length=3, max_length_bytes=8))
    amqp.publish(queue, b"aaaa", b"bbbb", b"cccc")  # 12 bytes: the byte limit bites first
    assert amqp.count(queue) == 2
    amqp.publish(queue, b"d", b"e", b"f")  # now the count limit bites first
    assert amqp.bodies(queue) == [b"d", b"e", b"f"]
