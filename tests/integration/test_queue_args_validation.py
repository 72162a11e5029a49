"""queue.declare argument validation and equivalence, with RabbitMQ 3.10.8's exact texts.

Invalid values close the channel with 406 PRECONDITION_FAILED. The texts embed Erlang terms
({value_negative,-1}, {unacceptable_type,longstr}, ...) and AMQP field type names; pika encodes
Python ints as 'signedint' (32-bit 'I'), str as 'longstr', bool as 'bool', None as 'void', so
the texts below are checked with pika. aio-pika (pamqp) encodes small ints as 8-bit 'b', which
RabbitMQ treats as equivalent to 'I' for redeclares.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

import aio_pika
import aiormq
import pika
import pytest
from pika.adapters.blocking_connection import BlockingConnection
from pika.exceptions import ChannelClosedByBroker

Unique = Callable[[str], str]
Args = dict[str, Any]


@pytest.fixture
def conn(broker: Any) -> Iterator[BlockingConnection]:
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    yield connection
    with suppress(Exception):
        connection.close()


@pytest.fixture
def doomed(broker: Any) -> Iterator[list[str]]:
    """Queues to remove from a shared external broker afterwards."""
    names: list[str] = []
    yield names
    if broker.embedded is not None or not names:
        return
    with suppress(Exception):
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        for name in names:
            channel.queue_delete(name)
        connection.close()


def refusal(conn: BlockingConnection, queue: str, arguments: Args, **flags: Any) -> tuple[int, str]:
    channel = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        channel.queue_declare(queue, arguments=arguments, **flags)
    assert conn.is_open, "a refused declare must only close the channel"
    return info.value.reply_code, info.value.reply_text


def exists(conn: BlockingConnection, queue: str) -> bool:
    channel = conn.channel()
    try:
        channel.queue_declare(queue, passive=True)
    except ChannelClosedByBroker as error:
        assert error.reply_code == 404
        return False
    channel.close()
    return True


EXPECTED_INTEGER = '"expected integer, got {}"'

INVALID: list[tuple[str, Args, str]] = [
    ("x-message-ttl", {"x-message-ttl": -1}, "{value_negative,-1}"),
    ("x-message-ttl", {"x-message-ttl": "100"}, EXPECTED_INTEGER.format("longstr")),
    ("x-message-ttl", {"x-message-ttl": True}, EXPECTED_INTEGER.format("bool")),
    ("x-message-ttl", {"x-message-ttl": None}, EXPECTED_INTEGER.format("void")),
    ("x-message-ttl", {"x-message-ttl": [1]}, EXPECTED_INTEGER.format("array")),
    ("x-message-ttl", {"x-message-ttl": {"a": 1}}, EXPECTED_INTEGER.format("table")),
    ("x-message-ttl", {"x-message-ttl": 315360000001}, "{value_too_large,315360000001}"),
    ("x-expires", {"x-expires": 0}, "{value_zero,0}"),
    ("x-expires", {"x-expires": -5}, "{value_negative,-5}"),
    ("x-expires", {"x-expires": "10"}, EXPECTED_INTEGER.format("longstr")),
    ("x-expires", {"x-expires": 315360000001}, "{value_too_large,315360000001}"),
    ("x-max-length", {"x-max-length": -1}, "{value_negative,-1}"),
    ("x-max-length", {"x-max-length": "a"}, EXPECTED_INTEGER.format("longstr")),
    ("x-max-length-bytes", {"x-max-length-bytes": -1}, "{value_negative,-1}"),
    ("x-max-length-bytes", {"x-max-length-bytes": True}, EXPECTED_INTEGER.format("bool")),
    ("x-max-priority", {"x-max-priority": 256}, "{max_value_exceeded,256}"),
    ("x-max-priority", {"x-max-priority": -1}, "{value_negative,-1}"),
    ("x-max-priority", {"x-max-priority": "x"}, EXPECTED_INTEGER.format("longstr")),
    ("x-overflow", {"x-overflow": "bogus"}, "invalid_overflow"),
    ("x-overflow", {"x-overflow": "Drop-Head"}, "invalid_overflow"),
    ("x-overflow", {"x-overflow": 1}, "{unacceptable_type,signedint}"),
    ("x-overflow", {"x-overflow": b"drop-head"}, "{unacceptable_type,binary}"),
    (
        "x-dead-letter-routing-key",
        {"x-dead-letter-routing-key": "rk"},
        "routing_key_but_no_dlx_defined",
    ),
    (
        "x-dead-letter-routing-key",
        {"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": 3},
        "{unacceptable_type,signedint}",
    ),
    (
        "x-single-active-consumer",
        {"x-single-active-consumer": "yes"},
        "{unacceptable_type,longstr}",
    ),
    ("x-single-active-consumer", {"x-single-active-consumer": 1}, "{unacceptable_type,signedint}"),
    ("x-queue-mode", {"x-queue-mode": "weird"}, "\"unsupported queue mode 'weird'\""),
    ("x-queue-mode", {"x-queue-mode": "Lazy"}, "\"unsupported queue mode 'Lazy'\""),
    ("x-queue-mode", {"x-queue-mode": 5}, "{unacceptable_type,signedint}"),
    ("x-queue-type", {"x-queue-type": "weird"}, "\"unsupported queue type 'weird'\""),
    ("x-queue-type", {"x-queue-type": "Classic"}, "\"unsupported queue type 'Classic'\""),
    ("x-queue-type", {"x-queue-type": ""}, "\"unsupported queue type ''\""),
    ("x-queue-type", {"x-queue-type": 5}, "{unacceptable_type,signedint}"),
    ("x-queue-type", {"x-queue-type": b"classic"}, "{unacceptable_type,binary}"),
    # The queue type is checked before the other arguments.
    (
        "x-queue-type",
        {"x-queue-type": "weird", "x-max-length": -1},
        "\"unsupported queue type 'weird'\"",
    ),
]


@pytest.mark.parametrize(
    ("name", "arguments", "detail"), INVALID, ids=[str(a) for _, a, _ in INVALID]
)
def test_invalid_argument_is_refused(
    conn: BlockingConnection, unique: Unique, name: str, arguments: Args, detail: str
) -> None:
    queue = unique("badarg")
    assert refusal(conn, queue, arguments) == (
        406,
        f"PRECONDITION_FAILED - invalid arg '{name}' for queue '{queue}' in vhost '/': {detail}",
    )
    assert not exists(conn, queue)


@pytest.mark.parametrize(("value", "type_name"), [(5, "signedint"), (b"dlx", "binary")])
def test_dead_letter_exchange_of_the_wrong_type_has_its_own_wording(
    conn: BlockingConnection, unique: Unique, value: Any, type_name: str
) -> None:
    queue = unique("baddlx")
    assert refusal(conn, queue, {"x-dead-letter-exchange": value}) == (
        406,
        f"PRECONDITION_FAILED - invalid type '{type_name}' for arg 'x-dead-letter-exchange' "
        f"in queue '{queue}' in vhost '/'",
    )


VALID: list[Args] = [
    {"x-message-ttl": 0},
    {"x-message-ttl": 315360000000},
    {"x-expires": 1},
    {"x-expires": 315360000000},
    {"x-max-length": 0},
    {"x-max-length": 2**40},  # no upper bound
    {"x-max-length-bytes": 0},
    {"x-max-priority": 0},
    {"x-max-priority": 255},
    {"x-overflow": "drop-head"},
    {"x-overflow": "reject-publish"},
    {"x-overflow": "reject-publish-dlx"},
    {"x-dead-letter-exchange": ""},
    {"x-dead-letter-exchange": "does-not-exist-and-that-is-fine"},
    {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": ""},
    {"x-single-active-consumer": False},
    {"x-single-active-consumer": True},
    {"x-some-unknown-argument": 1, "no-x-prefix": "ignored"},
    {"x-queue-type": "classic"},
]


@pytest.mark.parametrize("arguments", VALID, ids=[str(a) for a in VALID])
def test_valid_edge_values_are_accepted(
    conn: BlockingConnection, unique: Unique, doomed: list[str], arguments: Args
) -> None:
    queue = unique("okarg")
    doomed.append(queue)
    channel = conn.channel()
    ok = channel.queue_declare(queue, arguments=arguments).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (queue, 0, 0)
    channel.queue_declare(queue, arguments=arguments)  # the same arguments again: fine


def inequivalent(name: str, queue: str, received: str, current: str) -> tuple[int, str]:
    return (
        406,
        f"PRECONDITION_FAILED - inequivalent arg '{name}' for queue '{queue}' in vhost '/': "
        f"received {received} but current is {current}",
    )


REDECLARES: list[tuple[str, Args, Args, str, str]] = [
    ("x-message-ttl", {"x-message-ttl": 100}, {"x-message-ttl": 200}, "'200'", "'100'"),
    (
        "x-message-ttl",
        {"x-message-ttl": 100},
        {},
        "none",
        "the value '100' of type 'signedint'",
    ),
    (
        "x-message-ttl",
        {},
        {"x-message-ttl": 100},
        "the value '100' of type 'signedint'",
        "none",
    ),
    ("x-expires", {"x-expires": 10000}, {"x-expires": 20000}, "'20000'", "'10000'"),
    ("x-max-length", {"x-max-length": 5}, {"x-max-length": 6}, "'6'", "'5'"),
    ("x-max-priority", {"x-max-priority": 5}, {"x-max-priority": 6}, "'6'", "'5'"),
    (
        "x-dead-letter-exchange",
        {"x-dead-letter-exchange": "a"},
        {"x-dead-letter-exchange": "b"},
        "'b'",
        "'a'",
    ),
    (
        "x-overflow",
        {"x-overflow": "drop-head"},
        {"x-overflow": "reject-publish"},
        "'reject-publish'",
        "'drop-head'",
    ),
    (
        "x-overflow",
        {},
        {"x-overflow": "drop-head"},  # the default value, but explicitly given
        "the value 'drop-head' of type 'longstr'",
        "none",
    ),
    (
        "x-single-active-consumer",
        {"x-single-active-consumer": True},
        {"x-single-active-consumer": False},
        "'false'",
        "'true'",
    ),
    (
        "x-single-active-consumer",
        {},
        {"x-single-active-consumer": False},
        "the value 'false' of type 'bool'",
        "none",
    ),
    (
        "x-single-active-consumer",
        {"x-single-active-consumer": True},
        {},
        "none",
        "the value 'true' of type 'bool'",
    ),
    (
        "x-queue-type",
        {},
        {"x-queue-type": "quorum"},
        "the value 'quorum' of type 'longstr'",
        "none",
    ),
    (
        "x-queue-type",
        {"x-queue-type": "classic"},
        {"x-queue-type": "weird"},
        "'weird'",
        "'classic'",
    ),
    # Equivalence is checked before validity: these would be invalid on a first declare.
    ("x-message-ttl", {"x-message-ttl": 100}, {"x-message-ttl": -1}, "'-1'", "'100'"),
    ("x-message-ttl", {"x-message-ttl": 100}, {"x-message-ttl": "100"}, "'100'", "'100'"),
    ("x-message-ttl", {"x-message-ttl": 100}, {"x-message-ttl": True}, "'true'", "'100'"),
]


@pytest.mark.parametrize(
    ("name", "first", "second", "received", "current"),
    REDECLARES,
    ids=[f"{first}->{second}" for _, first, second, _, _ in REDECLARES],
)
def test_redeclare_with_different_argument_is_inequivalent(
    conn: BlockingConnection,
    unique: Unique,
    doomed: list[str],
    name: str,
    first: Args,
    second: Args,
    received: str,
    current: str,
) -> None:
    queue = unique("redeclare")
    doomed.append(queue)
    conn.channel().queue_declare(queue, arguments=first)
    assert refusal(conn, queue, second) == inequivalent(name, queue, received, current)
    assert exists(conn, queue)


def test_unknown_arguments_are_not_compared(
    conn: BlockingConnection, unique: Unique, doomed: list[str]
) -> None:
    queue = unique("redeclare")
    doomed.append(queue)
    channel = conn.channel()
    channel.queue_declare(queue, arguments={"x-unknown": 1, "x-max-length": 5})
    channel.queue_declare(queue, arguments={"x-unknown": 2, "x-max-length": 5})
    channel.queue_declare(queue, arguments={"x-max-length": 5})


@pytest.mark.parametrize(
    ("first", "second"), [({"x-queue-type": "classic"}, {}), ({}, {"x-queue-type": "classic"})]
)
def test_classic_queue_type_is_the_same_as_none_on_redeclare(
    conn: BlockingConnection, unique: Unique, doomed: list[str], first: Args, second: Args
) -> None:
    queue = unique("classic")
    doomed.append(queue)
    channel = conn.channel()
    channel.queue_declare(queue, arguments=first)
    assert channel.queue_declare(queue, arguments=second).method.queue == queue


def test_passive_declare_ignores_arguments(
    conn: BlockingConnection, unique: Unique, doomed: list[str]
) -> None:
    queue = unique("passive")
    doomed.append(queue)
    channel = conn.channel()
    channel.queue_declare(queue, arguments={"x-message-ttl": 100})
    ok = channel.queue_declare(queue, passive=True, arguments={"x-message-ttl": -1}).method
    assert ok.queue == queue
    assert refusal(conn, unique("missing"), {"x-message-ttl": -1}, passive=True)[0] == 404


async def test_integer_widths_are_equivalent(
    conn: BlockingConnection, unique: Unique, doomed: list[str], broker: Any
) -> None:
    # pika sends 100 as a 32-bit 'I'; pamqp sends it as an 8-bit 'b'. RabbitMQ compares
    # integer arguments by value, so the redeclare is fine; a different value is not.
    queue = unique("widths")
    doomed.append(queue)
    arguments: Args = {
        "x-message-ttl": 100,
        "x-max-length": 100000,
        "x-max-priority": 5,
        "x-single-active-consumer": True,
        "x-dead-letter-exchange": "",
    }
    conn.channel().queue_declare(queue, arguments=arguments)
    connection = await aio_pika.connect(broker.url)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(queue, arguments=arguments)
        channel = await connection.channel()
        with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
            await channel.declare_queue(queue, arguments={**arguments, "x-message-ttl": 200})
        assert info.value.args[0] == inequivalent("x-message-ttl", queue, "'200'", "'100'")[1]
