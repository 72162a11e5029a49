"""Delayed messages in kanin: memory and start-up with millions pending, and lateness.

    python bench/delayed.py      # ~25 minutes: bench/results/delayed.md, dedup.md, retry.md
    python bench/delayed.py --pending 200000 --due 50000 --only-delayed --out /tmp/d.md  # a try

The report also holds, unless --only-delayed, the other costs of the same family measured
by their own scripts, run from here: deduplication (bench/dedup.py: scenario d of
bench/compare.py through a deduplicating exchange, memory per cached id) and poison
messages and retries beside RabbitMQ 3.10 (bench/retry.py: a quorum queue's delivery limit,
and kanin's retry backoff against RabbitMQ's TTL and dead-letter retry queue).

One kanin server, a durable x-delayed-message exchange (x-delayed-type direct) bound to one
durable queue; messages are persistent, 16-byte bodies, published with confirms (window
256, written 8 at a time) by a raw asyncio client (kanin perf's), each with its own x-delay,
computed from its due time as it is written.
(1) Pending: N messages due two to three hours from now (so none fall due during the run),
    spread over an hour. Measured: publish rate, and the broker's resident memory with
    them pending, in total and per pending message (less the memory before).
(2) Start-up: the broker is killed (SIGKILL) and started again on the same data directory:
    seconds until it listens, and its resident memory then.
(3) Lateness: with the N still pending, M more are published (at 5,000 a second, so that
    none waits in the socket, where its x-delay would not yet count) due at 10,000 per
    second, starting once all M are confirmed; a consumer (no-ack) takes them as they come.
    Lateness = arrival time - due time (wall clock, the due time is in each body), p50,
    p99 and max over the M. Goal: p99 <= 10 ms. Also the broker's CPU per message over
    this phase (publish and due), over the due half alone when the publish ended before
    the first due time, the other processes' CPU load meanwhile and the CPU time the
    virtual machine's host gave to others (steal) meanwhile (lateness means
    little on a busy machine; CPU per message is steadier).
RabbitMQ 3.10 here has no delayed-message plugin (rabbitmq-plugins list), so there is no
RabbitMQ column.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

import compiled
import harness
from harness import Kanin
from pamqp import commands

from kanin.perf import wire
from kanin.perf.client import ChannelHandler, connect
from kanin.perf.options import parse_uri

ROOT = Path(__file__).resolve().parent.parent
EXCHANGE, QUEUE, KEY = "bench.delayed", "bench.delayed.q", "d"
# Unconfirmed publishes at most, and messages per socket write: x-delay counts from when the
# broker reads the publish, so a message must not wait long in the client or the socket
# (its due time is computed when it is written; any wait after that counts as lateness).
WINDOW = 256
WRITE_BATCH = 8
PUBLISH_RATE = 5000  # a second, in the lateness run
BODY = struct.Struct(">Q8x")  # due time, UNIX ms; padded to 16 bytes
_PROPS = 0x2000 | 0x1000  # headers and delivery mode
_TABLE = struct.Struct(">I B7s c i")  # table length, "x-delay" (shortstr), 'I', value


def publish_frames(due_ms: int, now_ms: int) -> bytes:
    delay = max(due_ms - now_ms, 1)
    table = _TABLE.pack(13, 7, b"x-delay", b"I", delay)
    method = wire.BASIC_PUBLISH + b"\x00\x00" + wire.short_string(EXCHANGE)
    method += wire.short_string(KEY) + b"\x00"
    header = struct.pack(">HHQH", 60, 0, BODY.size, _PROPS) + table + b"\x02"
    return (
        wire.frame(wire.FRAME_METHOD, 1, method)
        + wire.frame(wire.FRAME_HEADER, 1, header)
        + wire.frame(wire.FRAME_BODY, 1, BODY.pack(due_ms))
    )


class Publisher(ChannelHandler):
    def __init__(self, conn: Any) -> None:
        super().__init__(conn, 1)
        self.sent = 0
        self.confirmed = 0
        self.wake = asyncio.Event()

    def on_ack(self, tag: int, multiple: bool) -> None:
        self.confirmed = tag if multiple else self.confirmed + 1
        self.wake.set()

    def on_nack(self, tag: int, multiple: bool) -> None:
        raise RuntimeError("a delayed publish was nacked")

    async def run(self, dues: Any, rate: float | None = None) -> None:
        """Publish one message per due time (an iterable of UNIX ms), WINDOW unconfirmed;
        at most `rate` a second if given."""
        batch: list[bytes] = []
        started = time.monotonic()
        for due in dues:
            batch.append(publish_frames(due, int(time.time() * 1000)))
            self.sent += 1
            if len(batch) == WRITE_BATCH:
                self.conn.write(b"".join(batch))
                batch.clear()
                while self.sent - self.confirmed > WINDOW:
                    self.wake.clear()
                    await self.wake.wait()
                if not self.conn.writable:
                    await self.conn.wait_writable()
                if rate is not None:
                    ahead = started + self.sent / rate - time.monotonic()
                    if ahead > 0:
                        await asyncio.sleep(ahead)
        if batch:
            self.conn.write(b"".join(batch))
        while self.confirmed < self.sent:
            self.wake.clear()
            await asyncio.wait_for(self.wake.wait(), 60)


class LatenessConsumer(ChannelHandler):
    def __init__(self, conn: Any, expected: int) -> None:
        super().__init__(conn, 2)
        self.lateness_ms = array("d")
        self.due_ms = array("d")  # beside each lateness, for --timeline
        self.expected = expected
        self.done = asyncio.Event()

    def on_body(self, buffer: bytes, at: int) -> None:
        (due_ms,) = BODY.unpack_from(buffer, at)
        self.lateness_ms.append(time.time() * 1000 - due_ms)
        self.due_ms.append(due_ms)
        if len(self.lateness_ms) >= self.expected:
            self.done.set()


async def setup(uri: str) -> None:
    conn = await connect(parse_uri(uri))
    channel = ChannelHandler(conn, 1)
    await conn.open_channel(channel)
    await channel.call(
        commands.Exchange.Declare(
            exchange=EXCHANGE,
            exchange_type="x-delayed-message",
            durable=True,
            arguments={"x-delayed-type": "direct"},
        ),
        commands.Exchange.DeclareOk,
    )
    await channel.call(commands.Queue.Declare(queue=QUEUE, durable=True), commands.Queue.DeclareOk)
    await channel.call(
        commands.Queue.Bind(queue=QUEUE, exchange=EXCHANGE, routing_key=KEY), commands.Queue.BindOk
    )
    await conn.close()


async def publish(uri: str, dues: Any, rate: float | None = None) -> float:
    conn = await connect(parse_uri(uri))
    publisher = Publisher(conn)
    await conn.open_channel(publisher)
    await publisher.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
    started = time.monotonic()
    await publisher.run(dues, rate)
    elapsed = time.monotonic() - started
    await conn.close()
    return publisher.sent / elapsed


async def lateness(
    uri: str, pid: int, count: int, rate: float, timeline: Path | None
) -> tuple[list[float], dict[str, Any]]:
    """The lateness of each of `count` messages (sorted), and the broker's CPU per due
    message and the other processes' load while they fell due."""
    conn = await connect(parse_uri(uri))
    consumer = LatenessConsumer(conn, count)
    await conn.open_channel(consumer)
    await consumer.call(commands.Basic.Consume(queue=QUEUE, no_ack=True), commands.Basic.ConsumeOk)
    # Published at PUBLISH_RATE, well below what the broker takes, so that a publish does
    # not wait in the socket (x-delay counts from when the broker reads it, the due time in
    # the body from when it was written: such a wait would count as lateness); due from a
    # little after the last confirm.
    start_ms = int(time.time() * 1000) + int(count / PUBLISH_RATE * 1000) + 3000
    dues = (start_ms + int(i * 1000 / rate) for i in range(count))
    cpu_at_start = harness.cpu_seconds(pid)
    foreign = harness.ForeignLoad(count_rabbitmq_as_ours=False).__enter__()
    await publish(uri, dues, PUBLISH_RATE)
    # On a busy machine the publish may overrun the first due time: then the due half's
    # own CPU cannot be told apart (None), only the whole phase's.
    on_time = time.time() * 1000 < start_ms
    await asyncio.sleep(max(start_ms / 1000 - time.time(), 0))
    cpu_at_due = harness.cpu_seconds(pid)
    await asyncio.wait_for(consumer.done.wait(), count / rate + 120)
    cpu_at_end = harness.cpu_seconds(pid)
    foreign.__exit__()
    await conn.close()
    if timeline is not None:  # when the late ones were due: a few stalls, or all along?
        first = consumer.due_ms[0] if consumer.due_ms else 0.0
        rows = (
            f"{d - first:.0f},{x:.1f}"
            for d, x in zip(consumer.due_ms, consumer.lateness_ms, strict=True)
        )
        timeline.write_text("due_ms_since_first,lateness_ms\n" + "\n".join(rows) + "\n")
    due_phase = {
        "cpu_us_per_message": (cpu_at_end - cpu_at_start) * 1e6 / count,
        "cpu_us_per_due": (cpu_at_end - cpu_at_due) * 1e6 / count if on_time else None,
        "foreign_load_pct": foreign.percent,
        "steal_pct": foreign.steal_percent,
    }
    return sorted(consumer.lateness_ms), due_phase


def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kanin-bench-delayed-") as work:
        if args.compiled:
            compiled.use_for_every_broker(Path(work))
        kanin = Kanin(Path(work) / "data")
        kanin.start()
        try:
            asyncio.run(setup(kanin.uri))
            rss_before = harness.rss_kb(kanin.pid)
            base = int(time.time() * 1000) + 2 * 3_600_000
            spread = 3_600_000 / args.pending
            dues = (base + int(i * spread) for i in range(args.pending))
            result["publish_rate"] = asyncio.run(publish(kanin.uri, dues))
            time.sleep(2)
            rss = harness.rss_kb(kanin.pid)
            result["rss_mb"] = rss / 1024
            result["bytes_per_pending"] = (rss - rss_before) * 1024 / args.pending
            assert kanin.process is not None
            os.kill(kanin.pid, signal.SIGKILL)  # only the process this run started
            kanin.process.wait()
            result["startup_s"] = kanin.start()
            time.sleep(2)
            result["rss_after_restart_mb"] = harness.rss_kb(kanin.pid) / 1024
            late, due_phase = asyncio.run(
                lateness(kanin.uri, kanin.pid, args.due, args.rate, args.timeline)
            )
            result["due_phase"] = due_phase
            result["lateness"] = {
                "count": len(late),
                "p50": statistics.median(late),
                "p99": late[int(len(late) * 0.99) - 1],
                "max": late[-1],
            }
        finally:
            kanin.stop()
    return result


def render(result: dict[str, Any], args: argparse.Namespace) -> str:
    late, phase = result["lateness"], result["due_phase"]
    return "\n".join(
        [
            "# Delayed messages in kanin",
            "",
            f"Command: `python bench/delayed.py {' '.join(sys.argv[1:])}` on "
            f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}), the broker "
            f"{compiled.BUILD_NAME if args.compiled else 'pure Python'}. bench/delayed.py's "
            "docstring says what runs. RabbitMQ 3.10 here has no delayed-message plugin.",
            "",
            "| measure | value |",
            "|---|---|",
            f"| pending delayed messages (persistent, durable exchange) | {args.pending:,} |",
            f"| publish rate, confirmed | {result['publish_rate']:,.0f} msg/s |",
            f"| broker resident memory with them pending | {result['rss_mb']:,.0f} MB |",
            f"| ... per pending message | {result['bytes_per_pending']:.0f} bytes |",
            f"| start-up after kill -9, until listening | {result['startup_s']:.1f} s |",
            f"| resident memory after that start-up | {result['rss_after_restart_mb']:,.0f} MB |",
            f"| lateness at {args.rate:,.0f} due/s ({late['count']:,} messages), p50 "
            f"| {late['p50']:.1f} ms |",
            f"| lateness p99 (goal: at most 10 ms) | {late['p99']:.1f} ms |",
            f"| lateness max | {late['max']:.1f} ms |",
            f"| broker CPU per message of those, published and fallen due "
            f"| {phase['cpu_us_per_message']:.0f} µs |",
            f"| ... of that, once they fell due (none: the publish overran the first due) "
            f"| {_micros(phase['cpu_us_per_due'])} |",
            f"| other processes' CPU load meanwhile (% of the cores) "
            f"| {phase['foreign_load_pct']} |",
            f"| CPU the host gave to other machines meanwhile (steal, % of the cores) "
            f"| {phase['steal_pct']} |",
            "",
        ]
    )


def _micros(value: float | None) -> str:
    return "none" if value is None else f"{value:.0f} µs"


def other_reports(build: list[str]) -> str:
    """Run bench/dedup.py and bench/retry.py (each writes its own result file) and return
    their reports, to follow this one. build: [] or ["--compiled"], for dedup.py."""
    sections = []
    for script, options in (("dedup.py", build), ("retry.py", [])):
        done = subprocess.run(
            [sys.executable, str(Path(__file__).parent / script), *options],
            capture_output=True,
            text=True,
            check=True,
        )
        report = (ROOT / "bench" / "results" / script.replace(".py", ".md")).read_text()
        # One heading level down, to sit under this report's.
        lines = ("#" + line if line.startswith("#") else line for line in report.splitlines())
        sections.append("\n".join(lines) + "\n")
        print(done.stderr[-2000:], file=sys.stderr)
    return "\n".join(sections)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--pending", type=int, default=10_000_000)
    parser.add_argument(
        "--timeline", type=Path, help="write each message's due time and lateness here (CSV)"
    )
    parser.add_argument("--due", type=int, default=300_000, help="messages in the lateness run")
    parser.add_argument("--rate", type=float, default=10_000.0, help="due per second")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "delayed.md")
    parser.add_argument("--only-delayed", action="store_true", help="skip dedup.py, retry.py")
    compiled.add_option(parser)
    args = parser.parse_args()
    result = run(args)
    print(result, file=sys.stderr)
    report = render(result, args)
    if not args.only_delayed:
        report += "\n" + other_reports(["--compiled"] if args.compiled else [])
    args.out.write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
