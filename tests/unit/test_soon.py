"""Soon: call_soon work that a connection may run early, right after its frames."""

from __future__ import annotations

import logging

import pytest

from kanin.core.scheduling import Soon
from kanin.testing.clock import FakeScheduler


def test_queued_work_runs_on_the_next_turn_in_order() -> None:
    loop = FakeScheduler()
    soon = Soon(loop)
    ran: list[str] = []
    soon.call_soon(ran.append, "a")
    soon.call_soon(ran.append, "b")
    assert ran == []
    loop.run_soon()
    assert ran == ["a", "b"]


def test_run_pending_runs_work_early_including_what_it_queues() -> None:
    loop = FakeScheduler()
    soon = Soon(loop)
    ran: list[str] = []

    def dispatch() -> None:
        ran.append("dispatch")
        soon.call_soon(ran.append, "flush")  # as a delivery schedules its write

    soon.call_soon(dispatch)
    soon.run_pending()
    assert ran == ["dispatch", "flush"]
    loop.run_soon()  # the turn's own callback finds nothing left to do
    assert ran == ["dispatch", "flush"]


def test_a_failing_callback_is_logged_and_the_rest_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    soon = Soon(FakeScheduler())
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("bug in a dispatch")

    soon.call_soon(broken)
    soon.call_soon(ran.append, "after")
    with caplog.at_level(logging.ERROR):
        soon.run_pending()
    assert ran == ["after"]
    assert "bug in a dispatch" in caplog.text


def test_timers_and_clock_are_the_wrapped_schedulers() -> None:
    loop = FakeScheduler(start=50.0)
    soon = Soon(loop)
    fired: list[int] = []
    soon.call_later(2.0, fired.append, 1)
    assert soon.time() == 50.0
    loop.advance(1.9)
    assert fired == []
    loop.advance(0.2)
    assert fired == [1]


def test_the_wall_clock_is_the_wrapped_schedulers_and_moves_with_it() -> None:
    loop = FakeScheduler(start=50.0, wall_start=1_600_000_000.0)
    soon = Soon(loop)
    assert soon.wall_clock_ms() == 1_600_000_000_000
    loop.advance(2.5)
    assert soon.wall_clock_ms() == 1_600_000_002_500
