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
- `recover` reads every segment in order. In each, reading stops at the first record
  that is torn or fails its checksum and the file is truncated there, so the next
  start sees a clean log and new appends never follow garbage.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

from kanin.store import records

log = logging.getLogger(__name__)

SUFFIX = ".log"


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

    def segment_numbers(self) -> list[int]:
        numbers = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            stem = path.name[: -len(SUFFIX)]
            if stem.isdigit():
                numbers.append(int(stem))
        return sorted(numbers)

    # -- writing (committer thread) -------------------------------------------------------

    def write(self, chunks: list[tuple[int, bytes]]) -> None:
        """Append each (segment, bytes) chunk, then fsync what was written. Raises OSError."""
        if self.broken:
            raise OSError("message log is broken after a failed write could not be undone")
        touched: dict[int, int] = {}
        rollback: list[tuple[int, int]] = []  # (fd, size before this batch)
        try:
            for number, data in _joined(chunks):
                fd = self._fd_for(number)
                if number not in touched:
                    rollback.append((fd, os.fstat(fd).st_size))
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                touched[number] = fd
            for fd in touched.values():
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

    def read_enqueues(self, number: int, ids: set[int]) -> list[records.Record]:
        """The ENQUEUE records of `ids` in a closed segment (compaction; worker thread)."""
        data = segment_path(self.directory, number).read_bytes()
        return [
            record
            for _, record in records.scan(data)
            if record.type == records.ENQUEUE and record.id in ids
        ]

    # -- recovery (start-up) --------------------------------------------------------------

    def recover(self) -> Iterator[tuple[int, records.Record]]:
        """(segment, record) for every valid record, oldest first; torn tails are cut."""
        for number in self.segment_numbers():
            path = segment_path(self.directory, number)
            data = path.read_bytes()
            if not data.startswith(records.FILE_HEADER):
                log.error("segment %s has no valid header; moving it aside", path.name)
                path.rename(path.with_suffix(".corrupt"))
                continue
            valid_end = len(records.FILE_HEADER)
            for offset, record in records.scan(data):
                valid_end = offset + records.record_size(data, offset)
                yield number, record
            if valid_end < len(data):
                log.warning(
                    "segment %s: cutting %d bytes of torn or corrupt tail at offset %d",
                    path.name,
                    len(data) - valid_end,
                    valid_end,
                )
                with open(path, "r+b") as file:
                    file.truncate(valid_end)
                    file.flush()
                    os.fsync(file.fileno())


def _joined(chunks: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """Consecutive chunks for the same segment as one write."""
    joined: list[tuple[int, list[bytes]]] = []
    for number, data in chunks:
        if joined and joined[-1][0] == number:
            joined[-1][1].append(data)
        else:
            joined.append((number, [data]))
    return [(number, b"".join(parts)) for number, parts in joined]
