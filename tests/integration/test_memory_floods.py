"""Floods against a real `kanin server` process with a low memory watermark: whatever the
flood, publishers are blocked, the broker stays up, its resident memory stays near the
watermark, and every confirmed message can be consumed afterwards.

The watermark is the broker's resident memory at start plus HEADROOM. The four floods:
(a) big header tables with empty bodies, (b) many empty messages, (c) a consumer that
stops reading its socket while a publisher fills its queue, and (d) many channels each
holding an unfinished large body. Each is bounded in bytes and time; the clients are raw
sockets (a sender thread that blocks once the broker stops reading, and a reader that
counts confirms and deliveries), so nothing waits on a reply the broker is withholding.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pamqp import body, commands, frame, header

from helpers import start_kanin
from rawamqp import RawClient

# A flood ends as soon as the alarm has held a second; on a busy machine reaching the
# watermark may take most of FLOOD_SECONDS.
pytestmark = [pytest.mark.kanin_only, pytest.mark.slow, pytest.mark.timeout(240)]

MiB = 1024 * 1024
HEADROOM = 100 * MiB
# How far above the watermark the resident memory may be seen. The RSS is sampled every
# 100 ms and after every 4 MiB read, so a flood gets a few MB past it before the alarm;
# then each blocked connection may still have a read (256 KB) and its unparsed backlog
# in hand; bodies are copied once on the way in and out; and Python's allocator keeps
# more than it is asked for (arenas, fragmentation). 150 MB covers these with room to
# spare, while the floods below would each go several hundred MB past it unchecked.
MARGIN = 150 * MiB
FLOOD_SECONDS = 60.0  # a flood stops after this, alarm or not
AFTER_BLOCKED_SECONDS = 1.0  # and goes on this long after the alarm, to show it holds
QUEUE = "flood"
CAPABILITIES = {"connection.blocked": True, "authentication_failure_close": True}


# -- the broker and its resident memory --------------------------------------------------------


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def baseline_rss(tmp_path_factory: pytest.TempPathFactory) -> int:
    """The resident memory of an idle broker just started."""
    process, _ = start_kanin(tmp_path_factory.mktemp("baseline"))
    try:
        time.sleep(0.5)
        return rss_bytes(process.pid)
    finally:
        stop(process)


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
    process.wait()


class Broker:
    def __init__(self, process: subprocess.Popen[str], port: int, watermark: int) -> None:
        self.process = process
        self.port = port
        self.watermark = watermark
        self.peak_rss = 0
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            try:
                self.peak_rss = max(self.peak_rss, rss_bytes(self.process.pid))
            except (OSError, AssertionError):
                return  # the process is gone; the test says so

    def close(self) -> None:
        self._done.set()
        self._sampler.join()
        stop(self.process)


@pytest.fixture
def broker(tmp_path: Path, baseline_rss: int) -> Iterator[Broker]:
    watermark = baseline_rss + HEADROOM
    process, port = start_kanin(
        tmp_path, "--memory-high-watermark-mb", str(watermark / MiB), "--heartbeat", "0"
    )
    running = Broker(process, port, watermark)
    yield running
    running.close()


# -- raw clients ---------------------------------------------------------------------------------


def connect(port: int, channels: int = 1, confirms: bool = True, heartbeat: int = 0) -> RawClient:
    client = RawClient.connect("127.0.0.1", port)
    client.handshake(
        heartbeat=heartbeat,
        client_properties={"product": "flood", "capabilities": CAPABILITIES},
    )
    for number in range(1, channels + 1):
        client.open_channel(number)
    if confirms:
        client.rpc(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    return client


def declare_queue(port: int) -> None:
    with connect(port, confirms=False) as client:
        client.rpc(1, commands.Queue.Declare(queue=QUEUE), commands.Queue.DeclareOk)


def publish_frames(
    payload: bytes, properties: commands.Basic.Properties, channel: int = 1
) -> bytes:
    """One publish to the flood queue as it goes on the wire (bodies up to one frame)."""
    parts = [
        frame.marshal(commands.Basic.Publish(exchange="", routing_key=QUEUE), channel),
        frame.marshal(header.ContentHeader(0, len(payload), properties), channel),
    ]
    if payload:
        parts.append(frame.marshal(body.ContentBody(payload), channel))
    return b"".join(parts)


class Tally:
    """What a raw client heard: confirms, connection.blocked, deliveries (counted from the
    frame headers and method ids alone, so the reader keeps up with a fast broker)."""

    def __init__(self) -> None:
        self.confirmed = 0
        self.nacked = False
        self.blocked = False
        self.deliveries = 0
        self.closed_by_broker: tuple[int, int] | None = None  # (class id, method id)

    def on_method(self, payload: bytes) -> None:
        class_id, method_id = struct.unpack_from(">HH", payload)
        if (class_id, method_id) == (60, 80):  # basic.ack: delivery tag, multiple
            tag = struct.unpack_from(">Q", payload, 4)[0]
            self.confirmed = max(self.confirmed, tag)
        elif (class_id, method_id) == (60, 120):
            self.nacked = True
        elif (class_id, method_id) == (60, 60):
            self.deliveries += 1
        elif (class_id, method_id) == (10, 60):
            self.blocked = True
        elif (class_id, method_id) in ((10, 50), (20, 40)):
            self.closed_by_broker = (class_id, method_id)


class Reader:
    """Reads a raw client's socket on a thread, from a duplicate of its socket, until told
    to stop reading or the socket closes."""

    def __init__(self, client: RawClient) -> None:
        self.tally = Tally()
        self._sock = socket.socket(fileno=os.dup(client.sock.fileno()))
        self._sock.settimeout(0.05)
        self._stop = threading.Event()
        self._buffer = bytearray(client._buffer)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                chunk = self._sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            self._buffer += chunk
            self._scan()

    def _scan(self) -> None:
        buffer, offset = self._buffer, 0
        while len(buffer) - offset >= 7:
            kind, _channel, size = struct.unpack_from(">BHI", buffer, offset)
            end = offset + 7 + size + 1
            if end > len(buffer):
                break
            if kind == 1:
                self.tally.on_method(bytes(buffer[offset + 7 : offset + 11 + 13]))
            offset = end
        del buffer[:offset]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


class Sender:
    """Sends `chunk` over and over on a thread, up to `limit` bytes, until stopped. Once the
    broker stops reading, the send blocks: the socket is closed to end it."""

    def __init__(self, client: RawClient, chunk: bytes, limit: int) -> None:
        self.sent = 0
        self._client = client
        self._chunk = chunk
        self._limit = limit
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        client.sock.settimeout(FLOOD_SECONDS + 10)  # a duplicate is read meanwhile
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and self.sent < self._limit:
                self._client.sock.sendall(self._chunk)
                self.sent += len(self._chunk)
        except OSError:
            pass  # closed by stop(), or by the broker

    @property
    def finished(self) -> bool:
        return not self._thread.is_alive()

    def stop_sending(self) -> None:
        """Send no more once the send under way completes (the socket stays open)."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        self._client.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join()
        self._client.close()


def flood_until_blocked(sender: Sender, tally: Tally) -> None:
    """Let the flood run until the alarm has held for a while, it has sent all it had, or
    FLOOD_SECONDS; the test's assertions say which."""
    deadline = time.monotonic() + FLOOD_SECONDS
    blocked_at = None
    while time.monotonic() < deadline and not sender.finished:
        if tally.blocked and blocked_at is None:
            blocked_at = time.monotonic()
        if blocked_at is not None and time.monotonic() - blocked_at > AFTER_BLOCKED_SECONDS:
            return
        time.sleep(0.01)
    time.sleep(AFTER_BLOCKED_SECONDS)  # whatever was sent last has had time to land


# -- afterwards ------------------------------------------------------------------------------


def queue_depth(port: int) -> int:
    with connect(port, confirms=False) as client:
        ok = client.rpc(
            1, commands.Queue.Declare(queue=QUEUE, passive=True), commands.Queue.DeclareOk
        )
        return int(ok.message_count)


def wait_until(condition: Callable[[], bool], timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def consume_all(port: int) -> int:
    """Consume the flood queue without acks until it is empty; how many came."""
    client = connect(port, confirms=False)
    reader = Reader(client)
    client.send_method(1, commands.Basic.Consume(queue=QUEUE, no_ack=True))
    try:
        assert wait_until(lambda: queue_depth(port) == 0, 30, 0.2), "the queue did not drain"
        last = -1
        while last != reader.tally.deliveries:  # until the deliveries stop coming
            last = reader.tally.deliveries
            time.sleep(0.3)
        return reader.tally.deliveries
    finally:
        reader.stop()
        client.close()


def publish_one_confirmed(port: int) -> bool:
    """A fresh publisher gets a confirm: the alarm has cleared."""
    with connect(port) as client:
        client.publish(1, b"after", routing_key=QUEUE)
        return isinstance(client.read_frame(10)[1], commands.Basic.Ack)


def check_after(broker: Broker, tally: Tally) -> None:
    assert tally.blocked, "the publisher was never sent connection.blocked"
    assert broker.process.poll() is None, "the broker died"
    assert broker.peak_rss < broker.watermark + MARGIN, (
        f"resident memory reached {broker.peak_rss / MiB:.0f} MiB, watermark "
        f"{broker.watermark / MiB:.0f} MiB"
    )
    assert tally.closed_by_broker is None and not tally.nacked


# -- the floods ----------------------------------------------------------------------------


def flood_publishes(broker: Broker, one_publish: bytes, limit: int) -> None:
    """A confirmed flood of identical publishes; then all confirmed ones are consumed."""
    declare_queue(broker.port)
    publisher = connect(broker.port)
    reader = Reader(publisher)
    sender = Sender(publisher, one_publish * max(1, (1 * MiB) // len(one_publish)), limit)
    flood_until_blocked(sender, reader.tally)
    sender.stop()
    reader.stop()
    check_after(broker, reader.tally)
    assert reader.tally.confirmed > 0
    assert consume_all(broker.port) >= reader.tally.confirmed
    assert publish_one_confirmed(broker.port)


def test_big_header_tables_with_empty_bodies(broker: Broker) -> None:
    properties = commands.Basic.Properties(headers={"padding": "h" * 120_000})
    # 3,000 publishes are 360 MB of headers: without the alarm, far past the watermark.
    one = publish_frames(b"", properties)
    flood_publishes(broker, one, 3_000 * len(one))


def test_many_empty_messages(broker: Broker) -> None:
    one = publish_frames(b"", commands.Basic.Properties())
    # 1.5 million empty messages: about 500 MB held without the alarm.
    flood_publishes(broker, one, 1_500_000 * len(one))


def test_a_consumer_that_stops_reading_while_its_queue_fills(broker: Broker) -> None:
    declare_queue(broker.port)
    consumer = connect(broker.port, confirms=False)
    consumer.send_method(1, commands.Basic.Consume(queue=QUEUE, no_ack=True))
    consumer.expect(commands.Basic.ConsumeOk, 1)
    # The consumer reads nothing more until the flood is over, while its connection
    # keeps publishing, as a client whose reading thread is stuck while its other
    # threads go on: mandatory messages nothing routes, each coming back (basic.return,
    # with its body) into a write buffer it does not read.
    returned = frame.marshal(commands.Basic.Publish(routing_key="nowhere", mandatory=True), 1)
    returned += frame.marshal(header.ContentHeader(0, 60_000, commands.Basic.Properties()), 1)
    returned += frame.marshal(body.ContentBody(b"r" * 60_000), 1)
    returning = Sender(consumer, returned * 16, 300 * MiB)
    publisher = connect(broker.port)
    reader = Reader(publisher)
    one = publish_frames(b"b" * 60_000, commands.Basic.Properties())
    sender = Sender(publisher, one * 16, 300 * MiB)
    flood_until_blocked(sender, reader.tally)
    sender.stop()
    reader.stop()
    check_after(broker, reader.tally)
    returning.stop_sending()
    # Now the consumer reads: it gets what was written to it, then the rest of the queue.
    consumer_reader = Reader(consumer)
    try:
        assert wait_until(lambda: queue_depth(broker.port) == 0, 30, 0.2)
        last = -1
        while last != consumer_reader.tally.deliveries:
            last = consumer_reader.tally.deliveries
            time.sleep(0.3)
        assert consumer_reader.tally.deliveries >= reader.tally.confirmed > 0
    finally:
        consumer_reader.stop()
        returning.stop()
    assert publish_one_confirmed(broker.port)


def test_many_channels_each_holding_an_unfinished_body(broker: Broker) -> None:
    channels = 300
    # Heartbeats of 2 s: a blocked connection is not read, so the broker learns it has
    # gone only when a heartbeat it writes fails, or none has come for two intervals.
    publisher = connect(broker.port, channels=channels, confirms=False, heartbeat=2)
    reader = Reader(publisher)
    # Each channel announces a 64 MiB body, then gets one 128 KB body frame per round, for
    # eight rounds: 300 channels would hold 300 MiB unfinished; no message ever completes.
    announce = b"".join(
        frame.marshal(commands.Basic.Publish(exchange="", routing_key=QUEUE), number)
        + frame.marshal(header.ContentHeader(0, 64 * MiB, commands.Basic.Properties()), number)
        for number in range(1, channels + 1)
    )
    publisher.send_raw(announce)
    piece = b"p" * (128 * 1024 - 8)
    round_of_body = b"".join(
        frame.marshal(body.ContentBody(piece), number) for number in range(1, channels + 1)
    )
    sender = Sender(publisher, round_of_body, 8 * len(round_of_body))
    flood_until_blocked(sender, reader.tally)
    check_after(broker, reader.tally)
    sender.stop()  # the connection closes: its unfinished bodies go, and the alarm clears
    reader.stop()
    assert wait_until(lambda: publish_one_confirmed(broker.port), 20, 0.2)
