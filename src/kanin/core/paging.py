"""Deep queues: which ready messages a queue keeps in memory, and reading the others back.

A queue (core/queues/classic.py) keeps ready messages in memory up to its budget; past it, a
persistent message of a durable queue is paged out: its Entry stays (order, expiry,
size, store id) and its content is only in the store. This module holds the machinery;
the queue says when to use it:
- `Pager`: the queue's two ledgers (bytes in memory, messages paged out), the choice
  made for each new message, and the one read back the queue may have in flight;
- `DeadLetters`: dead-lettered messages on their way out, paged-out ones read back
  first, in the order they died;
- `page_in_batch`: from the head on, the paged-out entries to read in one batch, and
  the ids of the next batch (the store fetches those ahead of the consumers).

How a queue pages:
Ready messages are held in memory up to the queue's memory budget
  (the broker's `queue_memory_budget_bytes`; 0 with x-queue-mode=lazy). Past it, and
  for as long as any message is paged out, a persistent message of a durable queue
  keeps only its Entry (order, expiry, size, store id): the store has the rest. When
  the head is paged out, the queue reads it back with the paged-out entries behind
  it in one batch, up to the budget (at least PAGE_IN_BYTES_MIN), so consumers are
  served from memory and reads come in batches; it names the batch after that to the
  store, which has the kernel fetch it meanwhile. Dead-lettering reads paged-out
  messages back in batches too; expiring, purging or deleting them reads nothing.
  Transient messages, and everything in non-durable queues, stay in memory. A message
  routed to several durable queues is stored once per queue and each pages it on its
  own: its body leaves memory when the last queue holding it lets go.
  Recovered messages start paged out; start-up reads no bodies.

Reading back never blocks the loop: the store answers `read_later` on a later loop turn
(its disk reads run on a thread). Meanwhile the queue goes on without its head:
- one read at a time: while it is in flight, consumers and basic.get wait for a paged-out
  head (anything in memory ahead of it still goes out); the landing serves waiting
  gets in order, then dispatches;
- entries may leave while their read is in flight (expiry, x-max-length, purge, queue
  deletion, a failed commit round): the Pager forgets them as they leave, and the landing
  fills in only the entries still in the queue, so what left is neither counted nor kept;
- a message whose record cannot be read is dropped with the error logged: the landing
  removes it from the store and leaves its entry paged out with no store id, and the
  queue drops it when it reaches the head, in its turn, reading nothing more for it;
- dead-lettered batches go out in the order they died: a batch waits for its own read
  and for every batch before it, and one read is in flight at a time, so memory holds
  at most DEAD_LETTER_BATCH messages read back for dead-lettering.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Callable, Iterable
from itertools import islice
from typing import TYPE_CHECKING

from kanin.core.message import Entry, Message

if TYPE_CHECKING:
    from kanin.core.queues.base import Queue
    from kanin.core.ready import FifoReady
    from kanin.store.api import Content, MessageStore

log = logging.getLogger(__name__)

# The broker-wide default of ready message bytes a queue keeps in memory.
DEFAULT_MEMORY_BUDGET_BYTES = 4 * 1024 * 1024
# A page-in reads at least this much (so a tiny budget still reads in batches), and at
# most this many messages (so one read stays short).
PAGE_IN_BYTES_MIN = 256 * 1024
PAGE_IN_COUNT_MAX = 1024
# Paged-out messages read back at a time to be dead-lettered.
DEAD_LETTER_BATCH = 256


def page_in_batch(upcoming: Iterable[Entry], room_bytes: int) -> tuple[list[Entry], list[int]]:
    """The paged-out entries among `upcoming` (in order from the head) that fit in
    `room_bytes` (the first always does), at most PAGE_IN_COUNT_MAX; and the store ids of
    as many paged-out entries after them. Entries in memory, and those whose record
    could not be read (no store id), are skipped."""
    batch: list[Entry] = []
    ahead: list[int] = []
    batch_bytes, full = 0, False
    for entry in islice(upcoming, 2 * PAGE_IN_COUNT_MAX):
        if entry.message is not None or not entry.stored_id:
            continue
        full = full or len(batch) == PAGE_IN_COUNT_MAX or batch_bytes + entry.size > room_bytes
        if full and batch:
            ahead.append(entry.stored_id)
            if len(ahead) == len(batch):
                break
        else:
            batch.append(entry)
            batch_bytes += entry.size
    return batch, ahead


def message_of(content: Content) -> Message:
    """A message read back: no properties yet (decoded only if asked), and no CC/BCC
    list (see Message)."""
    return Message(
        content.exchange, content.routing_key, content.header, content.body, None, None, None
    )


class Pager:
    """One queue's split of its ready messages between memory and the store: the ledgers,
    and the read back in flight (see the module docstring). The queue tells it of every
    entry that joins or leaves its ready messages; it tells the queue when a read lands."""

    def __init__(
        self,
        store: MessageStore | None,
        key: str,
        budget_bytes: int,
        label: str,
        count: Callable[[Entry], None],
        landed: Callable[[], None],
    ) -> None:
        self.store = store
        self.key = key
        self.budget_bytes = budget_bytes
        self.loaded_bytes = 0  # body bytes of ready messages held in memory
        self.paged_out = 0  # ready messages whose body is only in the store
        self._label = label  # the queue, in log lines
        self._count = count  # the queue counts an entry's memory again once it is read back
        self._landed = landed
        # The entries of the read in flight that are still ready; None: no read in flight.
        self._reading: set[Entry] | None = None

    @property
    def reading(self) -> bool:
        return self._reading is not None

    def admit(self, entry: Entry) -> None:
        """A new ready message: held in memory within the budget, else paged out. Once any
        message is paged out, later ones are too, so memory goes to the head."""
        size = entry.size
        if entry.stored_id and (self.paged_out or self.loaded_bytes + size > self.budget_bytes):
            entry.message = None
            self.paged_out += 1
        else:
            self.loaded_bytes += size

    def restored(self, count: int) -> None:
        """Recovered messages joined the queue, paged out."""
        self.paged_out += count

    def returned(self, entry: Entry) -> None:
        """A delivered message is ready again (requeued): it was in memory, it stays."""
        self.loaded_bytes += entry.size

    def left(self, entry: Entry) -> None:
        """An entry is no longer ready (taken, expired, dropped, removed)."""
        if entry.message is not None:
            self.loaded_bytes -= entry.size
            return
        self.paged_out -= 1
        if self._reading:
            self._reading.discard(entry)  # its read must not bring it back

    def cleared(self) -> None:
        """Every ready entry left at once (purge, deletion)."""
        self.loaded_bytes = self.paged_out = 0
        if self._reading:
            self._reading.clear()

    def read_head(self, fifo: FifoReady) -> None:
        """The head of `fifo` is paged out: read it back with the paged-out messages right
        behind it, as many bytes as the budget has room for but PAGE_IN_BYTES_MIN even when
        it has none, and name those after them to the store, to fetch ahead. Nothing if a
        read is in flight already: the queue tries again when it lands."""
        if self._reading is not None:
            return
        room = max(self.budget_bytes - self.loaded_bytes, PAGE_IN_BYTES_MIN)
        batch, ahead = page_in_batch(fifo.upcoming(), room)
        assert batch and self.store is not None, "only a durable queue pages messages out"
        self._reading = set(batch)
        ids = [entry.stored_id for entry in batch]
        self.store.read_later(self.key, ids, ahead, functools.partial(self._on_read, batch))

    def _on_read(self, batch: list[Entry], contents: list[Content | None]) -> None:
        reading, self._reading = self._reading, None
        assert reading is not None
        for entry, content in zip(batch, contents, strict=True):
            if entry not in reading:
                continue  # it left meanwhile: nothing to hold or count
            if content is None:
                self._lost(entry)
                continue
            entry.message = message_of(content)
            self.paged_out -= 1
            self.loaded_bytes += entry.size
            self._count(entry)
        self._landed()

    def _lost(self, entry: Entry) -> None:
        """Its record cannot be read (the store logged why): it leaves the store now and the
        queue drops it at the head (no store id: nothing to read)."""
        assert self.store is not None
        log.error("%s: message %d could not be read back; dropped", self._label, entry.stored_id)
        self.store.remove(self.key, entry.stored_id)
        entry.stored_id = 0


class DeadLetters:
    """A queue's dead-lettered messages on their way out, in the order they died: each batch
    of DEAD_LETTER_BATCH goes out (forgotten by the queue, then published) once its
    paged-out messages are read back and the batches before it have gone. Without a
    dead-letter exchange (or once the queue is deleted) they are only forgotten: no read."""

    def __init__(self, queue: Queue, store: MessageStore | None, key: str) -> None:
        self._queue = queue
        self._store = store
        self._key = key
        self._waiting: deque[tuple[list[Entry], str]] = deque()  # (batch, reason), in order
        self._reading = False  # the first waiting batch is being read back

    def send(self, entries: list[Entry], reason: str) -> None:
        if not self._goes_out():
            for entry in entries:
                self._queue.forget(entry)
            return
        for start in range(0, len(entries), DEAD_LETTER_BATCH):
            self._waiting.append((entries[start : start + DEAD_LETTER_BATCH], reason))
        self._go_on()

    def _goes_out(self) -> bool:
        queue = self._queue
        return (
            queue.args.dead_letter_exchange is not None
            and queue.on_dead_letter is not None
            and not queue.deleted
        )

    def _go_on(self) -> None:
        """Send the waiting batches in order until one needs a read (then it starts)."""
        waiting = self._waiting
        while waiting and not self._reading:
            batch, _ = waiting[0]
            paged = [entry for entry in batch if entry.message is None and entry.stored_id]
            if paged:
                assert self._store is not None, "only a durable queue pages messages out"
                self._reading = True
                ids = [entry.stored_id for entry in paged]
                self._store.read_later(self._key, ids, (), functools.partial(self._on_read, paged))
                return
            self._out(*waiting.popleft())

    def _on_read(self, paged: list[Entry], contents: list[Content | None]) -> None:
        self._reading = False
        for entry, content in zip(paged, contents, strict=True):
            if content is not None:
                entry.message = message_of(content)
            else:
                log.error(
                    "%r: message %d could not be read back to be dead-lettered; dropped",
                    self._queue,
                    entry.stored_id,
                )
        self._out(*self._waiting.popleft())
        self._go_on()

    def _out(self, batch: list[Entry], reason: str) -> None:
        queue = self._queue
        for entry in batch:
            queue.forget(entry)
        if queue.on_dead_letter is not None and not queue.deleted:  # it may be deleted by now
            queue.on_dead_letter(queue, [entry for entry in batch if entry.message], reason)
