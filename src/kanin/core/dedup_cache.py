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
- With a store (a durable exchange), the ids a commit round brings are written as one
  record under the exchange's key (store/records.py, exchange_key), in that same round
  (MessageStore.at_round_start): the message's confirm, which waits for the round, covers
  its id. Each record is removed once none of its ids is cached any more (a record
  nobody waits for). `restore` rebuilds the cache from those records at start-up.
- Time is the scheduler's wall clock: TTLs mean the same after a restart.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kanin.store.api import MessageStore


_ENTRY = struct.Struct(">QI")  # in a record's body, per id: expires at (0: never), length


def _entries(body: bytes) -> Iterable[tuple[int, bytes]]:
    at, end = 0, len(body)
    while at + _ENTRY.size <= end:
        expires_at, length = _ENTRY.unpack_from(body, at)
        at += _ENTRY.size
        yield expires_at, body[at : at + length]
        at += length


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
        self._batch: list[bytes] | None = None  # ids added since the last round started
        self._cached_in: dict[int, int] = {}  # record -> how many of its ids are cached

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
        self._ids[key] = 0  # its record is written as the round starts (_write_batch)
        if expires_at:
            self._expiry[key] = expires_at
        if self.store is None:
            return False
        if self._batch is None:
            self._batch = []
            self.store.at_round_start(self._write_batch)
        self._batch.append(key)
        return True

    def _write_batch(self) -> None:
        """The round starts: one record for the ids it brought that are still cached."""
        batch, self._batch = self._batch or [], None
        ids, expiry = self._ids, self._expiry
        fresh = [key for key in batch if ids.get(key) == 0]
        if not fresh or self.store is None:
            return
        body = b"".join(_ENTRY.pack(expiry.get(key, 0), len(key)) + key for key in fresh)
        record = self.store.enqueue(self._store_key, "", "", b"", body)
        for key in fresh:
            ids[key] = record  # an existing key keeps its place in the order
        self._cached_in[record] = len(fresh)

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
        if record:
            self._release(record)

    def _release(self, record: int) -> None:
        left = self._cached_in[record] - 1
        if left:
            self._cached_in[record] = left
            return
        del self._cached_in[record]
        if self.store is not None:
            self.store.remove(self._store_key, record)

    def restore(self, records: Iterable[tuple[int, bytes]]) -> None:
        """Start-up: each record (its id, its body) oldest first. Expired ids, and the
        oldest beyond the size, are not kept; nor is a record left with no id."""
        now = self._now_ms()
        for record, body in records:
            self._cached_in[record] = 1  # held while it is read
            for expires_at, key in _entries(body):
                if expires_at and expires_at <= now:
                    continue
                if key in self._ids:  # a later copy of the id wins
                    self._drop(key)
                self._ids[key] = record
                self._cached_in[record] += 1
                if expires_at:
                    self._expiry[key] = expires_at
            self._release(record)
        while len(self._ids) > self.size:
            self._drop(next(iter(self._ids)))

    def clear(self) -> None:
        """The exchange is gone: forget every id, and its record."""
        while self._ids:
            self._drop(next(iter(self._ids)))
