"""Stream offsets as Spark sees them, and how a micro-batch's range is chosen and split.

An offset Spark keeps in its checkpoint is {"next": N}: the stream offset of the next
message the query has not read, so a batch is the half-open range [start, end). Spark
compares offsets as JSON text, so they are always built here, with one key and an int,
never by hand.

A stream's offsets grow by one per message, but a write the broker failed leaves a hole
and retention removes the oldest messages, so a range may hold fewer messages than its
width; it never holds more. Nothing here imports pyspark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

NEXT = "next"
# A partition reads at least this many offsets: each opens its own connection, so a small
# batch split many ways would spend more on connecting than on reading.
MIN_PARTITION_OFFSETS = 500


def offset_dict(next_offset: int) -> dict[str, int]:
    return {NEXT: next_offset}


def next_of(offset: Mapping[str, Any]) -> int:
    """The N of {"next": N}; a ValueError names anything else (a checkpoint written by
    another source, say)."""
    value = offset.get(NEXT) if isinstance(offset, Mapping) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"not a kanin stream offset: {offset!r} (expected {{'next': N}})")
    return value


@dataclass(frozen=True)
class StreamExtent:
    """What a stream holds now: offsets in [first, tail). tail is one past the newest
    committed message (the next offset a message will get, holes aside)."""

    first: int
    tail: int


@dataclass(frozen=True)
class OffsetRange:
    start: int
    end: int

    @property
    def width(self) -> int:
        return self.end - self.start


def batch_end(
    start: int, extent: StreamExtent | None, max_records: int | None, stop_at: int | None
) -> int:
    """Where the batch from `start` ends: at the tail, no further than `stop_at` (the end an
    AvailableNow run fixed) and than `max_records` offsets past the first one still held
    (offsets retention removed hold nothing, so they do not count against the limit).
    Never below start: an empty stream (extent None) or no news gives start itself."""
    if extent is None:
        return start
    end = extent.tail
    if stop_at is not None:
        end = min(end, stop_at)
    if max_records is not None:
        end = min(end, max(start, extent.first) + max_records)
    return max(start, end)


def split_range(
    whole: OffsetRange, most: int, least_width: int = MIN_PARTITION_OFFSETS
) -> list[OffsetRange]:
    """`whole` cut into at most `most` adjoining ranges of near-equal width, each at least
    `least_width` wide unless the whole is narrower; none for an empty range."""
    if whole.width <= 0:
        return []
    count = max(1, min(most, whole.width // least_width))
    step, extra = divmod(whole.width, count)
    ranges = []
    start = whole.start
    for index in range(count):
        end = start + step + (1 if index < extra else 0)
        ranges.append(OffsetRange(start, end))
        start = end
    return ranges


def resolve(position: Literal["first", "last"] | int, extent: StreamExtent | None) -> int:
    """An option's position as an offset: "first" the first message still held, "last"
    the tail (only what comes later), a number itself. An empty stream has none of its
    own yet, and offset 0 there means "from the first message that comes"."""
    if isinstance(position, int):
        return position
    if extent is None:
        return 0
    return extent.first if position == "first" else extent.tail
