"""One asyncio loop per process, on a daemon thread, for Spark's synchronous workers.

Spark calls a data source's reader and writer methods from plain blocking Python code;
the AMQP client (aio-pika) is asyncio. Each process gets one loop running on a thread
of its own, and blocking code hands it coroutines with `run()`. Because the loop keeps
running while the caller is blocked elsewhere (Spark's streaming source process waits
on the JVM for the length of a micro-batch), connections held there keep sending and
answering heartbeats, and the broker never takes them for dead.

PySpark forks its Python workers from a daemon process, and a fork keeps no threads:
a process that finds a loop made by its parent makes its own.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        started = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(started,), name="kanin-spark-loop", daemon=True
        )
        self._thread.start()
        started.wait()

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(started.set)
        self.loop.run_forever()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run the coroutine on the loop and wait for its result (or its exception). A
        timeout cancels it on the loop too, not only the wait."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise


_lock = threading.Lock()
_shared: LoopThread | None = None


def shared_loop() -> LoopThread:
    """This process's loop thread, started on first use."""
    global _shared
    with _lock:
        if _shared is None or _shared.pid != os.getpid():
            _shared = LoopThread()
        return _shared


def run(coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    return shared_loop().run(coroutine, timeout)
