"""The ready messages of one queue, in delivery order.

Two shapes behind one small interface (append, requeue, peek, pop, head_fifo,
len, iter, clear, remove):
- FifoReady: a deque of never-delivered messages in sequence order plus a heap of
  requeued ones; the next message is the smaller-sequence head of the two, so a
  requeued message regains its original place (RabbitMQ classic queue behaviour).
- PriorityReady (x-max-priority): one FifoReady per priority level, highest first,
  as RabbitMQ's priority queues keep one queue per priority: FIFO within a level,
  requeued messages back in their place.

An entry may be paged out (its message dropped, the store keeps it): ordering never
needs the message. Page-in looks ahead in the FIFO the next message comes from
(`head_fifo().upcoming()`); requeued entries were delivered, so they are in memory.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from kanin.core.message import Entry
from kanin.native import mypyc_attr


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled; a test subclasses it
class FifoReady:
    def __init__(self) -> None:
        self._fresh: deque[Entry] = deque()
        self._returned: list[Entry] = []

    def __len__(self) -> int:
        return len(self._fresh) + len(self._returned)

    def __iter__(self) -> Iterator[Entry]:
        yield from self._fresh
        yield from self._returned

    def append(self, entry: Entry, priority: int = 0) -> None:
        self._fresh.append(entry)

    def requeue(self, entry: Entry) -> None:
        heapq.heappush(self._returned, entry)

    def peek(self) -> Entry | None:
        fresh, returned = self._fresh, self._returned
        if returned and (not fresh or returned[0].seq < fresh[0].seq):
            return returned[0]
        return fresh[0] if fresh else None

    def pop(self) -> Entry | None:
        fresh, returned = self._fresh, self._returned
        if returned and (not fresh or returned[0].seq < fresh[0].seq):
            return heapq.heappop(returned)
        return fresh.popleft() if fresh else None

    def head_fifo(self) -> FifoReady | None:
        return self if self else None

    def upcoming(self) -> Iterator[Entry]:
        """Never-delivered entries from the head on, in order (page-in reads ahead here)."""
        return iter(self._fresh)

    def clear(self) -> None:
        self._fresh.clear()
        self._returned.clear()

    def remove(self, doomed: set[int]) -> list[Entry]:
        """Take out the entries whose id() is in `doomed`, wherever they are. Only a
        failed disk write needs this, so it rebuilds rather than keeping an index."""
        removed = [entry for entry in self if id(entry) in doomed]
        if removed:
            self._fresh = deque(e for e in self._fresh if id(e) not in doomed)
            self._returned = [e for e in self._returned if id(e) not in doomed]
            heapq.heapify(self._returned)
        return removed


class PriorityReady:
    def __init__(self, max_priority: int) -> None:
        self.max_priority = max_priority
        self._levels = [FifoReady() for _ in range(max_priority + 1)]
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Entry]:
        for level in self._levels:
            yield from level

    def _level(self, priority: int) -> FifoReady:
        # Above the maximum counts as the maximum, as in RabbitMQ.
        return self._levels[min(max(priority, 0), self.max_priority)]

    def append(self, entry: Entry, priority: int = 0) -> None:
        self._level(priority).append(entry)
        self._count += 1

    def requeue(self, entry: Entry) -> None:
        assert entry.message is not None, "a requeued message was delivered, so it is loaded"
        self._level(entry.message.priority).requeue(entry)
        entry.message.shed_properties()  # decoded only for that: it stays uncounted
        self._count += 1

    def head_fifo(self) -> FifoReady | None:
        if not self._count:
            return None
        for level in reversed(self._levels):
            if level:
                return level
        raise AssertionError("count says there are messages, but no level has any")

    def peek(self) -> Entry | None:
        fifo = self.head_fifo()
        return fifo.peek() if fifo is not None else None

    def pop(self) -> Entry | None:
        fifo = self.head_fifo()
        if fifo is None:
            return None
        self._count -= 1
        return fifo.pop()

    def clear(self) -> None:
        for level in self._levels:
            level.clear()
        self._count = 0

    def remove(self, doomed: set[int]) -> list[Entry]:
        removed = [entry for level in self._levels for entry in level.remove(doomed)]
        self._count -= len(removed)
        return removed


Ready = FifoReady | PriorityReady
