"""Returned messages on a fake clock: the delivery count, x-delivery-limit, and the
x-delayed-retry-* backoff (which returns wait, how long, and that the rest of the queue
keeps flowing), without sockets and without sleeping."""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import commands

from kanin.amqp.errors import ChannelError
from kanin.core.memory import MemoryMonitor
from kanin.core.message import Entry, Message
from kanin.core.queue_args import (
    NACKED,
    REJECTED,
    RETURNED,
    UNSENT,
    ReturnArgs,
    parse_queue_args,
)
from kanin.core.queues import ClassicQueue, QuorumQueue
from kanin.testing.clock import FakeScheduler


def message(body: bytes) -> Message:
    return Message("", "q", b"", body, commands.Basic.Properties(), None)


def make_queue(
    clock: FakeScheduler, kind: type[ClassicQueue] = ClassicQueue, **arguments: Any
) -> tuple[ClassicQueue, list[tuple[str, bytes]]]:
    arguments.setdefault("x-dead-letter-exchange", "dlx")  # spent messages are seen leaving
    if kind is QuorumQueue:
        arguments["x-queue-type"] = "quorum"
    args = parse_queue_args(arguments, "q", "/")
    queue = kind("q", "/", clock, MemoryMonitor(2**40), arguments=arguments, args=args)
    dead: list[tuple[str, bytes]] = []
    queue.on_dead_letter = lambda _q, entries, reason: dead.extend(
        (reason, e.message.body) for e in entries
    )
    return queue, dead


def take(queue: ClassicQueue) -> Entry:
    entry = queue.take()
    assert entry is not None
    return entry


def body_of(entry: Entry | None) -> bytes | None:
    return None if entry is None or entry.message is None else entry.message.body


# -- the backoff formula -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "delays"),
    [
        (ReturnArgs(True, None, "all", 100), [100, 200, 300, 400]),
        (ReturnArgs(True, None, "all", 100, 250), [100, 200, 250, 250]),
        (ReturnArgs(True, None, "all", 100, None, 2), [100, 200, 400, 800]),
        (ReturnArgs(True, None, "all", 100, 500, 3), [100, 300, 500, 500]),
        (ReturnArgs(True, None, "all", 100, None, 1), [100, 200, 300, 400]),  # 1: linear
        (ReturnArgs(True, None, "disabled", 100), [0, 0, 0, 0]),
    ],
)
def test_backoff_is_linear_or_exponential_and_capped(policy: ReturnArgs, delays: list[int]) -> None:
    assert [policy.backoff_ms(n, REJECTED) for n in (1, 2, 3, 4)] == delays


def test_an_exponential_backoff_stays_bounded_for_huge_counts() -> None:
    policy = ReturnArgs(True, None, "all", 1000, None, 10)
    assert policy.backoff_ms(10**9, NACKED) == 315_360_000_000  # ten years, the TTL bound


@pytest.mark.parametrize(
    ("retry_type", "held"),
    [
        ("all", {REJECTED, NACKED, RETURNED}),
        ("failed", {REJECTED}),
        ("returned", {NACKED, RETURNED}),
        ("requeued", {REJECTED, NACKED}),
        ("disabled", set()),
    ],
)
def test_which_returns_wait(retry_type: str, held: set[str]) -> None:
    policy = ReturnArgs(True, None, retry_type, 100)
    waits = {how for how in (REJECTED, NACKED, RETURNED, UNSENT) if policy.backoff_ms(1, how)}
    assert waits == held


# -- arguments -----------------------------------------------------------------------------


def test_the_arguments_parse_into_the_policy() -> None:
    args = parse_queue_args(
        {
            "x-delivery-limit": 4,
            "x-delayed-retry-type": "failed",
            "x-delayed-retry-min": 10,
            "x-delayed-retry-max": 90,
            "x-delayed-retry-multiplier": 3,
        },
        "q",
        "/",
    )
    assert args.returns == ReturnArgs(True, 4, "failed", 10, 90, 3)
    assert parse_queue_args({}, "q", "/").returns == ReturnArgs()
    assert parse_queue_args({"x-delayed-retry-min": 5}, "q", "/").returns == ReturnArgs(
        True, None, "requeued", 5
    )
    quorum = parse_queue_args({"x-queue-type": "quorum"}, "q", "/").returns
    assert quorum == ReturnArgs(counts=True)


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({"x-delayed-retry-type": "sometimes", "x-delayed-retry-min": 5}, "unsupported retry"),
        ({"x-delayed-retry-type": "all"}, "x-delayed-retry-min is required"),
        ({"x-delayed-retry-min": 0}, "{value_zero,0}"),
        ({"x-delayed-retry-min": -5}, "{value_negative,-5}"),
        ({"x-delayed-retry-min": "5"}, '"expected integer, got longstr"'),
        ({"x-delayed-retry-min": 50, "x-delayed-retry-max": 10}, "{value_below_min,10}"),
        ({"x-delayed-retry-min": 5, "x-delayed-retry-multiplier": 0}, "{value_zero,0}"),
    ],
)
def test_invalid_backoff_arguments_are_refused(arguments: dict[str, Any], text: str) -> None:
    with pytest.raises(ChannelError) as info:
        parse_queue_args(arguments, "q", "/")
    assert info.value.reply_code == 406
    assert text in info.value.reply_text


# -- counting and the limit ----------------------------------------------------------------


def test_a_classic_queue_without_a_limit_does_not_count() -> None:
    queue, _ = make_queue(FakeScheduler())
    queue.publish(message(b"a"))
    entry = take(queue)
    queue.requeue([entry], NACKED)
    assert take(queue).returns == 0


def test_the_limit_dead_letters_the_return_after_n() -> None:
    queue, dead = make_queue(FakeScheduler(), **{"x-delivery-limit": 2})
    queue.publish(message(b"a"))
    for returns in (0, 1):
        entry = take(queue)
        assert entry.returns == returns
        queue.requeue([entry], NACKED)
        assert dead == []
    entry = take(queue)
    assert entry.returns == 2
    queue.requeue([entry], RETURNED)
    assert dead == [("delivery_limit", b"a")]
    assert queue.message_count == 0


def test_a_get_whose_channel_closed_before_the_answer_is_not_a_return() -> None:
    queue, _ = make_queue(FakeScheduler(), **{"x-delivery-limit": 0})
    queue.publish(message(b"a"))
    queue.requeue([take(queue)], UNSENT)
    assert take(queue).returns == 0


def test_a_classic_queue_puts_returns_back_in_their_place() -> None:
    queue, _ = make_queue(FakeScheduler(), **{"x-delivery-limit": 5})
    for body in (b"a", b"b", b"c"):
        queue.publish(message(body))
    first, second = take(queue), take(queue)
    queue.requeue([second], NACKED)
    queue.requeue([first], NACKED)
    assert [body_of(take(queue)) for _ in range(3)] == [b"a", b"b", b"c"]


# -- holding back --------------------------------------------------------------------------


def test_a_held_back_message_waits_while_the_rest_flows() -> None:
    clock = FakeScheduler()
    queue, _ = make_queue(clock, **{"x-delayed-retry-type": "all", "x-delayed-retry-min": 100})
    queue.publish(message(b"a"))
    queue.publish(message(b"b"))
    queue.requeue([take(queue)], NACKED)
    assert queue.message_count == 2  # a waits, b is ready
    assert body_of(queue.take()) == b"b"
    assert queue.take() is None
    clock.advance(0.099)
    assert queue.take() is None
    clock.advance(0.002)
    again = take(queue)
    assert (body_of(again), again.returns, again.redelivered) == (b"a", 1, True)
    queue.requeue([again], NACKED)
    clock.advance(0.150)
    assert queue.take() is None  # the second return waits 200 ms
    clock.advance(0.051)
    assert take(queue).returns == 2


def test_held_back_messages_come_back_in_due_order_with_one_timer() -> None:
    clock = FakeScheduler()
    queue, _ = make_queue(
        clock,
        QuorumQueue,
        **{"x-delayed-retry-type": "all", "x-delayed-retry-min": 100, "x-delivery-limit": 9},
    )
    for body in (b"a", b"b", b"c"):
        queue.publish(message(body))
    a, b, c = take(queue), take(queue), take(queue)
    queue.requeue([a, b], NACKED)  # a, b wait 100 ms
    clock.advance(0.05)
    queue.requeue([c], NACKED)  # c waits till 150 ms
    assert clock.pending_timers == 1
    clock.advance(0.06)
    a2, b2 = take(queue), take(queue)
    assert (body_of(a2), body_of(b2), queue.take()) == (b"a", b"b", None)
    clock.advance(0.05)
    assert body_of(queue.take()) == b"c"


def test_a_purge_drops_the_held_back_messages_and_their_timer() -> None:
    clock = FakeScheduler()
    queue, _ = make_queue(clock, **{"x-delayed-retry-min": 100})
    queue.publish(message(b"a"))
    queue.requeue([take(queue)], REJECTED)
    assert queue.purge() == 1
    assert clock.pending_timers == 0
    clock.advance(1)
    assert queue.take() is None and queue.message_count == 0


def test_a_closed_channel_does_not_wait_when_only_requeues_are_held_back() -> None:
    queue, _ = make_queue(FakeScheduler(), **{"x-delayed-retry-min": 100})
    queue.publish(message(b"a"))
    queue.requeue([take(queue)], RETURNED)
    assert body_of(queue.take()) == b"a"


def test_a_deleted_queue_forgets_what_it_held_back() -> None:
    clock = FakeScheduler()
    queue, _ = make_queue(clock, **{"x-delayed-retry-min": 100})
    queue.publish(message(b"a"))
    queue.requeue([take(queue)], NACKED)
    queue.delete()
    queue.purge()
    clock.advance(1)
    assert queue.message_count == 0 and clock.pending_timers == 0
