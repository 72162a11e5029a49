"""The ids a deduplicating exchange has seen: bounded in entries and in time, optionally on disk.

How this works:
- An id is the value of a message's `x-deduplication-header` header, kept with its type
  (`dedup_key`): 1, "1" and 1.0 are three ids. A header that is absent, void, an array
  or a table gives no id: such a message is never a duplicate.
- `admit(key, ttl_ms)` caches an id unless it is cached and alive (a duplicate), in one
  dict operation; `seen(key)` only looks. At most `size` ids are kept: a new one past
  that evicts the oldest (first in, first out; the plugin evicts an arbitrary one). An
  id expires `ttl_ms` after it was added (the message's own x-cache-ttl header, else the
  exchange's x-cache-ttl, else never).
  Expired ids are dropped when looked up, and from the oldest end on each add, so the
  work is proportional to what is dropped; no timer runs.
- Ids come in batches (a commit round's, or BATCH_IDS in memory), listed in order for
  the oldest-first walks of eviction and expiry; a plain dict maps each id to its batch.
- With a store (a durable exchange), the ids a commit round brings are written as one
  record under the exchange's key (store/records.py, exchange_key), in that same round
  (MessageStore.at_round_start): the message's confirm, which waits for the round, covers
  its id. Each record is removed once none of its ids is cached any more (a record
  nobody waits for). `restore` rebuilds the cache from those records at start-up.
- Time is the scheduler's wall clock: TTLs mean the same after a restart.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from kanin.store.api import MessageStore


_ENTRY: Final = struct.Struct(">QI")  # in a record's body, per id: expires at (0: never), length
# An entry's head when its id never expires, by the id's length: most are, and short.
_NEVER_HEADS: Final = [_ENTRY.pack(0, length) for length in range(256)]
# A cache without a store closes its batch of ids (see DedupCache.__init__) at this many.
BATCH_IDS: Final = 4096


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
        try:
            return b"s" + value.encode()  # strict UTF-8: compiled, a fast path
        except UnicodeEncodeError:  # a lone surrogate (the AMQP bytes were not UTF-8)
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
        batch_ids: int = BATCH_IDS,
    ) -> None:
        self.size = size
        self._batch_ids = batch_ids
        self.ttl_ms = ttl_ms
        self._now_ms = wall_clock_ms
        self.store = store  # None: the ids are kept in memory only
        self._store_key = store_key
        # id -> the number of the batch it came in; and the expiry (UNIX ms) of those that
        # have one. Keys and values are bytes and ints, which the cyclic garbage collector
        # does not track: a cache of millions costs it nothing.
        self._ids: dict[bytes, int] = {}
        self._expiry: dict[bytes, int] = {}
        # The ids in the order they came, a list per batch, oldest first: _batches[i] is
        # batch _front_no + i, and the last is the open one (_open, _open_no). An id that
        # left out of turn (expired when looked up, or came again later) stays listed until
        # the oldest-first walk (_oldest) passes it; _listed counts what is listed past the
        # walk, so that the lists can be rebuilt before the stale ids outgrow the live ones.
        # An id is listed at most once in a batch (see _open_left), so the walk can tell its
        # current listing by the batch number the id maps to.
        self._open: list[bytes] = []
        self._batches: deque[list[bytes]] = deque([self._open])
        self._front_no = self._open_no = 1
        self._front_at = 0  # ids of the front batch the walk has passed
        self._listed = 0
        self._open_live = 0  # ids of the open batch still cached
        self._live_in: dict[int, int] = {}  # closed batch -> how many of its ids are cached
        self._record_of: dict[int, int] = {}  # closed batch -> its record in the store
        self._closing = False  # the open batch closes as the next commit round starts
        # Ids that left the open batch (evicted, expired) while listed in it: one that comes
        # back closes the batch first and is listed in the next, as the newest.
        self._open_left: set[bytes] = set()

    def __len__(self) -> int:
        return len(self._ids)

    def admit(self, key: bytes, ttl_ms: int | None = None) -> bool:
        """True if the id is new, and cached now; False if it is cached and alive (a
        duplicate). One dict operation for either, in the usual case."""
        ids = self._ids
        count = len(ids)
        ids.setdefault(key, self._open_no)
        if len(ids) == count:
            if not self._expiry or not self._expired(key):
                return False
            self._drop(key)  # expired: it comes again, as a new id
            ids[key] = self._open_no
        left = self._open_left
        if left and key in left:  # still listed in the open batch, at its old place
            del ids[key]
            self._close_batch()
            ids[key] = self._open_no
        self._cached(key, ttl_ms)
        return True

    def seen(self, key: bytes) -> bool:
        """Whether the id is cached and alive (an expired one is dropped)."""
        if key not in self._ids:
            return False
        if self._expiry and self._expired(key):
            self._drop(key)
            return False
        return True

    def _expired(self, key: bytes) -> bool:
        expires_at = self._expiry.get(key)
        return expires_at is not None and expires_at <= self._now_ms()

    def _cached(self, key: bytes, ttl_ms: int | None) -> None:
        """A new id was put in _ids, in the open batch: list it, give it its expiry, and
        keep the cache within its bounds."""
        self._open_live += 1
        self._open.append(key)
        self._listed += 1
        ttl = ttl_ms if ttl_ms is not None else self.ttl_ms
        if ttl or self._expiry:  # without TTLs no id expires: no clock, no sweep
            now = self._now_ms()
            if ttl:
                self._expiry[key] = now + ttl
            self._expire_oldest(now)
        ids = self._ids
        while len(ids) > self.size:  # the new id is the newest: never this one
            self._drop(self._oldest_or_fail())
        if self.store is not None:
            if not self._closing:
                self._closing = True
                self.store.at_round_start(self._close_batch)
        elif len(self._open) >= self._batch_ids:
            self._close_batch()
        if self._listed > 2 * len(ids) + self._batch_ids:
            self._relist()

    def _close_open(self) -> int:
        """Close the open batch and open the next; the closed one's number."""
        number, live = self._open_no, self._open_live
        self._open = []
        self._batches.append(self._open)
        self._open_no, self._open_live, self._closing = number + 1, 0, False
        self._open_left = set()
        if live:
            self._live_in[number] = live
        return number

    def _close_batch(self) -> None:
        """A commit round starts (or, in memory, the batch is full): the open batch closes,
        and with a store its ids still cached are written as one record in that round."""
        keys, dropped = self._open, bool(self._open_left)
        number = self._close_open()
        if self.store is None or number not in self._live_in:
            return
        if dropped:  # only those still cached as listed in it
            ids = self._ids
            keys = [key for key in keys if ids.get(key) == number]
        expiry, pack, heads = self._expiry, _ENTRY.pack, _NEVER_HEADS
        parts: list[bytes] = []
        for key in keys:
            length = len(key)
            expires_at = expiry.get(key, 0) if expiry else 0
            short = not expires_at and length < 256
            parts.append(heads[length] if short else pack(expires_at, length))
            parts.append(key)
        body = b"".join(parts)
        self._record_of[number] = self.store.enqueue(self._store_key, "", "", b"", body)

    def _oldest(self) -> bytes | None:
        """The oldest id cached, walking past the listed ones that are not (any more)."""
        ids, batches = self._ids, self._batches
        while True:
            front, number = batches[0], self._front_no
            at = self._front_at
            while at < len(front):
                key = front[at]
                if ids.get(key) == number:
                    self._front_at = at
                    return key
                at += 1
                self._listed -= 1
            self._front_at = at
            if len(batches) == 1:  # the open batch, walked to its end
                return None
            batches.popleft()
            self._front_no, self._front_at = number + 1, 0

    def _oldest_or_fail(self) -> bytes:
        key = self._oldest()
        assert key is not None, "a cached id is listed"
        return key

    def _expire_oldest(self, now: int) -> None:
        expiry = self._expiry
        while (key := self._oldest()) is not None:
            expires_at = expiry.get(key)
            if expires_at is None or expires_at > now:
                return
            self._drop(key)

    def _drop(self, key: bytes) -> None:
        number = self._ids.pop(key)
        if self._expiry:
            self._expiry.pop(key, None)
        if number == self._open_no:
            self._open_live -= 1
            self._open_left.add(key)
            return
        left = self._live_in[number] - 1
        if left:
            self._live_in[number] = left
            return
        del self._live_in[number]
        record = self._record_of.pop(number, 0)
        if record and self.store is not None:
            self.store.remove(self._store_key, record)

    def _relist(self) -> None:
        """Rebuild the lists with the listed ids that are still cached as listed: they had
        come to hold more stale ids than live ones (see __init__)."""
        ids, number = self._ids, self._front_no
        fresh: deque[list[bytes]] = deque()
        for index, keys in enumerate(self._batches):
            start = self._front_at if index == 0 else 0
            fresh.append([key for key in keys[start:] if ids.get(key) == number + index])
        self._batches, self._open = fresh, fresh[-1]
        self._front_at, self._listed = 0, sum(len(keys) for keys in fresh)

    def restore(self, records: Iterable[tuple[int, bytes]]) -> None:
        """Start-up: each record (its id, its body) oldest first, a closed batch each.
        Expired ids, and the oldest beyond the size, are not kept; nor is a record left
        with no id."""
        now, ids, expiry = self._now_ms(), self._ids, self._expiry
        for record, body in records:
            for expires_at, key in _entries(body):
                if expires_at and expires_at <= now:
                    continue
                if key in ids:  # a later copy of the id wins
                    self._drop(key)
                ids[key] = self._open_no
                self._open.append(key)
                self._listed += 1
                self._open_live += 1
                if expires_at:
                    expiry[key] = expires_at
            number = self._close_open()  # not written again: it is on disk
            if number in self._live_in:
                self._record_of[number] = record
            elif self.store is not None:
                self.store.remove(self._store_key, record)
        while len(ids) > self.size:
            self._drop(self._oldest_or_fail())

    def clear(self) -> None:
        """The exchange is gone: forget every id, and its record."""
        while (key := self._oldest()) is not None:
            self._drop(key)
