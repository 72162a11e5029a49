"""The record format of kanin's message log. Pure: no I/O.

Every segment file starts with an 8-byte header: the magic b"KNLG" and a
big-endian u32 format version (2; files of version 1 are still read). Records
follow back to back:

    u32 length   number of bytes after the checksum (type .. end of record)
    u32 crc32    zlib.crc32 of those bytes
    u8  type     1 = ENQUEUE, 2 = REMOVE, 3 = DELIVERED, 4 = REDELIVERED
    u64 id       the message's id in this store (unique, increasing)
    REDELIVERED only: u32 returns   times the message came back before this delivery
    ENQUEUE only, fixed-size first so that start-up reads all it needs in one unpack
    and never touches the variable part:
    u8  priority       the publisher's priority property (0 when absent)
    u64 expires_at_ms  UNIX time in ms after which the message is dead; 0 = never
    u8  exchange length
    u8  routing key length
    u32 header length  (the content header payload exactly as published)
    u32 body length
    u16 n, n bytes   queue key: vhost, NUL, queue name (UTF-8)
    ENQUEUE only: exchange, routing key, header, body (the lengths above)

Version 1 had no priority or expiry, and the ENQUEUE lengths sat each before its
field, after the queue key; REMOVE and DELIVERED are the same in both versions. A
version 1 ENQUEUE reads as priority 0, never expiring. REDELIVERED came later in version 2:
a queue that counts deliveries (x-delivery-limit, quorum) writes one per delivery after a
return, a first delivery being a DELIVERED; older kanin does not read it.

A stream's log (stream_log.py) is made of the same files and ENQUEUE records, one per
message, read with the same checks: there the id is the message's stream offset, the
expires_at_ms field holds the time the message was appended (UNIX ms; nothing in a
stream expires by it), the queue key is empty (the stream's directory names it) and the
priority 0. No other record type is written to a stream's log.

A record is valid only if its whole length is present, its checksum matches and its
fields fill exactly its length (valid UTF-8 names). Reading a file, a record that is not
valid is skipped: `resync` finds where the next valid record starts, and reading goes on
from there (the scans report each skipped span). Only when nothing valid follows is the
rest of the file a bad tail; whether a tail may be cut is the segment log's decision.

How resync is sound. Bytes that are not a record but look like one must (1) hold a type
byte of 1 to 4, (2) hold a length that fits the file and that the record's own field
lengths add up to exactly, and (3) match their crc32: random bytes pass all three with a
probability of about 4/256 * 2^-32 * 2^-32 per offset, so over the 2^26 offsets of a
64 MiB segment a false record is never found in practice. What is not random is a
message body that itself holds encoded records: resync looks inside a bad record's body
only when that record's length cannot be trusted. If its length leads to a valid record,
the damage was in the payload or checksum and that boundary is taken; an earlier valid
record inside its extent is preferred only when the bad record's payload up to there
matches its checksum, which proves the length field was the damaged part.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from mmap import mmap
from typing import Final

MAGIC = b"KNLG"
VERSION: Final = 2
READABLE_VERSIONS = (1, 2)
FILE_HEADER = MAGIC + struct.pack(">I", VERSION)
FILE_HEADER_BYTES: Final = len(FILE_HEADER)

ENQUEUE: Final = 1
REMOVE: Final = 2
DELIVERED: Final = 3
REDELIVERED: Final = 4

PREFIX: Final = struct.Struct(">II")
_SIMPLE: Final = struct.Struct(">BQH")  # type, id, queue key length
_COUNTED: Final = struct.Struct(">BQIH")  # REDELIVERED: type, id, returns, queue key length
_ENQUEUE: Final = struct.Struct(">BQBQBBIIH")  # type, id, priority, expiry, 4 lengths, queue
_FRAMED_ENQUEUE: Final = struct.Struct(">II" + _ENQUEUE.format[1:])  # with length and checksum
# ENQUEUE's fixed part, bare and framed, to encode or decode in place (stream_batch, stream_reads).
ENQUEUE_FIELDS: Final[struct.Struct] = _ENQUEUE
FRAMED_ENQUEUE: Final[struct.Struct] = _FRAMED_ENQUEUE
_U8: Final = struct.Struct(">B")
_U32: Final = struct.Struct(">I")
# A record longer than this is corruption, not data (messages are capped far below).
MAX_RECORD_BYTES: Final = 1 << 31


@dataclass(slots=True)  # not frozen: one per record read, and a frozen __init__ costs 3x
class Record:
    type: int
    id: int
    queue: str
    exchange: str = ""
    routing_key: str = ""
    header: bytes = b""
    body: bytes = b""
    priority: int = 0
    expires_at_ms: int = 0
    returns: int = 0  # REDELIVERED


# What start-up needs from one record, without copying its body:
# (offset in the file, type, id, queue key, priority, expires_at_ms, body size);
# for a REDELIVERED record the last field is its returns count instead.
Summary = tuple[int, int, int, str, int, int, int]


def queue_key(vhost: str, queue: str) -> str:
    return f"{vhost}\x00{queue}"


# Exchanges keep records of their own (a deduplicating exchange's ids) under keys that no
# queue's can equal: a queue key starts with its vhost's name, and these with a byte no
# vhost name starts with.
EXCHANGE_KEY_PREFIX = "\x01"


def exchange_key(kind: str, vhost: str, exchange: str) -> str:
    return f"{EXCHANGE_KEY_PREFIX}{kind}\x00{vhost}\x00{exchange}"


def parse_exchange_key(key: str) -> tuple[str, str, str] | None:
    """(kind, vhost, exchange) of an exchange key; None for a queue's key."""
    if not key.startswith(EXCHANGE_KEY_PREFIX):
        return None
    kind, _, rest = key[1:].partition("\x00")
    vhost, _, exchange = rest.partition("\x00")
    return kind, vhost, exchange


def encode(record: Record) -> bytes:
    if record.type == REDELIVERED:
        return encode_delivery(record.id, record.queue, record.returns)
    if record.type != ENQUEUE:
        return encode_simple(record.type, record.id, record.queue)
    return encode_enqueue(
        record.id,
        record.queue,
        record.exchange,
        record.routing_key,
        record.header,
        record.body,
        record.priority,
        record.expires_at_ms,
    )


def encode_enqueue(
    id_: int,
    queue: str,
    exchange: str,
    routing_key: str,
    header: bytes,
    body: bytes,
    priority: int = 0,
    expires_at_ms: int = 0,
) -> bytes:
    """An ENQUEUE record, without building a Record (hot path: one per stored message)."""
    queue_bytes, exchange_bytes = queue.encode(), exchange.encode()
    routing_bytes = routing_key.encode()
    payload = b"".join(
        (
            _ENQUEUE.pack(
                ENQUEUE,
                id_,
                priority,
                expires_at_ms,
                len(exchange_bytes),
                len(routing_bytes),
                len(header),
                len(body),
                len(queue_bytes),
            ),
            queue_bytes,
            exchange_bytes,
            routing_bytes,
            header,
            body,
        )
    )
    return PREFIX.pack(len(payload), zlib.crc32(payload)) + payload


def encode_simple(type_: int, id_: int, queue: str) -> bytes:
    """REMOVE and DELIVERED records, without building a Record (hot path)."""
    encoded = queue.encode()
    payload = _SIMPLE.pack(type_, id_, len(encoded)) + encoded
    return PREFIX.pack(len(payload), zlib.crc32(payload)) + payload


def encode_delivery(id_: int, queue: str, returns: int) -> bytes:
    """The mark of a delivery with an ack pending: DELIVERED for a first delivery,
    REDELIVERED with the count of returns before it otherwise."""
    encoded = queue.encode()
    if not returns:
        payload = _SIMPLE.pack(DELIVERED, id_, len(encoded)) + encoded
        return PREFIX.pack(len(payload), zlib.crc32(payload)) + payload
    payload = _COUNTED.pack(REDELIVERED, id_, min(returns, 0xFFFFFFFF), len(encoded)) + encoded
    return PREFIX.pack(len(payload), zlib.crc32(payload)) + payload


class CorruptRecord(Exception):
    """The bytes at this offset are not a whole, valid record."""


def decode(payload: bytes, version: int = VERSION) -> Record:
    """The record in a checksummed payload (the bytes after length and checksum)."""
    type_ = payload[0] if payload else 0
    if type_ in (REMOVE, DELIVERED):
        _, id_, queue_len = _SIMPLE.unpack_from(payload)
        if _SIMPLE.size + queue_len != len(payload):
            raise CorruptRecord("record length does not match its fields")
        return Record(type_, id_, payload[_SIMPLE.size :].decode())
    if type_ == REDELIVERED:
        _, id_, returns, queue_len = _COUNTED.unpack_from(payload)
        if _COUNTED.size + queue_len != len(payload):
            raise CorruptRecord("record length does not match its fields")
        return Record(type_, id_, payload[_COUNTED.size :].decode(), returns=returns)
    if type_ != ENQUEUE:
        raise CorruptRecord(f"unknown record type {type_}")
    if version == 1:
        return _decode_enqueue_v1(payload)
    _, id_, priority, expiry, *sizes, queue_len = _ENQUEUE.unpack_from(payload)
    if _ENQUEUE.size + queue_len + sum(sizes) != len(payload):
        raise CorruptRecord("record length does not match its fields")
    offset = _ENQUEUE.size + queue_len
    fields = []
    for size in sizes:
        fields.append(payload[offset : offset + size])
        offset += size
    exchange, routing_key, header, body = fields
    queue = payload[_ENQUEUE.size : _ENQUEUE.size + queue_len].decode()
    return Record(
        ENQUEUE, id_, queue, exchange.decode(), routing_key.decode(), header, body, priority, expiry
    )


def _decode_enqueue_v1(payload: bytes) -> Record:
    _, id_, queue_len = _SIMPLE.unpack_from(payload)
    offset = _SIMPLE.size + queue_len
    fields: list[bytes] = []
    for size_struct in (_U8, _U8, _U32, _U32):
        (size,) = size_struct.unpack_from(payload, offset)
        offset += size_struct.size
        fields.append(payload[offset : offset + size])
        offset += size
    if offset != len(payload):
        raise CorruptRecord("record length does not match its fields")
    exchange, routing_key, header, body = fields
    queue = payload[_SIMPLE.size : _SIMPLE.size + queue_len].decode()
    return Record(ENQUEUE, id_, queue, exchange.decode(), routing_key.decode(), header, body)


def file_version(data: bytes | mmap) -> int | None:
    """The format version named by a file's header, or None if it is not one we read."""
    if len(data) < FILE_HEADER_BYTES or data[: len(MAGIC)] != MAGIC:
        return None
    (version,) = _U32.unpack_from(data, len(MAGIC))
    return int(version) if version in READABLE_VERSIONS else None


def scan(data: bytes, version: int | None = None) -> Iterator[tuple[int, Record]]:
    """(offset, record) for every valid record of a whole segment file, skipping bad ones
    (see resync). Nothing for a file whose header is not one we read, unless `version`
    says how to read it."""
    if version is None:
        version = file_version(data)
    if version is None:
        return
    offset, end = FILE_HEADER_BYTES, len(data)
    while offset + PREFIX.size <= end:
        record_end = valid_record_end(data, offset, version)
        if record_end is None:
            found = resync(data, offset, version)
            if found is None:
                return
            offset = found
            continue
        yield offset, decode(data[offset + PREFIX.size : record_end], version)
        offset = record_end


class SummaryScan:
    """The Summary of every valid record of a whole segment file, skipping bad records as
    `scan` does. Once iterated: `valid_end` is where the last valid record ends (what
    follows is a bad tail), `skipped` the (offset, byte count) of each bad span that valid
    records follow. Start-up's fast path: no Record, no copy of any body, one unpack per
    ENQUEUE; resync runs only where a record is bad. `version` overrides the file header's
    (a file whose header is damaged)."""

    def __init__(self, data: bytes | mmap, version: int | None = None) -> None:
        self.data = data
        self.version = file_version(data) if version is None else version
        self.valid_end = FILE_HEADER_BYTES
        self.skipped: list[tuple[int, int]] = []

    def __iter__(self) -> Iterator[Summary]:
        data = self.data
        version = self.version
        if version is None:
            return
        view, end, offset = memoryview(data), len(data), FILE_HEADER_BYTES
        unpack_enqueue, unpack_prefix, crc32 = (
            _FRAMED_ENQUEUE.unpack_from,
            PREFIX.unpack_from,
            zlib.crc32,
        )
        # Most records name the same queue, exchange and routing key as the one before:
        # compare those bytes in place instead of slicing and decoding them every time.
        last_names, last_queue_len, last_ex_len, queue = b"", -1, -1, ""
        try:
            while True:
                try:
                    while offset + PREFIX.size <= end:
                        # The common record, an ENQUEUE, is read whole in one unpack (its
                        # fields are used only once the checksum has passed): this runs once
                        # per message. A bad record breaks out to the resync below.
                        fast = (
                            version == VERSION
                            and offset + _FRAMED_ENQUEUE.size <= end
                            and data[offset + PREFIX.size] == ENQUEUE
                        )
                        if fast:
                            (
                                length,
                                checksum,
                                _,
                                id_,
                                priority,
                                expiry,
                                ex_len,
                                rk_len,
                                header,
                                body,
                                queue_len,
                            ) = unpack_enqueue(data, offset)
                        else:
                            length, checksum = unpack_prefix(data, offset)
                        start = offset + PREFIX.size
                        record_end = start + length
                        if length > MAX_RECORD_BYTES or record_end > end:
                            break
                        if crc32(view[start:record_end]) != checksum:
                            break
                        if fast and length >= _ENQUEUE.size:
                            names_start = start + _ENQUEUE.size
                            names_end = names_start + queue_len + ex_len + rk_len
                            if names_end + header + body != record_end:
                                break
                            if (
                                queue_len != last_queue_len
                                or ex_len != last_ex_len
                                or names_end - names_start != len(last_names)
                                or data[names_start:names_end] != last_names
                            ):
                                queue = _names(data, names_start, queue_len, ex_len, rk_len)
                                last_names = data[names_start:names_end]
                                last_queue_len, last_ex_len = queue_len, ex_len
                            summary = (offset, ENQUEUE, id_, queue, priority, expiry, body)
                        else:
                            summary = _summary(data, offset, record_end, version)
                        yield summary
                        offset = record_end
                    else:
                        return  # the end of the data, or fewer bytes than a record prefix
                except (CorruptRecord, struct.error, UnicodeDecodeError):
                    pass
                # The record at `offset` is bad: go on from the next valid one, if any.
                found = resync(data, offset, version)
                if found is None:
                    return
                self.skipped.append((offset, found - offset))
                offset = found
        finally:
            self.valid_end = offset


def _names(data: bytes | mmap, start: int, queue_len: int, ex_len: int, rk_len: int) -> str:
    """The queue key of an ENQUEUE; UnicodeDecodeError if it, its exchange or its routing
    key is not UTF-8, as decode() would raise."""
    exchange_start = start + queue_len
    data[exchange_start : exchange_start + ex_len].decode()
    data[exchange_start + ex_len : exchange_start + ex_len + rk_len].decode()
    return data[start:exchange_start].decode()


def _summary(data: bytes | mmap, offset: int, record_end: int, version: int) -> Summary:
    """The slow path of SummaryScan: REMOVE, DELIVERED, REDELIVERED and version 1 ENQUEUE
    records."""
    start = offset + PREFIX.size
    type_ = data[start] if start < record_end else 0
    if type_ == REDELIVERED:
        _, id_, returns, queue_len = _COUNTED.unpack_from(data, start)
        if start + _COUNTED.size + queue_len != record_end:
            raise CorruptRecord("record length does not match its fields")
        queue = data[start + _COUNTED.size : record_end].decode()
        return (offset, type_, id_, queue, 0, 0, returns)
    if type_ == ENQUEUE:
        record = decode(data[start:record_end], version)
        summary = (record.priority, record.expires_at_ms, len(record.body))
        return (offset, ENQUEUE, record.id, record.queue, *summary)
    if type_ not in (REMOVE, DELIVERED):
        raise CorruptRecord(f"unknown record type {type_}")
    _, id_, queue_len = _SIMPLE.unpack_from(data, start)
    if start + _SIMPLE.size + queue_len != record_end:
        raise CorruptRecord("record length does not match its fields")
    return (offset, type_, id_, data[start + _SIMPLE.size : record_end].decode(), 0, 0, 0)


# Where a record may start: the byte after its length and checksum is its type.
_TYPE_BYTE = re.compile(rb"[\x01-\x04]")


def resync(data: bytes | mmap, bad: int, version: int) -> int | None:
    """The offset of the first valid record after the bad one at `bad`, or None if no valid
    record follows. Only called where a record is bad, never on the hot path. See the
    module docstring for why a match is a real record."""
    found = next_valid_record(data, bad + 1, version)
    if found is None or bad + PREFIX.size > len(data):
        return found
    length, checksum = PREFIX.unpack_from(data, bad)
    claimed_end: int = bad + PREFIX.size + length
    trusted = claimed_end <= len(data) and valid_record_end(data, claimed_end, version) is not None
    if found < claimed_end and trusted:
        # `found` lies inside the bytes the bad record claims. Its length leads to a valid
        # record, so it is trusted (found is part of its body) unless the payload up to
        # `found` matches the checksum: then only the length was damaged, found is real.
        start = bad + PREFIX.size
        if zlib.crc32(memoryview(data)[start:found]) != checksum:
            return claimed_end
    return found


def next_valid_record(data: bytes | mmap, start: int, version: int) -> int | None:
    """The first offset at or after `start` where a valid record starts, or None."""
    for match in _TYPE_BYTE.finditer(data, start + PREFIX.size):
        offset = match.start() - PREFIX.size
        if valid_record_end(data, offset, version) is not None:
            return offset
    return None


def valid_record_end(data: bytes | mmap, offset: int, version: int) -> int | None:
    """Where the record at `offset` ends if it is whole and valid (framing, field lengths,
    checksum, UTF-8 names), else None. The cheap checks come before the checksum, so that
    a search over random bytes rarely hashes anything."""
    end = len(data)
    if offset < FILE_HEADER_BYTES or offset + PREFIX.size + _SIMPLE.size > end:
        return None
    length, checksum = PREFIX.unpack_from(data, offset)
    start = offset + PREFIX.size
    record_end: int = start + length
    if length < _SIMPLE.size or record_end > end:
        return None
    type_ = data[start]
    if type_ in (REMOVE, DELIVERED) or version == 1:
        (queue_len,) = struct.unpack_from(">H", data, start + 9)
        if type_ != ENQUEUE and _SIMPLE.size + queue_len != length:
            return None
    elif type_ == REDELIVERED:
        if length < _COUNTED.size:
            return None
        (queue_len,) = struct.unpack_from(">H", data, start + 13)
        if _COUNTED.size + queue_len != length:
            return None
    elif type_ == ENQUEUE:
        if length < _ENQUEUE.size:
            return None
        *_, ex_len, rk_len, header, body, queue_len = _ENQUEUE.unpack_from(data, start)
        if _ENQUEUE.size + queue_len + ex_len + rk_len + header + body != length:
            return None
    else:
        return None
    if zlib.crc32(memoryview(data)[start:record_end]) != checksum:
        return None
    try:
        _summary(data, offset, record_end, version)
    except (CorruptRecord, struct.error, UnicodeDecodeError):
        return None
    return record_end


def payload_at(data: bytes | mmap, offset: int) -> bytes:
    """The checksummed payload of the whole record at `offset` in `data`; CorruptRecord if
    it is torn, fails its checksum or runs past the end of `data`."""
    if offset + PREFIX.size > len(data):
        raise CorruptRecord("no record here")
    length, checksum = PREFIX.unpack_from(data, offset)
    start = offset + PREFIX.size
    if length > MAX_RECORD_BYTES or start + length > len(data):
        raise CorruptRecord("record runs past the data")
    payload = data[start : start + length]
    if zlib.crc32(payload) != checksum:
        raise CorruptRecord("checksum mismatch")
    return payload


def record_size(data: bytes | mmap, offset: int) -> int:
    (length,) = _U32.unpack_from(data, offset)
    return PREFIX.size + int(length)
