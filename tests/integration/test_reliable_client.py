"""kanin.client over real sockets: the sender retransmits until confirmed (and gives up
when told to), the receiver processes each biz-id once, recording it in the same SQLite
transaction as the handler's own row."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aio_pika
import pytest

from kanin.client import (
    BIZ_ID_HEADER,
    INNER_ID_HEADER,
    Delivery,
    Receiver,
    RetryPolicy,
    Sender,
    SendFailed,
    SqliteProcessedIds,
)
from kanin.testing.chaos_proxy import ChaosProxy

pytestmark = pytest.mark.kanin_only

QUICK = RetryPolicy(confirm_timeout_s=0.3, max_attempts=3, backoff_s=0.05)


@pytest.fixture
async def amqp(broker: Any) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
    connection = await aio_pika.connect(broker.url)
    async with connection:
        yield await connection.channel()


class Orders:
    """A handler that writes one row per order, in the receiver's transaction."""

    def __init__(self, database: SqliteProcessedIds, fail_first: int = 0) -> None:
        database.connection.execute("CREATE TABLE IF NOT EXISTS cards (biz_id TEXT, body BLOB)")
        self.database = database
        self.fail_first = fail_first
        self.calls = 0
        self.handled = asyncio.Event()

    async def __call__(self, delivery: Delivery) -> None:
        self.calls += 1
        delivery.transaction.execute(
            "INSERT INTO cards VALUES (?, ?)", (delivery.biz_id, delivery.body)
        )
        if self.calls <= self.fail_first:
            raise RuntimeError("the card printer jammed")
        self.handled.set()

    def rows(self) -> list[tuple[str, bytes]]:
        query = "SELECT biz_id, body FROM cards ORDER BY rowid"
        return list(self.database.connection.execute(query))


async def eventually(check: Any, timeout: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_every_message_is_handled_once_with_its_row(
    broker: Any, amqp: Any, tmp_path: Path
) -> None:
    await amqp.declare_queue("cards", durable=True)
    database = SqliteProcessedIds(tmp_path / "processed.sqlite3", synchronous="NORMAL")
    orders = Orders(database)
    async with Sender(broker.url, routing_key="cards") as sender:
        await asyncio.gather(*(sender.send(b"%d" % i, biz_id=f"order-{i}") for i in range(50)))
    async with Receiver(broker.url, "cards", orders, processed=database):
        await eventually(lambda: len(orders.rows()) == 50)
    assert sorted(orders.rows()) == sorted((f"order-{i}", b"%d" % i) for i in range(50))
    assert orders.calls == 50


async def test_a_biz_id_sent_twice_is_handled_once(broker: Any, amqp: Any, tmp_path: Path) -> None:
    await amqp.declare_queue("cards", durable=True)
    database = SqliteProcessedIds(tmp_path / "processed.sqlite3")
    orders = Orders(database)
    async with Sender(broker.url, routing_key="cards") as sender:
        await sender.send(b"first", biz_id="order-1")
        await sender.send(b"again", biz_id="order-1")  # the business sent it twice
    async with Receiver(broker.url, "cards", orders, processed=database) as receiver:
        await eventually(lambda: receiver.duplicates == 1)
    assert orders.rows() == [("order-1", b"first")]
    assert (await amqp.declare_queue("cards", durable=True)).declaration_result.message_count == 0


async def test_a_failing_handler_leaves_no_row_and_the_message_comes_again(
    broker: Any, amqp: Any, tmp_path: Path
) -> None:
    await amqp.declare_queue("cards", durable=True)
    database = SqliteProcessedIds(tmp_path / "processed.sqlite3")
    orders = Orders(database, fail_first=2)
    async with Sender(broker.url, routing_key="cards") as sender:
        await sender.send(b"m", biz_id="order-1")
    async with Receiver(broker.url, "cards", orders, processed=database):
        await asyncio.wait_for(orders.handled.wait(), 10)
    assert orders.calls == 3 and orders.rows() == [("order-1", b"m")]  # two rolled back
    assert await database.seen("order-1")


async def test_with_an_end_to_end_queue_send_returns_once_the_receiver_has_handled_it(
    broker: Any, amqp: Any, tmp_path: Path
) -> None:
    await amqp.declare_queue("cards", arguments={"x-confirm-on-ack": True})
    database = SqliteProcessedIds(tmp_path / "processed.sqlite3")
    orders = Orders(database)
    async with (
        Receiver(broker.url, "cards", orders, processed=database),
        Sender(broker.url, routing_key="cards") as sender,
    ):
        await sender.send(b"m", biz_id="order-1")
        assert orders.rows() == [("order-1", b"m")]  # handled and committed before the confirm


async def test_unconfirmed_it_retransmits_with_one_inner_id_then_gives_up(
    broker: Any, amqp: Any
) -> None:
    """No consumer on an end-to-end queue: no confirm ever comes. Every attempt carries the
    same inner id, which the queue's deduplication holds: one copy queued."""
    arguments = {"x-confirm-on-ack": True, "x-message-deduplication": True}
    queue = await amqp.declare_queue("cards", arguments=arguments)
    async with Sender(broker.url, routing_key="cards", retry=QUICK) as sender:
        with pytest.raises(SendFailed) as failed:
            await sender.send(b"m", biz_id="order-1")
        assert failed.value.attempts == 3 and sender.retransmits == 2
    assert isinstance(failed.value.last_error, asyncio.TimeoutError)
    message = await queue.get(no_ack=True)
    assert message.headers[BIZ_ID_HEADER] == "order-1"
    assert message.headers[INNER_ID_HEADER] == message.message_id
    assert await queue.get(fail=False) is None


async def test_nacked_or_unroutable_it_retries_then_fails(broker: Any, amqp: Any) -> None:
    limits = {"x-max-length": 0, "x-overflow": "reject-publish"}
    await amqp.declare_queue("full", arguments=limits)
    async with Sender(broker.url, retry=QUICK) as sender:
        with pytest.raises(SendFailed, match="order-1"):
            await sender.send(b"m", biz_id="order-1", routing_key="full")  # nacked
        with pytest.raises(SendFailed, match="order-2"):
            await sender.send(b"m", biz_id="order-2", routing_key="nowhere")  # returned
        assert sender.retransmits == 4


async def test_the_sender_comes_back_after_its_connection_is_cut(broker: Any, amqp: Any) -> None:
    queue = await amqp.declare_queue("cards", durable=True)
    proxy = ChaosProxy((broker.host, broker.port))
    port = await proxy.start()
    url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    try:
        async with Sender(url, routing_key="cards", reconnect_interval_s=0.1) as sender:
            await sender.send(b"before", biz_id="order-1")
            proxy.cut_all()
            await sender.send(b"after", biz_id="order-2")  # retried until reconnected
        assert proxy.cuts >= 1
    finally:
        await proxy.close()
    bodies = [(await queue.get(no_ack=True)).body for _ in range(2)]
    assert bodies == [b"before", b"after"]


def test_a_transaction_that_raises_records_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        database = SqliteProcessedIds(tmp_path / "processed.sqlite3")
        database.connection.execute("CREATE TABLE work (n INTEGER)")
        with pytest.raises(RuntimeError):
            async with database.recording("a") as transaction:
                transaction.execute("INSERT INTO work VALUES (1)")
                raise RuntimeError("boom")
        assert not await database.seen("a")
        async with database.recording("b") as transaction:
            transaction.execute("INSERT INTO work VALUES (2)")
        assert await database.seen("b")
        database.close()

    asyncio.run(scenario())
    reopened = sqlite3.connect(tmp_path / "processed.sqlite3")
    assert list(reopened.execute("SELECT n FROM work")) == [(2,)]


def test_the_backoff_doubles_up_to_its_cap() -> None:
    policy = RetryPolicy(backoff_s=0.1, backoff_max_s=0.5)
    assert [policy.backoff(n) for n in range(1, 6)] == [0.1, 0.2, 0.4, 0.5, 0.5]
