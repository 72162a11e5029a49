"""Queue arguments (x-message-ttl, x-expires, dead-lettering, length limits,
x-max-priority, x-single-active-consumer, x-queue-mode, x-queue-type): parsed once at declare,
validated as RabbitMQ 3.10 validates them, and refused with 406 in its words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError
from kanin.core.field_values import wire_type_name

OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")
QUEUE_MODES = ("default", "lazy")
QUEUE_TYPE = "x-queue-type"
QUEUE_TYPES = ("classic", "quorum", "stream")  # the types RabbitMQ 3.10 knows
MAX_PRIORITY = 255
# RabbitMQ 3.10's bound on x-message-ttl, x-expires and per-message expiration: ten years.
MAX_TTL_MS = 315_360_000_000


@dataclass(frozen=True)
class QueueArgs:
    message_ttl_ms: int | None = None
    expires_ms: int | None = None
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = "drop-head"
    max_priority: int | None = None
    single_active_consumer: bool = False
    # x-queue-mode=lazy: persistent messages go to disk at once (a memory budget of 0).
    lazy: bool = False

    @property
    def rejects_publish(self) -> bool:
        return self.overflow in ("reject-publish", "reject-publish-dlx")

    @property
    def has_length_limit(self) -> bool:
        return self.max_length is not None or self.max_length_bytes is not None

    def full_for(self, count: int, ready_bytes: int, incoming_bytes: int) -> bool:
        """Would one more message of incoming_bytes take the queue past a length limit?"""
        if self.max_length is not None and count + 1 > self.max_length:
            return True
        limit = self.max_length_bytes
        return limit is not None and ready_bytes + incoming_bytes > limit

    def over_limit(self, count: int, ready_bytes: int) -> bool:
        """Is the queue past a length limit (x-overflow drop-head then drops the head)?"""
        if self.max_length is not None and count > self.max_length:
            return True
        return self.max_length_bytes is not None and ready_bytes > self.max_length_bytes


# The arguments RabbitMQ 3.10 validates and compares on redeclare; others are ignored.
KNOWN_ARGUMENTS: tuple[str, ...] = (
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-single-active-consumer",
    "x-queue-type",
)


class _Checker:
    """Checks one queue's arguments; errors name the queue as RabbitMQ does."""

    def __init__(self, arguments: dict[str, Any], queue: str, vhost: str) -> None:
        self.arguments = arguments
        self.where = f"queue '{queue}' in vhost '{vhost}'"

    def fail(self, key: str, error: str) -> ChannelError:
        return ChannelError(C.PRECONDITION_FAILED, f"invalid arg '{key}' for {self.where}: {error}")

    def integer(
        self,
        key: str,
        *,
        positive: bool = False,
        maximum: int | None = None,
        max_error: str = "value_too_large",
    ) -> int | None:
        if key not in self.arguments:
            return None
        value = self.arguments[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f'"expected integer, got {wire_type_name(value)}"')
        if value < 0:
            raise self.fail(key, f"{{value_negative,{value}}}")
        if positive and value == 0:
            raise self.fail(key, f"{{value_zero,{value}}}")
        if maximum is not None and value > maximum:
            raise self.fail(key, f"{{{max_error},{value}}}")
        return value

    def string(self, key: str) -> str | None:
        if key not in self.arguments:
            return None
        value = self.arguments[key]
        if not isinstance(value, str):
            raise self.fail(key, f"{{unacceptable_type,{wire_type_name(value)}}}")
        return value


def _check_queue_type(check: _Checker) -> None:
    """x-queue-type: classic (the default) is what kanin implements. RabbitMQ's other types
    are refused, never quietly made classic: a client asking for a replicated quorum queue
    or a stream must not get a queue with other guarantees and other semantics."""
    queue_type = check.string(QUEUE_TYPE)
    if queue_type is None or queue_type == "classic":
        return
    if queue_type not in QUEUE_TYPES:
        raise check.fail(QUEUE_TYPE, f"\"unsupported queue type '{queue_type}'\"")
    raise check.fail(
        QUEUE_TYPE, f"\"queue type '{queue_type}' is not implemented by kanin; 'classic' is\""
    )


def same_queue_type(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """On redeclare RabbitMQ 3.10 treats x-queue-type 'classic' and no x-queue-type alike."""
    return bool(old.get(QUEUE_TYPE, "classic") == "classic" == new.get(QUEUE_TYPE, "classic"))


def parse_queue_args(arguments: dict[str, Any], queue: str, vhost: str) -> QueueArgs:
    check = _Checker(arguments, queue, vhost)
    _check_queue_type(check)  # first, as in RabbitMQ: an unknown type hides other errors
    overflow = check.string("x-overflow") or "drop-head"
    if overflow not in OVERFLOW_MODES:
        raise check.fail("x-overflow", "invalid_overflow")
    dlx = arguments.get("x-dead-letter-exchange")
    if dlx is not None and not isinstance(dlx, str):
        raise ChannelError(
            C.PRECONDITION_FAILED,
            f"invalid type '{wire_type_name(dlx)}' for arg 'x-dead-letter-exchange' "
            f"in {check.where}",
        )
    dlrk = check.string("x-dead-letter-routing-key")
    if dlrk is not None and dlx is None:
        raise check.fail("x-dead-letter-routing-key", "routing_key_but_no_dlx_defined")
    mode = check.string("x-queue-mode") or "default"
    if mode not in QUEUE_MODES:
        raise check.fail("x-queue-mode", f"\"unsupported queue mode '{mode}'\"")
    sac = arguments.get("x-single-active-consumer", False)
    if not isinstance(sac, bool):
        raise check.fail("x-single-active-consumer", f"{{unacceptable_type,{wire_type_name(sac)}}}")
    return QueueArgs(
        message_ttl_ms=check.integer("x-message-ttl", maximum=MAX_TTL_MS),
        expires_ms=check.integer("x-expires", positive=True, maximum=MAX_TTL_MS),
        dead_letter_exchange=dlx,
        dead_letter_routing_key=dlrk,
        max_length=check.integer("x-max-length"),
        max_length_bytes=check.integer("x-max-length-bytes"),
        overflow=overflow,
        max_priority=check.integer(
            "x-max-priority", maximum=MAX_PRIORITY, max_error="max_value_exceeded"
        ),
        single_active_consumer=sac,
        lazy=mode == "lazy",
    )
