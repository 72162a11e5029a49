"""Exchange-to-exchange bindings, alternate exchanges and internal exchanges (RabbitMQ 3.10)."""

from __future__ import annotations

from typing import Any

import aio_pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import UnroutableError

from helpers import Unique, channel_error, confirming, drain, private_queue


@pytest.fixture
def channel(conn: BlockingConnection) -> BlockingChannel:
    """A channel in confirm mode: once basic_publish returns, routing is done."""
    return confirming(conn)


# --- exchange-to-exchange bindings ----------------------------------------------------------


def test_exchange_bind_routes_through_destination(channel: BlockingChannel, unique: Unique) -> None:
    source, destination = unique("src"), unique("dst")
    channel.exchange_declare(source, "direct", auto_delete=True)
    channel.exchange_declare(destination, "fanout", auto_delete=True)
    queue = private_queue(channel)
    channel.queue_bind(queue, destination)
    channel.exchange_bind(destination, source, "wanted")
    channel.basic_publish(source, "wanted", b"yes")
    channel.basic_publish(source, "unwanted", b"no")  # the *source* type decides
    assert drain(channel, queue) == [b"yes"]


def test_exchange_bind_chain_of_two(channel: BlockingChannel, unique: Unique) -> None:
    first, second, third = unique("e1"), unique("e2"), unique("e3")
    channel.exchange_declare(first, "topic", auto_delete=True)
    channel.exchange_declare(second, "direct", auto_delete=True)
    channel.exchange_declare(third, "fanout", auto_delete=True)
    queue = private_queue(channel)
    channel.exchange_bind(second, first, "a.#")
    channel.exchange_bind(third, second, "a.b")
    channel.queue_bind(queue, third)
    for key in ["a.b", "a.c", "a", "b.a.b"]:
        channel.basic_publish(first, key, key.encode())
    # the original routing key travels along the chain: a.c passes e1 but not e2
    assert drain(channel, queue) == [b"a.b"]


def test_exchange_unbind_stops_routing(channel: BlockingChannel, unique: Unique) -> None:
    source, destination = unique("src"), unique("dst")
    channel.exchange_declare(source, "fanout")
    channel.exchange_declare(destination, "fanout", auto_delete=True)
    queue = private_queue(channel)
    channel.queue_bind(queue, destination)
    channel.exchange_bind(destination, source, "k")
    channel.basic_publish(source, "", b"bound")
    channel.exchange_unbind(destination, source, "k")
    channel.basic_publish(source, "", b"unbound")
    assert drain(channel, queue) == [b"bound"]
    channel.exchange_delete(source)


def test_exchange_unbind_of_missing_binding_is_ok(channel: BlockingChannel, unique: Unique) -> None:
    source, destination = unique("src"), unique("dst")
    channel.exchange_declare(source, "fanout", auto_delete=True)
    channel.exchange_declare(destination, "fanout", auto_delete=True)
    channel.exchange_unbind(destination, source, "never-bound")
    # RabbitMQ 3.10: unbinding from exchanges that do not exist is also unbind-ok
    channel.exchange_unbind(unique("nope1"), unique("nope2"), "k")
    assert channel.is_open
    channel.exchange_delete(source)
    channel.exchange_delete(destination)


def test_cycle_of_exchanges_delivers_once(channel: BlockingChannel, unique: Unique) -> None:
    left, right = unique("left"), unique("right")
    channel.exchange_declare(left, "fanout")
    channel.exchange_declare(right, "fanout")
    channel.exchange_bind(right, left)
    channel.exchange_bind(left, right)
    queue = private_queue(channel)
    channel.queue_bind(queue, left)
    channel.queue_bind(queue, right)
    channel.basic_publish(left, "", b"loop?")
    # RabbitMQ 3.10: each exchange is visited once and the queue gets one copy
    assert drain(channel, queue) == [b"loop?"]
    channel.exchange_delete(left)
    channel.exchange_delete(right)


def test_auto_delete_exchange_goes_with_last_exchange_binding(
    channel: BlockingChannel, conn: BlockingConnection, unique: Unique
) -> None:
    source, destination = unique("src"), unique("dst")
    channel.exchange_declare(source, "fanout", auto_delete=True)
    channel.exchange_declare(destination, "fanout", auto_delete=True)
    channel.exchange_bind(destination, source)
    channel.exchange_unbind(destination, source)
    # RabbitMQ 3.10: the auto-delete *source* goes when its last binding goes; the destination,
    # which never had bindings of its own, stays
    code, text = channel_error(conn, lambda ch: ch.exchange_declare(source, passive=True))
    assert (code, text) == (404, f"NOT_FOUND - no exchange '{source}' in vhost '/'")
    conn.channel().exchange_declare(destination, passive=True)
    conn.channel().exchange_delete(destination)


@pytest.mark.parametrize("missing", ["source", "destination"])
def test_exchange_bind_missing_exchange(
    conn: BlockingConnection, unique: Unique, missing: str
) -> None:
    present, absent = unique("present"), unique("absent")
    conn.channel().exchange_declare(present, "fanout", auto_delete=True)
    if missing == "source":
        code, text = channel_error(conn, lambda ch: ch.exchange_bind(present, absent, "k"))
    else:
        code, text = channel_error(conn, lambda ch: ch.exchange_bind(absent, present, "k"))
    assert (code, text) == (404, f"NOT_FOUND - no exchange '{absent}' in vhost '/'")
    conn.channel().exchange_delete(present)


@pytest.mark.parametrize("side", ["source", "destination", "unbind"])
def test_exchange_bind_with_default_exchange_refused(
    conn: BlockingConnection, unique: Unique, side: str
) -> None:
    other = unique("other")
    conn.channel().exchange_declare(other, "fanout", auto_delete=True)

    def act(ch: BlockingChannel) -> None:
        if side == "source":
            ch.exchange_bind(other, "", "k")
        elif side == "destination":
            ch.exchange_bind("", other, "k")
        else:
            ch.exchange_unbind("", other, "k")

    assert channel_error(conn, act) == (
        403,
        "ACCESS_REFUSED - operation not permitted on the default exchange",
    )
    conn.channel().exchange_delete(other)


# --- alternate exchange ---------------------------------------------------------------------


def test_alternate_exchange_takes_unroutable(channel: BlockingChannel, unique: Unique) -> None:
    main, alternate = unique("main"), unique("ae")
    channel.exchange_declare(alternate, "fanout", auto_delete=True)
    channel.exchange_declare(
        main, "direct", auto_delete=True, arguments={"alternate-exchange": alternate}
    )
    routed, unrouted = private_queue(channel), private_queue(channel)
    channel.queue_bind(routed, main, "known")
    channel.queue_bind(unrouted, alternate)
    channel.basic_publish(main, "known", b"routed")
    # mandatory is satisfied by the alternate exchange: no basic.return, no UnroutableError
    channel.basic_publish(main, "unknown", b"via ae", mandatory=True)
    assert drain(channel, routed) == [b"routed"]
    assert drain(channel, unrouted) == [b"via ae"]
    channel.exchange_delete(main)


def test_alternate_exchange_chain(channel: BlockingChannel, unique: Unique) -> None:
    main, first, second = unique("main"), unique("ae1"), unique("ae2")
    channel.exchange_declare(second, "fanout", auto_delete=True)
    channel.exchange_declare(first, "direct", arguments={"alternate-exchange": second})
    channel.exchange_declare(main, "direct", arguments={"alternate-exchange": first})
    queue = private_queue(channel)
    channel.queue_bind(queue, second)
    channel.basic_publish(main, "nothing-matches", b"two hops")
    # RabbitMQ 3.10: the alternate exchange's own alternate exchange is followed too
    assert drain(channel, queue) == [b"two hops"]
    channel.exchange_delete(main)
    channel.exchange_delete(first)


def test_missing_alternate_exchange_means_unroutable(
    channel: BlockingChannel, unique: Unique
) -> None:
    main = unique("main")
    channel.exchange_declare(
        main, "direct", auto_delete=True, arguments={"alternate-exchange": unique("nowhere")}
    )
    with pytest.raises(UnroutableError) as info:
        channel.basic_publish(main, "k", b"lost", mandatory=True)
    [returned] = info.value.messages
    assert (returned.method.reply_code, returned.method.reply_text) == (312, "NO_ROUTE")
    assert returned.method.exchange == main
    channel.exchange_delete(main)


def test_alternate_exchange_argument_must_be_a_string(
    conn: BlockingConnection, unique: Unique
) -> None:
    name = unique("main")
    code, text = channel_error(
        conn, lambda ch: ch.exchange_declare(name, "direct", arguments={"alternate-exchange": 1})
    )
    assert code == 406
    assert text == (
        "PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' "
        f"in exchange '{name}' in vhost '/'"
    )


# --- internal exchanges ---------------------------------------------------------------------


def test_publish_to_internal_exchange_refused(conn: BlockingConnection, unique: Unique) -> None:
    name = unique("internal")
    conn.channel().exchange_declare(name, "fanout", internal=True)

    def publish(ch: BlockingChannel) -> None:
        ch.confirm_delivery()
        ch.basic_publish(name, "", b"direct to internal")

    code, text = channel_error(conn, publish)
    assert code == 403
    assert text == f"ACCESS_REFUSED - cannot publish to internal exchange '{name}' in vhost '/'"
    conn.channel().exchange_delete(name)


def test_internal_exchange_reached_through_bindings(
    channel: BlockingChannel, unique: Unique
) -> None:
    public, internal, alternate = unique("public"), unique("internal"), unique("internal-ae")
    channel.exchange_declare(internal, "fanout", internal=True, auto_delete=True)
    channel.exchange_declare(alternate, "fanout", internal=True, auto_delete=True)
    channel.exchange_declare(
        public, "direct", auto_delete=True, arguments={"alternate-exchange": alternate}
    )
    bound, fallback = private_queue(channel), private_queue(channel)
    channel.queue_bind(bound, internal)
    channel.queue_bind(fallback, alternate)
    channel.exchange_bind(internal, public, "in")
    channel.basic_publish(public, "in", b"through e2e")
    # RabbitMQ 3.10: an internal exchange may also serve as alternate exchange
    channel.basic_publish(public, "elsewhere", b"through ae")
    assert drain(channel, bound) == [b"through e2e"]
    assert drain(channel, fallback) == [b"through ae"]


# --- aio-pika -------------------------------------------------------------------------------


async def test_aio_pika_exchange_bind_and_alternate(broker: Any, unique: Unique) -> None:
    connection = await aio_pika.connect(broker.url, timeout=10)
    async with connection:
        channel = await connection.channel()
        alternate = await channel.declare_exchange(
            unique("ae"), aio_pika.ExchangeType.FANOUT, auto_delete=True
        )
        source = await channel.declare_exchange(
            unique("src"),
            aio_pika.ExchangeType.TOPIC,  # not auto-delete: it outlives its only binding
            arguments={"alternate-exchange": alternate.name},
        )
        destination = await channel.declare_exchange(
            unique("dst"), aio_pika.ExchangeType.FANOUT, auto_delete=True
        )
        queue = await channel.declare_queue(exclusive=True)
        lost = await channel.declare_queue(exclusive=True)
        await queue.bind(destination)
        await lost.bind(alternate)
        await destination.bind(source, "orders.*")
        await source.publish(aio_pika.Message(b"first"), routing_key="orders.new")
        await destination.unbind(source, "orders.*")
        await source.publish(aio_pika.Message(b"second"), routing_key="orders.new")
        first = await queue.get(no_ack=True, timeout=5)
        assert first is not None and first.body == b"first"
        assert await queue.get(no_ack=True, fail=False, timeout=5) is None
        # after the unbind nothing matches in the source, so the alternate exchange gets it
        second = await lost.get(no_ack=True, timeout=5)
        assert second is not None and second.body == b"second"
        await source.delete()
