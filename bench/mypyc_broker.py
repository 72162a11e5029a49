"""Broker CPU per message: one kanin tree against another (pure Python vs mypyc build).

    python bench/mypyc_broker.py --trees src "$(python tests/compiled_build.py)" --reps 3

For each repetition and each tree (alternating), a fresh `kanin server` runs from that
tree (PYTHONPATH), `kanin perf` (always run from this checkout's src, so the client is
the same) publishes and consumes a fixed count of messages, and the server's CPU seconds
(/proc/PID/stat utime + stime, all threads) over the run are divided by the messages
consumed. Wall time is not used: the machine is shared. Points:
- transient: 1 producer (confirm window:1000), 1 consumer (manual ack, prefetch 200),
  non-persistent 100-byte messages to one classic queue.
- persistent: the same, persistent messages to a durable queue.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import harness

ROOT = Path(__file__).resolve().parent.parent
COMMON = ["-x", "1", "-y", "1", "-s", "100", "--confirm", "window:1000", "--ack", "manual"]
POINTS = {
    "transient": [*COMMON, "--prefetch", "200", "--queue-prefix", "mt"],
    "persistent": [
        *COMMON,
        "--prefetch",
        "200",
        "--persistent",
        "--durable",
        "--queue-prefix",
        "mp",
    ],
}


def compiled_probe(tree: Path) -> str:
    """Where the server's kanin.core.channel comes from: a .so when the tree is compiled."""
    probe = [harness.PYTHON, "-c", "import kanin.core.channel as m; print(m.__file__)"]
    env = harness.ENV | {"PYTHONPATH": str(tree)}
    return subprocess.run(probe, capture_output=True, text=True, env=env, check=True).stdout.strip()


def one_run(tree: Path, work: Path, point: str, count: int) -> dict[str, float]:
    data = Path(tempfile.mkdtemp(dir=work, prefix="data-"))
    broker = harness.Kanin(data_dir=data, pythonpath=tree)
    broker.start()
    try:
        imported = compiled_probe(tree)
        before = harness.cpu_seconds(broker.pid)
        run = harness.run_perf(broker.uri, [*POINTS[point], "--count", str(count)])
        cpu = harness.cpu_seconds(broker.pid) - before
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
    summary = run.summary
    consumed = summary.get("consumed") or 0
    if not summary.get("ok", True) or consumed < count:
        raise RuntimeError(f"{point} on {tree}: {summary}")
    return {
        "us_per_msg": cpu / consumed * 1e6,
        "cpu_s": cpu,
        "consumed": consumed,
        "wall_s": run.wall_s,
        "kanin": str(imported),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="+", required=True)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--count", type=int, default=100_000, help="messages per run")
    parser.add_argument("--points", default="transient,persistent")
    args = parser.parse_args()
    trees = [Path(tree).resolve() for tree in args.trees]
    harness.ENV["PYTHONPATH"] = str(ROOT / "src")  # the perf client
    points = args.points.split(",")
    results: dict[tuple[str, Path], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="mypyc-broker-") as tmp:
        for rep in range(args.reps):
            for point in points:
                order = trees if rep % 2 == 0 else trees[::-1]
                for tree in order:
                    figures = one_run(tree, Path(tmp), point, args.count)
                    results.setdefault((point, tree), []).append(figures["us_per_msg"])
                    print(
                        f"rep {rep} {point:10} {tree}: {figures['us_per_msg']:.1f} µs/msg "
                        f"({figures['cpu_s']:.2f} s CPU, {figures['consumed']} msgs, "
                        f"kanin from {figures['kanin']})",
                        flush=True,
                    )
    print("\n| point | " + " | ".join(f"{t.name} µs/msg" for t in trees) + " | ratio |")
    print("|---|" + "---:|" * (len(trees) + 1))
    for point in points:
        medians = [statistics.median(results[(point, tree)]) for tree in trees]
        cells = " | ".join(
            f"{m:.1f} ({min(results[(point, t)]):.1f}-{max(results[(point, t)]):.1f})"
            for m, t in zip(medians, trees, strict=True)
        )
        print(f"| {point} | {cells} | {medians[0] / medians[-1]:.2f}x |")


if __name__ == "__main__":
    main()
