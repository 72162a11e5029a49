"""Exchanges, queues, bindings, publish and get through the management API, over real
HTTP, and what a pika client then sees: the API declares through the broker's own paths,
so its objects are AMQP's (same refusals, same durability)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from helpers import BrokerFactory
from kanin.config import BrokerConfig
from kanin.testing.embedded import running_broker
from mgmt_http import Api

pytestmark = pytest.mark.kanin_only


@pytest.fixture
def mgmt(broker_factory: BrokerFactory) -> Iterator[tuple[Any, Api]]:
    with broker_factory(mgmt_port=0) as embedded:
        yield embedded, Api(embedded.mgmt_url)


def _pika(embedded: Any) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(embedded.host, embedded.port))


def test_a_queue_declared_through_the_api_is_used_by_pika(mgmt: tuple[Any, Api]) -> None:
    embedded, api = mgmt
    # rabbitmqadmin sends booleans as strings
    body = {"durable": "true", "auto_delete": "false", "arguments": {"x-max-length": 2}}
    assert api.put("/api/queues/%2F/work", body).status == 201
    assert api.put("/api/queues/%2F/work", body).status == 204
    with _pika(embedded) as connection:
        channel = connection.channel()
        declared = channel.queue_declare("work", passive=True)
        assert declared.method.message_count == 0
        for body_ in (b"1", b"2", b"3"):
            channel.basic_publish("", "work", body_)
        channel.basic_get("work")  # "2": x-max-length dropped the head
        shape = api.get("/api/queues/%2F/work").json
    assert shape["type"] == "classic" and shape["durable"] is True
    assert shape["arguments"] == {"x-max-length": 2}
    assert (shape["messages"], shape["messages_ready"], shape["messages_unacknowledged"]) == (
        2,
        1,
        1,
    )
    assert [q["name"] for q in api.get("/api/queues/%2F").json] == ["work"]
    assert api.get("/api/queues/%2F/absent").json == {
        "error": "Object Not Found",
        "reason": "Not Found",
    }


def test_queue_declares_are_refused_as_amqp_refuses_them(mgmt: tuple[Any, Api]) -> None:
    _, api = mgmt
    assert api.put("/api/queues/%2F/q", {"durable": True}).status == 201
    inequivalent = api.put("/api/queues/%2F/q", {"durable": False})
    assert inequivalent.status == 400
    assert inequivalent.json["reason"] == (
        "inequivalent arg 'durable' for queue 'q' in vhost '/': received 'false' but "
        "current is 'true'"
    )
    reserved = api.put("/api/queues/%2F/amq.q")
    assert (reserved.status, reserved.json) == (
        401,
        {"error": "not_authorised", "reason": "Access refused."},
    )
    bad_argument = api.put("/api/queues/%2F/q2", {"arguments": {"x-max-length": "ten"}})
    assert bad_argument.status == 400 and "x-max-length" in bad_argument.json["reason"]
    assert api.put("/api/queues/%2F/q3", {"durable": "maybe"}).status == 400
    assert api.put("/api/queues/nowhere/q").status == 404
    assert api.get("/api/queues/%2F/q2").status == 404  # nothing was made


def test_api_made_durable_objects_survive_a_restart(tmp_path: Path) -> None:
    config = BrokerConfig(mgmt_port=0)
    with running_broker(config, data_dir=tmp_path) as embedded:
        api = Api(embedded.mgmt_url)
        assert api.put("/api/queues/%2F/kept", {"durable": True}).status == 201
        assert api.put("/api/queues/%2F/gone", {"durable": False}).status == 201
        assert api.put("/api/exchanges/%2F/kx", {"type": "fanout", "durable": True}).status == 201
        assert api.post("/api/bindings/%2F/e/kx/q/kept", {"routing_key": "k"}).status == 201
        assert api.put("/api/vhosts/vk").status == 201
        assert api.put("/api/users/ku", {"password": "pw", "tags": "management"}).status == 201
    with running_broker(config, data_dir=tmp_path) as embedded:
        api = Api(embedded.mgmt_url)
        assert api.get("/api/queues/%2F/kept").json["durable"] is True
        assert api.get("/api/queues/%2F/gone").status == 404
        assert api.get("/api/exchanges/%2F/kx").json["type"] == "fanout"
        assert [b["routing_key"] for b in api.get("/api/bindings/%2F/e/kx/q/kept").json] == ["k"]
        assert api.get("/api/vhosts/vk").status == 200
        assert api.as_user("ku", "pw").get("/api/whoami").status == 200


def test_exchanges_are_declared_shown_and_deleted(mgmt: tuple[Any, Api]) -> None:
    _, api = mgmt
    assert api.put("/api/exchanges/%2F/ex", {"type": "topic", "durable": True}).status == 201
    assert api.put("/api/exchanges/%2F/ex", {"type": "topic", "durable": True}).status == 204
    shown = api.get("/api/exchanges/%2F/ex").json
    assert {"name": "ex", "type": "topic", "durable": True, "internal": False}.items() <= (
        shown.items()
    )
    assert api.put("/api/exchanges/%2F/ex", {"type": "direct", "durable": True}).status == 400
    assert api.put("/api/exchanges/%2F/ex2", {"type": "nosuch"}).json["reason"] == (
        "unknown exchange type 'nosuch'"
    )
    assert api.put("/api/exchanges/%2F/amq.default", {"type": "direct"}).status == 401
    assert api.delete("/api/exchanges/%2F/amq.direct").status == 401
    assert api.get("/api/exchanges/%2F/amq.default").json["name"] == ""
    names = {e["name"] for e in api.get("/api/exchanges/%2F").json}
    assert {"", "amq.direct", "amq.topic", "ex"} <= names
    assert api.put("/api/queues/%2F/bound").status == 201
    assert api.post("/api/bindings/%2F/e/ex/q/bound", {"routing_key": "#"}).status == 201
    in_use = api.delete("/api/exchanges/%2F/ex?if-unused=true")
    assert (in_use.status, in_use.json["reason"]) == (400, "exchange 'ex' in vhost '/' in use")
    assert api.delete("/api/exchanges/%2F/ex").status == 204
    assert api.delete("/api/exchanges/%2F/ex").status == 404


def test_bindings_are_made_listed_and_deleted_by_properties_key(mgmt: tuple[Any, Api]) -> None:
    _, api = mgmt
    api.put("/api/exchanges/%2F/src", {"type": "direct"})
    api.put("/api/queues/%2F/dst")
    plain = api.post("/api/bindings/%2F/e/src/q/dst", {"routing_key": "a.b", "arguments": {}})
    assert (plain.status, plain.headers["Location"]) == (201, "dst/a.b")
    with_args = api.post(
        "/api/bindings/%2F/e/src/q/dst", {"routing_key": "a", "arguments": {"x": 1}}
    )
    props = with_args.headers["Location"].split("/", 1)[1]
    assert props.startswith("a~")
    listed = api.get("/api/bindings/%2F/e/src/q/dst").json
    assert [(b["routing_key"], b["properties_key"]) for b in listed] == [
        ("a.b", "a.b"),
        ("a", props),
    ]
    assert api.get(f"/api/bindings/%2F/e/src/q/dst/{props}").json["arguments"] == {"x": 1}
    implicit = {"source": "", "destination": "dst", "routing_key": "dst", "vhost": "/"}
    assert any(implicit.items() <= b.items() for b in api.get("/api/bindings/%2F").json)
    assert [b["routing_key"] for b in api.get("/api/queues/%2F/dst/bindings").json] == [
        "dst",
        "a.b",
        "a",
    ]
    assert api.post("/api/bindings/%2F/e/src/q/absent", {}).json == {
        "error": "not_found",
        "reason": "no queue 'absent' in vhost '/'",
    }
    assert api.post("/api/bindings/%2F/e/absent/q/dst", {}).status == 404
    api.put("/api/exchanges/%2F/dst-x", {"type": "fanout"})
    assert api.post("/api/bindings/%2F/e/src/e/dst-x", {"routing_key": "zz"}).status == 201
    assert len(api.get("/api/exchanges/%2F/src/bindings/source").json) == 3
    assert api.delete(f"/api/bindings/%2F/e/src/q/dst/{props}").status == 204
    assert api.delete(f"/api/bindings/%2F/e/src/q/dst/{props}").status == 404
    assert [b["routing_key"] for b in api.get("/api/bindings/%2F/e/src/q/dst").json] == ["a.b"]


def test_publish_says_whether_it_routed_and_pika_gets_the_message(mgmt: tuple[Any, Api]) -> None:
    embedded, api = mgmt
    api.put("/api/queues/%2F/inbox", {"durable": True})
    message = {
        "properties": {"delivery_mode": 2, "headers": {"h": "v"}, "content_type": "text/plain"},
        "routing_key": "inbox",
        "payload": "hello",
        "payload_encoding": "string",
    }
    assert api.post("/api/exchanges/%2F/amq.default/publish", message).json == {"routed": True}
    unroutable = {
        **message,
        "routing_key": "nowhere",
        "payload": "aGk=",
        "payload_encoding": "base64",
    }
    assert api.post("/api/exchanges/%2F/amq.default/publish", unroutable).json == {"routed": False}
    missing = api.post("/api/exchanges/%2F/absent/publish", message)
    assert (missing.status, missing.json["reason"]) == (
        400,
        "404 NOT_FOUND - no exchange 'absent' in vhost '/'",
    )
    assert (
        api.post(
            "/api/exchanges/%2F/amq.default/publish", {**message, "payload_encoding": "x"}
        ).status
        == 400
    )
    with _pika(embedded) as connection:
        _method, properties, body = connection.channel().basic_get("inbox", auto_ack=True)
    assert body == b"hello"
    assert properties.headers == {"h": "v"} and properties.delivery_mode == 2


def test_get_takes_messages_and_settles_them_by_ackmode(mgmt: tuple[Any, Api]) -> None:
    _, api = mgmt
    api.put("/api/queues/%2F/g")
    for payload in ("first", "second"):
        message = {
            "properties": {"message_id": payload},
            "routing_key": "g",
            "payload": payload,
            "payload_encoding": "string",
        }
        api.post("/api/exchanges/%2F/amq.default/publish", message)
    binary = {"properties": {}, "routing_key": "g", "payload": "/wA=", "payload_encoding": "base64"}
    api.post("/api/exchanges/%2F/amq.default/publish", binary)
    peek = api.post(
        "/api/queues/%2F/g/get", {"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto"}
    ).json
    assert [(m["payload"], m["payload_encoding"], m["message_count"]) for m in peek] == [
        ("first", "string", 2),
        ("second", "string", 1),
        ("/wA=", "base64", 0),
    ]
    assert peek[0] == {
        "payload_bytes": 5,
        "redelivered": False,
        "exchange": "",
        "routing_key": "g",
        "message_count": 2,
        "properties": {"message_id": "first"},
        "payload": "first",
        "payload_encoding": "string",
    }
    again = api.post(
        "/api/queues/%2F/g/get",
        {"count": "1", "ackmode": "ack_requeue_false", "encoding": "base64", "truncate": 3},
    ).json
    assert [(m["payload"], m["redelivered"], m["payload_bytes"]) for m in again] == [
        ("Zmly", True, 5)
    ]
    assert api.get("/api/queues/%2F/g").json["messages"] == 2
    assert (
        api.post(
            "/api/queues/%2F/g/get", {"count": 1, "ackmode": "bogus", "encoding": "auto"}
        ).status
        == 400
    )
    assert api.post(
        "/api/queues/%2F/g/get", {"count": 1, "ackmode": "ack_requeue_true", "encoding": "x"}
    ).json["reason"] == ("Unsupported encoding. Please use auto or base64.")
    assert api.post("/api/queues/%2F/g/get", {"ackmode": "ack_requeue_true"}).status == 400
    assert (
        api.post(
            "/api/queues/%2F/absent/get",
            {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
        ).status
        == 404
    )
    assert api.delete("/api/queues/%2F/g/contents").status == 204
    assert api.get("/api/queues/%2F/g").json["messages"] == 0
    assert api.delete("/api/queues/%2F/absent/contents").status == 404


def test_queue_delete_conditions_and_listing_options(mgmt: tuple[Any, Api]) -> None:
    embedded, api = mgmt
    for name in ("b", "a", "c"):
        api.put(f"/api/queues/%2F/{name}")
    api.post(
        "/api/exchanges/%2F/amq.default/publish",
        {"properties": {}, "routing_key": "c", "payload": "x", "payload_encoding": "string"},
    )
    assert api.get("/api/queues?columns=name,messages&sort=messages&sort_reverse=true").json[0] == {
        "name": "c",
        "messages": 1,
    }
    assert [q["name"] for q in api.get("/api/queues/%2F?sort=name&columns=name").json] == [
        "a",
        "b",
        "c",
    ]
    page = api.get("/api/queues?page=2&page_size=2&sort=name&columns=name").json
    assert (page["items"], page["page_count"], page["total_count"]) == ([{"name": "c"}], 2, 3)
    assert api.get("/api/queues?page=9&page_size=2").status == 400
    not_empty = api.delete("/api/queues/%2F/c?if-empty=true")
    assert (not_empty.status, not_empty.json["reason"]) == (400, "queue 'c' in vhost '/' not empty")
    with _pika(embedded) as connection:
        connection.channel().basic_consume("a", lambda *args: None)
        assert api.delete("/api/queues/%2F/a?if-unused=true").status == 400
        assert api.delete("/api/queues/%2F/a").status == 204
    assert api.delete("/api/queues/%2F/a").status == 404
