"""The AMQP codec (kanin.amqp): framing, method decoding, fast paths and content assembly.

pamqp is the reference: whatever kanin's hand-written fast paths produce or accept must
agree with pamqp's spec-generated marshalling.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body as pamqp_body
from pamqp import commands, frame
from pamqp import header as pamqp_header
from pamqp import heartbeat as pamqp_heartbeat

from kanin.amqp import constants as C
from kanin.amqp.assembler import Content, ContentAssembler
from kanin.amqp.errors import AMQPError, ChannelError, ConnectionError_
from kanin.amqp.frames import (
    BodyFrame,
    Frame,
    FrameReader,
    HeaderFrame,
    HeartbeatFrame,
    MethodFrame,
    PublishFrames,
    decode_properties,
)
from kanin.amqp.methods import (
    decode_method,
    encode_ack,
    encode_content,
    encode_deliver_head,
    encode_heartbeat,
    encode_method,
)

FRAME_MAX = 131072
# RabbitMQ 3.10 answers method arguments it cannot decode with 501 FRAME_ERROR
# "cannot decode <<...>>" (rabbit_misc:frame_error), not 502 SYNTAX_ERROR.
UNDECODABLE = C.FRAME_ERROR

# -- helpers -------------------------------------------------------------------------------


def raw_frame(frame_type: int, channel: int, payload: bytes, end: bytes = b"\xce") -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + end


def shortstr(value: bytes) -> bytes:
    assert len(value) <= 255
    return bytes((len(value),)) + value


def method_fields(method: Any) -> dict[str, Any]:
    """The arguments of a pamqp method object (pamqp methods have no __eq__)."""
    return dict(method)


def describe(frame_: Frame) -> tuple[Any, ...]:
    """A comparable value for a decoded frame."""
    if isinstance(frame_, MethodFrame):
        return ("method", frame_.channel, frame_.method.name, method_fields(frame_.method))
    if isinstance(frame_, HeaderFrame):
        return ("header", frame_.channel, frame_.class_id, frame_.body_size, frame_.payload)
    if isinstance(frame_, BodyFrame):
        return ("body", frame_.channel, frame_.payload)
    return ("heartbeat", frame_.channel)


def feed_whole(data: bytes, frame_max: int = FRAME_MAX) -> list[Frame]:
    return FrameReader(frame_max).feed(data)


def feed_bytewise(data: bytes, frame_max: int = FRAME_MAX) -> list[Frame]:
    reader = FrameReader(frame_max)
    frames: list[Frame] = []
    for i in range(len(data)):
        frames += reader.feed(data[i : i + 1])
    return frames


def feed_chunks(
    data: bytes, sizes: list[int], frame_max: int = FRAME_MAX, whole_publishes: bool = False
) -> list[Frame]:
    reader = FrameReader(frame_max, whole_publishes)
    frames: list[Frame] = []
    offset = 0
    for size in sizes:
        frames += reader.feed(data[offset : offset + size])
        offset += size
    frames += reader.feed(data[offset:])
    return frames


def amqp_error(data: bytes, frame_max: int = FRAME_MAX, bytewise: bool = False) -> AMQPError:
    """Feed `data` and return the AMQPError it must raise."""
    with pytest.raises(AMQPError) as info:
        if bytewise:
            feed_bytewise(data, frame_max)
        else:
            feed_whole(data, frame_max)
    return info.value


def publish_frames(channel: int, body: bytes, exchange: str = "", routing_key: str = "rk") -> bytes:
    props = commands.Basic.Properties(content_type="text/plain", headers={"a": 1})
    return (
        frame.marshal(commands.Basic.Publish(exchange=exchange, routing_key=routing_key), channel)
        + frame.marshal(pamqp_header.ContentHeader(0, len(body), props), channel)
        + frame.marshal(pamqp_body.ContentBody(body), channel)
    )


def sample_stream() -> bytes:
    """A realistic client byte stream: several channels, content, heartbeats."""
    return b"".join(
        (
            frame.marshal(commands.Channel.Open(), 1),
            frame.marshal(
                commands.Queue.Declare(queue="q1", durable=True, arguments={"x-max-length": 10}), 1
            ),
            publish_frames(1, b"hello world"),
            frame.marshal(pamqp_heartbeat.Heartbeat(), 0),
            frame.marshal(commands.Channel.Open(), 2),
            publish_frames(2, b"x" * 300, exchange="amq.topic", routing_key="a.b"),
            frame.marshal(commands.Basic.Ack(delivery_tag=7, multiple=True), 1),
            frame.marshal(commands.Basic.Nack(delivery_tag=3, multiple=False, requeue=True), 2),
            frame.marshal(commands.Basic.Get(queue="q1", no_ack=True), 1),
            frame.marshal(
                commands.Connection.Close(
                    reply_code=200, reply_text="bye", class_id=0, method_id=0
                ),
                0,
            ),
        )
    )


# -- FrameReader on valid streams ----------------------------------------------------------


def test_whole_stream_gives_every_frame_in_order() -> None:
    frames = feed_whole(sample_stream())
    kinds = [describe(f)[0] for f in frames]
    assert kinds == [
        "method",
        "method",
        "method",
        "header",
        "body",
        "heartbeat",
        "method",
        "method",
        "header",
        "body",
        "method",
        "method",
        "method",
        "method",
    ]
    assert [f.channel for f in frames] == [1, 1, 1, 1, 1, 0, 2, 2, 2, 2, 1, 2, 1, 0]
    declare = frames[1]
    assert isinstance(declare, MethodFrame)
    assert isinstance(declare.method, commands.Queue.Declare)
    assert declare.method.queue == "q1"
    assert declare.method.durable is True
    assert declare.method.arguments == {"x-max-length": 10}
    header = frames[3]
    assert isinstance(header, HeaderFrame)
    assert (header.class_id, header.body_size) == (60, 11)
    body_frame = frames[4]
    assert isinstance(body_frame, BodyFrame)
    assert body_frame.payload == b"hello world"
    close = frames[-1]
    assert isinstance(close, MethodFrame)
    assert isinstance(close.method, commands.Connection.Close)
    assert close.method.reply_code == 200


def test_byte_by_byte_gives_the_same_frames_as_whole() -> None:
    data = sample_stream()
    whole = [describe(f) for f in feed_whole(data)]
    assert [describe(f) for f in feed_bytewise(data)] == whole


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=64), max_size=80))
def test_any_chunking_gives_the_same_frames_as_whole(sizes: list[int]) -> None:
    data = sample_stream()
    assert [describe(f) for f in feed_chunks(data, sizes)] == [
        describe(f) for f in feed_whole(data)
    ]


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=20), st.integers(min_value=0, max_value=200))
def test_a_frame_limit_leaves_the_rest_buffered_for_later_calls(limit: int, cut: int) -> None:
    """What the connection relies on to take turns: `limit` frames per call, the rest
    kept in order, whatever arrives meanwhile appended behind them."""
    data = sample_stream()
    whole = [describe(f) for f in feed_whole(data)]
    reader = FrameReader(FRAME_MAX)
    got = [describe(f) for f in reader.frames(data[:cut], limit)]
    assert len(got) <= limit
    reader.append(data[cut:])
    while reader.buffered:
        batch = [describe(f) for f in reader.frames(limit=limit)]
        assert 0 < len(batch) <= limit
        got += batch
    assert got == whole


def publishes_stream() -> bytes:
    """Publishes in the shapes the whole-publish path must take or leave alone."""
    header = pamqp_header.ContentHeader
    return b"".join(
        (
            sample_stream(),
            publish_frames(3, b""),  # no body frame at all
            publish_frames(3, b"abc"),
            # A body split over two frames: not one PublishFrames.
            frame.marshal(commands.Basic.Publish(exchange="", routing_key="k"), 4),
            frame.marshal(header(0, 6, commands.Basic.Properties()), 4),
            frame.marshal(pamqp_body.ContentBody(b"abc"), 4),
            frame.marshal(pamqp_body.ContentBody(b"def"), 4),
            # Header on another channel than its publish: left to the frame-by-frame path.
            frame.marshal(commands.Basic.Publish(exchange="", routing_key="k"), 5),
            frame.marshal(header(0, 1, commands.Basic.Properties()), 6),
            frame.marshal(pamqp_body.ContentBody(b"z"), 6),
            publish_frames(7, b"last"),
        )
    )


def expanded(frames: list[Frame]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for item in frames:
        parts = item.expand() if isinstance(item, PublishFrames) else [item]
        out += [describe(part) for part in parts]
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=64), max_size=80))
def test_whole_publishes_stand_for_exactly_the_frames_they_replace(sizes: list[int]) -> None:
    data = publishes_stream()
    got = feed_chunks(data, sizes, whole_publishes=True)
    assert expanded(got) == [describe(f) for f in feed_whole(data)]


def test_whole_publishes_are_made_when_all_three_frames_are_there() -> None:
    got = FrameReader(FRAME_MAX, whole_publishes=True).feed(publishes_stream())
    whole = [f for f in got if isinstance(f, PublishFrames)]
    # sample_stream's two, the empty-body one, "abc" and "last"; not the split or odd ones.
    assert [(f.channel, f.body) for f in whole] == [
        (1, b"hello world"),
        (2, b"x" * 300),
        (3, b""),
        (3, b"abc"),
        (7, b"last"),
    ]
    assert whole[1].args.routing_key == "a.b"


def test_a_whole_publish_counts_as_its_frames_against_the_limit() -> None:
    reader = FrameReader(FRAME_MAX, whole_publishes=True)
    reader.append(publish_frames(1, b"a") + publish_frames(1, b"b"))
    first = list(reader.frames(limit=4))  # one whole publish (3), then a lone method (1)
    assert [type(f) for f in first] == [PublishFrames, MethodFrame]
    rest = list(reader.frames(limit=4))
    assert [type(f) for f in rest] == [HeaderFrame, BodyFrame]


def test_partial_frame_stays_buffered_until_complete() -> None:
    data = frame.marshal(commands.Basic.Qos(prefetch_count=5), 3)
    reader = FrameReader(FRAME_MAX)
    assert reader.feed(data[:7]) == []
    assert reader.feed(data[7:-1]) == []
    (qos,) = reader.feed(data[-1:] + data[:3])
    assert isinstance(qos, MethodFrame)
    assert qos.channel == 3
    assert qos.method.prefetch_count == 5
    (again,) = reader.feed(data[3:])
    assert describe(again) == describe(qos)


def test_heartbeat_frame_on_channel_zero() -> None:
    (beat,) = feed_whole(encode_heartbeat())
    assert isinstance(beat, HeartbeatFrame)
    assert beat.channel == 0
    assert encode_heartbeat() == frame.marshal(pamqp_heartbeat.Heartbeat(), 0)


def test_frame_exactly_frame_max_is_accepted() -> None:
    payload = b"z" * (4096 - C.FRAME_OVERHEAD)
    (body_frame,) = feed_whole(raw_frame(C.FRAME_BODY, 1, payload), frame_max=4096)
    assert isinstance(body_frame, BodyFrame)
    assert body_frame.payload == payload


def test_frame_max_zero_means_no_limit() -> None:
    payload = b"z" * 300_000
    (body_frame,) = feed_whole(raw_frame(C.FRAME_BODY, 1, payload), frame_max=0)
    assert isinstance(body_frame, BodyFrame)
    assert len(body_frame.payload) == 300_000


# -- FrameReader on malformed streams ------------------------------------------------------


@pytest.mark.parametrize("bytewise", [False, True])
@pytest.mark.parametrize("frame_max", [4096, 10_000])
def test_frame_larger_than_frame_max_is_frame_error(frame_max: int, bytewise: bool) -> None:
    payload = b"z" * (frame_max + 1)
    error = amqp_error(raw_frame(C.FRAME_BODY, 1, payload), frame_max=frame_max, bytewise=bytewise)
    assert isinstance(error, ConnectionError_)
    assert error.reply_code == C.FRAME_ERROR
    assert error.reply_text.startswith("FRAME_ERROR - ")


@pytest.mark.parametrize("frame_max", [4096, 10_000])
def test_frame_up_to_eight_octets_over_frame_max_is_tolerated(frame_max: int) -> None:
    """RabbitMQ's FRAME_SIZE_FUDGE: a payload of up to frame_max (frame of frame_max + 8)
    is accepted, since many clients get the frame overhead wrong."""
    payload = b"z" * frame_max
    (body_frame,) = feed_whole(raw_frame(C.FRAME_BODY, 1, payload), frame_max=frame_max)
    assert isinstance(body_frame, BodyFrame)
    assert body_frame.payload == payload


def test_frame_max_is_checked_from_the_frame_header_alone() -> None:
    """A huge announced size fails as soon as the header is in, without buffering the body."""
    head = struct.pack(">BHI", C.FRAME_BODY, 1, 2**31) + b"\x00"
    error = amqp_error(head, frame_max=4096)
    assert error.reply_code == C.FRAME_ERROR


@pytest.mark.parametrize("bytewise", [False, True])
@pytest.mark.parametrize("end", [b"\x00", b"\xcd", b"\xff", b"A"])
def test_bad_frame_end_is_frame_error(end: bytes, bytewise: bool) -> None:
    data = raw_frame(C.FRAME_METHOD, 0, struct.pack(">HH", 10, 51), end=end)
    error = amqp_error(data, bytewise=bytewise)
    assert isinstance(error, ConnectionError_)
    assert error.reply_code == C.FRAME_ERROR


def test_bad_frame_end_after_good_frames_is_frame_error() -> None:
    good = frame.marshal(commands.Channel.Open(), 1)
    data = good + good[:-1] + b"\x00"
    error = amqp_error(data, bytewise=True)
    assert error.reply_code == C.FRAME_ERROR


@pytest.mark.parametrize("frame_type", [0, 4, 5, 7, 9, 65, 255])
def test_unknown_frame_type_is_frame_error(frame_type: int) -> None:
    error = amqp_error(raw_frame(frame_type, 1, b"abc"))
    assert isinstance(error, ConnectionError_)
    assert error.reply_code == C.FRAME_ERROR


@pytest.mark.parametrize("channel", [1, 2, 65535])
def test_heartbeat_on_non_zero_channel_is_a_connection_error(channel: int) -> None:
    """The brief asked for 501; RabbitMQ 3.10 (rabbit_reader) and kanin answer
    505 UNEXPECTED_FRAME. Either way it must close the connection."""
    error = amqp_error(raw_frame(C.FRAME_HEARTBEAT, channel, b""))
    assert isinstance(error, ConnectionError_)
    assert error.reply_code == C.UNEXPECTED_FRAME


@pytest.mark.parametrize(
    ("class_id", "method_id"), [(60, 999), (999, 10), (10, 12), (0, 0), (65535, 65535)]
)
def test_unknown_method_id_is_command_invalid(class_id: int, method_id: int) -> None:
    error = amqp_error(raw_frame(C.FRAME_METHOD, 1, struct.pack(">HH", class_id, method_id)))
    assert isinstance(error, ConnectionError_)
    assert error.reply_code == C.COMMAND_INVALID
    assert error.reply_text.startswith("COMMAND_INVALID - ")
    with pytest.raises(AMQPError) as direct:
        decode_method(struct.pack(">HH", class_id, method_id) + b"\x00" * 16)
    assert direct.value.reply_code == C.COMMAND_INVALID


@pytest.mark.parametrize("payload", [b"", b"\x00", b"\x00\x3c", b"\x00\x3c\x00"])
def test_method_frame_shorter_than_a_method_id_is_frame_error(payload: bytes) -> None:
    error = amqp_error(raw_frame(C.FRAME_METHOD, 1, payload))
    assert error.reply_code == C.FRAME_ERROR


TRUNCATION_SAMPLES: list[Any] = [
    commands.Queue.Declare(queue="orders", durable=True, arguments={"x-max-length": 10}),
    commands.Queue.Bind(queue="q", exchange="amq.direct", routing_key="k", arguments={"a": "b"}),
    commands.Exchange.Declare(exchange="ex", exchange_type="topic", arguments={"x": [1, "two"]}),
    commands.Basic.Publish(exchange="amq.topic", routing_key="a.b.c", mandatory=True),
    commands.Basic.Ack(delivery_tag=12345, multiple=True),
    commands.Basic.Nack(delivery_tag=1, multiple=False, requeue=True),
    commands.Basic.Reject(delivery_tag=77, requeue=False),
    commands.Basic.Consume(queue="q", consumer_tag="ctag", arguments={"x-priority": 3}),
    commands.Basic.Qos(prefetch_size=0, prefetch_count=10, global_=True),
    commands.Basic.Get(queue="q", no_ack=True),
    commands.Basic.Cancel(consumer_tag="ctag"),
    commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0),
    commands.Connection.Open(virtual_host="/"),
    commands.Connection.TuneOk(channel_max=2047, frame_max=131072, heartbeat=60),
    commands.Confirm.Select(nowait=False),
    commands.Queue.Delete(queue="q", if_unused=True),
]


@pytest.mark.parametrize("method", TRUNCATION_SAMPLES, ids=lambda m: m.name)
def test_truncated_method_arguments_are_rejected(method: Any) -> None:
    payload = frame.marshal(method, 1)[7:-1]
    for cut in range(4, len(payload)):
        error = amqp_error(raw_frame(C.FRAME_METHOD, 1, payload[:cut]))
        assert isinstance(error, ConnectionError_), cut
        assert error.reply_code == UNDECODABLE, (cut, error.reply_text)
        assert error.reply_text.startswith("FRAME_ERROR - cannot decode <<")
        assert (error.class_id, error.method_id) == (method.index >> 16, method.index & 0xFFFF)


def test_truncated_trailing_string_argument_is_rejected() -> None:
    start_ok = commands.Connection.StartOk(
        client_properties={"product": "x"},
        mechanism="PLAIN",
        response="\0guest\0guest",
        locale="en_US",
    )
    payload = frame.marshal(start_ok, 0)[7:-1]
    error = amqp_error(raw_frame(C.FRAME_METHOD, 0, payload[:-2]))  # locale cut to "en_"
    assert error.reply_code == UNDECODABLE


@pytest.mark.parametrize(
    "arguments",
    [
        shortstr(b"\xff\xfe") + shortstr(b"rk") + b"\x00",  # invalid UTF-8 exchange
        shortstr(b"ex") + b"\x05ab",  # routing key runs past the end
        shortstr(b"ex") + shortstr(b"rk"),  # bits octet missing
    ],
)
def test_malformed_publish_is_rejected(arguments: bytes) -> None:
    payload = struct.pack(">HHH", 60, 40, 0) + arguments
    error = amqp_error(raw_frame(C.FRAME_METHOD, 1, payload))
    assert error.reply_code == UNDECODABLE
    assert (error.class_id, error.method_id) == (60, 40)


def test_invalid_field_table_is_rejected() -> None:
    args = struct.pack(">H", 0) + shortstr(b"q") + b"\x00" + struct.pack(">I", 3) + b"\x01kZ"
    error = amqp_error(raw_frame(C.FRAME_METHOD, 1, struct.pack(">HH", 50, 10) + args))
    assert error.reply_code == UNDECODABLE
    assert (error.class_id, error.method_id) == (50, 10)


@pytest.mark.parametrize("payload_size", [0, 5, 13])
def test_content_header_too_short_is_frame_error(payload_size: int) -> None:
    payload = struct.pack(">HHQH", 60, 0, 5, 0)[:payload_size]
    error = amqp_error(raw_frame(C.FRAME_HEADER, 1, payload))
    assert error.reply_code == C.FRAME_ERROR


@pytest.mark.parametrize(
    "properties",
    [
        struct.pack(">H", 0x2000) + struct.pack(">I", 50) + b"\x01kS",  # headers overrun
        struct.pack(">H", 0x2000) + struct.pack(">I", 3) + b"\x01kZ",  # unknown field type
        struct.pack(">H", 0x1000),  # delivery-mode flagged but missing
        b"\x00",  # property flags truncated
    ],
)
def test_decode_properties_rejects_malformed_properties_with_syntax_error(
    properties: bytes,
) -> None:
    with pytest.raises(ConnectionError_) as info:
        decode_properties(struct.pack(">HHQ", 60, 0, 0) + properties)
    assert info.value.reply_code == C.SYNTAX_ERROR


def test_decode_properties_of_a_header_frame() -> None:
    props = commands.Basic.Properties(
        content_type="application/json",
        delivery_mode=2,
        priority=7,
        correlation_id="c-1",
        headers={"k": "v", "n": 5, "nested": {"t": True}},
    )
    data = frame.marshal(pamqp_header.ContentHeader(0, 42, props), 5)
    (header,) = feed_whole(data)
    assert isinstance(header, HeaderFrame)
    assert (header.channel, header.class_id, header.body_size) == (5, 60, 42)
    assert decode_properties(header.payload) == props


# -- fast paths vs pamqp -------------------------------------------------------------------


def generic_unmarshal(payload: bytes) -> Any:
    """pamqp's own, attribute-walking decoder for a method payload (method id included)."""
    (index,) = struct.unpack_from(">I", payload)
    method = commands.INDEX_MAPPING[index]()
    method.unmarshal(payload[4:])
    return method


any_shortstr = st.text(max_size=60).filter(lambda s: len(s.encode()) <= 255)
# pamqp encodes delivery tags as a *signed* long-long; stay in the range both agree on.
delivery_tags = st.integers(min_value=0, max_value=2**63 - 1)
exchange_names = st.from_regex(r"[a-zA-Z0-9\-_.:@#,/+ ]{0,127}", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(exchange=any_shortstr, routing_key=any_shortstr, bits=st.integers(0, 255))
def test_fast_publish_decoder_agrees_with_pamqp(exchange: str, routing_key: str, bits: int) -> None:
    payload = (
        struct.pack(">IH", commands.Basic.Publish.index, 0)
        + shortstr(exchange.encode())
        + shortstr(routing_key.encode())
        + bytes((bits,))
    )
    fast = decode_method(payload)
    assert type(fast) is commands.Basic.Publish
    assert method_fields(fast) == method_fields(generic_unmarshal(payload))
    assert (fast.exchange, fast.routing_key) == (exchange, routing_key)
    assert fast.mandatory is bool(bits & 1)
    assert fast.immediate is bool(bits & 2)


@settings(max_examples=300, deadline=None)
@given(tag=delivery_tags, bits=st.integers(0, 255))
def test_fast_ack_decoder_agrees_with_pamqp(tag: int, bits: int) -> None:
    payload = struct.pack(">IQB", commands.Basic.Ack.index, tag, bits)
    fast = decode_method(payload)
    assert type(fast) is commands.Basic.Ack
    assert method_fields(fast) == method_fields(generic_unmarshal(payload))
    assert fast.delivery_tag == tag
    assert fast.multiple is bool(bits & 1)


def test_fast_ack_decoder_reads_delivery_tag_as_unsigned() -> None:
    """delivery-tag is an unsigned longlong in the spec (pamqp would read it signed)."""
    payload = struct.pack(">IQB", commands.Basic.Ack.index, 2**64 - 1, 1)
    assert decode_method(payload).delivery_tag == 2**64 - 1


@settings(max_examples=300, deadline=None)
@given(
    channel=st.integers(0, 65535),
    consumer_tag=any_shortstr,
    delivery_tag=delivery_tags,
    redelivered=st.booleans(),
    exchange=exchange_names,
    routing_key=any_shortstr,
)
def test_encode_deliver_head_is_byte_identical_to_pamqp(
    channel: int,
    consumer_tag: str,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
) -> None:
    ours = encode_deliver_head(
        channel,
        consumer_tag.encode(),
        delivery_tag,
        redelivered,
        exchange.encode(),
        routing_key.encode(),
    )
    deliver = commands.Basic.Deliver(
        consumer_tag=consumer_tag,
        delivery_tag=delivery_tag,
        redelivered=redelivered,
        exchange=exchange,
        routing_key=routing_key,
    )
    assert ours == frame.marshal(deliver, channel)
    assert ours == encode_method(channel, deliver)


@settings(max_examples=300, deadline=None)
@given(channel=st.integers(0, 65535), delivery_tag=delivery_tags, multiple=st.booleans())
def test_encode_ack_is_byte_identical_to_pamqp(
    channel: int, delivery_tag: int, multiple: bool
) -> None:
    ours = encode_ack(channel, delivery_tag, multiple)
    ack = commands.Basic.Ack(delivery_tag=delivery_tag, multiple=multiple)
    assert ours == frame.marshal(ack, channel)
    (decoded,) = feed_whole(ours)
    assert isinstance(decoded, MethodFrame)
    assert decoded.channel == channel
    assert (decoded.method.delivery_tag, decoded.method.multiple) == (delivery_tag, multiple)


def test_encode_method_matches_pamqp_for_a_method_with_a_table() -> None:
    method = commands.Queue.DeclareOk(queue="amq.gen-abc", message_count=3, consumer_count=1)
    assert encode_method(9, method) == frame.marshal(method, 9)


# -- encode_content ------------------------------------------------------------------------


def header_payload(body_size: int) -> bytes:
    props = commands.Basic.Properties(content_type="text/plain", message_id="m1")
    return pamqp_header.ContentHeader(0, body_size, props).marshal()


@pytest.mark.parametrize("frame_max", [4096, 5000, 131072])
@pytest.mark.parametrize(
    "size", [0, 1, 4087, 4088, 4089, 8176, 8177, 10_000, 131063, 131064, 300_001]
)
def test_encode_content_splits_and_reassembles(frame_max: int, size: int) -> None:
    body = random.Random(size).randbytes(size)
    head = header_payload(size)
    data = b"".join(encode_content(7, head, body, frame_max))
    frames = feed_whole(data, frame_max=frame_max)
    header, *bodies = frames
    assert isinstance(header, HeaderFrame)
    assert (header.channel, header.body_size, header.payload) == (7, size, head)
    chunk = frame_max - C.FRAME_OVERHEAD
    assert len(bodies) == -(-size // chunk)  # ceil; no body frame for an empty body
    for piece in bodies:
        assert isinstance(piece, BodyFrame)
        assert piece.channel == 7
        assert 0 < len(piece.payload) <= chunk
    assert all(len(p.payload) == chunk for p in bodies[:-1])  # type: ignore[union-attr]
    assert b"".join(p.payload for p in bodies) == body  # type: ignore[union-attr]
    assembler = ContentAssembler(max_body_bytes=10**7)
    assembler.start(commands.Basic.Publish(routing_key="r"))
    done = assembler.on_header(header)
    for piece in bodies:
        assert done is None
        assert isinstance(piece, BodyFrame)
        done = assembler.on_body(piece)
    assert done is not None
    assert done.body == body


def test_encode_content_without_frame_max_sends_one_body_frame() -> None:
    body = b"b" * 200_000
    parts = encode_content(1, header_payload(len(body)), body, 0)
    frames = feed_whole(b"".join(parts), frame_max=0)
    assert len(frames) == 2
    assert isinstance(frames[1], BodyFrame)
    assert frames[1].payload == body


# -- ContentAssembler ----------------------------------------------------------------------


def header_frame(body_size: int, class_id: int = 60, channel: int = 1) -> HeaderFrame:
    payload = struct.pack(">HHQH", class_id, 0, body_size, 0)
    return HeaderFrame(channel, class_id, body_size, payload)


def publish() -> commands.Basic.Publish:
    return commands.Basic.Publish(exchange="", routing_key="q")


def test_assembler_header_without_publish_is_unexpected_frame() -> None:
    assembler = ContentAssembler(1024)
    with pytest.raises(ConnectionError_) as info:
        assembler.on_header(header_frame(3))
    assert info.value.reply_code == C.UNEXPECTED_FRAME


def test_assembler_body_without_publish_is_unexpected_frame() -> None:
    assembler = ContentAssembler(1024)
    with pytest.raises(ConnectionError_) as info:
        assembler.on_body(BodyFrame(1, b"abc"))
    assert info.value.reply_code == C.UNEXPECTED_FRAME


def test_assembler_body_while_waiting_for_header_is_unexpected_frame() -> None:
    assembler = ContentAssembler(1024)
    assembler.start(publish())
    with pytest.raises(ConnectionError_) as info:
        assembler.on_body(BodyFrame(1, b"abc"))
    assert info.value.reply_code == C.UNEXPECTED_FRAME


def test_assembler_method_while_waiting_for_header_is_unexpected_frame() -> None:
    assembler = ContentAssembler(1024)
    assembler.start(publish())
    assert not assembler.idle
    with pytest.raises(ConnectionError_) as info:
        assembler.expect_method()
    assert info.value.reply_code == C.UNEXPECTED_FRAME
    assert "expected content header for class 60" in info.value.reply_text


def test_assembler_second_publish_while_collecting_body_is_unexpected_frame() -> None:
    assembler = ContentAssembler(1024)
    assembler.start(publish())
    assert assembler.on_header(header_frame(10)) is None
    assert assembler.on_body(BodyFrame(1, b"12345")) is None
    with pytest.raises(ConnectionError_) as info:
        assembler.start(publish())
    assert info.value.reply_code == C.UNEXPECTED_FRAME


def test_assembler_second_header_is_unexpected_frame() -> None:
    assembler = ContentAssembler(1024)
    assembler.start(publish())
    assembler.on_header(header_frame(10))
    with pytest.raises(ConnectionError_) as info:
        assembler.on_header(header_frame(10))
    assert info.value.reply_code == C.UNEXPECTED_FRAME


def test_assembler_header_of_another_class_is_unexpected_frame() -> None:
    assembler = ContentAssembler(1024)
    assembler.start(publish())
    with pytest.raises(ConnectionError_) as info:
        assembler.on_header(header_frame(3, class_id=50))
    assert info.value.reply_code == C.UNEXPECTED_FRAME


def test_assembler_body_longer_than_announced_is_frame_error() -> None:
    assembler = ContentAssembler(1024)
    assembler.start(publish())
    assembler.on_header(header_frame(5))
    with pytest.raises(ConnectionError_) as info:
        assembler.on_body(BodyFrame(1, b"123456"))
    assert info.value.reply_code == C.FRAME_ERROR


def test_assembler_body_longer_than_announced_over_several_frames_is_frame_error() -> None:
    assembler = ContentAssembler(1024)
    assembler.start(publish())
    assembler.on_header(header_frame(5))
    assert assembler.on_body(BodyFrame(1, b"123")) is None
    with pytest.raises(ConnectionError_) as info:
        assembler.on_body(BodyFrame(1, b"456"))
    assert info.value.reply_code == C.FRAME_ERROR


def test_assembler_body_split_over_many_frames_reassembles() -> None:
    body = bytes(range(256)) * 40
    assembler = ContentAssembler(1 << 20)
    method = publish()
    assembler.start(method)
    header = header_frame(len(body))
    assert assembler.on_header(header) is None
    result: Content | None = None
    pieces = [body[i : i + 97] for i in range(0, len(body), 97)]
    for i, piece in enumerate(pieces):
        result = assembler.on_body(BodyFrame(1, piece))
        assert (result is None) == (i < len(pieces) - 1)
    assert result is not None
    assert result.body == body
    assert result.method is method
    assert result.header is header
    assert assembler.idle


def test_assembler_empty_body_frames_in_between_are_harmless() -> None:
    assembler = ContentAssembler(1024)
    assembler.start(publish())
    assembler.on_header(header_frame(4))
    assert assembler.on_body(BodyFrame(1, b"")) is None
    assert assembler.on_body(BodyFrame(1, b"ab")) is None
    assert assembler.on_body(BodyFrame(1, b"")) is None
    done = assembler.on_body(BodyFrame(1, b"cd"))
    assert done is not None
    assert done.body == b"abcd"


def test_assembler_zero_length_body_completes_at_header() -> None:
    assembler = ContentAssembler(1024)
    method = publish()
    assembler.start(method)
    done = assembler.on_header(header_frame(0))
    assert done is not None
    assert done.body == b""
    assert done.method is method
    assert assembler.idle
    with pytest.raises(ConnectionError_) as info:  # no body frame is expected any more
        assembler.on_body(BodyFrame(1, b""))
    assert info.value.reply_code == C.UNEXPECTED_FRAME


def test_assembler_message_above_max_size_is_precondition_failed_on_the_channel() -> None:
    assembler = ContentAssembler(max_body_bytes=100)
    assembler.start(publish())
    with pytest.raises(ChannelError) as info:
        assembler.on_header(header_frame(101))
    error = info.value
    assert not isinstance(error, ConnectionError_)
    assert error.reply_code == C.PRECONDITION_FAILED
    assert error.reply_text == (
        "PRECONDITION_FAILED - message size 101 is larger than configured max size 100"
    )
    assert (error.class_id, error.method_id) == (60, 40)
    # refused at the header: the assembler is idle again for the next message
    assert assembler.idle
    assembler.start(publish())
    done = assembler.on_header(header_frame(100))
    assert done is None
    done = assembler.on_body(BodyFrame(1, b"x" * 100))
    assert done is not None
    assert len(done.body) == 100


def test_assembler_handles_consecutive_messages() -> None:
    assembler = ContentAssembler(1024)
    bodies = [b"one", b"", b"three", b"x" * 1000]
    for expected in bodies:
        assembler.expect_method()  # a method between messages is fine
        assembler.start(publish())
        done = assembler.on_header(header_frame(len(expected)))
        if expected:
            assert done is None
            done = assembler.on_body(BodyFrame(1, expected))
        assert done is not None
        assert done.body == expected
