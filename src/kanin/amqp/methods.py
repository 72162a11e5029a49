"""Method (de)serialisation on top of pamqp's spec-generated command classes.

pamqp's generic marshalling walks each method's attribute list; the three
methods on the hot path (basic.publish in, basic.ack in, basic.deliver out)
have small struct-based fast paths here whose output tests compare with pamqp's.
"""

from __future__ import annotations

import struct
from typing import Any

from pamqp import commands

from kanin.amqp import constants as C
from kanin.amqp.errors import ConnectionError_

_METHOD_ID = struct.Struct(">I")
_SHORT = struct.Struct(">H")
_ACK = struct.Struct(">QB")
_FRAME_HEAD = struct.Struct(">BHI")

PUBLISH_INDEX = commands.Basic.Publish.index
ACK_INDEX = commands.Basic.Ack.index
DELIVER_INDEX = commands.Basic.Deliver.index


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
        method.unmarshal(payload[4:])
        return method
    except ConnectionError_:
        raise
    except Exception as exc:  # pamqp raises ValueError, struct.error, IndexError, ...
        # RabbitMQ 3.10 answers undecodable arguments with 501 and the argument bytes.
        from kanin.amqp.frames import erlang_binary

        class_id, method_id = class_and_method(index)
        raise ConnectionError_(
            C.FRAME_ERROR, f"cannot decode {erlang_binary(payload[4:])}", class_id, method_id
        ) from exc


def _short_str(payload: bytes, offset: int) -> tuple[str, int]:
    length = payload[offset]
    end = offset + 1 + length
    if end > len(payload):
        raise ValueError("short string runs past the end of the frame")
    return payload[offset + 1 : end].decode("utf-8"), end


def _decode_publish(payload: bytes) -> commands.Basic.Publish:
    offset = 6  # method id (4) + ticket (2)
    exchange, offset = _short_str(payload, offset)
    routing_key, offset = _short_str(payload, offset)
    bits = payload[offset]
    method = commands.Basic.Publish.__new__(commands.Basic.Publish)
    method.ticket = 0
    method.exchange = exchange
    method.routing_key = routing_key
    method.mandatory = bool(bits & 1)
    method.immediate = bool(bits & 2)
    return method


def _decode_ack(payload: bytes) -> commands.Basic.Ack:
    delivery_tag, bits = _ACK.unpack_from(payload, 4)
    method = commands.Basic.Ack.__new__(commands.Basic.Ack)
    method.delivery_tag = delivery_tag
    method.multiple = bool(bits & 1)
    return method


def encode_method(channel: int, method: Any) -> bytes:
    """One method frame (slow path: pamqp)."""
    body = _METHOD_ID.pack(method.index) + method.marshal()
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
