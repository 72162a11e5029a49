"""Broker CPU per delivery with one consumer and with thousands on the same queue.

    PYTHONPATH=src python bench/many_consumers.py                  # 1 and 10,000 consumers
    PYTHONPATH=src python bench/many_consumers.py --source DIR     # measure DIR/src/kanin instead

Each point starts a fresh `kanin server` (from a copy of the sources, see harness) and, over
real sockets (pika):
1. registers CONSUMERS - 1 *holders* on one queue, one channel, prefetch 1, that never ack;
2. publishes one message per holder and waits until each holds it: they are all full now;
3. adds one *worker* (its own connection, prefetch 100) that acks every delivery;
4. measures: publishes MESSAGES messages, waits until the worker has acked them all, and
   reads the server's CPU time (utime + stime, /proc/PID/stat) before and after.
*CPU per delivery* = CPU used in 4 / MESSAGES: receiving the publish, choosing the consumer,
the delivery and its ack. Meanwhile a *probe* client on its own connection times basic.get
round trips on an empty queue between the worker's reads; *probe max* is the longest, how
long another client waited for the broker. With one consumer (the worker alone) the figures
are the broker's ordinary cost per message; with 10,000, the cost of the other consumers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
import pika
from harness import Kanin

ROOT = Path(__file__).resolve().parent.parent
QUEUE = "many-consumers"
PROBE_QUEUE = "many-consumers-probe"
WORKER_PREFETCH = 100


def measure(uri: str, pid: int, consumers: int, messages: int) -> dict[str, Any]:
    params = pika.URLParameters(uri)
    holders_conn = pika.BlockingConnection(params)
    publisher_conn = pika.BlockingConnection(params)
    worker_conn = pika.BlockingConnection(params)
    probe_conn = pika.BlockingConnection(params)
    try:
        publisher = publisher_conn.channel()
        publisher.queue_declare(QUEUE)
        publisher.queue_declare(PROBE_QUEUE)
        holders = holders_conn.channel()
        holders.basic_qos(prefetch_count=1)
        held = [0]

        def hold(*_: Any) -> None:
            held[0] += 1  # and never ack: the holder stays full

        started = time.monotonic()
        for _ in range(consumers - 1):
            holders.basic_consume(QUEUE, hold)
        for n in range(consumers - 1):
            publisher.basic_publish("", QUEUE, b"fill%d" % n)
        while held[0] < consumers - 1:
            holders_conn.process_data_events(time_limit=0.1)
        setup_s = time.monotonic() - started

        worker = worker_conn.channel()
        worker.basic_qos(prefetch_count=WORKER_PREFETCH)
        acked = [0]

        def work(channel: Any, method: Any, _props: Any, _body: bytes) -> None:
            channel.basic_ack(method.delivery_tag)
            acked[0] += 1

        worker.basic_consume(QUEUE, work)
        probe = probe_conn.channel()
        worker_conn.process_data_events(time_limit=0.2)

        cpu_before = harness.cpu_seconds(pid)
        started = time.monotonic()
        for n in range(messages):
            publisher.basic_publish("", QUEUE, b"m%d" % n)
        probe_max = 0.0
        while acked[0] < messages:
            worker_conn.process_data_events(time_limit=0.01)
            asked = time.monotonic()
            probe.basic_get(PROBE_QUEUE, auto_ack=True)
            probe_max = max(probe_max, time.monotonic() - asked)
            holders_conn.process_data_events(time_limit=0)  # heartbeats
        wall_s = time.monotonic() - started
        cpu_s = harness.cpu_seconds(pid) - cpu_before
        return {
            "consumers": consumers,
            "messages": messages,
            "setup_s": round(setup_s, 2),
            "cpu_s": round(cpu_s, 3),
            "cpu_ms_per_delivery": round(cpu_s * 1000 / messages, 4),
            "wall_s": round(wall_s, 3),
            "deliveries_per_s": round(messages / wall_s),
            "probe_max_ms": round(probe_max * 1000, 1),
        }
    finally:
        for connection in (holders_conn, publisher_conn, worker_conn, probe_conn):
            if connection.is_open:
                connection.close()


def run_point(work: Path, consumers: int, messages: int, rep: int) -> dict[str, Any]:
    kanin = Kanin(work / f"data-{consumers}-{rep}")
    kanin.start()
    try:
        return measure(kanin.uri, kanin.pid, consumers, messages)
    finally:
        kanin.stop()


def render(results: dict[str, Any]) -> str:
    lines = [
        f"source: {results['source']} (digest {results['digest']}), "
        f"{results['messages']} messages per point, median of {results['reps']} runs "
        "(min-max)",
        "",
        "| consumers | CPU ms / delivery | deliveries/s | probe max ms | set-up s |",
        "|---:|---:|---:|---:|---:|",
    ]
    for consumers, runs in results["points"].items():

        def cell(key: str, runs: list[dict[str, Any]] = runs) -> str:
            values = [run[key] for run in runs]
            median = statistics.median(values)
            if len(values) == 1:
                return f"{median:g}"
            return f"{median:g} ({min(values):g}-{max(values):g})"

        lines.append(
            f"| {consumers} | {cell('cpu_ms_per_delivery')} | {cell('deliveries_per_s')} "
            f"| {cell('probe_max_ms')} | {cell('setup_s')} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--consumers", default="1,10000", help="comma-separated counts")
    parser.add_argument("--messages", type=int, default=5000, help="measured per point")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--source", type=Path, default=ROOT, help="tree whose src/kanin to run")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args()
    counts = [int(count) for count in args.consumers.split(",")]
    with tempfile.TemporaryDirectory(prefix="kanin-many-consumers-") as tmp:
        work = Path(tmp)
        digest = harness.snapshot_source(args.source, work)
        results: dict[str, Any] = {
            "source": str(args.source),
            "digest": digest,
            "messages": args.messages,
            "reps": args.reps,
            "points": {},
        }
        for rep in range(args.reps):
            for consumers in counts:
                point = run_point(work, consumers, args.messages, rep)
                print(json.dumps(point), file=sys.stderr, flush=True)
                results["points"].setdefault(str(consumers), []).append(point)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    print(render(results), end="")


if __name__ == "__main__":
    main()
