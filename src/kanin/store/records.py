"""The record format of kanin's message log. Pure: no I/O.

Every segment file starts with an 8-byte header: the magic b"KNLG" and a
big-endian u32 format version (1). Records follow back to back:

    u32 length   number of bytes after the checksum (type .. end of record)
    u32 crc32    zlib.crc32 of those bytes
    u8  type     1 = ENQUEUE, 2 = REMOVE, 3 = DELIVERED
    u64 id       the message's id in this store (unique, increasing)
    u16 n, n bytes   queue key: vhost, NUL, queue name (UTF-8)
    ENQUEUE only:
    u8  n, n bytes   exchange name
    u8  n, n bytes   routing key
    u32 n, n bytes   the content header payload exactly as published
    u32 n, n bytes   the body

A record is valid only if its whole length is present and its checksum matches.
Recovery stops reading a file at the first invalid record: what follows is a torn
write from a crash and is cut off, never read as data.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

MAGIC = b"KNLG"
VERSION = 1
FILE_HEADER = MAGIC + struct.pack(">I", VERSION)

ENQUEUE = 1
REMOVE = 2
DELIVERED = 3

_PREFIX = struct.Struct(">II")
_FIXED = struct.Struct(">BQH")
_U8 = struct.Struct(">B")
_U32 = struct.Struct(">I")
# A record longer than this is corruption, not data (messages are capped far below).
MAX_RECORD_BYTES = 1 << 31


@dataclass(frozen=True)
class Record:
    type: int
    id: int
    queue: str
    exchange: str = ""
    routing_key: str = ""
    header: bytes = b""
    body: bytes = b""


def queue_key(vhost: str, queue: str) -> str:
    return f"{vhost}\x00{queue}"


def encode(record: Record) -> bytes:
    queue = record.queue.encode()
    parts = [_FIXED.pack(record.type, record.id, len(queue)), queue]
    if record.type == ENQUEUE:
        exchange, routing_key = record.exchange.encode(), record.routing_key.encode()
        parts += (
            _U8.pack(len(exchange)),
            exchange,
            _U8.pack(len(routing_key)),
            routing_key,
            _U32.pack(len(record.header)),
            record.header,
            _U32.pack(len(record.body)),
            record.body,
        )
    payload = b"".join(parts)
    return _PREFIX.pack(len(payload), zlib.crc32(payload)) + payload


def encode_simple(type_: int, id_: int, queue: str) -> bytes:
    """REMOVE and DELIVERED records, without building a Record (hot path)."""
    encoded = queue.encode()
    payload = _FIXED.pack(type_, id_, len(encoded)) + encoded
    return _PREFIX.pack(len(payload), zlib.crc32(payload)) + payload


class CorruptRecord(Exception):
    """The bytes at this offset are not a whole, valid record."""


def decode(payload: bytes) -> Record:
    type_, id_, queue_len = _FIXED.unpack_from(payload)
    offset = _FIXED.size
    queue = payload[offset : offset + queue_len].decode()
    offset += queue_len
    if type_ in (REMOVE, DELIVERED):
        if offset != len(payload):
            raise CorruptRecord("trailing bytes")
        return Record(type_, id_, queue)
    if type_ != ENQUEUE:
        raise CorruptRecord(f"unknown record type {type_}")
    fields: list[bytes] = []
    for size_struct in (_U8, _U8, _U32, _U32):
        (size,) = size_struct.unpack_from(payload, offset)
        offset += size_struct.size
        fields.append(payload[offset : offset + size])
        offset += size
    if offset != len(payload):
        raise CorruptRecord("record length does not match its fields")
    exchange, routing_key, header, body = fields
    return Record(type_, id_, queue, exchange.decode(), routing_key.decode(), header, body)


def scan(data: bytes, start: int = len(FILE_HEADER)) -> Iterator[tuple[int, Record]]:
    """(offset, record) for every valid record from `start`; stops at the first bad one.

    After the loop, the caller knows the valid prefix ends at the last offset yielded
    plus that record's size; `valid_end` computes it.
    """
    offset = start
    end = len(data)
    while offset + _PREFIX.size <= end:
        length, checksum = _PREFIX.unpack_from(data, offset)
        record_end = offset + _PREFIX.size + length
        if length > MAX_RECORD_BYTES or record_end > end:
            return
        payload = data[offset + _PREFIX.size : record_end]
        if zlib.crc32(payload) != checksum:
            return
        try:
            record = decode(payload)
        except (CorruptRecord, struct.error, UnicodeDecodeError):
            return
        yield offset, record
        offset = record_end


def record_size(data: bytes, offset: int) -> int:
    (length,) = _U32.unpack_from(data, offset)
    return _PREFIX.size + int(length)
