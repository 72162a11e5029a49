"""`kanin server` as a user runs it: a real process, a real port, a clean SIGTERM."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pika
import pytest

from helpers import server_command, start_kanin, start_kanin_on_free_port

pytestmark = pytest.mark.kanin_only


def test_sigterm_closes_clients_with_320_and_exits_cleanly(tmp_path: Path) -> None:
    process, port = start_kanin(tmp_path / "data")
    try:
        assert (tmp_path / "data").is_dir()
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        channel = connection.channel()
        channel.queue_declare("cli-check")
        channel.basic_publish("", "cli-check", b"hello")
        assert channel.basic_get("cli-check", auto_ack=True)[2] == b"hello"
        process.send_signal(signal.SIGTERM)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            connection.process_data_events(time_limit=5)
            connection.process_data_events(time_limit=5)
        assert info.value.reply_code == 320
        assert info.value.reply_text == "CONNECTION_FORCED - broker shutdown"
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_python_dash_m_and_help(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kanin", "server", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0
    for flag in ("--port", "--bind", "--data-dir"):
        assert flag in result.stdout


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    first, port = start_kanin(tmp_path / "one")
    try:
        second = subprocess.run(
            server_command(tmp_path / "two", "--port", str(port)),
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ},
        )
        assert second.returncode == 1
        assert "kanin: cannot start:" in second.stderr
        assert "address already in use" in second.stderr.lower()
    finally:
        first.send_signal(signal.SIGINT)
        assert first.wait(timeout=10) == 0


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("--port", "port must be 0..65535, got 70000"),
        ("--prometheus-port", "--prometheus-port must be 0..65535, got 70000"),
    ],
)
def test_invalid_port_is_a_usage_error(flag: str, expected: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kanin", "server", flag, "70000"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert expected in result.stderr


def test_default_bind_listens_on_ipv4_and_ipv6(tmp_path: Path) -> None:
    # Without --bind, kanin listens on every interface of both families, as RabbitMQ does.
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "kanin", "server", "--port", "0", "--mgmt-port", "0"),
            "--prometheus-port",
            "0",
            *("--data-dir", str(tmp_path)),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    try:
        hosts = []
        deadline = time.monotonic() + 15
        while len(hosts) < 2 and time.monotonic() < deadline:
            match = re.search(r"listening for AMQP on (\S+) port (\d+)", process.stderr.readline())
            if match:
                hosts.append(match.group(1))
        assert sorted(hosts) == ["0.0.0.0", "::"]
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0


@pytest.mark.parametrize(
    ("flag", "named"),
    [("--mgmt-port", "management API port"), ("--prometheus-port", "Prometheus metrics port")],
)
def test_an_http_port_in_use_is_a_clear_error_naming_it(
    tmp_path: Path, flag: str, named: str
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        result = subprocess.run(
            server_command(tmp_path, flag, str(busy)),
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 1
    assert "kanin: cannot start:" in result.stderr
    assert f"{named} {busy}" in result.stderr
    assert "address already in use" in result.stderr.lower()


def test_the_management_api_answers_on_its_port(tmp_path: Path) -> None:
    process, _, free = start_kanin_on_free_port(tmp_path / "data", "--mgmt-port")
    request = urllib.request.Request(f"http://127.0.0.1:{free}/api/whoami")
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    try:
        # The API starts listening just after the AMQP port's log line that start_kanin waits for.
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    answer = json.loads(response.read())
                break
            except urllib.error.URLError as error:
                if not isinstance(error.reason, ConnectionRefusedError):
                    raise
                assert time.monotonic() < deadline, "the management API never listened"
                time.sleep(0.05)
        assert answer == {"name": "guest", "tags": ["administrator"]}
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
