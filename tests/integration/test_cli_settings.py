"""`kanin server` configured by a kanin.toml and the environment, as a real process that
pika and `kanin ctl` talk to; and the first administrator of a new data directory."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pika
import pytest
from pika.exceptions import ProbableAuthenticationError

from ctl_run import Ctl
from helpers import start_server_process

pytestmark = pytest.mark.kanin_only

SERVER = [sys.executable, "-m", "kanin", "server"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def clean_environment(**extra: str) -> dict[str, str]:
    """The test run's environment without KANIN_* settings, plus `extra`."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("KANIN_")}
    return {**kept, **extra}


@contextmanager
def server(*args: str, cwd: Path, **env: str) -> Iterator[int]:
    """`kanin server ARGS` in `cwd`; yields its AMQP port, stops it with SIGTERM."""
    process, port = start_server_process([*SERVER, *args], env=clean_environment(**env), cwd=cwd)
    try:
        yield port
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0


def login(port: int, user: str, password: str) -> None:
    credentials = pika.PlainCredentials(user, password)
    params = pika.ConnectionParameters("127.0.0.1", port, credentials=credentials)
    with pika.BlockingConnection(params) as connection:
        channel = connection.channel()
        channel.queue_declare("settings-check")
        channel.basic_publish("", "settings-check", b"hello")
        assert channel.basic_get("settings-check", auto_ack=True)[2] == b"hello"


def test_kanin_toml_environment_and_command_line_together(tmp_path: Path) -> None:
    mgmt = free_port()
    (tmp_path / "kanin.toml").write_text(
        "# read from the current directory: no --config needed\n"
        f'bind = "127.0.0.1"\nport = 0\nmgmt_port = {mgmt}\nprometheus_port = 0\n'
        'data_dir = "data"\nlog_level = "warning"\n'
        'default_user = "from-file"\ndefault_pass = "file-secret"\n'
    )
    environment = {"KANIN_DEFAULT_USER": "admin", "KANIN_DEFAULT_PASS": "s3cret"}
    # --log-level info beats the file's warning: else no "listening" line would be logged,
    # and start_server_process would not learn the port.
    with server("--log-level", "info", cwd=tmp_path, **environment) as port:
        assert (tmp_path / "data" / "definitions.json").exists()
        login(port, "admin", "s3cret")  # the environment beat the file
        with pytest.raises(ProbableAuthenticationError):
            login(port, "from-file", "file-secret")
        with pytest.raises(ProbableAuthenticationError):
            login(port, "guest", "guest")  # no guest: admin is the first user instead
        ctl = Ctl(f"http://127.0.0.1:{mgmt}", "admin", "s3cret")
        assert ctl("list_users", "--json").json == [{"user": "admin", "tags": ["administrator"]}]
        assert ctl("list_permissions", "--no-table-headers").rows == [["admin", ".*", ".*", ".*"]]


def test_the_first_user_is_made_only_in_a_new_data_directory(tmp_path: Path) -> None:
    config = tmp_path / "settings.toml"
    listen = 'bind = "127.0.0.1"\nport = 0\nmgmt_port = 0\nprometheus_port = 0\n'
    config.write_text(f'{listen}data_dir = "{tmp_path / "data"}"\n')
    with server("--config", str(config), cwd=tmp_path, KANIN_DEFAULT_PASS="first") as port:
        login(port, "guest", "first")  # a password alone is guest's, as on RabbitMQ
    later = {"KANIN_CONFIG": str(config), "KANIN_DEFAULT_USER": "late", "KANIN_DEFAULT_PASS": "x"}
    with server(cwd=tmp_path, **later) as port:
        login(port, "guest", "first")  # the stored users are kept
        with pytest.raises(ProbableAuthenticationError):
            login(port, "late", "x")


@pytest.mark.parametrize(
    ("toml", "env", "message"),
    [
        ("heartbeat = 'often'\n", {}, "--heartbeat from heartbeat in {file}: wants an integer"),
        ("mgmt-port = 1\n", {}, "{file}: unknown key 'mgmt-port' (did you mean 'mgmt_port'?)"),
        (
            "",
            {"KANIN_PORT": "70000"},
            "--port must be 0..65535, got 70000 (from environment variable KANIN_PORT)",
        ),
        ("", {"KANIN_DEFAULT_USER": "admin"}, "--default-user needs a password too"),
    ],
)
def test_a_bad_setting_stops_start_up_with_one_line(
    tmp_path: Path, toml: str, env: dict[str, str], message: str
) -> None:
    config = tmp_path / "kanin.toml"
    config.write_text(toml)
    result = subprocess.run(
        [*SERVER, "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        env=clean_environment(**env),
    )
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("kanin: ")
    assert message.format(file="kanin.toml") in line
    assert not (tmp_path / "data").exists()  # refused before touching anything
