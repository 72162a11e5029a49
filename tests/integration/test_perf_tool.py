"""`kanin perf` end to end: a real subprocess loading the test broker for about a second.

Each run asserts from --json what the tool promises: every published message confirmed
(when confirms are on), every confirmed message consumed, no loss, no duplicate. These
tests also pass against RabbitMQ (KANIN_TEST_AMQP_URL): the tool is broker-neutral.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from helpers import Endpoint, Unique


def perf(*args: str, timeout_s: float = 45.0) -> tuple[int, dict[str, Any], str]:
    result = subprocess.run(
        [sys.executable, "-m", "kanin", "perf", "--json", "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    summary = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.returncode, summary, result.stderr


def assert_clean(summary: dict[str, Any], confirms: bool) -> None:
    assert summary["errors"] == []
    assert summary["published"] > 0
    if confirms:
        assert summary["confirmed"] == summary["published"]
        assert summary["nacked"] == 0
        assert summary["unconfirmed"] == 0
        assert summary["consumed_unique"] == summary["confirmed"]
    else:
        assert summary["consumed_unique"] == summary["published"]
    assert summary["consumed"] == summary["consumed_unique"]
    assert summary["lost"] == 0
    assert summary["duplicates"] == 0
    assert summary["unknown"] == 0
    assert summary["ok"] is True


def test_transient_no_confirms_auto_ack(broker: Endpoint, unique: Unique) -> None:
    code, summary, stderr = perf(
        "--uri",
        broker.url,
        "--queue-prefix",
        unique("perf-a"),
        "--delete-queues",
        "--duration",
        "1",
        "-s",
        "100",
    )
    assert code == 0, stderr
    assert_clean(summary, confirms=False)
    assert summary["config"]["ack"] == "auto"
    assert summary["latency_us"]["end_to_end"]["count"] == summary["consumed"]
    assert summary["rates"]["publish"] > 0


def test_persistent_window_confirms_manual_multi_ack(broker: Endpoint, unique: Unique) -> None:
    code, summary, stderr = perf(
        "--uri",
        broker.url,
        "--queue-prefix",
        unique("perf-b"),
        "--delete-queues",
        "--duration",
        "1",
        "-x",
        "2",
        "-y",
        "2",
        "--queues",
        "2",
        "--producer-channels",
        "2",
        "--persistent",
        "--durable",
        "--confirm",
        "window:200",
        "--ack",
        "manual",
        "--prefetch",
        "100",
        "--multi-ack-every",
        "10",
        "-s",
        "1500",
    )
    assert code == 0, stderr
    assert_clean(summary, confirms=True)
    confirm = summary["latency_us"]["confirm"]
    assert confirm["count"] == summary["confirmed"]
    assert 0 < confirm["p50"] <= confirm["p95"] <= confirm["p99"] <= confirm["p99.9"]


def test_count_with_batch_confirms_through_an_exchange(broker: Endpoint, unique: Unique) -> None:
    code, summary, stderr = perf(
        "--uri",
        broker.url,
        "--queue-prefix",
        unique("perf-c"),
        "--delete-queues",
        "--exchange",
        unique("perf-x"),
        "--count",
        "300",
        "--producer-channels",
        "2",
        "--confirm",
        "batch:50",
        "--ack",
        "manual",
        "--processes",
        "1",
    )
    assert code == 0, stderr
    assert_clean(summary, confirms=True)
    assert summary["published"] == 600  # exactly --count per publishing channel


def test_rate_limit_is_kept(broker: Endpoint, unique: Unique) -> None:
    code, summary, stderr = perf(
        "--uri",
        broker.url,
        "--queue-prefix",
        unique("perf-d"),
        "--delete-queues",
        "--duration",
        "1",
        "--rate",
        "200",
        "--confirm",
        "each",
    )
    assert code == 0, stderr
    assert_clean(summary, confirms=True)
    assert 150 <= summary["published"] <= 230


def test_sixteen_byte_messages_carry_the_short_stamp(broker: Endpoint, unique: Unique) -> None:
    code, summary, stderr = perf(
        "--uri",
        broker.url,
        "--queue-prefix",
        unique("perf-e"),
        "--delete-queues",
        "--count",
        "500",
        "-x",
        "2",
        "--producer-channels",
        "2",
        "-s",
        "16",
        "--confirm",
        "window:100",
        "--ack",
        "manual",
        "--multi-ack-every",
        "7",
    )
    assert code == 0, stderr
    assert_clean(summary, confirms=True)
    assert summary["published"] == 2000  # four streams, each told apart by the short stamp
    assert summary["latency_us"]["end_to_end"]["count"] == 2000


def test_self_test_against_the_sink() -> None:
    code, summary, stderr = perf("--self-test", "--duration", "1", "--confirm", "window:500")
    assert code == 0, stderr
    assert_clean(summary, confirms=True)
    assert summary["sink_cpu_percent"] is not None


@pytest.mark.parametrize(
    "bad",
    [
        ["--confirm", "sometimes"],
        ["-s", "8"],
        ["--prefetch", "5", "--ack", "manual", "--multi-ack-every", "10"],
    ],
)
def test_bad_options_are_usage_errors(bad: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kanin", "perf", *bad], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert "kanin perf: error:" in result.stderr


def test_unreachable_broker_is_an_error_not_a_hang() -> None:
    code, _, stderr = perf("--uri", "amqp://guest:guest@127.0.0.1:1/%2F", "--duration", "1")
    assert code == 2
    assert "cannot set up the queues" in stderr
