"""One contract for every message store (kanin/store/api.py), run against MemoryStore and
FileStore alike, after nats-server's store_test.go. The FileStore's own duties (segments,
reclaiming space, torn tails, group commit, disk faults) are in test_store_file.py.

A "restart" is close + a new FileStore on the same directory + recover() for the file store,
and recover() on the same instance for the memory store.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kanin.store.api import Content, Recovered
from kanin.store.file_store import FileStore
from kanin.store.records import queue_key
from store_harness import Q1, Q2, Q3, Harness, Sent, body, expected


@pytest.fixture(params=["memory", "file"])
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    opened = Harness.open(request.param, tmp_path / "store")
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_fresh_store_recovers_nothing(harness: Harness) -> None:
    assert await harness.commit() is True
    assert await harness.restart() == {}


async def test_enqueued_messages_come_back_in_order_with_exact_content(harness: Harness) -> None:
    sent = [
        harness.enqueue(Q1, b"first"),
        harness.enqueue(Q1, b"", exchange="", routing_key="", header=b""),
        harness.enqueue(Q1, bytes(range(256)) * 4, exchange="x" * 255, routing_key="r" * 255),
        harness.enqueue(Q1, b"\x00" * 10, exchange="caf\u00e9", routing_key="\u2603.#"),
        harness.enqueue(Q1, os.urandom(50_000), header=os.urandom(3000)),  # spans segments
        harness.enqueue(Q1, b"last"),
    ]
    assert [m.id for m in sent] == sorted({m.id for m in sent})
    assert await harness.commit() is True
    assert await harness.restart() == expected(sent)
    # A second restart with nothing in between recovers the same again.
    assert await harness.restart() == expected(sent)


async def test_removed_messages_stay_gone_after_restart(harness: Harness) -> None:
    sent = [harness.enqueue(Q1, body(i)) for i in range(10)]
    for message in sent[::3]:
        harness.store.remove(Q1, message.id)
    assert await harness.commit() is True
    kept = [m for i, m in enumerate(sent) if i % 3]
    assert await harness.restart() == expected(kept)
    harness.store.remove(Q1, kept[0].id)
    assert await harness.commit() is True
    assert await harness.restart() == expected(kept[1:])
    assert await harness.restart() == expected(kept[1:])


async def test_removing_every_message_leaves_no_queue(harness: Harness) -> None:
    sent = [harness.enqueue(Q1, body(i)) for i in range(5)]
    for message in sent:
        harness.store.remove(Q1, message.id)
    assert await harness.commit() is True
    recovered = await harness.restart()
    assert recovered.get(Q1, []) == []


async def test_removing_twice_or_an_unknown_id_is_harmless(harness: Harness) -> None:
    a, b = harness.enqueue(Q1, b"a"), harness.enqueue(Q1, b"b")
    harness.store.remove(Q1, a.id)
    harness.store.remove(Q1, a.id)
    harness.store.remove(Q1, 10_000)
    harness.store.delivered(Q1, 10_000)
    assert await harness.commit() is True
    assert await harness.restart() == expected([b])


async def test_delivered_messages_come_back_redelivered(harness: Harness) -> None:
    sent = [harness.enqueue(Q1, body(i)) for i in range(6)]
    harness.store.delivered(Q1, sent[1].id)
    harness.store.delivered(Q1, sent[4].id)
    harness.store.delivered(Q1, sent[4].id)  # twice is the same as once
    harness.store.delivered(Q1, sent[5].id)
    harness.store.remove(Q1, sent[5].id)  # delivered, then acked: gone
    assert await harness.commit() is True
    assert await harness.restart() == expected(sent[:5], redelivered={sent[1].id, sent[4].id})
    # The flag sticks across further restarts, and later deliveries add to it.
    harness.store.delivered(Q1, sent[0].id)
    assert await harness.commit() is True
    flagged = {sent[0].id, sent[1].id, sent[4].id}
    assert await harness.restart() == expected(sent[:5], redelivered=flagged)


async def test_delivered_after_remove_does_not_revive(harness: Harness) -> None:
    a = harness.enqueue(Q1, b"a")
    harness.store.remove(Q1, a.id)
    harness.store.delivered(Q1, a.id)
    assert await harness.commit() is True
    assert (await harness.restart()).get(Q1, []) == []


async def test_after_commit_waiters_run_later_in_order_with_ok(harness: Harness) -> None:
    calls: list[tuple[str, bool, set[int]]] = []

    def waiter(name: str, wanted: set[int]) -> None:
        def run(ok: bool) -> None:
            calls.append((name, ok, wanted - harness.durable_ids()))

        harness.store.after_commit(run)

    first = {harness.enqueue(Q1, body(i)).id for i in range(3)}
    waiter("first", first)
    second = first | {harness.enqueue(Q2, body(i)).id for i in range(3)}
    waiter("second", second)
    waiter("third", second)  # nothing new appended: still runs
    assert calls == []  # never synchronously
    assert await harness.commit() is True
    # Each ran once, in order, with ok=True, and everything before it was durable by then.
    assert calls == [("first", True, set()), ("second", True, set()), ("third", True, set())]


async def test_after_commit_with_nothing_appended_still_runs(harness: Harness) -> None:
    assert await harness.commit() is True
    assert await harness.commit() is True


async def test_queues_are_independent(harness: Harness) -> None:
    queues = [Q1, Q2, Q3, queue_key("/", "orders\x00x"), queue_key("/", "")]
    rng = random.Random(7)
    sent: list[Sent] = []
    for i in range(60):
        sent.append(harness.enqueue(rng.choice(queues), body(i, rng.randrange(1, 300))))
    # Remove everything from one queue, half of another, and deliver in a third.
    gone = {m.id for m in sent if m.queue == Q2}
    gone |= {m.id for m in sent if m.queue == Q1 and m.id % 2}
    for message in sent:
        if message.id in gone:
            harness.store.remove(message.queue, message.id)
    flagged = {m.id for m in sent if m.queue == Q3}
    for message_id in flagged:
        harness.store.delivered(Q3, message_id)
    survivors = [m for m in sent if m.id not in gone]
    assert await harness.commit() is True
    recovered = await harness.restart()
    assert recovered == expected(survivors, redelivered=flagged)
    assert Q2 not in recovered or recovered[Q2] == []


async def test_ids_increase_across_restarts(harness: Harness) -> None:
    seen = [harness.enqueue(Q1, body(i)).id for i in range(3)]
    assert await harness.commit() is True
    await harness.restart()
    seen.append(harness.enqueue(Q1, b"after one restart").id)
    assert await harness.commit() is True
    await harness.restart()
    seen.append(harness.enqueue(Q2, b"after two restarts").id)
    assert seen == sorted(set(seen)), seen


async def test_ids_are_not_reused_after_everything_was_removed(harness: Harness) -> None:
    sent = [harness.enqueue(Q1, body(i)) for i in range(3)]
    # On disk first: an id withdrawn before any round wrote it is on disk nowhere, so
    # nothing could take a new message for it (see FileStore.remove).
    assert await harness.commit() is True
    for message in sent:
        harness.store.remove(Q1, message.id)
    assert await harness.commit() is True
    await harness.restart()
    await harness.restart()
    fresh = harness.enqueue(Q1, b"new")
    assert fresh.id > max(m.id for m in sent), (fresh.id, [m.id for m in sent])


@pytest.mark.parametrize("seed", range(6))
async def test_random_workload_matches_a_model(harness: Harness, seed: int) -> None:
    rng = random.Random(seed)
    queues = [Q1, Q2, Q3]
    live: dict[int, Sent] = {}
    flagged: set[int] = set()
    for _ in range(8):
        for _ in range(rng.randrange(1, 40)):
            roll = rng.random()
            if roll < 0.55 or not live:
                message = harness.enqueue(rng.choice(queues), body(rng.randrange(1000), 300))
                live[message.id] = message
            elif roll < 0.85:
                message = live.pop(rng.choice(sorted(live)))
                harness.store.remove(message.queue, message.id)
                flagged.discard(message.id)
            else:
                message = live[rng.choice(sorted(live))]
                harness.store.delivered(message.queue, message.id)
                flagged.add(message.id)
        assert await harness.commit() is True
        if rng.random() < 0.5:
            assert await harness.restart() == expected(list(live.values()), flagged)
    assert await harness.restart() == expected(list(live.values()), flagged)
    assert await harness.restart() == expected(list(live.values()), flagged)


# -- reading back (deep queues) ----------------------------------------------------------------


def content_of(message: Sent) -> Content:
    return Content(message.exchange, message.routing_key, message.header, message.body)


async def test_read_gives_back_exact_content_before_and_after_commit(harness: Harness) -> None:
    sent = [
        harness.enqueue(Q1, body(1)),
        harness.enqueue(Q1, b"", exchange="", routing_key="", header=b""),
        harness.enqueue(Q1, os.urandom(50_000), header=os.urandom(3000)),  # spans segments
        harness.enqueue(Q1, b"caf\xc3\xa9", exchange="caf\u00e9", routing_key="\u2603.#"),
    ]
    ids = [m.id for m in sent]
    # Not yet on disk, then on disk: the same content, in the order asked, duplicates too.
    assert harness.store.read(Q1, ids) == [content_of(m) for m in sent]
    assert await harness.commit() is True
    asked = [ids[3], ids[0], ids[2], ids[0]]
    assert harness.store.read(Q1, asked) == [content_of(sent[i]) for i in (3, 0, 2, 0)]
    assert harness.store.read(Q1, []) == []


async def test_read_of_a_removed_or_unknown_id_is_none(harness: Harness) -> None:
    a, b = harness.enqueue(Q1, b"a"), harness.enqueue(Q1, b"b")
    harness.store.remove(Q1, a.id)
    assert harness.store.read(Q1, [a.id, b.id, 10_000]) == [None, content_of(b), None]
    assert await harness.commit() is True
    assert harness.store.read(Q1, [a.id, b.id, 10_000]) == [None, content_of(b), None]


async def test_messages_read_back_after_a_restart_are_intact(harness: Harness) -> None:
    sent = [harness.enqueue(Q1, body(i, 100 + 37 * i)) for i in range(40)]
    assert await harness.commit() is True
    await harness.restart()
    assert harness.store.read(Q1, [m.id for m in sent]) == [content_of(m) for m in sent]


async def test_read_later_answers_on_a_later_turn_as_read_does(harness: Harness) -> None:
    sent = [harness.enqueue(Q1, body(i, 50 + 900 * i)) for i in range(6)]
    ids = [m.id for m in sent]
    # Before the commit round (from memory), after it (from disk), and both in one read.
    assert await harness.read_later(Q1, ids) == [content_of(m) for m in sent]
    assert await harness.commit() is True
    more = [harness.enqueue(Q1, body(i)) for i in range(6, 8)]
    asked = [ids[4], more[1].id, ids[0], 10_000, ids[4]]
    expected_contents = [content_of(sent[4]), content_of(more[1]), content_of(sent[0])]
    expected_contents += [None, content_of(sent[4])]
    assert await harness.read_later(Q1, asked, [ids[5], more[0].id]) == expected_contents
    assert await harness.read_later(Q1, []) == []


async def test_read_later_answers_what_was_live_when_it_was_asked(harness: Harness) -> None:
    """The caller tells by itself which messages left meanwhile: the store answers for the
    moment of the call, whatever is removed (and reclaimed) before the answer comes."""
    sent = [harness.enqueue(Q1, body(i, 700)) for i in range(20)]  # several segments
    assert await harness.commit() is True
    late = harness.enqueue(Q1, b"not on disk yet")
    removed = harness.enqueue(Q1, b"removed before the read")
    harness.store.remove(Q1, removed.id)
    answered: list[list[Content | None]] = []
    ids = [m.id for m in [*sent, late, removed]]
    harness.store.read_later(Q1, ids, [], answered.append)
    for message in [*sent, late]:
        harness.store.remove(Q1, message.id)
    assert await harness.commit() is True
    while not answered:
        await asyncio.sleep(0.001)
    assert answered == [[content_of(m) for m in [*sent, late]] + [None]]
    assert await harness.restart() == {}


async def test_recover_says_size_priority_expiry_and_redelivered_without_content(
    harness: Harness,
) -> None:
    ids = [
        harness.store.enqueue(Q1, "x", "rk", b"h", b"12345", priority=9, expires_at_ms=2**40),
        harness.store.enqueue(Q1, "x", "rk", b"h", b""),
        harness.store.enqueue(Q2, "x", "rk", b"h", b"abc", priority=255, expires_at_ms=1),
    ]
    harness.store.delivered(Q1, ids[1])
    assert await harness.commit() is True
    assert await harness.restart_recovered() == {
        Q1: [Recovered(ids[0], 5, 9, 2**40), Recovered(ids[1], 0, 0, 0, True, 1)],
        Q2: [Recovered(ids[2], 3, 255, 1)],
    }


async def test_a_delivery_mark_carries_the_returns_before_it_and_the_crash_adds_one(
    harness: Harness,
) -> None:
    """A queue that counts deliveries marks each one with the times the message came back
    before it: recovered, the message has come back once more (it was out at the crash)."""
    first, second, third = (harness.store.enqueue(Q1, "x", "rk", b"h", b"m") for _ in range(3))
    harness.store.delivered(Q1, first)
    harness.store.delivered(Q1, first, 1)
    harness.store.delivered(Q1, first, 2)
    harness.store.delivered(Q1, second, 4)
    assert await harness.commit() is True
    assert await harness.restart_recovered() == {
        Q1: [
            Recovered(first, 1, redelivered=True, returns=3),
            Recovered(second, 1, redelivered=True, returns=5),
            Recovered(third, 1),
        ]
    }


async def test_what_an_opener_records_goes_into_the_round_it_opens(harness: Harness) -> None:
    """at_round_start: a deduplicating exchange writes a round's ids as that round starts,
    and the confirms waiting for the round cover them."""
    sent = harness.enqueue(Q1, b"first")
    late: list[int] = []

    def opener() -> None:
        late.append(harness.store.enqueue(Q1, "x", "rk", b"h", b"late"))

    harness.store.at_round_start(opener)
    assert await harness.commit() is True
    assert late, "the round that covers `first` ran the opener"
    if isinstance(harness.store, FileStore):
        assert late[0] in harness.durable_ids()
    recovered = await harness.restart_recovered()
    assert [r.id for r in recovered[Q1]] == [sent.id, late[0]]


async def test_an_opener_alone_starts_a_round(harness: Harness) -> None:
    ran = asyncio.Event()
    harness.store.at_round_start(ran.set)
    await asyncio.wait_for(ran.wait(), 5)
