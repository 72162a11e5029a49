"""A queue's wait limit (x-confirm-timeout): one deadline per step, shared by the messages
of that step, never earlier than the limit and at most a step later."""

from __future__ import annotations

from kanin.core.queues.expiry import WaitLimit, deadline_of
from kanin.testing.clock import FakeScheduler


def test_messages_of_one_step_share_a_deadline_the_clock_read_once() -> None:
    clock = FakeScheduler()
    limit = WaitLimit(clock, 32.0)  # step: one second
    first = limit.deadline()
    clock.advance(0.5)
    assert limit.deadline() is first  # the same float, not one made per message
    clock.advance(0.6)  # the step is over
    later = limit.deadline()
    assert later is not None and first is not None and later > first


def test_a_deadline_is_never_early_and_at_most_a_step_late() -> None:
    clock = FakeScheduler()
    limit = WaitLimit(clock, 1.6)  # a sixteenth: 0.1 s steps
    for _ in range(25):
        enqueued = clock.time()
        deadline = limit.deadline()
        assert deadline is not None
        assert enqueued + 1.6 <= deadline <= enqueued + 1.6 + 0.1 + 1e-9
        clock.advance(0.037)


def test_the_shorter_of_ttl_and_wait_limit_counts() -> None:
    clock = FakeScheduler()
    limit = WaitLimit(clock, 10.0)
    assert deadline_of(clock, None, None) is None
    assert deadline_of(clock, 2_000, None) == clock.time() + 2.0
    assert deadline_of(clock, 2_000, limit) == clock.time() + 2.0
    assert deadline_of(clock, None, limit) is limit.deadline()  # shared, as above
    assert deadline_of(clock, 60_000, limit) == limit.deadline()
