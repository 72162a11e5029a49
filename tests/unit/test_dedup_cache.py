"""The deduplication cache without a broker: ids keep their type, the oldest is evicted
first, ids expire by their TTL on a given wall clock, and a durable cache writes and removes
one store record per id and is rebuilt from them."""

from __future__ import annotations

import asyncio
import datetime
from decimal import Decimal

from kanin.core.dedup_cache import DedupCache, dedup_key
from kanin.store.memory_store import MemoryStore
from kanin.store.records import exchange_key


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


def test_a_durable_cache_writes_one_record_per_id_and_comes_back_from_them() -> None:
    store = MemoryStore(asyncio.new_event_loop())
    store.recover()
    key = exchange_key("dedup", "/", "x")
    clock = Clock()
    cache = DedupCache(3, None, clock, store, key)
    for id_ in (b"a", b"b", b"c", b"d"):  # a is evicted: its record goes
        assert cache.add(id_, ttl_ms=10_000 if id_ == b"b" else None)
    recovered = store.recover()[key]
    assert [store.read(key, [r.id])[0].body for r in recovered] == [b"b", b"c", b"d"]
    clock.ms += 10_001  # b has expired by the restart
    again = DedupCache(2, None, clock, store, key)
    again.restore((r.id, r.expires_at_ms, store.read(key, [r.id])[0].body) for r in recovered)
    assert [again.seen(k) for k in (b"b", b"c", b"d")] == [False, True, True]
    assert len(store.recover()[key]) == 2
    again.clear()
    assert key not in store.recover()
