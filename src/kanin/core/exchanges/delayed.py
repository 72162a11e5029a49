"""x-delayed-message: an exchange that routes each message when its x-delay has passed.

As rabbitmq-delayed-message-exchange (https://github.com/rabbitmq/rabbitmq-delayed-message-exchange):
declared with `x-delayed-type` (direct, fanout, topic or headers: how it routes), a message
with an `x-delay` header of N > 0 ms (at most 2^32 - 1, the plugin's bound) is routed N ms
after it was published, to the queues bound then, with its x-delay header turned to -N;
without one, or with N <= 0 or beyond the bound, it is routed at once. The plugin takes an
integer of any width, a float or decimal (truncated) or a string of digits; a string that is
not a number crashes its channel, here it means no delay.

Where kanin differs from the plugin, on purpose:
- durable: a persistent message published to a durable delayed exchange is written to the
  message store (under the exchange's key, its due time as the record's expiry) in the same
  commit round as any persistent publish, and confirmed once on disk; it survives kill -9,
  and after a restart the overdue ones are routed at once, in due order, the rest on time.
  Only (due time, store id) stays in memory (core/delay_schedule.py): the bodies wait on
  disk and are read back a little ahead of their time, in small reads (from the page
  cache on the loop, else on the store's reader thread). Transient messages, and those of a
  transient exchange, wait in memory.
- mandatory: a delayed publish is confirmed and not returned (the plugin returns every
  delayed mandatory publish at once, as unroutable, though it routes it later). A message
  that finds no queue when it is due goes to the exchange's alternate exchange if it has
  one, else it is dropped: its publisher cannot be told any more.
"""

from __future__ import annotations

import functools
import math
import struct
from collections import deque
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError, ConnectionError_
from kanin.amqp.properties import sets_expiration
from kanin.amqp.tables import encode_header
from kanin.core.delay_schedule import Bucket, DelaySchedule
from kanin.core.exchanges.base import ABSORBED, ROUTE, STORED, Binding, Destination, Exchange
from kanin.core.exchanges.direct import DirectExchange
from kanin.core.exchanges.fanout import FanoutExchange
from kanin.core.exchanges.headers import HeadersExchange
from kanin.core.exchanges.routing import route_keys
from kanin.core.exchanges.topic import TopicExchange
from kanin.core.message import Message
from kanin.core.paging import message_of
from kanin.core.queue_args import parse_expiration
from kanin.core.queues.base import REFUSED
from kanin.store.records import exchange_key

if TYPE_CHECKING:
    from kanin.core.queues.base import Queue
    from kanin.core.scheduling import Cancellable
    from kanin.core.vhost import VirtualHost
    from kanin.store.api import Content, MessageStore, Recovered

READ_AHEAD_MS = 100  # a due message is read back from the store this long before its time
# ... or up to this much longer: the buckets due within it are read back together (one
# read, one thread hand-off, one loop wake-up a batch instead of one a millisecond).
READ_BATCH_MS = 20
READ_GROUP_IDS = 128  # stored messages a read asks for, at most (unless one bucket has more)
# Routing a backlog of due buckets (after the loop was held up) stops after this long and
# goes on next turn: the deliveries routed so far go out meanwhile instead of all waiting
# for the last of the backlog.
ROUTE_SLICE_S = 0.001
KEY_KIND = "delayed"  # its records' key in the store: exchange_key(KEY_KIND, vhost, name)
MAX_DELAY_MS = 4_294_967_295
_MAY_HOLD_CC = b"\x02CC"  # "CC" as a table's key; not in the header bytes: no CC header
_NO_HEADERS: dict[str, Any] = {}
_DELAY_KEY = b"\x07x-delay"  # as a table's key
# Signed integer field types (tag: encoding) of AMQP tables, as RabbitMQ reads them.
_SIGNED = {ord(tag): struct.Struct(f">{code}") for tag, code in zip("bsIl", "bhiq", strict=True)}
ROUTES_AS: dict[str, type[Exchange]] = {
    cls.type_name: cls for cls in (DirectExchange, FanoutExchange, TopicExchange, HeadersExchange)
}


def delay_of(headers: dict[str, Any]) -> int | None:
    """The x-delay in ms if the message is to wait, else None (see the module docstring)."""
    value = headers.get("x-delay")
    if isinstance(value, bool):
        return None
    if isinstance(value, str | bytes):
        try:
            value = int(value)
        except ValueError:
            return None
    elif isinstance(value, float | Decimal):
        if not math.isfinite(value):
            return None
        value = int(value)
    if isinstance(value, int) and 0 < value <= MAX_DELAY_MS:
        return value
    return None


class DelayedExchange(Exchange):
    type_name = "x-delayed-message"
    intercepts = True

    def configure(self) -> None:
        kind = self.arguments.get("x-delayed-type")
        if not isinstance(kind, str):
            # The plugin's words, verbatim.
            raise ChannelError(
                C.PRECONDITION_FAILED,
                "Invalid argument, 'x-delayed-type' must bean existing exchnage type",
            )
        routes_as = ROUTES_AS.get(kind)
        if routes_as is None:
            raise ConnectionError_(C.COMMAND_INVALID, f"unknown exchange type '{kind}'")
        # The exchange it routes as holds the bindings (and indexes them, for topics).
        self._router = routes_as(self.name, self.durable, self.auto_delete, self.internal, {})
        self.bindings = self._router.bindings
        self._by_headers = routes_as is HeadersExchange
        self._vhost: VirtualHost | None = None
        self._store: MessageStore | None = None
        self._key = ""
        self._schedule: DelaySchedule[Message] | None = None
        # Buckets on their way out, in due order, with their contents once read back.
        self._outbox: deque[_Outgoing] = deque()
        self._send_timer: Cancellable | None = None

    def bind(self, binding: Binding) -> bool:
        return self._router.bind(binding)

    def unbind(self, key: tuple[Any, ...]) -> Binding | None:
        return self._router.unbind(key)

    def route(self, routing_key: str, headers: dict[str, Any]) -> Iterable[Destination]:
        return self._router.route(routing_key, headers)

    @property
    def pending(self) -> int:
        return self._schedule.pending if self._schedule is not None else 0

    def attach(self, vhost: VirtualHost) -> None:
        self._vhost = vhost
        self._store = vhost.store if self.durable else None
        self._key = exchange_key(KEY_KIND, vhost.name, self.name)
        self._schedule = DelaySchedule(vhost.scheduler, self._due, READ_AHEAD_MS, READ_BATCH_MS)

    def detach(self) -> None:
        if self._schedule is None:
            return
        for bucket in self._schedule.clear():
            for store_id in bucket.ids:
                if self._store is not None:
                    self._store.remove(self._key, store_id)
        self._outbox.clear()
        self._cancel_send_timer()

    # -- holding ---------------------------------------------------------------------------

    def intercept(self, message: Message) -> int:
        headers = message.headers
        delay = delay_of(headers) if headers else None
        schedule = self._schedule
        if delay is None or schedule is None:
            return ROUTE
        _spend_delay(message, delay)
        due = schedule.now_ms() + delay
        store = self._store
        if store is None or not message.persistent:
            schedule.add_item(due, message)
            return ABSORBED
        assert self._vhost is not None
        store_id = store.enqueue(
            self._key,
            message.exchange,
            message.routing_key,
            message.header_payload,
            message.body,
            expires_at_ms=self._vhost.scheduler.wall_clock_ms() + delay,
        )
        schedule.add_id(due, store_id)
        return ABSORBED | STORED

    def restore(self, key: str, recovered: list[Recovered]) -> None:
        """Start-up: every pending message back on the schedule by its stored due time;
        those overdue come out on the first turn, in due order."""
        schedule = self._schedule
        if schedule is None:
            return
        for record in recovered:
            schedule.add_id(schedule.due_from_wall(record.expires_at_ms), record.id)

    # -- routing when due ------------------------------------------------------------------

    def _due(self, buckets: list[Bucket[Message]]) -> None:
        """Buckets come READ_AHEAD_MS before their time: their messages are read back from
        the store meanwhile, so that a read's wait (a thread switch, a disk seek) does not
        make them late."""
        entries = [_Outgoing(bucket) for bucket in buckets]
        self._outbox.extend(entries)
        for group in _read_groups(entries):
            ids = [store_id for entry in group for store_id in entry.bucket.ids]
            if ids and self._store is not None:
                done = functools.partial(self._read, group)
                self._store.read_later(self._key, ids, (), done)
            else:
                for entry in group:
                    entry.contents = []
        self._send()

    def _read(self, entries: list[_Outgoing], contents: list[Content | None]) -> None:
        start = 0
        for entry in entries:
            end = start + len(entry.bucket.ids)
            entry.contents = contents[start:end]
            start = end
        self._send()

    def _send(self) -> None:
        """Route the due buckets in due order, each once its contents are read back; wake
        again when the next one read back is due."""
        self._cancel_send_timer()
        outbox = self._outbox
        schedule, vhost = self._schedule, self._vhost
        assert schedule is not None and vhost is not None
        now = schedule.now_ms()
        clock = vhost.scheduler.time
        slice_ends = clock() + ROUTE_SLICE_S
        while outbox:
            bucket, contents = outbox[0].bucket, outbox[0].contents
            if contents is None:
                return  # still being read
            if bucket.due_ms > now:
                wait_s = (bucket.due_ms - now) / 1000
                self._send_timer = vhost.scheduler.call_later(wait_s, self._send)
                return
            outbox.popleft()
            for store_id, content in zip(bucket.ids, contents, strict=True):
                if content is not None:
                    self._route(message_of(content))
                if self._store is not None:
                    self._store.remove(self._key, store_id)
            for message in bucket.items or ():
                self._route(message)
            if outbox and clock() > slice_ends:
                self._send_timer = vhost.scheduler.call_later(0, self._send)
                return

    def _cancel_send_timer(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _route(self, message: Message) -> None:
        vhost = self._vhost
        if vhost is None or vhost.exchanges.get(self.name) is not self:
            return  # deleted meanwhile
        queues = self._one_queue(message) if message.cc_bcc is None else None
        if queues is None:
            queues = route_keys(vhost.exchanges, self, self._routing_keys(message), message.headers)
        for queue in queues:
            if queue.publish(message) == REFUSED:
                queue.reject_publish_dead_letter(message)
        message.shed_properties()

    def _one_queue(self, message: Message) -> list[Queue] | None:
        """The usual message read back, without decoding its properties (a tenth of the
        loop's time when they fall due): routed by its key alone (it has no CC header nor
        expiration, and the exchange routes as another than headers) to one queue. None
        when it is not that simple: then the whole route is taken."""
        header = message.header_payload
        if self._by_headers or _MAY_HOLD_CC in header or sets_expiration(header):
            return None
        destinations = list(self._router.route(message.routing_key, _NO_HEADERS))
        if len(destinations) != 1:
            return None  # none (the alternate exchange's turn) or several
        (destination,) = destinations
        return None if isinstance(destination, Exchange) else [destination]

    @staticmethod
    def _routing_keys(message: Message) -> tuple[str, ...]:
        if message.cc_bcc is not None:
            return message.routing_keys
        # Read back from the store: CC is in its headers, its expiration (counted from now,
        # as the queue takes it) in its properties.
        cc = message.headers.get("CC")
        message.expiration_ms = parse_expiration(message.properties.expiration)
        if cc:
            return (message.routing_key, *(k for k in cc if isinstance(k, str)))
        return (message.routing_key,)


class _Outgoing:
    """A bucket handed out by the schedule, and its stored messages once read back."""

    __slots__ = ("bucket", "contents")

    def __init__(self, bucket: Bucket[Message]) -> None:
        self.bucket = bucket
        self.contents: list[Content | None] | None = None


def _read_groups(entries: list[_Outgoing]) -> Iterator[list[_Outgoing]]:
    """Consecutive buckets, about READ_GROUP_IDS stored messages a group: each group is one
    read, small enough that the store answers it on the loop when the page cache holds it
    (as it does what was written minutes ago) instead of on its reader thread."""
    group: list[_Outgoing] = []
    count = 0
    for entry in entries:
        group.append(entry)
        count += len(entry.bucket.ids)
        if count >= READ_GROUP_IDS:
            yield group
            group, count = [], 0
    if group:
        yield group


def _spend_delay(message: Message, delay: int) -> None:
    """Turn the message's x-delay into -delay, as the plugin does, so a consumer (or an
    exchange it passes next) can tell it was delayed. In place: the exchange holds the
    message from now on, and decoded properties with a header table are the message's
    own (never shared from the decoder's cache, amqp/properties.py)."""
    properties = message.properties
    properties.headers["x-delay"] = -delay  # there is a header table: it held x-delay
    patched = _patched_delay(message.header_payload, delay)
    if patched is None:
        patched = encode_header(len(message.body), properties)
    message.header_payload = patched


def _patched_delay(header: bytes, delay: int) -> bytes | None:
    """The header with its x-delay's value overwritten by -delay, when that value is a
    signed integer (which then fits -delay too, in its width) and the key is found once
    in the header's bytes (so that is the table's own key): re-encoding the whole header
    instead was a tenth of a delayed publish's cost. None otherwise."""
    at = header.find(_DELAY_KEY)
    if at < 0 or header.find(_DELAY_KEY, at + 1) >= 0:
        return None
    tag_at = at + len(_DELAY_KEY)
    width = _SIGNED.get(header[tag_at])
    if width is None:
        return None
    patched = bytearray(header)
    width.pack_into(patched, tag_at + 1, -delay)
    return bytes(patched)
