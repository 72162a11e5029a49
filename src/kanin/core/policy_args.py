"""What a policy does to the queues and exchanges it applies to, as RabbitMQ 3.10 does it.

How this works:
- A queue keeps the x-arguments it was declared with (`Queue.arguments`: compared on
  redeclare, shown by the API) and acts on `Queue.args`, parsed once. With a policy,
  `args` is parsed from the declared arguments merged with the policy's definition
  (`effective_arguments`): so the publish path reads `queue.args` as it always did, and
  no message ever looks a policy up.
- Where both say something, RabbitMQ's rule for that key and queue type decides
  (`RULES`): for the numeric limits the lower value wins (message-ttl, expires,
  max-length, max-length-bytes, delivery-limit); for the others the queue's argument
  wins, except that a quorum queue takes the policy's overflow, and a stream the
  policy's retention and segment size. Keys a queue type has no use for are ignored
  (a quorum queue has no queue-mode; delivery-limit acts on quorum queues, as in
  RabbitMQ, not on classic ones, whose x-delivery-limit is kanin's own).
- Policies are re-evaluated when one is set or cleared (`set_policy`, `clear_policy`:
  every queue and exchange of the vhost) and when an object is declared (the vhost asks
  `matching`). A queue whose policy changed gets its new args at once
  (`Queue.apply_policy`): a lower max-length drops or dead-letters the head then, a new
  dead-letter exchange takes the next dead letters, a new expires restarts the idle
  clock. Messages already queued keep the expiry they were given, as on RabbitMQ.
- An exchange reads its policy's alternate-exchange when a message finds no queue (its
  own argument first), so an exchange only needs to know its policy.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kanin.amqp.errors import AMQPError
from kanin.core.policies import Policy, choose
from kanin.core.queue_args import MAX_TTL_MS, QUEUE_TYPE, QueueArgs, parse_queue_args

if TYPE_CHECKING:
    from kanin.core.vhost import VirtualHost

log = logging.getLogger(__name__)

# Which value wins when a queue's argument and its policy both set a key.
LOWER, ARGUMENT, POLICY = "lower", "argument", "policy"
_KANIN_KEYS = {
    "consumer-timeout": LOWER,
    "delayed-retry-type": ARGUMENT,
    "delayed-retry-min": ARGUMENT,
    "delayed-retry-max": ARGUMENT,
    "delayed-retry-multiplier": ARGUMENT,
}
_LIMITS = {
    "message-ttl": LOWER,
    "expires": LOWER,
    "max-length": LOWER,
    "max-length-bytes": LOWER,
}
_DEAD_LETTERING = {"dead-letter-exchange": ARGUMENT, "dead-letter-routing-key": ARGUMENT}
RULES: dict[str, dict[str, str]] = {
    "classic": {**_LIMITS, **_DEAD_LETTERING, "overflow": ARGUMENT, "queue-mode": ARGUMENT},
    "quorum": {
        **_LIMITS,
        **_DEAD_LETTERING,
        "overflow": POLICY,
        "delivery-limit": LOWER,
        "dead-letter-strategy": ARGUMENT,
    },
    "stream": {
        "max-length-bytes": POLICY,
        "max-age": POLICY,
        "stream-max-segment-size-bytes": POLICY,
    },
}
for _type in ("classic", "quorum"):
    RULES[_type].update(_KANIN_KEYS)


def queue_type_of(arguments: dict[str, Any]) -> str:
    kind = arguments.get(QUEUE_TYPE) or "classic"
    return kind.decode() if isinstance(kind, bytes) else str(kind)


def effective_arguments(
    queue_type: str, arguments: dict[str, Any], definition: dict[str, Any]
) -> dict[str, Any]:
    """The queue's x-arguments with its policy's definition merged in by RULES."""
    rules = RULES.get(queue_type, {})
    merged = dict(arguments)
    for key, value in definition.items():
        rule = rules.get(key)
        if rule is None:
            continue
        name = "x-" + key
        own = arguments.get(name)
        if own is None or rule == POLICY:
            merged[name] = value
        elif rule == LOWER and _is_integer(own) and _is_integer(value):
            merged[name] = min(own, value)
    for name in ("x-message-ttl", "x-expires"):
        # A policy may say more than ten years (RabbitMQ takes it); an argument may not.
        if _is_integer(merged.get(name)) and merged[name] > MAX_TTL_MS:
            merged[name] = MAX_TTL_MS
    if "x-dead-letter-exchange" not in merged:
        merged.pop("x-dead-letter-routing-key", None)  # RabbitMQ ignores it without one
    return merged


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def queue_args_under(
    policy: Policy | None, name: str, vhost: str, arguments: dict[str, Any], own: QueueArgs
) -> QueueArgs:
    """What a queue declared with `arguments` (parsed: `own`) acts on under `policy`. A
    definition whose values clash with the queue's own (a backoff maximum below the
    queue's minimum) leaves the queue with its own arguments, and says so in the log."""
    if policy is None:
        return own
    merged = effective_arguments(queue_type_of(arguments), arguments, policy.definition)
    try:
        return parse_queue_args(merged, name, vhost)
    except AMQPError as exc:
        log.warning(
            "policy %r does not apply to queue %r in vhost %r: %s",
            policy.name,
            name,
            vhost,
            exc.reply_text,
        )
        return own


# -- a vhost's policies ----------------------------------------------------------------------


class VhostPolicies:
    """One vhost's policies, by name."""

    def __init__(self) -> None:
        self.by_name: dict[str, Policy] = {}

    def matching(self, kind: str, name: str) -> Policy | None:
        """The policy a queue or exchange (kind "queue" or "exchange") named so gets."""
        if not self.by_name:
            return None
        return choose(self.by_name.values(), kind, name)


def set_policy(vhost: VirtualHost, policy: Policy) -> bool:
    """Add or replace a policy and apply the vhost's policies again; True if it is new."""
    created = policy.name not in vhost.policies.by_name
    vhost.policies.by_name[policy.name] = policy
    reapply(vhost)
    _changed(vhost)
    return created


def clear_policy(vhost: VirtualHost, name: str) -> bool:
    """Remove a policy (False if there is none) and apply the others again."""
    if vhost.policies.by_name.pop(name, None) is None:
        return False
    reapply(vhost)
    _changed(vhost)
    return True


def _changed(vhost: VirtualHost) -> None:
    """Policies are durable definitions, as on RabbitMQ: have them saved."""
    if vhost.on_definitions_changed is not None:
        vhost.on_definitions_changed()


def reapply(vhost: VirtualHost) -> None:
    """Every queue and exchange of the vhost gets the policy that matches it now."""
    policies = vhost.policies
    for exchange in vhost.exchanges.values():
        if exchange.name:  # the default exchange takes no policy
            exchange.policy = policies.matching("exchange", exchange.name)
    for queue in list(vhost.queues.values()):
        policy = policies.matching("queue", queue.name)
        if policy == queue.policy:
            continue
        own = parse_queue_args(queue.arguments, queue.name, vhost.name)
        args = queue_args_under(policy, queue.name, vhost.name, queue.arguments, own)
        queue.apply_policy(policy, args)
