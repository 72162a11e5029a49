"""Vhosts, users and permissions: what an administrator manages (and whoami).

Every change is a durable definition: it is answered once saved, as a declare is.
Passwords are kept as RabbitMQ keeps them (rabbit_password_hashing_sha256), so a hash
taken from RabbitMQ (`password_hash`) works here and the other way round.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from aiohttp import web

from kanin.core.auth import Permission, hash_password
from kanin.mgmt.auth import readable_vhost, require_admin, visible_vhosts
from kanin.mgmt.body import json_object, tags_of, to_str
from kanin.mgmt.columns import apply_columns, apply_query
from kanin.mgmt.context import context_of, user_of
from kanin.mgmt.errors import bad_request, not_found
from kanin.mgmt.shapes import HASHING_ALGORITHM, permission_shape, user_shape, vhost_shape

SHA256_HASH_BYTES = 4 + 32  # salt, digest


# -- vhosts --------------------------------------------------------------------------------


async def list_vhosts(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    unacked = ctx.unacked_by_queue()
    shapes = [vhost_shape(vhost, unacked) for vhost in visible_vhosts(ctx.broker, user)]
    return web.json_response(apply_query(shapes, request.query))


async def show_vhost(request: web.Request) -> web.Response:
    ctx, user = context_of(request), user_of(request)
    vhost = readable_vhost(ctx.broker, user, request.match_info["vhost"])
    shape = vhost_shape(vhost, ctx.unacked_by_queue())
    return web.json_response(apply_columns(shape, request.query))


async def put_vhost(request: web.Request) -> web.Response:
    """Create a vhost (its creator gets full permissions in it, as on RabbitMQ)."""
    ctx, user = context_of(request), user_of(request)
    require_admin(user)
    await json_object(request)  # description, tags: accepted, not kept yet
    name = request.match_info["vhost"]
    if name in ctx.broker.vhosts:
        return web.Response(status=204)
    ctx.broker.add_vhost(name)
    ctx.broker.users.set_permissions(user.name, name, Permission())
    ctx.broker.definitions_changed()
    await ctx.saved()
    return web.Response(status=201)


async def delete_vhost(request: web.Request) -> web.Response:
    ctx = context_of(request)
    require_admin(user_of(request))
    name = request.match_info["vhost"]
    if name not in ctx.broker.vhosts:
        raise not_found()
    ctx.broker.delete_vhost(name)
    await ctx.saved()
    return web.Response(status=204)


async def vhost_permissions(request: web.Request) -> web.Response:
    ctx = context_of(request)
    require_admin(user_of(request))
    name = request.match_info["vhost"]
    if name not in ctx.broker.vhosts:
        raise not_found()
    shapes = [
        {"vhost": name, **permission_shape(user.name, name, user.permissions[name])}
        for user in ctx.broker.users.users.values()
        if name in user.permissions
    ]
    return web.json_response(apply_query(shapes, request.query))


# -- users ---------------------------------------------------------------------------------


async def whoami(request: web.Request) -> web.Response:
    user = user_of(request)
    return web.json_response({"name": user.name, "tags": list(user.tags)})


async def list_users(request: web.Request) -> web.Response:
    ctx = context_of(request)
    require_admin(user_of(request))
    shapes = [user_shape(user) for user in ctx.broker.users.users.values()]
    return web.json_response(apply_query(shapes, request.query))


async def show_user(request: web.Request) -> web.Response:
    ctx = context_of(request)
    require_admin(user_of(request))
    user = ctx.broker.users.users.get(request.match_info["user"])
    if user is None:
        raise not_found()
    return web.json_response(apply_columns(user_shape(user), request.query))


async def put_user(request: web.Request) -> web.Response:
    ctx = context_of(request)
    require_admin(user_of(request))
    body = await json_object(request)
    name = request.match_info["user"]
    existing = ctx.broker.users.users.get(name)
    password_hash = password_hash_from(body, existing.password_hash if existing else "")
    created = ctx.broker.users.put_user(name, password_hash, tags_of(body.get("tags")))
    ctx.broker.definitions_changed()
    await ctx.saved()
    return web.Response(status=201 if created else 204)


def password_hash_from(body: dict[str, Any], current: str) -> str:
    """The hash to keep: of `password`, or `password_hash` as given (checked to be one
    kanin can verify), or the current one when neither is given ("" logs nobody in)."""
    if "password" in body:
        return hash_password(to_str(body, "password"))
    if "password_hash" not in body:
        return current
    return checked_hash(to_str(body, "password_hash"), body.get("hashing_algorithm"))


def checked_hash(password_hash: str, algorithm: Any) -> str:
    """A RabbitMQ password hash kanin can check; 400 naming the problem otherwise."""
    if algorithm not in (None, HASHING_ALGORITHM):
        raise bad_request(
            f"unsupported hashing_algorithm {algorithm!r}: kanin checks {HASHING_ALGORITHM}"
        )
    if password_hash == "":
        return password_hash  # a user who cannot log in with a password
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except binascii.Error:
        raise bad_request(f"not_base64: {password_hash!r}") from None
    if len(raw) != SHA256_HASH_BYTES:
        raise bad_request(
            f"password_hash is {len(raw)} bytes, not the {SHA256_HASH_BYTES} of a salted SHA-256"
        )
    return password_hash


async def delete_user(request: web.Request) -> web.Response:
    ctx = context_of(request)
    require_admin(user_of(request))
    if not ctx.broker.users.delete_user(request.match_info["user"]):
        raise not_found()
    ctx.broker.definitions_changed()
    await ctx.saved()
    return web.Response(status=204)


async def bulk_delete_users(request: web.Request) -> web.Response:
    ctx = context_of(request)
    require_admin(user_of(request))
    names = (await json_object(request)).get("users", [])
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise bad_request("users must be a list of names")
    for name in names:
        ctx.broker.users.delete_user(name)
    ctx.broker.definitions_changed()
    await ctx.saved()
    return web.Response(status=204)


async def user_permissions(request: web.Request) -> web.Response:
    ctx = context_of(request)
    require_admin(user_of(request))
    user = ctx.broker.users.users.get(request.match_info["user"])
    if user is None:
        raise not_found()
    shapes = [permission_shape(user.name, v, p) for v, p in user.permissions.items()]
    return web.json_response(apply_query(shapes, request.query))


# -- permissions ---------------------------------------------------------------------------


async def list_permissions(request: web.Request) -> web.Response:
    ctx = context_of(request)
    require_admin(user_of(request))
    shapes = [
        permission_shape(user.name, vhost, permission)
        for user in ctx.broker.users.users.values()
        for vhost, permission in user.permissions.items()
    ]
    return web.json_response(apply_query(shapes, request.query))


async def show_permission(request: web.Request) -> web.Response:
    ctx = context_of(request)
    require_admin(user_of(request))
    vhost, name = request.match_info["vhost"], request.match_info["user"]
    user = ctx.broker.users.users.get(name)
    if user is None or vhost not in user.permissions:
        raise not_found()
    return web.json_response(permission_shape(name, vhost, user.permissions[vhost]))


async def put_permission(request: web.Request) -> web.Response:
    ctx = context_of(request)
    require_admin(user_of(request))
    body = await json_object(request)
    vhost, name = request.match_info["vhost"], request.match_info["user"]
    user = ctx.broker.users.users.get(name)
    if user is None or vhost not in ctx.broker.vhosts:
        raise bad_request("vhost_or_user_not_found")
    permission = permission_from(body)
    created = vhost not in user.permissions
    ctx.broker.users.set_permissions(name, vhost, permission)
    ctx.broker.definitions_changed()
    await ctx.saved()
    return web.Response(status=201 if created else 204)


def permission_from(body: dict[str, Any]) -> Permission:
    """configure, write and read: each required, each a regular expression."""
    configure, write, read = (to_str(body, key) for key in ("configure", "write", "read"))
    for pattern in (configure, write, read):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise bad_request(f"invalid_regexp: {pattern!r}: {exc}") from None
    return Permission(configure, write, read)


async def delete_permission(request: web.Request) -> web.Response:
    ctx = context_of(request)
    require_admin(user_of(request))
    vhost, name = request.match_info["vhost"], request.match_info["user"]
    if not ctx.broker.users.clear_permissions(name, vhost):
        raise not_found()
    ctx.broker.definitions_changed()
    await ctx.saved()
    return web.Response(status=204)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/vhosts", list_vhosts)
    app.router.add_get("/api/vhosts/{vhost}", show_vhost)
    app.router.add_put("/api/vhosts/{vhost}", put_vhost)
    app.router.add_delete("/api/vhosts/{vhost}", delete_vhost)
    app.router.add_get("/api/vhosts/{vhost}/permissions", vhost_permissions)
    app.router.add_get("/api/whoami", whoami)
    app.router.add_get("/api/users", list_users)
    app.router.add_post("/api/users/bulk-delete", bulk_delete_users)
    app.router.add_get("/api/users/{user}", show_user)
    app.router.add_put("/api/users/{user}", put_user)
    app.router.add_delete("/api/users/{user}", delete_user)
    app.router.add_get("/api/users/{user}/permissions", user_permissions)
    app.router.add_get("/api/permissions", list_permissions)
    app.router.add_get("/api/permissions/{vhost}/{user}", show_permission)
    app.router.add_put("/api/permissions/{vhost}/{user}", put_permission)
    app.router.add_delete("/api/permissions/{vhost}/{user}", delete_permission)
