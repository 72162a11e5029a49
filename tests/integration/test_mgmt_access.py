"""The management API's overview, auth and tags, vhosts, users and permissions, over real
HTTP against a broker with the API on a free port; status codes and bodies as RabbitMQ
3.10's management plugin answers them (checked with tools/mgmt_compare.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest
from pika.exceptions import ConnectionClosedByBroker

from helpers import BrokerFactory
from mgmt_http import Api, q

pytestmark = pytest.mark.kanin_only

# Made by RabbitMQ 3.10.8 on PUT /api/users/... {"password": "pw"}: a hash moves as it is.
RABBITMQ_HASH_OF_PW = "n5U6vxv1VrsB+PLNNAeRsCIdERQFIGY/QqX0BWydyeUIKG89"
UNAUTHORISED = {"WWW-Authenticate": 'Basic realm="RabbitMQ Management"'}


@pytest.fixture
def mgmt(broker_factory: BrokerFactory) -> Iterator[tuple[Any, Api]]:
    with broker_factory(mgmt_port=0) as embedded:
        yield embedded, Api(embedded.mgmt_url)


def _user(api: Api, name: str, tags: str, vhost: str | None = "/") -> Api:
    assert api.put(f"/api/users/{name}", {"password": "pw", "tags": tags}).status == 201
    if vhost is not None:
        grant = {"configure": ".*", "write": ".*", "read": ".*"}
        assert api.put(f"/api/permissions/{q(vhost)}/{name}", grant).status == 201
    return api.as_user(name, "pw")


def test_overview_counts_what_the_broker_holds(mgmt: tuple[Any, Api]) -> None:
    embedded, api = mgmt
    with pika.BlockingConnection(pika.ConnectionParameters(embedded.host, embedded.port)) as c:
        channel = c.channel()
        channel.queue_declare("counted")
        channel.basic_publish("", "counted", b"x")
        channel.basic_publish("", "counted", b"y")
        channel.basic_get("counted")  # one unacked
        overview = api.get("/api/overview").json
        assert overview["object_totals"] == {
            "connections": 1,
            "channels": 1,
            "consumers": 0,
            "exchanges": 6,
            "queues": 1,
        }
        assert {
            "messages": 2,
            "messages_ready": 1,
            "messages_unacknowledged": 1,
        }.items() <= overview["queue_totals"].items()
    assert overview["rabbitmq_version"] == "3.10.8"
    assert overview["kanin_version"]
    assert overview["rates_mode"] == "basic"
    assert {"protocol": "amqp", "port": embedded.port}.items() <= overview["listeners"][0].items()
    node = api.get("/api/nodes").json[0]
    assert node["name"] == overview["node"] and node["running"] is True
    assert api.get(f"/api/nodes/{q(node['name'])}").json["name"] == node["name"]


def test_credentials_are_checked_and_401_says_how_to_authenticate(mgmt: tuple[Any, Api]) -> None:
    _, api = mgmt
    anonymous = api.request("GET", "/api/overview", auth=False)
    assert anonymous.status == 401
    assert UNAUTHORISED.items() <= anonymous.headers.items()
    wrong = api.as_user("guest", "nope").get("/api/overview")
    assert (wrong.status, wrong.json) == (
        401,
        {"error": "not_authorized", "reason": "Login failed"},
    )
    assert UNAUTHORISED.items() <= wrong.headers.items()
    assert api.as_user("nobody", "pw").get("/api/whoami").status == 401


def test_tags_limit_what_a_user_may_do(mgmt: tuple[Any, Api]) -> None:
    _, api = mgmt
    assert api.put("/api/vhosts/other").status == 201
    untagged = _user(api, "plain", "")
    assert untagged.get("/api/overview").json == {
        "error": "not_authorised",
        "reason": "Not management user",
    }
    manager = _user(api, "manager", "management")
    assert manager.get("/api/whoami").json == {"name": "manager", "tags": ["management"]}
    assert manager.get("/api/users").json["reason"] == "Not administrator user"
    assert manager.get("/api/nodes").status == 401
    assert [v["name"] for v in manager.get("/api/vhosts").json] == ["/"]
    refused = manager.get("/api/queues/other")
    assert (refused.status, refused.json["reason"]) == (
        401,
        "User not authorised to access virtual host",
    )
    assert manager.put("/api/vhosts/mine").status == 401
    monitor = _user(api, "watcher", "monitoring", vhost=None)
    assert sorted(v["name"] for v in monitor.get("/api/vhosts").json) == ["/", "other"]
    assert monitor.get("/api/queues/other").status == 200
    assert monitor.get("/api/nodes").status == 200
    assert monitor.put("/api/queues/other/q").status == 401  # reading is not changing
    assert monitor.get("/api/definitions").status == 401


def test_vhosts_are_created_once_and_deleting_one_closes_its_connections(
    mgmt: tuple[Any, Api],
) -> None:
    embedded, api = mgmt
    assert api.put("/api/vhosts/v1").status == 201
    assert api.put("/api/vhosts/v1").status == 204
    shape = api.get("/api/vhosts/v1").json
    assert shape["name"] == "v1" and shape["messages"] == 0
    # The creator may use it at once, as on RabbitMQ.
    assert api.get("/api/permissions/v1/guest").json["configure"] == ".*"
    params = pika.ConnectionParameters(embedded.host, embedded.port, "v1")
    connection = pika.BlockingConnection(params)
    connection.channel().queue_declare("in-v1", durable=True)
    assert api.delete("/api/vhosts/v1").status == 204
    with pytest.raises(ConnectionClosedByBroker) as closed:
        connection.process_data_events(time_limit=2)
        connection.process_data_events(time_limit=2)
    assert closed.value.reply_code == 320
    assert "vhost 'v1' is deleted" in closed.value.reply_text
    assert api.get("/api/vhosts/v1").status == 404
    assert api.delete("/api/vhosts/v1").json == {"error": "Object Not Found", "reason": "Not Found"}
    assert embedded.call(lambda: "v1" in embedded.server.broker.vhosts) is False


def test_a_user_made_with_a_rabbitmq_hash_logs_in_over_amqp(mgmt: tuple[Any, Api]) -> None:
    embedded, api = mgmt
    body = {
        "password_hash": RABBITMQ_HASH_OF_PW,
        "hashing_algorithm": "rabbit_password_hashing_sha256",
        "tags": "monitoring,management",
    }
    assert api.put("/api/users/carol", body).status == 201
    shown = api.get("/api/users/carol").json
    assert shown == {
        "name": "carol",
        "password_hash": RABBITMQ_HASH_OF_PW,
        "hashing_algorithm": "rabbit_password_hashing_sha256",
        "tags": ["monitoring", "management"],
        "limits": {},
    }
    grant = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api.put("/api/permissions/%2F/carol", grant).status == 201
    credentials = pika.PlainCredentials("carol", "pw")
    params = pika.ConnectionParameters(embedded.host, embedded.port, credentials=credentials)
    with pika.BlockingConnection(params) as connection:
        assert connection.is_open
    assert api.as_user("carol", "pw").get("/api/whoami").status == 200
    # A changed password replaces the hash; PUT on an existing user is 204.
    assert api.put("/api/users/carol", {"password": "new", "tags": ["management"]}).status == 204
    assert api.as_user("carol", "pw").get("/api/whoami").status == 401
    assert api.as_user("carol", "new").get("/api/whoami").json["tags"] == ["management"]


def test_bad_user_bodies_are_400_and_deleting_is_204_then_404(mgmt: tuple[Any, Api]) -> None:
    _, api = mgmt
    assert api.request("PUT", "/api/users/x", b"{nope").json == {
        "error": "bad_request",
        "reason": "not_json",
    }
    assert api.put("/api/users/x", {"password_hash": "abc"}).status == 400
    sha512 = {
        "password_hash": RABBITMQ_HASH_OF_PW,
        "hashing_algorithm": "rabbit_password_hashing_sha512",
    }
    assert "unsupported hashing_algorithm" in api.put("/api/users/x", sha512).json["reason"]
    assert api.get("/api/users/x").status == 404
    assert api.put("/api/users/x", {"password": "pw", "tags": ""}).status == 201
    assert api.delete("/api/users/x").status == 204
    assert api.delete("/api/users/x").status == 404


def test_permissions_are_set_shown_listed_and_cleared(mgmt: tuple[Any, Api]) -> None:
    _, api = mgmt
    assert api.put("/api/users/dave", {"password": "pw", "tags": ""}).status == 201
    grant = {"configure": "^d", "write": ".*", "read": ".*"}
    assert api.put("/api/permissions/%2F/dave", grant).status == 201
    assert api.put("/api/permissions/%2F/dave", grant).status == 204
    shown = api.get("/api/permissions/%2F/dave").json
    assert shown == {"user": "dave", "vhost": "/", **grant}
    assert shown in api.get("/api/permissions").json
    assert api.get("/api/users/dave/permissions").json == [shown]
    assert {"vhost": "/", **shown} in api.get("/api/vhosts/%2F/permissions").json
    missing = api.put("/api/permissions/nowhere/dave", grant)
    assert (missing.status, missing.json["reason"]) == (400, "vhost_or_user_not_found")
    assert api.put("/api/permissions/%2F/dave", {**grant, "configure": "("}).status == 400
    assert api.put("/api/permissions/%2F/dave", {"write": ".*", "read": ".*"}).status == 400
    assert api.delete("/api/permissions/%2F/dave").status == 204
    assert api.get("/api/permissions/%2F/dave").status == 404
    assert api.delete("/api/permissions/%2F/dave").status == 404
