"""Headers the broker must carry unchanged through dead-lettering, and headers nested
too deep to accept.

Dead-lettering re-encodes a message's headers (it adds x-death), so every header the
broker accepted must encode again; a message it confirmed must never be lost there.
Raw frames throughout: client libraries cannot send some of these values (pika has no
floats) and their decoders recurse once per nesting level.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pamqp import commands
from pamqp import frame as pamqp_frame

from kanin.amqp.tables import MAX_TABLE_DEPTH
from kanin.testing.embedded import running_broker
from rawamqp import RawClient, build_frame

FRAME_METHOD, FRAME_HEADER, FRAME_BODY = 1, 2, 3
HEADERS, DELIVERY_MODE = 0x2000, 0x1000
GET_OK, GET_EMPTY, BASIC_ACK = b"\x00\x3c\x00\x47", b"\x00\x3c\x00\x48", b"\x00\x3c\x00\x50"


@contextmanager
def opened(endpoint: Any) -> Iterator[RawClient]:
    with RawClient.connect(endpoint.host, endpoint.port) as client:
        client.handshake()
        client.open_channel(1)
        yield client


def table(fields: bytes) -> bytes:
    return struct.pack(">I", len(fields)) + fields


def nested_field(name: bytes, depth: int) -> bytes:
    """A field whose value is a table nesting `depth` levels: {"n": {"n": ... {}}}."""
    inner = table(b"")
    for _ in range(depth - 1):
        inner = table(b"\x01nF" + inner)
    return bytes((len(name),)) + name + b"F" + inner


# Field values that decode to Python values pamqp cannot encode as they came.
DOUBLE = b"\x06doubled" + struct.pack(">d", 1e300)  # beyond a 32-bit float
BINARY = b"\x06binaryS" + struct.pack(">I", 3) + b"\xff\xfe\x00"  # not UTF-8


def properties(fields: bytes, persistent: bool = False) -> bytes:
    flags = HEADERS | (DELIVERY_MODE if persistent else 0)
    return struct.pack(">H", flags) + table(fields) + (b"\x02" if persistent else b"")


def publish(client: RawClient, queue: str, props: bytes, body: bytes = b"payload") -> None:
    header = struct.pack(">HHQ", 60, 0, len(body)) + props
    method = pamqp_frame.marshal(commands.Basic.Publish(exchange="", routing_key=queue), 1)
    client.send_raw(
        method + build_frame(FRAME_HEADER, 1, header) + build_frame(FRAME_BODY, 1, body)
    )


def basic_get(client: RawClient, queue: str) -> bytes | None:
    """The content-header payload of the next message on `queue`, or None if empty."""
    client.send_method(1, commands.Basic.Get(queue=queue))
    frame_type, _, payload = client.read_raw_frame()
    assert frame_type == FRAME_METHOD and payload[:4] in (GET_OK, GET_EMPTY), payload[:40]
    if payload[:4] == GET_EMPTY:
        return None
    _, _, header = client.read_raw_frame()
    _, _, body = client.read_raw_frame()
    assert body == b"payload"
    return header


def wait_get(client: RawClient, queue: str) -> bytes:
    """Dead-lettering happens after the reject is handled: poll, a bounded number of times."""
    for _ in range(200):
        header = basic_get(client, queue)
        if header is not None:
            return header
    raise AssertionError(f"nothing arrived on {queue}")


def declare_pair(client: RawClient, source: str, target: str, durable: bool = False) -> None:
    client.rpc(1, commands.Queue.Declare(queue=target, durable=durable), commands.Queue.DeclareOk)
    arguments = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": target}
    client.rpc(
        1,
        commands.Queue.Declare(queue=source, durable=durable, arguments=arguments),
        commands.Queue.DeclareOk,
    )


def publish_confirmed(client: RawClient, queue: str, props: bytes) -> None:
    client.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    publish(client, queue, props)
    frame_type, _, payload = client.read_raw_frame()
    assert (frame_type, payload[:4]) == (FRAME_METHOD, BASIC_ACK), payload[:80]


def reject_and_fetch_dead_letter(client: RawClient, source: str, target: str) -> bytes:
    wait_get(client, source)
    client.send_method(1, commands.Basic.Reject(delivery_tag=1, requeue=False))
    return wait_get(client, target)


FIELDS = nested_field(b"deep", MAX_TABLE_DEPTH - 1) + DOUBLE + BINARY


def test_accepted_headers_are_dead_lettered_intact(
    broker: Any, unique: Callable[[str], str]
) -> None:
    source, target = unique("src"), unique("dlq")
    with opened(broker) as client:
        declare_pair(client, source, target)
        publish_confirmed(client, source, properties(FIELDS))
        dead = reject_and_fetch_dead_letter(client, source, target)
    # Each field comes back byte for byte, beside the x-death the broker added.
    for field in (nested_field(b"deep", MAX_TABLE_DEPTH - 1), DOUBLE, BINARY):
        assert field in dead
    assert b"x-death" in dead


@pytest.mark.kanin_only
def test_a_persistent_message_dead_letters_intact_after_a_restart(tmp_path: Path) -> None:
    # After a restart the headers are decoded from the store's bytes, then re-encoded.
    with running_broker(data_dir=tmp_path) as broker, opened(broker) as client:
        declare_pair(client, "deep-src", "deep-dlq", durable=True)
        publish_confirmed(client, "deep-src", properties(FIELDS, persistent=True))
    with running_broker(data_dir=tmp_path) as broker, opened(broker) as client:
        dead = reject_and_fetch_dead_letter(client, "deep-src", "deep-dlq")
    for field in (nested_field(b"deep", MAX_TABLE_DEPTH - 1), DOUBLE, BINARY):
        assert field in dead


@pytest.mark.kanin_only
@pytest.mark.parametrize("depth", [MAX_TABLE_DEPTH + 1, 15_000])  # 15,000: about 90 KB
def test_too_deep_headers_close_the_connection_without_a_traceback(
    broker: Any, depth: int, caplog: pytest.LogCaptureFixture
) -> None:
    # RabbitMQ 3.10 accepts any depth that fits in a frame; kanin refuses past its bound
    # with the error any malformed content header gets (kanin/amqp/tables.py says why).
    caplog.set_level(logging.INFO)
    with opened(broker) as client:
        publish(client, "anywhere", properties(nested_field(b"deep", depth - 1)))
        close = client.expect_connection_close()
        assert client.wait_closed()
    assert (close.reply_code, close.reply_text) == (
        502,
        "SYNTAX_ERROR - invalid content header: field table nested deeper than "
        f"{MAX_TABLE_DEPTH} levels",
    )
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []
