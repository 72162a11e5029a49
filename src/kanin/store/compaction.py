"""Compaction: when a closed segment is worth compacting (DrainWatch), and its read: the
live ENQUEUE records, found on the event loop a slice at a time.

When: a closed segment whose live share has fallen below the threshold is compacted only
once it has stopped draining. A deep queue read back in order empties its oldest segments
within seconds, and a segment that empties is deleted whole, nothing read or copied;
compacting it meanwhile reads the whole file and summarises every record on the loop,
CPU the consumers emptying it are waiting for. So the segment is looked at again every
SETTLE_S, and compacted at the first look that finds it would not be empty within
DRAIN_HORIZON_S at the pace it lost live messages since the last look. A segment pinned by
a few long-unacked messages stops draining at once, and waits one look.

Reading: the file is read whole on a worker thread (the read itself lets go of the
interpreter), but the records are summarised here, SCAN_SLICE per loop turn. Summarising
is Python work, one step a record; on a worker thread it would hold the interpreter lock
from the loop in turns of the switch interval, and the loop, giving the lock away at
every socket call, would wait that long again and again: with a segment of a million
records, seconds of stalls for every connection. In slices, a compaction costs the loop
a millisecond or two a turn, and nothing else.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import TypeVar

from kanin.store import records

log = logging.getLogger(__name__)

SCAN_SLICE = 2000  # records summarised per loop turn (a decoded live one counts LIVE_STEPS)
LIVE_STEPS = 10
REWRITE_SLICE = 500  # live records written again per loop turn
# Seconds between looks at a segment waiting to be compacted: longer than the gaps between
# a batch consumer's acks (one multiple ack per batch), so such a reader counts as draining.
SETTLE_S = 5.0
DRAIN_HORIZON_S = 60.0

T = TypeVar("T")


def draining(live_before: int, live_now: int, settle_s: float) -> bool:
    """Whether a segment that went from `live_before` to `live_now` live messages in one look
    (`settle_s`) would be empty within DRAIN_HORIZON_S at that pace."""
    gone = live_before - live_now
    return gone > 0 and live_now * settle_s <= gone * DRAIN_HORIZON_S


class DrainWatch:
    """Segments below the live share, looked at every `settle_s` until one stops draining,
    then `compact(segment)`. `live(segment)`: its live count, or None once it no longer
    waits (it emptied and is deleted)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        settle_s: float,
        live: Callable[[int], int | None],
        compact: Callable[[int], None],
    ) -> None:
        self._loop = loop
        self._settle_s = settle_s
        self._live = live
        self._compact = compact
        self._looks: dict[int, asyncio.TimerHandle] = {}

    def watch(self, segment: int, live: int) -> None:
        self._looks[segment] = self._loop.call_later(self._settle_s, self._look, segment, live)

    def _look(self, segment: int, before: int) -> None:
        del self._looks[segment]
        now = self._live(segment)
        if now is None:
            return
        if draining(before, now, self._settle_s):
            self.watch(segment, now)
        else:
            self._compact(segment)

    def close(self) -> None:
        for look in self._looks.values():
            look.cancel()
        self._looks.clear()


def live_enqueues(
    data: bytes, version: int | None, live: Callable[[int, int], bool]
) -> Iterator[records.Record | None]:
    """For each valid record of a segment's bytes: the ENQUEUE record decoded if
    `live(id, offset)` says it is live, else None (so that a caller can count steps)."""
    summaries = records.SummaryScan(data, version)
    for offset, type_, id_, *_ in summaries:
        if type_ == records.ENQUEUE and live(id_, offset):
            yield records.decode(
                records.payload_at(data, offset), summaries.version or records.VERSION
            )
        else:
            yield None


class LiveScan:
    """Runs a live_enqueues scan on the loop, SCAN_SLICE steps a turn, then calls
    `done(found, None)`, or `done([], error)` if the scan raised."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        scan: Iterator[records.Record | None],
        done: Callable[[list[records.Record], BaseException | None], None],
    ) -> None:
        self._loop = loop
        self._scan = scan
        self._done = done
        self._found: list[records.Record] = []

    def start(self) -> None:
        self._loop.call_soon(self._step)

    def _step(self) -> None:
        budget = SCAN_SLICE
        try:
            for record in self._scan:
                if record is None:
                    budget -= 1
                else:
                    budget -= LIVE_STEPS
                    self._found.append(record)
                if budget <= 0:
                    self._loop.call_soon(self._step)
                    return
        except Exception as exc:  # a record that summarised but does not decode
            self._done([], exc)
            return
        self._done(self._found, None)


def in_slices(
    loop: asyncio.AbstractEventLoop,
    items: list[T],
    step: Callable[[T], None],
    then: Callable[[], None],
    per_turn: int = REWRITE_SLICE,
) -> None:
    """step(item) for each item, per_turn of them a loop turn (the first at once), then
    then()."""

    def turn(start: int) -> None:
        for item in items[start : start + per_turn]:
            step(item)
        if start + per_turn < len(items):
            loop.call_soon(turn, start + per_turn)
        else:
            then()

    turn(0)
