"""The work of choosing a consumer does not grow with the number of consumers.

10,000 consumers with prefetch 1 on one queue, each on its own channel: all of them get a
message, so all are full; then, round after round, one of them (picked at random) acks and
one message is published, which must go to that consumer, the only one with room. The
work is counted as the consumers asked whether they have capacity (the queue's
ConsumerChoice counts each Consumer.has_capacity call of consumers taking turns, as
here). Scanning every consumer per delivery asks 10,000 times per message; the queue may
ask each full consumer once and then leave it aside until it acks, so over all
deliveries the asking stays within a few per message.
"""

from __future__ import annotations

import random

import pytest

from core_harness import Core, RecordingChannel, ack_all
from kanin.core.queues.classic import ClassicQueue

CONSUMERS = 10_000
ROUNDS = 1_000
# Has_capacity calls per delivery, amortised over the run so far. Each consumer is found
# full at most once per message it acks, plus one look for the consumer that is chosen.
PER_DELIVERY = 3


def examined(core: Core) -> int:
    """Consumers asked so far whether they can take a message (Consumer.has_capacity)."""
    queue = core.vhost.queues["q"]
    assert isinstance(queue, ClassicQueue)
    return queue.choice.examined


def fill(core: Core, channels: list[RecordingChannel]) -> int:
    """One message per consumer, published one at a time, checking the work as it goes, so
    that a scan of every consumer per delivery fails within a few deliveries."""
    deliveries = 0
    for n in range(len(channels)):
        core.publish("q", b"fill%d" % n)
        deliveries += len(core.take_deliveries())
        assert examined(core) <= PER_DELIVERY * max(deliveries, 1), (
            f"{examined(core)} consumers looked at for {deliveries} deliveries"
        )
    assert deliveries == len(channels)
    assert all(consumer.unacked == 1 for ch in channels for consumer in ch.consumers.values())
    return deliveries


@pytest.mark.parametrize("priorities", [1, 3], ids=["one-priority", "three-priorities"])
def test_a_delivery_looks_at_few_consumers_among_10000_mostly_full(priorities: int) -> None:
    core = Core()
    core.declare("q")
    channels = []
    for n in range(CONSUMERS):
        channel = core.channel(prefetch=1)
        core.consume(channel, "q", f"c{n}", priority=n % priorities)
        channels.append(channel)
    deliveries = fill(core, channels)

    rng = random.Random(7)
    for round_number in range(ROUNDS):
        n = rng.randrange(CONSUMERS)
        ack_all(channels[n])
        body = b"r%d" % round_number
        core.publish("q", body)
        assert core.take_deliveries() == [(f"c{n}", body)]  # the only consumer with room
        deliveries += 1
        assert examined(core) <= PER_DELIVERY * deliveries, (
            f"{examined(core)} consumers looked at for {deliveries} deliveries"
        )
    assert core.vhost.queues["q"].message_count == 0


def test_steady_state_looks_at_two_consumers_per_delivery() -> None:
    """Once the full consumers have been set aside, a delivery looks at no more than the
    consumer that acked and the one served before it, whatever the number of consumers."""
    core = Core()
    core.declare("q")
    channels = [core.channel(prefetch=1) for _ in range(CONSUMERS)]
    for n, channel in enumerate(channels):
        core.consume(channel, "q", f"c{n}")
    fill(core, channels)
    # The last consumer's turn comes after all others: reaching it sets every full one aside.
    ack_all(channels[-1])
    core.publish("q", b"last")
    assert core.take_deliveries() == [(f"c{CONSUMERS - 1}", b"last")]

    before = examined(core)
    rng = random.Random(11)
    for round_number in range(ROUNDS):
        n = rng.randrange(CONSUMERS)
        ack_all(channels[n])
        body = b"r%d" % round_number
        core.publish("q", body)
        assert core.take_deliveries() == [(f"c{n}", body)]
    assert examined(core) - before <= 2 * ROUNDS
