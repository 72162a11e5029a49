"""Direct, fanout, topic and headers exchange matching, as RabbitMQ 3.10 does it.

Each test binds one queue, publishes a fixed set of messages (the body names the message)
with publisher confirms, and compares what reached the queue with what RabbitMQ routes.
"""

from __future__ import annotations

from typing import Any

import aio_pika
import aiormq
import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ChannelClosedByBroker

import helpers
from helpers import Unique, confirming, private_queue


def drain(channel: BlockingChannel, queue: str) -> list[str]:
    """The bodies left in the queue, as text (each body names its message)."""
    return [body.decode() for body in helpers.drain(channel, queue)]


# --- direct and fanout routing --------------------------------------------------------------


def test_direct_exchange_routes_by_exact_key(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("direct")
    channel = confirming(conn)
    channel.exchange_declare(name, "direct", auto_delete=True)
    red, green = private_queue(channel), private_queue(channel)
    channel.queue_bind(red, name, "red")
    channel.queue_bind(green, name, "green")
    channel.queue_bind(green, name, "lime")
    for key in ["red", "green", "lime", "blue", "Red", "red.x", ""]:
        channel.basic_publish(name, key, key.encode())
    assert drain(channel, red) == ["red"]
    assert drain(channel, green) == ["green", "lime"]


def test_fanout_ignores_routing_key(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("fanout")
    channel = confirming(conn)
    channel.exchange_declare(name, "fanout", auto_delete=True)
    first, second = private_queue(channel), private_queue(channel)
    channel.queue_bind(first, name, "")
    channel.queue_bind(second, name, "some-binding-key")
    channel.basic_publish(name, "anything", b"m1")
    channel.basic_publish(name, "", b"m2")
    assert drain(channel, first) == ["m1", "m2"]
    assert drain(channel, second) == ["m1", "m2"]


def test_two_bindings_to_one_queue_deliver_once(conn: BlockingConnection, unique: Unique) -> None:
    topic, fanout = unique("topic"), unique("fanout")
    channel = confirming(conn)
    channel.exchange_declare(topic, "topic", auto_delete=True)
    channel.exchange_declare(fanout, "fanout", auto_delete=True)
    queue = private_queue(channel)
    channel.queue_bind(queue, topic, "a.*")
    channel.queue_bind(queue, topic, "#")
    channel.queue_bind(queue, fanout, "x")
    channel.queue_bind(queue, fanout, "y")
    channel.basic_publish(topic, "a.b", b"topic")
    channel.basic_publish(fanout, "", b"fanout")
    assert drain(channel, queue) == ["topic", "fanout"]


def test_identical_binding_is_a_set(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("direct")
    channel = confirming(conn)
    channel.exchange_declare(name, "direct", auto_delete=True)
    queue, keeper = private_queue(channel), private_queue(channel)
    channel.queue_bind(keeper, name, "keep")  # keeps the auto-delete exchange alive
    channel.queue_bind(queue, name, "k")
    channel.queue_bind(queue, name, "k")
    channel.basic_publish(name, "k", b"once")
    assert drain(channel, queue) == ["once"]
    channel.queue_unbind(queue, name, "k")  # one unbind removes the (single) binding
    channel.basic_publish(name, "k", b"unbound")
    assert drain(channel, queue) == []


# --- topic ----------------------------------------------------------------------------------

ROUTING_KEYS = [
    "", "a", "b", "ab", "a.b", "b.c", "x.b", "a.b.c", "x.a.b", "x.b.y", "a.x.b", "a.x.y.b",
    "a.b.c.d", "a..b", "a.", ".a", ".", "..",
]  # fmt: skip

# pattern -> the keys above that RabbitMQ 3.10 routes to a queue bound with it, in publish order
TOPIC_CASES: dict[str, list[str]] = {
    "a.b": ["a.b"],
    # RabbitMQ 3.10: the empty routing key has zero words, so `*` does not match it
    "*": ["a", "b", "ab"],
    "a.*": ["a.b", "a."],  # an empty word is still a word
    "*.*": ["a.b", "b.c", "x.b", "a.", ".a", "."],
    "*.b.*": ["a.b.c", "x.b.y"],
    "a.*.b": ["a.x.b", "a..b"],
    "#": ROUTING_KEYS,
    "#.#": ROUTING_KEYS,
    "a.#": ["a", "a.b", "a.b.c", "a.x.b", "a.x.y.b", "a.b.c.d", "a..b", "a."],
    "#.b": ["b", "a.b", "x.b", "x.a.b", "a.x.b", "a.x.y.b", "a..b"],
    "a.#.b": ["a.b", "a.x.b", "a.x.y.b", "a..b"],
    "#.a.#": ["a", "a.b", "a.b.c", "x.a.b", "a.x.b", "a.x.y.b", "a.b.c.d", "a..b", "a.", ".a"],
    "*.#": [key for key in ROUTING_KEYS if key],
    "#.*": [key for key in ROUTING_KEYS if key],
    "": [""],
    "a..b": ["a..b"],
    ".a": [".a"],
}


@pytest.mark.parametrize(
    ("pattern", "expected"), TOPIC_CASES.items(), ids=[repr(p) for p in TOPIC_CASES]
)
def test_topic_pattern(
    conn: BlockingConnection, unique: Unique, pattern: str, expected: list[str]
) -> None:
    exchange = unique("topic")
    channel = conn.channel()
    channel.confirm_delivery()
    channel.exchange_declare(exchange, "topic", auto_delete=True)
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(queue, exchange, pattern)
    for key in ROUTING_KEYS:
        channel.basic_publish(exchange, key, key.encode())
    assert drain(channel, queue) == expected


def test_topic_unbind_pattern(conn: BlockingConnection, unique: Unique) -> None:
    exchange = unique("topic")
    channel = conn.channel()
    channel.confirm_delivery()
    channel.exchange_declare(exchange, "topic", auto_delete=True)
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(queue, exchange, "a.#")
    channel.queue_bind(queue, exchange, "*.b")
    channel.queue_unbind(queue, exchange, "a.#")
    for key in ["a.b", "a.c", "x.b"]:
        channel.basic_publish(exchange, key, key.encode())
    assert drain(channel, queue) == ["a.b", "x.b"]


async def test_aio_pika_topic_routing(broker: Any, unique: Unique) -> None:
    connection = await aio_pika.connect(broker.url, timeout=10)
    async with connection:
        channel = await connection.channel()  # aio-pika channels confirm publishes by default
        exchange = await channel.declare_exchange(
            unique("topic"), aio_pika.ExchangeType.TOPIC, auto_delete=True
        )
        stock = await channel.declare_queue(exclusive=True)
        errors = await channel.declare_queue(exclusive=True)
        await stock.bind(exchange, "stock.*.nyse")
        await errors.bind(exchange, "#.error")
        for key in ["stock.ibm.nyse", "stock.nyse", "app.db.error", "error", "stock.ibm.nyse.x"]:
            await exchange.publish(aio_pika.Message(key.encode()), routing_key=key)
        for queue, expected in [
            (stock, [b"stock.ibm.nyse"]),
            (errors, [b"app.db.error", b"error"]),
        ]:
            got = []
            while (message := await queue.get(no_ack=True, fail=False, timeout=5)) is not None:
                got.append(message.body)
            assert got == expected


# --- headers --------------------------------------------------------------------------------

HEADER_MESSAGES: dict[str, dict[str, Any] | None] = {
    "ab": {"a": 1, "b": "two"},
    "abc": {"a": 1, "b": "two", "c": 3},
    "a": {"a": 1},
    "b": {"b": "two"},
    "a2b": {"a": 2, "b": "two"},
    "a-str": {"a": "1", "b": "two"},  # "1" (longstr) is not 1 (int)
    "a-true": {"a": True},  # true (bool) is not 1 (int)
    "a-void": {"a": None},
    "no-headers": None,
    "empty": {},
    "x-foo": {"x-foo": "bar", "a": 1},
    "x-match": {"x-match": "any", "a": 1},
}

# binding arguments -> names of the messages above that reach the bound queue (publish order)
HEADER_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("all", {"x-match": "all", "a": 1, "b": "two"}, ["ab", "abc"]),
    ("default-is-all", {"a": 1, "b": "two"}, ["ab", "abc"]),
    (
        "any",
        {"x-match": "any", "a": 1, "b": "two"},
        ["ab", "abc", "a", "b", "a2b", "a-str", "x-foo", "x-match"],
    ),
    # RabbitMQ 3.10: binding keys starting with "x-" are ignored by all/any
    (
        "all-ignores-x-keys",
        {"x-match": "all", "x-foo": "bar", "a": 1},
        ["ab", "abc", "a", "x-foo", "x-match"],
    ),
    ("any-only-x-keys", {"x-match": "any", "x-foo": "bar"}, []),
    ("all-no-keys", {"x-match": "all"}, list(HEADER_MESSAGES)),
    ("no-arguments", {}, list(HEADER_MESSAGES)),
    ("any-no-keys", {"x-match": "any"}, []),
    ("string-value", {"a": "1"}, ["a-str"]),
    ("bool-value", {"a": True}, ["a-true"]),
    # RabbitMQ 3.10: a void binding value matches on the key's presence, whatever its value
    (
        "void-value",
        {"x-match": "all", "a": None},
        ["ab", "abc", "a", "a2b", "a-str", "a-true", "a-void", "x-foo", "x-match"],
    ),
    ("all-with-x", {"x-match": "all-with-x", "x-foo": "bar", "a": 1}, ["x-foo"]),
    ("any-with-x", {"x-match": "any-with-x", "x-foo": "bar", "a": 5}, ["x-foo"]),
]


@pytest.mark.parametrize(
    ("arguments", "expected"), [case[1:] for case in HEADER_CASES], ids=[c[0] for c in HEADER_CASES]
)
def test_headers_binding(
    conn: BlockingConnection, unique: Unique, arguments: dict[str, Any], expected: list[str]
) -> None:
    exchange = unique("headers")
    channel = conn.channel()
    channel.confirm_delivery()
    channel.exchange_declare(exchange, "headers", auto_delete=True)
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(queue, exchange, "binding-key-is-ignored", arguments=arguments)
    for name, headers in HEADER_MESSAGES.items():
        properties = pika.BasicProperties(headers=headers)
        channel.basic_publish(exchange, "routing-key-is-ignored", name.encode(), properties)
    assert drain(channel, queue) == expected


@pytest.mark.parametrize(
    ("x_match", "text"),
    [
        (
            "foo",
            'PRECONDITION_FAILED - Invalid x-match field value <<"foo">>; '
            "expected all, any, all-with-x, or any-with-x",
        ),
        (
            1,
            "PRECONDITION_FAILED - Invalid x-match field type signedint (value 1); "
            "expected longstr",
        ),
    ],
)
def test_headers_invalid_x_match(conn: BlockingConnection, x_match: object, text: str) -> None:
    channel = conn.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_bind(queue, "amq.headers", "", arguments={"x-match": x_match})
    assert (info.value.reply_code, info.value.reply_text) == (406, text)


def test_headers_unbind_needs_same_arguments(conn: BlockingConnection, unique: Unique) -> None:
    exchange = unique("headers")
    channel = conn.channel()
    channel.confirm_delivery()
    channel.exchange_declare(exchange, "headers", auto_delete=True)
    queue = channel.queue_declare("", exclusive=True).method.queue
    keeper = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(keeper, exchange, "", arguments={"keep": "alive"})
    channel.queue_bind(queue, exchange, "", arguments={"color": "red"})
    # RabbitMQ 3.10: the binding is identified by key *and* arguments; others are a no-op
    channel.queue_unbind(queue, exchange, "", arguments={"color": "blue"})
    channel.basic_publish(exchange, "", b"1", pika.BasicProperties(headers={"color": "red"}))
    channel.queue_unbind(queue, exchange, "", arguments={"color": "red"})
    channel.basic_publish(exchange, "", b"2", pika.BasicProperties(headers={"color": "red"}))
    assert drain(channel, queue) == ["1"]


async def test_aio_pika_headers_any_and_all(broker: Any, unique: Unique) -> None:
    connection = await aio_pika.connect(broker.url, timeout=10)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.declare_exchange(
            unique("headers"), aio_pika.ExchangeType.HEADERS, auto_delete=True
        )
        every = await channel.declare_queue(exclusive=True)
        either = await channel.declare_queue(exclusive=True)
        await every.bind(exchange, arguments={"x-match": "all", "format": "pdf", "type": "log"})
        await either.bind(exchange, arguments={"x-match": "any", "format": "pdf", "type": "log"})
        messages = {
            "both": {"format": "pdf", "type": "log"},
            "format": {"format": "pdf", "type": "report"},
            "neither": {"format": "zip"},
        }
        for name, headers in messages.items():
            await exchange.publish(aio_pika.Message(name.encode(), headers=headers), "")
        for queue, expected in [(every, [b"both"]), (either, [b"both", b"format"])]:
            got = []
            while (message := await queue.get(no_ack=True, fail=False, timeout=5)) is not None:
                got.append(message.body)
            assert got == expected
        bad = await connection.channel()
        with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
            await (await bad.declare_queue(exclusive=True)).bind(
                "amq.match", arguments={"x-match": "some"}
            )
        assert info.value.args[0] == (
            'PRECONDITION_FAILED - Invalid x-match field value <<"some">>; '
            "expected all, any, all-with-x, or any-with-x"
        )
