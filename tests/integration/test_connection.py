"""Connection: protocol header, connection.start, authentication, vhosts, users.

The rest of the connection's behaviour is in test_connection_tuning.py (tune, heartbeats),
test_connection_lifecycle.py (channel vs connection errors, closing, lost connections)
and test_connection_frames.py (malformed and out-of-order frames).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import aio_pika
import amqp
import pika
import pika.exceptions
import pytest
from pamqp import commands

from helpers import BrokerFactory, pika_params, raw_client
from kanin.config import UserSpec
from rawamqp import RawClient, amqplain_response, plain_response

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


AMQP_0_9_HEADER = b"AMQP\x01\x01\x00\x09"  # what Perl's Net::AMQP sends, among others


def test_amqp_0_9_header_is_answered_as_0_9_1(broker: Any) -> None:
    # RabbitMQ 3.10 (rabbit_reader's handshake) treats the 0-9 header as 0-9-1: the same
    # connection.start, byte for byte, and 0-9-1 from then on.
    with raw_client(broker) as plain, raw_client(broker) as older:
        plain.send_protocol_header()
        older.send_protocol_header(AMQP_0_9_HEADER)
        assert older.read_raw_frame() == plain.read_raw_frame()


def test_client_sending_the_amqp_0_9_header_works_end_to_end(
    broker: Any, unique: Callable[[str], str]
) -> None:
    with raw_client(broker) as client:
        client.handshake(protocol_header=AMQP_0_9_HEADER)
        client.open_channel(1)
        declare = commands.Queue.Declare(queue=unique("amqp09"), exclusive=True)
        queue = client.rpc(1, declare, commands.Queue.DeclareOk).queue
        client.publish(1, b"from a 0-9 client", routing_key=queue)
        client.rpc(1, commands.Basic.Get(queue=queue, no_ack=True), commands.Basic.GetOk)
        _, chunks = client.read_content(1)
        assert b"".join(chunks) == b"from a 0-9 client"
        client.close_connection()


@pytest.mark.kanin_only
@pytest.mark.parametrize(
    "amqp_0_8_header",
    [b"AMQP\x01\x01\x08\x00", b"AMQP\x01\x01\x09\x01"],
    ids=["amqp-0-8", "amqp-0-8-as-on-the-amqp-site"],
)
def test_amqp_0_8_headers_are_refused(broker: Any, amqp_0_8_header: bytes) -> None:
    # Deliberate difference: RabbitMQ 3.10 answers these two 0-8 headers with a 0-8
    # connection.start (version 8-0) and speaks AMQP 0-8 from then on, whose methods differ
    # from 0-9-1's (channel.open-ok, access.request, ...). kanin speaks only 0-9-1, so it
    # refuses them as it refuses any other protocol: its own header, then close.
    with raw_client(broker) as client:
        client.send_raw(amqp_0_8_header)
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
        assert client.frames_until_closed(timeout=8) == []


def test_unknown_sasl_mechanism_drops_socket(broker: Any) -> None:
    with raw_client(broker) as client:
        send_start_ok(client, "NO-SUCH-MECHANISM", "x")
        # RabbitMQ 3.10: handshake error, no connection.close, socket closed (after ~3 s).
        assert client.frames_until_closed(timeout=8) == []


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
