"""How messages become rows (header values as text) and how rows become bodies."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from kanin.spark.rows import body_bytes, header_text, headers_as_text, stream_offset


def test_header_values_become_text() -> None:
    assert header_text("eu") == "eu"
    assert header_text(b"raw") == "raw"
    assert header_text(7) == "7"
    assert header_text(True) == "true"
    assert header_text(Decimal("1.50")) == "1.50"
    assert header_text(datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2024-01-02T03:04:05+00:00"
    assert header_text(None) is None


def test_nested_header_values_become_json() -> None:
    assert header_text({"a": [1, b"x"], "b": None}) == '{"a":[1,"x"],"b":null}'
    assert headers_as_text({"n": 1, "tags": ["a", "b"]}) == {"n": "1", "tags": '["a","b"]'}
    assert headers_as_text(None) == {}


def test_a_stream_delivery_says_its_offset() -> None:
    assert stream_offset({"x-stream-offset": 12}) == 12
    with pytest.raises(ValueError, match="not a stream"):
        stream_offset({})


def test_bodies_are_bytes_or_utf8_text() -> None:
    assert body_bytes(b"\x00\x01") == b"\x00\x01"
    assert body_bytes(bytearray(b"ab")) == b"ab"
    assert body_bytes("héllo") == "héllo".encode()
    with pytest.raises(ValueError, match="null or non-text body"):
        body_bytes(None)
