"""A stateful property test of a deep queue (kanin/core/queues/classic.py) against a model: random
publishes (persistent or transient, with priorities), takes, acks, requeues, purges and
restarts of a durable queue with a tiny memory budget over a MemoryStore, whose reads back
stay in flight until a `land` step: the other steps happen while a read is in flight too
(a take then finds the head not read yet, unless something in memory is ahead of it).

After every step: the queue hands out exactly what the model says comes next, whole; the
byte and count ledgers agree with what is really in memory; the broker's memory monitor holds
exactly the ready messages in memory plus the unacked ones; a restart brings back every
persistent message still in the queue or unacked (unacked first in order, as redelivered),
with nothing loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pamqp import commands

from kanin.amqp.tables import encode_header
from kanin.core.memory import MemoryMonitor
from kanin.core.message import PAGED_OUT_BYTES, Entry, Message, entry_cost
from kanin.core.queue_args import parse_queue_args
from kanin.core.queues import ClassicQueue
from kanin.testing.clock import FakeScheduler
from paging_harness import CountingStore

KEY = "/\x00q"


@dataclass
class Sent:
    number: int
    body: bytes
    persistent: bool
    priority: int
    redelivered: bool = False


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeScheduler()
        self.memory = MemoryMonitor(2**40)
        self.store = CountingStore(self.clock)
        self.store.hold = True  # reads land in the `land` step
        self.max_priority: int | None = None
        self.budget = 0
        self.queue: ClassicQueue | None = None
        self.ready: list[tuple[int, Sent]] = []  # (order key, message): the model
        self.unacked: list[tuple[Entry, Sent, int]] = []  # delivered, not settled
        self.count = 0

    @rule(budget=st.sampled_from([0, 50, 300]), priorities=st.booleans())
    @precondition(lambda self: self.queue is None)
    def open(self, budget: int, priorities: bool) -> None:
        self.budget = budget
        self.max_priority = 3 if priorities else None
        self.queue = self.make_queue()

    def make_queue(self) -> ClassicQueue:
        arguments = {} if self.max_priority is None else {"x-max-priority": self.max_priority}
        return ClassicQueue(
            "q",
            "/",
            self.clock,
            self.memory,
            durable=True,
            arguments=arguments,
            args=parse_queue_args(arguments, "q", "/"),
            store=self.store,
            memory_budget_bytes=self.budget,
        )

    def order(self, sent: Sent, seq: int) -> tuple[int, int]:
        priority = min(sent.priority, self.max_priority) if self.max_priority is not None else 0
        return (-priority, seq)

    @precondition(lambda self: self.queue is not None)
    @rule(size=st.integers(0, 120), persistent=st.booleans(), priority=st.integers(0, 5))
    def publish(self, size: int, persistent: bool, priority: int) -> None:
        assert self.queue is not None
        self.count += 1
        body = (b"%d." % self.count * size)[:size]
        properties = commands.Basic.Properties(
            delivery_mode=2 if persistent else 1, priority=priority
        )
        message = Message("", "q", encode_header(size, properties), body, properties)
        sent = Sent(self.count, body, persistent, priority)
        seq = self.queue._next_seq
        self.queue.publish(message)
        self.ready.append((self.order(sent, seq), sent))
        self.ready.sort(key=lambda item: item[0])

    @precondition(lambda self: self.queue is not None and bool(self.ready))
    @rule(ack=st.booleans())
    def take(self, ack: bool) -> None:
        assert self.queue is not None
        entry = self.queue.take()
        if entry is None:
            assert self.queue.pager.reading, "an empty take only while the head is read back"
            return
        key, sent = self.ready.pop(0)
        assert entry.message is not None
        assert entry.message.body == sent.body, (sent.number, entry.message.body)
        assert entry.redelivered == sent.redelivered
        if ack:
            self.queue.forget(entry)
        else:
            self.queue.note_delivered(entry)
            self.unacked.append((entry, sent, key[1]))

    @precondition(lambda self: self.queue is not None and bool(self.unacked))
    @rule()
    def requeue(self) -> None:
        assert self.queue is not None
        self.queue.requeue([entry for entry, _, _ in self.unacked])
        for _, sent, seq in self.unacked:
            sent.redelivered = True
            self.ready.append((self.order(sent, seq), sent))
        self.ready.sort(key=lambda item: item[0])
        self.unacked.clear()

    @precondition(lambda self: bool(self.store.held))
    @rule()
    def land(self) -> None:
        self.store.land()

    @precondition(lambda self: self.queue is not None)
    @rule()
    def purge(self) -> None:
        assert self.queue is not None
        assert self.queue.purge() == len(self.ready)
        self.ready.clear()

    @precondition(lambda self: self.queue is not None)
    @rule()
    def restart(self) -> None:
        """The broker stops: transient messages are gone; unacked persistent ones come back
        in their place, redelivered (their delivery was noted); nothing is loaded."""
        self.memory = MemoryMonitor(2**40)
        self.store.held.clear()  # the old process's reads never land
        self.queue = self.make_queue()
        survivors = [(sent, seq) for (_, seq), sent in self.ready if sent.persistent]
        for _, sent, seq in self.unacked:
            if sent.persistent:
                sent.redelivered = True
                survivors.append((sent, seq))
        self.unacked.clear()
        survivors.sort(key=lambda item: item[1])  # store ids follow publish order
        self.queue.restore(self.store.recover().get(KEY, []))
        assert self.queue.paged_out == len(survivors)
        assert self.memory.held_bytes == len(survivors) * PAGED_OUT_BYTES  # their entries
        # Sequence numbers are given again, in the old order.
        self.ready = sorted(
            ((self.order(sent, index + 1), sent) for index, (sent, _) in enumerate(survivors)),
            key=lambda item: item[0],
        )

    @invariant()
    def ledgers_agree(self) -> None:
        queue = self.queue
        if queue is None:
            return
        in_ready = list(queue.ready)
        loaded = [e for e in in_ready if e.message is not None]
        assert queue.message_count == len(self.ready)
        assert queue.paged_out == len(in_ready) - len(loaded)
        assert queue.loaded_bytes == sum(e.size for e in loaded)
        assert queue.ready_bytes == sum(e.size for e in in_ready)
        # The memory count is what every entry costs as it is now, ready or unacked.
        held = in_ready + [entry for entry, _, _ in self.unacked]
        assert all(entry.cost == entry_cost(entry) for entry in held)
        assert self.memory.held_bytes == sum(entry.cost for entry in held)
        # Persistent messages in memory beyond the budget only come from a page-in batch.
        if queue.paged_out:
            assert all(e.stored_id for e in in_ready if e.message is None)


TestQueuePaging = QueueMachine.TestCase
TestQueuePaging.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
