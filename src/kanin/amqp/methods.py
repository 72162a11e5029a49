"""Method (de)serialisation on top of pamqp's spec-generated command classes.

pamqp's generic marshalling walks each method's attribute list; the three
methods on the hot path (basic.publish in, basic.ack in, basic.deliver out)
have small struct-based fast paths here whose output tests compare with pamqp's.
"""

from __future__ import annotations

import struct
from typing import Any, Final, TypeVar

from pamqp import commands
from pamqp import decode as pamqp_decode
from pamqp import encode as pamqp_encode

from kanin.amqp import constants as C
from kanin.amqp.errors import AMQPError, ConnectionError_, erlang_binary
from kanin.amqp.tables import check_table_depth

_METHOD_ID: Final = struct.Struct(">I")
_SHORT: Final = struct.Struct(">H")
_LONG: Final = struct.Struct(">I")

T = TypeVar("T")
_ACK: Final = struct.Struct(">QB")
_FRAME_HEAD: Final = struct.Struct(">BHI")
_TAG: Final = struct.Struct(">Q")

PUBLISH_INDEX: Final = commands.Basic.Publish.index
ACK_INDEX: Final = commands.Basic.Ack.index
DELIVER_INDEX: Final = commands.Basic.Deliver.index


def class_and_method(index: int) -> tuple[int, int]:
    return index >> 16, index & 0xFFFF


def decode_method(payload: bytes) -> Any:
    if len(payload) < 4:
        raise ConnectionError_(C.FRAME_ERROR, "method frame too short")
    (index,) = _METHOD_ID.unpack_from(payload)
    try:
        if index == PUBLISH_INDEX:
            return _decode_publish(payload)
        if index == ACK_INDEX:
            return _decode_ack(payload)
        cls = commands.INDEX_MAPPING.get(index)
        if cls is None:
            class_id, method_id = class_and_method(index)
            raise ConnectionError_(
                C.COMMAND_INVALID, f"unknown method class {class_id} method {method_id}"
            )
        method: Any = object.__new__(cls)
        unmarshal_arguments(method, payload, 4)
        return method
    except ConnectionError_:
        raise
    except Exception as exc:  # ValueError, struct.error, IndexError, RecursionError, ...
        # RabbitMQ 3.10 answers undecodable arguments with 501 and the argument bytes.
        class_id, method_id = class_and_method(index)
        raise ConnectionError_(
            C.FRAME_ERROR, f"cannot decode {erlang_binary(payload[4:])}", class_id, method_id
        ) from exc


def unmarshal_arguments(method: Any, payload: bytes, offset: int) -> None:
    """Decode a method's arguments in spec order, strictly.

    pamqp's own loop trusts string lengths and ignores trailing bytes; RabbitMQ's
    decoder matches the whole payload, so a short string or leftover bytes is an error.
    """
    end = len(payload)
    bit_byte, bit_index = 0, 8  # bit_index 8: no bit octet being read
    for name in method.__slots__:
        data_type = method.amqp_type(name)
        if data_type == "bit":
            if bit_index == 8:
                if offset >= end:
                    raise ValueError("method arguments end inside a bit field")
                bit_byte, bit_index = payload[offset], 0
                offset += 1
            setattr(method, name, bool(bit_byte & (1 << bit_index)))
            bit_index += 1
            continue
        bit_index = 8
        if data_type == "shortstr":
            length = payload[offset]
            offset += 1
            value: Any = payload[offset : offset + length].decode("utf-8")
            offset += length
        elif data_type == "longstr":
            (length,) = _LONG.unpack_from(payload, offset)
            offset += 4
            raw = payload[offset : offset + length]
            offset += length
            try:
                value = raw.decode("utf-8")
            except UnicodeDecodeError:
                value = raw  # SASL responses and the like may be binary
        else:
            if data_type == "table":
                check_table_depth(payload, offset)  # before pamqp's decoder recurses
            consumed, value = pamqp_decode.by_type(payload[offset:], data_type)
            offset += consumed
        if offset > end:
            raise ValueError(f"argument {name} runs past the end of the frame")
        setattr(method, name, value)
    if offset != end:
        raise ValueError(f"{end - offset} unexpected bytes after the method arguments")


def marshal_arguments(method: Any) -> bytes:
    """Encode a method's arguments in spec order, without pamqp's client-side validation.

    pamqp refuses names RabbitMQ accepts (any UTF-8, e.g. `~` or `é`); the broker
    echoes names it was given, so it must be able to send them back.
    """
    out: list[bytes] = []
    bit_byte, bit_index = 0, -1  # -1: no bit octet open
    for name in method.__slots__:
        data_type = method.amqp_type(name)
        value = getattr(method, name, None)
        if data_type == "bit":
            if bit_index in (-1, 8):
                if bit_index == 8:
                    out.append(bytes((bit_byte,)))
                bit_byte, bit_index = 0, 0
            if value:
                bit_byte |= 1 << bit_index
            bit_index += 1
            continue
        if bit_index != -1:
            out.append(bytes((bit_byte,)))
            bit_index = -1
        if data_type == "shortstr":
            text = value or ""
            encoded: bytes = text.encode() if isinstance(text, str) else bytes(text)
            out.append(bytes((len(encoded),)) + encoded)
        else:
            out.append(pamqp_encode.by_type(value, data_type))
    if bit_index != -1:
        out.append(bytes((bit_byte,)))
    return b"".join(out)


def _decode_publish(payload: bytes) -> commands.Basic.Publish:
    return decode_publish_at(payload, 0, len(payload)).as_method()


class PublishArgs:
    """basic.publish's arguments as the publish path reads them. A compiled class, whose
    fields compiled code reads directly: a pamqp Basic.Publish's are looked up by name,
    with its instance dict made and filled, for every message."""

    __slots__ = ("exchange", "immediate", "mandatory", "routing_key")

    def __init__(self, exchange: str, routing_key: str, mandatory: bool, immediate: bool) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.mandatory = mandatory
        self.immediate = immediate

    @staticmethod
    def of(method: commands.Basic.Publish) -> PublishArgs:
        return PublishArgs(method.exchange, method.routing_key, method.mandatory, method.immediate)

    def as_method(self) -> commands.Basic.Publish:
        """The pamqp method (made as the wire decoder makes it: not validated again)."""
        method = commands.Basic.Publish.__new__(commands.Basic.Publish)
        method.ticket = 0
        method.exchange = self.exchange
        method.routing_key = self.routing_key
        method.mandatory = self.mandatory
        method.immediate = self.immediate
        return method


def decode_publish_at(data: bytes, start: int, end: int) -> PublishArgs:
    """basic.publish from its arguments in data[start:end] (a method frame's payload),
    read in place: a publish arriving whole is decoded without a copy of its payload.
    ValueError if they are malformed."""
    offset = start + 6  # method id (4) + ticket (2)
    if offset >= end:
        raise ValueError("basic.publish arguments have the wrong length")
    exchange_end = offset + 1 + data[offset]
    if exchange_end >= end:
        raise ValueError("short string runs past the end of the frame")
    key_end = exchange_end + 1 + data[exchange_end]
    if key_end + 1 != end:
        raise ValueError("basic.publish arguments have the wrong length")
    bits = data[key_end]
    return PublishArgs(
        data[offset + 1 : exchange_end].decode("utf-8"),
        data[exchange_end + 1 : key_end].decode("utf-8"),
        bool(bits & 1),
        bool(bits & 2),
    )


def _decode_ack(payload: bytes) -> commands.Basic.Ack:
    if len(payload) != 4 + _ACK.size:
        raise ValueError("basic.ack arguments have the wrong length")
    delivery_tag, bits = _ACK.unpack_from(payload, 4)
    method = commands.Basic.Ack.__new__(commands.Basic.Ack)
    method.delivery_tag = delivery_tag
    method.multiple = bool(bits & 1)
    return method


_DEFAULTS = {
    "bit": False,
    "octet": 0,
    "short": 0,
    "long": 0,
    "longlong": 0,
    "timestamp": 0,
    "shortstr": "",
    "longstr": "",
    "table": {},
}


def build(cls: type[T], **fields: Any) -> T:
    """A pamqp method object, without the name validation its constructor runs.

    Arguments not given take the type's zero value; unknown names are an error.
    """
    method: Any = object.__new__(cls)
    slots = cls.__slots__  # type: ignore[attr-defined]
    unknown = set(fields) - set(slots)
    if unknown:
        raise TypeError(f"{cls.__name__} has no arguments {sorted(unknown)}")
    for name in slots:
        if name in fields:
            setattr(method, name, fields[name])
        else:
            setattr(method, name, _DEFAULTS[cls.amqp_type(name)])  # type: ignore[attr-defined]
    return method  # type: ignore[no-any-return]


def encode_method(channel: int, method: Any) -> bytes:
    """One method frame (slow path: pamqp)."""
    body = _METHOD_ID.pack(method.index) + marshal_arguments(method)
    return b"".join((_FRAME_HEAD.pack(C.FRAME_METHOD, channel, len(body)), body, b"\xce"))


def encode_deliver_head(
    channel: int,
    consumer_tag: bytes,
    delivery_tag: int,
    redelivered: bool,
    exchange: bytes,
    routing_key: bytes,
) -> bytes:
    """The basic.deliver method frame, without going through pamqp (hot path)."""
    body = b"".join(
        (
            b"\x00\x3c\x00\x3c",
            bytes((len(consumer_tag),)),
            consumer_tag,
            struct.pack(">QB", delivery_tag, 1 if redelivered else 0),
            bytes((len(exchange),)),
            exchange,
            bytes((len(routing_key),)),
            routing_key,
        )
    )
    return b"".join((_FRAME_HEAD.pack(C.FRAME_METHOD, channel, len(body)), body, b"\xce"))


class DeliveryEncoder:
    """basic.deliver frames for a run of messages to one consumer, as encode_deliver_head
    and encode_content would write them, with what the run shares worked out once: the
    method frame up to the delivery tag, and the names after it while they repeat (a
    stream's consumer gets batches of hundreds of messages, mostly from one exchange and
    routing key); a classic queue's consumer keeps one for all its deliveries."""

    __slots__ = (
        "_channel",
        "_exchange",
        "_frame_max",
        "_method_head",
        "_routing_key",
        "_start",
        "_tail",
    )

    def __init__(self, channel: int, consumer_tag: bytes, frame_max: int) -> None:
        self._channel = channel
        self._frame_max = frame_max
        self._start = b"\x00\x3c\x00\x3c" + bytes((len(consumer_tag),)) + consumer_tag
        self._exchange: str | None = None  # the names _method_head and _tail hold
        self._routing_key: str | None = None
        self._method_head = b""  # frame head and method up to the delivery tag
        self._tail = b""  # redelivered, exchange, routing key, frame end

    def add(
        self,
        parts: list[bytes],
        tag: int,
        exchange: str,
        routing_key: str,
        header_payload: bytes,
        body: bytes,
        redelivered: bool = False,
    ) -> None:
        """Append one delivery's frames to `parts`."""
        if exchange != self._exchange or routing_key != self._routing_key:
            self._exchange, self._routing_key = exchange, routing_key
            ex, rk = exchange.encode(), routing_key.encode()
            names = b"".join((b"\x00", bytes((len(ex),)), ex, bytes((len(rk),)), rk))
            size = len(self._start) + 8 + len(names)
            self._method_head = _FRAME_HEAD.pack(C.FRAME_METHOD, self._channel, size) + self._start
            self._tail = names + b"\xce"
        channel = self._channel
        parts += (
            self._method_head,
            _TAG.pack(tag),
            b"\x01" + self._tail[1:] if redelivered else self._tail,
            _FRAME_HEAD.pack(C.FRAME_HEADER, channel, len(header_payload)),
            header_payload,
            b"\xce",
        )
        if not body:
            return
        if not self._frame_max or len(body) <= self._frame_max - C.FRAME_OVERHEAD:
            parts += (_FRAME_HEAD.pack(C.FRAME_BODY, channel, len(body)), body, b"\xce")
        else:
            parts += encode_content(channel, header_payload, body, self._frame_max)[3:]


def encode_content(channel: int, header_payload: bytes, body: bytes, frame_max: int) -> list[bytes]:
    """The content header frame and body frames for one message."""
    parts = [
        _FRAME_HEAD.pack(C.FRAME_HEADER, channel, len(header_payload)),
        header_payload,
        b"\xce",
    ]
    if not body:
        return parts
    chunk = (frame_max - C.FRAME_OVERHEAD) if frame_max else len(body)
    if len(body) <= chunk:
        parts += (_FRAME_HEAD.pack(C.FRAME_BODY, channel, len(body)), body, b"\xce")
        return parts
    view = memoryview(body)
    for start in range(0, len(body), chunk):
        piece = bytes(view[start : start + chunk])
        parts += (_FRAME_HEAD.pack(C.FRAME_BODY, channel, len(piece)), piece, b"\xce")
    return parts


def encode_ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """basic.ack from the broker (a publisher confirm), hot path."""
    return (
        b"\x01"
        + _SHORT.pack(channel)
        + b"\x00\x00\x00\x0d\x00\x3c\x00\x50"
        + _ACK.pack(delivery_tag, 1 if multiple else 0)
        + b"\xce"
    )


def encode_heartbeat() -> bytes:
    return b"\x08\x00\x00\x00\x00\x00\x00\xce"


def short_text(text: str) -> str:
    """Cut a reply text to what fits a shortstr: 255 bytes of UTF-8, not 255 characters."""
    encoded = text.encode()
    if len(encoded) <= 255:
        return text
    return encoded[:255].decode("utf-8", "ignore")


CloseMethod = TypeVar("CloseMethod", commands.Connection.Close, commands.Channel.Close)


def close_for(cls: type[CloseMethod], exc: AMQPError) -> CloseMethod:
    """The connection.close or channel.close that reports `exc` to the peer."""
    return build(
        cls,
        reply_code=exc.reply_code,
        reply_text=short_text(exc.reply_text),
        class_id=exc.class_id,
        method_id=exc.method_id,
    )
