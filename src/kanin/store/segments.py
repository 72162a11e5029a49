"""The segmented message log on disk. Synchronous file I/O only.

How this works:
- The log is a directory of segment files named by a 12-digit sequence number,
  `000000000001.log`, each starting with records.FILE_HEADER. Records are appended to
  the newest segment; the store decides when a new one starts (by size), so a write
  may carry chunks for two segments.
- `write` appends chunks and then fsyncs every file it touched: the committer calls
  it from its worker thread, one batch at a time, so nothing here is shared.
- A segment whose messages have all been removed is deleted whole (the store tracks
  live counts); that is how space is reclaimed.
- `write` reports where each chunk landed (its offset in its segment): the store learns
  a record's location only once it is on disk, so it never reads what is not there.
- `read` fetches records by (segment, offset) on the loop thread with pread, through a
  small cache of read-only descriptors: a deep queue's bodies come back this way, a
  batch at a time, neighbours in one pread; `advise` asks the kernel to fetch the next
  batch's bytes meanwhile (posix_fadvise WILLNEED), so they are usually in the page
  cache when the consumers get there. The store never asks for a deleted segment
  (it deletes only segments with nothing live) and drops the descriptor when it deletes.
- `recover` reads every segment in order. In each, reading stops at the first record
  that is torn or fails its checksum and the file is truncated there, so the next
  start sees a clean log and new appends never follow garbage. It yields summaries
  (records.SummaryScan): start-up never copies a body.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

from kanin.store import records

log = logging.getLogger(__name__)

SUFFIX = ".log"
# Reading back: neighbouring records closer than this share one pread, which also reads
# this far past the last record's start, so that record usually comes whole with it.
READ_GAP_BYTES = 64 * 1024
READ_SPAN_BYTES_MAX = 8 * 1024 * 1024
# Read-only descriptors kept open (oldest dropped first): one per segment being read.
READERS_MAX = 16


def segment_path(directory: Path, number: int) -> Path:
    return directory / f"{number:012d}{SUFFIX}"


class SegmentLog:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._open_number = 0
        self._open_fd = -1
        self.broken = False
        self._retired: list[int] = []  # earlier segments' descriptors, closed after fsync
        self._readers: OrderedDict[int, tuple[int, int]] = OrderedDict()  # -> (fd, version)

    def segment_numbers(self) -> list[int]:
        numbers = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            stem = path.name[: -len(SUFFIX)]
            if stem.isdigit():
                numbers.append(int(stem))
        return sorted(numbers)

    # -- writing (committer thread) -------------------------------------------------------

    def write(self, chunks: list[tuple[int, bytes]]) -> list[int]:
        """Append each (segment, bytes) chunk, then fsync what was written; return the offset
        at which each chunk landed in its segment. Raises OSError."""
        if self.broken:
            raise OSError("message log is broken after a failed write could not be undone")
        ends: dict[int, int] = {}  # segment -> its size as this batch grows it
        rollback: list[tuple[int, int]] = []  # (fd, size before this batch)
        fds: dict[int, int] = {}
        offsets: list[int] = []
        try:
            for number, data in chunks:
                if number not in fds:
                    fd = fds[number] = self._fd_for(number)
                    ends[number] = os.fstat(fd).st_size
                    rollback.append((fd, ends[number]))
                offsets.append(ends[number])
                ends[number] += len(data)
            for number, data in _joined(chunks):
                view = memoryview(data)
                while view:
                    written = os.write(fds[number], view)
                    view = view[written:]
            for fd in fds.values():
                os.fsync(fd)
            self._close_retired()
        except OSError:
            # Cut what this batch wrote, so later batches never follow a partial record
            # (recovery would stop there and lose them). If even that fails, the log
            # refuses further writes: publishes are nacked, nothing confirmed is at risk.
            try:
                for fd, size in rollback:
                    os.ftruncate(fd, size)
                    os.fsync(fd)
            except OSError:
                self.broken = True
            raise
        return offsets

    def _fd_for(self, number: int) -> int:
        if number == self._open_number:
            return self._open_fd
        if number < self._open_number:
            raise ValueError(f"segment {number} is older than the open segment {self._open_number}")
        path = segment_path(self.directory, number)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if os.fstat(fd).st_size == 0:
                self._write_header(fd)
            # The new file's directory entry must be durable too, or a crash could lose it.
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError:
            os.close(fd)
            raise
        if self._open_fd >= 0:
            # Not closed yet: what this batch wrote to it must be fsynced first.
            self._retired.append(self._open_fd)
        self._open_number, self._open_fd = number, fd
        return fd

    def _write_header(self, fd: int) -> None:
        """The file header, whole or not at all: a torn header would make recovery set the
        whole file aside, with every record appended after it."""
        view = memoryview(records.FILE_HEADER)
        try:
            while view:
                view = view[os.write(fd, view) :]
        except OSError:
            try:
                os.ftruncate(fd, 0)
            except OSError:
                self.broken = True
            raise

    def delete(self, number: int) -> None:
        if number == self._open_number:
            return  # never the segment being written
        segment_path(self.directory, number).unlink(missing_ok=True)

    def _close_retired(self) -> None:
        for fd in self._retired:
            os.close(fd)
        self._retired.clear()

    def close(self) -> None:
        self._close_retired()
        if self._open_fd >= 0:
            os.close(self._open_fd)
        self._open_number, self._open_fd = 0, -1
        for number in list(self._readers):
            self.close_reader(number)

    # -- reading back (loop thread) -------------------------------------------------------

    def read(self, number: int, offsets: list[int]) -> list[records.Record | None]:
        """The records at these offsets of a segment, in the order asked; None where the
        bytes are not a whole valid record. Raises OSError if the file cannot be read."""
        fd, version = self._reader(number)
        found: dict[int, records.Record | None] = {}
        for run in _runs(sorted(set(offsets))):
            span = os.pread(fd, run[-1] - run[0] + READ_GAP_BYTES, run[0])
            for offset in run:
                found[offset] = _record_in(fd, span, run[0], offset, version)
        return [found[offset] for offset in offsets]

    def advise(self, number: int, offset: int, length: int) -> None:
        """These bytes of a segment will be read soon: let the kernel start fetching them
        (read-ahead for a deep queue's next batch). Only a hint: failures are ignored."""
        advise = getattr(os, "posix_fadvise", None)
        if advise is None:
            return
        with contextlib.suppress(OSError):
            advise(self._reader(number)[0], offset, length, os.POSIX_FADV_WILLNEED)

    def _reader(self, number: int) -> tuple[int, int]:
        reader = self._readers.get(number)
        if reader is not None:
            self._readers.move_to_end(number)
            return reader
        fd = os.open(segment_path(self.directory, number), os.O_RDONLY)
        version = records.file_version(os.pread(fd, records.FILE_HEADER_BYTES, 0))
        if version is None:
            os.close(fd)
            raise OSError(f"segment {number} has no valid header")
        self._readers[number] = (fd, version)
        if len(self._readers) > READERS_MAX:
            self.close_reader(next(iter(self._readers)))
        return fd, version

    def close_reader(self, number: int) -> None:
        """Forget the read descriptor of a segment (it is being deleted, or the oldest)."""
        reader = self._readers.pop(number, None)
        if reader is not None:
            os.close(reader[0])

    def read_enqueues(self, number: int, ids: set[int]) -> list[records.Record]:
        """The ENQUEUE records of `ids` in a closed segment (compaction; worker thread)."""
        data = segment_path(self.directory, number).read_bytes()
        return [
            record
            for _, record in records.scan(data)
            if record.type == records.ENQUEUE and record.id in ids
        ]

    # -- recovery (start-up) --------------------------------------------------------------

    def recover(self) -> Iterator[tuple[int, records.SummaryScan]]:
        """(segment, its records' summaries) for every segment, oldest first. Iterate each
        scan to its end before the next: then a torn or corrupt tail is cut off the file."""
        for number in self.segment_numbers():
            path = segment_path(self.directory, number)
            data = path.read_bytes()
            if records.file_version(data) is None:
                log.error("segment %s has no valid header; moving it aside", path.name)
                path.rename(path.with_suffix(".corrupt"))
                continue
            scan = records.SummaryScan(data)
            del data  # a segment is up to 64 MiB: only the scan holds it, until it is done
            yield number, scan
            scan.data = b""
            if scan.valid_end < path.stat().st_size:
                _cut(path, scan.valid_end)


def _cut(path: Path, valid_end: int) -> None:
    log.warning(
        "segment %s: cutting %d bytes of torn or corrupt tail at offset %d",
        path.name,
        path.stat().st_size - valid_end,
        valid_end,
    )
    with open(path, "r+b") as file:
        file.truncate(valid_end)
        file.flush()
        os.fsync(file.fileno())


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


def _record_in(fd: int, span: bytes, base: int, offset: int, version: int) -> records.Record | None:
    """Decode the record at `offset` from `span` (read from `base`); one more pread if the
    record runs past the span."""
    try:
        try:
            payload = records.payload_at(span, offset - base)
        except records.CorruptRecord:
            head = os.pread(fd, records.PREFIX.size, offset)
            whole = os.pread(fd, records.record_size(head, 0), offset)
            payload = records.payload_at(whole, 0)
        return records.decode(payload, version)
    except (records.CorruptRecord, struct.error, UnicodeDecodeError):
        return None


def _joined(chunks: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """Consecutive chunks for the same segment as one write."""
    joined: list[tuple[int, list[bytes]]] = []
    for number, data in chunks:
        if joined and joined[-1][0] == number:
            joined[-1][1].append(data)
        else:
            joined.append((number, [data]))
    return [(number, b"".join(parts)) for number, parts in joined]
