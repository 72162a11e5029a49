"""Stream offsets for Spark: choosing a batch's end, splitting ranges, the ids the sink gives."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from kanin.spark.ids import batch_write_id, column_message_id, row_message_id, streaming_write_id
from kanin.spark.offsets import (
    OffsetRange,
    StreamExtent,
    batch_end,
    next_of,
    offset_dict,
    resolve,
    split_range,
)


def test_offsets_are_canonical_json_as_spark_compares_them_as_text() -> None:
    assert json.dumps(offset_dict(42)) == '{"next": 42}'
    assert next_of(json.loads(json.dumps(offset_dict(42)))) == 42


@pytest.mark.parametrize("bad", [{}, {"next": "4"}, {"next": -1}, {"next": True}, {"n": 3}])
def test_a_foreign_offset_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="not a kanin stream offset"):
        next_of(bad)


def test_a_batch_ends_at_the_tail_without_a_limit() -> None:
    assert batch_end(10, StreamExtent(0, 500), None, None) == 500


def test_a_batch_holds_at_most_max_records_offsets() -> None:
    assert batch_end(10, StreamExtent(0, 5000), 1000, None) == 1010
    assert batch_end(4500, StreamExtent(0, 5000), 1000, None) == 5000


def test_offsets_retention_removed_do_not_count_against_the_limit() -> None:
    assert batch_end(0, StreamExtent(7000, 9000), 1000, None) == 8000


def test_an_available_now_run_stops_at_the_end_fixed_when_it_began() -> None:
    assert batch_end(0, StreamExtent(0, 9000), None, 4000) == 4000
    assert batch_end(4000, StreamExtent(0, 9000), None, 4000) == 4000


def test_no_news_or_an_empty_stream_ends_the_batch_where_it_starts() -> None:
    assert batch_end(300, None, 1000, None) == 300
    assert batch_end(300, StreamExtent(0, 300), 1000, None) == 300
    assert batch_end(300, StreamExtent(0, 250), None, None) == 300  # never backwards


def test_positions_resolve_against_what_the_stream_holds() -> None:
    extent = StreamExtent(100, 900)
    assert resolve("first", extent) == 100
    assert resolve("last", extent) == 900
    assert resolve(42, extent) == 42
    assert resolve("first", None) == resolve("last", None) == 0


def test_a_range_splits_into_adjoining_near_equal_parts() -> None:
    parts = split_range(OffsetRange(100, 1101), 3, least_width=100)
    assert [(p.start, p.end) for p in parts] == [(100, 434), (434, 768), (768, 1101)]


def test_a_narrow_range_gets_fewer_parts_and_an_empty_one_none() -> None:
    assert split_range(OffsetRange(0, 250), 8, least_width=100) == [
        OffsetRange(0, 125),
        OffsetRange(125, 250),
    ]
    assert split_range(OffsetRange(0, 50), 8, least_width=100) == [OffsetRange(0, 50)]
    assert split_range(OffsetRange(5, 5), 8) == []


@pytest.mark.parametrize("most", [1, 2, 3, 7])
def test_split_parts_cover_the_range_exactly(most: int) -> None:
    parts = split_range(OffsetRange(13, 5013), most, least_width=10)
    assert parts[0].start == 13 and parts[-1].end == 5013
    assert all(a.end == b.start for a, b in pairwise(parts))
    assert len(parts) == most


def test_positional_ids_name_the_write_the_partition_and_the_row() -> None:
    assert row_message_id(streaming_write_id("q-1", "7"), 2, 15) == "qq-1:b7:p2:r15"
    assert row_message_id(batch_write_id("abc"), 0, 0) == "jabc:p0:r0"


def test_the_same_row_of_the_same_write_always_gets_the_same_id() -> None:
    first = row_message_id(streaming_write_id("q", "3"), 1, 9)
    again = row_message_id(streaming_write_id("q", "3"), 1, 9)
    assert first == again != row_message_id(streaming_write_id("q", "4"), 1, 9)


def test_column_ids_are_text_and_a_missing_one_fails() -> None:
    assert column_message_id(1234, "key", 0) == "1234"
    assert column_message_id(b"k-1", "key", 0) == "k-1"
    with pytest.raises(ValueError, match=r"row 5 .* column 'key'"):
        column_message_id(None, "key", 5)
