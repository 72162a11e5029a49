"""The timing wheel's own costs (kanin/core/timing_wheel.py), without a broker.

    python bench/timing_wheel.py            # about half a minute; prints a Markdown table

- insert: N items due at random times over the next hour, inserts per second;
- memory: bytes per pending item, measured with tracemalloc (the wheel's handles and slot
  lists, not the items themselves: the items here are shared small ints);
- advance: a second's worth of 1 ms advances with 10,000 items due per second (evenly
  spread, as a steady stream of delayed messages), the time each advance takes: mean and
  worst, and what one due item costs;
- jump: one advance across a day with the N items pending, none due: what skipping costs.
"""

from __future__ import annotations

import argparse
import random
import time
import tracemalloc

from kanin.core.timing_wheel import TimingWheel

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def measure_inserts(count: int, seed: int) -> tuple[float, float]:
    """(inserts per second, bytes per pending item)."""
    dues = [random.Random(seed).randrange(1, HOUR_MS) for _ in range(count)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    wheel: TimingWheel[int] = TimingWheel()
    started = time.perf_counter()
    for due in dues:
        wheel.insert(1, due)
    elapsed = time.perf_counter() - started
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return count / elapsed, used / count


def measure_advance(per_second: int, seconds: int) -> tuple[float, float, float]:
    """(mean µs per 1 ms advance, worst µs, µs per due item) at `per_second` due."""
    wheel: TimingWheel[int] = TimingWheel()
    total = per_second * seconds
    for number in range(total):
        wheel.insert(number, 1 + number * 1000 // per_second)
    times: list[float] = []
    fired = 0
    for now in range(1, seconds * 1000 + 1):
        started = time.perf_counter()
        fired += len(wheel.advance(now))
        times.append(time.perf_counter() - started)
    assert fired == total, (fired, total)
    spent = sum(times)
    return spent / len(times) * 1e6, max(times) * 1e6, spent / total * 1e6


def measure_jump(count: int, seed: int) -> float:
    """µs for one advance across a day with `count` items pending a year ahead."""
    rng = random.Random(seed)
    wheel: TimingWheel[int] = TimingWheel()
    for _ in range(count):
        wheel.insert(1, 365 * DAY_MS + rng.randrange(DAY_MS))
    started = time.perf_counter()
    assert wheel.advance(DAY_MS) == []
    return (time.perf_counter() - started) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=1_000_000, help="pending items")
    parser.add_argument("--rate", type=int, default=10_000, help="due per second (advance)")
    parser.add_argument("--seconds", type=int, default=5, help="seconds of advances")
    args = parser.parse_args()
    inserts, per_item = measure_inserts(args.items, seed=1)
    mean_us, worst_us, per_due_us = measure_advance(args.rate, args.seconds)
    jump_us = measure_jump(args.items, seed=2)
    print("| measure | value |")
    print("|---|---:|")
    print(f"| inserts per second ({args.items:,} items due within an hour) | {inserts:,.0f} |")
    print(f"| bytes per pending item (wheel only) | {per_item:.0f} |")
    print(f"| 1 ms advance at {args.rate:,} due/s: mean µs | {mean_us:.1f} |")
    print(f"| 1 ms advance at {args.rate:,} due/s: worst µs | {worst_us:.0f} |")
    print(f"| cost per due item, µs | {per_due_us:.2f} |")
    print(f"| one advance across a day, {args.items:,} pending, none due: µs | {jump_us:.0f} |")


if __name__ == "__main__":
    main()
