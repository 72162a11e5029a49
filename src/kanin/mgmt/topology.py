"""Exchanges and queues: list, show, declare (PUT), delete, purge.

Declares and deletes go through the vhost's own methods with the user's permission
check, as exchange.declare and queue.declare do, so the same refusals apply (reported
with RabbitMQ's status codes, errors.from_amqp) and a durable object is saved, and the
answer sent, as an AMQP declare's -ok is: once it is on disk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kanin.amqp.errors import AMQPError
from kanin.core.permissions import check_permission
from kanin.mgmt.auth import Grantee, authorize, readable_vhost, visible_vhosts, writable_vhost
from kanin.mgmt.body import json_object, to_arguments, to_bool, to_str
from kanin.mgmt.columns import apply_columns, apply_query
from kanin.mgmt.context import context_of, user_of
from kanin.mgmt.errors import from_amqp, not_found
from kanin.mgmt.rates import window_from
from kanin.mgmt.shapes import (
    binding_of,
    bindings_of,
    exchange_name_from_url,
    exchange_shape,
    queue_shape,
)

if TYPE_CHECKING:
    from kanin.core.exchanges import Exchange
    from kanin.core.queues import Queue
    from kanin.core.vhost import VirtualHost


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() == "true"


def _listing(request: web.Request, items: list[dict[str, Any]]) -> web.Response:
    return web.json_response(apply_query(items, request.query))


def _vhosts_asked(request: web.Request) -> list[VirtualHost]:
    """The vhost in the path, or every vhost the user may see."""
    ctx, user = context_of(request), user_of(request)
    if "vhost" in request.match_info:
        return [readable_vhost(ctx.broker, user, request.match_info["vhost"])]
    return visible_vhosts(ctx.broker, user)


# -- exchanges -----------------------------------------------------------------------------


def _exchange_with_rates(request: web.Request, exchange: Exchange, vhost: str) -> dict[str, Any]:
    rates = context_of(request).rates.exchange_fields(
        exchange, window_from(request.query, "msg_rates")
    )
    return {**exchange_shape(exchange, vhost), **rates}


async def list_exchanges(request: web.Request) -> web.Response:
    shapes = [
        _exchange_with_rates(request, exchange, vhost.name)
        for vhost in _vhosts_asked(request)
        for exchange in vhost.exchanges.values()
    ]
    return _listing(request, shapes)


async def show_exchange(request: web.Request) -> web.Response:
    vhost = _vhosts_asked(request)[0]
    exchange = vhost.exchanges.get(exchange_name_from_url(request.match_info["name"]))
    if exchange is None:
        raise not_found()
    shape = _exchange_with_rates(request, exchange, vhost.name)
    return web.json_response(apply_columns(shape, request.query))


async def declare_exchange(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    vhost = writable_vhost(ctx.broker, user, request.match_info["vhost"])
    name = exchange_name_from_url(request.match_info["name"])
    body = await json_object(request)
    existed = name in vhost.exchanges
    _amqp(
        lambda: vhost.declare_exchange(
            name,
            to_str(body, "type", "direct"),
            passive=False,
            durable=to_bool(body, "durable", False),
            auto_delete=to_bool(body, "auto_delete", False),
            internal=to_bool(body, "internal", False),
            arguments=to_arguments(body),
            authorize=authorize(user, vhost),
        )
    )
    await ctx.saved()
    return web.Response(status=204 if existed else 201)


async def delete_exchange(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    vhost = writable_vhost(ctx.broker, user, request.match_info["vhost"])
    name = exchange_name_from_url(request.match_info["name"])
    if name not in vhost.exchanges:
        raise not_found()
    if_unused = _flag(request, "if-unused")
    _amqp(lambda: vhost.delete_exchange(name, if_unused, authorize(user, vhost)))
    await ctx.saved()
    return web.Response(status=204)


async def exchange_bindings(request: web.Request) -> web.Response:
    vhost = _vhosts_asked(request)[0]
    exchange = vhost.exchanges.get(exchange_name_from_url(request.match_info["name"]))
    if exchange is None:
        raise not_found()
    if request.match_info["direction"] == "source":
        found = [binding_of(vhost.name, b) for b in exchange.bindings.values()]
    else:
        found = [binding_of(vhost.name, b) for b in exchange.bound_from.values()]
    return _listing(request, found)


# -- queues --------------------------------------------------------------------------------


def _queues_with_rates(request: web.Request, queues: list[Queue]) -> list[dict[str, Any]]:
    ctx = context_of(request)
    unacked = ctx.unacked_by_queue()
    window = window_from(request.query, "msg_rates")
    lengths_window = window_from(request.query, "lengths")
    return [
        {
            **queue_shape(queue, unacked[id(queue)]),
            **ctx.rates.queue_fields(queue, window, lengths_window),
        }
        for queue in queues
    ]


async def list_queues(request: web.Request) -> web.Response:
    queues = [queue for vhost in _vhosts_asked(request) for queue in vhost.queues.values()]
    return _listing(request, _queues_with_rates(request, queues))


async def show_queue(request: web.Request) -> web.Response:
    vhost = _vhosts_asked(request)[0]
    queue = vhost.queues.get(request.match_info["name"])
    if queue is None:
        raise not_found()
    [shape] = _queues_with_rates(request, [queue])
    return web.json_response(apply_columns(shape, request.query))


async def declare_queue(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    vhost = writable_vhost(ctx.broker, user, request.match_info["vhost"])
    name = request.match_info["name"]
    body = await json_object(request)
    existed = name in vhost.queues
    _amqp(
        lambda: vhost.declare_queue(
            name,
            None,
            passive=False,
            durable=to_bool(body, "durable", False),
            exclusive=False,
            auto_delete=to_bool(body, "auto_delete", False),
            arguments=to_arguments(body),
            authorize=authorize(user, vhost),
        )
    )
    await ctx.saved()
    return web.Response(status=204 if existed else 201)


async def delete_queue(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    vhost = writable_vhost(ctx.broker, user, request.match_info["vhost"])
    name = request.match_info["name"]
    queue = vhost.queues.get(name)
    if queue is None:
        raise not_found()
    if_unused, if_empty = _flag(request, "if-unused"), _flag(request, "if-empty")

    def delete() -> None:
        check_permission(Grantee(user, vhost), "configure", "queue", name)
        vhost.delete_queue(queue, if_unused, if_empty)

    _amqp(delete)
    await ctx.saved()
    return web.Response(status=204)


async def purge_queue(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    vhost = writable_vhost(ctx.broker, user, request.match_info["vhost"])
    name = request.match_info["name"]
    queue = vhost.queues.get(name)
    if queue is None:
        raise not_found()

    def purge() -> None:
        check_permission(Grantee(user, vhost), "read", "queue", name)
        queue.check_purgeable()
        queue.purge()

    _amqp(purge)
    return web.Response(status=204)


async def queue_bindings(request: web.Request) -> web.Response:
    vhost = _vhosts_asked(request)[0]
    name = request.match_info["name"]
    queue = vhost.queues.get(name)
    if queue is None:
        raise not_found()
    found = [b for b in bindings_of(vhost) if b["destination_type"] == "queue"]
    return _listing(request, [b for b in found if b["destination"] == name])


def _amqp(change: Callable[[], object]) -> None:
    """Run a change as the AMQP path would; its refusal as the API reports it."""
    try:
        change()
    except AMQPError as exc:
        raise from_amqp(exc) from None


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/exchanges", list_exchanges)
    app.router.add_get("/api/exchanges/{vhost}", list_exchanges)
    app.router.add_get("/api/exchanges/{vhost}/{name}", show_exchange)
    app.router.add_put("/api/exchanges/{vhost}/{name}", declare_exchange)
    app.router.add_delete("/api/exchanges/{vhost}/{name}", delete_exchange)
    app.router.add_get(
        "/api/exchanges/{vhost}/{name}/bindings/{direction:source|destination}",
        exchange_bindings,
    )
    app.router.add_get("/api/queues", list_queues)
    app.router.add_get("/api/queues/{vhost}", list_queues)
    app.router.add_get("/api/queues/{vhost}/{name}", show_queue)
    app.router.add_put("/api/queues/{vhost}/{name}", declare_queue)
    app.router.add_delete("/api/queues/{vhost}/{name}", delete_queue)
    app.router.add_delete("/api/queues/{vhost}/{name}/contents", purge_queue)
    app.router.add_get("/api/queues/{vhost}/{name}/bindings", queue_bindings)
