"""The deduplication cache without a broker: ids keep their type, the oldest is evicted
first, ids expire by their TTL on a given wall clock, and a durable cache writes and removes
one store record per id and is rebuilt from them."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

from kanin.core.dedup_cache import DedupCache, dedup_key


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


def test_ids_keep_their_type() -> None:
    keys = [dedup_key(v) for v in (1, "1", 1.0, True, b"1", Decimal("1"))]
    assert None not in keys and len(set(keys)) == 6
    when = datetime.datetime(2026, 1, 1)
    assert dedup_key(when) == dedup_key(datetime.datetime(2026, 1, 1)) is not None
    for nothing in (None, [1], {"a": 1}):
        assert dedup_key(nothing) is None


def test_the_oldest_id_is_evicted_first() -> None:
    cache = DedupCache(2, None, Clock())
    for key in (b"a", b"b", b"c"):
        assert not cache.seen(key)
        cache.add(key)
    assert [cache.seen(k) for k in (b"a", b"b", b"c")] == [False, True, True]
    assert len(cache) == 2


def test_ids_expire_by_their_own_ttl_or_the_caches() -> None:
    clock = Clock()
    cache = DedupCache(100, 1000, clock)
    cache.add(b"default")
    cache.add(b"short", ttl_ms=100)
    clock.ms += 101
    assert cache.seen(b"default") and not cache.seen(b"short")
    clock.ms += 900
    assert not cache.seen(b"default")
    assert len(cache) == 0


def test_expired_ids_leave_from_the_oldest_end_as_new_ones_come() -> None:
    clock = Clock()
    cache = DedupCache(1000, 50, clock)
    for n in range(100):
        cache.add(b"%d" % n)
    clock.ms += 51
    cache.add(b"new")
    assert len(cache) == 1


class RoundStore:
    """A store whose commit rounds start when the test says (`round`)."""

    def __init__(self) -> None:
        self.records: dict[int, bytes] = {}
        self.openers: list[Any] = []
        self.next_id = 1

    def enqueue(self, queue: str, exchange: str, rk: str, header: bytes, body: bytes) -> int:
        self.records[self.next_id] = body
        self.next_id += 1
        return self.next_id - 1

    def remove(self, queue: str, record: int) -> None:
        del self.records[record]

    def at_round_start(self, opener: Any) -> None:
        self.openers.append(opener)

    def round(self) -> None:
        openers, self.openers = self.openers, []
        for opener in openers:
            opener()


def test_a_durable_cache_writes_a_rounds_ids_as_one_record_and_comes_back_from_them() -> None:
    store = RoundStore()
    clock = Clock()
    cache = DedupCache(3, None, clock, store, "key")  # type: ignore[arg-type]
    assert cache.add(b"a") and cache.add(b"b", ttl_ms=10_000)
    assert store.records == {} and cache.seen(b"a")  # seen at once, written as the round starts
    store.round()
    assert len(store.records) == 1
    cache.add(b"c")
    cache.add(b"d")  # evicts a; its record still holds b
    store.round()
    assert len(store.records) == 2
    cache.add(b"e")  # evicts b: the first record holds nothing now and goes
    store.round()
    assert len(store.records) == 2
    clock.ms += 10_001
    again = DedupCache(2, None, clock, store, "key")  # type: ignore[arg-type]
    again.restore(sorted(store.records.items()))
    assert [again.seen(k) for k in (b"c", b"d", b"e")] == [False, True, True]
    again.clear()
    assert store.records == {}
