"""Delayed messages on a fake clock: buckets come out at their time in due order, one timer
at a time, overdue ones first thing; and which x-delay values delay."""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

import pytest

from kanin.amqp.properties import Properties, decode_properties
from kanin.core.delay_schedule import FAR_MS, Bucket, DelaySchedule
from kanin.core.exchanges.delayed import _patched_delay, delay_of
from kanin.testing.clock import FakeScheduler


def schedule() -> tuple[FakeScheduler, DelaySchedule[str], list[tuple[float, list[Any]]]]:
    clock = FakeScheduler()
    out: list[tuple[float, list[Any]]] = []

    def due(buckets: list[Bucket[str]]) -> None:
        out.append((clock.time(), [(list(b.ids), b.items) for b in buckets]))

    return clock, DelaySchedule(clock, due), out


def test_buckets_come_out_at_their_time_in_due_order_on_one_timer() -> None:
    clock, delays, out = schedule()
    now = delays.now_ms()
    delays.add_id(now + 300, 3)
    delays.add_id(now + 100, 1)
    delays.add_item(now + 100, "one")
    delays.add_id(now + 200, 2)
    assert clock.pending_timers == 1 and delays.pending == 4
    clock.advance(0.099)
    assert out == []
    clock.advance(0.002)
    assert out == [(pytest.approx(1000.1), [([1], ["one"])])]
    clock.advance(0.3)
    assert [buckets for _, buckets in out[1:]] == [[([2], None)], [([3], None)]]
    assert delays.pending == 0 and clock.pending_timers == 0


def test_overdue_ones_come_out_at_once_in_due_order() -> None:
    clock, delays, out = schedule()
    now = delays.now_ms()
    for due, store_id in ((now - 10, 10), (now - 30, 30), (now + 50, 50), (now - 20, 20)):
        delays.add_id(due, store_id)
    clock.advance(0)
    assert [ids for ids, _ in out[0][1]] == [[30], [20], [10]]
    clock.advance(0.05)
    assert [ids for ids, _ in out[1][1]] == [[50]]


def test_wall_clock_due_times_map_to_the_schedules_clock() -> None:
    clock, delays, _ = schedule()
    assert delays.due_from_wall(clock.wall_clock_ms() + 1234) == delays.now_ms() + 1234


def test_clear_takes_everything_and_stops_the_timer() -> None:
    clock, delays, out = schedule()
    delays.add_id(delays.now_ms() + 10, 1)
    assert [list(b.ids) for b in delays.clear()] == [[1]]
    clock.advance(1)
    assert out == [] and clock.pending_timers == 0 and delays.pending == 0


@pytest.mark.parametrize(
    ("value", "delay"),
    [
        (100, 100),
        (4_294_967_295, 4_294_967_295),
        (4_294_967_296, None),
        (0, None),
        (-1, None),
        ("250", 250),
        ("abc", None),
        (b"7", 7),
        (Decimal("9.9"), 9),
        (12.7, 12),
        (float("nan"), None),
        (True, None),
        (None, None),
        ([1], None),
    ],
)
def test_which_x_delay_values_delay(value: Any, delay: int | None) -> None:
    assert delay_of({"x-delay": value}) == delay


def test_messages_due_later_wait_in_a_far_bucket_and_still_come_out_on_the_ms() -> None:
    clock, delays, out = schedule()
    now = delays.now_ms()
    assert now % FAR_MS == 0  # so that the two below share a far bucket
    delays.add_id(now + 5_032, 2)
    delays.add_item(now + 5_032, "two")
    delays.add_id(now + 5_001, 1)
    delays.add_id(now + 100, 0)
    assert len(delays._far) == 1 and delays.pending == 4
    clock.advance(5.000)
    assert [ids for _, buckets in out for ids, _ in buckets] == [[0]]
    clock.advance(0.0015)
    clock.advance(0.031)
    assert [(when, ids, items) for when, buckets in out for ids, items in buckets][1:] == [
        (pytest.approx(1005.001), [1], None),
        (pytest.approx(1005.032), [2], ["two"]),
    ]
    assert delays.pending == 0 and clock.pending_timers == 0


def test_clear_takes_the_far_buckets_too() -> None:
    _, delays, _ = schedule()
    delays.add_id(delays.now_ms() + 60_000, 7)
    delays.add_item(delays.now_ms() + 60_000, "x")
    assert [(list(b.ids), b.items) for b in delays.clear()] == [([7], ["x"])]


def test_with_a_lead_buckets_come_out_that_much_early_knowing_when_they_are_due() -> None:
    clock = FakeScheduler()
    out: list[tuple[float, list[int]]] = []
    delays: DelaySchedule[str] = DelaySchedule(
        clock, lambda buckets: out.extend((clock.time(), [b.due_ms]) for b in buckets), 100
    )
    now = delays.now_ms()
    delays.add_id(now + 300, 1)
    delays.add_id(now + 50, 2)  # sooner than the lead: at once
    delays.add_id(now + 5_000, 3)  # by way of a far bucket
    clock.advance(0)
    assert out == [(pytest.approx(1000.0), [now + 50])]
    clock.advance(0.199)
    assert len(out) == 1
    clock.advance(0.002)
    assert out[1] == (pytest.approx(1000.2, abs=0.002), [now + 300])
    clock.advance(4.7)
    assert out[2] == (pytest.approx(1004.9, abs=0.002), [now + 5_000])


def test_with_a_batch_those_due_within_it_come_out_together_in_due_order() -> None:
    clock = FakeScheduler()
    calls: list[tuple[float, list[int]]] = []
    delays: DelaySchedule[str] = DelaySchedule(
        clock, lambda buckets: calls.append((clock.time(), [b.due_ms for b in buckets])), 100, 20
    )
    now = delays.now_ms()
    for offset in (315, 300, 310, 321, 5_000):
        delays.add_id(now + offset, offset)
    clock.advance(0.199)
    assert calls == []
    clock.advance(0.002)  # 300 is 100 ms away: it, 310 and 315 (within 20 ms more) go
    assert calls == [(pytest.approx(1000.2, abs=0.002), [now + 300, now + 310, now + 315])]
    clock.advance(0.05)
    assert calls[1][1] == [now + 321]
    clock.advance(4.7)  # by way of a far bucket, batched the same way
    assert [due for _, dues in calls for due in dues][-1] == now + 5_000
    assert len(calls) == 3 and delays.pending == 0


def _header_with(table: bytes) -> bytes:
    """A content header (empty body) whose only property is `table`, already encoded."""
    flags = Properties.flags["headers"]
    return struct.pack(">HHQH", 60, 0, 0, flags) + struct.pack(">I", len(table)) + table


@pytest.mark.parametrize(
    ("encoded", "delay"),
    [
        (b"b" + struct.pack(">b", 100), 100),
        (b"s" + struct.pack(">h", 5000), 5000),
        (b"I" + struct.pack(">i", 2**31 - 1), 2**31 - 1),
        (b"l" + struct.pack(">q", 4_294_967_295), 4_294_967_295),
    ],
)
def test_a_signed_x_delay_is_turned_negative_in_place(encoded: bytes, delay: int) -> None:
    table = b"\x01aS\x00\x00\x00\x02hi" + b"\x07x-delay" + encoded + b"\x01zt\x01"
    patched = _patched_delay(_header_with(table), delay)
    assert patched is not None and len(patched) == len(_header_with(table))
    headers = decode_properties(patched).headers
    assert headers == {"a": "hi", "x-delay": -delay, "z": True}


@pytest.mark.parametrize(
    "table",
    [
        b"\x07x-delayS\x00\x00\x00\x045000",  # a string: re-encoded instead
        b"\x07x-delayi\x00\x00\x13\x88",  # unsigned
        b"\x07x-delayI\x00\x00\x13\x88\x01FF\x00\x00\x00\x0d\x07x-delayb\x01",  # found twice
    ],
)
def test_other_x_delays_are_left_to_re_encoding(table: bytes) -> None:
    assert _patched_delay(_header_with(table), 5000) is None
