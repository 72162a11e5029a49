"""Users, vhosts and per-vhost configure/write/read permissions (SPEC §1), as RabbitMQ.

The user store is configured at start (there is no management API yet), so these tests
are kanin_only; the reply texts were checked against RabbitMQ 3.10 with the same users
and permissions set up by rabbitmqctl (it does not name which permission was missing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ProbableAccessDeniedError

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
        with pytest.raises(ChannelClosedByBroker) as info:
            action(connection.channel())
        return info.value.reply_code, info.value.reply_text
    finally:
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
