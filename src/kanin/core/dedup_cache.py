"""The ids a deduplicating exchange has seen: bounded in entries and in time, optionally on disk.

How this works:
- An id is the value of a message's `x-deduplication-header` header, kept with its type
  (`dedup_key`): 1, "1" and 1.0 are three ids. A header that is absent, void, an array
  or a table gives no id: such a message is never a duplicate.
- `seen(key)` says whether an id is cached and alive; `add(key, ttl_ms)` caches it. At
  most `size` ids are kept: a new one past that evicts the oldest (first in, first out;
  the plugin evicts an arbitrary one). An id expires `ttl_ms` after it was added (the
  message's own x-cache-ttl header, else the exchange's x-cache-ttl, else never).
  Expired ids are dropped when looked up, and from the oldest end on each add, so the
  work is proportional to what is dropped; no timer runs.
- With a store (a durable exchange), each id is a record under the exchange's key
  (store/records.py, exchange_key): written by `add` into the same commit round as the
  message that brought it, removed when evicted or expired (a record nobody waits for).
  `restore` rebuilds the cache from those records at start-up, oldest first.
- Time is the scheduler's wall clock: TTLs mean the same after a restart.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kanin.store.api import MessageStore


def dedup_key(value: Any) -> bytes | None:
    """An id as bytes that keep its type, or None for a header that gives no id."""
    if isinstance(value, bool):
        return b"t" + (b"1" if value else b"0")
    if isinstance(value, int):
        return b"i" + str(value).encode()
    if isinstance(value, str):
        return b"s" + value.encode("utf-8", "surrogatepass")
    if isinstance(value, bytes | bytearray):
        return b"x" + bytes(value)
    if isinstance(value, float):
        return b"d" + repr(value).encode()
    if isinstance(value, Decimal):
        return b"D" + str(value).encode()
    if value is None or isinstance(value, list | tuple | dict):
        return None
    return b"o" + repr(value).encode()  # a timestamp: its repr names it exactly


class DedupCache:
    def __init__(
        self,
        size: int,
        ttl_ms: int | None,
        wall_clock_ms: Callable[[], int],
        store: MessageStore | None = None,
        store_key: str = "",
    ) -> None:
        self.size = size
        self.ttl_ms = ttl_ms
        self._now_ms = wall_clock_ms
        self.store = store  # None: the ids are kept in memory only
        self._store_key = store_key
        # id -> (expires at in UNIX ms or 0, its record's id in the store or 0), oldest first
        self._ids: OrderedDict[bytes, tuple[int, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def seen(self, key: bytes) -> bool:
        held = self._ids.get(key)
        if held is None:
            return False
        expires_at = held[0]
        if expires_at and expires_at <= self._now_ms():
            self._drop(key)
            return False
        return True

    def add(self, key: bytes, ttl_ms: int | None = None) -> bool:
        """Cache a new id (one `seen` said is not cached); True if a record was written."""
        now = self._now_ms()
        ttl = ttl_ms if ttl_ms is not None else self.ttl_ms
        expires_at = now + ttl if ttl else 0
        self._expire_oldest(now)
        while len(self._ids) >= self.size:
            self._drop(next(iter(self._ids)))
        record = 0
        if self.store is not None:
            record = self.store.enqueue(self._store_key, "", "", b"", key, expires_at_ms=expires_at)
        self._ids[key] = (expires_at, record)
        return record != 0

    def _expire_oldest(self, now: int) -> None:
        ids = self._ids
        while ids:
            key, (expires_at, _) = next(iter(ids.items()))
            if not expires_at or expires_at > now:
                return
            self._drop(key)

    def _drop(self, key: bytes) -> None:
        _, record = self._ids.pop(key)
        if record and self.store is not None:
            self.store.remove(self._store_key, record)

    def restore(self, ids: Iterable[tuple[int, int, bytes]]) -> None:
        """Start-up: (record id, expires at, key) in the order they were added. Expired ones
        and the oldest beyond the size are dropped from the store."""
        now = self._now_ms()
        for record, expires_at, key in ids:
            if expires_at and expires_at <= now:
                if self.store is not None:
                    self.store.remove(self._store_key, record)
                continue
            if key in self._ids:  # cannot happen unless a record was written twice
                self._drop(key)
            self._ids[key] = (expires_at, record)
        while len(self._ids) > self.size:
            self._drop(next(iter(self._ids)))

    def clear(self) -> None:
        """The exchange is gone: forget every id, and its record."""
        while self._ids:
            self._drop(next(iter(self._ids)))
