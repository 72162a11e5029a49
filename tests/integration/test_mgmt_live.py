"""Connections, channels, consumers, definitions export/import and health checks through
the management API, over real HTTP, with pika clients on the other side."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pika
import pytest
from pika.exceptions import ConnectionClosedByBroker

from helpers import BrokerFactory
from mgmt_http import Api

pytestmark = pytest.mark.kanin_only

RABBITMQ_HASH_OF_PW = "n5U6vxv1VrsB+PLNNAeRsCIdERQFIGY/QqX0BWydyeUIKG89"


@pytest.fixture
def mgmt(broker_factory: BrokerFactory) -> Iterator[tuple[Any, Api]]:
    with broker_factory(mgmt_port=0) as embedded:
        yield embedded, Api(embedded.mgmt_url)


def _pika(embedded: Any, user: str = "guest", password: str = "guest") -> pika.BlockingConnection:
    params = pika.ConnectionParameters(
        embedded.host,
        embedded.port,
        credentials=pika.PlainCredentials(user, password),
        client_properties={"connection_name": "tested"},
    )
    return pika.BlockingConnection(params)


def test_connections_channels_and_consumers_are_listed(mgmt: tuple[Any, Api]) -> None:
    embedded, api = mgmt
    with _pika(embedded) as connection:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=7)
        channel.queue_declare("watched")
        channel.basic_consume("watched", lambda *args: None, consumer_tag="ctag")
        confirming = connection.channel()
        confirming.confirm_delivery()
        [shape] = api.get("/api/connections").json
        assert {
            "user": "guest",
            "vhost": "/",
            "protocol": "AMQP 0-9-1",
            "state": "running",
            "channels": 2,
            "user_provided_name": "tested",
            "port": embedded.port,
            "auth_mechanism": "PLAIN",
        }.items() <= shape.items()
        assert shape["client_properties"]["connection_name"] == "tested"
        name = shape["name"]
        assert api.get(f"/api/connections/{quote(name, safe='')}").json["name"] == name
        channels = api.get(f"/api/connections/{quote(name, safe='')}/channels").json
        assert [(c["number"], c["confirm"], c["consumer_count"]) for c in channels] == [
            (1, False, 1),
            (2, True, 0),
        ]
        assert channels[0]["name"] == f"{name} (1)"
        assert api.get("/api/channels").json == channels
        assert api.get(f"/api/channels/{quote(channels[1]['name'], safe='')}").json == channels[1]
        [consumer] = api.get("/api/consumers/%2F").json
        assert consumer["consumer_tag"] == "ctag"
        assert consumer["queue"] == {"name": "watched", "vhost": "/"}
        assert consumer["channel_details"]["name"] == channels[0]["name"]
        assert consumer["ack_required"] is True and consumer["prefetch_count"] == 7
        assert api.get("/api/queues/%2F/watched").json["consumers"] == 1
    assert api.get("/api/connections").json == []
    assert api.get("/api/connections/nosuch").status == 404


def test_deleting_a_connection_closes_it_with_320_and_the_given_reason(
    mgmt: tuple[Any, Api],
) -> None:
    embedded, api = mgmt
    connection = _pika(embedded)
    name = api.get("/api/connections").json[0]["name"]
    gone = api.delete(f"/api/connections/{quote(name, safe='')}", headers={"X-Reason": "bye"})
    assert gone.status == 204
    with pytest.raises(ConnectionClosedByBroker) as closed:
        connection.process_data_events(time_limit=2)
        connection.process_data_events(time_limit=2)
    assert (closed.value.reply_code, closed.value.reply_text) == (320, "CONNECTION_FORCED - bye")
    assert api.delete("/api/connections/nosuch").status == 404


def test_a_management_user_sees_only_its_own_connections(mgmt: tuple[Any, Api]) -> None:
    embedded, api = mgmt
    api.put("/api/users/erin", {"password": "pw", "tags": "management"})
    api.put("/api/permissions/%2F/erin", {"configure": ".*", "write": ".*", "read": ".*"})
    erin = api.as_user("erin", "pw")
    with _pika(embedded), _pika(embedded, "erin", "pw"):
        assert [c["user"] for c in erin.get("/api/connections").json] == ["erin"]
        assert sorted(c["user"] for c in api.get("/api/connections").json) == ["erin", "guest"]
        guests = [c["name"] for c in api.get("/api/connections").json if c["user"] == "guest"]
        assert erin.delete(f"/api/connections/{quote(guests[0], safe='')}").status == 404


def _topology(api: Api) -> None:
    api.put("/api/vhosts/shop")
    api.put("/api/users/frank", {"password_hash": RABBITMQ_HASH_OF_PW, "tags": "management"})
    api.put("/api/permissions/shop/frank", {"configure": ".*", "write": ".*", "read": ".*"})
    api.put("/api/exchanges/shop/orders", {"type": "topic", "durable": True})
    api.put("/api/queues/shop/paid", {"durable": True, "arguments": {"x-max-length": 5}})
    api.post("/api/bindings/shop/e/orders/q/paid", {"routing_key": "order.paid"})


def test_definitions_move_to_a_fresh_broker_and_its_users_log_in(
    mgmt: tuple[Any, Api], broker_factory: BrokerFactory
) -> None:
    _, api = mgmt
    _topology(api)
    exported = api.get("/api/definitions").json
    assert {"name": "shop"} in exported["vhosts"]
    assert {
        "name": "paid",
        "vhost": "shop",
        "durable": True,
        "auto_delete": False,
        "arguments": {"x-max-length": 5},
    } in exported["queues"]
    assert {
        "source": "orders",
        "vhost": "shop",
        "destination": "paid",
        "destination_type": "queue",
        "routing_key": "order.paid",
        "arguments": {},
    } in exported["bindings"]
    frank = next(user for user in exported["users"] if user["name"] == "frank")
    assert frank["password_hash"] == RABBITMQ_HASH_OF_PW
    with broker_factory(mgmt_port=0) as fresh:
        target = Api(fresh.mgmt_url)
        assert target.post("/api/definitions", exported).status == 204
        assert target.get("/api/definitions").json["queues"] == exported["queues"]
        params = pika.ConnectionParameters(
            fresh.host, fresh.port, "shop", pika.PlainCredentials("frank", "pw")
        )
        with pika.BlockingConnection(params) as connection:
            channel = connection.channel()
            channel.basic_publish("orders", "order.paid", b"$")
            assert channel.basic_get("paid", auto_ack=True)[2] == b"$"


def test_a_malformed_definitions_document_is_refused_whole(mgmt: tuple[Any, Api]) -> None:
    embedded, api = mgmt
    _topology(api)
    before = api.get("/api/definitions").json
    document = copy.deepcopy(before)
    document["vhosts"].append({"name": "new-vhost"})
    document["queues"].append(
        {
            "name": "fresh",
            "vhost": "new-vhost",
            "durable": True,
            "auto_delete": False,
            "arguments": {},
        }
    )
    document["queues"].append({"name": "broken", "vhost": "shop"})  # checked before anything
    refused = api.post("/api/definitions", document)
    assert refused.status == 400
    assert refused.json["reason"].startswith("queues[2] ('broken' in vhost 'shop'): ")
    # A step the broker itself refuses (an argument it rejects) undoes the ones before it.
    document["queues"][-1] = {
        "name": "bad-arg",
        "vhost": "shop",
        "durable": True,
        "auto_delete": False,
        "arguments": {"x-max-length": "many"},
    }
    document["exchanges"].append(
        {
            "name": "late",
            "vhost": "shop",
            "type": "fanout",
            "durable": True,
            "auto_delete": False,
            "internal": False,
            "arguments": {},
        }
    )
    document["users"].append({"name": "gina", "password_hash": RABBITMQ_HASH_OF_PW, "tags": ""})
    refused = api.post("/api/definitions", document)
    assert refused.status == 400
    assert refused.json["reason"].startswith("queues[2] ('bad-arg' in vhost 'shop'): ")
    assert "x-max-length" in refused.json["reason"]
    assert api.get("/api/definitions").json == before
    assert embedded.call(lambda: "new-vhost" in embedded.server.broker.vhosts) is False
    assert api.post("/api/definitions", b"{nope").json == {
        "error": "bad_request",
        "reason": "failed_to_parse_json",
    }
    assert api.post("/api/definitions", []).status == 400
    missing_vhost = {
        "queues": [
            {
                "name": "x",
                "vhost": "nowhere",
                "durable": True,
                "auto_delete": False,
                "arguments": {},
            }
        ]
    }
    assert "no vhost 'nowhere'" in api.post("/api/definitions", missing_vhost).json["reason"]


def test_health_checks_and_the_aliveness_test(mgmt: tuple[Any, Api]) -> None:
    embedded, api = mgmt
    assert api.get("/api/aliveness-test/%2F").json == {"status": "ok"}
    assert api.get("/api/aliveness-test/nowhere").status == 404
    assert api.get("/api/health/checks/virtual-hosts").json == {"status": "ok"}
    assert api.get("/api/health/checks/alarms").json == {"status": "ok"}
    alarms = embedded.server.broker.alarms
    embedded.call(lambda: alarms.set("disk", True))
    try:
        failed = api.get("/api/health/checks/alarms")
        assert failed.status == 503
        assert failed.json["alarms"] == [
            {"node": failed.json["alarms"][0]["node"], "resource": "disk"}
        ]
        assert api.get("/api/nodes").json[0]["disk_free_alarm"] is True
    finally:
        embedded.call(lambda: alarms.set("disk", False))
