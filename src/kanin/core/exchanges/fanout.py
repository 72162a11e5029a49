"""fanout: every bound destination gets every message; the routing key is ignored."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kanin.core.exchanges.base import Destination, Exchange


class FanoutExchange(Exchange):
    type_name = "fanout"

    def route(self, routing_key: str, headers: dict[str, Any]) -> Iterable[Destination]:
        return [binding.destination for binding in self.bindings.values()]
