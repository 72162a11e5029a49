"""The consumer timeout's watch on a fake clock: a delivery is overdue between its timeout
and its timeout plus one period (a twentieth of the shortest timeout), the channel's other
deliveries and their own timeouts are respected, and an idle channel has no timer."""

from __future__ import annotations

from kanin.core.ack_timeout import AckDeadlines
from kanin.core.memory import MemoryMonitor
from kanin.core.message import Entry
from kanin.core.queues import ClassicQueue
from kanin.core.unacked import Unacked, UnackedLedger
from kanin.testing.clock import FakeScheduler


class Channel:
    """What AckDeadlines watches: a ledger of deliveries, each with its timeout."""

    def __init__(self, clock: FakeScheduler) -> None:
        self.clock = clock
        self.ledger = UnackedLedger()
        # The watch reads only tags; real objects, as the compiled build checks types.
        self.queue = ClassicQueue("q", "/", clock, MemoryMonitor(2**40))
        self.timeouts: dict[int, float] = {}
        self.expired: list[tuple[int, float]] = []
        self.watch = AckDeadlines(
            clock,
            self.ledger.outstanding,
            self.ledger.peek_tag,
            lambda record: self.timeouts[record.tag],
            lambda record: self.expired.append((record.tag, clock.time())),
        )

    def deliver(self, timeout_s: float) -> int:
        tag = self.ledger.next_tag()
        self.watch.use(timeout_s)
        self.ledger.add(Unacked(tag, self.queue, Entry(None, tag, size=1), None))
        self.timeouts[tag] = timeout_s
        if self.watch.idle:
            self.watch.wake()
        return tag


def test_an_unacked_delivery_expires_within_one_period_after_its_timeout() -> None:
    clock = FakeScheduler()
    channel = Channel(clock)
    start = clock.time()
    channel.deliver(2.0)
    clock.advance(1.99)
    assert channel.expired == []
    clock.advance(0.2)
    ((tag, when),) = channel.expired
    assert tag == 1 and 2.0 <= when - start <= 2.0 + 2.0 / 20 + 1e-9


def test_acked_deliveries_do_not_expire_and_an_idle_channel_has_no_timer() -> None:
    clock = FakeScheduler()
    channel = Channel(clock)
    tag = channel.deliver(1.0)
    clock.advance(0.5)
    channel.ledger.settle(tag, False)
    clock.advance(5.0)
    assert channel.expired == []
    assert channel.watch.idle and clock.pending_timers == 0
    channel.deliver(1.0)  # the next delivery starts the watch again
    clock.advance(1.1)
    assert [tag for tag, _ in channel.expired] == [2]


def test_a_later_delivery_is_timed_from_its_own_time() -> None:
    clock = FakeScheduler()
    channel = Channel(clock)
    first = channel.deliver(1.0)
    clock.advance(0.8)
    channel.deliver(1.0)
    channel.ledger.settle(first, False)
    clock.advance(0.9)  # 1.7 s since the first, 0.9 s since the second
    assert channel.expired == []
    clock.advance(0.2)
    assert [tag for tag, _ in channel.expired] == [2]


def test_each_delivery_keeps_its_own_timeout() -> None:
    clock = FakeScheduler()
    channel = Channel(clock)
    channel.deliver(10.0)  # from a queue with a long timeout
    channel.deliver(1.0)  # from a queue with a short one
    clock.advance(1.1)
    assert [tag for tag, _ in channel.expired] == [2]


def test_the_samples_kept_follow_what_is_pending() -> None:
    clock = FakeScheduler()
    channel = Channel(clock)
    for _ in range(1000):  # a steady stream, each acked a tick later
        tag = channel.deliver(1.0)
        clock.advance(0.05)
        channel.ledger.settle(tag, False)
    assert len(channel.watch._samples) <= 3
    assert channel.expired == []
