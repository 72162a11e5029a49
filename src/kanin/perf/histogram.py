"""A small mergeable latency histogram: log-linear buckets, about 1.6% wide.

Values are whole microseconds. Below 64 each value has its own bucket; above, each
power of two is cut into 64 equal buckets (the HdrHistogram idea, two significant
digits). Bucket counts add up, so worker processes' histograms merge by summing.
"""

from __future__ import annotations

SUB_BITS = 6
SUB = 1 << SUB_BITS  # 64 buckets per power of two
MAX_EXPONENT = 40  # 2**40 us is about 12 days: anything above is clamped
SIZE = (MAX_EXPONENT + 2) * SUB
PERCENTILES = (50.0, 95.0, 99.0, 99.9)


def bucket_of(value_us: int) -> int:
    if value_us < SUB:
        return max(value_us, 0)
    shift = value_us.bit_length() - SUB_BITS - 1
    if shift > MAX_EXPONENT:
        return SIZE - 1
    return (shift + 1) * SUB + (value_us >> shift) - SUB


def value_of(bucket: int) -> int:
    """The largest value that falls in bucket (so percentiles never flatter)."""
    if bucket < SUB:
        return bucket
    shift = bucket // SUB - 1
    mantissa = bucket % SUB + SUB
    return ((mantissa + 1) << shift) - 1


class Histogram:
    __slots__ = ("counts", "max_us", "total")

    def __init__(self) -> None:
        self.counts = [0] * SIZE
        self.total = 0
        self.max_us = 0

    def record(self, value_us: int) -> None:
        self.counts[bucket_of(value_us)] += 1
        self.total += 1
        if value_us > self.max_us:
            self.max_us = value_us

    def record_many(self, value_us: int, count: int) -> None:
        self.counts[bucket_of(value_us)] += count
        self.total += count
        if value_us > self.max_us:
            self.max_us = value_us

    def merge(self, other: Histogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total
        self.max_us = max(self.max_us, other.max_us)

    def percentile(self, percent: float) -> int:
        if self.total == 0:
            return 0
        rank = max(1, round(self.total * percent / 100.0))
        seen = 0
        for bucket, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return min(value_of(bucket), self.max_us)
        return self.max_us

    def summary(self) -> dict[str, int]:
        """count, p50, p95, p99, p99.9 and max, in microseconds."""
        result = {"count": self.total}
        for percent in PERCENTILES:
            result[f"p{percent:g}"] = self.percentile(percent)
        result["max"] = self.max_us
        return result
