"""The broker as a whole: health (ping, status, await_startup, check_alarms) and its
definitions (export_definitions, import_definitions)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from kanin.cli.ctl.errors import (
    EX_CANTCREAT,
    EX_DATAERR,
    EX_NOINPUT,
    EX_TEMPFAIL,
    EX_UNAVAILABLE,
    CtlError,
)
from kanin.cli.ctl.http import Api
from kanin.cli.ctl.output import Output
from kanin.cli.ctl.parser import Commands

RETRY_EVERY_S = 0.2


def register(commands: Commands) -> None:
    commands.add("ping", ping, "check that the broker answers and the credentials work")
    commands.add("status", status, "the node: versions, listeners, alarms, totals, memory")
    commands.add(
        "await_startup", await_startup, "wait until the broker answers (up to --timeout)"
    )
    commands.add("check_alarms", check_alarms, "fail (exit 69) while a resource alarm is on")
    export = commands.add("export_definitions", export_definitions, "save the definitions")
    export.add_argument("file", help="JSON file to write; - for stdout")
    load = commands.add("import_definitions", import_definitions, "load definitions")
    load.add_argument("file", help="JSON file to read, as export_definitions writes; - for stdin")


def ping(api: Api, args: argparse.Namespace, out: Output) -> None:
    overview = api.get("/api/overview")
    out.document({"node": overview.get("node"), "ok": True}, "Ping succeeded")


def status(api: Api, args: argparse.Namespace, out: Output) -> None:
    overview = api.get("/api/overview")
    nodes = api.get("/api/nodes")
    node = nodes[0] if nodes else {}
    out.document({"overview": overview, "node": node}, status_text(overview, node))


def status_text(overview: dict[str, Any], node: dict[str, Any]) -> str:
    product = overview.get("product_name", "RabbitMQ")
    version = overview.get("product_version", overview.get("rabbitmq_version", "?"))
    listeners = ", ".join(
        f"{item.get('protocol')} {item.get('ip_address')}:{item.get('port')}"
        for item in overview.get("listeners", [])
    )
    compatible = ""
    if product != "RabbitMQ":
        compatible = f" (as RabbitMQ {overview.get('rabbitmq_version')})"
    alarms = [name for name in ("mem_alarm", "disk_free_alarm") if node.get(name)]
    objects = _counts(overview.get("object_totals", {}))
    messages = _counts(overview.get("queue_totals", {}))
    lines = [
        f"Status of node {overview.get('node')}",
        f"Version: {product} {version}{compatible}",
        f"Listeners: {listeners or 'none'}",
        f"Alarms: {', '.join(alarms) or 'none'}",
        f"Objects: {objects}",
        f"Messages: {messages}",
        f"Memory: {_mib(node.get('mem_used'))} used, high watermark {_mib(node.get('mem_limit'))}",
        f"Disk free: {_mib(node.get('disk_free'))}, limit {_mib(node.get('disk_free_limit'))}",
    ]
    return "\n".join(lines)


def _counts(totals: dict[str, Any]) -> str:
    """"messages 3, messages_ready 2": the numbers only (RabbitMQ adds *_details rates)."""
    return ", ".join(f"{key} {value}" for key, value in totals.items() if isinstance(value, int))


def _mib(value: Any) -> str:
    return f"{value / 2**20:.1f} MiB" if isinstance(value, int | float) else "unknown"


def await_startup(api: Api, args: argparse.Namespace, out: Output) -> None:
    """Ask until the API answers; only "nobody listens" is worth waiting out: a refused
    login or another error is reported at once."""
    deadline = time.monotonic() + api.timeout
    while True:
        try:
            api.get("/api/overview")
        except CtlError as error:
            if error.exit_code not in (EX_UNAVAILABLE, EX_TEMPFAIL):
                raise
            if time.monotonic() >= deadline:
                raise CtlError(f"{error} (gave up after {api.timeout:g} s)", EX_TEMPFAIL) from None
            time.sleep(RETRY_EVERY_S)
            continue
        out.done(f"The broker at {api.url} is up.")
        return


def check_alarms(api: Api, args: argparse.Namespace, out: Output) -> None:
    api.get("/api/health/checks/alarms")  # 503 with the alarms when any is on: exit 69
    out.document({"status": "ok"}, "No alarms in effect.")


def export_definitions(api: Api, args: argparse.Namespace, out: Output) -> None:
    document = api.get("/api/definitions")
    text = json.dumps(document, indent=2) + "\n"
    if args.file == "-":
        sys.stdout.write(text)
        return
    try:
        with open(args.file, "w") as file:
            file.write(text)
    except OSError as exc:
        raise CtlError(f"cannot write {args.file}: {exc.strerror}", EX_CANTCREAT) from None
    out.done(f"Exported definitions to {args.file}.")


def import_definitions(api: Api, args: argparse.Namespace, out: Output) -> None:
    source = "stdin" if args.file == "-" else args.file
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file) as file:
                text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise CtlError(f"cannot read {source}: {reason}", EX_NOINPUT) from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise CtlError(f"{source}: not JSON: {exc}", EX_DATAERR) from None
    if not isinstance(document, dict):
        raise CtlError(f"{source}: not a definitions document (a JSON object)", EX_DATAERR)
    api.call("POST", "/api/definitions", document)
    out.done(f"Imported definitions from {source}.")
