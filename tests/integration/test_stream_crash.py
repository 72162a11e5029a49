"""kill -9 under a stream's publisher and reader: what was confirmed or read stays, at its
offset, and no offset is ever given to another message.

A real `kanin server` process; one publisher publishes numbered messages with confirms,
one at a time (so message n is the stream's n-th, and a confirmed one is at offset n);
one reader reads from the first offset, recording (offset, body). Each round kills the
server with SIGKILL at a random moment and starts it again on the same data directory,
then reads the whole stream and checks that every confirmed message is at its offset,
that everything any reader saw is still there unchanged, and that offsets are in order.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pika
import pytest

from helpers import start_kanin

pytestmark = pytest.mark.kanin_only

STREAM = "crash-stream"
ROUNDS = 3


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1, socket_timeout=5)
    )


def publish_until_killed(port: int, start: int, confirmed: list[int]) -> None:
    try:
        channel = connect(port).channel()
        channel.confirm_delivery()
        n = start
        while True:
            channel.basic_publish("", STREAM, b"%d" % n)
            confirmed.append(n)
            n += 1
    except Exception:
        return  # the broker was killed


def read_until_killed(port: int, seen: dict[int, bytes]) -> None:
    try:
        connection = connect(port)
        channel = connection.channel()
        channel.basic_qos(prefetch_count=200)

        def on_message(ch: object, method: object, properties: object, body: bytes) -> None:
            seen[properties.headers["x-stream-offset"]] = body  # type: ignore[attr-defined]
            channel.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]

        channel.basic_consume(STREAM, on_message, arguments={"x-stream-offset": "first"})
        channel.start_consuming()
    except Exception:
        return


def read_all(port: int) -> dict[int, bytes]:
    connection = connect(port)
    channel = connection.channel()
    count = channel.queue_declare(STREAM, passive=True).method.message_count
    channel.basic_qos(prefetch_count=500)
    found: dict[int, bytes] = {}

    def on_message(ch: object, method: object, properties: object, body: bytes) -> None:
        found[properties.headers["x-stream-offset"]] = body  # type: ignore[attr-defined]
        channel.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]

    channel.basic_consume(STREAM, on_message, arguments={"x-stream-offset": "first"})
    deadline = time.monotonic() + 20
    while len(found) < count and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)
    connection.close()
    return found


def test_kill_9_keeps_every_confirmed_message_at_its_offset(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    process, port = start_kanin(data_dir)
    try:
        setup = connect(port)
        setup.channel().queue_declare(STREAM, durable=True, arguments={"x-queue-type": "stream"})
        setup.close()
        confirmed: list[int] = []
        seen: dict[int, bytes] = {}
        for _round in range(ROUNDS):
            start = len(read_all(port))
            threads = [
                threading.Thread(target=publish_until_killed, args=(port, start, confirmed)),
                threading.Thread(target=read_until_killed, args=(port, seen)),
            ]
            for thread in threads:
                thread.start()
            time.sleep(random.uniform(0.5, 1.5))
            process.kill()  # SIGKILL, the process this test started
            process.wait()
            for thread in threads:
                thread.join(10)
            process, port = start_kanin(data_dir)
            found = read_all(port)
            assert sorted(found) == list(range(len(found))), "offsets from 0, none missing"
            for n in confirmed:
                assert found.get(n) == b"%d" % n, f"confirmed message {n} not at its offset"
            for offset, body in seen.items():
                assert found.get(offset) == body, f"offset {offset} changed after a restart"
        assert len(confirmed) > 100, "too little load to mean anything"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
