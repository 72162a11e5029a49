"""basic.get of a paged-out head (kanin/core/basic_get.py, Session.hold_input): the answer
comes when the read back lands, before the replies to whatever the client sent after the
get; meanwhile nothing the client sent later is acted on, and other connections are served.
The store holds its reads until the test lands them (paging_harness.CountingStore)."""

from __future__ import annotations

from pamqp import body, commands, frame, header

from kanin.config import BrokerConfig
from kanin.core.broker import Broker
from kanin.testing.clock import FakeScheduler
from kanin.testing.session_pair import SessionPair
from paging_harness import CountingStore

PERSISTENT = commands.Basic.Properties(delivery_mode=2)


def deep_queue(count: int = 3) -> tuple[SessionPair, CountingStore]:
    """A connection with channel 1 open on a broker whose durable queue `deep` holds
    `count` persistent messages, all paged out; the store holds reads from now on."""
    clock = FakeScheduler()
    store = CountingStore(clock)
    broker = Broker(BrokerConfig(queue_memory_budget_bytes=0), clock, store)
    pair = SessionPair(clock=clock, broker=broker)
    pair.handshake()
    pair.open_channel(1)
    pair.send_method(1, commands.Queue.Declare(queue="deep", durable=True))
    assert isinstance(pair.expect(1), commands.Queue.DeclareOk)
    for i in range(count):
        pair.publish(1, b"m%d" % i, "deep", properties=PERSISTENT)
    assert broker.vhosts["/"].queues["deep"].paged_out == count
    store.hold = True
    return pair, store


def get(no_ack: bool = False) -> bytes:
    return frame.marshal(commands.Basic.Get(queue="deep", no_ack=no_ack), 1)


def passive_declare() -> bytes:
    return frame.marshal(commands.Queue.Declare(queue="deep", passive=True), 1)


def replies(pair: SessionPair) -> list[tuple[str, object]]:
    """The server's frames on channel 1, each as (kind, what identifies it)."""
    out: list[tuple[str, object]] = []
    for channel, value in pair.frames():
        assert channel == 1, (channel, value)
        if isinstance(value, commands.Basic.GetOk):
            out.append(("get-ok", (value.delivery_tag, value.message_count)))
        elif isinstance(value, body.ContentBody):
            out.append(("body", value.value))
        elif isinstance(value, commands.Queue.DeclareOk):
            out.append(("declare-ok", value.message_count))
        elif not isinstance(value, header.ContentHeader):
            out.append((type(value).__name__, None))
    return out


def test_a_get_is_answered_when_its_read_lands_and_before_what_came_after() -> None:
    pair, store = deep_queue()
    pair.send(get() + get() + passive_declare())
    assert pair.frames() == []  # the head is being read; what came after waits
    assert pair.transport.reading  # the socket is still read meanwhile
    assert len(store.reads) == 1
    store.land()
    assert replies(pair) == [
        ("get-ok", (1, 2)),
        ("body", b"m0"),
        ("get-ok", (2, 1)),
        ("body", b"m1"),
        ("declare-ok", 1),
    ]


def test_other_connections_are_served_while_a_get_waits() -> None:
    pair, store = deep_queue()
    pair.send(get())
    other = SessionPair(clock=pair.clock, broker=pair.broker)
    other.handshake()
    other.open_channel(1)
    other.send_method(1, commands.Queue.Declare(queue="deep", passive=True))
    assert other.expect(1).message_count == 3
    other.publish(1, b"more", "deep", properties=PERSISTENT)
    assert pair.frames() == []
    store.land()
    assert replies(pair) == [("get-ok", (1, 3)), ("body", b"m0")]


def test_what_arrives_while_a_get_waits_is_acted_on_after_its_answer() -> None:
    pair, store = deep_queue()
    pair.send(get(no_ack=True))
    pair.send(frame.marshal(commands.Queue.Purge(queue="deep"), 1))  # later, a read apart
    assert pair.frames() == []
    assert pair.broker.vhosts["/"].queues["deep"].message_count == 3  # not purged yet
    store.land()
    out = replies(pair)
    assert out[:2] == [("get-ok", (1, 2)), ("body", b"m0")]
    assert out[2] == ("PurgeOk", None)
    assert pair.broker.vhosts["/"].queues["deep"].message_count == 0


def test_a_get_of_an_unreadable_head_gets_the_next_message() -> None:
    pair, store = deep_queue()
    queue = pair.broker.vhosts["/"].queues["deep"]
    store.lose.add(next(iter(queue.ready)).stored_id)
    pair.send(get(no_ack=True))
    store.land()
    assert replies(pair) == [("get-ok", (1, 1)), ("body", b"m1")]


def test_a_get_whose_queue_empties_meanwhile_gets_get_empty() -> None:
    pair, store = deep_queue()
    pair.send(get())
    pair.broker.vhosts["/"].queues["deep"].purge()  # another connection purges it
    store.land()
    assert replies(pair) == [("GetEmpty", None)]
    pair.send(passive_declare())
    assert replies(pair) == [("declare-ok", 0)]


def test_a_message_taken_for_a_get_goes_back_if_the_connection_is_gone() -> None:
    pair, store = deep_queue()
    pair.send(get())
    pair.session.connection_lost(None)
    store.land()
    queue = pair.broker.vhosts["/"].queues["deep"]
    assert queue.message_count == 3
    head = queue.ready.peek()  # back in its place, at the head
    assert head is not None and head.message is not None
    assert head.message.body == b"m0" and head.redelivered
