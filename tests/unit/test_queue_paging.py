"""Deep queues on a fake clock (kanin/core/queues/classic.py): past its memory budget a
durable queue keeps persistent messages in the store only and reads them back, in batches,
before they go out; order, priorities, TTL, length limits, dead-lettering and accounting
are unchanged.

The store is a MemoryStore (the store contract suite shows FileStore reads back the same),
wrapped to count what is read (tests/paging_harness.py); reads land on the fake clock.
What happens while a read is in flight is in test_queue_read_back.py."""

from __future__ import annotations

from kanin.core.message import PAGED_OUT_BYTES, Entry
from kanin.core.paging import (
    DEAD_LETTER_BATCH,
    PAGE_IN_BYTES_MIN,
    PAGE_IN_COUNT_MAX,
    page_in_batch,
)
from kanin.store.api import Recovered
from paging_harness import BODY_BYTES, Setup, body, held_cost, message


def test_past_the_budget_persistent_messages_are_paged_out() -> None:
    setup = Setup(budget=10 * BODY_BYTES)
    for i in range(100):
        setup.queue.publish(message(body(i)))
    queue = setup.queue
    assert queue.message_count == 100
    assert queue.loaded_bytes == 10 * BODY_BYTES
    assert queue.paged_out == 90
    # What is held in memory, no more, each at its cost (body, header, overhead), and
    # what the paged-out ones keep in memory.
    assert setup.memory.held_bytes == 10 * held_cost() + 90 * PAGED_OUT_BYTES
    assert queue.ready_bytes == 100 * BODY_BYTES  # x-max-length-bytes still sees them all
    setup.check_accounting()
    assert setup.store.reads == []


def test_a_deep_queue_delivers_every_message_in_order_reading_in_batches() -> None:
    setup = Setup(budget=10 * BODY_BYTES)
    for i in range(1000):
        setup.queue.publish(message(body(i)))
    held_max = 0
    taken = []
    while (entry := setup.take()) is not None:
        assert entry.message is not None
        held_max = max(held_max, setup.memory.held_bytes)
        taken.append(entry.message.body)
        setup.queue.forget(entry)
    assert taken == [body(i) for i in range(1000)]
    # Reads come in batches of at least PAGE_IN_BYTES_MIN, never one message at a time...
    batch = PAGE_IN_BYTES_MIN // BODY_BYTES
    assert len(setup.store.reads) <= 990 // batch + 1
    assert setup.store.ids_read == 990
    # ...and memory stays within the budget plus one batch (the budget counts bodies).
    per_body_byte = held_cost() / BODY_BYTES
    in_memory = (10 * BODY_BYTES + PAGE_IN_BYTES_MIN + BODY_BYTES) * per_body_byte
    assert held_max <= in_memory + 1000 * PAGED_OUT_BYTES
    assert setup.memory.held_bytes == 0
    assert setup.queue.paged_out == setup.queue.loaded_bytes == 0


def test_each_page_in_names_the_next_batch_so_it_can_be_fetched_ahead() -> None:
    setup = Setup(budget=0)
    batch = PAGE_IN_BYTES_MIN // BODY_BYTES  # a budget of 0 still reads this much at a time
    for i in range(3 * batch):
        setup.queue.publish(message(body(i)))
    ids = [e.stored_id for e in setup.queue.ready]
    assert setup.take_all() == [body(i) for i in range(3 * batch)]
    assert setup.store.reads == [ids[:batch], ids[batch : 2 * batch], ids[2 * batch :]]
    assert setup.store.aheads == [ids[batch : 2 * batch], ids[2 * batch :], []]


def test_a_drained_queue_keeps_new_messages_in_memory_again() -> None:
    setup = Setup(budget=5 * BODY_BYTES)
    for i in range(20):
        setup.queue.publish(message(body(i)))
    assert setup.take_all() == [body(i) for i in range(20)]
    reads = len(setup.store.reads)
    for i in range(5):
        setup.queue.publish(message(body(i)))
    assert setup.queue.paged_out == 0
    assert setup.take_all() == [body(i) for i in range(5)]
    assert len(setup.store.reads) == reads


def test_transient_messages_stay_in_memory_in_their_place() -> None:
    setup = Setup(budget=3 * BODY_BYTES)
    sent = [message(body(i), persistent=i % 3 == 0) for i in range(30)]
    for m in sent:
        setup.queue.publish(m)
    assert setup.queue.paged_out == 9  # persistent 9, 12, ..., 27 (0, 3, 6 fit the budget)
    setup.check_accounting()
    assert setup.take_all() == [m.body for m in sent]


def test_a_non_durable_queue_never_pages_out() -> None:
    setup = Setup(budget=0)
    setup.queue.store = None  # what ClassicQueue does for durable=False
    for i in range(10):
        setup.queue.publish(message(body(i)))
    assert setup.queue.paged_out == 0
    assert setup.take_all() == [body(i) for i in range(10)]


def test_lazy_mode_pages_out_everything_persistent() -> None:
    setup = Setup(budget=10**9, **{"x-queue-mode": "lazy"})
    for i in range(10):
        setup.queue.publish(message(body(i)))
    assert setup.queue.memory_budget_bytes == 0
    assert setup.queue.paged_out == 10
    assert setup.memory.held_bytes == 10 * PAGED_OUT_BYTES  # the entries, not the messages
    assert setup.take_all() == [body(i) for i in range(10)]


def test_priority_order_holds_for_paged_out_messages() -> None:
    setup = Setup(budget=2 * BODY_BYTES, **{"x-max-priority": 5})
    sent = [(i, [0, 9, 3, 5, 3][i % 5]) for i in range(50)]
    for i, priority in sent:
        setup.queue.publish(message(body(i), priority=priority))
    assert setup.queue.paged_out == 48
    expected = [body(i) for i, _ in sorted(sent, key=lambda t: (-min(t[1], 5), t[0]))]
    assert setup.take_all() == expected


def test_requeued_messages_return_to_their_place_ahead_of_paged_out_ones() -> None:
    setup = Setup(budget=2 * BODY_BYTES)
    for i in range(10):
        setup.queue.publish(message(body(i)))
    first, second = setup.take(), setup.take()
    assert first is not None and second is not None
    setup.queue.requeue([second, first])
    setup.check_accounting()
    assert setup.take_all() == [body(i) for i in range(10)]


def test_expiring_paged_out_messages_reads_nothing_without_a_dead_letter_exchange() -> None:
    setup = Setup(budget=BODY_BYTES, **{"x-message-ttl": 1000})
    for i in range(50):
        setup.queue.publish(message(body(i)))
    setup.clock.advance(2)
    assert setup.queue.message_count == 0
    assert setup.store.reads == []
    assert setup.memory.held_bytes == 0
    assert setup.store.recover() == {}  # removed from the store


def test_dead_lettering_reads_paged_out_messages_back_in_batches() -> None:
    setup = Setup(budget=BODY_BYTES, **{"x-message-ttl": 1000, "x-dead-letter-exchange": "dlx"})
    count = 2 * DEAD_LETTER_BATCH + 10
    for i in range(count):
        setup.queue.publish(message(body(i)))
    setup.clock.advance(2)
    assert setup.dead == [("expired", body(i)) for i in range(count)]
    # The first message was in memory; the rest are read DEAD_LETTER_BATCH entries at a time.
    assert [len(ids) for ids in setup.store.reads] == [DEAD_LETTER_BATCH - 1, DEAD_LETTER_BATCH, 10]
    assert setup.memory.held_bytes == 0


def test_drop_head_dead_letters_paged_out_messages_intact() -> None:
    setup = Setup(budget=BODY_BYTES, **{"x-max-length": 3, "x-dead-letter-exchange": "dlx"})
    for i in range(6):
        setup.queue.publish(message(body(i)))
    setup.clock.run_soon()  # the paged-out ones go once they are read back
    assert setup.dead == [("maxlen", body(i)) for i in range(3)]
    assert setup.take_all() == [body(i) for i in range(3, 6)]


def test_purge_releases_only_what_was_held_and_empties_the_store() -> None:
    setup = Setup(budget=4 * BODY_BYTES)
    for i in range(20):
        setup.queue.publish(message(body(i)))
    assert setup.queue.purge() == 20
    assert setup.memory.held_bytes == 0
    assert setup.store.recover() == {}
    assert setup.store.reads == []
    setup.check_accounting()


def test_a_message_the_store_lost_is_dropped_and_the_next_one_delivered() -> None:
    setup = Setup(budget=0)
    for i in range(5):
        setup.queue.publish(message(body(i)))
    lost = [e.stored_id for e in setup.queue.ready][2]
    setup.store.lose.add(lost)
    assert setup.take_all() == [body(i) for i in (0, 1, 3, 4)]
    assert setup.memory.held_bytes == 0
    assert setup.store.recover() == {}


def test_restored_messages_start_paged_out_and_come_back_intact() -> None:
    setup = Setup(budget=5 * BODY_BYTES)
    for i in range(20):
        setup.queue.publish(message(body(i)))
    recovered = setup.store.recover()["/\x00q"]
    fresh = setup.make(5 * BODY_BYTES)
    setup.memory.release(setup.memory.held_bytes)  # the old queue is gone
    fresh.restore(recovered)
    setup.queue = fresh
    assert fresh.message_count == 20 and fresh.paged_out == 20
    assert setup.memory.held_bytes == 20 * PAGED_OUT_BYTES  # no message is in memory
    setup.check_accounting()
    assert setup.take_all() == [body(i) for i in range(20)]


def test_restored_messages_keep_their_stored_expiry_and_priority() -> None:
    setup = Setup(budget=0, **{"x-max-priority": 3, "x-dead-letter-exchange": "dlx"})
    now_ms = setup.clock.wall_clock_ms()
    for i, (priority, expiry) in enumerate([(0, 0), (3, now_ms - 1), (1, now_ms + 60_000)]):
        message_id = setup.store.enqueue(
            "/\x00q",
            "amq.direct",
            "rk",
            message(body(i)).header_payload,
            body(i),
            priority=priority,
            expires_at_ms=expiry,
        )
        assert message_id == i + 1
    recovered = setup.store.recover()["/\x00q"]
    assert recovered == [
        Recovered(1, BODY_BYTES, 0, 0),
        Recovered(2, BODY_BYTES, 3, now_ms - 1),
        Recovered(3, BODY_BYTES, 1, now_ms + 60_000),
    ]
    setup.queue.restore(recovered)
    setup.clock.advance(0)  # the expired head goes at once, dead-lettered as expired
    assert setup.dead == [("expired", body(1))]
    assert setup.take_all() == [body(2), body(0)]  # priority 1 before 0
    setup.queue.restore([Recovered(9, 5, 0, now_ms + 60_000)])
    entry = next(iter(setup.queue.ready))
    assert entry.expires_at is not None
    assert 59 <= entry.expires_at - setup.clock.time() <= 60


def test_published_expiry_and_priority_reach_the_store() -> None:
    setup = Setup(budget=0, **{"x-message-ttl": 5000})
    before = setup.clock.wall_clock_ms()
    setup.queue.publish(message(b"x", priority=7, expiration=1000))
    setup.queue.publish(message(b"y"))
    after = setup.clock.wall_clock_ms()
    first, second = setup.store.recover()["/\x00q"]
    assert first.priority == 7 and before + 1000 <= first.expires_at_ms <= after + 1000
    assert second.priority == 0 and before + 5000 <= second.expires_at_ms <= after + 5000


def test_paged_in_messages_decode_their_properties_only_when_asked() -> None:
    setup = Setup(budget=0)
    setup.queue.publish(message(b"x", priority=4))
    entry = setup.take()
    assert isinstance(entry, Entry) and entry.message is not None
    assert entry.message._properties is None  # delivery forwards the header bytes
    assert entry.message.priority == 4 and entry.message.persistent


def entries(sizes: list[int], loaded: frozenset[int] = frozenset()) -> list[Entry]:
    """Paged-out entries of these sizes (store id = index + 1), except those in `loaded`."""
    made = []
    for index, size in enumerate(sizes):
        entry = Entry(None, index + 1, size)
        entry.stored_id = index + 1
        if index in loaded:
            entry.message = message(b"x" * size)
        made.append(entry)
    return made


def test_page_in_batch_takes_what_fits_and_names_as_many_after_it() -> None:
    batch, ahead = page_in_batch(entries([100] * 10), room_bytes=350)
    assert [e.stored_id for e in batch] == [1, 2, 3]
    assert ahead == [4, 5, 6]


def test_page_in_batch_always_takes_the_head_and_keeps_order() -> None:
    batch, ahead = page_in_batch(entries([500, 10, 10, 10]), room_bytes=100)
    assert [e.stored_id for e in batch] == [1]  # the small ones behind do not jump the queue
    assert ahead == [2]


def test_page_in_batch_skips_messages_in_memory_and_stops_at_the_count() -> None:
    batch, ahead = page_in_batch(entries([1] * 5, loaded=frozenset({1, 3})), room_bytes=10**9)
    assert [e.stored_id for e in batch] == [1, 3, 5]
    assert ahead == []
    many = entries([1] * (3 * PAGE_IN_COUNT_MAX))
    batch, ahead = page_in_batch(many, room_bytes=10**9)
    assert len(batch) == len(ahead) == PAGE_IN_COUNT_MAX
