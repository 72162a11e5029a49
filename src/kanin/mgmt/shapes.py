"""JSON shapes of the definitions (vhosts, users, permissions, exchanges, queues,
bindings), field for field as RabbitMQ 3.10's management API writes them.

Fields RabbitMQ fills from its Erlang VM (memory, reductions, garbage_collection) and
message rates (`*_details`, `message_stats`) are left out rather than made up: a
missing field is honest, a zero rate would not be. kanin's own figures are extra fields
named `kanin_*`.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import hashlib
import json
import platform
from collections import Counter
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from kanin.core.exchanges import DefaultExchange, Exchange
from kanin.core.exchanges.dedup import DedupExchange
from kanin.core.exchanges.delayed import DelayedExchange
from kanin.core.queues import ClassicQueue, Queue, StreamQueue

if TYPE_CHECKING:
    from kanin.core.auth import Permission, User
    from kanin.core.exchanges import Binding
    from kanin.core.vhost import VirtualHost

NODE = f"kanin@{platform.node()}"
HASHING_ALGORITHM = "rabbit_password_hashing_sha256"
DEFAULT_EXCHANGE_NAME = "amq.default"  # how the API names the exchange whose name is ""


def jsonable(value: Any) -> Any:
    """A field-table value as JSON can hold it (as RabbitMQ writes them)."""
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


# -- vhosts, users, permissions ---------------------------------------------------------


def vhost_shape(vhost: VirtualHost, unacked: Counter[int]) -> dict[str, Any]:
    ready = sum(queue.message_count for queue in vhost.queues.values())
    held = sum(unacked[id(queue)] for queue in vhost.queues.values())
    return {
        "name": vhost.name,
        "description": "",
        "tags": [],
        "default_queue_type": "undefined",
        "metadata": {"description": "", "tags": []},
        "tracing": False,
        "cluster_state": {NODE: "running"},
        "messages": ready + held,
        "messages_ready": ready,
        "messages_unacknowledged": held,
    }


def user_shape(user: User) -> dict[str, Any]:
    return {
        "name": user.name,
        "password_hash": user.password_hash,
        "hashing_algorithm": HASHING_ALGORITHM,
        "tags": list(user.tags),
        "limits": {},
    }


def permission_shape(user: str, vhost: str, permission: Permission) -> dict[str, Any]:
    return {
        "user": user,
        "vhost": vhost,
        "configure": permission.configure,
        "write": permission.write,
        "read": permission.read,
    }


# -- exchanges ----------------------------------------------------------------------------


def exchange_shape(exchange: Exchange, vhost: str) -> dict[str, Any]:
    shape = {
        "name": exchange.name,
        "vhost": vhost,
        "type": exchange.type_name,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": jsonable(exchange.arguments),
        "user_who_performed_action": "",
    }
    if exchange.policy is not None:  # RabbitMQ 3.10 writes the field only when there is one
        shape["policy"] = exchange.policy.name
    if isinstance(exchange, DelayedExchange):
        shape["kanin_delayed_messages"] = exchange.pending
    if isinstance(exchange, DedupExchange) and exchange.cache is not None:
        shape["kanin_dedup_cache_size"] = len(exchange.cache)
    return shape


def exchange_url_name(name: str) -> str:
    return DEFAULT_EXCHANGE_NAME if name == "" else name


def exchange_name_from_url(name: str) -> str:
    return "" if name == DEFAULT_EXCHANGE_NAME else name


# -- queues -------------------------------------------------------------------------------


def queue_type(queue: Queue) -> str:
    kind = queue.arguments.get("x-queue-type") or "classic"
    return kind.decode() if isinstance(kind, bytes) else str(kind)


def queue_shape(queue: Queue, unacked: int) -> dict[str, Any]:
    ready = queue.message_count
    shape: dict[str, Any] = {
        "name": queue.name,
        "vhost": queue.vhost,
        "type": queue_type(queue),
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "exclusive": queue.exclusive,
        "arguments": jsonable(queue.arguments),
        "node": NODE,
        "state": "running",
        "consumers": len(queue.consumers),
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
        "policy": queue.policy.name if queue.policy is not None else None,
        "operator_policy": None,
        # The policy's definition as it is, as RabbitMQ shows it (not merged with arguments).
        "effective_policy_definition": dict(queue.policy.definition) if queue.policy else {},
        "exclusive_consumer_tag": _exclusive_tag(queue),
        "single_active_consumer_tag": _single_active_tag(queue),
    }
    if isinstance(queue, StreamQueue):
        shape["messages_ready"] = shape["messages"] = ready  # a stream keeps what it sent
        shape["messages_unacknowledged"] = 0
        shape["kanin_first_offset"] = queue.first_offset
        shape["kanin_committed_offset"] = queue.first_offset + ready
    elif isinstance(queue, ClassicQueue):
        shape["messages_paged_out"] = queue.paged_out
    return shape


def _single_active_tag(queue: Queue) -> str | None:
    if not queue.args.single_active_consumer:
        return None
    first = next(iter(queue.consumers), None)
    return first.tag if first is not None else None


def _exclusive_tag(queue: Queue) -> str | None:
    for consumer in queue.consumers:
        if consumer.exclusive:
            return consumer.tag
    return None


# -- bindings -----------------------------------------------------------------------------


def properties_key(routing_key: str, arguments: dict[str, Any]) -> str:
    """What names one binding among those between a source and a destination, in URLs:
    the routing key alone when the binding has no arguments, else the key, `~` and a hash
    of the arguments (kanin's hash: clients take the key from a listing, never compute
    it). `~` and `/` in the routing key are escaped so the key splits back unambiguously."""
    quoted = quote(routing_key, safe="").replace("~", "%7E")  # quote keeps "~" as it is
    if not arguments:
        return quoted or "~"
    encoded = json.dumps(jsonable(arguments), sort_keys=True).encode()
    digest = hashlib.sha256(encoded).digest()[:6]
    return f"{quoted}~{base64.urlsafe_b64encode(digest).decode()}"


def binding_shape(
    vhost: str, source: str, destination: str, kind: str, key: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    return {
        "source": source,
        "vhost": vhost,
        "destination": destination,
        "destination_type": kind,
        "routing_key": key,
        "arguments": jsonable(arguments),
        "properties_key": properties_key(key, arguments),
    }


def bindings_of(vhost: VirtualHost) -> list[dict[str, Any]]:
    """Every binding in the vhost, the default exchange's implicit ones first, as RabbitMQ
    lists them."""
    found = [
        binding_shape(vhost.name, "", name, "queue", name, {}) for name in sorted(vhost.queues)
    ]
    for exchange in vhost.exchanges.values():
        if not isinstance(exchange, DefaultExchange):
            found.extend(binding_of(vhost.name, b) for b in exchange.bindings.values())
    return found


def binding_of(vhost: str, binding: Binding) -> dict[str, Any]:
    destination = binding.destination
    kind = "queue" if isinstance(destination, Queue) else "exchange"
    return binding_shape(
        vhost,
        binding.source.name,
        destination.name,
        kind,
        binding.routing_key,
        binding.arguments,
    )
