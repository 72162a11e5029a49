"""Turning the workers' numbers into the live line, the summary and the JSON result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kanin.perf.histogram import Histogram
from kanin.perf.options import PerfOptions
from kanin.perf.tally import WorkerResult, add_snapshots, verify

CPU_SATURATED_PERCENT = 90.0


@dataclass
class Timeline:
    """Cumulative counters once a second; rates are the differences."""

    samples: list[tuple[float, dict[str, int]]] = field(default_factory=list)

    def add(self, elapsed_s: float, total: dict[str, int]) -> None:
        self.samples.append((elapsed_s, dict(total)))

    def rates(self) -> list[dict[str, float]]:
        out = []
        previous_t, previous = 0.0, dict[str, int]()
        for elapsed, total in self.samples:
            span = max(elapsed - previous_t, 1e-9)
            rate = {"t": round(elapsed, 3)}
            for name in ("published", "confirmed", "consumed"):
                rate[name] = round((total.get(name, 0) - previous.get(name, 0)) / span, 1)
            out.append(rate)
            previous_t, previous = elapsed, total
        return out


def progress_line(timeline: Timeline, total: dict[str, int], confirms: bool) -> str:
    """One `\r`-rewritten status line; confirm figures only when confirms are on."""
    last = timeline.rates()[-1]
    in_flight = total.get("published", 0) - total.get("confirmed", 0) - total.get("nacked", 0)
    confirm = f"confirm {last['confirmed']:>10,.0f}/s  " if confirms else ""
    pending = f"  unconfirmed {in_flight:,}" if confirms else ""
    return (
        f"\r{last['t']:6.1f}s  publish {last['published']:>10,.0f}/s  "
        f"{confirm}consume {last['consumed']:>10,.0f}/s  "
        f"sent {total.get('published', 0):,}{pending}"
        + (f"  nacked {total['nacked']:,}" if total.get("nacked") else "")
        + "   "
    )


def _histogram(results: list[WorkerResult], which: str) -> Histogram:
    merged = Histogram()
    for result in results:
        part = Histogram()
        part.counts = list(getattr(result, which))
        part.total = sum(part.counts)
        part.max_us = getattr(result, f"{which}_max_us")
        merged.merge(part)
    return merged


def _rate(count: int, last_ns: int, start_ns: int) -> float:
    if count == 0 or last_ns <= start_ns:
        return 0.0
    return round(count / ((last_ns - start_ns) / 1e9), 1)


def summarize(
    options: PerfOptions,
    results: list[WorkerResult],
    errors: list[str],
    timeline: Timeline,
    start_ns: int,
    started_at: float,
) -> dict[str, Any]:
    confirms = options.confirm.kind != "none"
    total = add_snapshots([r.counters for r in results])
    checks = verify(results, confirms, options.consumers > 0)
    published = total.get("published", 0)
    settled = total.get("confirmed", 0) + total.get("nacked", 0)
    unconfirmed = published - settled if confirms else None
    processes = [
        {
            "producers": len(r.statuses),
            "cpu_s": round(r.cpu_s, 3),
            "wall_s": round(r.wall_s, 3),
            "cpu_percent": round(100.0 * r.cpu_s / r.wall_s, 1) if r.wall_s else 0.0,
        }
        for r in results
    ]
    errors = list(errors) + [r.error for r in results if r.error and r.error not in errors]
    ok = (
        not errors
        and checks["lost"] in (None, 0)
        and checks["duplicates"] == 0
        and checks["unknown"] == 0
        and not unconfirmed
        and not total.get("nacked", 0)
    )
    return {
        "ok": ok,
        "errors": errors,
        "config": _config(options),
        "published": published,
        "confirmed": total.get("confirmed", 0) if confirms else None,
        "nacked": total.get("nacked", 0) if confirms else None,
        "unconfirmed": unconfirmed,
        "consumed": total.get("consumed", 0),
        "consumed_unique": total.get("unique", 0),
        "foreign": total.get("foreign", 0),
        **checks,
        "started_at": round(started_at, 3),  # wall clock (time.time()) at START
        "rates": {
            "publish": _rate(published, total.get("last_publish_ns", 0), start_ns),
            "confirm": _rate(total.get("confirmed", 0), total.get("last_confirm_ns", 0), start_ns),
            "consume": _rate(total.get("consumed", 0), total.get("last_consume_ns", 0), start_ns),
        },
        "elapsed_s": {
            name: round(max(0, total.get(f"last_{name}_ns", 0) - start_ns) / 1e9, 3)
            for name in ("publish", "confirm", "consume")
        },
        "latency_us": {
            "confirm": _histogram(results, "confirm_latency").summary(),
            "end_to_end": _histogram(results, "e2e_latency").summary(),
        },
        "timeline": timeline.rates(),
        "processes": processes,
        "saturated_processes": sum(
            1 for p in processes if p["cpu_percent"] >= CPU_SATURATED_PERCENT
        ),
    }


def _config(options: PerfOptions) -> dict[str, Any]:
    endpoint = options.endpoint
    return {
        "broker": f"{endpoint.host}:{endpoint.port}{'' if endpoint.vhost == '/' else ' vhost '}"
        + ("" if endpoint.vhost == "/" else endpoint.vhost),
        "producers": options.producers,
        "consumers": options.consumers,
        "producer_channels": options.producer_channels,
        "consumer_channels": options.consumer_channels,
        "queues": options.queues,
        "exchange": options.exchange,
        "size": options.size,
        "persistent": options.persistent,
        "durable": options.durable,
        "confirm": options.confirm.kind
        + (f":{options.confirm.size}" if options.confirm.kind != "none" else ""),
        "ack": options.ack,
        "prefetch": options.prefetch,
        "multi_ack_every": options.multi_ack_every,
        "rate": options.rate,
        "duration_s": None if options.count else options.duration_s,
        "count": options.count or None,
        "self_test": options.self_test,
    }


def text(summary: dict[str, Any]) -> str:
    """The human-readable summary."""
    rates = summary["rates"]
    confirmed = summary["confirmed"] is not None  # None: the run used no confirms
    settled = (
        f"confirmed {summary['confirmed']:,}  nacked {summary['nacked']:,}  "
        f"unconfirmed {summary['unconfirmed']:,}  "
        if confirmed
        else ""
    )
    confirm_rate = f"confirm {rates['confirm']:,.0f}  " if confirmed else ""
    lines = [
        f"published {summary['published']:,}  {settled}consumed {summary['consumed']:,}",
        f"rates (msg/s): publish {rates['publish']:,.0f}  {confirm_rate}"
        f"consume {rates['consume']:,.0f}",
    ]
    for name, values in summary["latency_us"].items():
        if values["count"]:
            parts = "  ".join(
                f"{key} {values[key] / 1000:.2f}" for key in ("p50", "p95", "p99", "p99.9", "max")
            )
            lines.append(f"{name} latency (ms): {parts}  (n={values['count']:,})")
    lines.append(
        # lost is None when nothing consumed: there is no telling then.
        f"verification: lost {_or_na(summary['lost'])}  duplicates {summary['duplicates']}  "
        f"unknown {summary['unknown']}  foreign {summary['foreign']}  "
        f"-> {'OK' if summary['ok'] else 'FAILED'}"
    )
    cpu = ", ".join(f"{p['cpu_percent']:.0f}%" for p in summary["processes"])
    lines.append(f"perf processes' CPU while running: {cpu}")
    for process in summary["processes"]:
        if process["cpu_percent"] >= CPU_SATURATED_PERCENT:
            lines.append(
                f"warning: a perf process used {process['cpu_percent']:.0f}% CPU; "
                "perf may be the bottleneck (try more --processes)"
            )
    lines += [f"error: {error}" for error in summary["errors"]]
    return "\n".join(lines)


def _or_na(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"
