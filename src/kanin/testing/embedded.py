"""Run a real kanin broker on a background thread, for tests and examples.

Blocking clients such as pika need the broker on another thread than their own;
the broker gets its own event loop there and listens on 127.0.0.1, port 0.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from kanin.config import BrokerConfig
from kanin.server.app import BrokerServer

T = TypeVar("T")


@dataclass
class EmbeddedBroker:
    host: str
    port: int
    server: BrokerServer
    loop: asyncio.AbstractEventLoop
    mgmt_port: int | None = None  # the management API's, when it was asked for
    prometheus_port: int | None = None  # the Prometheus metrics', likewise
    tls_port: int | None = None  # amqps's, when the config gives tls_cert and tls_key

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    @property
    def amqps_url(self) -> str:
        """amqps://guest:guest@host:tls_port/%2F (give the config tls_cert and tls_key)."""
        if self.tls_port is None:
            raise RuntimeError("this broker has no TLS listener: give it tls_cert and tls_key")
        return f"amqps://guest:guest@{self.host}:{self.tls_port}/%2F"

    @property
    def mgmt_url(self) -> str:
        """http(s)://host:port of the management API (ask for it with mgmt_port=0)."""
        if self.mgmt_port is None:
            raise RuntimeError("this broker runs no management API: start it with mgmt_port=0")
        scheme = "https" if self.server.config.mgmt_tls else "http"
        return f"{scheme}://{self.host}:{self.mgmt_port}"

    @property
    def prometheus_url(self) -> str:
        """http(s)://host:port of the Prometheus metrics (ask with prometheus_port=0)."""
        if self.prometheus_port is None:
            raise RuntimeError("this broker serves no metrics: start it with prometheus_port=0")
        scheme = "https" if self.server.config.prometheus_tls else "http"
        return f"{scheme}://{self.host}:{self.prometheus_port}"

    def call(self, fn: Callable[[], T]) -> T:
        """Run fn on the broker's loop and return its result (for introspection)."""
        return asyncio.run_coroutine_threadsafe(_call(fn), self.loop).result(timeout=10)


async def _call(fn: Callable[[], T]) -> T:
    return fn()


@contextmanager
def running_broker(
    config: BrokerConfig | None = None, data_dir: Path | None = None
) -> Iterator[EmbeddedBroker]:
    config = config or BrokerConfig()
    # The process's resident memory is the test run's, not the broker's: the memory alarm
    # goes by the counted bytes alone (tests set a small watermark to drive it). The
    # management API and the Prometheus metrics run only when asked for with mgmt_port=0
    # or prometheus_port=0 (a free port, never a fixed one: tests run side by side); amqps
    # on a free port too, when the config gives a certificate and key.
    mgmt_port = 0 if config.mgmt_port == 0 else None
    prometheus_port = 0 if config.prometheus_port == 0 else None
    config = replace(
        config,
        port=0,
        bind="127.0.0.1",
        memory_watch_rss=False,
        mgmt_port=mgmt_port,
        prometheus_port=prometheus_port,
        tls_port=0,
    )
    temporary = None
    if data_dir is None:
        # Each embedded broker gets a fresh data directory unless told to reuse one.
        temporary = tempfile.TemporaryDirectory(prefix="kanin-test-")
        data_dir = Path(temporary.name)
    config = replace(config, data_dir=data_dir)
    loop = asyncio.new_event_loop()
    server = BrokerServer(config)
    started = threading.Event()
    thread = threading.Thread(target=_run_loop, args=(loop, started), daemon=True)
    thread.start()
    started.wait()
    try:
        addresses = asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=10)
        host, port = addresses[0]
        mgmt = server.mgmt_addresses[0][1] if server.mgmt_addresses else None
        metrics = server.prometheus_addresses[0][1] if server.prometheus_addresses else None
        tls = server.tls_addresses[0][1] if server.tls_addresses else None
        yield EmbeddedBroker(host, port, server, loop, mgmt, metrics, tls)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        if temporary is not None:
            temporary.cleanup()


def _run_loop(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(started.set)
    loop.run_forever()
