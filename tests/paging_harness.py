"""What the deep-queue tests share (tests/unit/test_queue_paging.py, test_queue_read_back.py,
test_basic_get_read_back.py): a MemoryStore that counts what is read back and can hold the
answers until a test lets them land, messages, and a queue on a fake clock.

Reads back land on the fake clock: MemoryStore answers read_later with the clock's call_soon,
so `clock.run_soon()` (or `advance`) lands them, unless the store holds them (`hold`), then
`land()` does. The store refuses the blocking `read`: the broker must never block its loop.

Import it like helpers (tests/ is on sys.path): `from paging_harness import Setup, message`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pamqp import commands

from kanin.amqp.tables import encode_header
from kanin.core.memory import MemoryMonitor
from kanin.core.message import STORED_OVERHEAD_BYTES, Entry, Message, entry_cost, message_cost
from kanin.core.queue_args import parse_queue_args
from kanin.core.queues import ClassicQueue
from kanin.store.api import Content, Reader
from kanin.store.memory_store import MemoryStore
from kanin.testing.clock import FakeScheduler

BODY_BYTES = 1000


class CountingStore(MemoryStore):
    """A MemoryStore that records every read back (ids asked for, per call), can lose
    records (`lose`: their reads fail, as on a bad disk) and hold the answers (`hold`)."""

    def __init__(self, clock: FakeScheduler) -> None:
        super().__init__(clock)  # type: ignore[arg-type]  # only call_soon is used
        self.clock = clock
        self.reads: list[list[int]] = []
        self.aheads: list[list[int]] = []  # per read: the ids it said come next
        self.lose: set[int] = set()  # ids whose read fails, as on a bad disk
        self.hold = False  # answers wait for land()
        self.held: list[tuple[Reader, list[Content | None]]] = []

    def read(
        self, queue: str, message_ids: Sequence[int], ahead: Sequence[int] = ()
    ) -> list[Content | None]:
        raise AssertionError("the broker read the store blocking its loop")

    def read_later(
        self, queue: str, message_ids: Sequence[int], ahead: Sequence[int], done: Reader
    ) -> None:
        self.reads.append(list(message_ids))
        self.aheads.append(list(ahead))
        found = super().read(queue, message_ids)  # as of the call, as the contract says
        answer = [None if i in self.lose else c for i, c in zip(message_ids, found, strict=True)]
        if self.hold:
            self.held.append((done, answer))
        else:
            self.clock.call_soon(done, answer)

    def land(self) -> None:
        """The held answers come in (each on its own loop turn, in order)."""
        held, self.held = self.held, []
        for done, answer in held:
            self.clock.call_soon(done, answer)
        self.clock.run_soon()

    @property
    def ids_read(self) -> int:
        return sum(len(ids) for ids in self.reads)


def message(
    body: bytes,
    persistent: bool = True,
    priority: int | None = None,
    expiration: int | None = None,
) -> Message:
    properties = commands.Basic.Properties(
        delivery_mode=2 if persistent else 1,
        priority=priority,
        expiration=str(expiration) if expiration is not None else None,
    )
    header = encode_header(len(body), properties)
    return Message("amq.direct", "rk", header, body, properties, expiration)


def body(i: int, size: int = BODY_BYTES) -> bytes:
    stamp = f"<{i}>".encode()
    return (stamp * (size // len(stamp) + 1))[:size]


def held_cost() -> int:
    """What the memory alarm counts for one of these persistent messages held in memory."""
    return message_cost(message(body(0))) + STORED_OVERHEAD_BYTES


class Setup:
    def __init__(self, budget: int, **arguments: Any) -> None:
        self.clock = FakeScheduler()
        self.memory = MemoryMonitor(2**40)
        self.store = CountingStore(self.clock)
        self.dead: list[tuple[str, bytes]] = []
        self.queue = self.make(budget, **arguments)

    def make(self, budget: int, **arguments: Any) -> ClassicQueue:
        args = parse_queue_args(arguments, "q", "/")
        queue = ClassicQueue(
            "q",
            "/",
            self.clock,
            self.memory,
            durable=True,
            arguments=arguments,
            args=args,
            store=self.store,
            memory_budget_bytes=budget,
        )
        queue.on_dead_letter = lambda _q, entries, reason: self.dead.extend(
            (reason, e.message.body) for e in entries if e.message is not None
        )
        return queue

    def take(self) -> Entry | None:
        """The next message as a consumer gets it: when its head is being read back, the
        read lands first (one at a time)."""
        while (entry := self.queue.take()) is None and self.queue.message_count:
            assert self.queue.pager.reading, "a paged-out head is read back"
            if self.store.hold:
                self.store.land()
            else:
                self.clock.run_soon()
        return entry

    def take_all(self) -> list[bytes]:
        """Take every message as a consumer would, settling each at once."""
        out = []
        while (entry := self.take()) is not None:
            assert entry.message is not None
            out.append(entry.message.body)
            self.check_accounting()
            self.queue.forget(entry)
        return out

    def check_accounting(self) -> None:
        queue = self.queue
        in_ready = list(queue.ready)
        loaded = [e for e in in_ready if e.message is not None]
        assert queue.paged_out == len(in_ready) - len(loaded)
        assert queue.loaded_bytes == sum(e.size for e in loaded)
        assert queue.ready_bytes == sum(e.size for e in in_ready)
        assert all(e.cost == entry_cost(e) for e in in_ready)  # counted as they are now
