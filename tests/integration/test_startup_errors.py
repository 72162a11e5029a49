"""`kanin server` refuses to start on a problem the operator must fix: one line on stderr
naming the file, directory or option and what is wrong, exit status 2, no traceback.
Also: one broker per data directory (a second one would write the same files)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pika
import pytest

from helpers import one_line_error, run_server, start_kanin
from kanin.testing.embedded import running_broker

pytestmark = pytest.mark.kanin_only


def run_kanin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kanin", *args], capture_output=True, text=True, timeout=30
    )


# --- one broker per data directory ----------------------------------------------------------


def test_second_broker_on_the_same_data_dir_exits_naming_the_holder(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first, port = start_kanin(data)
    try:
        line = one_line_error(run_server(data))
        assert str(data) in line
        assert f"pid {first.pid}" in line
        # The first broker is untouched and still serves.
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        connection.channel().queue_declare("still-here", durable=True)
        connection.close()
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=10) == 0
    # Once the first has gone, the directory is free again (the lock file stays behind).
    second, _ = start_kanin(data)
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=10) == 0


def test_a_killed_broker_leaves_no_lock_behind(tmp_path: Path) -> None:
    first, _ = start_kanin(tmp_path)
    first.kill()
    first.wait()
    second, _ = start_kanin(tmp_path)
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=10) == 0


def test_the_embedded_broker_holds_the_lock_too(tmp_path: Path) -> None:
    with running_broker(data_dir=tmp_path):
        line = one_line_error(run_server(tmp_path))
        assert str(tmp_path) in line
    with running_broker(data_dir=tmp_path):  # released on stop, taken again
        pass


# --- damaged definitions --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"kanin_definitions_version": 1, "queues": [', "not valid JSON"),
        (json.dumps({"kanin_definitions_version": 99}).encode(), "version 99"),
        (json.dumps([1, 2]).encode(), "not a definitions document"),
        (b"\xff\xfe garbage", "not valid JSON"),
        (json.dumps({"kanin_definitions_version": 1, "queues": [{}]}).encode(), "queues"),
    ],
)
def test_a_damaged_definitions_file_stops_start_up(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    (tmp_path / "definitions.json").write_bytes(content)
    line = one_line_error(run_server(tmp_path))
    assert str(tmp_path / "definitions.json") in line
    assert problem in line
    assert (tmp_path / "definitions.json").read_bytes() == content  # left for the operator


# --- options --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stats_file",
    ["no-such-dir/stats.json", "a-file/stats.json"],
)
def test_an_unwritable_stats_file_stops_start_up(tmp_path: Path, stats_file: str) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    path = tmp_path / stats_file
    line = one_line_error(run_server(tmp_path / "data", "--stats-file", str(path)))
    assert "--stats-file" in line
    assert str(path) in line


def test_a_bad_bind_address_stops_start_up(tmp_path: Path) -> None:
    result = run_kanin(
        "server", "--port", "0", "--bind", "no-such-host.invalid", "--data-dir", str(tmp_path)
    )
    line = one_line_error(result)
    assert "--bind" in line
    assert "no-such-host.invalid" in line


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--queue-memory-mb", "-1"),
        ("--queue-memory-mb", "nan"),
        ("--queue-memory-mb", "inf"),
        ("--segment-mb", "0"),
        ("--segment-mb", "-3"),
        ("--memory-high-watermark-mb", "0"),
        ("--memory-high-watermark-mb", "nan"),
        ("--heartbeat", "-5"),
        ("--port", "-1"),
        ("--port", "70000"),
    ],
)
def test_an_out_of_range_number_is_a_one_line_error(
    tmp_path: Path, option: str, value: str
) -> None:
    result = run_kanin("server", "--data-dir", str(tmp_path), option, value)
    line = one_line_error(result)
    assert option in line
    assert value in line
    assert not any(tmp_path.iterdir())  # refused before touching the data directory


def test_an_unknown_server_option_prints_the_server_usage() -> None:
    result = run_kanin("server", "--bogus")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("usage: kanin server")
    assert "--bogus" in result.stderr
