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
    live: int = 0


class FileStore:
    def __init__(
        self,
        directory: Path,
        loop: asyncio.AbstractEventLoop,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> None:
        self._segments = SegmentLog(directory)
        self._committer = GroupCommitter(self._segments, loop)
        self._segment_bytes = segment_bytes
        self._next_id = 1
        self._active = 1
        self._active_size = 0
        self._where: dict[int, int] = {}  # live message id -> segment holding its ENQUEUE
        self._live: dict[int, _Segment] = {}
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
        self._live.setdefault(segment, _Segment()).live += 1
        return message_id

    def remove(self, queue: str, message_id: int) -> None:
        segment = self._where.pop(message_id, None)
        if segment is None:
            return
        self._place(records.encode_simple(records.REMOVE, message_id, queue))
        state = self._live[segment]
        state.live -= 1
        if state.live == 0 and segment != self._active:
            # Every message in it is gone: the whole file goes (space reclaimed).
            del self._live[segment]
            self._committer.delete_segment(segment)

    def delivered(self, queue: str, message_id: int) -> None:
        if message_id in self._where:
            self._place(records.encode_simple(records.DELIVERED, message_id, queue))

    def after_commit(self, waiter: Waiter) -> None:
        self._committer.after_commit(waiter)

    def _place(self, data: bytes) -> int:
        """Choose the segment for a record (a new one past the size limit) and queue it."""
        if self._active_size + len(data) > self._segment_bytes and self._active_size > 0:
            finished = self._active
            self._active += 1
            self._active_size = 0
            state = self._live.get(finished)
            if state is not None and state.live == 0:
                del self._live[finished]
                self._committer.delete_segment(finished)
        self._active_size += len(data)
        self._committer.append(self._active, data)
        return self._active

    # -- recovery -------------------------------------------------------------------------

    def recover(self) -> dict[str, list[StoredMessage]]:
        queues: dict[str, dict[int, StoredMessage]] = {}
        owners: dict[int, str] = {}
        highest_segment = 0
        for segment, record in self._segments.recover():
            highest_segment = max(highest_segment, segment)
            self._next_id = max(self._next_id, record.id + 1)
            if record.type == records.ENQUEUE:
                queues.setdefault(record.queue, {})[record.id] = StoredMessage(
                    record.id, record.exchange, record.routing_key, record.header, record.body
                )
                owners[record.id] = record.queue
                self._where[record.id] = segment
            elif record.type == records.REMOVE:
                queues.get(record.queue, {}).pop(record.id, None)
                self._where.pop(record.id, None)
            elif record.type == records.DELIVERED:
                message = queues.get(record.queue, {}).get(record.id)
                if message is not None:
                    message.redelivered = True
        for segment in self._where.values():
            self._live.setdefault(segment, _Segment()).live += 1
        for segment in self._segments.segment_numbers():
            if segment not in self._live:
                self._segments.delete(segment)
        # Never append to a file that recovery may have cut: start a fresh segment.
        self._active = highest_segment + 1
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
