"""What a stream queue takes and refuses, in RabbitMQ 3.10's words.

Declaring (queue_args.parse_queue_args calls `parse_stream_args` for x-queue-type
stream): a stream is durable, not exclusive, not auto-delete (queue_args'
check_durable_flags names the first wrong flag); it takes x-max-length-bytes, x-max-age,
x-stream-max-segment-size-bytes, x-initial-cluster-size and x-queue-leader-locator
and refuses every other argument RabbitMQ knows ("invalid arg ... of queue type
rabbit_stream_queue", queue_args.REFUSED_BY_TYPE).

Consuming (`check_stream_consumer`, from basic.consume before consume-ok): a prefetch
is required, auto-ack and global qos are refused, and x-stream-offset says where to
start (`StartAt`): first, last, next (the default), an offset, an AMQP timestamp
(seconds), or an interval before now as x-max-age writes one ("1h", "7D").
basic.get, basic.nack, basic.reject and queue.purge are refused (`refuse`).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError, ConnectionError_
from kanin.amqp.tables import LongLong, encode_header_with
from kanin.core.field_values import wire_type_name

if TYPE_CHECKING:
    from kanin.core.consumer import Consumer
    from kanin.core.message import Message

OFFSET_HEADER = "x-stream-offset"
# RabbitMQ's x-stream-max-segment-size-bytes bound (3 GB) and default (500 MB).
MAX_SEGMENT_BYTES = 3_000_000_000
DEFAULT_SEGMENT_BYTES = 500_000_000
# x-queue-leader-locator: taken and checked; one node has nowhere else to put a leader.
LEADER_LOCATORS = ("client-local", "balanced", "least-leaders", "random")
_UNIT_MS = {
    "s": 1000,
    "m": 60_000,
    "h": 3_600_000,
    "D": 86_400_000,
    "M": 30 * 86_400_000,
    "Y": 365 * 86_400_000,
}
_AGE = re.compile(r"([0-9]+)(Y|M|D|h|m|s)")


def where(queue: str, vhost: str) -> str:
    return f"queue '{queue}' in vhost '{vhost}'"


def parse_age_ms(text: str) -> int | None:
    """x-max-age and an interval x-stream-offset: a positive number and one unit of
    Y (365 days), M (30 days), D, h, m, s; None if it is not one."""
    match = _AGE.fullmatch(text)
    if match is None or int(match[1]) <= 0:
        return None
    return int(match[1]) * _UNIT_MS[match[2]]


@dataclass(frozen=True)
class StreamArgs:
    max_age_ms: int | None = None  # x-max-age
    segment_bytes: int = DEFAULT_SEGMENT_BYTES  # x-stream-max-segment-size-bytes


def parse_stream_args(arguments: dict[str, Any], queue: str, vhost: str) -> StreamArgs:
    age = arguments.get("x-max-age")
    max_age_ms = None
    if age is not None:
        fail = f"invalid arg 'x-max-age' for {where(queue, vhost)}: "
        if not isinstance(age, str):
            raise ChannelError(
                C.PRECONDITION_FAILED, fail + f"{{unacceptable_type,{wire_type_name(age)}}}"
            )
        max_age_ms = parse_age_ms(age)
        if max_age_ms is None:
            raise ChannelError(C.PRECONDITION_FAILED, fail + "invalid_max_age")
    locator = arguments.get("x-queue-leader-locator")
    if locator is not None:
        fail = f"invalid arg 'x-queue-leader-locator' for {where(queue, vhost)}: "
        if not isinstance(locator, str):
            raise ChannelError(
                C.PRECONDITION_FAILED, fail + f"{{unacceptable_type,{wire_type_name(locator)}}}"
            )
        if locator not in LEADER_LOCATORS:
            raise ChannelError(C.PRECONDITION_FAILED, fail + "invalid_queue_locator_arg")
    segment = arguments.get("x-stream-max-segment-size-bytes")
    if isinstance(segment, int) and not isinstance(segment, bool):
        if segment > MAX_SEGMENT_BYTES:
            raise ChannelError(
                C.PRECONDITION_FAILED, "Exceeded max value for x-stream-max-segment-size-bytes"
            )
        segment_bytes = max(segment, 1)
    else:
        segment_bytes = DEFAULT_SEGMENT_BYTES
    return StreamArgs(max_age_ms, segment_bytes)


@dataclass(frozen=True)
class StartAt:
    """Where a consumer starts: kind is first, last, next, offset (value: the offset),
    timestamp (value: UNIX ms) or interval (value: ms before now)."""

    kind: str
    value: int = 0

    @staticmethod
    def parse(value: object) -> StartAt:
        """The x-stream-offset consumer argument (checked by check_stream_consumer)."""
        found = _start_at(value)
        assert found is not None, value
        return found


def _start_at(value: object) -> StartAt | None:
    if value is None:  # no x-stream-offset: next, as RabbitMQ
        return StartAt("next")
    if isinstance(value, bytes | bytearray):  # a byte array: only the three names
        name = bytes(value).decode("utf-8", "replace")
        return StartAt(name) if name in ("first", "last", "next") else None
    if isinstance(value, str):
        if value in ("first", "last", "next"):
            return StartAt(value)
        age = parse_age_ms(value)
        return None if age is None else StartAt("interval", age)
    if isinstance(value, datetime):
        return StartAt("timestamp", int(value.timestamp()) * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return StartAt("offset", max(value, 0))
    return None


def check_stream_consumer(consumer: Consumer, queue: str, vhost: str) -> None:
    """basic.consume on a stream, before consume-ok: RabbitMQ 3.10's refusals, in its
    order (consumer arguments, prefetch, auto-ack). Where RabbitMQ fails on a bad
    x-stream-offset with 541 INTERNAL_ERROR ("FIRST", "abc", a float, a bool, a table),
    kanin answers as it does for the bad values it does catch ("1x", "10"): 406 naming
    the argument."""
    arguments = consumer.arguments
    for refused in ("x-priority", "x-cancel-on-ha-failover"):
        if refused in arguments:
            raise ChannelError(
                C.PRECONDITION_FAILED,
                f"invalid arg '{refused}' for {where(queue, vhost)} of queue type "
                "rabbit_stream_queue",
            )
    if OFFSET_HEADER in arguments and _start_at(arguments[OFFSET_HEADER]) is None:
        raise ChannelError(
            C.PRECONDITION_FAILED,
            f"invalid arg '{OFFSET_HEADER}' for {where(queue, vhost)}: "
            f"{{invalid_stream_offset_arg,{_erlang_term(arguments[OFFSET_HEADER])}}}",
        )
    if consumer.prefetch == 0:
        raise ChannelError(
            C.PRECONDITION_FAILED,
            f"consumer prefetch count is not set for '{where(queue, vhost)}'",
        )
    if consumer.no_ack:
        raise ConnectionError_(
            C.NOT_IMPLEMENTED,
            f"automatic acknowledgement not supported by stream queues {where(queue, vhost)}",
        )


def _erlang_term(value: object) -> str:
    """A field value as RabbitMQ prints it in this error: {longstr,<<"1x">>} for a string."""
    if isinstance(value, str):
        return '{longstr,<<"' + value.replace('"', '\\"') + '">>}'
    return f"{{{wire_type_name(value)},{value!r}}}"


def refuse(what: str, queue: str, vhost: str) -> ConnectionError_:
    """basic.get, basic.nack and basic.reject on a stream: 540, the connection closes."""
    return ConnectionError_(
        C.NOT_IMPLEMENTED, f"{what} not supported by stream queues {where(queue, vhost)}"
    )


def stream_offset_header(message: Message, offset: int) -> bytes:
    """The message's content header with x-stream-offset (a signed 64-bit 'l', as RabbitMQ
    writes it) set to `offset`, replacing any the publisher set; RabbitMQ sorts a header
    table it changes, and so does this."""
    properties = message.properties
    headers = {**(properties.headers or {}), OFFSET_HEADER: LongLong(offset)}
    return encode_header_with(len(message.body), properties, dict(sorted(headers.items())))


# The offset the template of OffsetHeaders is encoded with, to find where offsets go.
_PLACEHOLDER = 0x4B616E696E4F6666
_OFFSET = struct.Struct(">q")
_PROPERTIES_AT = 12  # after the class id, weight and body size


class OffsetHeaders:
    """stream_offset_header for each message a stream appends, without encoding the
    header each time: publishers send a few distinct content headers over and over, so
    each one's result is kept with a gap where the offset goes (found by encoding once
    with a placeholder offset), and the next message with the same header only has its
    body size and offset written in. At most MAX_KEPT are kept (then all are dropped).
    The last header seen, body size and all, is kept apart too: a publisher's messages
    tend to repeat it exactly, and then only the offset is written in."""

    MAX_KEPT: ClassVar[int] = 256  # a ClassVar: compiled, a plain one is per instance

    def __init__(self) -> None:
        # Properties as sent -> (properties as stored up to the offset, after the offset).
        # Empty when the placeholder was ambiguous: each is then encoded whole.
        self._kept: dict[bytes, tuple[bytes, bytes] | tuple[()]] = {}
        # The last header sent whose template was found: it as stored up to the offset,
        # and after the offset.
        self._last_sent = b""
        self._last_before = b""
        self._last_after = b""

    def header(self, message: Message, offset: int) -> bytes:
        payload = message.header_payload
        if payload == self._last_sent:
            return b"".join((self._last_before, _OFFSET.pack(offset), self._last_after))
        sent = payload[_PROPERTIES_AT:]
        kept = self._kept.get(sent)
        if kept is None:
            kept = self._template(message)
            if len(self._kept) >= self.MAX_KEPT:
                self._kept.clear()
            self._kept[sent] = kept
        if not kept:
            return stream_offset_header(message, offset)
        before, after = kept
        self._last_sent = payload
        self._last_before = payload[:_PROPERTIES_AT] + before
        self._last_after = after
        return b"".join((self._last_before, _OFFSET.pack(offset), after))

    @staticmethod
    def _template(message: Message) -> tuple[bytes, bytes] | tuple[()]:
        encoded = stream_offset_header(message, _PLACEHOLDER)[_PROPERTIES_AT:]
        gap = _OFFSET.pack(_PLACEHOLDER)
        at = encoded.find(gap)
        if at < 0 or encoded.rfind(gap) != at:
            return ()
        return encoded[:at], encoded[at + len(gap) :]
