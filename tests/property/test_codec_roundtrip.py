"""Property tests: pamqp-marshalled frames come back equal through kanin's codec, and the
per-channel ledgers agree with simple models under random operation sequences."""

from __future__ import annotations

import copy
import datetime
import itertools
from typing import Any, cast

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)
from pamqp import commands, frame
from pamqp import header as pamqp_header

from kanin.amqp import constants as C
from kanin.amqp.assembler import ContentAssembler
from kanin.amqp.errors import ChannelError
from kanin.amqp.frames import (
    BodyFrame,
    Frame,
    FrameReader,
    HeaderFrame,
    MethodFrame,
    decode_properties,
)
from kanin.amqp.methods import DeliveryEncoder, encode_content, encode_deliver_head
from kanin.amqp.tables import encode_header
from kanin.core.confirms import ConfirmLedger
from kanin.core.memory import MemoryMonitor
from kanin.core.message import Entry
from kanin.core.queues import ClassicQueue
from kanin.core.unacked import Unacked, UnackedLedger
from kanin.testing.clock import FakeScheduler

# -- value strategies ----------------------------------------------------------------------

LEDGER_QUEUE = ClassicQueue("q", "/", FakeScheduler(), MemoryMonitor(2**40))


def shortstr(min_size: int = 0, max_size: int = 40) -> st.SearchStrategy[str]:
    return st.text(min_size=min_size, max_size=max_size).filter(
        lambda s: len(s.encode("utf-8")) <= 255
    )


# exchange and queue names pamqp agrees to marshal
names = st.from_regex(r"[a-zA-Z0-9\-_.:@#,/+ ]{0,60}", fullmatch=True)
octets = st.integers(0, 2**8 - 1)
shorts = st.integers(0, 2**16 - 1)
longs = st.integers(0, 2**32 - 1)
# delivery tags: the spec's unsigned longlong, within pamqp's signed encoder
delivery_tags = st.integers(0, 2**63 - 1)
channels = st.integers(0, 2**16 - 1)

timestamps = st.integers(0, 2**32 - 1).map(
    lambda s: datetime.datetime.fromtimestamp(s, tz=datetime.UTC)
)
table_keys = st.text(min_size=1, max_size=20).filter(lambda k: len(k.encode("utf-8")) <= 128)
scalar_values = st.one_of(
    st.booleans(),
    st.integers(-(2**7), 2**7 - 1),
    st.integers(-(2**15), 2**16 - 1),
    st.integers(-(2**31), 2**32 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=30),
    st.binary(max_size=30).map(bytearray),
    st.floats(width=32, allow_nan=False),
    timestamps,
    st.none(),
)
field_values = st.recursive(
    scalar_values,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(table_keys, children, max_size=4)
    ),
    max_leaves=12,
)
field_tables = st.dictionaries(table_keys, field_values, max_size=6)


# -- method strategies ---------------------------------------------------------------------

methods = st.one_of(
    st.builds(
        commands.Basic.Publish,
        exchange=names,
        routing_key=shortstr(),
        mandatory=st.booleans(),
        immediate=st.booleans(),
    ),
    st.builds(
        commands.Basic.Deliver,
        consumer_tag=shortstr(),
        delivery_tag=delivery_tags,
        redelivered=st.booleans(),
        exchange=names,
        routing_key=shortstr(),
    ),
    st.builds(commands.Basic.Ack, delivery_tag=delivery_tags, multiple=st.booleans()),
    st.builds(
        commands.Basic.Nack,
        delivery_tag=delivery_tags,
        multiple=st.booleans(),
        requeue=st.booleans(),
    ),
    st.builds(commands.Basic.Reject, delivery_tag=delivery_tags, requeue=st.booleans()),
    st.builds(
        commands.Basic.Consume,
        queue=names,
        consumer_tag=shortstr(),
        no_local=st.booleans(),
        no_ack=st.booleans(),
        exclusive=st.booleans(),
        nowait=st.booleans(),
        arguments=field_tables,
    ),
    st.builds(
        commands.Basic.Qos, prefetch_size=longs, prefetch_count=shorts, global_=st.booleans()
    ),
    st.builds(commands.Basic.Get, queue=names, no_ack=st.booleans()),
    st.builds(
        commands.Basic.GetOk,
        delivery_tag=delivery_tags,
        redelivered=st.booleans(),
        exchange=names,
        routing_key=shortstr(),
        message_count=longs,
    ),
    st.builds(
        commands.Queue.Declare,
        queue=names,
        passive=st.booleans(),
        durable=st.booleans(),
        exclusive=st.booleans(),
        auto_delete=st.booleans(),
        nowait=st.booleans(),
        arguments=field_tables,
    ),
    st.builds(
        commands.Exchange.Declare,
        exchange=names,
        exchange_type=names,
        passive=st.booleans(),
        durable=st.booleans(),
        auto_delete=st.booleans(),
        internal=st.booleans(),
        nowait=st.booleans(),
        arguments=field_tables,
    ),
    st.builds(
        commands.Connection.Start,
        version_major=octets,
        version_minor=octets,
        server_properties=field_tables,
        mechanisms=st.text(min_size=1, max_size=40),
        locales=st.text(min_size=1, max_size=40),
    ),
    st.builds(commands.Connection.Tune, channel_max=shorts, frame_max=longs, heartbeat=shorts),
    st.builds(
        commands.Connection.Close,
        reply_code=shorts,
        reply_text=shortstr(),
        class_id=shorts,
        method_id=shorts,
    ),
    st.builds(
        commands.Channel.Close,
        reply_code=shorts,
        reply_text=shortstr(),
        class_id=shorts,
        method_id=shorts,
    ),
)


def fields(method: Any) -> dict[str, Any]:
    return dict(method)


def feed_in_chunks(data: bytes, cuts: list[int], frame_max: int = 0) -> list[Frame]:
    reader = FrameReader(frame_max)
    frames: list[Frame] = []
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    for start, end in itertools.pairwise(points):
        frames += reader.feed(data[start:end])
    return frames


chunk_cuts = st.lists(st.integers(0, 20_000), max_size=40)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sent=st.lists(st.tuples(channels, methods), min_size=1, max_size=8), cuts=chunk_cuts)
def test_pamqp_methods_round_trip_through_frame_reader(
    sent: list[tuple[int, Any]], cuts: list[int]
) -> None:
    data = b"".join(frame.marshal(method, channel) for channel, method in sent)
    received = feed_in_chunks(data, cuts)
    assert len(received) == len(sent)
    for (channel, method), got in zip(sent, received, strict=True):
        assert isinstance(got, MethodFrame)
        assert got.channel == channel
        assert type(got.method) is type(method)
        assert fields(got.method) == fields(method)


@settings(max_examples=200, deadline=None)
@given(sent=st.lists(st.tuples(channels, methods), min_size=1, max_size=5))
def test_byte_by_byte_feeding_equals_whole_feeding(sent: list[tuple[int, Any]]) -> None:
    data = b"".join(frame.marshal(method, channel) for channel, method in sent)
    whole = FrameReader(0).feed(data)
    reader = FrameReader(0)
    bytewise: list[Frame] = []
    for i in range(len(data)):
        bytewise += reader.feed(data[i : i + 1])
    assert [(f.channel, fields(cast(MethodFrame, f).method)) for f in bytewise] == [
        (f.channel, fields(cast(MethodFrame, f).method)) for f in whole
    ]


# -- content header properties -------------------------------------------------------------

properties = st.builds(
    commands.Basic.Properties,
    content_type=st.none() | shortstr(min_size=1),
    content_encoding=st.none() | shortstr(min_size=1),
    headers=st.none() | field_tables,
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | octets,
    correlation_id=st.none() | shortstr(min_size=1),
    reply_to=st.none() | shortstr(min_size=1),
    expiration=st.none() | st.integers(0, 10**9).map(str),
    message_id=st.none() | shortstr(min_size=1),
    timestamp=st.none() | timestamps,
    message_type=st.none() | shortstr(min_size=1),
    user_id=st.none() | shortstr(min_size=1),
    app_id=st.none() | shortstr(min_size=1),
)


def as_kanin_decodes(props: commands.Basic.Properties) -> commands.Basic.Properties:
    """`props` as kanin decodes them: the timestamp property is the integer on the wire
    (pamqp marshals a datetime as its whole seconds), not a datetime."""
    expected = copy.copy(props)
    if props.timestamp is not None:
        expected.timestamp = int(props.timestamp.timestamp())
    return expected


@settings(max_examples=200, deadline=None)
@given(
    props=properties.map(as_kanin_decodes),
    stamp=st.integers(0, 2**64 - 1),
    body_size=st.integers(0, 2**63 - 1),
)
def test_any_timestamp_decodes_to_its_integer_and_encodes_back_unchanged(
    props: commands.Basic.Properties, stamp: int, body_size: int
) -> None:
    props.timestamp = stamp
    payload = encode_header(body_size, props)
    decoded = decode_properties(payload)
    assert decoded.timestamp == stamp
    assert encode_header(body_size, decoded) == payload


@settings(max_examples=400, deadline=None)
@given(
    props=properties,
    body_size=st.integers(0, 2**63 - 1),
    channel=st.integers(1, 2**16 - 1),
    cuts=chunk_cuts,
)
def test_content_header_properties_round_trip(
    props: commands.Basic.Properties, body_size: int, channel: int, cuts: list[int]
) -> None:
    content_header = pamqp_header.ContentHeader(0, body_size, props)
    data = frame.marshal(content_header, channel)
    (got,) = feed_in_chunks(data, cuts)
    assert isinstance(got, HeaderFrame)
    assert (got.channel, got.class_id, got.body_size) == (channel, 60, body_size)
    assert got.payload == content_header.marshal()  # kept as raw bytes, unchanged
    decoded = decode_properties(got.payload)
    expected = as_kanin_decodes(props)
    assert decoded == expected
    for name in props.__slots__:
        assert getattr(decoded, name) == getattr(expected, name), name


short_names = st.text(max_size=20).filter(lambda name: len(name.encode()) < 256)


@settings(max_examples=100, deadline=None)
@given(
    runs=st.lists(
        st.tuples(short_names, short_names, st.binary(max_size=40), st.binary(max_size=9_000)),
        min_size=1,
        max_size=6,
    ),
    frame_max=st.sampled_from([0, 4096, 131072]),
    consumer_tag=st.binary(min_size=1, max_size=30),
    first_tag=st.integers(1, 2**63),
)
def test_delivery_encoder_writes_what_deliver_head_and_content_write(
    runs: list[tuple[str, str, bytes, bytes]],
    frame_max: int,
    consumer_tag: bytes,
    first_tag: int,
) -> None:
    """A stream's deliveries, encoded a run at once, are byte for byte one delivery at a
    time's: repeated names (the cached part) and changed ones, empty and split bodies."""
    runs = runs + runs  # the same names again: the encoder's cache is used
    encoder = DeliveryEncoder(7, consumer_tag, frame_max)
    batched: list[bytes] = []
    single: list[bytes] = []
    for tag, (exchange, routing_key, header, body) in enumerate(runs, start=first_tag):
        encoder.add(batched, tag, exchange, routing_key, header, body)
        single.append(
            encode_deliver_head(
                7, consumer_tag, tag, False, exchange.encode(), routing_key.encode()
            )
        )
        single += encode_content(7, header, body, frame_max)
    assert b"".join(batched) == b"".join(single)


@settings(max_examples=150, deadline=None)
@given(
    body=st.binary(max_size=20_000),
    frame_max=st.integers(4096, 12_000),
    props=properties,
    cuts=chunk_cuts,
)
def test_content_round_trips_through_encode_content_reader_and_assembler(
    body: bytes, frame_max: int, props: commands.Basic.Properties, cuts: list[int]
) -> None:
    head = pamqp_header.ContentHeader(0, len(body), props).marshal()
    publish = frame.marshal(commands.Basic.Publish(exchange="x", routing_key="k"), 3)
    data = publish + b"".join(encode_content(3, head, body, frame_max))
    frames = feed_in_chunks(data, cuts, frame_max=frame_max)
    assembler = ContentAssembler(max_body_bytes=len(body))
    method_frame, *rest = frames
    assert isinstance(method_frame, MethodFrame)
    assembler.start(method_frame.method)
    results = []
    for item in rest:
        assert item.channel == 3
        if isinstance(item, HeaderFrame):
            results.append(assembler.on_header(item))
        else:
            assert isinstance(item, BodyFrame)
            assert 0 < len(item.payload) <= frame_max - C.FRAME_OVERHEAD
            results.append(assembler.on_body(item))
    *partial, done = results
    assert all(r is None for r in partial)
    assert done is not None
    assert done.body == body
    assert decode_properties(done.header.payload) == as_kanin_decodes(props)
    assert assembler.idle


# -- UnackedLedger vs a model ---------------------------------------------------------------


def record(tag: int) -> Unacked:
    # Real queue and entry (the compiled build checks declared types); seq = tag.
    return Unacked(tag, LEDGER_QUEUE, Entry(None, tag, size=1), None)


class UnackedMachine(RuleBasedStateMachine):
    """The ledger against a sorted list of outstanding tags (plus an uncommitted-tx log)."""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = UnackedLedger()
        self.next_tag = 1
        self.model: set[int] = set()
        self.tx_settled: list[list[Unacked]] = []

    def _expect_unknown(self, tag: int, multiple: bool) -> None:
        before = sorted(self.model)
        try:
            self.ledger.settle(tag, multiple)
        except ChannelError as exc:
            assert exc.reply_code == 406
            assert exc.reply_text == f"PRECONDITION_FAILED - unknown delivery tag {tag}"
        else:
            raise AssertionError(f"settle({tag}, {multiple}) should fail; model {before}")

    @rule(acked=st.booleans())
    def deliver(self, acked: bool) -> None:
        tag = self.ledger.next_tag()
        assert tag == self.next_tag
        self.next_tag += 1
        if acked:
            self.ledger.add(record(tag))
            self.model.add(tag)

    @rule(offset=st.integers(0, 40), multiple=st.booleans(), in_tx=st.booleans())
    def settle(self, offset: int, multiple: bool, in_tx: bool) -> None:
        """A tag among the outstanding ones when there are any, else an arbitrary one."""
        ordered = sorted(self.model)
        tag = ordered[offset % len(ordered)] if ordered and offset < 30 else offset
        if multiple and tag == 0:
            expected = ordered
        elif tag not in self.model:
            self._expect_unknown(tag, multiple)
            return
        else:
            expected = [t for t in ordered if t <= tag] if multiple else [tag]
        settled = self.ledger.settle(tag, multiple)
        assert [r.tag for r in settled] == expected
        assert all(r.entry.seq == r.tag for r in settled)
        self.model -= set(expected)
        if in_tx:
            self.tx_settled.append(settled)

    @rule(tag=st.integers(0, 60), multiple=st.booleans())
    def settle_unknown(self, tag: int, multiple: bool) -> None:
        if tag in self.model or (multiple and tag == 0):
            return
        self._expect_unknown(tag, multiple)

    @precondition(lambda self: bool(self.tx_settled))
    @rule()
    def rollback(self) -> None:
        for records in self.tx_settled:
            self.ledger.restore(records)
            self.model |= {r.tag for r in records}
        self.tx_settled = []

    @rule()
    def commit(self) -> None:
        self.tx_settled = []

    @rule()
    def recover(self) -> None:
        taken = self.ledger.take_all()
        assert [r.tag for r in taken] == sorted(self.model)
        self.model = set()
        self.tx_settled = []

    @invariant()
    def same_size(self) -> None:
        assert len(self.ledger) == len(self.model)

    @invariant()
    def same_outstanding_in_order(self) -> None:
        records = self.ledger.take_all()
        self.ledger.restore(records)
        assert [r.tag for r in records] == sorted(self.model)


UnackedMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestUnackedLedgerModel = UnackedMachine.TestCase


# -- ConfirmLedger: what a client sees -----------------------------------------------------

confirm_ops = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.sampled_from(["ack", "nack", "hold"])),
        st.tuples(st.just("resolve"), st.integers(0, 50), st.booleans()),
        st.tuples(st.just("drain")),
    ),
    max_size=60,
)


class ConfirmClient:
    """Publisher-side bookkeeping: outstanding seqs, expanded against what the broker said."""

    def __init__(self) -> None:
        self.outstanding: set[int] = set()
        self.outcome: dict[int, str] = {}  # seq -> "ack" / "nack" as reported to the client
        self.drains: list[tuple[list[int], list[tuple[int, bool]]]] = []

    def apply(self, nacks: list[int], acks: list[tuple[int, bool]], truth: dict[int, str]) -> None:
        self.drains.append((nacks, acks))
        for seq in nacks:
            assert seq in self.outstanding, f"nack {seq} for a seq not outstanding"
            assert truth.get(seq) == "nack", f"nack {seq}, but the broker resolved {truth.get(seq)}"
            self.outstanding.discard(seq)
            self.outcome[seq] = "nack"
        for tag, multiple in acks:
            assert tag in self.outstanding, f"ack {tag} for a seq not outstanding"
            covered = [s for s in self.outstanding if s <= tag] if multiple else [tag]
            for seq in covered:
                assert truth.get(seq) == "ack", (
                    f"ack {tag} multiple={multiple} covers seq {seq}, resolved {truth.get(seq)}"
                )
                self.outstanding.discard(seq)
                self.outcome[seq] = "ack"


def run_confirm_ops(ops: list[tuple[Any, ...]]) -> ConfirmClient:
    ledger = ConfirmLedger()
    client = ConfirmClient()
    truth: dict[int, str] = {}  # resolved seqs
    pending: list[int] = []
    published = 0

    def drain() -> None:
        nacks, acks = ledger.drain()
        client.apply(nacks, acks, truth)

    for op in ops:
        if op[0] == "publish":
            seq = ledger.next_seq()
            published += 1
            assert seq == published
            client.outstanding.add(seq)
            if op[1] == "hold":
                ledger.hold(seq)
                pending.append(seq)
            elif op[1] == "ack":
                truth[seq] = "ack"
                ledger.confirm(seq)
            else:
                truth[seq] = "nack"
                ledger.reject(seq)
        elif op[0] == "resolve" and pending:
            seq = pending.pop(op[1] % len(pending))
            truth[seq] = "ack" if op[2] else "nack"
            if op[2]:
                ledger.confirm(seq)
            else:
                ledger.reject(seq)
        elif op[0] == "drain":
            drain()
        assert ledger.pending_count == len(pending)
    drain()
    for seq in pending:
        truth[seq] = "ack"
        ledger.confirm(seq)
    drain()
    assert not ledger.has_output()
    assert client.outstanding == set()
    assert client.outcome == truth
    assert sorted(client.outcome) == list(range(1, published + 1))
    return client


@settings(max_examples=500, deadline=None)
@given(ops=confirm_ops)
@example(ops=[("publish", "hold"), ("publish", "ack"), ("publish", "ack"), ("drain",)])
@example(ops=[("publish", "nack"), ("publish", "ack"), ("publish", "ack"), ("drain",)])
def test_confirm_ledger_reports_every_seq_exactly_once(ops: list[tuple[Any, ...]]) -> None:
    run_confirm_ops(ops)


@settings(max_examples=300, deadline=None)
@given(ops=confirm_ops)
@example(ops=[("publish", "hold"), ("publish", "ack"), ("publish", "ack"), ("drain",)])
def test_confirm_ledger_only_multiple_acks_when_coalescing_is_safe(
    ops: list[tuple[Any, ...]],
) -> None:
    """A multiple ack is only sent for a run of acks below everything still pending."""
    client = run_confirm_ops(ops)
    for _nacks, acks in client.drains:
        tags = [tag for tag, _ in acks]
        assert tags == sorted(tags)
        assert len(set(tags)) == len(tags)
        assert all(not multiple for _, multiple in acks[1:])


@settings(max_examples=300, deadline=None)
@given(ops=confirm_ops)
@example(ops=[("publish", "nack"), ("publish", "ack"), ("publish", "ack"), ("drain",)])
def test_confirm_ledger_nacks_never_covered_by_a_later_multiple_ack(
    ops: list[tuple[Any, ...]],
) -> None:
    """Within one drain (nacks go out first), no multiple ack spans a nacked seq,
    as RabbitMQ's coalesce_and_send guarantees by cutting off at the smallest nack."""
    client = run_confirm_ops(ops)
    for nacks, acks in client.drains:
        for tag, multiple in acks:
            if multiple:
                assert not [n for n in nacks if n < tag], (nacks, acks)
