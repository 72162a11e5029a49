"""Exchanges: the default exchange, the amq.* exchanges, declare and delete rules.

Reply codes and texts are the ones RabbitMQ 3.10 sends; kanin must send the same.
Direct, fanout, topic and headers matching live in test_exchanges_routing.py, exchange-to-exchange
bindings, alternate exchanges and internal exchanges in test_exchanges_e2e.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aio_pika
import aiormq
import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ConnectionClosedByBroker

from helpers import Unique, channel_error, confirming, delete_afterwards, drain, private_queue


@pytest.fixture
def doomed(broker: Any) -> Iterator[list[str]]:
    """Names of durable/non-auto-delete exchanges to remove from a shared external broker."""
    yield from delete_afterwards(broker, lambda channel, name: channel.exchange_delete(name))


DEFAULT_EXCHANGE_REFUSED = (403, "ACCESS_REFUSED - operation not permitted on the default exchange")


# --- the default exchange -------------------------------------------------------------------


def test_default_exchange_routes_by_queue_name(conn: BlockingConnection, unique: Unique) -> None:
    channel = confirming(conn)
    queue, other = unique("q"), unique("other")
    channel.queue_declare(queue, exclusive=True)
    channel.queue_declare(other, exclusive=True)
    channel.basic_publish("", queue, b"to-queue")
    channel.basic_publish("", other, b"to-other")
    assert drain(channel, queue) == [b"to-queue"]
    assert drain(channel, other) == [b"to-other"]


def test_default_exchange_drops_key_without_queue(conn: BlockingConnection, unique: Unique) -> None:
    channel = confirming(conn)
    # pika, in confirm mode, hands basic.return back as UnroutableError
    with pytest.raises(pika.exceptions.UnroutableError) as info:
        channel.basic_publish("", unique("no-such-queue"), b"x", mandatory=True)
    [returned] = info.value.messages
    assert (returned.method.reply_code, returned.method.reply_text) == (312, "NO_ROUTE")
    assert returned.body == b"x"
    assert channel.is_open


@pytest.mark.parametrize(
    "operation",
    ["queue_bind", "queue_unbind", "exchange_declare", "passive_declare", "exchange_delete"],
)
def test_default_exchange_cannot_be_touched(conn: BlockingConnection, operation: str) -> None:
    queue = private_queue(conn.channel())

    def act(channel: BlockingChannel) -> None:
        if operation == "queue_bind":
            channel.queue_bind(queue, "", "some-key")
        elif operation == "queue_unbind":
            # RabbitMQ 3.10: even unbinding the implicit binding (key == queue name) is refused.
            channel.queue_unbind(queue, "", queue)
        elif operation == "exchange_declare":
            channel.exchange_declare("", "direct")
        elif operation == "passive_declare":
            # RabbitMQ 3.10: even a passive declare of "" is refused with 403.
            channel.exchange_declare("", passive=True)
        else:
            channel.exchange_delete("")

    assert channel_error(conn, act) == DEFAULT_EXCHANGE_REFUSED


# --- the amq.* exchanges --------------------------------------------------------------------

PREDECLARED = [
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
]


@pytest.mark.parametrize(("name", "kind"), PREDECLARED)
def test_predeclared_exchange_exists(conn: BlockingConnection, name: str, kind: str) -> None:
    channel = conn.channel()
    channel.exchange_declare(name, passive=True)
    # an equivalent redeclare (durable, same type) of a system exchange is allowed
    channel.exchange_declare(name, kind, durable=True)
    assert channel.is_open


@pytest.mark.parametrize(("name", "kind"), PREDECLARED)
def test_predeclared_exchange_redeclare_other_type(
    conn: BlockingConnection, name: str, kind: str
) -> None:
    wrong = "fanout" if kind != "fanout" else "direct"
    code, text = channel_error(conn, lambda ch: ch.exchange_declare(name, wrong, durable=True))
    assert code == 406
    assert text == (
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{name}' in vhost '/': "
        f"received '{wrong}' but current is '{kind}'"
    )


@pytest.mark.parametrize("name", [name for name, _kind in PREDECLARED])
def test_predeclared_exchange_cannot_be_deleted(conn: BlockingConnection, name: str) -> None:
    code, text = channel_error(conn, lambda ch: ch.exchange_delete(name))
    assert code == 403
    assert text == f"ACCESS_REFUSED - deletion of system exchange '{name}' in vhost '/' not allowed"
    conn.channel().exchange_declare(name, passive=True)  # still there


def test_predeclared_direct_routes(conn: BlockingConnection) -> None:
    channel = confirming(conn)
    queue = private_queue(channel)
    channel.queue_bind(queue, "amq.direct", queue)
    channel.basic_publish("amq.direct", queue, b"via amq.direct")
    assert drain(channel, queue) == [b"via amq.direct"]


def test_declare_amq_prefixed_exchange_refused(conn: BlockingConnection, unique: Unique) -> None:
    name = "amq." + unique("mine")
    code, text = channel_error(conn, lambda ch: ch.exchange_declare(name, "direct"))
    assert code == 403
    assert text == f"ACCESS_REFUSED - exchange name '{name}' contains reserved prefix 'amq.*'"


# --- declare / redeclare / passive ----------------------------------------------------------


def test_redeclare_identical_is_ok(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("ex")
    channel = conn.channel()
    channel.exchange_declare(name, "topic", auto_delete=True)
    channel.exchange_declare(name, "topic", auto_delete=True)
    channel.exchange_declare(name, passive=True)
    channel.exchange_delete(name)


@pytest.mark.parametrize(
    ("field", "changes", "received", "current"),
    [
        ("type", {"exchange_type": "fanout"}, "fanout", "direct"),
        ("durable", {"durable": True}, "true", "false"),
        ("auto_delete", {"auto_delete": False}, "false", "true"),
        ("internal", {"internal": True}, "true", "false"),
    ],
)
def test_redeclare_inequivalent(
    conn: BlockingConnection,
    unique: Unique,
    field: str,
    changes: dict[str, Any],
    received: str,
    current: str,
) -> None:
    name = unique("ex")
    conn.channel().exchange_declare(name, "direct", auto_delete=True)
    options: dict[str, Any] = {"exchange_type": "direct", "auto_delete": True} | changes
    code, text = channel_error(conn, lambda ch: ch.exchange_declare(name, **options))
    assert code == 406
    assert text == (
        f"PRECONDITION_FAILED - inequivalent arg '{field}' for exchange '{name}' in vhost '/': "
        f"received '{received}' but current is '{current}'"
    )
    conn.channel().exchange_delete(name)


def test_redeclare_with_new_argument_inequivalent(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("ex")
    conn.channel().exchange_declare(name, "direct", auto_delete=True)
    code, text = channel_error(
        conn,
        lambda ch: ch.exchange_declare(
            name, "direct", auto_delete=True, arguments={"alternate-exchange": "foo"}
        ),
    )
    assert code == 406
    # RabbitMQ 3.10: for arguments the text names the value and its AMQP field type.
    assert text == (
        f"PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange '{name}' "
        "in vhost '/': received the value 'foo' of type 'longstr' but current is none"
    )
    conn.channel().exchange_delete(name)


def test_passive_declare_missing_exchange(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("missing")
    code, text = channel_error(conn, lambda ch: ch.exchange_declare(name, passive=True))
    assert (code, text) == (404, f"NOT_FOUND - no exchange '{name}' in vhost '/'")


def test_passive_declare_ignores_type_and_flags(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("ex")
    channel = conn.channel()
    channel.exchange_declare(name, "topic", auto_delete=True)
    # RabbitMQ 3.10: passive declare only checks existence; type/flags are not compared.
    channel.exchange_declare(name, "fanout", passive=True, durable=True)
    assert channel.is_open
    channel.exchange_delete(name)


def test_invalid_exchange_type_closes_connection(conn: BlockingConnection, unique: Unique) -> None:
    channel = conn.channel()
    # RabbitMQ 3.10: an unknown type is a connection error (503), not a channel error.
    with pytest.raises(ConnectionClosedByBroker) as info:
        channel.exchange_declare(unique("ex"), "nosuchtype")
    assert info.value.reply_code == 503
    assert info.value.reply_text == "COMMAND_INVALID - unknown exchange type 'nosuchtype'"
    assert not conn.is_open


def test_publish_to_missing_exchange(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("missing")

    def publish_then_sync(channel: BlockingChannel) -> None:
        channel.basic_publish(name, "rk", b"lost")
        channel.queue_declare("", exclusive=True)  # the error surfaces before this reply

    code, text = channel_error(conn, publish_then_sync)
    assert (code, text) == (404, f"NOT_FOUND - no exchange '{name}' in vhost '/'")
    assert conn.channel().is_open


# --- delete ---------------------------------------------------------------------------------


def test_delete_missing_exchange_is_ok(conn: BlockingConnection, unique: Unique) -> None:
    channel = conn.channel()
    # RabbitMQ 3.10: deleting an exchange that does not exist answers delete-ok.
    channel.exchange_delete(unique("missing"))
    assert channel.is_open


def test_delete_if_unused_refused_when_bound(
    conn: BlockingConnection, unique: Unique, doomed: list[str]
) -> None:
    name = unique("ex")
    doomed.append(name)
    channel = conn.channel()
    channel.exchange_declare(name, "direct")
    queue = private_queue(channel)
    channel.queue_bind(queue, name, "k")
    code, text = channel_error(conn, lambda ch: ch.exchange_delete(name, if_unused=True))
    assert (code, text) == (406, f"PRECONDITION_FAILED - exchange '{name}' in vhost '/' in use")
    channel = conn.channel()
    channel.exchange_declare(name, passive=True)
    channel.queue_unbind(queue, name, "k")
    channel.exchange_delete(name, if_unused=True)
    code, _text = channel_error(conn, lambda ch: ch.exchange_declare(name, passive=True))
    assert code == 404


def test_delete_if_unused_ignores_bindings_as_destination(
    conn: BlockingConnection, unique: Unique, doomed: list[str]
) -> None:
    source, destination = unique("src"), unique("dst")
    doomed.extend([source, destination])
    channel = conn.channel()
    channel.exchange_declare(source, "fanout")
    channel.exchange_declare(destination, "fanout")
    channel.exchange_bind(destination, source)
    # RabbitMQ 3.10: "in use" means having bindings *from* the exchange; being a destination
    # does not count.
    channel.exchange_delete(destination, if_unused=True)
    code, _text = channel_error(conn, lambda ch: ch.exchange_declare(destination, passive=True))
    assert code == 404
    conn.channel().exchange_delete(source)


def test_deleting_exchange_removes_its_bindings(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("ex")
    channel = confirming(conn)
    channel.exchange_declare(name, "fanout")
    queue = private_queue(channel)
    channel.queue_bind(queue, name)
    channel.exchange_delete(name)
    channel.exchange_declare(name, "fanout", auto_delete=True)
    channel.basic_publish(name, "", b"after re-create")
    assert drain(channel, queue) == []
    channel.exchange_delete(name)


def test_auto_delete_exchange_lifecycle(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("ad")
    channel = conn.channel()
    channel.exchange_declare(name, "direct", auto_delete=True)
    channel.exchange_declare(name, passive=True)  # not deleted before it ever had a binding
    queue = private_queue(channel)
    channel.queue_bind(queue, name, "one")
    channel.queue_bind(queue, name, "two")
    channel.queue_unbind(queue, name, "one")
    channel.exchange_declare(name, passive=True)  # one binding left
    channel.queue_unbind(queue, name, "two")
    code, text = channel_error(conn, lambda ch: ch.exchange_declare(name, passive=True))
    assert (code, text) == (404, f"NOT_FOUND - no exchange '{name}' in vhost '/'")


# --- the same through aio-pika --------------------------------------------------------------


async def test_aio_pika_exchange_declare_and_route(broker: Any, unique: Unique) -> None:
    connection = await aio_pika.connect(broker.url, timeout=10)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.declare_exchange(
            unique("direct"), aio_pika.ExchangeType.DIRECT, auto_delete=True
        )
        queue = await channel.declare_queue(exclusive=True)
        await queue.bind(exchange, "key")
        await exchange.publish(aio_pika.Message(b"hello"), routing_key="key")
        await exchange.publish(aio_pika.Message(b"nobody"), routing_key="other")
        message = await queue.get(no_ack=True, timeout=5)
        assert message is not None and message.body == b"hello"
        assert await queue.get(no_ack=True, fail=False, timeout=5) is None


async def test_aio_pika_redeclare_inequivalent(broker: Any, unique: Unique) -> None:
    name = unique("ex")
    connection = await aio_pika.connect(broker.url, timeout=10)
    async with connection:
        channel = await connection.channel()
        await channel.declare_exchange(name, aio_pika.ExchangeType.TOPIC, auto_delete=True)
        other = await connection.channel()
        with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
            await other.declare_exchange(name, aio_pika.ExchangeType.HEADERS, auto_delete=True)
        assert info.value.args[0] == (
            f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{name}' in vhost '/': "
            "received 'headers' but current is 'topic'"
        )
        third = await connection.channel()
        absent = unique("missing")
        with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity) as missing:
            await third.declare_exchange(absent, passive=True)
        assert missing.value.args[0] == f"NOT_FOUND - no exchange '{absent}' in vhost '/'"
        await (await connection.channel()).exchange_delete(name)
