"""What the broker logs about connections, as RabbitMQ logs it: who connected, who was
refused, why a connection or channel closed. And that no client can make it log a
traceback per frame (a bug's traceback is logged once, kanin/core/bugs.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest
from pamqp import commands
from pika.exceptions import ChannelClosedByBroker, ProbableAuthenticationError

from helpers import pika_params
from kanin.core import bugs, channel_methods
from rawamqp import RawClient, build_frame

pytestmark = pytest.mark.kanin_only  # kanin's own log, read in-process


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], list[str]]]:
    caplog.set_level(logging.INFO, logger="kanin")
    yield lambda: [record.getMessage() for record in caplog.records]


def wait_for(logs: Callable[[], list[str]], text: str) -> str:
    """The first log line containing `text`; polls a bounded number of times, since the
    broker logs on its own thread."""
    for _ in range(500):
        found = [line for line in logs() if text in line]
        if found:
            return found[0]
        time.sleep(0.01)
    raise AssertionError(f"no log line with {text!r} in {logs()}")


def test_open_and_client_close_are_logged(broker: Any, logs: Callable[[], list[str]]) -> None:
    connection = pika.BlockingConnection(pika_params(broker))
    host, port = connection._impl._transport._sock.getsockname()[:2]
    connection.close()
    me = f"{host}:{port} -> "
    assert wait_for(logs, "accepting AMQP connection").startswith(f"accepting AMQP connection {me}")
    assert wait_for(logs, "authenticated") == (
        f"connection {me}{broker.host}:{broker.port}: user 'guest' authenticated and granted "
        "access to vhost '/'"
    )
    assert wait_for(logs, "client closed it") == (
        f"closing AMQP connection {me}{broker.host}:{broker.port} (vhost '/', user 'guest'): "
        "client closed it"
    )


def test_failed_login_names_the_user_not_the_password(
    broker: Any, logs: Callable[[], list[str]]
) -> None:
    credentials = pika.PlainCredentials("guest", "s3cret-wrong")
    with pytest.raises(ProbableAuthenticationError):
        pika.BlockingConnection(pika_params(broker, credentials=credentials))
    line = wait_for(logs, "login refused")
    assert "'guest'" in line and "127.0.0.1:" in line
    assert not [text for text in logs() if "s3cret" in text]


def test_channel_and_connection_errors_are_logged_with_code_and_text(
    broker: Any, logs: Callable[[], list[str]]
) -> None:
    connection = pika.BlockingConnection(pika_params(broker))
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker):
        channel.queue_declare("missing", passive=True)
    connection.close()
    line = wait_for(logs, "channel error")
    assert line.endswith(", channel 1: 404 NOT_FOUND - no queue 'missing' in vhost '/'")
    with RawClient.connect(broker.host, broker.port) as client:
        client.handshake()
        client.send_raw(build_frame(9, 0, b""))
        client.expect_connection_close()
    line = wait_for(logs, "501 FRAME_ERROR")
    assert "(vhost '/', user 'guest'): 501 FRAME_ERROR - type 9" in line


def test_network_loss_is_logged(broker: Any, logs: Callable[[], list[str]]) -> None:
    with RawClient.connect(broker.host, broker.port) as client:
        client.handshake()
    line = wait_for(logs, "unexpectedly closed")
    assert line.endswith("(vhost '/', user 'guest'): client unexpectedly closed TCP connection")


def test_a_bug_logs_its_traceback_once_and_a_line_each_time(
    broker: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(channel: Any, method: Any) -> None:
        raise RuntimeError("simulated bug")

    monkeypatch.setitem(channel_methods.HANDLERS, commands.Basic.Qos, broken)
    monkeypatch.setattr(bugs, "_seen", set())
    caplog.set_level(logging.INFO, logger="kanin")
    for _ in range(3):
        with RawClient.connect(broker.host, broker.port) as client:
            client.handshake()
            client.open_channel(1)
            client.send_method(1, commands.Basic.Qos(prefetch_count=1))
            assert client.expect_connection_close().reply_code == 541
    errors = [r for r in caplog.records if r.name == "kanin.bugs"]
    assert len(errors) == 3
    assert all("RuntimeError: simulated bug" in r.getMessage() for r in errors)
    assert [r.exc_info is not None for r in errors] == [True, False, False]
