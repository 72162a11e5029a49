"""Policies through the API: GET /api/policies[/{vhost}], GET/PUT/DELETE
/api/policies/{vhost}/{name}, as RabbitMQ 3.10's management plugin answers them.

Who may do what (measured on RabbitMQ 3.10): any management user lists the policies of
the vhosts it has permissions in (an administrator: of every vhost); reading, setting or
clearing one takes an administrator, or a policymaker with permissions in its vhost,
and anyone else is told 401 "User not authorised to access object". A policy is a
durable definition: the answer goes out once it is saved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from kanin.core.policies import PolicyError, read_policy
from kanin.core.policy_args import clear_policy, set_policy
from kanin.mgmt.auth import is_admin, no_vhost_access
from kanin.mgmt.body import json_object
from kanin.mgmt.columns import apply_columns, apply_query
from kanin.mgmt.context import context_of, user_of
from kanin.mgmt.errors import ApiError, bad_request, not_authorised, not_found

if TYPE_CHECKING:
    from kanin.core.auth import User
    from kanin.core.vhost import VirtualHost


def _has_vhost(user: User, vhost: str) -> bool:
    return is_admin(user) or vhost in user.permissions


async def list_policies(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    if "vhost" in request.match_info:
        name = request.match_info["vhost"]
        if name not in ctx.broker.vhosts:
            raise not_found()
        if not _has_vhost(user, name):
            raise no_vhost_access()
        vhosts = [ctx.broker.vhosts[name]]
    else:
        vhosts = [v for n, v in ctx.broker.vhosts.items() if _has_vhost(user, n)]
    shapes: list[dict[str, Any]] = [
        policy.shape() for vhost in vhosts for policy in vhost.policies.by_name.values()
    ]
    return web.json_response(apply_query(shapes, request.query))


def _policy_vhost(request: web.Request, missing: ApiError) -> VirtualHost:
    """The vhost of a policy the user may manage: 401 unless an administrator or a
    policymaker with permissions there; `missing` if there is no such vhost."""
    ctx, user = context_of(request), user_of(request)
    name = request.match_info["vhost"]
    policymaker = "policymaker" in user.tags and name in user.permissions
    if not (is_admin(user) or policymaker):
        raise not_authorised("User not authorised to access object")
    vhost = ctx.broker.vhosts.get(name)
    if vhost is None:
        raise missing
    return vhost


async def show_policy(request: web.Request) -> web.Response:
    vhost = _policy_vhost(request, not_found())
    policy = vhost.policies.by_name.get(request.match_info["name"])
    if policy is None:
        raise not_found()
    return web.json_response(apply_columns(policy.shape(), request.query))


async def put_policy(request: web.Request) -> web.Response:
    ctx = context_of(request)
    vhost = _policy_vhost(request, ApiError(404, "not_found", "vhost_not_found"))
    body = await json_object(request)
    try:
        policy = read_policy(vhost.name, request.match_info["name"], body)
    except PolicyError as exc:
        raise bad_request(exc.reason) from None
    created = set_policy(vhost, policy)
    await ctx.saved()
    return web.Response(status=201 if created else 204)


async def delete_policy(request: web.Request) -> web.Response:
    ctx = context_of(request)
    vhost = _policy_vhost(request, not_found())
    if not clear_policy(vhost, request.match_info["name"]):
        raise not_found()
    await ctx.saved()
    return web.Response(status=204)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/policies", list_policies)
    app.router.add_get("/api/policies/{vhost}", list_policies)
    app.router.add_get("/api/policies/{vhost}/{name}", show_policy)
    app.router.add_put("/api/policies/{vhost}/{name}", put_policy)
    app.router.add_delete("/api/policies/{vhost}/{name}", delete_policy)
