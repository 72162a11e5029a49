"""GET and POST /api/definitions: the broker's definitions in RabbitMQ's JSON, out and in.

An import is all or nothing. The document is read and checked whole first (its shape,
names, vhosts and users referred to, password hashes, permission patterns:
definitions_doc.read); then each step goes through the broker's own methods, the
declares with the checks an AMQP declare gets (exchange types, queue arguments,
equivalence with what exists). If one is refused, every step taken is undone, in
reverse, before the answer (400 naming the refusal) goes out: nothing is left changed,
and no save runs in between, since the whole import runs within one turn of the loop.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kanin.amqp.errors import AMQPError
from kanin.core.policy_args import clear_policy, set_policy
from kanin.mgmt.auth import require_admin
from kanin.mgmt.context import context_of, user_of
from kanin.mgmt.definitions_doc import DefinitionsProblem, Plan, export, read
from kanin.mgmt.errors import bad_request, bare_text

if TYPE_CHECKING:
    from kanin.core.auth import Permission
    from kanin.core.broker import Broker
    from kanin.core.policies import Policy

Undo = list[Callable[[], object]]


async def get_definitions(request: web.Request) -> web.Response:
    require_admin(user_of(request))
    return web.json_response(export(context_of(request).broker))


async def post_definitions(request: web.Request) -> web.Response:
    ctx = context_of(request)
    require_admin(user_of(request))
    try:
        document = json.loads(await request.read())
    except ValueError:
        raise bad_request("failed_to_parse_json") from None
    try:
        plan = read(document, ctx.broker)
        apply(ctx.broker, plan)
    except DefinitionsProblem as exc:
        raise bad_request(str(exc)) from None
    ctx.broker.definitions_changed()
    await ctx.saved()
    return web.Response(status=204)


def apply(broker: Broker, plan: Plan) -> None:
    """Every step of the plan, or (DefinitionsProblem) none of them."""
    undo: Undo = []
    try:
        _apply_access(broker, plan, undo)
        for policy in plan.policies:  # before the objects, which are then made under them
            _policy(broker, policy, undo)
        steps = (
            *((_exchange, spec) for spec in plan.exchanges),
            *((_queue, spec) for spec in plan.queues),
            *((_binding, spec) for spec in plan.bindings),
        )
        for declare, spec in steps:
            try:
                declare(broker, spec, undo)
            except AMQPError as exc:
                raise DefinitionsProblem(f"{spec['where']}: {bare_text(exc)}") from None
    except BaseException:
        for step in reversed(undo):
            step()
        raise


def _apply_access(broker: Broker, plan: Plan, undo: Undo) -> None:
    for name in plan.vhosts:
        if name not in broker.vhosts:
            broker.add_vhost(name)
            undo.append(functools.partial(broker.delete_vhost, name))
    users = broker.users
    for name, password_hash, tags in plan.users:
        before = users.users.get(name)
        if before is None:
            undo.append(functools.partial(users.delete_user, name))
        else:
            undo.append(functools.partial(users.put_user, name, before.password_hash, before.tags))
        users.put_user(name, password_hash, tags)
    for user, vhost, permission in plan.permissions:
        _set_permission(broker, user, vhost, permission, undo)


def _set_permission(
    broker: Broker, user: str, vhost: str, permission: Permission, undo: Undo
) -> None:
    grants = broker.users.users[user].permissions
    before = grants.get(vhost)
    if before is None:
        undo.append(functools.partial(grants.pop, vhost, None))
    else:
        undo.append(functools.partial(grants.__setitem__, vhost, before))
    grants[vhost] = permission


def _policy(broker: Broker, policy: Policy, undo: Undo) -> None:
    vhost = broker.vhosts[policy.vhost]
    before = vhost.policies.by_name.get(policy.name)
    if before is None:
        undo.append(functools.partial(clear_policy, vhost, policy.name))
    else:
        undo.append(functools.partial(set_policy, vhost, before))
    set_policy(vhost, policy)


def _exchange(broker: Broker, spec: dict[str, Any], undo: Undo) -> None:
    vhost = broker.vhosts[spec["vhost"]]
    name = spec["name"]
    existed = name in vhost.exchanges
    vhost.declare_exchange(
        name,
        spec["type"],
        passive=False,
        durable=spec["durable"],
        auto_delete=spec["auto_delete"],
        internal=spec["internal"],
        arguments=spec["arguments"],
    )
    if not existed:
        undo.append(lambda: vhost.delete_exchange(name, False))


def _queue(broker: Broker, spec: dict[str, Any], undo: Undo) -> None:
    vhost = broker.vhosts[spec["vhost"]]
    existed = spec["name"] in vhost.queues
    queue = vhost.declare_queue(
        spec["name"],
        None,
        passive=False,
        durable=spec["durable"],
        exclusive=False,
        auto_delete=spec["auto_delete"],
        arguments=spec["arguments"],
    )
    if not existed:
        undo.append(lambda: vhost.remove_queue(queue))


def _binding(broker: Broker, spec: dict[str, Any], undo: Undo) -> None:
    vhost = broker.vhosts[spec["vhost"]]
    vhost.get_exchange(spec["source"])
    if spec["destination_type"] == "queue":
        destination: Any = vhost.get_queue(spec["destination"])
    else:
        destination = vhost.get_exchange(spec["destination"])
    key, arguments = spec["routing_key"], spec["arguments"]
    if vhost.has_binding(spec["source"], destination, key, arguments):
        return
    vhost.bind(spec["source"], destination, key, arguments)
    undo.append(lambda: vhost.unbind(spec["source"], destination, key, arguments))


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/definitions", get_definitions)
    app.router.add_post("/api/definitions", post_definitions)
