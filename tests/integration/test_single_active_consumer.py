"""x-single-active-consumer: one consumer at a time, the next takes over in registration order.

Observed on RabbitMQ 3.10.8: declare-ok's consumer_count counts waiting consumers too; a
cancelled consumer keeps its unacknowledged messages (they are requeued to the new active
consumer only when acked-off with requeue or when its channel closes); basic.get ignores SAC.

RabbitMQ 3.10.8 bug, avoided here: if the active consumer cancels while it holds unacked
messages AND messages are ready, the new active consumer is not fed, and the next publish
crashes the queue process (badmatch in rabbit_amqqueue_process:attempt_delivery). The sane
behaviour is checked by the kanin_only test at the end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import aio_pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker
from pika.spec import Basic, BasicProperties

from helpers import AmqpSession, open_session

Unique = Callable[[str], str]
Args = dict[str, Any]
SAC: Args = {"x-single-active-consumer": True}


class Amqp(AmqpSession):
    """The shared session plus this file's own publish and read helpers."""

    def queue(self, name: str, arguments: Args | None = None) -> str:
        """Every queue here is a single-active-consumer queue."""
        return super().queue(name, SAC if arguments is None else arguments)

    def publish(self, queue: str, *bodies: str) -> None:
        for body in bodies:
            self.ch.basic_publish("", queue, body.encode())

    def counts(self, queue: str) -> tuple[int, int]:
        """(message_count, consumer_count) from a passive declare."""
        ok = self.ch.queue_declare(queue, passive=True).method
        return ok.message_count, ok.consumer_count

    def settle(self, seconds: float = 0.15) -> None:
        """Let deliveries arrive and run consumer callbacks (all channels of this connection)."""
        self.conn.sleep(seconds)


class Consumer:
    """A consumer on its own channel of the shared connection, recording what it receives."""

    def __init__(self, amqp: Amqp, queue: str, tag: str, prefetch: int = 0) -> None:
        self.channel = amqp.conn.channel()
        if prefetch:
            self.channel.basic_qos(prefetch_count=prefetch)
        self.got: list[tuple[str, bool]] = []  # (body, redelivered)
        self.tag = self.channel.basic_consume(queue, self.on_message, consumer_tag=tag)

    def on_message(
        self, _channel: BlockingChannel, method: Basic.Deliver, _props: BasicProperties, body: bytes
    ) -> None:
        self.got.append((body.decode(), method.redelivered))

    @property
    def bodies(self) -> list[str]:
        return [body for body, _ in self.got]

    def ack_all(self) -> None:
        self.channel.basic_ack(0, multiple=True)


@pytest.fixture
def amqp(broker: Any) -> Iterator[Amqp]:
    yield from open_session(Amqp, broker)


def test_only_the_first_registered_consumer_receives(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("sac"))
    # Tags in reverse alphabetical order: registration order decides, not the tag.
    consumers = [Consumer(amqp, queue, tag) for tag in ("zz", "mm", "aa")]
    assert amqp.counts(queue) == (0, 3)  # waiting consumers count too
    amqp.publish(queue, *(f"m{n}" for n in range(6)))
    amqp.settle()
    assert [c.bodies for c in consumers] == [[f"m{n}" for n in range(6)], [], []]


def test_waiting_consumers_get_nothing_while_the_active_one_is_full(
    amqp: Amqp, unique: Unique
) -> None:
    queue = amqp.queue(unique("sac"))
    active = Consumer(amqp, queue, "active", prefetch=1)
    waiting = Consumer(amqp, queue, "waiting", prefetch=10)
    amqp.publish(queue, "m0", "m1", "m2")
    amqp.settle()
    assert (active.bodies, waiting.bodies) == (["m0"], [])
    assert amqp.counts(queue) == (2, 2)
    active.ack_all()
    amqp.settle()
    assert (active.bodies, waiting.bodies) == (["m0", "m1"], [])


def test_cancel_hands_over_in_registration_order(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("sac"))
    first, second, third = (Consumer(amqp, queue, tag) for tag in ("c", "b", "a"))
    amqp.publish(queue, "m0")
    amqp.settle()
    first.ack_all()
    second.channel.basic_cancel(second.tag)  # a waiting consumer leaves: nothing changes
    amqp.publish(queue, "m1")
    amqp.settle()
    assert amqp.counts(queue) == (0, 2)
    first.ack_all()
    first.channel.basic_cancel(first.tag)
    assert amqp.counts(queue) == (0, 1)
    amqp.publish(queue, "m2", "m3")
    amqp.settle()
    assert (first.bodies, second.bodies, third.bodies) == (["m0", "m1"], [], ["m2", "m3"])


@pytest.mark.kanin_only
def test_a_cancelled_consumer_keeps_its_unacked_messages(amqp: Amqp, unique: Unique) -> None:
    # RabbitMQ 3.10: the next consumer becomes active at once, so n0 overtakes m0 and m1
    # (second gets n0, m0, m1). kanin hands over only once the cancelled consumer's
    # deliveries are settled or requeued, so the queue's order survives the failover.
    queue = amqp.queue(unique("sac"))
    first = Consumer(amqp, queue, "first")
    second = Consumer(amqp, queue, "second")
    amqp.publish(queue, "m0", "m1")
    amqp.settle()
    first.channel.basic_cancel(first.tag)
    amqp.publish(queue, "n0")
    amqp.settle()
    assert (first.bodies, second.bodies) == (["m0", "m1"], [])
    assert amqp.counts(queue) == (1, 1)
    # Still first's to settle: a requeue hands them to the new active consumer, first.
    first.channel.basic_nack(0, multiple=True, requeue=True)
    amqp.settle()
    assert second.got == [("m0", True), ("m1", True), ("n0", False)]


def test_channel_close_requeues_unacked_to_the_next_consumer(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("sac"))
    first = Consumer(amqp, queue, "first", prefetch=2)
    second = Consumer(amqp, queue, "second", prefetch=2)
    third = Consumer(amqp, queue, "third", prefetch=2)
    amqp.publish(queue, "m0", "m1", "m2", "m3", "m4")
    amqp.settle()
    assert first.bodies == ["m0", "m1"]
    assert amqp.counts(queue) == (3, 3)
    first.channel.close()
    amqp.settle()
    assert second.got == [("m0", True), ("m1", True)]  # requeued ones first, in order
    assert amqp.counts(queue) == (3, 2)
    second.ack_all()
    amqp.settle()
    assert second.bodies == ["m0", "m1", "m2", "m3"]
    second.channel.close()
    amqp.settle()
    assert third.got == [("m2", True), ("m3", True)]
    third.ack_all()
    amqp.settle()
    third.ack_all()
    assert third.bodies == ["m2", "m3", "m4"]
    assert amqp.counts(queue) == (0, 1)


async def test_connection_close_hands_over_to_a_consumer_elsewhere(
    amqp: Amqp, unique: Unique
) -> None:
    queue_name = amqp.queue(unique("sac"))
    connection = await aio_pika.connect(amqp.url)
    channel = await connection.channel()
    queue = await channel.declare_queue(queue_name, passive=True)
    held: list[bytes] = []

    async def hold(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        held.append(message.body)  # never acked

    await queue.consume(hold)
    waiting = Consumer(amqp, queue_name, "pika-waiting")
    amqp.publish(queue_name, "m0", "m1")
    deadline = time.monotonic() + 2
    while len(held) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert held == [b"m0", b"m1"]
    amqp.settle(0.05)
    assert waiting.got == []
    await connection.close()
    amqp.settle(0.3)
    assert waiting.got == [("m0", True), ("m1", True)]


def test_basic_get_is_not_subject_to_single_active_consumer(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("sac"))
    active = Consumer(amqp, queue, "active", prefetch=1)
    amqp.publish(queue, "m0", "m1")
    amqp.settle()
    method, _, body = amqp.ch.basic_get(queue, auto_ack=True)
    assert method is not None and body == b"m1"
    assert active.bodies == ["m0"]


def test_exclusive_consume_is_refused_while_others_consume(amqp: Amqp, unique: Unique) -> None:
    queue = amqp.queue(unique("sac"))
    Consumer(amqp, queue, "active")
    channel = amqp.conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.basic_consume(queue, lambda *_: None, exclusive=True)
    assert (info.value.reply_code, info.value.reply_text) == (
        403,
        f"ACCESS_REFUSED - queue '{queue}' in vhost '/' in exclusive use",
    )


@pytest.mark.kanin_only
def test_cancel_with_unacked_hands_over_only_once_they_are_returned(
    amqp: Amqp, unique: Unique
) -> None:
    # RabbitMQ 3.10.8 leaves the new active consumer idle here and then crashes the queue.
    # kanin keeps SAC's point, ordering: the next consumer starts only once the cancelled
    # one's unacked messages are settled or requeued, and then gets them first.
    queue = amqp.queue(unique("sac"))
    first = Consumer(amqp, queue, "first", prefetch=2)
    second = Consumer(amqp, queue, "second", prefetch=10)
    amqp.publish(queue, "m0", "m1", "m2", "m3")
    amqp.settle()
    first.channel.basic_cancel(first.tag)
    amqp.publish(queue, "n0")
    amqp.settle()
    assert (first.bodies, second.bodies) == (["m0", "m1"], [])
    first.channel.close()
    amqp.settle()
    assert second.got == [("m0", True), ("m1", True), ("m2", False), ("m3", False), ("n0", False)]
    assert amqp.counts(queue) == (0, 1)
