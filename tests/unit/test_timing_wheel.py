"""TimingWheel (kanin/core/timing_wheel.py) on exact numbers: when items fire and in what
order, ties, cancelling, inserting into the past and at cascade boundaries, big jumps,
next_due_ms, millisecond resolution at every level, overflow, and bounds on the work."""

from __future__ import annotations

import gc
import random
import weakref

import pytest

from kanin.core.timing_wheel import TimingWheel

DAY_MS = 86_400_000


def test_items_fire_at_their_due_time_in_due_order() -> None:
    wheel: TimingWheel[str] = TimingWheel()
    wheel.insert("b", 5)
    wheel.insert("a", 3)
    wheel.insert("c", 10)
    assert wheel.advance(2) == []
    assert wheel.advance(3) == ["a"]
    assert wheel.advance(9) == ["b"]
    assert wheel.advance(10) == ["c"]
    assert wheel.advance(1_000) == []
    assert len(wheel) == 0


def test_one_advance_over_many_due_times_returns_them_in_due_order() -> None:
    wheel: TimingWheel[int] = TimingWheel()
    dues = [7, 300, 1, 70_000, 256, 255, 65_536, 20_000_000, 2]
    for due in dues:
        wheel.insert(due, due)
    assert wheel.advance(20_000_000) == sorted(dues)


def test_ties_fire_in_insertion_order() -> None:
    wheel: TimingWheel[str] = TimingWheel()
    for name in "qwerty":
        wheel.insert(name, 40)
    assert wheel.advance(40) == list("qwerty")


def test_ties_keep_insertion_order_when_some_arrive_by_cascade() -> None:
    """The first was inserted at level 2 and cascades down; the later ones go straight
    to lower levels as time approaches. Insertion order still decides."""
    wheel: TimingWheel[str] = TimingWheel()
    due = 70_000  # 0x11170: a level-2 slot seen from 0
    wheel.insert("from-level-2", due)
    wheel.advance(65_600)  # the level-2 slot has cascaded to level 1
    wheel.insert("at-level-1", due)
    wheel.advance(69_900)  # and that level-1 slot to level 0
    wheel.insert("at-level-0", due)
    assert wheel.advance(due) == ["from-level-2", "at-level-1", "at-level-0"]


def test_ties_keep_insertion_order_when_some_come_from_overflow() -> None:
    wheel: TimingWheel[str] = TimingWheel(slots=4, levels=2)  # a top-level range is 16 ms
    wheel.insert("overflowed", 40)
    wheel.advance(33)
    wheel.insert("direct", 40)
    assert wheel.advance(40) == ["overflowed", "direct"]


def test_cancelled_items_never_fire() -> None:
    wheel: TimingWheel[str] = TimingWheel()
    keep = wheel.insert("keep", 500)
    drop = wheel.insert("drop", 500)
    far = wheel.insert("far", 5 * DAY_MS)
    assert wheel.cancel(drop)
    assert wheel.cancel(far)
    assert len(wheel) == 1
    assert not drop.pending
    assert keep.pending
    assert wheel.advance(10 * DAY_MS) == ["keep"]
    assert not keep.pending


def test_cancel_of_a_fired_or_cancelled_handle_is_refused() -> None:
    wheel: TimingWheel[str] = TimingWheel()
    fired = wheel.insert("fired", 10)
    cancelled = wheel.insert("cancelled", 20)
    wheel.insert("other", 20)
    assert wheel.advance(10) == ["fired"]
    assert not wheel.cancel(fired)
    assert wheel.cancel(cancelled)
    assert not wheel.cancel(cancelled)
    assert len(wheel) == 1
    assert wheel.advance(20) == ["other"]


def test_cancel_works_wherever_the_item_has_cascaded_to() -> None:
    wheel: TimingWheel[int] = TimingWheel(slots=4, levels=3)
    handles = {due: wheel.insert(due, due) for due in range(1, 200)}
    fired: list[int] = []
    for now in range(0, 200, 7):  # a 64 ms span: items sit at every level and in overflow
        fired += wheel.advance(now)
        victim = handles.pop(now + 37, None)
        if victim is not None:
            assert wheel.cancel(victim)
    fired += wheel.advance(200)
    assert fired == sorted(handles)
    assert 37 not in fired and 44 not in fired and 38 in fired


def test_cancelling_releases_the_item() -> None:
    class Message:
        pass

    wheel: TimingWheel[Message] = TimingWheel()
    message = Message()
    alive = weakref.ref(message)
    handle = wheel.insert(message, 3 * DAY_MS)
    del message
    wheel.cancel(handle)
    gc.collect()
    assert alive() is None


def test_an_item_inserted_in_the_past_fires_at_the_next_advance() -> None:
    wheel: TimingWheel[str] = TimingWheel(now_ms=1_000)
    wheel.insert("late-b", 900)
    wheel.insert("late-a", 10)
    wheel.insert("late-b2", 900)
    wheel.insert("now", 1_000)
    wheel.insert("next", 1_001)
    assert wheel.next_due_ms() == 10
    assert wheel.advance(1_000) == ["late-a", "late-b", "late-b2", "now"]
    assert wheel.advance(1_001) == ["next"]


def test_an_item_inserted_in_the_past_fires_even_if_the_clock_stands_still() -> None:
    wheel: TimingWheel[str] = TimingWheel()
    wheel.advance(5_000)
    wheel.insert("late", 4_000)
    assert wheel.advance(5_000) == ["late"]


def test_a_clock_going_back_moves_nothing() -> None:
    wheel: TimingWheel[str] = TimingWheel()
    wheel.advance(100)
    wheel.insert("due-at-150", 150)
    assert wheel.advance(50) == []
    wheel.insert("before-last-now", 80)  # 80 <= 100: already reached
    assert wheel.advance(60) == ["before-last-now"]
    assert wheel.advance(149) == []
    assert wheel.advance(150) == ["due-at-150"]


@pytest.mark.parametrize("now", [255, 256, 65_535, 65_536, 16_777_215])
def test_items_inserted_at_range_boundaries_fire_on_time(now: int) -> None:
    wheel: TimingWheel[int] = TimingWheel(now_ms=now)
    dues = [now + delta for delta in (1, 2, 255, 256, 257, 65_535, 65_536, 65_537)]
    for due in dues:
        wheel.insert(due, due)
    for due in dues:
        assert wheel.advance(due - 1) == []
        assert wheel.advance(due) == [due]


def test_an_item_inserted_right_after_a_cascade_joins_the_cascaded_ones() -> None:
    wheel: TimingWheel[str] = TimingWheel()
    wheel.insert("cascaded", 256 + 3)
    assert wheel.advance(256) == []  # level 1's slot 1 has cascaded to level 0
    wheel.insert("direct", 256 + 3)
    wheel.insert("sooner", 256 + 1)
    assert wheel.advance(259) == ["sooner", "cascaded", "direct"]


DUES_AT_EVERY_LEVEL = [3, 300, 70_000, 1_234_567, 20_000_001, 5_000_000_007, 2**40 + 5]


@pytest.mark.parametrize("due", DUES_AT_EVERY_LEVEL)
def test_millisecond_resolution_at_every_level(due: int) -> None:
    wheel: TimingWheel[int] = TimingWheel()
    wheel.insert(due, due)
    assert wheel.next_due_ms() == due
    assert wheel.advance(due - 1) == []
    assert wheel.next_due_ms() == due
    assert wheel.advance(due) == [due]


@pytest.mark.parametrize("due", [1_234_567, 10 * 365 * DAY_MS + 1])
def test_millisecond_resolution_when_approached_in_steps(due: int) -> None:
    wheel: TimingWheel[int] = TimingWheel()
    wheel.insert(due, due)
    for now in (due // 2, due - 60_000, due - 1_000, due - 33, due - 1):
        assert wheel.advance(now) == []
    assert wheel.advance(due) == [due]


def test_a_small_wheel_overflows_and_keeps_millisecond_resolution() -> None:
    wheel: TimingWheel[int] = TimingWheel(slots=4, levels=2)
    assert wheel.span_ms == 16
    ten_years = 10 * 365 * DAY_MS
    dues = [ten_years + 9, 5, 17, 40, ten_years]
    for due in dues:
        wheel.insert(due, due)
    assert wheel.next_due_ms() == 5
    assert wheel.advance(39) == [5, 17]
    assert wheel.next_due_ms() == 40
    assert wheel.advance(ten_years - 1) == [40]
    assert wheel.next_due_ms() == ten_years
    assert wheel.advance(ten_years + 8) == [ten_years]
    assert wheel.advance(ten_years + 9) == [ten_years + 9]


def test_a_ten_year_delay_from_wall_clock_time_fires_on_time() -> None:
    start = 1_700_000_000_000
    wheel: TimingWheel[str] = TimingWheel(now_ms=start)
    due = start + 10 * 365 * DAY_MS + 123
    wheel.insert("decade", due)
    wheel.insert("soon", start + 10)
    assert wheel.advance(start + DAY_MS) == ["soon"]
    assert wheel.next_due_ms() == due
    assert wheel.advance(due - 1) == []
    assert wheel.advance(due) == ["decade"]


def test_a_day_long_jump_costs_what_it_hands_back_not_the_time_passed() -> None:
    start = 1_700_000_000_000
    wheel: TimingWheel[int] = TimingWheel(now_ms=start)
    dues = sorted(start + random.Random(7).randrange(DAY_MS) for _ in range(100))
    for due in dues:
        wheel.insert(due, due)
    assert wheel.advance(start + DAY_MS) == dues
    assert wheel.events <= 100 * 5  # at most one slot per item per level
    assert wheel.examined <= 100 * 5


def test_a_jump_over_an_empty_day_reaches_no_slot() -> None:
    wheel: TimingWheel[str] = TimingWheel()
    assert wheel.advance(DAY_MS) == []
    wheel.insert("x", 3 * DAY_MS)
    assert wheel.advance(2 * DAY_MS) == []
    assert wheel.events == 0
    assert wheel.advance(3 * DAY_MS) == ["x"]
    assert wheel.events <= 4  # the cascades from the level it was in, down to level 0


def test_advancing_ms_by_ms_examines_each_item_once_per_level_it_passes() -> None:
    wheel: TimingWheel[int] = TimingWheel()
    count = 10_000
    for n in range(count):
        wheel.insert(n, n % 1_000 + 1)  # ten items due in each of the next 1,000 ms
    fired = 0
    for now in range(1, 1_001):
        fired += len(wheel.advance(now))
    assert fired == count
    assert wheel.examined <= count * 2  # level 1 cascades, level 0 fires


def test_next_due_ms() -> None:
    wheel: TimingWheel[str] = TimingWheel()
    assert wheel.next_due_ms() is None
    first = wheel.insert("first", 70_000)
    wheel.insert("second", 70_005)
    wheel.insert("third", 5 * DAY_MS)
    assert wheel.next_due_ms() == 70_000
    wheel.cancel(first)
    assert wheel.next_due_ms() == 70_005
    wheel.insert("sooner", 12)
    assert wheel.next_due_ms() == 12
    assert wheel.advance(70_005) == ["sooner", "second"]
    assert wheel.next_due_ms() == 5 * DAY_MS
    wheel.insert("late", 100)
    assert wheel.next_due_ms() == 100  # in the past: the next advance hands it back
    assert wheel.advance(70_006) == ["late"]
    assert wheel.next_due_ms() == 5 * DAY_MS


def test_next_due_ms_after_the_earliest_of_an_unordered_slot_is_cancelled() -> None:
    wheel: TimingWheel[int] = TimingWheel()
    dues = [70_000 + d for d in (50, 10, 30, 10, 40)]  # one level-1 slot, out of order
    handles = [wheel.insert(due, due) for due in dues]
    assert wheel.next_due_ms() == 70_010
    wheel.cancel(handles[1])
    assert wheel.next_due_ms() == 70_010  # its tie is still there
    wheel.cancel(handles[3])
    assert wheel.next_due_ms() == 70_030
    assert wheel.advance(80_000) == [70_030, 70_040, 70_050]


@pytest.mark.parametrize("shuffled", [False, True])
def test_cancelling_the_earliest_again_and_again_keeps_next_due_ms_cheap(shuffled: bool) -> None:
    """Consumer timeouts: inserted with a constant delay, cancelled (acked) oldest first,
    the timer re-armed after each. Each next_due_ms must not rescan the slot."""
    wheel: TimingWheel[int] = TimingWheel()
    count = 5_000
    dues = [1_000_000 + n for n in range(count)]  # all in one level-2 slot
    order = random.Random(3).sample(dues, count) if shuffled else dues
    handles = {due: wheel.insert(due, due) for due in order}
    for due in dues:
        assert wheel.next_due_ms() == due
        wheel.cancel(handles[due])
    assert wheel.next_due_ms() is None
    assert wheel.examined <= 3 * count


def test_tick_ms_rounds_due_times_up_and_keeps_due_order_within_a_tick() -> None:
    wheel: TimingWheel[int] = TimingWheel(tick_ms=10)
    for due in (1_009, 1_001, 1_010, 1_005, 1_001, 995):
        wheel.insert(due, due)
    assert wheel.next_due_ms() == 1_000
    assert wheel.advance(999) == []
    assert wheel.advance(1_000) == [995]
    assert wheel.next_due_ms() == 1_010
    assert wheel.advance(1_009) == []
    assert wheel.advance(1_010) == [1_001, 1_001, 1_005, 1_009, 1_010]


def test_len_counts_pending_items() -> None:
    wheel: TimingWheel[int] = TimingWheel()
    handles = [wheel.insert(n, n * 1_000) for n in range(10)]
    assert len(wheel) == 10
    wheel.cancel(handles[9])
    wheel.cancel(handles[9])
    assert len(wheel) == 9
    wheel.advance(4_500)
    assert len(wheel) == 4


@pytest.mark.parametrize(
    "arguments",
    [{"slots": 3}, {"slots": 1}, {"tick_ms": 0}, {"levels": 0}, {"now_ms": -1}],
)
def test_bad_parameters_are_refused(arguments: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        TimingWheel(**arguments)
