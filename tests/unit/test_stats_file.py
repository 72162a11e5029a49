"""The --stats-file (kanin/server/app.py): written once a second with the store's counters,
on a worker thread, never on the event loop."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from kanin.config import BrokerConfig
from kanin.server import app
from kanin.server.app import BrokerServer


async def test_the_stats_file_is_written_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    written: asyncio.Future[int] = loop.create_future()
    real_write = app.write_stats_file

    def write(path: Path, text: str) -> None:
        real_write(path, text)
        thread = threading.get_ident()
        loop.call_soon_threadsafe(lambda: written.done() or written.set_result(thread))

    monkeypatch.setattr(app, "write_stats_file", write)
    stats = tmp_path / "stats.json"
    config = BrokerConfig(
        port=0,
        bind="127.0.0.1",
        data_dir=tmp_path / "data",
        stats_file=stats,
        memory_watch_rss=False,
        mgmt_port=None,  # not the fixed 15672: another broker may hold it
    )
    server = BrokerServer(config)
    await server.start()
    try:
        writer = await asyncio.wait_for(written, 10)
    finally:
        await server.stop()
    assert writer != threading.get_ident(), "the stats file was written on the loop's thread"
    counters = json.loads(stats.read_text())
    assert {"commit_rounds", "records_committed", "connections"} <= counters.keys()
