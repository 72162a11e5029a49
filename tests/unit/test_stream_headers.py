"""The x-stream-offset header a stream writes into each message's stored content header:
OffsetHeaders (a template per distinct header) writes what encoding each whole would."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from kanin.amqp.frames import decode_properties
from kanin.amqp.tables import encode_header
from kanin.core.message import Message
from kanin.core.stream_args import OffsetHeaders, stream_offset_header

header_values = st.one_of(
    st.integers(-(2**31), 2**31 - 1), st.text(max_size=10), st.booleans(), st.none()
)
header_tables = st.dictionaries(st.text(min_size=1, max_size=8), header_values, max_size=4)


def message(headers: dict[str, Any] | None, body: bytes, **properties: Any) -> Message:
    props = commands.Basic.Properties(headers=headers, **properties)
    return Message("ex", "rk", encode_header(len(body), props), body, props)


@settings(max_examples=80, deadline=None)
@given(
    headers=st.one_of(st.none(), header_tables),
    bodies=st.lists(st.binary(max_size=50), min_size=1, max_size=4),
    offsets=st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=4),
    publisher_offset=st.booleans(),
)
def test_the_kept_template_writes_what_encoding_whole_writes(
    headers: dict[str, Any] | None,
    bodies: list[bytes],
    offsets: list[int],
    publisher_offset: bool,
) -> None:
    if publisher_offset:  # a publisher's own x-stream-offset is replaced
        headers = {**(headers or {}), "x-stream-offset": "mine"}
    kept = OffsetHeaders()
    for body in bodies:
        for offset in offsets:
            sent = message(headers, body, delivery_mode=2, message_id="m")
            expected = stream_offset_header(sent, offset)
            assert kept.header(sent, offset) == expected
            stored = decode_properties(expected)
            assert stored.headers["x-stream-offset"] == offset
            assert stored.message_id == "m"


def test_a_placeholder_that_could_be_read_two_ways_falls_back_to_encoding_whole() -> None:
    """A publisher's header holding the placeholder's own bytes: no template is kept."""
    kept = OffsetHeaders()
    placeholder = (0x4B616E696E4F6666).to_bytes(8, "big").decode("latin-1")
    trap = message({"a": placeholder}, b"body")
    assert placeholder == "KaninOff"
    for offset in (5, 6):
        assert kept.header(trap, offset) == stream_offset_header(trap, offset)
    assert list(kept._kept.values()) == [()]


def test_at_most_max_kept_templates_are_kept() -> None:
    kept = OffsetHeaders()
    for n in range(OffsetHeaders.MAX_KEPT + 10):
        sent = message({"n": n}, b"")
        assert kept.header(sent, n) == stream_offset_header(sent, n)
    assert len(kept._kept) <= OffsetHeaders.MAX_KEPT


def test_headers_taking_turns_each_keep_their_own_offset_gap() -> None:
    """The last header is kept apart from the templates: taking turns, each is still right."""
    kept = OffsetHeaders()
    turns = [message({"a": "1"}, b"x"), message(None, b"x"), message({"a": "1"}, b"xy")]
    for offset in range(9):
        sent = turns[offset % 3]
        assert kept.header(sent, offset) == stream_offset_header(sent, offset)
