"""The delayed exchange routing a backlog of due messages: in slices, in due order.

When the loop was held up, many buckets are due at once; routing them all in one go would
keep every delivery of the backlog waiting for the last one (a connection writes what it
was given once the routing returns). The exchange stops after ROUTE_SLICE_S and goes on
next turn, so what was routed goes out meanwhile.
"""

from __future__ import annotations

from pamqp import commands

from core_harness import Core
from kanin.amqp.tables import encode_header
from kanin.core.channel import Channel
from kanin.core.exchanges import delayed
from kanin.core.message import Message
from kanin.core.publishing import route_and_enqueue
from kanin.testing.clock import FakeScheduler


class BusyClock(FakeScheduler):
    """Each reading of the clock finds it a little later, as if routing took time."""

    def __init__(self) -> None:
        super().__init__()
        self.busy = False

    def time(self) -> float:
        if self.busy:  # far beyond a slice: the turn ends after its first bucket
            self.now += 0.05
        return self.now


def delayed_publish(channel: Channel, body: bytes, delay_ms: int) -> None:
    properties = commands.Basic.Properties(headers={"x-delay": delay_ms})
    header = encode_header(len(body), properties)
    message = Message("later", "k", header, body, properties)
    route_and_enqueue(channel, message, mandatory=False)


def test_a_backlog_of_due_messages_is_routed_in_slices_in_due_order() -> None:
    assert delayed.ROUTE_SLICE_S < 0.05  # what BusyClock's step relies on
    core = Core(clock=BusyClock())
    core.vhost.declare_exchange(
        "later",
        "x-delayed-message",
        passive=False,
        durable=False,
        auto_delete=False,
        internal=False,
        arguments={"x-delayed-type": "direct"},
    )
    core.declare("q")
    core.vhost.bind("later", core.vhost.queues["q"], "k", {})
    core.consume(core.channel(), "q", "c", no_ack=True)
    publisher = core.channel()
    for index in range(6):  # one due each millisecond, published in reverse
        delayed_publish(publisher, b"m%d" % (5 - index), 10 + 5 - index)
    clock = core.clock
    assert isinstance(clock, BusyClock)
    clock.now += 0.020  # the loop was held up: all six are due, none routed yet
    assert core.take_deliveries() == []
    clock.busy = True
    clock.advance(0)  # the timers' turn: a slice's worth, in due order
    assert [body for _, body in core.take_deliveries()] == [b"m0"]
    clock.busy = False
    clock.advance(1.0)  # the next turns: the rest, still in due order
    rest = [body for _, body in core.take_deliveries()]
    assert rest == [b"m%d" % index for index in range(1, 6)]
