"""kanin perf: a PerfTest-like load generator for any AMQP 0-9-1 broker.

`kanin perf --help` lists the options; bench/README.md shows it in use. Modules:
options (command line), wire (frames by hand), client (raw asyncio AMQP client),
producer / consumer (one channel each), worker (one process), runner (the parent),
tally / histogram / report (counting and results), topology (declare, delete),
sink (a do-nothing broker for --self-test).
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace
from typing import Any

from kanin.perf import topology
from kanin.perf.client import PerfError
from kanin.perf.options import PerfOptions, options_from_argv
from kanin.perf.report import summarize, text
from kanin.perf.runner import run
from kanin.perf.sink import running_sink

__all__ = ["main", "perf"]


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 all verified, 1 a check failed (loss, duplicate, no confirm), 2 error."""
    options = options_from_argv(sys.argv[1:] if argv is None else argv)
    if not options.self_test:
        return _report(perf(options), options)
    with running_sink() as sink:
        endpoint = replace(options.endpoint, host="127.0.0.1", port=sink.port)
        summary = perf(replace(options, endpoint=endpoint))
    summary["sink_cpu_percent"] = sink.cpu_percent
    return _report(summary, options)


def perf(options: PerfOptions) -> dict[str, Any]:
    """One run; the result as a dict (what --json prints)."""
    try:
        asyncio.run(topology.declare(options))
    except (PerfError, OSError, TimeoutError) as exc:
        return {"ok": False, "errors": [f"cannot set up the queues: {exc or type(exc).__name__}"]}
    session, _ = run(options)
    summary = summarize(
        options,
        [session.results[i] for i in sorted(session.results)],
        session.errors,
        session.timeline,
        session.start_ns,
        session.started_at,
    )
    if options.delete_queues:
        try:
            asyncio.run(topology.delete(options))
        except (PerfError, OSError, TimeoutError) as exc:
            summary["errors"].append(f"cannot delete the queues: {exc}")
    return summary


def _report(summary: dict[str, Any], options: PerfOptions) -> int:
    if "config" not in summary:  # never started
        print(f"kanin perf: {'; '.join(summary['errors'])}", file=sys.stderr)
        return 2
    if options.json:
        print(json.dumps(summary, indent=1))
        if not options.quiet:
            print(text(summary), file=sys.stderr)
    else:
        print(text(summary))
    if summary.get("sink_cpu_percent") is not None and not options.quiet:
        print(f"self-test sink CPU: {summary['sink_cpu_percent']:.0f}%", file=sys.stderr)
    if summary["errors"]:
        return 2
    return 0 if summary["ok"] else 1
