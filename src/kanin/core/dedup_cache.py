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
    if isinstance(value, str):  # the usual id first: this runs per message
        return b"s" + value.encode("utf-8", "surrogatepass")
    if isinstance(value, bool):
        return b"t" + (b"1" if value else b"0")
    if isinstance(value, int):
        return b"i" + str(value).encode()
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
        # id -> its record's id in the store (0: none), oldest first; and the expiry (UNIX
        # ms) of those that have one. Keys and values are bytes and ints, which the cyclic
        # garbage collector does not track: a cache of millions costs it nothing.
        self._ids: OrderedDict[bytes, int] = OrderedDict()
        self._expiry: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def seen(self, key: bytes) -> bool:
        if key not in self._ids:
            return False
        expires_at = self._expiry.get(key)
        if expires_at is not None and expires_at <= self._now_ms():
            self._drop(key)
            return False
        return True

    def add(self, key: bytes, ttl_ms: int | None = None) -> bool:
        """Cache a new id (one `seen` said is not cached); True if a record was written."""
        ttl = ttl_ms if ttl_ms is not None else self.ttl_ms
        expires_at = 0
        if ttl or self._expiry:  # without TTLs no id expires: no clock, no sweep
            now = self._now_ms()
            self._expire_oldest(now)
            if ttl:
                expires_at = now + ttl
        while len(self._ids) >= self.size:
            self._drop(next(iter(self._ids)))
        record = 0
        if self.store is not None:
            record = self.store.enqueue(self._store_key, "", "", b"", key, expires_at_ms=expires_at)
        self._ids[key] = record
        if expires_at:
            self._expiry[key] = expires_at
        return record != 0

    def _expire_oldest(self, now: int) -> None:
        ids, expiry = self._ids, self._expiry
        while ids:
            key = next(iter(ids))
            expires_at = expiry.get(key)
            if expires_at is None or expires_at > now:
                return
            self._drop(key)

    def _drop(self, key: bytes) -> None:
        record = self._ids.pop(key)
        self._expiry.pop(key, None)
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
            self._ids[key] = record
            if expires_at:
                self._expiry[key] = expires_at
        while len(self._ids) > self.size:
            self._drop(next(iter(self._ids)))

    def clear(self) -> None:
        """The exchange is gone: forget every id, and its record."""
        while self._ids:
            self._drop(next(iter(self._ids)))
