"""The deduplication cache without a broker: ids keep their type, the oldest is evicted
first, ids expire by their TTL on a given wall clock, a durable cache writes a round's ids
as one record, removes it once none is cached and is rebuilt from them; checked against a
plain model too."""

from __future__ import annotations

import datetime
from collections import OrderedDict
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

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
        cache.admit(key)
    assert [cache.seen(k) for k in (b"a", b"b", b"c")] == [False, True, True]
    assert len(cache) == 2


def test_ids_expire_by_their_own_ttl_or_the_caches() -> None:
    clock = Clock()
    cache = DedupCache(100, 1000, clock)
    cache.admit(b"default")
    cache.admit(b"short", ttl_ms=100)
    clock.ms += 101
    assert cache.seen(b"default") and not cache.seen(b"short")
    clock.ms += 900
    assert not cache.seen(b"default")
    assert len(cache) == 0


def test_expired_ids_leave_from_the_oldest_end_as_new_ones_come() -> None:
    clock = Clock()
    cache = DedupCache(1000, 50, clock)
    for n in range(100):
        cache.admit(b"%d" % n)
    clock.ms += 51
    cache.admit(b"new")
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
    assert cache.admit(b"a") and cache.admit(b"b", ttl_ms=10_000)
    assert store.records == {} and cache.seen(b"a")  # seen at once, written as the round starts
    store.round()
    assert len(store.records) == 1
    cache.admit(b"c")
    cache.admit(b"d")  # evicts a; its record still holds b
    store.round()
    assert len(store.records) == 2
    cache.admit(b"e")  # evicts b: the first record holds nothing now and goes
    store.round()
    assert len(store.records) == 2
    clock.ms += 10_001
    again = DedupCache(2, None, clock, store, "key")  # type: ignore[arg-type]
    again.restore(sorted(store.records.items()))
    assert [again.seen(k) for k in (b"c", b"d", b"e")] == [False, True, True]
    again.clear()
    assert store.records == {}


def test_admit_caches_a_new_id_and_says_a_cached_one_is_a_duplicate() -> None:
    clock = Clock()
    cache = DedupCache(10, None, clock)
    assert cache.admit(b"a") and not cache.admit(b"a") and cache.admit(b"b")
    assert cache.admit(b"c", ttl_ms=5) and not cache.admit(b"c")
    clock.ms += 5
    assert cache.admit(b"c")  # expired: new again
    assert len(cache) == 3


class Model:
    """What the cache promises, the plain way: an ordered dict of id -> expiry (0: never).
    An expired id leaves when looked up, or when it is the oldest and an id comes."""

    def __init__(self, size: int, ttl_ms: int | None, clock: Clock) -> None:
        self.size, self.ttl_ms, self.clock = size, ttl_ms, clock
        self.ids: OrderedDict[bytes, int] = OrderedDict()

    def alive(self, key: bytes) -> bool:
        expires_at = self.ids.get(key)
        if expires_at is None:
            return False
        if expires_at and expires_at <= self.clock.ms:
            del self.ids[key]
            return False
        return True

    def admit(self, key: bytes, ttl_ms: int | None) -> bool:
        if self.alive(key):
            return False
        now = self.clock.ms
        while self.ids:  # expired ids leave from the oldest end only
            oldest, expires_at = next(iter(self.ids.items()))
            if not expires_at or expires_at > now:
                break
            del self.ids[oldest]
        ttl = ttl_ms if ttl_ms is not None else self.ttl_ms
        self.ids[key] = now + ttl if ttl else 0
        while len(self.ids) > self.size:
            self.ids.popitem(last=False)
        return True


steps = st.one_of(
    st.tuples(st.just("admit"), st.integers(0, 12), st.sampled_from([None, 1, 3, 20])),
    st.tuples(st.just("seen"), st.integers(0, 12), st.none()),
    st.tuples(st.just("tick"), st.integers(1, 4), st.none()),
)
operations = st.lists(steps, max_size=120)
with_rounds = st.lists(
    st.one_of(steps, st.tuples(st.just("round"), st.none(), st.none())), max_size=120
)


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(1, 6),
    ttl_ms=st.sampled_from([None, 2, 10]),
    durable=st.booleans(),
    ops=operations,
)
def test_the_cache_behaves_as_an_ordered_dict_of_expiries_and_comes_back_from_its_records(
    size: int, ttl_ms: int | None, durable: bool, ops: list[tuple[str, Any, Any]]
) -> None:
    """Batches of one id (a round after every id, or batch_ids=1 in memory), so that the
    order is exact; ids expire and come again, stale listings pile up and are walked past,
    records go once none of their ids is cached, and a restart keeps what was alive."""
    clock = Clock()
    store = RoundStore() if durable else None
    cache = DedupCache(size, ttl_ms, clock, store, "key", batch_ids=1)  # type: ignore[arg-type]
    model = Model(size, ttl_ms, clock)
    for op, value, ttl in ops:
        key = b"%d" % value if value is not None else b""
        if op == "admit":
            assert cache.admit(key, ttl) == model.admit(key, ttl)
            if store is not None:
                store.round()
        elif op == "seen":
            assert cache.seen(key) == model.alive(key)
        elif op == "tick":
            clock.ms += value
    alive = {key for key in list(model.ids) if model.alive(key)}
    assert {key for key in map(b"%d".__mod__, range(13)) if cache.seen(key)} == alive
    if store is not None:
        again = DedupCache(size, ttl_ms, clock, store, "key")  # type: ignore[arg-type]
        again.restore(sorted(store.records.items()))
        assert {key for key in map(b"%d".__mod__, range(13)) if again.seen(key)} == alive
        again.clear()
        assert store.records == {}


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(1, 6),
    ttl_ms=st.sampled_from([None, 2, 10]),
    durable=st.booleans(),
    batch_ids=st.sampled_from([3, 4096]),
    ops=with_rounds,
)
def test_batches_of_many_ids_keep_the_order_exact(
    size: int, ttl_ms: int | None, durable: bool, batch_ids: int, ops: list[tuple[str, Any, Any]]
) -> None:
    """Ids share batches (commit rounds when the test says, or batch_ids in memory), and
    expire and come again within their batch or after it: the cache still answers as
    the model does. A restart keeps every id alive and no more than the size. (It may
    also bring back an id evicted from a record whose other ids were still cached when
    an id of a later record has expired since: the records are not rewritten on
    eviction.)"""
    clock = Clock()
    store = RoundStore() if durable else None
    cache = DedupCache(size, ttl_ms, clock, store, "key", batch_ids)  # type: ignore[arg-type]
    model = Model(size, ttl_ms, clock)
    for op, value, ttl in ops:
        key = b"%d" % value if value is not None else b""
        if op == "admit":
            assert cache.admit(key, ttl) == model.admit(key, ttl)
        elif op == "seen":
            assert cache.seen(key) == model.alive(key)
        elif op == "tick":
            clock.ms += value
        elif op == "round" and store is not None:
            store.round()
    keys = [b"%d" % n for n in range(13)]
    alive = {key for key in list(model.ids) if model.alive(key)}
    assert {key for key in keys if cache.seen(key)} == alive
    if store is not None:
        store.round()
        again = DedupCache(size, ttl_ms, clock, store, "key")  # type: ignore[arg-type]
        again.restore(sorted(store.records.items()))
        restored = {key for key in keys if again.seen(key)}
        assert alive <= restored and len(again) <= size


def test_ids_that_expire_and_come_again_do_not_pile_up_in_the_order_lists() -> None:
    """An id that never expires holds the oldest end, and 20 others come again and again
    after expiring, each listed anew: the lists of ids in order stay within twice the
    cached ids plus a batch."""
    clock = Clock()
    cache = DedupCache(1000, None, clock, batch_ids=8)
    cache.admit(b"forever")
    for n in range(10_000):
        assert cache.admit(b"brief %d" % (n % 20), ttl_ms=1)
        clock.ms += 1
    assert len(cache) == 21 and cache.seen(b"forever")
    listed = sum(len(keys) for keys in cache._batches)  # white box: the order lists
    assert listed <= 2 * len(cache) + 8 + 1


def test_an_id_that_leaves_before_its_round_starts_is_not_written() -> None:
    store = RoundStore()
    cache = DedupCache(1, None, Clock(), store, "key")  # type: ignore[arg-type]
    cache.admit(b"first-id")
    cache.admit(b"second-id")  # evicts first-id before the round starts
    store.round()
    (body,) = store.records.values()
    assert b"second-id" in body and b"first-id" not in body
