"""What deduplication costs in kanin: throughput and CPU, and memory per cached id.

    python bench/dedup.py                        # about 4 minutes; writes bench/results/dedup.md
    python bench/dedup.py --reps 1 --duration 3 --ids 20000 --out /tmp/dedup.md   # a try

(d) bench/compare.py's scenario d (1 producer, 1 consumer, 16-byte persistent messages,
    durable queue, confirms window 1000, manual acks prefetch 200 multi-ack 50), every
    message carrying its own x-deduplication-header (`kanin perf --unique-header`), through
    a durable direct exchange, and through a durable x-message-deduplication exchange, where
    each message is checked and its id cached and written to disk. Same broker process,
    alternating which goes first per repetition; broker CPU read from /proc around each run.
(m) Memory per cached id: the broker's resident memory before and after N transient
    messages with distinct ids go through a deduplicating exchange to a queue that keeps
    nothing (x-max-length 0): the ids stay, the messages do not. For a durable exchange
    (ids on disk too, and in the store's index) and a transient one.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import compiled
import harness
from harness import Kanin, run_perf, shell

ROOT = Path(__file__).resolve().parent.parent
SCENARIO_D = [
    *["-x", "1", "-y", "1", "-s", "16"],
    *["--ack", "manual", "--prefetch", "200", "--multi-ack-every", "50"],
    *["--confirm", "window:1000", "--persistent", "--durable"],
]
DEDUP = ["--exchange-type", "x-message-deduplication", "--exchange-arg", "x-cache-size=100000000"]


def throughput(kanin: Kanin, label: str, extra: list[str], duration: float) -> dict[str, Any]:
    # Both carry the same messages (each with its own header): the difference is the
    # exchange's work, not the header's.
    args = [*SCENARIO_D, "--duration", str(duration), "--exchange", f"bench.{label}", *extra]
    args += ["--unique-header", "x-deduplication-header"]
    args += ["--queue-prefix", f"bench.{label}.", "--delete-queues"]
    cpu_before = harness.cpu_seconds(kanin.pid)
    perf = run_perf(kanin.uri, args)
    cpu = harness.cpu_seconds(kanin.pid) - cpu_before
    summary = perf.summary
    published = summary.get("published") or 0
    if not summary.get("ok"):
        raise RuntimeError(f"{label}: {summary.get('errors')}")
    return {
        "label": label,
        "command": shell(perf.command),
        "rate": float(summary["rates"]["consume"]),
        "cpu_us_per_msg": cpu / published * 1e6,
    }


def memory_per_id(kanin: Kanin, durable: bool, ids: int) -> float:
    name = "bench.ids.durable" if durable else "bench.ids.transient"
    args = [*DEDUP, "--unique-header", "x-deduplication-header", "--exchange", name]
    args += ["-x", "1", "-y", "0", "-s", "16"]
    # The bound queue keeps nothing (x-max-length 0): what stays is the ids.
    args += ["--confirm", "window:1000", "--count", str(ids), "--queue-arg", "x-max-length=0"]
    args += ["--queue-prefix", f"{name}."]
    if durable:
        args.append("--durable")
    before = harness.rss_kb(kanin.pid)
    perf = run_perf(kanin.uri, args)
    if not perf.summary.get("published"):
        raise RuntimeError(f"memory run failed: {perf.summary.get('errors')}")
    time.sleep(1.0)
    return (harness.rss_kb(kanin.pid) - before) * 1024 / ids


def run(args: argparse.Namespace) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kanin-bench-dedup-") as work:
        if args.compiled:
            compiled.use_for_every_broker(Path(work))
        kanin = Kanin(Path(work) / "data")
        kanin.start()
        try:
            for rep in range(args.reps):
                order = [("direct", []), ("dedup", DEDUP)]
                for label, extra in order if rep % 2 == 0 else reversed(order):
                    row = {"rep": rep, **throughput(kanin, label, extra, args.duration)}
                    print(row, file=sys.stderr, flush=True)
                    rows.append(row)
            memory = {
                "durable": memory_per_id(kanin, True, args.ids),
                "transient": memory_per_id(kanin, False, args.ids),
            }
        finally:
            kanin.stop()
    return {"rows": rows, "memory": memory}


def render(result: dict[str, Any], args: argparse.Namespace) -> str:
    rows = result["rows"]

    def median(label: str, key: str) -> float:
        return statistics.median(r[key] for r in rows if r["label"] == label)

    rate_ratio = median("dedup", "rate") / median("direct", "rate")
    cpu_ratio = median("dedup", "cpu_us_per_msg") / median("direct", "cpu_us_per_msg")
    lines = [
        "# What deduplication costs in kanin",
        "",
        f"Command: `python bench/dedup.py {' '.join(sys.argv[1:])}` on {platform.node()} "
        f"({platform.machine()}, Python {platform.python_version()}), the broker "
        f"{compiled.BUILD_NAME if args.compiled else 'pure Python'}. bench/dedup.py's "
        "docstring says what runs.",
        "",
        f"## (d) scenario d, direct exchange vs deduplicating exchange, {args.reps} reps",
        "",
        "| exchange | msg/s (median) | broker CPU µs/msg (median) |",
        "|---|---|---|",
        f"| direct | {median('direct', 'rate'):,.0f} | {median('direct', 'cpu_us_per_msg'):.1f} |",
        f"| x-message-deduplication | {median('dedup', 'rate'):,.0f} "
        f"| {median('dedup', 'cpu_us_per_msg'):.1f} |",
        "",
        f"Deduplication: {rate_ratio:.2f}x the throughput, {cpu_ratio:.2f}x the CPU per message "
        "(goal: at most 15% slower).",
        "",
        "Each run, in order:",
        "",
        *[
            f"- rep {r['rep']} {r['label']}: {r['rate']:,.0f} msg/s, "
            f"{r['cpu_us_per_msg']:.1f} µs/msg: `{r['command']}`"
            for r in rows
        ],
        "",
        f"## (m) Memory per cached id ({args.ids:,} distinct ids)",
        "",
        "| exchange | bytes of resident memory per id |",
        "|---|---|",
        f"| durable (ids in memory and on disk) | {result['memory']['durable']:.0f} |",
        f"| transient (ids in memory only) | {result['memory']['transient']:.0f} |",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--ids", type=int, default=500_000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "dedup.md")
    compiled.add_option(parser)
    args = parser.parse_args()
    report = render(run(args), args)
    args.out.write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
