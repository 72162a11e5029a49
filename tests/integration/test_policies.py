"""Policies over the management API on a real broker, and what a pika client then sees:
TTLs, length limits and dead-lettering set by policy act on queues old and new, the
highest priority wins, and clearing a policy gives a queue back its own arguments."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

from helpers import BrokerFactory, drain, wait_for
from mgmt_http import Api

pytestmark = pytest.mark.kanin_only


@pytest.fixture
def mgmt(broker_factory: BrokerFactory) -> Iterator[tuple[Any, Api]]:
    with broker_factory(mgmt_port=0) as embedded:
        yield embedded, Api(embedded.mgmt_url)


@pytest.fixture
def amqp(mgmt: tuple[Any, Api]) -> Iterator[tuple[BlockingConnection, BlockingChannel, Api]]:
    embedded, api = mgmt
    params = pika.ConnectionParameters(embedded.host, embedded.port, connection_attempts=1)
    connection = pika.BlockingConnection(params)
    yield connection, connection.channel(), api
    connection.close()


def put_policy(api: Api, name: str, pattern: str, definition: dict[str, Any], **more: Any) -> int:
    body = {"pattern": pattern, "definition": definition, **more}
    return api.put(f"/api/policies/%2F/{name}", body).status


def count(channel: BlockingChannel, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def publish(channel: BlockingChannel, queue: str, *bodies: bytes) -> None:
    for body in bodies:
        channel.basic_publish("", queue, body)


# -- the API -------------------------------------------------------------------------------


def test_policies_are_set_read_listed_and_cleared(mgmt: tuple[Any, Api]) -> None:
    _, api = mgmt
    assert put_policy(api, "ttl", "^q", {"message-ttl": 1000}, **{"apply-to": "queues"}) == 201
    assert put_policy(api, "ttl", "^q", {"message-ttl": 2000}, **{"apply-to": "queues"}) == 204
    shape = {
        "vhost": "/",
        "name": "ttl",
        "pattern": "^q",
        "apply-to": "queues",
        "definition": {"message-ttl": 2000},
        "priority": 0,
    }
    assert api.get("/api/policies/%2F/ttl").json == shape
    assert api.get("/api/policies").json == [shape]
    assert api.get("/api/policies/%2F").json == [shape]
    assert api.delete("/api/policies/%2F/ttl").status == 204
    assert api.get("/api/policies/%2F/ttl").status == 404
    assert api.delete("/api/policies/%2F/ttl").status == 404
    assert api.get("/api/policies").json == []


def test_bad_policies_are_refused_as_rabbitmq_refuses_them(mgmt: tuple[Any, Api]) -> None:
    _, api = mgmt
    cases = [
        ({"pattern": "(", "definition": {"message-ttl": 1}}, "pattern should be regular"),
        (
            {"pattern": "q", "definition": {"message-ttl": 1}, "apply-to": "quorum_queues"},
            "apply-to 'quorum_queues' unrecognised",
        ),
        ({"pattern": "q", "definition": {"message-ttl": "abc"}}, "is not a valid message TTL"),
        ({"pattern": "q", "definition": {"nonsense": 1}}, "are not recognised policy settings"),
        ({"pattern": "q"}, "[{key_missing,definition}]"),
    ]
    for body, reason in cases:
        reply = api.put("/api/policies/%2F/bad", body)
        assert reply.status == 400, body
        assert reply.json["error"] == "bad_request"
        assert reason in reply.json["reason"]
    assert api.get("/api/policies").json == []
    missing_vhost = api.put("/api/policies/nowhere/p", {"pattern": "q", "definition": {}})
    assert (missing_vhost.status, missing_vhost.json["reason"]) == (404, "vhost_not_found")
    assert api.get("/api/policies/nowhere").status == 404


def test_queues_and_exchanges_show_their_policy(mgmt: tuple[Any, Api]) -> None:
    _, api = mgmt
    assert api.put("/api/queues/%2F/q1", {"arguments": {"x-message-ttl": 5000}}).status == 201
    assert api.put("/api/exchanges/%2F/e1", {"type": "fanout"}).status == 201
    assert put_policy(api, "limits", "1$", {"message-ttl": 100, "alternate-exchange": "ae"}) == 201
    queue = api.get("/api/queues/%2F/q1").json
    assert queue["policy"] == "limits"
    # the policy's definition as it is, and the queue's arguments as declared
    assert queue["effective_policy_definition"] == {"message-ttl": 100, "alternate-exchange": "ae"}
    assert queue["arguments"] == {"x-message-ttl": 5000}
    assert api.get("/api/exchanges/%2F/e1").json["policy"] == "limits"
    api.delete("/api/policies/%2F/limits")
    queue = api.get("/api/queues/%2F/q1").json
    assert (queue["policy"], queue["effective_policy_definition"]) == (None, {})
    assert "policy" not in api.get("/api/exchanges/%2F/e1").json


def test_policymakers_manage_policies_where_they_have_permissions(mgmt: tuple[Any, Api]) -> None:
    _, api = mgmt
    for name, tags in (
        ("maker", "policymaker"),
        ("watcher", "management"),
        ("idle", "policymaker"),
    ):
        assert api.put(f"/api/users/{name}", {"password": "pw", "tags": tags}).status == 201
    for name in ("maker", "watcher"):
        grant = {"configure": ".*", "write": ".*", "read": ".*"}
        assert api.put(f"/api/permissions/%2F/{name}", grant).status == 201
    body = {"pattern": "^x", "definition": {"max-length": 1}}
    maker = api.as_user("maker", "pw")
    assert maker.put("/api/policies/%2F/mine", body).status == 201
    assert maker.get("/api/policies/%2F/mine").status == 200
    for other in (api.as_user("watcher", "pw"), api.as_user("idle", "pw")):
        refused = other.put("/api/policies/%2F/theirs", body)
        assert (refused.status, refused.json["reason"]) == (
            401,
            "User not authorised to access object",
        )
        assert other.delete("/api/policies/%2F/mine").status == 401
    # any management user lists the policies of its own vhosts
    assert [p["name"] for p in api.as_user("watcher", "pw").get("/api/policies").json] == ["mine"]
    assert api.as_user("idle", "pw").get("/api/policies").json == []
    assert api.as_user("idle", "pw").get("/api/policies/%2F").status == 401
    assert maker.delete("/api/policies/%2F/mine").status == 204


# -- what the policies do ------------------------------------------------------------------


def test_a_message_ttl_policy_expires_messages(
    amqp: tuple[BlockingConnection, BlockingChannel, Api],
) -> None:
    connection, channel, api = amqp
    channel.queue_declare("short")
    assert put_policy(api, "ttl", "^short$", {"message-ttl": 50}) == 201
    publish(channel, "short", b"gone")
    wait_for(connection, lambda: count(channel, "short") == 0, message="not expired")


def test_a_max_length_policy_drops_the_head_at_once_and_after(
    amqp: tuple[BlockingConnection, BlockingChannel, Api],
) -> None:
    _, channel, api = amqp
    channel.queue_declare("deep")
    publish(channel, "deep", *(b"%d" % n for n in range(10)))
    assert count(channel, "deep") == 10
    assert put_policy(api, "cap", "^deep$", {"max-length": 3}) == 201
    assert count(channel, "deep") == 3  # dropped when the policy was set, as on RabbitMQ
    publish(channel, "deep", b"10")
    assert drain(channel, "deep") == [b"8", b"9", b"10"]


def test_the_lower_of_argument_and_policy_limits_wins(
    amqp: tuple[BlockingConnection, BlockingChannel, Api],
) -> None:
    _, channel, api = amqp
    channel.queue_declare("tight", arguments={"x-max-length": 2})
    channel.queue_declare("loose", arguments={"x-max-length": 50})
    assert put_policy(api, "cap", "^(tight|loose)$", {"max-length": 4}) == 201
    for queue in ("tight", "loose"):
        publish(channel, queue, *(b"%d" % n for n in range(6)))
    assert (count(channel, "tight"), count(channel, "loose")) == (2, 4)


def test_a_dead_letter_policy_routes_dead_letters_and_the_argument_wins(
    amqp: tuple[BlockingConnection, BlockingChannel, Api],
) -> None:
    connection, channel, api = amqp
    for exchange in ("dlx-policy", "dlx-own"):
        channel.exchange_declare(exchange, "fanout")
        channel.queue_declare(exchange + "-q")
        channel.queue_bind(exchange + "-q", exchange)
    channel.queue_declare("plain")
    channel.queue_declare("own", arguments={"x-dead-letter-exchange": "dlx-own"})
    assert put_policy(api, "dlx", "^(plain|own)$", {"dead-letter-exchange": "dlx-policy"}) == 201
    for queue in ("plain", "own"):
        publish(channel, queue, queue.encode())
        method, _, _ = channel.basic_get(queue)
        assert method is not None
        channel.basic_reject(method.delivery_tag, requeue=False)
    wait_for(connection, lambda: count(channel, "dlx-own-q") == 1)
    assert drain(channel, "dlx-policy-q") == [b"plain"]
    assert drain(channel, "dlx-own-q") == [b"own"]


def test_the_highest_priority_applies_and_clearing_restores_the_queue(
    amqp: tuple[BlockingConnection, BlockingChannel, Api],
) -> None:
    _, channel, api = amqp
    assert put_policy(api, "low", "^work", {"max-length": 5}, priority=1) == 201
    assert put_policy(api, "high", "^work$", {"max-length": 2}, priority=7) == 201
    channel.queue_declare("work")  # declared after: policies apply to new queues too
    assert api.get("/api/queues/%2F/work").json["policy"] == "high"
    publish(channel, "work", *(b"%d" % n for n in range(4)))
    assert count(channel, "work") == 2
    assert api.delete("/api/policies/%2F/high").status == 204
    publish(channel, "work", *(b"%d" % n for n in range(4)))
    assert count(channel, "work") == 5  # "low" applies now
    assert api.delete("/api/policies/%2F/low").status == 204
    publish(channel, "work", *(b"%d" % n for n in range(4)))
    assert count(channel, "work") == 9  # no limit at all


def test_an_alternate_exchange_policy_takes_unroutable_messages(
    amqp: tuple[BlockingConnection, BlockingChannel, Api],
) -> None:
    _, channel, api = amqp
    channel.exchange_declare("ae", "fanout")
    channel.queue_declare("unrouted")
    channel.queue_bind("unrouted", "ae")
    channel.exchange_declare("orders", "direct")
    assert (
        put_policy(api, "ae", "^orders$", {"alternate-exchange": "ae"}, **{"apply-to": "exchanges"})
        == 201
    )
    channel.basic_publish("orders", "nobody", b"lost")
    assert drain(channel, "unrouted") == [b"lost"]


def test_a_quorum_queue_takes_the_lower_delivery_limit(
    amqp: tuple[BlockingConnection, BlockingChannel, Api],
) -> None:
    _, channel, api = amqp
    arguments = {"x-queue-type": "quorum", "x-delivery-limit": 5}
    channel.queue_declare("qq", durable=True, arguments=arguments)
    assert put_policy(api, "limit", "^qq$", {"delivery-limit": 1}) == 201
    publish(channel, "qq", b"poison")
    deliveries = 0
    while (method := channel.basic_get("qq")[0]) is not None:
        deliveries += 1
        channel.basic_nack(method.delivery_tag, requeue=True)
    assert deliveries == 2  # one return allowed, as RabbitMQ 3.10 counts it


def test_an_expires_policy_deletes_an_unused_queue(
    amqp: tuple[BlockingConnection, BlockingChannel, Api],
) -> None:
    connection, channel, api = amqp
    channel.queue_declare("idle")
    channel.queue_declare("busy")
    assert put_policy(api, "expiry", "^idle$", {"expires": 100}) == 201

    def idle_is_gone() -> bool:
        return api.get("/api/queues/%2F/idle").status == 404

    wait_for(connection, idle_is_gone, message="the idle queue was not deleted")
    assert api.get("/api/queues/%2F/busy").status == 200  # the pattern did not match it


def test_queued_messages_keep_the_ttl_they_were_given(
    amqp: tuple[BlockingConnection, BlockingChannel, Api],
) -> None:
    """As on RabbitMQ: a TTL policy set later acts on messages published after it."""
    connection, channel, api = amqp
    channel.queue_declare("older")
    channel.queue_declare("clock")
    publish(channel, "older", b"before")
    assert put_policy(api, "ttl", "^(older|clock)$", {"message-ttl": 50}) == 201
    publish(channel, "older", b"after")
    publish(channel, "clock", b"tick")  # once it has expired, so has "after"
    wait_for(connection, lambda: count(channel, "clock") == 0, message="'tick' did not expire")
    assert drain(channel, "older") == [b"before"]
