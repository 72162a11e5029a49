"""Bindings: list them, and create or delete one between an exchange and a queue
(`/e/{source}/q/{queue}`) or another exchange (`/e/{source}/e/{destination}`).

Permissions as queue.bind and exchange.bind check them: write on the destination, read
on the source. A binding is named in URLs by its properties key (shapes.properties_key).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from kanin.amqp import constants as C
from kanin.amqp.errors import AMQPError, ChannelError
from kanin.core.permissions import check_permission
from kanin.mgmt.auth import Grantee, readable_vhost, visible_vhosts, writable_vhost
from kanin.mgmt.body import json_object, to_arguments, to_str
from kanin.mgmt.columns import apply_query
from kanin.mgmt.context import context_of, user_of
from kanin.mgmt.errors import from_amqp, not_found
from kanin.mgmt.shapes import bindings_of, exchange_name_from_url, properties_key

if TYPE_CHECKING:
    from kanin.core.auth import User
    from kanin.core.exchanges import Destination
    from kanin.core.vhost import VirtualHost

_KINDS = {"q": "queue", "e": "exchange"}


async def list_bindings(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    if "vhost" in request.match_info:
        vhosts = [readable_vhost(ctx.broker, user, request.match_info["vhost"])]
    else:
        vhosts = visible_vhosts(ctx.broker, user)
    found = [binding for vhost in vhosts for binding in bindings_of(vhost)]
    return web.json_response(apply_query(found, request.query))


def _between(request: web.Request, vhost: VirtualHost) -> list[dict[str, Any]]:
    """The bindings from the path's source to its destination."""
    source = exchange_name_from_url(request.match_info["source"])
    kind = _KINDS[request.match_info["kind"]]
    destination = request.match_info["destination"]
    if kind == "exchange":
        destination = exchange_name_from_url(destination)
    return [
        binding
        for binding in bindings_of(vhost)
        if binding["source"] == source
        and binding["destination"] == destination
        and binding["destination_type"] == kind
    ]


async def list_between(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    vhost = readable_vhost(ctx.broker, user, request.match_info["vhost"])
    return web.json_response(apply_query(_between(request, vhost), request.query))


async def show_binding(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    vhost = readable_vhost(ctx.broker, user, request.match_info["vhost"])
    return web.json_response(_the_binding(request, vhost))


def _the_binding(request: web.Request, vhost: VirtualHost) -> dict[str, Any]:
    props = request.match_info["props"]
    for binding in _between(request, vhost):
        if binding["properties_key"] == props:
            return binding
    raise not_found()


async def create_binding(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    vhost = writable_vhost(ctx.broker, user, request.match_info["vhost"])
    body = await json_object(request)
    routing_key = to_str(body, "routing_key", "")
    arguments = to_arguments(body)
    source = exchange_name_from_url(request.match_info["source"])
    try:
        destination = _destination(request, vhost, user, source)
        vhost.bind(source, destination, routing_key, arguments)
    except AMQPError as exc:
        raise from_amqp(exc) from None
    await ctx.saved()
    location = f"{request.match_info['destination']}/{properties_key(routing_key, arguments)}"
    return web.Response(status=201, headers={"Location": location})


def _destination(request: web.Request, vhost: VirtualHost, user: User, source: str) -> Destination:
    """The path's destination, after the checks queue.bind / exchange.bind make, in their
    order: write on the destination, the default exchange refused, read on the source,
    the source and destination present."""
    who = Grantee(user, vhost)
    kind = _KINDS[request.match_info["kind"]]
    name = request.match_info["destination"]
    if kind == "exchange":
        name = exchange_name_from_url(name)
    check_permission(who, "write", kind, name)
    if source == "" or (kind == "exchange" and name == ""):
        raise ChannelError(C.ACCESS_REFUSED, "operation not permitted on the default exchange")
    check_permission(who, "read", "exchange", source)
    vhost.get_exchange(source)
    if kind == "queue":
        return vhost.get_queue(name)
    return vhost.get_exchange(name)


async def delete_binding(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    vhost = writable_vhost(ctx.broker, user, request.match_info["vhost"])
    binding = _the_binding(request, vhost)
    source = binding["source"]
    try:
        destination = _destination(request, vhost, user, source)
        vhost.unbind(source, destination, binding["routing_key"], _raw_arguments(vhost, binding))
    except AMQPError as exc:
        raise from_amqp(exc) from None
    await ctx.saved()
    return web.Response(status=204)


def _raw_arguments(vhost: VirtualHost, shape: dict[str, Any]) -> dict[str, Any]:
    """The binding's own arguments (the shape holds them as JSON shows them)."""
    exchange = vhost.exchanges[shape["source"]]
    for binding in exchange.bindings.values():
        if (
            binding.destination.name == shape["destination"]
            and binding.routing_key == shape["routing_key"]
            and properties_key(binding.routing_key, binding.arguments) == shape["properties_key"]
        ):
            return binding.arguments
    return {}


def add_routes(app: web.Application) -> None:
    between = "/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{destination}"
    app.router.add_get("/api/bindings", list_bindings)
    app.router.add_get("/api/bindings/{vhost}", list_bindings)
    app.router.add_get(between, list_between)
    app.router.add_post(between, create_binding)
    app.router.add_get(between + "/{props}", show_binding)
    app.router.add_delete(between + "/{props}", delete_binding)
