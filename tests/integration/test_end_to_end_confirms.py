"""x-confirm-on-ack: a publisher's confirm waits for the consumer's ack (kanin's own; see
kanin/core/queues/end_to_end.py for the rules). Publishers are aio-pika channels in
confirm mode, whose publish resolves on basic.ack and raises DeliveryError on basic.nack,
so each test can see which confirms came and which are still pending; pika's blocking
publisher is used where it shows the same from a plain client."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractQueue
from aiormq.exceptions import ChannelPreconditionFailed, DeliveryError
from pamqp import commands
from pika.exceptions import NackError

from helpers import start_kanin

pytestmark = pytest.mark.kanin_only

E2E = {"x-confirm-on-ack": True}
SETTLE_S = 0.3  # long enough for a confirm that was going to come to have come


@pytest.fixture
async def amqp(broker: Any) -> AsyncIterator[aio_pika.abc.AbstractConnection]:
    connection = await aio_pika.connect(broker.url)
    async with connection:
        yield connection


async def publisher(connection: Any) -> AbstractChannel:
    return await connection.channel(publisher_confirms=True)


def send(channel: AbstractChannel, body: bytes, key: str, **properties: Any) -> asyncio.Task[Any]:
    """Publish through the default exchange; the task ends with the confirm."""
    message = aio_pika.Message(body, **properties)
    return asyncio.ensure_future(channel.default_exchange.publish(message, routing_key=key))


async def outcome(task: asyncio.Task[Any], timeout: float = 5) -> str:
    """'ack' or 'nack' once the confirm came, 'pending' if none came by SETTLE_S."""
    done, _ = await asyncio.wait([task], timeout=timeout)
    if not done:
        return "pending"
    try:
        result = task.result()
    except DeliveryError:
        return "nack"
    return "ack" if isinstance(result, commands.Basic.Ack) else f"unexpected {result!r}"


async def pending(task: asyncio.Task[Any]) -> bool:
    await asyncio.sleep(SETTLE_S)
    return not task.done()


async def e2e_queue(channel: AbstractChannel, name: str, **arguments: Any) -> AbstractQueue:
    return await channel.declare_queue(name, arguments={**E2E, **arguments})


async def take(queue: AbstractQueue) -> aio_pika.abc.AbstractIncomingMessage:
    for _ in range(100):
        message = await queue.get(fail=False)
        if message is not None:
            return message
        await asyncio.sleep(0.02)
    raise AssertionError(f"nothing came from {queue.name}")


async def test_the_publisher_is_confirmed_when_the_consumer_acks(amqp: Any) -> None:
    channel = await publisher(amqp)
    queue = await e2e_queue(await amqp.channel(), "e2e")
    task = send(channel, b"m", "e2e")
    assert await pending(task)  # in the queue, not consumed: no confirm yet
    message = await take(queue)
    assert await pending(task)  # delivered, not acked yet
    await message.ack()
    assert await outcome(task) == "ack"


async def test_each_message_is_confirmed_by_its_own_ack(amqp: Any) -> None:
    channel = await publisher(amqp)
    queue = await e2e_queue(await amqp.channel(), "e2e")
    tasks = [send(channel, b"%d" % i, "e2e") for i in range(3)]
    messages = [await take(queue) for _ in range(3)]
    await messages[1].ack()
    assert await outcome(tasks[1]) == "ack"
    assert await pending(tasks[0]) and not tasks[2].done()
    await messages[2].ack()
    assert await outcome(tasks[2]) == "ack"
    assert await pending(tasks[0])
    await messages[0].ack()
    assert await outcome(tasks[0]) == "ack"


@pytest.mark.parametrize("how", ["reject", "nack"])
async def test_rejected_without_requeue_is_nacked_even_when_dead_lettered(
    amqp: Any, how: str
) -> None:
    channel = await publisher(amqp)
    consumer_channel = await amqp.channel()
    dead = await consumer_channel.declare_queue("dead")
    queue = await e2e_queue(
        consumer_channel,
        "e2e",
        **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"},
    )
    task = send(channel, b"m", "e2e")
    message = await take(queue)
    await (message.reject() if how == "reject" else message.nack(requeue=False))
    assert await outcome(task) == "nack"
    assert (await take(dead)).body == b"m"  # dead-lettered all the same


async def test_a_requeued_message_stays_pending_until_acked(amqp: Any) -> None:
    channel = await publisher(amqp)
    queue = await e2e_queue(await amqp.channel(), "e2e")
    task = send(channel, b"m", "e2e")
    await (await take(queue)).nack(requeue=True)
    assert await pending(task)
    again = await take(queue)
    assert again.redelivered
    await again.ack()
    assert await outcome(task) == "ack"


async def test_a_consumer_whose_channel_closes_returns_it_still_pending(amqp: Any) -> None:
    channel = await publisher(amqp)
    consumer_channel = await amqp.channel()
    queue = await e2e_queue(consumer_channel, "e2e")
    task = send(channel, b"m", "e2e")
    await take(queue)
    await consumer_channel.close()
    assert await pending(task)
    queue = await (await amqp.channel()).get_queue("e2e")
    await (await take(queue)).ack()
    assert await outcome(task) == "ack"


async def test_an_expired_message_is_nacked(amqp: Any) -> None:
    channel = await publisher(amqp)
    await e2e_queue(await amqp.channel(), "e2e", **{"x-message-ttl": 200})
    task = send(channel, b"m", "e2e")
    assert await outcome(task) == "nack"
    per_message = send(channel, b"m", "e2e", expiration=100)
    assert await outcome(per_message) == "nack"


async def test_the_confirm_timeout_expires_a_message_that_waited_too_long(amqp: Any) -> None:
    channel = await publisher(amqp)
    queue = await e2e_queue(await amqp.channel(), "e2e", **{"x-confirm-timeout": 300})
    started = time.monotonic()
    task = send(channel, b"m", "e2e")
    assert await outcome(task) == "nack"
    assert time.monotonic() - started >= 0.29
    assert await queue.get(fail=False) is None  # gone: its publisher sends it again


async def test_one_pushed_out_by_the_length_limit_is_nacked(amqp: Any) -> None:
    channel = await publisher(amqp)
    await e2e_queue(await amqp.channel(), "e2e", **{"x-max-length": 1})
    first = send(channel, b"first", "e2e")
    second = send(channel, b"second", "e2e")
    assert await outcome(first) == "nack"  # dropped from the head
    assert await pending(second)


async def test_a_publish_refused_by_the_length_limit_is_nacked(amqp: Any) -> None:
    channel = await publisher(amqp)
    limits = {"x-max-length": 1, "x-overflow": "reject-publish"}
    await e2e_queue(await amqp.channel(), "e2e", **limits)
    first = send(channel, b"first", "e2e")
    second = send(channel, b"second", "e2e")
    assert await outcome(second) == "nack"
    assert await pending(first)


async def test_past_the_delivery_limit_it_is_nacked(amqp: Any) -> None:
    channel = await publisher(amqp)
    queue = await e2e_queue(await amqp.channel(), "e2e", **{"x-delivery-limit": 1})
    task = send(channel, b"m", "e2e")
    await (await take(queue)).nack(requeue=True)
    assert await pending(task)
    await (await take(queue)).nack(requeue=True)  # one return too many
    assert await outcome(task) == "nack"


@pytest.mark.parametrize("how", ["purge", "delete"])
async def test_purging_or_deleting_the_queue_nacks_what_it_held(amqp: Any, how: str) -> None:
    channel = await publisher(amqp)
    queue = await e2e_queue(await amqp.channel(), "e2e")
    ready = send(channel, b"ready", "e2e")
    out = send(channel, b"out", "e2e")
    delivered = await take(queue)
    assert delivered.body == b"ready"
    await (queue.purge() if how == "purge" else queue.delete(if_unused=False, if_empty=False))
    assert await outcome(out) == "nack"
    if how == "delete":  # the delivered one went with the queue
        assert await outcome(ready) == "nack"
    else:  # the delivered one is not purged: its ack still confirms it
        assert await pending(ready)
        await delivered.ack()
        assert await outcome(ready) == "ack"


async def test_several_end_to_end_queues_all_have_to_ack(amqp: Any) -> None:
    channel = await publisher(amqp)
    consumer_channel = await amqp.channel()
    fanout = await consumer_channel.declare_exchange("fan", aio_pika.ExchangeType.FANOUT)
    queues = [await e2e_queue(consumer_channel, f"e2e-{i}") for i in range(3)]
    for queue in queues:
        await queue.bind(fanout)
    ours = await channel.get_exchange("fan")
    confirmed = asyncio.ensure_future(ours.publish(aio_pika.Message(b"m"), routing_key=""))
    for queue in queues[:2]:
        await (await take(queue)).ack()
    assert await pending(confirmed)
    await (await take(queues[2])).ack()
    assert await outcome(confirmed) == "ack"
    again = asyncio.ensure_future(ours.publish(aio_pika.Message(b"m2"), routing_key=""))
    await (await take(queues[0])).ack()
    await (await take(queues[1])).reject()
    assert await outcome(again) == "nack"  # one of them dropped it


async def test_mixed_queue_kinds_each_do_what_their_confirm_waits_for(amqp: Any) -> None:
    """Routed to an end-to-end queue, a durable classic queue and a quorum queue: the
    persistent message is confirmed once it is on disk for the other two and acked from
    the end-to-end one, whatever the other two's consumers do."""
    channel = await publisher(amqp)
    consumer_channel = await amqp.channel()
    fanout = await consumer_channel.declare_exchange("mixed", aio_pika.ExchangeType.FANOUT)
    e2e = await e2e_queue(consumer_channel, "e2e")
    classic = await consumer_channel.declare_queue("classic", durable=True)
    quorum = await consumer_channel.declare_queue(
        "quorum", durable=True, arguments={"x-queue-type": "quorum"}
    )
    for queue in (e2e, classic, quorum):
        await queue.bind(fanout)
    ours = await channel.get_exchange("mixed")
    message = aio_pika.Message(b"m", delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
    task = asyncio.ensure_future(ours.publish(message, routing_key=""))
    assert await pending(task)
    await (await take(e2e)).ack()
    assert await outcome(task) == "ack"
    for queue in (classic, quorum):
        assert (await take(queue)).body == b"m"  # neither was consumed: still there


async def test_auto_ack_and_get_no_ack_confirm_on_delivery_get_with_ack_on_ack(
    amqp: Any,
) -> None:
    channel = await publisher(amqp)
    queue = await e2e_queue(await amqp.channel(), "e2e")
    task = send(channel, b"get-no-ack", "e2e")
    await asyncio.sleep(0.1)
    assert (await queue.get(no_ack=True)).body == b"get-no-ack"
    assert await outcome(task) == "ack"
    task = send(channel, b"get", "e2e")
    got = await take(queue)
    assert await pending(task)
    await got.ack()
    assert await outcome(task) == "ack"
    arrived = asyncio.Event()

    async def on_message(message: Any) -> None:
        arrived.set()

    await queue.consume(on_message, no_ack=True)
    task = send(channel, b"consumed", "e2e")
    await asyncio.wait_for(arrived.wait(), 5)
    assert await outcome(task) == "ack"


async def test_a_publisher_that_goes_away_leaves_its_messages_for_consumers(amqp: Any) -> None:
    channel = await publisher(amqp)
    queue = await e2e_queue(await amqp.channel(), "e2e")
    task = send(channel, b"m", "e2e")
    assert await pending(task)
    await channel.close()
    message = await take(queue)
    assert message.body == b"m"
    await message.ack()  # confirms nothing now: its channel is gone
    other = await publisher(amqp)
    later = send(other, b"later", "e2e")
    await (await take(queue)).ack()
    assert await outcome(later) == "ack"


async def test_a_retransmit_of_a_message_still_queued_is_confirmed_with_it(amqp: Any) -> None:
    channel = await publisher(amqp)
    queue = await e2e_queue(await amqp.channel(), "e2e", **{"x-message-deduplication": True})
    headers = {"x-deduplication-header": "order-1"}
    first = send(channel, b"m", "e2e", headers=headers)
    retransmit = send(channel, b"m", "e2e", headers=headers)
    assert await pending(retransmit)
    await (await take(queue)).ack()
    assert await outcome(first) == "ack" and await outcome(retransmit) == "ack"
    assert await queue.get(fail=False) is None  # delivered once


async def test_without_confirm_mode_it_is_a_plain_queue(amqp: Any) -> None:
    channel = await amqp.channel(publisher_confirms=False)
    queue = await e2e_queue(channel, "e2e")
    await channel.default_exchange.publish(aio_pika.Message(b"m"), routing_key="e2e")
    message = await take(queue)
    await message.ack()
    assert message.body == b"m"


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        (
            {"x-confirm-on-ack": "yes"},
            "invalid arg 'x-confirm-on-ack' for queue 'bad' in vhost '/': "
            "{unacceptable_type,longstr}",
        ),
        (
            {**E2E, "x-confirm-timeout": 0},
            "invalid arg 'x-confirm-timeout' for queue 'bad' in vhost '/': {value_zero,0}",
        ),
        (
            {**E2E, "x-queue-type": "quorum"},
            "invalid arg 'x-confirm-on-ack' for queue 'bad' in vhost '/' "
            "of queue type rabbit_quorum_queue",
        ),
    ],
)
async def test_bad_arguments_are_refused(amqp: Any, arguments: dict[str, Any], text: str) -> None:
    channel = await amqp.channel()
    with pytest.raises(ChannelPreconditionFailed) as info:
        await channel.declare_queue("bad", durable=True, arguments=arguments)
    assert text in str(info.value)


def test_pika_blocks_until_the_consumer_acks_and_raises_on_a_reject(broker: Any) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        channel.queue_declare("e2e", arguments=E2E)
        channel.confirm_delivery()
        decisions = iter(["ack", "reject"])
        consumer = threading.Thread(target=consume_twice, args=(broker.url, decisions))
        consumer.start()
        started = time.monotonic()
        channel.basic_publish("", "e2e", b"one")  # returns once the consumer has acked
        assert time.monotonic() - started >= 0.2
        with pytest.raises(NackError):
            channel.basic_publish("", "e2e", b"two")
        consumer.join(10)
    finally:
        connection.close()


def consume_twice(url: str, decisions: Any) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    for _ in range(2):
        method = None
        while method is None:
            method, _, _ = channel.basic_get("e2e")
            time.sleep(0.02)
        time.sleep(0.2)  # processing
        if next(decisions) == "ack":
            channel.basic_ack(method.delivery_tag)
        else:
            channel.basic_reject(method.delivery_tag, requeue=False)
    connection.close()


def test_a_persistent_message_is_not_stored_and_a_crash_loses_it_unconfirmed(
    tmp_path: Path,
) -> None:
    process, port = start_kanin(tmp_path)
    try:
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        channel = connection.channel()
        channel.queue_declare("e2e", durable=True, arguments=E2E)
        channel.queue_declare("plain", durable=True)
        persistent = pika.BasicProperties(delivery_mode=2)
        # For contrast, a confirmed one: on disk before the kill however slow the machine.
        confirming = connection.channel()
        confirming.confirm_delivery()
        confirming.basic_publish("", "plain", b"kept", persistent)
        channel.basic_publish("", "e2e", b"held by its publisher", persistent)
        assert channel.queue_declare("e2e", passive=True).method.message_count == 1
        time.sleep(0.2)  # any write the broker was going to make, made
        os.kill(process.pid, signal.SIGKILL)  # only the process this test started
        process.wait()
        process, port = start_kanin(tmp_path)
        channel = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)).channel()
        assert channel.queue_declare("e2e", passive=True).method.message_count == 0
        assert channel.queue_declare("plain", passive=True).method.message_count == 1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def test_through_a_durable_deduplicating_exchange_it_is_confirmed_on_ack(
    amqp: Any,
) -> None:
    """The exchange writes the message's id to disk: the confirm waits for that too, and
    for the consumer's ack."""
    channel = await publisher(amqp)
    consumer_channel = await amqp.channel()
    await consumer_channel.declare_exchange(
        "dedup", "x-message-deduplication", durable=True, arguments={"x-cache-size": 100}
    )
    queue = await e2e_queue(consumer_channel, "e2e")
    await queue.bind("dedup")
    ours = await channel.get_exchange("dedup")
    message = aio_pika.Message(b"m", headers={"x-deduplication-header": "id-1"})
    task = asyncio.ensure_future(ours.publish(message, routing_key=""))
    assert await pending(task)
    await (await take(queue)).ack()
    assert await outcome(task) == "ack"
