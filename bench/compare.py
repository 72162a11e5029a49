"""The comparison benchmark: kanin against RabbitMQ 3.10, scenario by scenario, in one run.

    python bench/compare.py            # 20-25 minutes; writes bench/results/compare.{md,json}
    python bench/compare.py --quick    # 2-3 minutes, 1 repetition: does it all work?

Every point runs `kanin perf` against a fresh kanin server and against the local RabbitMQ
(started if it is not running), alternating which broker goes first per repetition, and
reads the broker process's CPU time before and after.
(a) 1 producer, 1 consumer, 16-byte transient messages, no confirms, auto-ack;
(b) (a) with manual acks, prefetch 200, one multiple ack per 50;
(c) (b) with publisher confirms, window 1000;   (d) (c) persistent, durable queue;
(e) an end-to-end experiment, bench/durability.py's (a): 1500-byte persistent messages,
    publisher confirms and manual acks, 1/2/4/8 queues, 2 producers and 3 consumers per queue;
(f) the confirm strategies of RabbitMQ's publisher-confirms tutorial on 50,000 persistent
    messages: one at a time, batches of 100, asynchronous (window 1000);
(g) (c) and (d) at a fixed 1,000 msg/s: confirm and end-to-end latency percentiles;
(h) many clients: 50 producer and 50 consumer connections on 50 queues, (c)'s settings with
    a window of 100 per producer;
(i) many slow clients: 1,000 producer connections at 10 msg/s each (10,000 msg/s) over 10
    queues with one consumer connection each, confirms (window 10) and manual acks:
    latency percentiles and CPU, as (g);
(m) resident memory per idle connection (one channel each) and per empty queue.
bench/README.md explains each column.

    python bench/compare.py --baseline-src DIR --no-rabbitmq --only cd --out /tmp/before-after

--baseline-src DIR adds a third broker, kanin-baseline: `kanin server` run from DIR/src
(another checkout, e.g. the code before a change), loaded by the same `kanin perf` as the
others, and the report adds kanin ÷ kanin-baseline. --no-rabbitmq leaves RabbitMQ out.

    python bench/compare.py --compiled --baseline-src . --no-rabbitmq --only cd --out /tmp/ab

--compiled runs the kanin broker from the compiled build (mypyc, tests/compiled_build.py,
made from this tree's sources and checked to be the same sources as the snapshot); with
--baseline-src . that is compiled (kanin) against pure (kanin-baseline), same code. The
`kanin perf` client is always the pure snapshot, the same for every broker.

    python bench/compare.py --compiled --baseline-src /tmp/old --baseline-compiled ...

--baseline-compiled runs kanin-baseline compiled too, built by DIR's own
tests/compiled_build.py: an A/B of a change to the compiled broker.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import compiled
import durability
import harness
from compare_report import render
from harness import Kanin, run_perf, shell

ROOT = Path(__file__).resolve().parent.parent
EXCHANGE = "bench.compare"  # not durability.py's, so the two can share a RabbitMQ
KANIN, BASELINE, RABBITMQ = "kanin", "kanin-baseline", "rabbitmq"
BROKERS = (KANIN, BASELINE, RABBITMQ)  # the order of odd repetitions; even ones reverse it

SMALL = ["-x", "1", "-y", "1", "-s", "16"]
MANUAL_ACKS = ["--ack", "manual", "--prefetch", "200", "--multi-ack-every", "50"]
WINDOW = ["--confirm", "window:1000"]
PERSISTENT = ["--persistent", "--durable"]
BASE_ARGS = {
    "a": [*SMALL, "--ack", "auto"],
    "b": [*SMALL, *MANUAL_ACKS],
    "c": [*SMALL, *MANUAL_ACKS, *WINDOW],
    "d": [*SMALL, *MANUAL_ACKS, *WINDOW, *PERSISTENT],
}
BASE_WHAT = {
    "a": "1 producer, 1 consumer, 16 B transient, no confirms, auto-ack",
    "b": "(a) + manual acks, prefetch 200, multi-ack every 50",
    "c": "(b) + confirms, window 1000",
    "d": "(c) + persistent messages, durable queue",
}
SCENARIOS = "abcdefghim"
MANY_CLIENTS = [*MANUAL_ACKS, "-s", "16", "--confirm", "window:100"]
MANY_CLIENTS_WHAT = "100 connections: 50 producers, 50 consumers, 50 queues, (c) window 100"
SLOW_CLIENTS = ["-x", "1000", "-y", "10", "--queues", "10", "-s", "16", "--rate", "10"]
SLOW_CLIENTS += [*MANUAL_ACKS, "--confirm", "window:10"]
SLOW_CLIENTS_WHAT = "1,000 producer connections at 10 msg/s, 10 queues and consumers"
CONFIRM_STRATEGIES = {
    "each": "one at a time",
    "batch:100": "batches of 100",
    "window:1000": "async",
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--duration", type=float, default=10.0, help="seconds per timed point")
    p.add_argument("--reps", type=int, default=3, help="repetitions of every point")
    p.add_argument("--only", default=SCENARIOS, help="scenario letters to run; m = memory")
    p.add_argument("--quick", action="store_true", help="2 s points, 1 rep, 5,000 msgs in (f)")
    p.add_argument("--queues", default="1,2,4,8", help="queue counts for (e)")
    p.add_argument("--messages", type=int, default=50_000, help="messages per (f) point")
    p.add_argument("--rate", type=float, default=1000.0, help="msg/s for (g)")
    p.add_argument("--connections", type=int, default=1000, help="idle connections for (m)")
    p.add_argument("--idle-queues", type=int, default=10_000, help="empty queues for (m)")
    p.add_argument("--rabbitmq-uri", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    p.add_argument(
        "--out",
        type=Path,
        default=ROOT / "bench" / "results",
        help="directory for compare.{md,json} (default: bench/results, the results of record)",
    )
    p.add_argument(
        "--baseline-src",
        type=Path,
        metavar="DIR",
        help="also run kanin-baseline, `kanin server` from DIR/src (another kanin checkout)",
    )
    p.add_argument(
        "--baseline-compiled",
        action="store_true",
        help="run kanin-baseline from DIR's compiled build (its tests/compiled_build.py)",
    )
    p.add_argument("--no-rabbitmq", action="store_true", help="leave RabbitMQ out of the run")
    compiled.add_option(p)
    args = p.parse_args()
    if set(args.only) - set(SCENARIOS):
        p.error(f"--only takes letters from {SCENARIOS}, got {args.only!r}")
    if args.baseline_src is not None:
        args.baseline_src = args.baseline_src.resolve()
        if not (args.baseline_src / "src" / "kanin" / "__init__.py").is_file():
            p.error(f"--baseline-src: no kanin package in {args.baseline_src}/src")
    if args.baseline_compiled and args.baseline_src is None:
        p.error("--baseline-compiled needs --baseline-src")
    if args.quick:
        args.duration, args.reps, args.messages = 2.0, 1, 5_000
    return args


@dataclass(frozen=True)
class Point:
    """One measurement, run against each broker in every repetition."""

    scenario: str  # its letter
    name: str  # unique within the run, e.g. "e 4q"
    what: str
    perf_args: Callable[[str], list[str]]  # queue prefix -> kanin perf's arguments
    queues: int = 1
    consumers: bool = True  # without consumers the check is the queue's depth


def plan(args: argparse.Namespace) -> list[Point]:
    timed = ["--duration", str(args.duration), "--delete-queues"]
    points = [
        Point(x, x, BASE_WHAT[x], _with_prefix([*BASE_ARGS[x], *timed]))
        for x in "abcd"
        if x in args.only
    ]
    if "e" in args.only:
        points += [_end_to_end(int(q), args) for q in args.queues.split(",")]
    if "f" in args.only:
        points += [_confirm_strategy(strategy, args.messages) for strategy in CONFIRM_STRATEGIES]
    if "g" in args.only:
        paced = ["--rate", str(args.rate), *timed]
        points += [
            Point(
                "g",
                f"g {x}",
                f"({x}) at {args.rate:,.0f} msg/s",
                _with_prefix(BASE_ARGS[x] + paced),
            )
            for x in "cd"
        ]
    if "h" in args.only:
        many = ["-x", "50", "-y", "50", "--queues", "50", *MANY_CLIENTS, *timed]
        points.append(Point("h", "h", MANY_CLIENTS_WHAT, _with_prefix(many), queues=50))
    if "i" in args.only:
        slow = [*SLOW_CLIENTS, *timed]
        points.append(Point("i", "i", SLOW_CLIENTS_WHAT, _with_prefix(slow), queues=10))
    return points


def _with_prefix(perf_args: list[str]) -> Callable[[str], list[str]]:
    return lambda prefix: [*perf_args, "--queue-prefix", prefix]


def _end_to_end(queues: int, args: argparse.Namespace) -> Point:
    # durability.py's own arguments, so (e) here and its (a) measure the same thing.
    settings = argparse.Namespace(window=1000, prefetch=200, duration=args.duration)
    return Point(
        "e",
        f"e {queues}q",
        f"end-to-end: {queues} queue(s), {2 * queues}x2 producers, {3 * queues}x3 consumers",
        lambda prefix: durability.point_args(queues, prefix, settings, EXCHANGE),
        queues=queues,
    )


def _confirm_strategy(strategy: str, messages: int) -> Point:
    # The tutorial publishes and times; nobody consumes. The depth check stands in for
    # perf's loss check, so the queues stay until it is done (no --delete-queues).
    perf_args = ["-x", "1", "-y", "0", "-s", "16", *PERSISTENT, "--confirm", strategy]
    perf_args += ["--count", str(messages)]
    what = f"confirm strategies: {messages:,} persistent msgs, {CONFIRM_STRATEGIES[strategy]}"
    return Point("f", f"f {strategy}", what, _with_prefix(perf_args), consumers=False)


def brokers(args: argparse.Namespace) -> tuple[str, ...]:
    """The brokers this run measures, in BROKERS' order."""
    left_out = {BASELINE} if args.baseline_src is None else set()
    left_out |= {RABBITMQ} if args.no_rabbitmq else set()
    return tuple(b for b in BROKERS if b not in left_out)


@dataclass
class Run:
    args: argparse.Namespace
    work: Path
    brokers: tuple[str, ...]
    rabbitmq_pid: int | None  # None when RabbitMQ is not in the run
    declared: set[str]  # every queue name used on RabbitMQ, for the final sweep
    # kanin broker -> the PYTHONPATH its server runs with; None: harness.ENV's, the snapshot
    # of this tree (which `kanin perf` always uses, so only the broker differs).
    kanin_paths: dict[str, Path | None] = field(default_factory=lambda: {KANIN: None})

    def rabbitmq(self) -> int:
        """beam.smp's OS pid, looked up again if RabbitMQ was restarted meanwhile."""
        if self.rabbitmq_pid is None or not Path(f"/proc/{self.rabbitmq_pid}").exists():
            self.rabbitmq_pid = harness.rabbitmq_pid()
        return self.rabbitmq_pid

    def server_command(self, broker: str, kanin: Kanin) -> str:
        """How to start this broker's server by hand, for the report."""
        if broker == BASELINE:
            # The run uses a copy that is deleted at the end; DIR/src holds the same code.
            return f"PYTHONPATH={self.args.baseline_src}/src {shell(kanin.command)}"
        return shell(kanin.command)


def run_point(point: Point, broker: str, rep: int, run: Run) -> dict[str, Any]:
    slug = point.name.replace(" ", "").replace(":", "")
    prefix = f"cmp-{slug}-{broker}-r{rep}-"
    result: dict[str, Any] = {"point": point.name, "scenario": point.scenario, "rep": rep}
    result |= {"broker": broker, "what": point.what}
    if broker == RABBITMQ:
        result |= on_rabbitmq(point, prefix, run)
    else:
        result |= on_kanin(point, broker, prefix, f"{slug}-r{rep}", run)
    _print_point(result)
    return result


def on_kanin(point: Point, broker: str, prefix: str, label: str, run: Run) -> dict[str, Any]:
    """One point on a fresh server of this kanin broker."""
    # RabbitMQ should idle meanwhile; if it does not, someone else is using it, and its
    # own CPU figures include their work.
    idle = rabbitmq_clock(run)
    with fresh_kanin(run, broker, label) as kanin:
        result = measure(point, kanin.uri, kanin.pid, point.perf_args(prefix), broker)
        result["server_command"] = run.server_command(broker, kanin)
        result["kanin_errors"] = kanin.error_lines()[:5]
    if idle is not None:
        result["rabbitmq_cpu_percent_meanwhile"] = rabbitmq_busy_percent(idle, run)
    return result


def rabbitmq_clock(run: Run) -> tuple[float, float] | None:
    """(now, RabbitMQ's CPU seconds so far), or None if RabbitMQ is not in the run."""
    if RABBITMQ not in run.brokers:
        return None
    return time.monotonic(), harness.cpu_seconds(run.rabbitmq())


def rabbitmq_busy_percent(since: tuple[float, float], run: Run) -> float:
    """RabbitMQ's CPU use since rabbitmq_clock() gave `since`, in % of one core."""
    started, cpu = since
    busy = harness.cpu_seconds(run.rabbitmq()) - cpu
    return round(100 * busy / (time.monotonic() - started), 1)


def on_rabbitmq(point: Point, prefix: str, run: Run) -> dict[str, Any]:
    queue_names = [f"{prefix}{index}" for index in range(point.queues)]
    run.declared.update(queue_names)
    uri = run.args.rabbitmq_uri
    result = measure(point, uri, run.rabbitmq(), point.perf_args(prefix), RABBITMQ)
    harness.delete_queues(uri, queue_names)  # perf deletes them too, unless it failed
    return result


@contextmanager
def fresh_kanin(run: Run, broker: str, label: str) -> Iterator[Kanin]:
    """A server of this kanin broker with an empty data directory, for one point only."""
    data_dir = run.work / f"{broker}-{label}"
    kanin = Kanin(data_dir, pythonpath=run.kanin_paths[broker])
    kanin.start()
    try:
        yield kanin
    finally:
        kanin.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def measure(point: Point, uri: str, pid: int, perf_args: list[str], broker: str) -> dict[str, Any]:
    """One perf run, with the broker's CPU seconds read from /proc around it."""
    foreign = harness.ForeignLoad(count_rabbitmq_as_ours=broker == "rabbitmq")
    with foreign:
        cpu_before = harness.cpu_seconds(pid)
        perf = run_perf(uri, perf_args)
        cpu_s = harness.cpu_seconds(pid) - cpu_before
    summary = perf.summary
    published = summary.get("published") or 0
    result: dict[str, Any] = {
        "command": shell(perf.command),
        "wall_s": round(perf.wall_s, 1),
        "broker_cpu_s": round(cpu_s, 2),
        "cpu_s_per_100k": round(cpu_s / published * 100_000, 3) if published else None,
        "rate": headline_rate(summary, point.consumers),
        "foreign_cpu_percent": foreign.percent,
        "foreign_cpu_top": foreign.top,
        "summary": summary,
    }
    if not point.consumers and "config" in summary:
        result["depth_check"] = depth_check(uri, perf_args, summary)
    return result


def headline_rate(summary: dict[str, Any], consumers: bool) -> float:
    """Messages through the broker per second: delivered ones, or confirmed ones for (f).

    Without confirms a publisher can outrun the consumer for a while, so the publish
    rate would flatter whichever broker queues more; the delivery rate cannot.
    """
    rates = summary.get("rates", {})
    return float(rates.get("consume" if consumers else "confirm", 0.0))


def depth_check(uri: str, perf_args: list[str], summary: dict[str, Any]) -> dict[str, Any]:
    """With no consumer, every confirmed message must sit in the queue, once."""
    queue = perf_args[perf_args.index("--queue-prefix") + 1] + "0"
    try:
        depth = harness.message_count(uri, queue)
    except Exception as exc:  # a broker that lost the queue: report it, keep going
        return {"queue": queue, "error": f"{type(exc).__name__}: {exc}"}
    return {"queue": queue, "depth": depth, "confirmed": summary.get("confirmed")}


def _print_point(result: dict[str, Any]) -> None:
    cpu = result.get("cpu_s_per_100k")
    print(
        f"  ({result['point']:<14}) {result['broker']:14} rep {result['rep']}: "
        f"{result['rate']:>9,.0f} msg/s  broker CPU {cpu if cpu is not None else '-'} s/100k"
        f"  ok={result['summary'].get('ok')}  other load {result['foreign_cpu_percent']}%",
        flush=True,
    )


def throughput(points: list[Point], run: Run, results: list[dict[str, Any]]) -> None:
    """Every point on every broker, appended to results as they finish."""
    for rep in range(1, run.args.reps + 1):
        order = run.brokers if rep % 2 else run.brokers[::-1]  # who goes first alternates
        for point in points:
            for broker in order:
                try:
                    results.append(run_point(point, broker, rep, run))
                except Exception as exc:  # one broken point must not lose the others
                    results.append(failed_point(point, broker, rep, exc))


def failed_point(point: Point, broker: str, rep: int, exc: Exception) -> dict[str, Any]:
    error = f"the point did not run: {type(exc).__name__}: {exc}"
    print(f"  ({point.name}) {broker} rep {rep}: {error}", flush=True)
    return {
        "point": point.name,
        "scenario": point.scenario,
        "rep": rep,
        "broker": broker,
        "what": point.what,
        "rate": 0.0,
        "summary": {"ok": False, "errors": [error]},
    }


# -- (m) memory ------------------------------------------------------------------------------


SETTLE_S = 2.0  # after the helper says ready: let lazily allocated state appear


def memory(run: Run, rows: list[dict[str, Any]]) -> None:
    """Per broker: RSS growth per idle connection, then per empty queue (fresh kanin each)."""
    for kind, count in (("connections", run.args.connections), ("queues", run.args.idle_queues)):
        for broker in run.brokers:
            if broker == RABBITMQ:
                rows.append(rabbitmq_memory_point(run, kind, count))
                continue
            with fresh_kanin(run, broker, f"memory-{kind}") as kanin:
                rows.append(memory_point(broker, kanin.uri, kanin.pid, kind, count))
                rows[-1]["kanin_errors"] = kanin.error_lines()[:5]


def rabbitmq_memory_point(run: Run, kind: str, count: int) -> dict[str, Any]:
    wanted, note = count, ""
    if kind == "connections":
        used, limit = harness.rabbitmq_sockets()
        # RabbitMQ stalls handshakes beyond its socket limit (about 0.9 x its open-files limit).
        count = min(count, limit - used - 32)
        note = f"RabbitMQ's socket limit is {limit} ({used} in use)"
    row = memory_point(RABBITMQ, run.args.rabbitmq_uri, run.rabbitmq(), kind, count)
    if kind == "queues" and not row["released"]:  # left for the final sweep
        run.declared.update(f"{idle_prefix(RABBITMQ)}{index}" for index in range(count))
    if count < wanted:
        row["note"] = note
    return row


def idle_prefix(broker: str) -> str:
    return f"cmp-idle-{broker}-"


def memory_point(broker: str, uri: str, pid: int, kind: str, count: int) -> dict[str, Any]:
    row: dict[str, Any] = {"broker": broker, "kind": kind, "count": count}
    command = [harness.PYTHON, str(ROOT / "bench" / "idle_clients.py"), kind, uri, str(count)]
    if kind == "queues":
        command.append(idle_prefix(broker))
    row["command"] = shell(command)
    # The baseline must be still: a fresh kanin is settling its start-up allocations,
    # and a RabbitMQ that someone else is using moves by more than this test adds.
    baseline = []
    for _ in range(3):
        time.sleep(0.5)
        baseline.append(harness.rss_kb(pid))
    row["rss_before_kb"] = baseline[-1]
    row["baseline_spread_kb"] = max(baseline) - min(baseline)
    with holding(command) as helper:
        if helper["status"].startswith("ready"):
            time.sleep(SETTLE_S)
            row["rss_after_kb"] = harness.rss_kb(pid)
            grown = (row["rss_after_kb"] - row["rss_before_kb"]) * 1024
            row["bytes_per_item"] = round(grown / count)
    row["helper"], row["released"] = helper["status"], helper["released"]
    print(f"  (m) {broker:14} {count:,} {kind}: {row}", flush=True)
    return row


@contextmanager
def holding(command: list[str]) -> Iterator[dict[str, Any]]:
    """Run bench/idle_clients.py while the body runs.

    Yields {"status": its first line, `ready N` or `error ...`}; on leaving, adds
    "released": whether it then undid everything (closed, deleted) and said `done`.
    """
    helper = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=harness.ENV
    )
    assert helper.stdin is not None and helper.stdout is not None
    state: dict[str, Any] = {"status": helper.stdout.readline().strip() or "no output"}
    try:
        yield state
    finally:
        try:  # communicate() closes its stdin: the helper's signal to release everything
            rest, _ = helper.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            helper.kill()
            rest, _ = helper.communicate()
        state["released"] = "done" in rest


# -- the run ---------------------------------------------------------------------------------


def cleanup_rabbitmq(run: Run) -> None:
    """Whatever a failed point left behind on RabbitMQ (deleting a missing queue is fine)."""
    try:
        harness.delete_queues(run.args.rabbitmq_uri, sorted(run.declared))
        harness.delete_exchange(run.args.rabbitmq_uri, EXCHANGE)
    except Exception as exc:  # never hide the results behind a cleanup failure
        print(f"RabbitMQ cleanup failed: {exc}", flush=True)


def snapshot_baseline(run: Run) -> dict[str, Any]:
    """Copy the baseline's sources, as snapshot_source() does for this tree; its facts."""
    source: Path = run.args.baseline_src
    copy = run.work / "baseline-src"
    digest = harness.copy_source(source, copy)
    imported = harness.kanin_imported_from(copy)
    if imported != copy / "kanin":  # else kanin-baseline would not be the baseline at all
        raise RuntimeError(f"with PYTHONPATH={copy}, kanin is imported from {imported}")
    run.kanin_paths[BASELINE] = copy
    if run.args.baseline_compiled:
        work = run.work / "baseline"
        run.kanin_paths[BASELINE] = compiled.snapshot(work, copy, root=source)
    return {
        "kanin_baseline_build": compiled.BUILD_NAME if run.args.baseline_compiled else "pure",
        "kanin_baseline_src": str(source),
        "kanin_baseline_digest": digest,
        "kanin_baseline_commit": git_commit(source),
    }


def snapshot_compiled(run: Run) -> dict[str, Any]:
    run.kanin_paths[KANIN] = compiled.snapshot(run.work, run.work / "src")
    return {"kanin_build": compiled.BUILD_NAME, "kanin_compiled_tree": str(run.kanin_paths[KANIN])}


def git_commit(directory: Path) -> str | None:
    """The commit checked out in directory, if it is the top of a git work tree.

    A plain copy (`git archive | tar -x`) has none; and a directory inside some other
    checkout must not be given that checkout's commit.
    """

    def git(*args: str) -> str:
        result = subprocess.run(
            ["git", "-C", str(directory), *args], capture_output=True, text=True
        )
        return result.stdout.strip() if result.returncode == 0 else ""

    top = git("rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != directory:
        return None
    dirty = " plus uncommitted changes" if git("status", "--porcelain", "--", "src") else ""
    return git("rev-parse", "--short", "HEAD") + dirty


def main() -> int:
    args = parse_args()
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    fd_limit = harness.raise_fd_limit()  # kanin, RabbitMQ (if started here) and the helper
    use_rabbitmq = not args.no_rabbitmq
    started_rabbitmq = harness.ensure_rabbitmq() if use_rabbitmq else False
    work = Path(tempfile.mkdtemp(prefix="kanin-compare-"))
    results: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(args).items()}}
    rabbitmq_pid = harness.rabbitmq_pid() if use_rabbitmq else None
    run = Run(args, work, brokers(args), rabbitmq_pid, set())
    results |= {"argv": sys.argv[1:], "brokers": list(run.brokers)}
    try:
        results["environment"] = durability.environment(work, rabbitmq=use_rabbitmq)
        results["environment"]["kanin_source_digest"] = harness.snapshot_source(ROOT, work)
        results["environment"]["kanin_build"] = "pure Python"
        if args.compiled:
            results["environment"] |= snapshot_compiled(run)
        if args.baseline_src is not None:
            results["environment"] |= snapshot_baseline(run)
        results["environment"] |= {"fd_limit": fd_limit, "started_rabbitmq": started_rabbitmq}
        print(f"environment: {results['environment']}", flush=True)
        if "m" in args.only:  # first: before the load has grown RabbitMQ's allocators
            results["memory"] = []
            try:
                memory(run, results["memory"])
            except Exception as exc:  # report it and go on with the throughput points
                results["memory_error"] = f"{type(exc).__name__}: {exc}"
                print(f"  (m) failed: {results['memory_error']}", flush=True)
        results["points"] = []
        throughput(plan(args), run, results["points"])
    finally:
        if use_rabbitmq:
            cleanup_rabbitmq(run)
        shutil.rmtree(work, ignore_errors=True)
        results["run_time_s"] = round(time.monotonic() - started, 1)
        report = harness.write_results(args.out, "compare", results, render)
    print(f"wrote {report} in {results['run_time_s']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
