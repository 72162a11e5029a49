"""Compaction's read: the live ENQUEUE records of a closed segment, found on the event loop
a slice at a time.

The file is read whole on a worker thread (the read itself lets go of the interpreter),
but the records are summarised here, SCAN_SLICE per loop turn. Summarising is Python work,
one step a record; on a worker thread it would hold the interpreter lock from the loop in
turns of the switch interval, and the loop, giving the lock away at every socket call,
would wait that long again and again: with a segment of a million records, seconds of
stalls for every connection. In slices, a compaction costs the loop a millisecond or two
a turn, and nothing else.
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

T = TypeVar("T")


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
