"""The records a stream log (stream_log.py) has appended and no commit round has taken yet.

A stream's records reach the group committer (committer.py) as one chunk per commit round
(per segment, if the round crosses into a new one), not one per record: the committer's
bookkeeping, the write loop and the report of where each chunk landed then cost once
per round, and the log works out each record's position from its size. Each record is
encoded as records.encode_enqueue would (the same bytes on disk: nothing about the
format changes), in parts that are joined once, when the round takes them, so its body
is copied once, into the round's chunk. Pure: no I/O.
"""

from __future__ import annotations

from zlib import crc32

from kanin.store.records import ENQUEUE, ENQUEUE_FIELDS, PREFIX


class _Run:
    """Records of one segment, in offset order, not yet taken by a round."""

    __slots__ = ("count", "first_offset", "parts", "segment")

    def __init__(self, segment: int, first_offset: int) -> None:
        self.segment = segment
        self.first_offset = first_offset
        self.count = 0
        self.parts: list[bytes] = []


class PendingRecords:
    __slots__ = ("_exchange", "_exchange_len", "_names", "_routing_key", "_runs")

    def __init__(self) -> None:
        self._runs: list[_Run] = []
        # The last exchange and routing key encoded: a stream's publishers repeat them.
        self._exchange = ""
        self._routing_key = ""
        self._names = b""
        self._exchange_len = 0

    def __bool__(self) -> bool:
        return bool(self._runs)

    def add(
        self,
        segment: int,
        offset: int,
        exchange: str,
        routing_key: str,
        header: bytes,
        body: bytes,
        timestamp_ms: int,
    ) -> int:
        """The stream's ENQUEUE record for this message (its id the offset, its expiry
        field the timestamp, an empty queue key): returns its size in bytes."""
        if exchange != self._exchange or routing_key != self._routing_key:
            encoded = exchange.encode()
            self._names = encoded + routing_key.encode()
            self._exchange_len = len(encoded)
            self._exchange, self._routing_key = exchange, routing_key
        names, routing_at = self._names, self._exchange_len
        routing_len, header_len, body_len = len(names) - routing_at, len(header), len(body)
        fixed = ENQUEUE_FIELDS.pack(
            ENQUEUE, offset, 0, timestamp_ms, routing_at, routing_len, header_len, body_len, 0
        )
        # One copy of the body here buys one checksum call and one part fewer per message
        # (the body is copied again by take's join either way; the checksum reads it anyway).
        record = b"".join((fixed, names, header, body))
        runs = self._runs
        if not runs or runs[-1].segment != segment:
            runs.append(_Run(segment, offset))
        run = runs[-1]
        parts = run.parts
        parts.append(PREFIX.pack(len(record), crc32(record)))
        parts.append(record)
        run.count += 1
        return PREFIX.size + len(record)

    def take(self) -> list[tuple[int, int, int, bytes]]:
        """Everything added since the last take, as (segment, first offset, record count,
        the records' bytes), oldest first; nothing is pending after."""
        runs, self._runs = self._runs, []
        return [(run.segment, run.first_offset, run.count, b"".join(run.parts)) for run in runs]
