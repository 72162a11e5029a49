"""A stateful property test of TimingWheel (kanin/core/timing_wheel.py) against a heap: random
inserts (due times from the past to years ahead, many ties), cancels (of pending, fired and
cancelled handles) and advances (by nothing, a millisecond, days, or back in time), on wheels
of every shape, from one with 2 slots and 1 level, where nearly everything overflows, to the
default one, and with ticks of 1, 7 and 10 ms.

The model keeps (due_ms, insertion number) in a heap and cancels lazily. An item is due once
its due time, rounded up to a whole tick, is reached by the furthest advance so far. Each
advance must return exactly what the model pops, in the same order; len and next_due_ms
must agree with the model after every step.
"""

from __future__ import annotations

import heapq

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kanin.core.timing_wheel import Handle, TimingWheel

DAY_MS = 86_400_000

SHAPES = st.sampled_from([(2, 1), (2, 3), (4, 2), (4, 3), (16, 2), (256, 5), (1024, 4)])
STARTS = st.sampled_from([0, 1, 255, 65_535, 1_700_000_000_000])
OFFSETS = st.one_of(
    st.integers(-2_000, 0),  # already reached
    st.integers(0, 20),
    st.integers(0, 1_100),
    st.integers(0, 70_000),
    st.integers(0, 3 * DAY_MS),
    st.integers(0, 12 * 365 * DAY_MS),
)
STEPS = st.one_of(
    st.just(0),
    st.integers(1, 20),
    st.integers(1, 1_100),
    st.integers(1, 70_000),
    st.integers(1, 3 * DAY_MS),
    st.sampled_from([365 * DAY_MS, 11 * 365 * DAY_MS]),
    st.integers(-1_000, -1),  # a clock going back
)


class WheelMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.wheel: TimingWheel[int] = TimingWheel()
        self.tick_ms = 1
        self.now = 0  # the caller's clock, which may go back
        self.reached = 0  # the furthest tick advanced to
        self.heap: list[tuple[int, int]] = []  # (due_ms, insertion number)
        self.pending: set[int] = set()
        self.handles: list[Handle[int]] = []
        self.dues: list[int] = []

    @initialize(shape=SHAPES, tick_ms=st.sampled_from([1, 1, 7, 10]), start=STARTS)
    def build(self, shape: tuple[int, int], tick_ms: int, start: int) -> None:
        slots, levels = shape
        self.wheel = TimingWheel(now_ms=start, tick_ms=tick_ms, slots=slots, levels=levels)
        self.tick_ms = tick_ms
        self.now = start
        self.reached = start // tick_ms

    def due_tick(self, due_ms: int) -> int:
        return -(-due_ms // self.tick_ms)

    def add(self, due_ms: int) -> None:
        number = len(self.handles)
        self.handles.append(self.wheel.insert(number, due_ms))
        heapq.heappush(self.heap, (due_ms, number))
        self.pending.add(number)
        self.dues.append(due_ms)

    @rule(offset=OFFSETS)
    def insert(self, offset: int) -> None:
        self.add(self.now + offset)

    @precondition(lambda self: self.dues)
    @rule(pick=st.integers(0, 10**6), copies=st.integers(1, 3))
    def insert_ties(self, pick: int, copies: int) -> None:
        """More items due at a time already used: ties, across levels and cascades."""
        due_ms = self.dues[pick % len(self.dues)]
        for _ in range(copies):
            self.add(due_ms)

    @precondition(lambda self: self.handles)
    @rule(pick=st.integers(0, 10**6))
    def cancel(self, pick: int) -> None:
        number = pick % len(self.handles)
        expected = number in self.pending
        assert self.wheel.cancel(self.handles[number]) == expected
        self.pending.discard(number)
        assert self.handles[number].pending is False

    @precondition(lambda self: self.pending)
    @rule()
    def cancel_the_earliest(self) -> None:
        """What an in-order ack does to consumer timeouts: cancel the one due first."""
        self.drop_cancelled()
        _, number = self.heap[0]
        assert self.wheel.cancel(self.handles[number])
        self.pending.discard(number)

    @rule(step=STEPS)
    def advance(self, step: int) -> None:
        self.now = max(0, self.now + step)
        self.reached = max(self.reached, self.now // self.tick_ms)
        expected = []
        while self.heap and self.due_tick(self.heap[0][0]) <= self.reached:
            _, number = heapq.heappop(self.heap)
            if number in self.pending:
                self.pending.discard(number)
                expected.append(number)
        assert self.wheel.advance(self.now) == expected

    def drop_cancelled(self) -> None:
        while self.heap and self.heap[0][1] not in self.pending:
            heapq.heappop(self.heap)

    @invariant()
    def agrees_with_the_model(self) -> None:
        assert len(self.wheel) == len(self.pending)
        self.drop_cancelled()
        expected = self.due_tick(self.heap[0][0]) * self.tick_ms if self.heap else None
        assert self.wheel.next_due_ms() == expected


WheelMachine.TestCase.settings = settings(max_examples=400, stateful_step_count=60, deadline=None)
TestTimingWheelModel = WheelMachine.TestCase
# About 20 s of CPU: past the suite's 60 s default on a machine shared with other work.
pytestmark = pytest.mark.timeout(300)
