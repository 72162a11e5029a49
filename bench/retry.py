"""Poison messages and retries: kanin against RabbitMQ 3.10 on this machine, in one run.

    python bench/retry.py                      # about 2 minutes; writes bench/results/retry.md
    python bench/retry.py --messages 500 --out /tmp/retry.md   # a quick try

(p) Poison messages. A quorum queue with x-delivery-limit 3 and a dead-letter queue; N
    messages published with confirms; one consumer (prefetch 100) nacks every delivery with
    requeue, so each is delivered 4 times and then dead-lettered. Measured: the time until
    all N are in the dead-letter queue, and the broker's CPU per delivery. Same queues,
    same client on both brokers.
(r) Retry after a delay. N messages published at a steady rate (default 1,000 msg/s, so
    nothing queues up behind the consumer); each fails twice and then succeeds, with 200 ms
    between tries. kanin: one quorum queue with x-delayed-retry-min 200 and x-delayed-retry-max 200
    (a constant 200 ms), the consumer rejects with requeue. RabbitMQ 3.10 has no retry
    backoff, so it runs the usual pattern instead: the consumer rejects without requeue, the
    work queue dead-letters to a retry queue whose x-message-ttl is 200 ms, which
    dead-letters back to the work queue (two quorum queues). Measured: the time until all N
    succeeded, how long each retry actually waited (reject to redelivery, p50/p99/max), and
    the broker's CPU per delivery.

Every point runs once per repetition on each broker, alternating which goes first. The
client is pika (one connection, blocking), the same for both: rates here are as much the
client's as the brokers', the CPU columns are the brokers' own.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import harness
import pika
from harness import Kanin
from pika.adapters.blocking_connection import BlockingChannel

ROOT = Path(__file__).resolve().parent.parent
RABBITMQ_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"
LIMIT = 3  # (p): x-delivery-limit, so 4 deliveries per message
RETRY_MS = 200  # (r): the wait between tries
FAILURES = 2  # (r): tries that fail before the one that succeeds


def connect(uri: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(uri))


def fresh(channel: BlockingChannel, name: str, arguments: dict[str, Any]) -> None:
    channel.queue_delete(name)
    channel.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum", **arguments})


def publish(channel: BlockingChannel, queue: str, count: int) -> None:
    channel.confirm_delivery()
    properties = pika.BasicProperties(delivery_mode=2)
    for number in range(count):
        channel.basic_publish("", queue, b"%d" % number, properties)


def wait_count(channel: BlockingChannel, queue: str, want: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while channel.queue_declare(queue, passive=True).method.message_count < want:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{queue} did not reach {want} messages in {timeout_s} s")
        time.sleep(0.05)


def poison(uri: str, pid: int, messages: int) -> dict[str, Any]:
    connection = connect(uri)
    channel = connection.channel()
    fresh(channel, "bench.dead", {})
    dead_letters = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "bench.dead"}
    fresh(channel, "bench.poison", {"x-delivery-limit": LIMIT, **dead_letters})
    publish(channel, "bench.poison", messages)
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=100)
    deliveries = 0

    def on_message(ch: BlockingChannel, method: Any, _properties: Any, _body: bytes) -> None:
        nonlocal deliveries
        deliveries += 1
        ch.basic_nack(method.delivery_tag, requeue=True)

    cpu_before, started = harness.cpu_seconds(pid), time.monotonic()
    consumer.basic_consume("bench.poison", on_message)
    deadline = started + 600
    checker = connection.channel()
    while time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.05)
        if checker.queue_declare("bench.dead", passive=True).method.message_count >= messages:
            break
    elapsed = time.monotonic() - started
    cpu = harness.cpu_seconds(pid) - cpu_before
    connection.close()
    return {
        "deliveries": deliveries,
        "seconds": elapsed,
        "deliveries_per_s": deliveries / elapsed,
        "cpu_us_per_delivery": cpu / max(deliveries, 1) * 1e6,
    }


class RetryConsumer:
    """Fails each message FAILURES times, then acks it; records each retry's wait."""

    def __init__(self, requeue: bool) -> None:
        self.requeue = requeue  # kanin: reject with requeue; RabbitMQ: reject to the DLX
        self.tries: dict[bytes, int] = {}
        self.rejected_at: dict[bytes, float] = {}
        self.waits_ms: list[float] = []
        self.deliveries = 0
        self.done = 0

    def __call__(self, ch: BlockingChannel, method: Any, _properties: Any, body: bytes) -> None:
        now = time.monotonic()
        self.deliveries += 1
        if body in self.rejected_at:
            self.waits_ms.append((now - self.rejected_at.pop(body)) * 1000)
        tries = self.tries.get(body, 0) + 1
        self.tries[body] = tries
        if tries > FAILURES:
            ch.basic_ack(method.delivery_tag)
            self.done += 1
            return
        self.rejected_at[body] = time.monotonic()
        ch.basic_reject(method.delivery_tag, requeue=self.requeue)


def retry(uri: str, pid: int, messages: int, rate: float, kanin_backoff: bool) -> dict[str, Any]:
    connection = connect(uri)
    channel = connection.channel()
    if kanin_backoff:
        backoff = {"x-delayed-retry-min": RETRY_MS, "x-delayed-retry-max": RETRY_MS}
        fresh(channel, "bench.work", {"x-delayed-retry-type": "failed", **backoff})
    else:
        to_retry = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "bench.retry"}
        back = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "bench.work"}
        fresh(channel, "bench.work", to_retry)
        fresh(channel, "bench.retry", {"x-message-ttl": RETRY_MS, **back})
    channel.confirm_delivery()
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=100)
    handler = RetryConsumer(requeue=kanin_backoff)
    cpu_before, started = harness.cpu_seconds(pid), time.monotonic()
    consumer.basic_consume("bench.work", handler)
    deadline, published = started + 600, 0
    properties = pika.BasicProperties(delivery_mode=2)
    while handler.done < messages and time.monotonic() < deadline:
        while published < messages and time.monotonic() >= started + published / rate:
            channel.basic_publish("", "bench.work", b"%d" % published, properties)
            published += 1
        connection.process_data_events(time_limit=0.001)
    elapsed = time.monotonic() - started
    cpu = harness.cpu_seconds(pid) - cpu_before
    connection.close()
    waits = sorted(handler.waits_ms)
    return {
        "succeeded": handler.done,
        "seconds": elapsed,
        "deliveries_per_s": handler.deliveries / elapsed,
        "cpu_us_per_delivery": cpu / max(handler.deliveries, 1) * 1e6,
        "wait_p50_ms": statistics.median(waits) if waits else float("nan"),
        "wait_p99_ms": waits[int(len(waits) * 0.99) - 1] if waits else float("nan"),
        "wait_max_ms": waits[-1] if waits else float("nan"),
    }


def points(
    broker: str, uri: str, pid: int, args: argparse.Namespace
) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "p", poison(uri, pid, args.messages)
    yield "r", retry(uri, pid, args.messages, args.rate, broker == "kanin")


def run(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    harness.raise_fd_limit()
    started_rabbitmq = harness.ensure_rabbitmq()
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="kanin-bench-retry-") as work:
            kanin = Kanin(Path(work) / "data")
            kanin.start()
            try:
                brokers: dict[str, tuple[str, int]] = {
                    "kanin": (kanin.uri, kanin.pid),
                    "rabbitmq": (RABBITMQ_URI, harness.rabbitmq_pid()),
                }
                for rep in range(args.reps):
                    order = list(brokers) if rep % 2 == 0 else list(reversed(brokers))
                    for broker in order:
                        for name, result in points(broker, *brokers[broker], args):
                            result = {"broker": broker, "rep": rep, **result}
                            print(name, result, file=sys.stderr, flush=True)
                            results.setdefault(name, []).append(result)
            finally:
                kanin.stop()
    finally:
        if started_rabbitmq:
            harness.rabbitmqctl("stop")
    return results


def median_of(rows: list[dict[str, Any]], broker: str, key: str) -> float:
    return statistics.median(row[key] for row in rows if row["broker"] == broker)


def render(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    lines = [
        "# Poison messages and retries: kanin and RabbitMQ 3.10, one run",
        "",
        f"Command: `python bench/retry.py --messages {args.messages} --reps {args.reps} "
        f"--rate {args.rate:g}`",
        f"on {platform.node()} ({platform.machine()}, Python {platform.python_version()}),",
        f"RabbitMQ {harness.rabbitmq_version()}. Medians of {args.reps} repetitions;",
        "bench/retry.py's docstring says what each scenario does.",
        "",
        f"## (p) Poison messages: quorum queue, x-delivery-limit {LIMIT}, {args.messages} messages",
        "",
        "| broker | deliveries | seconds | deliveries/s | broker CPU µs/delivery |",
        "|---|---|---|---|---|",
    ]
    for broker in ("kanin", "rabbitmq"):
        rows = results["p"]
        lines.append(
            f"| {broker} | {median_of(rows, broker, 'deliveries'):.0f} "
            f"| {median_of(rows, broker, 'seconds'):.2f} "
            f"| {median_of(rows, broker, 'deliveries_per_s'):,.0f} "
            f"| {median_of(rows, broker, 'cpu_us_per_delivery'):.0f} |"
        )
    lines += [
        "",
        f"## (r) Retry after {RETRY_MS} ms, {FAILURES} failures then success, "
        f"{args.messages} messages at {args.rate:g} msg/s",
        "",
        "kanin: x-delayed-retry-min/max on the queue; RabbitMQ: TTL + dead-letter retry queue.",
        "",
        "| broker | seconds | deliveries/s | broker CPU µs/delivery "
        "| retry wait p50 ms | p99 ms | max ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for broker in ("kanin", "rabbitmq"):
        rows = results["r"]
        lines.append(
            f"| {broker} | {median_of(rows, broker, 'seconds'):.2f} "
            f"| {median_of(rows, broker, 'deliveries_per_s'):,.0f} "
            f"| {median_of(rows, broker, 'cpu_us_per_delivery'):.0f} "
            f"| {median_of(rows, broker, 'wait_p50_ms'):.1f} "
            f"| {median_of(rows, broker, 'wait_p99_ms'):.1f} "
            f"| {median_of(rows, broker, 'wait_max_ms'):.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rate", type=float, default=1000.0, help="msg/s published in (r)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "retry.md")
    args = parser.parse_args()
    report = render(run(args), args)
    args.out.write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
