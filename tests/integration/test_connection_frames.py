"""Connection: malformed and out-of-order frames get RabbitMQ's protocol errors.

Every case uses the raw client (tests/rawamqp.py) because real client libraries
refuse to send such bytes. Reply texts are RabbitMQ 3.10's, observed on the wire.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pika
import pytest
from pamqp import body, commands, header

from helpers import pika_params
from rawamqp import RawClient, build_frame, method_payload

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8


@contextmanager
def opened(endpoint: Any, frame_max: int | None = None) -> Iterator[RawClient]:
    """A raw client past connection.open, with channel 1 open."""
    with RawClient.connect(endpoint.host, endpoint.port) as client:
        client.handshake(frame_max=frame_max)
        client.open_channel(1)
        yield client


def connection_error(client: RawClient) -> tuple[int, str, int, int]:
    """The server's connection.close (answered with close-ok) as (code, text, class, method)."""
    close = client.expect_connection_close()
    return close.reply_code, close.reply_text, close.class_id, close.method_id


def pika_bystander(endpoint: Any) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika_params(endpoint, blocked_connection_timeout=None))


def publish_start(client: RawClient, channel: int = 1) -> None:
    client.send_method(channel, commands.Basic.Publish(routing_key="nowhere"))


# -- frame size ---------------------------------------------------------------------------------


def test_body_frame_larger_than_default_frame_max_is_501(broker: Any) -> None:
    with opened(broker) as client:
        publish_start(client)
        client.send_frame(1, header.ContentHeader(0, 131073, commands.Basic.Properties()))
        client.send_raw(build_frame(FRAME_BODY, 1, b"x" * 131073))
        # RabbitMQ 3.10: the limit shown is frame_max - 8, the payload that fits a frame.
        assert connection_error(client) == (
            501,
            "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,131073,131064}",
            0,
            0,
        )


def test_oversized_frame_is_refused_from_its_header_alone(broker: Any) -> None:
    with opened(broker) as client:
        # Announce a ~4 GiB frame and send nothing more: the server must not wait for it.
        client.send_raw(struct.pack(">BHI", FRAME_METHOD, 1, 0xFFFFFFF0))
        assert connection_error(client) == (
            501,
            "FRAME_ERROR - type 1, all octets = <<>>: {frame_too_large,4294967280,131064}",
            0,
            0,
        )


def test_method_frame_larger_than_negotiated_frame_max_is_501(broker: Any) -> None:
    with opened(broker, frame_max=4096) as client:
        client.send_raw(build_frame(FRAME_METHOD, 1, method_payload(50, 10, b"\0" * 4093)))
        assert connection_error(client) == (
            501,
            "FRAME_ERROR - type 1, all octets = <<>>: {frame_too_large,4097,4088}",
            0,
            0,
        )


def test_body_frame_over_negotiated_frame_max_is_501(broker: Any) -> None:
    with opened(broker, frame_max=4096) as client:
        publish_start(client)
        client.send_frame(1, header.ContentHeader(0, 4097, commands.Basic.Properties()))
        client.send_raw(build_frame(FRAME_BODY, 1, b"x" * 4097))
        assert connection_error(client) == (
            501,
            "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,4097,4088}",
            0,
            0,
        )


@pytest.mark.parametrize("payload_size", [4088, 4096])
def test_body_frames_up_to_frame_max_are_accepted(
    broker: Any, unique: Callable[[str], str], payload_size: int
) -> None:
    queue = unique("fits")
    payload = b"y" * payload_size
    with opened(broker, frame_max=4096) as client:
        client.rpc(1, commands.Queue.Declare(queue=queue, exclusive=True), commands.Queue.DeclareOk)
        client.send_method(1, commands.Basic.Publish(routing_key=queue))
        client.send_frame(1, header.ContentHeader(0, payload_size, commands.Basic.Properties()))
        # RabbitMQ 3.10: a payload of up to frame_max (not frame_max - 8) is tolerated inbound.
        client.send_raw(build_frame(FRAME_BODY, 1, payload))
        client.rpc(1, commands.Basic.Get(queue=queue, no_ack=True), commands.Basic.GetOk)
        _content, chunks = client.read_content(1)
        assert b"".join(chunks) == payload
        client.close_connection()


# -- framing errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(("end", "shown"), [(b"\x00", 0), (b"\xcd", 205)])
def test_bad_frame_end_octet_is_501(broker: Any, end: bytes, shown: int) -> None:
    with RawClient.connect(broker.host, broker.port) as client:
        client.handshake()
        client.send_raw(build_frame(FRAME_METHOD, 1, method_payload(20, 10, b"\0"), end=end))
        assert connection_error(client) == (
            501,
            "FRAME_ERROR - type 1, all octets = <<0,20,0,10,0>>: "
            f"{{invalid_frame_end_marker,{shown}}}",
            0,
            0,
        )


def test_unknown_frame_type_is_501(broker: Any) -> None:
    with opened(broker) as client:
        client.send_raw(build_frame(7, 1, b"abc"))
        assert connection_error(client) == (
            501,
            'FRAME_ERROR - type 7, all octets = <<"abc">>: unknown_frame',
            0,
            0,
        )


def test_empty_method_frame_is_501(broker: Any) -> None:
    with opened(broker) as client:
        client.send_raw(build_frame(FRAME_METHOD, 1, b""))
        assert connection_error(client) == (
            501,
            "FRAME_ERROR - type 1, all octets = <<>>: unknown_frame",
            0,
            0,
        )


def test_truncated_method_arguments_are_501(broker: Any) -> None:
    with opened(broker) as client:
        client.send_raw(build_frame(FRAME_METHOD, 1, method_payload(50, 10, b"\0\0\xff")))
        # RabbitMQ 3.10: blames queue.declare (50, 10).
        assert connection_error(client) == (501, "FRAME_ERROR - cannot decode <<0,0,255>>", 50, 10)


def test_protocol_header_mid_connection_is_read_as_a_frame(broker: Any) -> None:
    with opened(broker) as client:
        client.send_protocol_header()
        # RabbitMQ 3.10: "AMQP\0\0\x09\x01" parses as type 65 with size 0x50000009.
        assert connection_error(client) == (
            501,
            "FRAME_ERROR - type 65, all octets = <<>>: {frame_too_large,1342177289,131064}",
            0,
            0,
        )


@pytest.mark.parametrize(
    ("channel", "class_id", "method_id"),
    [(1, 60, 999), (1, 999, 10), (0, 10, 999)],
    ids=["basic-999", "class-999", "connection-999"],
)
def test_unknown_method_closes_only_that_connection(
    broker: Any, unique: Callable[[str], str], channel: int, class_id: int, method_id: int
) -> None:
    bystander = pika_bystander(broker)
    try:
        with opened(broker) as client:
            client.send_raw(build_frame(FRAME_METHOD, channel, method_payload(class_id, method_id)))
            frames = client.frames_until_closed(timeout=5)
            # RabbitMQ 3.10: the connection process crashes and the socket is closed without
            # any connection.close; a broker that does send one must use 540 or 503.
            assert frames is not None, "connection left open after an unknown method"
            codes = {f.reply_code for f in frames if isinstance(f, commands.Connection.Close)}
            assert codes <= {540, 503}
        channel_ = bystander.channel()
        queue = unique("bystander")
        channel_.queue_declare(queue, exclusive=True)
        channel_.basic_publish("", queue, b"fine")
        assert channel_.basic_get(queue, auto_ack=True)[2] == b"fine"
    finally:
        bystander.close()


@pytest.mark.kanin_only
@pytest.mark.parametrize(("channel", "class_id", "method_id"), [(1, 60, 999), (1, 999, 10)])
def test_unknown_method_gets_connection_close(
    broker: Any, channel: int, class_id: int, method_id: int
) -> None:
    # kanin deliberately answers malformed input with a protocol error and a close, so the
    # client learns why; RabbitMQ just drops the socket.
    with opened(broker) as client:
        client.send_raw(build_frame(FRAME_METHOD, channel, method_payload(class_id, method_id)))
        code, text, _class, _method = connection_error(client)
        assert (code, text.split(" - ")[0]) in {(540, "NOT_IMPLEMENTED"), (503, "COMMAND_INVALID")}


# -- frames out of order ------------------------------------------------------------------------

EXPECTED_METHOD = "UNEXPECTED_FRAME - expected method frame, got non method frame instead"


@pytest.mark.parametrize(
    ("channel", "content"),
    [
        (1, header.ContentHeader(0, 3, commands.Basic.Properties())),
        (1, body.ContentBody(b"abc")),
        (5, header.ContentHeader(0, 3, commands.Basic.Properties())),
    ],
    ids=[
        "content-header-without-publish",
        "content-body-without-publish",
        "content-header-on-unopened-channel",
    ],
)
def test_content_frame_without_publish_is_505(broker: Any, channel: int, content: Any) -> None:
    with opened(broker) as client:
        client.send_frame(channel, content)
        assert connection_error(client) == (505, EXPECTED_METHOD, 0, 0)


def test_body_after_empty_content_is_505(broker: Any) -> None:
    with opened(broker) as client:
        publish_start(client)
        client.send_frame(1, header.ContentHeader(0, 0, commands.Basic.Properties()))
        client.send_frame(1, body.ContentBody(b"extra"))
        assert connection_error(client) == (505, EXPECTED_METHOD, 0, 0)


def test_method_instead_of_content_header_is_505(broker: Any) -> None:
    with opened(broker) as client:
        publish_start(client)
        client.send_method(
            1, commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0)
        )
        # RabbitMQ 3.10: blames basic.publish (60, 40).
        assert connection_error(client) == (
            505,
            "UNEXPECTED_FRAME - expected content header for class 60, "
            "got non content header frame instead",
            60,
            40,
        )


def test_content_header_of_wrong_class_is_505(broker: Any) -> None:
    with opened(broker) as client:
        publish_start(client)
        client.send_raw(build_frame(FRAME_HEADER, 1, struct.pack(">HHQH", 50, 0, 3, 0)))
        assert connection_error(client) == (
            505,
            "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 instead",
            60,
            40,
        )


def test_heartbeat_on_a_channel_is_505(broker: Any) -> None:
    with opened(broker) as client:
        client.send_raw(build_frame(FRAME_HEARTBEAT, 1, b""))
        assert connection_error(client) == (
            505,
            "UNEXPECTED_FRAME - type 8, all octets = <<>>",
            0,
            0,
        )


# -- channel lifecycle errors are connection errors ----------------------------------------------


@pytest.mark.parametrize(
    ("channel", "method", "expected"),
    [
        (
            2,
            commands.Queue.Declare(exclusive=True),
            (504, "CHANNEL_ERROR - expected 'channel.open'", 50, 10),
        ),
        (1, commands.Channel.Open(), (504, "CHANNEL_ERROR - second 'channel.open' seen", 20, 10)),
        (
            0,
            commands.Channel.Open(),
            (504, "CHANNEL_ERROR - unexpected method in connection state running", 20, 10),
        ),
        (
            0,
            commands.Connection.TuneOk(channel_max=10, frame_max=4096),
            (504, "CHANNEL_ERROR - unexpected method in connection state running", 10, 31),
        ),
        (1, commands.Connection.Open(), (503, "COMMAND_INVALID - unimplemented method", 10, 40)),
    ],
    ids=[
        "method-on-unopened-channel-is-504",
        "second-channel-open-is-504",
        "channel-open-on-channel-zero-is-504",
        "tune-ok-after-open-is-504",
        "connection-method-on-a-channel-is-503",
    ],
)
def test_channel_lifecycle_error_closes_the_connection(
    broker: Any, channel: int, method: Any, expected: tuple[int, str, int, int]
) -> None:
    with opened(broker) as client:
        client.send_method(channel, method)
        assert connection_error(client) == expected
