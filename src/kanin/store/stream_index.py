"""What a stream log (stream_log.py) keeps in memory about its records. Pure: no I/O.

How this works:
- A stream's memory must not grow with the number of records it holds (millions), only
  with the number of segments, so the index is sparse: per segment (`Segment`) its
  first and last offset and timestamp, how many bytes of its file hold records, and one
  (offset, file position, timestamp) entry every INDEX_EVERY records, the segment's
  first record always included. Finding an offset is a binary search over the segments,
  then one over that segment's entries: reading starts at the nearest entry at or
  before the offset and decodes forward past at most INDEX_EVERY - 1 records.
- Entries are added only for records known to be on disk (recovered, or reported
  written by the committer), so a position in the index is always readable.
- Offsets only grow, but may have holes: the records of a failed commit round never
  reach the disk, and recovery skips damaged ones. Nothing here assumes contiguity.
- `TailCache`: the newest records as the caller appended them, so that a consumer at the
  tail is answered from memory on the loop. It holds every record not yet known to be on
  disk (the committer holds their bytes anyway), and of the committed ones the newest
  within a byte budget.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from operator import attrgetter

from kanin.store.api import StreamRecord

# One sparse index entry every this many records of a segment: 3 x 8 bytes per 1,024
# records, and a read decodes at most 1,023 records it does not return to get going.
INDEX_EVERY = 1024
# What a cached record costs beyond its encoded size: the StreamRecord and list slot.
ENTRY_OVERHEAD_BYTES = 120


@dataclass(slots=True)
class Segment:
    """One segment file's records, sparsely."""

    number: int
    first_offset: int
    first_ts: int
    last_offset: int
    last_ts: int
    end: int  # bytes of the file that hold valid records: where the next one goes
    count: int = 0  # records indexed in it
    offsets: array[int] = field(default_factory=lambda: array("q"))
    positions: array[int] = field(default_factory=lambda: array("q"))
    timestamps: array[int] = field(default_factory=lambda: array("q"))
    # Spans recovery found damaged (position -> byte count): readers jump over them.
    skipped: dict[int, int] = field(default_factory=dict)

    @property
    def size_bytes(self) -> int:
        return self.end

    def add(self, offset: int, position: int, timestamp_ms: int, end: int) -> None:
        if self.count % INDEX_EVERY == 0:
            self.offsets.append(offset)
            self.positions.append(position)
            self.timestamps.append(timestamp_ms)
        self.count += 1
        self.last_offset, self.last_ts, self.end = offset, timestamp_ms, end

    def entry_at_or_before(self, offset: int) -> int:
        """The file position of the nearest index entry at or before `offset` (the first
        record's if `offset` is below it)."""
        return self.positions[max(bisect_right(self.offsets, offset) - 1, 0)]

    def resume_after(self, position: int) -> int:
        """Where a reader may go on after a record at `position` that cannot be read: the
        next index entry, which is a record known to be valid, else the segment's end."""
        later = bisect_right(self.positions, position)
        return self.positions[later] if later < len(self.positions) else self.end


_FIRST_OFFSET = attrgetter("first_offset")
_LAST_TS = attrgetter("last_ts")


class StreamIndex:
    """The segments of a stream, oldest first; only the newest grows."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.size_bytes = 0  # sum of the segments' `end`

    def __bool__(self) -> bool:
        return bool(self.segments)

    def add(self, number: int, offset: int, position: int, timestamp_ms: int, end: int) -> None:
        """A record on disk: `end` is where it ends in its file. Offsets, segment numbers and
        timestamps never go down (the caller sees to it)."""
        segments = self.segments
        if not segments or segments[-1].number != number:
            assert not segments or (
                number > segments[-1].number and offset > segments[-1].last_offset
            ), (number, offset)
            segments.append(Segment(number, offset, timestamp_ms, offset, timestamp_ms, 0))
        segment = segments[-1]
        assert offset > segment.last_offset or segment.count == 0, (offset, segment.last_offset)
        self.size_bytes += end - segment.end
        segment.add(offset, position, timestamp_ms, end)

    @property
    def first_offset(self) -> int | None:
        return self.segments[0].first_offset if self.segments else None

    @property
    def last_offset(self) -> int | None:
        return self.segments[-1].last_offset if self.segments else None

    def drop_oldest(self) -> Segment:
        segment = self.segments.pop(0)
        self.size_bytes -= segment.end
        return segment

    def locate(self, offset: int) -> tuple[int, int] | None:
        """(index in `segments`, file position to start decoding at) for the first record
        at or after `offset`; None if no indexed record is at or after it."""
        segments = self.segments
        i = max(bisect_right(segments, offset, key=_FIRST_OFFSET) - 1, 0)
        if i >= len(segments):
            return None
        segment = segments[i]
        if offset > segment.last_offset:
            # Past this segment's last record (a hole at its end): the next one's first.
            i += 1
            if i == len(segments):
                return None
            return i, segments[i].positions[0]
        return i, segment.entry_at_or_before(offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """An offset at or before the first record whose timestamp is >= `timestamp_ms`,
        and after every index entry older than it: at most INDEX_EVERY - 1 records early
        (RabbitMQ's answer is as coarse, to its chunks). None if no record is that new."""
        segments = self.segments
        i = bisect_left(segments, timestamp_ms, key=_LAST_TS)
        if i == len(segments):
            return None
        segment = segments[i]
        if segment.first_ts >= timestamp_ms:
            # The previous segment's last record is older (bisect), so this is exact.
            return segment.first_offset
        # Entry 0 is the first record, older than `timestamp_ms`: j >= 1.
        j = bisect_left(segment.timestamps, timestamp_ms)
        return segment.offsets[j - 1] + 1


class TailCache:
    """The newest records, by offset: entries[i] is offset `first + i`, or None for an
    offset whose record was lost (its commit round failed). Appended on the loop; records
    below `committed` are evicted oldest first past `budget` bytes, the others stay."""

    def __init__(self, budget: int, first: int = 0) -> None:
        self._budget = budget
        # The records, and apart (not as pairs, which would be one more object per message
        # for the cyclic GC to walk while it is cached) their sizes encoded.
        self._entries: list[StreamRecord | None] = []
        self._sizes: list[int] = []
        self._head = 0  # entries before it are evicted (the list is cut now and then)
        self.first = first  # the offset of entries[_head]
        self._committed = first  # entries below this offset are on disk
        self._committed_bytes = 0  # the cost of the cached entries below `_committed`

    def __len__(self) -> int:
        return len(self._entries) - self._head

    def reset(self, first: int) -> None:
        """Empty, the next record appended being `first` (after recovery)."""
        self._entries, self._sizes, self._head = [], [], 0
        self.first = self._committed = first
        self._committed_bytes = 0

    def add(self, record: StreamRecord, size: int) -> None:
        assert record.offset == self.first + len(self), (record.offset, self.first, len(self))
        self._entries.append(record)
        self._sizes.append(size)

    def commit(self, offset: int) -> tuple[int, StreamRecord]:
        """The record at `offset` is on disk; those between the last committed and it are
        lost. Returns its (encoded size, record)."""
        entries, base = self._entries, self._head - self.first
        for lost in range(self._committed, offset):
            entries[base + lost] = None
        entry = entries[base + offset]
        assert entry is not None, offset
        size = self._sizes[base + offset]
        self._committed = offset + 1
        self._committed_bytes += size + ENTRY_OVERHEAD_BYTES
        return size, entry

    def lose(self, offset: int) -> None:
        """The record at `offset` will never be on disk (its commit round failed): forget
        it now. Offsets stay as they are: `commit` of a later record passes over it."""
        index = self._head + offset - self.first
        if offset >= self._committed and index < len(self._entries):
            self._entries[index] = None

    def evict(self) -> None:
        """Drop committed records, oldest first, until the committed ones fit the budget."""
        entries, sizes, head = self._entries, self._sizes, self._head
        while self._committed_bytes > self._budget and self.first < self._committed:
            if entries[head] is not None:
                self._committed_bytes -= sizes[head] + ENTRY_OVERHEAD_BYTES
            head += 1
            self.first += 1
        if head > 4096 and head * 2 > len(entries):
            del entries[:head]  # amortised: each slot is moved at most once
            del sizes[:head]
            head = 0
        self._head = head

    def records(
        self, start: int, limit: int, max_records: int, max_bytes: int
    ) -> list[StreamRecord]:
        """The cached records from `start` (>= first) below `limit`: at most `max_records`,
        and bodies adding up to at most `max_bytes` unless the first alone is bigger."""
        entries = self._entries
        found: list[StreamRecord] = []
        budget = max_bytes
        index = self._head + start - self.first
        stop = min(self._head + limit - self.first, len(entries))
        while index < stop and len(found) < max_records:
            entry = entries[index]
            index += 1
            if entry is None:
                continue
            size = len(entry.body)
            if size > budget and found:
                break
            budget -= size
            found.append(entry)
        return found

    def pending_offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The first record not yet on disk whose timestamp is >= `timestamp_ms`."""
        entries = self._entries
        for index in range(self._head + self._committed - self.first, len(entries)):
            entry = entries[index]
            if entry is not None and entry.timestamp_ms >= timestamp_ms:
                return entry.offset
        return None

    def exact_offset_for_timestamp(self, start: int, timestamp_ms: int) -> int | None:
        """From `start` (>= first, committed records only), the first record whose timestamp
        is >= `timestamp_ms`; None if none of the committed cached records is."""
        entries, base = self._entries, self._head - self.first
        for index in range(base + start, base + self._committed):
            entry = entries[index]
            if entry is not None and entry.timestamp_ms >= timestamp_ms:
                return entry.offset
        return None
