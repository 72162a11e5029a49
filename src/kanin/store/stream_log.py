"""StreamLog: one stream queue's append-only log on disk.

A stream queue (x-queue-type: stream) keeps every message it is given in order, each at
an offset, and consumers read from offsets of their choosing; an ack removes nothing.
Messages leave only by retention, whole segment files at a time, oldest first. This is
the storage; the queue type (core/queues/) decides what to append, when to read, and
when to apply retention.

How this works:
- Records: one records.py ENQUEUE record per message, its id the stream offset, its
  expires_at_ms field the time the message was appended (UNIX ms, the caller's clock;
  a stream never expires messages one by one), an empty queue key (the directory names
  the stream) and priority 0. The format's checksums and damage handling come with it.
- Files: a segments.SegmentLog in `directory` (its segment files and their manifest),
  and one committer.GroupCommitter of the stream's own, so every commit round is one
  write and one fsync. Appends gather in a stream_batch.PendingRecords, which the round
  takes as it starts: one chunk per round (and segment). A new segment starts once
  the current one holds at least max_segment_bytes; after a restart appends go to a
  fresh segment, never to one recovery may have cut.
- Offsets: `append` gives the next offset at once, whether or not its round succeeds.
  The committer reports each chunk on disk (on_written, with its file position, tagged
  first offset + 1 since a tag of 0 means none), oldest first; its records' positions
  follow from their sizes. Only then does a record enter
  the index (stream_index.py) and `committed_offset` pass it, and only then can a reader
  see it. Records of a failed round never reach the disk: when a later record is
  reported, the offsets before it that were not are lost for good, a hole readers step
  over (their publishers were nacked). So offsets only grow but may have holes, and a
  reader goes on from the last offset it got plus one. (A failed round's records leave
  memory at once, through the committer's on_lost; committed_offset waits for a later
  record on disk before it passes them, so it never passes the highest record on disk.)
- Reads: a read from a committed record still in the tail cache (TAIL_CACHE_BYTES of the
  newest committed records, plus all not yet committed) is answered from memory on the
  loop. Any other is planned on the loop (which segments, from which index entry or
  from where the same reader's last batch ended) and done on the stream's reader thread
  (stream_reads.py), so a consumer far behind never delays one at the tail, whose reads
  never wait for that thread. (They share the interpreter lock: the thread's decoding
  takes turns with the loop, a batch at a time.) Segments a thread read needs are pinned
  until it is back: retention drops them from the index at once, deletes the files later.
- Memory: the sparse index (a few arrays per segment), the tail cache, the reader
  thread's kept chunks (stream_reads.CHUNKS_KEPT) and READ_CURSORS positions; nothing
  per record.
- Crash safety: a record whose after_commit waiter heard True was fsynced, and recovery
  finds it at its offset; a torn tail of the newest segment is cut (segments.py), and it
  only ever holds records nobody heard True for. Next offsets continue from one past the
  highest offset found. Offsets given out before the crash and found nowhere were in
  that cut tail or in failed rounds: never committed, so no reader ever saw them, and
  reusing them misleads nobody. Offsets are never reused after retention either:
  retention never deletes the newest segment holding committed records, so the highest
  committed offset is always on disk (the log is never emptied by retention).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kanin.store import api, records
from kanin.store.api import StreamRecord
from kanin.store.committer import GroupCommitter, Landed, Waiter
from kanin.store.segments import SegmentLog
from kanin.store.stream_batch import PendingRecords
from kanin.store.stream_index import StreamIndex, TailCache
from kanin.store.stream_reads import DiskRead, SegmentSpan, SpanReader

__all__ = ["StreamLog", "StreamRecord"]

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 500_000_000  # RabbitMQ's default stream segment size
# The newest committed records kept in memory for consumers at the tail.
TAIL_CACHE_BYTES = 8 * 1024 * 1024
# A disk read plans at most this many segments: a batch reads on into the next
# segments only as far as it needs, so this is only a bound on the plan's size.
SPANS_PER_READ = 8
# Where recent disk reads ended (next offset -> segment, position): a consumer's next
# batch starts there instead of decoding forward from an index entry.
READ_CURSORS = 256


class StreamLog(api.StreamLog):
    def __init__(
        self,
        directory: Path,
        loop: asyncio.AbstractEventLoop,
        *,
        max_segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> None:
        """The stream queue (core/queues/) makes one per stream, in a directory of the
        stream's own (data_dir/streams/<hash>), then calls `recover` once."""
        assert max_segment_bytes > 0, max_segment_bytes
        self.directory = directory
        self._loop = loop
        self._max_segment_bytes = max_segment_bytes
        self._segments = SegmentLog(directory)
        self._committer = GroupCommitter(self._segments, loop)
        self._committer.on_written = self._written
        self._committer.on_lost = self._lost
        self._pending = PendingRecords()
        self._handing_over = False  # _hand_over is due at the next round's start
        self._in_flight: dict[int, int] = {}  # a chunk's first offset -> its record count
        self._index = StreamIndex()
        self._tail = TailCache(TAIL_CACHE_BYTES)
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kanin-stream-read")
        self._span_reader = SpanReader(self._segments.read_span)
        self._cursors: OrderedDict[int, tuple[int, int]] = OrderedDict()
        self._on_committed: list[Callable[[], None]] = []
        # The offset the next append gets: from 0 in a new stream, never given twice to
        # records a reader could see (see the top). The queue reads it (`next` attach).
        self.next_offset = 0
        # Every record below it is on disk (fsynced) or lost for good; readers never get
        # one at or past it. The queue reads it (`last` attach, how far consumers may go).
        self.committed_offset = 0
        self._last_ts = 0
        self._active = 1  # the segment appends go to
        self._active_size = records.FILE_HEADER_BYTES  # its bytes as appended (not landed)
        # Segment files on disk not yet given to the committer to delete, oldest first;
        # those retention dropped from the index wait in _doomed while a read needs them.
        self._files: list[int] = []
        self._doomed: list[int] = []
        self._pinned: dict[int, int] = {}
        self._recovered = False
        self._closed = False

    @property
    def first_offset(self) -> int:
        """The first offset still in the log: where a consumer asking for `first` starts.
        With nothing on disk yet, the first not committed (== next_offset when empty)."""
        first = self._index.first_offset
        return self.committed_offset if first is None else first

    @property
    def committer(self) -> GroupCommitter:
        """Its commit rounds (tests, and the queue's statistics: rounds). Its
        records_committed counts chunks: one per round and segment written to."""
        return self._committer

    # -- writing --------------------------------------------------------------------------

    def append(
        self, exchange: str, routing_key: str, header: bytes, body: bytes, timestamp_ms: int
    ) -> int:
        """The stream queue, on publish, on the loop: returns the message's offset. It is
        durable once an `after_commit` waiter registered after this call hears True, and
        readers see it from then. `timestamp_ms` is the queue's clock (UNIX ms); one
        earlier than the last appended is taken as the last (a clock stepping back), so
        the log's timestamps never go down."""
        assert self._recovered, "recover() must run before the log is written"
        offset = self.next_offset
        self.next_offset = offset + 1
        if timestamp_ms < self._last_ts:  # (never below 0: _last_ts starts there)
            timestamp_ms = self._last_ts
        self._last_ts = timestamp_ms
        if self._active_size >= self._max_segment_bytes:
            self._files.append(self._active)
            self._active += 1
            self._active_size = records.FILE_HEADER_BYTES
        size = self._pending.add(
            self._active, offset, exchange, routing_key, header, body, timestamp_ms
        )
        self._active_size += size
        if not self._handing_over:
            self._handing_over = True
            self._committer.at_round_start(self._hand_over)
        self._tail.add(
            StreamRecord(offset, timestamp_ms, exchange, routing_key, header, body), size
        )
        return offset

    def _hand_over(self) -> None:
        """From the committer, as a round starts: everything appended goes into it."""
        self._handing_over = False
        for segment, first, count, data in self._pending.take():
            self._in_flight[first] = count
            self._committer.append(segment, data, first + 1)

    def after_commit(self, waiter: Waiter) -> None:
        """Publisher confirms (through core/commit_rounds.py) and the queue's own round
        bookkeeping: waiter(True) once everything appended before the call is durable,
        waiter(False) if a write failed. Always later on the loop, never inline."""
        self._committer.after_commit(waiter)

    def pending_round(self) -> int:
        """Which commit round what is appended now goes to (a publish's ticket, as
        MessageStore.pending_round)."""
        return self._committer.pending_round

    def on_committed(self, callback: Callable[[], None]) -> None:
        """The stream queue, once: callback() runs on the loop each time committed_offset
        advances, before that round's after_commit waiters, so it can wake the consumers
        waiting at the tail."""
        self._on_committed.append(callback)

    def _written(self, landed: Landed) -> None:
        """From the committer, on the loop: these chunks are on disk, oldest first."""
        tail, index = self._tail, self._index
        for tag, number, position in landed:
            first = tag - 1
            for offset in range(first, first + self._in_flight.pop(first)):
                size, record = tail.commit(offset)  # also forgets lost offsets before it
                end = position + size
                index.add(number, offset, position, record.timestamp_ms, end)
                position = end
                self.committed_offset = offset + 1
        tail.evict()
        for callback in self._on_committed:
            try:
                callback()
            except Exception:  # the committer's round must end whatever a queue does
                log.exception("stream %s: on_committed callback failed", self.directory)

    def _lost(self, tags: list[int]) -> None:
        """From the committer, on the loop: these records' round failed, they will never be
        on disk. Their memory goes now (a full disk must not fill the memory too);
        committed_offset passes them only once a later record is on disk (see the top)."""
        for tag in tags:
            first = tag - 1
            for offset in range(first, first + self._in_flight.pop(first)):
                self._tail.lose(offset)

    # -- reading --------------------------------------------------------------------------

    def read_later(
        self,
        start: int,
        max_records: int,
        max_bytes: int,
        done: Callable[[list[StreamRecord]], None],
    ) -> None:
        """A stream consumer's next batch (core/queues/): done(records) runs later on the
        loop, never inline, with the records from offset `start` (clamped up to
        first_offset) in offset order: at most `max_records`, bodies adding up to at most
        `max_bytes` unless the first alone is bigger, none at or past committed_offset.
        Empty if nothing is committed at or after `start`; possibly fewer than asked for
        while more follow (a read from disk goes through at most SPANS_PER_READ segments).
        Offsets may skip (see the module docstring): go on from the last one + 1. From the
        tail cache on the loop when it holds `start`, else from disk on the reader thread."""
        start = max(start, self.first_offset)
        limit = self.committed_offset
        if start >= limit or start >= self._tail.first:
            found = self._tail.records(start, limit, max_records, max_bytes)
            self._loop.call_soon(done, found)
            return
        plan = self._plan(start, limit, max_records, max_bytes)
        if plan is None:
            self._loop.call_soon(done, [])
            return
        numbers = plan.numbers
        self._pin(numbers)
        future = self._loop.run_in_executor(self._reader, self._span_reader.read, plan)
        future.add_done_callback(lambda ended: self._disk_read_done(plan, numbers, ended, done))

    def read(self, start: int, max_records: int, max_bytes: int) -> list[StreamRecord]:
        """What read_later would give, at once, blocking on the disk: tests and tools,
        never the broker's loop."""
        start = max(start, self.first_offset)
        limit = self.committed_offset
        if start >= limit or start >= self._tail.first:
            return self._tail.records(start, limit, max_records, max_bytes)
        plan = self._plan(start, limit, max_records, max_bytes)
        if plan is None:
            return []
        self._reader.submit(self._span_reader.read, plan).result()
        self._remember(plan)
        return plan.found

    def _plan(self, start: int, limit: int, max_records: int, max_bytes: int) -> DiskRead | None:
        """On the loop: the segments a disk read from `start` may need, from where."""
        located = self._index.locate(start)
        if located is None:
            return None
        first, position = located
        segments = self._index.segments
        cursor = self._cursors.get(start)
        if cursor is not None and cursor[0] == segments[first].number:
            position = max(position, cursor[1])  # the same reader's last batch ended there
        spans: list[SegmentSpan] = []
        for segment in segments[first : first + SPANS_PER_READ]:
            if segment.first_offset >= limit:
                break
            begin = position if not spans else segment.positions[0]
            spans.append(
                SegmentSpan(segment.number, begin, segment.end, segment.skipped, segment.positions)
            )
        return DiskRead(start, limit, max(max_records, 1), max_bytes, spans)

    def _disk_read_done(
        self,
        plan: DiskRead,
        numbers: set[int],
        ended: asyncio.Future[None],
        done: Callable[[list[StreamRecord]], None],
    ) -> None:
        """On the loop: a disk read is back; its segments may go, and the reader hears."""
        self._unpin(numbers)
        failure = None if ended.cancelled() else ended.exception()
        if failure is not None:  # OSErrors are handled per segment: this is a bug, reported
            log.error("stream %s: reading failed: %r", self.directory, failure)
        self._remember(plan)
        done(plan.found)

    def _remember(self, plan: DiskRead) -> None:
        if plan.resume_at is None or not plan.found:
            return
        cursors = self._cursors
        cursors[plan.found[-1].offset + 1] = plan.resume_at
        cursors.move_to_end(plan.found[-1].offset + 1)
        while len(cursors) > READ_CURSORS:
            cursors.popitem(last=False)

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        """A consumer attaching with x-stream-offset as a timestamp (core/queues/): the
        first offset whose timestamp is >= `timestamp_ms`, next_offset if none is. From
        the sparse index this may be early, by at most stream_index.INDEX_EVERY - 1
        records, never late (RabbitMQ's is early by up to a chunk); exact where the tail
        cache holds the answer."""
        found = self._index.offset_for_timestamp(timestamp_ms)
        tail = self._tail
        if found is None:
            pending = tail.pending_offset_for_timestamp(timestamp_ms)
            return self.next_offset if pending is None else pending
        if found >= tail.first:
            exact = tail.exact_offset_for_timestamp(found, timestamp_ms)
            if exact is not None:
                return exact
        return max(found, self.first_offset)

    def size_bytes(self) -> int:
        """The bytes of committed records on disk, file headers included: for retention
        by size and for the queue's statistics."""
        return self._index.size_bytes

    # -- retention ------------------------------------------------------------------------

    def apply_retention(self, max_bytes: int | None, max_age_ms: int | None, now_ms: int) -> int:
        """The stream queue (x-max-length-bytes, x-max-age), on the loop, after appends or
        on a timer: remove whole segments, oldest first, while the log is over `max_bytes`
        or the segment's newest record is older than now_ms - max_age_ms. Never the newest
        segment holding committed records (which is also never one still being written,
        so next offsets survive a restart). Returns how many segments were removed;
        first_offset moves up at once, files go on the next commit round (or once the
        disk reads that need them are back)."""
        index, removed = self._index, 0
        while len(index.segments) > 1:
            oldest = index.segments[0]
            too_big = max_bytes is not None and index.size_bytes > max_bytes
            too_old = max_age_ms is not None and oldest.last_ts < now_ms - max_age_ms
            if not (too_big or too_old):
                break
            index.drop_oldest()
            removed += 1
            # Its file and any older record-less file (a failed round's) go.
            while self._files and self._files[0] <= oldest.number:
                self._doomed.append(self._files.pop(0))
        if removed:
            self._reclaim()
        return removed

    def _pin(self, numbers: set[int]) -> None:
        for number in numbers:
            self._pinned[number] = self._pinned.get(number, 0) + 1

    def _unpin(self, numbers: set[int]) -> None:
        for number in numbers:
            left = self._pinned.pop(number) - 1
            if left:
                self._pinned[number] = left
        if self._doomed:
            self._reclaim()

    def _reclaim(self) -> None:
        """Delete dropped segments' files, oldest first (the manifest's rule), stopping at
        one a disk read in flight needs."""
        doomed = self._doomed
        while doomed and doomed[0] not in self._pinned and not self._closed:
            number = doomed.pop(0)
            self._segments.close_reader(number)
            self._committer.delete_segment(number)

    # -- start and end --------------------------------------------------------------------

    def recover(self, *, force: bool = False) -> None:
        """Called once, before anything else (by the stream queue as it is declared or
        restored): scan the segments, keeping no body, and build the index. A torn tail of
        the newest segment is cut and damaged records are skipped and reported, as for the
        message store (segments.py); errors.RecoveryError if a segment file is missing,
        unless `force`. Appends then go to a fresh segment."""
        assert not self._recovered, "recover() runs once"
        index, highest = self._index, -1
        numbers: list[int] = []
        for number, scan in self._segments.recover(force):
            numbers.append(number)
            foreign = 0
            for position, type_, offset, queue, _, timestamp_ms, _ in scan:
                if type_ != records.ENQUEUE or queue or offset <= highest:
                    foreign += 1  # not a stream's record, or out of order: not trusted
                    continue
                highest = offset
                timestamp_ms = max(timestamp_ms, self._last_ts)
                self._last_ts = timestamp_ms
                # Where a record ends is not in its summary: the segment's end is set below.
                index.add(number, offset, position, timestamp_ms, position)
            if index and index.segments[-1].number == number:
                segment = index.segments[-1]
                index.size_bytes += scan.valid_end - segment.end
                segment.end = scan.valid_end
                segment.skipped = dict(scan.skipped)
            if foreign:
                log.error(
                    "stream segment %d: %d records not of this stream ignored", number, foreign
                )
        self.next_offset = self.committed_offset = highest + 1
        self._tail.reset(self.next_offset)
        self._active = max(numbers[-1] if numbers else 0, self._segments.highest_number) + 1
        self._files = numbers
        self._recovered = True

    async def close(self) -> None:
        """The queue's or the broker's orderly stop: reads in flight end, everything
        appended is made durable, the files are let go. Nothing is appended after."""
        self._reader.shutdown(wait=True)
        await self._committer.drain()
        self._committer.close()
        self._closed = True

    def relocate(self, directory: Path) -> None:
        """Its directory was renamed (store/stream_logs.py, as the stream is deleted):
        whatever is still written or read goes there."""
        self.directory = self._segments.directory = directory

    def delete(self) -> None:
        """The stream queue was deleted, after `close`: every file of the stream goes, its
        directory too. Blocking, on the loop: a few unlinks."""
        assert self._closed, "close() first"
        try:
            shutil.rmtree(self.directory)
        except FileNotFoundError:
            pass
        except OSError as exc:  # the queue is gone either way: leftovers are only reported
            log.error("stream %s: cannot delete its files: %s", self.directory, exc)
