"""Exactly once through faults: 10,000 business messages from kanin.client's Sender to its
Receiver, through a proxy that delays, stalls and cuts connections at random on both
halves, and a broker killed with SIGKILL and restarted mid-run. Every message must be
processed once: none lost, none twice.

The path: a durable deduplicating exchange (its ids survive the kill) to a durable
queue, persistent messages; the receiver records biz-ids in SQLite with its rows."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
from pathlib import Path
from typing import Any

import aio_pika
import pytest

from helpers import start_kanin
from kanin.client import Delivery, Receiver, RetryPolicy, Sender, SqliteProcessedIds
from kanin.testing.chaos_proxy import ChaosProxy, Faults

pytestmark = [pytest.mark.kanin_only, pytest.mark.slow]

MESSAGES = int(os.environ.get("KANIN_FAULT_MESSAGES", 10_000))
IN_FLIGHT = 200  # sends at once
KILL_AFTER = MESSAGES * 3 // 10  # confirmed sends before the broker is killed
SEED = 20261126
FAULTS = Faults(cut=0.002, stall=0.001, delay=0.05, max_delay_s=0.02, stall_s=0.5)
RETRY = RetryPolicy(confirm_timeout_s=3.0, max_attempts=1000, backoff_s=0.05, backoff_max_s=1.0)


async def declare(port: int) -> None:
    connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{port}/%2F")
    async with connection:
        channel = await connection.channel()
        exchange = await channel.declare_exchange(
            "orders", "x-message-deduplication", durable=True, arguments={"x-cache-size": 100_000}
        )
        queue = await channel.declare_queue("cards", durable=True)
        await queue.bind(exchange)


class Broker:
    """The kanin process behind the proxy, killed and started again on the same data."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.process: subprocess.Popen[str] | None = None

    async def start(self) -> int:
        self.process, port = await asyncio.to_thread(start_kanin, self.data_dir)
        return port

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)  # only the process this test started
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


async def test_ten_thousand_messages_each_processed_once_through_faults_and_kill_9(
    tmp_path: Path,
) -> None:
    broker = Broker(tmp_path / "broker")
    port = await broker.start()
    await declare(port)
    proxy = ChaosProxy(("127.0.0.1", port), random.Random(SEED))
    url = f"amqp://guest:guest@127.0.0.1:{await proxy.start()}/%2F"
    proxy.faults = FAULTS
    processed = SqliteProcessedIds(tmp_path / "processed.sqlite3", synchronous="NORMAL")
    processed.connection.execute("CREATE TABLE cards (biz_id TEXT, body BLOB)")

    async def issue_card(delivery: Delivery) -> None:
        delivery.transaction.execute(
            "INSERT INTO cards VALUES (?, ?)", (delivery.biz_id, delivery.body)
        )

    confirmed = 0
    killed = asyncio.Event()
    slots = asyncio.Semaphore(IN_FLIGHT)

    async def send_one(sender: Sender, number: int) -> None:
        nonlocal confirmed
        async with slots:
            await sender.send(b"card for order %d" % number, biz_id=f"order-{number}")
        confirmed += 1
        if confirmed == KILL_AFTER:
            killed.set()

    async def kill_and_restart() -> None:
        await killed.wait()
        broker.kill()
        await asyncio.sleep(0.5)  # down for a while: clients retry against a refusing proxy
        proxy.target = ("127.0.0.1", await broker.start())

    try:
        async with (
            Receiver(
                url, "cards", issue_card, processed=processed, reconnect_interval_s=0.2
            ) as receiver,
            Sender(url, "orders", retry=RETRY, reconnect_interval_s=0.2) as sender,
        ):
            restart = asyncio.ensure_future(kill_and_restart())
            await asyncio.wait_for(
                asyncio.gather(*(send_one(sender, n) for n in range(MESSAGES))), 300
            )
            await asyncio.wait_for(restart, 60)
            await wait_for_rows(processed, MESSAGES, timeout=120)
            await asyncio.sleep(1.0)  # duplicates, if any were coming, come now
            rows: list[Any] = list(processed.connection.execute("SELECT biz_id, body FROM cards"))
        assert proxy.cuts > 0 and sender.retransmits > 0  # the faults happened
        assert sender.connections > 1 and receiver.connections > 1  # both came back
    finally:
        await proxy.close()
        broker.stop()
    assert len(rows) == MESSAGES  # none twice
    expected = {(f"order-{n}", b"card for order %d" % n) for n in range(MESSAGES)}
    assert set(rows) == expected  # none lost, each as sent


async def wait_for_rows(processed: SqliteProcessedIds, count: int, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    query = "SELECT COUNT(DISTINCT biz_id) FROM cards"
    while (done := processed.connection.execute(query).fetchone()[0]) < count:
        assert loop.time() < deadline, f"{done} of {count} messages processed in time"
        await asyncio.sleep(0.1)
