"""A commit round that fails nacks its publishers; its messages must not stay in the
queue to be delivered as well (a publisher that resends on nack would make duplicates)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pamqp import commands

from kanin.amqp.tables import encode_header
from kanin.core.memory import MemoryMonitor
from kanin.core.message import Entry, Message
from kanin.core.queues import STORED, ClassicQueue
from kanin.core.ready import FifoReady, PriorityReady
from kanin.core.scheduling import Soon
from kanin.server.scheduler import LoopScheduler
from kanin.testing.faulty_disk import faulty_file_store


def persistent(body: bytes) -> Message:
    properties = commands.Basic.Properties(delivery_mode=2)
    return Message("", "q", encode_header(len(body), properties), body, properties)


async def settle(outcomes: list[bool], count: int) -> None:
    """Until the channel-like waiter has heard `count` round outcomes (rounds run on a
    worker thread; the test's own timeout bounds the wait)."""
    while len(outcomes) < count:
        await asyncio.sleep(0.005)


async def test_messages_of_a_failed_round_leave_the_queue_and_later_ones_stay(
    tmp_path: Path,
) -> None:
    loop = asyncio.get_running_loop()
    store, disk = faulty_file_store(tmp_path, loop)
    store.recover()
    memory = MemoryMonitor(2**40)
    queue = ClassicQueue("q", "/", Soon(LoopScheduler(loop)), memory, durable=True, store=store)
    outcomes: list[bool] = []

    disk.fail_next_write()
    for index in range(3):
        assert queue.publish(persistent(b"lost-%d" % index)) == STORED
    store.after_commit(outcomes.append)  # what the publishers' channel hears
    await settle(outcomes, 1)
    assert outcomes == [False]
    assert queue.message_count == 0  # nacked, so not kept to be delivered
    assert memory.held_bytes == 0

    assert queue.publish(persistent(b"kept")) == STORED
    store.after_commit(outcomes.append)
    await settle(outcomes, 2)
    assert outcomes == [False, True]
    taken = queue.take()
    assert taken is not None and taken.message is not None
    assert taken.message.body == b"kept"
    await store.close()

    # Nothing of the failed round comes back after a restart either.
    again, _ = faulty_file_store(tmp_path, loop)
    recovered = again.recover()
    assert [len(messages) for messages in recovered.values()] == [1]
    await again.close()


def test_ready_remove_takes_entries_out_of_every_shape_and_keeps_the_order() -> None:
    fifo, by_priority = FifoReady(), PriorityReady(max_priority=3)
    entries = [Entry(persistent(b"%d" % i), seq) for seq, i in enumerate(range(6), start=1)]
    for entry in entries:
        fifo.append(entry)
        by_priority.append(entry, priority=entry.seq % 2 * 3)
    fifo.pop()
    fifo.requeue(entries[0])  # back in its place, in the requeued heap
    doomed = {id(entries[0]), id(entries[3]), id(entries[4])}
    for ready in (fifo, by_priority):
        removed = ready.remove(doomed)
        assert sorted(e.seq for e in removed) == [1, 4, 5]
        assert len(ready) == 3
        left = []
        while (entry := ready.pop()) is not None:
            left.append(entry.seq)
        assert left == ([2, 3, 6] if ready is fifo else [3, 2, 6])
