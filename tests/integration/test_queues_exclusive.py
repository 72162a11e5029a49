"""Exclusive and auto-delete queues, and the server's basic.cancel when a queue goes away."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import aio_pika
import aiormq
import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ChannelClosedByBroker

from helpers import Unique, channel_error, process_events_until


@pytest.fixture
def other(broker: Any) -> Iterator[BlockingConnection]:
    """A second, independent connection."""
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        yield connection


def exists(conn: BlockingConnection, queue: str) -> bool:
    channel = conn.channel()
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


def wait_until_gone(conn: BlockingConnection, queue: str, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while exists(conn, queue):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def locked(name: str) -> tuple[int, str]:
    return (
        405,
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{name}' in vhost "
        "'/'. It could be originally declared on another connection or the exclusive property "
        "value does not match that of the original declaration.",
    )


# --- exclusive queues -----------------------------------------------------------------------

FOREIGN_OPERATIONS: dict[str, Callable[[BlockingChannel, str], Any]] = {
    "passive_declare": lambda ch, q: ch.queue_declare(q, passive=True),
    "declare": lambda ch, q: ch.queue_declare(q),
    "declare_exclusive": lambda ch, q: ch.queue_declare(q, exclusive=True),
    "consume": lambda ch, q: ch.basic_consume(q, lambda *_args: None),
    "get": lambda ch, q: ch.basic_get(q, auto_ack=True),
    "purge": lambda ch, q: ch.queue_purge(q),
    "delete": lambda ch, q: ch.queue_delete(q),
    "bind": lambda ch, q: ch.queue_bind(q, "amq.direct", "k"),
    "unbind": lambda ch, q: ch.queue_unbind(q, "amq.direct", q),  # a binding the owner made
}


@pytest.mark.parametrize("operation", FOREIGN_OPERATIONS)
def test_exclusive_queue_locked_for_other_connection(
    conn: BlockingConnection, other: BlockingConnection, unique: Unique, operation: str
) -> None:
    name = unique("excl")
    owner = conn.channel()
    owner.confirm_delivery()
    owner.queue_declare(name, exclusive=True)
    owner.queue_bind(name, "amq.direct", name)
    owner.basic_publish("", name, b"kept")
    code, text = channel_error(other, lambda ch: FOREIGN_OPERATIONS[operation](ch, name))
    assert (code, text) == locked(name)
    ok = owner.queue_declare(name, passive=True).method  # untouched for the owner
    assert (ok.message_count, ok.consumer_count) == (1, 0)
    owner.basic_publish("amq.direct", name, b"still bound")
    assert owner.queue_declare(name, passive=True).method.message_count == 2


def test_exclusive_queue_allows_foreign_publish(
    conn: BlockingConnection, other: BlockingConnection, unique: Unique
) -> None:
    name = unique("excl")
    owner = conn.channel()
    owner.queue_declare(name, exclusive=True)
    owner.queue_bind(name, "amq.direct", name)
    foreign = other.channel()
    foreign.confirm_delivery()
    # RabbitMQ 3.10: publishing into someone's exclusive queue is allowed
    foreign.basic_publish("", name, b"from outside")
    foreign.basic_publish("amq.direct", name, b"via amq.direct")
    # RabbitMQ 3.10: unbinding a binding that does not exist is unbind-ok before any lock check
    foreign.queue_unbind(name, "amq.direct", "never-bound")
    assert foreign.is_open
    bodies = []
    while (message := owner.basic_get(name, auto_ack=True))[0] is not None:
        bodies.append(message[2])
    assert bodies == [b"from outside", b"via amq.direct"]


def test_exclusive_queue_shared_by_channels_of_owner(
    conn: BlockingConnection, unique: Unique
) -> None:
    name = unique("excl")
    conn.channel().queue_declare(name, exclusive=True)
    second = conn.channel()
    second.queue_declare(name, exclusive=True)  # same connection: fine
    second.basic_consume(name, lambda *_args: None)
    assert conn.channel().queue_declare(name, passive=True).method.consumer_count == 1


def test_exclusive_queue_deleted_with_its_connection(
    broker: Any, other: BlockingConnection, unique: Unique
) -> None:
    name = unique("excl")
    owner = pika.BlockingConnection(pika.URLParameters(broker.url))
    owner.channel().queue_declare(name, exclusive=True)
    assert channel_error(other, lambda ch: ch.queue_declare(name, passive=True)) == locked(name)
    owner.close()
    assert wait_until_gone(other, name), "exclusive queue outlived its connection"


# --- auto-delete queues ---------------------------------------------------------------------


def test_auto_delete_queue_lifecycle(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("ad")
    channel = conn.channel()
    channel.queue_declare(name, auto_delete=True)
    time.sleep(0.2)
    assert exists(conn, name), "auto-delete queue must stay until it has had a consumer"
    first = channel.basic_consume(name, lambda *_args: None)
    second = channel.basic_consume(name, lambda *_args: None)
    channel.basic_cancel(first)
    assert channel.queue_declare(name, passive=True).method.consumer_count == 1
    channel.basic_cancel(second)
    assert wait_until_gone(conn, name), "auto-delete queue kept after its last consumer left"


def test_auto_delete_queue_deleted_when_consumer_channel_closes(
    conn: BlockingConnection, unique: Unique
) -> None:
    name = unique("ad")
    consumer = conn.channel()
    consumer.queue_declare(name, auto_delete=True)
    consumer.basic_consume(name, lambda *_args: None)
    consumer.close()
    assert wait_until_gone(conn, name)


def test_auto_delete_queue_survives_basic_get(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("ad")
    channel = conn.channel()
    channel.queue_declare(name, auto_delete=True)
    channel.basic_get(name, auto_ack=True)  # basic.get does not make a consumer
    time.sleep(0.2)
    assert exists(conn, name)
    channel.basic_consume(name, lambda *_args: None, consumer_tag="only")
    channel.basic_cancel("only")
    assert wait_until_gone(conn, name)


# --- basic.cancel from the server -----------------------------------------------------------


def test_consumer_cancelled_when_queue_deleted_pika(
    conn: BlockingConnection, unique: Unique
) -> None:
    assert conn.consumer_cancel_notify_supported
    name = unique("q")
    channel = conn.channel()
    channel.queue_declare(name, exclusive=True)
    cancels: list[pika.spec.Basic.Cancel] = []
    channel.add_on_cancel_callback(lambda frame: cancels.append(frame.method))
    channel.basic_consume(name, lambda *_args: None, consumer_tag="watcher")
    assert conn.channel().queue_delete(name).method.message_count == 0
    process_events_until(conn, lambda: bool(cancels))
    assert [c.consumer_tag for c in cancels] == ["watcher"]
    # RabbitMQ 3.10: the notification carries nowait=true; the channel stays open
    assert cancels[0].nowait is True
    assert channel.is_open and channel.consumer_tags == []


async def test_consumer_cancelled_when_queue_deleted_aio_pika(broker: Any, unique: Unique) -> None:
    connection = await aio_pika.connect(broker.url, timeout=10)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(unique("q"))
        cancelled: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def on_cancel(frame: aiormq.spec.Basic.Cancel) -> None:
            if not cancelled.done():
                cancelled.set_result(frame.consumer_tag)

        (await channel.get_underlay_channel()).on_consumer_cancel_callbacks.add(on_cancel)

        async def ignore(_message: aio_pika.abc.AbstractIncomingMessage) -> None:
            return None

        tag = await queue.consume(ignore, consumer_tag="aio-watcher")
        admin = await connection.channel()
        await admin.queue_delete(queue.name)
        assert await asyncio.wait_for(cancelled, timeout=5) == tag == "aio-watcher"
        assert not channel.is_closed


async def test_aio_pika_exclusive_queue_locked(broker: Any, unique: Unique) -> None:
    name = unique("excl")
    owner = await aio_pika.connect(broker.url, timeout=10)
    async with owner:
        await (await owner.channel()).declare_queue(name, exclusive=True)
        intruder = await aio_pika.connect(broker.url, timeout=10)
        async with intruder:
            channel = await intruder.channel()
            with pytest.raises(aiormq.exceptions.ChannelLockedResource) as info:
                await channel.declare_queue(name, passive=True)
            assert (405, info.value.args[0]) == locked(name)
