"""Policies (https://www.rabbitmq.com/parameters.html#policies), as RabbitMQ 3.10 has them:
what one is, how it is checked, and which one an exchange or a queue gets.

- A policy is a vhost's: a name, a pattern (a regular expression searched for in the
  object's name, not anchored), what it applies to (`queues`, `exchanges` or `all`), a
  priority (any number) and a definition, a JSON object of settings.
- An object gets at most one policy: the matching one with the highest priority. RabbitMQ
  leaves a tie to the order its table lists them in; kanin takes the first by name.
- `read_policy` checks a policy as RabbitMQ's management API does, and refuses it with
  its words ("Validation failed\\n\\n<<\"abc\">> is not a valid message TTL\\n"); an unknown
  key is refused. RabbitMQ's keys for mirroring (ha-*) and queue placement are taken and
  kept, with nothing to do on one node, so definitions from a RabbitMQ cluster import.
  kanin adds the keys of its own queue arguments: consumer-timeout and the
  delayed-retry-* backoff.
- How a definition combines with a queue's own x-arguments is core/policy_args.py's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kanin.core.queue_args import RETRY_TYPES
from kanin.core.stream_args import LEADER_LOCATORS, parse_age_ms

APPLY_TO = ("queues", "exchanges", "all")


class PolicyError(Exception):
    """A policy RabbitMQ's API refuses with 400; `reason` is its text."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _failed(message: str) -> PolicyError:
    return PolicyError(f"Validation failed\n\n{message}\n")


@dataclass(frozen=True)
class Policy:
    vhost: str
    name: str
    pattern: str
    apply_to: str
    priority: int | float
    definition: dict[str, Any]
    regex: re.Pattern[str] = field(compare=False, repr=False)

    def applies_to(self, kind: str, name: str) -> bool:
        """kind: "queue" or "exchange"."""
        if self.apply_to != "all" and self.apply_to != kind + "s":
            return False
        return self.regex.search(name) is not None

    def shape(self) -> dict[str, Any]:
        """As GET /api/policies and the definitions document write it."""
        return {
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to,
            "definition": dict(self.definition),
            "priority": self.priority,
        }


def choose(policies: Iterable[Policy], kind: str, name: str) -> Policy | None:
    """The policy an object gets: the highest priority among those that match, the first
    by name among equals; None when none matches."""
    best: Policy | None = None
    for policy in policies:
        if not policy.applies_to(kind, name):
            continue
        if (
            best is None
            or policy.priority > best.priority
            or (policy.priority == best.priority and policy.name < best.name)
        ):
            best = policy
    return best


# -- checking ------------------------------------------------------------------------------


def read_policy(vhost: str, name: str, body: dict[str, Any]) -> Policy:
    """A policy from a PUT body or a definitions entry, checked in RabbitMQ's order: the
    mandatory keys, then priority, pattern, apply-to and the definition."""
    missing = [key for key in ("pattern", "definition") if key not in body]
    if missing:
        raise PolicyError("[" + ",".join(f"{{key_missing,{key}}}" for key in missing) + "]")
    priority = body.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int | float):
        raise _failed(f"priority should be a number, actually was {erlang_term(priority)}")
    pattern = body["pattern"]
    if not isinstance(pattern, str):
        raise _failed(f"pattern should be a binary but was {erlang_term(pattern)}")
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise _failed(
            f'pattern should be regular expression but is invalid: {{"{exc.msg}",{exc.pos}}}'
        ) from None
    apply_to = body.get("apply-to", "all")
    if apply_to not in APPLY_TO:
        raise _failed(
            f"apply-to '{apply_to}' unrecognised; should be 'queues', 'exchanges' or 'all'"
        )
    definition = body["definition"]
    if not isinstance(definition, dict):
        raise _failed(f"{erlang_term(definition)} is not a valid policy definition")
    check_definition(definition)
    return Policy(vhost, name, pattern, apply_to, priority, dict(definition), regex)


def check_definition(definition: dict[str, Any]) -> None:
    """Each known key's value, in key order, then the keys nobody knows."""
    if not definition:
        raise _failed("no policy provided")
    for key in sorted(definition):
        check = _CHECKS.get(key)
        if check is not None:
            problem = check(definition[key], definition)
            if problem:
                raise _failed(problem)
    unknown = [key for key in definition if key not in _CHECKS]
    if unknown:
        listed = ",".join(f"{{{erlang_term(k)},{erlang_term(definition[k])}}}" for k in unknown)
        raise _failed(f"[{listed}] are not recognised policy settings")


def erlang_term(value: Any) -> str:
    """A JSON value as RabbitMQ's messages print it (its Erlang form)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '<<"' + value.replace("\\", "\\\\").replace('"', '\\"') + '">>'
    if isinstance(value, list):
        return "[" + ",".join(erlang_term(item) for item in value) + "]"
    if isinstance(value, dict):
        items = ",".join(f"{erlang_term(k)} => {erlang_term(v)}" for k, v in value.items())
        return "#{" + items + "}"
    return repr(value)


Check = Callable[[Any, dict[str, Any]], str]


def _integer(minimum: int, what: str, maximum: int | None = None) -> Check:
    def check(value: Any, _: dict[str, Any]) -> str:
        whole = isinstance(value, int) and not isinstance(value, bool)
        if whole and minimum <= value and (maximum is None or value <= maximum):
            return ""
        return f"{erlang_term(value)} is not a valid {what}"

    return check


def _one_of(choices: Iterable[Any], what: str) -> Check:
    allowed = tuple(choices)

    def check(value: Any, _: dict[str, Any]) -> str:
        if value in allowed and not isinstance(value, bool):
            return ""
        return f"{erlang_term(value)} {what}"

    return check


def _text(what: str) -> Check:
    def check(value: Any, _: dict[str, Any]) -> str:
        return "" if isinstance(value, str) else f"{erlang_term(value)} is not a valid {what}"

    return check


def _max_age(value: Any, _: dict[str, Any]) -> str:
    # RabbitMQ 3.10 answers a bad max-age with a 500; kanin with a 400 naming it.
    if isinstance(value, str) and parse_age_ms(value) is not None:
        return ""
    return f"{erlang_term(value)} is not a valid max age"


def _ha_mode(value: Any, definition: dict[str, Any]) -> str:
    """Mirroring: taken and kept (one node mirrors nothing), checked as RabbitMQ does."""
    params = definition.get("ha-params")
    if value == "all":
        return "" if params is None else 'ha-mode="all" does not take parameters'
    if value == "exactly":
        if isinstance(params, int) and not isinstance(params, bool) and params > 0:
            return ""
        return 'ha-mode="exactly" takes an integer, none given'
    if value == "nodes":
        if isinstance(params, list) and params and all(isinstance(n, str) for n in params):
            return ""
        return 'ha-mode="nodes" takes a list of strings, none given'
    return f"{erlang_term(value)} is not a valid ha-mode value"


def _needs_ha_mode(value: Any, definition: dict[str, Any]) -> str:
    if "ha-mode" not in definition:
        return (
            "ha-mode must be specified to specify ha-params, ha-sync-mode or ha-promote-on-shutdown"
        )
    return ""


def _ha_sync_mode(value: Any, definition: dict[str, Any]) -> str:
    if value not in ("manual", "automatic"):
        return f'ha-sync-mode must be "manual" or "automatic", got {erlang_term(value)}'
    return _needs_ha_mode(value, definition)


def _retry_type(value: Any, definition: dict[str, Any]) -> str:
    """kanin's: a backoff needs its minimum (as x-delayed-retry-type does)."""
    if value not in RETRY_TYPES:
        return f"{erlang_term(value)} is not a valid delayed retry type"
    if value != "disabled" and "delayed-retry-min" not in definition:
        return "delayed-retry-min is required with delayed-retry-type"
    return ""


_TTL_MAX = 315_360_000_000  # RabbitMQ's ten years, as for x-message-ttl
_CHECKS: dict[str, Check] = {
    "alternate-exchange": _text("alternate exchange name"),
    "dead-letter-exchange": _text("dead letter exchange name"),
    "dead-letter-routing-key": _text("dead letter routing key"),
    "dead-letter-strategy": _one_of(
        ("at-most-once", "at-least-once"), "is not a valid dead letter strategy"
    ),
    "message-ttl": _integer(0, "message TTL"),
    "expires": _integer(1, "queue expiry"),
    "max-length": _integer(0, "maximum length"),
    "max-length-bytes": _integer(0, "maximum length in bytes"),
    "max-in-memory-length": _integer(0, "maximum memory in bytes"),
    "max-in-memory-bytes": _integer(0, "maximum memory in bytes"),
    "queue-mode": _one_of(("default", "lazy"), "is not a valid queue-mode value"),
    "queue-version": _one_of((1, 2), "is not a valid queue-version value"),
    "overflow": _one_of(
        ("drop-head", "reject-publish", "reject-publish-dlx"), "is not a valid overflow value"
    ),
    "delivery-limit": _integer(0, "delivery limit"),
    "max-age": _max_age,
    "stream-max-segment-size-bytes": _integer(0, "segment size"),
    "queue-leader-locator": _one_of(LEADER_LOCATORS, "is not a valid queue leader locator value"),
    "initial-cluster-size": _integer(0, "cluster size"),
    "queue-master-locator": _one_of(
        ("min-masters", "client-local", "random"), "invalid queue-master-locator value"
    ),
    "ha-mode": _ha_mode,
    "ha-params": _needs_ha_mode,
    "ha-sync-mode": _ha_sync_mode,
    "ha-sync-batch-size": _integer(1, "ha-sync-batch-size value"),
    "ha-promote-on-shutdown": _one_of(
        ("always", "when-synced"), "is not a valid ha-promote-on-shutdown value"
    ),
    "ha-promote-on-failure": _one_of(
        ("always", "when-synced"), "is not a valid ha-promote-on-failure value"
    ),
    # kanin's own, for the queue arguments it has and RabbitMQ 3.10 has not
    "consumer-timeout": _integer(1, "consumer timeout"),
    "delayed-retry-type": _retry_type,
    "delayed-retry-min": _integer(1, "delayed retry minimum", _TTL_MAX),
    "delayed-retry-max": _integer(1, "delayed retry maximum", _TTL_MAX),
    "delayed-retry-multiplier": _integer(1, "delayed retry multiplier", 1000),
}
