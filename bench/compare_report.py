"""bench/results/compare.md from the raw results of bench/compare.py."""

from __future__ import annotations

import shlex
from typing import Any

from report import median, mib, rate_cell, run_line, summary_problems

NAMES = {"kanin": "kanin", "kanin-baseline": "kanin-baseline", "rabbitmq": "RabbitMQ"}
# The ratios the report gives (first ÷ second) when both brokers ran: kanin against
# RabbitMQ, and against another version of itself (compare.py --baseline-src).
RATIOS = (("kanin", "rabbitmq"), ("kanin", "kanin-baseline"))
PERCENTILES = ("p50", "p95", "p99", "p99.9")
RABBITMQ_IDLE_PERCENT = 5.0  # an idle beam.smp uses well under 1% of a core


def _ratio(kanin: float | None, rabbitmq: float | None) -> str:
    return f"{kanin / rabbitmq:.2f}x" if kanin is not None and rabbitmq else "-"


def _median_or_none(values: list[float]) -> float | None:
    return median(values) if values else None


def brokers_of(results: dict[str, Any]) -> list[str]:
    # Runs recorded before compare.py could add or leave out brokers had these two.
    return list(results.get("brokers", ["kanin", "rabbitmq"]))


def _pairs(brokers: list[str]) -> list[tuple[str, str]]:
    return [(a, b) for a, b in RATIOS if a in brokers and b in brokers]


def _ratio_name(pair: tuple[str, str]) -> str:
    return f"{NAMES[pair[0]]} ÷ {NAMES[pair[1]]}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _header(columns: list[str], left: int = 1) -> list[str]:
    """A Markdown table's header: the first `left` columns left-aligned, numbers right."""
    return [_row(columns), "|" + "|".join(["---"] * left + ["---:"] * (len(columns) - left)) + "|"]


def _group(
    points: list[dict[str, Any]], brokers: list[str]
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """point name -> broker -> its repetitions, in the order the points ran."""
    grouped: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for p in points:
        grouped.setdefault(p["point"], {b: [] for b in brokers})[p["broker"]].append(p)
    return grouped


def _passed(p: dict[str, Any]) -> bool:
    return bool(p["summary"].get("ok")) and not _depth_problem(p)


def _excluded_note(name: str, by: dict[str, list[dict[str, Any]]]) -> str | None:
    # Medians only over points whose checks passed: a point that lost or duplicated
    # messages did not measure the broker doing its job. The failures are listed below.
    failed = {b: sum(not _passed(p) for p in by[b]) for b in by}
    if not any(failed.values()):
        return None
    counts = "; ".join(f"{NAMES[b]}: {failed[b]} of {len(by[b])}" for b in by)
    return f"{name}: points left out of the medians for failed checks ({counts})"


def _values(points: list[dict[str, Any]], key: str) -> list[float]:
    return [p[key] for p in points if p.get(key) is not None]


def throughput_table(points: list[dict[str, Any]], brokers: list[str]) -> list[str]:
    names, pairs = [NAMES[b] for b in brokers], _pairs(brokers)
    lines = _header(
        [
            "point",
            "what",
            *[f"{n} msg/s" for n in names],
            *[_ratio_name(pair) for pair in pairs],
            *[f"{n} CPU s / 100k msgs" for n in names],
            *[f"CPU {_ratio_name(pair)}" for pair in pairs],
            f"published msg/s {' / '.join(names)}",
            f"other CPU load % {' / '.join(names)}",
        ],
        left=2,
    )
    notes = []
    for name, every in _group(points, brokers).items():
        lines.append(_row([name, *_throughput_cells(every, brokers)]))
        note = _excluded_note(name, every)
        if note:
            notes.append(note)
    return [*lines, "", *[f"- {note}" for note in notes], *([""] if notes else [])]


def _throughput_cells(every: dict[str, list[dict[str, Any]]], brokers: list[str]) -> list[str]:
    """One point's row after its name: what, then each broker's figures and the ratios."""
    by = {b: [p for p in every[b] if _passed(p)] for b in brokers}
    rate = {b: _values(by[b], "rate") for b in brokers}
    cpu = {b: _values(by[b], "cpu_s_per_100k") for b in brokers}
    published = {
        b: median([p["summary"]["rates"]["publish"] for p in by[b]]) if by[b] else None
        for b in brokers
    }
    load = {b: _median_or_none(_values(by[b], "foreign_cpu_percent")) for b in brokers}
    pairs = _pairs(brokers)
    return [
        next(p for b in brokers for p in every[b])["what"],
        *[rate_cell(rate[b]) for b in brokers],
        *[_ratio(_median_or_none(rate[a]), _median_or_none(rate[b])) for a, b in pairs],
        *[_cpu_cell(cpu[b]) for b in brokers],
        *[_ratio(_median_or_none(cpu[a]), _median_or_none(cpu[b])) for a, b in pairs],
        " / ".join(_number(published[b]) for b in brokers),
        " / ".join(_number(load[b]) for b in brokers),
    ]


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _cpu_cell(values: list[float]) -> str:
    if not values:
        return "-"
    text = f"{median(values):.2f}"
    return text + (f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else "")


def confirm_time_table(points: list[dict[str, Any]], brokers: list[str]) -> list[str]:
    """RabbitMQ's publisher-confirms tutorial reports the time to publish and confirm all
    messages: so does this (https://www.rabbitmq.com/tutorials/tutorial-seven-java.html)."""
    pairs = _pairs(brokers)
    columns = [f"{NAMES[b]} s" for b in brokers] + [_ratio_name(pair) for pair in pairs]
    lines = _header(["point", *columns])
    for name, every in _group(points, brokers).items():
        seconds = {
            b: _median_or_none(
                [p["summary"]["elapsed_s"]["confirm"] for p in every[b] if _passed(p)]
            )
            for b in brokers
        }
        cells = [_seconds(seconds[b]) for b in brokers]
        cells += [_ratio(seconds[a], seconds[b]) for a, b in pairs]
        lines.append(_row([name, *cells]))
    return [*lines, ""]


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def latency_table(points: list[dict[str, Any]], brokers: list[str]) -> list[str]:
    lines = [
        "| point | broker | delivered msg/s | confirm p50 / p95 / p99 / p99.9 ms "
        "| end-to-end p50 / p95 / p99 / p99.9 ms | broker CPU s / 100k msgs |",
        "|---|---|---:|---:|---:|---:|",
    ]
    verdicts = []
    for name, every in _group(points, brokers).items():
        by = {b: [p for p in every[b] if _passed(p)] for b in brokers}
        pct = {b: _percentiles(by[b]) for b in brokers}
        for b in brokers:
            lines.append(
                f"| {name} | {NAMES[b]} | {rate_cell(_values(by[b], 'rate'))} "
                f"| {_ms(pct[b]['confirm'])} | {_ms(pct[b]['end_to_end'])} "
                f"| {_cpu_cell(_values(by[b], 'cpu_s_per_100k'))} |"
            )
        for pair in _pairs(brokers):
            ratios = {
                kind: _percentile_ratios(pct, pair, kind) for kind in ("confirm", "end_to_end")
            }
            lines.append(
                f"| {name} | {_ratio_name(pair)} | | {ratios['confirm']} "
                f"| {ratios['end_to_end']} | |"
            )
        if "rabbitmq" in brokers:  # the target is set against RabbitMQ only
            verdicts.append(_verdict(name, pct))
    return [*lines, "", *[f"- {v}" for v in verdicts], *([""] if verdicts else [])]


def _percentile_ratios(
    pct: dict[str, dict[str, dict[str, float]]], pair: tuple[str, str], kind: str
) -> str:
    a, b = pair
    return " / ".join(_ratio(pct[a][kind].get(q), pct[b][kind].get(q)) for q in PERCENTILES)


def _percentiles(points: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Median over the repetitions of each percentile, in microseconds."""
    out: dict[str, dict[str, float]] = {}
    for kind in ("confirm", "end_to_end"):
        histograms = [p["summary"]["latency_us"][kind] for p in points]
        histograms = [h for h in histograms if h.get("count")]
        out[kind] = {q: median([h[q] for h in histograms]) for q in PERCENTILES if histograms}
    return out


def _ms(values: dict[str, float]) -> str:
    if not values:
        return "-"
    return " / ".join(f"{values[q] / 1000:.2f}" for q in PERCENTILES)


def _verdict(name: str, pct: dict[str, dict[str, dict[str, float]]]) -> str:
    parts = []
    for kind, label in (("confirm", "confirm"), ("end_to_end", "end-to-end")):
        kanin, rabbit = pct["kanin"][kind].get("p99"), pct["rabbitmq"][kind].get("p99")
        if kanin is None or rabbit is None:
            parts.append(f"{label} p99: no data")
            continue
        met = "met" if kanin <= rabbit else "missed"
        parts.append(f"{label} p99 {kanin / 1000:.2f} ms vs {rabbit / 1000:.2f} ms ({met})")
    return f"{name}: target kanin p99 ≤ RabbitMQ p99 — " + "; ".join(parts)


def memory_table(rows: list[dict[str, Any]], brokers: list[str]) -> list[str]:
    lines = [
        "| broker | idle connections | RSS before | RSS with them | bytes per connection "
        "| empty queues | RSS before | RSS with them | bytes per queue |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    per: dict[str, dict[str, float | None]] = {}
    for broker in brokers:
        cells = []
        for kind in ("connections", "queues"):
            row = next((r for r in rows if r["broker"] == broker and r["kind"] == kind), {})
            per.setdefault(kind, {})[broker] = row.get("bytes_per_item")
            flag = " (unsteady: see problems)" if row and _unsteady(row) else ""
            cells.append(
                f"{row.get('count', 0):,} | {mib(row.get('rss_before_kb'))} "
                f"| {mib(row.get('rss_after_kb'))} | {_number(row.get('bytes_per_item'))}{flag}"
            )
        lines.append(f"| {NAMES[broker]} | {cells[0]} | {cells[1]} |")
    for a, b in _pairs(brokers):
        ratio = {kind: _ratio(per[kind][a], per[kind][b]) for kind in per}
        lines.append(
            f"| {_ratio_name((a, b))} | | | | {ratio['connections']} | | | | {ratio['queues']} |"
        )
    notes = [f"{NAMES[r['broker']]} {r['kind']}: {r['note']}" for r in rows if r.get("note")]
    return [*lines, "", *[f"- {note}" for note in notes], *([""] if notes else [])]


def _depth_problem(p: dict[str, Any]) -> str | None:
    check = p.get("depth_check")
    if check is None:
        return None
    if "error" in check:
        return f"cannot read the depth of {check['queue']}: {check['error']}"
    if check["depth"] != check["confirmed"]:
        return f"queue holds {check['depth']:,} messages, {check['confirmed']:,} were confirmed"
    return None


def _unsteady(row: dict[str, Any]) -> str | None:
    """Why a memory figure cannot be trusted: the broker's RSS moved on its own."""
    if "rss_after_kb" not in row:
        return None
    grown = row["rss_after_kb"] - row["rss_before_kb"]
    spread = row.get("baseline_spread_kb", 0)
    if grown <= 0 or spread > grown / 10:
        return (
            f"RSS moved by {spread:,} KiB in the idle second before the test and grew by "
            f"{grown:,} KiB during it: something else is using this broker's memory"
        )
    return None


def problems(results: dict[str, Any]) -> list[str]:
    found = []
    for p in results.get("points", []):
        label = f"{p['point']} {NAMES[p['broker']]} r{p['rep']}"
        found += summary_problems(p["summary"], label)
        depth = _depth_problem(p)
        if depth:
            found.append(f"{label}: {depth}")
        found += [f"{label}: kanin log: {line}" for line in p.get("kanin_errors", [])[:1]]
        busy = p.get("rabbitmq_cpu_percent_meanwhile") or 0.0
        if busy > RABBITMQ_IDLE_PERCENT:
            found.append(
                f"{label}: RabbitMQ used {busy:.0f}% of a core meanwhile: someone else is "
                "using it, and its CPU figures include their work"
            )
    if results.get("memory_error"):
        found.append(f"memory: {results['memory_error']}")
    for row in results.get("memory", []):
        label = f"memory {NAMES[row['broker']]} {row['kind']}"
        if not row.get("helper", "").startswith("ready"):
            found.append(f"{label}: {row.get('helper')}")
        if row.get("released") is False:
            found.append(f"{label}: the helper did not close/delete everything it opened")
        unsteady = _unsteady(row)
        if unsteady:
            found.append(f"{label}: {unsteady}")
        found += [f"{label}: kanin log: {line}" for line in row.get("kanin_errors", [])[:1]]
    return found


SERVER_COMMENTS = {
    "kanin": "# kanin: each point gets a fresh server and data directory, like this one:",
    "kanin-baseline": "# kanin-baseline: the same, from the baseline's sources:",
}


def commands(results: dict[str, Any]) -> list[str]:
    first = [p for p in results.get("points", []) if p["rep"] == 1]
    # Older runs did not record their arguments; their reports showed the bare command.
    lines = [
        "## Commands",
        "",
        "```sh",
        shlex.join(["python", "bench/compare.py", *results.get("argv", [])]),
    ]
    for broker, comment in SERVER_COMMENTS.items():
        server = next(
            (p["server_command"] for p in first if p["broker"] == broker and "server_command" in p),
            None,
        )
        if server:
            lines += [comment, server]
    if first:
        lines += ["# the first repetition's kanin perf runs (the others differ only in names):"]
        lines += [p["command"] for p in first if "command" in p]
    if results.get("memory"):
        lines.append("# (m): held open while the broker's RSS is read, released after")
        lines += [row["command"] for row in results["memory"]]
    return [*lines, "```", ""]


def _joined(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def baseline_line(results: dict[str, Any]) -> list[str]:
    """What kanin-baseline ran, when the run had one."""
    env = results.get("environment", {})
    if "kanin_baseline_src" not in env:
        return []
    commit = env.get("kanin_baseline_commit")
    line = (
        f"kanin-baseline is `kanin server` from {env['kanin_baseline_src']}/src"
        f"{f' (commit {commit})' if commit else ''}, sources copied at the start, digest "
        f"{env['kanin_baseline_digest']}. Every broker is loaded by the same `kanin perf`, "
        "the current tree's, so only the broker differs. *kanin ÷ kanin-baseline* above 1 "
        "means the current kanin is faster (for CPU: spends more per message)."
    )
    compiled = env.get("kanin_build") == "compiled with mypyc"
    if compiled:
        line += (
            " kanin runs the compiled build (mypyc) of its sources, built in "
            f"{env.get('kanin_compiled_tree')}; kanin-baseline is pure Python."
        )
    if env["kanin_baseline_digest"] == env.get("kanin_source_digest"):
        # Then the ratio measures nothing but this machine's noise, or the build's effect.
        line += " These are the same sources as kanin's: the ratios show " + (
            "what compiling gains." if compiled else "the run's noise."
        )
    return [line, ""]


def render(results: dict[str, Any]) -> str:
    settings = results.get("settings", {})
    points = results.get("points", [])
    brokers = brokers_of(results)
    timed = [p for p in points if p["scenario"] in "abcdeh"]
    confirm_points = [p for p in points if p["scenario"] == "f"]
    paced = [p for p in points if p["scenario"] in "gi"]
    title = f"# {_joined([NAMES[b] for b in brokers])}, scenario by scenario"
    processes = "kanin's server" + (", RabbitMQ's beam.smp" if "rabbitmq" in brokers else "")
    lines = [title, "", run_line(results, "compare"), "", *baseline_line(results)]
    lines += [
        f"Timed points run {settings.get('duration')} s, every point {settings.get('reps')} "
        "time(s), alternating which broker goes first; cells are the median with (min-max) "
        "of the points whose delivery checks passed. *msg/s* is messages delivered to the "
        "consumers per second ((f): confirmed per second). CPU is the broker process's "
        f"({processes}) user + system time during the perf run.",
        "",
    ]
    if timed or confirm_points:
        lines += ["## Throughput and CPU, (a)-(f) and (h)", ""]
        lines += throughput_table(timed + confirm_points, brokers)
    if confirm_points:
        lines += ["### (f) Seconds to publish and confirm every message", ""]
        lines += confirm_time_table(confirm_points, brokers)
    if paced:
        lines += ["## (g), (i) Latency when not saturated", "", *latency_table(paced, brokers)]
    if results.get("memory"):
        lines += ["## (m) Resident memory", "", *memory_table(results["memory"], brokers)]
    lines += ["## Problems seen in this run", ""]
    lines += [f"- {text}" for text in problems(results)] or ["- none"]
    lines += ["", *commands(results)]
    return "\n".join(lines)
