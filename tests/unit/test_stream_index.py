"""The stream log's memory (kanin/store/stream_index.py): the sparse index over segments and
the tail cache. Pure: no files, no loop."""

from __future__ import annotations

import random

import pytest

from kanin.store import stream_index
from kanin.store.api import StreamRecord
from kanin.store.stream_index import INDEX_EVERY, StreamIndex, TailCache

HEADER = 8  # a segment file's header: the first record's position


def build(
    layout: list[list[tuple[int, int]]], record_bytes: int = 100
) -> tuple[StreamIndex, list[tuple[int, int, int, int]]]:
    """An index over segments 1, 2, ... holding these (offset, timestamp) records, each
    `record_bytes` long; also every record as (segment, offset, position, timestamp)."""
    index = StreamIndex()
    placed = []
    for number, segment in enumerate(layout, 1):
        position = HEADER
        for offset, timestamp in segment:
            index.add(number, offset, position, timestamp, position + record_bytes)
            placed.append((number, offset, position, timestamp))
            position += record_bytes
    return index, placed


def test_one_entry_every_index_every_records_and_the_first_of_each_segment() -> None:
    index, _ = build([[(i, i) for i in range(2500)], [(i, i) for i in range(2500, 2600)]])
    first, second = index.segments
    assert list(first.offsets) == [0, 1024, 2048]
    assert list(first.positions) == [HEADER, HEADER + 1024 * 100, HEADER + 2048 * 100]
    assert list(second.offsets) == [2500]
    assert (first.first_offset, first.last_offset, first.count) == (0, 2499, 2500)
    assert (second.first_ts, second.last_ts) == (2500, 2599)
    assert first.end == HEADER + 2500 * 100
    assert index.size_bytes == first.end + second.end


def test_locate_starts_at_the_nearest_entry_at_or_before_the_offset() -> None:
    index, _ = build([[(i, 0) for i in range(3000)], [(i, 0) for i in range(3000, 3010)]])
    assert index.locate(0) == (0, HEADER)
    assert index.locate(1023) == (0, HEADER)
    assert index.locate(1024) == (0, HEADER + 1024 * 100)
    assert index.locate(2999) == (0, HEADER + 2048 * 100)
    assert index.locate(3000) == (1, HEADER)
    assert index.locate(3009) == (1, HEADER)
    assert index.locate(3010) is None
    # Below the first offset (retention moved it): the first record.
    index.drop_oldest()
    assert index.locate(5) == (0, HEADER)


def test_locate_steps_over_holes_at_a_segments_end() -> None:
    # Offsets 10..19 were lost (a failed commit round) after segment 1's last record.
    index, _ = build([[(i, 0) for i in range(10)], [(i, 0) for i in range(20, 30)]])
    assert index.locate(9) == (0, HEADER)
    assert index.locate(10) == (1, HEADER)
    assert index.locate(15) == (1, HEADER)


def test_drop_oldest_gives_back_its_bytes() -> None:
    index, _ = build([[(0, 0), (1, 0)], [(2, 0)]])
    before = index.size_bytes
    dropped = index.drop_oldest()
    assert dropped.number == 1
    assert index.size_bytes == before - dropped.end
    assert index.first_offset == 2


def test_offsets_must_grow() -> None:
    index, _ = build([[(5, 0)]])
    with pytest.raises(AssertionError):
        index.add(1, 5, 200, 0, 300)
    with pytest.raises(AssertionError):
        index.add(2, 4, HEADER, 0, 100)


@pytest.mark.parametrize("seed", range(5))
def test_offset_for_timestamp_is_never_late_and_early_by_less_than_an_index_step(
    seed: int,
) -> None:
    rng = random.Random(seed)
    layout, offset, timestamp = [], 0, 1000
    for _ in range(rng.randint(1, 4)):
        segment = []
        for _ in range(rng.randint(1, 3000)):
            offset += rng.choice((1, 1, 1, 7))  # holes now and then
            timestamp += rng.choice((0, 0, 1, 5))  # equal timestamps too
            segment.append((offset, timestamp))
        layout.append(segment)
    index, placed = build(layout)
    stamps = [(off, ts) for _, off, _, ts in placed]
    for wanted in [0, 1000, stamps[0][1], stamps[-1][1], stamps[-1][1] + 1] + [
        rng.randint(1000, stamps[-1][1] + 2) for _ in range(200)
    ]:
        exact = next((off for off, ts in stamps if ts >= wanted), None)
        found = index.offset_for_timestamp(wanted)
        if exact is None:
            assert found is None
            continue
        assert found is not None and found <= exact, (wanted, found, exact)
        early = sum(1 for off, _ in stamps if found <= off < exact)
        assert early < INDEX_EVERY, (wanted, found, exact)


def test_offset_for_timestamp_is_exact_at_a_segment_start() -> None:
    index, _ = build([[(0, 10), (1, 20)], [(2, 30), (3, 40)]])
    assert index.offset_for_timestamp(21) == 2
    assert index.offset_for_timestamp(5) == 0
    assert index.offset_for_timestamp(41) is None


# -- the tail cache -------------------------------------------------------------------------


def record(offset: int, body: bytes = b"x", timestamp: int = 0) -> StreamRecord:
    return StreamRecord(offset, timestamp, "ex", "rk", b"h", body)


def test_the_tail_cache_keeps_the_uncommitted_and_the_newest_committed_within_budget() -> None:
    cost = 100 + stream_index.ENTRY_OVERHEAD_BYTES
    cache = TailCache(budget=3 * cost)
    for offset in range(10):
        cache.add(record(offset), 100)
    for offset in range(6):
        assert cache.commit(offset)[1].offset == offset
    cache.evict()
    # Committed 0..5, three fit: 3, 4, 5; the uncommitted 6..9 stay whatever their size.
    assert cache.first == 3
    assert [r.offset for r in cache.records(3, 6, 100, 10**9)] == [3, 4, 5]
    assert len(cache) == 7


def test_the_tail_cache_forgets_lost_offsets() -> None:
    cache = TailCache(budget=10**9)
    for offset in range(6):
        cache.add(record(offset), 10)
    cache.commit(0)
    cache.commit(4)  # 1, 2, 3 were in a failed round
    assert [r.offset for r in cache.records(0, 5, 100, 10**9)] == [0, 4]
    assert [r.offset for r in cache.records(2, 5, 100, 10**9)] == [4]


def test_a_lost_record_leaves_the_tail_cache_before_a_later_commit() -> None:
    cache = TailCache(budget=10**9)
    for offset in range(4):
        cache.add(record(offset), 10)
    cache.commit(0)
    cache.lose(1)
    cache.lose(2)
    assert cache._entries[1:3] == [None, None]
    cache.lose(0)  # committed already: kept
    assert cache.commit(3)[1].offset == 3
    assert [r.offset for r in cache.records(0, 4, 100, 10**9)] == [0, 3]


def test_tail_cache_reads_respect_the_record_and_byte_limits() -> None:
    cache = TailCache(budget=10**9)
    for offset in range(10):
        cache.add(record(offset, b"b" * 10), 50)
        cache.commit(offset)
    assert [r.offset for r in cache.records(2, 10, 3, 10**9)] == [2, 3, 4]
    assert [r.offset for r in cache.records(0, 10, 100, 25)] == [0, 1]
    assert [r.offset for r in cache.records(0, 10, 100, 30)] == [0, 1, 2]
    # A first record bigger than the budget still comes, alone.
    assert [r.offset for r in cache.records(5, 10, 100, 3)] == [5]
    # Nothing at or past the limit.
    assert [r.offset for r in cache.records(7, 8, 100, 10**9)] == [7]
    assert cache.records(8, 8, 100, 10**9) == []


def test_the_tail_cache_list_is_cut_as_it_is_evicted() -> None:
    cache = TailCache(budget=0)
    for offset in range(20_000):
        cache.add(record(offset), 10)
        cache.commit(offset)
        cache.evict()
    assert cache.first == 20_000
    assert len(cache._entries) < 10_000
    cache.add(record(20_000), 10)
    cache.commit(20_000)
    assert [r.offset for r in cache.records(20_000, 20_001, 10, 100)] == [20_000]


def test_tail_cache_timestamps() -> None:
    cache = TailCache(budget=10**9, first=100)
    for offset in range(100, 110):
        cache.add(record(offset, timestamp=offset * 10), 10)
    for offset in range(100, 105):
        cache.commit(offset)
    assert cache.exact_offset_for_timestamp(100, 1025) == 103
    assert cache.exact_offset_for_timestamp(100, 1045) is None  # 105.. are not committed
    assert cache.pending_offset_for_timestamp(1045) == 105
    assert cache.pending_offset_for_timestamp(1071) == 108
    assert cache.pending_offset_for_timestamp(2000) is None
