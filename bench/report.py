"""bench/results/durability.md from the raw results of bench/durability.py."""

from __future__ import annotations

import statistics
from typing import Any


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def rate_cell(values: list[float]) -> str:
    if not values:
        return "-"
    text = f"{median(values):,.0f}"
    if len(values) > 1:
        text += f" ({min(values):,.0f}-{max(values):,.0f})"
    return text


def _load(points: list[dict[str, Any]]) -> str:
    values = [p["foreign_cpu_percent"] for p in points if p.get("foreign_cpu_percent") is not None]
    return f"{median(values):.0f}" if values else "-"


def mib(kb: int | None) -> str:
    return "-" if kb is None else f"{kb / 1024:,.0f} MiB"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _problems(point: dict[str, Any]) -> list[str]:
    label = f"{point['broker']} {point['queues']}q r{point['rep']}"
    found = summary_problems(point["summary"], label)
    found += [f"{label}: kanin log: {line}" for line in point.get("kanin_errors", [])[:1]]
    return found


def summary_problems(s: dict[str, Any], label: str) -> list[str]:
    """What a `kanin perf --json` result says went wrong: failed checks, nacks, loss..."""
    found = []
    if not s.get("ok"):
        found.append(f"{label}: checks failed")
    if s.get("nacked"):
        found.append(f"{label}: {s['nacked']:,} nacked")
    if s.get("lost"):
        found.append(f"{label}: {s['lost']:,} lost")
    if s.get("duplicates"):
        found.append(f"{label}: {s['duplicates']:,} duplicates")
    found += [f"{label}: {error}" for error in s.get("errors", [])[:2]]
    if s.get("saturated_processes"):
        found.append(f"{label}: a perf process ran at >= 90% CPU")
    return found


def throughput_tables(points: list[dict[str, Any]]) -> list[str]:
    queue_counts = sorted({p["queues"] for p in points})
    lines = [
        "| queues | producers x channels | consumers x channels | kanin msg/s | RabbitMQ msg/s "
        "| kanin ÷ RabbitMQ | kanin consumed msg/s | RabbitMQ consumed msg/s "
        "| kanin confirm p50 / p99 ms | RabbitMQ confirm p50 / p99 ms "
        "| other CPU load % (kanin / RabbitMQ points) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes: list[str] = []
    fsync_lines = [
        "| queues | kanin fsyncs/s | records per fsync | messages per fsync |",
        "|---:|---:|---:|---:|",
    ]
    for q in queue_counts:
        # Medians only over points whose checks passed: a point where the broker nacked
        # or lost messages did not measure durable throughput. Failures are listed below.
        every = {
            b: [p for p in points if p["queues"] == q and p["broker"] == b]
            for b in ("kanin", "rabbitmq")
        }
        by = {b: [p for p in every[b] if p["summary"].get("ok")] for b in every}
        if any(len(by[b]) < len(every[b]) for b in by):
            excluded = "; ".join(
                f"{b}: {len(every[b]) - len(by[b])} of {len(every[b])}" for b in by
            )
            notes.append(f"{q} queue(s): points excluded for failed checks ({excluded})")
        pub = {b: [p["summary"].get("rates", {}).get("publish", 0.0) for p in by[b]] for b in by}
        con = {b: [p["summary"].get("rates", {}).get("consume", 0.0) for p in by[b]] for b in by}
        lat = {}
        for b in by:
            p50 = [
                p["summary"]["latency_us"]["confirm"]["p50"]
                for p in by[b]
                if "latency_us" in p["summary"]
            ]
            p99 = [
                p["summary"]["latency_us"]["confirm"]["p99"]
                for p in by[b]
                if "latency_us" in p["summary"]
            ]
            lat[b] = f"{median(p50) / 1000:.0f} / {median(p99) / 1000:.0f}" if p50 else "-"
        rabbit = median(pub["rabbitmq"])
        ratio = f"{median(pub['kanin']) / rabbit:.2f}x" if rabbit else "-"
        lines.append(
            f"| {q} | {2 * q} x 2 | {3 * q} x 3 | {rate_cell(pub['kanin'])} "
            f"| {rate_cell(pub['rabbitmq'])} | {ratio} | {rate_cell(con['kanin'])} "
            f"| {rate_cell(con['rabbitmq'])} | {lat['kanin']} | {lat['rabbitmq']} "
            f"| {_load(by['kanin'])} / {_load(by['rabbitmq'])} |"
        )
        windows = [p["fsync"] for p in by["kanin"] if p.get("fsync")]
        if windows:
            fsync_lines.append(
                f"| {q} | {median([w['fsyncs_per_s'] for w in windows]):,.0f} "
                f"| {median([w['records_per_fsync'] for w in windows]):,.0f} "
                f"| {median([w.get('messages_per_fsync', 0.0) for w in windows]):,.0f} |"
            )
    return [
        "### (a) Throughput, end-to-end experiment",
        "",
        *lines,
        "",
        *[f"- {note}" for note in notes],
        *([""] if notes else []),
        "### (b) kanin's group commit during (a)",
        "",
        *fsync_lines,
        "",
    ]


def startup_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "### (c) Start-up with 1M small persistent messages on disk",
        "",
        "| broker | messages stored | data on disk | stop | start: listening / start_app "
        "| start: all messages visible | same start, nothing stored | recovered "
        "| RSS after recovery |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['broker']} | skipped: {r['skipped'][:80]} ||||||||")
            continue
        kanin = r["broker"] == "kanin"
        disk = f"{r['data_bytes'] / 1024**2:,.0f} MiB" if "data_bytes" in r else "-"
        lines.append(
            f"| {r['broker']} | {r.get('stored', 0):,} | {disk} "
            f"| {_seconds(r.get('shutdown_s' if kanin else 'stop_app_s'))} "
            f"| {_seconds(r.get('listening_s' if kanin else 'start_app_s'))} "
            f"| {_seconds(r.get('all_visible_s'))} | {_seconds(r.get('empty_listening_s'))} "
            f"| {r.get('recovered', 0):,} "
            f"| {mib(r.get('rss_after_recovery_kb'))} |"
        )
    return [*lines, ""]


def memory_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "### (d) Resident memory with 1M 1 KB persistent messages queued",
        "",
        "| broker | queued | RSS before | RSS after | RSS bytes per queued message |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['broker']} | skipped: {r['skipped'][:80]} ||||")
            continue
        per = r.get("rss_bytes_per_message")
        lines.append(
            f"| {r['broker']} | {r.get('queued', 0):,} | {mib(r.get('rss_before_kb'))} "
            f"| {mib(r.get('rss_after_kb'))} | {'-' if per is None else f'{per:,.0f}'} |"
        )
    return [*lines, ""]


def commands(results: dict[str, Any]) -> list[str]:
    lines = ["## Commands", "", "```sh", "python bench/durability.py"]
    points = [p for p in results.get("throughput", []) if p["rep"] == 1]
    if points:
        lines.append("# (a)/(b): per point, kanin gets a fresh server and data directory:")
        lines.append(next(p["server_command"] for p in points if "server_command" in p))
        lines += [p["command"] for p in points]
    for section in ("startup", "memory"):
        for row in results.get(section, []):
            lines.append(f"# ({'c' if section == 'startup' else 'd'}) {row['broker']}")
            for key in (
                "server_command",
                "publish_command",
                "stop_app_command",
                "start_app_command",
            ):
                if key in row:
                    lines.append(row[key])
    lines += ["```", ""]
    return lines


def run_line(results: dict[str, Any], script: str) -> str:
    """The paragraph that says which run, code version and machine the figures come from."""
    env = results.get("environment", {})
    # compare.py --no-rabbitmq runs no RabbitMQ, so it has no version to name.
    rabbitmq = f"RabbitMQ {env['rabbitmq']}, " if "rabbitmq" in env else ""
    return (
        f"One run of `python bench/{script}.py` on {env.get('date', '?')}, "
        f"{results.get('run_time_s', 0):.0f} s in all. kanin {env.get('kanin_commit', '?')}"
        f"{' plus uncommitted changes' if env.get('kanin_tree_dirty') else ''}"
        f" (sources copied at the start, digest {env.get('kanin_source_digest', '?')}), "
        f"{rabbitmq}Python {env.get('python', '?')}; "
        f"{env.get('cores', '?')} cores ({env.get('cpu', '?')}), {env.get('memory_gb', '?')} GB; "
        f"one 4 KB append + fsync takes {env.get('fsync_4k_median_ms', '?')} ms (median) on "
        "this disk. Brokers, load generator and consumers share the same cores. "
        f"What each figure means: bench/README.md. Raw numbers: {script}.json."
    )


def render(results: dict[str, Any]) -> str:
    lines = ["# Durability benchmark: kanin and RabbitMQ", "", run_line(results, "durability"), ""]
    settings = results.get("settings", {})
    if results.get("throughput"):
        lines.append(
            f"(a) runs {settings.get('duration')} s per point, {settings.get('reps')} "
            "repetitions alternating which broker goes first; cells are the median with "
            "(min-max) of the points whose delivery checks passed. Persistent 1500-byte "
            "messages, durable queues and direct exchange, "
            f"confirm window {settings.get('window')} per channel, manual per-message acks, "
            f"prefetch {settings.get('prefetch')}."
        )
        lines.append("")
        lines += throughput_tables(results["throughput"])
    if results.get("startup"):
        lines += startup_table(results["startup"])
    if results.get("memory"):
        lines += memory_table(results["memory"])
    problems = [text for p in results.get("throughput", []) for text in _problems(p)]
    for row in results.get("startup", []) + results.get("memory", []):
        publish = row.get("publish") or {}
        if publish.get("nacked"):
            problems.append(f"({row['broker']}) {publish['nacked']:,} publishes nacked")
        problems += [
            f"({row['broker']}) kanin log: {line}" for line in row.get("kanin_errors", [])[:1]
        ]
    lines += ["## Problems seen in this run", ""]
    lines += [f"- {text}" for text in problems] or ["- none"]
    lines.append("")
    lines += commands(results)
    return "\n".join(lines)
