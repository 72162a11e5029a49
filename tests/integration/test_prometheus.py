"""The Prometheus metrics of a real broker: real HTTP, real AMQP clients."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pika
import pytest

from kanin.testing.embedded import EmbeddedBroker

pytestmark = pytest.mark.kanin_only

Factory = Callable[..., AbstractContextManager[EmbeddedBroker]]

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_VALUE = r'"(?:[^"\\\n]|\\\\|\\"|\\n)*"'
LABELS = (
    rf"\{{(?:[a-zA-Z_][a-zA-Z0-9_]*={LABEL_VALUE})(?:,[a-zA-Z_][a-zA-Z0-9_]*={LABEL_VALUE})*\}}"
)
VALUE = r"(?:[-+]?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|NaN|[-+]Inf)"
SAMPLE = re.compile(rf"({NAME})({LABELS})? ({VALUE})")
LABEL = re.compile(rf"([a-zA-Z_][a-zA-Z0-9_]*)=({LABEL_VALUE})")


def parse(text: str) -> dict[str, Any]:
    """A strict reading of the text format 0.0.4: every family's HELP then TYPE line, then
    its samples, no family twice, nothing else. Returns {name: {"type", "help",
    "samples": {labels as a sorted tuple: value}}}."""
    assert text.endswith("\n")
    families: dict[str, Any] = {}
    current: str | None = None
    lines = text[:-1].split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        help_line = re.fullmatch(rf"# HELP ({NAME}) (.*)", line)
        if help_line:
            name = help_line.group(1)
            assert name not in families, f"{name} twice"
            type_line = re.fullmatch(rf"# TYPE {name} (counter|gauge|untyped)", lines[index + 1])
            assert type_line, lines[index + 1]
            families[name] = {"type": type_line.group(1), "help": help_line.group(2), "samples": {}}
            current = name
            index += 2
            continue
        sample = SAMPLE.fullmatch(line)
        assert sample, f"not a sample line: {line!r}"
        assert sample.group(1) == current, f"{line!r} outside its family"
        labels = tuple(
            sorted((key, _unescape(quoted)) for key, quoted in LABEL.findall(sample.group(2) or ""))
        )
        samples = families[current]["samples"]
        assert labels not in samples, f"{line!r} twice"
        samples[labels] = float(sample.group(3))
        index += 1
    return families


def _unescape(quoted: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), quoted[1:-1])


def scrape(broker: EmbeddedBroker, path: str = "/metrics") -> dict[str, Any]:
    with urllib.request.urlopen(broker.prometheus_url + path, timeout=10) as response:
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        return parse(response.read().decode())


def value(families: dict[str, Any], name: str, **labels: str) -> float:
    return float(families[name]["samples"][tuple(sorted(labels.items()))])


def test_the_figures_follow_what_clients_do(broker_factory: Factory) -> None:
    with broker_factory(prometheus_port=0) as broker:
        before = scrape(broker)
        assert before["rabbitmq_identity_info"]["type"] == "untyped"
        assert value(before, "rabbitmq_connections") == 0
        assert value(before, "rabbitmq_queues") == 0
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("metrics.a")
        channel.queue_declare("metrics.b")
        for _ in range(3):
            channel.basic_publish("", "metrics.a", b"x")
        channel.basic_publish("", "metrics.b", b"y")
        now = scrape(broker)
        assert value(now, "rabbitmq_connections") == 1
        assert value(now, "rabbitmq_channels") == 1
        assert value(now, "rabbitmq_queues") == 2
        assert value(now, "rabbitmq_queue_messages_ready") == 4
        assert value(now, "rabbitmq_queue_messages") == 4
        assert value(now, "rabbitmq_channel_messages_published_total") == 4
        assert value(now, "rabbitmq_channel_messages_confirmed_total") == 4
        assert value(now, "rabbitmq_connections_opened_total") == 1
        assert now["rabbitmq_channel_messages_published_total"]["type"] == "counter"

        deliveries = []
        tag = channel.basic_consume("metrics.a", lambda ch, m, p, b: deliveries.append(m))
        while len(deliveries) < 3:
            connection.process_data_events(time_limit=1)
        held = scrape(broker)
        assert value(held, "rabbitmq_consumers") == 1
        assert value(held, "rabbitmq_queue_messages_ready") == 1
        assert value(held, "rabbitmq_queue_messages_unacked") == 3
        assert value(held, "rabbitmq_queue_messages") == 4
        assert value(held, "rabbitmq_channel_messages_delivered_ack_total") == 3
        assert value(held, "rabbitmq_channel_messages_unacked") == 3
        per_object = scrape(broker, "/metrics/per-object")
        a = {"vhost": "/", "queue": "metrics.a"}
        assert value(per_object, "rabbitmq_queue_messages_unacked", **a) == 3
        assert value(per_object, "rabbitmq_queue_messages_ready", **a) == 0
        assert value(per_object, "rabbitmq_queue_consumers", **a) == 1
        b = {"vhost": "/", "queue": "metrics.b"}
        assert value(per_object, "rabbitmq_queue_messages_ready", **b) == 1

        channel.basic_ack(deliveries[-1].delivery_tag, multiple=True)
        channel.basic_cancel(tag)
        channel.basic_get("metrics.b", auto_ack=True)
        channel.basic_consume("metrics.a", lambda *args: None, auto_ack=True)
        channel.basic_publish("", "metrics.a", b"z")
        connection.process_data_events(time_limit=0.2)
        after = scrape(broker)
        assert value(after, "rabbitmq_channel_messages_acked_total") == 3
        assert value(after, "rabbitmq_channel_messages_delivered_total") == 1
        assert value(after, "rabbitmq_queue_messages") == 0
        connection.close()
        closed = scrape(broker)
        assert value(closed, "rabbitmq_connections") == 0
        assert value(closed, "rabbitmq_connections_closed_total") == 1
        assert value(closed, "rabbitmq_channel_messages_published_total") == 5


def test_stream_offsets_and_label_escaping_per_object(broker_factory: Factory) -> None:
    odd = 'odd "name" \\ here'
    with broker_factory(prometheus_port=0) as broker:
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        channel.queue_declare(odd)
        channel.queue_declare("metrics.s", durable=True, arguments={"x-queue-type": "stream"})
        channel.confirm_delivery()
        for _ in range(5):
            channel.basic_publish("", "metrics.s", b"s")
        per_object = scrape(broker, "/metrics/per-object")
        assert value(per_object, "rabbitmq_queue_messages_ready", vhost="/", queue=odd) == 0
        s = {"vhost": "/", "queue": "metrics.s"}
        assert value(per_object, "kanin_stream_first_offset", **s) == 0
        assert value(per_object, "kanin_stream_committed_offset", **s) == 5
        assert "kanin_stream_first_offset" not in scrape(broker)
        connection.close()


def test_the_node_figures(broker_factory: Factory) -> None:
    with broker_factory(prometheus_port=0) as broker:
        families = scrape(broker)
        assert value(families, "rabbitmq_alarms_memory_used_watermark") == 0
        assert value(families, "rabbitmq_alarms_free_disk_space_watermark") == 0
        assert value(families, "rabbitmq_disk_space_available_bytes") > 0
        assert value(families, "rabbitmq_resident_memory_limit_bytes") > 0
        # The embedded broker does not measure its resident memory (it is the test run's).
        assert "rabbitmq_process_resident_memory_bytes" not in families


def test_no_authentication_and_unknown_paths_are_404(broker_factory: Factory) -> None:
    with broker_factory(prometheus_port=0) as broker:
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(broker.prometheus_url + "/api/overview", timeout=10)
        assert info.value.code == 404


def test_metrics_are_off_unless_asked_for(broker_factory: Factory) -> None:
    with broker_factory() as broker:
        assert broker.server.prometheus is None
        with pytest.raises(RuntimeError):
            broker.prometheus_url  # noqa: B018
