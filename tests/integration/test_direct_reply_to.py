"""Direct reply-to (https://www.rabbitmq.com/direct-reply-to.html, the direct_reply_to
capability): RPC replies without a reply queue.

The requester consumes the pseudo-queue amq.rabbitmq.reply-to with no-ack and publishes a
request whose reply_to is amq.rabbitmq.reply-to; the server sees reply_to rewritten to
amq.rabbitmq.reply-to.<part>.<part> and publishes the reply to the default exchange with that
routing key. Reply codes and texts are RabbitMQ 3.10's.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Iterator
from typing import Any

import aio_pika
import pika
import pytest
from pamqp import commands
from pamqp.body import ContentBody
from pamqp.header import ContentHeader
from pika.adapters.blocking_connection import BlockingConnection
from pika.exceptions import ChannelClosedByBroker

from helpers import assert_silent, channel_close, declare_queue, process_events_until
from rawamqp import RawClient

REPLY_TO = "amq.rabbitmq.reply-to"
# RabbitMQ 3.10's shape: two standard-base64 parts (its channel's process id, a 16-byte key).
REPLY_NAME = re.compile(
    r"^amq\.rabbitmq\.reply-to\.([A-Za-z0-9+/]+={0,2})\.([A-Za-z0-9+/]+={0,2})$"
)


@pytest.fixture
def server(broker: Any) -> Iterator[BlockingConnection]:
    """A second connection playing the RPC server."""
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        yield connection


def read_message(raw: RawClient, kind: type[Any]) -> tuple[Any, ContentHeader, bytes]:
    """A method with content (basic.get-ok, deliver, return) and its header and body."""
    method = raw.expect(kind)
    content = raw.expect(ContentHeader)  # type: ignore[type-var]
    data = raw.expect(ContentBody).value if content.body_size else b""  # type: ignore[type-var]
    return method, content, data


def raw_request(raw: RawClient, requester: int, worker: int) -> str:
    """Publish a request on `requester` to a fresh queue, fetch it on `worker`: its reply_to."""
    queue = declare_queue(raw, worker)
    props = commands.Basic.Properties(reply_to=REPLY_TO)
    raw.publish(requester, b"request", routing_key=queue, properties=props)
    raw.send_method(worker, commands.Basic.Get(queue=queue, no_ack=True))
    _, content, _ = read_message(raw, commands.Basic.GetOk)
    return str(content.properties.reply_to)


def close_channel(raw: RawClient, channel: int) -> None:
    raw.send_method(channel, commands.Channel.Close(200, "bye", 0, 0))
    raw.expect(commands.Channel.CloseOk, channel)


def consume_replies(raw: RawClient, channel: int) -> None:
    raw.send_method(channel, commands.Basic.Consume(queue=REPLY_TO, no_ack=True))
    raw.expect(commands.Basic.ConsumeOk, channel)


def issued_reply_name(raw: RawClient) -> str:
    """Open channels 1 (the worker) and 2 (the requester, consuming replies), send one request
    from 2 and return the reply name the worker sees."""
    raw.open_channel(1)
    raw.open_channel(2)
    consume_replies(raw, 2)
    return raw_request(raw, 2, 1)


def test_rpc_round_trip_with_pika(conn: BlockingConnection, server: BlockingConnection) -> None:
    worker = server.channel()
    requests = worker.queue_declare("", exclusive=True).method.queue
    client = conn.channel()
    replies: list[tuple[Any, Any, bytes]] = []
    client.basic_consume(REPLY_TO, lambda _c, m, p, b: replies.append((m, p, b)), auto_ack=True)
    props = pika.BasicProperties(reply_to=REPLY_TO, correlation_id="c-1")
    client.basic_publish("", requests, b"2+2", props)

    method, seen, body = worker.basic_get(requests, auto_ack=True)
    assert method is not None and body == b"2+2"
    assert REPLY_NAME.match(seen.reply_to), seen.reply_to
    assert seen.correlation_id == "c-1"
    worker.basic_publish("", seen.reply_to, b"4", pika.BasicProperties(correlation_id="c-1"))

    process_events_until(conn, lambda: bool(replies))
    ((deliver, reply_props, reply),) = replies
    assert reply == b"4" and reply_props.correlation_id == "c-1"
    assert (deliver.exchange, deliver.routing_key) == ("", seen.reply_to)
    assert deliver.redelivered is False


async def test_rpc_round_trip_with_aio_pika(broker: Any) -> None:
    client_conn = await aio_pika.connect(broker.url)
    server_conn = await aio_pika.connect(broker.url)
    async with client_conn, server_conn:
        server_channel = await server_conn.channel()
        requests = await server_channel.declare_queue("", exclusive=True)

        async def serve(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            assert message.reply_to is not None and REPLY_NAME.match(message.reply_to)
            answer = aio_pika.Message(message.body.upper(), correlation_id=message.correlation_id)
            await server_channel.default_exchange.publish(answer, message.reply_to)

        await requests.consume(serve, no_ack=True)

        client_channel = await client_conn.channel()
        replies: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
        pseudo = await client_channel.get_queue(REPLY_TO, ensure=False)
        await pseudo.consume(replies.put, no_ack=True)
        for n in range(3):
            request = aio_pika.Message(b"ping%d" % n, reply_to=REPLY_TO, correlation_id=str(n))
            await client_channel.default_exchange.publish(request, requests.name)
        got = [await asyncio.wait_for(replies.get(), timeout=5) for _ in range(3)]
        assert [(m.body, m.correlation_id) for m in got] == [
            (b"PING0", "0"),
            (b"PING1", "1"),
            (b"PING2", "2"),
        ]


def test_reply_name_is_per_channel(raw: RawClient) -> None:
    raw.open_channel(1)
    for channel in (2, 3):
        raw.open_channel(channel)
        consume_replies(raw, channel)
    first = raw_request(raw, 2, 1)
    again = raw_request(raw, 2, 1)
    other = raw_request(raw, 3, 1)
    assert REPLY_NAME.match(first) and REPLY_NAME.match(other)
    # RabbitMQ 3.10: the same name for every request on a channel, another on another channel.
    assert first == again
    assert first != other


def test_reply_name_has_rabbitmq_shape_and_routes_back(raw: RawClient) -> None:
    name = issued_reply_name(raw)
    match = REPLY_NAME.match(name)
    assert match is not None, name
    channel_part, key_part = (base64.b64decode(part, validate=True) for part in match.groups())
    assert channel_part and len(key_part) == 16
    raw.publish(1, b"reply", routing_key=name)
    deliver, _, body = read_message(raw, commands.Basic.Deliver)
    # The requester sees the reply under the same name, as the routing key.
    assert (body, deliver.exchange, deliver.routing_key) == (b"reply", "", name)


def test_reply_consumer_must_be_no_ack(raw: RawClient) -> None:
    raw.open_channel(1)
    raw.send_method(1, commands.Basic.Consume(queue=REPLY_TO, no_ack=False))
    assert channel_close(raw, 1) == (
        406,
        "PRECONDITION_FAILED - reply consumer cannot acknowledge",
        60,
        20,
    )


def test_reply_consumer_must_be_no_ack_pika(conn: BlockingConnection) -> None:
    channel = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.basic_consume(REPLY_TO, lambda *_: None, auto_ack=False)
    assert info.value.reply_code == 406
    assert info.value.reply_text == "PRECONDITION_FAILED - reply consumer cannot acknowledge"
    assert conn.is_open


def test_second_reply_consumer_on_channel_is_406(raw: RawClient) -> None:
    raw.open_channel(1)
    consume_replies(raw, 1)
    raw.send_method(1, commands.Basic.Consume(queue=REPLY_TO, no_ack=True))
    assert channel_close(raw, 1) == (
        406,
        "PRECONDITION_FAILED - reply consumer already set",
        60,
        20,
    )


@pytest.mark.parametrize("setup", ["never", "cancelled", "other-channel"])
def test_request_without_reply_consumer_is_406(raw: RawClient, setup: str) -> None:
    raw.open_channel(1)
    raw.open_channel(2)
    if setup == "cancelled":
        raw.send_method(1, commands.Basic.Consume(queue=REPLY_TO, no_ack=True, consumer_tag="r"))
        raw.expect(commands.Basic.ConsumeOk, 1)
        raw.send_method(1, commands.Basic.Cancel(consumer_tag="r"))
        raw.expect(commands.Basic.CancelOk, 1)
    elif setup == "other-channel":  # the reply consumer is on channel 2, not on 1
        consume_replies(raw, 2)
    props = commands.Basic.Properties(reply_to=REPLY_TO)
    raw.publish(1, b"request", routing_key="amq.gen-nowhere", properties=props)
    assert channel_close(raw, 1) == (
        406,
        "PRECONDITION_FAILED - fast reply consumer does not exist",
        60,
        40,
    )


def test_declare_and_get_of_the_pseudo_queue(raw: RawClient) -> None:
    raw.open_channel(1)
    for passive in (True, False):
        raw.send_method(1, commands.Queue.Declare(queue=REPLY_TO, passive=passive))
        ok = raw.expect(commands.Queue.DeclareOk, 1)
        # RabbitMQ 3.10: declare-ok with consumer_count 1 even on a channel with no consumer.
        assert (ok.queue, ok.message_count, ok.consumer_count) == (REPLY_TO, 0, 1)
    raw.send_method(1, commands.Basic.Get(queue=REPLY_TO, no_ack=True))
    assert channel_close(raw, 1) == (
        404,
        "NOT_FOUND - no queue 'amq.rabbitmq.reply-to' in vhost '/'",
        60,
        70,
    )


def test_passive_declare_of_issued_reply_name(raw: RawClient, conn: BlockingConnection) -> None:
    name = issued_reply_name(raw)
    ok = conn.channel().queue_declare(name, passive=True).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (name, 0, 1)
    close_channel(raw, 2)
    for gone in (name, REPLY_TO + ".bogus"):
        with pytest.raises(ChannelClosedByBroker) as info:
            conn.channel().queue_declare(gone, passive=True)
        assert info.value.reply_code == 404
        assert info.value.reply_text == f"NOT_FOUND - no queue '{gone}' in vhost '/'"


def test_reply_after_requester_channel_closed_is_dropped(raw: RawClient) -> None:
    name = issued_reply_name(raw)
    close_channel(raw, 2)
    raw.send_method(1, commands.Confirm.Select())
    raw.expect(commands.Confirm.SelectOk, 1)
    raw.publish(1, b"late", routing_key=name, mandatory=True)
    returned, _, body = read_message(raw, commands.Basic.Return)
    assert (returned.reply_code, returned.reply_text) == (312, "NO_ROUTE")
    assert (returned.exchange, returned.routing_key, body) == ("", name, b"late")
    assert raw.expect(commands.Basic.Ack, 1).delivery_tag == 1
    raw.publish(1, b"late", routing_key=name)  # not mandatory: silently dropped, still acked
    assert raw.expect(commands.Basic.Ack, 1).delivery_tag == 2
    assert_silent(raw)


@pytest.mark.kanin_only
def test_mandatory_reply_to_live_requester_is_delivered_not_returned(raw: RawClient) -> None:
    name = issued_reply_name(raw)
    raw.publish(1, b"reply", routing_key=name, mandatory=True)
    # RabbitMQ 3.10 delivers the reply AND sends basic.return 312 NO_ROUTE for it, because
    # the reply bypasses queue routing. kanin deliberately does not copy that: a delivered
    # message was routed, so a mandatory publisher must not be told it was unroutable.
    channel, method = raw.read_frame()
    assert channel == 2 and isinstance(method, commands.Basic.Deliver)
    raw.expect(ContentHeader, 2)  # type: ignore[type-var]
    assert raw.expect(ContentBody, 2).value == b"reply"  # type: ignore[type-var]
    assert method.routing_key == name
    assert_silent(raw, 0.5)


def test_reply_through_another_exchange_is_not_delivered(raw: RawClient) -> None:
    name = issued_reply_name(raw)
    # RabbitMQ 3.10: only the default exchange knows reply names; amq.direct routes nowhere.
    raw.publish(1, b"lost", exchange="amq.direct", routing_key=name)
    assert_silent(raw, 0.5)
    raw.publish(1, b"found", routing_key=name)
    _, _, body = read_message(raw, commands.Basic.Deliver)
    assert body == b"found"


def test_only_the_exact_pseudo_queue_name_is_rewritten(raw: RawClient) -> None:
    raw.open_channel(1)
    queue = declare_queue(raw, 1)
    props = commands.Basic.Properties(reply_to=REPLY_TO + ".mine")
    # No reply consumer on this channel, and yet no error: the reply_to is left as it is.
    raw.publish(1, b"request", routing_key=queue, properties=props)
    raw.send_method(1, commands.Basic.Get(queue=queue, no_ack=True))
    _, content, _ = read_message(raw, commands.Basic.GetOk)
    assert content.properties.reply_to == REPLY_TO + ".mine"


def test_replies_do_not_use_up_delivery_tags(raw: RawClient) -> None:
    name = issued_reply_name(raw)
    for _ in range(2):
        raw.publish(1, b"reply", routing_key=name)
    # RabbitMQ 3.10: each reply carries the channel's next delivery tag without consuming it.
    tags = [read_message(raw, commands.Basic.Deliver)[0].delivery_tag for _ in range(2)]
    assert tags == [1, 1]
    queue = declare_queue(raw, 2)
    raw.publish(1, b"m", routing_key=queue)
    raw.send_method(2, commands.Basic.Get(queue=queue))
    assert read_message(raw, commands.Basic.GetOk)[0].delivery_tag == 1
    raw.publish(1, b"reply", routing_key=name)
    assert read_message(raw, commands.Basic.Deliver)[0].delivery_tag == 2
