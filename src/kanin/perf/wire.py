"""The few AMQP 0-9-1 bytes kanin perf needs, built and read by hand.

Rules of this file: no sockets, no asyncio, no clocks. Slow-path methods (handshake,
declarations) go through pamqp; the hot path (publish out, deliver/ack/nack in) is
plain struct work on fixed offsets.

Every perf message body starts with a 24-byte stamp, `>IIQQ`:
    run id (u32) | stream id (u32) | sequence (u64, from 1) | send time (u64, ns)
Bodies of 16 to 23 bytes (benchmarks ask for 16-byte messages) carry a short stamp,
`>HHIQ`: the run id's low 16 bits | stream id (u16) | sequence (u32) | send time (u64).
The send time is time.monotonic_ns(), which is one system-wide clock on Linux, so
producer and consumer processes on the same machine can subtract each other's stamps.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from pamqp import frame as pamqp_frame

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_OVERHEAD = 8  # type(1) channel(2) size(4) ... end(1)
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"

HEAD = struct.Struct(">BHI")
U32 = struct.Struct(">I")
U64 = struct.Struct(">Q")
TAG_BITS = struct.Struct(">QB")

BASIC_DELIVER = 0x003C003C
BASIC_ACK = 0x003C0050
BASIC_NACK = 0x003C0078
BASIC_PUBLISH = b"\x00\x3c\x00\x28"
_PERSISTENT_FLAGS = 0x1000  # delivery-mode is property bit 12
_HEADERS_FLAGS = 0x2000  # headers is property bit 13
UNIQUE_ID_BYTES = 32  # run id, stream id and sequence in hex (--unique-header)


@dataclass(frozen=True)
class StampLayout:
    """Where perf's stamp fields sit at the start of a body."""

    whole: struct.Struct  # run id, stream id, sequence, send time
    seq_time: struct.Struct  # sequence, send time: patched into each copy of a template
    seq_at: int  # where seq_time starts inside the stamp
    run_mask: int  # the bits of the run id that the stamp carries
    max_stream: int  # the largest stream id it can carry


FULL_STAMP = StampLayout(struct.Struct(">IIQQ"), struct.Struct(">QQ"), 8, 0xFFFFFFFF, 2**32 - 1)
SHORT_STAMP = StampLayout(struct.Struct(">HHIQ"), struct.Struct(">IQ"), 4, 0xFFFF, 2**16 - 1)
STAMP_SIZE = SHORT_STAMP.whole.size  # the smallest message perf can send


def stamp_for(body_size: int) -> StampLayout:
    """The full stamp when it fits, else the short one (same for producer and consumer)."""
    return FULL_STAMP if body_size >= FULL_STAMP.whole.size else SHORT_STAMP


def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return HEAD.pack(frame_type, channel, len(payload)) + payload + b"\xce"


def method_frame(channel: int, method: Any) -> bytes:
    """A slow-path method (a pamqp command object) as one frame."""
    data: bytes = pamqp_frame.marshal(method, channel)
    return data


def decode_method(raw_frame: bytes) -> Any:
    """The pamqp command object in one complete method frame."""
    _, _, value = pamqp_frame.unmarshal(raw_frame)
    return value


def short_string(text: str) -> bytes:
    data = text.encode()
    if len(data) > 255:
        raise ValueError(f"name longer than 255 bytes: {text!r}")
    return bytes((len(data),)) + data


@dataclass(frozen=True)
class PublishTemplate:
    """One message's frames (publish + header + body) with the stamp at a known offset.

    A batch of n messages is `template * n`; then only sequence and send time are
    patched into each copy (one struct.pack_into per message).
    """

    data: bytes
    seq_offset: int  # where the (sequence, send time) pair starts in `data`
    seq_time: struct.Struct = FULL_STAMP.seq_time
    id_offset: int = -1  # where a unique header value goes, -1 for none (--unique-header)
    id_prefix: bytes = b""  # its run and stream part; the sequence follows in hex

    def batch(self, first_seq: int, count: int, now_ns: int) -> bytearray:
        size = len(self.data)
        buffer = bytearray(self.data * count)
        pack = self.seq_time.pack_into
        offset = self.seq_offset
        for seq in range(first_seq, first_seq + count):
            pack(buffer, offset, seq, now_ns)
            offset += size
        if self.id_offset >= 0:
            at, prefix = self.id_offset, self.id_prefix
            for seq in range(first_seq, first_seq + count):
                buffer[at : at + UNIQUE_ID_BYTES] = prefix + b"%016x" % seq
                at += size
        return buffer


def publish_template(
    channel: int,
    exchange: str,
    routing_key: str,
    run_id: int,
    stream_id: int,
    body_size: int,
    persistent: bool,
    frame_max: int,
    unique_header: str = "",
) -> PublishTemplate:
    if body_size < STAMP_SIZE:
        raise ValueError(f"message size must be at least {STAMP_SIZE} bytes")
    stamp = stamp_for(body_size)
    if stream_id > stamp.max_stream:
        raise ValueError(f"{body_size}-byte messages allow {stamp.max_stream + 1} streams")
    method = BASIC_PUBLISH + b"\x00\x00" + short_string(exchange) + short_string(routing_key)
    method_bytes = frame(FRAME_METHOD, channel, method + b"\x00")
    flags = _PERSISTENT_FLAGS if persistent else 0
    properties = b"\x02" if persistent else b""
    table = b""
    if unique_header:
        # A table of one longstr, UNIQUE_ID_BYTES long, patched per message (batch()).
        field = short_string(unique_header) + b"S" + struct.pack(">I", UNIQUE_ID_BYTES)
        table = struct.pack(">I", len(field) + UNIQUE_ID_BYTES) + field
        table += b"0" * UNIQUE_ID_BYTES
        flags |= _HEADERS_FLAGS
    header = struct.pack(">HHQH", 60, 0, body_size, flags) + table + properties
    header_bytes = frame(FRAME_HEADER, channel, header)
    # The id sits at the end of the table, just before the delivery mode, if any.
    id_offset = len(method_bytes) + len(header_bytes) - 1 - len(properties) - UNIQUE_ID_BYTES
    body = stamp.whole.pack(run_id & stamp.run_mask, stream_id, 0, 0)
    body += b"\x00" * (body_size - len(body))
    chunk = frame_max - FRAME_OVERHEAD if frame_max else body_size
    bodies = b"".join(
        frame(FRAME_BODY, channel, body[start : start + chunk])
        for start in range(0, body_size, chunk)
    )
    seq_offset = len(method_bytes) + len(header_bytes) + 7 + stamp.seq_at
    return PublishTemplate(
        method_bytes + header_bytes + bodies,
        seq_offset,
        stamp.seq_time,
        id_offset if unique_header else -1,
        b"%08x%08x" % (run_id & 0xFFFFFFFF, stream_id),
    )


def ack_frame(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    return (
        HEAD.pack(FRAME_METHOD, channel, 13)
        + b"\x00\x3c\x00\x50"
        + TAG_BITS.pack(delivery_tag, 1 if multiple else 0)
        + b"\xce"
    )


def deliver_tag(buffer: bytes, payload_at: int) -> int:
    """The delivery tag of the basic.deliver whose payload starts at payload_at."""
    tag_at = payload_at + 5 + buffer[payload_at + 4]  # method id, consumer-tag shortstr
    tag: int = U64.unpack_from(buffer, tag_at)[0]
    return tag
