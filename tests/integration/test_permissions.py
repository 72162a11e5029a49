"""Users, vhosts and per-vhost configure/write/read permissions, as RabbitMQ.

The user store is configured at start (there is no management API yet), so these tests
are kanin_only; the reply texts were checked against RabbitMQ 3.10 with the same users
and permissions set up by rabbitmqctl (it does not name which permission was missing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest
from pika.exceptions import (
    ChannelClosedByBroker,
    ConnectionClosedByBroker,
    ProbableAccessDeniedError,
)

from helpers import BrokerFactory
from kanin.config import PermissionSpec, UserSpec

pytestmark = pytest.mark.kanin_only

USERS = (
    UserSpec("guest", "guest"),
    UserSpec(
        "limited",
        "pw",
        tags=(),
        permissions=(PermissionSpec("/", configure="^lim-", write="^lim-", read="^lim-"),),
    ),
    UserSpec("reader", "pw", tags=(), permissions=(PermissionSpec("/", "", "", ".*"),)),
    UserSpec("other", "pw", tags=(), permissions=(PermissionSpec("/other"),)),
    UserSpec("noread", "pw", tags=(), permissions=(PermissionSpec("/", ".*", ".*", ""),)),
    # Not anchored: RabbitMQ searches for the pattern anywhere in the name.
    UserSpec("infix", "pw", tags=(), permissions=(PermissionSpec("/", "lim", "lim", "lim"),)),
)


@pytest.fixture
def server(broker_factory: BrokerFactory) -> Iterator[Any]:
    with broker_factory(default_users=USERS, vhosts=("/other",)) as broker:
        yield broker


def connect(server: Any, user: str, vhost: str = "/") -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1",
            server.port,
            vhost,
            pika.PlainCredentials(user, "pw" if user != "guest" else "guest"),
        )
    )


def refusal(server: Any, user: str, action: Callable[[Any], object]) -> tuple[int, str]:
    connection = connect(server, user)
    try:
        with pytest.raises((ChannelClosedByBroker, ConnectionClosedByBroker)) as info:
            action(connection.channel())
        return info.value.reply_code, info.value.reply_text
    finally:
        if connection.is_open:
            connection.close()


def test_configure_permission_governs_declare(server: Any) -> None:
    connection = connect(server, "limited")
    assert connection.channel().queue_declare("lim-ok").method.queue == "lim-ok"
    connection.close()
    assert refusal(server, "limited", lambda ch: ch.queue_declare("other-q")) == (
        403,
        "ACCESS_REFUSED - access to queue 'other-q' in vhost '/' refused for user 'limited'",
    )
    assert refusal(server, "limited", lambda ch: ch.exchange_declare("other-x", "fanout")) == (
        403,
        "ACCESS_REFUSED - access to exchange 'other-x' in vhost '/' refused for user 'limited'",
    )


def test_write_permission_governs_publish(server: Any) -> None:
    def publish(channel: Any) -> None:
        channel.confirm_delivery()
        channel.basic_publish("amq.direct", "k", b"x")

    assert refusal(server, "limited", publish) == (
        403,
        "ACCESS_REFUSED - access to exchange 'amq.direct' in vhost '/' refused for user 'limited'",
    )


def test_read_permission_governs_get_and_consume(server: Any) -> None:
    admin = connect(server, "guest")
    admin.channel().queue_declare("private")
    admin.close()
    assert refusal(server, "limited", lambda ch: ch.basic_get("private")) == (
        403,
        "ACCESS_REFUSED - access to queue 'private' in vhost '/' refused for user 'limited'",
    )
    assert refusal(server, "limited", lambda ch: ch.basic_consume("private", lambda *a: None)) == (
        403,
        "ACCESS_REFUSED - access to queue 'private' in vhost '/' refused for user 'limited'",
    )
    # A read-only user may get but not declare.
    reader = connect(server, "reader")
    assert reader.channel().basic_get("private") == (None, None, None)
    reader.close()
    assert refusal(server, "reader", lambda ch: ch.queue_declare("mine"))[0] == 403


def test_binding_needs_write_on_queue_and_read_on_exchange(server: Any) -> None:
    connection = connect(server, "limited")
    connection.channel().queue_declare("lim-bound")
    connection.close()
    assert refusal(server, "limited", lambda ch: ch.queue_bind("lim-bound", "amq.fanout")) == (
        403,
        "ACCESS_REFUSED - access to exchange 'amq.fanout' in vhost '/' refused for user 'limited'",
    )


def test_vhost_without_permission_is_530(server: Any) -> None:
    with pytest.raises(ProbableAccessDeniedError) as info:
        connect(server, "limited", "/other")
    assert "NOT_ALLOWED - access to vhost '/other' refused for user 'limited'" in str(info.value)
    # The user with permissions there gets in, and the vhost is a separate namespace.
    other = connect(server, "other", "/other")
    channel = other.channel()
    channel.queue_declare("lim-ok")
    channel.basic_publish("", "lim-ok", b"in other")
    other.close()
    default = connect(server, "limited")
    declared = default.channel().queue_declare("lim-ok")
    assert declared.method.message_count == 0
    default.close()


def refused(user: str, resource: str, name: str) -> tuple[int, str]:
    return (
        403,
        f"ACCESS_REFUSED - access to {resource} '{name}' in vhost '/' refused for user '{user}'",
    )


def test_dead_letter_exchange_needs_write_on_it(server: Any) -> None:
    # Dead-lettering publishes to the DLX: declaring it needs write there (and read on
    # the queue), else a user could have messages sent to any exchange at all.
    admin = connect(server, "guest")
    admin.channel().exchange_declare("guarded", "fanout")
    admin.close()
    dlx = {"x-dead-letter-exchange": "guarded"}
    assert refusal(
        server, "limited", lambda ch: ch.queue_declare("lim-dl", arguments=dlx)
    ) == refused("limited", "exchange", "guarded")
    # A missing DLX is checked the same way, and the default exchange as amq.default.
    assert refusal(
        server,
        "limited",
        lambda ch: ch.queue_declare("lim-dl", arguments={**dlx, "x-dead-letter-exchange": "nope"}),
    ) == refused("limited", "exchange", "nope")
    assert refusal(
        server,
        "limited",
        lambda ch: ch.queue_declare("lim-dl", arguments={"x-dead-letter-exchange": ""}),
    ) == refused("limited", "exchange", "amq.default")
    # Read on the queue is checked first, and before the other arguments are validated.
    assert refusal(
        server,
        "noread",
        lambda ch: ch.queue_declare("nr-dl", arguments={**dlx, "x-message-ttl": "x"}),
    ) == refused("noread", "queue", "nr-dl")
    connection = connect(server, "limited")
    channel = connection.channel()
    assert channel.queue_declare("lim-dl", arguments={"x-dead-letter-exchange": "lim-x"})
    connection.close()


def test_alternate_exchange_needs_write_on_it(server: Any) -> None:
    ae = {"alternate-exchange": "guarded"}
    assert refusal(
        server, "limited", lambda ch: ch.exchange_declare("lim-x", "fanout", arguments=ae)
    ) == refused("limited", "exchange", "guarded")
    assert refusal(
        server, "noread", lambda ch: ch.exchange_declare("nr-x", "fanout", arguments=ae)
    ) == refused("noread", "exchange", "nr-x")
    connection = connect(server, "limited")
    channel = connection.channel()
    channel.exchange_declare("lim-x", "fanout", arguments={"alternate-exchange": "lim-ae"})
    # Redeclaring an existing exchange checks only configure, as in RabbitMQ.
    channel.exchange_declare("lim-x", "fanout", arguments={"alternate-exchange": "lim-ae"})
    connection.close()


def test_no_message_reaches_a_foreign_exchange(server: Any) -> None:
    """The attack itself: a user with rights only on lim-* tries both ways to get a
    message into another user's exchange, and nothing arrives there."""
    admin = connect(server, "guest")
    admin_channel = admin.channel()
    admin_channel.exchange_declare("victim", "fanout")
    admin_channel.queue_declare("victim-q")
    admin_channel.queue_bind("victim-q", "victim")

    def via_dead_letter(channel: Any) -> None:
        channel.queue_declare(
            "lim-trap", arguments={"x-dead-letter-exchange": "victim", "x-message-ttl": 0}
        )
        channel.basic_publish("", "lim-trap", b"sneaked")

    def via_alternate(channel: Any) -> None:
        channel.exchange_declare("lim-ae-x", "direct", arguments={"alternate-exchange": "victim"})
        channel.basic_publish("lim-ae-x", "unroutable", b"sneaked")

    for attempt in (via_dead_letter, via_alternate):
        assert refusal(server, "limited", attempt)[0] == 403
    assert admin_channel.queue_declare("victim-q", passive=True).method.message_count == 0
    admin.close()


def test_patterns_are_not_anchored(server: Any) -> None:
    connection = connect(server, "infix")
    assert connection.channel().queue_declare("a-lim-b").method.queue == "a-lim-b"
    connection.close()
    assert refusal(server, "infix", lambda ch: ch.queue_declare("other")) == refused(
        "infix", "queue", "other"
    )


def test_empty_pattern_grants_nothing(server: Any) -> None:
    # Server-named queues are checked under their new name, the default exchange as
    # amq.default: an empty pattern (RabbitMQ's ^$) matches neither.
    code, text = refusal(server, "reader", lambda ch: ch.queue_declare(""))
    assert code == 403
    assert text.startswith("ACCESS_REFUSED - access to queue 'amq.gen-")

    def publish(channel: Any) -> None:
        channel.confirm_delivery()
        channel.basic_publish("", "private", b"x")

    assert refusal(server, "reader", publish) == refused("reader", "exchange", "amq.default")


def test_permission_is_checked_before_existence(server: Any) -> None:
    """RabbitMQ checks the permission before looking the resource up: 403, not 404,
    so a refused user cannot probe for names either."""
    actions: list[Callable[[Any], object]] = [
        lambda ch: ch.queue_purge("missing"),
        lambda ch: ch.queue_delete("missing"),
        lambda ch: ch.basic_get("missing"),
        lambda ch: ch.basic_consume("missing", lambda *a: None),
    ]
    for action in actions:
        assert refusal(server, "limited", action) == refused("limited", "queue", "missing")

    def publish(channel: Any) -> None:
        channel.confirm_delivery()
        channel.basic_publish("missing", "k", b"x")

    assert refusal(server, "limited", publish) == refused("limited", "exchange", "missing")


def test_other_refusals_come_before_the_permission_check(server: Any) -> None:
    assert refusal(server, "limited", lambda ch: ch.exchange_declare("x", "no-such-type")) == (
        503,
        "COMMAND_INVALID - unknown exchange type 'no-such-type'",
    )
    assert refusal(server, "limited", lambda ch: ch.queue_declare("amq.q")) == (
        403,
        "ACCESS_REFUSED - queue name 'amq.q' contains reserved prefix 'amq.*'",
    )
    assert refusal(server, "limited", lambda ch: ch.exchange_delete("amq.direct")) == (
        403,
        "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed",
    )
    default = (403, "ACCESS_REFUSED - operation not permitted on the default exchange")
    assert refusal(server, "limited", lambda ch: ch.queue_bind("lim-q", "")) == default
