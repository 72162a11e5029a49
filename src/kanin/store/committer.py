"""The group committer: the only path by which records become durable.

How this works (after LavinMQ's persister and the classic group-commit idea):
- `append` puts bytes in the pending batch and, if no round is running, starts one
  on the next loop turn. There is no timer and no sleeping to batch.
- A round swaps out the pending batch and its waiters, writes and fsyncs them on a
  worker thread (one fsync per file touched), then runs the waiters on the loop.
  Appends made meanwhile wait for the next round, which starts as soon as this one
  ends: under load, batches grow by themselves.
- `after_commit(callback)` runs callback(True) once everything appended before it
  is on disk, or callback(False) if the write failed (the publisher gets a nack).
- A *lazy* append (a delivered mark, a removal: records nobody waits for) starts no
  round: it rides along with the next round something else starts. If none starts
  within LAZY_WRITE_S, it is written without an fsync, which costs one write() and
  keeps it through a crash of the process (the page cache has it); only a crash of
  the machine before the next fsync can lose it, and then a message comes back once
  more after a restart (at least once), or without its redelivered flag.
- A chunk appended with a message id is reported to `on_written` with the offset at
  which it landed, after a successful round and before its waiters run: that is how
  the store learns where to read a message back. After a failed round, `on_lost` (if
  set) hears the message ids of its chunks instead: they never reach the disk (the
  stream log drops what it kept of them, stream_log.py).
- `prelude`, if set, is asked at the start of each round for work to do on the worker
  thread before the round's records are written: the definitions save. If that work
  fails, nothing of the round is written and every waiter gets False; so no round
  reports success while the definitions on disk are behind what its records need.
- `on_round_end`, if set, runs on the loop as each round ends, before its waiters (the
  free-disk check).
- `withdraw(message_id)` takes back a chunk appended as withdrawable with that id that
  no round has taken yet: it is never written (RabbitMQ's message store does the same for a message
  acked before it was written). The store uses it when a message is removed so soon:
  neither its ENQUEUE nor a REMOVE need reach the disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kanin.store.segments import SegmentLog

log = logging.getLogger(__name__)

# How long lazy records may wait for a round before they are written without an fsync.
LAZY_WRITE_S = 0.02

Waiter = Callable[[bool], None]
# (message id, segment, offset) of each chunk appended with a message id.
Landed = list[tuple[int, int, int]]


@dataclass(frozen=True)
class Prelude:
    """Work a round does before it writes its records."""

    run: Callable[[], None]  # on the worker thread; raising fails the whole round
    done: Callable[[BaseException | None], None]  # on the loop, before the round's waiters


class PreludeFailed(Exception):
    """The prelude raised: its owner reports that (once per outage), not the committer.

    The prelude's exception is kept in `error`, not only as `__cause__`: compiled with
    mypyc, `raise ... from exc` leaves `__cause__` None, and the owner then heard of a
    failed save as a success."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


class _Round:
    """One commit round, from its start on the loop to its end there."""

    __slots__ = (
        "chunks",
        "deletes",
        "error",
        "ids",
        "offsets",
        "prelude",
        "sync",
        "waiters",
        "withdrawn",
    )

    def __init__(
        self,
        prelude: Prelude | None,
        chunks: list[tuple[int, bytes]],
        deletes: list[int],
        sync: bool,
        waiters: list[Waiter],
        ids: list[int],
        withdrawn: int,
    ) -> None:
        self.prelude = prelude
        self.chunks = chunks
        self.deletes = deletes
        self.sync = sync
        self.waiters = waiters
        self.ids = ids
        self.withdrawn = withdrawn
        self.offsets: list[int] = []  # set on the worker thread, read on the loop after
        self.error: BaseException | None = None


class GroupCommitter:
    def __init__(self, segments: SegmentLog, loop: asyncio.AbstractEventLoop) -> None:
        self._segments = segments
        self._loop = loop
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kanin-fsync")
        self._chunks: list[tuple[int, bytes]] = []
        self._chunk_ids: list[int] = []  # per chunk: the message id it carries, or 0
        # Message id -> its chunk's index in `_chunks`, until a round takes them.
        self._unwritten: dict[int, int] = {}
        self._waiters: list[Waiter] = []
        self._deletes: list[int] = []
        self._running = False
        self._kick_scheduled = False
        self._urgent = False  # something appended since the last round start waits for it
        self._lazy_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self.rounds = 0
        self.rounds_started = 0
        # The number of the round that what is appended now will be written in (a plain
        # attribute: every persistent publish reads it twice).
        self.pending_round = 1
        self.records_committed = 0  # written, not counting those withdrawn
        self.withdrawn = 0
        self._withdrawn_now = 0  # of what is appended now
        self.failed = False  # the last round failed: the disk is in trouble
        self._write_failing = False  # the last write of records failed (logged once)
        self.on_written: Callable[[Landed], None] | None = None
        self.on_lost: Callable[[list[int]], None] | None = None
        self.prelude: Callable[[], Prelude | None] | None = None
        # Called once, on the loop, as the next round starts: what they append goes in it.
        self._openers: list[Callable[[], None]] = []
        self.on_round_end: Callable[[], None] | None = None

    @property
    def idle(self) -> bool:
        return not (
            self._running or self._chunks or self._waiters or self._deletes or self._openers
        )

    def append(
        self,
        segment: int,
        data: bytes,
        message_id: int = 0,
        *,
        lazy: bool = False,
        withdrawable: bool = False,
    ) -> None:
        if withdrawable:  # with its message id: see withdraw
            self._unwritten[message_id] = len(self._chunks)
        self._chunks.append((segment, data))
        self._chunk_ids.append(message_id)
        if not lazy:
            self._kick()
        elif self._lazy_timer is None:
            self._arm_lazy_write()

    def withdraw(self, message_id: int) -> bool:
        """Never write the chunk appended with `message_id` (see the top); False if a round
        has already taken it, or there is none. Its place in the batch is kept, empty."""
        index = self._unwritten.pop(message_id, None)
        if index is None:
            return False
        self._chunks[index] = (self._chunks[index][0], b"")
        self._chunk_ids[index] = 0
        self.withdrawn += 1
        self._withdrawn_now += 1
        return True

    def at_round_start(self, opener: Callable[[], None]) -> None:
        """Call `opener` as the next round starts (before it takes what is appended), so
        that what it appends goes into that round, which starts on the next loop turn."""
        self._openers.append(opener)
        self._kick()

    def after_commit(self, waiter: Waiter) -> None:
        self._waiters.append(waiter)
        self._kick()

    def delete_segment(self, segment: int) -> None:
        self._deletes.append(segment)
        self._kick()

    def _kick(self) -> None:
        self._urgent = True
        if not self._running and not self._kick_scheduled:
            self._kick_scheduled = True
            self._loop.call_soon(self._start_round)

    def _arm_lazy_write(self) -> None:
        if self._lazy_timer is None and not self._closed:
            self._lazy_timer = self._loop.call_later(LAZY_WRITE_S, self._lazy_write_due)

    def _lazy_write_due(self) -> None:
        self._lazy_timer = None
        if self._running:
            self._arm_lazy_write()  # this round took what was there; look again later
        else:
            self._start_round()

    def _start_round(self) -> None:
        self._kick_scheduled = False
        if self._running or self.idle or self._closed:
            return  # closed: what is still appended is lost, as in a crash
        openers, self._openers = self._openers, []
        for opener in openers:
            opener()
        chunks, self._chunks = self._chunks, []
        ids, self._chunk_ids = self._chunk_ids, []
        self._unwritten = {}
        withdrawn, self._withdrawn_now = self._withdrawn_now, 0
        waiters, self._waiters = self._waiters, []
        deletes, self._deletes = self._deletes, []
        # Only lazy records: write them, but nobody waits, so no fsync (see the top).
        sync, self._urgent = self._urgent, False
        prelude = self.prelude() if self.prelude is not None else None
        self._running = True
        self.rounds_started += 1
        self.pending_round = self.rounds_started + 1
        round_ = _Round(prelude, chunks, deletes, sync, waiters, ids, withdrawn)
        self._executor.submit(self._run_round, round_)

    def _run_round(self, round_: _Round) -> None:
        """On the worker thread: write the round, then hand the outcome straight to the loop
        (one wake-up and one loop turn; an asyncio future in between costs another turn,
        which every confirm waits for)."""
        try:
            round_.offsets = self._write(round_.prelude, round_.chunks, round_.deletes, round_.sync)
        except BaseException as exc:
            round_.error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is left to tell
            self._loop.call_soon_threadsafe(self._finish_round, round_)

    def _write(
        self,
        prelude: Prelude | None,
        chunks: list[tuple[int, bytes]],
        deletes: list[int],
        sync: bool,
    ) -> list[int]:
        if prelude is not None:
            try:
                prelude.run()
            except Exception as exc:
                raise PreludeFailed(exc) from exc
        offsets = self._segments.write(chunks, sync=sync) if chunks else []
        for segment in deletes:
            self._segments.delete(segment)
        return offsets

    def _finish_round(self, round_: _Round) -> None:
        prelude, waiters, chunks, ids = round_.prelude, round_.waiters, round_.chunks, round_.ids
        self._running = False
        self.rounds += 1
        self.records_committed += len(chunks) - round_.withdrawn
        error = round_.error
        ok = error is None
        if prelude is not None:
            prelude.done(error.error if isinstance(error, PreludeFailed) else None)
        store_error = error is not None and not isinstance(error, PreludeFailed)
        if store_error and not self._write_failing:
            log.error("message store write failed: %s", error)  # once, not every round
        elif ok and self._write_failing:
            log.warning("message store writes succeed again")
        if store_error or ok:
            self._write_failing = store_error
        self.failed = not ok
        if not ok:
            # Waiters that joined during this round cover its lost records too.
            waiters, self._waiters = waiters + self._waiters, []
            if self.on_lost is not None:
                lost = [message_id for message_id in ids if message_id]
                if lost:
                    self.on_lost(lost)
        elif self.on_written is not None:
            offsets = round_.offsets
            landed = [
                (message_id, chunks[i][0], offsets[i])
                for i, message_id in enumerate(ids)
                if message_id
            ]
            if landed:
                self.on_written(landed)
        if self.on_round_end is not None:
            self.on_round_end()  # before the waiters: the confirms go out under the new alarm
        for waiter in waiters:
            waiter(ok)
        if self._urgent:
            self._kick()
        elif self._chunks:
            self._arm_lazy_write()  # lazy records appended during the round

    async def drain(self) -> None:
        """Wait until everything appended so far is durable (shutdown, tests)."""
        while not self.idle:
            finished: asyncio.Future[bool] = self._loop.create_future()

            def wake(ok: bool, finished: asyncio.Future[bool] = finished) -> None:
                if not finished.done():
                    finished.set_result(ok)

            self.after_commit(wake)
            await finished

    def close(self) -> None:
        self._closed = True
        if self._lazy_timer is not None:
            self._lazy_timer.cancel()
        self._executor.shutdown(wait=True)
        self._segments.close()
