"""kanin perf's human-readable output: figures a run did not measure are left out, never
printed as None."""

from __future__ import annotations

from typing import Any

from kanin.perf.report import Timeline, progress_line, text


def _summary(*, confirms: bool, consumers: bool) -> dict[str, Any]:
    histogram = {"count": 0, "p50": 0, "p95": 0, "p99": 0, "p99.9": 0, "max": 0}
    return {
        "ok": True,
        "errors": [],
        "published": 1200,
        "confirmed": 1200 if confirms else None,
        "nacked": 0 if confirms else None,
        "unconfirmed": 0 if confirms else None,
        "consumed": 1200 if consumers else 0,
        "lost": 0 if consumers else None,
        "duplicates": 0,
        "unknown": 0,
        "foreign": 0,
        "rates": {"publish": 600.0, "confirm": 600.0 if confirms else 0.0, "consume": 600.0},
        "latency_us": {"confirm": histogram, "end_to_end": histogram},
        "processes": [{"cpu_percent": 10.0}],
    }


def test_summary_without_confirms_or_consumers_prints_no_none() -> None:
    out = text(_summary(confirms=False, consumers=False))
    assert "None" not in out
    assert "confirm" not in out
    assert "lost n/a" in out


def test_summary_with_confirms_prints_them() -> None:
    out = text(_summary(confirms=True, consumers=True))
    assert "confirmed 1,200  nacked 0  unconfirmed 0" in out
    assert "confirm 600" in out
    assert "lost 0" in out


def test_progress_line_shows_unconfirmed_only_with_confirms() -> None:
    timeline = Timeline()
    timeline.add(1.0, {"published": 500, "confirmed": 400, "consumed": 300})
    total = {"published": 500, "confirmed": 400, "consumed": 300}
    with_confirms = progress_line(timeline, total, confirms=True)
    without = progress_line(timeline, total, confirms=False)
    assert "unconfirmed 100" in with_confirms and "confirm " in with_confirms
    assert "unconfirmed" not in without and "confirm " not in without
