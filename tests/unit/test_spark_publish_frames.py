"""The sink's own encoding of basic.publish and content frames gives the same bytes as
pamqp's, for the properties the sink sets and bodies that span several frames."""

from __future__ import annotations

import pytest
from pamqp import body, commands, frame, header

from kanin.spark.client import KaninSparkError
from kanin.spark.socket_publish import content_frames, publish_method_frame


def pamqp_frames(body_bytes: bytes, properties: commands.Basic.Properties, frame_max: int) -> bytes:
    parts = [frame.marshal(header.ContentHeader(0, len(body_bytes), properties), 1)]
    step = frame_max - 8
    for at in range(0, len(body_bytes), step):
        parts.append(frame.marshal(body.ContentBody(body_bytes[at : at + step]), 1))
    return b"".join(parts)


def test_the_publish_method_is_pamqp_s_mandatory_publish() -> None:
    expected = commands.Basic.Publish(exchange="orders", routing_key="eu.ä", mandatory=True)
    assert publish_method_frame("orders", "eu.ä") == frame.marshal(expected, 1)


@pytest.mark.parametrize("size", [0, 1, 4096 - 9, 4096 - 8, 10_000])
def test_content_frames_match_pamqp_for_bodies_of_any_size(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    headers = {"region": "eu", "x-deduplication-header": "j1:p0:r7"}
    expected = commands.Basic.Properties(
        headers=headers, delivery_mode=2, correlation_id="c-1", message_id="m-ü"
    )
    assert content_frames(data, headers, "m-ü", "c-1", 4096) == pamqp_frames(data, expected, 4096)


def test_no_correlation_id_and_no_headers_but_the_id() -> None:
    expected = commands.Basic.Properties(
        headers={"x-deduplication-header": "7"}, delivery_mode=2, message_id="7"
    )
    got = content_frames(b"seven", {"x-deduplication-header": "7"}, "7", None, 131072)
    assert got == pamqp_frames(b"seven", expected, 131072)


def test_an_id_longer_than_a_short_string_is_named() -> None:
    with pytest.raises(KaninSparkError, match=r"message id 'xxx.*longer than AMQP's 255 bytes"):
        content_frames(b"", {}, "x" * 256, None, 131072)
