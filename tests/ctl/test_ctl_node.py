"""`kanin ctl` health checks, definitions export and import, connection settings from
the environment, and its errors: server down, wrong password, bad usage, bad files."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from ctl_run import Ctl, bare_ctl
from kanin.cli.ctl import build_parser, connection

pytestmark = pytest.mark.kanin_only

EX_USAGE, EX_DATAERR, EX_NOINPUT, EX_UNAVAILABLE = 64, 65, 66, 69
EX_CANTCREAT, EX_TEMPFAIL, EX_NOPERM = 73, 75, 77


def closed_port_url() -> str:
    """A URL nobody listens on: a port just bound and released."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_ping_status_await_startup_and_check_alarms(ctl: Ctl, kanin: Any) -> None:
    assert ctl("ping").out == "Ping succeeded\n"
    assert ctl("ping", "--json").json["ok"] is True
    status = ctl("status")
    assert status.code == 0
    assert status.out.startswith("Status of node kanin@")
    assert f"amqp 127.0.0.1:{kanin.port}" in status.out
    assert "Alarms: none" in status.out
    document = ctl("status", "--json").json
    assert document["overview"]["product_name"] == "kanin"
    assert document["node"]["running"] is True
    assert ctl("await_startup").out == f"The broker at {ctl.url} is up.\n"
    assert ctl("check_alarms").out == "No alarms in effect.\n"


def test_check_alarms_and_status_while_an_alarm_is_on(ctl: Ctl, kanin: Any) -> None:
    alarms = kanin.server.broker.alarms
    kanin.call(lambda: alarms.set("disk", True))
    try:
        ran = ctl("check_alarms")
        status = ctl("status")
    finally:
        kanin.call(lambda: alarms.set("disk", False))
    assert ran.code == EX_UNAVAILABLE
    assert ran.err == (
        "kanin ctl: check_alarms: GET /api/health/checks/alarms: 503 Service Unavailable: "
        "resource alarm(s) in effect\n"
    )
    assert "Alarms: disk_free_alarm" in status.out
    assert ctl("check_alarms").code == 0


def test_a_server_that_is_down_is_named_by_its_url() -> None:
    url = closed_port_url()
    ran = Ctl(url)("list_queues")
    assert ran.code == EX_UNAVAILABLE
    assert ran.err == (
        f"kanin ctl: list_queues: cannot reach {url}: connection refused "
        "(is kanin running, with its management API on that port?)\n"
    )
    waited = Ctl(url)("await_startup", "--timeout", "0.5")
    assert waited.code == EX_TEMPFAIL
    assert f"cannot reach {url}" in waited.err
    assert "gave up after 0.5 s" in waited.err


def test_a_wrong_password_is_an_authentication_error(ctl: Ctl) -> None:
    ran = ctl.as_user("guest", "wrong")("list_queues")
    assert ran.code == EX_NOPERM
    assert f"{ctl.url} refused user 'guest': Login failed" in ran.err
    assert ctl.as_user("guest", "wrong")("await_startup").code == EX_NOPERM  # no waiting


def test_connection_settings_come_from_the_environment(ctl: Ctl) -> None:
    ctl("add_user", "erin", "pw")
    ctl("set_user_tags", "erin", "administrator")
    env = {"KANIN_CTL_URL": ctl.url, "KANIN_CTL_USERNAME": "erin", "KANIN_CTL_PASSWORD": "pw"}
    assert bare_ctl("ping", **env).code == 0
    # Options win over the environment, before or after the command's name.
    assert bare_ctl("--password", "bad", "ping", **env).code == EX_NOPERM
    assert bare_ctl("ping", "--password", "bad", **env).code == EX_NOPERM


def test_the_default_url_is_rabbitmqs_port_on_localhost() -> None:
    api = connection(build_parser().parse_args(["ping"]), {})
    assert (api.url, api.username, api.password) == ("http://127.0.0.1:15672", "guest", "guest")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "the following arguments are required: command"),
        (("frobnicate",), "invalid choice: 'frobnicate'"),
        (("add_user", "only-a-name"), "the following arguments are required: password"),
        (("--url", "ftp://x", "ping"), "--url 'ftp://x': not an http:// or https:// URL"),
    ],
)
def test_usage_errors_exit_64(args: tuple[str, ...], message: str) -> None:
    ran = bare_ctl(*args)
    assert ran.code == EX_USAGE
    assert message in ran.err


def test_definitions_are_exported_and_imported(ctl: Ctl, tmp_path: Path) -> None:
    ctl("declare_queue", "orders")
    ctl("add_user", "frank", "pw")
    path = tmp_path / "definitions.json"
    exported = ctl("export_definitions", str(path))
    assert exported.out == f"Exported definitions to {path}.\n"
    document = json.loads(path.read_text())
    assert [queue["name"] for queue in document["queues"]] == ["orders"]
    assert json.loads(ctl("export_definitions", "-").out) == document
    ctl("delete_queue", "orders")
    ctl("delete_user", "frank")
    assert ctl("import_definitions", str(path)).out == f"Imported definitions from {path}.\n"
    assert ctl("list_queues", "--no-table-headers").rows == [["orders", "0"]]
    assert ctl.as_user("frank", "pw")("list_queues").code == EX_NOPERM  # no tags: no API
    assert "frank" in ctl("list_users").out
    ctl("delete_queue", "orders")
    assert ctl("import_definitions", "-", stdin=path.read_text()).code == 0
    assert ctl("list_queues", "--no-table-headers").rows == [["orders", "0"]]


@pytest.mark.parametrize(
    ("content", "code", "message"),
    [
        (None, EX_NOINPUT, "cannot read {path}: No such file or directory"),
        ("{not json", EX_DATAERR, "{path}: not JSON: "),
        ("[]", EX_DATAERR, "{path}: not a definitions document"),
        ('{"queues": [{"name": 5}]}', EX_DATAERR, "import_definitions: POST /api/definitions: 400"),
    ],
)
def test_a_bad_definitions_file_is_refused(
    ctl: Ctl, tmp_path: Path, content: str | None, code: int, message: str
) -> None:
    path = tmp_path / "definitions.json"
    if content is not None:
        path.write_text(content)
    ran = ctl("import_definitions", str(path))
    assert ran.code == code
    assert message.format(path=path) in ran.err


def test_export_to_a_path_that_cannot_be_written(ctl: Ctl, tmp_path: Path) -> None:
    target = tmp_path / "no-such-dir" / "definitions.json"
    ran = ctl("export_definitions", str(target))
    assert ran.code == EX_CANTCREAT
    assert f"cannot write {target}: No such file or directory" in ran.err


def test_a_server_that_never_answers_is_a_timeout() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        # Nobody answers: the request times out.
        ran = Ctl(url)("ping", "--timeout", "0.3")
    assert ran.code == EX_TEMPFAIL
    assert ran.err == f"kanin ctl: ping: {url}: no answer within 0.3 s\n"
