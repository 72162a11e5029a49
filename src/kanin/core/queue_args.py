"""Queue arguments (x-message-ttl, x-expires, dead-lettering, length limits,
x-max-priority, x-single-active-consumer): parsed once at declare, validated as
RabbitMQ 3.10 validates them, and refused with 406 in its words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError

OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")
MAX_PRIORITY = 255
# RabbitMQ bounds TTLs to what its timers accept: (2^32 - 1) ms.
MAX_TTL_MS = 2**32 - 1


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

    @property
    def rejects_publish(self) -> bool:
        return self.overflow in ("reject-publish", "reject-publish-dlx")

    @property
    def has_length_limit(self) -> bool:
        return self.max_length is not None or self.max_length_bytes is not None


def _type_name(value: Any) -> str:
    from kanin.core.vhost import wire_type_name

    return wire_type_name(value)


class _Checker:
    """Checks one queue's arguments; errors name the queue as RabbitMQ does."""

    def __init__(self, arguments: dict[str, Any], queue: str, vhost: str) -> None:
        self.arguments = arguments
        self.where = f"queue '{queue}' in vhost '{vhost}'"

    def fail(self, key: str, error: str) -> ChannelError:
        return ChannelError(C.PRECONDITION_FAILED, f"invalid arg '{key}' for {self.where}: {error}")

    def integer(self, key: str, minimum: int, maximum: int | None = None) -> int | None:
        value = self.arguments.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"{{unacceptable_type,{_type_name(value)}}}")
        if value < 0 and minimum >= 0:
            raise self.fail(key, f"{{value_negative,{value}}}")
        if value < minimum:
            raise self.fail(key, f"{{value_zero,{value}}}")
        if maximum is not None and value > maximum:
            raise self.fail(key, f"{{value_too_large,{value},{maximum}}}")
        return value

    def string(self, key: str) -> str | None:
        value = self.arguments.get(key)
        if value is None:
            return None
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if not isinstance(value, str):
            raise self.fail(key, f"{{unacceptable_type,{_type_name(value)}}}")
        return value


def parse_queue_args(arguments: dict[str, Any], queue: str, vhost: str) -> QueueArgs:
    check = _Checker(arguments, queue, vhost)
    overflow = check.string("x-overflow") or "drop-head"
    if overflow not in OVERFLOW_MODES:
        raise check.fail("x-overflow", f'{{invalid_overflow_type,<<"{overflow}">>}}')
    dlx = check.string("x-dead-letter-exchange")
    dlrk = check.string("x-dead-letter-routing-key")
    if dlrk is not None and dlx is None:
        raise ChannelError(
            C.PRECONDITION_FAILED,
            f"invalid arg 'x-dead-letter-routing-key' for {check.where}: "
            "{no_dlx_for_dead_letter_routing_key}",
        )
    sac = arguments.get("x-single-active-consumer", False)
    if not isinstance(sac, bool):
        raise check.fail("x-single-active-consumer", f"{{unacceptable_type,{_type_name(sac)}}}")
    return QueueArgs(
        message_ttl_ms=check.integer("x-message-ttl", 0, MAX_TTL_MS),
        expires_ms=check.integer("x-expires", 1, MAX_TTL_MS),
        dead_letter_exchange=dlx,
        dead_letter_routing_key=dlrk,
        max_length=check.integer("x-max-length", 0),
        max_length_bytes=check.integer("x-max-length-bytes", 0),
        overflow=overflow,
        max_priority=check.integer("x-max-priority", 0, MAX_PRIORITY),
        single_active_consumer=sac,
    )
