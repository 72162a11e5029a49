"""Connection: channel errors vs connection errors, closing, lost connections."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import aio_pika
import pika
import pika.exceptions
import pytest
from pamqp import commands

from helpers import pika_params, raw_client
from rawamqp import ConnectionClosedError

# -- channel errors vs connection errors --------------------------------------------------------


def test_channel_error_closes_only_that_channel(broker: Any, unique: Callable[[str], str]) -> None:
    missing, queue = unique("missing"), unique("alive")
    connection = pika.BlockingConnection(pika_params(broker))
    other = pika.BlockingConnection(pika_params(broker))
    try:
        doomed, survivor = connection.channel(), connection.channel()
        survivor.queue_declare(queue, auto_delete=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            doomed.queue_declare(missing, passive=True)
        assert (info.value.reply_code, info.value.reply_text) == (
            404,
            f"NOT_FOUND - no queue '{missing}' in vhost '/'",
        )
        assert doomed.is_closed
        assert connection.is_open and survivor.is_open
        survivor.basic_publish("", queue, b"still here")
        assert survivor.basic_get(queue, auto_ack=True)[2] == b"still here"
        assert other.channel().queue_declare(queue, passive=True).method.message_count == 0
        # The same channel number can be opened again on the connection.
        again = connection.channel(channel_number=doomed.channel_number)
        assert again.queue_declare(queue, passive=True).method.queue == queue
    finally:
        connection.close()
        other.close()


async def test_channel_error_closes_only_that_channel_aio_pika(
    broker: Any, unique: Callable[[str], str]
) -> None:
    missing, queue_name = unique("missing"), unique("alive")
    connection = await aio_pika.connect(broker.url, timeout=5)
    try:
        doomed = await connection.channel()
        survivor = await connection.channel()
        queue = await survivor.declare_queue(queue_name, auto_delete=True)
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity) as info:
            await doomed.declare_queue(missing, passive=True)
        assert info.value.args[0] == f"NOT_FOUND - no queue '{missing}' in vhost '/'"
        assert doomed.is_closed
        assert not connection.is_closed and not survivor.is_closed
        await survivor.default_exchange.publish(aio_pika.Message(b"ok"), routing_key=queue_name)
        message = await queue.get(no_ack=True, timeout=5)
        assert message is not None and message.body == b"ok"
    finally:
        await connection.close()


def test_closing_channel_ignores_methods_until_close_ok(
    broker: Any, unique: Callable[[str], str]
) -> None:
    with raw_client(broker) as client:
        client.handshake()
        client.open_channel(1)
        client.send_method(1, commands.Queue.Declare(queue=unique("missing"), passive=True))
        close = client.expect(commands.Channel.Close, channel=1)
        assert close.reply_code == 404
        assert (close.class_id, close.method_id) == (50, 10)
        # RabbitMQ 3.10: until close-ok, further methods on the channel are dropped silently.
        client.send_method(1, commands.Queue.Declare(exclusive=True))
        with pytest.raises(TimeoutError):
            client.read_frame(timeout=0.5)
        client.send_method(1, commands.Channel.CloseOk())
        client.open_channel(1)
        client.rpc(1, commands.Queue.Declare(exclusive=True), commands.Queue.DeclareOk)


CLIENT_CLOSE = commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)


def cross_channel_closes(client: Any, missing: str) -> None:
    """Fail channel 1, then close it from the client side before reading the server's close:
    the two channel.close frames cross on the wire."""
    client.handshake()
    client.open_channel(1)
    client.send_method(1, commands.Queue.Declare(queue=missing, passive=True))
    client.send_method(1, CLIENT_CLOSE)
    assert client.expect(commands.Channel.Close, channel=1).reply_code == 404
    # RabbitMQ 3.10: the client's close is answered with close-ok ...
    client.expect(commands.Channel.CloseOk, channel=1)


def test_crossing_channel_closes_then_close_ok_frees_the_channel(
    broker: Any, unique: Callable[[str], str]
) -> None:
    with raw_client(broker) as client:
        cross_channel_closes(client, unique("missing"))
        # ... and the client's close-ok for the server's close is what frees the number.
        client.send_method(1, commands.Channel.CloseOk())
        client.open_channel(1)
        client.rpc(1, commands.Queue.Declare(exclusive=True), commands.Queue.DeclareOk)
        client.close_connection()


def test_crossing_channel_closes_keep_the_channel_until_close_ok(
    broker: Any, unique: Callable[[str], str]
) -> None:
    with raw_client(broker) as client:
        cross_channel_closes(client, unique("missing"))
        # Still closing: another close gets another close-ok, other methods are dropped ...
        client.send_method(1, CLIENT_CLOSE)
        client.expect(commands.Channel.CloseOk, channel=1)
        client.send_method(1, commands.Queue.Declare(exclusive=True))
        with pytest.raises(TimeoutError):
            client.read_frame(timeout=0.5)
        # ... and opening it again before close-ok is RabbitMQ 3.10's connection error.
        client.send_method(1, commands.Channel.Open())
        close = client.expect_connection_close()
        assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
            504,
            "CHANNEL_ERROR - second 'channel.open' seen",
            20,
            10,
        )


# -- closing ------------------------------------------------------------------------------------


def test_client_connection_close_gets_close_ok(broker: Any) -> None:
    with raw_client(broker) as client:
        client.handshake()
        client.open_channel(1)
        client.send_method(
            0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
        )
        client.expect(commands.Connection.CloseOk, channel=0)
        # RabbitMQ 3.10: then ignores any further frame and leaves the TCP close to the client.
        with contextlib.suppress(OSError):
            client.send_method(2, commands.Channel.Open())
        try:
            extra: object = client.read_frame(timeout=0.5)
        except (TimeoutError, ConnectionClosedError):
            extra = None
        assert extra is None


def test_client_channel_close_gets_close_ok(broker: Any) -> None:
    with raw_client(broker) as client:
        client.handshake()
        client.open_channel(1)
        client.rpc(
            1,
            commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0),
            commands.Channel.CloseOk,
        )
        client.open_channel(1)
        client.close_connection()


async def test_aio_pika_connect_and_close(broker: Any, unique: Callable[[str], str]) -> None:
    connection = await aio_pika.connect(broker.url, timeout=5)
    channel = await connection.channel()
    queue = await channel.declare_queue(unique("aio"), auto_delete=True)
    assert queue.name.startswith("test.aio.")
    await connection.close()
    assert connection.is_closed


# -- unacked deliveries of a lost connection ----------------------------------------------------


async def test_unacked_messages_requeued_when_socket_drops(
    broker: Any, unique: Callable[[str], str]
) -> None:
    queue_name = unique("requeue")
    connection = await aio_pika.connect(broker.url, timeout=5)
    try:
        channel = await connection.channel()
        # Not auto-delete: the queue would go (with its messages) when the raw consumer does.
        queue = await channel.declare_queue(queue_name, auto_delete=False)
        for index in range(3):
            await channel.default_exchange.publish(
                aio_pika.Message(f"m{index}".encode()), routing_key=queue_name
            )
        with raw_client(broker) as client:
            client.handshake()
            client.open_channel(1)
            client.rpc(1, commands.Basic.Consume(queue=queue_name), commands.Basic.ConsumeOk)
            delivered = []
            for expected_tag in (1, 2, 3):
                deliver = client.expect(commands.Basic.Deliver, channel=1)
                assert (deliver.delivery_tag, deliver.redelivered) == (expected_tag, False)
                delivered.append(b"".join(client.read_content(1)[1]))
            assert delivered == [b"m0", b"m1", b"m2"]
            # Leave: no ack, no channel.close, no connection.close; just drop the socket.
        received: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
        await queue.consume(received.put)
        bodies = []
        for _ in range(3):
            message = await asyncio.wait_for(received.get(), timeout=5)
            assert message.redelivered is True
            bodies.append(message.body)
            await message.ack()
        # Requeued messages keep their original order.
        assert bodies == [b"m0", b"m1", b"m2"]
        await queue.delete(if_unused=False, if_empty=False)
    finally:
        await connection.close()
