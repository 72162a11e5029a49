"""FileStore: the message store (api.MessageStore) on disk, in the segmented log.

How this works:
- Every change is a record (records.py) appended to the segmented log (segments.py)
  through the group committer (committer.py), the only path by which records become
  durable; `after_commit` waiters hear when the round holding them has ended. A message
  removed before any round took its ENQUEUE is withdrawn: neither record is written.
- How FileStore finds a message again: `_where` maps each live id to its location,
  segment << 32 | offset. Until the committer reports the record on disk the offset is 0
  and the record's bytes stay in `_pending` (reads are served from there); after a failed
  round they stay there for good, since the record never reached the disk. Compaction
  points a moved message at its copy only once the copy is on disk, and a segment is
  deleted only when nothing live is in it, so a location never names a deleted file.
- Reading back (`read_later`): the loop finds where each record is (the location map is
  the loop's), answers records still in `_pending` from memory, reads a small batch
  itself if the page cache holds all of it (`_read_cached`), and hands the rest to one
  reader thread, which preads them and asks the kernel to fetch the records named in
  `ahead`; the answer comes back to the loop. The segments a thread read needs are pinned
  until it is back: reclaiming (oldest first) stops at a pinned segment, so neither its
  file nor its descriptor goes under a read in flight.
- Space: a segment with nothing live is deleted, oldest first (its REMOVE records may
  cancel ENQUEUEs in older files); a closed segment that is mostly dead is compacted:
  its live records are found (compaction.py) and written again to the active segment.
- Recovery (`recover`) replays every segment's records oldest first. Damage is handled by
  the segment log (segments.py): bad records are skipped and reported, only the newest
  segment's torn tail is cut, and a missing segment file raises errors.RecoveryError
  unless the store was made with force_recovery. New records then go to a fresh segment
  numbered past every file and every number ever used (a lost file's number is never
  reused).
- The segment log is the store's one way to the disk; `segments=` puts another (a faulty
  disk: kanin.testing.faulty_disk) under the store and its committer.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kanin.store import compaction, records
from kanin.store.api import Content, Reader, Recovered, Waiter
from kanin.store.committer import GroupCommitter, Landed
from kanin.store.record_reads import READ_GAP_BYTES, Pins, ReadPlan
from kanin.store.recovered_index import EnqueuedColumns
from kanin.store.segments import SegmentLog

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
# A location packs the segment above the offset; offsets fit 32 bits because a segment
# is closed once it passes segment_bytes (at most 2 GiB) plus one record (at most 2 GiB).
_SEGMENT_SHIFT = 32
_OFFSET_MASK = (1 << _SEGMENT_SHIFT) - 1
MAX_SEGMENT_BYTES = 1 << 31


@dataclass
class _Segment:
    live: int = 0  # ENQUEUE records in it whose message is still in a queue
    total: int = 0  # ENQUEUE records ever written to it
    compacting: int = 0  # 0, or WAITING, SCANNING, MOVING: a compaction's steps


# A closed segment whose live share falls below this is compacted: its live messages are
# written again to the active segment and the old file deleted, so a few long-unacked
# messages cannot pin gigabytes of acked ones.
COMPACT_BELOW_LIVE_SHARE = 0.25
# A compaction's steps (_Segment.compacting): WAITING for the segment to stop draining
# (compaction.DrainWatch), SCANNING it for live records, MOVING them to the active segment.
WAITING, SCANNING, MOVING = 1, 2, 3
# Reads of at most this many records from the page cache are done on the loop (see
# _read_cached); bigger ones, whose decoding would hold the loop, go to the reader thread.
LOOP_READ_MAX = 256


class FileStore:
    def __init__(
        self,
        directory: Path,
        loop: asyncio.AbstractEventLoop,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        force_recovery: bool = False,
        segments: SegmentLog | None = None,
        compact_settle_s: float = compaction.SETTLE_S,
    ) -> None:
        """`segments`: the log to use instead of a plain SegmentLog (tests: a faulty disk);
        `compact_settle_s`: see compaction.DrainWatch (tests: 0, compact on the next turn)."""
        assert 0 < segment_bytes <= MAX_SEGMENT_BYTES, segment_bytes
        assert segments is None or segments.directory == directory, "one directory"
        self._loop = loop
        # Go on when segment files are missing (their messages lost), instead of refusing.
        self._force_recovery = force_recovery
        self._segments = segments if segments is not None else SegmentLog(directory)
        self._committer = GroupCommitter(self._segments, loop)
        self._committer.on_written = self._written
        self.compactions = 0
        self._drains = compaction.DrainWatch(loop, compact_settle_s, self._waiting, self._compact)
        self._segment_bytes = segment_bytes
        self._next_id = 1
        self._active = 1
        self._active_size = 0
        self._where: dict[int, int] = {}  # live message id -> location (see the header)
        self._pending: dict[int, bytes] = {}  # id -> its ENQUEUE record, not known on disk
        self._live: dict[int, _Segment] = {}
        # Segments on disk, oldest first (the active one last), and those with nothing live.
        self._on_disk: list[int] = []
        self._dead: set[int] = set()
        # Live ids with a delivery mark on disk -> the returns count the last one carries.
        self._delivered: dict[int, int] = {}
        self._recovered = False
        # Reading back: one thread does every pread (see the header), and the segments
        # reads in flight need are pinned so they are not deleted.
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kanin-read")
        self._pinned = Pins()

    @property
    def committer(self) -> GroupCommitter:
        return self._committer

    # -- recording ------------------------------------------------------------------------

    def enqueue(
        self,
        queue: str,
        exchange: str,
        routing_key: str,
        header: bytes,
        body: bytes,
        *,
        priority: int = 0,
        expires_at_ms: int = 0,
    ) -> int:
        assert self._recovered, "recover() must run before the store is written"
        message_id = self._next_id
        self._next_id += 1
        data = records.encode_enqueue(
            message_id, queue, exchange, routing_key, header, body, priority, expires_at_ms
        )
        self._place_live(message_id, data, withdrawable=True)
        return message_id

    def _place_live(self, message_id: int, data: bytes, *, withdrawable: bool = False) -> int:
        """Queue a message's ENQUEUE record and count it live in its segment at once: the
        next record placed may close the segment, which is deleted if nothing in it is
        live. Until a round writes it, the message is read from memory. Not withdrawable:
        a compaction's copy (the original is still on disk and needs a REMOVE)."""
        segment = self._place(data, message_id, withdrawable=withdrawable)
        self._where[message_id] = segment << _SEGMENT_SHIFT
        self._pending[message_id] = data
        state = self._live.setdefault(segment, _Segment())
        state.live += 1
        state.total += 1
        return segment

    def _written(self, landed: Landed) -> None:
        """A round put these ENQUEUE records on disk: they are read from there now."""
        where, pending = self._where, self._pending
        for message_id, segment, offset in landed:
            if where.get(message_id) == segment << _SEGMENT_SHIFT:
                where[message_id] = segment << _SEGMENT_SHIFT | offset
                pending.pop(message_id, None)

    def remove(self, queue: str, message_id: int) -> None:
        location = self._where.pop(message_id, None)
        if location is None:
            return
        self._pending.pop(message_id, None)
        self._delivered.pop(message_id, None)
        if location & _OFFSET_MASK or not self._committer.withdraw(message_id):
            self._place(records.encode_simple(records.REMOVE, message_id, queue), lazy=True)
        segment = location >> _SEGMENT_SHIFT
        state = self._live[segment]
        state.live -= 1
        if segment == self._active:
            return
        if state.live == 0 and state.compacting != MOVING:  # else _compacted decides
            self._mark_dead(segment)
        elif state.live < state.total * COMPACT_BELOW_LIVE_SHARE and not state.compacting:
            state.compacting = WAITING
            self._drains.watch(segment, state.live)

    # -- reading back ---------------------------------------------------------------------

    def read_later(
        self, queue: str, message_ids: Sequence[int], ahead: Sequence[int], done: Reader
    ) -> None:
        """See api.MessageStore.read_later and the module header: located here, read on the
        reader thread, answered on the loop."""
        plan = self._plan(message_ids, ahead)
        segments = plan.segments
        if not segments or self._read_cached(plan):
            self._loop.call_soon(done, plan.found)
            return
        self._pinned.pin(segments)
        future = self._loop.run_in_executor(self._reader, self._read_disk, plan)
        future.add_done_callback(lambda landed: self._landed(plan, segments, landed, done))

    def read(
        self, queue: str, message_ids: Sequence[int], ahead: Sequence[int] = ()
    ) -> list[Content | None]:
        """See api.MessageStore.read: blocks until the reader thread has read them."""
        plan = self._plan(message_ids, ahead)
        if plan.segments:
            self._reader.submit(self._read_disk, plan).result()
        return plan.found

    def _plan(self, message_ids: Sequence[int], ahead: Sequence[int]) -> ReadPlan:
        """On the loop: where each record is; those not known on disk yet decoded from memory."""
        plan = ReadPlan(message_ids, [None] * len(message_ids), ahead=self._spans(ahead))
        for index, message_id in enumerate(message_ids):
            location = self._where.get(message_id)
            if location is None:
                continue
            offset, segment = location & _OFFSET_MASK, location >> _SEGMENT_SHIFT
            if offset == 0:
                plan.found[index] = _content(records.decode(self._pending[message_id][8:]))
            else:
                assert segment not in self._dead, f"live message located in dead segment {segment}"
                plan.on_disk.setdefault(segment, []).append((index, offset))
        return plan

    def _spans(self, message_ids: Sequence[int]) -> dict[int, tuple[int, int]]:
        spans: dict[int, tuple[int, int]] = {}  # segment -> (first, last) offset wanted
        for message_id in message_ids:
            location = self._where.get(message_id, 0)
            offset, segment = location & _OFFSET_MASK, location >> _SEGMENT_SHIFT
            if offset:
                first, last = spans.get(segment, (offset, offset))
                spans[segment] = (min(first, offset), max(last, offset))
        return spans

    def _read_cached(self, plan: ReadPlan) -> bool:
        """A small read the page cache holds whole (what was just written, say), on the
        loop: a reader thread's turn would cost more, as the loop waits for the interpreter
        lock while it works. False if the read is big or any of it needs the disk."""
        if sum(map(len, plan.on_disk.values())) > LOOP_READ_MAX:
            return False
        try:
            for segment, wanted in plan.on_disk.items():
                self._read_segment(segment, plan.message_ids, wanted, plan.found, cached_only=True)
        except OSError:  # BlockingIOError: not all cached; others are the thread's to report
            return False
        for segment, (first, last) in plan.ahead.items():
            self._segments.advise(segment, first, last - first + READ_GAP_BYTES, on_loop=True)
        return True

    def _read_disk(self, plan: ReadPlan) -> None:
        """On the reader thread: the records the plan names, then the read-ahead hints."""
        for segment, wanted in plan.on_disk.items():
            self._read_segment(segment, plan.message_ids, wanted, plan.found)
        for segment, (first, last) in plan.ahead.items():
            self._segments.advise(segment, first, last - first + READ_GAP_BYTES)

    def _landed(
        self, plan: ReadPlan, segments: set[int], landed: asyncio.Future[None], done: Reader
    ) -> None:
        """On the loop: the read is back; its segments may go, and the reader hears."""
        self._pinned.unpin(segments)
        self._reclaim()  # what waited for this read may go now
        failure = None if landed.cancelled() else landed.exception()
        if failure is not None:  # not an OSError (those are per segment): a bug, but reported
            log.error("reading back messages failed: %r", failure)
        done(plan.found)

    def _read_segment(
        self,
        segment: int,
        message_ids: Sequence[int],
        wanted: list[tuple[int, int]],
        found: list[Content | None],
        cached_only: bool = False,
    ) -> None:
        """The records a read wants from one segment, into `found`. If `cached_only`, any
        failure raises OSError (the reader thread then reads it all again and reports)."""
        offsets = [offset for _, offset in wanted]
        try:
            got = self._segments.read(segment, offsets, cached_only=cached_only)
        except OSError as exc:
            if cached_only:
                raise
            log.error("cannot read segment %d: %s", segment, exc)
            return
        for (index, offset), record in zip(wanted, got, strict=True):
            if record is None or record.type != records.ENQUEUE or record.id != message_ids[index]:
                if cached_only:
                    raise BlockingIOError(f"no valid record at {segment}:{offset}")
                where = f"segment {segment} offset {offset}"
                log.error("message %d: no valid record at %s", message_ids[index], where)
                continue
            found[index] = _content(record)

    # -- compaction and reclaiming space --------------------------------------------------

    def _waiting(self, segment: int) -> int | None:
        """The live count of a segment waiting to be compacted; None if it no longer is."""
        state = self._live.get(segment)
        return state.live if state is not None and state.compacting == WAITING else None

    def _compact(self, segment: int) -> None:
        """Read the segment (on a worker thread), find its live records (on the loop, in
        slices: compaction.py), then write them again (same ids) to the active segment;
        the old file is deleted once it holds nothing live."""
        self._live[segment].compacting = SCANNING
        future = self._loop.run_in_executor(None, self._segments.read_whole, segment)
        future.add_done_callback(lambda read: self._find_live(segment, read))

    def _find_live(self, segment: int, read: asyncio.Future[tuple[bytes, int | None]]) -> None:
        if read.exception() is not None:
            return self._rewrite(segment, [], read.exception())
        # Each record found is looked up (not: ask the index for all the segment's ids).
        base, where = segment << _SEGMENT_SHIFT, self._where

        def live(message_id: int, offset: int) -> bool:
            return where.get(message_id) == base | offset

        scan = compaction.live_enqueues(*read.result(), live)
        done = functools.partial(self._rewrite, segment)
        compaction.LiveScan(self._loop, scan, done).start()

    def _rewrite(
        self, segment: int, found: list[records.Record], failure: BaseException | None
    ) -> None:
        state = self._live.get(segment)
        if state is None:  # emptied meanwhile and already deleted
            return
        if failure is not None:
            log.error("compacting segment %d failed: %s", segment, failure)
            state.compacting = 0
            return
        state.compacting = MOVING  # from now on copies may be in memory only
        moved: list[tuple[int, int]] = []  # (id, its location before the move)

        def move(record: records.Record) -> None:
            location = self._where.get(record.id)
            if location is None or location >> _SEGMENT_SHIFT != segment:
                return  # not live here: removed (maybe while we read), or moved before
            # Until the copy is on disk it is read from memory; the old file stays till then.
            self._place_live(record.id, records.encode(record))
            returns = self._delivered.get(record.id)
            if returns is not None:  # the delivery mark moves with the message
                self._place(records.encode_delivery(record.id, record.queue, returns))
            state.live -= 1
            moved.append((record.id, location))

        # The old file may go only once the copies are on disk.
        compaction.in_slices(
            self._loop,
            found,
            move,
            lambda: self._committer.after_commit(lambda ok: self._compacted(segment, moved, ok)),
        )

    def _compacted(self, segment: int, moved: list[tuple[int, int]], ok: bool) -> None:
        state = self._live.get(segment)
        if state is None:
            return
        if not ok:
            # The copies were not written: the messages still live in the old segment.
            for message_id, before in moved:
                current = self._where.get(message_id)
                if current is not None and current >> _SEGMENT_SHIFT != segment:
                    self._where[message_id] = before
                    if before & _OFFSET_MASK:
                        self._pending.pop(message_id, None)
                    self._live[current >> _SEGMENT_SHIFT].live -= 1
                    state.live += 1
            state.compacting = 0
            return
        self.compactions += 1
        if state.live == 0:
            self._mark_dead(segment)
        else:
            state.compacting = 0

    def _mark_dead(self, segment: int) -> None:
        """No message in the segment is live any more; delete it when that is safe."""
        self._live.pop(segment, None)
        self._dead.add(segment)
        self._reclaim()

    def _reclaim(self) -> None:
        """Delete dead segments oldest first only: a segment's REMOVE records may cancel
        ENQUEUEs in older files, and must outlive them or acked messages would come back.
        A segment a read in flight needs waits (and so do those after it) till it is back."""
        on_disk, pinned = self._on_disk, self._pinned
        while (
            on_disk
            and on_disk[0] in self._dead
            and on_disk[0] != self._active
            and on_disk[0] not in pinned
        ):
            segment = on_disk.pop(0)
            self._dead.discard(segment)
            self._segments.close_reader(segment)
            self._committer.delete_segment(segment)

    def delivered(self, queue: str, message_id: int, returns: int = 0) -> None:
        # Written every time it is asked for: a mark lost in a failed round is written again.
        if message_id in self._where:
            self._delivered[message_id] = returns
            self._place(records.encode_delivery(message_id, queue, returns), lazy=True)

    def after_commit(self, waiter: Waiter) -> None:
        self._committer.after_commit(waiter)

    def pending_round(self) -> int:
        return self._committer.pending_round

    def at_round_start(self, opener: Callable[[], None]) -> None:
        self._committer.at_round_start(opener)

    def _place(
        self, data: bytes, message_id: int = 0, *, lazy: bool = False, withdrawable: bool = False
    ) -> int:
        """Choose the segment for a record (a new one past the size limit) and queue it;
        a lazy one waits for a round something else starts (committer.py)."""
        if self._active_size + len(data) > self._segment_bytes and self._active_size > 0:
            finished = self._active
            self._active += 1
            self._active_size = 0
            self._on_disk.append(self._active)
            state = self._live.get(finished)
            if state is None or state.live == 0:
                self._mark_dead(finished)
        self._active_size += len(data)
        self._committer.append(self._active, data, message_id, lazy=lazy, withdrawable=withdrawable)
        return self._active

    # -- recovery -------------------------------------------------------------------------

    def recover(self) -> dict[str, list[Recovered]]:
        """Scan the log once: locations of live messages, and per queue what the broker
        needs to rebuild it. No body is copied and no header decoded. Damaged records are
        skipped and reported (segments.py); errors.RecoveryError if segment files are
        missing, unless the store was made with force_recovery."""
        enqueued = EnqueuedColumns()
        highest_segment = self._scan(enqueued)
        for location in self._where.values():
            self._live[location >> _SEGMENT_SHIFT].live += 1
        self._live = {n: state for n, state in self._live.items() if state.live}
        self._start_after(highest_segment)
        self._recovered = True
        return enqueued.live(self._where, self._delivered)

    def _scan(self, enqueued: EnqueuedColumns) -> int:
        """Replay every record into the location map and `enqueued`; returns the newest
        segment that has records."""
        where, delivered, live = self._where, self._delivered, self._live
        highest_segment, next_id = 0, self._next_id
        add = enqueued.add
        for segment, summaries in self._segments.recover(self._force_recovery):
            base = segment << _SEGMENT_SHIFT
            state = live.setdefault(segment, _Segment())
            for offset, type_, id_, queue, priority, expiry, size in summaries:
                if id_ >= next_id:
                    next_id = id_ + 1
                if type_ == records.ENQUEUE:
                    where[id_] = base | offset
                    add(id_, base | offset, queue, size, priority, expiry)
                    state.total += 1
                elif type_ == records.REMOVE:
                    where.pop(id_, None)
                    delivered.pop(id_, None)
                elif id_ in where:  # DELIVERED, or REDELIVERED with its count in `size`
                    returns = size if type_ == records.REDELIVERED else 0
                    delivered[id_] = max(returns, delivered.get(id_, 0))
            if summaries.valid_end > records.FILE_HEADER_BYTES:
                highest_segment = segment  # the newest with records: it holds the top id
        self._next_id = next_id
        return highest_segment

    def _start_after(self, highest_segment: int) -> None:
        """Never append to a file that recovery may have cut: start a fresh segment.
        Past every file, not just those with records: a header-only newest file (a crash
        or an undone first write) must not become the active segment and be reclaimed."""
        # Past lost files' numbers too (--force-recovery): a number is never used twice.
        numbers = self._segments.segment_numbers()
        self._active = max(highest_segment, *numbers, self._segments.highest_number, 0) + 1
        self._on_disk = [*numbers, self._active]
        self._dead = {n for n in self._on_disk[:-1] if n not in self._live}
        # The newest old file stays until the new segment has records: it remembers which
        # ids were taken, so ids are not reused after everything was removed.
        while self._on_disk[0] in self._dead and self._on_disk[0] != highest_segment:
            self._dead.discard(self._on_disk[0])
            self._segments.delete(self._on_disk.pop(0))

    async def close(self) -> None:
        # Reads in flight end first: the log's descriptors are closed with the committer.
        self._drains.close()
        self._reader.shutdown(wait=True)
        await self._committer.drain()
        self._committer.close()


def _content(record: records.Record) -> Content:
    return Content(record.exchange, record.routing_key, record.header, record.body)
