"""What clients hold open: connections, channels, consumers."""

from __future__ import annotations

import argparse

from kanin.cli.ctl.http import Api, segment
from kanin.cli.ctl.output import Columns, Output
from kanin.cli.ctl.parser import Commands

CONNECTIONS = Columns(
    "list_connections",
    ("user", "peer_host", "peer_port", "state"),
    (
        *("pid", "name", "port", "host", "peer_port", "peer_host", "ssl", "ssl_protocol"),
        *("state", "channels", "protocol", "auth_mechanism", "user", "vhost", "timeout"),
        *("frame_max", "channel_max", "client_properties", "recv_oct", "recv_cnt"),
        *("send_oct", "send_cnt", "send_pend", "connected_at", "node", "type"),
    ),
    {"pid": "name"},
)
CHANNELS = Columns(
    "list_channels",
    ("pid", "user", "consumer_count", "messages_unacknowledged"),
    (
        *("pid", "connection", "name", "number", "user", "vhost", "transactional"),
        *("confirm", "consumer_count", "messages_unacknowledged", "messages_uncommitted"),
        *("acks_uncommitted", "messages_unconfirmed", "prefetch_count"),
        *("global_prefetch_count", "state", "node"),
    ),
    {"pid": "name", "connection": "connection_details.name"},
)
CONSUMERS = Columns(
    "list_consumers",
    (
        *("queue_name", "channel_pid", "consumer_tag", "ack_required", "prefetch_count"),
        *("active", "activity_status", "arguments"),
    ),
    ("exclusive",),
    {"queue_name": "queue.name", "channel_pid": "channel_details.name"},
)


def register(commands: Commands) -> None:
    commands.listing("list_connections", list_connections, "AMQP connections")
    commands.listing("list_channels", list_channels, "channels of every connection")
    commands.listing(
        "list_consumers", list_consumers, "consumers in a virtual host", vhost=True
    )


def list_connections(api: Api, args: argparse.Namespace, out: Output) -> None:
    out.table(CONNECTIONS, args.columns, api.get("/api/connections"))


def list_channels(api: Api, args: argparse.Namespace, out: Output) -> None:
    out.table(CHANNELS, args.columns, api.get("/api/channels"))


def list_consumers(api: Api, args: argparse.Namespace, out: Output) -> None:
    path = f"/api/consumers/{segment(args.vhost)}"
    rows = api.call("GET", path, missing=f"no vhost {args.vhost!r}").body
    out.table(CONSUMERS, args.columns, rows)
