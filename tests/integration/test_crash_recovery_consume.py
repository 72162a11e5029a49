"""kill -9 under push consumers, beside test_crash_recovery.py's basic.get consumer.

A real `kanin server` process takes confirmed persistent publishes (delivery mode 2, a durable
queue, rich properties and headers) while a basic.consume consumer with a prefetch window
acks in transactions, several deliveries per tx.commit. Each round SIGKILLs the process at a
random moment and restarts it on the same data directory. After every restart:
- every confirmed message is either acked-and-committed before the kill, or in the queue now;
  never both, never twice;
- what is in the queue has the body, properties and headers it was published with;
- a message the consumer had been given comes back with redelivered=true;
- acks whose tx.commit-ok never arrived are uncertain: such a message may come back or not.
Failures seen inside the client threads are collected and asserted, never swallowed.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import AMQPError

from helpers import start_kanin

pytestmark = pytest.mark.kanin_only

QUEUE = "crash-consume-q"
ROUNDS = 8
TIME_BUDGET_S = 50.0  # the whole test; pytest's own timeout is 60 s


def body_of(message_id: int) -> bytes:
    size = (message_id * 7919) % 3000
    return b"%08d|" % message_id + hashlib.sha256(b"%d" % message_id).digest() * (size // 32)


def properties_of(message_id: int) -> pika.BasicProperties:
    return pika.BasicProperties(
        delivery_mode=2,
        content_type="application/x-kanin-test",
        message_id=f"m-{message_id}",
        correlation_id=f"c-{message_id % 97}",
        headers={
            "id": message_id,
            "digest": hashlib.sha256(body_of(message_id)).hexdigest(),
            "tags": ["crash", message_id % 5],
            "nested": {"n": message_id, "flag": message_id % 2 == 0},
        },
    )


def id_of(properties: pika.BasicProperties) -> int | None:
    value = (properties.headers or {}).get("id")
    return value if isinstance(value, int) else None


def damage(message_id: int | None, properties: pika.BasicProperties, body: bytes) -> str | None:
    """What differs from what was published under this id, or None."""
    if message_id is None:
        return f"no id header: {properties.headers!r}"
    sent = properties_of(message_id)
    for name in ("delivery_mode", "content_type", "message_id", "correlation_id", "headers"):
        if getattr(properties, name) != getattr(sent, name):
            return f"{name}: {getattr(properties, name)!r} != {getattr(sent, name)!r}"
    if body != body_of(message_id):
        return f"body of {len(body)} bytes differs"
    return None


PUBLISHERS = 2  # publisher p sends ids p, p + 2, p + 4, ... in that order


@dataclass
class Ledger:
    next_ids: list[int] = field(default_factory=lambda: list(range(PUBLISHERS)))
    confirmed: set[int] = field(default_factory=set)
    committed: set[int] = field(default_factory=set)  # acked, and tx.commit-ok arrived
    uncertain: set[int] = field(default_factory=set)  # acked, commit-ok lost in the kill
    delivered: set[int] = field(default_factory=set)  # given to a consumer at some point
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


# -- the broker process ------------------------------------------------------------------------


def connect(port: int) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1", port, connection_attempts=1, socket_timeout=5, heartbeat=0
        )
    )


# -- clients ---------------------------------------------------------------------------------------


def publish(port: int, ledger: Ledger, stop: threading.Event, publisher: int) -> None:
    try:
        connection = connect(port)
        channel = connection.channel()
        channel.confirm_delivery()
        while not stop.is_set():
            with ledger.lock:
                message_id = ledger.next_ids[publisher]
                ledger.next_ids[publisher] += PUBLISHERS
            channel.basic_publish("", QUEUE, body_of(message_id), properties_of(message_id))
            with ledger.lock:  # basic_publish returned: the broker's basic.ack arrived
                ledger.confirmed.add(message_id)
    except (AMQPError, OSError):
        return  # killed under us: what was not confirmed, was not
    except Exception as exc:
        ledger.problems.append(f"publisher: {exc!r}")


def consume(port: int, ledger: Ledger, stop: threading.Event, rng: random.Random) -> None:
    batch: list[tuple[int, int]] = []  # (delivery tag, id) received, not yet acked
    try:
        connection = connect(port)
        channel = connection.channel()
        channel.basic_qos(prefetch_count=rng.choice([1, 10, 50]))
        channel.tx_select()
        per_commit = rng.randint(1, 12)
        for method, properties, body in channel.consume(QUEUE, inactivity_timeout=0.05):
            if stop.is_set():
                break
            if method is None:
                if batch:
                    commit(channel, batch, ledger)
                continue
            message_id = id_of(properties)
            problem = damage(message_id, properties, body)
            with ledger.lock:
                if message_id is None or problem is not None:
                    ledger.problems.append(f"delivery of {message_id}: {problem}")
                    continue
                if message_id in ledger.committed:
                    ledger.problems.append(f"{message_id} delivered after its ack was committed")
                ledger.delivered.add(message_id)
            batch.append((method.delivery_tag, message_id))
            if len(batch) >= per_commit:
                commit(channel, batch, ledger)
    except (AMQPError, OSError):
        return
    except Exception as exc:
        ledger.problems.append(f"consumer: {exc!r}")


def commit(channel: BlockingChannel, batch: list[tuple[int, int]], ledger: Ledger) -> None:
    ids = [message_id for _, message_id in batch]
    with ledger.lock:
        ledger.uncertain.update(ids)
    channel.basic_ack(batch[-1][0], multiple=True)
    channel.tx_commit()  # returns on tx.commit-ok: the acks are durable
    with ledger.lock:
        ledger.uncertain.difference_update(ids)
        ledger.committed.update(ids)
    batch.clear()


# -- checking after a restart ------------------------------------------------------------------


def check_and_settle(port: int, ledger: Ledger) -> int:
    """Check the queue against the ledger, then ack everything in it; returns its depth."""
    connection = connect(port)
    channel = connection.channel()
    channel.queue_declare(QUEUE, durable=True)  # it survived: this is a no-op
    channel.tx_select()
    present: list[int] = []
    while True:
        method, properties, body = channel.basic_get(QUEUE)
        if method is None:
            break
        message_id = id_of(properties)
        problem = damage(message_id, properties, body)
        assert message_id is not None, problem
        assert problem is None, f"message {message_id} came back damaged: {problem}"
        if message_id in ledger.delivered:
            assert method.redelivered, f"{message_id} was delivered before the kill"
        present.append(message_id)
    assert len(present) == len(set(present)), "a message is in the queue twice"
    back = set(present) & ledger.committed
    assert not back, f"messages whose ack was committed came back: {sorted(back)[:20]}"
    lost = ledger.confirmed - ledger.committed - ledger.uncertain - set(present)
    assert not lost, f"confirmed messages lost: {sorted(lost)[:20]}"
    for publisher in range(PUBLISHERS):
        sent = [i for i in present if i % PUBLISHERS == publisher]
        assert sent == sorted(sent), f"publisher {publisher}'s messages are out of order"
    channel.basic_ack(0, multiple=True)
    channel.tx_commit()
    ledger.committed.update(present)
    ledger.uncertain.difference_update(present)
    connection.close()
    return len(present)


def test_sigkill_under_push_consumers_with_transactional_acks(tmp_path: Path) -> None:
    seed = int(os.environ.get("KANIN_CRASH_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    began = time.monotonic()
    ledger = Ledger()
    data_dir = tmp_path / "data"
    process, port = start_kanin(data_dir)
    depths: list[int] = []
    try:
        setup = connect(port)
        setup.channel().queue_declare(QUEUE, durable=True)
        setup.close()
        for round_ in range(ROUNDS):
            stop = threading.Event()
            workers = [
                *(
                    threading.Thread(target=publish, args=(port, ledger, stop, publisher))
                    for publisher in range(PUBLISHERS)
                ),
                threading.Thread(target=consume, args=(port, ledger, stop, rng)),
            ]
            for worker in workers:
                worker.start()
            time.sleep(rng.uniform(0.1, 0.9))
            os.kill(process.pid, signal.SIGKILL)  # only the process this test started
            process.wait(timeout=10)
            stop.set()
            for worker in workers:
                worker.join(timeout=10)
                assert not worker.is_alive(), "a client thread hung after the kill"
            assert not ledger.problems, f"seed {seed}, round {round_}: {ledger.problems[:5]}"
            process, port = start_kanin(data_dir)
            try:
                depths.append(check_and_settle(port, ledger))
            except AssertionError as exc:
                raise AssertionError(f"seed {seed}, round {round_}: {exc}") from None
            assert time.monotonic() - began < TIME_BUDGET_S, "too slow to finish in time"
        # The rounds meant something: messages were confirmed, consumed and left behind.
        assert len(ledger.confirmed) > 200, len(ledger.confirmed)
        assert len(ledger.delivered) > 50, len(ledger.delivered)
        assert sum(depths) > 0, depths
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
