"""Queues: declare (passive, server-named, redeclare rules), bind/unbind, purge and delete.

Reply codes and texts are the ones RabbitMQ 3.10 sends. Exclusive and auto-delete queues and
the server-sent basic.cancel are in test_queues_exclusive.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import aio_pika
import aiormq
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

from helpers import Unique, channel_error, delete_afterwards, process_events_until


@pytest.fixture
def doomed(broker: Any) -> Iterator[list[str]]:
    """Names of non-exclusive queues to remove from a shared external broker afterwards."""
    yield from delete_afterwards(broker, lambda channel, name: channel.queue_delete(name))


def publish(conn: BlockingConnection, queue: str, count: int) -> None:
    channel = conn.channel()
    channel.confirm_delivery()
    for n in range(count):
        channel.basic_publish("", queue, f"m{n}".encode())
    channel.close()


def counts(conn: BlockingConnection, queue: str) -> tuple[int, int]:
    """(message_count, consumer_count) from a passive declare."""
    ok = conn.channel().queue_declare(queue, passive=True).method
    return ok.message_count, ok.consumer_count


def not_found(name: str) -> tuple[int, str]:
    return 404, f"NOT_FOUND - no queue '{name}' in vhost '/'"


# --- declare --------------------------------------------------------------------------------


def test_declare_ok_reports_counts(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("q")
    ok = conn.channel().queue_declare(name, exclusive=True).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (name, 0, 0)
    publish(conn, name, 3)
    again = conn.channel().queue_declare(name, exclusive=True).method
    assert (again.queue, again.message_count, again.consumer_count) == (name, 3, 0)
    consumer = conn.channel()
    consumer.basic_qos(prefetch_count=1)
    delivered: list[bytes] = []
    consumer.basic_consume(name, lambda _ch, _m, _p, body: delivered.append(body))
    process_events_until(conn, lambda: bool(delivered))
    assert delivered == [b"m0"]
    # RabbitMQ 3.10: message_count counts ready messages only, not the unacked one
    assert counts(conn, name) == (2, 1)


def test_server_named_queue(conn: BlockingConnection) -> None:
    channel = conn.channel()
    first = channel.queue_declare("", exclusive=True).method
    second = channel.queue_declare("", exclusive=True).method
    # RabbitMQ 3.10: "amq.gen-" followed by 22 url-safe base64 characters
    assert re.fullmatch(r"amq\.gen-[A-Za-z0-9_-]{22}", first.queue), first.queue
    assert first.queue != second.queue
    assert (first.message_count, first.consumer_count) == (0, 0)
    publish(conn, first.queue, 1)
    assert counts(conn, first.queue) == (1, 0)


def test_passive_declare_missing_queue(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("missing")
    assert channel_error(conn, lambda ch: ch.queue_declare(name, passive=True)) == not_found(name)


def test_passive_declare_ignores_flags(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("q")
    conn.channel().queue_declare(name, exclusive=True)
    publish(conn, name, 2)
    # RabbitMQ 3.10: passive only checks existence, the other fields are not compared
    ok = conn.channel().queue_declare(name, passive=True, durable=True, auto_delete=True).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (name, 2, 0)


def test_redeclare_identical_is_ok(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("q")
    channel = conn.channel()
    channel.queue_declare(name, exclusive=True, auto_delete=True)
    channel.queue_declare(name, exclusive=True, auto_delete=True)
    assert channel.is_open


@pytest.mark.parametrize(
    ("field", "first", "second", "received", "current"),
    [
        ("durable", {}, {"durable": True}, "true", "false"),
        ("durable", {"durable": True}, {}, "false", "true"),
        ("auto_delete", {}, {"auto_delete": True}, "true", "false"),
        ("auto_delete", {"auto_delete": True}, {}, "false", "true"),
    ],
)
def test_redeclare_inequivalent(
    conn: BlockingConnection,
    unique: Unique,
    doomed: list[str],
    field: str,
    first: dict[str, bool],
    second: dict[str, bool],
    received: str,
    current: str,
) -> None:
    name = unique("q")
    doomed.append(name)
    conn.channel().queue_declare(name, **first)
    code, text = channel_error(conn, lambda ch: ch.queue_declare(name, **second))
    assert code == 406
    assert text == (
        f"PRECONDITION_FAILED - inequivalent arg '{field}' for queue '{name}' in vhost '/': "
        f"received '{received}' but current is '{current}'"
    )
    assert counts(conn, name) == (0, 0)  # the queue is unchanged


@pytest.mark.parametrize("exclusive_first", [False, True])
def test_redeclare_with_other_exclusivity_is_locked(
    conn: BlockingConnection, unique: Unique, doomed: list[str], exclusive_first: bool
) -> None:
    name = unique("q")
    doomed.append(name)
    conn.channel().queue_declare(name, exclusive=exclusive_first)
    code, text = channel_error(
        conn, lambda ch: ch.queue_declare(name, exclusive=not exclusive_first)
    )
    # RabbitMQ 3.10: a mismatch in exclusivity is 405 RESOURCE_LOCKED, not 406, even on the
    # connection that declared the queue
    assert code == 405
    assert text == (
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{name}' in vhost "
        "'/'. It could be originally declared on another connection or the exclusive property "
        "value does not match that of the original declaration."
    )


def test_redeclare_with_new_argument_inequivalent(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("q")
    conn.channel().queue_declare(name, exclusive=True)
    code, text = channel_error(
        conn, lambda ch: ch.queue_declare(name, exclusive=True, arguments={"x-max-length": 5})
    )
    assert code == 406
    assert text == (
        f"PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue '{name}' in vhost '/': "
        "received the value '5' of type 'signedint' but current is none"
    )


def test_amq_prefixed_queue_name_refused(conn: BlockingConnection, unique: Unique) -> None:
    name = "amq." + unique("mine")
    code, text = channel_error(conn, lambda ch: ch.queue_declare(name))
    assert (code, text) == (
        403,
        f"ACCESS_REFUSED - queue name '{name}' contains reserved prefix 'amq.*'",
    )
    # RabbitMQ 3.10: a passive declare of such a name is just "not found"
    assert channel_error(conn, lambda ch: ch.queue_declare(name, passive=True)) == not_found(name)


def test_queue_name_of_255_characters(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("long").ljust(255, "x")
    ok = conn.channel().queue_declare(name, exclusive=True).method
    assert ok.queue == name
    publish(conn, name, 1)
    assert counts(conn, name) == (1, 0)


# --- operations on missing queues -----------------------------------------------------------


@pytest.mark.parametrize("operation", ["basic_get", "basic_consume", "queue_purge"])
def test_operation_on_missing_queue(
    conn: BlockingConnection, unique: Unique, operation: str
) -> None:
    name = unique("missing")

    def act(ch: BlockingChannel) -> None:
        if operation == "basic_get":
            ch.basic_get(name)
        elif operation == "basic_consume":
            ch.basic_consume(name, lambda *_args: None)
        else:
            ch.queue_purge(name)

    assert channel_error(conn, act) == not_found(name)


def test_delete_missing_queue_is_ok(conn: BlockingConnection, unique: Unique) -> None:
    channel = conn.channel()
    # RabbitMQ 3.10: delete of a missing queue answers delete-ok with message_count 0
    assert channel.queue_delete(unique("missing")).method.message_count == 0
    assert (
        channel.queue_delete(unique("missing"), if_unused=True, if_empty=True).method.message_count
        == 0
    )


# --- purge and delete -----------------------------------------------------------------------


def test_purge_returns_count_and_spares_unacked(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("q")
    conn.channel().queue_declare(name, exclusive=True)
    publish(conn, name, 4)
    holder = conn.channel()
    method, _props, body = holder.basic_get(name)  # one unacked message
    assert method is not None and body == b"m0"
    assert conn.channel().queue_purge(name).method.message_count == 3
    assert counts(conn, name) == (0, 0)
    assert conn.channel().queue_purge(name).method.message_count == 0
    holder.close()  # RabbitMQ 3.10: purge leaves unacked messages; they come back here
    assert counts(conn, name) == (1, 0)


def test_delete_returns_message_count(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("q")
    conn.channel().queue_declare(name, exclusive=True)
    publish(conn, name, 5)
    assert conn.channel().queue_delete(name).method.message_count == 5
    assert channel_error(conn, lambda ch: ch.queue_declare(name, passive=True)) == not_found(name)


def test_delete_if_unused_with_consumer(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("q")
    conn.channel().queue_declare(name, exclusive=True)
    conn.channel().basic_consume(name, lambda *_args: None)
    code, text = channel_error(conn, lambda ch: ch.queue_delete(name, if_unused=True))
    assert (code, text) == (406, f"PRECONDITION_FAILED - queue '{name}' in vhost '/' in use")
    assert counts(conn, name) == (0, 1)


def test_delete_if_empty_with_messages(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("q")
    conn.channel().queue_declare(name, exclusive=True)
    publish(conn, name, 1)
    code, text = channel_error(conn, lambda ch: ch.queue_delete(name, if_empty=True))
    assert (code, text) == (406, f"PRECONDITION_FAILED - queue '{name}' in vhost '/' not empty")
    assert counts(conn, name) == (1, 0)
    conn.channel().queue_purge(name)
    assert (
        conn.channel().queue_delete(name, if_empty=True, if_unused=True).method.message_count == 0
    )


# --- bind / unbind --------------------------------------------------------------------------


def test_bind_to_missing_exchange(conn: BlockingConnection, unique: Unique) -> None:
    queue, exchange = unique("q"), unique("missing-ex")
    conn.channel().queue_declare(queue, exclusive=True)
    code, text = channel_error(conn, lambda ch: ch.queue_bind(queue, exchange, "k"))
    assert (code, text) == (404, f"NOT_FOUND - no exchange '{exchange}' in vhost '/'")


def test_bind_missing_queue(conn: BlockingConnection, unique: Unique) -> None:
    queue = unique("missing-q")
    assert channel_error(conn, lambda ch: ch.queue_bind(queue, "amq.direct", "k")) == not_found(
        queue
    )


def test_bind_when_both_missing_reports_exchange(conn: BlockingConnection, unique: Unique) -> None:
    queue, exchange = unique("missing-q"), unique("missing-ex")
    code, text = channel_error(conn, lambda ch: ch.queue_bind(queue, exchange, "k"))
    # RabbitMQ 3.10: the exchange is checked first
    assert (code, text) == (404, f"NOT_FOUND - no exchange '{exchange}' in vhost '/'")


def test_unbind_of_missing_binding_is_ok(conn: BlockingConnection, unique: Unique) -> None:
    queue = unique("q")
    channel = conn.channel()
    channel.queue_declare(queue, exclusive=True)
    channel.queue_unbind(queue, "amq.direct", "never-bound")
    # RabbitMQ 3.10: unbind-ok even when the queue or the exchange does not exist
    channel.queue_unbind(unique("missing-q"), "amq.direct", "k")
    channel.queue_unbind(queue, unique("missing-ex"), "k")
    assert channel.is_open


def test_deleting_queue_removes_its_bindings(conn: BlockingConnection, unique: Unique) -> None:
    queue, exchange = unique("q"), unique("ex")
    channel = conn.channel()
    channel.confirm_delivery()
    channel.exchange_declare(exchange, "fanout")
    channel.queue_declare(queue, exclusive=True)
    channel.queue_bind(queue, exchange)
    channel.queue_delete(queue)
    channel.queue_declare(queue, exclusive=True)
    channel.basic_publish(exchange, "", b"x")
    assert counts(conn, queue) == (0, 0)
    channel.exchange_delete(exchange)


# --- aio-pika -------------------------------------------------------------------------------


async def test_aio_pika_queue_lifecycle(broker: Any, unique: Unique) -> None:
    connection = await aio_pika.connect(broker.url, timeout=10)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(unique("q"), exclusive=True)
        assert queue.declaration_result.message_count == 0
        for n in range(3):
            await channel.default_exchange.publish(aio_pika.Message(b"%d" % n), queue.name)
        again = await channel.declare_queue(queue.name, passive=True)
        assert again.declaration_result.message_count == 3
        assert again.declaration_result.consumer_count == 0
        with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
            await queue.delete(if_empty=True)
        assert info.value.args[0] == (
            f"PRECONDITION_FAILED - queue '{queue.name}' in vhost '/' not empty"
        )
        channel = await connection.channel()
        reopened = await channel.get_queue(queue.name)  # a passive declare
        purge_ok = await reopened.purge()
        assert purge_ok.message_count == 3
        delete_ok = await reopened.delete(if_empty=True)
        assert delete_ok.message_count == 0
        missing = unique("missing")
        with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity) as absent:
            await channel.declare_queue(missing, passive=True)
        assert absent.value.args[0] == f"NOT_FOUND - no queue '{missing}' in vhost '/'"
