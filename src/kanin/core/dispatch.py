"""Whose turn it is: the consumers of one queue, by priority, taking turns.

A queue hands each message to one consumer: among the consumers that can take it, one of
the highest x-priority, and consumers of equal priority take turns. Asking every consumer
whether it can take a message, on every delivery, costs as much as there are consumers;
with thousands of them, most of them full, that scan was the broker's whole CPU. This ring
answers in O(1) amortised instead, the way RabbitMQ's rabbit_queue_consumers does:

- Members are grouped by priority. Each priority has a ring of its *enabled* members, in
  the order of their turns (an OrderedDict used as an ordered set: front, move to back and
  removal of any member are all O(1)). A sorted list holds the priorities whose ring is not
  empty, so the highest one is its last element.
- `current()` is the front of the highest priority's ring. A member that can take the
  message is `served`: it goes to the back of its ring (it had its turn). One that cannot
  is *disabled*: taken off its ring, it stays a member but is not looked at again, and the
  next front is asked (ConsumerChoice.pick in queues/consumers.py runs this loop).
- A disabled member comes back with `enable`, at the back of its ring, once whatever
  stopped it has changed: its owner (the queue, told by the channel) calls it when the
  consumer gets room again (an ack, a raised limit, a socket that drains).

So a member is looked at either to be chosen (once per delivery) or to be disabled, and it
can only be disabled again after something enabled it: the work of a choice is one look per
delivery plus one per enable that happened meanwhile, whatever the number of members. A
lower priority is reached only when every member of the higher ones is disabled, which is
the rule: lower-priority consumers get messages only while all higher ones are full.

The ring knows nothing of consumers, channels or messages (it is generic, and tested on its
own); `examined` counts the members looked at by `current`, for tests that bound the work.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


class DispatchRing(Generic[T]):
    __slots__ = ("_live", "_priority", "_rings", "examined")

    def __init__(self) -> None:
        self._priority: dict[T, int] = {}  # every member, enabled or not
        self._rings: dict[int, OrderedDict[T, None]] = {}  # enabled members, in turn order
        self._live: list[int] = []  # priorities with an enabled member, ascending
        self.examined = 0

    def __len__(self) -> int:
        return len(self._priority)

    def __contains__(self, item: object) -> bool:
        return item in self._priority

    def __iter__(self) -> Iterator[T]:
        return iter(self._priority)

    def is_enabled(self, item: T) -> bool:
        priority = self._priority.get(item)
        return priority is not None and item in self._rings.get(priority, ())

    def add(self, item: T, priority: int) -> None:
        """A new member, enabled, its turn after every enabled member of its priority."""
        if item in self._priority:
            raise ValueError(f"{item!r} is a member already")
        self._priority[item] = priority
        self._enable(item, priority)

    def remove(self, item: T) -> None:
        """Forget a member, enabled or not; an unknown item is ignored."""
        priority = self._priority.pop(item, None)
        if priority is not None:
            self._disable(item, priority)

    def clear(self) -> None:
        self._priority.clear()
        self._rings.clear()
        self._live.clear()

    def enable(self, item: T) -> bool:
        """Give a disabled member its turns back, after every enabled member of its priority.
        False (and nothing changes) if it is not a member or is enabled already."""
        priority = self._priority.get(item)
        if priority is None:
            return False
        ring = self._rings.get(priority)
        if ring is not None and item in ring:
            return False
        self._enable(item, priority)
        return True

    def disable(self, item: T) -> bool:
        """Skip a member until it is enabled again. False if it was not enabled."""
        priority = self._priority.get(item)
        return priority is not None and self._disable(item, priority)

    def current(self) -> T | None:
        """The enabled member whose turn it is (looked at: counted), or None. The caller
        either serves it (`served`) or, if it cannot take a message now, disables it and
        enables it again once it can (ConsumerChoice.pick)."""
        live = self._live
        if not live:
            return None
        self.examined += 1
        return next(iter(self._rings[live[-1]]))

    def served(self, item: T) -> None:
        """`current` took a message: its next turn is after every other of its priority."""
        self._rings[self._priority[item]].move_to_end(item)

    def _enable(self, item: T, priority: int) -> None:
        ring = self._rings.get(priority)
        if ring is None:
            ring = self._rings[priority] = OrderedDict()
            insort(self._live, priority)
        ring[item] = None

    def _disable(self, item: T, priority: int) -> bool:
        ring = self._rings.get(priority)
        if ring is None or item not in ring:
            return False
        del ring[item]
        if not ring:
            # An empty ring would be looked at (and found empty) on every choice.
            del self._rings[priority]
            del self._live[bisect_left(self._live, priority)]
        return True
