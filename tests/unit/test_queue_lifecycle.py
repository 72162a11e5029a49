"""The queue's message lifecycle on a fake clock: TTL, x-expires, length limits,
priorities and dead-letter bookkeeping, without sockets and without sleeping."""

from __future__ import annotations

from typing import Any

import pytest
from pamqp import commands

from kanin.amqp.errors import ChannelError
from kanin.core.memory import MemoryMonitor
from kanin.core.message import Entry, Message
from kanin.core.queue_args import QueueArgs, parse_queue_args
from kanin.core.queues import ClassicQueue
from kanin.core.ready import FifoReady
from kanin.testing.clock import FakeScheduler


def message(
    body: bytes = b"m", expiration: int | None = None, priority: int | None = None
) -> Message:
    properties = commands.Basic.Properties(priority=priority)
    return Message("", "q", b"", body, properties, expiration)


def make_queue(
    clock: FakeScheduler, **arguments: Any
) -> tuple[ClassicQueue, list[tuple[str, bytes]]]:
    args = parse_queue_args(arguments, "q", "/")
    queue = ClassicQueue("q", "/", clock, MemoryMonitor(2**40), arguments=arguments, args=args)
    dead: list[tuple[str, bytes]] = []
    queue.on_dead_letter = lambda _q, entries, reason: dead.extend(
        (reason, e.message.body) for e in entries
    )
    return queue, dead


def bodies(queue: ClassicQueue) -> list[bytes]:
    out = []
    while (entry := queue.take()) is not None:
        out.append(entry.message.body)
    return out


def test_queue_ttl_expires_messages_at_their_time() -> None:
    clock = FakeScheduler()
    queue, dead = make_queue(clock, **{"x-message-ttl": 1000, "x-dead-letter-exchange": "dlx"})
    queue.publish(message(b"a"))
    clock.advance(0.5)
    queue.publish(message(b"b"))
    clock.advance(0.6)  # a is 1.1 s old, b 0.6 s
    assert dead == [("expired", b"a")]
    assert queue.message_count == 1
    clock.advance(0.5)
    assert dead == [("expired", b"a"), ("expired", b"b")]
    assert queue.message_count == 0


def test_per_message_expiration_smaller_than_queue_ttl_wins() -> None:
    clock = FakeScheduler()
    queue, dead = make_queue(clock, **{"x-message-ttl": 10_000, "x-dead-letter-exchange": "x"})
    queue.publish(message(b"short", expiration=100))
    clock.advance(0.2)
    assert dead == [("expired", b"short")]


def test_expired_message_behind_a_live_one_is_never_delivered() -> None:
    clock = FakeScheduler()
    queue, _ = make_queue(clock)
    queue.publish(message(b"long", expiration=10_000))
    queue.publish(message(b"short", expiration=100))
    clock.advance(1)
    # "short" expired behind "long": it is dropped when it reaches the head.
    assert bodies(queue) == [b"long"]


def test_ttl_zero_without_consumer_expires_at_once() -> None:
    clock = FakeScheduler()
    queue, dead = make_queue(clock, **{"x-message-ttl": 0, "x-dead-letter-exchange": "x"})
    queue.publish(message(b"now"))
    assert dead == [("expired", b"now")]
    assert queue.message_count == 0


def test_requeued_message_past_its_ttl_is_expired_not_redelivered() -> None:
    clock = FakeScheduler()
    queue, dead = make_queue(clock, **{"x-message-ttl": 1000, "x-dead-letter-exchange": "x"})
    queue.publish(message(b"a"))
    entry = queue.take()
    assert entry is not None
    clock.advance(2)
    queue.requeue([entry])
    clock.advance(0)
    assert dead == [("expired", b"a")]
    assert queue.take() is None


class CountingReady(FifoReady):
    """Counts how often the queue looks at or removes its head."""

    def __init__(self) -> None:
        super().__init__()
        self.peeks = 0
        self.pops = 0

    def peek(self) -> Entry | None:
        self.peeks += 1
        return super().peek()

    def pop(self) -> Entry | None:
        self.pops += 1
        return super().pop()


def test_ttl_work_is_proportional_to_what_expires_not_to_queue_length() -> None:
    clock = FakeScheduler()
    queue, dead = make_queue(clock, **{"x-message-ttl": 60_000, "x-dead-letter-exchange": "x"})
    counting = CountingReady()
    queue.ready = counting
    for _batch in range(100):  # 100,000 messages, published 1,000 per 10 ms
        for _ in range(1000):
            queue.publish(message())
        clock.advance(0.01)
    counting.peeks = counting.pops = 0
    fired_before = clock.timers_fired
    clock.advance(60.0 - 1.0 + 0.0105)  # the first ~1,000 messages reach their TTL
    expired = len(dead)
    assert 0 < expired <= 2000
    assert queue.message_count == 100_000 - expired
    ticks = clock.timers_fired - fired_before
    # Each timer tick looks at the head a bounded number of times per expired message,
    # never at the 98,000+ live messages behind it.
    assert counting.pops == expired
    assert counting.peeks <= 2 * expired + 3 * ticks
    assert ticks <= expired + 1


def test_x_expires_deletes_an_unused_queue_and_use_postpones_it() -> None:
    clock = FakeScheduler()
    queue, _ = make_queue(clock, **{"x-expires": 1000})
    deleted: list[ClassicQueue] = []
    queue.on_unused = deleted.append
    clock.advance(0.8)
    queue.touch()  # e.g. basic.get or a redeclare
    clock.advance(0.8)
    assert deleted == []
    clock.advance(0.3)
    assert deleted == [queue]


def test_drop_head_dead_letters_the_oldest_with_reason_maxlen() -> None:
    clock = FakeScheduler()
    queue, dead = make_queue(clock, **{"x-max-length": 2, "x-dead-letter-exchange": "x"})
    for body in (b"1", b"2", b"3"):
        assert queue.publish(message(body))
    assert dead == [("maxlen", b"1")]
    assert bodies(queue) == [b"2", b"3"]


def test_max_length_bytes() -> None:
    clock = FakeScheduler()
    queue, _ = make_queue(clock, **{"x-max-length-bytes": 10})
    for body in (b"aaaa", b"bbbb", b"cccc"):
        queue.publish(message(body))
    assert bodies(queue) == [b"bbbb", b"cccc"]


def test_reject_publish_refuses_and_keeps_the_queue() -> None:
    clock = FakeScheduler()
    queue, _ = make_queue(clock, **{"x-max-length": 1, "x-overflow": "reject-publish"})
    assert queue.publish(message(b"1"))
    assert not queue.publish(message(b"2"))
    assert bodies(queue) == [b"1"]


def test_priorities_higher_first_fifo_within_and_capped_at_max() -> None:
    clock = FakeScheduler()
    queue, _ = make_queue(clock, **{"x-max-priority": 5})
    for body, priority in ((b"p0", None), (b"p9", 9), (b"p5", 5), (b"p3a", 3), (b"p3b", 3)):
        queue.publish(message(body, priority=priority))
    # 9 counts as 5, and arrived before the real 5: FIFO within the capped priority.
    assert bodies(queue) == [b"p9", b"p5", b"p3a", b"p3b", b"p0"]


def test_priority_requeue_returns_to_its_place() -> None:
    clock = FakeScheduler()
    queue, _ = make_queue(clock, **{"x-max-priority": 2})
    for body in (b"a", b"b"):
        queue.publish(message(body, priority=1))
    first = queue.take()
    assert first is not None
    queue.requeue([first])
    assert bodies(queue) == [b"a", b"b"]


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({"x-message-ttl": -1}, "invalid arg 'x-message-ttl' for queue 'q' in vhost '/'"),
        ({"x-expires": 0}, "invalid arg 'x-expires' for queue 'q' in vhost '/'"),
        ({"x-max-priority": 256}, "invalid arg 'x-max-priority' for queue 'q' in vhost '/'"),
        ({"x-overflow": "nope"}, "invalid arg 'x-overflow' for queue 'q' in vhost '/'"),
    ],
)
def test_invalid_arguments_are_406(arguments: dict[str, Any], text: str) -> None:
    with pytest.raises(ChannelError) as info:
        parse_queue_args(arguments, "q", "/")
    assert info.value.reply_code == 406
    assert text in info.value.reply_text


def test_defaults() -> None:
    assert parse_queue_args({}, "q", "/") == QueueArgs()
