"""The segmented message log on disk. Synchronous file I/O only.

How this works:
- The log is a directory of segment files named by a 12-digit sequence number,
  `000000000001.log`, each starting with records.FILE_HEADER. Records are appended to
  the newest segment; the store decides when a new one starts (by size), so a write
  may carry chunks for two segments.
- `write` appends chunks and then fsyncs every file it touched: the committer calls
  it from its worker thread, one batch at a time, so nothing here is shared.
- A segment whose messages have all been removed is deleted whole (the store tracks
  live counts), oldest first; that is how space is reclaimed. The manifest
  (manifest.py) records which numbers the store created and deleted, durably, so that
  recovery can tell a file the store deleted from one lost outside it.
- `write` reports where each chunk landed (its offset in its segment): the store learns
  a record's location only once it is on disk, so it never reads what is not there.
- `read` fetches records by (segment, offset) with pread (record_reads.py), through a
  small cache of read-only descriptors: a deep queue's bodies come back this way, a batch
  at a time, neighbours in one pread; `advise` asks the kernel to fetch the next batch's
  bytes meanwhile (posix_fadvise WILLNEED), so they are usually in the page cache when
  the consumers get there. Both run on the store's reader thread, or on the loop for a
  read the page cache answers whole; each has its own descriptors (it closes its oldest
  past READERS_MAX itself). The loop also drops the descriptors of a segment it deletes
  (`close_reader`), which no read in flight needs (the store pins those). The store never
  asks for a deleted segment (it deletes only segments with nothing live).
- `recover` reads every segment in order and yields summaries (records.SummaryScan):
  start-up never copies a body. What it does with damage:
  - A file the manifest says must exist and that is missing stops start-up
    (errors.RecoveryError, naming the files) unless `force` (--force-recovery): then the
    loss is logged at error level and recorded, so later starts do not stop on it again.
  - A bad record followed by valid ones (in any segment) is corruption: the scan skips
    it and goes on from the next valid record; each skipped span is logged at error
    level with its file, offset and size.
  - A bad tail (nothing valid after it) of the newest segment is what a crash leaves of
    its last write: it is cut, so the next start sees a clean log. A bad tail of any
    other segment is corruption (a truncated or damaged closed file): logged at error
    level, and the file is left as it is; closed files are never cut or rewritten.
    (A crash in a commit round that spanned a rotation can also leave such a tail in the
    segment before the newest: reported the same way; only unconfirmed records are in it.)
  - A damaged file header: the records are read anyway, in the format version that
    reads most of them, and the error logged; a file with no record is just reported.
  - Every file with corruption gets a second name, `<segment>.log.damaged` (a hard
    link, else a copy), so its bytes outlive the segment's deletion when its messages
    are consumed: evidence for whoever investigates.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from kanin.store import manifest, record_reads, records
from kanin.store.errors import RecoveryError

log = logging.getLogger(__name__)

SUFFIX = ".log"
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
        # Read descriptors: the reader thread's, and the loop's for page-cache reads.
        self._readers = record_reads.Descriptors(self._open_reader, READERS_MAX)
        self._loop_readers = record_reads.Descriptors(self._open_reader, READERS_MAX)
        # The format version of files whose header is damaged, as recovery found it.
        self._versions: dict[int, int] = {}
        self._manifest: manifest.Manifest | None = None  # loaded by recover, or on first use

    def segment_numbers(self) -> list[int]:
        numbers = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            stem = path.name[: -len(SUFFIX)]
            if stem.isdigit():
                numbers.append(int(stem))
        return sorted(numbers)

    # -- writing (committer thread) -------------------------------------------------------

    def write(self, chunks: list[tuple[int, bytes]], *, sync: bool = True) -> list[int]:
        """Append each (segment, bytes) chunk, then fsync what was written (unless not
        `sync`: records nobody waits for); return the offset at which each chunk landed in
        its segment. Raises OSError."""
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
            if sync:
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
            self._note_created(number)
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

    def _current_manifest(self) -> manifest.Manifest:
        if self._manifest is None:
            self._manifest = manifest.load(self.directory) or manifest.Manifest()
        return self._manifest

    def _note_created(self, number: int) -> None:
        """After a new segment file is created (and its directory entry synced): the
        manifest names it. Numbers skipped since the last one never got a file (all their
        writes failed): they are gaps, not losses. Raises OSError."""
        current = self._current_manifest()
        if number <= current.top:
            return  # a retry after a failed round: the file was already noted
        updated = current.copy()
        updated.gaps |= set(range(max(updated.top + 1, updated.floor), number))
        updated.top = number
        manifest.save(self.directory, updated)
        self._manifest = updated

    @property
    def highest_number(self) -> int:
        """The newest segment number ever created here, with or without a file now."""
        return self._current_manifest().top

    def delete(self, number: int) -> None:
        """Delete a segment the store no longer needs; always the oldest it has."""
        if number == self._open_number:
            return  # never the segment being written
        # The manifest first: a crash after it leaves an extra file, never a lost one.
        current = self._current_manifest()
        if number >= current.floor:
            updated = current.copy()
            updated.raise_floor(number + 1)
            try:
                manifest.save(self.directory, updated)
            except OSError as exc:
                # Keep the file: the next start deletes it again if nothing in it is live.
                log.warning("segment %d kept: cannot update the manifest: %s", number, exc)
                return
            self._manifest = updated
        segment_path(self.directory, number).unlink(missing_ok=True)
        self._versions.pop(number, None)

    def _close_retired(self) -> None:
        for fd in self._retired:
            os.close(fd)
        self._retired.clear()

    def close(self) -> None:
        self._close_retired()
        if self._open_fd >= 0:
            os.close(self._open_fd)
        self._open_number, self._open_fd = 0, -1
        self._readers.close_all()
        self._loop_readers.close_all()

    # -- reading back (the store's reader thread) -----------------------------------------

    def read(
        self, number: int, offsets: list[int], *, cached_only: bool = False
    ) -> list[records.Record | None]:
        """The records at these offsets of a segment, in the order asked; None where the
        bytes are not a whole valid record. Raises OSError if the file cannot be read.
        `cached_only` (on the loop): BlockingIOError unless every record is in the page
        cache (see record_reads)."""
        fd, version = (self._loop_readers if cached_only else self._readers).get(number)
        return record_reads.read_records(fd, version, offsets, cached_only=cached_only)

    def read_span(self, number: int, position: int, size: int) -> tuple[bytes, int]:
        """Up to `size` raw bytes of a segment from `position` (fewer at its end), and the
        segment's format version: a stream log's sequential reads (stream_reads.py), on
        its reader thread, through that thread's descriptors. Raises OSError."""
        fd, version = self._readers.get(number)
        return os.pread(fd, size, position), version

    def advise(self, number: int, offset: int, length: int, *, on_loop: bool = False) -> None:
        """These bytes of a segment will be read soon: let the kernel start fetching them
        (read-ahead for a deep queue's next batch). Only a hint: failures are ignored."""
        advise = getattr(os, "posix_fadvise", None)
        if advise is None:
            return
        with contextlib.suppress(OSError):
            fd, _ = (self._loop_readers if on_loop else self._readers).get(number)
            advise(fd, offset, length, os.POSIX_FADV_WILLNEED)

    def _open_reader(self, number: int) -> tuple[int, int]:
        fd = os.open(segment_path(self.directory, number), os.O_RDONLY)
        try:
            version = self._versions.get(number) or records.file_version(
                os.pread(fd, records.FILE_HEADER_BYTES, 0)
            )
        except OSError:
            os.close(fd)
            raise
        if version is None:
            os.close(fd)
            raise OSError(f"segment {number} has no valid header")
        return fd, version

    def close_reader(self, number: int) -> None:
        """Forget the read descriptors of a segment being deleted."""
        self._readers.close(number)
        self._loop_readers.close(number)

    def read_whole(self, number: int) -> tuple[bytes, int | None]:
        """A closed segment's bytes and its format version where recovery found the
        header damaged (compaction, on a worker thread: see compaction.py)."""
        return segment_path(self.directory, number).read_bytes(), self._versions.get(number)

    # -- recovery (start-up) --------------------------------------------------------------

    def recover(self, force: bool = False) -> Iterator[tuple[int, records.SummaryScan]]:
        """(segment, its records' summaries) for every segment, oldest first. Iterate each
        scan to its end before the next: then its damage is reported and a torn tail of
        the newest segment cut. RecoveryError (on the first step) if a segment file is
        missing, unless `force`. See the module docstring."""
        numbers = self.segment_numbers()
        expected = self._check_missing(numbers, force)
        newest = numbers[-1] if numbers else 0
        for number in numbers:
            path = segment_path(self.directory, number)
            data = _read_for_recovery(path)
            size = len(data)
            version = records.file_version(data)
            header_damaged = version is None
            if header_damaged:
                version = self._read_despite_header(path, data, number == newest)
                if version is not None:
                    self._versions[number] = version
            scan = records.SummaryScan(data, version)
            del data  # only the scan holds it, until it is done
            yield number, scan
            _let_go(scan.data)
            scan.data = b""
            damaged = _report(path, size, scan, number == newest) or header_damaged
            if damaged and size > records.FILE_HEADER_BYTES:
                _set_aside(path)
        # Numbers past the manifest's top with no file are segments whose writes all failed
        # (only the newest file can be past it: a crash right after creating it).
        expected.gaps |= set(range(expected.top + 1, newest)) - set(numbers)
        expected.top = max(expected.top, newest)
        if self._manifest is None or expected != self._manifest:
            manifest.save(self.directory, expected)
        self._manifest = expected

    def _check_missing(self, numbers: list[int], force: bool) -> manifest.Manifest:
        """The manifest as recovery leaves it; RecoveryError if files it names are missing
        (unless `force`: then they are logged as lost and become gaps)."""
        try:
            saved = manifest.load(self.directory)
        except RecoveryError as exc:
            if not force:
                raise RecoveryError(f"{exc}; start with --force-recovery to go on") from exc
            log.error("%s; going on without it (--force-recovery)", exc)
            saved = None
        self._manifest = saved
        if saved is None:
            # A log from before the manifest: only gaps between its files can be seen.
            expected = manifest.Manifest(min(numbers, default=1), max(numbers, default=0))
        else:
            expected = saved.copy()
        missing = sorted(expected.expected() - set(numbers))
        if missing:
            names = ", ".join(segment_path(self.directory, n).name for n in missing)
            what = f"message store {self.directory}: segment file(s) missing: {names}"
            if not force:
                raise RecoveryError(
                    f"{what}; the persistent messages in them would be lost. Restore them, "
                    "or start with --force-recovery to go on without them"
                )
            log.error("%s; the messages in them are lost (going on: --force-recovery)", what)
            expected.gaps |= set(missing)
        return expected

    def _read_despite_header(self, path: Path, data: bytes | mmap.mmap, newest: bool) -> int | None:
        """A file whose header is not one we read: the format version in which most of
        its records read (they are checksummed), or None if none does. Reported."""
        header = data[: records.FILE_HEADER_BYTES]
        if len(data) <= records.FILE_HEADER_BYTES:
            # No record could be in it: a crash while the file was being created (newest),
            # or damage that lost nothing.
            report = log.warning if newest else log.error
            report("segment %s: no valid file header (%r) and no records", path.name, header)
            return None
        readable = {
            version: sum(1 for _ in records.SummaryScan(data, version))
            for version in records.READABLE_VERSIONS
        }
        version = max(readable, key=lambda v: (readable[v], v))
        if not readable[version]:
            log.error(
                "segment %s: damaged file header %r and no readable record in its %d bytes",
                path.name,
                header,
                len(data),
            )
            return None
        log.error(
            "segment %s: damaged file header %r; its records are read as format version %d",
            path.name,
            header,
            version,
        )
        return version


def _report(path: Path, size: int, scan: records.SummaryScan, newest: bool) -> bool:
    """Log what the scan of a segment skipped; cut the newest segment's bad tail. True if
    the file holds corruption (anything but a torn tail of the newest segment)."""
    for offset, skipped in scan.skipped:
        log.error(
            "segment %s: %d bytes at offset %d are not valid records (corrupt); skipped, "
            "the records after them are recovered",
            path.name,
            skipped,
            offset,
        )
    tail = size - scan.valid_end
    if scan.version is None or tail <= 0:
        return bool(scan.skipped)
    if newest:
        _cut(path, scan.valid_end)
        return bool(scan.skipped)
    log.error(
        "segment %s: the last %d bytes, from offset %d, are not a whole valid record "
        "(a truncated or damaged closed segment); the records before them are recovered "
        "and the file is left as it is",
        path.name,
        tail,
        scan.valid_end,
    )
    return True


# A segment bigger than this is mapped for recovery rather than read: a stream's segments
# are up to 3 GB, and a mapping's pages are the page cache's, which the kernel takes back
# under pressure, where a read would hold the whole file in the broker's own memory.
MAP_FOR_RECOVERY_BYTES = 16 * 1024 * 1024


def _read_for_recovery(path: Path) -> bytes | mmap.mmap:
    with path.open("rb") as file:
        if os.fstat(file.fileno()).st_size <= MAP_FOR_RECOVERY_BYTES:
            return file.read()
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    mapped.madvise(mmap.MADV_SEQUENTIAL)  # read once, front to back
    return mapped


def _let_go(data: bytes | mmap.mmap) -> None:
    """Unmap a mapped segment once its scan is done (if a view of it is still alive, the
    mapping goes when that view does)."""
    if isinstance(data, mmap.mmap):
        with contextlib.suppress(BufferError):
            data.close()


def _set_aside(path: Path) -> None:
    """Give a damaged segment a second name, so that its bytes survive the segment's
    deletion: a hard link (no copy), else a copy. Failing is logged, never fatal."""
    target = path.with_name(path.name + ".damaged")
    suffix = 0
    while target.exists():
        with contextlib.suppress(OSError):
            if os.path.samefile(target, path):
                return  # set aside on an earlier start
        suffix += 1
        target = path.with_name(f"{path.name}.damaged.{suffix}")
    try:
        try:
            os.link(path, target)
        except OSError:
            shutil.copyfile(path, target)
    except OSError as exc:
        log.error("segment %s: cannot keep a copy of the damaged file: %s", path.name, exc)
        return
    log.error("segment %s: its damaged bytes are kept as %s", path.name, target.name)


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


def _joined(chunks: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """Consecutive chunks for the same segment as one write."""
    joined: list[tuple[int, list[bytes]]] = []
    for number, data in chunks:
        if joined and joined[-1][0] == number:
            joined[-1][1].append(data)
        else:
            joined.append((number, [data]))
    return [(number, b"".join(parts)) for number, parts in joined]
