"""RabbitMQ's definitions document (as GET /api/definitions writes it and
`rabbitmqctl import_definitions` reads it): written from the broker, and read into a
plan that is checked entry by entry before anything is changed.

Parsing stops at the first problem and names it (`queues[3] ('orders' in vhost '/'):
...`); `definitions.py` applies a plan, and undoes it all if the broker refuses a step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kanin import __version__
from kanin.core.auth import Permission
from kanin.core.exchanges import DefaultExchange
from kanin.core.policies import Policy, PolicyError, read_policy
from kanin.core.queues import Queue
from kanin.core.session.handshake import RABBITMQ_VERSION
from kanin.mgmt.access import checked_hash, permission_from
from kanin.mgmt.body import tags_of, to_arguments, to_bool
from kanin.mgmt.errors import ApiError
from kanin.mgmt.shapes import HASHING_ALGORITHM, jsonable

if TYPE_CHECKING:
    from kanin.core.broker import Broker
    from kanin.core.exchanges import Binding


class DefinitionsProblem(Exception):
    """What makes a definitions document unusable: the first problem found."""


# -- out -----------------------------------------------------------------------------------


def export(broker: Broker) -> dict[str, Any]:
    users = broker.users.users.values()
    return {
        "rabbit_version": RABBITMQ_VERSION,
        "rabbitmq_version": RABBITMQ_VERSION,
        "product_name": "kanin",
        "product_version": __version__,
        "users": [
            {
                "name": user.name,
                "password_hash": user.password_hash,
                "hashing_algorithm": HASHING_ALGORITHM,
                "tags": list(user.tags),
                "limits": {},
            }
            for user in users
        ],
        "vhosts": [{"name": name} for name in broker.vhosts],
        "permissions": [
            {"user": user.name, "vhost": vhost, **_patterns(permission)}
            for user in users
            for vhost, permission in user.permissions.items()
        ],
        "topic_permissions": [],
        "parameters": [],
        "global_parameters": [],
        "policies": [
            policy.shape()
            for vhost in broker.vhosts.values()
            for policy in vhost.policies.by_name.values()
        ],
        **_topology(broker),
    }


def _patterns(permission: Permission) -> dict[str, str]:
    return {"configure": permission.configure, "write": permission.write, "read": permission.read}


def _topology(broker: Broker) -> dict[str, list[dict[str, Any]]]:
    """Queues but exclusive ones, exchanges but the predeclared ones, and the bindings
    between them (not the default exchange's), as RabbitMQ exports them."""
    queues: list[dict[str, Any]] = []
    exchanges: list[dict[str, Any]] = []
    bindings: list[dict[str, Any]] = []
    for vhost in broker.vhosts.values():
        for queue in vhost.queues.values():
            if not queue.exclusive:
                queues.append(
                    {
                        "name": queue.name,
                        "vhost": vhost.name,
                        "durable": queue.durable,
                        "auto_delete": queue.auto_delete,
                        "arguments": jsonable(queue.arguments),
                    }
                )
        for exchange in vhost.exchanges.values():
            if isinstance(exchange, DefaultExchange):
                continue
            if not exchange.name.startswith("amq."):
                exchanges.append(
                    {
                        "name": exchange.name,
                        "vhost": vhost.name,
                        "type": exchange.type_name,
                        "durable": exchange.durable,
                        "auto_delete": exchange.auto_delete,
                        "internal": exchange.internal,
                        "arguments": jsonable(exchange.arguments),
                    }
                )
            bindings.extend(
                _binding(vhost.name, b)
                for b in exchange.bindings.values()
                if not (isinstance(b.destination, Queue) and b.destination.exclusive)
            )
    return {"queues": queues, "exchanges": exchanges, "bindings": bindings}


def _binding(vhost: str, binding: Binding) -> dict[str, Any]:
    return {
        "source": binding.source.name,
        "vhost": vhost,
        "destination": binding.destination.name,
        "destination_type": "queue" if isinstance(binding.destination, Queue) else "exchange",
        "routing_key": binding.routing_key,
        "arguments": jsonable(binding.arguments),
    }


# -- in ------------------------------------------------------------------------------------


@dataclass
class Plan:
    vhosts: list[str] = field(default_factory=list)
    users: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)
    permissions: list[tuple[str, str, Permission]] = field(default_factory=list)
    policies: list[Policy] = field(default_factory=list)
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    queues: list[dict[str, Any]] = field(default_factory=list)
    bindings: list[dict[str, Any]] = field(default_factory=list)


_SECTIONS = ("users", "vhosts", "permissions", "policies", "exchanges", "queues", "bindings")
# The keys RabbitMQ's export always writes, and its import needs.
_REQUIRED = {
    "exchanges": ("name", "vhost", "type", "durable", "auto_delete", "internal", "arguments"),
    "queues": ("name", "vhost", "durable", "auto_delete", "arguments"),
    "bindings": (
        "source",
        "vhost",
        "destination",
        "destination_type",
        "routing_key",
        "arguments",
    ),
}


def read(document: Any, broker: Broker) -> Plan:
    """The plan a document asks for; DefinitionsProblem naming the first problem."""
    if not isinstance(document, dict):
        raise DefinitionsProblem("not a definitions document (the top level is not an object)")
    for section in _SECTIONS:
        if not isinstance(document.get(section, []), list):
            raise DefinitionsProblem(f'"{section}" is not a list')
    plan = Plan()
    for where, entry in _entries(document, "vhosts"):
        plan.vhosts.append(_text(entry, "name", where))
    vhosts = set(broker.vhosts) | set(plan.vhosts)
    for where, entry in _entries(document, "users"):
        plan.users.append(_user(entry, where))
    users = set(broker.users.users) | {name for name, _, _ in plan.users}
    for where, entry in _entries(document, "permissions"):
        plan.permissions.append(_permission(entry, where, vhosts, users))
    for where, entry in _entries(document, "policies"):
        plan.policies.append(_policy(entry, where, vhosts))
    for section in ("exchanges", "queues", "bindings"):
        for where, entry in _entries(document, section):
            getattr(plan, section).append(_topology_entry(section, entry, where, vhosts))
    return plan


def _entries(document: dict[str, Any], section: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for index, entry in enumerate(document.get(section, [])):
        where = f"{section}[{index}]"
        if not isinstance(entry, dict):
            raise DefinitionsProblem(f"{where}: not an object")
        found.append((where, entry))
    return found


def _text(entry: dict[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str):
        raise DefinitionsProblem(f"{where}: {key!r} is missing or not a string")
    return value


def _checked(where: str, check: Any, *args: Any) -> Any:
    """The check's result; an ApiError it raises, as this entry's problem."""
    try:
        return check(*args)
    except ApiError as exc:
        raise DefinitionsProblem(f"{where}: {exc.reason}") from None


def _user(entry: dict[str, Any], where: str) -> tuple[str, str, tuple[str, ...]]:
    name = _text(entry, "name", where)
    where = f"{where} ({name!r})"
    password_hash = _text(entry, "password_hash", where)
    password_hash = _checked(where, checked_hash, password_hash, entry.get("hashing_algorithm"))
    return name, password_hash, _checked(where, tags_of, entry.get("tags"))


def _permission(
    entry: dict[str, Any], where: str, vhosts: set[str], users: set[str]
) -> tuple[str, str, Permission]:
    user, vhost = _text(entry, "user", where), _text(entry, "vhost", where)
    where = f"{where} (user {user!r} in vhost {vhost!r})"
    if vhost not in vhosts:
        raise DefinitionsProblem(f"{where}: no vhost {vhost!r}")
    if user not in users:
        raise DefinitionsProblem(f"{where}: no user {user!r}")
    return user, vhost, _checked(where, permission_from, entry)


def _policy(entry: dict[str, Any], where: str, vhosts: set[str]) -> Policy:
    name, vhost = _text(entry, "name", where), _text(entry, "vhost", where)
    where = f"{where} ({name!r} in vhost {vhost!r})"
    if vhost not in vhosts:
        raise DefinitionsProblem(f"{where}: no vhost {vhost!r}")
    try:
        return read_policy(vhost, name, entry)
    except PolicyError as exc:
        raise DefinitionsProblem(f"{where}: {exc.reason.strip()}") from None


def _topology_entry(
    section: str, entry: dict[str, Any], where: str, vhosts: set[str]
) -> dict[str, Any]:
    """An exchange, queue or binding with its flags and arguments as declares take them;
    what the broker itself checks (types, arguments, equivalence) it checks on apply."""
    key = "source" if section == "bindings" else "name"
    name, vhost = _text(entry, key, where), _text(entry, "vhost", where)
    where = f"{where} ({name!r} in vhost {vhost!r})"
    missing = [key for key in _REQUIRED[section] if key not in entry]
    if missing:
        raise DefinitionsProblem(f"{where}: lacks {', '.join(missing)}")
    if vhost not in vhosts:
        raise DefinitionsProblem(f"{where}: no vhost {vhost!r}")
    spec = dict(entry, where=where, arguments=_checked(where, to_arguments, entry))
    if section == "bindings":
        spec["destination"] = _text(entry, "destination", where)
        spec["routing_key"] = _text(entry, "routing_key", where)
        if entry.get("destination_type") not in ("queue", "exchange"):
            raise DefinitionsProblem(f"{where}: destination_type is not queue or exchange")
        return spec
    for flag in ("durable", "auto_delete", "internal"):
        spec[flag] = _checked(where, to_bool, entry, flag, False)
    if section == "exchanges":
        spec["type"] = _text(entry, "type", where)
    return spec
