"""AMQP steps the connector shares, on aio-pika: connecting, finding a queue, telling
kanin from other brokers. All are coroutines for the process's loop thread
(loop.py); errors a user can fix come out as KaninSparkError naming the option to fix.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any
from urllib.parse import unquote, urlsplit

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractQueue

from kanin.spark.options import QUEUE, URI, KaninOptions

CONNECT_TIMEOUT_S = 15.0


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
            f"{vhost_name(options.uri)!r} right?): {error!r}"
        ) from None


def vhost_name(uri: str) -> str:
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
            f"{vhost_name(options.uri)!r} at {options.safe_uri}"
        ) from None


def is_kanin(connection: AbstractConnection) -> bool:
    """kanin says it is RabbitMQ (for clients that pick behaviour by product), but names
    itself in a server property of its own."""
    transport = connection.transport
    properties: dict[str, Any] = dict(transport.connection.server_properties) if transport else {}
    return "kanin_version" in properties


def not_a_stream(queue: str) -> KaninSparkError:
    return KaninSparkError(
        f"queue {queue!r} (option {QUEUE!r}) is not a stream: its deliveries carry no "
        "x-stream-offset header (stream mode reads queues declared with x-queue-type: stream; "
        "read classic and quorum queues with option mode=queue)"
    )
