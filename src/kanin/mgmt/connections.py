"""Connections, channels and consumers: who is connected, and closing a connection.

Monitoring and administrator users see every connection; other users their own, as on
RabbitMQ. DELETE on a connection closes it with connection.close 320 CONNECTION_FORCED
and the reason from the `X-Reason` header (RabbitMQ's default text without one).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web

from kanin.mgmt.auth import is_admin, is_monitor, readable_vhost
from kanin.mgmt.columns import apply_columns, apply_query
from kanin.mgmt.context import context_of, user_of
from kanin.mgmt.errors import not_found
from kanin.mgmt.live_shapes import (
    channel_name,
    channel_shape,
    connection_shape,
    consumer_shape,
    open_sessions,
)

if TYPE_CHECKING:
    from kanin.core.auth import User
    from kanin.core.channel import Channel
    from kanin.core.session.session import Session

DEFAULT_CLOSE_REASON = "Closed via management plugin"


def _sessions(request: web.Request) -> Iterator[Session]:
    """The connections the user may see, of the path's vhost if it names one."""
    ctx, user = context_of(request), user_of(request)
    vhost = None
    if "vhost" in request.match_info:
        vhost = readable_vhost(ctx.broker, user, request.match_info["vhost"])
    for session in open_sessions(ctx.broker):
        if _may_see(user, session) and (vhost is None or session.vhost is vhost):
            yield session


def _may_see(user: User, session: Session) -> bool:
    return is_monitor(user) or session.user.name == user.name


def _channels(sessions: Iterator[Session]) -> Iterator[tuple[Session, Channel]]:
    for session in sessions:
        for number in sorted(session.channels):
            yield session, session.channels[number]


def _named_session(request: web.Request) -> Session:
    name = request.match_info["name"]
    for session in _sessions(request):
        if session.name == name:
            return session
    raise not_found()


async def list_connections(request: web.Request) -> web.Response:
    shapes = [connection_shape(session) for session in _sessions(request)]
    return web.json_response(apply_query(shapes, request.query))


async def show_connection(request: web.Request) -> web.Response:
    shape = connection_shape(_named_session(request))
    return web.json_response(apply_columns(shape, request.query))


async def close_connection(request: web.Request) -> web.Response:
    session = _named_session(request)
    user = user_of(request)
    if not (is_admin(user) or session.user.name == user.name):
        raise not_found()  # a monitoring user sees it, but may not close it
    session.close_forced(request.headers.get("X-Reason") or DEFAULT_CLOSE_REASON)
    return web.Response(status=204)


async def connection_channels(request: web.Request) -> web.Response:
    session = _named_session(request)
    shapes = [channel_shape(s, channel) for s, channel in _channels(iter([session]))]
    return web.json_response(apply_query(shapes, request.query))


async def list_channels(request: web.Request) -> web.Response:
    shapes = [channel_shape(s, channel) for s, channel in _channels(_sessions(request))]
    return web.json_response(apply_query(shapes, request.query))


async def show_channel(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    for session, channel in _channels(_sessions(request)):
        if channel_name(session, channel) == name:
            shape = channel_shape(session, channel)
            return web.json_response(apply_columns(shape, request.query))
    raise not_found()


async def list_consumers(request: web.Request) -> web.Response:
    shapes = [
        consumer_shape(session, channel, consumer)
        for session, channel in _channels(_sessions(request))
        for consumer in channel.consumers.values()
    ]
    return web.json_response(apply_query(shapes, request.query))


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/connections", list_connections)
    app.router.add_get("/api/connections/{name}", show_connection)
    app.router.add_delete("/api/connections/{name}", close_connection)
    app.router.add_get("/api/connections/{name}/channels", connection_channels)
    app.router.add_get("/api/vhosts/{vhost}/connections", list_connections)
    app.router.add_get("/api/vhosts/{vhost}/channels", list_channels)
    app.router.add_get("/api/channels", list_channels)
    app.router.add_get("/api/channels/{name}", show_channel)
    app.router.add_get("/api/consumers", list_consumers)
    app.router.add_get("/api/consumers/{vhost}", list_consumers)
