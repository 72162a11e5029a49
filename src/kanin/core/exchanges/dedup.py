"""x-message-deduplication: an exchange that routes each message id once.

As the rabbitmq-message-deduplication plugin's exchange
(https://github.com/noxdafox/rabbitmq-message-deduplication): declared with `x-cache-size`
(required) and optionally `x-cache-ttl` (ms) and `x-cache-persistence`; a message whose
`x-deduplication-header` value was seen (and has not expired) is not routed again, and a
message may set its own `x-cache-ttl`. Otherwise it routes as a fanout exchange does.

Where kanin differs from the plugin, on purpose:
- a duplicate is confirmed to its publisher (basic.ack) and never returned, even when
  mandatory: a publisher that retransmits until it is confirmed must see its retransmit
  absorbed, not bounced;
- a durable exchange keeps its ids on disk whatever `x-cache-persistence` says: the ids
  of a commit round are written in that round, as one record, and a message's confirm
  waits for the round, so a message confirmed before a crash and sent again after
  the restart is still a duplicate. A transient exchange keeps its ids in memory.
- a full cache evicts its oldest id, not an arbitrary one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from kanin.amqp import constants as C
from kanin.amqp.errors import ChannelError
from kanin.core.dedup_cache import DedupCache, dedup_key
from kanin.core.exchanges.base import ABSORBED, ROUTE, STORED, Binding, Destination, Exchange
from kanin.store.records import exchange_key

if TYPE_CHECKING:
    from kanin.core.message import Message
    from kanin.core.vhost import VirtualHost
    from kanin.store.api import Recovered

HEADER: Final = "x-deduplication-header"
TTL_HEADER: Final = "x-cache-ttl"
KEY_KIND = "dedup"  # its records' key in the store: exchange_key(KEY_KIND, vhost, name)


def _positive(arguments: dict[str, Any], key: str) -> int | None:
    """An integer > 0, or a string of one, as the plugin takes them; None if absent;
    ValueError if neither."""
    if key not in arguments:
        return None
    value = arguments[key]
    if isinstance(value, str):
        value = int(value.strip(), 10)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(key)
    return value


def _refused(text: str) -> ChannelError:
    return ChannelError(C.PRECONDITION_FAILED, text)


class DedupExchange(Exchange):
    type_name = "x-message-deduplication"
    intercepts = True

    def configure(self) -> None:
        # The plugin's checks and words (its exchange's validate/1).
        try:
            size = _positive(self.arguments, "x-cache-size")
        except ValueError:
            size = None
        if size is None:
            raise _refused(
                "Missing or invalid argument, 'x-cache-size' must be an integer greater than 0"
            )
        try:
            ttl = _positive(self.arguments, "x-cache-ttl")
        except ValueError:
            raise _refused(
                "Invalid argument, 'x-cache-ttl' must be an integer greater than 0"
            ) from None
        persistence = self.arguments.get("x-cache-persistence")
        if persistence is not None and persistence not in ("disk", "memory"):
            raise _refused(
                "Invalid argument, 'x-cache-persistence' must be either 'disk' or 'memory'"
            )
        self._size, self._ttl = size, ttl
        self.cache: DedupCache | None = None  # made by attach, once the vhost is known
        self._destinations: list[Destination] | None = None  # see route

    def attach(self, vhost: VirtualHost) -> None:
        store = vhost.store if self.durable else None
        key = exchange_key(KEY_KIND, vhost.name, self.name)
        clock = vhost.scheduler.wall_clock_ms
        self.cache = DedupCache(self._size, self._ttl, clock, store, key)

    def detach(self) -> None:
        if self.cache is not None:
            self.cache.clear()

    def route(self, routing_key: str, headers: dict[str, Any]) -> Iterable[Destination]:
        # As a fanout, from a list kept as bindings change, not made again per message.
        if self._destinations is None:
            self._destinations = [binding.destination for binding in self.bindings.values()]
        return self._destinations

    def _on_bind(self, binding: Binding) -> None:
        self._destinations = None

    def _on_unbind(self, binding: Binding) -> None:
        self._destinations = None

    def intercept(self, message: Message) -> int:
        headers = message.headers
        cache = self.cache
        if not headers or cache is None:
            return ROUTE
        key = dedup_key(headers.get(HEADER))
        if key is None:
            return ROUTE
        ttl = headers.get(TTL_HEADER)
        ttl_ms = ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0 else None
        stored = STORED if cache.store is not None else 0
        if cache.admit(key, ttl_ms):
            return ROUTE | stored  # its id is written in the round its confirm waits for
        # A duplicate: confirmed no sooner than the original's id is on disk (it may be in
        # this very round).
        return ABSORBED | stored

    def restore(self, key: str, recovered: list[Recovered]) -> None:
        """The ids on disk: their keys are the records' bodies, read once at start-up."""
        cache = self.cache
        if cache is None or cache.store is None:
            return
        contents = cache.store.read(key, [r.id for r in recovered])
        cache.restore(
            (r.id, content.body)
            for r, content in zip(recovered, contents, strict=True)
            if content is not None
        )
