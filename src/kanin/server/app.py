"""The broker process: listeners on the AMQP port and an orderly shutdown."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import time
from collections.abc import Collection
from pathlib import Path

from kanin import __version__
from kanin.config import BrokerConfig
from kanin.core.broker import Broker
from kanin.core.persistence import Persistence
from kanin.core.session.session import Session
from kanin.errors import StartupError
from kanin.mgmt.app import build_app
from kanin.mgmt.context import MgmtContext
from kanin.mgmt.server import MgmtServer
from kanin.native import build_name
from kanin.prometheus.app import build_metrics_app
from kanin.server.bugs import loop_exception_handler
from kanin.server.datadir_lock import DataDirLock
from kanin.server.disk import DiskMonitor
from kanin.server.listeners import HttpListener, Listener, addresses, listen_amqp, start_http
from kanin.server.rss import (
    RssReader,
    RssWatch,
    collect_cycles_less_often,
    give_back_free_memory,
)
from kanin.server.scheduler import LoopScheduler
from kanin.server.tls import ServerContexts
from kanin.store.file_store import FileStore
from kanin.store.stream_logs import FileStreamLogs

log = logging.getLogger(__name__)

MANAGEMENT = HttpListener("management API", "http", build_app)
PROMETHEUS = HttpListener("Prometheus metrics", "http/prometheus", build_metrics_app)


class BrokerServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker: Broker | None = None
        self.store: FileStore | None = None
        self.streams: FileStreamLogs | None = None
        self.persistence: Persistence | None = None
        self._stats_task: asyncio.Task[None] | None = None
        self.disk: DiskMonitor | None = None
        self.rss: RssReader | None = None
        self._rss_watch: RssWatch | None = None
        self._servers: list[Listener] = []
        self._lock: DataDirLock | None = None
        self._gc_thresholds: tuple[int, int, int] | None = None  # what start replaced
        self.mgmt: MgmtServer | None = None
        self.mgmt_addresses: list[tuple[str, int]] = []
        self.prometheus: MgmtServer | None = None
        self.prometheus_addresses: list[tuple[str, int]] = []
        self.addresses: list[tuple[str, int]] = []  # plain AMQP's
        self.tls_addresses: list[tuple[str, int]] = []  # amqps's, when it listens
        self._tls = ServerContexts()

    async def start(self) -> list[tuple[str, int]]:
        """Listen; return the (host, port) of every plain AMQP listening socket."""
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(loop_exception_handler)
        self._tls = ServerContexts.from_config(self.config)  # a bad file stops us here
        data_dir = self.config.data_dir
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            self._lock = DataDirLock(data_dir)
            self._lock.acquire()  # before anything in the directory is read or written
        except OSError as exc:
            raise StartupError(f"cannot use data directory {data_dir}: {exc.strerror}") from None
        started = loop.time()
        self.store = FileStore(
            data_dir / "messages",
            loop,
            segment_bytes=self.config.segment_bytes,
            force_recovery=self.config.force_recovery,
        )
        if self.config.memory_watch_rss:
            self.rss = RssReader()
        read_rss = self.rss.read if self.rss is not None else None
        self.streams = FileStreamLogs(data_dir / "streams", loop)
        self.broker = broker = Broker(
            self.config, LoopScheduler(loop), self.store, read_rss, streams=self.streams
        )
        persistence = Persistence(broker, data_dir, self.store)
        persistence.restore()
        give_back_free_memory()
        self._gc_thresholds = collect_cycles_less_often()
        # Only now: a broker that failed to restore must not save over what it could not read.
        self.persistence = persistence
        self.store.committer.prelude = persistence.saver.prelude
        broker.definitions = persistence.saver
        persistence.saver.changed()  # the first start writes the defaults
        await _saved(persistence)  # a failure is logged, and retried like any other
        log.info("recovered %s in %.2fs", data_dir, loop.time() - started)
        log.info("kanin %s (%s)", __version__, build_name())
        self.disk = DiskMonitor(loop, data_dir, self.config.disk_free_limit_bytes, broker.alarms)
        self.disk.start()
        self.store.committer.on_round_end = self.disk.check
        if self.rss is not None:
            self._rss_watch = RssWatch(loop, broker.memory)
            self._rss_watch.start()
        log.info(
            "memory high watermark: %d MiB%s",
            self.config.memory_high_watermark_bytes // 2**20,
            " (counted bytes and resident memory)" if self.rss is not None else "",
        )
        if self.config.stats_file is not None:
            self._stats_task = loop.create_task(self._write_stats(self.config.stats_file))
        listeners = await self._listen(broker)
        await self._start_http(broker, listeners)
        return self.addresses

    async def _listen(self, broker: Broker) -> list[tuple[str, str, int]]:
        """AMQP, and amqps beside it with a certificate: (protocol, host, port) of each."""
        plain = await listen_amqp(broker, self.config)
        self._servers.append(plain)
        self.addresses = addresses(plain)
        listeners = [("amqp", host, port) for host, port in self.addresses]
        if self._tls.amqps is not None:
            amqps = await listen_amqp(broker, self.config, self._tls.amqps)
            self._servers.append(amqps)
            self.tls_addresses = addresses(amqps)
            listeners += [("amqp/ssl", host, port) for host, port in self.tls_addresses]
        return listeners

    async def _start_http(self, broker: Broker, listeners: list[tuple[str, str, int]]) -> None:
        disk, rss, config = self.disk, self.rss, self.config
        context = MgmtContext(
            broker,
            listeners,
            read_rss=rss.read if rss is not None else None,
            disk_free=(lambda: disk.free_bytes) if disk is not None else None,
        )
        if config.prometheus_port is not None:
            tls = self._tls.https if config.prometheus_tls else None
            self.prometheus, self.prometheus_addresses = await start_http(
                context, PROMETHEUS, config.bind, config.prometheus_port, tls
            )
        if config.mgmt_port is not None:
            tls = self._tls.https if config.mgmt_tls else None
            self.mgmt, self.mgmt_addresses = await start_http(
                context, MANAGEMENT, config.bind, config.mgmt_port, tls
            )

    @property
    def connections(self) -> Collection[Session]:
        return self.broker.connections if self.broker is not None else ()

    def stats(self) -> dict[str, float]:
        """Counters for benchmarks: store commit rounds (fsync batches) and records."""
        committer = self.store.committer if self.store is not None else None
        return {
            "time": time.time(),
            "commit_rounds": committer.rounds if committer else 0,
            "records_committed": committer.records_committed if committer else 0,
            "connections": len(self.connections),
            "held_message_bytes": self.broker.memory.held_bytes if self.broker else 0,
            "rss_bytes": self.broker.memory.rss_bytes if self.broker else 0,
        }

    async def _write_stats(self, path: Path) -> None:
        # Once a second, atomically: a benchmark reads it without a management API. The
        # counters are read on the loop; the file is written on a worker thread, so a
        # slow disk stalls no connection.
        loop = asyncio.get_running_loop()
        while True:
            await loop.run_in_executor(None, write_stats_file, path, json.dumps(self.stats()))
            await asyncio.sleep(1.0)

    async def stop(self) -> None:
        for http in (self.mgmt, self.prometheus):  # first: no request sees a broker going away
            if http is not None:
                await http.stop()
        if self._stats_task is not None:
            self._stats_task.cancel()
        if self.disk is not None:
            self.disk.stop()
        if self._rss_watch is not None:
            self._rss_watch.stop()
        for server in self._servers:
            server.close()  # no new connections
        for connection in list(self.connections):
            connection.close_forced("broker shutdown")
        # Give peers a moment to answer close-ok, then drop whoever has not.
        for _ in range(50):
            if not self.connections:
                break
            await asyncio.sleep(0.02)
        for connection in list(self.connections):
            connection.abort()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
        if self.streams is not None:
            await self.streams.close()
        if self.store is not None:
            await self.store.close()
        if self.persistence is not None:
            self.persistence.mark_clean_shutdown()
        gc.unfreeze()  # what start-up froze (give_back_free_memory) may be collected again
        if self._gc_thresholds is not None:
            gc.set_threshold(*self._gc_thresholds)
            self._gc_thresholds = None
        if self.rss is not None:
            self.rss.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None


async def _saved(persistence: Persistence) -> None:
    """Until the definitions as they are now have been saved, or that save has failed."""
    finished: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
    if persistence.saver.when_saved(finished.set_result):
        await finished


def write_stats_file(path: Path, text: str) -> None:
    """Replace the stats file in one rename, so a reader never sees half of it. Blocking:
    run on a worker thread."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    temporary.replace(path)
