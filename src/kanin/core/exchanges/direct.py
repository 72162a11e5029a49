"""direct: a binding matches when its key equals the routing key."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kanin.core.exchanges.base import Binding, Destination, Exchange

if TYPE_CHECKING:
    from kanin.core.queues import Queue


class DirectExchange(Exchange):
    type_name = "direct"

    def configure(self) -> None:
        self._by_key: dict[str, dict[tuple[Any, ...], Destination]] = {}

    def _on_bind(self, binding: Binding) -> None:
        self._by_key.setdefault(binding.routing_key, {})[binding.key] = binding.destination

    def _on_unbind(self, binding: Binding) -> None:
        destinations = self._by_key.get(binding.routing_key)
        if destinations is not None:
            destinations.pop(binding.key, None)
            if not destinations:
                del self._by_key[binding.routing_key]

    def route(self, routing_key: str, headers: dict[str, Any]) -> Iterable[Destination]:
        destinations = self._by_key.get(routing_key)
        return destinations.values() if destinations else ()


class DefaultExchange(Exchange):
    """The nameless exchange: every queue is implicitly bound by its own name."""

    type_name = "direct"

    def __init__(self, lookup: Callable[[str], Queue | None]) -> None:
        super().__init__("", durable=True)
        self._lookup = lookup

    def route(self, routing_key: str, headers: dict[str, Any]) -> Iterable[Destination]:
        queue = self._lookup(routing_key)
        return (queue,) if queue is not None else ()
