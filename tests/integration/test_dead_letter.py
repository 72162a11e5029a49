"""Dead-lettering: x-dead-letter-exchange / x-dead-letter-routing-key and the x-death header.

The x-death header is checked against what RabbitMQ 3.10.8 writes: a list of tables, most
recent first, each with count (a 64-bit 'l' field), reason, queue, time (an AMQP timestamp,
whole seconds), exchange, routing-keys (array) and, when the message had a per-message
expiration, original-expiration (the `expiration` property itself is removed). Plus
x-first-death-exchange / -queue / -reason, which never change once set.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import aio_pika
import pytest
from pika.compat import long as amqp_long
from pika.spec import Basic, BasicProperties

from helpers import AmqpSession, open_session

Unique = Callable[[str], str]
Args = dict[str, Any]
Message = tuple[Basic.GetOk, BasicProperties, bytes]


class Amqp(AmqpSession):
    """The shared session plus this file's own publish and read helpers."""

    def publish(self, routing_key: str, body: bytes, exchange: str = "", **properties: Any) -> None:
        self.ch.basic_publish(exchange, routing_key, body, BasicProperties(**properties))

    def get(self, queue: str, auto_ack: bool = True) -> Message | None:
        method, props, body = self.ch.basic_get(queue, auto_ack=auto_ack)
        return None if method is None else (method, props, body)

    def wait_get(self, queue: str, auto_ack: bool = True, timeout: float = 2.0) -> Message:
        deadline = time.monotonic() + timeout
        while (got := self.get(queue, auto_ack)) is None:
            assert time.monotonic() < deadline, f"nothing arrived in {queue}"
            time.sleep(0.01)
        return got

    def reject_next(self, queue: str) -> None:
        got = self.get(queue, auto_ack=False)
        assert got is not None, f"{queue} is empty"
        self.ch.basic_reject(got[0].delivery_tag, requeue=False)


@pytest.fixture
def amqp(broker: Any) -> Iterator[Amqp]:
    yield from open_session(Amqp, broker)


def check_time(stamp: Any) -> None:
    assert isinstance(stamp, datetime), f"x-death time is {stamp!r}, not an AMQP timestamp"
    assert stamp.tzinfo is not None and stamp.microsecond == 0
    assert abs(stamp.timestamp() - time.time()) < 30


def deaths(headers: dict[str, Any] | None) -> dict[str, Any]:
    """The headers, each x-death time checked and removed, each count tagged with its type."""
    assert headers is not None and "x-death" in headers, f"no x-death in {headers!r}"
    entries = []
    for entry in headers["x-death"]:
        entry = dict(entry)
        check_time(entry.pop("time"))
        # pika decodes 64-bit 'l'/'L' fields as pika.compat.long and narrower ints as int, so
        # the field type shows up in the comparison: RabbitMQ writes count as a long.
        count = entry["count"]
        entry["count"] = ("long" if type(count) is amqp_long else type(count).__name__, count)
        entries.append(entry)
    return {**headers, "x-death": entries}


def death(queue: str, reason: str, exchange: str, keys: list[str], count: int = 1) -> Args:
    return {
        "count": ("long", count),
        "reason": reason,
        "queue": queue,
        "exchange": exchange,
        "routing-keys": keys,
    }


def first(queue: str, reason: str, exchange: str) -> Args:
    return {
        "x-first-death-exchange": exchange,
        "x-first-death-queue": queue,
        "x-first-death-reason": reason,
    }


def dlx_to(dlq: str, **extra: Any) -> Args:
    """Arguments that dead-letter through the default exchange straight into dlq."""
    return {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq, **extra}


# --- reasons and the exact header -----------------------------------------------------------


@pytest.mark.parametrize("how", ["reject", "nack"])
def test_rejected_message_is_dead_lettered_with_x_death(
    amqp: Amqp, unique: Unique, how: str
) -> None:
    dlx = amqp.exchange(unique("dlx"), "fanout")
    dlq = amqp.queue(unique("dlq"))
    amqp.ch.queue_bind(dlq, dlx)
    src = amqp.queue(unique("src"), {"x-dead-letter-exchange": dlx})
    properties: Args = dict(
        content_type="text/plain", content_encoding="utf-8", delivery_mode=2, priority=3,
        correlation_id="corr", reply_to="reply", message_id="mid", timestamp=1700000000,
        type="kind", user_id="guest", app_id="app", headers={"keep": "me", "n": 7},
    )  # fmt: skip
    amqp.publish(src, b"payload", **properties)
    got = amqp.get(src, auto_ack=False)
    assert got is not None
    if how == "reject":
        amqp.ch.basic_reject(got[0].delivery_tag, requeue=False)
    else:
        amqp.ch.basic_nack(got[0].delivery_tag, requeue=False)
    method, props, body = amqp.wait_get(dlq)
    assert body == b"payload"
    assert (method.exchange, method.routing_key, method.redelivered) == (dlx, src, False)
    assert deaths(props.headers) == {
        "keep": "me",
        "n": 7,
        "x-death": [death(src, "rejected", "", [src])],
        **first(src, "rejected", ""),
    }
    for name, value in properties.items():
        if name != "headers":
            assert getattr(props, name) == value, name
    assert amqp.count(src) == 0


def test_nack_multiple_dead_letters_each_message_in_order(amqp: Amqp, unique: Unique) -> None:
    dlq = amqp.queue(unique("dlq"))
    src = amqp.queue(unique("src"), dlx_to(dlq))
    for body in (b"1", b"2", b"3"):
        amqp.publish(src, body)
    tags = []
    for _ in range(3):
        got = amqp.get(src, auto_ack=False)
        assert got is not None
        tags.append(got[0].delivery_tag)
    amqp.ch.basic_nack(tags[-1], multiple=True, requeue=False)
    bodies = [amqp.wait_get(dlq)[2] for _ in range(3)]
    assert bodies == [b"1", b"2", b"3"]


@pytest.mark.parametrize("ttl", [50, 0])
def test_queue_ttl_expiry_is_dead_lettered_as_expired(amqp: Amqp, unique: Unique, ttl: int) -> None:
    dlq = amqp.queue(unique("dlq"))
    src = amqp.queue(unique("src"), dlx_to(dlq, **{"x-message-ttl": ttl}))
    amqp.publish(src, b"x")
    method, props, _ = amqp.wait_get(dlq)
    # With x-dead-letter-routing-key the message is republished to "" with key dlq.
    assert (method.exchange, method.routing_key) == ("", dlq)
    assert props.expiration is None
    assert deaths(props.headers) == {
        "x-death": [death(src, "expired", "", [src])],  # no original-expiration: queue TTL
        **first(src, "expired", ""),
    }


@pytest.mark.parametrize(("reason", "expiration"), [("expired", "50"), ("rejected", "60000")])
def test_per_message_expiration_is_moved_to_original_expiration(
    amqp: Amqp, unique: Unique, reason: str, expiration: str
) -> None:
    dlq = amqp.queue(unique("dlq"))
    src = amqp.queue(unique("src"), dlx_to(dlq))
    amqp.publish(src, b"x", expiration=expiration, headers={"h": 1})
    if reason == "rejected":
        amqp.reject_next(src)
    _, props, _ = amqp.wait_get(dlq)
    assert props.expiration is None  # removed, else the dead letter could expire again
    assert deaths(props.headers) == {
        "h": 1,
        "x-death": [{**death(src, reason, "", [src]), "original-expiration": expiration}],
        **first(src, reason, ""),
    }


def test_message_requeued_after_ttl_is_dead_lettered_as_expired(amqp: Amqp, unique: Unique) -> None:
    dlq = amqp.queue(unique("dlq"))
    src = amqp.queue(unique("src"), dlx_to(dlq, **{"x-message-ttl": 100}))
    amqp.publish(src, b"late")
    got = amqp.get(src, auto_ack=False)
    assert got is not None
    time.sleep(0.25)
    amqp.ch.basic_reject(got[0].delivery_tag, requeue=True)
    _, props, body = amqp.wait_get(dlq)
    assert body == b"late"
    assert deaths(props.headers)["x-death"] == [death(src, "expired", "", [src])]
    assert amqp.get(src) is None


# --- routing keys, CC and BCC ---------------------------------------------------------------


def test_dead_letter_routing_key_replaces_the_keys_and_drops_cc(amqp: Amqp, unique: Unique) -> None:
    # RabbitMQ 3.10: with x-dead-letter-routing-key the CC header is removed; x-death still
    # records the original routing key followed by the CC keys.
    exchange = amqp.exchange(unique("x"))
    dlq = amqp.queue(unique("dlq"))
    src = amqp.queue(unique("src"), dlx_to(dlq))
    for key in ("k1", "k2"):
        amqp.ch.queue_bind(src, exchange, key)
    amqp.publish("k1", b"x", exchange=exchange, headers={"CC": ["k2"]})
    amqp.reject_next(src)
    assert amqp.get(src) is None  # one queue, one copy, even though two keys matched
    method, props, _ = amqp.wait_get(dlq)
    assert (method.exchange, method.routing_key) == ("", dlq)
    assert deaths(props.headers) == {
        "x-death": [death(src, "rejected", exchange, ["k1", "k2"])],
        **first(src, "rejected", exchange),
    }


@pytest.mark.parametrize("header", ["CC", "BCC"])
def test_without_dlrk_the_original_keys_route_the_dead_letter(
    amqp: Amqp, unique: Unique, header: str
) -> None:
    # Without x-dead-letter-routing-key the dead letter is routed with the original key and the
    # CC keys (and the CC header stays). RabbitMQ 3.10 strips the BCC header at publish but keeps
    # the BCC keys with the message: they route the dead letter too, yet x-death leaves them out.
    exchange = amqp.exchange(unique("x"))
    dlx = amqp.exchange(unique("dlx"))
    src = amqp.queue(unique("src"), {"x-dead-letter-exchange": dlx})
    by_k1 = amqp.queue(unique("dl-k1"))
    by_k2 = amqp.queue(unique("dl-k2"))
    for key, dlq in (("k1", by_k1), ("k2", by_k2)):
        amqp.ch.queue_bind(src, exchange, key)
        amqp.ch.queue_bind(dlq, dlx, key)
    amqp.publish("k1", b"x", exchange=exchange, headers={header: ["k2"]})
    got = amqp.get(src, auto_ack=False)
    assert got is not None and got[1].headers == ({} if header == "BCC" else {"CC": ["k2"]})
    amqp.ch.basic_reject(got[0].delivery_tag, requeue=False)
    assert amqp.get(src) is None  # one copy per queue, however many keys matched
    keys = ["k1"] if header == "BCC" else ["k1", "k2"]
    for dlq in (by_k1, by_k2):
        method, props, _ = amqp.wait_get(dlq)
        assert (method.exchange, method.routing_key) == (dlx, "k1")
        assert deaths(props.headers) == {
            **({} if header == "BCC" else {"CC": ["k2"]}),
            "x-death": [death(src, "rejected", exchange, keys)],
            **first(src, "rejected", exchange),
        }


# --- several deaths -------------------------------------------------------------------------


def test_same_queue_and_reason_increments_count_in_place(amqp: Amqp, unique: Unique) -> None:
    # RabbitMQ 3.10: entries are keyed by (queue, reason); a repeat only bumps count. The
    # exchange, routing-keys and time of the first death stay, even when they now differ.
    ex1 = amqp.exchange(unique("x1"))
    ex2 = amqp.exchange(unique("x2"))
    dlq = amqp.queue(unique("dlq"))
    src = amqp.queue(unique("src"), dlx_to(dlq))
    amqp.ch.queue_bind(src, ex1, "k1")
    amqp.ch.queue_bind(src, ex2, "k2")
    amqp.publish("k1", b"x", exchange=ex1)
    amqp.reject_next(src)
    _, props, _ = amqp.wait_get(dlq)
    first_time = props.headers["x-death"][0]["time"]
    while int(time.time()) <= first_time.timestamp():  # let the wall clock reach a new second
        time.sleep(0.02)
    amqp.publish("k2", b"x", exchange=ex2, headers=props.headers)
    amqp.reject_next(src)
    _, props, _ = amqp.wait_get(dlq)
    assert props.headers["x-death"][0]["time"] == first_time
    assert deaths(props.headers) == {
        "x-death": [death(src, "rejected", ex1, ["k1"], count=2)],
        **first(src, "rejected", ex1),
    }


def test_entries_are_most_recent_first_across_queues(amqp: Amqp, unique: Unique) -> None:
    final = amqp.queue(unique("final"))
    second = amqp.queue(unique("second"), dlx_to(final, **{"x-message-ttl": 50}))
    src = amqp.queue(unique("src"), dlx_to(second))
    amqp.publish(src, b"x")
    amqp.reject_next(src)
    method, props, _ = amqp.wait_get(final)
    assert method.routing_key == final
    assert deaths(props.headers) == {
        "x-death": [
            death(second, "expired", "", [second]),
            death(src, "rejected", "", [src]),
        ],
        **first(src, "rejected", ""),
    }


def test_an_updated_entry_moves_to_the_front(amqp: Amqp, unique: Unique) -> None:
    dlq = amqp.queue(unique("dlq"))
    src = amqp.queue(unique("src"), dlx_to(dlq))
    amqp.publish(src, b"x")
    amqp.reject_next(src)
    _, props, _ = amqp.wait_get(dlq)
    amqp.publish(src, b"x", headers=props.headers, expiration="10")
    _, props, _ = amqp.wait_get(dlq)
    amqp.publish(src, b"x", headers=props.headers)
    amqp.reject_next(src)
    _, props, _ = amqp.wait_get(dlq)
    assert deaths(props.headers) == {
        "x-death": [
            death(src, "rejected", "", [src], count=2),
            {**death(src, "expired", "", [src]), "original-expiration": "10"},
        ],
        **first(src, "rejected", ""),
    }


# --- cycles ---------------------------------------------------------------------------------


def test_expired_cycle_through_two_queues_is_cut(amqp: Amqp, unique: Unique) -> None:
    # A expires into B; B expires into a fanout bound to A and to a watcher. RabbitMQ 3.10
    # detects the cycle per target queue: A already has an 'expired' entry and no rejection
    # happened on the way, so the copy for A is dropped while the watcher gets its copy.
    fanout = amqp.exchange(unique("fan"), "fanout")
    watcher = amqp.queue(unique("watch"))
    b = amqp.queue(unique("b"), {"x-message-ttl": 100, "x-dead-letter-exchange": fanout})
    a = amqp.queue(unique("a"), dlx_to(b, **{"x-message-ttl": 100}))
    amqp.ch.queue_bind(a, fanout)
    amqp.ch.queue_bind(watcher, fanout)
    amqp.publish(a, b"loop")
    method, props, _ = amqp.wait_get(watcher)
    assert (method.exchange, method.routing_key) == (fanout, b)
    assert deaths(props.headers) == {
        "x-death": [death(b, "expired", "", [b]), death(a, "expired", "", [a])],
        **first(a, "expired", ""),
    }
    time.sleep(0.3)
    assert (amqp.count(a), amqp.count(b), amqp.count(watcher)) == (0, 0, 0)


def test_queue_expiring_into_itself_drops_the_message(amqp: Amqp, unique: Unique) -> None:
    fanout = amqp.exchange(unique("fan"), "fanout")
    watcher = amqp.queue(unique("watch"))
    src = amqp.queue(unique("self"), {"x-message-ttl": 50, "x-dead-letter-exchange": fanout})
    amqp.ch.queue_bind(src, fanout)
    amqp.ch.queue_bind(watcher, fanout)
    amqp.publish(src, b"x")
    _, props, _ = amqp.wait_get(watcher)
    assert deaths(props.headers)["x-death"] == [death(src, "expired", "", [src])]
    time.sleep(0.2)
    assert amqp.count(src) == 0 and amqp.get(src) is None


def test_a_rejection_is_not_a_cycle(amqp: Amqp, unique: Unique) -> None:
    # Without x-dead-letter-routing-key the dead letter keeps its key: straight back to src.
    src = amqp.queue(unique("self"), {"x-dead-letter-exchange": ""})
    amqp.publish(src, b"x")
    amqp.reject_next(src)
    for count in (1, 2, 3):
        method, props, _ = amqp.wait_get(src, auto_ack=False)
        assert deaths(props.headers)["x-death"] == [death(src, "rejected", "", [src], count)]
        amqp.ch.basic_reject(method.delivery_tag, requeue=False)


def test_retry_later_pattern_counts_each_attempt(amqp: Amqp, unique: Unique) -> None:
    work_x = amqp.exchange(unique("work"))
    retry_x = amqp.exchange(unique("retry"), "fanout")
    work_q = amqp.queue(unique("work-q"), {"x-dead-letter-exchange": retry_x})
    retry_q = amqp.queue(
        unique("retry-q"), {"x-message-ttl": 100, "x-dead-letter-exchange": work_x}
    )
    amqp.ch.queue_bind(work_q, work_x, "job")
    amqp.ch.queue_bind(retry_q, retry_x)
    amqp.publish("job", b"task", exchange=work_x, message_id="j1")
    amqp.reject_next(work_q)  # attempt 1 fails
    attempts = []
    for _ in range(2):  # attempts 2 and 3 fail
        method, props, body = amqp.wait_get(work_q, auto_ack=False)
        attempts.append(deaths(props.headers))
        assert (method.exchange, method.routing_key, body) == (work_x, "job", b"task")
        assert props.message_id == "j1"
        amqp.ch.basic_reject(method.delivery_tag, requeue=False)
    method, props, _ = amqp.wait_get(work_q, auto_ack=False)  # attempt 4 succeeds
    amqp.ch.basic_ack(method.delivery_tag)
    attempts.append(deaths(props.headers))
    assert amqp.count(retry_q) == 0
    for n, headers in enumerate(attempts, start=1):
        assert headers == {
            "x-death": [
                death(retry_q, "expired", retry_x, ["job"], count=n),
                death(work_q, "rejected", work_x, ["job"], count=n),
            ],
            **first(work_q, "rejected", work_x),
        }


# --- where nothing is dead-lettered ---------------------------------------------------------


def test_missing_dead_letter_exchange_drops_silently(amqp: Amqp, unique: Unique) -> None:
    src = amqp.queue(unique("src"), {"x-dead-letter-exchange": unique("nowhere")})
    amqp.publish(src, b"x")
    amqp.reject_next(src)
    assert amqp.count(src) == 0
    assert amqp.ch.is_open and amqp.conn.is_open


def test_purge_and_delete_do_not_dead_letter(amqp: Amqp, unique: Unique) -> None:
    dlq = amqp.queue(unique("dlq"))
    src = amqp.queue(unique("src"), dlx_to(dlq))
    amqp.publish(src, b"purged")
    assert amqp.ch.queue_purge(src).method.message_count == 1
    amqp.publish(src, b"deleted")
    amqp.ch.queue_delete(src)
    time.sleep(0.1)
    assert amqp.count(dlq) == 0


async def test_aio_pika_consumer_sees_x_death(amqp: Amqp, unique: Unique) -> None:
    dlq_name = amqp.queue(unique("dlq"))
    src_name = amqp.queue(unique("src"), dlx_to(dlq_name))
    connection = await aio_pika.connect(amqp.url)
    async with connection:
        channel = await connection.channel()
        await channel.default_exchange.publish(
            aio_pika.Message(b"job", expiration=60), routing_key=src_name
        )
        src = await channel.declare_queue(src_name, passive=True)
        message = await src.get(timeout=2)
        await message.reject(requeue=False)
        dlq = await channel.declare_queue(dlq_name, passive=True)
        async with dlq.iterator() as messages:
            async for dead in messages:
                await dead.ack()
                break
    assert dead.expiration is None
    assert dead.routing_key == dlq_name
    headers = dict(dead.headers)
    entry = dict(headers.pop("x-death")[0])
    check_time(entry.pop("time"))
    assert entry == {
        **death(src_name, "rejected", "", [src_name]),
        "count": 1,  # pamqp decodes every integer type to int
        "original-expiration": "60000",
    }
    assert headers == first(src_name, "rejected", "")
