"""Items due at given millisecond times, handed back when the caller's clock reaches them.

A hierarchical timing wheel: no I/O and no clock of its own. The caller inserts items with a
due time, cancels some, and calls `advance(now_ms)` with its clock; `next_due_ms` says when
that next has something to hand back, so a single timer can sleep until then. The broker
uses it for delayed messages, requeue backoff and consumer timeouts, where millions may be
pending and must neither be scanned periodically nor cost much memory each.

Layout. Time is counted in ticks of `tick_ms` (1 ms by default). There are `levels` rings of
`slots` slots each, `slots` a power of two, 2**b. A tick number is read as digits of b bits:
level 0's slots are single ticks, level 1's span 2**b ticks, level L's 2**(b*L). An item due
at tick d, seen from the current tick c, goes to the level of the highest digit in which d
and c differ, in the slot given by d's digit there (one XOR and a bit_length, no loop). So
level 0 holds what is due in the rest of c's level-1 range, level 1 what is due in the rest
of c's level-2 range, and so on, and every level-L item is due before every level-(L+1) one.
Its position is a function of (d, c) alone, which is what makes `cancel` O(1): the handle
carries its due time, from which the slot is computed rather than stored.

Advancing. When c enters the range of an occupied level-L slot (L > 0), that slot is
cascaded: its items move to lower levels by their exact due tick, and those due at that very
tick are handed back. Each level keeps an occupancy bitmap (a Python int, bit i set while
slot i holds a live item); since all items of a level lie ahead of c within its range, the
lowest set bit of the lowest non-empty level *is* the next thing that happens. `advance`
jumps from one such event to the next, never visiting empty slots: its work is the items
handed back, plus each item's cascades (at most levels - 1 of them), plus O(levels) per
occupied slot reached, however much time passes. A day's jump costs what it hands back.

Beyond the top level. Items due outside c's top-level range (by default 2**40 ms, about 35
years, from 1 ms ticks, 256 slots and 5 levels) wait in an overflow heap ordered by (due
tick, insertion). When c enters their top-level range they cascade into the wheel like any
slot. Insertion there is O(log n), but only far-future items ever go there.

Order. `advance` hands items back in due order, ties in insertion order: items due at the
same time always sit in the same slot, appended in insertion order, and cascades keep their
relative order. Items inserted with a due time already reached are kept aside and handed
back, first, by the next `advance`. With tick_ms > 1 a due time is rounded up to a whole
tick: an item fires at the first advance whose now_ms reaches that, but the items fired
together are still in due_ms order. A clock that goes back moves nothing.

next_due_ms. The earliest item lies in the lowest non-empty level's lowest occupied slot;
for level 0 that slot's tick is the answer. For a higher slot, or the kept-aside items, the
slot tracks the smallest due time of its live items on insertion; cancelling the item that
held it forgets it, and it is found again from the slot's own items. A slot whose items were
appended in due order (constant delays, the usual case) finds it by skipping the cancelled
head, O(1) amortised; an unordered slot is sorted once, then stays ordered while appends
allow. So no call scans all pending items; the worst is one slot, after the earliest item
of an unordered slot was cancelled.

Memory. The slot lists hold the handles themselves: a two-field __slots__ object (48 bytes)
plus one list pointer, about 57 bytes per pending item, beside the caller's own due_ms int
and item. A cancelled handle stays in its slot, its item dropped, until the slot is reached
or compacted (when cancelled ones outnumber live ones), so memory follows what is pending.

`examined` counts the entries advance and next_due_ms look at, and `events` the slots they
reach, for tests that bound the work.
"""

from __future__ import annotations

import heapq
from operator import attrgetter
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_DONE: Any = object()  # the item of a handle that has fired or been cancelled
_due_of = attrgetter("due_ms")
_COMPACT_SLACK = 32  # cancelled entries a slot may hold beyond its live ones


class Handle(Generic[T]):
    """One inserted item, to pass to `cancel`; read-only for the caller."""

    __slots__ = ("due_ms", "item")

    def __init__(self, due_ms: int, item: T) -> None:
        self.due_ms = due_ms
        self.item = item

    @property
    def pending(self) -> bool:
        """False once the item has been handed back by advance, or cancelled."""
        return self.item is not _DONE


class _Slot(Generic[T]):
    """The entries of one slot, in insertion order, some perhaps cancelled.

    `live` counts the pending ones. `low` is the smallest due_ms among them, or None once
    the entry holding it was cancelled. `ordered` says due_ms never decreased along
    `entries`; while it holds, entries before `head` are known cancelled and the first
    pending one from there is the earliest.
    """

    __slots__ = ("entries", "head", "live", "low", "ordered")
    entries: list[Handle[T]]
    head: int
    live: int
    low: int | None
    ordered: bool

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.entries, self.head, self.live, self.low, self.ordered = [], 0, 0, None, True

    def add(self, entry: Handle[T]) -> None:
        entries, due = self.entries, entry.due_ms
        if entries and due < entries[-1].due_ms:
            self.ordered = False
        entries.append(entry)
        low = self.low
        if not self.live or (low is not None and due < low):
            self.low = due
        self.live += 1

    def take(self) -> tuple[list[Handle[T]], bool]:
        """Empty the slot: its entries, and whether they are in due order."""
        taken = self.entries, self.ordered
        self.clear()
        return taken

    def drop(self, entry: Handle[T]) -> bool:
        """Cancel one pending entry of this slot; True if none is left."""
        entry.item = _DONE
        self.live -= 1
        if not self.live:
            self.clear()
            return True
        if entry.due_ms == self.low:
            self.low = None
        if len(self.entries) > 2 * self.live + _COMPACT_SLACK:
            # Each compaction removes at least as many entries as it keeps: O(1) amortised.
            self.entries = [e for e in self.entries if e.item is not _DONE]
            self.head = 0
        return False


class TimingWheel(Generic[T]):
    """Pending items by due time; see the module docstring for the design and its costs."""

    __slots__ = (
        "_bits",
        "_count",
        "_late",
        "_levels",
        "_mask",
        "_occupied",
        "_overflow",
        "_overflow_done",
        "_seq",
        "_slots",
        "_tick",
        "_tick_ms",
        "events",
        "examined",
    )

    def __init__(
        self, *, now_ms: int = 0, tick_ms: int = 1, slots: int = 256, levels: int = 5
    ) -> None:
        if tick_ms < 1 or levels < 1 or now_ms < 0:
            raise ValueError("tick_ms and levels must be positive, now_ms not negative")
        if slots < 2 or slots & (slots - 1):
            raise ValueError("slots must be a power of two, at least 2")
        self._tick_ms = tick_ms
        self._bits = slots.bit_length() - 1
        self._mask = slots - 1
        self._levels = levels
        self._tick = now_ms // tick_ms  # every item due at or before it has been handed back
        self._slots: list[list[_Slot[T]]] = [[_Slot() for _ in range(slots)] for _ in range(levels)]
        self._occupied = [0] * levels
        self._late: _Slot[T] = _Slot()  # inserted with a due tick already reached
        self._overflow: list[tuple[int, int, Handle[T]]] = []  # (due tick, seq, handle)
        self._overflow_done = 0
        self._seq = 0
        self._count = 0
        self.examined = 0
        self.events = 0

    def __len__(self) -> int:
        return self._count

    @property
    def span_ms(self) -> int:
        """The length of a top-level range: items due beyond the current one overflow."""
        return self._tick_ms << (self._bits * self._levels)

    def insert(self, item: T, due_ms: int) -> Handle[T]:
        """Hand item back at the first advance reaching due_ms (rounded up to a tick); if
        that is already reached, at the next advance. O(1)."""
        entry = Handle(due_ms, item)
        self._place(entry, -(-due_ms // self._tick_ms))
        self._count += 1
        return entry

    def cancel(self, handle: Handle[T]) -> bool:
        """Forget a pending item, O(1); False if it was handed back or cancelled already."""
        if handle.item is _DONE:
            return False
        due_tick = -(-handle.due_ms // self._tick_ms)
        level, index = self._locate(due_tick)
        if level < 0:
            self._late.drop(handle)
        elif level < self._levels:
            if self._slots[level][index].drop(handle):
                self._occupied[level] &= ~(1 << index)
        else:
            self._drop_overflow(handle)
        self._count -= 1
        return True

    def advance(self, now_ms: int) -> list[T]:
        """Everything due at or before now_ms, in due order, ties in insertion order."""
        due: list[T] = []
        if self._late.live:
            self._fire(self._late, due)
        limit = now_ms // self._tick_ms
        while self._tick < limit and self._step(limit, due):
            pass
        self._tick = max(self._tick, limit)
        self._count -= len(due)
        return due

    def next_due_ms(self) -> int | None:
        """The earliest now_ms at which advance hands something back, None if nothing is
        pending; earlier than the last advance's now_ms if something was inserted late."""
        if self._late.live:
            return self._round_up(self._earliest(self._late))
        for level, occupied in enumerate(self._occupied):
            if occupied:
                index = (occupied & -occupied).bit_length() - 1
                if level == 0:
                    return ((self._tick & ~self._mask) | index) * self._tick_ms
                return self._round_up(self._earliest(self._slots[level][index]))
        if self._overflow_head():
            return self._overflow[0][0] * self._tick_ms
        return None

    def _round_up(self, due_ms: int) -> int:
        tick_ms = self._tick_ms
        return -(-due_ms // tick_ms) * tick_ms

    def _locate(self, due_tick: int) -> tuple[int, int]:
        """Where a pending item due at due_tick is: (-1, 0) aside, (levels, 0) overflow."""
        now = self._tick
        if due_tick <= now:
            return -1, 0
        level = ((due_tick ^ now).bit_length() - 1) // self._bits
        if level >= self._levels:
            return level, 0
        return level, (due_tick >> (level * self._bits)) & self._mask

    def _place(self, entry: Handle[T], due_tick: int) -> None:
        level, index = self._locate(due_tick)
        if level < 0:
            self._late.add(entry)
        elif level < self._levels:
            slot = self._slots[level][index]
            if not slot.live:
                self._occupied[level] |= 1 << index
            slot.add(entry)
        else:
            heapq.heappush(self._overflow, (due_tick, self._seq, entry))
            self._seq += 1

    def _step(self, limit: int, due: list[T]) -> bool:
        """Reach the next occupied slot if it starts at or before tick limit: hand back or
        cascade its items. False if there is none that early."""
        bits = self._bits
        for level, occupied in enumerate(self._occupied):
            if not occupied:
                continue
            index = (occupied & -occupied).bit_length() - 1
            shift = level * bits
            above = shift + bits
            event = (self._tick >> above << above) | (index << shift)
            if event > limit:
                return False
            self._tick = event
            self._occupied[level] = occupied & (occupied - 1)
            self.events += 1
            slot = self._slots[level][index]
            if level == 0:
                self._fire(slot, due)
            else:
                self._cascade(slot.take()[0], event, due)
            return True
        return self._step_overflow(limit, due)

    def _fire(self, slot: _Slot[T], due: list[T]) -> None:
        entries, ordered = slot.take()
        self.examined += len(entries)
        if not ordered:
            entries.sort(key=_due_of)  # stable: ties keep insertion order
        for entry in entries:
            item = entry.item
            if item is not _DONE:
                due.append(item)
                entry.item = _DONE

    def _cascade(self, entries: list[Handle[T]], event: int, due: list[T]) -> None:
        """Move entries down from a slot whose range starts at tick event, now current."""
        self.examined += len(entries)
        tick_ms = self._tick_ms
        now: list[Handle[T]] = []
        for entry in entries:
            if entry.item is _DONE:
                continue
            due_tick = -(-entry.due_ms // tick_ms)
            if due_tick == event:
                now.append(entry)
            else:
                self._place(entry, due_tick)
        if tick_ms > 1:
            now.sort(key=_due_of)
        for entry in now:
            due.append(entry.item)
            entry.item = _DONE

    def _step_overflow(self, limit: int, due: list[T]) -> bool:
        """Cascade the overflow items of the next top-level range, if it starts by limit."""
        if not self._overflow_head():
            return False
        heap, top = self._overflow, self._bits * self._levels
        event = heap[0][0] >> top << top
        if event > limit:
            return False
        self._tick = event
        self.events += 1
        moved = []
        while heap and heap[0][0] >> top == event >> top:
            entry = heapq.heappop(heap)[2]
            if entry.item is _DONE:
                self._overflow_done -= 1
            moved.append(entry)
        self._cascade(moved, event, due)
        return True

    def _overflow_head(self) -> bool:
        """Pop cancelled entries off the top of the overflow heap; True if any is left."""
        heap = self._overflow
        while heap and heap[0][2].item is _DONE:
            heapq.heappop(heap)
            self._overflow_done -= 1
        return bool(heap)

    def _drop_overflow(self, handle: Handle[T]) -> None:
        handle.item = _DONE
        self._overflow_done += 1
        heap = self._overflow
        if self._overflow_done > len(heap) // 2 + _COMPACT_SLACK:
            # Rebuilding removes at least as many as it keeps: O(1) amortised per cancel.
            heap[:] = [kept for kept in heap if kept[2].item is not _DONE]
            heapq.heapify(heap)
            self._overflow_done = 0

    def _earliest(self, slot: _Slot[T]) -> int:
        """The smallest due_ms among a slot's pending entries (the slot has some)."""
        if slot.low is None:
            if not slot.ordered:
                slot.entries = [e for e in slot.entries if e.item is not _DONE]
                slot.entries.sort(key=_due_of)
                slot.head, slot.ordered = 0, True
                self.examined += len(slot.entries)
            entries, head = slot.entries, slot.head
            while entries[head].item is _DONE:
                head += 1
            self.examined += head - slot.head + 1
            slot.head, slot.low = head, entries[head].due_ms
        return slot.low
