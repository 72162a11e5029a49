"""Queues, exchanges and bindings: listing them, and declaring, purging and deleting
queues."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kanin.cli.ctl.errors import EX_DATAERR, CtlError
from kanin.cli.ctl.http import Api, segment
from kanin.cli.ctl.output import Columns, Output
from kanin.cli.ctl.parser import Commands

QUEUES = Columns(
    "list_queues",
    ("name", "messages"),
    (
        *("name", "durable", "auto_delete", "arguments", "policy", "owner_pid", "exclusive"),
        *("exclusive_consumer_tag", "messages_ready", "messages_unacknowledged", "messages"),
        *("messages_ready_ram", "messages_unacknowledged_ram", "messages_ram"),
        *("messages_persistent", "message_bytes", "message_bytes_ready"),
        *("message_bytes_unacknowledged", "message_bytes_ram", "message_bytes_persistent"),
        *("head_message_timestamp", "consumers", "consumer_utilisation", "consumer_capacity"),
        *("memory", "state", "type", "node", "vhost"),
    ),
)
EXCHANGES = Columns(
    "list_exchanges",
    ("name", "type"),
    ("name", "type", "durable", "auto_delete", "internal", "arguments", "policy", "vhost"),
)
BINDINGS = Columns(
    "list_bindings",
    (
        *("source_name", "source_kind", "destination_name", "destination_kind"),
        *("routing_key", "arguments"),
    ),
    ("properties_key", "vhost"),
    {
        "source_name": "source",
        "source_kind": lambda _binding: "exchange",
        "destination_name": "destination",
        "destination_kind": "destination_type",
    },
)
QUEUE_TYPES = ("classic", "quorum", "stream")


def register(commands: Commands) -> None:
    commands.listing("list_queues", list_queues, "queues of a virtual host", vhost=True)
    commands.listing("list_exchanges", list_exchanges, "exchanges of a virtual host", vhost=True)
    commands.listing("list_bindings", list_bindings, "bindings of a virtual host", vhost=True)
    purge = commands.add("purge_queue", purge_queue, "remove a queue's ready messages", True)
    purge.add_argument("queue")
    delete = commands.add("delete_queue", delete_queue, "delete a queue", vhost=True)
    delete.add_argument("queue")
    delete.add_argument("-e", "--if-empty", action="store_true", help="only if it is empty")
    delete.add_argument("-u", "--if-unused", action="store_true", help="only without consumers")
    declare = commands.add("declare_queue", declare_queue, "declare a queue", vhost=True)
    declare.add_argument("queue")
    declare.add_argument(
        "--durable",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="survives a restart (default: durable, as rabbitmqadmin's)",
    )
    declare.add_argument("--auto-delete", action="store_true", help="gone after its last consumer")
    declare.add_argument("--type", choices=QUEUE_TYPES, help="x-queue-type (default classic)")
    declare.add_argument(
        "--arguments", default="{}", help='JSON object of x-arguments: \'{"x-max-length": 10}\''
    )


def _no_queue(args: argparse.Namespace) -> str:
    return f"no queue {args.queue!r} in vhost {args.vhost!r}"


def _listed(api: Api, kind: str, vhost: str) -> list[dict[str, Any]]:
    rows = api.call("GET", f"/api/{kind}/{segment(vhost)}", missing=f"no vhost {vhost!r}").body
    assert isinstance(rows, list)
    return rows


def list_queues(api: Api, args: argparse.Namespace, out: Output) -> None:
    out.table(QUEUES, args.columns, _listed(api, "queues", args.vhost))


def list_exchanges(api: Api, args: argparse.Namespace, out: Output) -> None:
    out.table(EXCHANGES, args.columns, _listed(api, "exchanges", args.vhost))


def list_bindings(api: Api, args: argparse.Namespace, out: Output) -> None:
    out.table(BINDINGS, args.columns, _listed(api, "bindings", args.vhost))


def purge_queue(api: Api, args: argparse.Namespace, out: Output) -> None:
    path = f"/api/queues/{segment(args.vhost)}/{segment(args.queue)}/contents"
    api.call("DELETE", path, missing=_no_queue(args))
    out.done(f"Purged queue {args.queue!r} in vhost {args.vhost!r}.")


def delete_queue(api: Api, args: argparse.Namespace, out: Output) -> None:
    query = {"if-empty": "true"} if args.if_empty else {}
    if args.if_unused:
        query["if-unused"] = "true"
    path = f"/api/queues/{segment(args.vhost)}/{segment(args.queue)}"
    api.call("DELETE", path, query=query, missing=_no_queue(args))
    out.done(f"Deleted queue {args.queue!r} in vhost {args.vhost!r}.")


def declare_queue(api: Api, args: argparse.Namespace, out: Output) -> None:
    arguments = json_object(args.arguments, "--arguments")
    if args.type is not None:
        arguments["x-queue-type"] = args.type
    body = {"durable": args.durable, "auto_delete": args.auto_delete, "arguments": arguments}
    path = f"/api/queues/{segment(args.vhost)}/{segment(args.queue)}"
    reply = api.call("PUT", path, body, missing=f"no vhost {args.vhost!r}")
    verb = "Declared" if reply.status == 201 else "Found existing"
    out.done(f"{verb} queue {args.queue!r} in vhost {args.vhost!r}.")


def json_object(text: str, named: str) -> dict[str, Any]:
    """A command-line argument that must be a JSON object; EX_DATAERR naming it if not."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CtlError(f"{named}: not JSON: {exc}", EX_DATAERR) from None
    if not isinstance(value, dict):
        raise CtlError(f"{named}: not a JSON object: {text}", EX_DATAERR)
    return value
