"""Message rates through the management API: pika publishes, gets, consumes and acks;
the broker's samples are taken on demand (at chosen times, ahead of the background
sampler's, so that its samples cannot land between them) and the API answers the counts
and rates RabbitMQ's would."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pika
import pytest

from helpers import BrokerFactory
from mgmt_http import Api

pytestmark = pytest.mark.kanin_only

# Far enough ahead that the broker's own sampler (every 5 s, wall clock) adds nothing
# between the samples a test takes: a sample older than the newest is not kept.
AHEAD_MS = (int(time.time()) // 5 + 3600) * 5000


@pytest.fixture
def mgmt(broker_factory: BrokerFactory) -> Iterator[tuple[Any, Api]]:
    with broker_factory(mgmt_port=0) as embedded:
        yield embedded, Api(embedded.mgmt_url)


def _sample(embedded: Any, at_ms: int) -> None:
    context = embedded.server.mgmt.context
    embedded.call(lambda: context.rates.sample(context.broker, context.unacked_by_queue(), at_ms))


def _pika(embedded: Any) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(embedded.host, embedded.port))


def test_overview_reports_counts_and_rates_over_the_last_interval(mgmt: tuple[Any, Api]) -> None:
    embedded, api = mgmt
    with _pika(embedded) as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("rated")
        _sample(embedded, AHEAD_MS)
        for _ in range(50):
            channel.basic_publish("", "rated", b"m")
        for _ in range(10):
            method, _, _ = channel.basic_get("rated")
            assert method is not None
            channel.basic_ack(method.delivery_tag)
        channel.basic_get("rated", auto_ack=True)
        channel.basic_publish("", "routed-nowhere", b"lost")
        with pytest.raises(pika.exceptions.UnroutableError):
            channel.basic_publish("", "routed-nowhere", b"back", mandatory=True)
        _sample(embedded, AHEAD_MS + 5000)
        overview = api.get("/api/overview").json
    assert overview["rates_mode"] == "basic"
    stats = overview["message_stats"]
    expected_counts = {
        "publish": 52,
        "confirm": 52,
        "get": 10,
        "get_no_ack": 1,
        "deliver_get": 11,
        "ack": 10,
        "drop_unroutable": 1,
        "return_unroutable": 1,
        "deliver": 0,
    }
    assert {name: stats[name] for name in expected_counts} == expected_counts
    assert stats["publish_details"] == {"rate": 52 / 5}
    assert stats["ack_details"] == {"rate": 2.0}
    totals = overview["queue_totals"]
    assert totals["messages"] == 39
    assert totals["messages_details"] == {"rate": 39 / 5}


def test_samples_come_with_msg_rates_age_and_lengths_age(mgmt: tuple[Any, Api]) -> None:
    _, api = mgmt
    overview = api.get(
        "/api/overview?msg_rates_age=60&msg_rates_incr=5&lengths_age=30&lengths_incr=10"
    ).json
    publish = overview["message_stats"]["publish_details"]
    assert len(publish["samples"]) == 13
    assert {"sample", "timestamp"} == set(publish["samples"][0])
    assert publish["samples"][0]["timestamp"] % 5000 == 0
    assert {"rate", "samples", "avg", "avg_rate"} == set(publish)
    assert len(overview["queue_totals"]["messages_details"]["samples"]) == 4
    refused = api.get("/api/overview?msg_rates_age=60&msg_rates_incr=0")
    assert refused.status == 400 and refused.json["error"] == "bad_request"


def test_queues_and_exchanges_have_their_own_message_stats(mgmt: tuple[Any, Api]) -> None:
    embedded, api = mgmt
    with _pika(embedded) as connection:
        channel = connection.channel()
        channel.exchange_declare("fan", "fanout")
        for name in ("left", "right", "idle"):
            channel.queue_declare(name)
        channel.queue_bind("left", "fan")
        channel.queue_bind("right", "fan")
        _sample(embedded, AHEAD_MS)
        for _ in range(20):
            channel.basic_publish("fan", "", b"both")
        received = []
        channel.basic_consume("left", lambda ch, m, p, b: received.append(m), auto_ack=True)
        while len(received) < 20:
            connection.process_data_events(time_limit=1)
        _sample(embedded, AHEAD_MS + 10000)
        left = api.get("/api/queues/%2F/left?msg_rates_age=10&msg_rates_incr=5").json
        right = api.get("/api/queues/%2F/right").json
        idle = api.get("/api/queues/%2F/idle").json
        fan = api.get("/api/exchanges/%2F/fan").json
    assert left["message_stats"]["publish"] == 20
    assert left["message_stats"]["deliver_no_ack"] == 20
    assert left["message_stats"]["deliver_get"] == 20
    assert left["message_stats"]["deliver_no_ack_details"]["rate"] == 2.0
    assert len(left["message_stats"]["publish_details"]["samples"]) == 3
    assert right["message_stats"]["deliver_get"] == 0
    assert right["messages_details"] == {"rate": 2.0}
    assert "message_stats" not in idle  # as on RabbitMQ: none until a message passed
    assert fan["message_stats"]["publish_in"] == 20
    assert fan["message_stats"]["publish_out"] == 40
    assert fan["message_stats"]["publish_out_details"] == {"rate": 4.0}


def test_redeliveries_are_counted(mgmt: tuple[Any, Api]) -> None:
    embedded, api = mgmt
    with _pika(embedded) as connection:
        channel = connection.channel()
        channel.queue_declare("again")
        channel.basic_publish("", "again", b"m")
        method, _, _ = channel.basic_get("again")
        assert method is not None
        channel.basic_nack(method.delivery_tag, requeue=True)
        method, _, _ = channel.basic_get("again")
        assert method is not None and method.redelivered
        channel.basic_ack(method.delivery_tag)
        overview = api.get("/api/overview").json
        queue = api.get("/api/queues/%2F/again").json
    assert overview["message_stats"]["redeliver"] == 1
    assert queue["message_stats"]["redeliver"] == 1
    assert queue["message_stats"]["get"] == 2


def test_a_user_who_sees_only_some_vhosts_gets_no_broker_wide_rates(
    mgmt: tuple[Any, Api],
) -> None:
    _, api = mgmt
    assert api.put("/api/vhosts/other").status == 201
    assert api.put("/api/users/watcher", {"password": "pw", "tags": "management"}).status == 201
    grant = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api.put("/api/permissions/%2F/watcher", grant).status == 201
    overview = api.as_user("watcher", "pw").get("/api/overview").json
    assert overview["message_stats"] == {}
    assert "messages_details" not in overview["queue_totals"]
    assert "messages" in overview["queue_totals"]
