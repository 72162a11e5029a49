"""What kanin adds to RabbitMQ 3.10's delivery counting: x-delivery-limit on classic queues,
the x-delayed-retry-* backoff (classic and quorum), and counts, spent limits and backoffs
that survive kill -9. RabbitMQ 3.10 refuses x-delivery-limit on classic queues and has no
backoff, so these run against kanin only."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ChannelClosedByBroker

from helpers import process_events_until, start_kanin

pytestmark = pytest.mark.kanin_only

DEAD = "dead"
DLX = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": DEAD}


def confirming(conn: BlockingConnection) -> BlockingChannel:
    channel = conn.channel()
    channel.confirm_delivery()
    return channel


def count_of(properties: Any) -> Any:
    return (properties.headers or {}).get("x-delivery-count")


def get_within(channel: BlockingChannel, queue: str, seconds: float) -> Any:
    """basic.get until a message comes or `seconds` pass: (method, properties, body)."""
    deadline = time.monotonic() + seconds
    while True:
        got = channel.basic_get(queue)
        if got[0] is not None or time.monotonic() > deadline:
            return got
        time.sleep(0.01)


# -- classic queues count too ---------------------------------------------------------------


def test_a_classic_queue_with_a_limit_counts_and_dead_letters(conn: BlockingConnection) -> None:
    channel = confirming(conn)
    channel.queue_declare(DEAD)
    channel.queue_declare("work", arguments={"x-delivery-limit": 2, **DLX})
    channel.basic_publish("", "work", b"poison")
    seen: list[Any] = []

    def on_message(ch: BlockingChannel, method: Any, properties: Any, _body: bytes) -> None:
        seen.append(count_of(properties))
        ch.basic_nack(method.delivery_tag, requeue=True)

    channel.basic_consume("work", on_message)
    process_events_until(conn, lambda: len(seen) == 3)
    _, properties, body = get_within(channel, DEAD, 5)
    assert seen == [None, 1, 2]
    assert body == b"poison" and properties.headers["x-first-death-reason"] == "delivery_limit"


def test_a_classic_queue_without_a_limit_says_no_count(conn: BlockingConnection) -> None:
    channel = confirming(conn)
    channel.queue_declare("plain")
    channel.basic_publish("", "plain", b"m")
    method, properties, _ = channel.basic_get("plain")
    channel.basic_nack(method.delivery_tag, requeue=True)
    _, properties, _ = channel.basic_get("plain", auto_ack=True)
    assert properties.headers is None


async def test_aio_pika_sees_the_count_and_the_limit_on_a_quorum_queue(broker: Any) -> None:
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel()
        dead = await channel.declare_queue(DEAD)
        queue = await channel.declare_queue(
            "qq", durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 1, **DLX}
        )
        await channel.default_exchange.publish(aio_pika.Message(b"m"), routing_key="qq")
        counts = []
        for _ in range(2):
            message = await queue.get(timeout=5)
            counts.append(message.headers.get("x-delivery-count"))
            await message.nack(requeue=True)
        assert counts == [0, 1]
        assert await queue.get(fail=False) is None
        deadline = time.monotonic() + 5
        while (spent := await dead.get(fail=False)) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert spent is not None and spent.headers["x-first-death-reason"] == "delivery_limit"


# -- backoff --------------------------------------------------------------------------------


def test_a_returned_message_is_held_back_while_the_queue_flows(conn: BlockingConnection) -> None:
    channel = confirming(conn)
    channel.queue_declare("retry", arguments={"x-delayed-retry-min": 300})
    channel.basic_publish("", "retry", b"a")
    channel.basic_publish("", "retry", b"b")
    method, _, _ = channel.basic_get("retry")
    returned_at = time.monotonic()
    channel.basic_reject(method.delivery_tag, requeue=True)
    method, _, body = channel.basic_get("retry", auto_ack=True)
    assert body == b"b"  # the rest of the queue does not wait
    assert channel.queue_declare("retry", passive=True).method.message_count == 1
    method, properties, body = get_within(channel, "retry", 10)
    assert body == b"a" and method.redelivered and count_of(properties) == 1
    assert time.monotonic() - returned_at >= 0.3


@pytest.mark.parametrize(
    ("retry_type", "held"),
    [
        ("all", {"reject", "nack", "close"}),
        ("failed", {"reject"}),
        ("returned", {"nack", "close"}),
    ],
)
def test_the_retry_type_says_which_returns_wait(
    conn: BlockingConnection, retry_type: str, held: set[str]
) -> None:
    """With a long backoff, a held message is not there right after its return."""
    arguments = {"x-delayed-retry-type": retry_type, "x-delayed-retry-min": 60_000}
    setup = confirming(conn)
    waited = set()
    for how in ("reject", "nack", "close"):
        queue = f"retry-{how}"
        setup.queue_declare(queue, arguments=arguments)
        setup.basic_publish("", queue, b"m")
        channel = conn.channel()
        method, _, _ = channel.basic_get(queue)
        if how == "reject":
            channel.basic_reject(method.delivery_tag, requeue=True)
        elif how == "nack":
            channel.basic_nack(method.delivery_tag, requeue=True)
        channel.close()
        if setup.basic_get(queue, auto_ack=True)[0] is None:
            waited.add(how)
    assert waited == held


def test_invalid_backoff_arguments_close_the_channel(conn: BlockingConnection) -> None:
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().queue_declare("bad", arguments={"x-delayed-retry-min": -1})
    assert info.value.reply_code == 406
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - invalid arg 'x-delayed-retry-min' for queue 'bad' in vhost "
        "'/': {value_negative,-1}"
    )


# -- across kill -9 -------------------------------------------------------------------------


def kill(process: Any) -> None:
    time.sleep(0.3)  # the delivery marks are written within 20 ms of the last traffic
    os.kill(process.pid, signal.SIGKILL)  # only the process this test started
    process.wait()


def connect(port: int) -> BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1, socket_timeout=5)
    )


@pytest.mark.parametrize("queue_type", ["quorum", "classic"])
def test_counts_survive_kill_9_and_the_crash_counts_as_a_return(
    tmp_path: Path, queue_type: str
) -> None:
    process, port = start_kanin(tmp_path)
    try:
        channel = confirming(connect(port))
        arguments = {"x-queue-type": queue_type, "x-delivery-limit": 10}
        channel.queue_declare("counted", durable=True, arguments=arguments)
        channel.basic_publish("", "counted", b"m", pika.BasicProperties(delivery_mode=2))
        for _ in range(2):
            method, _, _ = channel.basic_get("counted")
            channel.basic_nack(method.delivery_tag, requeue=True)
        method, properties, _ = channel.basic_get("counted")  # out, unacked, at the crash
        assert count_of(properties) == 2
        kill(process)
        process, port = start_kanin(tmp_path)
        channel = connect(port).channel()
        method, properties, body = channel.basic_get("counted", auto_ack=True)
        assert (body, method.redelivered, count_of(properties)) == (b"m", True, 3)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_limit_spent_by_the_crash_dead_letters_at_restart(tmp_path: Path) -> None:
    process, port = start_kanin(tmp_path)
    try:
        channel = confirming(connect(port))
        channel.queue_declare(DEAD, durable=True)
        channel.queue_declare("spent", durable=True, arguments={"x-delivery-limit": 1, **DLX})
        channel.basic_publish("", "spent", b"poison", pika.BasicProperties(delivery_mode=2))
        method, _, _ = channel.basic_get("spent")
        channel.basic_nack(method.delivery_tag, requeue=True)
        channel.basic_get("spent")  # its second delivery is out at the crash: a second return
        kill(process)
        process, port = start_kanin(tmp_path)
        channel = connect(port).channel()
        assert channel.basic_get("spent")[0] is None
        _, properties, body = get_within(channel, DEAD, 5)
        assert body == b"poison" and properties.headers["x-first-death-reason"] == "delivery_limit"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_backoff_outlives_kill_9(tmp_path: Path) -> None:
    """A message out (or held back) at the crash is held back again after the restart, for
    the backoff of its count, counted from the restart."""
    process, port = start_kanin(tmp_path)
    try:
        channel = confirming(connect(port))
        arguments = {
            "x-queue-type": "quorum",
            "x-delayed-retry-type": "all",
            "x-delayed-retry-min": 3000,
        }
        channel.queue_declare("held", durable=True, arguments=arguments)
        channel.basic_publish("", "held", b"m")  # transient: a quorum queue stores it anyway
        method, _, _ = channel.basic_get("held")
        channel.basic_nack(method.delivery_tag, requeue=True)  # held back 3 s
        kill(process)
        restarting = time.monotonic()  # the hold starts during start-up, after this
        process, port = start_kanin(tmp_path)
        channel = connect(port).channel()
        assert channel.basic_get("held")[0] is None
        assert channel.queue_declare("held", passive=True).method.message_count == 1
        method, properties, body = get_within(channel, "held", 10)
        # Returned once, and not out at the crash: the count is 1, the backoff 3 s again.
        assert (body, count_of(properties)) == (b"m", 1)
        assert time.monotonic() - restarting >= 3.0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
