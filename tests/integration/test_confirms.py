"""Publisher confirms: confirm.select, sequence numbers, ack/nack, return ordering
(https://www.rabbitmq.com/confirms.html).

Exact frames are checked with the raw pamqp client (tests/rawamqp.py); pika and aio-pika
check that real clients see the same. Reply codes and texts are RabbitMQ 3.10's.
Mode conflicts between tx and confirm live here too; transactions in test_tx.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aio_pika
import aiormq
import pika
import pytest
from pamqp import commands, frame
from pamqp.body import ContentBody
from pamqp.header import ContentHeader
from pika.adapters.blocking_connection import BlockingConnection
from pika.exceptions import ChannelClosedByBroker, NackError, UnroutableError

from helpers import (
    Unique,
    assert_silent,
    channel_close,
    confirm_channel,
    declare_queue,
    transactional_channel,
)
from rawamqp import RawClient


def settle(outstanding: set[int], confirm: commands.Basic.Ack | commands.Basic.Nack) -> list[int]:
    """Sequence numbers one ack/nack settles; fails on a confirm for an already-settled seq."""
    tag = confirm.delivery_tag
    assert tag in outstanding, f"confirm for seq {tag} which is not outstanding (duplicate?)"
    settled = sorted(t for t in outstanding if t <= tag) if confirm.multiple else [tag]
    outstanding.difference_update(settled)
    return settled


def collect_confirms(
    raw: RawClient, channel: int, published: int, timeout: float = 10.0
) -> tuple[list[int], list[int]]:
    """Read until seqs 1..published are all settled; return (acked, nacked) seqs in order."""
    outstanding = set(range(1, published + 1))
    acked: list[int] = []
    nacked: list[int] = []
    while outstanding:
        got_channel, got = raw.read_frame(timeout)
        assert got_channel == channel, f"unexpected frame {got!r} on channel {got_channel}"
        if isinstance(got, commands.Basic.Ack):
            acked += settle(outstanding, got)
        elif isinstance(got, commands.Basic.Nack):
            nacked += settle(outstanding, got)
        else:
            raise AssertionError(f"unexpected frame {got!r}")
    return acked, nacked


def test_confirm_select_ok_and_seqs_start_at_one_per_channel(raw: RawClient) -> None:
    confirm_channel(raw, 1)
    confirm_channel(raw, 2)
    queue = declare_queue(raw, 1)
    for body in (b"a1", b"b1", b"a2", b"b2", b"a3"):
        raw.publish(1 if body.startswith(b"a") else 2, body, routing_key=queue)
    acked: dict[int, list[int]] = {1: [], 2: []}
    outstanding = {1: {1, 2, 3}, 2: {1, 2}}
    while outstanding[1] or outstanding[2]:
        channel, got = raw.read_frame()
        assert isinstance(got, commands.Basic.Ack), got
        acked[channel] += settle(outstanding[channel], got)
    assert acked == {1: [1, 2, 3], 2: [1, 2]}
    assert_silent(raw)


def test_confirm_select_nowait_gets_no_reply(raw: RawClient, unique: Unique) -> None:
    raw.open_channel(1)
    raw.send_method(1, commands.Confirm.Select(nowait=True))
    raw.publish(1, b"x", routing_key=unique("nowhere"))
    # The first thing back is the ack for seq 1: no confirm.select-ok was sent.
    ack = raw.expect(commands.Basic.Ack, 1)
    assert (ack.delivery_tag, ack.multiple) == (1, False)
    assert_silent(raw)


def test_confirm_select_again_keeps_counting(raw: RawClient) -> None:
    confirm_channel(raw, 1)
    queue = declare_queue(raw, 1)
    raw.publish(1, b"1", routing_key=queue)
    raw.publish(1, b"2", routing_key=queue)
    assert collect_confirms(raw, 1, 2) == ([1, 2], [])
    # RabbitMQ 3.10: a second confirm.select answers select-ok and does not reset the counter.
    raw.send_method(1, commands.Confirm.Select())
    raw.expect(commands.Confirm.SelectOk, 1)
    raw.publish(1, b"3", routing_key=queue)
    assert raw.expect(commands.Basic.Ack, 1).delivery_tag == 3


def test_unroutable_publish_is_acked(raw: RawClient, unique: Unique) -> None:
    confirm_channel(raw, 1)
    raw.publish(1, b"x", routing_key=unique("nowhere"))
    raw.publish(1, b"x", exchange="amq.direct", routing_key=unique("unbound"))
    assert collect_confirms(raw, 1, 2) == ([1, 2], [])
    assert_silent(raw)


def test_mandatory_unroutable_returns_before_ack_on_the_wire(
    raw: RawClient, unique: Unique
) -> None:
    confirm_channel(raw, 1)
    key = unique("nowhere")
    raw.publish(1, b"returned", routing_key=key, mandatory=True)
    returned = raw.expect(commands.Basic.Return, 1)
    assert (returned.reply_code, returned.reply_text) == (312, "NO_ROUTE")
    assert (returned.exchange, returned.routing_key) == ("", key)
    assert raw.expect(ContentHeader, 1).body_size == len(b"returned")  # type: ignore[type-var]
    assert raw.expect(ContentBody, 1).value == b"returned"  # type: ignore[type-var]
    ack = raw.expect(commands.Basic.Ack, 1)
    assert (ack.delivery_tag, ack.multiple) == (1, False)
    # Not mandatory: only the ack.
    raw.publish(1, b"dropped", routing_key=key)
    assert raw.expect(commands.Basic.Ack, 1).delivery_tag == 2
    assert_silent(raw)


def test_pipelined_mandatory_unroutable_publishes_each_get_return_then_ack(
    raw: RawClient, unique: Unique
) -> None:
    # Clients that read one frame at a time and wait for each publish's outcome (PHP's amqp
    # extension) rely on RabbitMQ 3.10's order: each returned message's basic.return, its
    # content frames, then its own basic.ack, before anything about the next publish. No
    # ack covering several returned publishes at the end.
    confirm_channel(raw, 1)
    key = unique("nowhere")
    bodies = [b"first", b"", b"x" * 300_000, b"last"]  # the big one spans three body frames
    publishes = []
    for body in bodies:
        method = commands.Basic.Publish(routing_key=key, mandatory=True)
        content = ContentHeader(0, len(body), commands.Basic.Properties())
        publishes.append(frame.marshal(method, 1) + frame.marshal(content, 1))
        for start in range(0, len(body), 131_072 - 8):
            publishes.append(frame.marshal(ContentBody(body[start : start + 131_064]), 1))
    raw.send_raw(b"".join(publishes))  # one write: the broker reads them together
    for seq, body in enumerate(bodies, start=1):
        returned = raw.expect(commands.Basic.Return, 1)
        assert (returned.reply_code, returned.routing_key) == (312, key)
        _, chunks = raw.read_content(1)
        assert b"".join(chunks) == body
        ack = raw.expect(commands.Basic.Ack, 1)
        assert (ack.delivery_tag, ack.multiple) == (seq, False)
    assert_silent(raw)


def test_mandatory_unroutable_return_callback_before_ack_in_pika(
    broker: Any, unique: Unique
) -> None:
    events: list[tuple[Any, ...]] = []
    key = unique("nowhere")

    def on_open(connection: pika.SelectConnection) -> None:
        connection.channel(on_open_callback=on_channel)

    def on_channel(channel: Any) -> None:
        def on_return(_ch: Any, method: Any, _props: Any, body: bytes) -> None:
            events.append(("return", method.reply_code, method.reply_text, body))

        def on_confirm(got: Any) -> None:
            events.append((got.method.NAME, got.method.delivery_tag, got.method.multiple))
            channel.connection.close()

        channel.add_on_return_callback(on_return)
        channel.confirm_delivery(
            ack_nack_callback=on_confirm,
            callback=lambda _frame: channel.basic_publish("", key, b"m", mandatory=True),
        )

    connection = pika.SelectConnection(
        pika.URLParameters(broker.url),
        on_open_callback=on_open,
        on_open_error_callback=lambda conn, _err: conn.ioloop.stop(),
        on_close_callback=lambda conn, _reason: conn.ioloop.stop(),
    )
    connection.ioloop.call_later(5, connection.ioloop.stop)
    connection.ioloop.start()
    if connection.is_open:  # the confirm never came: close before failing
        connection.ioloop.call_later(2, connection.ioloop.stop)
        connection.close()
        connection.ioloop.start()
    assert events == [("return", 312, "NO_ROUTE", b"m"), ("Basic.Ack", 1, False)]


def test_publish_to_missing_exchange_closes_channel_404(raw: RawClient, unique: Unique) -> None:
    confirm_channel(raw, 1)
    queue = declare_queue(raw, 1)
    raw.publish(1, b"ok", routing_key=queue)
    assert raw.expect(commands.Basic.Ack, 1).delivery_tag == 1
    exchange = unique("missing")
    raw.publish(1, b"lost", exchange=exchange, routing_key="k")
    # RabbitMQ 3.10: no nack for the failed publish; the channel is closed straight away.
    assert channel_close(raw, 1) == (
        404,
        f"NOT_FOUND - no exchange '{exchange}' in vhost '/'",
        60,
        40,
    )


def test_publish_to_missing_exchange_in_pika_raises_404(
    conn: BlockingConnection, unique: Unique
) -> None:
    channel = conn.channel()
    channel.confirm_delivery()
    exchange = unique("missing")
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.basic_publish(exchange, "k", b"x")
    assert info.value.reply_code == 404
    assert info.value.reply_text == f"NOT_FOUND - no exchange '{exchange}' in vhost '/'"
    assert conn.is_open


def test_confirm_select_on_tx_channel_is_406(raw: RawClient) -> None:
    transactional_channel(raw, 1)
    raw.send_method(1, commands.Confirm.Select())
    assert channel_close(raw, 1) == (
        406,
        "PRECONDITION_FAILED - cannot switch from tx to confirm mode",
        85,
        10,
    )


def test_tx_select_on_confirm_channel_is_406(raw: RawClient) -> None:
    confirm_channel(raw, 1)
    raw.send_method(1, commands.Tx.Select())
    assert channel_close(raw, 1) == (
        406,
        "PRECONDITION_FAILED - cannot switch from confirm to tx mode",
        90,
        10,
    )


def test_message_routed_to_several_queues_is_acked_once(raw: RawClient, unique: Unique) -> None:
    confirm_channel(raw, 1)
    exchange = unique("fan")
    raw.send_method(
        1, commands.Exchange.Declare(exchange=exchange, exchange_type="fanout", auto_delete=True)
    )
    raw.expect(commands.Exchange.DeclareOk, 1)
    queues = [declare_queue(raw, 1) for _ in range(3)]
    for queue in queues:
        raw.send_method(1, commands.Queue.Bind(queue=queue, exchange=exchange))
        raw.expect(commands.Queue.BindOk, 1)
    for n in range(5):
        raw.publish(1, b"%d" % n, exchange=exchange)
    assert collect_confirms(raw, 1, 5) == ([1, 2, 3, 4, 5], [])
    assert_silent(raw)
    for queue in queues:
        raw.send_method(1, commands.Queue.Declare(queue=queue, passive=True))
        assert raw.expect(commands.Queue.DeclareOk, 1).message_count == 5


def test_2000_pipelined_publishes_each_confirmed_exactly_once(raw: RawClient) -> None:
    confirm_channel(raw, 1)
    queue = declare_queue(raw, 1)
    publish = commands.Basic.Publish(exchange="", routing_key=queue)
    one = (
        frame.marshal(publish, 1)
        + frame.marshal(ContentHeader(0, 4, commands.Basic.Properties()), 1)
        + frame.marshal(ContentBody(b"data"), 1)
    )
    raw.send_raw(one * 2000)
    acked, nacked = collect_confirms(raw, 1, 2000)
    assert nacked == []
    assert sorted(acked) == list(range(1, 2001))
    assert_silent(raw)
    raw.send_method(1, commands.Queue.Declare(queue=queue, passive=True))
    assert raw.expect(commands.Queue.DeclareOk, 1).message_count == 2000


def test_queue_rejecting_publish_nacks_it(raw: RawClient) -> None:
    confirm_channel(raw, 1)
    queue = declare_queue(raw, 1, **{"x-max-length": 1, "x-overflow": "reject-publish"})
    for n in range(3):
        raw.publish(1, b"%d" % n, routing_key=queue)
    # RabbitMQ 3.10 settled 2 and 3 with one basic.nack(3, multiple=true).
    assert collect_confirms(raw, 1, 3) == ([1], [2, 3])
    raw.publish(1, b"m", routing_key=queue, mandatory=True)
    # RabbitMQ 3.10: a refused mandatory message is nacked, never returned (it was routed).
    nack = raw.expect(commands.Basic.Nack, 1)
    assert nack.delivery_tag == 4
    assert_silent(raw)


def test_pika_blocking_confirms(conn: BlockingConnection, unique: Unique) -> None:
    channel = conn.channel()
    channel.confirm_delivery()
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.basic_publish("", queue, b"ok")
    with pytest.raises(UnroutableError) as returned:
        channel.basic_publish("", unique("nowhere"), b"back", mandatory=True)
    (message,) = returned.value.messages
    assert (message.method.reply_code, message.method.reply_text) == (312, "NO_ROUTE")
    assert message.body == b"back"
    full = channel.queue_declare(
        "", exclusive=True, arguments={"x-max-length": 0, "x-overflow": "reject-publish"}
    ).method.queue
    with pytest.raises(NackError):
        channel.basic_publish("", full, b"refused")
    assert channel.queue_declare(queue, passive=True).method.message_count == 1


async def test_aio_pika_2000_concurrent_publishes_all_acked(broker: Any) -> None:
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        queue = await channel.declare_queue("", exclusive=True)
        results = await asyncio.wait_for(
            asyncio.gather(
                *(
                    channel.default_exchange.publish(aio_pika.Message(b"%d" % n), queue.name)
                    for n in range(2000)
                )
            ),
            timeout=20,
        )
        assert all(isinstance(r, commands.Basic.Ack) for r in results)
        assert {r.delivery_tag for r in results} <= set(range(1, 2001))
        declared = await channel.declare_queue(queue.name, passive=True)
        assert declared.declaration_result.message_count == 2000


async def test_aio_pika_mandatory_return_and_missing_exchange(broker: Any, unique: Unique) -> None:
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        key = unique("nowhere")
        result = await channel.default_exchange.publish(
            aio_pika.Message(b"r"), key, mandatory=True, timeout=5
        )
        # aio-pika resolves a returned publish with the basic.return rather than the ack.
        assert isinstance(result.delivery, commands.Basic.Return)
        assert (result.delivery.reply_code, result.delivery.reply_text) == (312, "NO_ROUTE")
        assert result.body == b"r"
        exchange = unique("missing")
        missing = await channel.get_exchange(exchange, ensure=False)
        with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity) as info:
            await missing.publish(aio_pika.Message(b"x"), "k", timeout=5)
        assert info.value.args[0] == f"NOT_FOUND - no exchange '{exchange}' in vhost '/'"
