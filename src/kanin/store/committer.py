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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from kanin.store.segments import SegmentLog

log = logging.getLogger(__name__)

Waiter = Callable[[bool], None]


class GroupCommitter:
    def __init__(self, segments: SegmentLog, loop: asyncio.AbstractEventLoop) -> None:
        self._segments = segments
        self._loop = loop
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kanin-fsync")
        self._chunks: list[tuple[int, bytes]] = []
        self._waiters: list[Waiter] = []
        self._deletes: list[int] = []
        self._running = False
        self._kick_scheduled = False
        self.rounds = 0
        self.records_committed = 0
        self.failed = False  # the last round failed: the disk is in trouble

    @property
    def idle(self) -> bool:
        return not (self._running or self._chunks or self._waiters or self._deletes)

    def append(self, segment: int, data: bytes) -> None:
        self._chunks.append((segment, data))
        self._kick()

    def after_commit(self, waiter: Waiter) -> None:
        self._waiters.append(waiter)
        self._kick()

    def delete_segment(self, segment: int) -> None:
        self._deletes.append(segment)
        self._kick()

    def _kick(self) -> None:
        if not self._running and not self._kick_scheduled:
            self._kick_scheduled = True
            self._loop.call_soon(self._start_round)

    def _start_round(self) -> None:
        self._kick_scheduled = False
        if self._running or self.idle:
            return
        chunks, self._chunks = self._chunks, []
        waiters, self._waiters = self._waiters, []
        deletes, self._deletes = self._deletes, []
        self._running = True
        future = self._loop.run_in_executor(self._executor, self._write, chunks, deletes)
        records = len(chunks)
        future.add_done_callback(lambda done: self._finish_round(done, waiters, records))

    def _write(self, chunks: list[tuple[int, bytes]], deletes: list[int]) -> None:
        if chunks:
            self._segments.write(chunks)
        for segment in deletes:
            self._segments.delete(segment)

    def _finish_round(
        self, done: asyncio.Future[None], waiters: list[Waiter], records: int
    ) -> None:
        self._running = False
        self.rounds += 1
        self.records_committed += records
        ok = done.exception() is None
        if not ok:
            log.error("message store write failed: %s", done.exception())
        self.failed = not ok
        if not ok:
            # Waiters that joined during this round cover its lost records too.
            waiters, self._waiters = waiters + self._waiters, []
        for waiter in waiters:
            waiter(ok)
        self._kick()

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
        self._executor.shutdown(wait=True)
        self._segments.close()
