"""Streams (x-queue-type: stream): kanin beside RabbitMQ 3.10, over AMQP 0-9-1, in one run.

    python bench/streams.py                                  # ~30-40 minutes, 10,000,000
    python bench/streams.py --messages 200000 --out /tmp/s   # a try: a couple of minutes

writes bench/results/streams.{md,json} (or --out DIR's). For each broker, a stream of N
(--messages) messages: a fresh `kanin server` (port 0, its own data directory under /tmp)
and the local RabbitMQ on 127.0.0.1:5672 (started if it is not running; left running), on
which the script declares only queues named bench.streams.* and deletes them at the end.
(1) publish: N messages with --size-byte bodies into a new stream, by --publishers
    connections in one client process, each with publisher confirms and at most --window
    unconfirmed, written --batch at a time. msg/s = N / time to the last confirm; broker
    CPU per message; the broker's resident memory (VmRSS) before, at its peak while
    publishing, and 2 s after the last confirm.
(2) first: one consumer from x-stream-offset `first` reads the N messages; basic.qos
    prefetch --prefetch, manual acks, one `multiple` ack per --ack-every deliveries. msg/s =
    N / time from basic.consume to the N-th delivery; broker CPU per message; broker RSS
    sampled every 0.25 s while it reads (peak and at the end): reading should not bring the
    log into memory.
(3) readers: --readers consumers at once (in --reader-procs client processes), reader i
    from offset i*N/readers, each reading --read-each messages (N/readers by default), as
    in (2). Aggregate msg/s = all deliveries / (last reader's end - first reader's start);
    each reader's own rate (min, max); broker CPU per message; broker RSS while reading.
Every delivery's x-stream-offset header is checked: each reader must get increasing offsets
from the one it asked for (gaps are allowed: RabbitMQ's tracking chunks take offsets).
(2) and (3) are repeated --reps times. The brokers take turns going first: kanin first in
(1), RabbitMQ first in the first (2), and so on. Further
--size values publish another stream of N each (1 only; the stream is deleted afterwards).
The loads are this script's own client (kanin perf's raw asyncio client, bench/delayed.py's
approach), run as subprocesses: `python bench/streams.py publish|read ...`; the report
lists each command. bench/README.md explains every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import compiled
import durability
import harness
from harness import Kanin
from pamqp import commands

from kanin.perf import wire
from kanin.perf.client import ChannelHandler, Connection, PerfError, connect
from kanin.perf.options import parse_uri

ROOT = Path(__file__).resolve().parent.parent
RABBITMQ_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"
PREFIX = "bench.streams."
KANIN, RABBITMQ = "kanin", "RabbitMQ"
NUMBER = {"publish": "(1)", "first": "(2)", "readers": "(3)"}
OFFSET_FIELD = b"\x0fx-stream-offsetl"  # the header's key (shortstr) and type: signed 64-bit
I64 = struct.Struct(">q")


# -- the client: publish and read, run as subprocesses of the benchmark -----------------


async def open_connection(uri: str) -> Connection:
    """kanin perf's client connection: it hands content headers to Reader.on_header (to
    read each delivery's x-stream-offset)."""
    return await connect(parse_uri(uri))


def publish_frames(queue: str, size: int) -> bytes:
    """One basic.publish to the default exchange (routing key: the stream), its header (no
    properties) and a body of `size` bytes, as one buffer."""
    method = wire.BASIC_PUBLISH + b"\x00\x00" + wire.short_string("")
    method += wire.short_string(queue) + b"\x00"
    header = struct.pack(">HHQH", 60, 0, size, 0)
    return (
        wire.frame(wire.FRAME_METHOD, 1, method)
        + wire.frame(wire.FRAME_HEADER, 1, header)
        + wire.frame(wire.FRAME_BODY, 1, b"s" * size)
    )


class Publisher(ChannelHandler):
    def __init__(self, conn: Connection, total: int, frames: bytes, window: int, batch: int):
        super().__init__(conn, 1)
        self.total, self.frames, self.window, self.batch = total, frames, window, batch
        self.sent = 0
        self.settled = 0  # highest delivery tag acked or nacked (brokers confirm in order)
        self.nacked = 0
        self.last_confirm = 0.0
        self.longest_gap = 0.0  # seconds between two confirms, at most
        self.wake = asyncio.Event()

    def on_ack(self, tag: int, multiple: bool) -> None:
        now = time.monotonic()
        if self.last_confirm:
            self.longest_gap = max(self.longest_gap, now - self.last_confirm)
        self.last_confirm = now
        self.settled = max(self.settled, tag)
        self.wake.set()

    def on_nack(self, tag: int, multiple: bool) -> None:
        self.nacked += tag - self.settled if multiple else 1
        self.on_ack(tag, multiple)

    async def run(self, stall_s: float) -> None:
        self.last_confirm = time.monotonic()
        while self.settled < self.total:
            if self.sent < self.total and self.sent - self.settled <= self.window - self.batch:
                count = min(self.batch, self.total - self.sent)
                self.conn.write(self.frames * count)
                self.sent += count
                if not self.conn.writable:
                    await self.conn.wait_writable()
                continue
            self.wake.clear()
            try:
                await asyncio.wait_for(self.wake.wait(), stall_s)
            except TimeoutError:
                raise PerfError(
                    f"no confirm for {stall_s:g} s: {self.settled:,} of {self.sent:,} "
                    "sent are confirmed"
                ) from None
            if self.conn.error is not None:
                raise PerfError(self.conn.error)


class Reader(ChannelHandler):
    def __init__(self, conn: Connection, start: int, count: int, ack_every: int) -> None:
        super().__init__(conn, 1)
        self.start, self.count, self.ack_every = start, count, ack_every
        self.delivered = 0
        self.first_offset = -1
        self.next_offset = -1
        # Offsets may skip (RabbitMQ: a new segment's first chunk is a tracking snapshot,
        # which takes an offset but holds no message; kanin: a failed write's offsets) but
        # must never repeat or go back.
        self.backwards = 0  # offsets at or below the one before
        self.gaps = 0  # offsets more than one past the one before
        self.skipped = 0  # offsets those gaps skipped
        self.no_offset = 0  # deliveries without an x-stream-offset header
        self.began = 0.0  # when basic.consume was sent
        self.first_at = 0.0
        self.last_at = 0.0
        self.finished = 0.0
        self.longest_gap = 0.0  # seconds between two deliveries, at most
        self.done = asyncio.Event()

    def on_deliver(self, buffer: bytes, at: int) -> None:
        now = time.monotonic()
        self.delivered += 1
        delivered = self.delivered
        if delivered > self.count:
            return  # on the way while we close: not counted, not acked
        if delivered == 1:
            self.first_at = now
        elif now - self.last_at > self.longest_gap:
            self.longest_gap = now - self.last_at
        self.last_at = now
        if delivered % self.ack_every == 0 or delivered == self.count:
            self.conn.out.append(wire.ack_frame(1, wire.deliver_tag(buffer, at), True))
        if delivered == self.count:
            self.finished = now
            self.done.set()

    def on_header(self, buffer: bytes, at: int, end: int) -> None:
        if self.delivered > self.count:
            return
        found = buffer.find(OFFSET_FIELD, at, end)
        if found < 0:
            self.no_offset += 1
            return
        (offset,) = I64.unpack_from(buffer, found + len(OFFSET_FIELD))
        if self.first_offset < 0:
            self.first_offset = offset
        elif offset < self.next_offset:
            self.backwards += 1
        elif offset > self.next_offset:
            self.gaps += 1
            self.skipped += offset - self.next_offset
        self.next_offset = offset + 1

    async def consume(self, queue: str, prefetch: int, start_arg: object) -> None:
        await self.call(commands.Basic.Qos(prefetch_count=prefetch), commands.Basic.QosOk)
        self.began = time.monotonic()
        await self.call(
            commands.Basic.Consume(queue=queue, arguments={"x-stream-offset": start_arg}),
            commands.Basic.ConsumeOk,
        )

    def summary(self) -> dict[str, Any]:
        counted = min(self.delivered, self.count)
        seconds = (self.finished or self.last_at or self.began) - self.began
        return {
            "start": self.start,
            "count": self.count,
            "delivered": counted,
            "first_offset": self.first_offset,
            "last_offset": self.next_offset - 1,
            "backwards": self.backwards,
            "gaps": self.gaps,
            "skipped": self.skipped,
            "no_offset": self.no_offset,
            "began": self.began,
            "finished": self.finished,
            "seconds": seconds,
            "rate": counted / seconds if seconds > 0 else 0.0,
            "first_delivery_s": self.first_at - self.began if self.first_at else None,
            "longest_gap_s": self.longest_gap,
        }


async def watch(progress: Any, stall_s: float, spy_pid: int | None, done: asyncio.Event) -> str:
    """Wait until done; if progress() stands still for stall_s, return why (and a py-spy
    dump of spy_pid, the broker, taken then). Also returns the per-second timeline."""
    last, since = progress(), time.monotonic()
    while not done.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), 1.0)
        now, current = time.monotonic(), progress()
        if current != last:
            last, since = current, now
        elif now - since > stall_s:
            dump = py_spy_dump(spy_pid) if spy_pid else ""
            return f"no progress for {stall_s:g} s at {current:,}" + (
                f"\npy-spy dump of the broker then:\n{dump}" if dump else ""
            )
    return ""


def py_spy_dump(pid: int) -> str:
    try:
        done = subprocess.run(
            ["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(py-spy failed: {exc})"
    return done.stdout + done.stderr


async def timeline(progress: Any, into: list[int], done: asyncio.Event) -> None:
    """progress() once a second until done (messages confirmed or delivered so far)."""
    while not done.is_set():
        try:
            await asyncio.wait_for(done.wait(), 1.0)
        except TimeoutError:
            into.append(progress())


async def publish_main(args: argparse.Namespace) -> dict[str, Any]:
    frames = publish_frames(args.queue, args.size)
    conns = [await open_connection(args.uri) for _ in range(args.connections)]
    shares = [args.messages // args.connections] * args.connections
    shares[0] += args.messages - sum(shares)
    publishers = []
    for conn, share in zip(conns, shares, strict=True):
        publisher = Publisher(conn, share, frames, args.window, args.batch)
        await conn.open_channel(publisher)
        await publisher.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
        publishers.append(publisher)
    done = asyncio.Event()
    per_second: list[int] = []

    def progress() -> int:
        return sum(p.settled for p in publishers)

    started = time.monotonic()
    watcher = asyncio.create_task(watch(progress, args.stall_s, args.spy_pid, done))
    ticker = asyncio.create_task(timeline(progress, per_second, done))
    runs = asyncio.gather(*(p.run(args.stall_s) for p in publishers))
    errors: list[str] = []
    try:
        await asyncio.wait({runs, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if runs.done():
            runs.result()
        else:
            errors.append(watcher.result() or "stopped")
            runs.cancel()
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        done.set()
    await asyncio.gather(watcher, ticker, return_exceptions=True)
    last = max(p.last_confirm for p in publishers)
    seconds = last - started
    for conn in conns:
        await conn.close()
    confirmed = progress()
    return {
        "ok": not errors and confirmed == args.messages and not sum(p.nacked for p in publishers),
        "errors": errors,
        "published": sum(p.sent for p in publishers),
        "confirmed": confirmed,
        "nacked": sum(p.nacked for p in publishers),
        "seconds": seconds,
        "rate": confirmed / seconds if seconds > 0 else 0.0,
        "longest_confirm_gap_s": max(p.longest_gap for p in publishers),
        "per_second": per_second,
    }


async def read_main(args: argparse.Namespace) -> dict[str, Any]:
    readers = []
    for start in args.start:
        conn = await open_connection(args.uri)
        reader = Reader(conn, 0 if start == "first" else int(start), args.count, args.ack_every)
        await conn.open_channel(reader)
        readers.append(reader)
    done = asyncio.Event()
    per_second: list[int] = []

    def progress() -> int:
        return sum(min(r.delivered, r.count) for r in readers)

    errors: list[str] = []
    try:
        for reader, start in zip(readers, args.start, strict=True):
            start_arg = start if start == "first" else int(start)
            await reader.consume(args.queue, args.prefetch, start_arg)
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    watcher = asyncio.create_task(watch(progress, args.stall_s, args.spy_pid, done))
    ticker = asyncio.create_task(timeline(progress, per_second, done))
    finished = asyncio.gather(*(r.done.wait() for r in readers))
    lost = [asyncio.ensure_future(r.conn.lost) for r in readers]
    if not errors:
        await asyncio.wait({finished, watcher, *lost}, return_when=asyncio.FIRST_COMPLETED)
        if watcher.done():
            errors.append(watcher.result() or "stopped")
        errors += [r.conn.error for r in readers if r.conn.error and not r.done.is_set()]
    done.set()
    finished.cancel()
    await asyncio.gather(watcher, ticker, return_exceptions=True)
    # Close without cancelling: a stream consumer must not give deliveries back (RabbitMQ
    # closes the connection on a reject); the deliveries on the way are dropped with it.
    for reader in readers:
        await reader.conn.close()
    results = [r.summary() for r in readers]
    checks_ok = all(
        r["delivered"] == r["count"]
        and not r["backwards"]
        and not r["no_offset"]
        and r["first_offset"] == r["start"]
        for r in results
    )
    return {"ok": not errors and checks_ok, "errors": errors, "readers": results,
            "per_second": per_second}  # fmt: skip


def client_main(args: argparse.Namespace) -> int:
    job = publish_main if args.job == "publish" else read_main
    try:
        result = asyncio.run(job(args))
    except Exception as exc:
        result = {"ok": False, "errors": [f"{type(exc).__name__}: {exc}"]}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result["client_cpu_s"] = usage.ru_utime + usage.ru_stime
    print(json.dumps(result))
    return 0 if result["ok"] else 1


# -- the benchmark: brokers, points, the report ------------------------------------------


@dataclass
class Broker:
    name: str
    uri: str
    pid: int
    kanin: Any = None  # harness.Kanin for kanin
    server_command: str = ""
    queues: list[str] = field(default_factory=list)


class RssSampler:
    """The broker's VmRSS every 0.25 s on a thread while a client runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, int]] = []  # (seconds since start, kB)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._started = time.monotonic()

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            try:
                kb = harness.rss_kb(self.pid)
            except (OSError, RuntimeError):
                return
            self.samples.append((round(time.monotonic() - self._started, 2), kb))
            if self._stop.wait(0.25):
                return


def client_command(job: str, broker: Broker, options: list[str]) -> list[str]:
    command = [harness.PYTHON, str(Path(__file__).resolve()), job, "--uri", broker.uri]
    return command + options + (["--spy-pid", str(broker.pid)] if broker.name == KANIN else [])


def run_clients(broker: Broker, commands_: list[list[str]], timeout_s: float) -> dict[str, Any]:
    """Run client processes at once; the broker's CPU, RSS and the foreign load around them."""
    rss_before = harness.rss_kb(broker.pid)
    cpu_before = harness.cpu_seconds(broker.pid)
    started = time.monotonic()
    with (
        harness.ForeignLoad(count_rabbitmq_as_ours=broker.name == RABBITMQ) as foreign,
        RssSampler(broker.pid) as rss,
    ):
        processes = [
            subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=harness.ENV)
            for c in commands_
        ]
        outputs = []
        try:
            for process in processes:
                try:
                    out, err = process.communicate(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    process.kill()  # our own client
                    out, err = process.communicate()
                outputs.append((process.returncode, out.decode(), err.decode()))
        except BaseException:  # stopped (SIGTERM, ^C): our clients go too
            for process in processes:
                process.kill()
                process.wait()
            raise
    wall = time.monotonic() - started
    cpu = harness.cpu_seconds(broker.pid) - cpu_before
    clients = []
    for code, out, err in outputs:
        try:
            clients.append(json.loads(out.strip().splitlines()[-1]))
        except (json.JSONDecodeError, IndexError):
            clients.append({"ok": False, "errors": [f"client exit {code}: {err[-2000:]}"]})
    kbs = [kb for _, kb in rss.samples] or [rss_before]
    return {
        "clients": clients,
        "ok": all(c.get("ok") for c in clients),
        "errors": [e for c in clients for e in c.get("errors", [])],
        "commands": [harness.shell(c) for c in commands_],
        "wall_s": round(wall, 2),
        "broker_cpu_s": round(cpu, 3),
        "rss_before_kb": rss_before,
        "rss_peak_kb": max(kbs),
        "rss_end_kb": kbs[-1],
        "rss_samples": rss.samples[:: max(1, len(rss.samples) // 400)],
        "client_cpu_s": [round(c.get("client_cpu_s", 0.0), 2) for c in clients],
        "other_cpu_percent": foreign.percent,
        "other_cpu_top": foreign.top,
    }


def declare_stream(uri: str, queue: str) -> None:
    async def go() -> None:
        conn = await connect(parse_uri(uri))
        channel = ChannelHandler(conn, 1)
        await conn.open_channel(channel)
        await channel.call(commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk)
        declare = commands.Queue.Declare(
            queue=queue, durable=True, arguments={"x-queue-type": "stream"}
        )
        await channel.call(declare, commands.Queue.DeclareOk)
        await conn.close()

    asyncio.run(go())


def delete_stream(uri: str, queue: str) -> None:
    async def go() -> None:
        conn = await connect(parse_uri(uri))
        channel = ChannelHandler(conn, 1)
        await conn.open_channel(channel)
        await channel.call(commands.Queue.Delete(queue=queue), commands.Queue.DeleteOk)
        await conn.close()

    asyncio.run(go())


def stream_bytes(broker: Broker, queue: str) -> int | None:
    """Bytes of the stream's files on disk (kanin: all of its streams/ directory, which
    holds this run's streams only; RabbitMQ: the directory named after the queue)."""
    try:
        if broker.name == KANIN:
            return harness.dir_bytes(broker.kanin.data_dir / "streams")
        # RabbitMQ names the directory __<queue, other than letters and digits as _>_<n>.
        name = re.sub(r"[^A-Za-z0-9]", "_", queue)
        found = list((harness.rabbitmq_data_dir() / "stream").glob(f"__{name}_*"))
        return sum(harness.dir_bytes(d) for d in found) if found else None
    except OSError:
        return None


def publish_point(broker: Broker, queue: str, size: int, args: argparse.Namespace) -> dict:
    declare_stream(broker.uri, queue)
    broker.queues.append(queue)
    options = [
        *["--queue", queue, "--messages", str(args.messages), "--size", str(size)],
        *["--connections", str(args.publishers), "--window", str(args.window)],
        *["--batch", str(args.batch)],
    ]
    point = run_clients(broker, [client_command("publish", broker, options)], args.timeout)
    time.sleep(2.0)
    point["rss_after_kb"] = harness.rss_kb(broker.pid)
    point["disk_bytes"] = stream_bytes(broker, queue)
    client = point["clients"][0]
    point |= {"rate": client.get("rate"), "messages": client.get("confirmed", 0)}
    return point


def read_point(
    broker: Broker, queue: str, starts: list[str], count: int, procs: int, args: argparse.Namespace
) -> dict:
    groups = [starts[i::procs] for i in range(procs) if starts[i::procs]]
    commands_ = [
        client_command(
            "read",
            broker,
            [
                *["--queue", queue, "--count", str(count), "--prefetch", str(args.prefetch)],
                *["--ack-every", str(args.ack_every)],
                *[part for start in group for part in ("--start", start)],
            ],
        )
        for group in groups
    ]
    timeout = args.timeout * max(1, len(starts) // 2)
    point = run_clients(broker, commands_, timeout)
    readers = [r for c in point["clients"] for r in c.get("readers", [])]
    readers.sort(key=lambda r: r["start"])
    delivered = sum(r["delivered"] for r in readers)
    point["readers"] = readers
    point["messages"] = delivered
    if readers and all(r["finished"] for r in readers):
        span = max(r["finished"] for r in readers) - min(r["began"] for r in readers)
        point["rate"] = delivered / span
        point["reader_rates"] = [r["rate"] for r in readers]
    else:
        point["rate"] = None
    return point


def order(turn: int, present: list[str]) -> list[str]:
    """The brokers in the order they go this turn: kanin first on even turns."""
    both = [KANIN, RABBITMQ] if turn % 2 == 0 else [RABBITMQ, KANIN]
    return [name for name in both if name in present]


def log(text: str) -> None:
    print(time.strftime("%H:%M:%S"), text, file=sys.stderr, flush=True)


def summarize(name: str, point: dict[str, Any]) -> str:
    rate = point.get("rate")
    per = point["broker_cpu_s"] / point["messages"] * 1e6 if point.get("messages") else 0
    return (
        f"{name}: {rate or 0:,.0f} msg/s, {per:.1f} µs/msg, RSS {point['rss_before_kb'] / 1024:.0f}"
        f" -> peak {point['rss_peak_kb'] / 1024:.0f} MB, ok={point['ok']} {point['errors'][:1]}"
    )


def run(args: argparse.Namespace, work: Path, results: dict[str, Any]) -> None:
    kanin = Kanin(work / "kanin-data")
    kanin.start()
    brokers = {KANIN: Broker(KANIN, kanin.uri, kanin.pid, kanin, harness.shell(kanin.command))}
    if RABBITMQ in args.only:
        brokers[RABBITMQ] = Broker(RABBITMQ, args.rabbitmq_uri, harness.rabbitmq_pid())
    present = [name for name in brokers if name in args.only]
    points: list[dict[str, Any]] = results["points"]
    n = args.messages
    main_queue = f"{PREFIX}{args.size[0]}"
    try:
        for broker in brokers.values():  # idle memory, before anything of ours
            results["idle_rss_kb"][broker.name] = harness.rss_kb(broker.pid)
        turn = 0
        for name in order(turn, present):
            log(f"(1) publish {n:,} x {args.size[0]} B to {name}")
            point = publish_point(brokers[name], main_queue, args.size[0], args)
            points.append({"scenario": "publish", "broker": name, "size": args.size[0], **point})
            log(summarize(name, point))
        starts = [str(i * n // args.readers) for i in range(args.readers)]
        each = args.read_each or n // args.readers
        for rep in range(args.reps):
            turn += 1
            for name in order(turn, present):
                log(f"(2) rep {rep}: one reader from first on {name}")
                point = read_point(brokers[name], main_queue, ["first"], n, 1, args)
                points.append({"scenario": "first", "broker": name, "rep": rep, **point})
                log(summarize(name, point))
            turn += 1
            for name in order(turn, present):
                log(f"(3) rep {rep}: {args.readers} readers x {each:,} on {name}")
                point = read_point(brokers[name], main_queue, starts, each, args.reader_procs, args)
                points.append({"scenario": "readers", "broker": name, "rep": rep, **point})
                log(summarize(name, point))
        for size in args.size[1:]:
            turn += 1
            for name in order(turn, present):
                queue = f"{PREFIX}{size}"
                log(f"(1) publish {n:,} x {size} B to {name}")
                point = publish_point(brokers[name], queue, size, args)
                points.append({"scenario": "publish", "broker": name, "size": size, **point})
                log(summarize(name, point))
                delete_stream(brokers[name].uri, queue)
                brokers[name].queues.remove(queue)
    finally:
        results["kanin_errors"] = kanin.error_lines()[:20]
        results["kanin_server_command"] = brokers[KANIN].server_command
        for queue in brokers[RABBITMQ].queues if RABBITMQ in brokers else []:
            try:
                delete_stream(args.rabbitmq_uri, queue)
            except Exception as exc:
                log(f"could not delete {queue} on RabbitMQ: {exc}")
        kanin.stop()


# -- the report --------------------------------------------------------------------------


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def cell(values: list[float], fmt: str) -> str:
    if not values:
        return "—"
    text = format(median(values), fmt)
    if len(values) > 1:
        text += f" ({format(min(values), fmt)}-{format(max(values), fmt)})"
    return text


def render(results: dict[str, Any]) -> str:
    env = results["environment"]
    settings = results["settings"]
    points = results["points"]
    n = int(settings["messages"])

    def pick(scenario: str, broker: str, size: int | None = None) -> list[dict[str, Any]]:
        return [
            p
            for p in points
            if p["scenario"] == scenario
            and p["broker"] == broker
            and p["ok"]
            and (size is None or p.get("size") == size)
        ]

    def mb(kb: float) -> float:
        return kb / 1024

    def disk_per_msg(p: dict[str, Any]) -> float | None:
        return p["disk_bytes"] / n if p.get("disk_bytes") else None

    def growth(p: dict[str, Any]) -> float:
        return mb(p["rss_peak_kb"] - p["rss_before_kb"])

    def per_msg(p: dict[str, Any]) -> float:
        return p["broker_cpu_s"] / p["messages"] * 1e6 if p["messages"] else 0.0

    rows: list[tuple[str, str, str, str, str]] = []

    def row(label: str, scenario: str, get: Any, fmt: str, better: str, size: int | None = None):
        values = {b: [get(p) for p in pick(scenario, b, size)] for b in (KANIN, RABBITMQ)}
        values = {b: [v for v in vs if v is not None] for b, vs in values.items()}
        ratio, goal = "", ""
        if values[KANIN] and values[RABBITMQ] and better:
            k, r = median(values[KANIN]), median(values[RABBITMQ])
            if r:
                ratio = f"{k / r:.2f}x"
                ahead = k > r if better == "higher" else k < r
                goal = "yes" if ahead else "**no**"
        rows.append((label, cell(values[KANIN], fmt), cell(values[RABBITMQ], fmt), ratio, goal))

    sizes = [int(s) for s in settings["size"]]
    for size in sizes:
        tag = f"(1) publish {size} B"
        row(f"{tag}: confirmed msg/s", "publish", lambda p: p["rate"], ",.0f", "higher", size)
        row(f"{tag}: broker CPU µs/msg", "publish", per_msg, ".1f", "lower", size)
        row(f"{tag}: RSS 2 s after, MB", "publish", lambda p: mb(p["rss_after_kb"]), ",.0f",
            "lower", size)  # fmt: skip
        row(f"{tag}: RSS peak while publishing, MB", "publish",
            lambda p: mb(p["rss_peak_kb"]), ",.0f", "", size)  # fmt: skip
        row(f"{tag}: stream on disk, bytes/msg", "publish", disk_per_msg, ".1f", "", size)
        row(f"{tag}: longest wait for a confirm, s", "publish",
            lambda p: p["clients"][0]["longest_confirm_gap_s"], ".2f", "", size)  # fmt: skip
    tag = "(2) read from first"
    row(f"{tag}: msg/s", "first", lambda p: p["rate"], ",.0f", "higher")
    row(f"{tag}: broker CPU µs/msg", "first", per_msg, ".1f", "lower")
    row(f"{tag}: RSS before, MB", "first", lambda p: mb(p["rss_before_kb"]), ",.0f", "")
    row(f"{tag}: RSS peak while reading, MB", "first", lambda p: mb(p["rss_peak_kb"]), ",.0f",
        "lower")  # fmt: skip
    row(f"{tag}: RSS at the end of reading, MB", "first", lambda p: mb(p["rss_end_kb"]), ",.0f",
        "")  # fmt: skip
    row(f"{tag}: RSS growth while reading (peak - before), MB", "first", growth, ",.0f", "")
    row(f"{tag}: first delivery after, s", "first",
        lambda p: p["readers"][0]["first_delivery_s"], ".3f", "")  # fmt: skip
    row(f"{tag}: longest gap between deliveries, s", "first",
        lambda p: p["readers"][0]["longest_gap_s"], ".2f", "")  # fmt: skip
    readers = int(settings["readers"])
    each = int(settings["read_each"] or n // readers)
    tag = f"(3) {readers} readers"
    row(f"{tag}: aggregate msg/s", "readers", lambda p: p["rate"], ",.0f", "higher")
    row(f"{tag}: slowest reader msg/s", "readers", lambda p: min(p["reader_rates"]), ",.0f",
        "higher")  # fmt: skip
    row(f"{tag}: fastest reader msg/s", "readers", lambda p: max(p["reader_rates"]), ",.0f", "")
    row(f"{tag}: broker CPU µs/msg", "readers", per_msg, ".1f", "lower")
    row(f"{tag}: RSS peak while reading, MB", "readers", lambda p: mb(p["rss_peak_kb"]),
        ",.0f", "lower")  # fmt: skip
    row(f"{tag}: RSS at the end of reading, MB", "readers", lambda p: mb(p["rss_end_kb"]),
        ",.0f", "")  # fmt: skip
    row(f"{tag}: RSS growth while reading (peak - before), MB", "readers", growth, ",.0f", "")
    row(f"{tag}: longest gap between deliveries, s", "readers",
        lambda p: max(r["longest_gap_s"] for r in p["readers"]), ".2f", "")  # fmt: skip
    for scenario in ("publish", "first", "readers"):
        label = f"other CPU load % during {NUMBER[scenario]}"
        row(label, scenario, lambda p: p["other_cpu_percent"], ".1f", "")

    reps = int(settings["reps"])
    idle = results.get("idle_rss_kb", {})
    lines = [
        "# Streams: kanin beside RabbitMQ 3.10",
        "",
        f"One run of `{results['command']}` on {env.get('date', '?')}, "
        f"{results.get('run_time_s', 0) / 60:.0f} minutes in all, on {env.get('host')}. "
        f"kanin {env.get('kanin_commit', '?')}"
        f"{' plus uncommitted changes' if env.get('kanin_tree_dirty') else ''} (sources "
        f"copied at the start, digest {env.get('kanin_source_digest', '?')}; the broker "
        f"{env.get('kanin_build', 'pure Python')}), RabbitMQ "
        f"{env.get('rabbitmq', '?')} on {env.get('erlang', '?')}, Python {env.get('python')}; "
        f"{env.get('cores')} cores ({env.get('cpu')}), {env.get('memory_gb')} GB, Linux "
        f"{env.get('kernel')}; one 4 KB append + fsync takes {env.get('fsync_4k_median_ms')} "
        "ms (median) on this disk. Brokers and clients share the cores; the machine is "
        "shared with other work (see *other CPU load*).",
        "",
        f"One stream of {n:,} messages of {sizes[0]} bytes per broker, published once (1) and "
        f"read {reps} time{'s' * (reps > 1)} in (2) and (3); cells are the median "
        + ("(min-max) " if reps > 1 else "")
        + "of the points whose checks passed. "
        f"(1): {settings['publishers']} publisher connections, confirm window "
        f"{settings['window']} each. (2): one consumer from `first`, prefetch "
        f"{settings['prefetch']}, a multiple ack every {settings['ack_every']}. (3): "
        f"{readers} consumers at once from offsets 0, {n // readers:,}, ... each reading "
        f"{each:,}, same prefetch and acks, in {settings['reader_procs']} client processes. "
        f"Resident memory of the idle brokers before the run: kanin "
        f"{mb(idle.get(KANIN, 0)):.0f} MB, RabbitMQ (beam.smp, holding whatever it held) "
        f"{mb(idle.get(RABBITMQ, 0)):.0f} MB. bench/README.md says what each row means.",
        "",
        "Goal: kanin ahead of RabbitMQ in each scenario (rates higher, CPU per message and "
        "memory while reading lower).",
        "",
        "| measure | kanin | RabbitMQ | kanin ÷ RabbitMQ | kanin ahead? |",
        "|---|---|---|---|---|",
        *[f"| {' | '.join(r)} |" for r in rows],
        "",
    ]
    lines += ["## Problems seen in this run", ""]
    problems = []
    for p in points:
        name = f"{NUMBER[p['scenario']]} {p['broker']}"
        if not p["ok"]:
            problems += [f"{name}: {e.splitlines()[0]}" for e in p["errors"]] or [
                f"{name}: a check failed: "
                + "; ".join(
                    f"reader from {r['start']} got {r['delivered']:,} of {r['count']:,}, "
                    f"first offset {r['first_offset']}, {r['backwards']} repeated or back, "
                    f"{r['no_offset']} without x-stream-offset"
                    for r in p.get("readers", [])
                )
            ]
        for cpu in p["client_cpu_s"]:
            if p["wall_s"] and cpu / p["wall_s"] > 0.9:
                problems.append(
                    f"{name}: a client process used {cpu / p['wall_s']:.0%} of a core: the "
                    "client, not the broker, may be the limit"
                )
    problems += [f"kanin log: {line}" for line in results.get("kanin_errors", [])[:5]]
    lines += [f"- {text}" for text in problems] or ["- none"]
    lines += ["", "## Each point", ""]
    for p in points:
        clients = ", ".join(f"{c:.1f} s" for c in p["client_cpu_s"])
        extra = ""
        if p["scenario"] == "readers" and p.get("reader_rates"):
            extra = " readers: " + ", ".join(f"{r:,.0f}" for r in p["reader_rates"]) + " msg/s;"
        gaps = sum(r.get("gaps", 0) for r in p.get("readers", []))
        if gaps:
            skipped = sum(r["skipped"] for r in p["readers"])
            extra += f" {gaps} gap(s) in the offsets delivered, {skipped} offset(s) skipped;"
        lines.append(
            f"- {p['scenario']} {p['broker']}"
            + (f" rep {p['rep']}" if "rep" in p else f" {p['size']} B")
            + f": {p['rate'] or 0:,.0f} msg/s;{extra} {p['messages']:,} messages in "
            f"{p['wall_s']:.0f} s (client process wall); broker CPU {p['broker_cpu_s']:.0f} s; "
            f"RSS {mb(p['rss_before_kb']):.0f} -> peak {mb(p['rss_peak_kb']):.0f}, end "
            f"{mb(p['rss_end_kb']):.0f} MB; client CPU {clients}; other CPU load "
            f"{p['other_cpu_percent']}%"
        )
    lines += [
        "",
        "## Commands",
        "",
        "```sh",
        f"# {results['command']}",
        "# every kanin server and client below ran with PYTHONPATH=<the run's copy of src/>",
        "# kanin server:",
        results.get("kanin_server_command", ""),
    ]
    for p in points:
        lines.append(
            f"# {p['scenario']} on {p['broker']}" + (f", rep {p['rep']}" if "rep" in p else "")
        )
        lines += p["commands"]
    lines += ["```", ""]
    return "\n".join(lines)


# -- main --------------------------------------------------------------------------------


def environment(work: Path, rabbitmq: bool) -> dict[str, Any]:
    found = durability.environment(work, rabbitmq=rabbitmq)
    found |= {"host": platform.node(), "kernel": platform.release()}
    if rabbitmq:
        _, status = harness.rabbitmqctl("status")
        erlang = re.search(r"Erlang configuration: (Erlang/OTP \S+)", status)
        found["erlang"] = erlang.group(1) if erlang else "?"
    return found


def parse_args(argv: list[str]) -> argparse.Namespace:
    if argv and argv[0] in ("publish", "read"):
        client = argparse.ArgumentParser(prog=f"streams.py {argv[0]}")
        client.add_argument("job")
        client.add_argument("--uri", required=True)
        client.add_argument("--queue", required=True)
        client.add_argument("--stall-s", type=float, default=120.0)
        client.add_argument("--spy-pid", type=int, help="py-spy dump this pid on a stall")
        if argv[0] == "publish":
            client.add_argument("--messages", type=int, required=True)
            client.add_argument("--size", type=int, default=16)
            client.add_argument("--connections", type=int, default=2)
            client.add_argument("--window", type=int, default=1000)
            client.add_argument("--batch", type=int, default=100)
        else:
            client.add_argument("--start", action="append", required=True,
                                help="first, or an offset; one connection each")  # fmt: skip
            client.add_argument("--count", type=int, required=True)
            client.add_argument("--prefetch", type=int, default=1000)
            client.add_argument("--ack-every", type=int, default=200)
        return client.parse_args(argv)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=10_000_000, help="N, per stream")
    parser.add_argument("--size", type=int, action="append",
                        help="body bytes (default 16); more: publish-only streams too")  # fmt: skip
    parser.add_argument("--publishers", type=int, default=2, help="connections in (1)")
    parser.add_argument("--window", type=int, default=1000, help="unconfirmed per publisher")
    parser.add_argument("--batch", type=int, default=100, help="publishes per socket write")
    parser.add_argument("--prefetch", type=int, default=1000)
    parser.add_argument("--ack-every", type=int, default=200)
    parser.add_argument("--readers", type=int, default=10)
    parser.add_argument("--read-each", type=int, default=0, help="default: N / readers")
    parser.add_argument("--reader-procs", type=int, default=2, help="client processes in (3)")
    parser.add_argument("--reps", type=int, default=1, help="repetitions of (2) and (3)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per client process")
    parser.add_argument("--rabbitmq-uri", default=RABBITMQ_URI)
    parser.add_argument("--only", choices=[KANIN, RABBITMQ], help="measure one broker only")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    compiled.add_option(parser)
    args = parser.parse_args(argv)
    args.job = None
    args.size = args.size or [16]
    args.only = [args.only] if args.only else [KANIN, RABBITMQ]
    return args


def main() -> int:
    args = parse_args(sys.argv[1:])
    if args.job is not None:
        return client_main(args)
    started = time.monotonic()
    # Stopped with SIGTERM: still delete the RabbitMQ streams and stop kanin (finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.out.mkdir(parents=True, exist_ok=True)
    harness.raise_fd_limit()
    use_rabbitmq = RABBITMQ in args.only
    started_rabbitmq = harness.ensure_rabbitmq() if use_rabbitmq else False
    work = Path(tempfile.mkdtemp(prefix="kanin-bench-streams-"))
    results: dict[str, Any] = {
        "command": harness.shell(["python", "bench/streams.py", *sys.argv[1:]]),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "points": [],
        "idle_rss_kb": {},
    }
    try:
        results["environment"] = environment(work, use_rabbitmq)
        results["environment"]["started_rabbitmq"] = started_rabbitmq
        results["environment"]["kanin_source_digest"] = harness.snapshot_source(ROOT, work)
        if args.compiled:
            results["environment"] |= compiled.use_for_every_broker(work, work / "src")
        log(f"environment: {results['environment']}")
        run(args, work, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        results["run_time_s"] = round(time.monotonic() - started, 1)
        report = harness.write_results(args.out, "streams", results, render)
    print(report.read_text())
    log(f"wrote {report} in {results['run_time_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
