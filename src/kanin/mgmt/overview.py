"""The broker as a whole: /api/overview, /api/nodes, health checks and the aliveness test.

kanin is one node; it reports itself as `kanin@<host>`. Its message rates are RabbitMQ's
"basic" mode (rates.py): `message_stats` and the `queue_totals` `*_details` are the whole
broker's, so they are shown to users who may see every vhost, and left out for others
rather than shown with other vhosts' traffic in them.
"""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kanin import __version__
from kanin.amqp.errors import AMQPError
from kanin.core.exchanges import EXCHANGE_TYPES
from kanin.core.publishing import route_without_channel
from kanin.core.session.handshake import RABBITMQ_VERSION
from kanin.mgmt.auth import authorize, require_monitor, visible_vhosts, writable_vhost
from kanin.mgmt.columns import apply_columns, apply_query
from kanin.mgmt.context import MgmtContext, context_of, user_of
from kanin.mgmt.errors import ApiError, from_amqp, not_found
from kanin.mgmt.live_shapes import open_sessions
from kanin.mgmt.messages import build_message, properties_from, settle, take
from kanin.mgmt.rates import BROKER_KEEP, INTERVAL_S, OBJECT_KEEP, window_from
from kanin.mgmt.shapes import NODE

if TYPE_CHECKING:
    from kanin.core.vhost import VirtualHost

ALIVENESS_QUEUE = "aliveness-test"
RATES_MODE = "basic"
# How many seconds of samples are kept: the broker's own (global), each object's (basic).
RETENTION = {
    "global": [(BROKER_KEEP - 1) * INTERVAL_S],
    "basic": [(OBJECT_KEEP - 1) * INTERVAL_S],
    "detailed": [],
}


def _exchange_types() -> list[dict[str, Any]]:
    return [
        {"name": name, "description": f"kanin's {name} exchange", "enabled": True}
        for name in sorted(EXCHANGE_TYPES)
    ]


def totals(ctx: MgmtContext, vhosts: list[VirtualHost]) -> dict[str, dict[str, Any]]:
    """queue_totals and object_totals over these vhosts (the Prometheus metrics' too)."""
    names = {vhost.name for vhost in vhosts}
    sessions = [s for s in open_sessions(ctx.broker) if s.vhost.name in names]
    channels = [c for s in sessions for c in s.channels.values()]
    unacked = ctx.unacked_by_queue()
    queues = [queue for vhost in vhosts for queue in vhost.queues.values()]
    ready = sum(queue.message_count for queue in queues)
    held = sum(unacked[id(queue)] for queue in queues)
    return {
        "queue_totals": {
            "messages": ready + held,
            "messages_ready": ready,
            "messages_unacknowledged": held,
        },
        "object_totals": {
            "connections": len(sessions),
            "channels": len(channels),
            "consumers": sum(len(channel.consumers) for channel in channels),
            "exchanges": sum(len(vhost.exchanges) for vhost in vhosts),
            "queues": len(queues),
        },
    }


async def overview(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    vhosts = visible_vhosts(ctx.broker, user)
    summary = totals(ctx, vhosts)
    message_stats: dict[str, Any] = {}
    if len(vhosts) == len(ctx.broker.vhosts):
        rates = ctx.rates
        message_stats = rates.overview_stats(
            ctx.broker.counters, window_from(request.query, "msg_rates")
        )
        summary["queue_totals"].update(rates.totals_details(window_from(request.query, "lengths")))
    shape: dict[str, Any] = {
        "management_version": RABBITMQ_VERSION,
        "rates_mode": RATES_MODE,
        "sample_retention_policies": RETENTION,
        "exchange_types": _exchange_types(),
        "product_version": __version__,
        "product_name": "kanin",
        "rabbitmq_version": RABBITMQ_VERSION,
        "kanin_version": __version__,
        "python_version": platform.python_version(),
        "cluster_name": NODE,
        "node": NODE,
        "disable_stats": False,
        "enable_queue_totals": False,
        "message_stats": message_stats,
        **summary,
        "statistics_db_event_queue": 0,
        "listeners": [
            {"node": NODE, "protocol": protocol, "ip_address": address, "port": port}
            for protocol, address, port in ctx.listeners
        ],
    }
    return web.json_response(apply_columns(shape, request.query))


def node_shape(ctx: MgmtContext) -> dict[str, Any]:
    broker = ctx.broker
    soft_fds, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    shape: dict[str, Any] = {
        "name": NODE,
        "type": "disc",
        "running": True,
        "os_pid": str(os.getpid()),
        "uptime": int((time.time() - ctx.started_at) * 1000),
        "processors": os.cpu_count() or 1,
        "rates_mode": RATES_MODE,
        "mem_limit": broker.memory.high_watermark_bytes,
        "mem_alarm": "memory" in broker.alarms.raised,
        "disk_free_limit": broker.config.disk_free_limit_bytes,
        "disk_free_alarm": "disk" in broker.alarms.raised,
        "fd_total": soft_fds,
        "sockets_used": len(broker.connections),
        "exchange_types": _exchange_types(),
        "kanin_held_message_bytes": broker.memory.held_bytes,
    }
    rss = ctx.read_rss() if ctx.read_rss is not None else None
    if rss is not None:
        shape["mem_used"] = rss
    if ctx.disk_free is not None:
        shape["disk_free"] = ctx.disk_free()
    with contextlib.suppress(OSError):  # not Linux: not reported
        shape["fd_used"] = len(os.listdir("/proc/self/fd"))
    return shape


async def nodes(request: web.Request) -> web.Response:
    require_monitor(user_of(request))
    return web.json_response(apply_query([node_shape(context_of(request))], request.query))


async def node(request: web.Request) -> web.Response:
    require_monitor(user_of(request))
    if request.match_info["node"] != NODE:
        raise not_found()
    return web.json_response(apply_columns(node_shape(context_of(request)), request.query))


async def alarms_check(request: web.Request) -> web.Response:
    raised = context_of(request).broker.alarms.raised
    if not raised:
        return web.json_response({"status": "ok"})
    alarms = [{"node": NODE, "resource": name} for name in raised]
    body = {"status": "failed", "reason": "resource alarm(s) in effect", "alarms": alarms}
    return web.json_response(body, status=503)


async def virtual_hosts_check(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})  # one node: every vhost it has is running


async def aliveness(request: web.Request) -> web.Response:
    """Declare the vhost's aliveness-test queue, publish a message to it and get it back,
    with the user's permissions, as RabbitMQ's aliveness test does."""
    ctx, user = context_of(request), user_of(request)
    name = request.match_info["vhost"]
    if name not in ctx.broker.vhosts:
        raise not_found()
    vhost = writable_vhost(ctx.broker, user, name)
    try:
        queue = vhost.declare_queue(
            ALIVENESS_QUEUE,
            None,
            passive=False,
            durable=False,
            exclusive=False,
            auto_delete=False,
            arguments={},
            authorize=authorize(user, vhost),
        )
        message = build_message("", ALIVENESS_QUEUE, b"test_message", properties_from({}))
        route_without_channel(vhost, message)
        taken = await take(queue, 1)
    except AMQPError as exc:
        raise from_amqp(exc) from None
    settle(queue, [entry for entry, _ in taken], "ack_requeue_false")
    if not taken:
        raise ApiError(503, "failed", "aliveness test message was not delivered")
    return web.json_response({"status": "ok"})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/overview", overview)
    app.router.add_get("/api/nodes", nodes)
    app.router.add_get("/api/nodes/{node}", node)
    app.router.add_get("/api/health/checks/alarms", alarms_check)
    app.router.add_get("/api/health/checks/local-alarms", alarms_check)
    app.router.add_get("/api/health/checks/virtual-hosts", virtual_hosts_check)
    app.router.add_get("/api/aliveness-test/{vhost}", aliveness)
