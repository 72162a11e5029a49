"""Reading records back from a segment file: neighbours share a pread, and a read can be
asked to come only from the page cache.

A read that must not wait for the disk (the event loop reading what was written moments
ago, or read again soon after) uses preadv2's RWF_NOWAIT (Linux 4.14+): the kernel answers
from the page cache or says EAGAIN (BlockingIOError), never blocking. Anything short of
every wanted record whole from the cache raises BlockingIOError, and the caller reads on a
thread instead; where the platform has no RWF_NOWAIT, that is every time.
"""

from __future__ import annotations

import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from kanin.store import records
from kanin.store.api import Content

# Neighbouring records closer than this share one pread, which also reads this far past
# the last record's start, so that record usually comes whole with it.
READ_GAP_BYTES = 64 * 1024
READ_SPAN_BYTES_MAX = 8 * 1024 * 1024

_NOWAIT: int | None = getattr(os, "RWF_NOWAIT", None)

Pread = Callable[[int, int, int], bytes]


def read_records(
    fd: int, version: int, offsets: list[int], *, cached_only: bool = False
) -> list[records.Record | None]:
    """The records at these offsets, in the order asked; None where the bytes are not a
    whole valid record (if `cached_only`, BlockingIOError instead: the cache may just not
    hold all of it). Raises OSError if the file cannot be read."""
    read: Pread = _pread_cached if cached_only else os.pread
    found: dict[int, records.Record | None] = {}
    for run in _runs(sorted(set(offsets))):
        span = read(fd, run[-1] - run[0] + READ_GAP_BYTES, run[0])
        for offset in run:
            record = _record_in(fd, span, run[0], offset, version, read)
            if record is None and cached_only:
                raise BlockingIOError(f"the record at {offset} is not whole in the page cache")
            found[offset] = record
    return [found[offset] for offset in offsets]


def _pread_cached(fd: int, size: int, offset: int) -> bytes:
    """As os.pread, but only what the page cache holds; BlockingIOError if that is none."""
    if _NOWAIT is None:
        raise BlockingIOError("no RWF_NOWAIT here")
    buffer = bytearray(size)
    count = os.preadv(fd, [buffer], offset, _NOWAIT)
    return bytes(memoryview(buffer)[:count])


def _runs(offsets: list[int]) -> Iterator[list[int]]:
    """Sorted offsets in groups near enough to share one pread."""
    run: list[int] = []
    for offset in offsets:
        if run and (offset - run[-1] > READ_GAP_BYTES or offset - run[0] > READ_SPAN_BYTES_MAX):
            yield run
            run = []
        run.append(offset)
    if run:
        yield run


def _record_in(
    fd: int, span: bytes, base: int, offset: int, version: int, read: Pread
) -> records.Record | None:
    """Decode the record at `offset` from `span` (read from `base`); one more read if the
    record runs past the span."""
    try:
        try:
            payload = records.payload_at(span, offset - base)
        except records.CorruptRecord:
            head = read(fd, records.PREFIX.size, offset)
            whole = read(fd, records.record_size(head, 0), offset)
            payload = records.payload_at(whole, 0)
        return records.decode(payload, version)
    except (records.CorruptRecord, struct.error, UnicodeDecodeError):
        return None


class Descriptors:
    """Read-only descriptors of segment files, by segment number, the least recently used
    closed past `limit`. Each thread that reads has its own, so that none closes a
    descriptor another is reading through; the lock lets the loop drop a deleted segment's
    descriptor from any of them."""

    def __init__(self, open_segment: Callable[[int], tuple[int, int]], limit: int) -> None:
        self._open_segment = open_segment  # number -> (fd, format version)
        self._limit = limit
        self._open: OrderedDict[int, tuple[int, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, number: int) -> bool:
        return number in self._open

    def __len__(self) -> int:
        return len(self._open)

    def get(self, number: int) -> tuple[int, int]:
        """(fd, format version) of a segment, opened if need be."""
        with self._lock:
            known = self._open.get(number)
            if known is not None:
                self._open.move_to_end(number)
                return known
        # Opened outside the lock: the loop's close must never wait for the disk.
        opened = self._open_segment(number)
        with self._lock:
            self._open[number] = opened
            oldest = next(iter(self._open)) if len(self._open) > self._limit else None
        if oldest is not None:
            self.close(oldest)
        return opened

    def close(self, number: int) -> None:
        with self._lock:
            known = self._open.pop(number, None)
        if known is not None:
            os.close(known[0])

    def close_all(self) -> None:
        for number in list(self._open):
            self.close(number)


@dataclass
class ReadPlan:
    """One read back, as the loop found it: what came from memory, and where on disk the
    rest is and what to fetch ahead. The reader thread fills `found` in."""

    message_ids: Sequence[int]
    found: list[Content | None]
    on_disk: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # seg -> [(i, off)]
    ahead: dict[int, tuple[int, int]] = field(default_factory=dict)  # seg -> (first, last) off

    @property
    def segments(self) -> set[int]:
        return set(self.on_disk) | set(self.ahead)


class Pins:
    """Segments that reads in flight need, with how many reads need each: a pinned segment
    is not deleted (nor its descriptor closed) until they are back."""

    def __init__(self) -> None:
        self._reads: dict[int, int] = {}

    def __contains__(self, segment: int) -> bool:
        return segment in self._reads

    def pin(self, segments: set[int]) -> None:
        reads = self._reads
        reads.update((segment, reads.get(segment, 0) + 1) for segment in segments)

    def unpin(self, segments: set[int]) -> None:
        for segment in segments:
            left = self._reads.pop(segment) - 1
            if left:
                self._reads[segment] = left
