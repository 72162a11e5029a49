"""A faulty disk for the message store's tests.

How this works:
- `FaultySegmentLog` is a `SegmentLog` that can be told what its next `write` does:
  - `fail_next_write(errno, written)`: write only the first `written` bytes of the batch
    (none by default; all of it with `written=None`, which is how a failed fsync looks),
    then raise OSError(errno). The store stays usable: the round's `after_commit` waiters
    get False and later rounds are written normally. ENOSPC and EIO are the usual errnos.
  - `crash_next_write(written)`: a kill -9 or power cut in the middle of the write: only
    the first `written` bytes reach the file (a torn write), then this and every later
    write or delete raises OSError(EIO), as if the process were gone. Open a new store on
    the same directory to "restart".
- `faulty_file_store` builds a FileStore that writes through a FaultySegmentLog, and
  `use_segment_log` puts any SegmentLog (a blocking one, a counting one) under a store.
- `newest_segment`, `truncate_tail`, `corrupt_byte` and `append_garbage` damage segment
  files directly, as a crash or a bad disk would, between a store's close and the next
  start.

Byte counts are over the batch as the committer hands it over: its chunks in order,
so a torn write may end in any segment of the batch and never skips ahead.
"""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

from kanin.store import records
from kanin.store.segments import SUFFIX, SegmentLog
from kanin.store.store import DEFAULT_SEGMENT_BYTES, FileStore

Chunks = list[tuple[int, bytes]]


def _prefix(chunks: Chunks, written: int) -> Chunks:
    """The first `written` bytes of the batch, as chunks (empty chunks dropped)."""
    kept: Chunks = []
    for number, data in chunks:
        if written <= 0:
            break
        kept.append((number, data[:written]))
        written -= len(data)
    return kept


class FaultySegmentLog(SegmentLog):
    """A SegmentLog whose next write can fail or tear, and which can "crash" for good."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self._fail: tuple[int, int | None] | None = None
        self._crash_at: int | None = None
        self.crashed = False
        self.writes = 0  # write calls that succeeded
        self.failures = 0  # write calls that raised
        self.batches: list[Chunks] = []  # what each successful write was handed

    @property
    def armed(self) -> bool:
        """A failure or a crash is waiting for the next write."""
        return self._fail is not None or self._crash_at is not None

    def fail_next_write(self, error: int = errno.ENOSPC, written: int | None = 0) -> None:
        """The next write puts `written` bytes of its batch on disk (None: all), then fails."""
        assert written is None or written >= 0
        self._fail = (error, written)

    def crash_next_write(self, written: int = 0) -> None:
        """The next write is torn after `written` bytes and the disk is gone from then on."""
        assert written >= 0
        self._crash_at = written

    def write(self, chunks: Chunks) -> None:
        if self.crashed:
            self.failures += 1
            raise OSError(errno.EIO, "the disk crashed")
        if self._crash_at is not None:
            written, self._crash_at = self._crash_at, None
            self.crashed = True
            self.failures += 1
            self._raw_write(_prefix(chunks, written))
            raise OSError(errno.EIO, f"crashed after {written} bytes of the batch")
        if self._fail is not None:
            (error, fail_written), self._fail = self._fail, None
            self.failures += 1
            self._raw_write(chunks if fail_written is None else _prefix(chunks, fail_written))
            raise OSError(error, os.strerror(error))
        super().write(chunks)
        self.writes += 1
        self.batches.append(list(chunks))

    def _raw_write(self, chunks: Chunks) -> None:
        if chunks:
            super().write(chunks)

    def delete(self, number: int) -> None:
        if self.crashed:
            raise OSError(errno.EIO, "the disk crashed")
        super().delete(number)


def use_segment_log(store: FileStore, log: SegmentLog) -> None:
    """Make `store` (not yet recovered) read and write through `log` instead of its own."""
    assert log.directory == store._segments.directory
    store._segments = log
    store.committer._segments = log


def faulty_file_store(
    directory: Path,
    loop: asyncio.AbstractEventLoop,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
) -> tuple[FileStore, FaultySegmentLog]:
    """A FileStore on `directory` over a FaultySegmentLog; call recover() before writing."""
    store = FileStore(directory, loop, segment_bytes=segment_bytes)
    log = FaultySegmentLog(directory)
    use_segment_log(store, log)
    return store, log


# -- damaging files at rest -----------------------------------------------------------------


def segment_files(directory: Path) -> list[Path]:
    """The segment files in `directory`, oldest first."""
    return sorted(p for p in directory.glob(f"*{SUFFIX}") if p.name[: -len(SUFFIX)].isdigit())


def newest_segment(directory: Path) -> Path:
    files = segment_files(directory)
    if not files:
        raise FileNotFoundError(f"no segment files in {directory}")
    return files[-1]


def truncate_tail(directory: Path, cut_bytes: int) -> Path:
    """Cut the last `cut_bytes` bytes off the newest segment (never into its file header)."""
    path = newest_segment(directory)
    size = path.stat().st_size
    assert 0 <= cut_bytes <= size - len(records.FILE_HEADER), "would cut into the header"
    os.truncate(path, size - cut_bytes)
    return path


def corrupt_byte(path: Path, offset: int, xor: int = 0xFF) -> None:
    """Flip bits of the byte at `offset` (negative: from the end) of the file at `path`."""
    assert 0 < xor <= 0xFF
    data = bytearray(path.read_bytes())
    data[offset] ^= xor
    path.write_bytes(bytes(data))


def append_garbage(directory: Path, garbage: bytes) -> Path:
    """Append `garbage` to the newest segment, as a crash mid-write could leave it."""
    path = newest_segment(directory)
    with open(path, "ab") as file:
        file.write(garbage)
    return path
