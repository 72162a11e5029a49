"""A stream log's reads from disk, on its reader thread (see stream_log.py).

How this works:
- The loop plans a read (`DiskRead`): for each segment it may need, where to start
  decoding (an index entry at or before the first wanted offset, or where the previous
  batch of the same reader ended) and how many bytes of the file hold records known to
  be on disk; the thread then only reads files and decodes. It never reads past what the
  loop saw committed, nor returns an offset at or past `limit` (the committed offset).
- Reading is sequential, in big preads (READ_CHUNK_BYTES): one pread serves thousands
  of small records. The thread keeps the last few chunks it read (`SpanReader`), so a
  consumer reading a batch at a time finds the next batch mostly in the chunk the last
  one left off in, instead of reading the same bytes again.
- Damage: spans recovery found bad (Segment.skipped) are jumped over. A record that is
  bad now (damaged after recovery) is logged, and reading goes on at the next index
  entry, a record known to be valid (or the segment's end): the records in between are
  lost to readers, which see a hole in the offsets.
"""

from __future__ import annotations

import logging
import struct
import zlib
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kanin.store import records
from kanin.store.api import StreamRecord

log = logging.getLogger(__name__)

# One pread reads this much (more for a record bigger than it).
READ_CHUNK_BYTES = 1024 * 1024
# Chunks the reader thread keeps for the next batches (per stream): 4 MiB.
CHUNKS_KEPT = 4

_FRAMED = records.FRAMED_ENQUEUE

# (segment, position, size) -> (bytes, the segment's format version): SegmentLog.read_span.
ReadSpan = Callable[[int, int, int], tuple[bytes, int]]


@dataclass(frozen=True, slots=True)
class SegmentSpan:
    """One segment's part of a read, as the loop saw it when planning."""

    number: int
    position: int  # where decoding starts: a record boundary
    end: int  # bytes of the file known to hold committed records
    skipped: dict[int, int]  # damaged spans recovery found: position -> byte count
    resume: Sequence[int]  # the index entries' positions, where reading can resume


@dataclass(slots=True)
class DiskRead:
    """A read planned on the loop, done on the reader thread."""

    start: int  # the first offset wanted
    limit: int  # the committed offset when planned: nothing at or past it is returned
    max_records: int
    max_bytes: int
    spans: list[SegmentSpan]
    found: list[StreamRecord] = field(default_factory=list)
    # Where the record after the last one found starts: (segment, position), so that the
    # same reader's next batch starts there rather than at an index entry.
    resume_at: tuple[int, int] | None = None

    @property
    def numbers(self) -> set[int]:
        return {span.number for span in self.spans}


class SpanReader:
    """The reader thread's side: only that thread calls `read`."""

    def __init__(self, read_span: ReadSpan) -> None:
        self._read_span = read_span
        # (segment, file position of the chunk) -> (chunk, format version), newest last.
        self._chunks: OrderedDict[tuple[int, int], tuple[bytes, int]] = OrderedDict()

    def read(self, plan: DiskRead) -> None:
        """Fill plan.found (and plan.resume_at). A segment that cannot be read is logged and
        passed over: its records are a hole for the reader."""
        budget = plan.max_bytes
        for span in plan.spans:
            try:
                left = self._read_segment(plan, span, budget)
            except OSError as exc:
                log.error("stream segment %d: cannot read: %s", span.number, exc)
                continue
            if left is None:
                return
            budget = left

    def _read_segment(self, plan: DiskRead, span: SegmentSpan, budget: int) -> int | None:
        """Decode one segment's records into plan.found; the body budget left, or None once
        the batch is complete (a limit reached). The loop runs once per record read, so the
        fields are sliced from the chunk in place (one records.FRAMED_ENQUEUE unpack), no
        Record is built, and plan.resume_at is set once, on the way out."""
        found, start, limit, max_records = plan.found, plan.start, plan.limit, plan.max_records
        number, position, end = span.number, span.position, span.end
        chunk, view, base, version = b"", memoryview(b""), position, records.VERSION
        crc32, unpack, framed_size = zlib.crc32, _FRAMED.unpack_from, _FRAMED.size
        skipped, enqueue, current = span.skipped, records.ENQUEUE, records.VERSION
        # Consecutive records mostly share their names: decoded once, the same str after.
        last_exchange, exchange, last_key, routing_key = b"", "", b"", ""
        complete = False
        while position < end:
            if skipped and position in skipped:
                position += skipped[position]
                continue
            try:
                at = position - base
                if at + framed_size > len(chunk):
                    chunk, base, version = self._chunk(number, position, end, framed_size)
                    view, at = memoryview(chunk), position - base
                (
                    length,
                    checksum,
                    type_,
                    offset,
                    _,
                    timestamp_ms,
                    ex_len,
                    rk_len,
                    h_len,
                    b_len,
                    q_len,
                ) = unpack(chunk, at)
                record_end = position + 8 + length
                if record_end > end:
                    raise records.CorruptRecord("record runs past the segment's end")
                if record_end - base > len(chunk):
                    chunk, base, version = self._chunk(number, position, end, record_end - position)
                    view, at = memoryview(chunk), position - base
                if crc32(view[at + 8 : at + 8 + length]) != checksum:
                    raise records.CorruptRecord("checksum mismatch")
                if type_ != enqueue or offset < start:
                    # Before the batch (reading from an index entry): checked, not decoded.
                    position = record_end
                    continue
                if offset >= limit:
                    complete = True
                    break
                if version == current:
                    names = at + framed_size + q_len
                    header_at = names + ex_len + rk_len
                    body_at = header_at + h_len
                    if body_at + b_len != at + 8 + length:
                        raise records.CorruptRecord("record length does not match its fields")
                    if chunk[names : names + ex_len] != last_exchange:
                        last_exchange = chunk[names : names + ex_len]
                        exchange = last_exchange.decode()
                    if chunk[names + ex_len : header_at] != last_key:
                        last_key = chunk[names + ex_len : header_at]
                        routing_key = last_key.decode()
                    body = chunk[body_at : body_at + b_len]
                    if b_len > budget and found:
                        complete = True
                        break
                    # A stream's ENQUEUE keeps the time it was appended in its expiry field.
                    found.append(
                        StreamRecord(
                            offset,
                            timestamp_ms,
                            exchange,
                            routing_key,
                            chunk[header_at:body_at],
                            body,
                        )
                    )
                else:  # a file whose header was damaged, read in another version
                    record = records.decode(chunk[at + 8 : at + 8 + length], version)
                    b_len = len(record.body)
                    if b_len > budget and found:
                        complete = True
                        break
                    found.append(
                        StreamRecord(
                            offset,
                            record.expires_at_ms,
                            record.exchange,
                            record.routing_key,
                            record.header,
                            record.body,
                        )
                    )
            except (records.CorruptRecord, struct.error, UnicodeDecodeError) as exc:
                resume = _resume_after(span, position)
                log.error(
                    "stream segment %d: no valid record at %d (%s); reading goes on at %d, "
                    "the records between are lost",
                    number,
                    position,
                    exc,
                    resume,
                )
                position = resume
                continue
            budget -= b_len
            position = record_end
            if len(found) >= max_records:
                complete = True
                break
        # The next record not returned starts here (or the segment's end): a later
        # segment's batch overwrites it.
        plan.resume_at = (number, position)
        return None if complete else budget

    def _chunk(self, number: int, position: int, end: int, need: int) -> tuple[bytes, int, int]:
        """(bytes from `position`, their file position, format version): at least `need`
        bytes if the file holds them before `end`. From a kept chunk if one holds them."""
        for (kept_number, kept_base), (data, version) in reversed(self._chunks.items()):
            if (
                kept_number == number
                and kept_base <= position
                and position + need <= kept_base + len(data)
            ):
                self._chunks.move_to_end((kept_number, kept_base))
                return data, kept_base, version
        size = min(max(READ_CHUNK_BYTES, need), max(end - position, need))
        data, version = self._read_span(number, position, size)
        self._chunks[(number, position)] = (data, version)
        while len(self._chunks) > CHUNKS_KEPT:
            self._chunks.popitem(last=False)
        return data, position, version


def _resume_after(span: SegmentSpan, position: int) -> int:
    later = bisect_right(span.resume, position)
    return span.resume[later] if later < len(span.resume) else span.end
