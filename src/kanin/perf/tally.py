"""What one worker process counts, and how the parent adds the workers up.

Producers keep one status byte per sequence number (0 sent, 1 confirmed, 2 nacked);
consumers keep one receipt count per sequence number, per stream. Both are plain
bytearrays: a million messages cost a megabyte, and they cross the process pipe as bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SENT, CONFIRMED, NACKED, UNUSED = 0, 1, 2, 3


class Counters:
    """Running totals of one worker process; `snapshot` is what goes to the parent."""

    __slots__ = (
        "confirmed",
        "consumed",
        "duplicates",
        "foreign",
        "last_confirm_ns",
        "last_consume_ns",
        "last_publish_ns",
        "nacked",
        "published",
        "unique",
    )

    def __init__(self) -> None:
        self.published = 0
        self.confirmed = 0
        self.nacked = 0
        self.consumed = 0  # deliveries of this run's messages
        self.unique = 0  # ... counting each (stream, sequence) once
        self.duplicates = 0
        self.foreign = 0  # deliveries of messages from another run or tool
        self.last_publish_ns = 0
        self.last_confirm_ns = 0
        self.last_consume_ns = 0

    def snapshot(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


def add_snapshots(snapshots: list[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for snapshot in snapshots:
        for name, value in snapshot.items():
            if name.startswith("last_"):
                total[name] = max(total.get(name, 0), value)
            else:
                total[name] = total.get(name, 0) + value
    return total


class Receipts:
    """Per stream, how many times each sequence number was delivered (saturating at 255)."""

    def __init__(self, counters: Counters) -> None:
        self.streams: dict[int, bytearray] = {}
        self.counters = counters

    def mark(self, stream: int, seq: int) -> None:
        seen = self.streams.get(stream)
        if seen is None:
            seen = self.streams[stream] = bytearray(max(1024, seq + 1))
        elif seq >= len(seen):
            seen.extend(bytes(max(seq + 1, 2 * len(seen)) - len(seen)))
        count = seen[seq]
        if count == 0:
            self.counters.unique += 1
        else:
            self.counters.duplicates += 1
        if count < 255:
            seen[seq] = count + 1


@dataclass
class WorkerResult:
    counters: dict[str, int]
    confirm_latency: list[int]  # histogram bucket counts
    confirm_latency_max_us: int
    e2e_latency: list[int]
    e2e_latency_max_us: int
    statuses: dict[int, bytes] = field(default_factory=dict)  # stream -> status per seq
    receipts: dict[int, bytes] = field(default_factory=dict)  # stream -> count per seq
    cpu_s: float = 0.0
    wall_s: float = 0.0
    error: str | None = None


def _saturating_sum(left: bytes, right: bytes) -> bytes:
    if len(left) < len(right):
        left, right = right, left
    head = bytes(min(a + b, 255) for a, b in zip(left, right, strict=False))
    return head + left[len(right) :]


def verify(results: list[WorkerResult], confirms: bool, consumers: bool) -> dict[str, Any]:
    """Compare what producers had confirmed with what consumers received."""
    statuses: dict[int, bytes] = {}
    receipts: dict[int, bytes] = {}
    for result in results:
        statuses.update(result.statuses)
        for stream, counts in result.receipts.items():
            have = receipts.get(stream)
            receipts[stream] = counts if have is None else _saturating_sum(have, counts)
    expected_code = CONFIRMED if confirms else SENT
    lost = 0
    unknown = 0
    for stream, status in statuses.items():
        counts = receipts.get(stream, b"")
        lost += sum(
            1
            for seq, code in enumerate(status)
            if code == expected_code and (seq >= len(counts) or counts[seq] == 0)
        )
        unknown += sum(1 for count in counts[len(status) :] if count)
    for stream, counts in receipts.items():
        if stream not in statuses:
            unknown += len(counts) - counts.count(0)
    duplicates = sum(count - 1 for counts in receipts.values() for count in counts if count > 1)
    return {
        "lost": lost if consumers else None,
        "duplicates": duplicates,
        "unknown": unknown,  # received with this run's id but never published
    }
