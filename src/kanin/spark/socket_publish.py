"""Publishing with confirms on a plain socket (socket_conn.py): the sink's hot path.

Messages are encoded here, not through pamqp's objects (several times slower per
message): the publish method frame is made once per routing key, and the content header
holds the few properties a sink sets (headers of text values, persistent delivery mode,
correlation and message ids). The frames of many messages go out in one send, and up to
a window of them may wait for their confirms at once, so the broker is never left idle
waiting for the next message while the sink waits for a confirm (RabbitMQ's advice on
publisher confirms: https://www.rabbitmq.com/confirms.html#publisher-confirms).

Every guarantee of the asyncio publisher it replaces holds: all messages are mandatory,
a return or a nack raises, a closed channel or connection raises, and `finish()` returns
only once the broker has confirmed every message published.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from pamqp import commands
from pamqp.header import ContentHeader

from kanin.spark.client import KaninSparkError, vhost_name
from kanin.spark.options import EXCHANGE, KaninOptions
from kanin.spark.socket_conn import BODY, CHANNEL, FRAME_END, FRAME_HEAD, HEADER, SocketConnection

PERSISTENT = 2
# Property flags of a content header (AMQP 0-9-1's basic class), in their wire order.
_HEADERS, _DELIVERY_MODE, _CORRELATION_ID, _MESSAGE_ID = 0x2000, 0x1000, 0x0400, 0x0080
_CONTENT_HEAD = struct.Struct(">HHQH")  # class id, weight, body size, property flags
_BASIC, _PUBLISH = 60, 40


def shortstr(text: str, what: str) -> bytes:
    data = text.encode()
    if len(data) > 255:
        raise KaninSparkError(f"{what} {text[:40]!r}... is longer than AMQP's 255 bytes")
    return bytes((len(data),)) + data


def longstr(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">I", len(data)) + data


def publish_method_frame(exchange: str, routing_key: str) -> bytes:
    """basic.publish, mandatory, as a whole frame on channel 1."""
    payload = (
        struct.pack(">HHH", _BASIC, _PUBLISH, 0)
        + shortstr(exchange, "exchange name")
        + shortstr(routing_key, "routing key")
        + b"\x01"  # mandatory, not immediate
    )
    return FRAME_HEAD.pack(1, CHANNEL, len(payload)) + payload + FRAME_END


def content_frames(
    body: bytes,
    headers: Mapping[str, str],
    message_id: str,
    correlation_id: str | None,
    frame_max: int,
) -> bytes:
    """A persistent message's content header frame and body frames."""
    flags = _HEADERS | _DELIVERY_MODE | _MESSAGE_ID
    table = b"".join(
        shortstr(key, "header name") + b"S" + longstr(value) for key, value in headers.items()
    )
    properties = [struct.pack(">I", len(table)), table, bytes((PERSISTENT,))]
    if correlation_id is not None:
        flags |= _CORRELATION_ID
        properties.append(shortstr(correlation_id, "correlation id"))
    properties.append(shortstr(message_id, "message id"))
    payload = _CONTENT_HEAD.pack(_BASIC, 0, len(body), flags) + b"".join(properties)
    parts = [FRAME_HEAD.pack(HEADER, CHANNEL, len(payload)), payload, FRAME_END]
    step = frame_max - 8
    for at in range(0, len(body), step):
        piece = body[at : at + step]
        parts += [FRAME_HEAD.pack(BODY, CHANNEL, len(piece)), piece, FRAME_END]
    return b"".join(parts)


class SocketPublisher(SocketConnection):
    """One connection, one channel in confirm mode. `publish()` queues a message's frames,
    `flush()` sends what is queued and, while more than `window` messages wait for their
    confirms, reads confirms; `finish()` flushes and waits for every confirm."""

    def __init__(
        self, options: KaninOptions, confirm_timeout_s: float, window: int, purpose: str
    ) -> None:
        super().__init__(options, confirm_timeout_s, purpose)
        self.window = window
        self._out: list[bytes] = []
        self._methods: dict[str, bytes] = {}
        self._published = 0  # the delivery tag of the last message published
        self._lowest = 1  # no message below this tag waits for a confirm
        # Delivery tag -> (message id, routing key), while the confirm is outstanding.
        self._waiting: dict[int, tuple[str, str]] = {}
        self._returned: commands.Basic.Return | None = None

    def open(self) -> None:
        self.open_channel()
        self.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
        if self.options.exchange:
            declare = commands.Exchange.Declare(exchange=self.options.exchange, passive=True)
            self.call(declare, commands.Exchange.DeclareOk)

    def not_found(self, reason: str) -> KaninSparkError:
        if not self.options.exchange:
            return super().not_found(reason)
        return KaninSparkError(
            f"no exchange {self.options.exchange!r} (option {EXCHANGE!r}) in virtual host "
            f"{vhost_name(self.options.uri)!r} at {self.options.safe_uri}"
        )

    @property
    def unconfirmed(self) -> int:
        return len(self._waiting)

    def publish(
        self,
        routing_key: str,
        body: bytes,
        headers: Mapping[str, str],
        message_id: str,
        correlation_id: str | None,
    ) -> None:
        method = self._methods.get(routing_key)
        if method is None:
            method = self._methods[routing_key] = publish_method_frame(
                self.options.exchange, routing_key
            )
        self._out.append(method)
        self._out.append(content_frames(body, headers, message_id, correlation_id, self.frame_max))
        self._published += 1
        self._waiting[self._published] = (message_id, routing_key)

    def flush(self) -> None:
        if self._out:
            data, self._out = b"".join(self._out), []
            self.send_bytes(data)
        while len(self._waiting) > self.window:
            self._read_confirms()

    def finish(self) -> None:
        self.flush()
        while self._waiting:
            self._read_confirms()

    def _read_confirms(self) -> None:
        """Handle what one read from the socket brought: confirms, returns, closes."""
        for _channel, value in self.frames():
            if isinstance(value, commands.Basic.Ack):
                self._confirmed(value.delivery_tag or 0, bool(value.multiple))
            elif isinstance(value, commands.Basic.Nack):
                tag = value.delivery_tag or 0
                raise self._failure(self._lowest if value.multiple else tag, "was nacked")
            elif isinstance(value, commands.Basic.Return):
                self._returned = value
            elif isinstance(value, ContentHeader) and self._returned is not None:
                raise self._returned_failure(value)
            elif not isinstance(value, bytes):
                self.refuse(value)

    def _confirmed(self, tag: int, multiple: bool) -> None:
        if not multiple:
            self._waiting.pop(tag, None)
            return
        for each in range(self._lowest, tag + 1):
            self._waiting.pop(each, None)
        self._lowest = max(self._lowest, tag + 1)

    def _failure(self, tag: int, what: str) -> KaninSparkError:
        message_id, routing_key = self._waiting.get(tag, ("?", "?"))
        return KaninSparkError(
            f"message {message_id!r} (routing key {routing_key!r}) {what} by the broker"
        )

    def _returned_failure(self, header: ContentHeader) -> KaninSparkError:
        returned = self._returned
        assert returned is not None
        message_id = header.properties.message_id if header.properties else None
        return KaninSparkError(
            f"message {message_id!r} (routing key {returned.routing_key!r}) was returned as "
            f"unroutable: {returned.reply_code} {returned.reply_text}"
        )
