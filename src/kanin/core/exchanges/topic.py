"""topic: dot-separated words; `*` matches exactly one word, `#` zero or more.

Routing results are cached per routing key and the cache is dropped on any
binding change, so a steady stream of the same keys costs one dict lookup.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from kanin.core.exchanges.base import Binding, Destination, Exchange

_CACHE_LIMIT = 4096


@lru_cache(maxsize=8192)
def topic_matches(pattern: str, routing_key: str) -> bool:
    return _match(_words(pattern), 0, _words(routing_key), 0)


def _words(text: str) -> tuple[str, ...]:
    # The empty string has no words ("a." has two: "a" and "").
    return tuple(text.split(".")) if text else ()


def _match(pattern: tuple[str, ...], p: int, words: tuple[str, ...], w: int) -> bool:
    while p < len(pattern):
        token = pattern[p]
        if token == "#":
            # `#` absorbs zero or more words: try every split point.
            if p == len(pattern) - 1:
                return True
            return any(_match(pattern, p + 1, words, i) for i in range(w, len(words) + 1))
        if w >= len(words):
            return False
        if token != "*" and token != words[w]:
            return False
        p += 1
        w += 1
    return w == len(words)


class TopicExchange(Exchange):
    type_name = "topic"

    def configure(self) -> None:
        self._cache: dict[str, list[Destination]] = {}

    def _on_bind(self, binding: Binding) -> None:
        self._cache.clear()

    def _on_unbind(self, binding: Binding) -> None:
        self._cache.clear()

    def route(self, routing_key: str, headers: dict[str, Any]) -> Iterable[Destination]:
        cached = self._cache.get(routing_key)
        if cached is not None:
            return cached
        result = [
            b.destination
            for b in self.bindings.values()
            if topic_matches(b.routing_key, routing_key)
        ]
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[routing_key] = result
        return result
