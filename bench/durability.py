"""The durability benchmark: kanin and RabbitMQ, measured in the same run.

    python bench/durability.py            # about 12 minutes; writes bench/results/

(a) an end-to-end experiment: persistent 1500-byte messages, publisher confirms, manual acks,
    1/2/4/8 durable queues behind a durable direct exchange, 2 producers (2 channels
    each) and 3 consumers (3 channels each) per queue; repetitions alternate the broker
    that goes first. (b) kanin's fsyncs per second and messages per fsync during (a),
    from its --stats-file. (c) start-up time with 1M small persistent messages on disk.
    (d) resident memory per queued message with 1M 1 KB persistent messages.
bench/README.md explains each figure.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
from harness import Kanin, StatsSampler, rabbitmqctl, run_perf, shell
from report import render

ROOT = Path(__file__).resolve().parent.parent
EXCHANGE = "bench.direct"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--duration", type=float, default=10.0, help="seconds per (a) point")
    p.add_argument("--reps", type=int, default=3, help="repetitions of each (a) point")
    p.add_argument("--queues", default="1,2,4,8", help="queue counts for (a)")
    p.add_argument("--window", type=int, default=1000, help="confirm window per channel")
    p.add_argument("--prefetch", type=int, default=200, help="consumer prefetch")
    p.add_argument("--messages", type=int, default=1_000_000, help="messages for (c) and (d)")
    p.add_argument("--rabbitmq-uri", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    p.add_argument("--no-rabbitmq-restart", action="store_true", help="skip RabbitMQ in (c)")
    p.add_argument("--only", default="abcd", help="which parts to run, e.g. 'a' or 'cd'")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    return p.parse_args()


def environment(work: Path, rabbitmq: bool = True) -> dict[str, Any]:
    def git(*args: str) -> str:
        result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return result.stdout.strip()

    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    found: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "kanin_commit": git("rev-parse", "--short", "HEAD"),
        "kanin_tree_dirty": bool(git("status", "--porcelain", "--", "src")),
        "python": platform.python_version(),
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0)),
        "memory_gb": round(int(Path("/proc/meminfo").read_text().split()[1]) / 1024**2, 1),
        "fsync_4k_median_ms": harness.fsync_probe(work),
    }
    if rabbitmq:  # a run without RabbitMQ (compare.py --no-rabbitmq) may not have rabbitmqctl
        found["rabbitmq"] = harness.rabbitmq_version()
    return found


def point_args(
    queues: int, prefix: str, args: argparse.Namespace, exchange: str = EXCHANGE
) -> list[str]:
    """kanin perf's arguments for one (a) point; bench/compare.py's (e) uses them too."""
    return [
        "-x", str(2 * queues), "--producer-channels", "2",
        "-y", str(3 * queues), "--consumer-channels", "3",
        "--queues", str(queues), "--queue-prefix", prefix, "--exchange", exchange,
        "--durable", "--persistent", "-s", "1500",
        "--confirm", f"window:{args.window}", "--ack", "manual", "--prefetch", str(args.prefetch),
        "--duration", str(args.duration), "--delete-queues",
    ]  # fmt: skip


def throughput_point(
    broker: str, queues: int, rep: int, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    prefix = f"bench-{broker}-{queues}q-r{rep}-"
    perf_args = point_args(queues, prefix, args)
    point: dict[str, Any] = {"broker": broker, "queues": queues, "rep": rep}
    foreign = harness.ForeignLoad(count_rabbitmq_as_ours=broker == "rabbitmq")
    if broker == "rabbitmq":
        with foreign:
            run = run_perf(args.rabbitmq_uri, perf_args)
    else:
        data_dir = work / f"kanin-a-{queues}q-r{rep}"
        kanin = Kanin(data_dir, stats_file=data_dir.with_suffix(".stats.json"))
        kanin.start()
        point["server_command"] = shell(kanin.command)
        try:
            assert kanin.stats_file is not None
            with StatsSampler(kanin.stats_file) as sampler, foreign:
                run = run_perf(kanin.uri, perf_args)
                time.sleep(1.1)  # one more stats write after the run
            started = run.summary.get("started_at", 0.0)
            point["fsync"] = sampler.window(started + 1.0, started + args.duration)
            point["kanin_errors"] = kanin.error_lines()[:5]
        finally:
            kanin.stop()
            shutil.rmtree(data_dir, ignore_errors=True)
        fsync = point["fsync"]
        if fsync and fsync["fsyncs_per_s"]:
            confirm_rate = run.summary["rates"]["confirm"]
            fsync["messages_per_fsync"] = round(confirm_rate / fsync["fsyncs_per_s"], 1)
    point["foreign_cpu_percent"] = foreign.percent
    point["foreign_cpu_top"] = foreign.top
    point["command"] = shell(run.command)
    point["wall_s"] = round(run.wall_s, 1)
    point["summary"] = run.summary
    rates = run.summary.get("rates", {})
    print(
        f"  (a) {broker:8} {queues} queue(s) rep {rep}: publish {rates.get('publish', 0):>9,.0f}"
        f" consume {rates.get('consume', 0):>9,.0f} msg/s  ok={run.summary.get('ok')}"
        f"  other load {foreign.percent}%",
        flush=True,
    )
    return point


def throughput(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    points = []
    for rep in range(1, args.reps + 1):
        order = ["kanin", "rabbitmq"] if rep % 2 else ["rabbitmq", "kanin"]
        for queues in [int(q) for q in args.queues.split(",")]:
            for broker in order:
                points.append(throughput_point(broker, queues, rep, args, work))
    harness.delete_exchange(args.rabbitmq_uri, EXCHANGE)
    return points


def publish_args(prefix: str, messages: int, size: int) -> list[str]:
    return [
        "-x", "2", "-y", "0", "--count", str(messages // 2), "--queues", "1",
        "--queue-prefix", prefix, "--durable", "--persistent", "-s", str(size),
        "--confirm", "window:1000",
    ]  # fmt: skip


def startup_kanin(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    data_dir = work / "kanin-startup"
    kanin = Kanin(data_dir)
    result: dict[str, Any] = {"broker": "kanin", "server_command": shell(kanin.command)}
    result["empty_listening_s"] = round(kanin.start(), 3)  # the same start with nothing stored
    queue = "bench-startup-0"
    try:
        run = run_perf(kanin.uri, publish_args("bench-startup-", args.messages, 64))
        result["publish_command"] = shell(run.command)
        result["publish"] = _publish_facts(run)
        result["stored"] = harness.message_count(kanin.uri, queue)
        result["data_bytes"] = harness.dir_bytes(data_dir)
    finally:
        result["shutdown_s"] = round(kanin.stop(), 3)
    result["listening_s"] = round(kanin.start(), 3)
    try:
        ready = harness.wait_for_count(kanin.uri, queue, result["stored"], 600.0)
        result["all_visible_s"] = None if ready is None else round(result["listening_s"] + ready, 3)
        result["recovered"] = harness.message_count(kanin.uri, queue)
        result["rss_after_recovery_kb"] = harness.rss_kb(kanin.pid)
    finally:
        kanin.stop()
        result["kanin_errors"] = kanin.error_lines()[:5]
        shutil.rmtree(data_dir, ignore_errors=True)
    print(f"  (c) kanin: {result}", flush=True)
    return result


def startup_rabbitmq(args: argparse.Namespace) -> dict[str, Any]:
    uri = args.rabbitmq_uri
    prefix = f"bench-startup-rmq-{int(time.time())}-"
    queue = prefix + "0"
    result: dict[str, Any] = {"broker": "rabbitmq"}
    data_dir = harness.rabbitmq_data_dir()
    try:
        before = harness.dir_bytes(data_dir)
        run = run_perf(uri, publish_args(prefix, args.messages, 64), timeout_s=300.0)
        result["publish_command"] = shell(run.command)
        result["publish"] = _publish_facts(run)
        result["stored"] = harness.message_count(uri, queue)
        result["data_bytes"] = harness.dir_bytes(data_dir) - before
        result["stop_app_command"] = "rabbitmqctl stop_app"
        result["stop_app_s"] = round(rabbitmqctl("stop_app")[0], 3)
        result["start_app_command"] = "rabbitmqctl start_app"
        result["start_app_s"] = round(rabbitmqctl("start_app")[0], 3)
        ready = harness.wait_for_count(uri, queue, result["stored"], 600.0)
        result["all_visible_s"] = None if ready is None else round(result["start_app_s"] + ready, 3)
        result["recovered"] = harness.message_count(uri, queue)
    except (subprocess.TimeoutExpired, subprocess.CalledProcessError) as exc:
        result["skipped"] = f"{type(exc).__name__}: {exc}"
    finally:
        _delete_queue(uri, queue)
    print(f"  (c) rabbitmq: {result}", flush=True)
    return result


def _delete_queue(uri: str, queue: str) -> None:
    import pika

    for _ in range(50):  # RabbitMQ may still be starting
        try:
            with pika.BlockingConnection(pika.URLParameters(uri)) as connection:
                connection.channel().queue_delete(queue)
            return
        except Exception:
            time.sleep(0.2)


def _publish_facts(run: harness.PerfRun) -> dict[str, Any]:
    s = run.summary
    return {
        key: s.get(key)
        for key in ("ok", "published", "confirmed", "nacked", "unconfirmed", "errors", "rates")
    } | {"wall_s": round(run.wall_s, 1)}


def memory_kanin(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    data_dir = work / "kanin-memory"
    kanin = Kanin(data_dir)
    kanin.start()
    result: dict[str, Any] = {"broker": "kanin", "server_command": shell(kanin.command)}
    try:
        time.sleep(1.0)
        result["rss_before_kb"] = harness.rss_kb(kanin.pid)
        run = run_perf(kanin.uri, publish_args("bench-memory-", args.messages, 1024))
        result["publish_command"] = shell(run.command)
        result["publish"] = _publish_facts(run)
        time.sleep(3.0)
        result["rss_after_kb"] = harness.rss_kb(kanin.pid)
        result["queued"] = harness.message_count(kanin.uri, "bench-memory-0")
    finally:
        kanin.stop()
        result["kanin_errors"] = kanin.error_lines()[:5]
        shutil.rmtree(data_dir, ignore_errors=True)
    _per_message(result)
    print(f"  (d) kanin: {result}", flush=True)
    return result


def memory_rabbitmq(args: argparse.Namespace) -> dict[str, Any]:
    uri = args.rabbitmq_uri
    prefix = f"bench-memory-rmq-{int(time.time())}-"
    pid = harness.rabbitmq_pid()
    result: dict[str, Any] = {"broker": "rabbitmq", "pid": pid}
    try:
        result["rss_before_kb"] = harness.rss_kb(pid)
        run = run_perf(uri, publish_args(prefix, args.messages, 1024), timeout_s=300.0)
        result["publish_command"] = shell(run.command)
        result["publish"] = _publish_facts(run)
        time.sleep(3.0)
        result["rss_after_kb"] = harness.rss_kb(pid)
        result["queued"] = harness.message_count(uri, prefix + "0")
    except subprocess.TimeoutExpired as exc:
        result["skipped"] = str(exc)
    finally:
        _delete_queue(uri, prefix + "0")
    _per_message(result)
    print(f"  (d) rabbitmq: {result}", flush=True)
    return result


def _per_message(result: dict[str, Any]) -> None:
    if result.get("queued") and "rss_after_kb" in result:
        grown = (result["rss_after_kb"] - result["rss_before_kb"]) * 1024
        result["rss_bytes_per_message"] = round(grown / result["queued"], 1)


def main() -> int:
    args = parse_args()
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kanin-bench-"))
    results: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(args).items()}}
    try:
        results["environment"] = environment(work)
        results["environment"]["kanin_source_digest"] = harness.snapshot_source(ROOT, work)
        print(f"environment: {results['environment']}", flush=True)
        if "a" in args.only:
            results["throughput"] = throughput(args, work)
        if "c" in args.only:
            results["startup"] = [startup_kanin(args, work)]
            if not args.no_rabbitmq_restart:
                results["startup"].append(startup_rabbitmq(args))
        if "d" in args.only:
            results["memory"] = [memory_kanin(args, work), memory_rabbitmq(args)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        results["run_time_s"] = round(time.monotonic() - started, 1)
        report = harness.write_results(args.out, "durability", results, render)
    print(f"wrote {report} in {results['run_time_s']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
