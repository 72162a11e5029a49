"""A deep queue while a read back is in flight (kanin/core/paging.py, queues/classic.py): the
store answers on a later loop turn, so dispatch and basic.get wait for a paged-out head
and go on when it lands, one read at a time; entries that leave meanwhile (purge, expiry,
x-max-length, deletion) are not brought back nor counted; requeued messages go out ahead
of it; a record that cannot be read costs that message alone.

Reads are held by the store (paging_harness.CountingStore, hold=True) until the test lands
them, on a fake clock."""

from __future__ import annotations

import pytest

from core_harness import Core, ack_all
from kanin.core.message import Entry
from kanin.core.paging import PAGE_IN_BYTES_MIN
from paging_harness import BODY_BYTES, Setup, body, held_cost, message


def held_setup(budget: int = 0, count: int = 10, **arguments: object) -> Setup:
    setup = Setup(budget=budget, **arguments)
    setup.store.hold = True
    for i in range(count):
        setup.queue.publish(message(body(i)))
    return setup


def test_dispatch_waits_for_the_read_in_flight_and_goes_on_when_it_lands() -> None:
    core = Core(deep=True)
    assert core.store is not None
    core.store.hold = True
    core.declare("deep", durable=True)
    size = PAGE_IN_BYTES_MIN // 2 - 1000  # two messages a read
    sent = [body(i, size) for i in range(7)]
    core.publish("deep", *sent, persistent=True)
    channel = core.channel(prefetch=100)
    core.consume(channel, "deep", "c")
    assert core.take_deliveries() == []  # the head is paged out: its read is in flight
    assert len(core.store.reads) == len(core.store.held) == 1
    core.publish("deep", body(7, size), persistent=True)
    assert core.take_deliveries() == []
    assert len(core.store.reads) == 1  # never a second read while one is in flight
    got: list[bytes] = []
    while core.store.held:
        core.store.land()
        delivered = core.take_deliveries()
        assert len(delivered) == 2 or not core.store.held  # each read, then the next one
        got += [payload for _, payload in delivered]
        assert len(core.store.held) <= 1
    assert got == [*sent, body(7, size)]
    ack_all(channel)
    core.run()
    assert core.broker.memory.held_bytes == 0


def test_a_purge_while_the_head_is_read_leaves_nothing_behind() -> None:
    setup = held_setup()
    assert setup.queue.take() is None and setup.queue.pager.reading
    assert setup.queue.purge() == 10
    setup.store.land()
    assert setup.memory.held_bytes == 0
    assert setup.queue.paged_out == setup.queue.loaded_bytes == 0
    setup.check_accounting()
    assert setup.store.recover() == {}
    for i in range(10, 13):
        setup.queue.publish(message(body(i)))
    assert setup.take_all() == [body(i) for i in range(10, 13)]
    assert setup.memory.held_bytes == 0


def test_messages_expiring_while_read_are_dead_lettered_and_not_kept() -> None:
    setup = Setup(budget=0, **{"x-message-ttl": 1000, "x-dead-letter-exchange": "dlx"})
    setup.store.hold = True
    for i in range(5):
        setup.queue.publish(message(body(i)))
    setup.clock.advance(0.5)
    for i in range(5, 10):
        setup.queue.publish(message(body(i)))
    assert setup.queue.take() is None  # all ten in one read, held
    setup.clock.advance(0.6)  # the first five expire meanwhile; their dead-lettering reads
    assert setup.dead == [] and setup.queue.message_count == 5
    setup.store.land()
    assert setup.dead == [("expired", body(i)) for i in range(5)]
    setup.check_accounting()
    assert setup.memory.held_bytes == 5 * held_cost()  # only the live ones are held
    assert setup.take_all() == [body(i) for i in range(5, 10)]
    assert setup.memory.held_bytes == 0
    assert setup.store.recover() == {}


def test_messages_dropped_by_max_length_while_read_are_not_kept() -> None:
    setup = held_setup(count=3, **{"x-max-length": 3})
    assert setup.queue.take() is None
    setup.queue.publish(message(body(3)))
    setup.queue.publish(message(body(4)))  # drops 0 and 1 from the head, mid-read
    setup.store.land()
    setup.check_accounting()
    assert setup.take_all() == [body(i) for i in (2, 3, 4)]
    assert setup.memory.held_bytes == 0
    assert setup.store.recover() == {}


def test_a_queue_deleted_while_read_answers_its_gets_with_nothing() -> None:
    setup = held_setup()
    answers: list[Entry | None] = []
    assert setup.queue.get(answers.append) is False
    setup.queue.delete()
    setup.queue.purge()  # what the vhost does after delete
    setup.store.land()
    assert answers == [None]
    assert setup.memory.held_bytes == 0
    assert setup.queue.paged_out == setup.queue.loaded_bytes == 0


def test_gets_wait_for_the_read_and_are_answered_in_order() -> None:
    setup = held_setup(count=3)
    answers: list[Entry | None] = []
    assert setup.queue.get(answers.append) is False
    assert setup.queue.get(answers.append) is False  # behind the first, whatever comes
    assert answers == [] and len(setup.store.reads) == 1
    setup.store.land()
    assert [e.message.body if e and e.message else None for e in answers] == [body(0), body(1)]
    assert setup.queue.get(answers.append) is True  # in memory now: answered at once
    assert setup.queue.get(answers.append) is True  # empty: answered at once too
    assert answers[2] is not None and answers[2].message is not None
    assert answers[2].message.body == body(2) and answers[3] is None


def test_requeued_messages_go_out_ahead_of_a_head_being_read() -> None:
    setup = held_setup(budget=2 * BODY_BYTES, count=6)
    first, second = setup.queue.take(), setup.queue.take()  # in memory
    assert first is not None and second is not None
    assert setup.queue.take() is None  # the rest is being read
    setup.queue.requeue([second, first])
    again = [setup.queue.take(), setup.queue.take()]  # no need to wait for the read
    assert [e.message.body for e in again if e and e.message] == [body(0), body(1)]
    assert all(e is not None and e.redelivered for e in again)
    assert setup.queue.take() is None and len(setup.store.reads) == 1
    for entry in again:
        assert entry is not None
        setup.queue.forget(entry)
    assert setup.take_all() == [body(i) for i in range(2, 6)]
    assert setup.memory.held_bytes == 0


def test_a_record_that_cannot_be_read_costs_that_message_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    setup = held_setup(count=5)
    lost = [e.stored_id for e in setup.queue.ready][2]
    setup.store.lose.add(lost)
    assert setup.take_all() == [body(i) for i in (0, 1, 3, 4)]
    assert f"message {lost} could not be read back; dropped" in caplog.text
    assert sum(ids.count(lost) for ids in setup.store.reads) == 1  # never read again
    assert setup.memory.held_bytes == 0
    assert setup.store.recover() == {}


def test_a_lost_record_behind_the_head_waits_for_its_turn_to_be_dropped() -> None:
    setup = held_setup(budget=0, count=4, **{"x-max-priority": 2})
    lost = [e.stored_id for e in setup.queue.ready][1]
    setup.store.lose.add(lost)
    assert setup.queue.take() is None
    setup.store.land()  # 0, 2, 3 loaded; 1 stays paged out, with no record
    assert setup.queue.message_count == 4 and setup.queue.paged_out == 1
    setup.check_accounting()
    assert setup.take_all() == [body(i) for i in (0, 2, 3)]
    assert len(setup.store.reads) == 1 and setup.memory.held_bytes == 0
