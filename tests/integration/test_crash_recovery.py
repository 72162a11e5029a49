"""kill -9 at random moments: every confirmed message survives, exactly once.

A real `kanin server` process runs under a publisher with confirms (persistent
messages, durable queue) and a consumer that acks inside transactions: a tx.commit-ok
means the broker has durably processed those acks. Each round kills the process with
SIGKILL at a random moment and restarts it on the same data directory, then checks:
- every confirmed message is either acked-and-committed earlier or in the queue now;
- nothing whose ack was committed comes back, and nothing is in the queue twice;
- bodies and headers are intact.
Acks whose commit-ok never arrived are uncertain: such a message may or may not return.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pika
import pytest

from helpers import start_kanin

pytestmark = pytest.mark.kanin_only

QUEUE = "crash-q"
ROUNDS = 8


def body_of(message_id: int) -> bytes:
    return b"%08d:" % message_id + bytes([message_id % 251]) * (message_id % 700)


@dataclass
class Ledger:
    next_id: int = 0
    confirmed: set[int] = field(default_factory=set)
    committed: set[int] = field(default_factory=set)  # acked, and the commit-ok arrived
    uncertain: set[int] = field(default_factory=set)  # acked, commit-ok lost in the crash
    lock: threading.Lock = field(default_factory=threading.Lock)
    problems: list[str] = field(default_factory=list)  # seen inside the client threads


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1, socket_timeout=5)
    )


def publish_until_killed(port: int, ledger: Ledger, stop: threading.Event) -> None:
    try:
        connection = connect(port)
        channel = connection.channel()
        channel.confirm_delivery()
        while not stop.is_set():
            with ledger.lock:
                message_id = ledger.next_id
                ledger.next_id += 1
            channel.basic_publish(
                "",
                QUEUE,
                body_of(message_id),
                pika.BasicProperties(delivery_mode=2, headers={"id": message_id}),
            )
            with ledger.lock:
                ledger.confirmed.add(message_id)
    except (pika.exceptions.AMQPError, OSError):
        return  # the broker was killed under us: whatever was not confirmed, was not


def consume_until_killed(port: int, ledger: Ledger, stop: threading.Event) -> None:
    try:
        connection = connect(port)
        channel = connection.channel()
        channel.tx_select()
        while not stop.is_set():
            method, properties, body = channel.basic_get(QUEUE)
            if method is None:
                time.sleep(0.005)
                continue
            message_id = properties.headers["id"]
            if body != body_of(message_id):
                ledger.problems.append(f"message {message_id} damaged in flight")
            with ledger.lock:
                ledger.uncertain.add(message_id)
            channel.basic_ack(method.delivery_tag)
            channel.tx_commit()
            with ledger.lock:
                ledger.uncertain.discard(message_id)
                ledger.committed.add(message_id)
    except (pika.exceptions.AMQPError, OSError):
        return  # killed mid-transaction: that ack stays uncertain


def check_after_restart(port: int, ledger: Ledger) -> None:
    connection = connect(port)
    channel = connection.channel()
    channel.queue_declare(QUEUE, durable=True)
    present: list[int] = []
    while True:
        method, properties, body = channel.basic_get(QUEUE)
        if method is None:
            break
        message_id = properties.headers["id"]
        assert body == body_of(message_id), f"message {message_id} damaged"
        assert properties.delivery_mode == 2
        present.append(message_id)
    assert len(present) == len(set(present)), "a message is in the queue twice"
    came_back = set(present) & ledger.committed
    assert not came_back, f"messages whose ack was committed came back: {sorted(came_back)}"
    missing = ledger.confirmed - ledger.committed - ledger.uncertain - set(present)
    assert not missing, f"confirmed messages lost: {sorted(missing)[:20]}"
    # Settle what is there now, so each round starts from a known queue.
    channel.tx_select()
    channel.basic_ack(0, multiple=True)
    channel.tx_commit()
    ledger.committed |= set(present)
    ledger.uncertain -= set(present)
    connection.close()


def test_sigkill_at_random_moments_loses_no_confirmed_message(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("KANIN_CRASH_SEED", "20261122")))
    data_dir = tmp_path / "data"
    ledger = Ledger()
    process, port = start_kanin(data_dir)
    try:
        setup = connect(port)
        setup.channel().queue_declare(QUEUE, durable=True)
        setup.close()
        for _round in range(ROUNDS):
            stop = threading.Event()
            workers = [
                threading.Thread(target=publish_until_killed, args=(port, ledger, stop)),
                threading.Thread(target=consume_until_killed, args=(port, ledger, stop)),
            ]
            for worker in workers:
                worker.start()
            time.sleep(rng.uniform(0.2, 1.2))
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
            stop.set()
            for worker in workers:
                worker.join(timeout=15)
                assert not worker.is_alive()
            assert not ledger.problems, ledger.problems
            process, port = start_kanin(data_dir)
            check_after_restart(port, ledger)
        assert len(ledger.confirmed) > 100, "too little load to mean anything"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
