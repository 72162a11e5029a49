"""The timestamp property: any 64-bit value goes through the broker unchanged.

AMQP's timestamp is an unsigned 64-bit integer with no range the broker checks. RabbitMQ
3.10 accepts every value (0, 2**64 - 1, values whose year no calendar library can hold)
and delivers the content header it was given. Decoders that turn timestamps into dates
(pamqp's does) cannot represent them all, so the broker must not need to.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pika
import pika.spec
import pytest
from pamqp import commands, encode, frame

from helpers import pika_params, raw_client
from rawamqp import RawClient, build_frame

FRAME_METHOD, FRAME_HEADER, FRAME_BODY = 1, 2, 3
TIMESTAMP_FLAG = 0x0040
HEADERS_FLAG = 0x2000
BODY = b"stamped"
TIMESTAMPS = [
    0,
    1,
    2**32,  # above 2**32 - 1, which pamqp would read as milliseconds
    253_402_300_800,  # 10000-01-01 in seconds: no datetime holds it
    2**63,
    2**64 - 1,
]


def header_payload(stamp: int, headers: dict[str, Any] | None = None) -> bytes:
    """A content header for BODY with this timestamp (and headers), byte for byte."""
    flags = TIMESTAMP_FLAG | (HEADERS_FLAG if headers is not None else 0)
    table = encode.field_table(headers) if headers is not None else b""
    return struct.pack(">HHQH", 60, 0, len(BODY), flags) + table + struct.pack(">Q", stamp)


def publish_raw(client: RawClient, routing_key: str, payload: bytes) -> None:
    client.send_raw(
        frame.marshal(commands.Basic.Publish(routing_key=routing_key), 1)
        + build_frame(FRAME_HEADER, 1, payload)
        + build_frame(FRAME_BODY, 1, BODY)
    )


def read_delivered(client: RawClient) -> tuple[bytes, bytes]:
    """After a publish: the next method frame's id bytes and the content header payload
    that follows it, read undecoded (pamqp's client-side decoder refuses such dates)."""
    frame_type, _, method = client.read_raw_frame()
    assert frame_type == FRAME_METHOD
    frame_type, _, payload = client.read_raw_frame()
    assert frame_type == FRAME_HEADER
    frame_type, _, body = client.read_raw_frame()
    assert (frame_type, body) == (FRAME_BODY, BODY)
    return method[:4], payload


def open_with_queue(client: RawClient, unique: Callable[[str], str]) -> str:
    client.handshake()
    client.open_channel(1)
    declare = commands.Queue.Declare(queue=unique("stamps"), exclusive=True)
    return client.rpc(1, declare, commands.Queue.DeclareOk).queue


@pytest.mark.parametrize("stamp", TIMESTAMPS)
def test_any_timestamp_comes_back_byte_for_byte_from_basic_get(
    broker: Any, unique: Callable[[str], str], stamp: int
) -> None:
    with raw_client(broker) as client:
        queue = open_with_queue(client, unique)
        sent = header_payload(stamp)
        publish_raw(client, queue, sent)
        client.send_method(1, commands.Basic.Get(queue=queue, no_ack=True))
        method, received = read_delivered(client)
        assert method == b"\x00\x3c\x00\x47"  # basic.get-ok
        assert received == sent


def test_any_timestamp_comes_back_byte_for_byte_to_a_consumer(
    broker: Any, unique: Callable[[str], str]
) -> None:
    with raw_client(broker) as client:
        queue = open_with_queue(client, unique)
        consume = commands.Basic.Consume(queue=queue, consumer_tag="stamps", no_ack=True)
        client.rpc(1, consume, commands.Basic.ConsumeOk)
        for stamp in TIMESTAMPS:
            sent = header_payload(stamp)
            publish_raw(client, queue, sent)
            method, received = read_delivered(client)
            assert method == b"\x00\x3c\x00\x3c"  # basic.deliver
            assert received == sent


def test_any_timestamp_survives_a_rewritten_content_header(
    broker: Any, unique: Callable[[str], str]
) -> None:
    # A BCC header is stripped before delivery, so the broker writes the header anew.
    with raw_client(broker) as client:
        queue = open_with_queue(client, unique)
        for stamp in TIMESTAMPS:
            publish_raw(client, "", header_payload(stamp, {"BCC": [queue]}))
            client.send_method(1, commands.Basic.Get(queue=queue, no_ack=True))
            _, received = read_delivered(client)
            properties = pika.spec.BasicProperties()
            properties.decode(received[12:])
            assert properties.timestamp == stamp
            assert not (properties.headers or {}).get("BCC")


@pytest.mark.parametrize("stamp", [1_700_000_000, 0, 2**64 - 1])
def test_pika_gets_back_the_timestamp_it_published(
    broker: Any, unique: Callable[[str], str], stamp: int
) -> None:
    with pika.BlockingConnection(pika_params(broker)) as connection:
        channel = connection.channel()
        queue = channel.queue_declare(unique("pika-stamps"), exclusive=True).method.queue
        channel.basic_publish("", queue, BODY, pika.BasicProperties(timestamp=stamp))
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        assert method is not None and body == BODY
        assert properties.timestamp == stamp
