"""RabbitMQ's seven pika tutorials, run unchanged against the broker under test.

Each test drives the tutorial programs in tests/compat/tutorials/ and checks what that
tutorial sets out to show: who receives which messages. Consumers run on their own threads,
each with its own BlockingConnection, and every wait is bounded.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from tutorials import (
    t1_hello,
    t2_work_queues,
    t3_publish_subscribe,
    t4_routing,
    t5_topics,
    t6_rpc,
    t7_publisher_confirms,
)
from tutorials._common import Listener, connect

pytestmark = pytest.mark.timeout(30)

WAIT_S = 10.0


class Background:
    """Run a tutorial program on its own thread; join() re-raises whatever it raised."""

    def __init__(self, target: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        self.error: BaseException | None = None

        def run() -> None:
            try:
                target(*args, **kwargs)
            except BaseException as exc:
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True, name=target.__name__)
        self.thread.start()

    def join(self, timeout: float = WAIT_S) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.thread.name} still running after {timeout}s"
        if self.error is not None:
            raise self.error


def wait_ready(*listeners: Listener, jobs: tuple[Background, ...] = ()) -> None:
    deadline = time.monotonic() + WAIT_S
    for listener in listeners:
        while not listener.ready.wait(0.05):
            for job in jobs:
                if job.error is not None:
                    raise job.error
            assert time.monotonic() < deadline, "consumer never became ready"


def wait_until(predicate: Callable[[], bool], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def message_count(url: str, queue: str) -> int:
    connection = connect(url)
    try:
        return int(connection.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        connection.close()


def queue_exists(url: str, queue: str) -> bool:
    connection = connect(url)
    try:
        connection.channel().queue_declare(queue, passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code == 404
        return False
    finally:
        if connection.is_open:
            connection.close()
    return True


@pytest.fixture
def cleanup(broker: Any) -> Iterator[Callable[..., None]]:
    """Register queues (and exchanges, with exchange=True) to delete after the test."""
    queues: list[str] = []
    exchanges: list[str] = []

    def register(name: str, exchange: bool = False) -> None:
        (exchanges if exchange else queues).append(name)

    yield register
    connection = connect(broker.url)
    try:
        for name in queues:
            connection.channel().queue_delete(name)
        for name in exchanges:
            connection.channel().exchange_delete(name)
    finally:
        connection.close()


# --- 1 "Hello World!" ---------------------------------------------------------------------


def test_hello_world_send_then_receive(broker: Any, unique: Any, cleanup: Any) -> None:
    queue = unique("hello")
    cleanup(queue)
    t1_hello.send(broker.url, queue)
    listener = Listener(expect=1)
    t1_hello.receive(broker.url, listener, queue, timeout=WAIT_S)
    assert listener.messages == ["Hello World!"]
    assert message_count(broker.url, queue) == 0


def test_hello_world_receiver_started_first(broker: Any, unique: Any, cleanup: Any) -> None:
    queue = unique("hello")
    cleanup(queue)
    listener = Listener(expect=2)
    job = Background(t1_hello.receive, broker.url, listener, queue, timeout=WAIT_S)
    wait_ready(listener, jobs=(job,))
    t1_hello.send(broker.url, queue)
    t1_hello.send(broker.url, queue, body="Hello again!")
    job.join()
    assert listener.messages == ["Hello World!", "Hello again!"]


# --- 2 Work queues ------------------------------------------------------------------------


def run_workers(
    url: str, queue: str, count: int, **options: Any
) -> tuple[list[Listener], list[Background]]:
    listeners = [Listener() for _ in range(count)]
    jobs = [
        Background(
            t2_work_queues.worker, url, listener, f"W{i + 1}", queue, timeout=WAIT_S, **options
        )
        for i, listener in enumerate(listeners)
    ]
    wait_ready(*listeners, jobs=tuple(jobs))
    return listeners, jobs


def stop_workers(listeners: list[Listener], jobs: list[Background]) -> None:
    for listener in listeners:
        listener.stop.set()
    for job in jobs:
        job.join()


def test_work_queue_is_durable_and_tasks_persistent(broker: Any, unique: Any, cleanup: Any) -> None:
    queue = unique("task_queue")
    cleanup(queue)
    t2_work_queues.new_task(broker.url, ["Hello..."], queue)
    # Redeclaring the durable queue as non-durable is refused, as the tutorial warns.
    connection = connect(broker.url)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        connection.channel().queue_declare(queue)
    assert refused.value.reply_code == 406
    connection.close()
    listener = Listener(expect=1)
    t2_work_queues.worker(broker.url, listener, "W1", queue, dot_seconds=0.01, timeout=WAIT_S)
    [task] = listener.messages
    assert (task.body, task.delivery_mode, task.redelivered) == ("Hello...", 2, False)
    assert message_count(broker.url, queue) == 0


def test_work_queue_two_workers_share_tasks(broker: Any, unique: Any, cleanup: Any) -> None:
    queue = unique("task_queue")
    cleanup(queue)
    listeners, jobs = run_workers(broker.url, queue, 2, dot_seconds=0.05)
    tasks = [f"Task {i}." for i in range(1, 9)]
    t2_work_queues.new_task(broker.url, tasks, queue)
    wait_until(lambda: sum(len(lst.messages) for lst in listeners) >= len(tasks))
    time.sleep(0.1)  # both workers ack their last task
    stop_workers(listeners, jobs)
    done = [task.body for listener in listeners for task in listener.messages]
    assert sorted(done) == sorted(tasks)  # every task exactly once
    assert [len(listener.messages) for listener in listeners] == [4, 4]
    assert message_count(broker.url, queue) == 0


def test_work_queue_fair_dispatch_skips_busy_worker(broker: Any, unique: Any, cleanup: Any) -> None:
    """With prefetch_count=1 a worker busy on a long task gets nothing until it acks."""
    queue = unique("task_queue")
    cleanup(queue)
    listeners, jobs = run_workers(broker.url, queue, 2, dot_seconds=0.1)
    short = [f"quick {i}" for i in range(8)]
    t2_work_queues.new_task(broker.url, ["slow........", *short], queue)
    wait_until(lambda: sum(len(lst.messages) for lst in listeners) >= 9)
    stop_workers(listeners, jobs)
    by_worker = sorted(([t.body for t in lst.messages] for lst in listeners), key=len)
    assert by_worker == [["slow........"], short]


def test_work_queue_without_prefetch_dispatches_round_robin(
    broker: Any, unique: Any, cleanup: Any
) -> None:
    """Without basic.qos the broker hands out tasks in turn, however busy a worker is."""
    queue = unique("task_queue")
    cleanup(queue)
    listeners, jobs = run_workers(broker.url, queue, 2, dot_seconds=0.1, prefetch_count=None)
    short = [f"quick {i}" for i in range(7)]
    t2_work_queues.new_task(broker.url, ["slow.....", *short], queue)
    wait_until(lambda: sum(len(lst.messages) for lst in listeners) >= 8)
    stop_workers(listeners, jobs)
    counts = Counter(t.worker for lst in listeners for t in lst.messages)
    assert sorted(counts.values()) == [4, 4]
    tasks = [t for lst in listeners for t in lst.messages]
    slow_worker = next(t.worker for t in tasks if t.body.startswith("slow"))
    assert counts[slow_worker] == 4  # busy on the slow task, yet still handed its share


def test_work_queue_unacked_task_goes_to_another_worker(
    broker: Any, unique: Any, cleanup: Any
) -> None:
    queue = unique("task_queue")
    cleanup(queue)
    doomed = Listener()
    job = Background(
        t2_work_queues.worker, broker.url, doomed, "W1", queue, die_before_ack=True, timeout=WAIT_S
    )
    wait_ready(doomed, jobs=(job,))
    t2_work_queues.new_task(broker.url, ["Important task.."], queue)
    job.join()  # W1 took the task and dropped its connection without acking
    assert [t.body for t in doomed.messages] == ["Important task.."]
    survivor = Listener(expect=1)
    t2_work_queues.worker(broker.url, survivor, "W2", queue, dot_seconds=0.01, timeout=WAIT_S)
    [task] = survivor.messages
    assert (task.body, task.redelivered, task.delivery_mode) == ("Important task..", True, 2)
    assert message_count(broker.url, queue) == 0


# --- 3 Publish/Subscribe ------------------------------------------------------------------


def test_publish_subscribe_each_subscriber_gets_everything(
    broker: Any, unique: Any, cleanup: Any
) -> None:
    exchange = unique("logs")
    cleanup(exchange, exchange=True)
    subscribers = [Listener(), Listener()]
    jobs = tuple(
        Background(t3_publish_subscribe.receive_logs, broker.url, s, exchange, timeout=WAIT_S)
        for s in subscribers
    )
    wait_ready(*subscribers, jobs=jobs)
    logs = [f"info: log line {i}" for i in range(5)]
    t3_publish_subscribe.emit_log(broker.url, logs, exchange)
    wait_until(lambda: all(len(s.messages) >= len(logs) for s in subscribers))
    time.sleep(0.05)
    for s in subscribers:
        s.stop.set()
    for job in jobs:
        job.join()
    assert [s.messages for s in subscribers] == [logs, logs]
    names = [s.queue for s in subscribers]
    assert all(name.startswith("amq.gen-") for name in names), names
    assert names[0] != names[1]
    # Exclusive queues go away with their connection.
    assert not queue_exists(broker.url, names[0])
    assert not queue_exists(broker.url, names[1])


def test_publish_subscribe_logs_without_subscribers_are_lost(
    broker: Any, unique: Any, cleanup: Any
) -> None:
    exchange = unique("logs")
    cleanup(exchange, exchange=True)
    t3_publish_subscribe.emit_log(broker.url, ["nobody hears this"], exchange)
    subscriber = Listener(expect=1)
    job = Background(
        t3_publish_subscribe.receive_logs, broker.url, subscriber, exchange, timeout=WAIT_S
    )
    wait_ready(subscriber, jobs=(job,))
    t3_publish_subscribe.emit_log(broker.url, ["someone hears this"], exchange)
    job.join()
    assert subscriber.messages == ["someone hears this"]


# --- 4 Routing ----------------------------------------------------------------------------


def test_routing_by_severity(broker: Any, unique: Any, cleanup: Any) -> None:
    exchange = unique("direct_logs")
    cleanup(exchange, exchange=True)
    errors_only = Listener()
    everything_but_debug = Listener()
    jobs = (
        Background(
            t4_routing.receive_logs_direct,
            broker.url,
            errors_only,
            ["error"],
            exchange,
            timeout=WAIT_S,
        ),
        Background(
            t4_routing.receive_logs_direct,
            broker.url,
            everything_but_debug,
            ["info", "warning", "error"],
            exchange,
            timeout=WAIT_S,
        ),
    )
    wait_ready(errors_only, everything_but_debug, jobs=jobs)
    logs = [
        ("debug", "cache miss"),
        ("info", "started"),
        ("warning", "disk 80% full"),
        ("error", "Run. Run. Or it will explode."),
    ]
    t4_routing.emit_log_direct(broker.url, logs, exchange)
    # The error line was published last on the same channel: once it is in, all is in.
    listeners = (errors_only, everything_but_debug)
    wait_until(lambda: all(logs[-1] in lst.messages for lst in listeners))
    for listener in listeners:
        listener.stop.set()
    for job in jobs:
        job.join()
    assert errors_only.messages == [logs[3]]
    assert everything_but_debug.messages == logs[1:]


# --- 5 Topics -----------------------------------------------------------------------------


def run_topic_receivers(
    url: str, exchange: str, bindings: dict[str, list[str]], logs: list[tuple[str, str]]
) -> dict[str, list[str]]:
    """Subscribe one receiver per entry, emit `logs` (whose last entry all of them match), and
    return the routing keys each receiver got, in order."""
    listeners = {name: Listener() for name in bindings}
    jobs = tuple(
        Background(
            t5_topics.receive_logs_topic, url, listeners[name], keys, exchange, timeout=WAIT_S
        )
        for name, keys in bindings.items()
    )
    wait_ready(*listeners.values(), jobs=jobs)
    t5_topics.emit_log_topic(url, logs, exchange)
    wait_until(lambda: all(logs[-1] in lst.messages for lst in listeners.values()))
    for listener in listeners.values():
        listener.stop.set()
    for job in jobs:
        job.join()
    return {name: [key for key, _ in lst.messages] for name, lst in listeners.items()}


def test_topics_facility_and_severity(broker: Any, unique: Any, cleanup: Any) -> None:
    exchange = unique("topic_logs")
    cleanup(exchange, exchange=True)
    keys = [
        "kern.info",
        "cron.critical",
        "kern.critical.extra",
        "critical",
        "cron.info",
        "kern",
        "",
        "kern.critical",
    ]
    got = run_topic_receivers(
        broker.url,
        exchange,
        {
            "all": ["#"],
            "kern": ["kern.*"],
            "critical": ["*.critical"],
            "both": ["kern.*", "*.critical"],
        },
        [(key, f"A {key or 'keyless'} message") for key in keys],
    )
    assert got == {
        "all": keys,
        "kern": ["kern.info", "kern.critical"],
        "critical": ["cron.critical", "kern.critical"],
        # Matching two bindings of one queue still delivers one copy.
        "both": ["kern.info", "cron.critical", "kern.critical"],
    }


def test_topics_rabbit_examples(broker: Any, unique: Any, cleanup: Any) -> None:
    exchange = unique("topic_logs")
    cleanup(exchange, exchange=True)
    keys = [
        "lazy.orange.elephant",
        "quick.orange.fox",
        "lazy.brown.fox",
        "lazy.pink.rabbit",
        "quick.brown.fox",
        "orange",
        "quick.orange.new.rabbit",
        "lazy.orange.new.rabbit",
        "lazy",
        "quick.orange.rabbit",
    ]
    got = run_topic_receivers(
        broker.url,
        exchange,
        {"Q1": ["*.orange.*"], "Q2": ["*.*.rabbit", "lazy.#"]},
        [(key, f"message for {key}") for key in keys],
    )
    assert got == {
        "Q1": ["lazy.orange.elephant", "quick.orange.fox", "quick.orange.rabbit"],
        "Q2": [
            "lazy.orange.elephant",
            "lazy.brown.fox",
            "lazy.pink.rabbit",
            "lazy.orange.new.rabbit",
            "lazy",
            "quick.orange.rabbit",
        ],
    }


# --- 6 RPC --------------------------------------------------------------------------------


@pytest.mark.parametrize("reply_mode", ["direct", "queue"])
def test_rpc_fibonacci(broker: Any, unique: Any, cleanup: Any, reply_mode: Any) -> None:
    queue = unique("rpc_queue")
    cleanup(queue)
    server = Listener()
    job = Background(t6_rpc.rpc_server, broker.url, server, queue, timeout=WAIT_S)
    wait_ready(server, jobs=(job,))
    client = t6_rpc.FibonacciRpcClient(broker.url, queue, reply_mode=reply_mode)
    try:
        numbers = [0, 1, 2, 10, 20, 5]
        answers = [client.call(n, timeout=WAIT_S) for n in numbers]
        assert client.stray_replies == []
    finally:
        client.close()
        server.stop.set()
        job.join()
    assert answers == [0, 1, 1, 55, 6765, 5]
    assert [r.n for r in server.messages] == numbers
    assert len({r.correlation_id for r in server.messages}) == len(numbers)
    reply_tos = {r.reply_to for r in server.messages}
    assert len(reply_tos) == 1  # one reply address per client connection
    [reply_to] = reply_tos
    if reply_mode == "direct":
        # The broker swaps the pseudo-queue name for a routable address of this consumer.
        assert reply_to.startswith("amq.rabbitmq.reply-to.")
    else:
        assert reply_to.startswith("amq.gen-")


def test_rpc_two_clients_get_their_own_answers(broker: Any, unique: Any, cleanup: Any) -> None:
    queue = unique("rpc_queue")
    cleanup(queue)
    server = Listener()
    job = Background(t6_rpc.rpc_server, broker.url, server, queue, timeout=WAIT_S)
    wait_ready(server, jobs=(job,))
    clients = [t6_rpc.FibonacciRpcClient(broker.url, queue) for _ in range(2)]
    try:
        answers = [
            (clients[0].call(n, timeout=WAIT_S), clients[1].call(n + 1, timeout=WAIT_S))
            for n in range(3, 9)
        ]
        assert [c.stray_replies for c in clients] == [[], []]
    finally:
        for client in clients:
            client.close()
        server.stop.set()
        job.join()
    assert answers == [(t6_rpc.fib(n), t6_rpc.fib(n + 1)) for n in range(3, 9)]
    assert len({r.reply_to for r in server.messages}) == 2


# --- 7 Publisher confirms -----------------------------------------------------------------

MESSAGE_COUNT = 2000


def _individually(url: str, queue: str, messages: list[str]) -> Any:
    return t7_publisher_confirms.publish_individually(url, queue, messages)


def _in_batches(url: str, queue: str, messages: list[str]) -> Any:
    return t7_publisher_confirms.publish_in_batches(url, queue, messages, batch_size=100)


def _asynchronously(url: str, queue: str, messages: list[str]) -> Any:
    return t7_publisher_confirms.handle_confirms_asynchronously(url, queue, messages)


@pytest.mark.parametrize(
    "strategy",
    [_individually, _in_batches, _asynchronously],
    ids=["individually", "in_batches", "asynchronously"],
)
def test_publisher_confirms(
    broker: Any,
    unique: Any,
    cleanup: Any,
    strategy: Callable[[str, str, list[str]], t7_publisher_confirms.ConfirmReport],
) -> None:
    queue = unique("confirms")
    cleanup(queue)
    messages = [f"message {i}" for i in range(MESSAGE_COUNT)]
    report = strategy(broker.url, queue, messages)
    assert report.error is None
    assert not report.timed_out
    assert report.published == MESSAGE_COUNT
    assert report.acked == MESSAGE_COUNT
    assert report.nacked == []
    if strategy is _in_batches:
        assert report.max_outstanding <= 100
    assert message_count(broker.url, queue) == MESSAGE_COUNT
    assert t7_publisher_confirms.drain(broker.url, queue, MESSAGE_COUNT) == messages
    assert message_count(broker.url, queue) == 0
