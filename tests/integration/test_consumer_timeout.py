"""Consumer timeout: a delivery not acknowledged in time closes its channel with 406 and goes
back to its queue, as RabbitMQ's consumer_timeout (same text). kanin checks at the deadline
where RabbitMQ 3.10 checks once a minute, and takes the per-queue x-consumer-timeout that
later RabbitMQ versions have; so these run against kanin only."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aio_pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ChannelClosedByBroker

from helpers import pika_connect, process_events_until, settle

pytestmark = pytest.mark.kanin_only

TIMED_OUT = (
    "PRECONDITION_FAILED - delivery acknowledgement on channel {channel} timed out. Timeout "
    "value used: {timeout} ms. This timeout value can be configured, see consumers doc guide "
    "to learn more"
)


def closed_reason(channel: BlockingChannel) -> list[tuple[int, str]]:
    reasons: list[tuple[int, str]] = []
    channel._impl.add_on_close_callback(
        lambda _ch, reason: reasons.append((reason.reply_code, reason.reply_text))
    )
    return reasons


def test_an_unacked_delivery_closes_its_channel_and_comes_back(conn: BlockingConnection) -> None:
    setup = conn.channel()
    setup.queue_declare("slow", arguments={"x-consumer-timeout": 200})
    setup.basic_publish("", "slow", b"m")
    consumer = conn.channel()
    reasons = closed_reason(consumer)
    got: list[bytes] = []
    consumer.basic_consume("slow", lambda _ch, _m, _p, body: got.append(body))
    process_events_until(conn, lambda: bool(reasons), timeout=10)
    assert got == [b"m"]
    assert reasons == [(406, TIMED_OUT.format(channel=consumer.channel_number, timeout=200))]
    assert conn.is_open, "only the channel closes"
    method, _, body = setup.basic_get("slow", auto_ack=True)
    assert body == b"m" and method.redelivered


def test_a_basic_get_times_out_too_and_acks_in_time_do_not(conn: BlockingConnection) -> None:
    setup = conn.channel()
    setup.queue_declare("gets", arguments={"x-consumer-timeout": 200})
    for body in (b"a", b"b"):
        setup.basic_publish("", "gets", body)
    channel = conn.channel()
    reasons = closed_reason(channel)
    method, _, _ = channel.basic_get("gets")
    channel.basic_ack(method.delivery_tag)
    settle(conn, 0.5)
    assert channel.is_open, "an ack in time keeps the channel open"
    channel.basic_get("gets")
    process_events_until(conn, lambda: bool(reasons), timeout=10)
    assert reasons and reasons[0][0] == 406


def test_the_broker_default_applies_without_the_argument(broker_factory: Any) -> None:
    with broker_factory(consumer_timeout_ms=200) as broker:
        connection = pika_connect(broker.url)
        channel = connection.channel()
        channel.queue_declare("q")
        channel.basic_publish("", "q", b"m")
        reasons = closed_reason(channel)
        channel.basic_get("q")
        process_events_until(connection, lambda: bool(reasons), timeout=10)
        assert reasons == [(406, TIMED_OUT.format(channel=channel.channel_number, timeout=200))]
        connection.close()


def test_a_timed_out_delivery_is_a_return_the_backoff_holds(conn: BlockingConnection) -> None:
    setup = conn.channel()
    arguments = {
        "x-consumer-timeout": 200,
        "x-delayed-retry-type": "returned",
        "x-delayed-retry-min": 60_000,
        "x-delivery-limit": 5,
    }
    setup.queue_declare("held", arguments=arguments)
    setup.basic_publish("", "held", b"m")
    channel = conn.channel()
    reasons = closed_reason(channel)
    channel.basic_get("held")
    process_events_until(conn, lambda: bool(reasons), timeout=10)
    assert setup.basic_get("held")[0] is None  # held back for a minute
    assert setup.queue_declare("held", passive=True).method.message_count == 1


def test_an_invalid_timeout_is_refused(conn: BlockingConnection) -> None:
    with pytest.raises(ChannelClosedByBroker) as info:
        conn.channel().queue_declare("bad", arguments={"x-consumer-timeout": 0})
    assert (info.value.reply_code, info.value.reply_text) == (
        406,
        "PRECONDITION_FAILED - invalid arg 'x-consumer-timeout' for queue 'bad' in vhost '/': "
        "{value_zero,0}",
    )


async def test_aio_pika_sees_the_channel_close(broker: Any) -> None:
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("aio", arguments={"x-consumer-timeout": 200})
        await channel.default_exchange.publish(aio_pika.Message(b"m"), routing_key="aio")
        await queue.get(timeout=5)
        deadline = time.monotonic() + 10
        while not channel.is_closed and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert channel.is_closed
        again = await (await connection.channel()).get_queue("aio")
        message = await again.get(timeout=5)
        assert message.redelivered
