"""wire_read's decoding of basic.deliver and content headers agrees with pamqp's on every
frame pamqp can encode."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands, frame
from pamqp.header import ContentHeader

from kanin.spark import wire_read

short = st.text(max_size=20)  # at most 80 bytes of UTF-8
name = st.text("abcXYZ019-_.:", max_size=20)  # what pamqp lets an exchange name be
octet = st.integers(0, 255)
table_value = st.one_of(st.integers(-(2**31), 2**31 - 1), short, st.booleans(), st.none())
table = st.dictionaries(st.text(min_size=1, max_size=10), table_value, max_size=4)
stamp = st.integers(0, 2**32 - 1).map(lambda s: datetime.fromtimestamp(s, tz=UTC))
PROPERTY_VALUES: dict[str, Any] = {
    "content_type": short,
    "content_encoding": short,
    "headers": table,
    "delivery_mode": st.sampled_from([1, 2]),  # all pamqp allows
    "priority": octet,
    "correlation_id": short,
    "reply_to": short,
    "expiration": short,
    "message_id": short,
    "timestamp": stamp,
    "message_type": short,
    "user_id": short,
    "app_id": short,
}  # cluster_id: pamqp sends only an empty one, and its object holds "" for none
properties = st.fixed_dictionaries({}, optional=PROPERTY_VALUES)


def payload(value: Any) -> bytes:
    """The frame's payload, as the broker would send it on channel 1."""
    return frame.marshal(value, 1)[7:-1]


@given(short, st.integers(0, 2**63 - 1), st.booleans(), name, short)  # pamqp: signed
def test_a_deliver_decodes_as_pamqp_decodes_it(
    tag: str, delivery_tag: int, redelivered: bool, exchange: str, key: str
) -> None:
    sent = commands.Basic.Deliver(tag, delivery_tag, redelivered, exchange, key)
    theirs = frame.unmarshal(frame.marshal(sent, 1))[2]

    mine = wire_read.deliver(payload(sent))

    assert mine is not None
    for name in ("consumer_tag", "delivery_tag", "redelivered", "exchange", "routing_key"):
        assert getattr(mine, name) == getattr(theirs, name), name


def test_any_other_method_is_left_to_pamqp() -> None:
    assert wire_read.deliver(payload(commands.Basic.Ack(5, multiple=True))) is None
    assert wire_read.deliver(payload(commands.Channel.Close(406, "no", 0, 0))) is None


@given(properties, st.integers(0, 2**40))
def test_a_content_header_decodes_as_pamqp_decodes_it(given: dict[str, Any], size: int) -> None:
    sent = ContentHeader(0, size, commands.Basic.Properties(**given))
    theirs = frame.unmarshal(frame.marshal(sent, 1))[2]

    body_size, mine = wire_read.content_header(payload(sent))

    assert body_size == theirs.body_size == size
    for name in PROPERTY_VALUES:
        assert getattr(mine, name) == getattr(theirs.properties, name), name


def test_a_short_string_past_the_frame_s_end_is_an_error_not_a_short_read() -> None:
    cut = payload(commands.Basic.Deliver("ctag", 1, False, "ex", "key"))[:-2]
    try:
        wire_read.deliver(cut)
    except ValueError as error:
        assert "past the end" in str(error)
    else:
        raise AssertionError("a truncated deliver decoded")
