"""A faulty disk for the message store's tests.

How this works:
- `FaultySegmentLog` is a `SegmentLog` that can be told what its next `write` meets.
  The fault is injected at the OS calls that `SegmentLog.write` makes (os.write, os.fsync,
  os.ftruncate), so the log's own error handling runs exactly as it would on a real disk:
  - `fail_next_write(errno, written)`: the disk accepts `written` more bytes (a short
    write, as a filling disk gives), then os.write raises OSError(errno). With
    `written=None`, or when the whole batch fits, the first fsync of a segment file fails
    instead (how EIO usually shows; the directory's fsync after creating a segment goes
    through). The log may undo the batch (ftruncate) and stays usable: the round's
    `after_commit` waiters get False and later rounds are written normally. With
    `undo_fails=True` the undo fails too (a disk gone bad).
  - `crash_next_write(written)`: kill -9 or a power cut in the middle of the write: only
    `written` bytes land (a torn write), then nothing else ever reaches the disk: no undo,
    and this and every later write or delete raises OSError(EIO), as if the process were
    gone. Open a new store on the same directory to "restart".
  Both also take `fraction=` instead of `written`: that share of the batch's bytes,
  rounded down, for tests that arm the fault before they know how big the batch is.
  Byte counts cover everything the log writes for the batch, in order, including the
  8-byte header of a segment file it starts.
- The OS calls are intercepted by swapping `kanin.store.segments.os` for a pass-through
  proxy, once, when the first FaultySegmentLog is made. It interferes only with the
  thread of a FaultySegmentLog that is writing with a fault armed; every other call, in
  every other thread, goes straight to the os module.
- `faulty_file_store` builds a FileStore that writes through a FaultySegmentLog, by
  FileStore's `segments=` parameter (which puts any SegmentLog, a blocking one, a
  counting one, under a store and its committer).
- `slow_reads(seconds)`: while it lasts, every read back of a segment log in this process
  (a deep queue's messages, on the store's reader thread) takes that much longer, as on a
  slow or overloaded disk; for brokers the test does not build itself (an embedded one).
- `newest_segment`, `truncate_tail`, `corrupt_byte` and `append_garbage` damage segment
  files directly, as a crash or a bad disk would, between a store's close and the next
  start.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from kanin.store import records, segments
from kanin.store.file_store import DEFAULT_SEGMENT_BYTES, FileStore
from kanin.store.segments import SUFFIX, SegmentLog

Chunks = list[tuple[int, bytes]]


@dataclass
class _Fault:
    """What the OS does to the batch being written on this thread."""

    error: int
    budget: int | None  # bytes the disk still accepts; None: all (then fsync fails)
    crash: bool  # after the budget: nothing more reaches the disk, not even an undo
    undo_fails: bool = False
    spent: bool = False  # the fault has struck

    def write(self, real: ModuleType, fd: int, data: Any) -> int:
        if self.crash and self.spent:
            raise OSError(errno.EIO, "the process is gone")
        if self.budget is None:
            return int(real.write(fd, data))
        if self.budget <= 0:
            self.spent = True
            raise OSError(self.error, os.strerror(self.error))
        size = min(len(data), self.budget)
        written = int(real.write(fd, memoryview(data)[:size]))
        self.budget -= written
        return written

    def fsync(self, real: ModuleType, fd: int) -> None:
        if self.crash and self.spent:
            raise OSError(errno.EIO, "the process is gone")
        if not self.spent and stat.S_ISREG(real.fstat(fd).st_mode):
            # The writes all fitted (or there is no budget): the fault strikes at the first
            # fsync of a file (a directory's fsync, after creating a segment, goes through).
            self.spent = True
            raise OSError(self.error if not self.crash else errno.EIO, "fsync failed")
        real.fsync(fd)

    def ftruncate(self, real: ModuleType, fd: int, length: int) -> None:
        if self.crash or self.undo_fails:
            raise OSError(errno.EIO, "cannot undo the write")
        real.ftruncate(fd, length)


class _FaultyOs:
    """Stands in for the os module inside kanin.store.segments (see the module docstring)."""

    def __init__(self, real: ModuleType) -> None:
        self._real = real
        self._local = threading.local()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def armed(self) -> _Fault | None:
        fault: _Fault | None = getattr(self._local, "fault", None)
        return fault

    def arm(self, fault: _Fault | None) -> None:
        self._local.fault = fault

    def write(self, fd: int, data: Any) -> int:
        fault = self.armed()
        return (
            int(self._real.write(fd, data)) if fault is None else fault.write(self._real, fd, data)
        )

    def fsync(self, fd: int) -> None:
        fault = self.armed()
        if fault is None:
            self._real.fsync(fd)
        else:
            fault.fsync(self._real, fd)

    def ftruncate(self, fd: int, length: int) -> None:
        fault = self.armed()
        if fault is None:
            self._real.ftruncate(fd, length)
        else:
            fault.ftruncate(self._real, fd, length)


_install_lock = threading.Lock()


def _faulty_os() -> _FaultyOs:
    with _install_lock:
        namespace = vars(segments)
        current = namespace["os"]
        if isinstance(current, _FaultyOs):
            return current
        proxy = _FaultyOs(current)
        namespace["os"] = proxy
        return proxy


class FaultySegmentLog(SegmentLog):
    """A SegmentLog whose next write can fail or tear, and which can "crash" for good."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self._os = _faulty_os()
        self._next: tuple[_Fault, float | None] | None = None
        self.crashed = False
        self.writes = 0  # write calls that succeeded
        self.failures = 0  # write calls that raised
        self.batches: list[Chunks] = []  # what each successful write was handed

    @property
    def armed(self) -> bool:
        """A failure or a crash is waiting for the next write."""
        return self._next is not None

    def fail_next_write(
        self,
        error: int = errno.ENOSPC,
        written: int | None = 0,
        *,
        fraction: float | None = None,
        undo_fails: bool = False,
    ) -> None:
        """The next write gets `written` bytes onto the disk (None: all, and fsync fails),
        then OSError(error); the log's undo of the batch works unless `undo_fails`."""
        assert written is None or written >= 0
        assert fraction is None or 0.0 <= fraction <= 1.0
        self._next = (_Fault(error, written, crash=False, undo_fails=undo_fails), fraction)

    def crash_next_write(self, written: int = 0, *, fraction: float | None = None) -> None:
        """The next write is torn after `written` bytes and the disk is gone from then on."""
        assert written >= 0
        assert fraction is None or 0.0 <= fraction <= 1.0
        self._next = (_Fault(errno.EIO, written, crash=True), fraction)

    def write(self, chunks: Chunks, *, sync: bool = True) -> list[int]:
        if self.crashed:
            self.failures += 1
            raise OSError(errno.EIO, "the disk crashed")
        if self._next is None:
            offsets = super().write(chunks, sync=sync)
            self.writes += 1
            self.batches.append(list(chunks))
            return offsets
        (fault, fraction), self._next = self._next, None
        if fraction is not None:
            fault.budget = int(sum(len(data) for _, data in chunks) * fraction)
        self.crashed = fault.crash
        self.failures += 1
        self._os.arm(fault)
        try:
            super().write(chunks, sync=sync)
        finally:
            self._os.arm(None)
        raise AssertionError("an armed fault did not strike")  # pragma: no cover

    def delete(self, number: int) -> None:
        if self.crashed:
            raise OSError(errno.EIO, "the disk crashed")
        super().delete(number)


def faulty_file_store(
    directory: Path,
    loop: asyncio.AbstractEventLoop,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    compact_settle_s: float = 0.0,
) -> tuple[FileStore, FaultySegmentLog]:
    """A FileStore on `directory` over a FaultySegmentLog; call recover() before writing.
    It compacts a segment on the next loop turn once it stops draining (FileStore's
    compact_settle_s), so a test sees compaction as soon as it has removed messages."""
    log = FaultySegmentLog(directory)
    store = FileStore(
        directory,
        loop,
        segment_bytes=segment_bytes,
        segments=log,
        compact_settle_s=compact_settle_s,
    )
    return store, log


@dataclass
class SlowReads:
    """What slow_reads saw: `started` is set once a read has begun; `in_flight` reads are
    under way (waiting out the delay or reading), `finished` are done."""

    delay_s: float
    started: threading.Event = field(default_factory=threading.Event)
    in_flight: int = 0
    finished: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _began(self) -> None:
        with self._lock:
            self.in_flight += 1
        self.started.set()

    def _ended(self) -> None:
        with self._lock:
            self.in_flight -= 1
            self.finished += 1


@contextmanager
def slow_reads(delay_s: float) -> Iterator[SlowReads]:
    """Every SegmentLog.read in the process waits `delay_s` first, until the block ends;
    the page cache holds nothing meanwhile (reads from it alone fail at once)."""
    watch = SlowReads(delay_s)
    original = SegmentLog.read

    def read(
        self: SegmentLog, number: int, offsets: list[int], *, cached_only: bool = False
    ) -> list[records.Record | None]:
        if cached_only:
            raise BlockingIOError("a slow disk: nothing is in the page cache")
        watch._began()
        try:
            time.sleep(delay_s)
            return original(self, number, offsets)
        finally:
            watch._ended()

    SegmentLog.read = read  # type: ignore[method-assign]
    try:
        yield watch
    finally:
        SegmentLog.read = original  # type: ignore[method-assign]


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
