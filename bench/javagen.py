"""kanin against RabbitMQ 3.10, measured by an independent load generator in Java.

    python bench/javagen.py                  # ~10 minutes; writes bench/results/javagen.{md,json}
    python bench/javagen.py --kanin-perf     # ~20 minutes: kanin perf on the same points too
    python bench/javagen.py --reps 1 --duration 3 --only ac   # does it all work?
    python bench/javagen.py --compiled       # the kanin broker from its compiled build

A load generator's own pacing shifts the figures, so compare.py's points are measured here
again with bench/java/KaninPerf.java, a small generator on RabbitMQ's Java client (Debian's
librabbitmq-client-java), compiled with javac on first use and cached in a temp directory.
Points, named as in compare.py:
(a) 1 producer, 1 consumer, 16-byte transient messages, no confirms, auto-ack;
(b) (a) with manual acks, prefetch 200, one multiple ack per 50;
(c) (b) with publisher confirms, window 1000;   (d) (c) persistent, durable queue;
(g) (c) and (d) at a fixed 1,000 msg/s: confirm and end-to-end latency percentiles;
(h) 50 producer and 50 consumer connections on 50 queues, (c)'s settings, window 100.
Every point runs against a fresh kanin server and against the local RabbitMQ, alternating
which broker goes first per repetition, with the broker's CPU read from /proc around it.
--kanin-perf also runs `kanin perf` on every point in the same run, so the two
generators' figures can be set side by side. Skips with a message without javac or the jar.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import compare
import compiled
import durability
import harness
from compare_report import latency_table, problems, throughput_table
from harness import Kanin, PerfRun, shell
from report import median, run_line

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "bench" / "java" / "KaninPerf.java"
# Debian's librabbitmq-client-java and libslf4j-java (slf4j-nop keeps the client quiet).
JARS = ("amqp-client.jar", "slf4j-api.jar", "slf4j-nop.jar")
JAR_DIR = Path("/usr/share/java")
JAVA, PERF = "java", "kanin perf"
KANIN, RABBITMQ = "kanin", "rabbitmq"
POINTS = "abcdgh"

SMALL = ["-x", "1", "-y", "1", "-s", "16"]
MANUAL_ACKS = ["--ack", "manual", "--prefetch", "200", "--multi-ack-every", "50"]
PERSISTENT = ["--persistent", "--durable"]
# KaninPerf's arguments are kanin perf's, but for --confirm, which takes the window alone.
JAVA_ARGS = {
    "a": [*SMALL, "--ack", "auto"],
    "b": [*SMALL, *MANUAL_ACKS],
    "c": [*SMALL, *MANUAL_ACKS, "--confirm", "1000"],
    "d": [*SMALL, *MANUAL_ACKS, "--confirm", "1000", *PERSISTENT],
}
MANY = ["-x", "50", "-y", "50", "--queues", "50", "-s", "16", *MANUAL_ACKS]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--duration", type=float, default=10.0, help="seconds per point")
    p.add_argument("--reps", type=int, default=3, help="repetitions of every point")
    p.add_argument("--only", default=POINTS, help=f"point letters to run, from {POINTS}")
    p.add_argument("--rate", type=float, default=1000.0, help="msg/s for (g)")
    p.add_argument("--kanin-perf", action="store_true", help="run kanin perf on each point too")
    p.add_argument("--rabbitmq-uri", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    compiled.add_option(p)
    args = p.parse_args()
    if set(args.only) - set(POINTS):
        p.error(f"--only takes letters from {POINTS}, got {args.only!r}")
    return args


@dataclass(frozen=True)
class Point:
    name: str
    scenario: str
    what: str
    java_args: list[str]  # without --queue-prefix and --duration
    perf_args: list[str]  # kanin perf's, the same
    queues: int = 1


def plan(args: argparse.Namespace) -> list[Point]:
    points = [
        Point(x, x, compare.BASE_WHAT[x], JAVA_ARGS[x], compare.BASE_ARGS[x])
        for x in "abcd"
        if x in args.only
    ]
    if "h" in args.only:
        java = [*MANY, "--confirm", "100"]
        perf = [*MANY, "--confirm", "window:100"]
        points.append(Point("h", "h", compare.MANY_CLIENTS_WHAT, java, perf, queues=50))
    if "g" in args.only:
        paced = ["--rate", str(args.rate)]
        points += [
            Point(
                f"g {x}",
                "g",
                f"({x}) at {args.rate:,.0f} msg/s",
                [*JAVA_ARGS[x], *paced],
                [*compare.BASE_ARGS[x], *paced],
            )
            for x in "cd"
        ]
    return points


# -- the Java generator ----------------------------------------------------------------------


def classpath_jars() -> list[Path] | str:
    """The jars KaninPerf needs, or why it cannot run (a message for the user)."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        return "javac not found: apt-get install openjdk-17-jdk-headless"
    missing = [name for name in JARS[:2] if not (JAR_DIR / name).is_file()]
    if missing:
        return f"{', '.join(missing)} not in {JAR_DIR}: apt-get install librabbitmq-client-java"
    return [JAR_DIR / name for name in JARS if (JAR_DIR / name).is_file()]


def compile_generator(jars: list[Path]) -> str:
    """Compile KaninPerf.java once per version of its source; the classpath to run it."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    classes = Path(tempfile.gettempdir()) / f"kanin-javagen-{digest}"
    jar_path = ":".join(str(jar) for jar in jars)
    if not (classes / "KaninPerf.class").is_file():
        building = Path(tempfile.mkdtemp(prefix="kanin-javagen-build-"))
        command = ["javac", "-nowarn", "-cp", jar_path, "-d", str(building), str(SOURCE)]
        subprocess.run(command, check=True)
        if classes.exists():  # another run compiled it meanwhile
            shutil.rmtree(building)
        else:
            building.replace(classes)
    return f"{classes}:{jar_path}"


def run_java(classpath: str, uri: str, args: list[str], timeout_s: float) -> PerfRun:
    # A fixed heap: the default takes a quarter of the machine's memory.
    command = ["java", "-Xmx512m", "-cp", classpath, "KaninPerf", "--uri", uri, *args]
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    wall_s = time.monotonic() - started
    try:
        summary = json.loads(result.stdout)
    except json.JSONDecodeError:
        error = f"java exit {result.returncode}: {(result.stderr or result.stdout)[-500:]}"
        summary = {"ok": False, "errors": [error]}
    summary["exit_code"] = result.returncode
    return PerfRun(command, summary, wall_s)


def java_version() -> str:
    result = subprocess.run(["java", "-version"], capture_output=True, text=True)
    return (result.stderr or result.stdout).splitlines()[0]


# -- one point -------------------------------------------------------------------------------


@dataclass
class Run:
    args: argparse.Namespace
    work: Path
    classpath: str
    rabbitmq_pid: int
    declared: set[str]  # queue names used on RabbitMQ, for the final sweep

    def rabbitmq(self) -> int:
        if not Path(f"/proc/{self.rabbitmq_pid}").exists():  # restarted meanwhile
            self.rabbitmq_pid = harness.rabbitmq_pid()
        return self.rabbitmq_pid

    def generator(self, name: str, point: Point, prefix: str) -> Callable[[str], PerfRun]:
        """uri -> one run of this generator on this point."""
        timed = ["--duration", str(self.args.duration), "--queue-prefix", prefix]
        if name == JAVA:
            # Publishing, then up to 10 s for confirms and 10 s of draining without progress.
            timeout = self.args.duration + 120.0
            return lambda uri: run_java(self.classpath, uri, [*point.java_args, *timed], timeout)
        perf = [*point.perf_args, *timed, "--delete-queues"]
        return lambda uri: harness.run_perf(uri, perf)


def run_point(point: Point, generator: str, broker: str, rep: int, run: Run) -> dict[str, Any]:
    slug = f"{point.name.replace(' ', '')}-{'java' if generator == JAVA else 'perf'}"
    prefix = f"jg-{slug}-{broker}-r{rep}-"
    label = point_label(point, generator)
    result: dict[str, Any] = {"point": label, "scenario": point.scenario, "rep": rep}
    result |= {"broker": broker, "generator": generator, "what": point.what}
    generate = run.generator(generator, point, prefix)
    if broker == RABBITMQ:
        names = [f"{prefix}{index}" for index in range(point.queues)]
        run.declared.update(names)
        result |= measure(generate, run.args.rabbitmq_uri, run.rabbitmq(), broker)
        harness.delete_queues(run.args.rabbitmq_uri, names)  # the generator did, unless it failed
    else:
        result |= on_kanin(generate, f"{slug}-r{rep}", run)
    cpu = result.get("cpu_s_per_100k")
    print(
        f"  ({label:<16}) {broker:8} rep {rep}: {result['rate']:>9,.0f} msg/s  broker CPU "
        f"{cpu if cpu is not None else '-'} s/100k  ok={result['summary'].get('ok')}  "
        f"other load {result['foreign_cpu_percent']}%",
        flush=True,
    )
    return result


def on_kanin(generate: Callable[[str], PerfRun], label: str, run: Run) -> dict[str, Any]:
    """One point on a fresh kanin server; RabbitMQ's CPU meanwhile shows if others use it."""
    rabbit_before, since = harness.cpu_seconds(run.rabbitmq()), time.monotonic()
    data_dir = run.work / f"kanin-{label}"
    kanin = Kanin(data_dir)
    kanin.start()
    try:
        result = measure(generate, kanin.uri, kanin.pid, KANIN)
        result["server_command"] = shell(kanin.command)
        result["kanin_errors"] = kanin.error_lines()[:5]
    finally:
        kanin.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    busy = harness.cpu_seconds(run.rabbitmq()) - rabbit_before
    result["rabbitmq_cpu_percent_meanwhile"] = round(100 * busy / (time.monotonic() - since), 1)
    return result


def measure(generate: Callable[[str], PerfRun], uri: str, pid: int, broker: str) -> dict[str, Any]:
    """One generator run, with the broker's CPU seconds read from /proc around it."""
    foreign = harness.ForeignLoad(count_rabbitmq_as_ours=broker == RABBITMQ)
    with foreign:
        cpu_before = harness.cpu_seconds(pid)
        perf = generate(uri)
        cpu_s = harness.cpu_seconds(pid) - cpu_before
    summary = perf.summary
    published = summary.get("published") or 0
    return {
        "command": shell(perf.command),
        "wall_s": round(perf.wall_s, 1),
        "broker_cpu_s": round(cpu_s, 2),
        "cpu_s_per_100k": round(cpu_s / published * 100_000, 3) if published else None,
        "rate": float(summary.get("rates", {}).get("consume", 0.0)),
        "foreign_cpu_percent": foreign.percent,
        "foreign_cpu_top": foreign.top,
        "summary": summary,
    }


def measure_all(points: list[Point], run: Run, results: list[dict[str, Any]]) -> None:
    generators = (JAVA, PERF) if run.args.kanin_perf else (JAVA,)
    for rep in range(1, run.args.reps + 1):
        order = (KANIN, RABBITMQ) if rep % 2 else (RABBITMQ, KANIN)  # who goes first alternates
        for point in points:
            for generator in generators:
                for broker in order:
                    try:
                        results.append(run_point(point, generator, broker, rep, run))
                    except Exception as exc:  # one broken point must not lose the others
                        results.append(failed_point(point, generator, broker, rep, exc))


def failed_point(
    point: Point, generator: str, broker: str, rep: int, exc: Exception
) -> dict[str, Any]:
    error = f"the point did not run: {type(exc).__name__}: {exc}"
    print(f"  ({point.name}) {generator} {broker} rep {rep}: {error}", flush=True)
    return {
        "point": point_label(point, generator),
        "scenario": point.scenario,
        "rep": rep,
        "broker": broker,
        "generator": generator,
        "what": point.what,
        "rate": 0.0,
        "summary": {"ok": False, "errors": [error]},
    }


def point_label(point: Point, generator: str) -> str:
    """The row name in the report: the point's, marked when kanin perf measured it."""
    return point.name if generator == JAVA else f"{point.name} (kanin perf)"


# -- the report ------------------------------------------------------------------------------


def render(results: dict[str, Any]) -> str:
    points = results.get("points", [])
    brokers = [KANIN, RABBITMQ]
    env = results.get("environment", {})
    lines = ["# kanin and RabbitMQ under an independent Java load generator", ""]
    lines += [run_line(results, "javagen"), ""]
    lines += [
        f"The kanin broker ran {env.get('kanin_build', 'pure Python')}. "
        f"Load generator: bench/java/KaninPerf.java on RabbitMQ's Java client "
        f"({env.get('java_client', '?')}, {env.get('java', '?')}), one connection per "
        "producer and per consumer, all in one JVM that is started afresh for every point "
        "(so each point includes the JIT's warm-up). Every point ran "
        f"{results.get('settings', {}).get('duration')} s, "
        f"{results.get('settings', {}).get('reps')} time(s), alternating which broker goes "
        "first; cells are the median with (min-max) of the points whose delivery checks "
        "passed. *msg/s* is messages delivered ÷ time from the start to the last delivery; "
        "CPU is the broker process's user + system time around the generator's run. Rows "
        "marked *(kanin perf)* are the same point measured by `kanin perf` in this run. The "
        "machine's two cores are shared with other jobs (*other CPU load %*): figures are "
        "only comparable within one run, not with other results files.",
        "",
    ]
    timed = [p for p in points if p["scenario"] != "g"]
    paced = [p for p in points if p["scenario"] == "g"]
    if timed:
        lines += ["## Throughput and CPU, (a)-(d) and (h)", "", *throughput_table(timed, brokers)]
    if paced:
        lines += ["## (g) Latency at a fixed rate", "", *latency_table(paced, brokers)]
    if any(p.get("generator") == PERF for p in points):
        lines += ["## The two generators side by side", "", *generators_table(points)]
    lines += ["## Problems seen in this run", ""]
    lines += [f"- {text}" for text in problems(results)] or ["- none"]
    return "\n".join([*lines, "", *commands(results)])


def generators_table(points: list[dict[str, Any]]) -> list[str]:
    """Per point: each broker's delivered msg/s and kanin ÷ RabbitMQ under each generator."""
    lines = [
        "| point | kanin msg/s Java / kanin perf | RabbitMQ msg/s Java / kanin perf "
        "| kanin ÷ RabbitMQ Java | kanin ÷ RabbitMQ kanin perf "
        "| generator CPU s / 100k msgs Java / kanin perf (kanin; RabbitMQ) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    names = dict.fromkeys(p["point"].removesuffix(" (kanin perf)") for p in points)
    for name in names:
        rate: dict[tuple[str, str], float | None] = {}
        cost: dict[tuple[str, str], float | None] = {}
        for generator in (JAVA, PERF):
            for broker in (KANIN, RABBITMQ):
                mine = [
                    p
                    for p in points
                    if p.get("generator") == generator
                    and p["broker"] == broker
                    and p["point"].removesuffix(" (kanin perf)") == name
                    and p["summary"].get("ok")
                ]
                rate[generator, broker] = median([p["rate"] for p in mine]) if mine else None
                costs = [c for c in map(generator_cost, mine) if c is not None]
                cost[generator, broker] = median(costs) if costs else None
        lines.append(
            f"| {name} | {_n(rate[JAVA, KANIN])} / {_n(rate[PERF, KANIN])} "
            f"| {_n(rate[JAVA, RABBITMQ])} / {_n(rate[PERF, RABBITMQ])} "
            f"| {_ratio(rate[JAVA, KANIN], rate[JAVA, RABBITMQ])} "
            f"| {_ratio(rate[PERF, KANIN], rate[PERF, RABBITMQ])} "
            f"| {_c(cost[JAVA, KANIN])} / {_c(cost[PERF, KANIN])} "
            f"({_c(cost[JAVA, RABBITMQ])} / {_c(cost[PERF, RABBITMQ])}) |"
        )
    return [*lines, ""]


def generator_cost(point: dict[str, Any]) -> float | None:
    """The load generator's own CPU seconds per 100k messages published."""
    summary = point["summary"]
    if point.get("generator") == JAVA:
        cpu = summary.get("generator_cpu_s")
    else:
        cpu = sum(p.get("cpu_s", 0.0) for p in summary.get("processes", [])) or None
    published = summary.get("published") or 0
    return cpu / published * 100_000 if cpu is not None and published else None


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _c(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def commands(results: dict[str, Any]) -> list[str]:
    first = [p for p in results.get("points", []) if p["rep"] == 1 and "command" in p]
    lines = ["## Commands", "", "```sh", shell(["python", "bench/javagen.py", *results["argv"]])]
    server = next((p["server_command"] for p in first if "server_command" in p), None)
    if server:
        lines += ["# kanin: each point gets a fresh server and data directory, like this one:"]
        lines.append(server)
    lines.append("# the first repetition's generator runs (the others differ only in names):")
    return [*lines, *[p["command"] for p in first], "```", ""]


# -- the run ---------------------------------------------------------------------------------


def main() -> int:
    args = parse_args()
    jars = classpath_jars()
    if isinstance(jars, str):
        print(f"javagen: skipped: {jars}", flush=True)
        return 0
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    harness.raise_fd_limit()
    started_rabbitmq = harness.ensure_rabbitmq()
    work = Path(tempfile.mkdtemp(prefix="kanin-javagen-"))
    run = Run(args, work, compile_generator(jars), harness.rabbitmq_pid(), set())
    results: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(args).items()}}
    results["argv"] = sys.argv[1:]
    try:
        env = durability.environment(work)
        env["kanin_source_digest"] = harness.snapshot_source(ROOT, work)
        env["kanin_build"] = "pure Python"
        if args.compiled:
            env |= compiled.use_for_every_broker(work, work / "src")
        env |= {"java": java_version(), "started_rabbitmq": started_rabbitmq}
        results["environment"] = env
        print(f"environment: {env}", flush=True)
        results["points"] = []
        measure_all(plan(args), run, results["points"])
        client = next((p["summary"].get("generator") for p in results["points"]), None)
        env["java_client"] = (client or "java ?").removeprefix("java ")
    finally:
        try:  # whatever a failed point left behind (deleting a missing queue is fine)
            harness.delete_queues(args.rabbitmq_uri, sorted(run.declared))
        except Exception as exc:  # never hide the results behind a cleanup failure
            print(f"RabbitMQ cleanup failed: {exc}", flush=True)
        shutil.rmtree(work, ignore_errors=True)
        results["run_time_s"] = round(time.monotonic() - started, 1)
        report = harness.write_results(args.out, "javagen", results, render)
    print(f"wrote {report} in {results['run_time_s']:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
