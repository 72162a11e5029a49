"""Queue arguments (x-message-ttl, x-expires, dead-lettering, length limits,
x-max-priority, x-single-active-consumer, x-queue-mode, x-queue-type, x-delivery-limit, the
x-delayed-retry-* backoff): parsed once at declare, validated as RabbitMQ 3.10 validates
them, and refused with 406 in its words.

Each queue type refuses the arguments RabbitMQ 3.10 knows but gives to other types (a
quorum queue has no priorities, a classic queue no dead-letter strategy), with the flags
a quorum queue cannot have. One deliberate difference: classic queues take
x-delivery-limit (and count deliveries) where RabbitMQ refuses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError
from kanin.core.field_values import wire_type_name
from kanin.core.stream_args import StreamArgs, parse_stream_args

OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")
QUEUE_MODES = ("default", "lazy")
QUEUE_TYPE = "x-queue-type"
QUEUE_TYPES = ("classic", "quorum", "stream")  # the types RabbitMQ 3.10 knows
# The arguments RabbitMQ 3.10 knows that each type refuses, in its words "invalid arg 'x'
# for queue 'q' in vhost '/' of queue type rabbit_classic_queue" (measured on 3.10.8).
_STREAM_ONLY = ("x-max-age", "x-stream-max-segment-size-bytes", "x-initial-cluster-size")
REFUSED_BY_TYPE: dict[str, tuple[str, ...]] = {
    "classic": (
        *_STREAM_ONLY,
        "x-queue-leader-locator",
        "x-quorum-initial-group-size",
        "x-dead-letter-strategy",
        "x-max-in-memory-length",
        "x-max-in-memory-bytes",
    ),
    "quorum": (
        *_STREAM_ONLY,
        "x-queue-version",
        "x-queue-master-locator",
        "x-queue-mode",
        "x-max-priority",
        # kanin's: a quorum queue stores every message, an end-to-end one none.
        "x-confirm-on-ack",
        "x-confirm-timeout",
    ),
}
# A stream takes only what RabbitMQ 3.10's stream queue lists (x-max-length-bytes,
# x-max-age, x-stream-max-segment-size-bytes, x-initial-cluster-size,
# x-queue-leader-locator); every other argument known here is refused, and only these
# are compared when a stream is declared again.
STREAM_ARGUMENTS = (
    "x-queue-type",
    "x-max-length-bytes",
    *_STREAM_ONLY,
    "x-queue-leader-locator",
)
DEAD_LETTER_STRATEGIES = ("at-most-once", "at-least-once")
# x-delayed-retry-type: which returns are held back (see core/queues/returns.py).
RETRY_TYPES = ("all", "returned", "failed", "disabled")
MAX_PRIORITY = 255
# RabbitMQ 3.10's bound on x-message-ttl, x-expires and per-message expiration: ten years.
MAX_TTL_MS = 315_360_000_000
DEFAULT_CONFIRM_TIMEOUT_MS = 30 * 60 * 1000  # x-confirm-timeout, as consumer_timeout's


# How a message came back to its queue, for the delivery count and the backoff:
REJECTED = "rejected"  # basic.reject with requeue: the consumer says processing failed
NACKED = "nacked"  # basic.nack with requeue
RETURNED = "returned"  # basic.recover, or its channel closed (or timed out) with it unacked
UNSENT = "unsent"  # taken for a basic.get whose channel closed before the answer went out
# Which kinds each x-delayed-retry-type holds back.
_HELD_BACK = {
    "all": (REJECTED, NACKED, RETURNED),
    "failed": (REJECTED,),
    "returned": (NACKED, RETURNED),
    "requeued": (REJECTED, NACKED),
    "disabled": (),
}


@dataclass(frozen=True)
class ReturnArgs:
    """What a queue does with the messages that come back: count them (RabbitMQ 3.10's
    quorum queues count every return, whatever its kind), dead-letter past a limit (N
    returns allowed, so N+1 deliveries), and hold them back before the next delivery."""

    counts: bool = False  # quorum queues always; classic ones with a limit or a backoff
    limit: int | None = None  # x-delivery-limit
    # x-delayed-retry-type: which returns wait. RabbitMQ 4.3's meaning over AMQP 0-9-1:
    # "failed" is a reject, "returned" every other return, "all" both; "requeued" is
    # kanin's name for a queue given x-delayed-retry-min alone: a reject or a nack.
    retry_type: str = "disabled"
    retry_min_ms: int = 0
    retry_max_ms: int | None = None
    retry_multiplier: int | None = None  # 2 or more: exponential; else linear

    def backoff_ms(self, returns: int, how: str) -> int:
        """How long a message back for the `returns`-th time waits before its next
        delivery: linear min*returns, or exponential min*multiplier^(returns-1), capped
        at x-delayed-retry-max; 0 when this kind of return does not wait."""
        if returns <= 0 or how not in _HELD_BACK[self.retry_type]:
            return 0
        multiplier = self.retry_multiplier
        if multiplier is not None and multiplier >= 2:
            # Bounded before the power: a huge count must not build a huge integer.
            cap = self.retry_max_ms if self.retry_max_ms is not None else MAX_TTL_MS
            steps = min(returns - 1, cap.bit_length())
            delay = self.retry_min_ms * int(multiplier**steps)
        else:
            delay = self.retry_min_ms * returns
        if self.retry_max_ms is not None:
            delay = min(delay, self.retry_max_ms)
        return min(delay, MAX_TTL_MS)


NOT_A_STREAM = StreamArgs()


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
    returns: ReturnArgs = ReturnArgs()
    # x-consumer-timeout: a delivery not acked within this closes its channel (ms).
    consumer_timeout_ms: int | None = None
    # x-message-deduplication: no two messages with one x-deduplication-header value.
    deduplicates: bool = False
    # x-confirm-on-ack: the publisher's confirm waits for the consumer's ack (see
    # core/queues/end_to_end.py); x-confirm-timeout: how long a message waits there.
    confirm_on_ack: bool = False
    confirm_timeout_ms: int = DEFAULT_CONFIRM_TIMEOUT_MS
    stream: StreamArgs = NOT_A_STREAM  # x-max-age, x-stream-max-segment-size-bytes

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
    "x-delivery-limit",
    "x-consumer-timeout",
    "x-message-deduplication",
    "x-confirm-on-ack",
    "x-confirm-timeout",
    "x-delayed-retry-type",
    "x-delayed-retry-min",
    "x-delayed-retry-max",
    "x-delayed-retry-multiplier",
    "x-dead-letter-strategy",
    "x-quorum-initial-group-size",
)
REFUSED_BY_TYPE["stream"] = tuple(
    key
    for key in (*KNOWN_ARGUMENTS, *REFUSED_BY_TYPE["classic"], *REFUSED_BY_TYPE["quorum"])
    if key not in STREAM_ARGUMENTS
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


def _queue_type(check: _Checker) -> str:
    """x-queue-type: classic (the default), quorum or stream."""
    queue_type = check.string(QUEUE_TYPE)
    if queue_type is None or queue_type in QUEUE_TYPES:
        return queue_type or "classic"
    raise check.fail(QUEUE_TYPE, f"\"unsupported queue type '{queue_type}'\"")


def _check_type_arguments(check: _Checker, queue_type: str) -> None:
    """The first argument, in the client's order, that the type refuses."""
    refused = REFUSED_BY_TYPE[queue_type]
    for key in check.arguments:
        if key in refused:
            raise ChannelError(
                C.PRECONDITION_FAILED,
                f"invalid arg '{key}' for {check.where} of queue type rabbit_{queue_type}_queue",
            )


def check_durable_flags(
    queue: str, vhost: str, *, durable: bool, exclusive: bool, auto_delete: bool
) -> None:
    """A quorum queue or a stream is durable, shared and kept: RabbitMQ 3.10 names the
    first flag that says otherwise (after the arguments are found valid)."""
    for wrong, name in (
        (auto_delete, "auto-delete"),
        (exclusive, "exclusive-owner"),
        (not durable, "non-durable"),
    ):
        if wrong:
            raise ChannelError(
                C.PRECONDITION_FAILED,
                f"invalid property '{name}' for queue '{queue}' in vhost '{vhost}'",
            )


def same_queue_type(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """On redeclare RabbitMQ 3.10 treats x-queue-type 'classic' and no x-queue-type alike."""
    return bool(old.get(QUEUE_TYPE, "classic") == "classic" == new.get(QUEUE_TYPE, "classic"))


def parse_queue_args(arguments: dict[str, Any], queue: str, vhost: str) -> QueueArgs:
    check = _Checker(arguments, queue, vhost)
    queue_type = _queue_type(check)  # first, as in RabbitMQ: an unknown type hides the rest
    _check_type_arguments(check, queue_type)
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
    strategy = check.string("x-dead-letter-strategy")
    if strategy is not None and strategy not in DEAD_LETTER_STRATEGIES:
        raise check.fail("x-dead-letter-strategy", "invalid_dlx_strategy")
    check.integer("x-quorum-initial-group-size", positive=True)
    check.integer("x-max-in-memory-length")
    check.integer("x-max-in-memory-bytes")
    returns = _return_args(check, queue_type)
    stream = NOT_A_STREAM
    if queue_type == "stream":
        check.integer("x-stream-max-segment-size-bytes")
        check.integer("x-initial-cluster-size", positive=True)
        stream = parse_stream_args(arguments, queue, vhost)
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
        returns=returns,
        consumer_timeout_ms=check.integer("x-consumer-timeout", positive=True),
        deduplicates=_boolean(check, "x-message-deduplication"),
        confirm_on_ack=_boolean(check, "x-confirm-on-ack"),
        confirm_timeout_ms=check.integer("x-confirm-timeout", positive=True, maximum=MAX_TTL_MS)
        or DEFAULT_CONFIRM_TIMEOUT_MS,
        stream=stream,
    )


def _boolean(check: _Checker, key: str) -> bool:
    value = check.arguments.get(key, False)
    if not isinstance(value, bool):
        raise check.fail(key, f"{{unacceptable_type,{wire_type_name(value)}}}")
    return value


def _return_args(check: _Checker, queue_type: str) -> ReturnArgs:
    """x-delivery-limit and the x-delayed-retry-* backoff. RabbitMQ 3.10's quorum queues take
    any x-delivery-limit: an integer below 0 acts as 0, anything not an integer as none."""
    limit = check.arguments.get("x-delivery-limit")
    if isinstance(limit, bool) or not isinstance(limit, int):
        limit = None
    elif limit < 0:
        limit = 0
    retry_min = check.integer("x-delayed-retry-min", positive=True, maximum=MAX_TTL_MS)
    retry_max = check.integer("x-delayed-retry-max", positive=True, maximum=MAX_TTL_MS)
    multiplier = check.integer("x-delayed-retry-multiplier", positive=True, maximum=1000)
    retry_type = check.string("x-delayed-retry-type")
    if retry_type is not None and retry_type not in RETRY_TYPES:
        raise check.fail("x-delayed-retry-type", f"\"unsupported retry type '{retry_type}'\"")
    if retry_type is None:
        retry_type = "disabled" if retry_min is None else "requeued"
    if retry_type != "disabled" and retry_min is None:
        raise check.fail("x-delayed-retry-type", '"x-delayed-retry-min is required"')
    if retry_max is not None and retry_min is not None and retry_max < retry_min:
        raise check.fail("x-delayed-retry-max", f"{{value_below_min,{retry_max}}}")
    counts = queue_type == "quorum" or limit is not None or retry_type != "disabled"
    return ReturnArgs(counts, limit, retry_type, retry_min or 0, retry_max, multiplier)


_INTEGER_PREFIX = re.compile(r"([+-]?[0-9]+)(.*)", re.DOTALL)


def parse_expiration(expiration: str | None) -> int | None:
    """The per-message TTL in ms, refused with 406 in RabbitMQ 3.10's words when malformed.

    RabbitMQ parses it with Erlang's string:to_integer: an optional sign and digits,
    and anything left over is an error, as is a value above ten years.
    """
    if expiration is None:
        return None
    match = _INTEGER_PREFIX.fullmatch(expiration)
    if match is None:
        detail = "no_integer"
    elif match.group(2):
        detail = f'{{leftover_string,"{match.group(2)}"}}'
    elif int(match.group(1)) < 0:
        detail = f"{{value_negative,{int(match.group(1))}}}"
    elif int(match.group(1)) > MAX_TTL_MS:
        detail = f"{{value_too_large,{int(match.group(1))}}}"
    else:
        return int(match.group(1))
    raise ChannelError(C.PRECONDITION_FAILED, f"invalid expiration '{expiration}': {detail}")
