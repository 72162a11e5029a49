"""Helpers the integration tests share: connecting, waiting with a deadline, draining queues,
reading a broker's channel.close, and a few raw-client steps.

Import them like rawamqp (tests/ is on sys.path): `from helpers import channel_error, drain`.
Fixtures (`conn`, `raw`) are in tests/integration/conftest.py.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import unquote, urlparse

import amqp
import pika
import pytest
from pamqp import commands
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.exceptions import ChannelClosedByBroker

from rawamqp import RawClient


class Endpoint(Protocol):
    host: str
    port: int
    url: str


Unique = Callable[[str], str]
BrokerFactory = Callable[..., AbstractContextManager[Any]]


# --- connecting -------------------------------------------------------------------------------


def pika_connect(url: str) -> BlockingConnection:
    """A pika connection that fails fast: one attempt, 5 s socket and blocked timeouts."""
    params = pika.URLParameters(url)
    params.connection_attempts = 1
    params.socket_timeout = 5
    params.blocked_connection_timeout = 5
    return pika.BlockingConnection(params)


def pika_params(endpoint: Any, **overrides: Any) -> pika.ConnectionParameters:
    """guest/guest on the endpoint's host and port, one attempt, 5 s timeouts; overridable."""
    options: dict[str, Any] = {
        "host": endpoint.host,
        "port": endpoint.port,
        "credentials": pika.PlainCredentials("guest", "guest"),
        "connection_attempts": 1,
        "socket_timeout": 5,
        "blocked_connection_timeout": 5,
    }
    options.update(overrides)
    return pika.ConnectionParameters(**options)


def amqp_connect(url: str) -> amqp.Connection:
    """A py-amqp connection: unlike pika and aio-pika it sends consumer tags unchanged."""
    u = urlparse(url)
    conn = amqp.Connection(
        host=f"{u.hostname}:{u.port or 5672}",
        userid=unquote(u.username or "guest"),
        password=unquote(u.password or "guest"),
        virtual_host=unquote(u.path[1:]) or "/",
        connect_timeout=5,
    )
    conn.connect()
    return conn


def raw_client(endpoint: Any) -> RawClient:
    """A raw client connected to the endpoint, before the protocol header."""
    return RawClient.connect(endpoint.host, endpoint.port)


def delete_afterwards(
    broker: Any, delete: Callable[[BlockingChannel, str], object]
) -> Iterator[list[str]]:
    """Body of a fixture: yields a list the test fills with names; on an external broker each
    name is then deleted with `delete(channel, name)`, errors ignored."""
    names: list[str] = []
    yield names
    if broker.embedded is not None or not names:
        return  # a fresh embedded broker per test needs no cleanup
    with suppress(Exception):
        connection = pika.BlockingConnection(pika.URLParameters(broker.url))
        channel = connection.channel()
        for name in names:
            delete(channel, name)
        connection.close()


# --- waiting ----------------------------------------------------------------------------------


def wait_for(
    conn: BlockingConnection,
    cond: Callable[[], bool],
    timeout: float = 5.0,
    message: str = "timed out waiting",
) -> None:
    """Dispatch pika events until cond() holds; fail with `message` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        left = deadline - time.monotonic()
        assert left > 0, message
        conn.process_data_events(time_limit=min(left, 0.05))


def settle(conn: BlockingConnection, seconds: float = 0.3) -> None:
    """Process events for a fixed time, to show that nothing more arrives."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        conn.process_data_events(time_limit=min(left, 0.05))


def process_events_until(
    conn: BlockingConnection, done: Callable[[], bool], timeout: float = 5.0
) -> None:
    """Dispatch pika events 0.1 s at a time until done() or the timeout; never fails by itself:
    the caller's next assertion says what did not arrive."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)


# --- consuming and publishing with pika -------------------------------------------------------

STREAM: dict[str, Any] = {"x-queue-type": "stream"}


def publish_numbered(
    conn: BlockingConnection, queue: str, count: int, start: int = 0, size: int = 0
) -> None:
    """`count` messages with bodies b"m<n>" (padded with dots to `size`), confirmed: on
    the queue when this returns."""
    channel = conn.channel()
    channel.confirm_delivery()
    for n in range(start, start + count):
        channel.basic_publish("", queue, (b"m%d" % n).ljust(size, b"."))
    channel.close()


@dataclass
class Got:
    consumer: str
    tag: int
    body: str
    redelivered: bool


def collect(into: list[Got], name: str) -> Callable[..., None]:
    """An on_message callback that records each delivery as a Got from consumer `name`."""

    def on_message(_ch: BlockingChannel, method: Any, _props: Any, body: bytes) -> None:
        into.append(Got(name, method.delivery_tag, body.decode(), method.redelivered))

    return on_message


def publish(ch: BlockingChannel, queue: str, *bodies: str) -> None:
    """Publish each body to the queue through the default exchange."""
    for body in bodies:
        ch.basic_publish("", queue, body.encode())


def declare(ch: BlockingChannel, name: str) -> str:
    """An exclusive queue of that name."""
    return ch.queue_declare(name, exclusive=True).method.queue


def private_queue(channel: BlockingChannel) -> str:
    """An exclusive, server-named queue."""
    queue = channel.queue_declare("", exclusive=True).method.queue
    assert isinstance(queue, str)
    return queue


def confirming(conn: BlockingConnection) -> BlockingChannel:
    """A channel in confirm mode: once basic_publish returns, routing is done."""
    channel = conn.channel()
    channel.confirm_delivery()
    return channel


def wait_ready(conn: BlockingConnection, ch: BlockingChannel, queue: str, n: int) -> None:
    """Wait until the queue holds n ready messages (requeueing after a close is asynchronous)."""
    wait_for(conn, lambda: ch.queue_declare(queue, passive=True).method.message_count == n)


def drain(channel: BlockingChannel, queue: str) -> list[bytes]:
    """Empty the queue with basic.get (auto-ack) and return the bodies in order."""
    bodies: list[bytes] = []
    while True:
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body)


def drain_redelivered(ch: BlockingChannel, queue: str) -> list[tuple[str, bool]]:
    """Empty the queue with basic.get (auto-ack): (body, redelivered) of each message in order."""
    out = []
    while True:
        method, _props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append((body.decode(), method.redelivered))


# --- errors -----------------------------------------------------------------------------------


def channel_error(
    conn: BlockingConnection, action: Callable[[BlockingChannel], Any]
) -> tuple[int, str]:
    """Run action on a fresh channel; it must end in channel.close from the broker."""
    channel = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        action(channel)
    assert not channel.is_open
    assert conn.is_open, "a channel error must not close the connection"
    return info.value.reply_code, info.value.reply_text


def assert_closed_for_unknown_tag(ch: BlockingChannel, queue: str, tag: int) -> None:
    """The broker has closed ch with 406 for an unknown delivery tag: the next call shows it."""
    with pytest.raises(ChannelClosedByBroker) as err:
        ch.queue_declare(queue, passive=True)
    assert (err.value.reply_code, err.value.reply_text) == (
        406,
        f"PRECONDITION_FAILED - unknown delivery tag {tag}",
    )


# --- raw client -------------------------------------------------------------------------------


def declare_queue(raw: RawClient, channel: int, name: str = "", **arguments: Any) -> str:
    """An exclusive queue (gone when the test's connection closes)."""
    raw.send_method(
        channel, commands.Queue.Declare(queue=name, exclusive=True, arguments=arguments or None)
    )
    return raw.expect(commands.Queue.DeclareOk, channel).queue


def confirm_channel(raw: RawClient, channel: int) -> None:
    """Open the channel and put it in confirm mode."""
    raw.open_channel(channel)
    raw.send_method(channel, commands.Confirm.Select())
    raw.expect(commands.Confirm.SelectOk, channel)


def transactional_channel(raw: RawClient, channel: int) -> None:
    """Open the channel and make it transactional."""
    raw.open_channel(channel)
    raw.send_method(channel, commands.Tx.Select())
    raw.expect(commands.Tx.SelectOk, channel)


def channel_close(raw: RawClient, channel: int) -> tuple[int, str, int, int]:
    """The server's channel.close on that channel as (code, text, class id, method id)."""
    close = raw.expect(commands.Channel.Close, channel)
    return close.reply_code, close.reply_text, close.class_id, close.method_id


def assert_silent(raw: RawClient, timeout: float = 0.3) -> None:
    """Nothing arrives within the timeout."""
    with pytest.raises(TimeoutError):
        raw.read_frame(timeout)


S = TypeVar("S", bound="AmqpSession")


class AmqpSession:
    """One pika connection with a confirm-mode channel that remembers what it declared, so a
    run against a shared external broker can delete it afterwards. Test files subclass it
    with their own publish and read helpers."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: BlockingConnection = pika.BlockingConnection(pika.URLParameters(url))
        self.ch: BlockingChannel = self.conn.channel()
        self.ch.confirm_delivery()
        self.queues: list[str] = []
        self.exchanges: list[str] = []

    def queue(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        self.ch.queue_declare(name, arguments=arguments)
        self.queues.append(name)
        return name

    def exchange(self, name: str, kind: str = "direct") -> str:
        self.ch.exchange_declare(name, kind)
        self.exchanges.append(name)
        return name

    def bodies(self, queue: str) -> list[bytes]:
        """basic.get (auto-ack) until the queue answers get-empty."""
        return drain(self.ch, queue)

    def count(self, queue: str) -> int:
        return int(self.ch.queue_declare(queue, passive=True).method.message_count)

    def wait_count(self, queue: str, expected: int, timeout: float = 2.0) -> None:
        """Poll message_count: acks, rejects and requeues have no reply to wait for."""
        deadline = time.monotonic() + timeout
        while (count := self.count(queue)) != expected:
            assert time.monotonic() < deadline, f"{queue} holds {count}, not {expected}"
            time.sleep(0.01)

    def close(self, cleanup: bool) -> None:
        if cleanup:
            with suppress(Exception):
                channel = self.conn.channel()
                for name in self.queues:
                    channel.queue_delete(name)
                for name in self.exchanges:
                    channel.exchange_delete(name)
        with suppress(Exception):
            self.conn.close()


def open_session(cls: type[S], broker: Any) -> Iterator[S]:
    """Body of an `amqp` fixture: a session, cleaned up only on an external broker."""
    session = cls(broker.url)
    yield session
    session.close(cleanup=broker.embedded is None)


def server_command(data_dir: Path, *extra: str) -> list[str]:
    """`kanin server` on 127.0.0.1, AMQP on port 0, without the management API and metrics
    (brokers side by side, and RabbitMQ, would all want 15672 and 15692); `extra` comes
    last, so a flag given there wins over these."""
    return [
        *(sys.executable, "-m", "kanin", "server", "--port", "0", "--bind", "127.0.0.1"),
        *("--mgmt-port", "0", "--prometheus-port", "0", "--data-dir", str(data_dir)),
        *extra,
    ]


def run_server(data_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`kanin server` (server_command) run to its end: for options and files it refuses."""
    return subprocess.run(
        server_command(data_dir, *extra),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The process exited 2 with exactly one line on stderr, no traceback; that line."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def start_kanin(
    data_dir: Path, *extra: str, log: list[str] | None = None
) -> tuple[subprocess.Popen[str], int]:
    """A real `kanin server` process on 127.0.0.1, port 0; returns it and its AMQP port.

    stderr is read until the listening line, then drained on a thread so a chatty broker
    never blocks on a full pipe; every line goes to `log` if one is given. The caller ends
    the process (by its PID) when done.
    """
    return start_server_process(server_command(data_dir, *extra), log=log)


def start_kanin_on_free_port(
    data_dir: Path, option: str, *extra: str, log: list[str] | None = None
) -> tuple[subprocess.Popen[str], int, int]:
    """start_kanin with `option` (--mgmt-port, --prometheus-port: 0 turns those off) set to
    a free port, once the broker logs that it listens there; returns the process, its AMQP
    port and that port. The port is picked here and freed for kanin, so another process
    may take it meanwhile (the compiled run goes on beside the suite): kanin then stops,
    saying so, and it starts again on another."""
    for _attempt in range(3):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            free = int(probe.getsockname()[1])
        lines: list[str] = [] if log is None else log
        del lines[:]
        process, port = start_kanin(data_dir, *extra, option, str(free), log=lines)
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            if any(f"port {free}" in line for line in list(lines)):
                return process, port, free
            time.sleep(0.05)
        if process.poll() is None:
            process.kill()
            process.wait()
            raise AssertionError(f"kanin did not listen on {option} {free}:\n" + "".join(lines))
    raise AssertionError(f"kanin stopped at every try ({option}):\n" + "".join(lines))


def start_server_process(
    command: list[str],
    log: list[str] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> tuple[subprocess.Popen[str], int]:
    """start_kanin's work for any command line (settings from a config file or the
    environment): the process and the AMQP port it reports listening on 127.0.0.1."""
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    assert process.stderr is not None
    lines = log if log is not None else []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        lines.append(line)
        match = re.search(r"listening for AMQP on 127\.0\.0\.1 port (\d+)", line)
        if match:
            threading.Thread(target=_drain_stderr, args=(process, log), daemon=True).start()
            return process, int(match.group(1))
        if not line and process.poll() is not None:
            break
    process.kill()
    process.wait()
    raise AssertionError("kanin server did not report its port:\n" + "".join(lines))


def _drain_stderr(process: subprocess.Popen[str], log: list[str] | None) -> None:
    assert process.stderr is not None
    for line in process.stderr:
        if log is not None:
            log.append(line)
