"""Acks and delivery marks of stored messages start no fsync round of their own: they ride
along with the next commit round, or are written (without an fsync) within 20 ms when
nothing else happens. Either way a crash of the broker process does not lose them: a
message acked a moment before kill -9 does not come back, and one delivered but not acked
comes back marked redelivered. (RabbitMQ does not sync acks either; what kanin adds is the
bound on how long an ack may wait in memory.)"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pika
import pytest

from helpers import start_kanin

pytestmark = pytest.mark.kanin_only

QUEUE = "lazy-acks"
MESSAGES = 40
ACKED = 30


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1, socket_timeout=5)
    )


def test_acked_stays_acked_and_delivered_comes_back_redelivered_after_kill_9(
    tmp_path: Path,
) -> None:
    process, port = start_kanin(tmp_path / "data")
    try:
        connection = connect(port)
        channel = connection.channel()
        channel.queue_declare(QUEUE, durable=True)
        channel.confirm_delivery()
        for number in range(MESSAGES):
            channel.basic_publish(
                "",
                QUEUE,
                b"%d" % number,
                pika.BasicProperties(delivery_mode=2),
            )
        # All confirmed: on disk. Now take them all, ack the first ACKED only.
        taken = []
        for _ in range(MESSAGES):
            method, _, body = channel.basic_get(QUEUE)
            assert method is not None
            taken.append((method.delivery_tag, body))
        channel.basic_ack(taken[ACKED - 1][0], multiple=True)
        # No other traffic: only the lazy write can put these acks and marks on disk.
        # A queue.declare round trip makes sure the broker has acted on the ack.
        channel.queue_declare(QUEUE, durable=True, passive=True)
        time.sleep(0.5)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        process, port = start_kanin(tmp_path / "data")
        connection = connect(port)
        channel = connection.channel()
        back = []
        while True:
            method, _, body = channel.basic_get(QUEUE, auto_ack=True)
            if method is None:
                break
            back.append((body, method.redelivered))
        connection.close()
        assert back == [(b"%d" % number, True) for number in range(ACKED, MESSAGES)]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
