"""`kanin ctl` on queues, exchanges, bindings, and what clients hold open (connections,
channels, consumers), against a real broker with pika clients."""

from __future__ import annotations

from typing import Any

import pika
import pytest

from ctl_run import Ctl

pytestmark = pytest.mark.kanin_only

EX_USAGE, EX_DATAERR = 64, 65


def publish(kanin: Any, queue: str, count: int) -> None:
    with pika.BlockingConnection(pika.ConnectionParameters(kanin.host, kanin.port)) as c:
        channel = c.channel()
        channel.confirm_delivery()
        for n in range(count):
            channel.basic_publish("", queue, b"m%d" % n)


def test_a_queue_is_declared_counted_purged_and_deleted(ctl: Ctl, kanin: Any) -> None:
    declared = ctl("declare_queue", "orders", "--arguments", '{"x-max-length": 10}')
    assert (declared.code, declared.out) == (0, "Declared queue 'orders' in vhost '/'.\n")
    publish(kanin, "orders", 3)
    assert ctl("list_queues").rows == [["name", "messages"], ["orders", "3"]]
    assert ctl("list_queues", "name", "durable", "arguments", "consumers", "--json").json == [
        {"name": "orders", "durable": True, "arguments": {"x-max-length": 10}, "consumers": 0}
    ]
    assert ctl("purge_queue", "orders").code == 0
    assert ctl("list_queues", "messages", "--no-table-headers").out == "0\n"
    assert ctl("delete_queue", "orders").code == 0
    assert ctl("list_queues", "--json").json == []


def test_delete_queue_if_empty_keeps_a_queue_with_messages(ctl: Ctl, kanin: Any) -> None:
    ctl("declare_queue", "kept")
    publish(kanin, "kept", 1)
    refused = ctl("delete_queue", "--if-empty", "kept")
    assert refused.code == EX_DATAERR
    assert "kept" in refused.err
    assert ctl("list_queues", "name", "messages", "--no-table-headers").rows == [["kept", "1"]]


def test_a_missing_queue_is_named(ctl: Ctl) -> None:
    for command in ("purge_queue", "delete_queue"):
        ran = ctl(command, "-p", "/", "ghost")
        assert (ran.code, ran.err) == (
            EX_DATAERR,
            f"kanin ctl: {command}: no queue 'ghost' in vhost '/'\n",
        )


def test_declare_queue_options_and_refusals(ctl: Ctl) -> None:
    assert ctl("declare_queue", "--type", "quorum", "votes").code == 0
    assert ctl("declare_queue", "--no-durable", "--auto-delete", "scratch").code == 0
    rows = ctl("list_queues", "name", "type", "durable", "auto_delete", "--json").json
    listed = {row["name"]: row for row in rows}
    assert listed["votes"]["type"] == "quorum"
    assert (listed["scratch"]["durable"], listed["scratch"]["auto_delete"]) == (False, True)
    again = ctl("declare_queue", "--type", "quorum", "votes")  # the same again: "exists"
    assert (again.code, again.out) == (0, "Found existing queue 'votes' in vhost '/'.\n")
    different = ctl("declare_queue", "--no-durable", "votes")
    assert different.code == EX_DATAERR
    assert "inequivalent arg 'durable'" in different.err
    bad = ctl("declare_queue", "--arguments", "[1]", "odd")
    assert (bad.code, bad.err) == (
        EX_DATAERR,
        "kanin ctl: declare_queue: --arguments: not a JSON object: [1]\n",
    )
    assert ctl("declare_queue", "--type", "lazy", "odd").code == EX_USAGE


def test_exchanges_and_bindings_are_listed(ctl: Ctl, kanin: Any) -> None:
    with pika.BlockingConnection(pika.ConnectionParameters(kanin.host, kanin.port)) as c:
        channel = c.channel()
        channel.exchange_declare("events", "topic")
        channel.queue_declare("audit")
        channel.queue_bind("audit", "events", "order.*")
    assert ["events", "topic"] in ctl("list_exchanges").rows
    assert ["amq.direct", "direct"] in ctl("list_exchanges").rows
    bindings = ctl("list_bindings").rows
    assert bindings[0] == [
        *("source_name", "source_kind", "destination_name", "destination_kind"),
        *("routing_key", "arguments"),
    ]
    assert ["events", "exchange", "audit", "queue", "order.*", "{}"] in bindings
    assert ["", "exchange", "audit", "queue", "audit", "{}"] in bindings


def test_listing_a_missing_vhost_names_it(ctl: Ctl) -> None:
    for command in ("list_queues", "list_exchanges", "list_bindings", "list_consumers"):
        ran = ctl(command, "-p", "nowhere")
        assert (ran.code, ran.err) == (EX_DATAERR, f"kanin ctl: {command}: no vhost 'nowhere'\n")


def test_connections_channels_and_consumers_are_listed(ctl: Ctl, kanin: Any) -> None:
    with pika.BlockingConnection(pika.ConnectionParameters(kanin.host, kanin.port)) as c:
        channel = c.channel()
        channel.basic_qos(prefetch_count=5)
        channel.queue_declare("work")
        channel.basic_consume("work", lambda *_: None, consumer_tag="worker-1")
        connections = ctl("list_connections", "--json").json
        assert len(connections) == 1
        assert {"user": "guest", "peer_host": "127.0.0.1", "state": "running"}.items() <= (
            connections[0].items()
        )
        channels = ctl("list_channels", "--json").json
        assert len(channels) == 1
        assert (channels[0]["user"], channels[0]["consumer_count"]) == ("guest", 1)
        assert channels[0]["pid"]  # the channel's name, as the API calls it
        consumers = ctl("list_consumers", "--json").json
        assert len(consumers) == 1
        assert {
            "queue_name": "work",
            "consumer_tag": "worker-1",
            "ack_required": True,
            "prefetch_count": 5,
            "active": True,
        }.items() <= consumers[0].items()
        assert consumers[0]["channel_pid"] == channels[0]["pid"]
        table = ctl("list_consumers", "queue_name", "consumer_tag").rows
        assert table == [["queue_name", "consumer_tag"], ["work", "worker-1"]]
    assert ctl("list_connections").rows == [["user", "peer_host", "peer_port", "state"]]
