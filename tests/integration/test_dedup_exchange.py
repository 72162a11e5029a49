"""The deduplicating exchange (x-message-deduplication), as the rabbitmq-message-deduplication
plugin has it: x-cache-size, x-cache-ttl, the per-message x-deduplication-header and
x-cache-ttl; routed as a fanout. The plugin's refusals, read in its source (its exchange's
validate/1), close the channel with 406 PRECONDITION_FAILED:
"Missing or invalid argument, 'x-cache-size' must be an integer greater than 0",
"Invalid argument, 'x-cache-ttl' must be an integer greater than 0",
"Invalid argument, 'x-cache-persistence' must be either 'disk' or 'memory'".
Where kanin differs (a duplicate is confirmed and never returned; a durable exchange's ids
survive kill -9; the oldest id is evicted first) is kanin's own, so these run on kanin only.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import aio_pika
import aiormq
import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ChannelClosedByBroker

from helpers import settle, start_kanin

pytestmark = pytest.mark.kanin_only

DEDUP = "x-message-deduplication"


def dedup_exchange(channel: BlockingChannel, name: str = "dedup", **arguments: Any) -> str:
    channel.exchange_declare(
        name, DEDUP, durable=True, arguments={"x-cache-size": 100, **arguments}
    )
    channel.queue_declare(f"{name}.q", durable=True)
    channel.queue_bind(f"{name}.q", name)
    return f"{name}.q"


def send(
    channel: BlockingChannel,
    msg_id: Any,
    exchange: str = "dedup",
    routing_key: str = "any key",
    **headers: Any,
) -> None:
    properties = pika.BasicProperties(
        delivery_mode=2, headers={"x-deduplication-header": msg_id, **headers}
    )
    channel.basic_publish(exchange, routing_key, b"%r" % (msg_id,), properties)


def depth(channel: BlockingChannel, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({}, "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0"),
        (
            {"x-cache-size": 0},
            "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0",
        ),
        (
            {"x-cache-size": "ten"},
            "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0",
        ),
        (
            {"x-cache-size": 5, "x-cache-ttl": -1},
            "Invalid argument, 'x-cache-ttl' must be an integer greater than 0",
        ),
        (
            {"x-cache-size": 5, "x-cache-persistence": "tape"},
            "Invalid argument, 'x-cache-persistence' must be either 'disk' or 'memory'",
        ),
    ],
)
def test_invalid_arguments_are_refused_in_the_plugins_words(
    conn: BlockingConnection, arguments: dict[str, Any], text: str
) -> None:
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().exchange_declare("bad", DEDUP, arguments=arguments)
    assert (info.value.reply_code, info.value.reply_text) == (406, f"PRECONDITION_FAILED - {text}")
    assert conn.is_open


def test_string_numbers_are_taken_as_the_plugin_takes_them(conn: BlockingConnection) -> None:
    channel = conn.channel()
    channel.exchange_declare("s", DEDUP, arguments={"x-cache-size": "10", "x-cache-ttl": "500"})


def test_a_duplicate_is_confirmed_and_not_routed_again(conn: BlockingConnection) -> None:
    channel = conn.channel()
    channel.confirm_delivery()
    queue = dedup_exchange(channel)
    returned: list[Any] = []
    channel.add_on_return_callback(lambda *args: returned.append(args))
    send(channel, "order-1")
    send(channel, "order-1")  # a retransmit: acked (pika raises on a nack)
    channel.basic_publish(
        "dedup",
        "",
        b"again",
        pika.BasicProperties(headers={"x-deduplication-header": "order-1"}),
        mandatory=True,
    )
    send(channel, 1)  # an int is not the string "1"
    send(channel, "1")
    channel.basic_publish("dedup", "", b"no id")
    channel.basic_publish("dedup", "", b"no id")
    settle(conn, 0.1)
    assert returned == []
    assert depth(channel, queue) == 5


def test_ids_expire_after_the_cache_ttl_or_their_own(conn: BlockingConnection) -> None:
    channel = conn.channel()
    channel.confirm_delivery()
    queue = dedup_exchange(channel, **{"x-cache-ttl": 300})
    send(channel, "a")
    send(channel, "b", **{"x-cache-ttl": 60_000})
    time.sleep(0.4)
    send(channel, "a")  # expired: routed again
    send(channel, "b")  # its own TTL still runs
    assert depth(channel, queue) == 3


def test_a_full_cache_forgets_its_oldest_id(conn: BlockingConnection) -> None:
    channel = conn.channel()
    channel.confirm_delivery()
    queue = dedup_exchange(channel, "small", **{"x-cache-size": 2})
    for msg_id in ("a", "b", "c", "a", "c"):
        send(channel, msg_id, exchange="small")
    assert depth(channel, queue) == 4  # a, b, c, then a again; c was still cached


def test_deleting_the_exchange_forgets_its_ids(conn: BlockingConnection) -> None:
    channel = conn.channel()
    channel.confirm_delivery()
    queue = dedup_exchange(channel)
    send(channel, "x")
    channel.exchange_delete("dedup")
    dedup_exchange(channel)
    send(channel, "x")
    assert depth(channel, queue) == 2


async def test_aio_pika_sees_its_retransmit_confirmed_and_absorbed(broker: Any) -> None:
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.declare_exchange(
            "aio-dedup", DEDUP, arguments={"x-cache-size": 10}
        )
        queue = await channel.declare_queue("aio-dedup.q")
        await queue.bind(exchange)
        message = aio_pika.Message(b"m", headers={"x-deduplication-header": "id-7"})
        for _ in range(3):
            confirmation = await exchange.publish(message, routing_key="")
            assert isinstance(confirmation, aiormq.spec.Basic.Ack)
        declared = await channel.declare_queue("aio-dedup.q", passive=True)
        assert declared.declaration_result.message_count == 1


def test_the_ids_of_a_durable_exchange_survive_kill_9(tmp_path: Path) -> None:
    process, port = start_kanin(tmp_path)
    try:
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        channel = connection.channel()
        channel.confirm_delivery()
        queue = dedup_exchange(channel, **{"x-cache-ttl": 60_000})
        for msg_id in ("m1", "m2"):
            send(channel, msg_id)  # confirmed: the id is on disk with the message
        send(channel, "short", **{"x-cache-ttl": 200})
        os.kill(process.pid, signal.SIGKILL)  # only the process this test started
        process.wait()
        time.sleep(0.3)  # "short" expires while the broker is down
        process, port = start_kanin(tmp_path)
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        channel = connection.channel()
        channel.confirm_delivery()
        for msg_id in ("m1", "m2", "short", "m3"):
            send(channel, msg_id)  # the publisher retransmits after the crash
        bodies = []
        while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
            bodies.append(got[2])
        assert bodies == [b"'m1'", b"'m2'", b"'short'", b"'short'", b"'m3'"]
        connection.close()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# -- the queue argument ---------------------------------------------------------------------


def test_a_deduplicating_queue_holds_one_message_per_id(conn: BlockingConnection) -> None:
    """Not enqueued while a message with that id is in the queue, ready or unacked; once it
    is acked, the id may come again. Duplicates are confirmed (the plugin nacks them)."""
    channel = conn.channel()
    channel.confirm_delivery()
    channel.queue_declare("dq", durable=True, arguments={"x-message-deduplication": True})
    for msg_id in ("a", "a", "b", 1, "1"):
        send(channel, msg_id, exchange="", routing_key="dq")
    assert depth(channel, "dq") == 4
    method, _, body = channel.basic_get("dq")
    assert body == b"'a'"
    send(channel, "a", exchange="", routing_key="dq")  # still unacked: a duplicate
    assert depth(channel, "dq") == 3
    channel.basic_ack(method.delivery_tag)
    send(channel, "a", exchange="", routing_key="dq")  # gone: welcome again
    assert depth(channel, "dq") == 4
    channel.queue_purge("dq")
    send(channel, "b", exchange="", routing_key="dq")
    assert depth(channel, "dq") == 1


def test_a_deduplicating_queue_rebuilds_its_ids_after_kill_9(tmp_path: Path) -> None:
    process, port = start_kanin(tmp_path)
    try:
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("dq", durable=True, arguments={"x-message-deduplication": True})
        send(channel, "kept", exchange="", routing_key="dq")
        os.kill(process.pid, signal.SIGKILL)  # only the process this test started
        process.wait()
        process, port = start_kanin(tmp_path)
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        channel = connection.channel()
        channel.confirm_delivery()
        send(channel, "kept", exchange="", routing_key="dq")
        assert depth(channel, "dq") == 1
        connection.close()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_an_invalid_queue_argument_is_refused(conn: BlockingConnection) -> None:
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().queue_declare("bad", arguments={"x-message-deduplication": "yes"})
    assert info.value.reply_text == (
        "PRECONDITION_FAILED - invalid arg 'x-message-deduplication' for queue 'bad' in "
        "vhost '/': {unacceptable_type,longstr}"
    )
