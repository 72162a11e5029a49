"""A queue: ready messages in order, consumers, and dispatch between them.

How this works:
- Every message entering the queue gets the next sequence number. `ready` holds
  messages never delivered, in sequence order; `returned` is a heap of messages
  that were delivered and came back (requeue). The next message to hand out is
  the smaller head of the two, so a requeued message regains its original place.
- Dispatch never runs inline with a publish: the queue asks the scheduler for one
  dispatch per event-loop turn and then hands out as many messages as consumers
  have room for (bounded per turn so one queue cannot starve the loop).
- Among consumers with room, the highest x-priority wins; equals take turns.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kanin.core.limits import LengthLimits
from kanin.core.message import Entry, Message

if TYPE_CHECKING:
    from kanin.core.consumer import Consumer
    from kanin.core.exchanges import Binding
    from kanin.core.memory import MemoryMonitor
    from kanin.core.scheduling import Scheduler

# Deliveries per queue per event-loop turn before yielding to other work.
DISPATCH_BATCH = 512


class Queue:
    def __init__(
        self,
        name: str,
        vhost: str,
        scheduler: Scheduler,
        memory: MemoryMonitor,
        *,
        durable: bool = False,
        exclusive_owner: object | None = None,
        auto_delete: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.vhost = vhost
        self.durable = durable
        self.exclusive_owner = exclusive_owner  # the owning connection, or None
        self.auto_delete = auto_delete
        self.arguments = arguments or {}
        self.limits = LengthLimits.from_arguments(self.arguments)
        self.ready: deque[Entry] = deque()
        self.returned: list[Entry] = []
        self.consumers: list[Consumer] = []
        self.bindings: dict[tuple[Any, ...], Binding] = {}
        self.deleted = False
        self.ready_bytes = 0
        self._scheduler = scheduler
        self._memory = memory
        self._next_seq = 1
        self._rr = 0
        self._dispatch_scheduled = False
        self._had_consumer = False
        # Set by the vhost: called when an auto-delete queue loses its last consumer.
        self.on_unused: Callable[[Queue], None] | None = None

    def __repr__(self) -> str:
        return f"Queue({self.vhost!r}, {self.name!r})"

    @property
    def exclusive(self) -> bool:
        return self.exclusive_owner is not None

    @property
    def message_count(self) -> int:
        return len(self.ready) + len(self.returned)

    # -- messages in ----------------------------------------------------------

    def publish(self, message: Message) -> bool:
        """Enqueue; False when the queue refuses the message (x-overflow reject-publish)."""
        if self.limits.full_for(self, len(message.body)):
            if self.limits.rejects_publish:
                return False
            self._make_room(len(message.body))
        entry = Entry(message, self._next_seq)
        self._next_seq += 1
        self.ready.append(entry)
        self.ready_bytes += len(message.body)
        self._memory.add(len(message.body))
        if self.consumers:
            self.schedule_dispatch()
        return True

    def _make_room(self, incoming_bytes: int) -> None:
        """x-overflow drop-head: drop from the head until the new message fits."""
        while self.message_count and self.limits.full_for(self, incoming_bytes):
            entry = self.take()
            assert entry is not None
            self.forget(entry)

    def requeue(self, entries: list[Entry]) -> None:
        """Put delivered messages back at their original place, marked redelivered."""
        if self.deleted:
            for entry in entries:
                self.forget(entry)
            return
        for entry in entries:
            entry.redelivered = True
            heapq.heappush(self.returned, entry)
            self.ready_bytes += len(entry.message.body)
        if self.consumers:
            self.schedule_dispatch()

    # -- messages out ---------------------------------------------------------

    def take(self) -> Entry | None:
        """Remove and return the next message in order, or None."""
        ready, returned = self.ready, self.returned
        if returned and (not ready or returned[0].seq < ready[0].seq):
            entry = heapq.heappop(returned)
        elif ready:
            entry = ready.popleft()
        else:
            return None
        self.ready_bytes -= len(entry.message.body)
        return entry

    def forget(self, entry: Entry) -> None:
        """The message left this queue for good (acked, dropped, delivered without ack)."""
        self._memory.release(len(entry.message.body))

    def purge(self) -> int:
        count = self.message_count
        self.ready.clear()
        self.returned.clear()
        self._memory.release(self.ready_bytes)
        self.ready_bytes = 0
        return count

    # -- consumers ------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self._had_consumer = True
        self.schedule_dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        try:
            self.consumers.remove(consumer)
        except ValueError:
            return
        unused = not self.consumers and self.auto_delete and self._had_consumer
        if unused and self.on_unused is not None:
            self.on_unused(self)

    def has_exclusive_consumer(self) -> bool:
        return any(c.exclusive for c in self.consumers)

    def schedule_dispatch(self) -> None:
        if not self._dispatch_scheduled and not self.deleted:
            self._dispatch_scheduled = True
            self._scheduler.call_soon(self._dispatch)

    def _dispatch(self) -> None:
        self._dispatch_scheduled = False
        if self.deleted:
            return
        for _ in range(DISPATCH_BATCH):
            if not (self.ready or self.returned):
                return
            consumer = self._pick_consumer()
            if consumer is None:
                return
            entry = self.take()
            assert entry is not None
            consumer.channel.deliver(consumer, entry)
        if self.ready or self.returned:
            self.schedule_dispatch()

    def _pick_consumer(self) -> Consumer | None:
        consumers = self.consumers
        count = len(consumers)
        if count == 0:
            return None
        best: Consumer | None = None
        best_index = 0
        for step in range(count):
            index = (self._rr + step) % count
            candidate = consumers[index]
            if candidate.has_capacity() and (best is None or candidate.priority > best.priority):
                best, best_index = candidate, index
        if best is not None:
            self._rr = (best_index + 1) % count
        return best
