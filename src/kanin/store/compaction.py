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
import itertools
import logging
from collections.abc import Callable, Iterator

from kanin.store import records

log = logging.getLogger(__name__)

SCAN_SLICE = 2000  # records summarised per loop turn


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
        steps = 0
        try:
            for record in itertools.islice(self._scan, SCAN_SLICE):
                steps += 1
                if record is not None:
                    self._found.append(record)
        except Exception as exc:  # a record that summarised but does not decode
            self._done([], exc)
            return
        if steps < SCAN_SLICE:
            self._done(self._found, None)
        else:
            self._loop.call_soon(self._step)
