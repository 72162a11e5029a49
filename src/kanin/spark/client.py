"""AMQP steps the connector shares, on aio-pika: connecting, finding a queue, and reading
where a stream starts and ends. All are coroutines for the process's loop thread
(loop.py); errors a user can fix come out as KaninSparkError naming the option to fix.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import Any
from urllib.parse import unquote, urlsplit

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage, AbstractQueue

from kanin.spark.offsets import StreamExtent
from kanin.spark.options import QUEUE, URI, KaninOptions
from kanin.spark.rows import stream_offset

CONNECT_TIMEOUT_S = 15.0
# How long to wait for a stream's first message once the broker said it holds some.
FIRST_DELIVERY_TIMEOUT_S = 30.0


class KaninSparkError(RuntimeError):
    """Something the user can fix (a URI, credentials, a queue name); the message says what."""


async def connect(options: KaninOptions, purpose: str) -> AbstractConnection:
    """A connection named after its purpose (it shows in the broker's connection list)."""
    try:
        return await aio_pika.connect(
            options.uri,
            timeout=CONNECT_TIMEOUT_S,
            client_properties={"connection_name": f"kanin.spark {purpose}"},
        )
    except aiormq.exceptions.ProbableAuthenticationError as error:
        user = unquote(urlsplit(options.uri).username or "guest")
        raise KaninSparkError(
            f"the broker at {options.safe_uri} refused user {user!r}: check the user name and "
            f"password in option {URI!r} ({error})"
        ) from None
    except (TimeoutError, OSError, aiormq.exceptions.AMQPError) as error:
        raise KaninSparkError(
            f"cannot connect to {options.safe_uri} (option {URI!r}; is the virtual host "
            f"{_vhost(options.uri)!r} right?): {error!r}"
        ) from None


def _vhost(uri: str) -> str:
    path = urlsplit(uri).path
    return unquote(path[1:]) if len(path) > 1 else "/"


async def close_quietly(connection: AbstractConnection | None) -> None:
    """Close, ignoring a connection the broker already closed (a stream closes one that
    rejects a delivery, which some client code paths do on the way out)."""
    if connection is not None:
        with suppress(Exception):
            await connection.close()


async def find_queue(channel: AbstractChannel, options: KaninOptions) -> AbstractQueue:
    """The queue of option 'queue', declared passively: its message count comes with it."""
    assert options.queue is not None  # options.parse_options requires it for reading
    try:
        return await channel.declare_queue(options.queue, passive=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        raise KaninSparkError(
            f"no queue {options.queue!r} (option {QUEUE!r}) in virtual host "
            f"{_vhost(options.uri)!r} at {options.safe_uri}"
        ) from None


def is_kanin(connection: AbstractConnection) -> bool:
    """kanin says it is RabbitMQ (for clients that pick behaviour by product), but names
    itself in a server property of its own."""
    transport = connection.transport
    properties: dict[str, Any] = dict(transport.connection.server_properties) if transport else {}
    return "kanin_version" in properties


async def stream_extent(
    connection: AbstractConnection, options: KaninOptions
) -> StreamExtent | None:
    """Offsets [first, tail) the stream holds now, or None while it holds nothing.

    On kanin the passive declare-ok's message count of a stream is exact at once (tail
    minus first, holes of failed writes included), and the first offset is what a
    consumer from "first" gets first. The first offset is read before the count, so
    retention running in between can only make the tail found lower than the real one,
    never higher: a batch never waits for messages that do not exist.
    RabbitMQ's count lags by seconds, so there the tail would need a scan instead.
    """
    if not is_kanin(connection):
        raise KaninSparkError(
            "stream mode needs a kanin broker for now: RabbitMQ's queue.declare-ok count of "
            f"a stream lags, so it cannot say where {options.queue!r} ends"
        )
    channel = await connection.channel()
    try:
        queue = await find_queue(channel, options)
        if not _message_count(queue):
            return None
        first = await _first_offset(channel, queue)
        count = _message_count(await find_queue(channel, options))
        return StreamExtent(first, first + count)
    finally:
        with suppress(Exception):
            await channel.close()


def not_a_stream(queue: str) -> KaninSparkError:
    return KaninSparkError(
        f"queue {queue!r} (option {QUEUE!r}) is not a stream: its deliveries carry no "
        "x-stream-offset header (stream mode reads queues declared with x-queue-type: stream)"
    )


def _message_count(queue: AbstractQueue) -> int:
    result = queue.declaration_result
    return int(result.message_count or 0) if result is not None else 0


async def _first_offset(channel: AbstractChannel, queue: AbstractQueue) -> int:
    """The offset of the stream's first message: the first delivery to a consumer from
    "first" with credit for one. It is never acked, and the channel is closed after it
    (never rejected: a stream answers a reject by closing the connection)."""
    got: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def on_message(message: AbstractIncomingMessage) -> None:
        if got.done():
            return
        try:
            got.set_result(stream_offset(message.headers))
        except ValueError:
            got.set_exception(not_a_stream(queue.name))

    await channel.set_qos(prefetch_count=1)
    await queue.consume(on_message, arguments={"x-stream-offset": "first"})
    try:
        return await asyncio.wait_for(got, FIRST_DELIVERY_TIMEOUT_S)
    except TimeoutError:
        raise KaninSparkError(
            f"stream {queue.name!r} holds messages but sent none to a reader from its first "
            f"within {FIRST_DELIVERY_TIMEOUT_S:.0f} s"
        ) from None
