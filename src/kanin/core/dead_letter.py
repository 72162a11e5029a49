"""Dead-lettering: a message leaving a queue (rejected, expired, maxlen) is republished
to the queue's dead-letter exchange with its history in the `x-death` header.

x-death, as RabbitMQ 3.10 writes it: an array of tables, most recent first, one per
(queue, reason) pair: count, reason, queue, time, exchange, routing-keys, and
original-expiration when the message carried a per-message expiration (which is then
removed, so it cannot expire again). A repeat for the same pair increments its count
and moves it to the front. x-first-death-{exchange,queue,reason} are set once.

Cycles: a message that comes back to a queue it already died in, with no rejection
anywhere on the way, would loop forever; it is dropped for that queue (RabbitMQ's
"fully automatic cycle" rule). Rejections break cycles: a consumer made a choice.
"""

from __future__ import annotations

import copy
import datetime
from typing import TYPE_CHECKING, Any

from kanin.amqp.tables import LongLong, encode_header
from kanin.core.exchanges.routing import route_keys
from kanin.core.message import Entry, Message

if TYPE_CHECKING:
    from kanin.core.queues import Queue
    from kanin.core.vhost import VirtualHost


def dead_letter(vhost: VirtualHost, queue: Queue, entries: list[Entry], reason: str) -> None:
    exchange_name = queue.args.dead_letter_exchange
    if exchange_name is None:
        return
    exchange = vhost.exchanges.get(exchange_name)
    if exchange is None:
        return  # RabbitMQ drops the message when its DLX does not exist
    now = _timestamp(vhost.scheduler.wall_clock_ms())
    for entry in entries:
        assert entry.message is not None, "the queue reads paged-out messages back first"
        message = dead_lettered_message(entry.message, queue, reason, now)
        deaths = message.headers.get("x-death") or []
        for target in route_keys(vhost.exchanges, exchange, message.routing_keys, message.headers):
            if not is_cycle(target.name, deaths, reason):
                target.publish(message)
        message.shed_properties()


def dead_lettered_message(
    original: Message, queue: Queue, reason: str, now: datetime.datetime
) -> Message:
    properties = copy.copy(original.properties)
    headers: dict[str, Any] = dict(properties.headers or {})
    deaths = [
        # pamqp decodes without wire types: put back the 64-bit count RabbitMQ writes.
        {**death, "count": LongLong(int(death.get("count", 0)))}
        for death in headers.get("x-death") or []
        if isinstance(death, dict)
    ]
    previous = next(
        (d for d in deaths if d.get("queue") == queue.name and d.get("reason") == reason), None
    )
    if previous is not None:
        # A repeat only counts and moves to the front; the rest stays as at first death.
        deaths.remove(previous)
        death = dict(previous)
        death["count"] = LongLong(int(death.get("count", 0)) + 1)
    else:
        death = {
            "count": LongLong(1),
            "reason": reason,
            "queue": queue.name,
            "time": now,
            "exchange": original.exchange,
            "routing-keys": [original.routing_key, *_string_list(headers.get("CC"))],
        }
        if properties.expiration:
            death["original-expiration"] = properties.expiration
    deaths.insert(0, death)
    headers["x-death"] = deaths
    headers.setdefault("x-first-death-exchange", original.exchange)
    headers.setdefault("x-first-death-queue", queue.name)
    headers.setdefault("x-first-death-reason", reason)
    dead_letter_key = queue.args.dead_letter_routing_key
    if dead_letter_key is not None:
        # A fixed dead-letter key replaces the original keys, CC included.
        headers.pop("CC", None)
        routing_key: str = dead_letter_key
        extra_keys: tuple[str, ...] = ()
    elif original.cc_bcc is None:
        # Read back from the store: CC is in the headers; BCC was stripped before storing.
        routing_key, extra_keys = original.routing_key, tuple(_string_list(headers.get("CC")))
    else:
        routing_key, extra_keys = original.routing_key, original.cc_bcc
    properties.headers = headers
    properties.expiration = None
    return Message(
        queue.args.dead_letter_exchange or "",
        routing_key,
        encode_header(len(original.body), properties),
        original.body,
        properties,
        None,
        extra_keys,
    )


def is_cycle(target_queue: str, deaths: list[Any], reason: str) -> bool:
    """Has the message died in `target_queue` before, with no rejection since?"""
    if reason == "rejected":
        return False
    for death in deaths:
        if not isinstance(death, dict):
            return False
        if death.get("reason") == "rejected":
            return False
        if death.get("queue") == target_queue:
            return True
    return False


def _string_list(value: Any) -> list[str]:
    if isinstance(value, list):
        return [
            v if isinstance(v, str) else v.decode() for v in value if isinstance(v, str | bytes)
        ]
    return []


def _timestamp(wall_clock_ms: int) -> datetime.datetime:
    # AMQP timestamps have one-second resolution, and are UTC without a zone.
    when = datetime.datetime.fromtimestamp(wall_clock_ms // 1000, datetime.UTC)
    return when.replace(tzinfo=None)
