"""The message store as the broker sees it: one small interface, two implementations.

How this works:
- `enqueue` records a persistent message in a durable queue and returns its id;
- `read_later` gives back the content of messages by id, to a callback on a later loop
  turn: a deep queue keeps only ids for the messages beyond its memory budget and reads
  them back, a batch at a time, naming the ones it will want next (`ahead`) so the file
  store can have the kernel fetch them. The disk is read off the loop, so a slow disk
  stalls that queue and not every connection. `read` is the same answer at once, by
  blocking: for tests and tools, never the broker's loop;
- `remove` records that it left the queue (acked, dropped, expired, purged);
- `delivered` notes a delivery, so a message recovered after a crash comes back
  with redelivered=true. Nobody waits for these two: they start no commit round and
  ride along with the next one (see committer.py);
- `after_commit` runs a callback once everything recorded so far is durable;
- `pending_round` names the commit round what is recorded now goes to: a publish's
  ticket. core/commit_rounds.py groups what waits by ticket, one `after_commit` per
  round: the confirm ledger (publisher confirms) and the queue (dropping what a failed
  round held) wait that way; tx.commit and the definitions saver call `after_commit`;
- Streams (x-queue-type stream) keep their own logs, not here: `StreamLogs` opens one
  per stream (store/stream_logs.py); `StreamLog` is what a stream queue needs of it.
- `recover` returns, per queue, the messages still in it, in order, as what the queue
  needs to order, expire, prioritise and count them (Recovered): never their bodies;
- `close` makes everything recorded so far durable and lets go of the files.

FileStore (file_store.py) keeps them in the segmented log (segments.py) through the
group committer (committer.py); MemoryStore (memory_store.py) keeps nothing on disk and
is what a broker without durability, and the shared store test suite, use. Both run
`after_commit` and `read_later` callbacks on a later loop turn, never inline.

The broker (core/) depends on this module only; which store it gets is decided where
the broker is built (server/app.py), so nothing in core/ imports an implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

# Told True once what it waited for is on disk, False if writing it failed.
Waiter = Callable[[bool], None]


@dataclass(slots=True)
class Content:
    """What a delivery needs of a stored message, read back. Not frozen (see StreamRecord):
    one is made per message read back."""

    exchange: str
    routing_key: str
    header: bytes
    body: bytes


# Told the contents read back, in the order asked (see MessageStore.read_later).
Reader = Callable[[list[Content | None]], None]


class Recovered(NamedTuple):
    """One message found at start-up: enough to order, expire, prioritise and count it."""

    id: int
    body_size: int
    priority: int = 0
    expires_at_ms: int = 0  # UNIX ms after which it is dead, 0 = never
    redelivered: bool = False
    # Times it came back to its queue, the crash included if it was out: one more than
    # the count its last delivery mark carried (0 if it was never delivered).
    returns: int = 0


class MessageStore(Protocol):
    def enqueue(
        self,
        queue: str,
        exchange: str,
        routing_key: str,
        header: bytes,
        body: bytes,
        *,
        priority: int = 0,
        expires_at_ms: int = 0,
    ) -> int:
        """A durable queue (core/queues/classic.py, on publish) stores a persistent message; returns
        its id, unique in the store for good (also across restarts). The message is durable
        once an `after_commit` waiter registered after this call hears True."""
        ...

    def read_later(
        self, queue: str, message_ids: Sequence[int], ahead: Sequence[int], done: Reader
    ) -> None:
        """A deep queue (core/paging.py) reads paged-out messages back: done(contents) runs
        later on the loop, never inline, with what `read` gives for these ids as they are
        now (a message removed after this call still comes back: the caller knows what left
        it meanwhile). The loop only finds where they are; records on disk are read on
        another thread, records whose commit round has not ended come from memory."""
        ...

    def read(
        self, queue: str, message_ids: Sequence[int], ahead: Sequence[int] = ()
    ) -> list[Content | None]:
        """Messages' contents in the order asked; None for an id that is not live in `queue`
        or whose record cannot be read (the store logs why). `ahead` names ids wanted next:
        a hint, nothing is returned for them. Reads what was recorded, whether or not its
        commit round has ended. It blocks until the disk answers: tests and tools call it,
        the broker's loop uses read_later."""
        ...

    def remove(self, queue: str, message_id: int) -> None:
        """A queue (core/queues/) says the message left it for good: acked, dropped,
        expired, purged or dead-lettered. It is not recovered after a restart that sees
        this recorded; an unknown id is ignored. Starts no commit round of its own."""
        ...

    def delivered(self, queue: str, message_id: int, returns: int = 0) -> None:
        """A queue (core/queues/) handed the message out with an ack pending, after it had
        come back `returns` times: recovered after a crash it comes back redelivered, with
        `returns + 1` returns. Nobody waits for this to be durable: starts no commit round
        of its own."""
        ...

    def after_commit(self, waiter: Waiter) -> None:
        """Publisher confirms (core/confirms.py) and a queue's commit-round bookkeeping
        (core/queues/classic.py), both through core/commit_rounds.py, tx.commit
        (core/handlers_basic.py) and the definitions saver wait here: waiter(True) once
        everything recorded before the call is durable, waiter(False) if a write failed.
        Always called later on the loop, never inline."""
        ...

    def pending_round(self) -> int:
        """Which commit round what is recorded now goes to; after_commit waiters
        registered now hear that round's outcome (or a later, failing one's)."""
        ...

    def at_round_start(self, opener: Callable[[], None]) -> None:
        """Call `opener` once, on the loop, as the commit round that `pending_round` names
        starts, before it takes what was recorded: what it records goes into that round.
        A deduplicating exchange writes the ids of a whole round as one record this way.
        That round starts on a later loop turn even if nothing else is recorded."""
        ...

    def recover(self) -> dict[str, list[Recovered]]:
        """Start-up (core/persistence.py) calls this once, before any write: per queue key
        (records.queue_key), its live messages in id order. No body is read."""
        ...

    async def close(self) -> None:
        """The orderly stop (server/app.py): everything recorded so far is made durable,
        then the store is done; nothing may be recorded after."""
        ...


class CommitRounds(Protocol):
    """What waiting on commit rounds needs (core/commit_rounds.py): the message store
    has it, and so has each stream's log."""

    def pending_round(self) -> int: ...

    def after_commit(self, waiter: Waiter) -> None: ...


class StreamRecord:
    """One message of a stream, read back. A plain class, not a dataclass: one is made
    per message appended and per message read, and compiled, a dataclass's __init__ is
    still the interpreted one the dataclass decorator wrote."""

    __slots__ = ("body", "exchange", "header", "offset", "routing_key", "timestamp_ms")

    def __init__(
        self,
        offset: int,
        timestamp_ms: int,  # when it was appended, UNIX ms
        exchange: str,
        routing_key: str,
        header: bytes,  # the encoded content header, as stored
        body: bytes,
    ) -> None:
        self.offset = offset
        self.timestamp_ms = timestamp_ms
        self.exchange = exchange
        self.routing_key = routing_key
        self.header = header
        self.body = body

    def __eq__(self, other: object) -> bool:  # (so unhashable, as the dataclass it was)
        if not isinstance(other, StreamRecord):
            return NotImplemented
        return (
            self.offset == other.offset
            and self.timestamp_ms == other.timestamp_ms
            and self.exchange == other.exchange
            and self.routing_key == other.routing_key
            and self.header == other.header
            and self.body == other.body
        )

    def __repr__(self) -> str:
        return f"StreamRecord(offset={self.offset}, {len(self.body)} bytes)"


class StreamLog:
    """One stream's append-only log, as its queue (core/queues/stream.py) uses it; the
    file implementation (store/stream_log.py, a subclass) says how it works.

    A base class, not a Protocol: compiled, the queue's calls through it (one append
    per message) are direct calls to the subclass's compiled methods, where a Protocol's
    would be looked up by name and their arguments passed as Python objects."""

    next_offset: int  # the offset the next append gets
    committed_offset: int  # every offset below it is on disk; readers see no further

    @property
    def first_offset(self) -> int:
        raise NotImplementedError

    def append(
        self, exchange: str, routing_key: str, header: bytes, body: bytes, timestamp_ms: int
    ) -> int:
        raise NotImplementedError

    def pending_round(self) -> int:
        raise NotImplementedError

    def after_commit(self, waiter: Waiter) -> None:
        raise NotImplementedError

    def on_committed(self, callback: Callable[[], None]) -> None:
        raise NotImplementedError

    def read_later(
        self,
        start: int,
        max_records: int,
        max_bytes: int,
        done: Callable[[list[StreamRecord]], None],
    ) -> None:
        raise NotImplementedError

    def offset_for_timestamp(self, timestamp_ms: int) -> int:
        raise NotImplementedError

    def size_bytes(self) -> int:
        raise NotImplementedError

    def apply_retention(self, max_bytes: int | None, max_age_ms: int | None, now_ms: int) -> int:
        raise NotImplementedError


class StreamLogs(Protocol):
    """Where streams keep their logs: the vhost asks for one per stream it declares or
    restores (store/stream_logs.py keeps them under the data directory)."""

    def open(self, vhost: str, queue: str, segment_bytes: int) -> StreamLog:
        """The stream's log, recovered: at declare and at start-up."""
        ...

    def exists(self, vhost: str, queue: str) -> bool:
        """Has this stream a log on disk (start-up: is a saved stream really one)?"""
        ...

    def remove(self, stream: StreamLog) -> None:
        """The stream was deleted: its log is closed and its files go (in the background;
        a stream declared again under its name starts empty)."""
        ...
