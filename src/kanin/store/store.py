"""The message store as the broker sees it: one small interface, two implementations.

- `enqueue` records a persistent message in a durable queue and returns its id;
- `remove` records that it left the queue (acked, dropped, expired, purged);
- `delivered` notes a delivery, so a message recovered after a crash comes back
  with redelivered=true (written lazily: nobody waits for it);
- `after_commit` runs a callback once everything recorded so far is durable:
  publisher confirms and tx.commit wait on it, nothing else does;
- `recover` returns, per queue, the messages still in it, in order.

FileStore keeps them in the segmented log (segments.py) through the group committer;
MemoryStore keeps nothing on disk and is what a broker without durability, and the
shared store test suite, use. Both run `after_commit` callbacks on a later loop turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from kanin.store import records
from kanin.store.committer import GroupCommitter
from kanin.store.segments import SegmentLog

log = logging.getLogger(__name__)

Waiter = Callable[[bool], None]
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024


@dataclass
class StoredMessage:
    id: int
    exchange: str
    routing_key: str
    header: bytes
    body: bytes
    redelivered: bool = False


class MessageStore(Protocol):
    def enqueue(
        self, queue: str, exchange: str, routing_key: str, header: bytes, body: bytes
    ) -> int: ...

    def remove(self, queue: str, message_id: int) -> None: ...

    def delivered(self, queue: str, message_id: int) -> None: ...

    def after_commit(self, waiter: Waiter) -> None: ...

    def recover(self) -> dict[str, list[StoredMessage]]: ...

    def forget_queue(self, queue: str, message_ids: list[int]) -> None: ...

    async def close(self) -> None: ...


@dataclass
class _Segment:
    live: int = 0  # ENQUEUE records in it whose message is still in a queue
    total: int = 0  # ENQUEUE records ever written to it
    compacting: bool = False


# A closed segment whose live share falls below this is compacted: its live messages are
# written again to the active segment and the old file deleted, so a few long-unacked
# messages cannot pin gigabytes of acked ones.
COMPACT_BELOW_LIVE_SHARE = 0.25


class FileStore:
    def __init__(
        self,
        directory: Path,
        loop: asyncio.AbstractEventLoop,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> None:
        self._loop = loop
        self._segments = SegmentLog(directory)
        self._committer = GroupCommitter(self._segments, loop)
        self.compactions = 0
        self._segment_bytes = segment_bytes
        self._next_id = 1
        self._active = 1
        self._active_size = 0
        self._where: dict[int, int] = {}  # live message id -> segment holding its ENQUEUE
        self._live: dict[int, _Segment] = {}
        # Segments on disk, oldest first (the active one last), and those with nothing live.
        self._on_disk: list[int] = []
        self._dead: set[int] = set()
        self._delivered: set[int] = set()  # live ids with a DELIVERED record on disk
        self._recovered = False

    @property
    def committer(self) -> GroupCommitter:
        return self._committer

    # -- recording ------------------------------------------------------------------------

    def enqueue(
        self, queue: str, exchange: str, routing_key: str, header: bytes, body: bytes
    ) -> int:
        assert self._recovered, "recover() must run before the store is written"
        message_id = self._next_id
        self._next_id += 1
        data = records.encode(
            records.Record(records.ENQUEUE, message_id, queue, exchange, routing_key, header, body)
        )
        segment = self._place(data)
        self._where[message_id] = segment
        state = self._live.setdefault(segment, _Segment())
        state.live += 1
        state.total += 1
        return message_id

    def remove(self, queue: str, message_id: int) -> None:
        segment = self._where.pop(message_id, None)
        if segment is None:
            return
        self._delivered.discard(message_id)
        self._place(records.encode_simple(records.REMOVE, message_id, queue))
        state = self._live[segment]
        state.live -= 1
        if segment == self._active:
            return
        if state.live == 0:
            self._mark_dead(segment)
        elif state.live < state.total * COMPACT_BELOW_LIVE_SHARE and not state.compacting:
            self._compact(segment, state)

    def _compact(self, segment: int, state: _Segment) -> None:
        """Read the segment's live records off the loop, then write them again (same ids)
        to the active segment; the old file is deleted once it holds nothing live."""
        state.compacting = True
        live_ids = {i for i, s in self._where.items() if s == segment}
        future = self._loop.run_in_executor(None, self._segments.read_enqueues, segment, live_ids)
        future.add_done_callback(lambda done: self._rewrite(segment, done))

    def _rewrite(self, segment: int, done: asyncio.Future[list[records.Record]]) -> None:
        state = self._live.get(segment)
        if state is None:
            return  # emptied meanwhile and already deleted
        if done.exception() is not None:
            log.error("compacting segment %d failed: %s", segment, done.exception())
            state.compacting = False
            return
        moved: list[int] = []
        for record in done.result():
            if self._where.get(record.id) != segment:
                continue  # removed while we were reading
            new_segment = self._place(records.encode(record))
            if record.id in self._delivered:  # the delivery mark moves with the message
                self._place(records.encode_simple(records.DELIVERED, record.id, record.queue))
            self._where[record.id] = new_segment
            target = self._live.setdefault(new_segment, _Segment())
            target.live += 1
            target.total += 1
            state.live -= 1
            moved.append(record.id)
        # The old file may go only once the copies are on disk.
        self._committer.after_commit(lambda ok: self._compacted(segment, moved, ok))

    def _compacted(self, segment: int, moved: list[int], ok: bool) -> None:
        state = self._live.get(segment)
        if state is None:
            return
        if not ok:
            # The copies were not written: the messages still live in the old segment.
            for message_id in moved:
                current = self._where.get(message_id)
                if current is not None and current != segment:
                    self._where[message_id] = segment
                    self._live[current].live -= 1
                    state.live += 1
            state.compacting = False
            return
        self.compactions += 1
        if state.live == 0:
            self._mark_dead(segment)
        else:
            state.compacting = False

    def _mark_dead(self, segment: int) -> None:
        """No message in the segment is live any more; delete it when that is safe."""
        self._live.pop(segment, None)
        self._dead.add(segment)
        self._reclaim()

    def _reclaim(self) -> None:
        """Delete dead segments oldest first only: a segment's REMOVE records may cancel
        ENQUEUEs in older files, and must outlive them or acked messages would come back."""
        on_disk = self._on_disk
        while on_disk and on_disk[0] in self._dead and on_disk[0] != self._active:
            segment = on_disk.pop(0)
            self._dead.discard(segment)
            self._committer.delete_segment(segment)

    def delivered(self, queue: str, message_id: int) -> None:
        # Written every time it is asked for: a mark lost in a failed round is written again.
        if message_id in self._where:
            self._delivered.add(message_id)
            self._place(records.encode_simple(records.DELIVERED, message_id, queue))

    def after_commit(self, waiter: Waiter) -> None:
        self._committer.after_commit(waiter)

    def _place(self, data: bytes) -> int:
        """Choose the segment for a record (a new one past the size limit) and queue it."""
        if self._active_size + len(data) > self._segment_bytes and self._active_size > 0:
            finished = self._active
            self._active += 1
            self._active_size = 0
            self._on_disk.append(self._active)
            state = self._live.get(finished)
            if state is None or state.live == 0:
                self._mark_dead(finished)
        self._active_size += len(data)
        self._committer.append(self._active, data)
        return self._active

    # -- recovery -------------------------------------------------------------------------

    def recover(self) -> dict[str, list[StoredMessage]]:
        queues: dict[str, dict[int, StoredMessage]] = {}
        enqueued: dict[int, int] = {}  # segment -> ENQUEUE records in it
        highest_segment = 0
        for segment, record in self._segments.recover():
            highest_segment = max(highest_segment, segment)
            self._next_id = max(self._next_id, record.id + 1)
            if record.type == records.ENQUEUE:
                enqueued[segment] = enqueued.get(segment, 0) + 1
                queues.setdefault(record.queue, {})[record.id] = StoredMessage(
                    record.id, record.exchange, record.routing_key, record.header, record.body
                )
                self._where[record.id] = segment
            elif record.type == records.REMOVE:
                queues.get(record.queue, {}).pop(record.id, None)
                self._where.pop(record.id, None)
                self._delivered.discard(record.id)
            elif record.type == records.DELIVERED:
                message = queues.get(record.queue, {}).get(record.id)
                if message is not None:
                    message.redelivered = True
                    self._delivered.add(record.id)
        for segment in self._where.values():
            self._live.setdefault(segment, _Segment()).live += 1
        for segment, total in enqueued.items():
            if segment in self._live:
                self._live[segment].total = total
        # Never append to a file that recovery may have cut: start a fresh segment.
        # Past every file, not just those with records: a header-only newest file (a crash
        # or an undone first write) must not become the active segment and be reclaimed.
        self._active = max(highest_segment, *self._segments.segment_numbers(), 0) + 1
        self._on_disk = [*self._segments.segment_numbers(), self._active]
        self._dead = {n for n in self._on_disk[:-1] if n not in self._live}
        # The newest old file stays until the new segment has records: it remembers which
        # ids were taken, so ids are not reused after everything was removed.
        while self._on_disk[0] in self._dead and self._on_disk[0] != highest_segment:
            self._dead.discard(self._on_disk[0])
            self._segments.delete(self._on_disk.pop(0))
        self._recovered = True
        return {
            queue: [messages[i] for i in sorted(messages)]
            for queue, messages in queues.items()
            if messages
        }

    def forget_queue(self, queue: str, message_ids: list[int]) -> None:
        """Drop recovered messages of a queue that no longer exists."""
        for message_id in message_ids:
            self.remove(queue, message_id)

    async def close(self) -> None:
        await self._committer.drain()
        self._committer.close()


@dataclass
class MemoryStore:
    """The same contract with nothing on disk: `recover` returns what is still live."""

    loop: asyncio.AbstractEventLoop
    _next_id: int = 1
    _queues: dict[str, dict[int, StoredMessage]] = field(default_factory=dict)

    def enqueue(
        self, queue: str, exchange: str, routing_key: str, header: bytes, body: bytes
    ) -> int:
        message_id = self._next_id
        self._next_id += 1
        stored = StoredMessage(message_id, exchange, routing_key, header, body)
        self._queues.setdefault(queue, {})[message_id] = stored
        return message_id

    def remove(self, queue: str, message_id: int) -> None:
        self._queues.get(queue, {}).pop(message_id, None)

    def delivered(self, queue: str, message_id: int) -> None:
        message = self._queues.get(queue, {}).get(message_id)
        if message is not None:
            message.redelivered = True

    def after_commit(self, waiter: Waiter) -> None:
        self.loop.call_soon(waiter, True)

    def recover(self) -> dict[str, list[StoredMessage]]:
        return {
            queue: [messages[i] for i in sorted(messages)]
            for queue, messages in self._queues.items()
            if messages
        }

    def forget_queue(self, queue: str, message_ids: list[int]) -> None:
        for message_id in message_ids:
            self.remove(queue, message_id)

    async def close(self) -> None:
        return None
