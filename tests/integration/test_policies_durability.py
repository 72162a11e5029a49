"""Policies are durable definitions: they survive a restart of a real `kanin server`
process, and travel in /api/definitions in RabbitMQ's shape, both ways."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from helpers import BrokerFactory, start_kanin_on_free_port
from mgmt_http import Api

pytestmark = pytest.mark.kanin_only

CAP = {"pattern": "^capped", "definition": {"max-length": 2}, "apply-to": "queues", "priority": 3}


def start_with_api(data_dir: Path) -> tuple[subprocess.Popen[str], int, Api]:
    """`kanin server` with its management API on a free port, once that API listens."""
    process, port, api_port = start_kanin_on_free_port(data_dir, "--mgmt-port")
    return process, port, Api(f"http://127.0.0.1:{api_port}")


def fill(port: int, queue: str, count: int) -> int:
    """Publish `count` messages; how many the queue then holds."""
    params = pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1)
    with pika.BlockingConnection(params) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True)
        for n in range(count):
            channel.basic_publish("", queue, b"%d" % n)
        return int(channel.queue_declare(queue, passive=True).method.message_count)


def test_a_policy_survives_a_crash_and_applies_after_it(tmp_path: Path) -> None:
    process, port, api = start_with_api(tmp_path)
    try:
        assert api.put("/api/policies/%2F/cap", CAP).status == 201  # answered once saved
        assert fill(port, "capped.orders", 5) == 2
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    process, port, api = start_with_api(tmp_path)
    try:
        assert api.get("/api/policies/%2F/cap").json == {"vhost": "/", "name": "cap", **CAP}
        assert api.get("/api/queues/%2F/capped.orders").json["policy"] == "cap"
        assert fill(port, "capped.orders", 5) == 2
        assert fill(port, "capped.new", 5) == 2  # and to queues declared after the restart
    finally:
        process.terminate()
        process.wait()


@pytest.fixture
def two_brokers(broker_factory: BrokerFactory) -> Iterator[tuple[Any, Api, Any, Api]]:
    with broker_factory(mgmt_port=0) as first, broker_factory(mgmt_port=0) as second:
        yield first, Api(first.mgmt_url), second, Api(second.mgmt_url)


def test_definitions_carry_policies_from_one_broker_to_another(
    two_brokers: tuple[Any, Api, Any, Api],
) -> None:
    _, source, second, target = two_brokers
    assert source.put("/api/policies/%2F/cap", CAP).status == 201
    assert source.put("/api/queues/%2F/capped.q", {"durable": True}).status == 201
    exported = source.get("/api/definitions").json
    assert exported["policies"] == [{"vhost": "/", "name": "cap", **CAP}]
    assert target.post("/api/definitions", exported).status == 204
    assert target.get("/api/policies").json == exported["policies"]
    assert target.get("/api/queues/%2F/capped.q").json["policy"] == "cap"
    assert fill(second.port, "capped.q", 4) == 2


def test_an_import_with_a_bad_policy_changes_nothing(
    two_brokers: tuple[Any, Api, Any, Api],
) -> None:
    _, api, _, _ = two_brokers
    document = {
        "vhosts": [{"name": "fresh"}],
        "policies": [
            {"vhost": "fresh", "name": "ok", "pattern": ".*", "definition": {"max-length": 1}},
            {"vhost": "fresh", "name": "bad", "pattern": ".*", "definition": {"nope": 1}},
        ],
        "queues": [],
    }
    reply = api.post("/api/definitions", document)
    assert reply.status == 400
    assert "policies[1] ('bad' in vhost 'fresh')" in reply.json["reason"]
    assert "are not recognised policy settings" in reply.json["reason"]
    assert api.get("/api/vhosts/fresh").status == 404
    assert api.get("/api/policies").json == []


def test_rabbitmq_cluster_policies_import_and_are_kept(
    two_brokers: tuple[Any, Api, Any, Api],
) -> None:
    """Mirroring policies from a RabbitMQ cluster's export: taken, kept, nothing to do."""
    _, api, _, _ = two_brokers
    mirrored = {
        "vhost": "/",
        "name": "ha-all",
        "pattern": ".*",
        "apply-to": "all",
        "definition": {"ha-mode": "all", "ha-sync-mode": "automatic"},
        "priority": 0,
    }
    assert api.post("/api/definitions", {"policies": [mirrored]}).status == 204
    assert api.get("/api/definitions").json["policies"] == [mirrored]
