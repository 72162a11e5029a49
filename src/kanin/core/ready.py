"""The ready messages of one queue, in delivery order.

Two shapes behind one small interface (append, requeue, peek, pop, len, clear):
- FifoReady: a deque of never-delivered messages in sequence order plus a heap of
  requeued ones; the next message is the smaller-sequence head of the two, so a
  requeued message regains its original place (RabbitMQ classic queue behaviour).
- PriorityReady (x-max-priority): one heap keyed by (-priority, sequence): higher
  priority first, FIFO within a priority, requeued messages back in their place.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from kanin.core.message import Entry


class FifoReady:
    def __init__(self) -> None:
        self._fresh: deque[Entry] = deque()
        self._returned: list[Entry] = []

    def __len__(self) -> int:
        return len(self._fresh) + len(self._returned)

    def __iter__(self) -> Iterator[Entry]:
        yield from self._fresh
        yield from self._returned

    def append(self, entry: Entry) -> None:
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

    def clear(self) -> None:
        self._fresh.clear()
        self._returned.clear()


class PriorityReady:
    def __init__(self, max_priority: int) -> None:
        self.max_priority = max_priority
        self._heap: list[tuple[int, int, Entry]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Entry]:
        return (item[2] for item in self._heap)

    def _key(self, entry: Entry) -> tuple[int, int, Entry]:
        priority = entry.message.properties.priority
        if not isinstance(priority, int) or priority < 0:
            priority = 0
        # Above the maximum counts as the maximum, as in RabbitMQ.
        return (-min(priority, self.max_priority), entry.seq, entry)

    def append(self, entry: Entry) -> None:
        heapq.heappush(self._heap, self._key(entry))

    requeue = append

    def peek(self) -> Entry | None:
        return self._heap[0][2] if self._heap else None

    def pop(self) -> Entry | None:
        return heapq.heappop(self._heap)[2] if self._heap else None

    def clear(self) -> None:
        self._heap.clear()


Ready = FifoReady | PriorityReady
