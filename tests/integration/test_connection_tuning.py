"""Connection: connection.tune (channel-max, frame-max) and heartbeats."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aio_pika
import pika
import pytest
from pamqp import body, commands, header, heartbeat

from helpers import BrokerFactory, pika_params, raw_client

# -- tuning -------------------------------------------------------------------------------------


def test_tune_defaults(broker: Any) -> None:
    with raw_client(broker) as client:
        tune = client.handshake()
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)


def test_smaller_frame_max_is_honoured_by_the_server(
    broker: Any, unique: Callable[[str], str]
) -> None:
    queue = unique("framemax")
    payload = bytes(range(256)) * 40  # 10240 bytes
    with raw_client(broker) as client:
        client.handshake(frame_max=4096)
        client.open_channel(1)
        client.rpc(
            1, commands.Queue.Declare(queue=queue, auto_delete=True), commands.Queue.DeclareOk
        )
        # The client splits its own body into frames of at most 4096 - 8 payload bytes.
        client.send_method(1, commands.Basic.Publish(routing_key=queue))
        client.send_frame(1, header.ContentHeader(0, len(payload), commands.Basic.Properties()))
        for offset in range(0, len(payload), 4088):
            client.send_frame(1, body.ContentBody(payload[offset : offset + 4088]))
        client.rpc(1, commands.Basic.Get(queue=queue, no_ack=True), commands.Basic.GetOk)
        content, chunks = client.read_content(1)
        assert content.body_size == len(payload)
        assert b"".join(chunks) == payload
        # RabbitMQ 3.10: splits at frame_max - 8 (7-byte frame header + frame-end).
        assert [len(chunk) for chunk in chunks] == [4088, 4088, 2064]
        client.close_connection()


def test_smaller_channel_max_is_honoured_by_the_server(broker: Any) -> None:
    with raw_client(broker) as client:
        client.handshake(channel_max=2)
        client.open_channel(1)
        client.open_channel(7)
        client.send_method(3, commands.Channel.Open())
        close = client.expect(commands.Connection.Close, channel=0)
        # RabbitMQ 3.10: a connection error, counted in open channels, with class/method 0.
        assert (close.reply_code, close.reply_text) == (
            530,
            "NOT_ALLOWED - number of channels opened (2) has reached the negotiated "
            "channel_max (2)",
        )
        assert (close.class_id, close.method_id) == (0, 0)


@pytest.mark.parametrize(("negotiated", "number"), [(None, 2048), (10, 11)])
def test_channel_number_above_channel_max_is_allowed(
    broker: Any, negotiated: int | None, number: int
) -> None:
    # RabbitMQ 3.10: channel_max limits how many channels are open, not their numbers.
    with raw_client(broker) as client:
        client.handshake(channel_max=negotiated)
        client.open_channel(number)
        client.rpc(number, commands.Queue.Declare(exclusive=True), commands.Queue.DeclareOk)
        client.close_connection()


def test_tune_ok_frame_max_below_minimum_is_refused(broker: Any) -> None:
    with raw_client(broker) as client:
        client.handshake(frame_max=1000, open_connection=False)
        client.send_method(0, commands.Connection.Open())
        # RabbitMQ 3.10: no open-ok and no connection.close; socket closed (after ~3 s).
        assert client.frames_until_closed(timeout=8) == []


def test_pika_with_small_frame_max_moves_large_messages(
    broker: Any, unique: Callable[[str], str]
) -> None:
    queue = unique("pikaframemax")
    payload = b"x" * 50_000
    connection = pika.BlockingConnection(pika_params(broker, frame_max=4096, channel_max=4))
    try:
        channel = connection.channel()
        channel.queue_declare(queue, auto_delete=True)
        channel.basic_publish("", queue, payload)
        _method, _props, received = channel.basic_get(queue, auto_ack=True)
        assert received == payload
    finally:
        connection.close()


@pytest.mark.kanin_only
def test_configured_tune_values_are_proposed(broker_factory: BrokerFactory) -> None:
    config = {"channel_max": 16, "frame_max": 8192, "heartbeat_s": 5}
    with broker_factory(**config) as server, raw_client(server) as client:
        tune = client.handshake()
        assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (16, 8192, 5)


# -- heartbeats ---------------------------------------------------------------------------------


def assert_silent_client_is_dropped(
    endpoint: Any, queue: str, proposed_heartbeat: int | None
) -> None:
    """A raw client negotiates heartbeat 1, takes a message without acking it and
    goes silent: it must be disconnected and its delivery requeued."""
    with raw_client(endpoint) as client:
        tune = client.handshake(heartbeat=1)
        if proposed_heartbeat is not None:
            assert tune.heartbeat == proposed_heartbeat
        client.open_channel(1)
        client.rpc(1, commands.Queue.Declare(queue=queue), commands.Queue.DeclareOk)
        client.publish(1, b"held", routing_key=queue)
        client.rpc(1, commands.Basic.Consume(queue=queue), commands.Basic.ConsumeOk)
        client.expect(commands.Basic.Deliver, channel=1)
        client.read_content(1)
        started = time.monotonic()
        # The server sends its own heartbeats about every half interval.
        _channel, first = client.read_frame(timeout=2, skip_heartbeats=False)
        assert isinstance(first, heartbeat.Heartbeat)
        # RabbitMQ 3.10: after ~2 missed intervals (here ~3 s) the socket is closed without
        # connection.close.
        frames = client.frames_until_closed(timeout=6)
        assert frames is not None, "silent client was not disconnected"
        assert all(isinstance(frame, heartbeat.Heartbeat) for frame in frames)
        assert 1.0 <= time.monotonic() - started <= 6
    connection = pika.BlockingConnection(pika_params(endpoint))
    try:
        channel = connection.channel()
        method, _props, held = channel.basic_get(queue, auto_ack=True)
        assert method is not None and method.redelivered is True
        assert held == b"held"
        channel.queue_delete(queue)
    finally:
        connection.close()


def test_silent_client_is_disconnected_after_missed_heartbeats(
    broker: Any, unique: Callable[[str], str]
) -> None:
    assert_silent_client_is_dropped(broker, unique("silent"), proposed_heartbeat=None)


@pytest.mark.kanin_only
def test_silent_client_is_disconnected_server_heartbeat_1(
    broker_factory: BrokerFactory, unique: Callable[[str], str]
) -> None:
    with broker_factory(heartbeat_s=1) as server:
        assert_silent_client_is_dropped(server, unique("silent"), proposed_heartbeat=1)


def keep_pika_alive(endpoint: Any, queue: str) -> None:
    connection = pika.BlockingConnection(pika_params(endpoint, heartbeat=1))
    try:
        channel = connection.channel()
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.25)
            assert connection.is_open
        channel.queue_declare(queue, auto_delete=True)
        channel.basic_publish("", queue, b"alive")
        assert channel.basic_get(queue, auto_ack=True)[2] == b"alive"
    finally:
        connection.close()


def test_pika_with_heartbeat_1_stays_connected(broker: Any, unique: Callable[[str], str]) -> None:
    keep_pika_alive(broker, unique("hb"))


@pytest.mark.kanin_only
def test_pika_stays_connected_server_heartbeat_1(
    broker_factory: BrokerFactory, unique: Callable[[str], str]
) -> None:
    with broker_factory(heartbeat_s=1) as server:
        keep_pika_alive(server, unique("hb"))


async def test_aio_pika_with_heartbeat_1_stays_connected(
    broker: Any, unique: Callable[[str], str]
) -> None:
    url = f"amqp://guest:guest@{broker.host}:{broker.port}/%2F?heartbeat=1"
    connection = await aio_pika.connect(url, timeout=5)
    try:
        channel = await connection.channel()
        for _ in range(7):
            await asyncio.sleep(0.5)
            assert not connection.is_closed
        queue = await channel.declare_queue(unique("aiohb"), auto_delete=True)
        assert queue.name
    finally:
        await connection.close()
