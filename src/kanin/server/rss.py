"""The process's resident memory, for the memory alarm (core/memory.py).

`RssReader` reads /proc/self/statm through a descriptor kept open: one pread of a few
dozen bytes, microseconds, so it can run often. `RssWatch` samples it on a short timer;
connections also have it sampled after every few MB read (MemoryMonitor.note_read), so
a fast flood cannot outrun the timer. Where /proc is missing the RSS is not watched
and the alarm goes by the counted bytes alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os

from kanin.core.memory import MemoryMonitor

log = logging.getLogger(__name__)

# RabbitMQ checks every 2.5 s by default; a Python broker fed at a few hundred MB/s needs
# a tighter look, and reading statm ten times a second costs nothing measurable.
RSS_SAMPLE_INTERVAL_S = 0.1
STATM = "/proc/self/statm"


# The cyclic collector's thresholds while a broker runs (CPython's are 700, 10, 10).
# Nearly everything the broker frees goes by reference counting, but what it keeps for a
# while (queued messages, unacked deliveries, a stream's recent records) counts as net
# allocations, so with 700 the collector ran constantly, and full collections (which
# walk every object the broker holds) every few seconds: publishing 400,000 messages to
# a stream and reading them twice cost 3,629 collections and 4.8 s, 25 of them full, up
# to 348 ms each (on a loaded machine). With (5,000, 10, 100): about 200 collections and
# 0.9 s, one full. The first stays small so that a young collection stays short (a pause
# delays every message due or waiting then); a middle collection comes every 50,000 net
# allocations, as with (5,000, 10): in a 1-million-message fill its longest pause was 12
# ms either way (45 ms with (20,000, 10)), a young one's 1.8 ms against 0.7; full ones
# after about 5 million. Not 5,000: end-to-end confirms at 8 queues read bursts of
# 5,000-10,000 tracked objects (publishes read before the acks that free them), and
# young collections ran 270 times in 5 s (0.36 s of the broker's CPU) where with 10,000
# they run about 6 times.
GC_THRESHOLDS = (10_000, 5, 100)


def collect_cycles_less_often() -> tuple[int, int, int]:
    """Set GC_THRESHOLDS; returns the thresholds they replace (for the broker's stop)."""
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    return before


def give_back_free_memory() -> None:
    """After start-up: return the heap memory freed so far to the system, and take what
    start-up built out of the cyclic GC's sight. Start-up builds, and then drops, a
    per-message index of everything it recovered (hundreds of bytes a message): the C
    allocator keeps that memory for the process unless told, and resident memory would stay
    at its start-up peak (glibc only; elsewhere that step does nothing). What stays (the
    broker's indexes of millions of messages) lives as long as the broker: each full
    collection would walk it again, a second or more with ten million messages on disk,
    with every connection waiting; frozen, it is never walked (gc.freeze)."""
    gc.collect()
    gc.freeze()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class RssReader:
    def __init__(self, path: str = STATM) -> None:
        self._page_size = os.sysconf("SC_PAGE_SIZE")
        self._fd: int | None = None
        try:
            self._fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            log.warning("cannot read %s (%s): the memory alarm ignores resident memory", path, exc)

    def read(self) -> int | None:
        """Resident bytes (statm's second field), or None when it cannot be read."""
        if self._fd is None:
            return None
        try:
            fields = os.pread(self._fd, 128, 0).split()
            return int(fields[1]) * self._page_size
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


class RssWatch:
    """Samples the RSS into the memory monitor every RSS_SAMPLE_INTERVAL_S."""

    def __init__(self, loop: asyncio.AbstractEventLoop, monitor: MemoryMonitor) -> None:
        self._loop = loop
        self._monitor = monitor
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._tick()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        self._monitor.sample_rss()
        self._timer = self._loop.call_later(RSS_SAMPLE_INTERVAL_S, self._tick)
