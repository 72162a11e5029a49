"""SPEC §1 Connection: handshake, authentication, vhosts, tuning, closing, heartbeats.

Malformed frames and protocol errors are in test_connection_frames.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import aio_pika
import amqp
import pika
import pika.exceptions
import pytest
from pamqp import body, commands, header, heartbeat

from kanin.config import UserSpec
from rawamqp import ConnectionClosedError, RawClient, amqplain_response, plain_response

BrokerFactory = Callable[..., AbstractContextManager[Any]]

CAPABILITIES = (
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "consumer_priorities",
    "authentication_failure_close",
    "per_consumer_qos",
    "direct_reply_to",
)
PLAIN_REFUSED = (
    "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. "
    "For details see the broker logfile."
)
AMQPLAIN_REFUSED = (
    "ACCESS_REFUSED - Login was refused using authentication mechanism AMQPLAIN. "
    "For details see the broker logfile."
)


@contextmanager
def raw_client(endpoint: Any) -> Iterator[RawClient]:
    with RawClient.connect(endpoint.host, endpoint.port) as client:
        yield client


def pika_params(endpoint: Any, **overrides: Any) -> pika.ConnectionParameters:
    options: dict[str, Any] = {
        "host": endpoint.host,
        "port": endpoint.port,
        "credentials": pika.PlainCredentials("guest", "guest"),
        "connection_attempts": 1,
        "socket_timeout": 5,
        "blocked_connection_timeout": 5,
    }
    options.update(overrides)
    return pika.ConnectionParameters(**options)


def frames_until_eof(client: RawClient, timeout: float) -> list[object] | None:
    """Every frame (heartbeats included) until the server closes the socket; None on timeout."""
    deadline = time.monotonic() + timeout
    seen: list[object] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            seen.append(client.read_frame(remaining, skip_heartbeats=False)[1])
        except ConnectionClosedError:
            return seen
        except TimeoutError:
            return None


# -- protocol header and connection.start --------------------------------------------------------


@pytest.mark.parametrize(
    "bad_header",
    [
        b"GET / HTTP/1.1\r\n\r\n",
        b"AMQP\x00\x00\x09\x00",  # 0-9-0
        b"AMQP\x01\x01\x00\x0a",  # 0-10
        b"AMQP\x00\x01\x00\x00",  # AMQP 1.0
    ],
    ids=["http", "amqp-0-9-0", "amqp-0-10", "amqp-1-0"],
)
def test_wrong_protocol_header_gets_supported_header_and_close(
    broker: Any, bad_header: bytes
) -> None:
    with raw_client(broker) as client:
        client.send_raw(bad_header)
        # RabbitMQ 3.10: writes exactly the 8-byte 0-9-1 header back, then closes the socket.
        assert client.read_raw(timeout=5) == b"AMQP\x00\x00\x09\x01"
        assert client.wait_closed(timeout=1)


def test_protocol_header_split_across_writes_is_accepted(broker: Any) -> None:
    with raw_client(broker) as client:
        client.send_raw(b"AMQ")
        time.sleep(0.2)
        client.send_raw(b"P\x00\x00\x09\x01")
        start = client.expect(commands.Connection.Start, channel=0)
        assert (start.version_major, start.version_minor) == (0, 9)


def test_connection_start_advertises_rabbitmq_capabilities(broker: Any) -> None:
    with raw_client(broker) as client:
        client.send_protocol_header()
        start = client.expect(commands.Connection.Start, channel=0)
    assert (start.version_major, start.version_minor) == (0, 9)
    capabilities = start.server_properties["capabilities"]
    for name in CAPABILITIES:
        assert capabilities.get(name) is True, name
    assert {"PLAIN", "AMQPLAIN"} <= set(start.mechanisms.split())
    assert start.locales == "en_US"
    for key in ("product", "version", "platform", "copyright", "information"):
        assert isinstance(start.server_properties.get(key), str), key


# -- authentication -----------------------------------------------------------------------------


def test_plain_login_with_pika_and_round_trip(broker: Any, unique: Callable[[str], str]) -> None:
    queue = unique("plain")
    connection = pika.BlockingConnection(pika_params(broker))
    try:
        caps = connection._impl.server_capabilities
        assert caps["publisher_confirms"] is True
        assert caps["authentication_failure_close"] is True
        channel = connection.channel()
        channel.queue_declare(queue, auto_delete=True)
        channel.basic_publish("", queue, b"hello")
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        assert method is not None
        assert body == b"hello"
    finally:
        connection.close()
    assert connection.is_closed


def test_amqplain_login_with_py_amqp(broker: Any, unique: Callable[[str], str]) -> None:
    connection = amqp.Connection(
        f"{broker.host}:{broker.port}",
        userid="guest",
        password="guest",
        login_method="AMQPLAIN",
        connect_timeout=5,
    )
    connection.connect()
    try:
        assert connection.server_capabilities["consumer_cancel_notify"] is True
        channel = connection.channel()
        declared = channel.queue_declare(unique("amqplain"), auto_delete=True)
        assert declared.message_count == 0
    finally:
        connection.close()


def test_amqplain_login_raw(broker: Any) -> None:
    with raw_client(broker) as client:
        tune = client.handshake(mechanism="AMQPLAIN")
        assert tune.frame_max > 0
        client.open_channel(1)
        client.close_connection()


def send_start_ok(
    client: RawClient,
    mechanism: str,
    response: str,
    capabilities: dict[str, Any] | None = None,
) -> None:
    client.send_protocol_header()
    client.expect(commands.Connection.Start, channel=0)
    if capabilities is None:
        capabilities = {"authentication_failure_close": True}
    client.send_method(
        0,
        commands.Connection.StartOk(
            client_properties={"product": "test", "capabilities": capabilities},
            mechanism=mechanism,
            response=response,
        ),
    )


@pytest.mark.parametrize(
    ("mechanism", "username", "password", "text"),
    [
        ("PLAIN", "guest", "wrong", PLAIN_REFUSED),
        ("PLAIN", "no-such-user", "guest", PLAIN_REFUSED),
        ("AMQPLAIN", "guest", "wrong", AMQPLAIN_REFUSED),
    ],
    ids=["plain-bad-password", "plain-unknown-user", "amqplain-bad-password"],
)
def test_bad_credentials_get_403_access_refused(
    broker: Any, mechanism: str, username: str, password: str, text: str
) -> None:
    response = (
        amqplain_response(username, password)
        if mechanism == "AMQPLAIN"
        else plain_response(username, password)
    )
    with raw_client(broker) as client:
        send_start_ok(client, mechanism, response)
        close = client.expect(commands.Connection.Close, channel=0)
        assert (close.reply_code, close.reply_text) == (403, text)
        # RabbitMQ 3.10: class-id and method-id are 0, not those of connection.start-ok.
        assert (close.class_id, close.method_id) == (0, 0)
        client.send_method(0, commands.Connection.CloseOk())
        assert client.wait_closed(timeout=5)


def test_bad_password_without_failure_close_capability_just_drops_socket(broker: Any) -> None:
    with raw_client(broker) as client:
        send_start_ok(client, "PLAIN", plain_response("guest", "wrong"), capabilities={})
        # RabbitMQ 3.10: no connection.close at all; the socket is closed (after ~3 s).
        assert frames_until_eof(client, timeout=8) == []


def test_unknown_sasl_mechanism_drops_socket(broker: Any) -> None:
    with raw_client(broker) as client:
        send_start_ok(client, "NO-SUCH-MECHANISM", "x")
        # RabbitMQ 3.10: handshake error, no connection.close, socket closed (after ~3 s).
        assert frames_until_eof(client, timeout=8) == []


def test_bad_password_with_pika(broker: Any) -> None:
    params = pika_params(broker, credentials=pika.PlainCredentials("guest", "wrong"))
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as info:
        pika.BlockingConnection(params)
    assert f"(403) '{PLAIN_REFUSED}'" in str(info.value)


async def test_bad_password_with_aio_pika(broker: Any) -> None:
    url = f"amqp://guest:wrong@{broker.host}:{broker.port}/"
    with pytest.raises(aio_pika.exceptions.ProbableAuthenticationError) as info:
        await aio_pika.connect(url, timeout=5)
    assert info.value.args == (PLAIN_REFUSED,)


def test_bad_password_with_py_amqp(broker: Any) -> None:
    connection = amqp.Connection(
        f"{broker.host}:{broker.port}",
        userid="guest",
        password="wrong",
        login_method="AMQPLAIN",
        connect_timeout=5,
    )
    with pytest.raises(amqp.exceptions.AccessRefused) as info:
        connection.connect()
    assert info.value.reply_code == 403
    assert info.value.reply_text == AMQPLAIN_REFUSED


def test_unknown_vhost_gets_530_not_allowed(broker: Any, unique: Callable[[str], str]) -> None:
    vhost = unique("vhost")
    with raw_client(broker) as client:
        client.handshake(open_connection=False)
        client.send_method(0, commands.Connection.Open(virtual_host=vhost))
        close = client.expect(commands.Connection.Close, channel=0)
        # RabbitMQ 3.10: 530 (not 402 or 403), blaming connection.open (10, 40).
        assert (close.reply_code, close.reply_text) == (
            530,
            f"NOT_ALLOWED - vhost {vhost} not found",
        )
        assert (close.class_id, close.method_id) == (10, 40)
        client.send_method(0, commands.Connection.CloseOk())
        assert client.wait_closed(timeout=5)


def test_unknown_vhost_with_pika(broker: Any, unique: Callable[[str], str]) -> None:
    vhost = unique("vhost")
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as info:
        pika.BlockingConnection(pika_params(broker, virtual_host=vhost))
    assert f"(530) 'NOT_ALLOWED - vhost {vhost} not found'" in str(info.value)


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
        assert frames_until_eof(client, timeout=8) == []


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


# -- channel errors vs connection errors --------------------------------------------------------


def test_channel_error_closes_only_that_channel(broker: Any, unique: Callable[[str], str]) -> None:
    missing, queue = unique("missing"), unique("alive")
    connection = pika.BlockingConnection(pika_params(broker))
    other = pika.BlockingConnection(pika_params(broker))
    try:
        doomed, survivor = connection.channel(), connection.channel()
        survivor.queue_declare(queue, auto_delete=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            doomed.queue_declare(missing, passive=True)
        assert (info.value.reply_code, info.value.reply_text) == (
            404,
            f"NOT_FOUND - no queue '{missing}' in vhost '/'",
        )
        assert doomed.is_closed
        assert connection.is_open and survivor.is_open
        survivor.basic_publish("", queue, b"still here")
        assert survivor.basic_get(queue, auto_ack=True)[2] == b"still here"
        assert other.channel().queue_declare(queue, passive=True).method.message_count == 0
        # The same channel number can be opened again on the connection.
        again = connection.channel(channel_number=doomed.channel_number)
        assert again.queue_declare(queue, passive=True).method.queue == queue
    finally:
        connection.close()
        other.close()


async def test_channel_error_closes_only_that_channel_aio_pika(
    broker: Any, unique: Callable[[str], str]
) -> None:
    missing, queue_name = unique("missing"), unique("alive")
    connection = await aio_pika.connect(broker.url, timeout=5)
    try:
        doomed = await connection.channel()
        survivor = await connection.channel()
        queue = await survivor.declare_queue(queue_name, auto_delete=True)
        with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity) as info:
            await doomed.declare_queue(missing, passive=True)
        assert info.value.args[0] == f"NOT_FOUND - no queue '{missing}' in vhost '/'"
        assert doomed.is_closed
        assert not connection.is_closed and not survivor.is_closed
        await survivor.default_exchange.publish(aio_pika.Message(b"ok"), routing_key=queue_name)
        message = await queue.get(no_ack=True, timeout=5)
        assert message is not None and message.body == b"ok"
    finally:
        await connection.close()


def test_closing_channel_ignores_methods_until_close_ok(
    broker: Any, unique: Callable[[str], str]
) -> None:
    with raw_client(broker) as client:
        client.handshake()
        client.open_channel(1)
        client.send_method(1, commands.Queue.Declare(queue=unique("missing"), passive=True))
        close = client.expect(commands.Channel.Close, channel=1)
        assert close.reply_code == 404
        assert (close.class_id, close.method_id) == (50, 10)
        # RabbitMQ 3.10: until close-ok, further methods on the channel are dropped silently.
        client.send_method(1, commands.Queue.Declare(exclusive=True))
        with pytest.raises(TimeoutError):
            client.read_frame(timeout=0.5)
        client.send_method(1, commands.Channel.CloseOk())
        client.open_channel(1)
        client.rpc(1, commands.Queue.Declare(exclusive=True), commands.Queue.DeclareOk)


# -- closing ------------------------------------------------------------------------------------


def test_client_connection_close_gets_close_ok_then_socket_closes(broker: Any) -> None:
    with raw_client(broker) as client:
        client.handshake()
        client.open_channel(1)
        client.send_method(
            0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)
        )
        client.expect(commands.Connection.CloseOk, channel=0)
        assert client.wait_closed(timeout=5)


def test_client_channel_close_gets_close_ok(broker: Any) -> None:
    with raw_client(broker) as client:
        client.handshake()
        client.open_channel(1)
        client.rpc(
            1,
            commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0),
            commands.Channel.CloseOk,
        )
        client.open_channel(1)
        client.close_connection()


async def test_aio_pika_connect_and_close(broker: Any, unique: Callable[[str], str]) -> None:
    connection = await aio_pika.connect(broker.url, timeout=5)
    channel = await connection.channel()
    queue = await channel.declare_queue(unique("aio"), auto_delete=True)
    assert queue.name.startswith("test.aio.")
    await connection.close()
    assert connection.is_closed


# -- heartbeats ---------------------------------------------------------------------------------


def assert_silent_client_is_dropped(client: RawClient, tune_heartbeat: int | None) -> None:
    tune = client.handshake(heartbeat=1)
    if tune_heartbeat is not None:
        assert tune.heartbeat == tune_heartbeat
    started = time.monotonic()
    client.open_channel(1)
    # The server sends its own heartbeats about every half interval.
    _channel, first = client.read_frame(timeout=2, skip_heartbeats=False)
    assert isinstance(first, heartbeat.Heartbeat)
    # RabbitMQ 3.10: after ~2 missed intervals the socket is closed without connection.close.
    frames = frames_until_eof(client, timeout=6)
    assert frames is not None, "silent client was not disconnected"
    assert all(isinstance(frame, heartbeat.Heartbeat) for frame in frames)
    assert 1.5 <= time.monotonic() - started <= 6


def test_silent_client_is_disconnected_after_missed_heartbeats(broker: Any) -> None:
    with raw_client(broker) as client:
        assert_silent_client_is_dropped(client, tune_heartbeat=None)


@pytest.mark.kanin_only
def test_silent_client_is_disconnected_server_heartbeat_1(broker_factory: BrokerFactory) -> None:
    with broker_factory(heartbeat_s=1) as server, raw_client(server) as client:
        assert_silent_client_is_dropped(client, tune_heartbeat=1)


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


# -- unacked deliveries of a lost connection ----------------------------------------------------


async def test_unacked_messages_requeued_when_socket_drops(
    broker: Any, unique: Callable[[str], str]
) -> None:
    queue_name = unique("requeue")
    connection = await aio_pika.connect(broker.url, timeout=5)
    try:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name, auto_delete=False)
        for index in range(3):
            await channel.default_exchange.publish(
                aio_pika.Message(f"m{index}".encode()), routing_key=queue_name
            )
        with raw_client(broker) as client:
            client.handshake()
            client.open_channel(1)
            client.rpc(1, commands.Basic.Consume(queue=queue_name), commands.Basic.ConsumeOk)
            delivered = []
            for _ in range(3):
                deliver = client.expect(commands.Basic.Deliver, channel=1)
                assert deliver.redelivered is False
                delivered.append(b"".join(client.read_content(1)[1]))
            assert delivered == [b"m0", b"m1", b"m2"]
            # Leave without closing channel or connection, and without acking.
        bodies = []
        deadline = time.monotonic() + 5
        while len(bodies) < 3 and time.monotonic() < deadline:
            message = await queue.get(no_ack=False, fail=False, timeout=5)
            if message is None:
                await asyncio.sleep(0.05)
                continue
            assert message.redelivered is True
            bodies.append(message.body)
            await message.ack()
        assert bodies == [b"m0", b"m1", b"m2"]
        await queue.delete(if_unused=False, if_empty=False)
    finally:
        await connection.close()


# -- users (kanin configuration) ----------------------------------------------------------------


@pytest.mark.kanin_only
def test_configured_non_guest_user_logs_in(broker_factory: BrokerFactory) -> None:
    users = (UserSpec("alice", "pw"), UserSpec("guest", "guest"))
    with broker_factory(default_users=users) as server:
        alice = pika_params(server, credentials=pika.PlainCredentials("alice", "pw"))
        connection = pika.BlockingConnection(alice)
        try:
            assert connection.channel().queue_declare("", exclusive=True).method.queue
        finally:
            connection.close()
        wrong = pika_params(server, credentials=pika.PlainCredentials("alice", "guest"))
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(wrong)


@pytest.mark.kanin_only
def test_configured_tune_values_are_proposed(broker_factory: BrokerFactory) -> None:
    config = {"channel_max": 16, "frame_max": 8192, "heartbeat_s": 5}
    with broker_factory(**config) as server, raw_client(server) as client:
        tune = client.handshake()
        assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (16, 8192, 5)
