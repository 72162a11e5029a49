"""A blocking AMQP 0-9-1 consumer on a plain socket (socket_conn.py): the hot path of
reading.

A stream-mode read on an executor is one consumer from one offset to another, and queue
mode one consumer in the driver-side source process: no other channel, no publishing.
Each delivery is kept as its decoded method, content header and body (wire_read.py),
several times faster than the asyncio client's message objects.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pamqp import commands

from kanin.spark import wire_read
from kanin.spark.client import not_a_stream
from kanin.spark.socket_conn import BODY, CHANNEL, HEADER, METHOD, SocketConnection, decoded
from kanin.spark.wire_read import Deliver


class Delivery:
    """One message as it came: the deliver method, its content header, its body."""

    __slots__ = ("body", "deliver", "properties")

    def __init__(self, deliver: Deliver, properties: Any, body: bytes) -> None:
        self.deliver = deliver
        self.properties = properties
        self.body = body


class SocketConsumer(SocketConnection):
    """One connection, one channel, one consumer; `deliveries()` yields what comes, a
    chunk read from the socket at a time."""

    def open(self, prefetch: int, arguments: dict[str, Any]) -> None:
        self.open_channel()
        self.call(commands.Basic.Qos(prefetch_count=prefetch), commands.Basic.QosOk)
        queue = self.options.queue or ""
        self.call(commands.Queue.Declare(queue=queue, passive=True), commands.Queue.DeclareOk)
        consume = commands.Basic.Consume(queue=queue, arguments=arguments)
        self.call(consume, commands.Basic.ConsumeOk)

    def refuse(self, value: Any, refused_user: str | None = None) -> None:
        # RabbitMQ refuses a stream offset for a classic or quorum queue with a 406.
        if (
            isinstance(value, commands.Channel.Close)
            and value.reply_code == 406
            and "x-stream-offset" in (value.reply_text or "")
        ):
            raise not_a_stream(self.options.queue or "")
        super().refuse(value, refused_user)

    def deliveries(self) -> Iterator[list[Delivery]]:
        """What the broker sent, a list per read from the socket (never an empty one)."""
        deliver: Deliver | None = None
        properties: Any = None
        size = 0
        parts: list[bytes] = []
        got: list[Delivery] = []
        while True:
            for kind, channel, payload in self.raw_frames():
                if kind == BODY:
                    parts.append(payload)
                    if deliver is not None and sum(map(len, parts)) >= size:
                        body = parts[0] if len(parts) == 1 else b"".join(parts)
                        got.append(Delivery(deliver, properties, body))
                        deliver = None
                elif kind == METHOD and (method := wire_read.deliver(payload)) is not None:
                    deliver, parts = method, []
                elif kind == HEADER:
                    size, properties = wire_read.content_header(payload)
                    if size == 0 and deliver is not None:
                        got.append(Delivery(deliver, properties, b""))
                        deliver = None
                else:
                    self.refuse(decoded(kind, channel, payload))
            if got:
                yield got
                got = []

    def ack(self, delivery: Delivery) -> None:
        """Ack every delivery up to this one (credit for the next ones)."""
        self.send(CHANNEL, commands.Basic.Ack(delivery.deliver.delivery_tag or 0, multiple=True))
